//! One accepted connection: the TLS handshake (bounded in time, given up
//! when the connection table closes the connection for a newer one), the
//! caller's identity from its client certificate, and the HTTP connection
//! until it is idle, reaches its maximum age, the drain closes it, or the
//! server shuts down. Each request on it goes to the router
//! ([`super::routes`]).

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use axum::body::Body;
use hyper::{body::Incoming, header, http::HeaderValue, Request, Response, Version};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto::Builder,
};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::{
    conns::{Activity, Place},
    outgoing::{Hold, Outgoing},
    tls, App, PeerIdentity,
};

/// One accepted TCP connection.
pub(super) struct Connection {
    pub app: Arc<App>,
    pub acceptor: TlsAcceptor,
    pub router: axum::Router,
    pub builder: Builder<TokioExecutor>,
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// Turns true when the drain starts.
    pub drain: tokio::sync::watch::Receiver<bool>,
}

impl Connection {
    pub(super) async fn run(mut self, tcp: tokio::net::TcpStream, peer: SocketAddr, place: &Place) {
        let app = self.app.clone();
        app.metrics.connection_opened();
        let _closed = scopeguard(app.clone());
        let lim = &app.limits.opts;
        let activity = place.activity.clone();
        let Some(tls) = self.handshake(tcp, peer, &activity).await else { return };
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
        let service = self.service(identity, &activity);
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
            // An answer the client has not read within the write deadline:
            // closed at once, releasing what the answer holds.
            _ = activity.write_stalled(lim.write_timeout) => {
                app.metrics.rejected(super::metrics::RejectReason::WriteTimeout);
                tracing::debug!(%peer, "write deadline: the client did not read its answer; connection closed");
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
        tokio::select! {
            r = tokio::time::timeout(wait, conn.as_mut()) => if r.is_err() {
                tracing::debug!(%peer, "connection did not close in time; dropped");
            },
            // The write deadline holds while closing too.
            _ = activity.write_stalled(lim.write_timeout) => {
                app.metrics.rejected(super::metrics::RejectReason::WriteTimeout);
                tracing::debug!(%peer, "write deadline while closing: connection dropped");
            }
        }
    }

    /// The TLS handshake, within its timeout; given up when the connection
    /// table closes this connection for a newer one.
    async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        activity: &Arc<Activity>,
    ) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        let handshake = tokio::time::timeout(self.app.limits.opts.tls_handshake_timeout, self.acceptor.accept(tcp));
        tokio::select! {
            r = handshake => match r {
                Ok(Ok(s)) => Some(s),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    None
                }
            },
            _ = activity.kill.notified() => {
                tracing::debug!(%peer, "connection cap: closed during its TLS handshake for a newer connection");
                None
            }
        }
    }

    /// The per-request service: the caller's identity and the connection's
    /// activity go with each request to the router; while draining, HTTP/1.1
    /// clients are told to reconnect (and so reach a pod still in the endpoints).
    fn service(
        &self,
        identity: Arc<PeerIdentity>,
        activity: &Arc<Activity>,
    ) -> impl hyper::service::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl std::future::Future<Output = Result<Response<Body>, Infallible>> + Send,
    > + Clone {
        let (router, activity, app) = (self.router.clone(), activity.clone(), self.app.clone());
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let guard = activity.begin();
            req.extensions_mut().insert(identity.clone());
            req.extensions_mut().insert(activity.clone());
            let h1 = req.version() < Version::HTTP_2;
            let router = router.clone();
            let app = app.clone();
            let writing_on = activity.clone();
            async move {
                let mut resp: Response<Body> = match router.oneshot(req.map(Body::new)).await {
                    Ok(r) => r,
                    Err(e) => match e {},
                };
                if h1 && app.draining.load(Ordering::Acquire) {
                    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                // In flight until the answer is written: the request's slot and
                // charges go with the body (the write deadline bounds how long).
                let hold = resp.extensions_mut().remove::<Hold>();
                let writing = writing_on.writing();
                Ok::<_, Infallible>(resp.map(|b| Body::new(Outgoing::new(b, guard, writing, hold))))
            }
        })
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
