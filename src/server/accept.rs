//! The accept and drain loop: every accepted TCP connection gets a place in
//! the connection table ([`super::conns`]; at a cap another connection is
//! closed for it, a newcomer is never refused) and a task of its own
//! ([`super::connection`]). On the shutdown signal `/readyz` turns 503 at
//! once and the loop keeps accepting for the drain delay; then it stops
//! accepting and lets in-flight requests finish within the shutdown grace.

use std::{sync::atomic::Ordering, time::Duration};

use hyper_util::{
    rt::{TokioExecutor, TokioTimer},
    server::conn::auto::Builder,
};
use tokio::sync::Semaphore;

use super::{
    connection::Connection,
    conns::{ConnTable, Evicted},
    limits::LimitOptions,
    metrics, plain, routes, tls, Server,
};

impl Server {
    /// Serves until `shutdown` resolves, keeps serving (not ready) for the
    /// drain delay, then stops accepting and drains in-flight requests.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Server { listener, metrics_listener, acceptor, app, opts, resolver, client_verifier, last_source } = self;
        let plain = match metrics_listener.map(|l| plain::spawn(l, app.clone())).transpose() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "metrics port: could not start its thread; serving without it");
                None
            }
        };
        let targets = tls::ReloadTargets {
            cert: opts.tls_cert.clone(),
            key: opts.tls_key.clone(),
            expect_sans: opts.expect_sans.clone(),
            resolver,
            client_ca: opts.client_ca.clone().zip(client_verifier),
        };
        let reloader = tokio::spawn(tls::reload_loop(targets, last_source, opts.reload_interval, app.metrics.clone()));
        let router = routes::router(app.clone());
        let lim = &app.limits.opts;
        let max_conns = lim.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let conns = ConnTable::new(max_conns, lim.max_connections_per_source);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
        let builder = http_builder(lim);
        let drain_until = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(shutdown, drain_until);
        let mut draining = false;
        loop {
            let (tcp, peer) = tokio::select! {
                _ = &mut shutdown, if !draining => {
                    draining = true;
                    begin_drain(&app, &drain_tx, opts.drain_delay);
                    drain_until.as_mut().reset(tokio::time::Instant::now() + opts.drain_delay);
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
            let place = admit(&conns, &app, peer.ip());
            let _ = tcp.set_nodelay(true);
            // A bounded send buffer: an answer its client does not read stays
            // in the answer budget (and meets the write deadline) instead of
            // in up to 4 MiB of autotuned kernel buffer per connection.
            let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(SEND_BUFFER);
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

/// A place in the connection table for a connection from `source`: never
/// refused; at a cap another connection is closed for it (counted).
fn admit(conns: &std::sync::Arc<ConnTable>, app: &super::App, source: std::net::IpAddr) -> super::conns::Place {
    let (place, evicted) = conns.admit(source);
    match evicted {
        Some(Evicted::Fullest) => app.metrics.rejected(metrics::RejectReason::ConnectionEvicted),
        Some(Evicted::OwnSource) => app.metrics.rejected(metrics::RejectReason::ConnectionSourceShare),
        None => {}
    }
    place
}

/// The drain starts: `/readyz` answers 503, connections are told.
fn begin_drain(app: &super::App, drain: &tokio::sync::watch::Sender<bool>, delay: Duration) {
    app.draining.store(true, Ordering::Release);
    let _ = drain.send(true);
    app.metrics.set_draining(true);
    tracing::info!(
        drain_s = delay.as_secs_f64(),
        "shutdown signal: /readyz now 503; still serving until endpoints drop this pod"
    );
}

/// `SO_SNDBUF` of an accepted connection (the kernel doubles it): a few
/// round trips of a large answer at loopback and datacenter latencies.
const SEND_BUFFER: usize = 64 * 1024;

/// The HTTP/1.1 and HTTP/2 connection settings: bounded headers, small fixed
/// HTTP/2 windows, keep-alive pings.
fn http_builder(lim: &LimitOptions) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    // HTTP/1.1 (what kube-apiserver uses for webhooks): hyper's header-read
    // timer also runs while a keep-alive connection waits for its next
    // request, so it is the idle timeout there; a new connection's first
    // request is bounded by the shorter header-read timeout (see the connection).
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
    // lets it be read pins at most one window per connection. Send buffers
    // of one answer frame a stream: an answer that a client with a closed
    // window never takes stays in the answer budget, not in hyper.
    let window = lim.h2_window.max(65_535);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(lim.h2_max_streams)
        .max_header_list_size(u32::try_from(header_bytes).unwrap_or(u32::MAX))
        .initial_stream_window_size(window)
        .initial_connection_window_size(window)
        .adaptive_window(false)
        .max_send_buf_size(super::outgoing::CHUNK)
        .max_pending_accept_reset_streams(Some(16))
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10));
    builder
}
