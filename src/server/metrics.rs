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

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<WebhookLabels, Histogram>,
    reloads: Family<ResultLabels, Counter>,
    cert_expiry: Gauge<i64, AtomicI64>,
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
        Self { registry, requests, latency, reloads, cert_expiry }
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
