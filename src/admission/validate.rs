//! The validating decisions: HCPEtcdBackup, HostedCluster, HostedControlPlane.

use std::sync::OnceLock;

use serde_json::Value;

use super::{response::Verdict, AdmissionRequest, DecisionInput, Target};
use crate::{
    api::GROUP,
    crd,
    rules::{self, RuleContext},
    schema::CompiledCrdSchema,
};

fn compiled(target: Target) -> Option<&'static CompiledCrdSchema> {
    static BACKUP: OnceLock<CompiledCrdSchema> = OnceLock::new();
    static HC: OnceLock<CompiledCrdSchema> = OnceLock::new();
    static HCP: OnceLock<CompiledCrdSchema> = OnceLock::new();
    Some(match target {
        Target::HcpEtcdBackups => BACKUP.get_or_init(|| CompiledCrdSchema::compile(crd::hcpetcdbackup_schema())),
        Target::HostedClusters => HC.get_or_init(|| CompiledCrdSchema::compile(crd::hostedcluster_schema())),
        Target::HostedControlPlanes => HCP.get_or_init(|| CompiledCrdSchema::compile(crd::hostedcontrolplane_schema())),
        Target::EtcdStatefulSets => return None,
    })
}

/// Compiles every schema, every CEL rule and every regex now (the server calls
/// this before it reports ready, the Wasm module at build time: see
/// [`crate::preinit`]); returns what does not compile (a test keeps it empty).
pub fn warm_up() -> Vec<String> {
    let mut problems = Vec::new();
    for t in [Target::HcpEtcdBackups, Target::HostedClusters, Target::HostedControlPlanes] {
        if let Some(schema) = compiled(t) {
            problems.extend(schema.compile_all());
            problems.extend(schema.compile_regexes().into_iter().map(|p| format!("regex {p:?} does not compile")));
        }
    }
    problems
}

/// Decides a request.
pub fn decide(req: &AdmissionRequest, input: &DecisionInput<'_>) -> Verdict {
    let wrong_endpoint = |expected: Target| {
        Verdict::bad_request(format!(
            "this endpoint validates {}, but the request is for {}; check the webhook configuration's rules",
            expected.resource(),
            resource_name(req)
        ))
    };
    let Some(target) = Target::of(&req.resource) else {
        return match input.expect {
            Some(t) => wrong_endpoint(t),
            None => Verdict::bad_request(format!("hcp-etcd-admission does not handle {}", resource_name(req))),
        };
    };
    if let Some(expect) = input.expect.filter(|e| *e != target) {
        return wrong_endpoint(expect);
    }
    match req.operation.as_str() {
        "CREATE" | "UPDATE" => {}
        // Deleting or connecting is never judged here.
        _ => return Verdict::allow(Vec::new()),
    }
    let Some(object) = req.object.as_ref().filter(|o| o.is_object()) else {
        return Verdict::bad_request(format!(
            "request.object must be a {} object for {}",
            target.kind(),
            req.operation
        ));
    };
    if let Some(kind) = object.get("kind").and_then(Value::as_str) {
        if kind != target.kind() {
            return Verdict::bad_request(format!("request.object is a {kind:?}, expected {:?}", target.kind()));
        }
    }
    let old = if req.operation == "UPDATE" { req.old_object.as_ref().filter(|o| o.is_object()) } else { None };
    if req.operation == "UPDATE" && old.is_none() {
        return Verdict::bad_request("request.oldObject must be an object for UPDATE");
    }
    let subresource = req.sub_resource.as_deref().unwrap_or("");
    if !subresource.is_empty() && subresource != "status" {
        return Verdict::allow(Vec::new());
    }
    let Some(schema) = compiled(target) else {
        return Verdict::bad_request(format!("{} is not validated by hcp-etcd-admission", target.resource()));
    };
    let prepared = prepare(object, old, subresource == "status");
    let outcome = schema.validate(&prepared, old);
    let ctx = RuleContext { settings: input.settings, now: input.now };
    let findings = match target {
        Target::HcpEtcdBackups => rules::check_hcpetcdbackup(&prepared, old, &ctx),
        Target::HostedClusters | Target::HostedControlPlanes => rules::check_hosted(&prepared, old, &ctx),
        Target::EtcdStatefulSets => rules::Findings::default(),
    };
    let mut errors = outcome.errors;
    errors.extend(findings.errors);
    let mut warnings: Vec<String> = outcome.unknown_fields.iter().map(|f| format!("unknown field {f:?}")).collect();
    warnings.extend(findings.warnings);
    if errors.is_empty() {
        Verdict::allow(warnings)
    } else {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).or(req.name.as_deref()).unwrap_or_default();
        Verdict::invalid(target.kind(), GROUP, name, &errors, warnings)
    }
}

fn resource_name(req: &AdmissionRequest) -> String {
    let r = &req.resource;
    if r.group.is_empty() {
        format!("{}/{}", r.version, r.resource)
    } else {
        format!("{}.{}", r.resource, r.group)
    }
}

/// The object as the apiserver hands it to validation: on CREATE, status is
/// dropped (status subresource); on a main UPDATE, status comes from the old
/// object; on a status UPDATE, spec comes from the old object.
fn prepare<'a>(object: &'a Value, old: Option<&Value>, status_update: bool) -> std::borrow::Cow<'a, Value> {
    let from_old = if status_update { "spec" } else { "status" };
    let wanted = old.and_then(|o| o.get(from_old));
    if object.get(from_old) == wanted {
        return std::borrow::Cow::Borrowed(object);
    }
    let mut obj = object.clone();
    if let Some(map) = obj.as_object_mut() {
        match wanted {
            Some(v) => {
                map.insert(from_old.to_string(), v.clone());
            }
            None => {
                map.remove(from_old);
            }
        }
    }
    std::borrow::Cow::Owned(obj)
}
