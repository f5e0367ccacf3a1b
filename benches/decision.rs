//! Decision cost, native and through the Kubewarden policy module, side by side.
//!
//! Four requests (built from the conformance fixtures):
//! * `backup_create_s3_kms`   HCPEtcdBackup CREATE, S3 with KMS: every schema, CEL and project rule;
//! * `backup_update_immutable` HCPEtcdBackup UPDATE changing the spec (denied by `self == oldSelf`);
//! * `hostedcluster_presigned` HostedCluster CREATE with a SigV4 presigned `restoreSnapshotURL`;
//! * `statefulset_mutation_3` the etcd-init injection for a 3-replica etcd StatefulSet.
//!
//! Runners (all Wasm ones in wasmtime through wapc's wasmtime-provider, the
//! runtime of Kubewarden's policy-evaluator, HostedControlPlane served by the
//! host callback, ValidationRequest/Response JSON both ways):
//! * `native`: `admission::review` (what `review` and the server run);
//! * `wasm_warm`: `validate` on one long-lived instance of the shipped module;
//! * `wasm_fresh`: a new instance of the shipped (pre-initialised) module per
//!   request, rehydrated from a pre-instantiated module, then `validate`: what
//!   Kubewarden's policy-server does for every request;
//! * `wasm_fresh_uninitialised`: the same with the module before
//!   pre-initialisation (the "before" column);
//! * `yardstick_fresh` / `yardstick_warm`: a minimal Kubewarden SDK policy
//!   (benches/yardstick: parses the request and accepts), built in the same run.
//!
//! Ratios: scripts/bench-report.py. The modules come from scripts/bench-decision.sh
//! (scripts/build-wasm.sh plus the yardstick).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;
#[path = "support/scenarios.rs"]
mod scenarios;
#[path = "../tests/common/wasm_host.rs"]
mod wasm_host;

use std::{hint::black_box, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion};
use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
};
use scenarios::scenarios;
use serde_json::{json, Value};
use wasm_host::{Policy, PolicyModule};
use wasmtime_provider::WasmtimeEngineProviderPre;

fn load(path: std::path::PathBuf) -> PolicyModule {
    PolicyModule::load(&path).unwrap_or_else(|e| panic!("{e}; run scripts/bench-decision.sh"))
}

fn fresh_validate(pre: &WasmtimeEngineProviderPre, context: &[Value], payload: &[u8]) -> Option<Vec<u8>> {
    let policy = Policy::rehydrate(pre, wasm_host::context_handler(context.to_vec())).ok()?;
    policy.call("validate", payload).ok()
}

fn bench(c: &mut Criterion) {
    let settings = Settings::default();
    let shipped = load(wasm_host::module_path()).pre(None).expect("pre-instantiate module");
    let before = load(wasm_host::uninitialised_module_path()).pre(None).expect("pre-instantiate the module before");
    let yardstick = load(wasm_host::yardstick_module_path()).pre(None).expect("pre-instantiate yardstick");
    let quick = std::env::args().any(|a| a == "--test");
    // A fresh instance and wapc_init, no call: the runtime's own cost per request.
    let mut g = c.benchmark_group("instantiate_only");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(40);
    for (name, pre) in [("wasm_shipped", &shipped), ("wasm_before", &before), ("yardstick", &yardstick)] {
        g.bench_function(name, |b| {
            b.iter(|| black_box(Policy::rehydrate(pre, wasm_host::context_handler(vec![])).ok()))
        });
    }
    g.finish();
    let mut pcts = Vec::new();
    for s in scenarios() {
        let ctx = ContextObjects::from_values(s.context.clone());
        let input = DecisionInput { settings: &settings, lookup: Some(&ctx), now: Ok(s.now), expect: None };
        // Sanity: every runner decides what the scenario is meant to.
        let native = review(&s.review, &input).expect("review");
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        let host = Policy::rehydrate(&shipped, wasm_host::context_handler(s.context.clone())).expect("wapc host");
        let yard = Policy::rehydrate(&yardstick, wasm_host::context_handler(vec![])).expect("yardstick host");
        for (runner, answer) in [
            ("warm", host.call("validate", &payload).ok()),
            ("fresh", fresh_validate(&shipped, &s.context, &payload)),
            ("fresh, before", fresh_validate(&before, &s.context, &payload)),
        ] {
            let answer: Value = serde_json::from_slice(&answer.expect("validate")).expect("json");
            assert_eq!(answer["accepted"], native["response"]["allowed"], "{} {runner}", s.name);
        }
        let y: Value = serde_json::from_slice(&yard.call("validate", &payload).expect("yardstick")).expect("json");
        assert_eq!(y["accepted"], true, "the yardstick accepts");

        let mut g = c.benchmark_group(s.name);
        g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(40);
        g.bench_function("native", |b| b.iter(|| black_box(review(black_box(&s.review), &input))));
        g.bench_function("wasm_warm", |b| b.iter(|| black_box(host.call("validate", black_box(&payload)))));
        g.bench_function("wasm_fresh", |b| b.iter(|| black_box(fresh_validate(&shipped, &s.context, &payload))));
        g.bench_function("wasm_fresh_uninitialised", |b| {
            b.iter(|| black_box(fresh_validate(&before, &s.context, &payload)))
        });
        g.bench_function("yardstick_warm", |b| b.iter(|| black_box(yard.call("validate", black_box(&payload)))));
        g.bench_function("yardstick_fresh", |b| b.iter(|| black_box(fresh_validate(&yardstick, &[], &payload))));
        g.finish();
        // Per-call percentiles (criterion reports the median of batched samples).
        let n = if quick { 10 } else { 5000 };
        let native_p = percentiles(n, || {
            black_box(review(&s.review, &input).ok());
        });
        let warm_p = percentiles(n, || {
            black_box(host.call("validate", &payload).ok());
        });
        let fresh_p = percentiles(n / 5, || {
            black_box(fresh_validate(&shipped, &s.context, &payload));
        });
        let yard_p = percentiles(n / 5, || {
            black_box(fresh_validate(&yardstick, &[], &payload));
        });
        // Page faults per fresh instance + validate (the copy-on-write memory image).
        let faults = |pre: &WasmtimeEngineProviderPre, context: &[Value]| {
            let (before, calls) = (minor_faults(), n / 5);
            for _ in 0..calls {
                black_box(fresh_validate(pre, context, &payload));
            }
            (minor_faults().saturating_sub(before)) as f64 / calls.max(1) as f64
        };
        let faults_shipped = faults(&shipped, &s.context);
        let faults_yard = faults(&yardstick, &[]);
        pcts.push(json!({"scenario": s.name, "native": native_p, "wasm_warm": warm_p, "wasm_fresh": fresh_p,
                         "yardstick_fresh": yard_p, "calls": n, "fresh_calls": n / 5,
                         "faults_per_fresh_call": {"shipped": faults_shipped, "yardstick": faults_yard}}));
    }
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| common::root().join("target"))
        .join("criterion/percentiles.json");
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&out, serde_json::to_string_pretty(&pcts).unwrap_or_default());
    for (name, path) in [
        ("shipped", wasm_host::module_path()),
        ("before", wasm_host::uninitialised_module_path()),
        ("yardstick", wasm_host::yardstick_module_path()),
    ] {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        eprintln!("module size, {name}: {size} bytes");
    }
}

/// Minor page faults of this process so far (Linux /proc/self/stat field 10).
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(7)?.parse().ok()))
        .unwrap_or(0)
}

/// p50 / p90 / p99 / max of single calls, microseconds.
fn percentiles(n: usize, mut f: impl FnMut()) -> Value {
    for _ in 0..n.min(200) {
        f();
    }
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let start = std::time::Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| t[((t.len() as f64 - 1.0) * q).round() as usize];
    json!({"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)})
}

criterion_group!(benches, bench);
criterion_main!(benches);
