#!/bin/sh
# etcd-init: restore this etcd member from a snapshot URL, once, into an empty
# data dir, and only while no etcd cluster is running. Injected by
# hcp-etcd-admission; runs before reset-member.
#
# Inputs (environment only; nothing from the object is ever pasted into this text):
#   RESTORE_URL_ETCD              https URL of the snapshot (presigned); optional
#                                 fragment #sha256=<64 hex> is checked, never sent
#   ETCD_DATA_DIR, ETCD_WAL_DIR   the etcd container's data dir (and WAL dir, if separate)
#   ETCD_NAME, ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_TOKEN,
#   ETCD_INITIAL_ADVERTISE_PEER_URLS
#                                 this member's identity, as the etcd container has it
#                                 (its env entries copied in its order; unset: etcd's defaults)
#   ETCD_ADVERTISE_CLIENT_URLS, ETCD_CERT_FILE, ETCD_KEY_FILE, ETCD_TRUSTED_CA_FILE,
#   ETCD_PEER_CERT_FILE, ETCD_PEER_KEY_FILE, ETCD_PEER_TRUSTED_CA_FILE
#                                 how to ask the other members whether a cluster runs
#                                 (peer port: /version; client port: /health)
#   ETCD_INIT_STAGE_DIR           work dir on the data dir's volume (the final move is a rename)
#   ETCD_INIT_WAL_STAGE_DIR       work dir on the WAL dir's volume, when that is another volume
#   RESTORE_MAX_BYTES             download size cap (default 17179869184 = 16 GiB)
#   RESTORE_MAX_TIME_SECONDS      bound on the whole download, retries included (default 1800)
#   RESTORE_ALLOW_WITHOUT_REVISION_BUMP
#                                 "true": restore even when the tool cannot bump revisions
#   ETCD_INIT_PROBE_TIMEOUT       seconds one probe request may take (default 12, above
#                                 etcd's own request timeout)
# Exit 0: restored, or nothing to do (data dir not empty, or a healthy cluster
# answers: reset-member then re-adds this member). Non-zero: failed, or it
# cannot be established that no live member runs (the kubelet retries); the
# data dir is left as it was (empty), so the retry starts clean.
set -eu

log() { printf '%s etcd-init: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
fail() {
	log "ERROR: $*"
	exit 1
}

# scheme://host/path of a URL: the query (signature), fragment and userinfo are
# bearer secrets and never printed.
redact() {
	printf '%s' "$1" | sed -e 's/[?#].*$//' -e 's|^\([A-Za-z][A-Za-z0-9+.-]*://\)[^/@]*@|\1|'
}

: "${ETCD_DATA_DIR:?ETCD_DATA_DIR must be set (the data dir of the etcd container)}"
DATA_DIR=${ETCD_DATA_DIR%/}
WAL_DIR=${ETCD_WAL_DIR:-}
WAL_DIR=${WAL_DIR%/}
STAGE=${ETCD_INIT_STAGE_DIR:-$(dirname -- "$DATA_DIR")/.etcd-init-restore}
WAL_STAGE=${ETCD_INIT_WAL_STAGE_DIR:-$STAGE}
# Set in the WAL dir while restored WAL files move in, removed once the data
# dir is in place: a retry after an interruption recognises its own WAL.
WAL_MARK=.etcd-init-restore-wal-pending
URL=${RESTORE_URL_ETCD:-}
MAX_BYTES=${RESTORE_MAX_BYTES:-17179869184}
MAX_TIME=${RESTORE_MAX_TIME_SECONDS:-1800}
ALLOW_NO_BUMP=${RESTORE_ALLOW_WITHOUT_REVISION_BUMP:-false}
PROBE_TIMEOUT=${ETCD_INIT_PROBE_TIMEOUT:-12}
case $PROBE_TIMEOUT in '' | *[!0-9]*) PROBE_TIMEOUT=12 ;; esac

# 0. A staging dir left by a run that was killed (SIGKILL, node loss) can hold
#    gigabytes: it goes first, on every run.
rm -rf -- "$STAGE" "$WAL_STAGE"

# 1. Only ever restore into an empty data dir (lost+found and our own
#    staging dir and marker do not count).
has_data() {
	[ -d "$1" ] || return 1
	for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		case ${entry##*/} in lost+found | .etcd-init-restore*) continue ;; esac
		return 0
	done
	return 1
}
if has_data "$DATA_DIR"; then
	[ -z "$WAL_DIR" ] || rm -f -- "$WAL_DIR/$WAL_MARK"
	log "$DATA_DIR is not empty, not restoring snapshot"
	exit 0
fi
if [ -n "$WAL_DIR" ] && [ -e "$WAL_DIR/$WAL_MARK" ]; then
	log "$WAL_DIR holds the WAL of an interrupted restore (the data dir was never moved in): removing it"
	for entry in "$WAL_DIR"/* "$WAL_DIR"/.[!.]* "$WAL_DIR"/..?*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		case ${entry##*/} in lost+found | "$WAL_MARK") continue ;; esac
		rm -rf -- "$entry"
	done
	rm -f -- "$WAL_DIR/$WAL_MARK"
fi
if [ -n "$WAL_DIR" ] && has_data "$WAL_DIR"; then
	fail "the WAL dir $WAL_DIR holds files but the data dir $DATA_DIR is empty: refusing to restore over them (remove them if this member must be restored)"
fi

[ -n "$URL" ] || fail "RESTORE_URL_ETCD is empty: nothing to restore from"
# This member's identity as etcd has it; what the etcd container leaves
# unset takes etcd's own default (token etcd-cluster, peer URL
# http://localhost:2380, initial cluster <name>=<peer URL>).
: "${ETCD_NAME:?ETCD_NAME must be set (the member name of the etcd container)}"
NAME=$ETCD_NAME
PEER_URL=${ETCD_INITIAL_ADVERTISE_PEER_URLS:-http://localhost:2380}
ETCD_INITIAL_CLUSTER=${ETCD_INITIAL_CLUSTER:-$NAME=$PEER_URL}
TOKEN=${ETCD_INITIAL_CLUSTER_TOKEN:-etcd-cluster}
SHOWN=$(redact "$URL")

# 2. The tool, and the revision bump (before anything is probed or
#    downloaded): after a restore, revisions must move past anything clients
#    have seen, or watches and informers keep stale caches.
if command -v etcdutl >/dev/null 2>&1; then
	TOOL=etcdutl
elif command -v etcdctl >/dev/null 2>&1; then
	TOOL=etcdctl
	ETCDCTL_API=3
	export ETCDCTL_API
else
	fail "neither etcdutl nor etcdctl is in PATH of the etcd-init image"
fi
HELP=$("$TOOL" snapshot restore --help 2>&1 || true)
BUMP=
case $HELP in *--bump-revision*) case $HELP in *--mark-compacted*) BUMP=yes ;; esac ;; esac
if [ -z "$BUMP" ]; then
	if [ "$ALLOW_NO_BUMP" = true ]; then
		log "WARNING: $TOOL has no snapshot restore --bump-revision/--mark-compacted (etcd < 3.5.10 / 3.4.26); restoring without them as allowRestoreWithoutRevisionBump says: revisions go back to the snapshot's, clients must relist"
	else
		fail "$TOOL has no snapshot restore --bump-revision/--mark-compacted (needs etcd >= 3.5.10 or 3.4.26): without them revisions go backwards and guest-cluster watches keep stale caches. Use an etcd-init image with a newer etcdutl (setting etcdInitImage), or accept the risk with the setting allowRestoreWithoutRevisionBump: true"
	fi
fi

# 3. Never restore next to a member that may hold data. An empty data dir
#    while another member runs means this member lost its volume or is new:
#    restoring the old snapshot under the old member ID would crash it (raft
#    "tocommit out of range") or, with a quorum of restored members, roll the
#    cluster back. Every other member is asked on its peer port, which answers
#    from the moment etcd starts (the client port stays silent until the
#    member has had a quorum once):
#    - nothing listens (connection refused, name not published yet): absent;
#    - cluster version "not_decided": a member that has never had a quorum,
#      so it holds no write (a member restored in this same first restore);
#    - a decided cluster version: a live member. If a healthy cluster answers
#      on the client port, exit 0 and leave the empty dir to reset-member;
#      otherwise fail, so the kubelet retries until the cluster is healthy;
#    - no answer in time (twice), or any other answer: fail, never restore.
CLIENT_URL=${ETCD_ADVERTISE_CLIENT_URLS:-https://localhost:2379}
CLIENT_URL=${CLIENT_URL%%,*}
CLIENT_SCHEME=${CLIENT_URL%%://*}
CLIENT_PORT=${CLIENT_URL##*:}
CLIENT_PORT=${CLIENT_PORT%%/*}
case $CLIENT_PORT in '' | *[!0-9]*) CLIENT_PORT=2379 ;; esac
PEER_CA=${ETCD_PEER_TRUSTED_CA_FILE:-${ETCD_TRUSTED_CA_FILE:-}}
PEER_CERT=${ETCD_PEER_CERT_FILE:-${ETCD_CERT_FILE:-}}
PEER_KEY=${ETCD_PEER_KEY_FILE:-${ETCD_KEY_FILE:-}}
# ask <peer|client> <url>: curl with that side's TLS material; prints the
# body (or curl's error), returns curl's exit code.
ask() {
	if [ "$1" = peer ]; then
		A_CA=$PEER_CA A_CERT=$PEER_CERT A_KEY=$PEER_KEY
	else
		A_CA=${ETCD_TRUSTED_CA_FILE:-} A_CERT=${ETCD_CERT_FILE:-} A_KEY=${ETCD_KEY_FILE:-}
	fi
	set -- -q --silent --show-error --http1.1 --connect-timeout 3 --max-time "$PROBE_TIMEOUT" --url "$2"
	[ -z "$A_CA" ] || set -- "$@" --cacert "$A_CA"
	[ -z "$A_CERT" ] || set -- "$@" --cert "$A_CERT"
	[ -z "$A_KEY" ] || set -- "$@" --key "$A_KEY"
	curl "$@" 2>&1
}
# probe_member <peer URL>: returns when the member is absent or has never had
# a quorum; exits otherwise.
probe_member() {
	HOSTPORT=${1#*://}
	HOSTPORT=${HOSTPORT%%/*}
	case $HOSTPORT in
	\[*\]) HOST=$HOSTPORT ;;
	\[*) HOST=${HOSTPORT%]*}] ;;
	*) HOST=${HOSTPORT%%:*} ;;
	esac
	PEER_BASE=${1%/}
	ENDPOINT="$CLIENT_SCHEME://$HOST:$CLIENT_PORT"
	TRIES=0
	while :; do
		TRIES=$((TRIES + 1))
		set +e
		ANSWER=$(ask peer "$PEER_BASE/version")
		RC=$?
		set -e
		if [ "$RC" -ne 28 ] || [ "$TRIES" -ge 2 ]; then
			break
		fi
		log "$PEER_BASE accepts connections but did not answer within ${PROBE_TIMEOUT}s; asking again"
		sleep 2
	done
	case $RC in
	0) ;;
	6 | 7)
		log "no etcd member runs at $PEER_BASE (curl exit $RC)"
		return 0
		;;
	28) fail "an etcd member at $PEER_BASE accepts connections but did not answer within ${PROBE_TIMEOUT}s, twice (curl exit 28): it may be a live member under load; not restoring next to it (the kubelet retries this init container)" ;;
	*) fail "an etcd member may be running at $PEER_BASE, but its state could not be read (curl exit $RC: $ANSWER): refusing to restore next to a possibly live member (the kubelet retries this init container)" ;;
	esac
	case $ANSWER in
	*'"etcdcluster":"not_decided"'*)
		log "the etcd member at $PEER_BASE has never had a quorum (cluster version not decided): it holds no writes (restored by this same first restore)"
		return 0
		;;
	*'"etcdcluster":"'[0-9]*) ;;
	*) fail "$PEER_BASE/version answered something that is not etcd's version document: refusing to restore next to it" ;;
	esac
	CLUSTER_VERSION=${ANSWER#*\"etcdcluster\":\"}
	CLUSTER_VERSION=${CLUSTER_VERSION%%\"*}
	# A live cluster between leaders answers unhealthy for a second or two:
	# ask up to 5 times (twice when it does not answer at all).
	TRIES=0
	while :; do
		TRIES=$((TRIES + 1))
		set +e
		HEALTH=$(ask client "$ENDPOINT/health")
		RC=$?
		set -e
		case $RC:$HEALTH in
		0:*'"health":"true"'*)
			log "a healthy etcd cluster answers at $ENDPOINT: $DATA_DIR is empty because this member is new or lost its volume; not restoring the snapshot (reset-member re-adds this member, which then syncs from the cluster)"
			exit 0
			;;
		esac
		if [ "$TRIES" -ge 5 ] || { [ "$RC" -ne 0 ] && [ "$TRIES" -ge 2 ]; }; then
			break
		fi
		log "the live member at $ENDPOINT is not healthy yet (curl exit $RC); asking again in 2s"
		sleep 2
	done
	fail "a live etcd member runs at $PEER_BASE (it has had a quorum: cluster version $CLUSTER_VERSION) but no healthy cluster answers at $ENDPOINT (curl exit $RC: $HEALTH): it may hold writes the snapshot lacks, so this member is not restored next to it; the kubelet retries this init container until the cluster is healthy (then reset-member re-adds this member)"
}
probe_cluster() {
	REST="$ETCD_INITIAL_CLUSTER,"
	while [ -n "$REST" ]; do
		MEMBER=${REST%%,*}
		REST=${REST#*,}
		case $MEMBER in "" | "$NAME="*) continue ;; esac
		probe_member "${MEMBER#*=}"
	done
}
probe_cluster

# 4. Optional integrity: #sha256=<hex> (the fragment is never sent to the server).
FETCH_URL=${URL%%#*}
FRAGMENT=${URL#"$FETCH_URL"}
EXPECTED_SHA=
case $FRAGMENT in
"") ;;
"#sha256="*)
	EXPECTED_SHA=$(printf '%s' "${FRAGMENT#\#sha256=}" | tr 'A-F' 'a-f')
	case $EXPECTED_SHA in
	*[!0-9a-f]*) fail "the #sha256= fragment of the URL is not hexadecimal" ;;
	esac
	[ ${#EXPECTED_SHA} -eq 64 ] || fail "the #sha256= fragment must hold 64 hex digits, it holds ${#EXPECTED_SHA}"
	;;
*) log "ignoring a URL fragment that is not #sha256=<hex>" ;;
esac

# 5. Work on the data volume; clean up on every exit, SIGTERM included
#    (long steps run in the background so a signal is handled at once).
CHILD=
cleanup() {
	if [ -n "$CHILD" ]; then
		kill "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
	fi
	rm -rf -- "$STAGE" "$WAL_STAGE"
}
trap cleanup EXIT
trap 'log "terminated: removing the staging dir"; exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
# Runs "$@" in the background and waits for it; its exit code is in RC.
run() {
	"$@" &
	CHILD=$!
	set +e
	wait "$CHILD"
	RC=$?
	set -e
	CHILD=
}
mkdir -p -- "$STAGE" "$WAL_STAGE"
SNAPSHOT="$STAGE/snapshot.db"
# Free KiB on the filesystem holding $1 (the 4th field from the end is
# robust against spaces in the filesystem name).
avail_kib() { df -Pk "$1" 2>/dev/null | awk 'END { print $(NF - 2) }'; }

# 6. Download, retrying transient failures; RESTORE_MAX_TIME_SECONDS bounds
#    the whole download, retries included. -q: no ~/.curlrc.
DEADLINE=$(($(date +%s) + MAX_TIME))
ATTEMPT=0
while :; do
	ATTEMPT=$((ATTEMPT + 1))
	LEFT=$((DEADLINE - $(date +%s)))
	[ "$LEFT" -gt 0 ] || fail "download of $SHOWN did not finish within RESTORE_MAX_TIME_SECONDS=${MAX_TIME}s (the bound covers all $((ATTEMPT - 1)) attempts)"
	rm -f -- "$SNAPSHOT"
	[ "$ATTEMPT" -gt 1 ] || log "downloading snapshot from $SHOWN"
	run curl -q --proto '=https' --proto-redir '=https' --location --max-redirs 3 \
		--fail --silent --show-error --globoff \
		--connect-timeout 30 --max-time "$LEFT" --max-filesize "$MAX_BYTES" \
		--write-out '%{http_code}' --output "$SNAPSHOT" --url "$FETCH_URL" \
		>"$STAGE/http-code" 2>"$STAGE/curl.err"
	HTTP_CODE=$(cat "$STAGE/http-code" 2>/dev/null || true)
	[ "$RC" -ne 0 ] || break
	retry=
	case $RC in
	7 | 18 | 28 | 35 | 52 | 55 | 56) retry=yes ;;
	22) case $HTTP_CODE in 408 | 429 | 500 | 502 | 503 | 504) retry=yes ;; esac ;;
	esac
	if [ -n "$retry" ] && [ "$ATTEMPT" -lt 6 ] && [ $((DEADLINE - $(date +%s))) -gt 2 ]; then
		log "attempt $ATTEMPT failed (curl exit $RC, HTTP $HTTP_CODE); retrying in 2s"
		run sleep 2
		continue
	fi
	# curl's own message may echo the URL: print it redacted.
	sed -e 's/?[^ ]*//g' "$STAGE/curl.err" >&2 || true
	case $RC in
	1) why="only https:// is allowed" ;;
	6) why="the host does not resolve" ;;
	7) why="the connection was refused" ;;
	18) why="the transfer was cut short" ;;
	22) why="the server answered HTTP $HTTP_CODE (403: expired or invalid presigned URL/SAS; 404: wrong object)" ;;
	23) why="write error on the data volume (not enough space, or not writable) while writing to $STAGE ($(avail_kib "$STAGE" || true) KiB free); the volume needs room for the snapshot, its restored copy and 64 MiB of WAL" ;;
	28) why="it timed out: RESTORE_MAX_TIME_SECONDS=${MAX_TIME}s bounds the whole download, retries included" ;;
	35 | 51 | 53 | 54 | 58 | 59 | 60 | 77 | 80 | 82 | 83 | 90 | 91) why="TLS failed (untrusted or invalid server certificate)" ;;
	63) why="the snapshot is larger than RESTORE_MAX_BYTES=$MAX_BYTES" ;;
	*) why="curl exit code $RC" ;;
	esac
	fail "download of $SHOWN failed after $ATTEMPT attempt(s): $why"
done
SIZE=$(wc -c <"$SNAPSHOT" | tr -d ' ')
[ "$SIZE" -gt 0 ] || fail "download of $SHOWN returned an empty body"
[ "$SIZE" -le "$MAX_BYTES" ] || fail "the snapshot ($SIZE bytes) is larger than RESTORE_MAX_BYTES=$MAX_BYTES"
log "downloaded $SIZE bytes (HTTP $HTTP_CODE)"

# An error document served with 200 (a proxy page, S3/Azure XML, JSON; with
# or without a BOM): an etcd snapshot (bbolt) never starts with '<' or '{'.
HEAD=$(head -c 64 "$SNAPSHOT" | tr -d '\357\273\277\000' | tr -d ' \t\r\n' | head -c 16)
case $HEAD in
"<"* | "{"*)
	fail "$SHOWN returned a text document, not an etcd snapshot (expired or invalid presigned URL/SAS?)"
	;;
esac

if [ -n "$EXPECTED_SHA" ]; then
	run sha256sum "$SNAPSHOT" >"$STAGE/sha256"
	[ "$RC" -eq 0 ] || fail "sha256sum of the download failed"
	ACTUAL_SHA=$(cut -d ' ' -f 1 "$STAGE/sha256")
	[ "$ACTUAL_SHA" = "$EXPECTED_SHA" ] || fail "sha256 of the download is $ACTUAL_SHA, the URL fragment expects $EXPECTED_SHA"
	log "sha256 verified"
fi

# 7. Space: the restored copy of the database plus 64 MiB of preallocated WAL
#    must fit next to the download.
WAL_KIB=65536
NEED_KIB=$((SIZE / 1024 + 1024))
[ "$WAL_STAGE" != "$STAGE" ] || NEED_KIB=$((NEED_KIB + WAL_KIB))
AVAIL=$(avail_kib "$STAGE")
case $AVAIL in
'' | *[!0-9]*) log "could not read the free space of the data volume; trying anyway" ;;
*) [ "$AVAIL" -ge "$NEED_KIB" ] || fail "not enough space on the data volume: the restore of a $SIZE-byte snapshot needs about ${NEED_KIB} KiB more, ${AVAIL} KiB are free (size the volume for about 2 x the snapshot + 64 MiB)" ;;
esac
if [ "$WAL_STAGE" != "$STAGE" ]; then
	AVAIL=$(avail_kib "$WAL_STAGE")
	case $AVAIL in
	'' | *[!0-9]*) ;;
	*) [ "$AVAIL" -ge "$WAL_KIB" ] || fail "not enough space on the WAL volume: 65536 KiB needed, ${AVAIL} KiB free" ;;
	esac
fi

# 8. Restore into the staging dir with this member's identity.
set -- snapshot restore "$SNAPSHOT" --data-dir "$STAGE/data" --name "$NAME" \
	--initial-cluster "$ETCD_INITIAL_CLUSTER" --initial-cluster-token "$TOKEN" \
	--initial-advertise-peer-urls "$PEER_URL"
[ -z "$WAL_DIR" ] || set -- "$@" --wal-dir "$WAL_STAGE/wal"
[ -z "$BUMP" ] || set -- "$@" --bump-revision 1000000000 --mark-compacted
log "restoring with $TOOL as member $NAME ($PEER_URL)"
run "$TOOL" "$@" >"$STAGE/restore.log" 2>&1
if [ "$RC" -ne 0 ]; then
	cat "$STAGE/restore.log" >&2
	if grep -q 'failed to resolve' "$STAGE/restore.log"; then
		fail "$TOOL could not resolve the peer names in ETCD_INITIAL_CLUSTER: the etcd-discovery Service must publish not-ready addresses (publishNotReadyAddresses: true) while init containers run"
	fi
	if grep -q -i 'no space left' "$STAGE/restore.log"; then
		fail "not enough space on the data volume: $TOOL snapshot restore ran out of space"
	fi
	fail "$TOOL snapshot restore failed (corrupt or truncated snapshot, or a member flag mismatch)"
fi
[ -d "$STAGE/data/member" ] || fail "$TOOL reported success but wrote no member/ directory"
rm -f -- "$SNAPSHOT"
chmod 700 "$STAGE/data"
[ -z "$WAL_DIR" ] || chmod 700 "$WAL_STAGE/wal"

# 9. The download and restore took time: a member may have formed or joined
#    a cluster meanwhile. Ask again right before the move.
probe_cluster

# 10. Only now move the restored member into place (renames on the same
#     volumes): the WAL first (under a marker), the data dir last, so an empty
#     data dir always means "not restored".
if [ -n "$WAL_DIR" ]; then
	[ -d "$WAL_DIR" ] || mkdir -p -- "$WAL_DIR"
	: >"$WAL_DIR/$WAL_MARK"
	for f in "$WAL_STAGE/wal"/*; do
		[ ! -e "$f" ] || mv -- "$f" "$WAL_DIR/"
	done
	# The mount root may belong to root (capabilities are dropped): etcd
	# only warns about its mode.
	chmod 700 "$WAL_DIR" 2>/dev/null || log "could not chmod 700 $WAL_DIR (etcd only warns about its mode)"
fi
if [ -d "$DATA_DIR" ]; then
	has_data "$DATA_DIR" && fail "$DATA_DIR filled up while restoring; leaving it alone"
	mv -- "$STAGE/data/member" "$DATA_DIR/member"
	chmod 700 "$DATA_DIR" 2>/dev/null || log "could not chmod 700 $DATA_DIR (etcd only warns about its mode)"
else
	mkdir -p -- "$(dirname -- "$DATA_DIR")"
	mv -- "$STAGE/data" "$DATA_DIR"
fi
[ -z "$WAL_DIR" ] || rm -f -- "$WAL_DIR/$WAL_MARK"
log "restored snapshot into $DATA_DIR${WAL_DIR:+ (WAL in $WAL_DIR)}"
