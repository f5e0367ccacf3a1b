//! The HTTPS webhook shell: tokio + hyper + rustls, axum routes. It reads
//! requests, calls the decision core and writes responses; it decides nothing.
//!
//! * TLS 1.2/1.3 only; the serving pair is reloaded without a restart
//!   ([`tls::reload_loop`]); optional client-certificate verification.
//! * Limits: 3 MiB bodies (413), TLS-handshake and header-read timeouts, a
//!   concurrency limit; a handler panic is caught per connection by hyper/tokio
//!   and never reachable from input.
//! * Graceful shutdown: stop accepting, let in-flight requests finish within
//!   a deadline.

pub mod hcp_cache;
pub mod metrics;
pub mod routes;
pub mod tls;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{atomic::AtomicBool, Arc},
    time::Duration,
};

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use tokio::{net::TcpListener, sync::Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::{admission, settings::Settings};

/// Server errors (start-up only; per-request problems become HTTP answers).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("TLS: {0}")]
    Tls(String),
    #[error("listening on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
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
    /// Requests decided at once; more wait.
    pub max_concurrent: usize,
    /// How long in-flight requests get after SIGTERM.
    pub shutdown_grace: Duration,
    /// Where the mutation finds HostedControlPlanes.
    pub lookups: LookupSource,
}

/// Where the mutating path finds HostedControlPlanes.
#[derive(Clone, Default)]
pub enum LookupSource {
    /// Nowhere: the mutation denies etcd StatefulSets (no restore decision without a HostedControlPlane).
    #[default]
    None,
    /// Fixed objects (`--context` files).
    Static(crate::lookup::ContextObjects),
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

/// Shared state of the handlers.
pub struct App {
    pub settings: Settings,
    /// Where the mutation finds HostedControlPlanes (context files or a reflector).
    pub lookup: Option<Arc<dyn crate::lookup::Lookup + Send + Sync>>,
    /// The HostedControlPlane reflector, when watching a cluster (readiness waits for its sync).
    pub hcp_cache: Option<Arc<hcp_cache::HcpCache>>,
    pub metrics: Arc<metrics::Metrics>,
    pub ready: AtomicBool,
    pub limit: Arc<Semaphore>,
}

/// A bound, not yet serving, server.
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Arc<App>,
    opts: ServeOptions,
    resolver: Arc<tls::ReloadingResolver>,
    last_source: Vec<u8>,
}

impl Server {
    /// Loads the certificate, compiles the rules and binds the port.
    pub async fn bind(opts: ServeOptions) -> Result<Self, ServerError> {
        let loaded = tls::load_pair(&opts.tls_cert, &opts.tls_key)?;
        let resolver = tls::ReloadingResolver::new(loaded.key.clone());
        let config = tls::server_config(resolver.clone(), opts.client_ca.as_deref())?;
        let metrics = Arc::new(metrics::Metrics::new());
        metrics.set_cert_expiry(loaded.not_after);
        let listener =
            TcpListener::bind(opts.listen).await.map_err(|source| ServerError::Bind { addr: opts.listen, source })?;
        let (lookup, hcp_cache): (Option<Arc<dyn crate::lookup::Lookup + Send + Sync>>, _) = match &opts.lookups {
            LookupSource::None => (None, None),
            LookupSource::Static(objects) => (Some(Arc::new(objects.clone())), None),
            LookupSource::Cluster(client) => {
                let cache = hcp_cache::HcpCache::start(client.clone());
                (Some(cache.clone() as Arc<dyn crate::lookup::Lookup + Send + Sync>), Some(cache))
            }
        };
        let app = Arc::new(App {
            settings: opts.settings.clone(),
            lookup,
            hcp_cache,
            metrics,
            ready: AtomicBool::new(false),
            limit: Arc::new(Semaphore::new(opts.max_concurrent.max(1))),
        });
        // Compile every schema before reporting ready.
        admission::warm_up();
        app.ready.store(true, std::sync::atomic::Ordering::Release);
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            app,
            opts,
            resolver,
            last_source: loaded.source,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Server { listener, acceptor, app, opts, resolver, last_source } = self;
        let reloader = tokio::spawn(tls::reload_loop(
            opts.tls_cert.clone(),
            opts.tls_key.clone(),
            resolver,
            last_source,
            opts.reload_interval,
            app.metrics.clone(),
        ));
        let router = routes::router(app.clone());
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let (tcp, peer) = tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let service = TowerToHyperService::new(router.clone());
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let mut builder = Builder::new(TokioExecutor::new());
                builder.http1().timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(10)).keep_alive(true);
                builder.http2().timer(TokioTimer::new()).max_concurrent_streams(250);
                let conn = builder.serve_connection(TokioIo::new(tls), service).into_owned();
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
        drop(listener);
        app.ready.store(false, std::sync::atomic::Ordering::Release);
        tracing::info!("shutting down: draining in-flight requests");
        if tokio::time::timeout(opts.shutdown_grace, graceful.shutdown()).await.is_err() {
            tracing::warn!(
                grace_s = opts.shutdown_grace.as_secs(),
                "in-flight requests did not finish before the deadline"
            );
        }
        reloader.abort();
    }
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
