#!/usr/bin/env bash
# A release, built offline into dist/<version>/ (nothing is pushed or signed
# here: a build machine holds no registry credentials or signing keys;
# docs/release.md says how to sign and push what this writes).
#
#   scripts/release.sh --check [VERSION]   the release discipline only (CI runs it):
#                                          VERSION (default: Cargo.toml's) is the crate's,
#                                          CHANGELOG.md has a "## [VERSION] - YYYY-MM-DD"
#                                          section, and the manifests name that version
#                                          (tests/manifests.rs holds the rest equal)
#   scripts/release.sh VERSION [--tag]     the checks, a clean tree, then:
#     hcp-etcd-admission-<v>-x86_64-linux-musl   the static binary (the image's)
#     hcp-etcd-admission-<v>.oci.tar             the image (scripts/build-image.sh, smoke-tested)
#     hcp-etcd-admission-<v>.wasm                the Kubewarden module, annotated (metadata.yml
#                                                in its io.kubewarden.metadata section)
#     crds.yaml, install-<flavour>.yaml          the CRDs; webhooks/install/<flavour>/gitops rendered
#                                                (openshift, kubernetes)
#     SHA256SUMS                                 of every file above
#   --tag: an annotated tag v<VERSION> whose message is the CHANGELOG section.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"

crate=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
check_only=false
tag=false
version=""
for a in "$@"; do
  case $a in
  --check) check_only=true ;;
  --tag) tag=true ;;
  -*) echo "unknown option $a (see the header of $0)" >&2; exit 2 ;;
  *) version=$a ;;
  esac
done
if [ -z "$version" ]; then
  $check_only || { echo "usage: $0 VERSION [--tag] | $0 --check [VERSION]" >&2; exit 2; }
  version=$crate
fi

fail() { echo "release $version: $*" >&2; exit 1; }
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "not a semantic version (MAJOR.MINOR.PATCH[-pre])"
[ "$version" = "$crate" ] || fail "Cargo.toml says $crate: bump the crate, the image tag and the Kubewarden metadata together (tests/manifests.rs checks they agree)"
grep -Eq "^## \[$(printf '%s' "$version" | sed 's/\./\\./g')\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md ||
  fail "CHANGELOG.md has no \"## [$version] - YYYY-MM-DD\" section: move [Unreleased] there, upgrade notes included"
grep -q "hcp-etcd-admission:$version\"\?$\|newTag: \"\?$version\"\?$" webhooks/base/kustomization.yaml ||
  fail "webhooks/base/kustomization.yaml does not name image tag $version"
grep -q "^version: $version$" artifacthub-pkg.yml || fail "artifacthub-pkg.yml is not at version $version"
if $check_only; then
  echo "release $version: version, CHANGELOG section and manifests agree"
  exit 0
fi

[ -z "$(git status --porcelain)" ] || fail "the tree is not clean: release only what is committed"
if git rev-parse -q --verify "refs/tags/v$version" >/dev/null; then
  [ "$(git rev-parse "v$version^{commit}")" = "$(git rev-parse HEAD)" ] || fail "tag v$version exists on another commit"
fi

out="dist/$version"
rm -rf "$out"
mkdir -p "$out"
image="quay.io/hcp-etcd-admission/hcp-etcd-admission:$version"
scripts/build-image.sh "$image"
cp "$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/hcp-etcd-admission" "$out/hcp-etcd-admission-$version-x86_64-linux-musl"
store="$CARGO_TARGET_DIR/buildah"
buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs \
  push --quiet "$image" "oci-archive:$out/hcp-etcd-admission-$version.oci.tar:$image"
scripts/build-wasm.sh >/dev/null
cp "$CARGO_TARGET_DIR/policy/hcp-etcd-admission.annotated.wasm" "$out/hcp-etcd-admission-$version.wasm"
cat crds/*.yaml >"$out/crds.yaml"
kubectl=${KUBECTL:-$(command -v kubectl || echo "$HOME/.cache/hcp-etcd-admission/tools/kube-1.35/kubectl")}
for flavour in openshift kubernetes; do
  "$kubectl" kustomize "webhooks/install/$flavour/gitops" >"$out/install-$flavour.yaml"
done
(cd "$out" && sha256sum -- * >SHA256SUMS)

if $tag; then
  notes=$(awk -v v="## [$version]" 'index($0, v) == 1 { on = 1; next } on && /^## \[/ { exit } on' CHANGELOG.md)
  git tag -a "v$version" -m "hcp-etcd-admission $version" -m "$notes"
  echo "tagged v$version (push it with: git push origin v$version)"
fi
echo "release $version written to $out:"
cat "$out/SHA256SUMS"
