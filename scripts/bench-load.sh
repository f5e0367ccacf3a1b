#!/usr/bin/env bash
# The load benchmark, one command: release `serve` vs the floor server, with
# wrk and hey on loopback. `--quick` (CI) runs 1 s per phase; default 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
for tool in wrk hey; do
  command -v "$tool" >/dev/null || { echo "$tool missing: apt-get install wrk hey" >&2; exit 1; }
done
cargo build --locked --quiet --release --bin hcp-etcd-admission --example floor --example bench_load
exec "$CARGO_TARGET_DIR/release/examples/bench_load" "$@"
