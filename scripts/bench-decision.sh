#!/usr/bin/env bash
# The decision benchmark with everything it compares, built in the same run:
#   the shipped policy module and the module before pre-initialisation (scripts/build-wasm.sh),
#   the yardstick: a minimal Kubewarden SDK policy (benches/yardstick, same `wasm` profile),
# then `cargo bench --bench decision` and the tables (scripts/bench-report.py).
#   --quick: each benchmark runs once (what CI runs, so it cannot rot; no tables).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
quick=false
[ "${1:-}" = "--quick" ] && quick=true
scripts/build-wasm.sh >/dev/null
cargo build --locked --quiet --manifest-path benches/yardstick/Cargo.toml --lib --profile wasm --target wasm32-wasip1
cp "$CARGO_TARGET_DIR/wasm32-wasip1/wasm/kw_yardstick.wasm" "$CARGO_TARGET_DIR/policy/kw-yardstick.wasm"
if $quick; then
  cargo bench --locked --bench decision -- --test
else
  cargo bench --locked --bench decision
  scripts/bench-report.py
fi
