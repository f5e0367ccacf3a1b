#!/usr/bin/env bash
# The adversarial harness at a larger scale, on the release binary: `serve`
# in a 384 MiB memory cgroup (the Deployment's limit), generated hostile
# inputs for every endpoint and shape from four sources, a victim's real
# reviews throughout (tests/bounded_under_limit.rs). Prints the peak memory,
# the server CPU per input byte and the victim's worst latency: the numbers
# the README's sizing section states. Needs root and cgroup v1 memory.
#   scripts/adversarial.sh [scale (default 4: 4 x 128 MiB of input)] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
cargo build --locked --release --bin hcp-etcd-admission
export HCP_ADVERSARIAL_BIN="$CARGO_TARGET_DIR/release/hcp-etcd-admission"
export HCP_ADVERSARIAL_SCALE="${1:-4}"
[ -n "${2:-}" ] && export HCP_ADVERSARIAL_SEED="$2"
export HCP_REQUIRE_ALL_SUITES=1
cargo test --locked --test bounded_under_limit -- --nocapture 2>&1 | grep -E 'adversarial harness|test result|panicked'
