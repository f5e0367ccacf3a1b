//! The admission layer: an AdmissionReview v1 in, an AdmissionReview v1 out.
//!
//! Routes by `request.resource`, prepares the object the way the apiserver
//! does before validating admission (status dropped on CREATE, status kept
//! from the old object on a main-resource UPDATE, spec kept from the old
//! object on a `status` UPDATE), runs the schema (upstream rules) and the
//! project rules, and builds the response. The server, the CLI and the Wasm
//! policy all call [`review`]; none of them decides anything itself.

mod decision;
pub mod enforce;
pub mod lookup;
mod mutating;
mod validate;
mod wire;

pub use decision::{denial_message, Cause, Decision, Denial, DenialReason, Details, Verdict};
pub use validate::{warm_up, WarmUpError};
pub use wire::{
    parse_request, AdmissionRequest, AdmissionResponse, GroupVersionKind, GroupVersionResource, Operation, UserInfo,
};

use serde_json::Value;

use crate::settings::Settings;

/// What a webhook endpoint (or the CLI) expects to receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    HcpEtcdBackups,
    HostedClusters,
    HostedControlPlanes,
    /// The etcd StatefulSet of a hosted control plane (mutating).
    EtcdStatefulSets,
    /// Secrets labelled `hypershift.openshift.io/etcd-backup: "true"` (credentials format).
    EtcdBackupSecrets,
}

impl Target {
    /// The target a request's resource maps to, if any.
    pub fn of(resource: &GroupVersionResource) -> Option<Self> {
        if resource.group == "apps" && resource.resource == "statefulsets" {
            return Some(Target::EtcdStatefulSets);
        }
        if resource.group.is_empty() && resource.resource == "secrets" {
            return Some(Target::EtcdBackupSecrets);
        }
        if resource.group != crate::api::GROUP {
            return None;
        }
        match resource.resource.as_str() {
            "hcpetcdbackups" => Some(Target::HcpEtcdBackups),
            "hostedclusters" => Some(Target::HostedClusters),
            "hostedcontrolplanes" => Some(Target::HostedControlPlanes),
            _ => None,
        }
    }

    /// `group/resource` as shown in messages.
    pub fn resource(self) -> &'static str {
        match self {
            Target::HcpEtcdBackups => "hcpetcdbackups.hypershift.openshift.io",
            Target::HostedClusters => "hostedclusters.hypershift.openshift.io",
            Target::HostedControlPlanes => "hostedcontrolplanes.hypershift.openshift.io",
            Target::EtcdStatefulSets => "statefulsets.apps",
            Target::EtcdBackupSecrets => "secrets",
        }
    }

    /// The object kind.
    pub fn kind(self) -> &'static str {
        match self {
            Target::HcpEtcdBackups => "HCPEtcdBackup",
            Target::HostedClusters => "HostedCluster",
            Target::HostedControlPlanes => "HostedControlPlane",
            Target::EtcdStatefulSets => "StatefulSet",
            Target::EtcdBackupSecrets => "Secret",
        }
    }

    /// The target for an object kind (used by `check` to build a review).
    pub fn for_kind(kind: &str) -> Option<Self> {
        match kind {
            "HCPEtcdBackup" => Some(Target::HcpEtcdBackups),
            "HostedCluster" => Some(Target::HostedClusters),
            "HostedControlPlane" => Some(Target::HostedControlPlanes),
            "StatefulSet" => Some(Target::EtcdStatefulSets),
            "Secret" => Some(Target::EtcdBackupSecrets),
            _ => None,
        }
    }
}

/// Inputs of a decision besides the review itself.
#[derive(Clone, Copy)]
pub struct DecisionInput<'a> {
    pub settings: &'a Settings,
    /// Where the mutation finds the HostedControlPlane, and the HCPEtcdBackup
    /// preflight its objects; `None`: no lookup.
    pub lookup: Option<&'a dyn crate::lookup::Lookup>,
    /// The current time (Unix seconds), read once per request by the shell,
    /// or why it could not be read (time-dependent rules then deny).
    pub now: crate::time::Now,
    /// The endpoint's expected target; `None` routes by the request's resource.
    pub expect: Option<Target>,
}

/// Why an input got no AdmissionReview response at all (the server answers 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("body is not an AdmissionReview: {0}")]
    NotAReview(String),
    #[error("unsupported AdmissionReview apiVersion {0:?}: this webhook speaks admission.k8s.io/v1 only")]
    WrongApiVersion(String),
    #[error("AdmissionReview has no request")]
    MissingRequest,
    #[error("request has no uid; the response could not be matched to it")]
    MissingUid,
    #[error("the response does not serialise: {0}")]
    Encode(String),
}

/// One reviewed AdmissionReview: what the shells log and count, and what
/// goes back on the wire.
#[derive(Debug)]
pub struct Reviewed {
    /// The request, when it parsed (a request with a uid that does not parse
    /// is still answered: denied with the reason).
    pub request: Option<AdmissionRequest>,
    pub decision: Decision,
    /// The response AdmissionReview, exactly as sent.
    pub review: Value,
}

/// Reviews one AdmissionReview (as JSON): the typed decision and its wire form.
pub fn review_typed(input: &Value, input_decision: &DecisionInput<'_>) -> Result<Reviewed, ReviewError> {
    let (uid, request, decision) = match wire::parse_review(input)? {
        Ok(req) => {
            let decision = decide(&req, input_decision);
            (req.uid.clone(), Some(req), decision)
        }
        // The request carries a uid but does not parse: deny with the reason.
        Err((uid, problem)) => (uid, None, Decision::bad_request(problem)),
    };
    let (decision, response) = match AdmissionResponse::encode(uid.clone(), &decision) {
        Ok(r) => (decision, r),
        Err(e) => {
            let failed = Decision::internal_error(format!("the response does not serialise: {e}"));
            // A denial without a patch has nothing that can fail to serialise.
            let response = AdmissionResponse::encode(uid, &failed).map_err(|e| ReviewError::Encode(e.to_string()))?;
            (failed, response)
        }
    };
    Ok(Reviewed { request, decision, review: response.into_review() })
}

/// Reviews one AdmissionReview (as JSON) and returns the response AdmissionReview.
pub fn review(input: &Value, decision: &DecisionInput<'_>) -> Result<Value, ReviewError> {
    review_typed(input, decision).map(|r| r.review)
}

/// Decides one parsed request, with the `enforcement` settings applied.
pub fn decide(req: &AdmissionRequest, decision: &DecisionInput<'_>) -> Decision {
    let (raw, mutating) = decide_raw(req, decision);
    enforce::apply(raw, req, &decision.settings.enforcement, mutating)
}

/// The decision before enforcement, and whether the etcd mutation made it.
fn decide_raw(req: &AdmissionRequest, decision: &DecisionInput<'_>) -> (Decision, bool) {
    let target = Target::of(&req.resource);
    if decision.expect == Some(Target::EtcdStatefulSets) && target != Some(Target::EtcdStatefulSets) {
        // A mutating endpoint never blocks a request it was not meant to see.
        let warning = format!(
            "hcp-etcd-admission: the etcd StatefulSet mutation was called for {}; nothing changed (check the MutatingWebhookConfiguration rules)",
            target.map_or("an unknown resource", Target::resource)
        );
        return (Decision::allow(vec![warning]), true);
    }
    if target == Some(Target::EtcdStatefulSets) && decision.expect.is_none_or(|e| e == Target::EtcdStatefulSets) {
        return (mutating::decide(req, decision), true);
    }
    (validate::decide(req, decision), false)
}
