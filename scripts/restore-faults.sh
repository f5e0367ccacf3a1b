#!/usr/bin/env bash
# The long run of the seeded fault schedules (issue #28, part 4;
# tests/restore_etcd/faults.rs) on real etcd 3.5, 3.6 and 3.7 at once:
# HCP_FAULT_SCHEDULES schedules (default 20) of HCP_FAULT_STEPS faults
# (default 16) per version. Every schedule prints its seed; replay one with
#   HCP_FAULT_SEED=<seed> HCP_FAULT_SCHEDULES=1 HCP_FAULT_STEPS=<steps> \
#     cargo test --test restore_etcd fault_schedules_etcd36 -- --nocapture
# CI runs one schedule of 12 faults per version (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
export HCP_FAULT_SCHEDULES="${HCP_FAULT_SCHEDULES:-20}" HCP_FAULT_STEPS="${HCP_FAULT_STEPS:-16}"
export HCP_REQUIRE_ALL_SUITES=1
scripts/go-tools.sh >/dev/null
log="${TMPDIR:-/tmp}/restore-faults-$$.log"
echo "full output (every schedule's trace, a failure's report): $log"
cargo test --locked --test restore_etcd fault_schedules -- --nocapture --test-threads=3 2>&1 | tee "$log" |
	grep -E '^(== fault schedule|fault schedules on|test |test result)|panicked'
