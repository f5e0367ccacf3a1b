//! The admission layer: an AdmissionReview v1 in, an AdmissionReview v1 out.
//!
//! Routes by `request.resource`, prepares the object the way the apiserver
//! does before validating admission (status dropped on CREATE, status kept
//! from the old object on a main-resource UPDATE, spec kept from the old
//! object on a `status` UPDATE), runs the schema (upstream rules) and the
//! project rules, and builds the response. The server, the CLI and the Wasm
//! policy all call [`review`]; none of them decides anything itself.

mod mutating;
mod response;
mod validate;
mod wire;

pub use response::{denial_message, Verdict};
pub use validate::warm_up;
pub use wire::{AdmissionRequest, AdmissionResponse, GroupVersionKind, GroupVersionResource, Status, StatusCause};

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
}

impl Target {
    /// The target a request's resource maps to, if any.
    pub fn of(resource: &GroupVersionResource) -> Option<Self> {
        if resource.group == "apps" && resource.resource == "statefulsets" {
            return Some(Target::EtcdStatefulSets);
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
        }
    }

    /// The object kind.
    pub fn kind(self) -> &'static str {
        match self {
            Target::HcpEtcdBackups => "HCPEtcdBackup",
            Target::HostedClusters => "HostedCluster",
            Target::HostedControlPlanes => "HostedControlPlane",
            Target::EtcdStatefulSets => "StatefulSet",
        }
    }

    /// The target for an object kind (used by `check` to build a review).
    pub fn for_kind(kind: &str) -> Option<Self> {
        match kind {
            "HCPEtcdBackup" => Some(Target::HcpEtcdBackups),
            "HostedCluster" => Some(Target::HostedClusters),
            "HostedControlPlane" => Some(Target::HostedControlPlanes),
            "StatefulSet" => Some(Target::EtcdStatefulSets),
            _ => None,
        }
    }
}

/// Inputs of a decision besides the review itself.
#[derive(Clone, Copy)]
pub struct DecisionInput<'a> {
    pub settings: &'a Settings,
    /// Where the mutation finds the HostedControlPlane; `None`: no lookup.
    pub lookup: Option<&'a dyn crate::lookup::Lookup>,
    /// Current time, Unix seconds.
    pub now: i64,
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
}

/// Reviews one AdmissionReview (as JSON) and returns the response AdmissionReview.
pub fn review(input: &Value, decision: &DecisionInput<'_>) -> Result<Value, ReviewError> {
    review_with_outcome(input, decision).map(|(review, _)| review)
}

/// [`review`], plus what the etcd-init mutation did when it ran (for metrics).
pub fn review_with_outcome(
    input: &Value,
    decision: &DecisionInput<'_>,
) -> Result<(Value, Option<crate::mutate::Outcome>), ReviewError> {
    let request = wire::parse_review(input)?;
    let (response, outcome) = match request {
        Ok(req) => respond_with_outcome(&req, decision),
        // The request carries a uid but does not parse: deny with the reason.
        Err((uid, problem)) => (AdmissionResponse::from_verdict(uid, Verdict::bad_request(problem)), None),
    };
    Ok((response.into_review(), outcome))
}

/// Decides one parsed request.
pub fn respond(req: &AdmissionRequest, decision: &DecisionInput<'_>) -> AdmissionResponse {
    respond_with_outcome(req, decision).0
}

/// [`respond`], plus the etcd-init mutation's outcome when it ran.
pub fn respond_with_outcome(
    req: &AdmissionRequest,
    decision: &DecisionInput<'_>,
) -> (AdmissionResponse, Option<crate::mutate::Outcome>) {
    let target = Target::of(&req.resource);
    if decision.expect == Some(Target::EtcdStatefulSets) && target != Some(Target::EtcdStatefulSets) {
        // A mutating endpoint never blocks a request it was not meant to see.
        let warning = format!(
            "hcp-etcd-admission: the etcd StatefulSet mutation was called for {}; nothing changed (check the MutatingWebhookConfiguration rules)",
            target.map_or("an unknown resource", Target::resource)
        );
        return (AdmissionResponse::from_verdict(req.uid.clone(), Verdict::allow(vec![warning])), None);
    }
    if target == Some(Target::EtcdStatefulSets) && decision.expect.is_none_or(|e| e == Target::EtcdStatefulSets) {
        let (response, outcome) = mutating::decide(req, decision);
        return (response, Some(outcome));
    }
    let verdict = validate::decide(req, decision);
    (AdmissionResponse::from_verdict(req.uid.clone(), verdict), None)
}
