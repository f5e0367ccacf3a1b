//! The conformance suite as data: loads `tests/conformance/*.yaml` and turns
//! every case into the AdmissionReview kube-apiserver would send. Shared by
//! every runner (library, `review` binary, Wasm module) so that all of them
//! are held to the same expectations.
#![allow(dead_code)]

pub mod cluster;
pub mod differential;
pub mod env;
pub mod fake_apiserver;
pub mod https;
pub mod kube_apiserver;
pub mod kubelet;
pub mod running;
pub mod snapshot_server;
pub mod tools;
pub mod xorshift;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// One expected `status.details.causes[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub file: String,
    pub name: String,
    pub review: Value,
    pub settings: Value,
    pub now: String,
    pub allowed: bool,
    /// Denials: the complete `status.message`.
    pub message: Option<String>,
    /// Denials: `status.code` (422 with causes, 400 without, unless given).
    pub code: Option<u64>,
    /// Denials: the complete `status.details.causes`, in order.
    pub causes: Vec<Cause>,
    /// The complete `response.warnings`, in order.
    pub warnings: Vec<String>,
    pub absent: Vec<String>,
    /// Objects the decision may look up (HostedControlPlanes; for the
    /// HCPEtcdBackup preflight also HCPEtcdBackups, Secrets, StatefulSets).
    pub context: Vec<Value>,
    /// For mutations: whether a patch is expected, the resulting init
    /// container order, env values etcd-init must carry (and must not), its image.
    pub patched: bool,
    pub init_containers: Vec<String>,
    pub env: Vec<(String, String)>,
    pub no_env: Vec<String>,
    pub image: Option<String>,
    /// Fields the etcd-init container must carry (a subset match: objects
    /// key by key, arrays element by element).
    pub etcd_init: Option<Value>,
    /// For a removal: no etcd-init may remain after the patch.
    pub no_etcd_init: bool,
    /// The complete `response.auditAnnotations` (empty: none may be sent).
    pub audit_annotations: serde_json::Map<String, Value>,
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Replaces `@@PREFIX<n>@@` with n characters (long values stay readable in YAML).
fn expand(v: &mut Value) {
    match v {
        Value::String(s) => {
            while let Some(start) = s.find("@@PREFIX") {
                let rest = &s[start + 8..];
                let Some(end) = rest.find("@@") else { break };
                let n: usize = rest[..end].parse().expect("@@PREFIX<n>@@");
                s.replace_range(start..start + 8 + end + 2, &"p".repeat(n));
            }
        }
        Value::Array(a) => a.iter_mut().for_each(expand),
        Value::Object(o) => o.values_mut().for_each(expand),
        _ => {}
    }
}

fn build(fixtures: &Value, base: Option<&Value>, merge: Option<&Value>) -> Option<Value> {
    let name = base?.as_str()?;
    let mut obj = fixtures.get(name).unwrap_or_else(|| panic!("unknown fixture {name}")).clone();
    if let Some(m) = merge {
        json_patch::merge(&mut obj, m);
    }
    expand(&mut obj);
    Some(obj)
}

fn group_version(resource: &str) -> (&'static str, &'static str, &'static str) {
    match resource {
        "hcpetcdbackups" => ("hypershift.openshift.io", "v1beta1", "HCPEtcdBackup"),
        "hostedclusters" => ("hypershift.openshift.io", "v1beta1", "HostedCluster"),
        "hostedcontrolplanes" => ("hypershift.openshift.io", "v1beta1", "HostedControlPlane"),
        "statefulsets" => ("apps", "v1", "StatefulSet"),
        "secrets" => ("", "v1", "Secret"),
        "jobs" => ("batch", "v1", "Job"),
        other => panic!("unknown resource {other}"),
    }
}

/// An AdmissionReview v1 exactly as kube-apiserver sends it.
/// The server path of the webhook that receives reviews of `resource`.
pub fn webhook_path(resource: &str) -> String {
    use hcp_etcd_admission::admission::Target;
    let target = match resource {
        "statefulsets" => Target::EtcdStatefulSets,
        "secrets" => Target::EtcdBackupSecrets,
        "jobs" => Target::EtcdBackupJobs,
        "hcpetcdbackups" => Target::HcpEtcdBackups,
        "hostedcontrolplanes" => Target::HostedControlPlanes,
        _ => Target::HostedClusters,
    };
    target.path()
}

pub fn admission_review(
    uid: &str,
    resource: &str,
    sub: Option<&str>,
    op: &str,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let (group, version, kind) = group_version(resource);
    let meta = obj.or(old);
    let name = meta.and_then(|o| o.pointer("/metadata/name")).cloned().unwrap_or(Value::Null);
    let namespace = meta.and_then(|o| o.pointer("/metadata/namespace")).cloned().unwrap_or(Value::Null);
    let options_kind = match op {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "namespace": namespace,
        "operation": op,
        "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if let Some(s) = sub {
        request["subResource"] = json!(s);
        request["requestSubResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Loads every case of every conformance file. Cases of `hostedclusters` are
/// also emitted as `hostedcontrolplanes` (they share upstream's EtcdSpec).
pub fn load_cases() -> Vec<Case> {
    let dir = root().join("tests/conformance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/conformance")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for path in files {
        cases.extend(load_file(&path));
    }
    cases
}

/// The keys a case may have (a typo must not silently drop an expectation).
const CASE_KEYS: &[&str] = &[
    "name",
    "resource",
    "operation",
    "subResource",
    "base",
    "merge",
    "oldBase",
    "oldMerge",
    "settings",
    "now",
    "allowed",
    "message",
    "code",
    "causes",
    "warnings",
    "absent",
    "context",
    "patched",
    "initContainers",
    "env",
    "noEnv",
    "image",
    "etcdInit",
    "noEtcdInit",
    "userInfo",
    "auditAnnotations",
];

fn causes_of(file: &str, name: &str, v: Option<&Value>) -> Vec<Cause> {
    let Some(list) = v else { return Vec::new() };
    list.as_array()
        .unwrap_or_else(|| panic!("{file}: {name}: causes must be a list"))
        .iter()
        .map(|c| {
            let get = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("{file}: {name}: every cause needs reason, field and message"))
                    .to_string()
            };
            Cause { reason: get("reason"), field: get("field"), message: get("message") }
        })
        .collect()
}

/// For the HostedControlPlane run of a HostedCluster case: the same text with
/// the kind and resource swapped.
fn for_variant(text: &str, res: &str) -> String {
    if res == "hostedcontrolplanes" {
        text.replace("HostedCluster", "HostedControlPlane").replace("hostedclusters", "hostedcontrolplanes")
    } else {
        text.to_string()
    }
}

fn load_file(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path).expect("read conformance file");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("conformance YAML");
    let file = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let fixtures = doc.get("fixtures").cloned().unwrap_or(json!({}));
    let file_now = doc.get("now").and_then(Value::as_str).unwrap_or("2026-11-29T15:00:00Z").to_string();
    // File-level settings; a case's own settings are merged over them.
    let file_settings = doc.get("settings").cloned().unwrap_or(json!({}));
    let mut out = Vec::new();
    for (i, c) in doc.get("cases").and_then(Value::as_array).expect("cases").iter().enumerate() {
        let name = c["name"].as_str().expect("case name").to_string();
        for key in c.as_object().expect("a case is a mapping").keys() {
            assert!(
                CASE_KEYS.contains(&key.as_str()),
                "{file}: {name}: unknown key {key:?} (expectations are complete: message, code, causes, warnings; see the file header)"
            );
        }
        let resource = c["resource"].as_str().expect("resource").to_string();
        let op = c.get("operation").and_then(Value::as_str).unwrap_or("CREATE");
        let sub = c.get("subResource").and_then(Value::as_str);
        let obj = build(&fixtures, c.get("base"), c.get("merge"));
        let old = build(&fixtures, c.get("oldBase"), c.get("oldMerge"));
        let (obj, old) = if op == "DELETE" { (None, obj) } else { (obj, old) };
        let allowed = c["allowed"].as_bool().expect("allowed");
        let message = c.get("message").and_then(Value::as_str).map(str::to_string);
        let causes = causes_of(&file, &name, c.get("causes"));
        assert_eq!(
            allowed,
            message.is_none() && causes.is_empty(),
            "{file}: {name}: a denial needs its complete message (and causes); an allowed case has neither"
        );
        let code =
            c.get("code").and_then(Value::as_u64).or((!allowed).then_some(if causes.is_empty() { 400 } else { 422 }));
        let variants: Vec<&str> = if resource == "hostedclusters" {
            vec!["hostedclusters", "hostedcontrolplanes"]
        } else {
            vec![resource.as_str()]
        };
        for res in variants {
            let (_, _, kind) = group_version(res);
            let retag = |o: &Option<Value>| {
                o.clone().map(|mut v| {
                    if res == "hostedcontrolplanes" && v.get("kind").and_then(Value::as_str) == Some("HostedCluster") {
                        v["kind"] = json!(kind);
                    }
                    v
                })
            };
            let (o, ol) = (retag(&obj), retag(&old));
            let uid = format!("{file}-{i}-{res}");
            let mut review = admission_review(&uid, res, sub, op, o.as_ref(), ol.as_ref());
            if let Some(user) = c.get("userInfo") {
                review["request"]["userInfo"] = user.clone();
            }
            out.push(Case {
                file: file.clone(),
                name: format!("{name} [{res}]"),
                review,
                settings: {
                    let mut s = file_settings.clone();
                    if let Some(own) = c.get("settings") {
                        json_patch::merge(&mut s, own);
                    }
                    s
                },
                now: c.get("now").and_then(Value::as_str).unwrap_or(&file_now).to_string(),
                allowed,
                message: message.as_deref().map(|m| for_variant(m, res)),
                code,
                causes: causes.iter().map(|c| Cause { message: for_variant(&c.message, res), ..c.clone() }).collect(),
                warnings: strings(c.get("warnings")).iter().map(|w| for_variant(w, res)).collect(),
                absent: strings(c.get("absent")),
                context: strings(c.get("context"))
                    .iter()
                    .map(|n| fixtures.get(n.as_str()).unwrap_or_else(|| panic!("unknown fixture {n}")).clone())
                    .collect(),
                patched: c.get("patched").and_then(Value::as_bool).unwrap_or(false),
                init_containers: strings(c.get("initContainers")),
                env: c
                    .get("env")
                    .and_then(Value::as_object)
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default(),
                no_env: strings(c.get("noEnv")),
                image: c.get("image").and_then(Value::as_str).map(str::to_string),
                etcd_init: c.get("etcdInit").cloned(),
                no_etcd_init: c.get("noEtcdInit").and_then(Value::as_bool).unwrap_or(false),
                audit_annotations: c
                    .get("auditAnnotations")
                    .map(|a| a.as_object().cloned().expect("auditAnnotations is a mapping"))
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// YAML single-quoted scalar.
fn yaml_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A field path, plain when YAML allows it inside a flow mapping.
fn yaml_field(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
        s.to_string()
    } else {
        yaml_quote(s)
    }
}

/// The response's expectations as they would be written in a case (printed
/// when a case fails, so a new case can be checked and pasted).
pub fn as_case_yaml(resp: &Value) -> String {
    let mut out = format!("    allowed: {}\n", resp["allowed"]);
    if let Some(status) = resp.get("status") {
        out += &format!("    message: {}\n", yaml_quote(status["message"].as_str().unwrap_or_default()));
        let code = status["code"].as_u64().unwrap_or_default();
        let causes = status["details"]["causes"].as_array().cloned().unwrap_or_default();
        if code != if causes.is_empty() { 400 } else { 422 } {
            out += &format!("    code: {code}\n");
        }
        if !causes.is_empty() {
            out += "    causes:\n";
            for c in causes {
                out += &format!(
                    "      - {{reason: {}, field: {}, message: {}}}\n",
                    c["reason"].as_str().unwrap_or_default(),
                    yaml_field(c["field"].as_str().unwrap_or_default()),
                    yaml_quote(c["message"].as_str().unwrap_or_default())
                );
            }
        }
    }
    if let Some(ws) = resp.get("warnings").and_then(Value::as_array) {
        out += "    warnings:\n";
        for w in ws {
            out += &format!("      - {}\n", yaml_quote(w.as_str().unwrap_or_default()));
        }
    }
    if let Some(a) = resp.get("auditAnnotations").and_then(Value::as_object) {
        out += "    auditAnnotations:\n";
        for (k, v) in a {
            out += &format!("      {k}: {}\n", yaml_quote(v.as_str().unwrap_or_default()));
        }
    }
    out
}

/// Checks a response AdmissionReview against the case: the complete result
/// (allowed, status message, code, reason, details, every cause, every
/// warning), never a part of it. Returns the problems.
pub fn check_response(case: &Case, review: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let resp = &review["response"];
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        problems.push("response is not an AdmissionReview v1".to_string());
    }
    if resp["uid"] != case.review["request"]["uid"] {
        problems.push(format!("uid not echoed: {}", resp["uid"]));
    }
    if resp["allowed"].as_bool() != Some(case.allowed) {
        problems.push(format!("allowed = {}, expected {}", resp["allowed"], case.allowed));
    }
    let status = resp.get("status");
    match (status, case.allowed) {
        (Some(s), true) => problems.push(format!("an allowed response carries a status: {s}")),
        (None, false) => problems.push("a denial without a status".to_string()),
        (Some(s), false) => problems.extend(check_status(case, s)),
        (None, true) => {}
    }
    let warnings: Vec<String> = resp["warnings"]
        .as_array()
        .map(|a| a.iter().map(|w| w.as_str().unwrap_or("<not a string>").to_string()).collect())
        .unwrap_or_default();
    if warnings != case.warnings {
        problems.push(format!("warnings {warnings:?}\n      expected {:?}", case.warnings));
    }
    if resp.get("warnings").is_some_and(|w| w.as_array().is_some_and(Vec::is_empty)) {
        problems.push("an empty warnings list is sent (it must be omitted)".to_string());
    }
    let audit = resp.get("auditAnnotations").and_then(Value::as_object).cloned().unwrap_or_default();
    if audit != case.audit_annotations {
        problems.push(format!("auditAnnotations {audit:?}\n      expected {:?}", case.audit_annotations));
    }
    let whole = review.to_string();
    for a in &case.absent {
        if whole.contains(a.as_str()) {
            problems.push(format!("response leaks {a:?}"));
        }
    }
    if resp.get("patchType").is_some() && resp.get("patch").is_none() {
        problems.push("patchType without patch".to_string());
    }
    problems.extend(check_patch(case, resp));
    if !problems.is_empty() {
        problems.push(format!("the response as a case:\n{}", as_case_yaml(resp)));
    }
    problems
}

fn check_status(case: &Case, status: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let code = status["code"].as_u64();
    if code != case.code {
        problems.push(format!("status.code {code:?}, expected {:?}", case.code));
    }
    let want_reason = match case.code {
        Some(422) => "Invalid",
        Some(400) => "BadRequest",
        Some(403) => "Forbidden",
        Some(500) => "InternalError",
        _ => "?",
    };
    if status["reason"] != want_reason || status["status"] != "Failure" {
        problems.push(format!(
            "status.reason {} / status {}, expected {want_reason} / Failure",
            status["reason"], status["status"]
        ));
    }
    let message = status["message"].as_str().unwrap_or_default();
    if Some(message) != case.message.as_deref() {
        problems.push(format!("message {message:?}\n      expected {:?}", case.message.as_deref().unwrap_or_default()));
    }
    let causes: Vec<Cause> = status["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| Cause {
                    reason: c["reason"].as_str().unwrap_or_default().to_string(),
                    field: c["field"].as_str().unwrap_or_default().to_string(),
                    message: c["message"].as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    if causes != case.causes {
        problems.push(format!("causes {causes:#?}\n      expected {:#?}", case.causes));
    }
    if matches!(case.code, Some(422) | Some(403)) {
        // NewInvalid names the kind; NewForbidden the resource.
        let req = &case.review["request"];
        let obj = if req["object"].is_object() { &req["object"] } else { &req["oldObject"] };
        let kind = if case.code == Some(403) { &req["resource"]["resource"] } else { &req["kind"]["kind"] };
        let want = json!({
            "name": obj["metadata"]["name"].as_str().or(req["name"].as_str()).unwrap_or_default(),
            "group": req["kind"]["group"],
            "kind": kind,
        });
        let details = &status["details"];
        if details["name"] != want["name"] || details["group"] != want["group"] || details["kind"] != want["kind"] {
            problems.push(format!("status.details {details}, expected name/group/kind {want}"));
        }
    } else if status.get("details").is_some() {
        problems.push(format!("status.details on a {:?} denial", case.code));
    }
    problems
}

/// Applies a response's patch to the request object (`None` without a patch).
pub fn patched_request_object(object: &Value, resp: &Value) -> Result<Option<Value>, String> {
    let Some(patch) = decode_patch(resp) else { return Ok(None) };
    let patch = patch?;
    let mut obj = object.clone();
    json_patch::patch(&mut obj, &patch).map_err(|e| format!("patch does not apply: {e}"))?;
    Ok(Some(obj))
}

/// Decodes the base64 JSON patch of a response.
pub fn decode_patch(resp: &Value) -> Option<Result<json_patch::Patch, String>> {
    use base64::Engine as _;
    let b64 = resp.get("patch")?;
    let Some(b64) = b64.as_str() else { return Some(Err(format!("patch is not a base64 string: {b64}"))) };
    Some(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("patch is not base64: {e}"))
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| format!("patch is not a JSON patch: {e}"))),
    )
}

/// Applies a response's patch to the case's request object.
pub fn patched_object(case: &Case, resp: &Value) -> Result<Option<Value>, String> {
    patched_request_object(&case.review["request"]["object"], resp)
}

fn check_patch(case: &Case, resp: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let has_patch = resp.get("patch").is_some();
    if has_patch != case.patched {
        problems.push(format!("patch present = {has_patch}, expected {}", case.patched));
    }
    if has_patch && resp.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
        problems.push("patch without patchType JSONPatch".to_string());
    }
    let obj = match patched_object(case, resp) {
        Ok(Some(o)) => o,
        Ok(None) => return problems,
        Err(e) => {
            problems.push(e);
            return problems;
        }
    };
    let inits: Vec<Value> =
        obj.pointer("/spec/template/spec/initContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
    if !case.init_containers.is_empty() && names != case.init_containers {
        problems.push(format!("initContainers {names:?}, expected {:?}", case.init_containers));
    }
    // The container the mutation adds: etcd-init, or the backup Job's verify step.
    let injected = if case.review["request"]["resource"]["resource"] == "jobs" { "verify" } else { "etcd-init" };
    let found = inits.iter().find(|c| c["name"] == injected);
    if case.no_etcd_init {
        if found.is_some() {
            problems.push(format!("an {injected} container remains after the patch"));
        }
        return problems;
    }
    let Some(init) = found else {
        problems.push(format!("no {injected} container after the patch"));
        return problems;
    };
    let env: Vec<(String, Value)> = init["env"]
        .as_array()
        .map(|a| a.iter().map(|e| (e["name"].as_str().unwrap_or_default().to_string(), e.clone())).collect())
        .unwrap_or_default();
    for (k, v) in &case.env {
        match env.iter().find(|(n, _)| n == k) {
            Some((_, e)) if e["value"].as_str() == Some(v.as_str()) => {}
            other => problems.push(format!("{injected} env {k} = {:?}, expected {v:?}", other.map(|o| &o.1))),
        }
    }
    for k in &case.no_env {
        if env.iter().any(|(n, _)| n == k) {
            problems.push(format!("etcd-init must not carry env {k}"));
        }
    }
    if let Some(image) = &case.image {
        if init["image"].as_str() != Some(image.as_str()) {
            problems.push(format!("etcd-init image {}, expected {image}", init["image"]));
        }
    }
    if let Some(want) = &case.etcd_init {
        if let Err(at) = subset(want, init, "etcd-init") {
            problems.push(format!("etcd-init differs at {at}: {}", init));
        }
    }
    // The script never embeds object data: the URL travels only in env.
    let url =
        env.iter().find(|(n, _)| n == "RESTORE_URL_ETCD").and_then(|(_, e)| e["value"].as_str()).unwrap_or("\u{0}");
    if init["command"].to_string().contains(url) {
        problems.push("the restore URL appears in the command".to_string());
    }
    problems
}

/// Whether `want` is contained in `got` (objects key by key, arrays element
/// by element and of the same length, scalars equal); the path of the first
/// difference otherwise.
pub fn subset(want: &Value, got: &Value, at: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let path = format!("{at}.{k}");
                match g.get(k) {
                    Some(gv) => subset(v, gv, &path)?,
                    None if v.is_null() => {}
                    None => return Err(format!("{path} (missing)")),
                }
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            w.iter().zip(g).enumerate().try_for_each(|(i, (a, b))| subset(a, b, &format!("{at}[{i}]")))
        }
        _ if want == got => Ok(()),
        _ => Err(format!("{at}: expected {want}, got {got}")),
    }
}

/// Puts the control-plane-operator's etcd-init carrying `url` into `sts`
/// (upstream #9048's shape: before reset-member, else last), in place of any
/// etcd-init there: what the operator renders while a restore is pending,
/// and where the webhook copies the URL from (no answer holds it).
pub fn render_etcd_init(sts: &mut Value, url: &str) {
    let init = serde_json::json!({
        "name": "etcd-init", "image": "quay.io/openshift/etcd:4.20",
        "command": ["/bin/sh", "-ce", "curl -o /tmp/snapshot \"$RESTORE_URL_ETCD\""],
        "env": [{"name": "RESTORE_URL_ETCD", "value": url}],
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]
    });
    let spec = &mut sts["spec"]["template"]["spec"];
    let mut list: Vec<Value> = spec["initContainers"].as_array().cloned().unwrap_or_default();
    list.retain(|c| c["name"] != "etcd-init");
    let at = list.iter().position(|c| c["name"] == "reset-member").unwrap_or(list.len());
    list.insert(at, init);
    spec["initContainers"] = Value::Array(list);
}

/// HyperShift's etcd backup Job as `hypershift-operator/controllers/etcdbackup/
/// reconciler.go` builds it (`../shared/reference/hypershift-facts.md` §2,
/// "The Job"), named `name` in the operator's namespace `namespace`, for the
/// hosted control plane `hc1` in `hcp_namespace`.
pub fn hypershift_backup_job(namespace: &str, hcp_namespace: &str, name: &str) -> Value {
    let service = format!("https://etcd-client.{hcp_namespace}.svc:2379");
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {
            "app": "etcd-backup", "hypershift.openshift.io/hcp": "hc1",
            "hypershift.openshift.io/backup-name": "daily", "hypershift.openshift.io/hcp-namespace": hcp_namespace}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 900, "ttlSecondsAfterFinished": 600,
            "template": {"metadata": {"labels": {"app": "etcd-backup"}}, "spec": {"restartPolicy": "Never",
                "serviceAccountName": "etcd-backup-job",
                "initContainers": [
                    {"name": "fetch-certs", "image": "quay.io/hypershift/hypershift:latest",
                     "command": ["control-plane-operator", "fetch-etcd-certs", "--hcp-namespace", hcp_namespace, "--output-dir", "/etc/etcd-certs"],
                     "volumeMounts": [{"name": "etcd-certs", "mountPath": "/etc/etcd-certs"}]},
                    {"name": "snapshot", "image": "quay.io/openshift-release-dev/etcd:4.20",
                     "env": [{"name": "ETCDCTL_API", "value": "3"}],
                     "command": ["/usr/bin/etcdctl", "--endpoints", service,
                        "--cacert", "/etc/etcd-certs/ca.crt", "--cert", "/etc/etcd-certs/etcd-client.crt",
                        "--key", "/etc/etcd-certs/etcd-client.key", "snapshot", "save", "/etc/etcd-backup/snapshot.db"],
                     "volumeMounts": [{"name": "etcd-certs", "mountPath": "/etc/etcd-certs"},
                                      {"name": "etcd-backup", "mountPath": "/etc/etcd-backup"}]}],
                "containers": [{"name": "upload", "image": "quay.io/hypershift/hypershift:latest",
                    "command": ["control-plane-operator", "etcd-upload", "--snapshot-path", "/etc/etcd-backup/snapshot.db",
                                "--storage-type", "S3", "--aws-bucket", "b", "--aws-region", "us-east-1", "--key-prefix", "hc1",
                                "--credentials-file", "/etc/etcd-backup-creds/credentials"],
                    "volumeMounts": [{"name": "etcd-backup", "mountPath": "/etc/etcd-backup"},
                                     {"name": "backup-credentials", "mountPath": "/etc/etcd-backup-creds"}]}],
                "volumes": [{"name": "etcd-certs", "emptyDir": {}}, {"name": "etcd-backup", "emptyDir": {}},
                            {"name": "backup-credentials", "secret": {"secretName": "aws-creds"}}]}}}
    })
}

/// A child process, killed and reaped when dropped (a test's etcd, serve, …).
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An empty directory `<tmp>/<prefix>-<tag>-<pid>` (emptied when it exists).
pub fn fresh_dir(prefix: &str, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}
