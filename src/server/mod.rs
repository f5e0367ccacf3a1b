//! The HTTPS webhook shell: tokio + hyper + rustls, axum routes. It reads
//! requests, calls the decision core and writes responses; it decides nothing.
//!
//! * TLS 1.2/1.3 only; the serving pair and the client CA are reloaded without
//!   a restart ([`tls::reload_loop`]); expired, not-yet-valid or wrong-SAN
//!   pairs are refused.
//! * Who may call: with a client CA, admission paths (all, or only the
//!   mutating one) need a verified client certificate whose CN is allowed
//!   (SANs only when explicitly enabled), and no connection outlives its
//!   maximum age or its client certificate; `/healthz`, `/readyz` and
//!   `/metrics` stay open for probes and Prometheus. With `metrics_listen`
//!   they are also served over plain HTTP on a port of their own (no
//!   admission path there), so a NetworkPolicy can give monitoring and
//!   probes that port only.
//! * Bounded everything ([`limits`]): body read before a decision slot, body
//!   and request deadlines under the webhook timeout, connection caps (overall
//!   and per source) and in-flight caps that evict the costliest connection
//!   ([`conns`]) / slowest body instead of ever refusing a newcomer, live
//!   reads before the decision slot under their own budget ([`reads`]), handshake, header-read and idle timeouts for
//!   HTTP/1.1 and HTTP/2, bounded header buffers and HTTP/2 windows, fast
//!   429/503 with `Retry-After` when saturated.
//! * Drain: on SIGTERM `/readyz` turns 503 at once, the server keeps accepting
//!   and serving for the drain delay (HTTP/1.1 answers carry
//!   `Connection: close` meanwhile), then stops accepting and lets in-flight
//!   requests finish within the shutdown grace.

pub mod backup_cache;
pub mod certs;
pub mod conns;
pub mod fields;
pub mod hcp_cache;
pub mod limits;
pub mod metrics;
pub mod reads;
pub mod routes;
pub mod tls;

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::body::Body;
use hyper::{body::Incoming, header, http::HeaderValue, Request, Response, Version};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto::Builder,
};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::{admission, settings::Settings};
use conns::{ConnTable, Evicted, Place};

/// Server errors (start-up only; per-request problems become HTTP answers).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("listening on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the decision core cannot start: {0}")]
    WarmUp(#[from] admission::WarmUpError),
}

/// Options of `serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub settings: Settings,
    /// How often the certificate files are re-read.
    pub reload_interval: Duration,
    /// Timeouts and caps.
    pub limits: limits::LimitOptions,
    /// After SIGTERM: how long `/readyz` says 503 while the server still
    /// accepts and serves (endpoints need that long to drop the pod).
    pub drain_delay: Duration,
    /// Then: how long in-flight requests get after accepting stops.
    pub shutdown_grace: Duration,
    /// The serving certificate must name every one of these (DNS or IP).
    pub expect_sans: Vec<String>,
    /// With `client_ca`: identities (the certificate's CN; SANs too with
    /// `client_identity_sans`) allowed on admission paths (empty: any
    /// certificate the CA signed).
    pub allowed_client_names: Vec<String>,
    /// With `client_ca`: which admission paths need a certificate.
    pub client_auth_scope: ClientAuthScope,
    /// With `client_ca`: DNS and URI SANs are identities too, not only the CN.
    pub client_identity_sans: bool,
    /// Where the mutation finds HostedControlPlanes.
    pub lookups: LookupSource,
    /// Plain-HTTP listener for `/metrics`, `/healthz` and `/readyz` only.
    pub metrics_listen: Option<SocketAddr>,
}

/// Where the mutating path finds HostedControlPlanes.
#[derive(Clone, Default)]
pub enum LookupSource {
    /// Nowhere: the mutation denies etcd StatefulSets (no restore decision without a HostedControlPlane).
    #[default]
    None,
    /// Fixed objects (`--context` files).
    Static(crate::admission::lookup::ContextObjects),
    /// A reflector over the cluster this client talks to.
    Cluster(kube::Client),
}

impl std::fmt::Debug for LookupSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LookupSource::None => "None",
            LookupSource::Static(_) => "Static",
            LookupSource::Cluster(_) => "Cluster",
        })
    }
}

/// Client-certificate requirements of the admission paths.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub allowed: Vec<String>,
    pub scope: ClientAuthScope,
    /// DNS and URI SANs count as identities too (off by default: Kubernetes
    /// identifies a client certificate by its CN).
    pub sans: bool,
}

/// What the TLS handshake established about the client (a request extension).
#[derive(Debug, Default)]
pub struct PeerIdentity {
    /// A certificate was presented and verified against the client CA.
    pub verified: bool,
    /// Its identity as Kubernetes reads a client certificate: the subject CN
    /// (plus its DNS and URI SANs only with `client_identity_sans`).
    pub names: Vec<String>,
    /// The certificate's NotAfter (Unix seconds).
    pub not_after: Option<i64>,
}

/// Which admission paths need a client certificate when a client CA is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientAuthScope {
    /// Every admission path.
    #[default]
    All,
    /// Only the mutating path (the one whose answer carries a restore URL);
    /// the validating paths answer any caller.
    Mutating,
}

/// Shared state of the handlers.
pub struct App {
    pub settings: Settings,
    /// Where the mutation finds HostedControlPlanes (context files or a reflector).
    pub lookup: Option<Arc<dyn crate::admission::lookup::Lookup + Send + Sync>>,
    /// The HostedControlPlane reflector, when watching a cluster (readiness waits for its sync).
    pub hcp_cache: Option<Arc<hcp_cache::HcpCache>>,
    /// The HCPEtcdBackup preflight's caches and live Secret reader, when
    /// watching a cluster with `backupPreflight` on.
    pub backup_cache: Option<Arc<backup_cache::BackupCache>>,
    pub metrics: Arc<metrics::Metrics>,
    pub ready: AtomicBool,
    /// Set on SIGTERM: `/readyz` answers 503.
    pub draining: AtomicBool,
    pub limits: limits::Limits,
    /// `Some` when `--client-ca` is given.
    pub client_auth: Option<ClientAuth>,
    /// The budget and negative cache of live reads.
    pub reads: reads::LiveReads,
}

/// A bound, not yet serving, server.
pub struct Server {
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    acceptor: TlsAcceptor,
    app: Arc<App>,
    opts: ServeOptions,
    resolver: Arc<tls::ReloadingResolver>,
    client_verifier: Option<Arc<tls::ReloadingClientVerifier>>,
    last_source: Vec<u8>,
}

impl Server {
    /// Loads the certificate, compiles the rules and binds the port.
    pub async fn bind(opts: ServeOptions) -> Result<Self, ServerError> {
        let loaded = tls::load_pair(&opts.tls_cert, &opts.tls_key, &opts.expect_sans, tls::unix_now())?;
        let resolver = tls::ReloadingResolver::new(loaded.key.clone());
        let (config, client_verifier) = tls::server_config(resolver.clone(), opts.client_ca.as_deref())?;
        let metrics = Arc::new(metrics::Metrics::new());
        metrics.set_cert_expiry(loaded.not_after);
        let listener = bind(opts.listen).await?;
        let metrics_listener = match opts.metrics_listen {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        type SharedLookup = Arc<dyn crate::admission::lookup::Lookup + Send + Sync>;
        let (lookup, hcp_cache, backup_cache): (Option<SharedLookup>, _, _) = match &opts.lookups {
            LookupSource::None => (None, None, None),
            LookupSource::Static(objects) => (Some(Arc::new(objects.clone())), None, None),
            LookupSource::Cluster(client) => {
                let cache = hcp_cache::HcpCache::start(client.clone());
                let backups = opts.settings.backup_preflight.then(|| {
                    backup_cache::BackupCache::start(client.clone(), opts.settings.operator_namespace.clone())
                });
                let lookup = backup_cache::ClusterLookup { hcps: cache.clone(), backups: backups.clone() };
                (Some(Arc::new(lookup) as SharedLookup), Some(cache), backups)
            }
        };
        let app = Arc::new(App {
            settings: opts.settings.clone(),
            lookup,
            hcp_cache,
            backup_cache,
            metrics,
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            limits: limits::Limits::new(opts.limits.clone()),
            client_auth: opts.client_ca.as_ref().map(|_| ClientAuth {
                allowed: opts.allowed_client_names.clone(),
                scope: opts.client_auth_scope,
                sans: opts.client_identity_sans,
            }),
            reads: reads::LiveReads::new(&opts.limits),
        });
        // Parse every schema and compile every rule before reporting ready.
        admission::warm_up()?;
        app.ready.store(true, std::sync::atomic::Ordering::Release);
        Ok(Self {
            listener,
            metrics_listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            app,
            opts,
            resolver,
            client_verifier,
            last_source: loaded.source,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The plain-HTTP metrics and probe listener's address, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, keeps serving (not ready) for the
    /// drain delay, then stops accepting and drains in-flight requests.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Server { listener, metrics_listener, acceptor, app, opts, resolver, client_verifier, last_source } = self;
        let plain = metrics_listener.map(|l| tokio::spawn(serve_plain(l, app.clone())));
        let reloader = tokio::spawn(tls::reload_loop(
            tls::ReloadTargets {
                cert: opts.tls_cert.clone(),
                key: opts.tls_key.clone(),
                expect_sans: opts.expect_sans.clone(),
                resolver,
                client_ca: opts.client_ca.clone().zip(client_verifier),
            },
            last_source,
            opts.reload_interval,
            app.metrics.clone(),
        ));
        let router = routes::router(app.clone());
        let lim = &app.limits.opts;
        let max_conns = lim.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let conns = ConnTable::new(max_conns, lim.max_connections_per_source);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
        let mut builder = Builder::new(TokioExecutor::new());
        // HTTP/1.1 (what kube-apiserver uses for webhooks): hyper's header-read
        // timer also runs while a keep-alive connection waits for its next
        // request, so it is the idle timeout there; a new connection's first
        // request is bounded by the shorter header-read timeout below.
        // The read buffer bounds what a client sending endless headers makes
        // the server hold (hyper answers 431 and closes above it).
        let header_bytes = lim.max_header_bytes.max(8192);
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(lim.idle_timeout)
            .keep_alive(true)
            .max_buf_size(header_bytes);
        // Small fixed receive windows: a client that sends body data and never
        // lets it be read pins at most one window per connection.
        let window = lim.h2_window.max(65_535);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(lim.h2_max_streams)
            .max_header_list_size(u32::try_from(header_bytes).unwrap_or(u32::MAX))
            .initial_stream_window_size(window)
            .initial_connection_window_size(window)
            .adaptive_window(false)
            .max_send_buf_size(64 * 1024)
            .max_pending_accept_reset_streams(Some(16))
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(10));
        let drain_until = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(shutdown, drain_until);
        let mut draining = false;
        loop {
            let (tcp, peer) = tokio::select! {
                _ = &mut shutdown, if !draining => {
                    draining = true;
                    app.draining.store(true, Ordering::Release);
                    let _ = drain_tx.send(true);
                    app.metrics.set_draining(true);
                    drain_until.as_mut().reset(tokio::time::Instant::now() + opts.drain_delay);
                    tracing::info!(
                        drain_s = opts.drain_delay.as_secs_f64(),
                        "shutdown signal: /readyz now 503; still serving until endpoints drop this pod"
                    );
                    continue;
                }
                _ = &mut drain_until, if draining => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // Never refused: at a cap another connection is closed for it.
            let (place, evicted) = conns.admit(peer.ip());
            match evicted {
                Some(Evicted::Fullest) => app.metrics.rejected(metrics::RejectReason::ConnectionEvicted),
                Some(Evicted::OwnSource) => app.metrics.rejected(metrics::RejectReason::ConnectionSourceShare),
                None => {}
            }
            let _ = tcp.set_nodelay(true);
            let conn = Connection {
                app: app.clone(),
                acceptor: acceptor.clone(),
                router: router.clone(),
                builder: builder.clone(),
                stop: stop_rx.clone(),
                drain: drain_rx.clone(),
            };
            tokio::spawn(async move {
                conn.run(tcp, peer, &place).await;
                drop(place);
            });
        }
        drop(listener);
        app.ready.store(false, Ordering::Release);
        tracing::info!("drain delay over: not accepting; finishing in-flight requests");
        let _ = stop_tx.send(true);
        if tokio::time::timeout(opts.shutdown_grace, conns.empty()).await.is_err() {
            tracing::warn!(
                grace_s = opts.shutdown_grace.as_secs(),
                "in-flight requests did not finish before the deadline"
            );
        }
        reloader.abort();
        if let Some(p) = plain {
            p.abort();
        }
    }
}

/// Connections at once on the plain-HTTP metrics and probe port.
const PLAIN_MAX_CONNECTIONS: usize = 32;
/// Of which one source address may hold (kubelet probes come from the node's
/// address, which hostNetwork pods share).
const PLAIN_MAX_PER_SOURCE: usize = 16;

/// Serves `/metrics`, `/healthz` and `/readyz` over plain HTTP/1.1 on its own
/// port (nothing else: admission paths answer 404 there). Small and bounded,
/// with a connection budget of its own: 32 connections, 16 per source (at a
/// cap a silent or idle connection is closed for the newcomer before one with
/// a probe in flight, so silent sockets cannot fail a kubelet probe), 8 KiB of
/// headers, 5 s to send them, a minute per connection at most.
async fn serve_plain(listener: TcpListener, app: Arc<App>) {
    let router = routes::plain_router(app);
    let places = ConnTable::new(PLAIN_MAX_CONNECTIONS, PLAIN_MAX_PER_SOURCE);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(5)).max_buf_size(8192).keep_alive(true);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics port: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (place, _) = places.admit(peer.ip());
        // No TLS here: the connection is "handshaken" at once; a probe in
        // flight counts as a request, so it is evicted last.
        place.activity.handshake_done();
        let router = router.clone();
        let activity = place.activity.clone();
        let conn = http.serve_connection(
            TokioIo::new(tcp),
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let router = router.clone();
                let guard = activity.begin();
                async move {
                    let r = router.oneshot(req.map(Body::new)).await;
                    drop(guard);
                    r
                }
            }),
        );
        tokio::spawn(async move {
            tokio::select! {
                r = tokio::time::timeout(Duration::from_secs(60), conn) => {
                    if let Ok(Err(e)) = r {
                        tracing::debug!(%peer, error = %e, "metrics port: connection ended with an error");
                    }
                }
                _ = place.activity.kill.notified() => {}
            }
            drop(place);
        });
    }
}

/// Binds `addr`; `[::]` where the pod has no IPv6 falls back to `0.0.0.0`.
async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED => {
            let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
            tracing::warn!(error = %e, "no IPv6 here: listening on {v4} instead of {addr}");
            TcpListener::bind(v4).await.map_err(|source| ServerError::Bind { addr: v4, source })
        }
        Err(source) => Err(ServerError::Bind { addr, source }),
    }
}

/// One accepted TCP connection.
struct Connection {
    app: Arc<App>,
    acceptor: TlsAcceptor,
    router: axum::Router,
    builder: Builder<TokioExecutor>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Turns true when the drain starts.
    drain: tokio::sync::watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, tcp: tokio::net::TcpStream, peer: SocketAddr, place: &Place) {
        let app = self.app.clone();
        app.metrics.connection_opened();
        let _closed = scopeguard(app.clone());
        let lim = &app.limits.opts;
        let activity = place.activity.clone();
        let handshake = tokio::time::timeout(lim.tls_handshake_timeout, self.acceptor.accept(tcp));
        let tls = tokio::select! {
            r = handshake => match r {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            },
            _ = activity.kill.notified() => {
                tracing::debug!(%peer, "connection cap: closed during its TLS handshake for a newer connection");
                return;
            }
        };
        activity.handshake_done();
        let identity = Arc::new(match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
            Some(leaf) => tls::client_identity(leaf.as_ref(), app.client_auth.as_ref().is_some_and(|a| a.sans)),
            None => PeerIdentity::default(),
        });
        // The connection ends at its maximum age, or when the client
        // certificate expires if that is sooner: a rotated client CA or an
        // expired certificate takes effect on every connection.
        let max_age = identity
            .not_after
            .map(|t| Duration::from_secs(u64::try_from(t.saturating_sub(tls::unix_now())).unwrap_or(0)))
            .map_or(lim.max_connection_age, |left| left.min(lim.max_connection_age));
        let router = self.router.clone();
        let svc_activity = activity.clone();
        let svc_app = app.clone();
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let guard = svc_activity.begin();
            req.extensions_mut().insert(identity.clone());
            req.extensions_mut().insert(svc_activity.clone());
            let h1 = req.version() < Version::HTTP_2;
            let router = router.clone();
            let app = svc_app.clone();
            async move {
                let mut resp: Response<Body> = match router.oneshot(req.map(Body::new)).await {
                    Ok(r) => r,
                    Err(e) => match e {},
                };
                // While draining, HTTP/1.1 clients are told to reconnect (and
                // so reach a pod that is still in the endpoints).
                if h1 && app.draining.load(Ordering::Acquire) {
                    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                drop(guard);
                Ok::<_, Infallible>(resp)
            }
        });
        let conn = self.builder.serve_connection(TokioIo::new(tls), service);
        tokio::pin!(conn);
        let (header_read, idle) = (lim.header_read_timeout, lim.idle_timeout);
        let why = tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = activity.idle(header_read, idle) => "idle",
            _ = tokio::time::sleep(max_age) => "max age",
            _ = self.stop.wait_for(|s| *s) => "shutdown",
            // The drain: a pooled keep-alive connection is closed as soon as
            // it has nothing in flight, so the client's next request opens a
            // new connection (to a pod still in the endpoints) instead of
            // finding this one closed under it later.
            _ = async {
                let _ = self.drain.wait_for(|d| *d).await;
                activity.quiet().await;
            } => "drain",
            _ = activity.kill.notified() => {
                tracing::debug!(%peer, "connection cap: closed for a newer connection");
                return;
            }
        };
        tracing::debug!(%peer, why, "closing connection");
        // HTTP/1.1: close once the current exchange is done; HTTP/2: GOAWAY.
        conn.as_mut().graceful_shutdown();
        // Idle: nothing is in flight, so a peer halfway through headers (which
        // graceful shutdown does not interrupt) is dropped after a second. On
        // shutdown in-flight requests end by their deadline.
        let wait = if why == "idle" { Duration::from_secs(1) } else { lim.request_timeout + Duration::from_secs(1) };
        if tokio::time::timeout(wait, conn.as_mut()).await.is_err() {
            tracing::debug!(%peer, "connection did not close in time; dropped");
        }
    }
}

/// Counts the connection closed when dropped.
struct ConnGauge(Arc<App>);

impl Drop for ConnGauge {
    fn drop(&mut self) {
        self.0.metrics.connection_closed();
    }
}

fn scopeguard(app: Arc<App>) -> ConnGauge {
    ConnGauge(app)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
