//! The Kubewarden policy module exactly as it ships (built and pre-initialised
//! by scripts/build-wasm.sh) on the runtime Kubewarden runs it on: wasmtime
//! through wapc's wasmtime-provider, the stack of Kubewarden's
//! policy-evaluator, with a **fresh instance per case** (rehydrated from a
//! pre-instantiated module, as policy-server does per request). The whole
//! conformance suite runs through it and must give the native path's
//! decisions, messages, codes, warnings and, for StatefulSets, the mutated
//! object. The context-aware host call is served from each case's fixtures.
//!
//! There is no second (wasmi) host any more: wasmtime via wapc is what
//! production runs, it answers host calls, and with the Cranelift overrides in
//! Cargo.toml it compiles the module in about a second, so a lighter
//! interpreter would only test a runtime nobody deploys.

mod common;
// Only here and in the benchmark: the other test binaries need no wasmtime.
#[path = "common/wasm_host.rs"]
mod wasm_host;

use std::sync::OnceLock;

use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};
use wasm_host::{cache_and_live_handler, context_handler, HostCallHandler, Policy, PolicyModule};

/// What the suite needs: the module scripts/build-wasm.sh builds.
fn wasm_module() -> common::env::Need {
    common::env::Need::File(wasm_host::module_path(), "build it with scripts/build-wasm.sh")
}

/// The shipped module, compiled once per test process.
fn module() -> &'static PolicyModule {
    static MODULE: OnceLock<PolicyModule> = OnceLock::new();
    MODULE.get_or_init(|| PolicyModule::load(&wasm_host::module_path()).unwrap_or_else(|e| panic!("{e}")))
}

/// A fresh instance with the clock of the suite (the conformance files' `now`).
fn fresh(objects: Vec<Value>) -> Policy {
    let now = parse_rfc3339("2026-11-29T15:10:00Z").expect("now");
    module().instance(Some(now), context_handler(objects)).expect("instance")
}

fn native(case: &common::Case) -> Value {
    let settings = Settings::from_json(&case.settings).expect("settings");
    let ctx = ContextObjects::from_values(case.context.clone());
    let now = Ok(parse_rfc3339(&case.now).expect("now"));
    review(&case.review, &DecisionInput { settings: &settings, lookup: Some(&ctx), now, expect: None }).expect("review")
        ["response"]
        .clone()
}

/// A conformance case whose etcd StatefulSet CREATE gets etcd-init injected.
fn injecting_create_case() -> common::Case {
    common::load_cases()
        .into_iter()
        .find(|c| {
            c.patched
                && c.review["request"]["operation"] == "CREATE"
                && c.review["request"]["resource"]["resource"] == "statefulsets"
        })
        .expect("an injecting CREATE case")
}

fn validation_request(case: &common::Case) -> Vec<u8> {
    serde_json::to_vec(&json!({"settings": case.settings, "request": case.review["request"]})).expect("json")
}

#[test]
fn conformance_suite_gives_identical_decisions_on_fresh_instances() {
    if !common::env::ready("conformance_suite_gives_identical_decisions_on_fresh_instances", &[wasm_module()]) {
        return;
    }
    let cases = common::load_cases();
    let mut failures = Vec::new();
    let mut mutated = 0;
    for case in &cases {
        let now = parse_rfc3339(&case.now).expect("now");
        let policy = module().instance(Some(now), context_handler(case.context.clone())).expect("fresh instance");
        let out = match policy.call("validate", &validation_request(case)) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: guest error {e}", case.name));
                continue;
            }
        };
        let wasm: Value = serde_json::from_slice(&out).expect("ValidationResponse JSON");
        let want = native(case);
        let mut problems = Vec::new();
        if wasm["accepted"] != want["allowed"] {
            problems.push(format!("accepted {} vs allowed {}", wasm["accepted"], want["allowed"]));
        }
        let msg = |v: &Value| v.as_str().unwrap_or_default().to_string();
        if msg(&wasm["message"]) != msg(&want["status"]["message"]) {
            problems.push(format!("message {:?} vs {:?}", wasm["message"], want["status"]["message"]));
        }
        if wasm.get("code").cloned().unwrap_or(Value::Null)
            != want["status"].get("code").cloned().unwrap_or(Value::Null)
        {
            problems.push(format!("code {} vs {}", wasm["code"], want["status"]["code"]));
        }
        let warns = |v: &Value| v.as_array().cloned().unwrap_or_default();
        if warns(&wasm["warnings"]) != warns(&want["warnings"]) {
            problems.push(format!("warnings {} vs {}", wasm["warnings"], want["warnings"]));
        }
        if wasm.get("audit_annotations") != want.get("auditAnnotations") {
            problems.push(format!("audit annotations {} vs {}", wasm["audit_annotations"], want["auditAnnotations"]));
        }
        // Kubewarden computes the patch from mutated_object (json_patch::diff, as
        // policy-evaluator does); applied to the request object it must give
        // exactly what the native patch gives.
        match (wasm.get("mutated_object"), common::decode_patch(&want)) {
            (None, None) => {}
            (Some(m), Some(Ok(native_patch))) => {
                let object = &case.review["request"]["object"];
                let from_wasm = json_patch::diff(object, m);
                let (mut a, mut b) = (object.clone(), object.clone());
                json_patch::patch(&mut a, &from_wasm).expect("kubewarden patch applies");
                json_patch::patch(&mut b, &native_patch).expect("native patch applies");
                if a != b || &a != m {
                    problems.push(format!(
                        "patched objects differ:\n  wasm   {}\n  native {}",
                        json!(from_wasm),
                        json!(native_patch)
                    ));
                }
                mutated += 1;
            }
            (m, p) => {
                problems.push(format!("mutated_object present: {}, native patch present: {}", m.is_some(), p.is_some()))
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{}: {}", case.name, problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(mutated >= 5, "only {mutated} mutations compared");
}

#[test]
fn protocol_version_and_settings_validation() {
    if !common::env::ready("protocol_version_and_settings_validation", &[wasm_module()]) {
        return;
    }
    let policy = fresh(vec![]);
    let v: Value =
        serde_json::from_slice(&policy.call("protocol_version", b"").expect("protocol_version")).expect("json");
    assert_eq!(v, json!("v1"));
    let ok: Value =
        serde_json::from_slice(&policy.call("validate_settings", br#"{"allowS3RestoreURL": true}"#).expect("ok"))
            .expect("json");
    assert_eq!(ok, json!({"valid": true}));
    let empty: Value = serde_json::from_slice(&policy.call("validate_settings", b"{}").expect("empty")).expect("json");
    assert_eq!(empty["valid"], true);
    for (bad, needle) in [
        (r#"{"allowS3RestoreUrl": true}"#, "unknown field `allowS3RestoreUrl`"),
        (r#"{"restoreUrlExpiryWarningSeconds": -1}"#, "invalid value"),
        (r#"{"restoreMemoryLimit": "lots"}"#, "not a Kubernetes quantity"),
        ("not json", "not JSON"),
    ] {
        let v: Value =
            serde_json::from_slice(&policy.call("validate_settings", bad.as_bytes()).expect("answer")).expect("json");
        assert_eq!(v["valid"], false, "{bad}");
        assert!(v["message"].as_str().unwrap_or_default().contains(needle), "{bad}: {}", v["message"]);
    }
    assert!(policy.call("no_such_operation", b"{}").is_err(), "an unknown operation is a guest error");
}

#[test]
fn bad_inputs_get_clear_rejections_never_a_trap() {
    if !common::env::ready("bad_inputs_get_clear_rejections_never_a_trap", &[wasm_module()]) {
        return;
    }
    let policy = fresh(vec![]);
    let call = |p: &Policy, payload: &[u8]| -> Value {
        serde_json::from_slice(&p.call("validate", payload).expect("validate answers")).expect("json")
    };
    let v = call(&policy, b"{not json");
    assert_eq!((v["accepted"].clone(), v["code"].clone()), (json!(false), json!(400)));
    assert!(v["message"].as_str().unwrap_or_default().contains("does not parse"));
    let v = call(&policy, br#"{"settings": {"bogus": 1}, "request": {}}"#);
    assert_eq!(v["accepted"], false);
    assert!(v["message"].as_str().unwrap_or_default().contains("unknown field `bogus`"), "{v}");
    let pod = json!({"settings": {}, "request": {
        "uid": "p1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}}});
    let v = call(&policy, &serde_json::to_vec(&pod).expect("json"));
    assert_eq!(v["accepted"], false);
    assert!(v["message"].as_str().unwrap_or_default().contains("does not handle v1/pods"), "{v}");
    // Still usable after all that.
    let v: Value = serde_json::from_slice(&policy.call("protocol_version", b"").expect("alive")).expect("json");
    assert_eq!(v, json!("v1"));
}

#[test]
fn without_the_host_capability_the_policy_denies_the_etcd_statefulset() {
    if !common::env::ready("without_the_host_capability_the_policy_denies_the_etcd_statefulset", &[wasm_module()]) {
        return;
    }
    let case = common::load_cases()
        .into_iter()
        .find(|c| c.patched && c.review["request"]["resource"]["resource"] == "statefulsets")
        .expect("an etcd-init mutation case");
    let refusing: HostCallHandler =
        Box::new(|_, _, _, _| Err("context-aware calls are not allowed for this policy".to_string()));
    let now = parse_rfc3339(&case.now).expect("now");
    let policy = module().instance(Some(now), refusing).expect("instance");
    let v: Value =
        serde_json::from_slice(&policy.call("validate", &validation_request(&case)).expect("validate")).expect("json");
    assert_eq!(v["accepted"], false, "a StatefulSet whose restore decision is unknown must not pass: {v}");
    assert!(v.get("mutated_object").is_none(), "{v}");
    assert_eq!(v["code"], 403);
    let m = v["message"].as_str().unwrap_or_default();
    assert!(m.contains("could not be read") && m.contains("host capability"), "{m}");
    assert!(m.contains("control-plane-operator retries"), "{m}");
    assert_eq!(policy.host_calls()[0].2, "list_resources_by_namespace");
}

/// policy-server lists from a reflector cache; the etcd StatefulSet CREATE is
/// decided on the HostedControlPlane read live (`get_resource`,
/// `disable_cache`), never on the list's copy alone. The stale cache is
/// reproduced on policy-server's side of the host call (a real one cannot be
/// held stale on demand).
#[test]
fn a_stale_list_cache_never_decides_the_etcd_statefulset_create() {
    if !common::env::ready("a_stale_list_cache_never_decides_the_etcd_statefulset_create", &[wasm_module()]) {
        return;
    }
    let case = injecting_create_case();
    let live = case.context.clone();
    let hcp = live.iter().find(|o| o["kind"] == "HostedControlPlane").expect("its HostedControlPlane").clone();
    // The old incarnation of the same name, still in the cache: no restore pending.
    let mut old = hcp.clone();
    old["metadata"]["uid"] = json!("00000000-0000-4000-8000-0000000000aa");
    old["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = json!(null);
    let cached: Vec<Value> = live.iter().map(|o| if o == &hcp { old.clone() } else { o.clone() }).collect();
    let now = parse_rfc3339(&case.now).expect("now");
    let run = |handler: HostCallHandler| {
        let policy = module().instance(Some(now), handler).expect("instance");
        let v: Value = serde_json::from_slice(&policy.call("validate", &validation_request(&case)).expect("validate"))
            .expect("json");
        let ops: Vec<String> = policy.host_calls().into_iter().map(|c| c.2).collect();
        (v, ops)
    };

    // The old incarnation alone says "no restore pending" (else this test
    // could not tell which object decided).
    let (v, _) = run(context_handler(cached.clone()));
    assert_eq!(v["accepted"], true, "{v}");
    let init =
        v["mutated_object"]["spec"]["template"]["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
    assert!(!init.iter().any(|c| c["name"] == "etcd-init"), "the old incarnation has a restore pending: {v}");

    // Stale cache, live apiserver: the restore is injected, as the live object says.
    let (v, ops) = run(cache_and_live_handler(cached.clone(), live.clone()));
    assert_eq!(v["accepted"], true, "{v}");
    let init =
        v["mutated_object"]["spec"]["template"]["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
    assert!(init.iter().any(|c| c["name"] == "etcd-init"), "the stale cache decided: {v}");
    assert_eq!(ops, ["list_resources_by_namespace", "get_resource"]);
    // The very object the native path makes from the live (the case's) context.
    let want = common::patched_object(&case, &native(&case)).expect("patch").expect("a patched object");
    assert_eq!(v["mutated_object"], want);

    // The cache holds a HostedControlPlane the apiserver no longer has: denied
    // with the failed live read named, never decided from the cache.
    let without: Vec<Value> = live.iter().filter(|o| o["kind"] != "HostedControlPlane").cloned().collect();
    let (v, _) = run(cache_and_live_handler(cached, without));
    assert_eq!(v["accepted"], false, "{v}");
    let m = v["message"].as_str().unwrap_or_default();
    assert!(m.contains("live read of HostedControlPlane") && m.contains("not found"), "{m}");
    assert!(v.get("mutated_object").is_none(), "{v}");
}

#[test]
fn the_shipped_module_is_a_plain_wapc_module_holding_the_pre_initialised_state() {
    if !common::env::ready(
        "the_shipped_module_is_a_plain_wapc_module_holding_the_pre_initialised_state",
        &[wasm_module()],
    ) {
        return;
    }
    use wasmtime_provider::wasmtime::ExternType;
    let shipped = module().module();
    let mut exports: Vec<&str> = shipped.exports().map(|e| e.name()).collect();
    exports.sort();
    // The waPC exports only: the init export is removed, and so is the one the
    // embedded files' static makes (src/embedded_text.rs).
    assert_eq!(exports, ["__guest_call", "memory", "wapc_init"]);
    let imports = |m: &wasmtime_provider::wasmtime::Module| {
        let mut v: Vec<(String, String)> =
            m.imports().map(|i| (i.module().to_string(), i.name().to_string())).collect();
        v.sort();
        v
    };
    assert!(
        imports(shipped).iter().all(|(m, _)| m == "wapc" || m == "wasi_snapshot_preview1"),
        "{:?}",
        imports(shipped)
    );
    let memory_pages = |m: &wasmtime_provider::wasmtime::Module| {
        m.exports()
            .find_map(|e| match e.ty() {
                ExternType::Memory(t) => Some(t.minimum()),
                _ => None,
            })
            .unwrap_or(0)
    };
    // scripts/build-wasm.sh keeps the module as compiled beside it: same
    // imports, and the snapshot's memory is larger (it holds the compiled rules).
    let raw = PolicyModule::load(&wasm_host::uninitialised_module_path()).expect("uninitialised module");
    assert_eq!(imports(shipped), imports(raw.module()));
    assert!(raw.module().exports().any(|e| e.name() == "wizer-initialize"));
    assert!(
        memory_pages(shipped) > memory_pages(raw.module()),
        "{} vs {} pages",
        memory_pages(shipped),
        memory_pages(raw.module())
    );
}

/// The files the crate embeds whole come first in the module's memory,
/// padded to whole 64 KiB windows, before every string literal
/// (`src/embedded_text.rs`): in the module as linked, the lowest data segment
/// (`.rodata`) starts a window with the files and nothing else up to a
/// window's end, and the literals start right after. (A fresh
/// instance maps each 64 KiB window it reads; the files between the
/// literals every request reads, or between the last literals and the
/// statics, cost a window more per request, issue #35.)
#[test]
fn the_embedded_files_come_first_in_memory_in_whole_windows() {
    let path = wasm_host::uninitialised_module_path();
    let need = common::env::Need::File(path.clone(), "build it with scripts/build-wasm.sh");
    if !common::env::ready("the_embedded_files_come_first_in_memory_in_whole_windows", &[need]) {
        return;
    }
    const WINDOW: i64 = 65536;
    let bytes = std::fs::read(&path).expect("the module as compiled");
    let mut segments: Vec<(i64, &[u8])> = Vec::new();
    let mut exported = false;
    for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
        match payload.expect("a valid module") {
            wasmparser::Payload::DataSection(reader) => {
                for data in reader {
                    let data = data.expect("a data segment");
                    if let wasmparser::DataKind::Active { offset_expr, .. } = data.kind {
                        let mut ops = offset_expr.get_operators_reader();
                        if let Ok(wasmparser::Operator::I32Const { value }) = ops.read() {
                            segments.push((i64::from(value), data.data));
                        }
                    }
                }
            }
            wasmparser::Payload::ExportSection(reader) => {
                exported |= reader
                    .into_iter()
                    .any(|e| e.expect("an export").name == hcp_etcd_admission::embedded_text::EXPORT_NAME);
            }
            _ => {}
        }
    }
    // The linked module exports the static (the name that sorts it first);
    // the shipped one does not (checked above).
    assert!(exported, "the linked module does not export {}", hcp_etcd_admission::embedded_text::EXPORT_NAME);
    segments.sort_by_key(|(at, _)| *at);
    assert!(segments.len() >= 2, "{} data segments: .rodata and .data expected", segments.len());
    let holds = |segment: &[u8], text: &str| {
        let probe = &text.as_bytes()[..text.len().min(256)];
        segment.windows(probe.len()).any(|w| w == probe)
    };
    let files = [
        include_str!("../crds/schemas/hcpetcdbackup.json"),
        include_str!("../crds/schemas/hostedcluster.json"),
        include_str!("../crds/schemas/hostedcontrolplane.json"),
        include_str!("../src/mutate/etcd-init.sh"),
        include_str!("../src/mutate/backup-verify.sh"),
    ];
    // The lowest segment (`.rodata`) starts a window with the files, one
    // after the other, then zeros to the end of a window, then the literals
    // (the check the build makes too) …
    let (at, rodata) = segments[0];
    let at = u64::try_from(at).expect("an address");
    assert_eq!(hcp_etcd_admission::embedded_text::check_first_data(at, rodata), Ok(()));
    let joined: usize = files.iter().map(|f| f.len()).sum();
    let padded = joined.next_multiple_of(WINDOW as usize);
    // … and the literals start the window after them; no file is among them.
    let literals = &rodata[padded..];
    assert!(holds(literals, "hypershift.openshift.io"), "no literal after the files' windows");
    for (i, file) in files.iter().enumerate() {
        assert!(!holds(literals, file), "embedded file {i} is also among the literals");
        assert!(segments[1..].iter().all(|(_, s)| !holds(s, file)), "embedded file {i} is also in .data");
    }
}

/// The annotated module (scripts/build-wasm.sh's annotate step, as `kwctl
/// annotate` does) carries metadata.yml in its `io.kubewarden.metadata`
/// custom section (the name policy-evaluator reads), with the protocol
/// version the module reports, and still loads and answers like the module
/// it was made from.
#[test]
fn the_annotated_module_carries_the_metadata_and_still_answers() {
    let path = wasm_host::module_path().with_file_name("hcp-etcd-admission.annotated.wasm");
    let need = common::env::Need::File(path.clone(), "build it with scripts/build-wasm.sh");
    if !common::env::ready("the_annotated_module_carries_the_metadata_and_still_answers", &[need]) {
        return;
    }
    let bytes = std::fs::read(&path).expect("annotated module");
    // Walk the sections: id (1 byte), size (LEB128), body.
    let leb = |b: &[u8], at: &mut usize| -> usize {
        let (mut n, mut shift) = (0usize, 0);
        loop {
            let byte = b[*at];
            *at += 1;
            n |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    };
    let (mut at, mut found) = (8usize, None);
    while at < bytes.len() {
        let id = bytes[at];
        at += 1;
        let size = leb(&bytes, &mut at);
        let end = at + size;
        if id == 0 {
            let mut p = at;
            let len = leb(&bytes, &mut p);
            if &bytes[p..p + len] == b"io.kubewarden.metadata" {
                found = Some(bytes[p + len..end].to_vec());
            }
        }
        at = end;
    }
    let section = found.expect("an io.kubewarden.metadata custom section");
    let got: Value = serde_json::from_slice(&section).expect("metadata JSON");
    let text = std::fs::read_to_string(common::root().join("metadata.yml")).expect("metadata.yml");
    let mut want: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    want["protocolVersion"] = json!("v1");
    assert_eq!(got, want);
    let module = PolicyModule::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let policy = module.instance(Some(0), context_handler(Vec::new())).expect("instance");
    let out = policy.call("protocol_version", b"").expect("protocol_version");
    assert_eq!(serde_json::from_slice::<Value>(&out).expect("json"), got["protocolVersion"], "as kwctl detects it");
}

/// Recorded host-capability sessions (tests/kubewarden/sessions/*.yaml): for
/// one conformance case, every host call the policy made and the host's
/// answer, in order. Replayed, the module must make exactly those calls
/// (same payloads, same order) and, fed the recorded answers, decide as the
/// native core does. `HCP_RECORD_SESSIONS=1` re-records them from the
/// conformance context (review the diff: a changed call is a changed contract
/// with the policy server).
#[test]
fn recorded_host_capability_sessions_replay() {
    if !common::env::ready("recorded_host_capability_sessions_replay", &[wasm_module()]) {
        return;
    }
    let dir = common::root().join("tests/kubewarden/sessions");
    let cases = common::load_cases();
    let record = std::env::var_os("HCP_RECORD_SESSIONS").is_some();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("sessions dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "recorded sessions: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("session");
        let session: Value = serde_yaml_ng::from_str(&text).expect("session YAML");
        let name = session["case"].as_str().expect("case");
        let case =
            cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("{}: no case {name:?}", file.display()));
        let now = parse_rfc3339(&case.now).expect("now");
        if record {
            let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
            let (inner, seen) = (context_handler(case.context.clone()), calls.clone());
            let handler: HostCallHandler = Box::new(move |b, n, o, payload| {
                let answer = inner(b, n, o, payload);
                let entry = json!({
                    "operation": format!("{b}/{n}/{o}"),
                    "request": serde_json::from_slice::<Value>(payload).unwrap_or(Value::Null),
                    "response": match &answer {
                        Ok(a) => json!({"type": "Success", "payload": String::from_utf8_lossy(a)}),
                        Err(e) => json!({"type": "Error", "message": e}),
                    },
                });
                seen.lock().expect("lock").push(entry);
                answer
            });
            let policy = module().instance(Some(now), handler).expect("instance");
            policy.call("validate", &validation_request(case)).expect("validate");
            let header: String = text.lines().take_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
            let body = json!({"case": name, "interactions": *calls.lock().expect("lock")});
            std::fs::write(&file, header + &serde_yaml_ng::to_string(&body).expect("yaml")).expect("write session");
            continue;
        }
        let recorded: Vec<Value> = session["interactions"].as_array().cloned().unwrap_or_default();
        let left = std::sync::Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(recorded.clone())));
        let queue = left.clone();
        let handler: HostCallHandler = Box::new(move |b, n, o, payload| {
            let next = queue.lock().expect("lock").pop_front().ok_or("a host call that was not recorded")?;
            let got: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
            if next["operation"] != format!("{b}/{n}/{o}") || next["request"] != got {
                return Err(format!("host call {b}/{n}/{o} {got} differs from the recorded {next}"));
            }
            match next["response"]["type"].as_str() {
                Some("Success") => Ok(next["response"]["payload"].as_str().unwrap_or_default().as_bytes().to_vec()),
                _ => Err(next["response"]["message"].as_str().unwrap_or("error").to_string()),
            }
        });
        let policy = module().instance(Some(now), handler).expect("instance");
        let out = policy.call("validate", &validation_request(case)).expect("validate");
        let wasm: Value = serde_json::from_slice(&out).expect("ValidationResponse");
        let want = native(case);
        assert_eq!(wasm["accepted"], want["allowed"], "{}: {wasm}", file.display());
        assert_eq!(
            wasm["message"].as_str().unwrap_or_default(),
            want["status"]["message"].as_str().unwrap_or_default(),
            "{}",
            file.display()
        );
        assert!(left.lock().expect("lock").is_empty(), "{}: recorded calls not made", file.display());
        assert!(!recorded.is_empty(), "{}: a session with no host call", file.display());
    }
}

/// The review's M2: policy-server keeps one reflector per distinct
/// (kind, namespace, label selector, field selector) a policy lists, for its
/// life. Over 60 HCPEtcdBackup CREATEs naming 60 different credentials
/// Secrets (and 3 namespaces), the lists the policy makes have at most one
/// key per kind and namespace: no selector carries a request's name. A
/// Secret not labelled is read with one live GET (no reflector).
#[test]
fn the_reflectors_a_policy_causes_are_bounded_by_the_namespaces_not_the_requests() {
    if !common::env::ready(
        "the_reflectors_a_policy_causes_are_bounded_by_the_namespaces_not_the_requests",
        &[wasm_module()],
    ) {
        return;
    }
    let case = common::load_cases()
        .into_iter()
        .find(|c| c.name.contains("s3 role ARN with everything in place"))
        .expect("the preflight case");
    let now = parse_rfc3339(&case.now).expect("now");
    let mut keys = std::collections::BTreeSet::new();
    let mut gets = 0;
    for i in 0..60 {
        let mut req = case.review["request"].clone();
        req["object"]["spec"]["storage"]["s3"]["credentials"]["name"] = json!(format!("creds-{i}"));
        let mut context = case.context.clone();
        // Half of the named Secrets exist unlabelled: read with a live GET.
        if i % 2 == 0 {
            let mut s = context.iter().find(|o| o["kind"] == "Secret").expect("secret").clone();
            s["metadata"]["name"] = json!(format!("creds-{i}"));
            s["metadata"]["labels"] = json!({});
            context.push(s);
        }
        let policy = module().instance(Some(now), context_handler(context)).expect("instance");
        let out = policy
            .call("validate", &serde_json::to_vec(&json!({"settings": case.settings, "request": req})).expect("json"));
        let v: Value = serde_json::from_slice(&out.expect("validate")).expect("json");
        let warned = v["warnings"].to_string();
        if i % 2 == 0 {
            assert!(!warned.contains("not found in namespace"), "an unlabelled Secret is found: {v}");
        } else {
            assert!(warned.contains(&format!("credential Secret \\\"creds-{i}\\\" not found")), "{v}");
        }
        for (_, _, op, payload) in policy.host_calls() {
            let p: Value = serde_json::from_slice(&payload).expect("payload");
            if op == "list_resources_by_namespace" {
                keys.insert(format!(
                    "{}|{}|{}|{}|{}",
                    p["api_version"], p["kind"], p["namespace"], p["label_selector"], p["field_selector"]
                ));
            } else if op == "get_resource" && p["kind"] == "Secret" {
                assert_eq!(p["disable_cache"], true, "{p}");
                gets += 1;
            }
        }
    }
    assert!(keys.iter().all(|k| !k.contains("creds-")), "a selector carries a request's name: {keys:?}");
    assert!(keys.len() <= 4, "{} reflector keys over 60 names: {keys:?}", keys.len());
    assert_eq!(gets, 60, "one live GET per Secret not among the labelled ones");
}

/// A live GET that fails for any reason but NotFound (policy-server's RBAC
/// without `get` on secrets, a timeout) leaves the Secret not checked, and
/// says so: it is never reported as missing. The Forbidden answer is
/// reproduced on policy-server's side of the host call, in kube-rs's shape.
#[test]
fn a_forbidden_secret_read_is_not_checked_rather_than_missing() {
    if !common::env::ready("a_forbidden_secret_read_is_not_checked_rather_than_missing", &[wasm_module()]) {
        return;
    }
    let case = common::load_cases()
        .into_iter()
        .find(|c| c.name.contains("s3 role ARN with everything in place"))
        .expect("the preflight case");
    let now = parse_rfc3339(&case.now).expect("now");
    let mut req = case.review["request"].clone();
    req["object"]["spec"]["storage"]["s3"]["credentials"]["name"] = json!("unlabelled");
    let run = |forbidden: bool| {
        let inner = context_handler(case.context.clone());
        let handler: HostCallHandler = Box::new(move |binding, ns, op, payload| {
            if forbidden && op == "get_resource" && String::from_utf8_lossy(payload).contains("\"Secret\"") {
                return Err("ApiError: secrets \"unlabelled\" is forbidden: User \"system:serviceaccount:kubewarden:policy-server\" cannot get resource \"secrets\" in API group \"\" in the namespace \"hypershift\": Forbidden (ErrorResponse { status: \"Failure\", reason: \"Forbidden\", code: 403 })".into());
            }
            inner(binding, ns, op, payload)
        });
        let policy = module().instance(Some(now), handler).expect("instance");
        let out = policy
            .call("validate", &serde_json::to_vec(&json!({"settings": case.settings, "request": req})).expect("json"));
        let v: Value = serde_json::from_slice(&out.expect("validate")).expect("json");
        v["warnings"].to_string()
    };
    // Absent (the apiserver's 404): the controller's wait, as always.
    assert!(run(false).contains("credential Secret \\\"unlabelled\\\" not found"), "{}", run(false));
    // Forbidden: not checked, and never called missing.
    let w = run(true);
    assert!(!w.contains("not found"), "a Secret that could not be read was called missing: {w}");
    assert!(w.contains("the credentials Secret not checked"), "{w}");
}

/// The restore script travels pre-escaped, and only the script does: a
/// string of the script's very length elsewhere in the object (an
/// annotation) is written as it is, on a fresh instance (whose first
/// container takes the copy made at pre-initialisation) and on one that
/// keeps answering (its earlier copies freed, their memory reused).
#[test]
fn only_the_restore_script_is_written_as_the_script() {
    if !common::env::ready("only_the_restore_script_is_written_as_the_script", &[wasm_module()]) {
        return;
    }
    let mut case = injecting_create_case();
    let script = hcp_etcd_admission::mutate::injected_script();
    let lookalike = "x".repeat(script.len());
    case.review["request"]["object"]["metadata"]["annotations"]["lookalike"] = json!(lookalike);
    let want = common::patched_object(&case, &native(&case)).expect("patch").expect("a patched object");
    let now = parse_rfc3339(&case.now).expect("now");
    let policy = module().instance(Some(now), context_handler(case.context.clone())).expect("instance");
    for call in 0..3 {
        let v: Value = serde_json::from_slice(&policy.call("validate", &validation_request(&case)).expect("validate"))
            .expect("json");
        let m = &v["mutated_object"];
        assert_eq!(m["metadata"]["annotations"]["lookalike"].as_str(), Some(lookalike.as_str()), "call {call}");
        let init = m["spec"]["template"]["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
        let etcd_init = init.iter().find(|c| c["name"] == "etcd-init").expect("etcd-init injected");
        assert_eq!(etcd_init["command"][2].as_str(), Some(script), "call {call}");
        assert_eq!(m, &want, "call {call}");
    }
}
