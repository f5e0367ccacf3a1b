//! The annotate step of scripts/build-wasm.sh: writes a Kubewarden metadata
//! file into a Wasm module as `kwctl annotate` does: a custom section named
//! `io.kubewarden.metadata` (the name Kubewarden's policy-evaluator reads)
//! holding the metadata as JSON with the `protocolVersion` kwctl detects
//! (`v1`: the policy's `protocol_version` export, checked by the tests),
//! appended to the module (runtimes ignore custom sections). No registry and
//! no kwctl needed.
//!
//! usage: cargo run --example annotate -- METADATA.yml IN.wasm OUT.wasm

const SECTION: &[u8] = b"io.kubewarden.metadata";

/// What the policy's `protocol_version` export answers (kwctl asks it).
const PROTOCOL_VERSION: &str = "v1";

fn leb128(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [meta, src, dst] = args.as_slice() else {
        return Err("usage: annotate METADATA.yml IN.wasm OUT.wasm".into());
    };
    let mut metadata: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(meta)?)?;
    let Some(fields) = metadata.as_object_mut() else {
        return Err(format!("{meta}: the metadata is not a mapping").into());
    };
    fields.insert("protocolVersion".into(), PROTOCOL_VERSION.into());
    let payload = serde_json::to_vec(&metadata)?;
    let mut module = std::fs::read(src)?;
    if !module.starts_with(b"\0asm") {
        return Err(format!("{src} is not a Wasm module").into());
    }
    let mut body = Vec::new();
    leb128(SECTION.len(), &mut body);
    body.extend_from_slice(SECTION);
    body.extend_from_slice(&payload);
    module.push(0);
    leb128(body.len(), &mut module);
    module.extend_from_slice(&body);
    std::fs::write(dst, module)?;
    eprintln!("annotated {dst} with {meta} ({} bytes of metadata)", payload.len());
    Ok(())
}
