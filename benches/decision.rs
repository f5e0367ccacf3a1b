//! Decision cost, native and through the Kubewarden policy module, side by side.
//!
//! Four requests (built from the conformance fixtures):
//! * `backup_create_s3_kms`   HCPEtcdBackup CREATE, S3 with KMS: every schema, CEL and project rule;
//! * `backup_update_immutable` HCPEtcdBackup UPDATE changing the spec (denied by `self == oldSelf`);
//! * `hostedcluster_presigned` HostedCluster CREATE with a SigV4 presigned `restoreSnapshotURL`;
//! * `statefulset_mutation_3` the etcd-init injection for a 3-replica etcd StatefulSet.
//!
//! `native/*` calls `admission::review` (what `review` and the server run).
//! `wasm_warm/*` calls `validate` on one instance of the built module in
//! wasmtime through wapc (the runtime Kubewarden's policy-evaluator uses), with
//! the HostedControlPlane served by the host callback. `wasm_fresh/*` makes a
//! new instance from a pre-instantiated module for every request, as
//! policy-server (≥ 1.10) does, so it includes the module's one-time setup.
//! Ratios: scripts/bench-report.py. The module comes from scripts/build-wasm.sh.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::{hint::black_box, time::Duration};

use criterion::{criterion_group, criterion_main, Criterion};
use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
    time::format_rfc3339,
};
use serde_json::{json, Value};
use wasmtime_provider::WasmtimeEngineProviderBuilder;

struct Scenario {
    name: &'static str,
    review: Value,
    context: Vec<Value>,
    now: i64,
}

fn fixture(file: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance").join(file)).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    doc["fixtures"][name].clone()
}

fn scenarios() -> Vec<Scenario> {
    // The Wasm guest reads the real clock (WASI), so the presigned URL is
    // signed "now" and both runners judge it with the same clock.
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let amz_date = format_rfc3339(now).replace(['-', ':'], "");
    let s3kms = fixture("hcpetcdbackup.yaml", "s3kms");
    let mut changed = s3kms.clone();
    changed["spec"]["storage"]["s3"]["bucket"] = json!("other-bucket");
    let mut hc = fixture("hostedcluster.yaml", "hcurl");
    let url =
        hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0].as_str().unwrap_or_default().to_string();
    hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0] =
        json!(url.replace("X-Amz-Date=20261129T150000Z", &format!("X-Amz-Date={amz_date}")));
    let sts = fixture("statefulset.yaml", "sts3");
    let hcp = fixture("statefulset.yaml", "hcp");
    vec![
        Scenario {
            name: "backup_create_s3_kms",
            review: common::admission_review("b1", "hcpetcdbackups", None, "CREATE", Some(&s3kms), None),
            context: vec![],
            now,
        },
        Scenario {
            name: "backup_update_immutable",
            review: common::admission_review("b2", "hcpetcdbackups", None, "UPDATE", Some(&changed), Some(&s3kms)),
            context: vec![],
            now,
        },
        Scenario {
            name: "hostedcluster_presigned",
            review: common::admission_review("h1", "hostedclusters", None, "CREATE", Some(&hc), None),
            context: vec![],
            now,
        },
        Scenario {
            name: "statefulset_mutation_3",
            review: common::admission_review("s1", "statefulsets", None, "CREATE", Some(&sts), None),
            context: vec![hcp],
            now,
        },
    ]
}

fn host_callback(objects: Vec<Value>) -> Box<wapc::HostCallback> {
    Box::new(move |_id, binding, ns, op, payload| {
        if (binding, ns, op) != ("kubewarden", "kubernetes", "list_resources_by_namespace") {
            return Err(format!("unexpected host call {binding}/{ns}/{op}").into());
        }
        let req: Value = serde_json::from_slice(payload)?;
        let items: Vec<&Value> = objects.iter().filter(|o| o["metadata"]["namespace"] == req["namespace"]).collect();
        Ok(serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?)
    })
}

fn bench(c: &mut Criterion) {
    let settings = Settings::default();
    let module =
        std::fs::read(common::wasm_host::module_path()).expect("build the module first: scripts/build-wasm.sh");
    let builder = WasmtimeEngineProviderBuilder::new().module_bytes(&module);
    let pre = builder.build_pre().expect("pre-instantiate module");
    let mut pcts = Vec::new();
    for s in scenarios() {
        let ctx = ContextObjects::from_values(s.context.clone());
        let input = DecisionInput { settings: &settings, lookup: Some(&ctx), now: s.now, expect: None };
        // Sanity: the scenario decides what it is meant to.
        let native = review(&s.review, &input).expect("review");
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        let host = wapc::WapcHost::new(
            Box::new(pre.rehydrate(None).expect("rehydrate")),
            Some(host_callback(s.context.clone())),
        )
        .expect("wapc host");
        let answer: Value = serde_json::from_slice(&host.call("validate", &payload).expect("validate")).expect("json");
        assert_eq!(answer["accepted"], native["response"]["allowed"], "{}", s.name);

        let mut g = c.benchmark_group(s.name);
        g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(40);
        g.bench_function("native", |b| b.iter(|| black_box(review(black_box(&s.review), &input))));
        g.bench_function("wasm_warm", |b| b.iter(|| black_box(host.call("validate", black_box(&payload)))));
        g.bench_function("wasm_fresh", |b| {
            b.iter(|| {
                let h = wapc::WapcHost::new(
                    Box::new(pre.rehydrate(None).expect("rehydrate")),
                    Some(host_callback(s.context.clone())),
                )
                .expect("host");
                black_box(h.call("validate", &payload))
            })
        });
        g.finish();
        // Per-call percentiles (criterion reports the median of batched samples).
        let n = if std::env::args().any(|a| a == "--test") { 10 } else { 5000 };
        let native_p = percentiles(n, || {
            black_box(review(&s.review, &input).ok());
        });
        let warm_p = percentiles(n, || {
            black_box(host.call("validate", &payload).ok());
        });
        pcts.push(json!({"scenario": s.name, "native": native_p, "wasm_warm": warm_p, "calls": n}));
    }
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| common::root().join("target"))
        .join("criterion/percentiles.json");
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&out, serde_json::to_string_pretty(&pcts).unwrap_or_default());
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
