#!/usr/bin/env bash
# The whole test suite: formatting, lints, CRD drift, the Wasm build of the
# decision core, and every test. CI runs exactly this (after .ci/run installs
# what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Environment-bound suites (real etcd, root, shellcheck, the Wasm module) skip
# themselves under a plain `cargo test` when their tools are missing; here a
# missing tool fails the run (tests/common/env.rs).
export HCP_REQUIRE_ALL_SUITES=1

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, -D warnings)"
cargo clippy --locked --all-targets -- -D warnings

step "cargo clippy (the Wasm policy shell)"
cargo clippy --locked --lib --target wasm32-wasip1 --no-default-features --features wasm -- -D warnings

# Default features (all targets) and wasm on wasm32-wasip1 are checked by the clippy steps above.
step "every other feature combination Cargo.toml offers builds (cargo check)"
cargo check --locked --lib --no-default-features
cargo check --locked --lib --bins --no-default-features --features cli
cargo check --locked --lib --bins --no-default-features --features cli,mimalloc
cargo check --locked --lib --bins --no-default-features --features server
cargo check --locked --lib --no-default-features --features wasm

step "CRD drift check (crds/ must match src/api)"
cargo run --locked --quiet -- crd --check

step "decision core builds for wasm32-wasip1 (no I/O below the shells)"
cargo build --locked --lib --target wasm32-wasip1 --no-default-features

step "Kubewarden policy module (wasm32-wasip1, pre-initialised with wasmtime-wizer; the tests load it)"
scripts/build-wasm.sh >/dev/null

step "real kube-apiserver and etcd 3.5/3.6/3.7 (scripts/go-tools.sh; cached after the first build)"
scripts/go-tools.sh

step "container image: static musl binary FROM scratch, built offline with buildah and smoke-tested (tests/real_cluster.rs runs it on a real kubelet)"
scripts/build-image.sh

step "cargo test (library, binary and integration tests)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --lib --bins --tests 2>&1 | tee "$log"

step "benchmarks, quick mode: each runs once so they cannot rot (no timing assertions)"
scripts/bench-decision.sh --quick
scripts/bench-load.sh --quick

passed=$(grep -Eo 'test result: [a-z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo 'passed; [0-9]+ failed' "$log" | awk '{s += $2} END {print s + 0}')
printf '\ntests: %s passed, %s failed\n' "$passed" "$failed"
