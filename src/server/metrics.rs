//! Prometheus metrics (prometheus-client, OpenMetrics text at `/metrics`).
//!
//! Every label value comes from a closed set (an enum below): a request can
//! never add a series. Whatever a request says its `operation` is, the label
//! is one of `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `other`.
//!
//! Adding a metric: a field, its registration in [`Metrics::new`] and a method
//! that records it; a new label set is an enum with [`label_enum!`].
//!
//! The one exception is the credentials gauge, labelled with a Secret's
//! namespace and name (never its content): only names that are Kubernetes
//! object names (a DNS-1123 label for the namespace, at most 63 bytes; a
//! DNS-1123 subdomain for the name, at most 253 bytes), only for the
//! operator namespace the controller reads, only from allowed reviews that
//! are not dry runs, and at most [`MAX_CREDENTIAL_SERIES`] series: at most
//! about 160 KiB of label text whatever callers send.

use std::sync::atomic::AtomicI64;

use crate::admission::Target;

use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Declares a closed set of label values: an enum, its `as_str` and its
/// Prometheus encoding.
/// A [`crate::labels::label_enum`] that is also a Prometheus label value.
macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        crate::labels::label_enum!($(#[$m])* pub $name { $($(#[$vm])* $variant => $text),+ });
        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

/// The `webhook` label: the endpoint a request came in on ([`Target::label`]).
impl EncodeLabelValue for Target {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.label(), encoder)
    }
}

label_enum!(
    /// `request.operation`, or `other` for anything else (never the raw string).
    OperationLabel {
        Create => "CREATE",
        Update => "UPDATE",
        Delete => "DELETE",
        Connect => "CONNECT",
        Other => "other",
    }
);

impl OperationLabel {
    /// The label of a parsed request's operation; `other` when the request
    /// did not parse (an unknown operation does not parse: the typed request
    /// only has the four Kubernetes has).
    pub fn from_request(op: Option<crate::admission::Operation>) -> Self {
        use crate::admission::Operation as Op;
        match op {
            Some(Op::Create) => Self::Create,
            Some(Op::Update) => Self::Update,
            Some(Op::Delete) => Self::Delete,
            Some(Op::Connect) => Self::Connect,
            None => Self::Other,
        }
    }
}

label_enum!(
    /// What the server replied: a decision, or an HTTP error (the `decision` label).
    Reply {
        Allowed => "allowed",
        /// Denied by a rule (422 Invalid).
        Denied => "denied",
        /// Denied because the request cannot be judged (400: wrong kind or
        /// endpoint, unparseable object). A steady rate means a
        /// misregistration or an API change, not a user mistake.
        CannotDecide => "cannot_decide",
        /// An HTTP error instead of an AdmissionReview (bad body, limits).
        Error => "error",
    }
);

label_enum!(
    /// Why a request or connection was turned away before a decision.
    RejectReason {
        /// `--max-connections` reached: the costliest connection of the source
        /// holding the most places was closed for a new one (a newcomer is
        /// never refused).
        ConnectionEvicted => "connection_evicted",
        /// A source at `--max-connections-per-source` opened another
        /// connection: one of its own was closed for it.
        ConnectionSourceShare => "connection_source_share",
        /// No live-read place (`--max-live-reads`, half per source) within
        /// the wait: that read is reported as not done to the decision.
        LiveReads => "live_reads",
        /// `--max-requests` in flight reached: 503.
        Requests => "requests",
        /// The shared body-buffer budget is used up: 503.
        BodyBudget => "body_budget",
        /// No decision slot within the queue wait: 429.
        Decisions => "decisions",
        /// Body over the size limit: 413.
        BodyTooLarge => "body_too_large",
        /// A body whose shape would take more heap to parse and decide than
        /// every decision unit together (`admission::cost`): 413.
        DecisionTooCostly => "decision_too_costly",
        /// Body did not arrive within the body deadline: 408.
        BodyTimeout => "body_timeout",
        /// Every in-flight slot was taken: the request that had been reading
        /// its body the longest was answered 408 to free its slot.
        BodyEvicted => "body_evicted",
        /// The per-request deadline passed: 503.
        Deadline => "deadline",
        /// No client certificate on an admission path: 401.
        Unauthenticated => "unauthenticated",
        /// A client certificate whose identity is not allowed: 403.
        Forbidden => "forbidden",
        /// The answer budget (`--answer-budget-mib`, half per source) had no
        /// room for a decided answer within the deadline: 503.
        AnswerBudget => "answer_budget",
        /// A client did not read its answer within the write deadline: its
        /// connection was closed.
        WriteTimeout => "write_timeout",
    }
);

label_enum!(
    /// Outcome of loading the serving pair.
    ReloadResult {
        Success => "success",
        Failure => "failure",
    }
);

label_enum!(
    /// Why a serving pair was refused.
    CertProblem {
        /// Unreadable files, bad PEM, key not matching the certificate.
        Invalid => "invalid",
        Expired => "expired",
        NotYetValid => "not_yet_valid",
        /// The certificate does not name every `--expect-san` name.
        WrongSan => "wrong_san",
    }
);

/// One label set per family.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub webhook: Target,
    pub operation: OperationLabel,
    pub decision: Reply,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: Target,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct SecretLabels {
    pub namespace: String,
    pub secret: String,
}

/// Most credentials Secrets tracked at once: the OADP plugin makes one per
/// backup and deletes it afterwards, so old series are dropped past this.
pub const MAX_CREDENTIAL_SERIES: usize = 500;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: ReloadResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: RejectReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertProblemLabels {
    pub reason: CertProblem,
}

/// etcd-init decisions: `outcome` and `reason` come only from the closed
/// sets of [`crate::mutate::Outcome::labels`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EtcdInitLabels {
    pub outcome: &'static str,
    pub reason: &'static str,
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<WebhookLabels, Histogram>,
    rejected: Family<ReasonLabels, Counter>,
    reloads: Family<ResultLabels, Counter>,
    client_ca_reloads: Family<ResultLabels, Counter>,
    cert_rejected: Family<CertProblemLabels, Counter>,
    cert_expiry: Gauge<i64, AtomicI64>,
    connections: Gauge<i64, AtomicI64>,
    draining: Gauge<i64, AtomicI64>,
    answers_pending: Gauge<i64, AtomicI64>,
    restores_pending: Gauge<i64, AtomicI64>,
    etcd_init: Family<EtcdInitLabels, Counter>,
    backup_verify: Family<OutcomeLabels, Counter>,
    credentials: Family<SecretLabels, Gauge<i64, AtomicI64>>,
    credential_series: std::sync::Mutex<std::collections::BTreeSet<SecretLabels>>,
    rule_results: Family<RuleLabels, Counter>,
}

/// One outcome label from a closed set (`Verify::label`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// Rule findings: `rule` from the closed set of the rule catalog
/// ([`crate::rules::severity_of`] knows each), `result` from
/// [`crate::enforcement::Enforced`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub webhook: Target,
    pub rule: &'static str,
    pub result: &'static str,
}

/// `build_info`: one series, compile-time values.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

/// Latency buckets from 100 µs to 10 s (seconds); 4 s is the request deadline.
const BUCKETS: [f64; 17] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 4.0, 5.0, 10.0];

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hcp_etcd_admission");
        let r = &mut registry;
        let build_info = register(
            r,
            "build_info",
            "Always 1: the version and git commit of this binary",
            Family::<BuildInfoLabels, Gauge<i64, AtomicI64>>::default(),
        );
        build_info
            .get_or_create(&BuildInfoLabels { version: crate::build_info::VERSION, commit: crate::build_info::COMMIT })
            .set(1);
        let metrics = Self {
            answers_pending: register(r, "answer_bytes_pending", "Bytes of decided answers charged to the answer budget and not yet written (KiB granularity)", Gauge::default()),
            restores_pending: register(r, "restores_pending", "HostedControlPlanes in the server's cache with a restoreSnapshotURL and EtcdSnapshotRestored not True; -1 when not known (no cluster watch, or the cache not synced)", Gauge::default()),
            requests: register(r, "admission_requests", "Admission reviews answered, by webhook, operation and decision", Family::default()),
            latency: register(r, "admission_duration_seconds", "Time from request headers to answer, per webhook", Family::new_with_constructor(|| Histogram::new(BUCKETS))),
            rejected: register(r, "rejected_requests", "Requests and connections turned away before a decision, by reason", Family::default()),
            reloads: register(r, "certificate_reloads", "Serving certificate reload attempts by result", Family::default()),
            client_ca_reloads: register(r, "client_ca_reloads", "Client CA (--client-ca) reloads after a change, by result", Family::default()),
            cert_rejected: register(r, "certificate_rejected", "Serving certificate pairs refused at load, by reason (the previous pair keeps serving)", Family::default()),
            cert_expiry: register(r, "certificate_expiry_timestamp_seconds", "NotAfter of the serving certificate, Unix seconds", Gauge::default()),
            connections: register(r, "open_connections", "TLS connections currently open", Gauge::default()),
            draining: register(r, "draining", "1 after SIGTERM while the server drains, else 0", Gauge::default()),
            etcd_init: register(r, "etcd_init_decisions", "etcd StatefulSet mutation decisions: etcd-init injected, unchanged, removed, not needed, not applicable, or denied by reason", Family::default()),
            backup_verify: register(r, "backup_verify_decisions", "etcd backup Job mutation decisions: the verify step injected (enforced or warn), already there, off, an unknown Job shape, or not a backup Job", Family::default()),
            credentials: register(r, "backup_credentials_valid", "1 when an etcd-backup credentials Secret fits the controller's detection, 0 when it is missing or does not fit", Family::default()),
            rule_results: register(r, "rule_results", "Rule findings by webhook, rule id and what enforcement did (denied, warned, audited, off, exempt)", Family::default()),
            credential_series: Default::default(),
            registry,
        };
        metrics.create_zero_series();
        metrics
    }

    /// Every label set alerts `rate()` over exists from the start, at 0, so
    /// the first event is seen.
    fn create_zero_series(&self) {
        use crate::mutate::{Blocker, Outcome};
        let outcomes = [
            Outcome::NotApplicable,
            Outcome::Injected,
            Outcome::Unchanged,
            Outcome::Removed,
            Outcome::NotNeeded,
            Outcome::SpecUnchanged,
        ];
        for o in outcomes.into_iter().chain(Blocker::ALL.iter().copied().map(Outcome::Denied)) {
            let (outcome, reason) = o.labels();
            let _ = self.etcd_init.get_or_create(&EtcdInitLabels { outcome, reason });
        }
        for v in crate::mutate::backup_job::Verify::ALL {
            let _ = self.backup_verify.get_or_create(&OutcomeLabels { outcome: v.label() });
        }
        for r in ReloadResult::ALL {
            let _ = self.reloads.get_or_create(&ResultLabels { result: *r });
            let _ = self.client_ca_reloads.get_or_create(&ResultLabels { result: *r });
        }
        for r in CertProblem::ALL {
            let _ = self.cert_rejected.get_or_create(&CertProblemLabels { reason: *r });
        }
        for r in RejectReason::ALL {
            let _ = self.rejected.get_or_create(&ReasonLabels { reason: *r });
        }
    }

    pub fn observe(&self, webhook: Target, operation: OperationLabel, decision: Reply, seconds: f64) {
        self.requests.get_or_create(&RequestLabels { webhook, operation, decision }).inc();
        self.latency.get_or_create(&WebhookLabels { webhook }).observe(seconds);
    }

    /// Counts one etcd-init decision (labels from [`crate::mutate::Outcome::labels`]).
    pub fn etcd_init(&self, outcome: &'static str, reason: &'static str) {
        self.etcd_init.get_or_create(&EtcdInitLabels { outcome, reason }).inc();
    }

    /// Counts one backup Job mutation decision.
    pub fn backup_verify(&self, verify: crate::mutate::backup_job::Verify) {
        self.backup_verify.get_or_create(&OutcomeLabels { outcome: verify.label() }).inc();
    }

    /// Counts every finding of one decision.
    pub fn rule_results(&self, webhook: Target, results: &[crate::enforcement::RuleResult]) {
        for r in results {
            let labels = RuleLabels { webhook, rule: r.rule, result: r.outcome.as_str() };
            self.rule_results.get_or_create(&labels).inc();
        }
    }

    pub fn rejected(&self, reason: RejectReason) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn cert_reloaded(&self, not_after: i64) {
        self.reloads.get_or_create(&ResultLabels { result: ReloadResult::Success }).inc();
        self.cert_expiry.set(not_after);
    }

    pub fn cert_reload_failed(&self, problem: CertProblem) {
        self.reloads.get_or_create(&ResultLabels { result: ReloadResult::Failure }).inc();
        self.cert_rejected.get_or_create(&CertProblemLabels { reason: problem }).inc();
    }

    pub fn client_ca_reloaded(&self, ok: bool) {
        let result = if ok { ReloadResult::Success } else { ReloadResult::Failure };
        self.client_ca_reloads.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn set_cert_expiry(&self, not_after: i64) {
        self.cert_expiry.set(not_after);
    }

    /// Sets the answer-budget gauge (read from the limits when /metrics is served).
    pub fn answers_pending(&self, bytes: usize) {
        self.answers_pending.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Sets the restores-pending gauge (`None`: not known, -1).
    pub fn restores_pending(&self, pending: Option<usize>) {
        self.restores_pending.set(pending.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)));
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    pub fn set_draining(&self, on: bool) {
        self.draining.set(i64::from(on));
    }

    /// Records whether the credentials Secret `namespace/secret` is usable.
    /// Names that are not Kubernetes object names are never recorded (the
    /// callers check too; this is the last line).
    pub fn credentials_valid(&self, namespace: &str, secret: &str, valid: bool) {
        if !crate::api::names::is_dns1123_label(namespace) || !crate::api::names::is_dns1123_subdomain(secret) {
            return;
        }
        let labels = SecretLabels { namespace: namespace.into(), secret: secret.into() };
        if let Ok(mut seen) = self.credential_series.lock() {
            if !seen.contains(&labels) && seen.len() >= MAX_CREDENTIAL_SERIES {
                // Bound memory: drop one series (the first by name) for the new one.
                if let Some(first) = seen.pop_first() {
                    self.credentials.remove(&first);
                }
            }
            seen.insert(labels.clone());
        }
        self.credentials.get_or_create(&labels).set(i64::from(valid));
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// At most `max` bytes of `s`, cut at a character boundary, with `…` when cut:
/// request-supplied strings in logs.
pub fn truncate(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", s.get(..end).unwrap_or_default()))
}

/// Registers `metric` under `name` and returns it (the handle the server keeps).
fn register<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_labels_are_a_closed_set() {
        assert_eq!(OperationLabel::from_request(Some(crate::admission::Operation::Create)), OperationLabel::Create);
        assert_eq!(OperationLabel::from_request(None), OperationLabel::Other);
    }

    #[test]
    fn credential_series_need_object_names_and_stay_bounded() {
        let m = Metrics::new();
        m.credentials_valid("hypershift", &"x".repeat(6 << 20), false);
        m.credentials_valid("hypershift", "a?b", false);
        m.credentials_valid("Bad NS", "ok", false);
        assert!(!m.render().contains("backup_credentials_valid{"), "{}", m.render());
        for i in 0..(MAX_CREDENTIAL_SERIES + 100) {
            let long = format!("{0}.{0}.{0}.{1}-{i}", "n".repeat(63), "n".repeat(55));
            m.credentials_valid("hypershift", &long, true);
        }
        let text = m.render();
        assert_eq!(text.matches("backup_credentials_valid{").count(), MAX_CREDENTIAL_SERIES);
        assert!(text.len() < 200 * 1024, "{} bytes", text.len());
    }

    #[test]
    fn truncate_cuts_at_a_char_boundary() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("ééé", 3), "é…");
    }
}
