#!/bin/sh
# HOSTNAME is an environment variable of the pod (downward API), not a shell variable.
# shellcheck disable=SC3028
# etcd-init: restore this etcd member from a snapshot URL, once, into an empty
# data dir. Injected by hcp-etcd-admission; runs before reset-member.
#
# Inputs (environment only; nothing from the object is ever pasted into this text):
#   RESTORE_URL_ETCD              https URL of the snapshot (presigned); optional
#                                 fragment #sha256=<64 hex> is checked, never sent
#   HOSTNAME                      pod name (downward API), e.g. etcd-1
#   HCP_NAMESPACE                 hosted control plane namespace
#   ETCD_INITIAL_CLUSTER          etcd-0=https://etcd-0.etcd-discovery.<ns>.svc:2380,...
#   ETCD_NAME, ETCD_INITIAL_ADVERTISE_PEER_URLS, ETCD_INITIAL_CLUSTER_TOKEN
#                                 optional; default to HOSTNAME, the discovery
#                                 peer URL and HCP_NAMESPACE
#   ETCD_DATA_DIR                 default /var/lib/data (on the data volume)
#   RESTORE_MAX_BYTES             download size cap (default 17179869184 = 16 GiB)
#   RESTORE_MAX_TIME_SECONDS      download time cap (default 1800)
# Exit 0: restored, or nothing to do (data dir not empty). Non-zero: failed; the
# data dir is left as it was (empty), so the kubelet's retry starts clean.
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

DATA_DIR=${ETCD_DATA_DIR:-/var/lib/data}
DATA_DIR=${DATA_DIR%/}
ROOT=$(dirname -- "$DATA_DIR")
STAGE="$ROOT/.etcd-init-restore"
URL=${RESTORE_URL_ETCD:-}
MAX_BYTES=${RESTORE_MAX_BYTES:-17179869184}
MAX_TIME=${RESTORE_MAX_TIME_SECONDS:-1800}

# 1. Only ever restore into an empty data dir (lost+found does not count).
has_data() {
	[ -d "$DATA_DIR" ] || return 1
	for entry in "$DATA_DIR"/* "$DATA_DIR"/.[!.]* "$DATA_DIR"/..?*; do
		[ -e "$entry" ] || [ -L "$entry" ] || continue
		case ${entry##*/} in lost+found) continue ;; esac
		return 0
	done
	return 1
}
if has_data; then
	log "$DATA_DIR is not empty, not restoring snapshot"
	exit 0
fi

[ -n "$URL" ] || fail "RESTORE_URL_ETCD is empty: nothing to restore from"
: "${HOSTNAME:?HOSTNAME must be set (downward API metadata.name)}"
: "${HCP_NAMESPACE:?HCP_NAMESPACE must be set}"
: "${ETCD_INITIAL_CLUSTER:?ETCD_INITIAL_CLUSTER must be set}"
NAME=${ETCD_NAME:-$HOSTNAME}
PEER_URL=${ETCD_INITIAL_ADVERTISE_PEER_URLS:-https://$HOSTNAME.etcd-discovery.$HCP_NAMESPACE.svc:2380}
TOKEN=${ETCD_INITIAL_CLUSTER_TOKEN:-$HCP_NAMESPACE}
SHOWN=$(redact "$URL")

# 2. Optional integrity: #sha256=<hex> (the fragment is never sent to the server).
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

# 3. Clean leftovers of an earlier attempt; stage everything on the data volume.
rm -rf -- "$STAGE"
mkdir -p -- "$STAGE"
SNAPSHOT="$STAGE/snapshot.db"
trap 'rm -rf -- "$STAGE"' EXIT

log "downloading snapshot from $SHOWN"
set +e
HTTP_CODE=$(curl --proto '=https' --proto-redir '=https' --location --max-redirs 3 \
	--fail --silent --show-error --globoff \
	--connect-timeout 30 --max-time "$MAX_TIME" --max-filesize "$MAX_BYTES" \
	--retry 5 --retry-delay 2 --retry-connrefused \
	--write-out '%{http_code}' --output "$SNAPSHOT" --url "$FETCH_URL" 2>"$STAGE/curl.err")
RC=$?
set -e
if [ "$RC" -ne 0 ]; then
	# curl's own message may echo the URL: print it redacted.
	sed -e 's/?[^ ]*//g' "$STAGE/curl.err" >&2 || true
	case $RC in
	1) why="only https:// is allowed" ;;
	6) why="the host does not resolve" ;;
	7) why="the connection was refused" ;;
	18) why="the transfer was cut short" ;;
	22) why="the server answered HTTP $HTTP_CODE (403: expired or invalid presigned URL/SAS; 404: wrong object)" ;;
	28) why="the download timed out after ${MAX_TIME}s" ;;
	35 | 51 | 53 | 54 | 58 | 59 | 60 | 77 | 80 | 82 | 83 | 90 | 91) why="TLS failed (untrusted or invalid server certificate)" ;;
	63) why="the snapshot is larger than RESTORE_MAX_BYTES=$MAX_BYTES" ;;
	*) why="curl exit code $RC" ;;
	esac
	fail "download of $SHOWN failed: $why"
fi
SIZE=$(wc -c <"$SNAPSHOT" | tr -d ' ')
[ "$SIZE" -gt 0 ] || fail "download of $SHOWN returned an empty body"
[ "$SIZE" -le "$MAX_BYTES" ] || fail "the snapshot ($SIZE bytes) is larger than RESTORE_MAX_BYTES=$MAX_BYTES"
log "downloaded $SIZE bytes (HTTP $HTTP_CODE)"

# An error document served with 200 (a proxy page, S3/Azure XML, with or without a BOM).
HEAD=$(head -c 64 "$SNAPSHOT" | tr -d '\357\273\277\000' | tr -d ' \t\r\n' | head -c 16)
case $HEAD in
"<?xml"* | "<Error"* | "<html"* | "<HTML"* | "<!DOCTYPE"* | "{"*)
	fail "$SHOWN returned a text document, not an etcd snapshot (expired or invalid presigned URL/SAS?)"
	;;
esac

if [ -n "$EXPECTED_SHA" ]; then
	ACTUAL_SHA=$(sha256sum "$SNAPSHOT" | cut -d ' ' -f 1)
	[ "$ACTUAL_SHA" = "$EXPECTED_SHA" ] || fail "sha256 of the download is $ACTUAL_SHA, the URL fragment expects $EXPECTED_SHA"
	log "sha256 verified"
fi

# 4. Restore into the staging dir with this member's identity.
if command -v etcdutl >/dev/null 2>&1; then
	TOOL=etcdutl
elif command -v etcdctl >/dev/null 2>&1; then
	TOOL=etcdctl
	ETCDCTL_API=3
	export ETCDCTL_API
else
	fail "neither etcdutl nor etcdctl is in PATH of the etcd-init image"
fi
set -- snapshot restore "$SNAPSHOT" --data-dir "$STAGE/data" --name "$NAME" \
	--initial-cluster "$ETCD_INITIAL_CLUSTER" --initial-cluster-token "$TOKEN" \
	--initial-advertise-peer-urls "$PEER_URL"
if "$TOOL" snapshot restore --help 2>&1 | grep -q -- '--bump-revision'; then
	if "$TOOL" snapshot restore --help 2>&1 | grep -q -- '--mark-compacted'; then
		set -- "$@" --bump-revision 1000000000 --mark-compacted
	fi
fi
log "restoring with $TOOL as member $NAME ($PEER_URL)"
if ! "$TOOL" "$@" >"$STAGE/restore.log" 2>&1; then
	cat "$STAGE/restore.log" >&2
	if grep -q 'failed to resolve' "$STAGE/restore.log"; then
		fail "$TOOL could not resolve the peer names in ETCD_INITIAL_CLUSTER: the etcd-discovery Service must publish not-ready addresses (publishNotReadyAddresses: true) while init containers run"
	fi
	fail "$TOOL snapshot restore failed (corrupt or truncated snapshot, or a member flag mismatch)"
fi
[ -d "$STAGE/data/member" ] || fail "$TOOL reported success but wrote no member/ directory"

# 5. Only now move the restored member into place (a rename on the same volume).
if [ -d "$DATA_DIR" ]; then
	has_data && fail "$DATA_DIR filled up while restoring; leaving it alone"
	mv -- "$STAGE/data/member" "$DATA_DIR/member"
else
	mv -- "$STAGE/data" "$DATA_DIR"
fi
chmod 700 "$DATA_DIR"
log "restored snapshot into $DATA_DIR"
