#!/usr/bin/env bash
# The etcd image the one-node cluster runs (scripts/real-cluster.sh), built
# offline: etcd, etcdctl and etcdutl as scripts/go-tools.sh builds them, in
# /usr/bin as in OpenShift's etcd image, and the tools the pod's scripts use
# (upstream's ensure-dns, reset-member and etcd-init; this project's
# etcd-init.sh): bash as /bin/bash, dash as /bin/sh, curl, coreutils, grep,
# sed, awk, find, getent, with the shared libraries they load, from this
# Debian machine. FROM scratch with buildah (vfs storage in the cache); written
# as a docker-archive for `ctr images import`.
#
#   scripts/etcd-image.sh VERSION OUT.tar [EXTRA_CA.pem]
#
# VERSION: 3.6 (etcd-3.6) or 3.7, 3.5. EXTRA_CA.pem: a CA appended to curl's
# trust bundle (the restore loop's snapshot store, tests/real_restore_loop.rs:
# etcd-init downloads with the image's trust, as in production).
#
# The image is named localhost/hcp-test/etcd:VERSION.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?usage: etcd-image.sh VERSION OUT.tar}
out=${2:?usage: etcd-image.sh VERSION OUT.tar [EXTRA_CA.pem]}
extra_ca=${3:-}
[ -z "$extra_ca" ] || [ -f "$extra_ca" ] || { echo "etcd-image: $extra_ca: no such file" >&2; exit 2; }
bin=$("$root/scripts/go-tools.sh" --print | sed -n "s/^etcd-$version=//p")
[ -x "$bin/etcd" ] || { echo "etcd-image: $bin/etcd missing (scripts/go-tools.sh etcd-$version)" >&2; exit 3; }
cache=${HCP_CACHE:-$HOME/.cache/hcp-etcd-admission}/real-cluster
tag=localhost/hcp-test/etcd:$version
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT

# A host program and every shared library it loads, at the same paths.
add() {
  local f
  for f in "$@"; do
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
    ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
      [ -e "$rootfs$lib" ] && continue
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
    done
  done
}
progs=(/bin/bash /usr/bin/curl /usr/bin/grep /usr/bin/sed /usr/bin/find /usr/bin/getent /usr/bin/mawk)
mapfile -t core < <(dpkg -L coreutils | grep -E '^/(usr/)?bin/' | while read -r p; do [ -f "$p" ] && [ ! -L "$p" ] && echo "$p"; done)
add "${progs[@]}" "${core[@]}" /bin/dash
# Usual names: sh is dash (POSIX), awk is mawk.
ln -s dash "$rootfs/bin/sh"
ln -s mawk "$rootfs/usr/bin/awk"
for b in etcd etcdctl etcdutl; do
  cp "$bin/$b" "$rootfs/usr/bin/$b"
done
# curl's TLS trust (the snapshot server's CA is mounted by the tests where needed),
# name service (getent hosts), a writable /tmp, /var/lib/etcd.
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/var/lib/etcd" "$rootfs/etc"
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" 2>/dev/null || true
[ -z "$extra_ca" ] || cat "$extra_ca" >> "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/bin/sh\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"
# libnss_dns/libnss_files for getent: glibc loads them by name.
for l in /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2 /lib/x86_64-linux-gnu/libresolv.so.2; do
  [ -e "$l" ] && add "$l"
done

b() { buildah --root "$cache/buildah/root" --runroot "$cache/buildah/run" --storage-driver vfs "$@"; }
c=$(b from --quiet scratch)
b copy --quiet "$c" "$rootfs/" / >/dev/null
b config --entrypoint '[]' --cmd '["/usr/bin/etcd"]' --env PATH=/usr/local/bin:/usr/bin:/bin "$c"
b rmi -f "$tag" >/dev/null 2>&1 || true
b commit --quiet "$c" "$tag" >/dev/null
b rm "$c" >/dev/null
rm -f "$out"
b push --quiet "$tag" "docker-archive:$out:$tag"
# The image runs what the scripts run.
c=$(b from --quiet "$tag")
b run --isolation chroot "$c" -- /bin/sh -c 'etcd --version | head -1; etcdutl version | head -1; curl --version | head -1; bash -c "echo \${BASH_VERSION%%.*}"; echo x | awk "{print}" | sha256sum | cut -c1-8' >&2
b rm "$c" >/dev/null
echo "$tag -> $out" >&2
