#!/usr/bin/env bash
# Builds the Kubewarden policy module from the same decision core:
#   target: wasm32-wasip1, profile `wasm` (opt-level 3, LTO, stripped; the yardstick uses the same)
#   then pre-initialises it (examples/preinit.rs, wasmtime-wizer): the module's
#   `wizer-initialize` compiles every schema, CEL rule and regex once, and the
#   snapshot is what ships, so a fresh instance (one per request in Kubewarden's
#   policy-server) starts warm.
#   output: $CARGO_TARGET_DIR/policy/hcp-etcd-admission.wasm (path printed last);
#           the module before pre-initialisation is kept beside it as
#           hcp-etcd-admission.uninitialised.wasm (the benchmark's "before"),
#           and the annotated module (metadata.yml written into its
#           `io.kubewarden.metadata` section, as `kwctl annotate` does) as
#           hcp-etcd-admission.annotated.wasm: what a release pushes.
#   HCP_POLICY_OUT overrides the output directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hcp-etcd-admission/target}"
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
# Panic locations without this machine's paths (scripts/wasm-rustflags.sh says
# why), added to any flags the caller set for the target (`RUSTFLAGS` would
# override them all: not used here).
cargo fetch --locked --quiet
remap=$(scripts/wasm-rustflags.sh)
if [ -n "${RUSTFLAGS:-}" ]; then
  echo "build-wasm.sh: RUSTFLAGS is set and overrides the module's flags; use CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS" >&2
fi
export CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS="${CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS:-} $remap"
cargo rustc --locked --quiet --lib --profile wasm --target wasm32-wasip1 \
  --no-default-features --features wasm --crate-type cdylib
out="${HCP_POLICY_OUT:-$CARGO_TARGET_DIR/policy}"
mkdir -p "$out"
cp "$CARGO_TARGET_DIR/wasm32-wasip1/wasm/hcp_etcd_admission.wasm" "$out/hcp-etcd-admission.uninitialised.wasm"
# Same profile and features as `cargo test`: the wasmtime it needs is the one the tests build.
cargo run --locked --quiet --example preinit -- \
  "$out/hcp-etcd-admission.uninitialised.wasm" "$out/hcp-etcd-admission.wasm"
cargo run --locked --quiet --example annotate -- metadata.yml "$out/hcp-etcd-admission.wasm" "$out/hcp-etcd-admission.annotated.wasm"
size=$(wc -c < "$out/hcp-etcd-admission.wasm")
echo "policy module: $size bytes (pre-initialised)" >&2
echo "$out/hcp-etcd-admission.wasm"
