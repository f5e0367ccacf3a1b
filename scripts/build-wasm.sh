#!/usr/bin/env bash
# Builds the Kubewarden policy module from the same decision core:
#   target: wasm32-wasip1, profile `wasm` (opt-level s, LTO, stripped)
#   output: $CARGO_TARGET_DIR/policy/hcp-etcd-admission.wasm (path printed last)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
cargo rustc --locked --quiet --lib --profile wasm --target wasm32-wasip1 \
  --no-default-features --features wasm --crate-type cdylib
mkdir -p "$CARGO_TARGET_DIR/policy"
cp "$CARGO_TARGET_DIR/wasm32-wasip1/wasm/hcp_etcd_admission.wasm" "$CARGO_TARGET_DIR/policy/hcp-etcd-admission.wasm"
size=$(wc -c < "$CARGO_TARGET_DIR/policy/hcp-etcd-admission.wasm")
echo "policy module: $size bytes" >&2
echo "$CARGO_TARGET_DIR/policy/hcp-etcd-admission.wasm"
