#!/usr/bin/env bash
# The decision benchmark with everything it compares, built in the same run:
#   the shipped policy module and the module before pre-initialisation (scripts/build-wasm.sh),
#   the yardstick: a minimal Kubewarden SDK policy (benches/yardstick, same `wasm` profile),
# then `cargo bench --bench decision` and the tables (scripts/bench-report.py), then
# `cargo bench --bench fresh_profile` (a fresh instance's set-up and first call, against the yardstick).
#   --quick: each benchmark runs once (what CI runs, so it cannot rot; no tables).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
quick=false
[ "${1:-}" = "--quick" ] && quick=true
scripts/build-wasm.sh >/dev/null
# Built as the module is (same profile, same flags; build-wasm.sh fetched the crates).
remap=$(scripts/wasm-rustflags.sh)
CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="${CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS:-} $remap" \
  cargo build --locked --quiet --manifest-path benches/yardstick/Cargo.toml --lib --profile wasm --target wasm32-wasip1
cp "$CARGO_TARGET_DIR/wasm32-wasip1/wasm/kw_yardstick.wasm" "$CARGO_TARGET_DIR/policy/kw-yardstick.wasm"
if $quick; then
  cargo bench --locked --bench decision -- --test
  cargo bench --locked --bench fresh_profile -- 10 >/dev/null
else
  cargo bench --locked --bench decision
  scripts/bench-report.py
  # Where a fresh instance's time goes (set-up, first call, faults), against the yardstick.
  cargo bench --locked --bench fresh_profile -- 2000
fi
