//! HTTP routes. Each admission path runs exactly the code path `review` runs
//! ([`crate::admission::review`]); this file only moves bytes, applies the
//! limits of [`super::limits`] and has [`super::reads`] carry out the live
//! reads a review needs before its decision slot is taken.

use std::{net::IpAddr, sync::Arc};

use axum::{
    body::{Body, Bytes, HttpBody},
    extract::State,
    http::{header, HeaderValue, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use hyper::body::{Frame, SizeHint};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{
    backup_cache::RequestReads,
    conns::Activity,
    fields::{log_field, LOG_FIELD_MAX},
    limits::BodyError,
    metrics::{truncate, Decision, Operation, RejectReason, Webhook},
    reads::{self, Fetched},
    App, ClientAuthScope, PeerIdentity,
};
use crate::admission::{self, lookup as hcp_lookup, DecisionInput, Target};
use crate::rules::{
    self,
    credentials::{self, SecretData},
};
use crate::settings::Settings;

pub use super::limits::MAX_BODY;

/// Bodies at least this large are decided on the blocking pool, so a big
/// review never holds up the async workers (probes, accepts, small reviews).
const BLOCKING_DECISION_BYTES: usize = 256 * 1024;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/validate/hcpetcdbackups", post(|s, r| admit(s, r, Target::HcpEtcdBackups, Webhook::HcpEtcdBackups)))
        .route("/validate/hostedclusters", post(|s, r| admit(s, r, Target::HostedClusters, Webhook::HostedClusters)))
        .route(
            "/validate/hostedcontrolplanes",
            post(|s, r| admit(s, r, Target::HostedControlPlanes, Webhook::HostedControlPlanes)),
        )
        .route(
            "/mutate/etcd-statefulsets",
            post(|s, r| admit(s, r, Target::EtcdStatefulSets, Webhook::EtcdStatefulSets)),
        )
        .route(
            "/validate/etcd-backup-secrets",
            post(|s, r| admit(s, r, Target::EtcdBackupSecrets, Webhook::EtcdBackupSecrets)),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path; see the README for the webhook paths") })
        .with_state(app)
}

/// The plain-HTTP metrics and probe port: nothing but `/healthz`, `/readyz`
/// and `/metrics`.
pub fn plain_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "this port serves only /healthz, /readyz and /metrics") })
        .with_state(app)
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code.as_u16(), "message": message.into()});
    (code, Json(body)).into_response()
}

/// Longest the unread request body is kept waiting for the answer to go out.
/// A client that never reads its answer (HTTP/2 receive window 0) would
/// otherwise pin up to a receive window of buffered body per stream.
const ANSWER_HOLD: std::time::Duration = std::time::Duration::from_secs(2);

/// A response body that keeps the unread request body alive until the answer
/// has been sent (or [`ANSWER_HOLD`] passed), so that whatever ends the
/// request stream (HTTP/2: RST_STREAM(NO_ERROR), RFC 9113 §8.1; HTTP/1.1:
/// closing the connection) comes after the answer, never before it.
struct AnswerFirst {
    answer: Option<Bytes>,
    /// Dropped with the answer body: releases the request body.
    _sent: tokio::sync::oneshot::Sender<()>,
}

impl HttpBody for AnswerFirst {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.answer.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.answer.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.answer.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// [`error`] (with `Retry-After` when `retry`), sent before the unread
/// request body is dropped (at most [`ANSWER_HOLD`] later).
fn error_before_body(code: StatusCode, message: String, request: Body, retry: bool) -> Response {
    let body =
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code.as_u16(), "message": message});
    let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let (sent, answered) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(ANSWER_HOLD, answered).await;
        drop(request);
    });
    let mut r = Response::new(Body::new(AnswerFirst { answer: Some(bytes), _sent: sent }));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if retry {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// An error that tells the client when to come back.
fn busy(code: StatusCode, message: impl Into<String>) -> Response {
    let mut r = error(code, message);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.draining.load(std::sync::atomic::Ordering::Acquire) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "not ready: shutting down (draining)");
    }
    if app.hcp_cache.as_ref().is_some_and(|c| !c.synced()) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "not ready: HostedControlPlane cache not synced yet");
    }
    // The backup preflight's caches do not gate readiness: until they sync
    // (or when their RBAC is missing) the preflight is skipped with a warning,
    // and no other admission is blocked for it.
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

/// Who may call an admission path, when client certificates are configured
/// (every admission path, or only the mutating one).
fn authorize(app: &App, req: &Request<Body>, target: Target) -> Result<(), (StatusCode, String)> {
    let Some(auth) = &app.client_auth else { return Ok(()) };
    if auth.scope == ClientAuthScope::Mutating && target != Target::EtcdStatefulSets {
        return Ok(());
    }
    let peer = req.extensions().get::<Arc<PeerIdentity>>();
    let Some(peer) = peer.filter(|p| !p.names.is_empty() || p.verified) else {
        app.metrics.rejected(RejectReason::Unauthenticated);
        return Err((
            StatusCode::UNAUTHORIZED,
            "a client certificate signed by the configured client CA is required on admission paths".into(),
        ));
    };
    if auth.allowed.is_empty() || peer.names.iter().any(|n| auth.allowed.iter().any(|a| a == n)) {
        return Ok(());
    }
    app.metrics.rejected(RejectReason::Forbidden);
    tracing::warn!(client = %log_field(&peer.names.join(",")), "client certificate identity not in --allowed-client-names");
    let what = if auth.sans { "CN or SAN" } else { "CN" };
    Err((
        StatusCode::FORBIDDEN,
        format!("this client certificate's identity ({what}) is not allowed to call admission paths"),
    ))
}

async fn admit(State(app): State<Arc<App>>, req: Request<Body>, target: Target, webhook: Webhook) -> Response {
    let started = Instant::now();
    let deadline = started + app.limits.opts.request_timeout;
    if let Err((code, message)) = authorize(&app, &req, target) {
        return error_before_body(code, message, req.into_body(), false);
    }
    let conn = req.extensions().get::<Arc<Activity>>().cloned();
    let source = conn.as_ref().map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.source());
    let reject = |reason: RejectReason| {
        app.metrics.rejected(reason);
        app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
    };
    let Some(in_flight) = app.limits.request_slot(source).await else {
        reject(RejectReason::Requests);
        let msg = "too many requests in flight; retry".to_string();
        return error_before_body(StatusCode::SERVICE_UNAVAILABLE, msg, req.into_body(), true);
    };
    let max = app.limits.opts.max_body;
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    // The body is read completely (bounded in size and time) before a decision
    // slot is taken: a client that stalls its body holds no decision slot.
    // Meanwhile its connection counts as reading a body (the costliest kind
    // at the connection cap).
    let body_deadline = deadline.min(started + app.limits.opts.body_timeout);
    let reading = conn.as_ref().map(|c| c.reading());
    let read = app.limits.read_body(req.into_body(), declared, body_deadline, &in_flight).await;
    drop(reading);
    let (bytes, _held) = match read {
        Ok(b) => b,
        Err((BodyError::TooLarge, rest)) => {
            reject(RejectReason::BodyTooLarge);
            // Read (and discard) a moderately oversize body to its end before
            // answering: an HTTP/2 client still uploading treats an early
            // answer plus RST_STREAM as a stream error (curl does), and an
            // HTTP/1.1 connection stays usable. A body far over the limit is
            // answered at once.
            let rest = discard(rest, declared, max, body_deadline).await;
            return error_before_body(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body over the {max}-byte limit"),
                rest,
                false,
            );
        }
        Err((BodyError::Timeout, rest)) => {
            reject(RejectReason::BodyTimeout);
            let msg = format!("the request body did not arrive within {:?}", body_deadline - started);
            return error_before_body(StatusCode::REQUEST_TIMEOUT, msg, rest, false);
        }
        Err((BodyError::Evicted, rest)) => {
            reject(RejectReason::BodyEvicted);
            let msg = format!(
                "the request body was still arriving after {:?} when every in-flight slot was taken; \
                 the slowest body was dropped for a newer request",
                started.elapsed()
            );
            return error_before_body(StatusCode::REQUEST_TIMEOUT, msg, rest, false);
        }
        Err((BodyError::Budget, rest)) => {
            reject(RejectReason::BodyBudget);
            let msg = "request body buffers are full; retry".to_string();
            return error_before_body(StatusCode::SERVICE_UNAVAILABLE, msg, rest, true);
        }
        Err((BodyError::Read(e), rest)) => {
            app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
            let msg = format!("reading the request body: {}", truncate(&e, LOG_FIELD_MAX));
            return error_before_body(StatusCode::BAD_REQUEST, msg, rest, false);
        }
    };
    let units = bytes.len();
    let Some(slot) = decision_slot(&app, units, deadline).await else {
        reject(RejectReason::Decisions);
        return busy(StatusCode::TOO_MANY_REQUESTS, "every decision slot is busy; retry");
    };
    let big = bytes.len() >= BLOCKING_DECISION_BYTES;
    let parsed = if big {
        tokio::task::spawn_blocking(move || parse(&bytes)).await.unwrap_or_else(|e| Err(task_failed(e)))
    } else {
        parse(&bytes)
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err((code, message)) => {
            app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
            return error(code, message);
        }
    };
    // What the decision needs read live (a cache miss, the credentials
    // Secret, a live confirmation). Reads happen with no decision slot held,
    // under the live-read budget and the request deadline; an HCPEtcdBackup
    // the decision denies without its preflight is answered unread.
    let plan = reads::plan(&app, &parsed, target);
    let (slot, fetched) = if plan.is_empty() {
        (slot, Fetched::default())
    } else {
        if plan.decide_first {
            let settings = Settings { backup_preflight: false, ..app.settings.clone() };
            let first = match decide_in(&app, parsed.clone(), Fetched::default(), settings, target, big, slot, deadline)
                .await
            {
                Ok(r) => r,
                Err(answer) => return failed(&app, webhook, started, answer),
            };
            if first.decision.denial().is_some() {
                return answer(&app, first, webhook, target, started, None);
            }
        } else {
            drop(slot);
        }
        let fetched = app.reads.execute(&app, &plan, source, deadline).await;
        let Some(slot) = decision_slot(&app, units, deadline).await else {
            reject(RejectReason::Decisions);
            return busy(StatusCode::TOO_MANY_REQUESTS, "every decision slot is busy; retry");
        };
        (slot, fetched)
    };
    let gauge = credentials_gauge(&fetched);
    let reviewed = match decide_in(&app, parsed, fetched, app.settings.clone(), target, big, slot, deadline).await {
        Ok(r) => r,
        Err(answer) => return failed(&app, webhook, started, answer),
    };
    answer(&app, reviewed, webhook, target, started, gauge)
}

/// A decision slot for a body of `len` bytes, within the queue wait and `deadline`.
async fn decision_slot(app: &App, len: usize, deadline: Instant) -> Option<tokio::sync::OwnedSemaphorePermit> {
    tokio::time::timeout_at(deadline, app.limits.decision_slot(len)).await.ok().flatten()
}

/// Why a decision produced no review: an HTTP answer, and whether it was the deadline.
enum NotDecided {
    Deadline,
    Error(StatusCode, String),
}

fn failed(app: &App, webhook: Webhook, started: Instant, why: NotDecided) -> Response {
    match why {
        NotDecided::Deadline => {
            app.metrics.rejected(RejectReason::Deadline);
            app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
            busy(StatusCode::SERVICE_UNAVAILABLE, "the review was not decided within the request deadline")
        }
        NotDecided::Error(code, message) => {
            app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
            error(code, message)
        }
    }
}

/// Decides `parsed` on what was read, holding `slot` (a big review on the
/// blocking pool, within `deadline`).
#[allow(clippy::too_many_arguments)]
async fn decide_in(
    app: &Arc<App>,
    parsed: Value,
    fetched: Fetched,
    settings: Settings,
    target: Target,
    big: bool,
    slot: tokio::sync::OwnedSemaphorePermit,
    deadline: Instant,
) -> Result<admission::Reviewed, NotDecided> {
    if !big {
        let o = decide(app, &parsed, &fetched, &settings, target);
        drop(slot);
        return o.map_err(|(c, m)| NotDecided::Error(c, m));
    }
    let app = app.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        decide(&app, &parsed, &fetched, &settings, target)
    });
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(o)) => o.map_err(|(c, m)| NotDecided::Error(c, m)),
        Ok(Err(e)) => {
            let (c, m) = task_failed(e);
            Err(NotDecided::Error(c, m))
        }
        Err(_) => Err(NotDecided::Deadline),
    }
}

/// The credentials gauge value a read Secret gives: (namespace, name, usable);
/// `None` when it was not read (no value is better than a wrong one).
fn credentials_gauge(fetched: &Fetched) -> Option<(String, String, bool)> {
    let (ns, name, read) = fetched.secret.as_ref()?;
    let storage = fetched.storage?;
    let valid = match read.as_ref().ok()? {
        Some(s) => credentials::detect(storage, &SecretData::from_secret(s)).usable(),
        None => false,
    };
    Some((ns.clone(), name.clone(), valid))
}

/// Counts, logs and sends a decided review. Metric series keyed by names
/// come only from allowed reviews that are not dry runs, and only for names
/// that are Kubernetes object names in the operator namespace.
fn answer(
    app: &App,
    reviewed: admission::Reviewed,
    webhook: Webhook,
    target: Target,
    started: Instant,
    gauge: Option<(String, String, bool)>,
) -> Response {
    let elapsed = started.elapsed();
    let req = reviewed.request.as_ref();
    // Labels from the typed request and decision: bounded sets.
    let operation = Operation::from_request(req.map(|r| r.operation));
    let decision = match reviewed.decision.denial() {
        None => Decision::Allowed,
        Some(d) if d.reason == admission::DenialReason::BadRequest => Decision::CannotDecide,
        Some(_) => Decision::Denied,
    };
    app.metrics.observe(webhook, operation, decision, elapsed.as_secs_f64());
    app.metrics.rule_results(webhook, &reviewed.decision.rules);
    let dry_run = req.and_then(|r| r.dry_run).unwrap_or(false);
    if decision == Decision::Allowed && !dry_run {
        let operator_ns = app.settings.operator_namespace.as_str();
        if let Some((ns, name, valid)) = gauge.filter(|(ns, _, _)| ns == operator_ns) {
            app.metrics.credentials_valid(&ns, &name, valid);
        }
        if target == Target::EtcdBackupSecrets && matches!(operation, Operation::Create | Operation::Update) {
            if let Some((r, obj)) = req.and_then(|r| r.object.as_ref().map(|o| (r, o))) {
                let ns = r.namespace.as_deref().or_else(|| obj.pointer("/metadata/namespace").and_then(Value::as_str));
                let name = obj.pointer("/metadata/name").and_then(Value::as_str).or(r.name.as_deref());
                if let (Some(ns), Some(name), Some(valid)) = (ns, name, rules::secret::usable(obj)) {
                    if ns == operator_ns {
                        app.metrics.credentials_valid(ns, name, valid);
                    }
                }
            }
        }
    }
    let field = |v: Option<&str>| log_field(v.unwrap_or_default());
    tracing::info!(
        uid = field(req.map(|r| r.uid.as_str())),
        kind = field(req.map(|r| r.kind.kind.as_str())),
        namespace = field(req.and_then(|r| r.namespace.as_deref())),
        name = field(req.and_then(|r| r.name.as_deref())),
        operation = req.map_or("", |r| r.operation.as_str()),
        dry_run,
        decision = decision.as_str(),
        user = field(req.and_then(|r| r.user_info.as_ref()).map(|u| u.username.as_str())),
        rules = rule_list(&reviewed.decision.rules),
        latency_us = elapsed.as_micros() as u64,
        "admission review"
    );
    Json(reviewed.review).into_response()
}

/// The findings of a decision for the log line: `rule=result` pairs from
/// closed sets, at most [`MAX_LOGGED_RULES`] (then `+N more`).
fn rule_list(results: &[crate::enforcement::RuleResult]) -> String {
    let mut out: Vec<String> =
        results.iter().take(MAX_LOGGED_RULES).map(|r| format!("{}={}", r.rule, r.outcome.as_str())).collect();
    if results.len() > MAX_LOGGED_RULES {
        out.push(format!("+{} more", results.len() - MAX_LOGGED_RULES));
    }
    out.join(",")
}

/// Most findings named in one review log line.
const MAX_LOGGED_RULES: usize = 16;

/// Reads and drops what is left of a body of at most twice `max` bytes, until
/// `deadline`; hands back what could not be read (the answer goes first).
async fn discard(mut body: Body, declared: Option<usize>, max: usize, deadline: Instant) -> Body {
    use http_body_util::BodyExt as _;
    let bound = max.saturating_mul(2);
    if declared.is_some_and(|n| n > bound) {
        return body;
    }
    let mut read = 0usize;
    while read <= bound {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => read += f.data_ref().map_or(0, |d| d.len()),
            Ok(None) => return body,
            Ok(Some(Err(e))) => {
                tracing::debug!(read, error = %e, "oversize body: reading the rest failed");
                break;
            }
            Err(_) => {
                tracing::debug!(read, "oversize body: the rest did not arrive by the body deadline");
                break;
            }
        }
    }
    tracing::debug!(read, "oversize body: answering before the end of the body");
    body
}

fn parse(bytes: &[u8]) -> Result<Value, (StatusCode, String)> {
    serde_json::from_slice(bytes).map_err(|e| (StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")))
}

fn task_failed(e: tokio::task::JoinError) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("decision task failed: {e}"))
}

/// Decides a parsed review (counting what the etcd-init mutation did): the
/// typed request and decision, and the wire answer. An HTTP error when it is
/// not a review.
fn decide(
    app: &App,
    parsed: &Value,
    fetched: &Fetched,
    settings: &Settings,
    target: Target,
) -> Result<admission::Reviewed, (StatusCode, String)> {
    let reads = RequestReads {
        inner: app.lookup.as_deref().map(|l| l as &dyn hcp_lookup::Lookup),
        hcps: fetched.hcps.as_ref(),
        backups: fetched.backups.clone(),
        secret: fetched.secret.clone(),
    };
    let lookup = reads.any().then_some(&reads as &dyn hcp_lookup::Lookup);
    let decision = DecisionInput { settings, lookup, now: crate::time::system_now(), expect: Some(target) };
    let reviewed = admission::review_typed(parsed, &decision).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    if let Some(o) = &reviewed.decision.etcd_init {
        let (outcome, reason) = o.labels();
        app.metrics.etcd_init(outcome, reason);
    }
    Ok(reviewed)
}
