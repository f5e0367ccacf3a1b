//! HTTP routes. Each admission path runs exactly the code path `review` runs
//! ([`crate::admission::review`]); this file only moves bytes.

use std::{sync::Arc, time::Instant};

use axum::{
    body::{to_bytes, Body},
    extract::State,
    http::{header, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use serde_json::{json, Value};

use super::App;
use crate::admission::{self, DecisionInput, Target};
use crate::lookup as hcp_lookup;

/// Largest AdmissionReview body accepted (kube-apiserver's own request limit is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Longest a request body may take to arrive (kube-apiserver's webhook timeout is at most 30 s).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/validate/hcpetcdbackups", post(|s, r| admit(s, r, Target::HcpEtcdBackups, "hcpetcdbackups")))
        .route("/validate/hostedclusters", post(|s, r| admit(s, r, Target::HostedClusters, "hostedclusters")))
        .route(
            "/validate/hostedcontrolplanes",
            post(|s, r| admit(s, r, Target::HostedControlPlanes, "hostedcontrolplanes")),
        )
        .route("/mutate/etcd-statefulsets", post(|s, r| admit(s, r, Target::EtcdStatefulSets, "etcd-statefulsets")))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path; see the README for the webhook paths") })
        .with_state(app)
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code.as_u16(), "message": message.into()});
    (code, Json(body)).into_response()
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.hcp_cache.as_ref().is_some_and(|c| !c.synced()) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "not ready: HostedControlPlane cache not synced yet");
    }
    if app.ready.load(std::sync::atomic::Ordering::Acquire) {
        "ok".into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "not ready: rules not compiled or certificate not loaded")
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], app.metrics.render())
        .into_response()
}

async fn admit(State(app): State<Arc<App>>, req: Request<Body>, target: Target, webhook: &'static str) -> Response {
    let started = Instant::now();
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        app.metrics.observe(webhook, "", "error", started.elapsed().as_secs_f64());
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over the {MAX_BODY}-byte limit"));
    }
    let Ok(_permit) = app.limit.clone().acquire_owned().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    // A body that trickles in must not hold a decision slot forever.
    let body = tokio::time::timeout(BODY_TIMEOUT, to_bytes(req.into_body(), MAX_BODY)).await;
    let Ok(body) = body else {
        app.metrics.observe(webhook, "", "error", started.elapsed().as_secs_f64());
        return error(StatusCode::REQUEST_TIMEOUT, format!("the request body did not arrive within {BODY_TIMEOUT:?}"));
    };
    let bytes = match body {
        Ok(b) => b,
        Err(e) => {
            app.metrics.observe(webhook, "", "error", started.elapsed().as_secs_f64());
            let too_big = std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("length limit"))
                || e.to_string().contains("length limit");
            return if too_big {
                error(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over the {MAX_BODY}-byte limit"))
            } else {
                error(StatusCode::BAD_REQUEST, format!("reading the request body: {e}"))
            };
        }
    };
    let parsed: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            app.metrics.observe(webhook, "", "error", started.elapsed().as_secs_f64());
            return error(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}"));
        }
    };
    // The etcd StatefulSet's decision reads the namespace live on a cache miss.
    let prefetched = match (&app.hcp_cache, target) {
        (Some(cache), Target::EtcdStatefulSets)
            if parsed.pointer("/request/object/metadata/name").and_then(Value::as_str)
                == Some(crate::mutate::ETCD_STATEFULSET) =>
        {
            let ns = parsed
                .pointer("/request/namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .or_else(|| parsed.pointer("/request/object/metadata/namespace").and_then(Value::as_str))
                .unwrap_or_default();
            Some(cache.lookup_for(ns).await)
        }
        _ => None,
    };
    let lookup: Option<&dyn hcp_lookup::Lookup> = match &prefetched {
        Some(p) => Some(p),
        None => app.lookup.as_deref().map(|l| l as &dyn hcp_lookup::Lookup),
    };
    let decision = DecisionInput { settings: &app.settings, lookup, now: now_unix(), expect: Some(target) };
    let review = match admission::review_with_outcome(&parsed, &decision) {
        Ok((r, outcome)) => {
            if let Some(o) = outcome {
                let (outcome, reason) = o.labels();
                app.metrics.etcd_init(outcome, reason);
            }
            r
        }
        Err(e) => {
            app.metrics.observe(webhook, "", "error", started.elapsed().as_secs_f64());
            return error(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let elapsed = started.elapsed();
    let req = &parsed["request"];
    let resp = &review["response"];
    let operation = req["operation"].as_str().unwrap_or_default();
    let decision = if resp["allowed"] == true { "allowed" } else { "denied" };
    app.metrics.observe(webhook, operation, decision, elapsed.as_secs_f64());
    tracing::info!(
        uid = req["uid"].as_str().unwrap_or_default(),
        kind = req["kind"]["kind"].as_str().unwrap_or_default(),
        namespace = req["namespace"].as_str().unwrap_or_default(),
        name = req["name"].as_str().unwrap_or_default(),
        operation,
        dry_run = req["dryRun"].as_bool().unwrap_or(false),
        decision,
        latency_us = elapsed.as_micros() as u64,
        "admission review"
    );
    Json(review).into_response()
}

fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}
