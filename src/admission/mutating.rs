//! The mutating decisions: etcd-init injection into the etcd StatefulSet,
//! and the verify step into HyperShift's etcd backup Job (never denied: a
//! backup Job this webhook cannot read is left as it is, with a note).
//! Fails closed: an etcd StatefulSet whose restore decision cannot be
//! established is denied with what is missing (the control-plane-operator
//! retries; the MutatingWebhookConfiguration's failurePolicy `Fail` covers an
//! unreachable webhook the same way; see the README).

use crate::json_at::At;
use serde_json::Value;

use super::{AdmissionRequest, Decision, DecisionInput, Operation};
use crate::{
    finding::Warning,
    mutate::{self, Outcome, Refusal},
};

pub fn mutation(req: &AdmissionRequest, input: &DecisionInput<'_>) -> Decision {
    let allow = |warnings: Vec<Warning>| Decision::allow(warnings).with_etcd_init(Outcome::NotApplicable);
    if !req.writes_main_resource() {
        return allow(Vec::new());
    }
    let Some(sts) = req.object.as_ref().filter(|o| o.is_object()) else {
        return allow(vec![Warning::note("request.object is not an object: etcd-init restore injection skipped")]);
    };
    let namespace = req.namespace_or_object();
    let name = sts.at("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let old = req.old_object.as_ref().filter(|_| req.operation == Operation::Update);
    let m = mutate::etcd_init_at(sts, old, namespace, input.lookup, input.settings, Some(&input.now));
    let decision = match (m.denial, m.patch) {
        (Some(Refusal::Lookup(reason)), _) => Decision::forbidden("statefulsets", "apps", name, &reason, m.warnings),
        (Some(Refusal::Template(errors)), _) => Decision::invalid("StatefulSet", "apps", name, &errors, m.warnings),
        (None, Some(patch)) => Decision::mutate(patch, m.warnings),
        (None, None) => Decision::allow(m.warnings),
    };
    decision.with_etcd_init(m.outcome)
}

/// The verify step for HyperShift's etcd backup Job, on CREATE (a Job's pod
/// template is immutable afterwards).
pub fn backup_job(req: &AdmissionRequest, input: &DecisionInput<'_>) -> Decision {
    let Some(job) = req.object.as_ref().filter(|o| o.is_object() && req.creates_main_resource()) else {
        return Decision::allow(Vec::new());
    };
    let exempt = super::enforce::exemption(req, &input.settings.enforcement).is_some();
    let m = mutate::backup_job::verify_at(job, input.settings, exempt);
    let decision = match m.patch {
        Some(patch) => Decision::mutate(patch, m.warnings),
        None => Decision::allow(m.warnings),
    };
    decision.with_backup_verify(m.verify)
}
