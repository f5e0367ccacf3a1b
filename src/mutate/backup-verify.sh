#!/bin/sh
# etcd-backup-verify: prove the snapshot the backup Job just saved restores,
# and is this cluster's history, before the upload container runs. Injected
# by hcp-etcd-admission into HyperShift's etcd backup Job (an init container
# between `snapshot` and `upload`, with the `snapshot` container's image, so
# the tools are the hosted cluster's own etcd version).
#
# Inputs (environment only; nothing from the object is pasted into this text):
#   SNAPSHOT_PATH         the file `etcdctl snapshot save` wrote
#   ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY
#                         the live cluster, as the snapshot container reached it
#                         (etcdctl reads these itself)
#   VERIFY_ENFORCE        "true": a failed check fails this container, so the Job
#                         fails and nothing is uploaded; otherwise (warn) this
#                         step always exits 0: it reports, the upload goes on
#   VERIFY_SCRATCH_DIR    work dir for the trial restores (default: beside the
#                         snapshot; needs the snapshot's size + 64 MiB free)
#   RESTORE_REVISION_BUMP the bump a restore applies (etcd-init's); the second trial
#                         restores with it and --mark-compacted, as a restore does
#   HCP_NAMESPACE, HCP_NAME, BACKUP_NAME
#                         whose backup this is (the Job's labels), for the manifest
#   VERIFY_RESULT_FILE    where the manifest goes (default /dev/termination-log)
#
# Checks, each named in the manifest's "failures" when it fails:
#   empty         the file is missing or empty
#   error-document the file is text (an error page, XML, JSON), not a snapshot
#   integrity     the sha256 etcd appends to a snapshot does not match its
#                 content (truncated, corrupt, or a copied member/snap/db)
#   trial-restore `snapshot restore` refuses it (plain, and with the restore's bump)
#   storage-version the snapshot's storage version is newer than the oldest live etcd's
#   revision      the snapshot's revision is above the live cluster's newest:
#                 not this cluster's history (its revisions never go back)
#   kv-hash       the snapshot's KV hash at its revision differs from a live
#                 member's at that revision, both compacted to the same
#                 revision: not this cluster's history, or a member diverged
#                 (etcdutl hashkv: etcd >= 3.6; older tools say "not checked")
# What this step cannot judge is "not checked" in the manifest's notes, never
# a failure: no room for the trial (scratch), the live cluster compacted since
# the save (a KV hash depends on the compact revision), a member that does not
# answer, a tool without hashkv.
# Never run on the file itself: `etcdutl hashkv` and `snapshot status` open it
# with bbolt read-write (hashkv rewrites it; status on an empty file writes),
# so every tool reads the trial's copy.
#
# Output: one JSON line (the manifest, no key material, no URL) in the
# termination message and on stdout, and beside the snapshot as
# <snapshot>.manifest.json. Exit 1 only when a check failed and VERIFY_ENFORCE=true.
set -eu

RESULT_FILE=${VERIFY_RESULT_FILE:-/dev/termination-log}
SNAP=${SNAPSHOT_PATH:?SNAPSHOT_PATH is required}
SCRATCH=${VERIFY_SCRATCH_DIR:-$(dirname -- "$SNAP")/verify-scratch}
BUMP=${RESTORE_REVISION_BUMP:-}
ENFORCE=${VERIFY_ENFORCE:-false}
[ "$ENFORCE" = true ] || ENFORCE=false
export ETCDCTL_API=3

log() { printf '%s etcd-backup-verify: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

# The manifest is written once, at the end. Whatever stops the script before
# (a tool killed, a bug), warn mode still exits 0 and enforce mode fails closed.
DONE=
# shellcheck disable=SC2317 # called by the EXIT trap
finish() {
	rc=$?
	rm -rf -- "$SCRATCH" 2>/dev/null || true
	if [ -z "$DONE" ]; then
		log "stopped before the manifest (exit $rc)"
		printf '{"verified":false,"enforced":%s,"failures":[{"check":"internal","message":"the verify step stopped before its manifest (exit %s); see its log"}]}\n' \
			"$ENFORCE" "$rc" >"$RESULT_FILE" 2>/dev/null || true
		[ "$ENFORCE" = true ] || exit 0
		exit 1
	fi
}
trap finish EXIT

# Text safe inside a JSON string: printable ASCII without quotes or backslashes, at most 300 bytes.
json_text() { printf '%s' "$1" | tr -cd ' !#-[]-~' | head -c 300; }
FAILURES=
# fail <check> <message>: one failed check (the run goes on, to report all).
fail() {
	log "FAILED $1: $2"
	FAILURES="$FAILURES${FAILURES:+,}{\"check\":\"$1\",\"message\":\"$(json_text "$2")\"}"
}
NOTES=
# note <message>: something this step could not judge ("not checked").
note() {
	log "not checked: $1"
	NOTES="$NOTES${NOTES:+,}\"$(json_text "$1")\""
}
# The first line a tool printed on error (a Go panic dump is not a message).
first_error() {
	{ grep -m1 -E '^(Error|fatal error):' "$1" || grep -m1 -i -E 'error|fatal|panic|signal|expected|no space' "$1"; } 2>/dev/null | head -c 300 || true
}
# A field of a one-line JSON object (the last occurrence).
json_field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p" | head -n 1; }
# Digits only (anything else is empty).
digits() { case $1 in '' | *[!0-9]*) ;; *) printf '%s' "$1" ;; esac; }
# A write the scratch volume refused: no verdict on the snapshot.
scratch_failed() { grep -q -i -E 'no space left|input/output error|read-only file system|disk quota' "$1" 2>/dev/null; }

if command -v etcdutl >/dev/null 2>&1; then TOOL=etcdutl; else TOOL=etcdctl; fi
TOOL_VERSION=$("$TOOL" version 2>/dev/null | sed -n 's/.*version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1 || true)

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

SIZE=0
SHA=
REV=
KEYS=
STATUS_HASH=
STORAGE=
SNAP_COMPACT=
KV_SNAP=
KV_LIVE=
LIVE_REV=
LIVE_VERSION=
CLUSTER_ID=
ENC=

# (A scratch dir that is a mount point of its own stays; its contents go.)
rm -rf -- "$SCRATCH" 2>/dev/null || rm -rf -- "${SCRATCH:?}"/* 2>/dev/null || true
mkdir -p -- "$SCRATCH"

# 1. The file: present, a snapshot, etcd's own sha256 trailer.
if [ ! -s "$SNAP" ]; then
	fail empty "$SNAP is missing or empty: etcdctl snapshot save wrote nothing"
else
	SIZE=$(wc -c <"$SNAP" | tr -d ' ')
	HEAD=$(head -c 64 "$SNAP" | tr -d '\357\273\277\000' | tr -d ' \t\r\n' | head -c 16)
	case $HEAD in
	"<"* | "{"*) fail error-document "$SNAP is a text document, not an etcd snapshot" ;;
	esac
fi
if [ -z "$FAILURES" ]; then
	SHA=$(sha256sum "$SNAP" | cut -d ' ' -f 1)
	# etcd appends the sha256 of the database to every snapshot it saves.
	if [ "$SIZE" -le 32 ]; then
		fail integrity "$SNAP holds $SIZE bytes: too short for an etcd snapshot"
	else
		BODY=$(head -c $((SIZE - 32)) "$SNAP" | sha256sum | cut -d ' ' -f 1)
		TRAILER=$(tail -c 32 "$SNAP" | od -An -v -tx1 | tr -d ' \n')
		[ "$BODY" = "$TRAILER" ] || fail integrity "the sha256 etcd appended to the snapshot does not match its content: truncated, corrupt, or not a snapshot (a copied member/snap/db has no hash)"
	fi
fi

# 2. Room for a trial: the restored copy and etcd's 64 MiB of preallocated WAL.
TRIAL=
if [ -z "$FAILURES" ]; then
	NEED=$((SIZE / 1024 + 65536 + 1024))
	AVAIL=$(digits "$(avail_kib "$SCRATCH" || true)")
	if [ -n "$AVAIL" ] && [ "$AVAIL" -lt "$NEED" ]; then
		note "no trial restore: $AVAIL KiB free in $SCRATCH, $NEED KiB needed (the snapshot + 64 MiB of WAL); size the etcd-backup volume for 2 x the snapshot + 64 MiB"
	else
		TRIAL=yes
	fi
fi

trial() { # trial <dir> [restore flags...]
	dir=$1
	shift
	rm -rf -- "$dir"
	set +e
	"$TOOL" snapshot restore "$SNAP" --data-dir "$dir" --name verify \
		--initial-cluster verify=http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		"$@" >"$SCRATCH/restore.log" 2>&1
	rc=$?
	set -e
	return $rc
}
# trial_refused <what>: a refusal of the data, or of the scratch volume (not checked).
trial_refused() {
	if scratch_failed "$SCRATCH/restore.log"; then
		note "no trial restore: the scratch volume refused a write ($(first_error "$SCRATCH/restore.log"))"
	else
		fail trial-restore "$1 refused the snapshot: $(first_error "$SCRATCH/restore.log")"
	fi
}

# 3. A plain trial restore: what the snapshot holds (revision, keys, storage
#    version, the compact revision and KV hash at its revision, the encryption
#    key names), read from the restored copy.
if [ -n "$TRIAL" ]; then
	if trial "$SCRATCH/plain"; then
		DB=$SCRATCH/plain/member/snap/db
		STATUS=$("$TOOL" snapshot status "$DB" -w json 2>"$SCRATCH/status.err" || true)
		REV=$(digits "$(printf '%s' "$STATUS" | json_field revision)")
		KEYS=$(digits "$(printf '%s' "$STATUS" | json_field totalKey)")
		STATUS_HASH=$(digits "$(printf '%s' "$STATUS" | json_field hash)")
		STORAGE=$(snapshot_storage_version "$DB")
		[ -n "$REV" ] || fail trial-restore "snapshot status of the restored copy failed: $(first_error "$SCRATCH/status.err")"
		# Which encryption keys the data is sealed with (names only): a restore
		# needs the same keys in the hosted cluster's encryption config.
		ENC=$(grep -a -o -E 'k8s:enc:[a-z0-9]+:v[0-9]+:[A-Za-z0-9_.-]+:' "$DB" 2>/dev/null | sort -u | head -n 8 | tr '\n' ' ' || true)
		if [ -n "$REV" ] && "$TOOL" hashkv --help >/dev/null 2>&1; then
			HKV=$("$TOOL" hashkv "$DB" --rev "$REV" -w json 2>/dev/null || true)
			KV_SNAP=$(digits "$(printf '%s' "$HKV" | json_field hash)")
			SNAP_COMPACT=$(printf '%s' "$HKV" | json_field compactRevision)
		elif [ -n "$REV" ]; then
			note "kv-hash: $TOOL ${TOOL_VERSION:-?} has no hashkv (etcd >= 3.6)"
		fi
	else
		trial_refused "$TOOL snapshot restore"
	fi
	rm -rf -- "$SCRATCH/plain"
fi

# 4. The live cluster, every member of it (`--cluster`: the member list's
#    client URLs; the Service's one member when the list cannot be used):
#    its ID, newest revision (the input of an evidence-based bump), oldest
#    version, and each member's KV hash at the snapshot's revision. Read
#    right after the plain trial: the live cluster compacts every few minutes.
# live <file> <etcdctl args...>: one JSON object per member per line.
live() {
	out=$1
	shift
	etcdctl "$@" --cluster -w json >"$out.json" 2>"$out.err" ||
		etcdctl "$@" -w json >"$out.json" 2>"$out.err" || true
	sed 's/{"Endpoint"/\
{"Endpoint"/g' "$out.json" | grep '^{"Endpoint"' >"$out" || true
}
endpoint_of() { sed -n 's/^{"Endpoint":"\([^"]*\)".*/\1/p'; }
live "$SCRATCH/status" endpoint status
while IFS= read -r line; do
	r=$(digits "$(printf '%s' "$line" | json_field revision)")
	v=$(printf '%s' "$line" | sed -n 's/.*"version":"\([0-9][0-9.]*\)".*/\1/p')
	[ -n "$CLUSTER_ID" ] || CLUSTER_ID=$(digits "$(printf '%s' "$line" | json_field cluster_id)")
	if [ -n "$r" ] && { [ -z "$LIVE_REV" ] || [ "$r" -gt "$LIVE_REV" ]; }; then LIVE_REV=$r; fi
	[ -z "$v" ] || { [ -n "$LIVE_VERSION" ] && ! newer_than "$LIVE_VERSION" "$v"; } || LIVE_VERSION=$v
done <"$SCRATCH/status"
[ -n "$LIVE_REV" ] || note "the live cluster: no member answered endpoint status ($(first_error "$SCRATCH/status.err"))"

if [ -n "$STORAGE" ] && [ -n "$LIVE_VERSION" ] && newer_than "$STORAGE" "$LIVE_VERSION"; then
	fail storage-version "the snapshot's storage version $STORAGE is newer than the live etcd $LIVE_VERSION: it is not this cluster's, and this etcd cannot run it"
fi
if [ -n "$REV" ] && [ -n "$LIVE_REV" ] && [ "$REV" -gt "$LIVE_REV" ]; then
	fail revision "the snapshot's revision $REV is above the live cluster's newest revision $LIVE_REV: it is not this cluster's history (revisions never go back)"
	KV_SNAP=
fi
# A KV hash covers the keys between the compact revision and the revision
# asked for: it compares only between the same two revisions (etcd's own
# corruption check skips members compacted elsewhere).
if [ -n "$KV_SNAP" ]; then
	live "$SCRATCH/hashkv" endpoint hashkv --rev="$REV"
	DIFFER=
	COMPARED=0
	while IFS= read -r line; do
		h=$(digits "$(printf '%s' "$line" | json_field hash)")
		c=$(printf '%s' "$line" | json_field compact_revision)
		[ -n "$h" ] || continue
		if [ "$c" != "$SNAP_COMPACT" ]; then
			note "kv-hash of $(printf '%s' "$line" | endpoint_of): compacted to $c since the save (the snapshot's compact revision is $SNAP_COMPACT)"
			continue
		fi
		COMPARED=$((COMPARED + 1))
		KV_LIVE=$h
		[ "$h" = "$KV_SNAP" ] || DIFFER="$DIFFER${DIFFER:+, }$(printf '%s' "$line" | endpoint_of) has $h"
	done <"$SCRATCH/hashkv"
	if [ -n "$DIFFER" ]; then
		KV_LIVE=
		fail kv-hash "the snapshot's KV hash at revision $REV is $KV_SNAP, and live members at the same compact revision differ ($DIFFER): the snapshot is not this cluster's history, or a member diverged"
	elif [ "$COMPARED" -eq 0 ]; then
		note "kv-hash: no live member gave a comparable KV hash at revision $REV ($(first_error "$SCRATCH/hashkv.err"))"
	fi
fi

# 5. The restore's own flags: the bump and --mark-compacted (etcd-init's).
if [ -n "$TRIAL" ] && [ -z "$FAILURES" ] && [ -n "$BUMP" ] && [ "$BUMP" != 0 ]; then
	if "$TOOL" snapshot restore --help 2>&1 | grep -q -- --bump-revision; then
		trial "$SCRATCH/bumped" --bump-revision "$BUMP" --mark-compacted ||
			trial_refused "$TOOL snapshot restore --bump-revision $BUMP --mark-compacted"
		rm -rf -- "$SCRATCH/bumped"
	fi
fi

num() { if [ -n "$1" ]; then printf '%s' "$1"; else printf null; fi; }
str() { if [ -n "$1" ]; then printf '"%s"' "$(json_text "$1")"; else printf null; fi; }
VERIFIED=true
[ -z "$FAILURES" ] || VERIFIED=false
MANIFEST=$(printf '{"verified":%s,"enforced":%s,"backup":%s,"hostedControlPlane":{"namespace":%s,"name":%s},"file":{"bytes":%s,"sha256":%s},"snapshot":{"revision":%s,"totalKey":%s,"hash":%s,"storageVersion":%s},"kvHash":{"snapshot":%s,"live":%s},"live":{"clusterId":%s,"revision":%s,"version":%s},"encryptionKeys":%s,"tool":%s,"failures":[%s],"notChecked":[%s]}' \
	"$VERIFIED" "$ENFORCE" "$(str "${BACKUP_NAME:-}")" \
	"$(str "${HCP_NAMESPACE:-}")" "$(str "${HCP_NAME:-}")" "$SIZE" "$(str "$SHA")" \
	"$(num "$REV")" "$(num "$KEYS")" "$(num "$STATUS_HASH")" "$(str "$STORAGE")" \
	"$(num "$KV_SNAP")" "$(num "$KV_LIVE")" "$(str "$CLUSTER_ID")" "$(num "$LIVE_REV")" "$(str "$LIVE_VERSION")" \
	"$(str "$(printf '%s' "$ENC" | sed 's/ $//')")" "$(str "$TOOL ${TOOL_VERSION:-}")" "$FAILURES" "$NOTES")
printf '%s\n' "$MANIFEST"
printf '%s\n' "$MANIFEST" >"$SNAP.manifest.json" 2>/dev/null || log "could not write $SNAP.manifest.json"
# The termination message holds 4096 bytes: the notes go first when it is longer.
SHORT=$MANIFEST
[ ${#SHORT} -le 4000 ] || SHORT=$(printf '%s' "$MANIFEST" | sed 's/,"notChecked":\[.*\]}$/,"notChecked":["see the log"]}/')
printf '%s\n' "$SHORT" >"$RESULT_FILE" 2>/dev/null || true
DONE=yes
if [ "$VERIFIED" = true ]; then
	log "verified: revision $REV, $KEYS keys, sha256 $SHA"
	exit 0
fi
if [ "$ENFORCE" = true ]; then
	log "the snapshot did not verify: the backup fails and nothing is uploaded"
	exit 1
fi
log "the snapshot did not verify (warn mode: the upload goes on; set the rule backup-verified to deny to stop it)"
exit 0
