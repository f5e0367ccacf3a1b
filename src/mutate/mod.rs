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

pub use container::{build_init_container, RESTORE_SCRIPT};

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
    /// The object after the patch, when it changes.
    pub mutated: Option<Value>,
    pub warnings: Vec<String>,
}

impl Mutation {
    fn none(warning: Option<String>) -> Self {
        Self { patch: None, mutated: None, warnings: warning.into_iter().collect() }
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
    let current: Vec<Value> =
        sts.pointer("/spec/template/spec/initContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut desired: Vec<Value> =
        current.iter().filter(|c| c.get("name").and_then(Value::as_str) != Some(INIT_CONTAINER)).cloned().collect();
    let at = desired
        .iter()
        .position(|c| c.get("name").and_then(Value::as_str) == Some(RESET_MEMBER))
        .unwrap_or(desired.len());
    desired.insert(at, container);
    if desired == current {
        return Mutation { warnings, ..Mutation::default() };
    }
    let mut mutated = sts.clone();
    let Some(pod_spec) = mutated.pointer_mut("/spec/template/spec").and_then(Value::as_object_mut) else {
        warnings.push("the StatefulSet has no spec.template.spec: etcd-init restore injection skipped".to_string());
        return Mutation { warnings, ..Mutation::default() };
    };
    pod_spec.insert("initContainers".to_string(), Value::Array(desired));
    let patch = json_patch::diff(sts, &mutated);
    Mutation { patch: Some(patch), mutated: Some(mutated), warnings }
}
