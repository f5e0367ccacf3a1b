//! Build tool, run by scripts/build-wasm.sh: pre-initialises the Kubewarden
//! policy module with wasmtime-wizer.
//!
//! `cargo run --example preinit -- IN.wasm OUT.wasm` instantiates IN in
//! wasmtime, calls its `wizer-initialize` export (src/kubewarden/preinit.rs: compiles
//! every schema, CEL rule and regex and decides a few sample requests) and
//! writes OUT: the same waPC module (same imports, `wapc_init`,
//! `__guest_call`; the init export removed) whose memory already holds that
//! work, so a fresh instance starts warm.
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
    let engine = Engine::default();
    let mut store = Store::new(&engine, WasiCtxBuilder::new().build_p1());
    let wizer = wasmtime_wizer::Wizer::new();
    let snapshot = futures::executor::block_on(wizer.run(&mut store, &wasm, async |store, module| {
        let mut linker: Linker<WasiP1Ctx> = Linker::new(store.engine());
        wasmtime_provider::wasmtime_wasi::p1::add_to_linker_async(&mut linker, |cx: &mut WasiP1Ctx| cx)?;
        linker.define_unknown_imports_as_traps(module)?;
        linker.instantiate_async(store, module).await
    }))?;
    std::fs::write(output, &snapshot)?;
    Ok(snapshot.len())
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
