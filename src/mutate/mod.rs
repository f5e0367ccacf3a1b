//! The `etcd-init` restore injection into a hosted control plane's etcd
//! StatefulSet (pure: object in, JSON patch out).
//!
//! Upstream HEAD appends a container that restores every member as its own
//! one-member cluster (split brain at 3 replicas) and runs it after
//! `reset-member`. Here each member restores with its own name and peer URL,
//! the full initial cluster and one token, before `reset-member`; member
//! identity is taken from the etcd container's own env so the two can never
//! disagree. The URL reaches the container only as an environment variable.

mod container;

use serde_json::Value;

pub use container::build_init_container;

use crate::{
    lookup::{restore_snapshot_url, snapshot_restored, Lookup},
    settings::Settings,
};

/// Name of the injected init container.
pub const INIT_CONTAINER: &str = "etcd-init";
/// The init container etcd-init must run before.
pub const RESET_MEMBER: &str = "reset-member";
/// Name of the StatefulSet this mutates.
pub const ETCD_STATEFULSET: &str = "etcd";

/// The result of a mutation decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mutation {
    /// The JSON patch (RFC 6902) to apply, when the object must change.
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<String>,
}

impl Mutation {
    fn none(warning: Option<String>) -> Self {
        Self { patch: None, warnings: warning.into_iter().collect() }
    }
}

/// Decides the etcd-init injection for a StatefulSet in `namespace`.
pub fn etcd_init(sts: &Value, namespace: &str, lookup: Option<&dyn Lookup>, settings: &Settings) -> Mutation {
    if sts.pointer("/metadata/name").and_then(Value::as_str) != Some(ETCD_STATEFULSET) {
        return Mutation::none(None);
    }
    let Some(lookup) = lookup else {
        return Mutation::none(Some(format!(
            "no HostedControlPlane lookup is available: etcd-init restore injection skipped for {namespace}/etcd"
        )));
    };
    let hcps = match lookup.hosted_control_planes(namespace) {
        Ok(h) => h,
        Err(why) => {
            return Mutation::none(Some(format!(
            "HostedControlPlanes in {namespace:?} could not be looked up ({why}): etcd-init restore injection skipped"
        )))
        }
    };
    let Some(hcp) = hcps.first() else {
        return Mutation::none(Some(format!(
            "no HostedControlPlane in namespace {namespace:?}: etcd-init restore injection skipped"
        )));
    };
    let mut warnings = Vec::new();
    if hcps.len() > 1 {
        warnings.push(format!("{} HostedControlPlanes in namespace {namespace:?}; using the first", hcps.len()));
    }
    let Some(url) = restore_snapshot_url(hcp) else {
        return Mutation { warnings, ..Mutation::default() };
    };
    if snapshot_restored(hcp) {
        return Mutation { warnings, ..Mutation::default() };
    }
    let container = match build_init_container(sts, namespace, url, settings) {
        Ok(c) => c,
        Err(problem) => {
            warnings.push(format!("etcd-init restore injection skipped for {namespace}/etcd: {problem}"));
            return Mutation { warnings, ..Mutation::default() };
        }
    };
    if sts.pointer("/spec/template/spec").and_then(Value::as_object).is_none() {
        warnings.push("the StatefulSet has no spec.template.spec: etcd-init restore injection skipped".to_string());
        return Mutation { warnings, ..Mutation::default() };
    }
    let patch = init_container_patch(sts, container);
    Mutation { patch, warnings }
}

/// The JSON patch that puts `container` immediately before `reset-member`
/// (appended when there is none), replacing any other `etcd-init`; `None`
/// when it is already there, identical, in the right place. Built by hand,
/// not diffed: a handful of operations and no copy of the StatefulSet.
fn init_container_patch(sts: &Value, container: Value) -> Option<json_patch::Patch> {
    use json_patch::{AddOperation, PatchOperation, RemoveOperation};
    const LIST: &str = "/spec/template/spec/initContainers";
    let pointer = |s: String| json_patch::jsonptr::PointerBuf::parse(&s).unwrap_or_default();
    let name_of = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_string);
    let Some(current) = sts.pointer(LIST).and_then(Value::as_array) else {
        return Some(json_patch::Patch(vec![PatchOperation::Add(AddOperation {
            path: pointer(LIST.to_string()),
            value: Value::Array(vec![container]),
        })]));
    };
    let names: Vec<Option<String>> = current.iter().map(name_of).collect();
    let others: Vec<usize> = (0..names.len()).filter(|&i| names[i].as_deref() != Some(INIT_CONTAINER)).collect();
    // Where etcd-init belongs among the other init containers.
    let slot = others.iter().position(|&i| names[i].as_deref() == Some(RESET_MEMBER)).unwrap_or(others.len());
    let stale: Vec<usize> = (0..names.len()).filter(|&i| names[i].as_deref() == Some(INIT_CONTAINER)).collect();
    if let [only] = stale.as_slice() {
        let position_ok = others.iter().filter(|&&i| i < *only).count() == slot;
        if position_ok && current[*only] == container {
            return None;
        }
    }
    // Remove every etcd-init (highest index first), then add ours at its slot.
    let mut ops: Vec<PatchOperation> = stale
        .iter()
        .rev()
        .map(|i| PatchOperation::Remove(RemoveOperation { path: pointer(format!("{LIST}/{i}")) }))
        .collect();
    let path = if slot == others.len() { format!("{LIST}/-") } else { format!("{LIST}/{slot}") };
    ops.push(PatchOperation::Add(AddOperation { path: pointer(path), value: container }));
    Some(json_patch::Patch(ops))
}
