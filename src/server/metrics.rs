//! Prometheus metrics (prometheus-client, OpenMetrics text at `/metrics`).
//! Labels never carry request data beyond webhook, operation and decision:
//! no names, no URLs.

use std::sync::atomic::AtomicI64;

use prometheus_client::{
    encoding::{text::encode, EncodeLabelSet},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub webhook: String,
    pub operation: String,
    pub decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
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
    reloads: Family<ResultLabels, Counter>,
    cert_expiry: Gauge<i64, AtomicI64>,
    etcd_init: Family<EtcdInitLabels, Counter>,
}

/// Latency buckets from 100 µs to 10 s (seconds).
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hcp_etcd_admission");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<WebhookLabels, Histogram>::new_with_constructor(|| Histogram::new(BUCKETS));
        let reloads = Family::<ResultLabels, Counter>::default();
        let cert_expiry = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, operation and decision",
            requests.clone(),
        );
        registry.register("admission_duration_seconds", "Time to decide one admission review", latency.clone());
        registry.register("certificate_reloads", "Serving certificate reload attempts by result", reloads.clone());
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "NotAfter of the serving certificate, Unix seconds",
            cert_expiry.clone(),
        );
        let etcd_init = Family::<EtcdInitLabels, Counter>::default();
        registry.register(
            "etcd_init_decisions",
            "etcd StatefulSet mutation decisions: etcd-init injected, unchanged, removed, not needed, not applicable, or denied by reason",
            etcd_init.clone(),
        );
        // Every label pair exists from the start (at 0), so alerts can rate() them.
        use crate::mutate::{DenyReason, Outcome};
        for o in [Outcome::NotApplicable, Outcome::Injected, Outcome::Unchanged, Outcome::Removed, Outcome::NotNeeded]
            .into_iter()
            .chain(DenyReason::ALL.into_iter().map(Outcome::Denied))
        {
            let (outcome, reason) = o.labels();
            let _ = etcd_init.get_or_create(&EtcdInitLabels { outcome, reason });
        }
        Self { registry, requests, latency, reloads, cert_expiry, etcd_init }
    }

    pub fn observe(&self, webhook: &str, operation: &str, decision: &str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                webhook: webhook.into(),
                operation: operation.into(),
                decision: decision.into(),
            })
            .inc();
        self.latency.get_or_create(&WebhookLabels { webhook: webhook.into() }).observe(seconds);
    }

    /// Counts one etcd-init decision (labels from [`crate::mutate::Outcome::labels`]).
    pub fn etcd_init(&self, outcome: &'static str, reason: &'static str) {
        self.etcd_init.get_or_create(&EtcdInitLabels { outcome, reason }).inc();
    }

    pub fn cert_reloaded(&self, ok: bool, not_after: i64) {
        self.reloads.get_or_create(&ResultLabels { result: if ok { "success" } else { "failure" }.into() }).inc();
        if ok {
            self.cert_expiry.set(not_after);
        }
    }

    pub fn set_cert_expiry(&self, not_after: i64) {
        self.cert_expiry.set(not_after);
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
