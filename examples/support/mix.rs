//! The four recorded reviews of the load benchmark and the decision-cost loop,
//! shared by `bench_load` (the load table) and `decision_mix` (the same loop
//! alone, small enough to run under `valgrind --tool=callgrind`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(file: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("tests/conformance").join(file)).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    doc["fixtures"][name].clone()
}

#[allow(clippy::too_many_arguments)]
fn review(
    uid: &str,
    group: &str,
    version: &str,
    kind: &str,
    resource: &str,
    op: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"], "operation": op,
        "userInfo": {"username": "system:serviceaccount:hypershift:operator"},
        "object": obj, "oldObject": old.cloned().unwrap_or(Value::Null), "dryRun": false}})
}

/// The HostedCluster with its presigned URL signed now (the server reads the real clock).
fn signed_now(mut hc: Value) -> Value {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let date = hcp_etcd_admission::time::format_rfc3339(now).replace(['-', ':'], "");
    let url = &mut hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0];
    let signed = url.as_str().unwrap_or_default().replace("X-Amz-Date=20261129T150000Z", &format!("X-Amz-Date={date}"));
    *url = Value::String(signed);
    hc
}

/// (path, body) of the four recorded reviews.
pub fn recorded() -> Vec<(String, String)> {
    let s3kms = fixture("hcpetcdbackup.yaml", "s3kms");
    let mut changed = s3kms.clone();
    changed["spec"]["storage"]["s3"]["bucket"] = json!("other-bucket");
    let h = "hypershift.openshift.io";
    vec![
        (
            "/validate/hcpetcdbackups".into(),
            review("b1", h, "v1beta1", "HCPEtcdBackup", "hcpetcdbackups", "CREATE", &s3kms, None).to_string(),
        ),
        (
            "/validate/hcpetcdbackups".into(),
            review("b2", h, "v1beta1", "HCPEtcdBackup", "hcpetcdbackups", "UPDATE", &changed, Some(&s3kms)).to_string(),
        ),
        (
            "/validate/hostedclusters".into(),
            review(
                "h1",
                h,
                "v1beta1",
                "HostedCluster",
                "hostedclusters",
                "CREATE",
                &signed_now(fixture("hostedcluster.yaml", "hcurl")),
                None,
            )
            .to_string(),
        ),
        (
            "/mutate/etcd-statefulsets".into(),
            review(
                "s1",
                "apps",
                "v1",
                "StatefulSet",
                "statefulsets",
                "CREATE",
                &fixture("statefulset.yaml", "sts3"),
                None,
            )
            .to_string(),
        ),
    ]
}

/// Mean time of what `serve` does per request beyond the floor's TLS and HTTP:
/// parse the body once (`ParsedReview`), plan its reads and read them (the
/// HostedControlPlane from the same `--context` object), decide
/// (`admission::review_parsed`), serialise the answer. The four reviews in
/// rotation, on one thread, in this process: `warmup` rounds, then `rounds`
/// timed rounds.
pub fn decision_cost(reqs: &[(String, String)], hcp: &Value, warmup: u32, rounds: u32) -> Duration {
    use hcp_etcd_admission::{admission, lookup::ContextObjects, settings::Settings};
    let settings = Settings::default();
    let ctx = ContextObjects::from_values(vec![hcp.clone()]);
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let once = || {
        for (_, body) in reqs {
            let value: Value = serde_json::from_slice(body.as_bytes()).unwrap_or_default();
            let Ok(parsed) = admission::ParsedReview::parse(value) else { continue };
            let answers = parsed.plan(&settings, None).read_from(&ctx);
            let input =
                admission::DecisionInput { settings: &settings, lookup: Some(&answers), now: Ok(now), expect: None };
            let answer = admission::review_parsed(&parsed, &input).map(|r| r.review).unwrap_or_default();
            std::hint::black_box(serde_json::to_vec(&answer).unwrap_or_default());
        }
    };
    for _ in 0..warmup {
        once();
    }
    let start = Instant::now();
    for _ in 0..rounds {
        once();
    }
    start.elapsed() / (rounds.max(1) * reqs.len().max(1) as u32)
}
