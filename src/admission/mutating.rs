//! The mutating decision: etcd-init injection into the etcd StatefulSet.
//! Fails closed: an etcd StatefulSet whose restore decision cannot be
//! established is denied with what is missing (the control-plane-operator
//! retries; the MutatingWebhookConfiguration's failurePolicy `Fail` covers an
//! unreachable webhook the same way; see the README).

use serde_json::Value;

use super::{AdmissionRequest, AdmissionResponse, DecisionInput, Verdict};
use crate::mutate::{self, Denial, Outcome};

pub fn decide(req: &AdmissionRequest, input: &DecisionInput<'_>) -> (AdmissionResponse, Outcome) {
    let allow = |warnings: Vec<String>| AdmissionResponse::from_verdict(req.uid.clone(), Verdict::allow(warnings));
    if !matches!(req.operation.as_str(), "CREATE" | "UPDATE")
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return (allow(Vec::new()), Outcome::NotApplicable);
    }
    let Some(sts) = req.object.as_ref().filter(|o| o.is_object()) else {
        let warning = "request.object is not an object: etcd-init restore injection skipped".to_string();
        return (allow(vec![warning]), Outcome::NotApplicable);
    };
    let namespace = req
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .or_else(|| sts.pointer("/metadata/namespace").and_then(Value::as_str))
        .unwrap_or_default();
    let name = sts.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let old = req.old_object.as_ref().filter(|_| req.operation == "UPDATE");
    let m = mutate::etcd_init(sts, old, namespace, input.lookup, input.settings);
    let response = match m.denial {
        Some(Denial::Lookup(reason)) => AdmissionResponse::from_verdict(
            req.uid.clone(),
            Verdict::forbidden("statefulsets", "apps", name, &reason, m.warnings),
        ),
        Some(Denial::Template(errors)) => AdmissionResponse::from_verdict(
            req.uid.clone(),
            Verdict::invalid("StatefulSet", "apps", name, &errors, m.warnings),
        ),
        None => {
            let resp = allow(m.warnings);
            match m.patch {
                Some(patch) => resp.with_patch(&patch),
                None => resp,
            }
        }
    };
    (response, m.outcome)
}
