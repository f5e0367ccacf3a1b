//! The pieces of the real-apiserver differential shared by its suites: the
//! library's answer for a case, whether the CRD alone decides it, the objects
//! as sent to the apiserver, the comparable verdict, and installing the CRDs
//! (permissive or real) so that old objects the schema rejects can be stored.
#![allow(dead_code)]

use std::time::Duration;

use super::kube_apiserver::{Auth, Kube, KubeApiserver};
use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    crd,
    lookup::ContextObjects,
    schema::{redact_urls_in, CompiledCrdSchema, KubernetesVersion, Scope},
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};

pub const RESOURCES: [&str; 3] = ["hcpetcdbackups", "hostedclusters", "hostedcontrolplanes"];

pub fn settings_for(case: &super::Case, v: Kube) -> Settings {
    let mut s = case.settings.clone();
    if !s.is_object() {
        s = json!({});
    }
    s["kubernetesVersion"] = json!(v.minor());
    Settings::from_json(&s).expect("case settings")
}

/// `review` for the case, with the messages of version `v`.
pub fn library_review(case: &super::Case, v: Kube) -> Value {
    let settings = settings_for(case, v);
    let now = Ok(parse_rfc3339(&case.now).expect("case now"));
    let context = ContextObjects::from_values(case.context.clone());
    review(&case.review, &DecisionInput { settings: &settings, lookup: Some(&context), now, expect: None })
        .expect("a response")
}

pub fn schema_of(resource: &str) -> std::rc::Rc<CompiledCrdSchema> {
    thread_local! {
        static COMPILED: std::cell::RefCell<std::collections::BTreeMap<String, std::rc::Rc<CompiledCrdSchema>>> =
            Default::default();
    }
    COMPILED.with(|c| {
        c.borrow_mut()
            .entry(resource.to_string())
            .or_insert_with(|| {
                let schema = match resource {
                    "hcpetcdbackups" => crd::hcpetcdbackup_schema(),
                    "hostedclusters" => crd::hostedcluster_schema(),
                    _ => crd::hostedcontrolplane_schema(),
                };
                std::rc::Rc::new(CompiledCrdSchema::compile(schema.expect("schema")))
            })
            .clone()
    })
}

/// The object the apiserver validates (status dropped on CREATE, taken from
/// the old object on a main UPDATE; spec from the old object on a status UPDATE).
pub fn as_validated(object: &Value, old: Option<&Value>, status: bool) -> Value {
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
pub fn crd_decides(case: &super::Case, resp: &Value, v: Kube) -> bool {
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
    let outcome = schema_outcome(case, v);
    if resp["allowed"] == true {
        return outcome.errors.is_empty();
    }
    let causes = resp["status"]["details"]["causes"].as_array().map(Vec::len).unwrap_or(0);
    resp["status"]["code"] == 422 && causes == outcome.errors.len() && causes > 0
}

/// What the CRD alone says of the case's request (schema and CEL), with the
/// messages of version `v`.
pub fn schema_outcome(case: &super::Case, v: Kube) -> hcp_etcd_admission::schema::SchemaOutcome {
    let req = &case.review["request"];
    let res = req["resource"]["resource"].as_str().unwrap_or_default();
    let sub = req["subResource"].as_str().unwrap_or_default();
    let old = req["oldObject"].is_object().then_some(&req["oldObject"]);
    let version = KubernetesVersion::parse(v.minor()).expect("version");
    let scope = if sub == "status" { Scope::StatusSubresource } else { Scope::Object };
    schema_of(res).validate_as(&as_validated(&req["object"], old, sub == "status"), old, version, scope)
}

/// The warnings of a review response that the CRD gives (the apiserver's
/// own, which the comparison holds against every warning the apiserver
/// sent): unknown fields, and rules ratcheted on unchanged values.
pub fn crd_warnings(case: &super::Case, v: Kube, resp: &Value) -> Vec<String> {
    let ratcheted: Vec<String> = schema_outcome(case, v).ratcheted.iter().map(ToString::to_string).collect();
    resp["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|w| w.starts_with("unknown field ") || ratcheted.iter().any(|r| r == w))
        .map(str::to_string)
        .collect()
}

/// The object as sent to the apiserver: its name, labels and annotations in
/// namespace `ns`; server-set metadata dropped.
pub fn for_apiserver(obj: &Value, ns: &str) -> Value {
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
/// Status, or a review response's status), and the CRD's warnings (unknown
/// fields, ratcheted rules; the webhook's own are not the apiserver's to give).
#[derive(Debug, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    pub code: u64,
    pub message: String,
    pub causes: Vec<(String, String, String)>,
    pub warnings: Vec<String>,
}

/// Every warning the apiserver sent (no webhook is registered in the
/// differential: they are all the CRD's).
pub fn apiserver_warnings<'a>(ws: impl Iterator<Item = &'a str>) -> Vec<String> {
    ws.map(str::to_string).collect()
}

pub fn verdict_of_status(allowed: bool, status: &Value, mut warnings: Vec<String>) -> Verdict {
    // Ratcheted rules warn in the order the CEL validator meets them, which
    // is Go's (random) map order.
    warnings.sort();
    if allowed {
        return Verdict { allowed, code: 0, message: String::new(), causes: Vec::new(), warnings };
    }
    let causes: Vec<(String, String, String)> = status["details"]["causes"]
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
    // The apiserver echoes a value it reports (a presigned URL's signature
    // included), review never echoes a query string: the one difference the
    // comparison allows.
    let message = redact_urls_in(status["message"].as_str().unwrap_or_default());
    let causes: Vec<(String, String, String)> =
        causes.into_iter().map(|(r, f, m)| (r, f, redact_urls_in(&m))).collect();
    let (message, causes) = one_conversion_error(message, causes);
    let (message, causes) = in_canonical_order(message, causes);
    Verdict { allowed, code: status["code"].as_u64().unwrap_or_default(), message, causes, warnings }
}

/// The conversion error in a rule's evaluation error (`invalid data, expected
/// string, got int64`), if any.
fn conversion_error(message: &str) -> Option<&str> {
    let start = message.find("invalid data, ")?;
    let len = message[start..].find(" evaluating rule: ")?;
    Some(&message[start..start + len])
}

/// A rule that compares a whole object (`self == oldSelf`) holding several
/// values of the wrong type fails on whichever cel-go meets first, in Go's
/// (random) map order: the apiserver's own text varies between requests.
/// When an answer names more than one conversion error, each is compared as
/// "a conversion error" only.
fn one_conversion_error(
    message: String,
    causes: Vec<(String, String, String)>,
) -> (String, Vec<(String, String, String)>) {
    let mut distinct: Vec<&str> = causes.iter().filter_map(|(_, _, m)| conversion_error(m)).collect();
    distinct.sort();
    distinct.dedup();
    if distinct.len() < 2 {
        return (message, causes);
    }
    let texts: Vec<String> = distinct.iter().map(|t| t.to_string()).collect();
    let generic = |m: &str| {
        texts.iter().fold(m.to_string(), |acc, t| acc.replace(t.as_str(), "invalid data, <a conversion error>"))
    };
    let causes = causes.into_iter().map(|(r, f, m)| (r, f, generic(&m))).collect();
    (generic(&message), causes)
}

/// The apiserver reports the errors of sibling properties in Go's map
/// order, which is random per request (kube-openapi's object validator
/// ranges over the schema's properties map); `review` reports them in key
/// order. Both are compared in one order: the causes sorted, and a
/// multi-error message (`… is invalid: [a, b]`) rebuilt from them — only
/// when the message is exactly its causes joined, so any other difference
/// in it still shows.
fn in_canonical_order(
    message: String,
    mut causes: Vec<(String, String, String)>,
) -> (String, Vec<(String, String, String)>) {
    let text =
        |c: &[(String, String, String)]| c.iter().map(|(_, f, m)| format!("{f}: {m}")).collect::<Vec<_>>().join(", ");
    let Some((head, _)) = message.split_once(" is invalid: [") else { return (message, causes) };
    if causes.len() < 2 || message != format!("{head} is invalid: [{}]", text(&causes)) {
        return (message, causes);
    }
    causes.sort();
    let message = format!("{head} is invalid: [{}]", text(&causes));
    (message, causes)
}

pub fn test_crds() -> Vec<Value> {
    let backup = serde_yaml_ng::from_str(
        &std::fs::read_to_string(super::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml"))
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
pub fn permissive(crd: &Value) -> Value {
    let mut p = crd.clone();
    if let Some(vs) = p["spec"]["versions"].as_array_mut() {
        for v in vs {
            v["schema"] = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
        }
    }
    p
}

/// A probe object (`spec` of the wrong type) of the CRD's kind.
pub fn probe(crd: &Value, ns: &str) -> Value {
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
pub async fn install(api: &KubeApiserver, crds: &[Value], permissive_schema: bool, ns: &str) {
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
