//! A generator-style differential: many variants of valid HCPEtcdBackup,
//! HostedCluster and HostedControlPlane objects, derived from the CRDs' own
//! schemas, go through the real kube-apiserver (1.35 and 1.34) and through
//! `review` with the matching `kubernetesVersion`; verdict, code, message,
//! causes (in order) and unknown-field warnings must agree wherever the CRD
//! alone decides (see tests/real_apiserver_conformance.rs for that notion).
//!
//! For every property of the schema (present in the fixture or not) the
//! generator derives: every wrong JSON type, the empty string, maxLength+1
//! (ASCII, and multi-byte UTF-8 at and past the boundary), pattern, format
//! and enum violations, a missing required property, unknown fields, too few
//! / too many items, duplicates, and pairs of such mutations at once (cause
//! order, the `[a, b]` message form) plus one object with everything wrong.
//! Each runs as a CREATE and as an UPDATE from the valid object (transition
//! rules); mutations of an invalid stored object (ratcheting) run as an
//! UPDATE that changes only a label; status mutations run as status updates.
//! Old objects are stored under a permissive CRD, as in the conformance
//! differential; every UPDATE variant has an object name of its own.

mod common;

use std::sync::Arc;

use common::{
    differential::{
        apiserver_warnings, crd_decides, crd_warnings, install, library_review, test_crds, verdict_of_status,
    },
    kube_apiserver::{self, Auth, Kube, KubeApiserver},
    Case,
};
use serde_json::{json, Map, Value};

/// One change of an object: set the value at a JSON pointer (its parent
/// exists), or remove it.
#[derive(Clone, Debug)]
enum Edit {
    Set(String, Value),
    Remove(String),
}

#[derive(Clone, Debug)]
struct Mutation {
    label: String,
    edits: Vec<Edit>,
}

fn apply(obj: &Value, edits: &[Edit]) -> Option<Value> {
    let mut out = obj.clone();
    for e in edits {
        let ptr = match e {
            Edit::Set(p, _) | Edit::Remove(p) => p,
        };
        let (parent, key) = ptr.rsplit_once('/')?;
        let key = key.replace("~1", "/").replace("~0", "~");
        let target = out.pointer_mut(parent)?;
        match (e, target) {
            (Edit::Set(_, v), Value::Object(m)) => {
                m.insert(key, v.clone());
            }
            (Edit::Set(_, v), Value::Array(a)) => {
                let i: usize = key.parse().ok()?;
                *a.get_mut(i)? = v.clone();
            }
            (Edit::Remove(_), Value::Object(m)) => {
                m.remove(&key)?;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Values of every JSON type.
fn wrong_types(schema_type: &str) -> Vec<Value> {
    [json!("x"), json!(7), json!(1.5), json!(true), json!({}), json!(["x"]), Value::Null]
        .into_iter()
        .filter(|v| {
            let t = type_of(v);
            !(t == schema_type || (schema_type == "number" && t == "integer"))
        })
        .collect()
}

fn string_values(s: &Value) -> Vec<(String, Value)> {
    let mut out = vec![("empty string".to_string(), json!(""))];
    if let Some(max) = s["maxLength"].as_u64() {
        let max = max as usize;
        out.push((format!("{} ASCII chars (maxLength+1)", max + 1), json!("a".repeat(max + 1))));
        out.push((format!("{max} two-byte chars (at maxLength)"), json!("é".repeat(max))));
        out.push((format!("{} two-byte chars", max + 1), json!("é".repeat(max + 1))));
        out.push((format!("{} four-byte chars", max + 1), json!("😀".repeat(max + 1))));
    }
    if let Some(min) = s["minLength"].as_u64() {
        if min > 1 {
            out.push(("minLength-1".to_string(), json!("a".repeat(min as usize - 1))));
        }
    }
    out.push(("pattern breaker".to_string(), json!("Not Valid!")));
    out.push(("upper case".to_string(), json!("ABC")));
    out.push(("leading dash".to_string(), json!("-a")));
    if s.get("enum").is_some() {
        out.push(("outside the enum".to_string(), json!("Bogus")));
        out.push(("enum value in lower case".to_string(), json!(s["enum"][0].as_str().unwrap_or("x").to_lowercase())));
    }
    if let Some(f) = s["format"].as_str() {
        out.push((format!("not a {f}"), json!("yesterday")));
        if f == "date-time" {
            out.push(("date-time without zone".to_string(), json!("2026-11-29T15:00:00")));
            out.push(("date only".to_string(), json!("2026-11-29")));
        }
    }
    out
}

fn ptr(path: &[String]) -> String {
    path.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect()
}

/// A schema-valid-looking value for `s` (to fill absent nodes and lists).
fn sample(s: &Value) -> Value {
    match s["type"].as_str() {
        Some("string") => s["enum"].get(0).cloned().unwrap_or(json!("abc")),
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        _ => json!({}),
    }
}

/// The mutations of the node at `path` (schema `s`, current value `v`, absent
/// when `None`; its parent exists) and of everything below it.
fn walk(s: &Value, path: &mut Vec<String>, v: Option<&Value>, out: &mut Vec<Mutation>) {
    let here = ptr(path);
    let at = path.join(".");
    let t = s["type"].as_str().unwrap_or("");
    let preserve = s["x-kubernetes-preserve-unknown-fields"] == true;
    let int_or_string = s["x-kubernetes-int-or-string"] == true;
    let mut set = |label: String, val: Value| out.push(Mutation { label, edits: vec![Edit::Set(here.clone(), val)] });
    if !t.is_empty() && !int_or_string {
        for w in wrong_types(t) {
            set(format!("{at}: {} instead of {t}", type_of(&w)), w);
        }
    }
    match t {
        "string" => {
            for (l, val) in string_values(s) {
                set(format!("{at}: {l}"), val);
            }
        }
        "integer" | "number" => {
            set(format!("{at}: -1"), json!(-1));
            set(format!("{at}: huge"), json!(i64::MAX));
            if let Some(max) = s["maximum"].as_i64() {
                set(format!("{at}: maximum+1"), json!(max + 1));
            }
            if let Some(min) = s["minimum"].as_i64() {
                set(format!("{at}: minimum-1"), json!(min - 1));
            }
        }
        "array" => {
            let item = &s["items"];
            let first = v.and_then(|a| a.get(0)).cloned().unwrap_or_else(|| sample(item));
            set(format!("{at}: empty list"), json!([]));
            set(format!("{at}: duplicate items"), json!([first.clone(), first.clone()]));
            if let Some(max) = s["maxItems"].as_u64() {
                set(format!("{at}: maxItems+1 items"), Value::Array(vec![first.clone(); max as usize + 1]));
                let mut distinct = Vec::new();
                for i in 0..=max {
                    let mut x = first.clone();
                    if let Some(st) = x.as_str() {
                        x = json!(format!("{st}{i}"));
                    }
                    distinct.push(x);
                }
                set(format!("{at}: maxItems+1 distinct items"), Value::Array(distinct));
            }
            set(format!("{at}: null item"), json!([Value::Null]));
            set(format!("{at}: two wrong-typed items"), json!([{"a": 1}, 12]));
            if let Some(a) = v.and_then(Value::as_array) {
                for (i, x) in a.iter().enumerate().take(2) {
                    path.push(i.to_string());
                    walk(item, path, Some(x), out);
                    path.pop();
                }
            }
        }
        "object" | "" => {
            let props = s["properties"].as_object();
            let cur = v.and_then(Value::as_object);
            if let Some(cur) = cur {
                if !preserve && props.is_some() {
                    let mut m = cur.clone();
                    m.insert("bogusField".into(), json!("x"));
                    set(format!("{at}: an unknown field"), Value::Object(m.clone()));
                    m.insert("anotherBogus".into(), json!({"deep": 1}));
                    set(format!("{at}: two unknown fields"), Value::Object(m));
                }
                for r in s["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if cur.contains_key(r) {
                        let mut p = path.clone();
                        p.push(r.to_string());
                        out.push(Mutation {
                            label: format!("{at}: without required {r}"),
                            edits: vec![Edit::Remove(ptr(&p))],
                        });
                    }
                }
                if let Some(max) = s["maxProperties"].as_u64() {
                    let mut m = Map::new();
                    for i in 0..=max {
                        m.insert(format!("k{i}"), sample(&s["additionalProperties"]));
                    }
                    out.push(Mutation {
                        label: format!("{at}: maxProperties+1"),
                        edits: vec![Edit::Set(here.clone(), Value::Object(m))],
                    });
                }
            } else if v.is_none() {
                out.push(Mutation {
                    label: format!("{at}: empty object"),
                    edits: vec![Edit::Set(here.clone(), json!({}))],
                });
            }
            for (k, ps) in props.into_iter().flatten() {
                if path.len() == 1 && path[0] == "metadata" {
                    continue;
                }
                // Absent properties of absent objects are not reached.
                if cur.is_none() {
                    continue;
                }
                path.push(k.clone());
                walk(ps, path, cur.and_then(|c| c.get(k)), out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn metadata_mutations() -> Vec<Mutation> {
    let name = |l: &str, v: Value| Mutation {
        label: format!("metadata.name: {l}"),
        edits: vec![Edit::Set("/metadata/name".into(), v)],
    };
    vec![
        name("254 chars", json!("a".repeat(254))),
        name("253 chars", json!("a".repeat(253))),
        name("64 chars", json!("a".repeat(64))),
        name("upper case", json!("Bad")),
        name("underscore", json!("bad_name")),
        name("dots", json!("a.b.c")),
        name("leading dash", json!("-a")),
        name("empty", json!("")),
        name("number", json!(12)),
        Mutation {
            label: "metadata: unknown field".into(),
            edits: vec![Edit::Set("/metadata/bogus".into(), json!("x"))],
        },
        Mutation { label: "unknown top-level field".into(), edits: vec![Edit::Set("/bogusTop".into(), json!(1))] },
        Mutation { label: "no spec".into(), edits: vec![Edit::Remove("/spec".into())] },
    ]
}

/// The mutations of one fixture: every single one, pairs of mutations at
/// different places, and everything wrong-typed at once.
fn mutations_of(schema: &Value, obj: &Value, root: &str) -> Vec<Mutation> {
    let mut singles = Vec::new();
    let mut path = vec![root.to_string()];
    walk(&schema["properties"][root], &mut path, obj.get(root), &mut singles);
    let mut out = singles.clone();
    let n = singles.len();
    // Pairs: each mutation with one a third of the list further on (a
    // different place as a rule), skipping pairs at the same node.
    for i in 0..n {
        let Some(a) = singles.get(i) else { continue };
        let Some(b) = singles.get((i + n / 3 + 1) % n.max(1)) else { continue };
        let pa = a.label.split(':').next().unwrap_or_default();
        let pb = b.label.split(':').next().unwrap_or_default();
        if pa == pb || pa.starts_with(&format!("{pb}.")) || pb.starts_with(&format!("{pa}.")) {
            continue;
        }
        if i % 2 == 0 {
            out.push(Mutation {
                label: format!("{} + {}", a.label, b.label),
                edits: [a.edits.clone(), b.edits.clone()].concat(),
            });
        }
    }
    // Everything of the wrong type at once (leaves present in the object).
    let mut all = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for m in &singles {
        if let [Edit::Set(p, Value::Bool(true))] = m.edits.as_slice() {
            if obj.pointer(p).is_some_and(|x| x.is_string()) && !seen.iter().any(|s| p.starts_with(s.as_str())) {
                seen.push(p.clone());
                all.push(m.edits[0].clone());
            }
        }
    }
    out.push(Mutation { label: format!("every present string leaf under {root} a boolean"), edits: all });
    let mut long = Vec::new();
    for m in &singles {
        if m.label.ends_with("(maxLength+1)") {
            long.extend(m.edits.clone());
        }
    }
    out.push(Mutation { label: format!("every string under {root} too long"), edits: long });
    out
}

fn make_case(name: String, resource: &str, sub: Option<&str>, op: &str, obj: &Value, old: Option<&Value>) -> Case {
    Case {
        file: "variants".into(),
        name,
        review: common::admission_review("variant", resource, sub, op, Some(obj), old),
        settings: json!({"backupPreflight": false}),
        now: "2026-11-29T15:10:00Z".into(),
        allowed: true,
        message: None,
        code: None,
        causes: Vec::new(),
        warnings: Vec::new(),
        absent: Vec::new(),
        context: Vec::new(),
        patched: false,
        init_containers: Vec::new(),
        env: Vec::new(),
        no_env: Vec::new(),
        image: None,
        etcd_init: None,
        no_etcd_init: false,
        audit_annotations: serde_json::Map::new(),
    }
}

fn fixtures(file: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance").join(file)).expect("conformance file");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    doc["fixtures"].clone()
}

/// One variant: how it is sent.
struct Variant {
    case: Case,
    /// CREATE: the object; UPDATE: (old, new, subresource).
    old: Option<Value>,
    new: Value,
    sub: Option<&'static str>,
}

fn resource_of(kind: &str) -> &'static str {
    match kind {
        "HCPEtcdBackup" => "hcpetcdbackups",
        "HostedCluster" => "hostedclusters",
        _ => "hostedcontrolplanes",
    }
}

fn with_ns(obj: &Value, ns: &str, name: Option<&str>) -> Value {
    let mut o = obj.clone();
    o["metadata"]["namespace"] = json!(ns);
    if let Some(n) = name {
        o["metadata"]["name"] = json!(n);
    }
    o
}

fn variants(ns: &str) -> Vec<Variant> {
    let crds = test_crds();
    let schema_of = |kind: &str| {
        crds.iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .map(|c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone())
            .expect("CRD of kind")
    };
    let backup = fixtures("hcpetcdbackup.yaml");
    let hc = fixtures("hostedcluster.yaml");
    let mut bases: Vec<Value> = ["s3kms", "azurekey", "s3", "azure"].iter().map(|n| backup[n].clone()).collect();
    for n in ["hcurl", "hc"] {
        bases.push(hc[n].clone());
        let mut hcp = hc[n].clone();
        hcp["kind"] = json!("HostedControlPlane");
        bases.push(hcp);
    }
    let mut out = Vec::new();
    let mut serial = 0;
    for base in &bases {
        let kind = base["kind"].as_str().unwrap_or_default().to_string();
        let res = resource_of(&kind);
        let schema = schema_of(&kind);
        let base = with_ns(base, ns, None);
        let mut ms = mutations_of(&schema, &base, "spec");
        ms.extend(metadata_mutations());
        for m in &ms {
            let Some(new) = apply(&base, &m.edits) else { continue };
            let label = format!("{kind} {}: {}", base["metadata"]["name"].as_str().unwrap_or_default(), m.label);
            out.push(Variant {
                case: make_case(format!("CREATE {label}"), res, None, "CREATE", &new, None),
                old: None,
                new: new.clone(),
                sub: None,
            });
            if m.label.starts_with("metadata") || m.label.starts_with("no spec") || m.label.starts_with("unknown top") {
                continue;
            }
            // UPDATE from the valid object (transition rules).
            serial += 1;
            let name = format!("u{serial}");
            let old = with_ns(&base, ns, Some(&name));
            let new1 = with_ns(&new, ns, Some(&name));
            out.push(Variant {
                case: make_case(format!("UPDATE from valid {label}"), res, None, "UPDATE", &new1, Some(&old)),
                old: Some(old),
                new: new1,
                sub: None,
            });
            // UPDATE of the invalid stored object that changes only a label (ratcheting).
            serial += 1;
            let name = format!("u{serial}");
            let old = with_ns(&new, ns, Some(&name));
            let mut new2 = old.clone();
            new2["metadata"]["labels"] = json!({"touched": "yes"});
            out.push(Variant {
                case: make_case(format!("UPDATE unchanged invalid {label}"), res, None, "UPDATE", &new2, Some(&old)),
                old: Some(old),
                new: new2,
                sub: None,
            });
        }
    }
    // Status updates of a completed backup.
    let completed = with_ns(&backup["completed"], ns, None);
    let schema = schema_of("HCPEtcdBackup");
    for m in mutations_of(&schema, &completed, "status") {
        let Some(new) = apply(&completed, &m.edits) else { continue };
        serial += 1;
        let name = format!("u{serial}");
        let old = with_ns(&completed, ns, Some(&name));
        let new = with_ns(&new, ns, Some(&name));
        out.push(Variant {
            case: make_case(
                format!("status UPDATE HCPEtcdBackup: {}", m.label),
                "hcpetcdbackups",
                Some("status"),
                "UPDATE",
                &new,
                Some(&old),
            ),
            old: Some(old),
            new,
            sub: Some("status"),
        });
    }
    out
}

async fn run_all<T: Send + 'static>(
    items: Vec<impl std::future::Future<Output = T> + Send + 'static>,
    parallel: usize,
) -> Vec<T> {
    use futures::StreamExt as _;
    futures::stream::iter(items).buffered(parallel).collect().await
}

async fn differential(v: Kube) {
    let test = format!("variants_{}", v.minor());
    let Some(api) = kube_apiserver::shared(&test, v) else { return };
    let api: &'static KubeApiserver = api;
    let crds = test_crds();
    let ns = api.namespace(&format!("variants-{}", v.minor())).await;
    let all = variants(&ns);
    // The library's answers, and which variants the CRD alone decides.
    let mut chosen = Vec::new();
    let mut webhook_only = 0;
    for var in all {
        let resp = library_review(&var.case, v)["response"].clone();
        if crd_decides(&var.case, &resp, v) {
            chosen.push((Arc::new(var), resp));
        } else {
            webhook_only += 1;
        }
    }

    install(api, &crds, true, &ns).await;
    let stores: Vec<_> = chosen
        .iter()
        .filter(|(var, _)| var.old.is_some())
        .map(|(var, _)| {
            let var = var.clone();
            async move {
                let old = var.old.as_ref().expect("an old object");
                let r = api.create(old, false, &Auth::Admin).await.expect("store old");
                assert!(r.ok(), "{}: storing the old object: {} {}", var.case.name, r.status, r.text);
                if old.get("status").is_some() {
                    let r = api.update(old, Some("status"), false, &Auth::Admin).await.expect("store status");
                    assert!(r.ok(), "{}: storing the old status: {} {}", var.case.name, r.status, r.text);
                }
            }
        })
        .collect();
    run_all(stores, 8).await;
    install(api, &crds, false, &ns).await;

    let sends: Vec<_> = chosen
        .iter()
        .map(|(var, _)| {
            let var = var.clone();
            async move {
                match &var.old {
                    None => api.create(&var.new, true, &Auth::Admin).await,
                    Some(_) => api.update(&var.new, var.sub, true, &Auth::Admin).await,
                }
                .unwrap_or_else(|e| panic!("{}: {e}", var.case.name))
            }
        })
        .collect();
    let replies = run_all(sends, 8).await;

    let mut disagreements = Vec::new();
    for ((var, resp), reply) in chosen.iter().zip(replies) {
        let got =
            verdict_of_status(reply.ok(), &reply.body, apiserver_warnings(reply.warnings.iter().map(String::as_str)));
        let want = verdict_of_status(resp["allowed"] == true, &resp["status"], crd_warnings(&var.case, v, resp));
        if got != want {
            disagreements.push(format!("{}\n    apiserver {got:?}\n    review    {want:?}", var.case.name));
        }
    }
    let denied = chosen.iter().filter(|(_, r)| r["allowed"] != true).count();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "kube-apiserver {}: {} variants sent ({} denied by review), {} left to the webhook, {} disagreements\n",
            v.minor(),
            chosen.len(),
            denied,
            webhook_only,
            disagreements.len()
        )
        .as_bytes(),
    );
    assert!(chosen.len() > 500 && denied > 300, "the generator must produce many CRD-decided variants");
    assert!(
        disagreements.is_empty(),
        "{} of {} variants: the real kube-apiserver {} and review disagree:\n{}",
        disagreements.len(),
        chosen.len(),
        v.minor(),
        disagreements.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_1_35() {
    differential(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_1_36() {
    differential(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_1_37() {
    differential(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_1_34() {
    differential(Kube::V1_34).await;
}
