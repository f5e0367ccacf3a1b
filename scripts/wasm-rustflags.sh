#!/usr/bin/env bash
# RUSTFLAGS for the Kubewarden module and the yardstick (the same, so both are
# built alike): panic locations name dependency files relative to their crate
# (`serde_json-1.0.x/src/de.rs`), not by this machine's paths (std's are
# `/rustc/<commit>/library/…` already, and stay so).
# *Why:* those file names are string literals the module keeps among the ones
# every request reads; the machine's prefixes (~8 KB of them) pushed them across
# a 64 KiB boundary, and a fresh instance maps each 64 KiB window it reads
# (BENCHMARKS.md, issue #35). It also makes the module independent of where it
# was built. Run from the repository root, after `cargo fetch` (the registry's
# source folder must exist to be named). A prefix with white space is left out
# (cargo splits RUSTFLAGS on it): the module is the same, laid out less well.
set -euo pipefail
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
flags=()
for src in "$cargo_home"/registry/src/*/ "$cargo_home"/git/checkouts/; do
  case "$src" in *[[:space:]]*) continue ;; esac
  [ -d "$src" ] && flags+=("--remap-path-prefix=${src}=")
done
echo "${flags[*]-}"
