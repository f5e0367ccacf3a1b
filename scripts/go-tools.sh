#!/usr/bin/env bash
# Builds the real components the test suites run: kube-apiserver (1.34, 1.35;
# 1.35 also kubectl, whose kustomize renders the manifests in tests/manifests.rs),
# etcd (3.5.35, 3.6, 3.7: etcd, etcdctl, etcdutl), promtool (the alerts
# of the PrometheusRule evaluated on test series) and the one-node cluster of
# tests/real_cluster.rs (kubelet, kube-controller-manager, kube-scheduler,
# kube-proxy 1.35;
# containerd 2.4 with ctr and its runc shim; CoreDNS with the cluster-DNS plugins), each as a Go tool of its own
# small module under tests/tools/<name>/ (pinned in its go.mod/go.sum), into
#   $HOME/.cache/hcp-etcd-admission/tools/<name>/
# and reuses what is there. No binary is ever written into the clone.
#
#   scripts/go-tools.sh            build every tool that is missing
#   scripts/go-tools.sh --print    print the bin dirs (one "name=dir" a line)
#   scripts/go-tools.sh NAME...    build only these (e.g. kube-1.35 etcd-3.6)
#
# Each module is built alone (GOWORK=off) so minimal version selection never
# moves the pinned dependencies; GOTOOLCHAIN=local so no toolchain is fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=${HCP_CACHE:-$HOME/.cache/hcp-etcd-admission}
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOCACHE=${GOCACHE_OVERRIDE:-$cache/go/build} GOMODCACHE=${GOMODCACHE_OVERRIDE:-$cache/go/mod}

all=(etcd-3.6 etcd-3.7 etcd-3.5 promtool kube-1.35 kube-1.34 kube-1.36 kube-1.37 node-1.35 containerd-2.4 coredns)
if [ "${1:-}" = "--print" ]; then
  for n in "${all[@]}"; do echo "$n=$cache/tools/$n"; done
  exit 0
fi
# One build at a time: a second caller (.ci/run starts one in the background)
# waits here, then finds everything cached.
mkdir -p "$cache"
exec 9>"$cache/go-tools.lock"
flock 9
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=("${all[@]}")

# Kubernetes commands of module $1 into $2, built as the release builds them:
# no cloud providers, the version stamped from the module's k8s.io/kubernetes.
kube_build() {
  local mod=$1 out=$2; shift 2
  local v; v=$(sed -n 's/^\s*k8s.io\/kubernetes v\([0-9.]*\).*/\1/p' "$mod/go.mod" | head -1)
  local minor; minor=$(echo "$v" | cut -d. -f2)
  local pkg=k8s.io/component-base/version
  (cd "$mod" && go build -trimpath -tags providerless \
    -ldflags "-s -w -X $pkg.gitVersion=v$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
    -o "$out/" "$@")
}

build_one() {
  local n=$1 mod=$root/tests/tools/$1 out=$cache/tools/$1
  # A module's own Go files (coredns/main.go) are part of what is built
  # (their names have no spaces).
  local stamp
  # shellcheck disable=SC2046
  stamp=$(cat "$mod/go.mod" "$mod/go.sum" $(find "$mod" -maxdepth 1 -name '*.go' | sort) | sha256sum | cut -c1-16)
  if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
    echo "$n: cached in $out"; return 0
  fi
  local t0=$SECONDS tmp=$out.tmp
  rm -rf "$tmp"; mkdir -p "$tmp"
  case $n in
    etcd-*)
      (cd "$mod" && go build -trimpath -o "$tmp/" \
        go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3)
      mv "$tmp/v3" "$tmp/etcd" 2>/dev/null || mv "$tmp/server" "$tmp/etcd"
      "$tmp/etcd" --version | head -1 ;;
    promtool)
      # No service discovery plugins: promtool's rule checks and unit tests need none.
      (cd "$mod" && go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$tmp/" \
        github.com/prometheus/prometheus/cmd/promtool)
      "$tmp/promtool" --version | head -1 ;;
    node-*)
      # The node's components, built like kube-apiserver.
      kube_build "$mod" "$tmp" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy
      "$tmp/kubelet" --version ;;
    coredns)
      # CoreDNS with the cluster-DNS plugins only (main.go); the same server code.
      (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" .)
      "$tmp/coredns" -version | sed -n 1p ;;
    containerd-*)
      # Static, as containerd's release builds are; no btrfs snapshotter (overlayfs here).
      local v; v=$(sed -n 's/^\s*github.com\/containerd\/containerd\/v2 \(v[0-9.]*\).*/\1/p' "$mod/go.mod" | head -1)
      local ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$v"
      (cd "$mod" && go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs" -ldflags "$ld" \
        -o "$tmp/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr)
      (cd "$mod" && go build -trimpath -tags "urfave_cli_no_docs osusergo netgo static_build no_grpc" -ldflags "$ld" \
        -o "$tmp/" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
      "$tmp/containerd" --version ;;
    kube-*)
      # shellcheck disable=SC2046
      kube_build "$mod" "$tmp" k8s.io/kubernetes/cmd/kube-apiserver \
        $(grep -q 'cmd/kubectl' "$mod/go.mod" && echo k8s.io/kubernetes/cmd/kubectl)
      "$tmp/kube-apiserver" --version
      if [ -x "$tmp/kubectl" ]; then "$tmp/kubectl" version --client | head -2; fi ;;
    *) echo "unknown tool $n" >&2; return 2 ;;
  esac
  echo "$stamp" > "$tmp/.stamp"
  rm -rf "$out"; mv "$tmp" "$out"
  echo "$n: built in $((SECONDS - t0)) s into $out"
}

for n in "${names[@]}"; do build_one "$n"; done
