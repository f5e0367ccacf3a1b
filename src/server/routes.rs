//! HTTP routes. Each admission path runs exactly the code path `review` runs
//! ([`crate::admission::review`]); this file only moves bytes and applies the
//! limits of [`super::limits`].

use std::sync::Arc;

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
    backup_cache::{BackupCache, RequestReads},
    limits::BodyError,
    metrics::{truncate, Decision, Operation, RejectReason, Webhook},
    App, PeerIdentity,
};
use crate::admission::{self, lookup as hcp_lookup, DecisionInput, Target};
use crate::rules::{
    self,
    credentials::{self, SecretData, Storage},
};

pub use super::limits::MAX_BODY;

/// Bodies at least this large are decided on the blocking pool, so a big
/// review never holds up the async workers (probes, accepts, small reviews).
const BLOCKING_DECISION_BYTES: usize = 256 * 1024;

/// Longest request-supplied string written to a log line.
const LOG_FIELD_MAX: usize = 256;

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

/// Who may call an admission path, when client certificates are configured.
fn authorize(app: &App, req: &Request<Body>) -> Result<(), (StatusCode, String)> {
    let Some(auth) = &app.client_auth else { return Ok(()) };
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
    tracing::warn!(
        client = %truncate(&peer.names.join(","), LOG_FIELD_MAX),
        "client certificate identity not in --allowed-client-names"
    );
    Err((
        StatusCode::FORBIDDEN,
        "this client certificate's identity (CN or SAN) is not allowed to call admission paths".into(),
    ))
}

async fn admit(State(app): State<Arc<App>>, req: Request<Body>, target: Target, webhook: Webhook) -> Response {
    let started = Instant::now();
    let deadline = started + app.limits.opts.request_timeout;
    if let Err((code, message)) = authorize(&app, &req) {
        return error_before_body(code, message, req.into_body(), false);
    }
    let reject = |reason: RejectReason| {
        app.metrics.rejected(reason);
        app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
    };
    let Some(in_flight) = app.limits.request_slot().await else {
        reject(RejectReason::Requests);
        let msg = "too many requests in flight; retry".to_string();
        return error_before_body(StatusCode::SERVICE_UNAVAILABLE, msg, req.into_body(), true);
    };
    let max = app.limits.opts.max_body;
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    // The body is read completely (bounded in size and time) before a decision
    // slot is taken: a client that stalls its body holds no decision slot.
    let body_deadline = deadline.min(started + app.limits.opts.body_timeout);
    let (bytes, _held) = match app.limits.read_body(req.into_body(), declared, body_deadline, &in_flight).await {
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
    let slot = tokio::time::timeout_at(deadline, app.limits.decision_slot(bytes.len())).await.ok().flatten();
    let Some(slot) = slot else {
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
    // The etcd StatefulSet's decision, and an HCPEtcdBackup CREATE's
    // preflight, read the namespace's HostedControlPlanes live on a cache miss
    // (bounded by the request deadline as well as the cache's own timeout):
    // a lagging watch must neither let etcd start empty nor deny a backup.
    let backup_create = target == Target::HcpEtcdBackups
        && app.backup_cache.is_some()
        && app.settings.backup_preflight
        && parsed.pointer("/request/operation").and_then(Value::as_str) == Some("CREATE")
        && parsed.pointer("/request/subResource").and_then(Value::as_str).is_none_or(str::is_empty);
    let prefetched = match (&app.hcp_cache, target) {
        (Some(cache), Target::EtcdStatefulSets)
            if parsed.pointer("/request/object/metadata/name").and_then(Value::as_str)
                == Some(crate::mutate::ETCD_STATEFULSET) =>
        {
            Some(cache)
        }
        (Some(cache), Target::HcpEtcdBackups) if backup_create => Some(cache),
        _ => None,
    };
    let prefetched = match prefetched {
        Some(cache) => {
            let ns = request_namespace(&parsed);
            match tokio::time::timeout_at(deadline, cache.lookup_for_request(&ns, &parsed["request"])).await {
                Ok(p) => Some(p),
                Err(_) => {
                    reject(RejectReason::Deadline);
                    return busy(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the HostedControlPlane read did not finish within the request deadline",
                    );
                }
            }
        }
        None => None,
    };
    // An HCPEtcdBackup CREATE reads the credentials Secret it names, live
    // (within the request deadline; a read that does not finish skips that check),
    // and confirms a cached "in progress" backup live before the serial guard denies.
    let (secret_read, backups_live) = match (target, &app.backup_cache, &app.lookup) {
        (Target::HcpEtcdBackups, Some(cache), Some(_)) => {
            let secret = tokio::time::timeout_at(deadline, read_credentials(&app, cache, &parsed["request"]))
                .await
                .ok()
                .flatten();
            let backups = match backup_create.then(|| request_namespace(&parsed)) {
                Some(ns) if cache.backups_in(&ns).is_ok_and(|b| b.iter().any(crate::rules::preflight::in_progress)) => {
                    let live =
                        tokio::time::timeout_at(deadline, cache.list_backups_live(&ns)).await.unwrap_or_else(|_| {
                            Err("listing HCPEtcdBackups did not finish within the request deadline".into())
                        });
                    Some((ns, live))
                }
                _ => None,
            };
            (secret, backups)
        }
        _ => (None, None),
    };
    let outcome = if big {
        let app2 = app.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            decide(&app2, parsed, prefetched.as_ref(), secret_read.as_ref(), backups_live.as_ref(), target)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => Err(task_failed(e)),
            Err(_) => {
                reject(RejectReason::Deadline);
                return busy(StatusCode::SERVICE_UNAVAILABLE, "the review was not decided within the request deadline");
            }
        }
    } else {
        let o = decide(&app, parsed, prefetched.as_ref(), secret_read.as_ref(), backups_live.as_ref(), target);
        drop(slot);
        o
    };
    let reviewed = match outcome {
        Ok(r) => r,
        Err((code, message)) => {
            app.metrics.observe(webhook, Operation::Other, Decision::Error, started.elapsed().as_secs_f64());
            return error(code, message);
        }
    };
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
    if target == Target::EtcdBackupSecrets && matches!(operation, Operation::Create | Operation::Update) {
        if let Some((r, obj)) = req.and_then(|r| r.object.as_ref().map(|o| (r, o))) {
            if let Some(valid) = rules::secret::usable(obj) {
                let ns = r.namespace.as_deref().or_else(|| obj.pointer("/metadata/namespace").and_then(Value::as_str));
                let name = obj.pointer("/metadata/name").and_then(Value::as_str).or(r.name.as_deref());
                if let (Some(ns), Some(name)) = (ns, name) {
                    app.metrics.credentials_valid(ns, name, valid);
                }
            }
        }
    }
    let field = |v: Option<&str>| truncate(v.unwrap_or_default(), LOG_FIELD_MAX).into_owned();
    tracing::info!(
        uid = field(req.map(|r| r.uid.as_str())),
        kind = field(req.map(|r| r.kind.kind.as_str())),
        namespace = field(req.and_then(|r| r.namespace.as_deref())),
        name = field(req.and_then(|r| r.name.as_deref())),
        operation = req.map_or("", |r| r.operation.as_str()),
        dry_run = req.and_then(|r| r.dry_run).unwrap_or(false),
        decision = decision.as_str(),
        latency_us = elapsed.as_micros() as u64,
        "admission review"
    );
    Json(reviewed.review).into_response()
}

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
    parsed: Value,
    prefetched: Option<&hcp_lookup::Prefetched>,
    secret: Option<&SecretRead>,
    backups: Option<&BackupsRead>,
    target: Target,
) -> Result<admission::Reviewed, (StatusCode, String)> {
    let reads = RequestReads {
        inner: app.lookup.as_deref().map(|l| l as &dyn hcp_lookup::Lookup),
        hcps: prefetched,
        backups: backups.cloned(),
        secret: secret.cloned(),
    };
    let lookup = reads.any().then_some(&reads as &dyn hcp_lookup::Lookup);
    let decision =
        DecisionInput { settings: &app.settings, lookup, now: crate::time::system_now(), expect: Some(target) };
    let reviewed = admission::review_typed(&parsed, &decision).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    if let Some(o) = &reviewed.decision.etcd_init {
        let (outcome, reason) = o.labels();
        app.metrics.etcd_init(outcome, reason);
    }
    Ok(reviewed)
}

/// The request's namespace (the object's when the request does not say).
fn request_namespace(parsed: &Value) -> String {
    parsed
        .pointer("/request/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| parsed.pointer("/request/object/metadata/namespace").and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

/// The namespace's HCPEtcdBackups read live for one request: (namespace, what the read gave).
type BackupsRead = (String, Result<Vec<Value>, String>);

/// A credentials Secret read for one request: (namespace, name, what the read gave).
type SecretRead = (String, String, Result<Option<Value>, String>);

/// For an HCPEtcdBackup CREATE: reads the credentials Secret it names, live,
/// from the operator namespace, and records the credentials gauge. Returns
/// (namespace, name, what the read gave) for the decision's lookup.
async fn read_credentials(app: &App, cache: &BackupCache, req: &Value) -> Option<SecretRead> {
    if req["operation"] != "CREATE" || req.get("subResource").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return None;
    }
    let object = &req["object"];
    let storage = Storage::of_backup(object)?;
    let name = object
        .pointer(&format!("/spec/storage/{}/credentials/name", storage.block()))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?
        .to_string();
    let ns = cache.operator_namespace().to_string();
    let secret = cache.read_secret(&name).await;
    match &secret {
        Ok(Some(s)) => {
            let valid = credentials::detect(storage, &SecretData::from_secret(s)).usable();
            app.metrics.credentials_valid(&ns, &name, valid);
        }
        Ok(None) => app.metrics.credentials_valid(&ns, &name, false),
        Err(e) => {
            tracing::warn!(namespace = %ns, secret = %name, error = %e, "credentials Secret not read; preflight skips it")
        }
    }
    Some((ns, name, secret))
}
