//! The real server, in process, on an ephemeral loopback port.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use hcp_etcd_admission::{
    server::{LookupSource, ServeOptions, Server},
    settings::Settings,
};
use tokio::sync::oneshot;

pub struct Running {
    pub addr: SocketAddr,
    /// The plain-HTTP metrics and probe port, when `metrics_listen` was set.
    pub metrics_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting and waits (bounded) for the drain.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

/// Default options serving `dir/tls.crt` and `dir/tls.key`.
pub fn options(dir: &Path, client_ca: Option<&Path>, reload: Duration, lookups: LookupSource) -> ServeOptions {
    let listen = "127.0.0.1:0".parse().expect("addr");
    ServeOptions {
        client_ca: client_ca.map(Path::to_path_buf),
        reload_interval: reload,
        lookups,
        // A test server stops at once: no drain (no endpoints route to it)
        // and a short grace; the production defaults are 10 s and 20 s.
        drain_delay: Duration::ZERO,
        shutdown_grace: Duration::from_secs(5),
        ..ServeOptions::new(listen, dir.join("tls.crt"), dir.join("tls.key"))
    }
}

/// Serves `dir/tls.crt`/`dir/tls.key` with these limits and no lookups.
pub async fn start_limited(dir: &Path, limits: hcp_etcd_admission::server::limits::LimitOptions) -> Running {
    let mut opts = options(dir, None, Duration::from_secs(60), LookupSource::None);
    opts.limits = limits;
    start_with(opts).await
}

/// The small HCPEtcdBackup CREATE review every server test sends.
pub fn small_review() -> serde_json::Value {
    let text =
        std::fs::read_to_string(super::root().join("tests/reviews/hcpetcdbackup-create-s3.json")).expect("review");
    serde_json::from_str(&text).expect("json")
}

/// `hcp-etcd-admission serve` as a process with a dev certificate in `dir`,
/// on an ephemeral loopback port (read from its "listening on" line); its
/// stderr is drained by a thread.
pub fn spawn_serve(dir: &Path, extra: &[&str]) -> (Child, SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--dev-cert-dir"]).arg(dir).args(extra);
    spawn_listening(cmd)
}

/// Spawns `cmd` (a `serve` on port 0, however wrapped), waits for its
/// "listening on" line and drains its stderr from a thread.
#[allow(dead_code)]
pub fn spawn_listening(mut cmd: Command) -> (Child, SocketAddr) {
    let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("serve printed its address").expect("line");
        if let Some(a) = line.strip_prefix("listening on https://") {
            break a.parse().expect("addr");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// Serves with `dir/tls.crt` and `dir/tls.key`.
pub async fn start(dir: &Path, client_ca: Option<&Path>, reload: Duration, lookups: LookupSource) -> Running {
    start_with(options(dir, client_ca, reload, lookups)).await
}

/// Serves with the given settings (otherwise the defaults of [`options`]).
pub async fn start_settings(dir: &Path, settings: Settings, lookups: LookupSource) -> Running {
    let mut opts = options(dir, None, Duration::from_secs(60), lookups);
    opts.settings = settings;
    start_with(opts).await
}

/// Serves with `opts` (its `listen` is replaced by an ephemeral loopback port
/// only if it is port 0 already).
pub async fn start_with(opts: ServeOptions) -> Running {
    super::https::install_provider();
    let server = Server::bind(opts).await.expect("bind");
    let addr = server.local_addr().expect("addr");
    let metrics_addr = server.metrics_addr();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(async {
        let _ = rx.await;
    }));
    Running { addr, metrics_addr, stop: Some(tx), task }
}
