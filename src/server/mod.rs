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

mod accept;
pub mod backup_cache;
mod cache_reflector;
pub mod certs;
mod connection;
pub mod conns;
pub mod fields;
pub mod hcp_cache;
pub mod limits;
pub mod log_budget;
pub mod metrics;
pub mod outgoing;
mod plain;
pub mod reads;
pub mod routes;
mod signals;
pub mod source_share;
mod state;
pub mod tls;

pub use signals::shutdown_signal;
pub use state::{App, ClientAuth, ClientAuthScope, LookupSource, PeerIdentity};

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{admission, settings::Settings};

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

/// Seconds between certificate file checks (default; `--reload-interval-seconds`).
pub const RELOAD_INTERVAL_SECONDS: u64 = 2;
/// Seconds `/readyz` fails before accepting stops, after SIGTERM (default; `--drain-seconds`).
pub const DRAIN_SECONDS: f64 = 10.0;
/// Seconds in-flight requests get after accepting stops (default; `--shutdown-grace-seconds`).
pub const SHUTDOWN_GRACE_SECONDS: u64 = 20;

impl ServeOptions {
    /// Serving `tls_cert`/`tls_key` on `listen` with the default settings,
    /// limits and timeouts (the CLI's defaults: they are written once, here
    /// and in [`limits::defaults`]), no client CA, no lookups.
    pub fn new(listen: SocketAddr, tls_cert: PathBuf, tls_key: PathBuf) -> Self {
        Self {
            listen,
            tls_cert,
            tls_key,
            client_ca: None,
            settings: Settings::default(),
            reload_interval: Duration::from_secs(RELOAD_INTERVAL_SECONDS),
            limits: limits::LimitOptions::default(),
            drain_delay: Duration::from_secs_f64(DRAIN_SECONDS),
            shutdown_grace: Duration::from_secs(SHUTDOWN_GRACE_SECONDS),
            expect_sans: Vec::new(),
            allowed_client_names: Vec::new(),
            client_auth_scope: ClientAuthScope::default(),
            client_identity_sans: false,
            lookups: LookupSource::None,
            metrics_listen: None,
        }
    }
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
        let app = Arc::new(App::new(&opts, metrics));
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
