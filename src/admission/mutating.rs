//! The mutating decision: etcd-init injection into the etcd StatefulSet.
//! Never denies: a mutation that cannot be computed is an allow with a warning
//! (the MutatingWebhookConfiguration's failurePolicy covers an unreachable
//! webhook; see the README for why it is `Fail`).

use serde_json::Value;

use super::{AdmissionRequest, AdmissionResponse, DecisionInput, Verdict};
use crate::mutate;

pub fn decide(req: &AdmissionRequest, input: &DecisionInput<'_>) -> AdmissionResponse {
    let allow = |warnings: Vec<String>| AdmissionResponse::from_verdict(req.uid.clone(), Verdict::allow(warnings));
    if !matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return allow(Vec::new());
    }
    let Some(sts) = req.object.as_ref().filter(|o| o.is_object()) else {
        return allow(vec!["request.object is not an object: etcd-init restore injection skipped".to_string()]);
    };
    let namespace = req
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .or_else(|| sts.pointer("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or_default();
    let m = mutate::etcd_init(sts, namespace, input.lookup, input.settings);
    let resp = allow(m.warnings);
    match m.patch {
        Some(patch) => resp.with_patch(&patch),
        None => resp,
    }
}
