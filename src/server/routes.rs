//! HTTP routes. An admission path runs its stages in order, each a named
//! function below: [`authorize`], a request slot, [`read_body`], a decision
//! slot, [`parse`] (once: the typed review serves the plan, the decision
//! and the log line), [`plan_reads`] (the core's read plan, less what the
//! caches answer; [`super::reads`] carries it out with no decision slot
//! held), [`core_decision`] (the core, with no I/O) and [`answer`] (metrics and
//! the log line from the typed decision). Every answer that is not an
//! AdmissionReview is a [`Refused`]. `docs/request-lifecycle.md` walks the
//! whole way, from the accept loop to the answer.

use std::{net::IpAddr, sync::Arc};

use axum::{
    body::{Body, Bytes, HttpBody},
    extract::State,
    http::{header, HeaderValue, Request, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use hyper::body::{Frame, SizeHint};
use serde_json::json;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{
    backup_cache::CachedAndLive,
    conns::Activity,
    fields::{log_field, LOG_FIELD_MAX},
    limits::{AnswerCharge, BodyError, DecisionSlot, Held, RequestSlot},
    metrics::{truncate, OperationLabel, RejectReason, Reply},
    outgoing::Hold,
    reads, App, ClientAuthScope, PeerIdentity,
};
use crate::{
    admission::{self, plan::without_preflight, DecisionInput, ParsedReview, ReadPlan, Target},
    lookup::{Answers, Lookup},
    settings::Settings,
};

pub use super::limits::MAX_BODY;

pub fn router(app: Arc<App>) -> Router {
    let mut router = Router::new();
    for target in Target::ALL {
        router = router.route(&target.path(), post(move |s, r| admit(s, r, target)));
    }
    router
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            Refused::new(StatusCode::NOT_FOUND, "no such path; see the README for the webhook paths").render()
        })
        .with_state(app)
}

/// The plain-HTTP metrics and probe port: nothing but `/healthz`, `/readyz`
/// and `/metrics`.
pub fn plain_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            Refused::new(StatusCode::NOT_FOUND, "this port serves only /healthz, /readyz and /metrics").render()
        })
        .with_state(app)
}

/// Every answer that is not an AdmissionReview: an HTTP status with a
/// `metav1.Status` body (what the apiserver shows as the webhook's error),
/// how it is counted, and whether the client is told when to come back.
#[derive(Debug)]
struct Refused {
    code: StatusCode,
    message: String,
    /// Counted in `rejected_requests` under this reason.
    reason: Option<RejectReason>,
    /// `Retry-After: 1`.
    retry: bool,
}

impl Refused {
    fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), reason: None, retry: false }
    }

    /// Turned away for `reason` (counted), telling the client to retry.
    fn busy(code: StatusCode, reason: RejectReason, message: impl Into<String>) -> Self {
        Self { reason: Some(reason), retry: true, ..Self::new(code, message) }
    }

    /// Turned away for `reason` (counted).
    fn rejected(code: StatusCode, reason: RejectReason, message: impl Into<String>) -> Self {
        Self { reason: Some(reason), ..Self::new(code, message) }
    }

    fn bytes(&self) -> Bytes {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": self.code.as_u16(), "message": self.message});
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }

    fn headers(&self, r: &mut Response) {
        *r.status_mut() = self.code;
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.retry {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
    }

    /// The Status answer.
    fn render(self) -> Response {
        let mut r = Response::new(Body::from(self.bytes()));
        self.headers(&mut r);
        r
    }

    /// The Status answer, sent before the unread request body is dropped (at
    /// most [`ANSWER_HOLD`] later).
    fn render_before(self, request: Body) -> Response {
        let (sent, answered) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(ANSWER_HOLD, answered).await;
            drop(request);
        });
        let mut r = Response::new(Body::new(AnswerFirst { answer: Some(self.bytes()), _sent: sent }));
        self.headers(&mut r);
        r
    }

    /// Counts and logs the refusal of an admission request (inside its
    /// span). Load shedding (an answer with `Retry-After`) is logged at debug
    /// level: under a flood it is counted, not written once per request.
    fn count(&self, app: &App, target: Target, started: Instant) {
        if let Some(reason) = self.reason {
            app.metrics.rejected(reason);
        }
        app.metrics.observe(target, OperationLabel::Other, Reply::Error, started.elapsed().as_secs_f64());
        let (code, reason) = (self.code.as_u16(), self.reason.map_or("", RejectReason::as_str));
        let message = log_field(&self.message);
        if self.retry {
            tracing::debug!(code, reason, %message, "admission request refused (busy)");
        } else {
            tracing::info!(code, reason, %message, "admission request refused");
        }
    }
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

async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.draining.load(std::sync::atomic::Ordering::Acquire) {
        return Refused::new(StatusCode::SERVICE_UNAVAILABLE, "not ready: shutting down (draining)").render();
    }
    if app.hcp_cache.as_ref().is_some_and(|c| !c.synced()) {
        return Refused::new(StatusCode::SERVICE_UNAVAILABLE, "not ready: HostedControlPlane cache not synced yet")
            .render();
    }
    // The backup preflight's caches do not gate readiness: until they sync
    // (or when their RBAC is missing) the preflight is skipped with a warning,
    // and no other admission is blocked for it.
    if app.ready.load(std::sync::atomic::Ordering::Acquire) {
        "ok".into_response()
    } else {
        Refused::new(StatusCode::SERVICE_UNAVAILABLE, "not ready: rules not compiled or certificate not loaded")
            .render()
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    app.metrics.answers_pending(app.limits.answers_pending_kib() * 1024);
    app.metrics.restores_pending(app.hcp_cache.as_ref().and_then(|c| c.restores_pending()));
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], app.metrics.render())
        .into_response()
}

/// Who may call an admission path, when client certificates are configured
/// (every admission path, or only the mutating one). Counted here, and not
/// as an answer: a caller without a certificate is not a webhook client.
fn authorize(app: &App, req: &Request<Body>, target: Target) -> Result<(), Refused> {
    let Some(auth) = &app.client_auth else { return Ok(()) };
    if auth.scope == ClientAuthScope::Mutating && !target.mutating() {
        return Ok(());
    }
    let peer = req.extensions().get::<Arc<PeerIdentity>>();
    let Some(peer) = peer.filter(|p| !p.names.is_empty() || p.verified) else {
        app.metrics.rejected(RejectReason::Unauthenticated);
        return Err(Refused::new(
            StatusCode::UNAUTHORIZED,
            "a client certificate signed by the configured client CA is required on admission paths",
        ));
    };
    if auth.allowed.is_empty() || peer.names.iter().any(|n| auth.allowed.iter().any(|a| a == n)) {
        return Ok(());
    }
    app.metrics.rejected(RejectReason::Forbidden);
    tracing::warn!(client = %log_field(&peer.names.join(",")), "client certificate identity not in --allowed-client-names");
    let what = if auth.sans { "CN or SAN" } else { "CN" };
    Err(Refused::new(
        StatusCode::FORBIDDEN,
        format!("this client certificate's identity ({what}) is not allowed to call admission paths"),
    ))
}

/// One admission request, in its span from the first line on, so every
/// answer (a refusal at any stage, or the review) is logged with it.
async fn admit(State(app): State<Arc<App>>, req: Request<Body>, target: Target) -> Response {
    let started = Instant::now();
    let conn = req.extensions().get::<Arc<Activity>>().cloned();
    let source = conn.as_ref().map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |c| c.source());
    let span = tracing::info_span!("admission", webhook = target.label(), source = %source);
    let deadline = started + app.limits.opts.request_timeout;
    let caller_verified = req.extensions().get::<Arc<PeerIdentity>>().is_some_and(|p| p.verified);
    Admission { app, target, started, deadline, source, conn, caller_verified }.run(req).instrument(span).await
}

/// The request being admitted: what every stage needs.
struct Admission {
    app: Arc<App>,
    target: Target,
    started: Instant,
    deadline: Instant,
    source: IpAddr,
    conn: Option<Arc<Activity>>,
    /// The caller presented a client certificate the client CA verified.
    caller_verified: bool,
}

impl Admission {
    async fn run(self, req: Request<Body>) -> Response {
        if let Err(refused) = authorize(&self.app, &req, self.target) {
            return refused.render_before(req.into_body());
        }
        let Some(in_flight) = self.app.limits.request_slot(self.source).await else {
            let refused = Refused::busy(
                StatusCode::SERVICE_UNAVAILABLE,
                RejectReason::Requests,
                "too many requests in flight; retry",
            );
            return self.refuse_before(refused, req.into_body());
        };
        let (bytes, _held) = match self.read_body(req, &in_flight).await {
            Ok(read) => read,
            Err((refused, rest)) => return self.refuse_before(refused, rest),
        };
        let (mut response, charge) = match self.review(bytes).await {
            Ok(sent) => sent,
            Err(refused) => (self.refuse(refused), None),
        };
        // The answer's charge is held until it is written (the connection's
        // write deadline bounds how long). The request slot is not: it
        // bounds work in progress, and a source holding every slot with
        // answers it does not read would shut the apiserver out.
        drop(in_flight);
        let held: Vec<Box<dyn std::any::Any + Send + Sync>> =
            charge.into_iter().map(|c| Box::new(c) as Box<dyn std::any::Any + Send + Sync>).collect();
        response.extensions_mut().insert(Hold::of(held));
        response
    }

    fn refuse(&self, refused: Refused) -> Response {
        refused.count(&self.app, self.target, self.started);
        refused.render()
    }

    fn refuse_before(&self, refused: Refused, rest: Body) -> Response {
        refused.count(&self.app, self.target, self.started);
        refused.render_before(rest)
    }

    /// The body, read completely (bounded in size and time) before a
    /// decision slot is taken: a client that stalls its body holds no
    /// decision slot. Meanwhile its connection counts as reading a body (the
    /// costliest kind at the connection cap).
    async fn read_body(&self, req: Request<Body>, in_flight: &RequestSlot) -> Result<(Bytes, Held), (Refused, Body)> {
        let opts = &self.app.limits.opts;
        let max = opts.max_body;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let body_deadline = self.deadline.min(self.started + opts.body_timeout);
        let reading = self.conn.as_ref().map(|c| c.reading());
        let read = self.app.limits.read_body(req.into_body(), declared, body_deadline, in_flight).await;
        drop(reading);
        let (e, rest) = match read {
            Ok(read) => return Ok(read),
            Err(failed) => failed,
        };
        let refused = match e {
            BodyError::TooLarge => {
                // Read (and discard) a moderately oversize body to its end
                // before answering: an HTTP/2 client still uploading treats an
                // early answer plus RST_STREAM as a stream error (curl does),
                // and an HTTP/1.1 connection stays usable. A body far over the
                // limit is answered at once.
                let rest = discard(rest, declared, max, body_deadline).await;
                let message = format!("request body over the {max}-byte limit");
                return Err((
                    Refused::rejected(StatusCode::PAYLOAD_TOO_LARGE, RejectReason::BodyTooLarge, message),
                    rest,
                ));
            }
            BodyError::Timeout => Refused::rejected(
                StatusCode::REQUEST_TIMEOUT,
                RejectReason::BodyTimeout,
                format!("the request body did not arrive within {:?}", body_deadline - self.started),
            ),
            BodyError::Evicted => Refused::rejected(
                StatusCode::REQUEST_TIMEOUT,
                RejectReason::BodyEvicted,
                format!(
                    "the request body was still arriving after {:?} when every in-flight slot was taken; \
                     the slowest body was dropped for a newer request",
                    self.started.elapsed()
                ),
            ),
            BodyError::Budget => Refused::busy(
                StatusCode::SERVICE_UNAVAILABLE,
                RejectReason::BodyBudget,
                "request body buffers are full; retry",
            ),
            BodyError::Read(e) => Refused::new(
                StatusCode::BAD_REQUEST,
                format!("reading the request body: {}", truncate(&e, LOG_FIELD_MAX)),
            ),
        };
        Err((refused, rest))
    }

    /// From the read body to the answer: parse once, plan the reads, read
    /// what the caches cannot answer (no decision slot held), decide.
    async fn review(&self, bytes: Bytes) -> Result<(Response, Option<AnswerCharge>), Refused> {
        let len = bytes.len();
        let units = self.units(&bytes)?;
        let slot = self.decision_slot(units).await?;
        let big = len >= BLOCKING_DECISION_BYTES;
        let parsed = parse_body(bytes.clone(), big).await?;
        let (plan, cached) = plan_reads(&self.app, &parsed, self.target);
        if plan.is_empty() {
            let reviewed = self.decision(&parsed, cached, self.app.settings.clone(), slot).await?;
            return self.send(&parsed, reviewed).await;
        }
        if plan.decide_first {
            // Nothing is read for a review denied without the reads.
            let settings = without_preflight(&self.app.settings);
            let first = self.decision(&parsed, Answers::default(), settings, slot).await?;
            if first.decision.denial().is_some() {
                return self.send(&parsed, first).await;
            }
        } else {
            drop(slot);
        }
        // Nothing parsed is held without its units: the tree goes with the
        // slot before the reads (which may wait), and the body, held in the
        // body budget, is parsed again after them.
        drop(parsed);
        let mut live = self.app.reads.execute(&self.app, &plan, self.source, self.deadline).await;
        live.hcps = live.hcps.or(cached.hcps);
        let slot = self.decision_slot(units).await?;
        let parsed = parse_body(bytes, big).await?;
        let reviewed = self.decision(&parsed, live, self.app.settings.clone(), slot).await?;
        self.send(&parsed, reviewed).await
    }

    /// The decided review as bytes, charged to the answer budget until it is
    /// written (no room within the deadline: 503 + `Retry-After`, nothing
    /// counted as decided); then counted and logged ([`record`]).
    async fn send(
        &self,
        parsed: &ParsedReview,
        reviewed: admission::Reviewed,
    ) -> Result<(Response, Option<AnswerCharge>), Refused> {
        let bytes = serde_json::to_vec(&reviewed.review).map_err(|e| {
            Refused::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the answer does not serialise: {e}"))
        })?;
        let charge = self.app.limits.answer_charge(self.source, bytes.len(), self.deadline).await.ok_or_else(|| {
            Refused::busy(
                StatusCode::SERVICE_UNAVAILABLE,
                RejectReason::AnswerBudget,
                "answers waiting to be read fill this server's answer budget; retry",
            )
        })?;
        record(&self.app, parsed, &reviewed, self.target, self.started, self.caller_verified, self.source);
        let mut r = Response::new(Body::from(bytes));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok((r, Some(charge)))
    }

    /// The decision units `bytes` is charged, from its shape before it is
    /// parsed (linear, no allocation); a body whose parse and decision would
    /// need more heap than every unit together is refused here, unparsed.
    fn units(&self, bytes: &[u8]) -> Result<u32, Refused> {
        let charged = admission::cost::shape(bytes).decision_bytes();
        self.app.limits.units_for(charged).map_err(|budget| {
            Refused::rejected(
                StatusCode::PAYLOAD_TOO_LARGE,
                RejectReason::DecisionTooCostly,
                format!(
                    "the review would take about {} MiB of memory to parse and decide (its shape, not its length: \
                     many small objects or strings), more than this server's decision budget of {} MiB \
                     (--max-concurrent units); not decided",
                    charged.div_ceil(1024 * 1024),
                    budget / (1024 * 1024)
                ),
            )
        })
    }

    /// `units` decision units, within the queue wait and the deadline.
    async fn decision_slot(&self, units: u32) -> Result<DecisionSlot, Refused> {
        let slot = tokio::time::timeout_at(self.deadline, self.app.limits.decision_slot(units)).await.ok().flatten();
        slot.ok_or_else(|| {
            Refused::busy(StatusCode::TOO_MANY_REQUESTS, RejectReason::Decisions, "every decision slot is busy; retry")
        })
    }

    /// Decides `parsed` on what was read, holding `slot`, on the blocking
    /// pool (no review holds up the async workers: probes, accepts, other
    /// answers) and within the request deadline. The slot goes back only
    /// when the work stops, even after a deadline answer: the units stay
    /// charged for as long as the memory is in use.
    async fn decision(
        &self,
        parsed: &Arc<ParsedReview>,
        live: Answers,
        settings: Settings,
        slot: DecisionSlot,
    ) -> Result<admission::Reviewed, Refused> {
        let (app, parsed, target) = (self.app.clone(), parsed.clone(), self.target);
        let task = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            core_decision(&app, &parsed, &live, &settings, target)
        });
        match tokio::time::timeout_at(self.deadline, task).await {
            Ok(joined) => joined.map_err(task_failed)?,
            Err(_) => Err(Refused::busy(
                StatusCode::SERVICE_UNAVAILABLE,
                RejectReason::Deadline,
                "the review was not decided within the request deadline",
            )),
        }
    }
}

/// Bodies at least this large are parsed on the blocking pool (every
/// decision runs there), so a big review never holds up the async workers
/// (probes, accepts, small reviews); a smaller one parses within a millisecond.
const BLOCKING_DECISION_BYTES: usize = 256 * 1024;

/// The body parsed, a big one on the blocking pool.
async fn parse_body(bytes: Bytes, big: bool) -> Result<Arc<ParsedReview>, Refused> {
    Ok(Arc::new(if big {
        tokio::task::spawn_blocking(move || parse(&bytes)).await.map_err(task_failed)??
    } else {
        parse(&bytes)?
    }))
}

/// The body as an AdmissionReview.
fn parse(bytes: &[u8]) -> Result<ParsedReview, Refused> {
    let value = serde_json::from_slice(bytes)
        .map_err(|e| Refused::new(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")))?;
    ParsedReview::parse(value).map_err(|e| Refused::new(StatusCode::BAD_REQUEST, e.to_string()))
}

/// What this review needs read live: the core's read plan for it, less what
/// the server's caches answer, and those answers ([`reads::live`]).
fn plan_reads(app: &App, parsed: &ParsedReview, target: Target) -> (ReadPlan, Answers) {
    reads::live(app, parsed.plan(&app.settings, Some(target)))
}

fn task_failed(e: tokio::task::JoinError) -> Refused {
    Refused::new(StatusCode::INTERNAL_SERVER_ERROR, format!("decision task failed: {e}"))
}

/// The core's decision on `parsed`, on the answers to its read plan (the
/// caches, and what was read live for it).
fn core_decision(
    app: &App,
    parsed: &ParsedReview,
    live: &Answers,
    settings: &Settings,
    target: Target,
) -> Result<admission::Reviewed, Refused> {
    let reads = CachedAndLive { cache: app.lookup.as_deref().map(|l| l as &dyn Lookup), live };
    // The decision runs on the plan's answers, read from the caches and the
    // live reads in the plan's order: the same `Answers` the CLI and the
    // Kubewarden policy decide on (what the plan does not name is not provided).
    let answers = reads.any().then(|| parsed.plan(settings, Some(target)).read_from(&reads));
    let lookup = answers.as_ref().map(|a| a as &dyn Lookup);
    let input = DecisionInput { settings, lookup, now: crate::time::system_now(), expect: Some(target) };
    admission::review_parsed(parsed, &input).map_err(|e| Refused::new(StatusCode::BAD_REQUEST, e.to_string()))
}

/// Counts and logs a decided review, all from the typed request and
/// decision (bounded label sets). The credentials gauge is keyed by names:
/// set only from allowed reviews that are not dry runs, and only for
/// Secrets of the operator namespace.
fn record(
    app: &App,
    parsed: &ParsedReview,
    reviewed: &admission::Reviewed,
    target: Target,
    started: Instant,
    caller_verified: bool,
    source: IpAddr,
) {
    let elapsed = started.elapsed();
    let req = parsed.request();
    let decision = &reviewed.decision;
    let operation = OperationLabel::from_request(req.map(|r| r.operation));
    let outcome = match decision.denial() {
        None => Reply::Allowed,
        Some(d) if d.reason == admission::DenialReason::BadRequest => Reply::CannotDecide,
        Some(_) => Reply::Denied,
    };
    app.metrics.observe(target, operation, outcome, elapsed.as_secs_f64());
    app.metrics.rule_results(target, &decision.rules);
    if let Some(o) = &decision.etcd_init {
        let (outcome, reason) = o.labels();
        app.metrics.etcd_init(outcome, reason);
    }
    if let Some(v) = decision.backup_verify {
        app.metrics.backup_verify(v);
    }
    let dry_run = req.and_then(|r| r.dry_run).unwrap_or(false);
    // What the gauge records must be a fact about the cluster, never what a
    // caller says: a Secret the preflight read from the cluster (not from
    // `--context` files), or a Secret under review only when the caller is
    // the apiserver (a verified client certificate; unauthenticated, anyone
    // could post a forged Secret and set or evict series).
    let from_cluster = match target {
        Target::EtcdBackupSecrets => caller_verified,
        _ => app.backup_cache.is_some(),
    };
    if let Some(seen) = decision.credentials.as_ref().filter(|_| outcome == Reply::Allowed && !dry_run && from_cluster)
    {
        if seen.namespace == app.settings.operator_namespace {
            app.metrics.credentials_valid(&seen.namespace, &seen.name, seen.usable);
        }
    }
    // At most LINES_PER_SECOND lines a source (the rest counted, and
    // reported on its next line); metrics above count every review.
    let Some(suppressed) = app.log_budget.admit(source) else { return };
    let field = |v: Option<&str>| log_field(v.unwrap_or_default());
    tracing::info!(
        suppressed,
        uid = field(req.map(|r| r.uid.as_str())),
        kind = field(req.map(|r| r.kind.kind.as_str())),
        namespace = field(req.and_then(|r| r.namespace.as_deref())),
        name = field(req.and_then(|r| r.name.as_deref())),
        operation = req.map_or("", |r| r.operation.as_str()),
        dry_run,
        decision = outcome.as_str(),
        user = field(req.and_then(|r| r.user_info.as_ref()).map(|u| u.username.as_str())),
        rules = rule_list(&decision.rules),
        latency_us = elapsed.as_micros() as u64,
        "admission review"
    );
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

/// In-process router tests (`Router` + `oneshot`): routing, what a review
/// makes the server read, and how every failure maps to an HTTP answer. The
/// real-TLS suites (`tests/server*.rs`) cover the same paths on the wire.
#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use http_body_util::BodyExt as _;
    use serde_json::Value;
    use tower::ServiceExt as _;

    use super::*;
    use crate::server::{limits::LimitOptions, metrics::Metrics, LookupSource, ServeOptions};

    fn options(lookups: LookupSource) -> ServeOptions {
        let listen = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        let limits = LimitOptions { max_body: 64 * 1024, ..LimitOptions::default() };
        ServeOptions { limits, lookups, ..ServeOptions::new(listen, PathBuf::new(), PathBuf::new()) }
    }

    fn app(lookups: LookupSource) -> Arc<App> {
        app_with(lookups, Settings::default())
    }

    fn app_with(lookups: LookupSource, settings: Settings) -> Arc<App> {
        let app = App::new(&ServeOptions { settings, ..options(lookups) }, Arc::new(Metrics::new()));
        app.ready.store(true, std::sync::atomic::Ordering::Release);
        Arc::new(app)
    }

    /// An apiserver that is not there: the watch caches never sync and every
    /// live read fails, so an answer that needed a read says so.
    fn nowhere() -> LookupSource {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap_or_else(|e| panic!("{e}")));
        LookupSource::Cluster(kube::Client::try_from(config).unwrap_or_else(|e| panic!("{e}")))
    }

    fn review(name: &str) -> Value {
        let path = format!("{}/tests/reviews/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    async fn call(app: &Arc<App>, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, Option<String>, Value) {
        let req = Request::builder().method(method).uri(path).body(Body::from(body));
        let req = req.unwrap_or_else(|e| panic!("{e}"));
        let resp = router(app.clone()).oneshot(req).await.unwrap_or_else(|e| match e {});
        let status = resp.status();
        let retry = resp.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let bytes = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (status, retry, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn json(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap_or_default()
    }

    #[tokio::test]
    async fn every_webhook_path_answers_its_review_and_nothing_else_is_routed() {
        let app = app(LookupSource::None);
        for target in Target::ALL {
            let r = review("hcpetcdbackup-create-s3.json");
            let (status, _, body) = call(&app, "POST", &target.path(), json(&r)).await;
            assert_eq!(status, StatusCode::OK, "{}", target.path());
            assert_eq!(body["response"]["uid"], r["request"]["uid"], "{}", target.path());
            // The backup is what the backup path validates; elsewhere it is the wrong resource.
            let allowed = body["response"]["allowed"].as_bool();
            match target {
                Target::HcpEtcdBackups => assert_eq!(allowed, Some(true), "{body}"),
                // The mutating paths never block what they were not meant to see.
                Target::EtcdStatefulSets | Target::EtcdBackupJobs => assert_eq!(allowed, Some(true), "{body}"),
                _ => assert_eq!(body["response"]["status"]["code"], 400, "{}: {body}", target.path()),
            }
        }
        let (status, _, body) = call(&app, "POST", "/validate/pods", b"{}".to_vec()).await;
        assert_eq!((status, body["kind"].as_str()), (StatusCode::NOT_FOUND, Some("Status")));
        let (status, _, _) = call(&app, "GET", "/validate/hcpetcdbackups", Vec::new()).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _, _) = call(&app, "GET", "/healthz", Vec::new()).await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn failures_map_to_status_answers_and_are_counted() {
        let app = app(LookupSource::None);
        let path = Target::HcpEtcdBackups.path();
        let (status, retry, body) = call(&app, "POST", &path, b"not json".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(retry.is_none());
        assert_eq!((body["kind"].as_str(), body["code"].as_u64()), (Some("Status"), Some(400)));
        assert!(body["message"].as_str().is_some_and(|m| m.starts_with("body is not JSON")), "{body}");
        let (status, _, body) = call(&app, "POST", &path, b"{\"kind\": \"Pod\"}".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body["message"].as_str().is_some_and(|m| m.contains("not an AdmissionReview")), "{body}");
        let (status, _, body) = call(&app, "POST", &path, vec![b' '; 64 * 1024 + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        let metrics = app.metrics.render();
        assert!(metrics.contains(r#"rejected_requests_total{reason="body_too_large"} 1"#), "{metrics}");
        let errors = r#"admission_requests_total{webhook="hcpetcdbackups",operation="other",decision="error"} 3"#;
        assert!(metrics.contains(errors), "{metrics}");
        // Not ready (draining): the probe says why.
        app.draining.store(true, std::sync::atomic::Ordering::Release);
        let (status, _, body) = call(&app, "GET", "/readyz", Vec::new()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body["message"].as_str().is_some_and(|m| m.contains("draining")), "{body}");
    }

    /// The per-rule result counter says what enforcement did with each
    /// finding: denied, warned, audited, exempt, off.
    #[tokio::test]
    async fn rule_results_are_counted_as_enforcement_decided() {
        let bad = review("hcpetcdbackup-create-invalid.json");
        let settings = |json: Value| Settings::from_json(&json).unwrap_or_else(|e| panic!("{e}"));
        let cases = [
            (serde_json::json!({}), "denied", false),
            (serde_json::json!({"enforcement": {"mode": "warn"}}), "warned", true),
            (serde_json::json!({"enforcement": {"mode": "audit"}}), "audited", true),
            (serde_json::json!({"enforcement": {"exemptions": {"namespaces": ["clusters-prod"]}}}), "exempt", true),
        ];
        for (config, result, allowed) in cases {
            let app = app_with(LookupSource::None, settings(config.clone()));
            let (_, _, body) = call(&app, "POST", &Target::HcpEtcdBackups.path(), json(&bad)).await;
            assert_eq!(body["response"]["allowed"], allowed, "{config}: {body}");
            let metrics = app.metrics.render();
            let line = metrics.lines().find(|l| {
                l.starts_with("hcp_etcd_admission_rule_results_total{") && l.contains(&format!("result=\"{result}\""))
            });
            assert!(
                line.is_some_and(|l| l.contains("webhook=\"hcpetcdbackups\"") && !l.ends_with(" 0")),
                "{config}: {metrics}"
            );
        }
        // A rule turned off: counted as off.
        let off = app_with(
            LookupSource::None,
            settings(serde_json::json!({"enforcement": {"rules": {"upstream-schema": "off"}}})),
        );
        let (_, _, _) = call(&off, "POST", &Target::HcpEtcdBackups.path(), json(&bad)).await;
        assert!(off.metrics.render().contains("result=\"off\""), "{}", off.metrics.render());
    }

    #[tokio::test]
    async fn reads_are_planned_by_the_core_and_skipped_for_a_review_denied_without_them() {
        let app = app(nowhere());
        // An HCPEtcdBackup CREATE: the caches have not synced, so the
        // HostedControlPlanes are read live, after a decision without them.
        let parse = |v: &Value| ParsedReview::parse(v.clone()).unwrap_or_else(|e| panic!("{e}"));
        let good = review("hcpetcdbackup-create-s3.json");
        let (plan, _) = plan_reads(&app, &parse(&good), Target::HcpEtcdBackups);
        assert!(plan.decide_first && plan.hosted_control_planes.is_some(), "{plan:?}");
        // The etcd StatefulSet is never cached: it is read live (for a hosted namespace only).
        assert_eq!(plan.etcd_stateful_set.as_deref(), Some("clusters-prod"), "{plan:?}");
        // The wrong endpoint plans nothing.
        assert!(plan_reads(&app, &parse(&good), Target::HostedClusters).0.is_empty());
        // A backup its schema denies is answered without the (failing) reads.
        let bad = review("hcpetcdbackup-create-invalid.json");
        let (status, _, body) = call(&app, "POST", &Target::HcpEtcdBackups.path(), json(&bad)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["response"]["allowed"], false, "{body}");
        assert!(!body.to_string().contains("could not be looked up"), "read for a denied review: {body}");
        // The good one goes on to the preflight, which cannot read (nothing synced) and says so.
        let (_, _, body) = call(&app, "POST", &Target::HcpEtcdBackups.path(), json(&good)).await;
        assert_eq!(body["response"]["allowed"], true, "{body}");
        assert!(body.to_string().contains("could not be looked up"), "{body}");
    }
}
