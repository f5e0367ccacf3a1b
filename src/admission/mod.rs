//! The admission layer: an AdmissionReview v1 in, an AdmissionReview v1 out.
//!
//! Routes by `request.resource`, prepares the object the way the apiserver
//! does before validating admission (status dropped on CREATE, status kept
//! from the old object on a main-resource UPDATE, spec kept from the old
//! object on a `status` UPDATE), runs the schema (upstream rules) and the
//! project rules, and builds the response. The server, the CLI and the Wasm
//! policy all call [`review`]; none of them decides anything itself.

pub mod answer_bounds;
pub mod cost;
mod decision;
pub mod enforce;
mod mutating;
pub mod plan;
mod validate;
mod wire;

pub use decision::{denial_message, Cause, Decision, Denial, DenialReason, Details, Verdict};
pub use plan::{plan, ReadPlan};
pub use validate::{compact, warm_up, WarmUpError, VALIDATED};
pub use wire::{
    parse_request, parse_request_owned, AdmissionRequest, AdmissionResponse, GroupVersionKind, GroupVersionResource,
    Operation, UserInfo,
};

use serde_json::Value;

use crate::settings::Settings;

/// What a webhook endpoint (or the CLI) expects to receive: one per
/// webhook, named the same in the server's paths and its metrics.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Target {
    HcpEtcdBackups,
    HostedClusters,
    HostedControlPlanes,
    /// The etcd StatefulSet of a hosted control plane (mutating).
    EtcdStatefulSets,
    /// Secrets labelled `hypershift.openshift.io/etcd-backup: "true"` (credentials format).
    EtcdBackupSecrets,
    /// HyperShift's etcd backup Job (mutating: the verify step).
    EtcdBackupJobs,
}

/// One webhook kind, whole: every name the server, the metrics, the
/// messages and `check` use for it, in one row (linkerd's one `impl` per
/// kind, as data). Adding a webhook is adding a row.
struct Kind {
    target: Target,
    /// The last segment of its path, its metrics label.
    label: &'static str,
    /// The API group and plural resource it receives.
    group: &'static str,
    plural: &'static str,
    /// `group/resource` as messages show it.
    resource: &'static str,
    kind: &'static str,
    mutating: bool,
}

/// Every webhook, in the order the README lists them.
const KINDS: [Kind; 6] = [
    Kind {
        target: Target::HcpEtcdBackups,
        label: "hcpetcdbackups",
        group: crate::api::GROUP,
        plural: "hcpetcdbackups",
        resource: "hcpetcdbackups.hypershift.openshift.io",
        kind: "HCPEtcdBackup",
        mutating: false,
    },
    Kind {
        target: Target::HostedClusters,
        label: "hostedclusters",
        group: crate::api::GROUP,
        plural: "hostedclusters",
        resource: "hostedclusters.hypershift.openshift.io",
        kind: "HostedCluster",
        mutating: false,
    },
    Kind {
        target: Target::HostedControlPlanes,
        label: "hostedcontrolplanes",
        group: crate::api::GROUP,
        plural: "hostedcontrolplanes",
        resource: "hostedcontrolplanes.hypershift.openshift.io",
        kind: "HostedControlPlane",
        mutating: false,
    },
    Kind {
        target: Target::EtcdStatefulSets,
        label: "etcd-statefulsets",
        group: "apps",
        plural: "statefulsets",
        resource: "statefulsets.apps",
        kind: "StatefulSet",
        mutating: true,
    },
    Kind {
        target: Target::EtcdBackupSecrets,
        label: "etcd-backup-secrets",
        group: "",
        plural: "secrets",
        resource: "secrets",
        kind: "Secret",
        mutating: false,
    },
    Kind {
        target: Target::EtcdBackupJobs,
        label: "etcd-backup-jobs",
        group: "batch",
        plural: "jobs",
        resource: "jobs.batch",
        kind: "Job",
        mutating: true,
    },
];

impl Target {
    /// Every webhook, in the order the README lists them.
    pub const ALL: [Target; 6] =
        [KINDS[0].target, KINDS[1].target, KINDS[2].target, KINDS[3].target, KINDS[4].target, KINDS[5].target];

    fn row(self) -> &'static Kind {
        // Every target has its row (`tests::every_target_has_its_row`); the
        // first row stands in, never reached.
        KINDS.iter().find(|k| k.target == self).unwrap_or(&KINDS[0])
    }

    /// The webhook's name: the last segment of its path, its metrics label.
    pub fn label(self) -> &'static str {
        self.row().label
    }

    /// Whether this webhook mutates (a MutatingWebhookConfiguration's).
    pub fn mutating(self) -> bool {
        self.row().mutating
    }

    /// The server's path for this webhook (`/validate/…`, `/mutate/…`).
    pub fn path(self) -> String {
        let verb = if self.mutating() { "mutate" } else { "validate" };
        format!("/{verb}/{}", self.label())
    }

    /// The target a request's resource maps to, if any.
    pub fn of(resource: &GroupVersionResource) -> Option<Self> {
        KINDS.iter().find(|k| k.group == resource.group && k.plural == resource.resource).map(|k| k.target)
    }

    /// `group/resource` as shown in messages.
    pub fn resource(self) -> &'static str {
        self.row().resource
    }

    /// The object kind.
    pub fn kind(self) -> &'static str {
        self.row().kind
    }

    /// The target for an object kind (used by `check` to build a review).
    pub fn for_kind(kind: &str) -> Option<Self> {
        KINDS.iter().find(|k| k.kind == kind).map(|k| k.target)
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
    #[error("request uid is longer than {0} bytes (an apiserver's uid is a 36-character UUID); not answered")]
    UidTooLong(usize),
    #[error("the response does not serialise: {0}")]
    Encode(String),
}

/// An AdmissionReview parsed once: the uid its answer carries, and the
/// request, or why the request does not parse (it is still answered:
/// denied with the reason). Planned ([`ParsedReview::plan`]) and decided
/// ([`review_parsed`]) without being parsed again.
#[derive(Debug, Clone)]
pub struct ParsedReview {
    uid: String,
    request: Result<AdmissionRequest, String>,
}

impl ParsedReview {
    /// Parses an AdmissionReview, taking its objects over (no copy).
    pub fn parse(input: Value) -> Result<Self, ReviewError> {
        let (uid, request) = wire::parse_review(input)?;
        Ok(Self { uid, request })
    }

    /// The request, when it parsed.
    pub fn request(&self) -> Option<&AdmissionRequest> {
        self.request.as_ref().ok()
    }

    /// What the decision at endpoint `expect` will read ([`plan()`]).
    pub fn plan(&self, settings: &Settings, expect: Option<Target>) -> ReadPlan {
        self.request().map_or_else(ReadPlan::default, |r| plan::plan(r, settings, expect))
    }
}

/// One reviewed AdmissionReview: the typed decision the shells log and
/// count, and what goes back on the wire.
#[derive(Debug)]
pub struct Reviewed {
    pub decision: Decision,
    /// The response AdmissionReview, exactly as sent.
    pub review: Value,
}

/// Decides a parsed AdmissionReview: the typed decision and its wire form.
pub fn review_parsed(parsed: &ParsedReview, input: &DecisionInput<'_>) -> Result<Reviewed, ReviewError> {
    let decision = match &parsed.request {
        Ok(req) => decide(req, input),
        Err(problem) => Decision::bad_request(problem.clone()),
    };
    let (decision, response) = match AdmissionResponse::encode(parsed.uid.clone(), &decision) {
        Ok(r) => (decision, r),
        Err(e) => {
            let failed = Decision::internal_error(format!("the response does not serialise: {e}"));
            // A denial without a patch has nothing that can fail to serialise.
            let response = AdmissionResponse::encode(parsed.uid.clone(), &failed)
                .map_err(|e| ReviewError::Encode(e.to_string()))?;
            (failed, response)
        }
    };
    Ok(Reviewed { decision, review: response.into_review() })
}

/// Reviews one AdmissionReview (as JSON) and returns the response AdmissionReview.
pub fn review(input: &Value, decision: &DecisionInput<'_>) -> Result<Value, ReviewError> {
    review_parsed(&ParsedReview::parse(input.clone())?, decision).map(|r| r.review)
}

/// Decides one parsed request, with the `enforcement` settings applied.
pub fn decide(req: &AdmissionRequest, decision: &DecisionInput<'_>) -> Decision {
    let (raw, mutating) = unenforced(req, decision);
    let mut decided = enforce::apply(raw, req, &decision.settings.enforcement, mutating);
    decided.warnings = answer_bounds::recorded_warnings(std::mem::take(&mut decided.warnings));
    decided
}

/// Where a request goes, decided once per request from its resource and
/// the endpoint it came in on; the read plan and the decision both follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A mutating webhook of this target (the etcd StatefulSet, the backup Job).
    Mutation(Target),
    /// A validating webhook of this target.
    Validation(Target),
    /// A mutating endpoint got another resource (`None`: an unknown one):
    /// allowed unchanged with a warning, never blocked.
    MisroutedToMutation(Target, Option<Target>),
    /// A validating endpoint got another resource: 400, naming both.
    WrongEndpoint(Target),
    /// No endpoint given and a resource nobody here judges: 400.
    Unhandled,
}

/// The route of `req` at the endpoint `expect` (`None`: routed by the resource).
pub(crate) fn route(req: &AdmissionRequest, expect: Option<Target>) -> Route {
    let target = Target::of(&req.resource);
    match (expect, target) {
        (None, Some(t)) if t.mutating() => Route::Mutation(t),
        (Some(e), Some(t)) if e == t && t.mutating() => Route::Mutation(t),
        (Some(e), other) if e.mutating() => Route::MisroutedToMutation(e, other),
        (None, Some(t)) => Route::Validation(t),
        (Some(e), Some(t)) if t == e => Route::Validation(t),
        (Some(e), _) => Route::WrongEndpoint(e),
        (None, None) => Route::Unhandled,
    }
}

/// The decision before enforcement, and whether the etcd mutation made it.
fn unenforced(req: &AdmissionRequest, decision: &DecisionInput<'_>) -> (Decision, bool) {
    match route(req, decision.expect) {
        Route::MisroutedToMutation(endpoint, target) => {
            let warning = format!(
                "hcp-etcd-admission: the {} mutation was called for {}; nothing changed (check the MutatingWebhookConfiguration rules)",
                endpoint.resource(),
                target.map_or("an unknown resource", Target::resource)
            );
            (Decision::allow(vec![crate::finding::Warning::note(warning)]), true)
        }
        Route::Mutation(Target::EtcdBackupJobs) => (mutating::backup_job(req, decision), true),
        Route::Mutation(_) => (mutating::mutation(req, decision), true),
        Route::Validation(target) => (validate::validation(req, decision, target), false),
        Route::WrongEndpoint(expected) => (validate::wrong_endpoint(req, expected), false),
        Route::Unhandled => (validate::unhandled(req), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_routed_once_by_resource_and_endpoint() {
        let req = |t: Option<Target>| AdmissionRequest {
            resource: match t {
                Some(t) => {
                    let r = t.row();
                    GroupVersionResource { group: r.group.into(), version: "v1".into(), resource: r.plural.into() }
                }
                None => GroupVersionResource { group: "x.io".into(), version: "v1".into(), resource: "things".into() },
            },
            ..serde_json::from_value(
                serde_json::json!({"uid": "u", "kind": {"group": "", "version": "v1", "kind": "X"},
                "resource": {"group": "", "version": "v1", "resource": "x"}, "operation": "CREATE"}),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let sts = Some(Target::EtcdStatefulSets);
        let hc = Some(Target::HostedClusters);
        let jobs = Some(Target::EtcdBackupJobs);
        assert_eq!(route(&req(sts), None), Route::Mutation(Target::EtcdStatefulSets));
        assert_eq!(route(&req(sts), sts), Route::Mutation(Target::EtcdStatefulSets));
        assert_eq!(route(&req(jobs), None), Route::Mutation(Target::EtcdBackupJobs));
        assert_eq!(route(&req(jobs), jobs), Route::Mutation(Target::EtcdBackupJobs));
        assert_eq!(route(&req(hc), sts), Route::MisroutedToMutation(Target::EtcdStatefulSets, hc));
        assert_eq!(route(&req(sts), jobs), Route::MisroutedToMutation(Target::EtcdBackupJobs, sts));
        assert_eq!(route(&req(None), sts), Route::MisroutedToMutation(Target::EtcdStatefulSets, None));
        assert_eq!(route(&req(jobs), hc), Route::WrongEndpoint(Target::HostedClusters));
        assert_eq!(route(&req(hc), None), Route::Validation(Target::HostedClusters));
        assert_eq!(route(&req(hc), hc), Route::Validation(Target::HostedClusters));
        assert_eq!(route(&req(sts), hc), Route::WrongEndpoint(Target::HostedClusters));
        assert_eq!(route(&req(None), hc), Route::WrongEndpoint(Target::HostedClusters));
        assert_eq!(route(&req(None), None), Route::Unhandled);
    }

    #[test]
    fn every_target_has_its_row_and_routes_back_to_itself() {
        for t in Target::ALL {
            let row = KINDS.iter().filter(|k| k.target == t).count();
            assert_eq!(row, 1, "{t:?}");
            let r = t.row();
            let gvr = GroupVersionResource { group: r.group.into(), version: "v1".into(), resource: r.plural.into() };
            assert_eq!(Target::of(&gvr), Some(t));
            assert_eq!(Target::for_kind(t.kind()), Some(t));
        }
        assert_eq!(Target::EtcdStatefulSets.path(), "/mutate/etcd-statefulsets");
        assert_eq!(Target::EtcdBackupJobs.path(), "/mutate/etcd-backup-jobs");
        assert_eq!(Target::HcpEtcdBackups.path(), "/validate/hcpetcdbackups");
        let other = GroupVersionResource { group: "x.io".into(), version: "v1".into(), resource: "secrets".into() };
        assert_eq!(Target::of(&other), None);
    }
}
