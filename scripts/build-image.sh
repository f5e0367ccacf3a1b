#!/usr/bin/env bash
# Builds the container image offline and smoke-tests the binary in it.
#
#   scripts/build-image.sh [TAG]     (default: the image webhooks/base names,
#                                     quay.io/hcp-etcd-admission/hcp-etcd-admission:<crate version>)
#
# 1. cargo builds a static x86_64-unknown-linux-musl release binary;
# 2. buildah (vfs storage, chroot isolation: no daemon, no registry, works as
#    root in an unprivileged CI container) builds Containerfile FROM scratch;
# 3. the image is checked: a numeric non-root USER, one file, a static binary
#    that runs `--version` and `review` from inside the image's filesystem
#    (buildah mount), and `buildah run` of the entrypoint as that user.
# Storage lives under $CARGO_TARGET_DIR/buildah, so nothing global is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
target=x86_64-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
tag="${1:-quay.io/hcp-etcd-admission/hcp-etcd-admission:$version}"

command -v buildah >/dev/null || { echo "buildah not installed (Debian: apt-get install buildah)" >&2; exit 1; }
cargo build --release --locked --target "$target" --bin hcp-etcd-admission
bin="$CARGO_TARGET_DIR/$target/release/hcp-etcd-admission"

# Static: no program interpreter, no shared libraries.
if readelf -l "$bin" | grep -q 'INTERP'; then
  echo "$bin is dynamically linked" >&2; exit 1
fi

store="$CARGO_TARGET_DIR/buildah"
b() { buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }
ctx=$(mktemp -d)
ctr=""
cleanup() {
  if [ -n "$ctr" ]; then b rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$ctx"
}
trap cleanup EXIT
cp Containerfile "$ctx/"
# Symbols are not needed in the image.
strip -o "$ctx/hcp-etcd-admission" "$bin"
# One image per tag: the previous build's layers are dropped.
b rmi -f "$tag" >/dev/null 2>&1 || true
b bud --quiet --isolation chroot --layers=false -f "$ctx/Containerfile" -t "$tag" "$ctx" >/dev/null

user=$(b inspect --type image --format '{{.OCIv1.Config.User}}' "$tag")
[[ "$user" =~ ^[1-9][0-9]*:[0-9]+$ ]] || { echo "image USER is '$user', want numeric non-root uid:gid" >&2; exit 1; }
entry=$(b inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$tag")
[ "$entry" = '[/hcp-etcd-admission]' ] || { echo "entrypoint is $entry" >&2; exit 1; }

ctr=$(b from --quiet "$tag")
mnt=$(b mount "$ctr")
files=$(cd "$mnt" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$files" = "./hcp-etcd-admission " ] || { echo "unexpected image contents: $files" >&2; exit 1; }
# Outputs are captured first: `grep -q` closing the pipe early would fail the writer.
out=$("$mnt/hcp-etcd-admission" --version)
grep -q "hcp-etcd-admission $version" <<<"$out"
out=$("$mnt/hcp-etcd-admission" review tests/reviews/hcpetcdbackup-create-s3.json)
grep -Eq '"allowed": ?true' <<<"$out"
out=$("$mnt/hcp-etcd-admission" review tests/reviews/hcpetcdbackup-create-invalid.json)
grep -Eq '"allowed": ?false' <<<"$out"
# The entrypoint as the image's user, in the image's root (chroot isolation).
out=$(b run --isolation chroot "$ctr" -- /hcp-etcd-admission --version)
grep -q "hcp-etcd-admission $version" <<<"$out"
# OpenShift restricted-v2: an arbitrary UID with GID 0 and no supplementary
# groups, a read-only root, TLS files mounted group-0-readable. The image's
# own binary serves and answers a review.
uid=1000730000
# The image's own file is what an arbitrary UID in group 0 must be able to
# run: 0755 root:0 (the Containerfile's COPY --chown=0:0 --chmod=0755).
mode=$(stat -c '%a %u:%g' "$mnt/hcp-etcd-admission")
[ "$mode" = "755 0:0" ] || { echo "the image's binary is $mode, not 755 0:0" >&2; exit 1; }
# The image itself, run as that UID with GID 0 (the image's root, chroot
# isolation), answers a review given on stdin.
out=$(b run --isolation chroot --user "$uid:0" "$ctr" -- /hcp-etcd-admission review - <tests/reviews/hcpetcdbackup-create-invalid.json)
grep -Eq '"allowed": ?false' <<<"$out" || { echo "the image under uid $uid gid 0 did not answer: $out" >&2; exit 1; }
# Serving needs TLS files the image does not hold: the binary is copied out
# of the mount (buildah's storage directories are root-only) and served
# under the same UID and GID.
tls=$(mktemp -d)
chmod 0755 "$tls"
"$mnt/hcp-etcd-admission" certs --out "$tls" --service localhost --namespace x >/dev/null 2>&1
chgrp 0 "$tls"/*; chmod 0640 "$tls"/*
cp "$mnt/hcp-etcd-admission" "$tls/bin"; chmod 0755 "$tls/bin"
port=$((20000 + RANDOM % 20000))
(cd / && exec setpriv --reuid="$uid" --regid=0 --clear-groups "$tls/bin" serve \
   --listen "127.0.0.1:$port" --tls-cert "$tls/tls.crt" --tls-key "$tls/tls.key" \
   --watch-hostedcontrolplanes never --drain-seconds 0) 2>"$tls/serve.log" &
srv=$!
for _ in $(seq 50); do curl -sf --cacert "$tls/ca.crt" "https://localhost:$port/readyz" >/dev/null && break; sleep 0.2; done
out=$(curl -sf --cacert "$tls/ca.crt" -H 'Content-Type: application/json' \
  --data @tests/reviews/hcpetcdbackup-create-s3.json "https://localhost:$port/validate/hcpetcdbackups")
kill "$srv"; wait "$srv" || true
grep -Eq '"allowed": ?true' <<<"$out" || { echo "no answer under uid $uid gid 0: $(cat "$tls/serve.log")" >&2; exit 1; }
rm -rf "$tls"
b umount "$ctr" >/dev/null
size=$(stat -c %s "$ctx/hcp-etcd-admission")
echo "built $tag (USER $user, static binary $size bytes) and ran it, also under uid $uid gid 0"
