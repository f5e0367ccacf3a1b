//! The plain-HTTP port for `/metrics`, `/healthz` and `/readyz` only
//! (`--metrics-listen`), with a connection budget of its own, so that a
//! NetworkPolicy can give monitoring and probes that port alone.

use std::{sync::Arc, time::Duration};

use axum::body::Body;
use hyper::{body::Incoming, Request};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

use super::{conns::ConnTable, routes, App};

/// Connections at once on the plain-HTTP metrics and probe port.
const PLAIN_MAX_CONNECTIONS: usize = 32;
/// Of which one source address may hold (kubelet probes come from the node's
/// address, which hostNetwork pods share).
const PLAIN_MAX_PER_SOURCE: usize = 16;

/// Backlog of the plain port's listen queue: a burst of connections waits
/// there for `accept` instead of having its SYNs dropped (a dropped SYN is
/// retried after 1 s: a kubelet probe with a 1 s timeout fails).
const PLAIN_BACKLOG: i32 = 4096;

/// The plain port on an OS thread and runtime of its own: a flood of
/// connections there, or load on the webhook's runtime, never delays the
/// other. (On the shared runtime, 600-1000 silent connections a second
/// overflowed the listen queue: 1 s probe failures, m4 of
/// server-security-turn4.) Stopped by dropping the returned handle's sender
/// or calling `abort`.
pub(super) struct PlainThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PlainThread {
    pub(super) fn abort(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub(super) fn spawn(listener: TcpListener, app: Arc<App>) -> std::io::Result<PlainThread> {
    let std_listener = listener.into_std()?;
    // Listening again on a listening socket only sets its backlog.
    socket2::SockRef::from(&std_listener).listen(PLAIN_BACKLOG)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("metrics-port".into()).spawn(move || {
        rt.block_on(async move {
            let listener = match TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "metrics port: the listener could not be registered");
                    return;
                }
            };
            tokio::select! {
                _ = serve_plain(listener, app) => {}
                _ = stopped => {}
            }
        });
    })?;
    Ok(PlainThread { stop: Some(stop) })
}

/// Serves `/metrics`, `/healthz` and `/readyz` over plain HTTP/1.1 on its own
/// port (nothing else: admission paths answer 404 there). Small and bounded,
/// with a connection budget of its own: 32 connections, 16 per source (at a
/// cap a silent or idle connection is closed for the newcomer before one with
/// a probe in flight, so silent sockets cannot fail a kubelet probe), 8 KiB of
/// headers, 5 s to send them, a minute per connection at most.
pub(super) async fn serve_plain(listener: TcpListener, app: Arc<App>) {
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
