#!/bin/sh
# etcd-init: restore this etcd member from a snapshot URL, once, into an empty
# data dir, and only on positive evidence that no other member holds data the
# snapshot lacks. Injected by hcp-etcd-admission; runs before reset-member.
#
# Inputs (environment only; nothing from the object is ever pasted into this text):
#   RESTORE_URL_ETCD              https URL of the snapshot (presigned); optional
#                                 fragment #sha256=<64 hex> is checked, never sent
#   ETCD_INIT_RESTORE_GENERATION  this restore's identity (hex): the same on every
#                                 member of one restore, different for any other;
#                                 the cluster token is derived from it and from
#                                 the snapshot's sha256
#   ETCD_DATA_DIR, ETCD_WAL_DIR   the etcd container's data dir (and WAL dir, if separate)
#   ETCD_NAME, ETCD_INITIAL_CLUSTER, ETCD_INITIAL_ADVERTISE_PEER_URLS,
#   ETCD_LISTEN_PEER_URLS         this member's identity, as the etcd container has it
#                                 (its env entries copied in its order; unset: etcd's defaults)
#   ETCD_ADVERTISE_CLIENT_URLS, ETCD_CERT_FILE, ETCD_KEY_FILE, ETCD_TRUSTED_CA_FILE,
#   ETCD_PEER_CERT_FILE, ETCD_PEER_KEY_FILE, ETCD_PEER_TRUSTED_CA_FILE
#                                 how to ask the other members what they are
#   ETCD_INIT_STAGE_DIR           work dir on the data dir's volume (the final move is a rename)
#   ETCD_INIT_WAL_STAGE_DIR       work dir on the WAL dir's volume, when that is another volume
#   RESTORE_MAX_BYTES             download size cap (default 17179869184 = 16 GiB)
#   RESTORE_MAX_TIME_SECONDS      bound on the whole download, retries included (default 1800)
#   RESTORE_REVISION_BUMP         how far revisions move past the snapshot's (default 10000000000)
#   RESTORE_REVISION_FLOOR        the revision the restore lands at, at least (the webhook
#                                 sets the HostedControlPlane's creation time x 10^7, so a
#                                 later restore of the same snapshot lands above this one);
#                                 a single member also takes its own clock's (now x 10^7)
#   ETCD_INIT_VOLUME_OWNER        whose volumes these are (namespace, HostedControlPlane UID):
#                                 stamped into every member placed, checked before SKIPPED
#   RESTORE_ALLOW_WITHOUT_REVISION_BUMP
#                                 "true": restore even when the tool cannot bump revisions
#   ETCD_INIT_WAIT_SECONDS        how long one run waits for the other members (default 600)
#   ETCD_INIT_PROBE_TIMEOUT       seconds one probe request may take (default 5)
#
# With more than one member, every member's etcd-init answers for itself on
# its peer port while it runs: a throwaway one-member etcd (the image's own
# binary, no data) whose member name says "etcd-init.<fresh|restored>.<G>.<name>"
# in its peer /members document. A member restores only after it has seen
# every other member answer that way for this generation G ("fresh": its data
# dir is empty, it is in etcd-init). A member that is silent, refused,
# unresolvable, slow, answers for another generation, or runs etcd is never
# taken for an absent one: the run waits, then fails, and the kubelet retries.
# After restoring, a member waits until every other member has restored too
# (or runs etcd of this restore's cluster), so no etcd starts before all
# members are past their own check, unless after the wait a quorum has
# restored (then the rest join their cluster when they come). What it has seen is kept
# on its volume (across retries of this generation, never across a lost
# volume or a hand-off).
#
# Exit 0 and one line in the termination message: RESTORED (revisions,
# sha256, cluster id), SKIPPED (the data dir holds an etcd member), JOINED
# (a healthy cluster that lists this member answers: this member joined it,
# so reset-member finds data and does nothing).
# Non-zero: FAILED with the reason; the data dir is left as it was.
set -eu

RESULT_FILE=/dev/termination-log
log() { printf '%s etcd-init: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }
result() {
	log "$*"
	printf '%s\n' "$*" >"$RESULT_FILE" 2>/dev/null || true
}
fail() {
	log "ERROR: $*"
	printf 'FAILED: %s\n' "$*" >"$RESULT_FILE" 2>/dev/null || true
	exit 1
}

# scheme://host/path of a URL: the query (signature), fragment and userinfo are
# bearer secrets and never printed.
redact() {
	printf '%s' "$1" | sed -e 's/[?#].*$//' -e 's|^\([A-Za-z][A-Za-z0-9+.-]*://\)[^/@]*@|\1|'
}
# A bounded number from the environment, or the default.
number() {
	case $1 in '' | *[!0-9]*) printf '%s' "$2" ;; *) printf '%s' "$1" ;; esac
}

: "${ETCD_DATA_DIR:?ETCD_DATA_DIR must be set (the data dir of the etcd container)}"
DATA_DIR=${ETCD_DATA_DIR%/}
WAL_DIR=${ETCD_WAL_DIR:-}
WAL_DIR=${WAL_DIR%/}
STAGE=${ETCD_INIT_STAGE_DIR:-$(dirname -- "$DATA_DIR")/.etcd-init-restore}
WAL_STAGE=${ETCD_INIT_WAL_STAGE_DIR:-$STAGE}
# What this member has seen of the others, and whether its own restore is
# done but not yet released: next to the data dir, on the same volume.
STATE=$STAGE-state
# A join's first sync (data, and WAL when it has a volume of its own): kept
# across retries while this member is being joined, so a retry resumes the
# sync instead of removing and re-adding the member.
JOIN_DIR=$STAGE-join
JOIN_WAL=$WAL_STAGE-joinwal
# Set in the WAL dir while restored WAL files move in, removed once the data
# dir is in place: a retry after an interruption recognises its own WAL.
WAL_MARK=.etcd-init-restore-wal-pending
URL=${RESTORE_URL_ETCD:-}
GEN=${ETCD_INIT_RESTORE_GENERATION:-}
MAX_BYTES=$(number "${RESTORE_MAX_BYTES:-}" 17179869184)
MAX_TIME=$(number "${RESTORE_MAX_TIME_SECONDS:-}" 1800)
BUMP_BY=$(number "${RESTORE_REVISION_BUMP:-}" 10000000000)
FLOOR=$(number "${RESTORE_REVISION_FLOOR:-}" 0)
ALLOW_NO_BUMP=${RESTORE_ALLOW_WITHOUT_REVISION_BUMP:-false}
WAIT=$(number "${ETCD_INIT_WAIT_SECONDS:-}" 600)
PROBE_TIMEOUT=$(number "${ETCD_INIT_PROBE_TIMEOUT:-}" 5)
case $GEN in '' | *[!0-9a-f]*) fail "ETCD_INIT_RESTORE_GENERATION must be set to lower-case hex (the webhook sets it)" ;; esac

# 1. Only ever restore into a data dir that holds no etcd member. What etcd
#    reads is member/ alone (and reset-member, after us, takes a dir without
#    member/snap/db for an empty one), so: member/snap/db is an etcd member
#    (never touched); member/ without it is a damaged one (fail, touch
#    nothing); no member/ is empty for etcd, and any other files there (a
#    snapshot.db an operator saved, lost+found) stay as they are.
# has_data <dir>: whether a dir (the separate WAL dir) holds anything but
# lost+found and our own staging dirs and marker.
has_data() {
	[ -d "$1" ] || return 1
	for entry in "$1"/* "$1"/.[!.]* "$1"/..?*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		case ${entry##*/} in lost+found | .etcd-init-restore*) continue ;; esac
		return 0
	done
	return 1
}
# Whose member a volume holds: a stamp etcd-init writes into member/ with
# every member it places (restored or joined), and onto a member it finds
# unstamped. A member found with another stamp is never started: a CSI
# attach race or a reused PersistentVolume can mount another member's or
# another hosted cluster's volume here (as Gardener found; it stamps each
# volume for that reason), and etcd would run another cluster's data under
# this member's name. The identity is the member name and the owner the
# webhook names (ETCD_INIT_VOLUME_OWNER: the namespace and the
# HostedControlPlane's UID, so a volume a recreated HostedControlPlane of the
# same name left behind is another owner's); nothing etcd itself ignores
# after its first start (peer URLs) is part of it.
: "${ETCD_NAME:?ETCD_NAME must be set (the member name of the etcd container)}"
STAMP_NAME=.etcd-init-volume
VOLUME_ID="member $ETCD_NAME of ${ETCD_INIT_VOLUME_OWNER:-this cluster}"
# stamp <member dir>: writes this member's identity into it.
stamp() {
	printf '%s\n' "$VOLUME_ID" >"$1/$STAMP_NAME.tmp" && mv -f -- "$1/$STAMP_NAME.tmp" "$1/$STAMP_NAME"
}
# A state dir of another generation (or of nothing) tells nothing, except
# one thing: a member that restore placed and never released (its etcd
# never ran) sits on this volume. Starting it would run etcd without this
# restore's barrier next to members restoring another generation (the
# HostedControlPlane was recreated mid-restore): refused below, and the
# state kept so every retry says so.
UNRELEASED=
if [ "$(cat "$STATE/generation" 2>/dev/null || true)" != "$GEN" ]; then
	# Unreleased: a generation is recorded, and the database is not newer
	# than the record written just before it moved in (etcd writes to it as
	# soon as it runs: a member etcd ran on, after a bypass, is not this).
	UNRELEASED=$(head -n 1 "$STATE/generation" 2>/dev/null || true)
	# (-nt: dash, bash and busybox sh have it; the image need not have find.)
	# shellcheck disable=SC3013
	if [ -n "$UNRELEASED" ] && [ -f "$STATE/restored" ] && [ -f "$DATA_DIR/member/snap/db" ] &&
		! [ "$DATA_DIR/member/snap/db" -nt "$STATE/restored" ]; then
		:
	else
		UNRELEASED=
		rm -rf -- "$STATE"
	fi
fi
# A staged join without this generation's stamp tells nothing.
[ -f "$STATE/joining" ] || rm -rf -- "$JOIN_DIR" "$JOIN_WAL"
RESUME=
if [ -f "$DATA_DIR/member/snap/db" ]; then
	# Whose volume first (its runbook never deletes a volume), then whether
	# an earlier restore left it unreleased.
	STAMPED=$(head -n 1 "$DATA_DIR/member/$STAMP_NAME" 2>/dev/null || true)
	if [ -z "$STAMPED" ] && { [ -e "$DATA_DIR/member/$STAMP_NAME" ] || [ -L "$DATA_DIR/member/$STAMP_NAME" ]; }; then
		# A stamp that cannot be read is not "no stamp": never taken as this member's.
		fail "$DATA_DIR/member/$STAMP_NAME cannot be read or is empty: whose volume this is cannot be established; etcd is not started on it and nothing is touched (docs/restore.md)"
	fi
	if [ -n "$STAMPED" ] && [ "$STAMPED" != "$VOLUME_ID" ]; then
		fail "$DATA_DIR holds the etcd $STAMPED, not this $VOLUME_ID (its stamp, $DATA_DIR/member/$STAMP_NAME): another member's or another hosted cluster's volume is mounted here (a volume attach race, a reused PersistentVolume); etcd is not started on it and nothing is touched. Check which PersistentVolume this pod's claim is bound to; only if the data is this member's, remove the stamp (docs/restore.md)"
	fi
	if [ -n "$UNRELEASED" ]; then
		fail "$DATA_DIR holds a member that an earlier restore (generation $UNRELEASED) placed and never released (it was waiting for the other members, and its database is unchanged since); this is restore generation $GEN. Starting it would run etcd without this restore's barrier, next to members restoring another generation; nothing is touched. It holds only that restore's snapshot: delete this member's PVC and pod, and it restores for this generation; only if its data must run as it is, remove $STATE (docs/restore.md)"
	fi
	[ -n "$STAMPED" ] || stamp "$DATA_DIR/member" 2>/dev/null || log "could not stamp $DATA_DIR/member with this member's identity"
	[ -z "$WAL_DIR" ] || rm -f -- "$WAL_DIR/$WAL_MARK"
	rm -rf -- "$STAGE" "$WAL_STAGE"
	if [ -f "$STATE/restored" ]; then
		# Restored by this generation, but not yet released: wait for the
		# others again (step 12), as the run that restored would have.
		RESUME=yes
		log "$DATA_DIR was restored by this restore (generation $GEN); waiting for the other members before etcd starts"
	else
		rm -rf -- "$STATE" "$JOIN_DIR" "$JOIN_WAL"
		result "SKIPPED: $DATA_DIR is not empty, not restoring snapshot (it holds an etcd member, member/snap/db; generation $GEN)"
		exit 0
	fi
elif [ -e "$DATA_DIR/member" ] || [ -L "$DATA_DIR/member" ]; then
	rm -rf -- "$STATE"
	FOUND=
	for entry in "$DATA_DIR/member"/* "$DATA_DIR/member"/.[!.]*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		FOUND="$FOUND ${entry##*/}"
	done
	fail "$DATA_DIR/member exists but holds no etcd database (member/snap/db; found: ${FOUND:-nothing readable}): not restoring over it, and not handing it on (reset-member would take this member for an empty one and start etcd without it). Put the member's database back, or recover it as a member with a lost volume (docs/restore.md)"
else
	# Not restored (any more): a marker of an earlier run releases nothing.
	rm -f -- "$STATE/restored"
fi
# This restore's cluster ID (set again when it restores): a member it meets
# running etcd at the barrier must be of this cluster.
CLUSTER_ID=
# What this member restored: the generation and the snapshot's sha256 prefix
# (set when it downloads). Restored members compare it at the barrier.
RID=
if [ -n "$RESUME" ]; then
	CLUSTER_ID=$(sed -n 's/.*, cluster id \([0-9a-f]*\),.*/\1/p' "$STATE/restored" | head -n 1)
	RID=$(sed -n 's/.*, token etcd-restore-\([0-9a-f-]*\)$/\1/p' "$STATE/restored" | head -n 1)
	RID=${RID:-$GEN}
fi
# A download of this generation that completed is kept for the retry (the
# restore verifies it again); anything else a killed run left goes.
if [ "$(cat "$STAGE/download-complete" 2>/dev/null || true)" = "$GEN" ] && [ -f "$STAGE/snapshot.db" ]; then
	rm -rf -- "$STAGE/data" "$STAGE/beacon"
	[ "$WAL_STAGE" = "$STAGE" ] || rm -rf -- "$WAL_STAGE"
else
	rm -rf -- "$STAGE" "$WAL_STAGE"
fi
if [ -z "$RESUME" ]; then
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
fi

# This member's identity as etcd has it; what the etcd container leaves
# unset takes etcd's own default (peer URL http://localhost:2380, initial
# cluster <name>=<peer URL>). The token is this restore's own.
NAME=$ETCD_NAME
PEER_URL=${ETCD_INITIAL_ADVERTISE_PEER_URLS:-http://localhost:2380}
PEER_URL=${PEER_URL%%,*}
ETCD_INITIAL_CLUSTER=${ETCD_INITIAL_CLUSTER:-$NAME=$PEER_URL}
SHOWN=$(redact "$URL")
# The other members, one "name url" per line.
OTHERS=
REST="$ETCD_INITIAL_CLUSTER,"
while [ -n "$REST" ]; do
	MEMBER=${REST%%,*}
	REST=${REST#*,}
	case $MEMBER in "" | "$NAME="*) continue ;; *=*) ;; *) fail "ETCD_INITIAL_CLUSTER entry \"$MEMBER\" is not name=url" ;; esac
	OTHERS="$OTHERS${MEMBER%%=*} ${MEMBER#*=}
"
done
MEMBERS=$(printf '%s' "$OTHERS" | grep -c . || true)
MEMBERS=$((MEMBERS + 1))
QUORUM=$((MEMBERS / 2 + 1))

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
BUMP=
if [ -z "$RESUME" ]; then
	HELP=$("$TOOL" snapshot restore --help 2>&1 || true)
	case $HELP in *--bump-revision*) case $HELP in *--mark-compacted*) BUMP=yes ;; esac ;; esac
	if [ -z "$BUMP" ]; then
		if [ "$ALLOW_NO_BUMP" = true ]; then
			log "WARNING: $TOOL has no snapshot restore --bump-revision/--mark-compacted (etcd < 3.5.10 / 3.4.27); restoring without them as allowRestoreWithoutRevisionBump says: revisions go back to the snapshot's, clients must relist"
		else
			fail "$TOOL has no snapshot restore --bump-revision/--mark-compacted (needs etcd >= 3.5.10 or 3.4.27): without them revisions go backwards and guest-cluster watches keep stale caches. Use an etcd-init image with a newer etcdutl (setting etcdInitImage), or accept the risk with the setting allowRestoreWithoutRevisionBump: true"
		fi
	fi
fi

# 3. How to ask the others. Probes never use a proxy (a proxy that refuses
#    would look like a member that is not there) and never read ~/.curlrc.
CLIENT_URL=${ETCD_ADVERTISE_CLIENT_URLS:-https://localhost:2379}
CLIENT_URL=${CLIENT_URL%%,*}
CLIENT_SCHEME=${CLIENT_URL%%://*}
CLIENT_PORT=${CLIENT_URL##*:}
CLIENT_PORT=${CLIENT_PORT%%/*}
case $CLIENT_PORT in '' | *[!0-9]*) CLIENT_PORT=2379 ;; esac
PEER_CA=${ETCD_PEER_TRUSTED_CA_FILE:-${ETCD_TRUSTED_CA_FILE:-}}
PEER_CERT=${ETCD_PEER_CERT_FILE:-${ETCD_CERT_FILE:-}}
PEER_KEY=${ETCD_PEER_KEY_FILE:-${ETCD_KEY_FILE:-}}
# ask <peer|client> <url>: prints the body (or curl's error), returns curl's exit code.
ask() {
	A_MODE=$1
	if [ "$A_MODE" = peer ]; then
		# etcd's own outgoing peer certificate when it has one (a peer
		# server certificate may lack the client usage).
		A_CA=$PEER_CA A_CERT=${ETCD_PEER_CLIENT_CERT_FILE:-$PEER_CERT} A_KEY=${ETCD_PEER_CLIENT_KEY_FILE:-$PEER_KEY}
	else
		A_CA=${ETCD_TRUSTED_CA_FILE:-} A_CERT=${ETCD_CERT_FILE:-} A_KEY=${ETCD_KEY_FILE:-}
	fi
	set -- -q --noproxy '*' --silent --show-error --http1.1 --connect-timeout 3 --max-time "$PROBE_TIMEOUT" --url "$2"
	[ -z "$A_CA" ] || set -- "$@" --cacert "$A_CA"
	[ -z "$A_CERT" ] || set -- "$@" --cert "$A_CERT"
	[ -z "$A_KEY" ] || set -- "$@" --key "$A_KEY"
	# A peer's answer names its cluster in a header (X-Etcd-Cluster-ID).
	[ "$A_MODE" != peer ] || [ ! -d "$STAGE" ] || set -- "$@" --dump-header "$STAGE/peer-headers"
	curl "$@" 2>&1
}
# probe <name> <peer URL>: sets P_STATE (fresh | restored: that member's
# etcd-init of this generation answers; etcd: an etcd member runs there;
# unknown), P_WHY and P_CLUSTER (the cluster ID its peer port names, if any).
probe() {
	rm -f -- "$STAGE/peer-headers"
	set +e
	P_ANSWER=$(ask peer "${2%/}/members")
	P_RC=$?
	set -e
	P_CLUSTER=$(tr -d '\r' 2>/dev/null <"$STAGE/peer-headers" | sed -n 's/^[Xx]-[Ee][Tt][Cc][Dd]-[Cc][Ll][Uu][Ss][Tt][Ee][Rr]-[Ii][Dd]: *\([0-9a-fA-F]*\).*/\1/p' | tail -n 1 || true)
	P_STATE=unknown
	case $P_RC:$P_ANSWER in
	0:*"\"name\":\"etcd-init.fresh.$GEN.$1\""*) P_STATE=fresh P_WHY="its etcd-init answers: empty data dir, waiting to restore" ;;
	0:*"\"name\":\"etcd-init.restored.$RID.$1\""*) P_STATE=restored P_WHY="its etcd-init answers: restored, waiting for the others" ;;
	0:*"\"name\":\"etcd-init.restored.$GEN-"*".$1\""*)
		if [ -z "$RID" ]; then
			# Not downloaded yet: a member restored by this restore holds
			# only this restore's data, whichever bytes it got.
			P_STATE=restored P_WHY="its etcd-init answers: restored, waiting for the others"
		else
			P_OTHER=$(printf '%s' "$P_ANSWER" | sed -n "s/.*\"name\":\"etcd-init[.]restored[.]$GEN-\([0-9a-f]*-b[0-9]*\)[.].*/\1/p" | head -n 1)
			P_SHA=${P_OTHER%-b*}
			MY_SHA=${RID#"$GEN"-}
			MY_SHA=${MY_SHA%-b*}
			if [ -n "$P_OTHER" ] && [ "$P_SHA" = "$MY_SHA" ]; then
				P_WHY="its etcd-init restored the same snapshot with another revision bump (${P_OTHER##*-b}, this member's ${RID##*-b}): the bump setting or the etcd-init image changed mid-restore, and members restored with different bumps form different clusters (docs/restore.md, \"Revision bump\")"
			else
				P_WHY="its etcd-init restored other bytes from this restore's URL (snapshot sha256 ${P_SHA:-?}..., this member's $MY_SHA...): the object behind the URL changed between the members' downloads, and members of different snapshots form different clusters (docs/restore.md, \"Different snapshots behind one URL\")"
			fi
		fi
		;;
	0:*'"name":"etcd-init.'*) P_WHY="an etcd-init answers, but for another restore or another member" ;;
	0:'['*'"peerURLs"'*) P_STATE=etcd P_WHY="an etcd member runs there" ;;
	0:*) P_WHY="its peer port answered something that is not etcd's member list" ;;
	6:*) P_WHY="its name does not resolve (curl exit 6): unknown, not absent" ;;
	7:*) P_WHY="nothing accepts connections (curl exit 7): unknown, not absent (a member may be down with its data)" ;;
	28:*) P_WHY="no answer within ${PROBE_TIMEOUT}s (curl exit 28): unknown, not absent" ;;
	*) P_WHY="its state could not be read (curl exit $P_RC: $(printf '%s' "$P_ANSWER" | head -c 200))" ;;
	esac
}
# healthy <peer URL>: whether a healthy cluster answers on that member's client port.
healthy() {
	HOSTPORT=${1#*://}
	HOSTPORT=${HOSTPORT%%/*}
	case $HOSTPORT in
	\[*\]) HOST=$HOSTPORT ;;
	\[*) HOST=${HOSTPORT%]*}] ;;
	*) HOST=${HOSTPORT%%:*} ;;
	esac
	HEALTH_URL="$CLIENT_SCHEME://$HOST:$CLIENT_PORT/health"
	set +e
	HEALTH=$(ask client "$HEALTH_URL")
	set -e
	case $HEALTH in *'"health":"true"'*) return 0 ;; esac
	return 1
}
seen() { grep -qxF "$1" "$STATE/$2" 2>/dev/null; }
note() { seen "$1" "$2" || printf '%s\n' "$1" >>"$STATE/$2"; }

# 4. The beacon: while this member waits, its peer port says what it is.
BEACON=
CHILD=
LISTEN_PEER=${ETCD_LISTEN_PEER_URLS:-}
LISTEN_PEER=${LISTEN_PEER%%,*}
if [ -z "$LISTEN_PEER" ]; then
	P=${PEER_URL##*:}
	P=${P%%/*}
	LISTEN_PEER="${PEER_URL%%://*}://0.0.0.0:$P"
fi
beacon_stop() {
	if [ -n "$BEACON" ]; then
		kill "$BEACON" 2>/dev/null || true
		wait "$BEACON" 2>/dev/null || true
		BEACON=
	fi
	rm -rf -- "$STAGE/beacon"
}
# The etcd container's TLS profile reaches the beacon and the join's local
# etcd as the same environment variables (never as flags): an etcd that does
# not know one (3.4 and early 3.5 have no ETCD_TLS_MIN_VERSION) ignores it
# with a warning exactly as the etcd container does, instead of refusing a
# flag; and a value is passed as one word, whatever it holds. Written out at
# each `env -i` below (POSIX sh has no arrays): ${X:+"X=$X"} is one word when
# X is set and none when it is not.
beacon_start() {
	B_STATE=$1
	beacon_stop
	ETCD_BIN=$(command -v etcd || true)
	[ -n "$ETCD_BIN" ] || fail "etcd is not in PATH of the etcd-init image: with $MEMBERS members etcd-init answers for itself on the peer port with it (use the etcd image, or an etcdInitImage that has etcd)"
	mkdir -p -- "$STAGE/beacon"
	B_ID=$GEN
	[ "$B_STATE" != restored ] || B_ID=$RID
	BNAME="etcd-init.$B_STATE.$B_ID.$NAME"
	BURL="${LISTEN_PEER%%://*}://127.0.0.1:${LISTEN_PEER##*:}"
	set -- --name "$BNAME" --data-dir "$STAGE/beacon/data" --listen-peer-urls "$LISTEN_PEER" \
		--initial-advertise-peer-urls "$BURL" --initial-cluster "$BNAME=$BURL" \
		--initial-cluster-token "etcd-init-beacon" --initial-cluster-state new \
		--listen-client-urls unix://beacon:0 --advertise-client-urls unix://beacon:0
	[ -z "$PEER_CERT" ] || set -- "$@" --peer-cert-file "$PEER_CERT"
	[ -z "$PEER_KEY" ] || set -- "$@" --peer-key-file "$PEER_KEY"
	[ -z "$PEER_CA" ] || set -- "$@" --peer-trusted-ca-file "$PEER_CA"
	# No ETCD_* from this container's env reaches it (they name the real
	# data dir) but its TLS profile (above).
	(cd "$STAGE/beacon" && exec env -i PATH="$PATH" \
		${ETCD_CIPHER_SUITES:+"ETCD_CIPHER_SUITES=$ETCD_CIPHER_SUITES"} \
		${ETCD_TLS_MIN_VERSION:+"ETCD_TLS_MIN_VERSION=$ETCD_TLS_MIN_VERSION"} \
		${ETCD_TLS_MAX_VERSION:+"ETCD_TLS_MAX_VERSION=$ETCD_TLS_MAX_VERSION"} \
		${ETCD_PEER_CLIENT_CERT_AUTH:+"ETCD_PEER_CLIENT_CERT_AUTH=$ETCD_PEER_CLIENT_CERT_AUTH"} \
		${ETCD_PEER_CERT_ALLOWED_CN:+"ETCD_PEER_CERT_ALLOWED_CN=$ETCD_PEER_CERT_ALLOWED_CN"} \
		${ETCD_PEER_CERT_ALLOWED_HOSTNAME:+"ETCD_PEER_CERT_ALLOWED_HOSTNAME=$ETCD_PEER_CERT_ALLOWED_HOSTNAME"} \
		${ETCD_PEER_CRL_FILE:+"ETCD_PEER_CRL_FILE=$ETCD_PEER_CRL_FILE"} \
		${ETCD_PEER_CLIENT_CERT_FILE:+"ETCD_PEER_CLIENT_CERT_FILE=$ETCD_PEER_CLIENT_CERT_FILE"} \
		${ETCD_PEER_CLIENT_KEY_FILE:+"ETCD_PEER_CLIENT_KEY_FILE=$ETCD_PEER_CLIENT_KEY_FILE"} \
		"$ETCD_BIN" "$@") >"$STAGE/beacon.log" 2>&1 &
	BEACON=$!
	T=0
	while :; do
		probe "$NAME" "$PEER_URL"
		[ "$P_STATE" != "$B_STATE" ] || break
		if ! kill -0 "$BEACON" 2>/dev/null; then
			tail -n 5 "$STAGE/beacon.log" >&2 || true
			fail "the etcd-init beacon on $LISTEN_PEER did not start (is the peer port in use?)"
		fi
		T=$((T + 1))
		[ "$T" -lt 60 ] || fail "the etcd-init beacon on $LISTEN_PEER does not answer at $PEER_URL ($P_WHY): this member's own peer name must resolve to it (ensure-dns, publishNotReadyAddresses: true)"
		sleep 1
	done
	log "answering on $PEER_URL as $BNAME"
}

# 5. Work on the data volume; clean up on every exit, SIGTERM included
#    (long steps run in the background so a signal is handled at once).
cleanup() {
	if [ -n "$CHILD" ]; then
		kill "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
	fi
	beacon_stop
	rm -rf -- "$STAGE/data" "$STAGE/beacon.log" "$STAGE/http-code" "$STAGE/curl.err" "$STAGE/sha256" "$STAGE/restore.log" "$STAGE/peer-headers"
	[ "$WAL_STAGE" = "$STAGE" ] || rm -rf -- "$WAL_STAGE"
	# Only a complete download of this generation stays, for the retry.
	[ "$(cat "$STAGE/download-complete" 2>/dev/null || true)" = "$GEN" ] || rm -rf -- "$STAGE"
}
trap cleanup EXIT
trap 'log "terminated: removing the staging dir"; exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
# A closed log pipe must not kill the shell past its cleanup (the beacon).
trap 'exit 141' PIPE
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
# place <staged dir holding member/> <staged WAL dir>: moves a staged member
# into place (renames on the same volumes): the WAL first, under a marker,
# the data dir last, so an empty data dir always means "nothing placed";
# sync before and after, so a power loss cannot undo the renames.
place() {
	if [ -n "$WAL_DIR" ]; then
		[ -d "$WAL_DIR" ] || mkdir -p -- "$WAL_DIR"
		: >"$WAL_DIR/$WAL_MARK"
		for f in "$2"/*; do
			[ ! -e "$f" ] || mv -- "$f" "$WAL_DIR/"
		done
		# The mount root may belong to root (capabilities are dropped): etcd
		# only warns about its mode.
		chmod 700 "$WAL_DIR" 2>/dev/null || log "could not chmod 700 $WAL_DIR (etcd only warns about its mode)"
	fi
	stamp "$1/member" || fail "could not write this member's stamp into $1/member (not enough space, or not writable)"
	sync
	if [ -d "$DATA_DIR" ]; then
		mv -- "$1/member" "$DATA_DIR/member"
		chmod 700 "$DATA_DIR" 2>/dev/null || log "could not chmod 700 $DATA_DIR (etcd only warns about its mode)"
	else
		mkdir -p -- "$(dirname -- "$DATA_DIR")"
		mv -- "$1" "$DATA_DIR"
	fi
	[ -z "$WAL_DIR" ] || rm -f -- "$WAL_DIR/$WAL_MARK"
}
mkdir -p -- "$STAGE" "$WAL_STAGE" "$STATE"
[ -f "$STATE/generation" ] || printf '%s\n' "$GEN" >"$STATE/generation"
touch "$STATE/seen" "$STATE/restored-peers"

# cluster_answers: whether some other member runs etcd of a healthy cluster
# now (HEALTH_URL then names where).
cluster_answers() {
	while read -r PNAME PURL; do
		[ -n "$PNAME" ] || continue
		probe "$PNAME" "$PURL"
		if [ "$P_STATE" = etcd ] && healthy "$PURL"; then
			return 0
		fi
	done <<EOF
$OTHERS
EOF
	return 1
}
# shown <etcdctl output>: its last lines that are not etcd's JSON log lines,
# 300 bytes at most (3.6's etcdctl warns about ETCDCTL_API first).
shown() {
	printf '%s\n' "$1" | grep -v '^{"level":' | tail -n 3 | tr '\n' ' ' | head -c 300
}
# jctl <args>: etcdctl against the healthy member J_EP, with the etcd
# container's client TLS (as reset-member asks, with the server's pair).
jctl() {
	set -- --endpoints "$J_EP" --dial-timeout 5s --command-timeout 15s "$@"
	[ -z "${ETCD_TRUSTED_CA_FILE:-}" ] || set -- --cacert "$ETCD_TRUSTED_CA_FILE" "$@"
	[ -z "${ETCD_CERT_FILE:-}" ] || set -- --cert "$ETCD_CERT_FILE" "$@"
	[ -z "${ETCD_KEY_FILE:-}" ] || set -- --key "$ETCD_KEY_FILE" "$@"
	# Never through a proxy (the members are in-namespace, as for the probes).
	env ETCDCTL_API=3 NO_PROXY='*' no_proxy='*' etcdctl "$@" 2>&1
}
# staged_wal: whether the staged first sync holds etcd's WAL. A local etcd
# writes member/snap/db when it opens its backend, before it reads the
# cluster from the peers and writes its WAL: one that exited in between
# (the peers unreachable, its node down, killed) leaves a db and no WAL.
# Started on that again without --initial-cluster-state existing, etcd
# bootstraps a new one-member cluster of its own (issue #28's split, found
# by a fault schedule of restore_etcd and the model's resume moves).
staged_wal() {
	if [ -n "$WAL_DIR" ]; then SW_DIR=$JOIN_WAL; else SW_DIR=$JOIN_DIR/data/member/wal; fi
	for SW_F in "$SW_DIR"/*.wal; do
		[ ! -e "$SW_F" ] || return 0
	done
	return 1
}
# join <client URL of a healthy member> <its cluster ID>: this member is
# new or lost its volume and a healthy cluster runs. It is made a member of
# that cluster here, never handed to reset-member with an empty data dir:
# reset-member writes `new` whenever its member list fails (a quorum lost
# for a moment, a Service that does not route yet) and, retried after its
# `member remove` went through and etcd refused the `member add` (5 s
# strict reconfig), finds nothing to re-add; either way the member started
# as a one-member cluster outside the real one, for good (issue #28: C1, M2,
# M3, and a crash between the hand-off and reset-member the model found).
# Here: the cluster must list this member's peer URL (an operator's `member
# remove`, or a survivor forced into a new cluster, is refused with the
# command that fixes it); a stamp on the volume records the `member remove`
# before it is sent, so a retry adds the member back; after `member add` a
# local etcd joins (state existing) into the staging dir until it is
# healthy, and its member/ moves into place. reset-member then finds
# member/snap/db and does nothing; etcd starts as the added member.
join() {
	J_EP=$1
	J_CID=$2
	for b in etcd etcdctl; do
		command -v "$b" >/dev/null 2>&1 || fail "$b is not in PATH of the etcd-init image: a member joins a running cluster with it (use the etcd image, or an etcdInitImage that has it)"
	done
	set +e
	J_LIST=$(jctl member list -w simple)
	J_RC=$?
	set -e
	[ "$J_RC" -eq 0 ] || fail "not restoring (a healthy cluster answers at $J_EP/health), but its member list could not be read to join it: $(shown "$J_LIST"). The kubelet retries"
	case $J_CID in "" | "not named") fail "not joining: the healthy member at $J_EP names no cluster ID (X-Etcd-Cluster-ID) on its peer port; the kubelet retries" ;; esac
	# Nothing of a restore is needed any more.
	rm -f -- "$STAGE/snapshot.db" "$STAGE/download-complete"
	# "<id>, <started|unstarted>, <name>, <peer URLs>, <client URLs>, <learner>"
	J_LINE=$(printf '%s\n' "$J_LIST" | awk -F', ' -v u="$PEER_URL" '{ n = split($4, a, ","); for (i = 1; i <= n; i++) if (a[i] == u) { print; exit } }')
	J_ID=${J_LINE%%,*}
	J_STAMP=$(cat "$STATE/joining" 2>/dev/null || true)
	case $J_LINE in *", true") fail "joining the cluster at $J_EP: this member ($PEER_URL) is listed as a learner (added by hand?): promote it (etcdctl member promote $J_ID) or remove it; the kubelet retries" ;; esac
	J_CLUSTER=
	J_RESUMED=
	if [ "$J_STAMP" = "$J_CID" ] && [ -f "$JOIN_DIR/data/member/snap/db" ] && staged_wal && [ -n "$J_LINE" ]; then
		J_RESUMED=yes
		# An earlier run added this member and its first sync started: the
		# staged member is the listed one (its ID is in the staged WAL).
		# Resume the sync; never remove and re-add it.
		log "resuming the first sync of this member into cluster $J_CID"
	else
		[ ! -f "$JOIN_DIR/data/member/snap/db" ] || staged_wal ||
			log "the staged first sync holds a database but no WAL (its local etcd exited before it had joined): starting the sync again"
		case $J_LINE in
		"")
			[ "$J_STAMP" = "$J_CID" ] || fail "not joining the healthy cluster at $J_EP (cluster ID $J_CID): its member list does not name this member ($PEER_URL), so etcd would start it as a new one-member cluster outside it (issue #28: a survivor forced into a new cluster, or a member removed by hand). If this member belongs to that cluster, add it: etcdctl member add $NAME --peer-urls=$PEER_URL; this member then joins at the kubelet's next retry (docs/restore.md)"
			J_ADD=yes
			;;
		*", unstarted, "*) J_ADD= ;;
		*)
			# The stamp first: a retry after the remove (a crash, a refused
			# add) knows this member was in the list and adds it back.
			printf '%s\n' "$J_CID" >"$STATE/joining"
			sync
			set +e
			J_OUT=$(jctl member remove "$J_ID")
			J_RC=$?
			set -e
			[ "$J_RC" -eq 0 ] || fail "joining the cluster at $J_EP: member remove $J_ID failed: $(shown "$J_OUT"). The kubelet retries"
			log "removed this member's old entry $J_ID (its data is gone) from cluster $J_CID"
			J_ADD=yes
			;;
		esac
		rm -rf -- "$JOIN_DIR" "$JOIN_WAL"
		if [ -n "$J_ADD" ]; then
			printf '%s\n' "$J_CID" >"$STATE/joining"
			set +e
			J_OUT=$(jctl member add "$NAME" --peer-urls="$PEER_URL")
			J_RC=$?
			set -e
			[ "$J_RC" -eq 0 ] || fail "joining the cluster at $J_EP: member add $NAME was refused: $(shown "$J_OUT") (etcd refuses while its leader has not been connected to a quorum for 5 s); the kubelet retries, and this member is added then"
			J_CLUSTER=$(printf '%s\n' "$J_OUT" | sed -n 's/^ETCD_INITIAL_CLUSTER="\(.*\)"$/\1/p' | head -n 1)
			log "added this member to cluster $J_CID"
		else
			printf '%s\n' "$J_CID" >"$STATE/joining"
		fi
	fi
	if [ -z "$J_CLUSTER" ]; then
		# Already added (unstarted), or resuming: the initial cluster from
		# the list, as `member add` prints it (this member by its name,
		# another unstarted one by its URL alone). Given on a resume too: a
		# local etcd never starts without --initial-cluster-state existing,
		# so it can only join, never bootstrap a cluster of its own.
		set +e
		J_LIST=$(jctl member list -w simple)
		set -e
		J_CLUSTER=$(printf '%s\n' "$J_LIST" | awk -F', ' -v u="$PEER_URL" -v me="$NAME" '$2 == "started" || $2 == "unstarted" { name = $3; n = split($4, a, ","); for (i = 1; i <= n; i++) if (a[i] == u) name = me; for (i = 1; i <= n; i++) printf "%s%s=%s", (out++ ? "," : ""), name, a[i] }')
	fi
	[ -n "$J_CLUSTER" ] || fail "joining the cluster at $J_EP: its member list names no member to join with: $(shown "$J_LIST"); the kubelet retries"
	# The first sync: a local etcd of this member, state existing, into a
	# dir next to the data dir (never the data dir: a crash leaves nothing
	# half-made there), with a quota far above any cluster's (a smaller one
	# would raise a NOSPACE alarm for the whole cluster while it applies the
	# leader's database) and the peer TLS of the etcd container, client
	# certificates required.
	mkdir -p -- "$JOIN_DIR"
	J_QUOTA=$(number "${ETCD_QUOTA_BACKEND_BYTES:-}" 0)
	[ "$J_QUOTA" -gt 68719476736 ] || J_QUOTA=68719476736
	set -- --name "$NAME" --data-dir "$JOIN_DIR/data" --listen-peer-urls "$LISTEN_PEER" \
		--initial-advertise-peer-urls "$PEER_URL" --listen-client-urls unix://join:0 \
		--advertise-client-urls "${ETCD_ADVERTISE_CLIENT_URLS:-$CLIENT_URL}" --quota-backend-bytes "$J_QUOTA"
	set -- "$@" --initial-cluster "$J_CLUSTER" --initial-cluster-state existing
	[ -z "$WAL_DIR" ] || set -- "$@" --wal-dir "$JOIN_WAL"
	[ -z "$PEER_CERT" ] || set -- "$@" --peer-cert-file "$PEER_CERT"
	[ -z "$PEER_KEY" ] || set -- "$@" --peer-key-file "$PEER_KEY"
	# Client certificates required (as the flag; the same setting as env
	# too would make etcd exit on the conflict).
	[ -z "$PEER_CA" ] || set -- "$@" --peer-trusted-ca-file "$PEER_CA" --peer-client-cert-auth
	log "joining cluster $J_CID as $NAME ($PEER_URL): a local etcd syncs first"
	(cd "$JOIN_DIR" && exec env -i PATH="$PATH" \
		${ETCD_CIPHER_SUITES:+"ETCD_CIPHER_SUITES=$ETCD_CIPHER_SUITES"} \
		${ETCD_TLS_MIN_VERSION:+"ETCD_TLS_MIN_VERSION=$ETCD_TLS_MIN_VERSION"} \
		${ETCD_TLS_MAX_VERSION:+"ETCD_TLS_MAX_VERSION=$ETCD_TLS_MAX_VERSION"} \
		${ETCD_PEER_CERT_ALLOWED_CN:+"ETCD_PEER_CERT_ALLOWED_CN=$ETCD_PEER_CERT_ALLOWED_CN"} \
		${ETCD_PEER_CERT_ALLOWED_HOSTNAME:+"ETCD_PEER_CERT_ALLOWED_HOSTNAME=$ETCD_PEER_CERT_ALLOWED_HOSTNAME"} \
		${ETCD_PEER_CRL_FILE:+"ETCD_PEER_CRL_FILE=$ETCD_PEER_CRL_FILE"} \
		${ETCD_PEER_CLIENT_CERT_FILE:+"ETCD_PEER_CLIENT_CERT_FILE=$ETCD_PEER_CLIENT_CERT_FILE"} \
		${ETCD_PEER_CLIENT_KEY_FILE:+"ETCD_PEER_CLIENT_KEY_FILE=$ETCD_PEER_CLIENT_KEY_FILE"} \
		etcd "$@") >"$STAGE/join.log" 2>&1 &
	CHILD=$!
	# The sync moves the whole database: bounded like the download.
	J_DEADLINE=$(($(date +%s) + MAX_TIME))
	while :; do
		set +e
		# A relative socket path: a long mount path must not pass the
		# 107-byte limit of a unix socket address.
		J_HEALTH=$(cd "$JOIN_DIR" && curl -q --silent --max-time "$PROBE_TIMEOUT" --unix-socket ./join:0 http://localhost/health 2>&1)
		set -e
		case $J_HEALTH in *'"health":"true"'*) break ;; esac
		if ! kill -0 "$CHILD" 2>/dev/null; then
			tail -n 5 "$STAGE/join.log" >&2 || true
			CHILD=
			# A resumed sync that exits is not resumed again (its member may
			# have been removed and added anew: a WAL of an old ID never
			# joins); the retry starts it over, which can only join.
			[ -z "$J_RESUMED" ] || rm -rf -- "$JOIN_DIR" "$JOIN_WAL"
			fail "joining cluster $J_CID: the local etcd exited before it synced (its log is above); the kubelet retries"
		fi
		[ "$(date +%s)" -lt "$J_DEADLINE" ] || fail "joining cluster $J_CID: the local etcd did not sync within RESTORE_MAX_TIME_SECONDS=${MAX_TIME}s; the kubelet retries and the sync resumes"
		sleep 1
	done
	# The synced member is of the cluster it joined, never of one of its
	# own (/health answers for a one-member cluster too): its cluster ID,
	# read over the local socket, is the healthy cluster's.
	set +e
	# (env -i: an ETCDCTL_* variable of the image must not redirect it.)
	J_STATUS=$(cd "$JOIN_DIR" && env -i PATH="$PATH" ETCDCTL_API=3 etcdctl --endpoints unix://join:0 --dial-timeout 5s --command-timeout 15s endpoint status -w json 2>&1)
	J_LOCAL=$(printf '%s\n' "$J_STATUS" | sed -n 's/.*"cluster_id":\([0-9][0-9]*\).*/\1/p' | head -n 1)
	[ -z "$J_LOCAL" ] || J_LOCAL=$(printf '%x' "$J_LOCAL") || J_LOCAL=
	set -e
	kill -TERM "$CHILD" 2>/dev/null || true
	wait "$CHILD" 2>/dev/null || true
	CHILD=
	[ -n "$J_LOCAL" ] || fail "joining cluster $J_CID: the local etcd's cluster ID could not be read after its sync: $(shown "$J_STATUS"); the kubelet retries and the sync resumes"
	if [ "$J_LOCAL" != "$(printf '%s' "$J_CID" | tr 'A-F' 'a-f')" ]; then
		rm -rf -- "$JOIN_DIR" "$JOIN_WAL"
		fail "joining cluster $J_CID: the local etcd synced as cluster $J_LOCAL, not $J_CID; its staged data is removed and this member's data dir stays empty; the kubelet retries the join from the start"
	fi
	[ -f "$JOIN_DIR/data/member/snap/db" ] || fail "joining cluster $J_CID: the local etcd left no member/snap/db"
	place "$JOIN_DIR/data" "$JOIN_WAL"
	rm -rf -- "$STATE" "$STAGE" "$WAL_STAGE" "$JOIN_DIR" "$JOIN_WAL"
	sync
	result "JOINED: a healthy etcd cluster (cluster ID $J_CID) answers at $J_EP/health and lists this member; $DATA_DIR held no etcd member (new, or its volume was lost): not restoring the snapshot; this member joined that cluster (member add, a first sync) and etcd starts as that member"
	exit 0
}

# wait_for <fresh|restored>: until every other member is accounted for:
#   fresh:    seen answering as this generation's etcd-init (fresh or restored);
#             an etcd member that runs with a healthy cluster: join it (exit 0)
#   restored: seen restored, or running etcd after it was seen as etcd-init.
wait_for() {
	DEADLINE=$(($(date +%s) + WAIT))
	LAST=
	while :; do
		MISSING=
		COUNT=1
		while read -r PNAME PURL; do
			[ -n "$PNAME" ] || continue
			if [ "$1" = restored ] && seen "$PNAME" restored-peers; then
				COUNT=$((COUNT + 1))
				continue
			fi
			# Asked every round, even when seen before: a member once seen in
			# etcd-init that now runs etcd with a healthy cluster means this
			# restore went on without this member (join it, below).
			probe "$PNAME" "$PURL"
			case $1:$P_STATE in
			fresh:fresh | fresh:restored)
				note "$PNAME" seen
				COUNT=$((COUNT + 1))
				continue
				;;
			restored:restored)
				note "$PNAME" restored-peers
				COUNT=$((COUNT + 1))
				continue
				;;
			restored:etcd)
				if ! seen "$PNAME" seen; then
					P_WHY="an etcd member runs there, but this member never saw it in etcd-init of this restore"
				elif [ -z "$CLUSTER_ID" ] || [ "$P_CLUSTER" != "$CLUSTER_ID" ]; then
					P_WHY="an etcd member runs there, but not of this restore's cluster (cluster ID ${P_CLUSTER:-not named}; this restore's is ${CLUSTER_ID:-unknown})"
				else
					note "$PNAME" restored-peers
					COUNT=$((COUNT + 1))
					continue
				fi
				;;
			fresh:etcd)
				if healthy "$PURL"; then
					# Not restoring: this member joins the running cluster
					# itself (join, below), so reset-member finds data.
					beacon_stop
					join "${HEALTH_URL%/health}" "${P_CLUSTER:-not named}"
				fi
				P_WHY="a live etcd member runs there (it may hold writes the snapshot lacks) and no healthy cluster answers at $HEALTH_URL"
				;;
			esac
			if [ "$1:$P_STATE" != fresh:etcd ] && [ "$1" = fresh ] && seen "$PNAME" seen; then
				# Seen earlier in this restore's etcd-init with an empty data
				# dir: since then it can only hold this restore's data. Unless
				# it now runs etcd without a healthy cluster: what that etcd
				# holds cannot be told from here, so it counts as unknown.
				COUNT=$((COUNT + 1))
				continue
			fi
			MISSING="$MISSING; $PNAME at $PURL: $P_WHY"
		done <<EOF
$OTHERS
EOF
		[ -n "$MISSING" ] || return 0
		if [ "$MISSING" != "$LAST" ]; then
			log "waiting for the other members (${WAIT}s at most)${MISSING}"
			LAST=$MISSING
		fi
		if [ "$(date +%s)" -ge "$DEADLINE" ]; then
			if [ "$1" = restored ] && [ "$COUNT" -ge "$QUORUM" ]; then
				log "WARNING: after ${WAIT}s $COUNT of $MEMBERS members (a quorum) have restored; starting etcd without the others${MISSING}"
				return 0
			fi
			MISSING=${MISSING#; }
			if [ "$1" = fresh ]; then
				fail "not restoring: it cannot be established that every other member holds no data the snapshot lacks (${WAIT}s): $MISSING. The kubelet retries this init container; see the runbook for a member that never comes back"
			fi
			fail "restored, but the other members did not restore within ${WAIT}s: $MISSING. The kubelet retries; etcd starts once they have"
		fi
		sleep 1
	done
}

# linger_fresh: after this member's download failed at the barrier, its
# beacon keeps answering "fresh" (still true: nothing was placed, its data
# dir is empty) until every other member has gone on, on positive evidence
# (it answers "restored" or runs etcd), for a few of the others' probe
# rounds at most: once a member has seen this one, it remembers it
# ($STATE/seen), across its retries too. Exiting at once left the beacon
# up for about a second, and the others, probing once a round, could miss
# it and wait out their whole wait (issue #28, M6). The kubelet retries
# this container; by then a healthy cluster answers and it joins, or the
# download works and it restores.
linger_fresh() {
	L_CAP=$((3 * (MEMBERS - 1) * 2 * PROBE_TIMEOUT + 3))
	[ "$L_CAP" -le "$WAIT" ] || L_CAP=$WAIT
	L_DEADLINE=$(($(date +%s) + L_CAP))
	log "the download failed: answering as this restore's etcd-init until the other members have gone on (${L_CAP}s at most), then exiting for the kubelet's retry"
	while :; do
		L_WAITING=
		while read -r PNAME PURL; do
			[ -n "$PNAME" ] || continue
			probe "$PNAME" "$PURL"
			case $P_STATE in
			restored | etcd) ;;
			*) L_WAITING="$L_WAITING, $PNAME ($P_STATE)" ;;
			esac
		done <<EOF
$OTHERS
EOF
		if [ -z "$L_WAITING" ]; then
			log "the other members have gone on (restored, or running etcd): exiting for the kubelet's retry"
			return 0
		fi
		if ! kill -0 "$BEACON" 2>/dev/null; then
			log "this member's etcd-init beacon stopped: exiting for the kubelet's retry"
			return 0
		fi
		if [ "$(date +%s)" -ge "$L_DEADLINE" ]; then
			log "after ${L_CAP}s these members had not gone on: ${L_WAITING#, }; exiting for the kubelet's retry"
			return 0
		fi
		sleep 1
	done
}

# Free KiB on the filesystem holding $1 (the 4th field from the end is
# robust against spaces in the filesystem name).
SNAPSHOT="$STAGE/snapshot.db"
# download_and_verify: the snapshot into $SNAPSHOT, checked (size, not an
# error document, the #sha256= fragment), marked complete for this
# generation. Run in the background (`run`): a failure ends it with FAILED
# and a non-zero RC, not the whole run.
# BEGIN snapshot-facts: the same block in etcd-init.sh and backup-verify.sh
# (tests/backup_verify.rs holds them equal).
# Free KiB on the filesystem holding $1.
avail_kib() { df -Pk "$1" 2>/dev/null | awk 'END { print $(NF - 2) }'; }
# The storage version a snapshot was written with ("" before etcd 3.6):
# `snapshot status` says it from 3.6 on; older tools do not, so then the meta
# bucket's key is read from the bytes (a bbolt leaf keeps a key next to its value).
snapshot_storage_version() {
	sv=$("$TOOL" snapshot status "$1" -w json 2>/dev/null | sed -n 's/.*"version":"\([0-9][0-9.]*\)".*/\1/p' | head -n 1 || true)
	[ -n "$sv" ] || sv=$(grep -a -o -m 1 -E 'storageVersion[0-9]+\.[0-9]+\.[0-9]+' "$1" 2>/dev/null | head -n 1 | sed 's/^storageVersion//' || true)
	printf '%s' "$sv"
}
# Whether version $1 is newer than version $2 (major.minor).
newer_than() {
	# shellcheck disable=SC2046
	set -- $(printf '%s' "$1" | sed -n 's/^\([0-9]*\)\.\([0-9]*\).*/\1 \2/p') $(printf '%s' "$2" | sed -n 's/^\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
	[ $# -eq 4 ] && { [ "$1" -gt "$3" ] || { [ "$1" -eq "$3" ] && [ "$2" -gt "$4" ]; }; }
}
# END snapshot-facts

download_and_verify() {
	trap 'kill "$CHILD" 2>/dev/null || true; exit 143' TERM
	# 7. Optional integrity: #sha256=<hex> (the fragment is never sent to the server).
	# BEGIN sha256-fragment: the admission rule restore-url-format checks the
	# same (rules::restore_url::sha256_fragment); tests/sha256_fragment.rs
	# runs this block and that function on the same URLs.
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
	# END sha256-fragment

	# 8. Download (unless a retry finds this generation's complete download),
	#    retrying transient failures; RESTORE_MAX_TIME_SECONDS bounds the
	#    whole download, retries included. -q: no ~/.curlrc. The download
	#    goes through a proxy only where curl's environment names one.
	if [ "$(cat "$STAGE/download-complete" 2>/dev/null || true)" = "$GEN" ] && [ -f "$SNAPSHOT" ]; then
		log "reusing the complete download of $SHOWN from an earlier run"
		HTTP_CODE=kept
	else
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
			5) why="the proxy named in the environment does not resolve" ;;
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
	fi
	SIZE=$(wc -c <"$SNAPSHOT" | tr -d ' ')
	[ "$SIZE" -gt 0 ] || fail "download of $SHOWN returned an empty body"
	[ "$SIZE" -le "$MAX_BYTES" ] || fail "the snapshot ($SIZE bytes) is larger than RESTORE_MAX_BYTES=$MAX_BYTES"
	log "downloaded $SIZE bytes (HTTP $HTTP_CODE)"

	# An error document served with 200 (a proxy page, S3/Azure XML, JSON; with
	# or without a BOM): an etcd snapshot (bbolt) never starts with '<' or '{'.
	HEAD=$(head -c 64 "$SNAPSHOT" | tr -d '\357\273\277\000' | tr -d ' \t\r\n' | head -c 16)
	case $HEAD in
	"<"* | "{"*)
		rm -f -- "$SNAPSHOT"
		fail "$SHOWN returned a text document, not an etcd snapshot (expired or invalid presigned URL/SAS?)"
		;;
	esac

	run sha256sum "$SNAPSHOT" >"$STAGE/sha256"
	[ "$RC" -eq 0 ] || fail "sha256sum of the download failed"
	ACTUAL_SHA=$(cut -d ' ' -f 1 "$STAGE/sha256")
	if [ -n "$EXPECTED_SHA" ]; then
		if [ "$ACTUAL_SHA" != "$EXPECTED_SHA" ]; then
			rm -f -- "$SNAPSHOT"
			fail "sha256 of the download is $ACTUAL_SHA, the URL fragment expects $EXPECTED_SHA"
		fi
		log "sha256 verified"
	fi
	# A snapshot saved by a newer etcd (its storage version) is refused before
	# the barrier: etcdutl restores it without a word, and this etcd cannot run it.
	SNAP_STORAGE=$(snapshot_storage_version "$SNAPSHOT")
	ETCD_VERSION=$(etcd --version 2>/dev/null | sed -n 's/^etcd Version: *//p' | head -n 1 || true)
	if [ -n "$SNAP_STORAGE" ] && [ -n "$ETCD_VERSION" ] && newer_than "$SNAP_STORAGE" "$ETCD_VERSION"; then
		rm -f -- "$SNAPSHOT"
		fail "the snapshot's storage version is $SNAP_STORAGE, newer than this etcd $ETCD_VERSION: it was saved by a newer etcd, which this one cannot run (restore with an etcd-init image of etcd $SNAP_STORAGE or later)"
	fi
	printf '%s\n' "$GEN" >"$STAGE/download-complete"
}

if [ -z "$RESUME" ]; then
	# 6. Download and verify first (issue #28, M6): a presigned URL expires
	#    (OADP presigns for 1 h), and a member that arrives late must not
	#    make the download impossible for the ones that came on time. A
	#    failed download still goes on to the wait: this member answers as
	#    this restore's etcd-init, the others may restore without it, and it
	#    joins their cluster at a later run.
	DOWNLOADED=
	if [ -n "$OTHERS" ] && cluster_answers; then
		# Nothing to restore: this member joins that cluster (step 7).
		log "a healthy etcd cluster answers at $HEALTH_URL: not downloading"
	else
		run download_and_verify
		if [ "$RC" -eq 0 ]; then
			DOWNLOADED=yes
		else
			[ -n "$OTHERS" ] || exit 1
			log "the download failed; waiting for the other members anyway (they may restore, and this member joins them)"
		fi
	fi

	# 7. Positive evidence: every other member is in its etcd-init of this
	#    restore, with an empty data dir (or already restored by it).
	if [ -n "$OTHERS" ]; then
		beacon_start fresh
		wait_for fresh
		log "every other member answered as this restore's etcd-init (generation $GEN): restoring"
	fi
	if [ -z "$DOWNLOADED" ]; then
		# (Its FAILED line is already the termination message.)
		run download_and_verify
		if [ "$RC" -ne 0 ]; then
			linger_fresh
			exit 1
		fi
	fi
	ACTUAL_SHA=$(cut -d ' ' -f 1 "$STAGE/sha256")
	SIZE=$(wc -c <"$SNAPSHOT" | tr -d ' ')
	# The revision the restore lands at: the snapshot's plus the bump, and at
	# least the floor (a later restore of the same snapshot, by a later
	# HostedControlPlane, lands above what this one served).
	REV_BEFORE=$("$TOOL" snapshot status "$SNAPSHOT" -w json 2>/dev/null | sed -n 's/.*"revision":\([0-9]*\).*/\1/p' || true)
	if [ -n "$BUMP" ] && [ -n "$REV_BEFORE" ]; then
		if [ "$MEMBERS" -eq 1 ]; then
			NOW_FLOOR=$(($(date +%s) * 10000000))
			[ "$NOW_FLOOR" -le "$FLOOR" ] || FLOOR=$NOW_FLOOR
		fi
		if [ $((FLOOR - REV_BEFORE)) -gt "$BUMP_BY" ]; then
			BUMP_BY=$((FLOOR - REV_BEFORE))
			log "revision floor $FLOOR: bumping revisions by $BUMP_BY"
		fi
	fi
	# The cluster token names this restore, the bytes restored and the bump:
	# two members that got different objects from one URL (overwritten in the
	# bucket between their downloads), or restored with different bumps (an
	# image without --bump-revision on one of them), get different cluster
	# IDs and refuse each other loudly, never merge two snapshots' raft logs
	# or revisions 10^12 apart.
	APPLIED=0
	[ -z "$BUMP" ] || APPLIED=$BUMP_BY
	RID=$GEN-$(printf '%.16s' "$ACTUAL_SHA")-b$APPLIED
	TOKEN=etcd-restore-$RID

	# 9. Space: the restored copy of the database plus 64 MiB of preallocated WAL
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

	# 10. Restore into the staging dir with this member's identity and this
	#     restore's own token (so its cluster ID is this restore's alone).
	set -- snapshot restore "$SNAPSHOT" --data-dir "$STAGE/data" --name "$NAME" \
		--initial-cluster "$ETCD_INITIAL_CLUSTER" --initial-cluster-token "$TOKEN" \
		--initial-advertise-peer-urls "$PEER_URL"
	[ -z "$WAL_DIR" ] || set -- "$@" --wal-dir "$WAL_STAGE/wal"
	[ -z "$BUMP" ] || set -- "$@" --bump-revision "$BUMP_BY" --mark-compacted
	log "restoring with $TOOL as member $NAME ($PEER_URL), cluster token $TOKEN"
	run "$TOOL" "$@" >"$STAGE/restore.log" 2>&1
	if [ "$RC" -ne 0 ]; then
		cat "$STAGE/restore.log" >&2
		if grep -q 'failed to resolve' "$STAGE/restore.log"; then
			fail "$TOOL could not resolve the peer names in ETCD_INITIAL_CLUSTER: the etcd-discovery Service must publish not-ready addresses (publishNotReadyAddresses: true) while init containers run"
		fi
		if grep -q -i 'no space left' "$STAGE/restore.log"; then
			fail "not enough space on the data volume: $TOOL snapshot restore ran out of space"
		fi
		rm -f -- "$SNAPSHOT" "$STAGE/download-complete"
		fail "$TOOL snapshot restore failed (corrupt or truncated snapshot, or a member flag mismatch)"
	fi
	[ -d "$STAGE/data/member" ] || fail "$TOOL reported success but wrote no member/ directory"
	CLUSTER_ID=$(sed -n 's/.*"cluster-id": *"\([0-9a-f]*\)".*/\1/p' "$STAGE/restore.log" | head -n 1)
	if [ -n "$OTHERS" ] && [ -z "$CLUSTER_ID" ]; then
		# The barrier tells this restore's members from any other etcd by it.
		cat "$STAGE/restore.log" >&2
		rm -f -- "$SNAPSHOT" "$STAGE/download-complete"
		fail "$TOOL snapshot restore did not log the cluster ID it made (\"cluster-id\"), which the other members are checked against: use an etcd-init image with the etcdutl/etcdctl of etcd 3.4 to 3.7 (setting etcdInitImage)"
	fi
	grep -i 'bump' "$STAGE/restore.log" | head -n 3 >&2 || true
	REV_AFTER=$REV_BEFORE
	if [ -n "$BUMP" ] && [ -n "$REV_BEFORE" ]; then
		REV_AFTER=$((REV_BEFORE + BUMP_BY))
	fi
	chmod 700 "$STAGE/data"
	[ -z "$WAL_DIR" ] || chmod 700 "$WAL_STAGE/wal"

	# 11. Only now move the restored member into place (renames on the same
	#     volumes): the WAL first (under a marker), the data dir last, so an
	#     empty data dir always means "not restored"; then sync, so a power
	#     loss cannot undo the renames.
	if [ -e "$DATA_DIR/member" ] || [ -L "$DATA_DIR/member" ]; then
		fail "$DATA_DIR/member appeared while restoring; leaving it alone"
	fi
	# Recorded before the move: a retry that finds the data dir filled
	# waits for the others instead of starting etcd at once.
	printf 'RESTORED: member %s, revision %s -> %s, sha256 %s, cluster id %s, token %s\n' "$NAME" \
		"${REV_BEFORE:-?}" "${REV_AFTER:-?}" "$ACTUAL_SHA" "${CLUSTER_ID:-?}" "$TOKEN" >"$STATE/restored"
	place "$STAGE/data" "$WAL_STAGE/wal"
	rm -rf -- "$STAGE"
	sync
	log "restored snapshot into $DATA_DIR${WAL_DIR:+ (WAL in $WAL_DIR)}"
fi

# 12. No etcd starts before every other member has restored too (or runs
#     etcd after it was seen in etcd-init): a member still checking never
#     meets a running etcd it cannot place.
if [ -n "$OTHERS" ]; then
	mkdir -p -- "$STAGE"
	beacon_start restored
	wait_for restored
	beacon_stop
fi
LINE=$(cat "$STATE/restored" 2>/dev/null || printf 'RESTORED: member %s' "$NAME")
# Released: the record goes first (a crash in the middle of the removal
# leaves no "restored" behind a missing generation).
rm -f -- "$STATE/restored"
sync
rm -rf -- "$STATE" "$STAGE"
sync
result "$LINE"
