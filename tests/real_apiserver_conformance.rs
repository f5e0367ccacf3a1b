//! The differential: every conformance case that the CRD alone decides goes
//! through the real kube-apiserver (1.35 and 1.34) and must get the same
//! verdict, status code, message and causes there as from `review` with
//! `kubernetesVersion` set to that apiserver's version.
//!
//! "The CRD alone decides" a case when the core's own schema check (the
//! generated CRD's OpenAPI schema and CEL rules) gives exactly the causes the
//! whole decision gives: no rule of rules/ (clock, URL parsing, lookups) adds
//! one. Those cases need the webhook and are not the CRD's to judge.
//!
//! How each case reaches the apiserver:
//! - CREATE: a dry-run POST.
//! - UPDATE (main resource or the status subresource): the old object is
//!   stored first, then the new one is PUT with a dry run. Ratcheting cases
//!   need an old object that today's schema rejects, as after a CRD upgrade;
//!   so every old object is stored while a permissive version of the CRD
//!   (same group, kind, status subresource; any content) is installed, and the
//!   real CRD is put back before the updates run. Each UPDATE case gets a
//!   namespace of its own (many cases share an object name).
//!   Objects keep their name, labels and annotations; the namespace is the
//!   test's, and server-set metadata (uid, resourceVersion, …) is dropped.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::kube_apiserver::{self, Auth, Kube, KubeApiserver};
use hcp_etcd_admission::{
    admission::{lookup::ContextObjects, review, DecisionInput},
    crd,
    schema::{CompiledCrdSchema, KubernetesVersion, Scope},
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};

const RESOURCES: [&str; 3] = ["hcpetcdbackups", "hostedclusters", "hostedcontrolplanes"];

fn settings_for(case: &common::Case, v: Kube) -> Settings {
    let mut s = case.settings.clone();
    if !s.is_object() {
        s = json!({});
    }
    s["kubernetesVersion"] = json!(v.minor());
    Settings::from_json(&s).expect("case settings")
}

/// `review` for the case, with the messages of version `v`.
fn library_review(case: &common::Case, v: Kube) -> Value {
    let settings = settings_for(case, v);
    let now = Ok(parse_rfc3339(&case.now).expect("case now"));
    let context = ContextObjects::from_values(case.context.clone());
    review(&case.review, &DecisionInput { settings: &settings, lookup: Some(&context), now, expect: None })
        .expect("a response")
}

fn schema_of(resource: &str) -> CompiledCrdSchema {
    let schema = match resource {
        "hcpetcdbackups" => crd::hcpetcdbackup_schema(),
        "hostedclusters" => crd::hostedcluster_schema(),
        _ => crd::hostedcontrolplane_schema(),
    };
    CompiledCrdSchema::compile(schema.expect("schema"))
}

/// The object the apiserver validates (status dropped on CREATE, taken from
/// the old object on a main UPDATE; spec from the old object on a status UPDATE).
fn as_validated(object: &Value, old: Option<&Value>, status: bool) -> Value {
    let from_old = if status { "spec" } else { "status" };
    let mut obj = object.clone();
    if let Some(map) = obj.as_object_mut() {
        match old.and_then(|o| o.get(from_old)) {
            Some(v) => {
                map.insert(from_old.to_string(), v.clone());
            }
            None => {
                map.remove(from_old);
            }
        }
    }
    obj
}

/// Whether the CRD alone decides the case (see the module docs), given the
/// whole decision's response.
fn crd_decides(case: &common::Case, resp: &Value, v: Kube) -> bool {
    let req = &case.review["request"];
    let res = req["resource"]["resource"].as_str().unwrap_or_default();
    let op = req["operation"].as_str().unwrap_or_default();
    let sub = req["subResource"].as_str().unwrap_or_default();
    if !RESOURCES.contains(&res) || !["CREATE", "UPDATE"].contains(&op) || !["", "status"].contains(&sub) {
        return false;
    }
    if !req["object"].is_object() || (op == "UPDATE" && !req["oldObject"].is_object()) {
        return false;
    }
    let old = req["oldObject"].is_object().then_some(&req["oldObject"]);
    let version = KubernetesVersion::parse(v.minor()).expect("version");
    let scope = if sub == "status" { Scope::StatusSubresource } else { Scope::Object };
    let outcome = schema_of(res).validate_as(&as_validated(&req["object"], old, sub == "status"), old, version, scope);
    if resp["allowed"] == true {
        return outcome.errors.is_empty();
    }
    let causes = resp["status"]["details"]["causes"].as_array().map(Vec::len).unwrap_or(0);
    resp["status"]["code"] == 422 && causes == outcome.errors.len() && causes > 0
}

/// The object as sent to the apiserver: its name, labels and annotations in
/// namespace `ns`; server-set metadata dropped.
fn for_apiserver(obj: &Value, ns: &str) -> Value {
    let mut out = obj.clone();
    let meta = &obj["metadata"];
    let mut m = json!({"name": meta["name"], "namespace": ns});
    for k in ["labels", "annotations"] {
        if meta.get(k).is_some() {
            m[k] = meta[k].clone();
        }
    }
    out["metadata"] = m;
    out
}

/// The verdict, code, message and causes of an answer (the apiserver's
/// Status, or a review response's status), and its unknown-field warnings
/// (the only warnings the CRD alone gives; the webhook's own are not the
/// apiserver's to give).
#[derive(Debug, PartialEq)]
struct Verdict {
    allowed: bool,
    code: u64,
    message: String,
    causes: Vec<(String, String, String)>,
    unknown_fields: Vec<String>,
}

fn unknown_field_warnings<'a>(ws: impl Iterator<Item = &'a str>) -> Vec<String> {
    ws.filter(|w| w.starts_with("unknown field ")).map(str::to_string).collect()
}

fn verdict_of_status(allowed: bool, status: &Value, unknown_fields: Vec<String>) -> Verdict {
    if allowed {
        return Verdict { allowed, code: 0, message: String::new(), causes: Vec::new(), unknown_fields };
    }
    let causes = status["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    (s("reason"), s("field"), s("message"))
                })
                .collect()
        })
        .unwrap_or_default();
    Verdict {
        allowed,
        code: status["code"].as_u64().unwrap_or_default(),
        message: status["message"].as_str().unwrap_or_default().to_string(),
        causes,
        unknown_fields,
    }
}

fn test_crds() -> Vec<Value> {
    let backup = serde_yaml_ng::from_str(
        &std::fs::read_to_string(common::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml"))
            .expect("CRD file"),
    )
    .expect("CRD YAML");
    vec![
        backup,
        crd::hostedcluster_test_crd().expect("HostedCluster test CRD"),
        crd::hostedcontrolplane_test_crd().expect("HostedControlPlane test CRD"),
    ]
}

/// The CRD with its schema replaced by "anything" (status subresource kept).
fn permissive(crd: &Value) -> Value {
    let mut p = crd.clone();
    if let Some(vs) = p["spec"]["versions"].as_array_mut() {
        for v in vs {
            v["schema"] = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
        }
    }
    p
}

/// A probe object (`spec` of the wrong type) of the CRD's kind.
fn probe(crd: &Value, ns: &str) -> Value {
    json!({
        "apiVersion": format!("{}/{}", crd["spec"]["group"].as_str().unwrap_or_default(),
            crd["spec"]["versions"][0]["name"].as_str().unwrap_or_default()),
        "kind": crd["spec"]["names"]["kind"],
        "metadata": {"name": "probe", "namespace": ns},
        "spec": 12,
    })
}

/// Installs `crds` (their schemas permissive or not) and waits until the
/// apiserver judges with them: the probe is accepted by the permissive ones
/// and refused by the real ones (the handler switches a moment after the update).
async fn install(api: &KubeApiserver, crds: &[Value], permissive_schema: bool, ns: &str) {
    for c in crds {
        let c = if permissive_schema { permissive(c) } else { c.clone() };
        api.apply_crd(&c).await.expect("CRD");
        let mut last = String::new();
        let mut switched = false;
        for _ in 0..300 {
            let r = api.create(&probe(&c, ns), true, &Auth::Admin).await.expect("probe");
            if r.ok() == permissive_schema {
                switched = true;
                break;
            }
            last = format!("{} {}", r.status, r.text);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            switched,
            "the apiserver did not switch to the {} CRD: {last}",
            if permissive_schema { "permissive" } else { "real" }
        );
    }
}

struct Sent {
    name: String,
    got: Verdict,
    want: Verdict,
}

async fn differential(v: Kube) {
    let test = format!("differential_{}", v.minor());
    let Some(api) = kube_apiserver::shared(&test, v) else { return };
    let crds = test_crds();
    let cases = common::load_cases();
    let mut chosen = Vec::new();
    let mut by_resource: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    // An UPDATE never renames: a case whose two objects differ in name is
    // sent (to both) with the old object's name.
    let cases: Vec<common::Case> = cases
        .into_iter()
        .map(|mut c| {
            let req = &mut c.review["request"];
            if req["operation"] == "UPDATE" && req["oldObject"]["metadata"]["name"].is_string() {
                let name = req["oldObject"]["metadata"]["name"].clone();
                req["object"]["metadata"]["name"] = name.clone();
                req["name"] = name;
            }
            c
        })
        .collect();
    for case in &cases {
        let req = &case.review["request"];
        let res = req["resource"]["resource"].as_str().unwrap_or_default().to_string();
        if !RESOURCES.contains(&res.as_str()) {
            continue;
        }
        let resp = library_review(case, v)["response"].clone();
        let entry = by_resource.entry(res).or_default();
        entry.1 += 1;
        if crd_decides(case, &resp, v) {
            entry.0 += 1;
            chosen.push((case, resp));
        }
    }

    // Old objects first, under the permissive CRDs.
    let create_ns = api.namespace(&format!("diff-create-{}", v.minor())).await;
    install(api, &crds, true, &create_ns).await;
    let mut update_ns = Vec::new();
    for (i, (case, _)) in chosen.iter().enumerate() {
        let req = &case.review["request"];
        if req["operation"] != "UPDATE" {
            update_ns.push(None);
            continue;
        }
        let ns = api.namespace(&format!("diff-{i}")).await;
        let old = for_apiserver(&req["oldObject"], &ns);
        let r = api.create(&old, false, &Auth::Admin).await.expect("store old");
        assert!(r.ok(), "{}: storing the old object: {} {}", case.name, r.status, r.text);
        if old.get("status").is_some() {
            let r = api.update(&old, Some("status"), false, &Auth::Admin).await.expect("store old status");
            assert!(r.ok(), "{}: storing the old status: {} {}", case.name, r.status, r.text);
        }
        update_ns.push(Some(ns));
    }
    install(api, &crds, false, &create_ns).await;

    let mut sent = Vec::new();
    for ((case, resp), ns) in chosen.iter().zip(update_ns) {
        let req = &case.review["request"];
        let sub = req["subResource"].as_str();
        let reply = match ns {
            None => api.create(&for_apiserver(&req["object"], &create_ns), true, &Auth::Admin).await,
            Some(ns) => api.update(&for_apiserver(&req["object"], &ns), sub, true, &Auth::Admin).await,
        }
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let got = verdict_of_status(
            reply.ok(),
            &reply.body,
            unknown_field_warnings(reply.warnings.iter().map(String::as_str)),
        );
        let review_warnings = resp["warnings"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
            .unwrap_or_default();
        let want = verdict_of_status(
            resp["allowed"] == true,
            &resp["status"],
            unknown_field_warnings(review_warnings.into_iter()),
        );
        sent.push(Sent { name: format!("{}: {}", case.file, case.name), got, want });
    }

    let disagreements: Vec<String> = sent
        .iter()
        .filter(|s| s.got != s.want)
        .map(|s| format!("{}\n    apiserver {:?}\n    review    {:?}", s.name, s.got, s.want))
        .collect();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "kube-apiserver {}: {} cases sent ({} of them UPDATEs), {} disagreements; CRD-decided per resource (sent/all): {by_resource:?}\n",
            api.git_version().await.unwrap_or_default(),
            sent.len(),
            chosen.iter().filter(|(c, _)| c.review["request"]["operation"] == "UPDATE").count(),
            disagreements.len()
        )
        .as_bytes(),
    );
    // The differential must cover every kind of case it claims to.
    let count = |pred: &dyn Fn(&Value) -> bool| chosen.iter().filter(|(c, _)| pred(&c.review["request"])).count();
    assert!(count(&|r| r["operation"] == "CREATE" && r["resource"]["resource"] == "hcpetcdbackups") >= 20);
    assert!(count(&|r| r["operation"] == "UPDATE" && r["subResource"].is_null()) >= 5);
    assert!(count(&|r| r["subResource"] == "status") >= 3);
    assert!(count(&|r| r["resource"]["resource"] == "hostedclusters") >= 5);
    assert!(count(&|r| r["resource"]["resource"] == "hostedcontrolplanes") >= 5);
    assert!(sent.iter().any(|s| !s.want.allowed) && sent.iter().any(|s| s.want.allowed));
    assert!(
        disagreements.is_empty(),
        "{} of {} cases: the real kube-apiserver {} and review disagree:\n{}",
        disagreements.len(),
        sent.len(),
        v.minor(),
        disagreements.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_35() {
    differential(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_34() {
    differential(Kube::V1_34).await;
}
