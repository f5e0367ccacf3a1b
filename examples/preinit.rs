//! Build tool, run by scripts/build-wasm.sh: pre-initialises the Kubewarden
//! policy module with wasmtime-wizer.
//!
//! `cargo run --example preinit -- IN.wasm OUT.wasm` checks that IN holds
//! the embedded files first in its memory (`embedded_text::check_first_data`:
//! fails the build otherwise), instantiates IN in
//! wasmtime, calls its `wizer-initialize` export (src/kubewarden/preinit.rs: compiles
//! every schema, CEL rule and regex and decides a few sample requests) and
//! writes OUT: the same waPC module (same imports, `wapc_init`,
//! `__guest_call`; the init export removed, and the export the embedded
//! files' static makes: `src/embedded_text.rs`) whose memory already holds
//! that work, so a fresh instance starts warm.
//!
//! The init function may use WASI (std seeds its HashMaps from `random_get`)
//! but gets no arguments, no environment, no files; the waPC host imports
//! trap (pre-initialisation must not depend on a host call).

use std::process::ExitCode;

use wasmtime_provider::{
    wasmtime::{Engine, Linker, Store},
    wasmtime_wasi::{p1::WasiP1Ctx, WasiCtxBuilder},
};

fn run(input: &str, output: &str) -> wasmtime_provider::wasmtime::Result<usize> {
    let wasm = std::fs::read(input)?;
    // The embedded files first in memory, or no module (src/embedded_text.rs).
    let (at, data) = lowest_data(&wasm)?;
    if let Err(e) = hcp_etcd_admission::embedded_text::check_first_data(at, data) {
        wasmtime_provider::wasmtime::bail!("{input}: {e} (src/embedded_text.rs)");
    }
    let engine = Engine::default();
    let mut store = Store::new(&engine, WasiCtxBuilder::new().build_p1());
    let wizer = wasmtime_wizer::Wizer::new();
    let snapshot = futures::executor::block_on(wizer.run(&mut store, &wasm, async |store, module| {
        let mut linker: Linker<WasiP1Ctx> = Linker::new(store.engine());
        wasmtime_provider::wasmtime_wasi::p1::add_to_linker_async(&mut linker, |cx: &mut WasiP1Ctx| cx)?;
        linker.define_unknown_imports_as_traps(module)?;
        linker.instantiate_async(store, module).await
    }))?;
    let shipped = without_export(&snapshot, hcp_etcd_admission::embedded_text::EXPORT_NAME)?;
    std::fs::write(output, &shipped)?;
    Ok(shipped.len())
}

/// The module's active data segment at the lowest address: its address and bytes.
fn lowest_data(wasm: &[u8]) -> wasmtime_provider::wasmtime::Result<(u64, &[u8])> {
    let mut lowest: Option<(u64, &[u8])> = None;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let wasmparser::Payload::DataSection(reader) = payload? else { continue };
        for data in reader {
            let data = data?;
            let wasmparser::DataKind::Active { offset_expr, .. } = data.kind else { continue };
            let Ok(wasmparser::Operator::I32Const { value }) = offset_expr.get_operators_reader().read() else {
                wasmtime_provider::wasmtime::bail!("a data segment whose address is not a constant");
            };
            let at = u64::from(value as u32);
            if lowest.is_none_or(|(low, _)| at < low) {
                lowest = Some((at, data.data));
            }
        }
    }
    lowest.ok_or_else(|| wasmtime_provider::wasmtime::format_err!("the module has no data"))
}

/// The module without the export `name` (every other section as it was).
/// The embedded files' static is named to sort first in memory, which makes
/// it an export of the linked module; no host has a use for it.
fn without_export(wasm: &[u8], name: &str) -> wasmtime_provider::wasmtime::Result<Vec<u8>> {
    let mut module = wasm_encoder::Module::new();
    let mut dropped = false;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        if let wasmparser::Payload::ExportSection(reader) = &payload {
            let mut exports = wasm_encoder::ExportSection::new();
            for export in reader.clone() {
                let export = export?;
                if export.name == name {
                    dropped = true;
                    continue;
                }
                let kind = match export.kind {
                    wasmparser::ExternalKind::Func => wasm_encoder::ExportKind::Func,
                    wasmparser::ExternalKind::Table => wasm_encoder::ExportKind::Table,
                    wasmparser::ExternalKind::Memory => wasm_encoder::ExportKind::Memory,
                    wasmparser::ExternalKind::Global => wasm_encoder::ExportKind::Global,
                    wasmparser::ExternalKind::Tag => wasm_encoder::ExportKind::Tag,
                    other => wasmtime_provider::wasmtime::bail!("export {} of kind {other:?}", export.name),
                };
                exports.export(export.name, kind, export.index);
            }
            module.section(&exports);
        } else if let Some((id, range)) = payload.as_section() {
            let (Ok(start), Ok(end)) = (usize::try_from(range.start), usize::try_from(range.end)) else {
                wasmtime_provider::wasmtime::bail!("a section past the address space");
            };
            let Some(data) = wasm.get(start..end) else {
                wasmtime_provider::wasmtime::bail!("a section past the end of the module");
            };
            module.section(&wasm_encoder::RawSection { id, data });
        }
    }
    if !dropped {
        wasmtime_provider::wasmtime::bail!(
            "the linked module does not export {name} (src/embedded_text.rs names the embedded files' static so)"
        );
    }
    Ok(module.finish())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: preinit IN.wasm OUT.wasm");
        return ExitCode::from(2);
    };
    match run(input, output) {
        Ok(size) => {
            eprintln!("pre-initialised {input} -> {output} ({size} bytes)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pre-initialisation of {input} failed: {e:?}");
            ExitCode::FAILURE
        }
    }
}
