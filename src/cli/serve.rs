//! `serve`: the HTTPS webhook. Without TLS files it makes a development CA
//! and serving certificate so it works out of the box; they are written to
//! `certs/dev/` only once the port is bound (a second `serve` on a busy port
//! leaves the first one's files alone). That development mode watches no
//! cluster unless asked (`--watch-hostedcontrolplanes always`); whenever the
//! server watches one it logs which (server URL and kubeconfig context).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use hcp_etcd_admission::{
    server::{
        self, certs,
        limits::{defaults as D, LimitOptions},
        shutdown_signal, ClientAuthScope, LookupSource, ServeOptions, Server,
    },
    settings::Settings,
};

use super::DecisionArgs;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission serve\n  curl --cacert certs/dev/ca.crt -H 'Content-Type: application/json' \\\n       --data @tests/reviews/hcpetcdbackup-create-s3.json https://127.0.0.1:8443/validate/hcpetcdbackups"
)]
pub struct ServeArgs {
    /// Address to listen on. In a cluster the manifests pass `[::]:8443`
    /// (dual-stack: IPv6 and IPv4-mapped; falls back to 0.0.0.0 where the pod
    /// has no IPv6).
    #[arg(long, default_value = "127.0.0.1:8443", env = "HCP_ADMISSION_LISTEN")]
    pub listen: SocketAddr,
    /// Also serve /metrics, /healthz and /readyz over plain HTTP on this
    /// address (and nothing else there), so monitoring and probes need no
    /// access to the admission port. The manifests pass `[::]:8080`.
    #[arg(long, value_name = "ADDR", env = "HCP_ADMISSION_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serving certificate (PEM). Reloaded without restart when it changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Admission paths require a client certificate signed by this CA (PEM;
    /// reloaded when it changes). /healthz, /readyz and /metrics stay open.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: identities (the certificate's CN; its DNS/URI SANs
    /// too with --client-identity-from-sans) allowed on admission paths; repeat or separate with commas. Required with
    /// --client-ca unless --allow-any-client-of-ca is given.
    #[arg(long = "allowed-client-names", value_name = "NAME", value_delimiter = ',', requires = "client_ca")]
    pub allowed_client_names: Vec<String>,
    /// With --client-ca: which admission paths need a client certificate.
    /// `mutating`: only the mutating paths (/mutate/etcd-statefulsets, whose
    /// answer carries the restore URL, and /mutate/etcd-backup-jobs); the
    /// validating paths then answer any caller.
    #[arg(long, value_enum, default_value_t = ClientCertPaths::All, requires = "client_ca")]
    pub require_client_cert: ClientCertPaths,
    /// With --client-ca: match --allowed-client-names against the
    /// certificate's DNS and URI SANs too, not only its CN (Kubernetes
    /// identifies a client certificate by its CN alone).
    #[arg(long, requires = "client_ca")]
    pub client_identity_from_sans: bool,
    /// With --client-ca and no --allowed-client-names: accept any certificate
    /// the CA signed. If that CA is the cluster's client CA, every node and
    /// user certificate passes; say so explicitly.
    #[arg(long, requires = "client_ca", conflicts_with = "allowed_client_names")]
    pub allow_any_client_of_ca: bool,
    /// Refuse a serving certificate that does not name this DNS name or IP
    /// (repeat or separate with commas), at start and on reload.
    #[arg(long = "expect-san", value_name = "NAME", value_delimiter = ',')]
    pub expect_san: Vec<String>,
    /// Where the development certificate goes when no TLS files are given.
    #[arg(long, value_name = "DIR", default_value = "certs/dev")]
    pub dev_cert_dir: PathBuf,
    /// Seconds between certificate file checks.
    #[arg(long, default_value_t = server::RELOAD_INTERVAL_SECONDS)]
    pub reload_interval_seconds: u64,
    /// Decision units at once (one per started 6 MiB of heap a review is
    /// charged from its shape before parsing); more wait up to
    /// --queue-wait-ms, then get 429; one costing more than all is refused (413).
    #[arg(long, default_value_t = D::MAX_DECISION_UNITS)]
    pub max_concurrent: u32,
    /// How long a review waits for a decision slot before a 429.
    #[arg(long, default_value_t = D::QUEUE_WAIT_MS)]
    pub queue_wait_ms: u64,
    /// Requests in flight at once (all connections). When all are taken the
    /// request that has been reading its body the longest gets 408 and its
    /// slot; when every one is past its body, new ones get 503.
    #[arg(long, default_value_t = D::MAX_REQUESTS)]
    pub max_requests: usize,
    /// Open connections at once. A new connection is never refused: at the
    /// cap the source holding the most connections loses its costliest one
    /// (still in its handshake, then without a request, longest idle,
    /// longest reading a body, most requests served, oldest).
    #[arg(long, default_value_t = D::MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Open connections one source address may hold in any state; its next
    /// one replaces its own costliest.
    #[arg(long, default_value_t = D::MAX_CONNECTIONS_PER_SOURCE)]
    pub max_connections_per_source: usize,
    /// Seconds after which a connection is closed (gracefully), so a rotated
    /// client CA and an expired client certificate reach every connection.
    #[arg(long, default_value_t = D::MAX_CONNECTION_AGE_SECONDS)]
    pub max_connection_age_seconds: u64,
    /// Live apiserver reads at once (cache misses, credentials Secrets),
    /// outside the decision slots; one source may hold half.
    #[arg(long, default_value_t = D::MAX_LIVE_READS)]
    pub max_live_reads: usize,
    /// A new connection's time for its TLS handshake.
    #[arg(long, default_value_t = D::TLS_HANDSHAKE_TIMEOUT_MS)]
    pub tls_handshake_timeout_ms: u64,
    /// Largest request line + headers (HTTP/1.1 read buffer; HTTP/2 header
    /// list); 431 above. At least 8192.
    #[arg(long, default_value_t = D::MAX_HEADER_BYTES)]
    pub max_header_bytes: usize,
    /// Largest request body in bytes (413 above). Default: 2 × 3 MiB objects + 1 MiB envelope.
    #[arg(long, default_value_t = hcp_etcd_admission::server::limits::MAX_BODY)]
    pub max_body_bytes: usize,
    /// Body bytes buffered for all requests together, beyond each request's first 64 KiB (503 when used up).
    #[arg(long, default_value_t = D::BODY_BUDGET_MIB)]
    pub body_budget_mib: usize,
    /// Bytes of decided answers not yet read by their clients, all connections
    /// together (one source at most half); an answer finding no room gets 503.
    #[arg(long, default_value_t = D::ANSWER_BUDGET_MIB)]
    pub answer_budget_mib: usize,
    /// An answer the client has not read within this closes its connection.
    #[arg(long, default_value_t = D::WRITE_TIMEOUT_MS)]
    pub write_timeout_ms: u64,
    /// Time from request headers to the last body byte (408 after).
    #[arg(long, default_value_t = D::BODY_TIMEOUT_MS)]
    pub body_timeout_ms: u64,
    /// Time from request headers to the answer (503 after); keep it below the
    /// webhooks' timeoutSeconds (5 s).
    #[arg(long, default_value_t = D::REQUEST_TIMEOUT_MS)]
    pub request_timeout_ms: u64,
    /// After the TLS handshake: the time for the first request's headers.
    #[arg(long, default_value_t = D::HEADER_READ_TIMEOUT_MS)]
    pub header_read_timeout_ms: u64,
    /// A connection with no request in flight for this long is closed (HTTP/1.1 and HTTP/2).
    #[arg(long, default_value_t = D::IDLE_TIMEOUT_MS)]
    pub idle_timeout_ms: u64,
    /// After SIGTERM: seconds /readyz answers 503 while the server still
    /// accepts and serves, so endpoints drop the pod before it stops accepting
    /// (default 10; 0 in the development mode, where no endpoints route to it).
    #[arg(long)]
    pub drain_seconds: Option<f64>,
    /// Then: seconds in-flight requests get after accepting stops.
    #[arg(long, default_value_t = server::SHUTDOWN_GRACE_SECONDS)]
    pub shutdown_grace_seconds: u64,
    /// Watch HostedControlPlanes (and, with the backup preflight,
    /// HCPEtcdBackups; the etcd StatefulSet is read live) in the cluster of the kubeconfig
    /// or the in-cluster config. `auto`: only with --tls-cert/--tls-key, no
    /// `--context`, and a cluster configuration found; the development mode
    /// (no TLS files) never watches unless this is `always`.
    #[arg(long, value_enum, default_value_t = Watch::Auto)]
    pub watch_hostedcontrolplanes: Watch,
    /// The HyperShift Operator namespace (overrides the `operatorNamespace`
    /// setting; the manifests set it from their one operatorNamespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub operator_namespace: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub decision: DecisionArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    Auto,
    Always,
    Never,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCertPaths {
    All,
    Mutating,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Logs go through a background writer thread: a request handler never
/// blocks on stderr. The guard flushes what is queued when `serve` returns.
fn init_logging(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    // Colour only for a terminal: never escape codes in a pipe or a file.
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    guard
}

pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let _log_guard = init_logging(args.log_format);
    if args.client_ca.is_some() && args.allowed_client_names.is_empty() && !args.allow_any_client_of_ca {
        anyhow::bail!(
            "--client-ca needs --allowed-client-names (the CN of the apiserver's client certificate): \
             without it any certificate the CA signed would pass, and a cluster client CA signs every node's and \
             user's. Pass --allow-any-client-of-ca to accept that deliberately."
        );
    }
    let mut settings = args.decision.settings()?;
    if let Some(ns) = &args.operator_namespace {
        settings.operator_namespace = ns.clone();
        settings.validate().map_err(|p| anyhow::anyhow!("--operator-namespace: {}", p.join("; ")))?;
    }
    tracing::info!(
        version = hcp_etcd_admission::build_info::VERSION,
        commit = hcp_etcd_admission::build_info::COMMIT,
        "hcp-etcd-admission starting"
    );
    let dev = DevCerts::new(args)?;
    let opts = options(args, settings, dev.is_some(), dev.as_ref().map(|d| &d.staged))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let context_given = !args.decision.context.is_empty();
    let context = args.decision.context()?;
    let runtime = runtime()?;
    runtime.block_on(async move {
        let mut opts = opts;
        opts.lookups = lookups(args.watch_hostedcontrolplanes, dev.is_some(), context_given, context).await?;
        let server = Server::bind(opts).await?;
        if let Some(d) = &dev {
            d.publish(server.local_addr().unwrap_or(args.listen))?;
        }
        serve(server).await
    })
}

/// The limits the flags give.
fn limits(args: &ServeArgs) -> LimitOptions {
    let ms = Duration::from_millis;
    LimitOptions {
        max_body: args.max_body_bytes,
        body_timeout: ms(args.body_timeout_ms),
        request_timeout: ms(args.request_timeout_ms),
        max_requests: args.max_requests,
        body_budget: args.body_budget_mib.saturating_mul(1024 * 1024),
        max_decision_units: args.max_concurrent,
        queue_wait: ms(args.queue_wait_ms),
        max_connections: args.max_connections,
        max_connections_per_source: args.max_connections_per_source,
        max_connection_age: Duration::from_secs(args.max_connection_age_seconds.max(1)),
        max_live_reads: args.max_live_reads,
        tls_handshake_timeout: ms(args.tls_handshake_timeout_ms),
        max_header_bytes: args.max_header_bytes,
        header_read_timeout: ms(args.header_read_timeout_ms),
        idle_timeout: ms(args.idle_timeout_ms),
        answer_budget: args.answer_budget_mib.saturating_mul(1024 * 1024),
        write_timeout: ms(args.write_timeout_ms.max(1)),
        ..LimitOptions::default()
    }
}

/// The server's options from the flags (`dev`: the development mode, whose
/// certificate is `staged`).
fn options(
    args: &ServeArgs,
    settings: Settings,
    dev: bool,
    staged: Option<&certs::CertPaths>,
) -> anyhow::Result<ServeOptions> {
    let (cert, key) = match (&args.tls_cert, &args.tls_key, staged) {
        (Some(c), Some(k), _) => (c.clone(), k.clone()),
        (_, _, Some(d)) => (d.cert.clone(), d.key.clone()),
        _ => anyhow::bail!("internal error: no TLS files and no development certificate"),
    };
    let drain = args.drain_seconds.unwrap_or(if dev { 0.0 } else { server::DRAIN_SECONDS });
    Ok(ServeOptions {
        client_ca: args.client_ca.clone(),
        settings,
        reload_interval: Duration::from_secs(args.reload_interval_seconds.max(1)),
        limits: limits(args),
        drain_delay: Duration::try_from_secs_f64(drain).context("--drain-seconds")?,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        expect_sans: args.expect_san.clone(),
        allowed_client_names: args.allowed_client_names.clone(),
        client_auth_scope: match args.require_client_cert {
            ClientCertPaths::All => ClientAuthScope::All,
            ClientCertPaths::Mutating => ClientAuthScope::Mutating,
        },
        client_identity_sans: args.client_identity_from_sans,
        metrics_listen: args.metrics_listen,
        ..ServeOptions::new(args.listen, cert, key)
    })
}

/// Where the decisions read cluster objects from: the cluster (watched), the
/// `--context` files, or nothing.
async fn lookups(
    watch: Watch,
    dev_mode: bool,
    context_given: bool,
    context: hcp_etcd_admission::lookup::ContextObjects,
) -> anyhow::Result<LookupSource> {
    let cluster_configured = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("HOME").is_some_and(|h| std::path::Path::new(&h).join(".kube/config").exists());
    let auto = watch == Watch::Auto && !dev_mode && !context_given && cluster_configured;
    if watch == Watch::Always || auto {
        let (client, cluster, kube_context) = connect().await?;
        tracing::info!(
            cluster = %cluster,
            context = %kube_context,
            "watching HostedControlPlanes (and the backup preflight's objects) in this cluster, cluster-wide, with these credentials"
        );
        eprintln!("watching cluster {cluster} (context {kube_context})");
        return Ok(LookupSource::Cluster(client));
    }
    if context_given {
        return Ok(LookupSource::Static(context));
    }
    if dev_mode && watch == Watch::Auto && cluster_configured {
        tracing::info!("development mode: not watching the kubeconfig's cluster (pass --watch-hostedcontrolplanes always to watch it)");
    }
    tracing::warn!("no cluster and no --context: /mutate/etcd-statefulsets denies etcd StatefulSets (no HostedControlPlane to decide the restore from)");
    Ok(LookupSource::None)
}

/// Serves until a signal: the first SIGTERM/SIGINT drains; a second one
/// stops at once (an operator at a terminal does not have to wait).
async fn serve(server: Server) -> anyhow::Result<i32> {
    let addr = server.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tracing::info!(listen = %addr, "serving admission webhooks over HTTPS");
    eprintln!("listening on https://{addr}");
    if let Some(m) = server.metrics_addr() {
        tracing::info!(listen = %m, "serving /metrics, /healthz and /readyz over plain HTTP");
        eprintln!("metrics and probes on http://{m}");
    }
    let twice = async {
        shutdown_signal().await;
        shutdown_signal().await;
    };
    tokio::select! {
        _ = server.serve(shutdown_signal()) => {}
        _ = twice => tracing::warn!("second signal: stopping without finishing the drain"),
    }
    tracing::info!("stopped");
    Ok(0)
}

/// The cluster client of the kubeconfig (or the in-cluster config), with the
/// server URL (no query) and the kubeconfig context it came from.
async fn connect() -> anyhow::Result<(kube::Client, String, String)> {
    let config =
        kube::Config::infer().await.context("reading the cluster configuration to watch HostedControlPlanes")?;
    let uri = &config.cluster_url;
    let cluster = format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("https"),
        uri.authority().map(|a| a.as_str()).unwrap_or_default(),
        uri.path().trim_end_matches('/')
    );
    let kube_context = match kube::config::Kubeconfig::read() {
        Ok(k) => k.current_context.unwrap_or_else(|| "(none)".to_string()),
        Err(_) => "in-cluster service account".to_string(),
    };
    let client = kube::Client::try_from(config).context("connecting to the cluster to watch HostedControlPlanes")?;
    Ok((client, cluster, kube_context))
}

/// The development certificate: made in a private directory the server
/// loads from, and copied to `--dev-cert-dir` only once the port is bound.
struct DevCerts {
    generated: certs::GeneratedCerts,
    staged: certs::CertPaths,
    _stage: TempDir,
    target: PathBuf,
}

/// A directory removed when dropped (the staged development key lives there).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl DevCerts {
    /// `None` when TLS files are given.
    fn new(args: &ServeArgs) -> anyhow::Result<Option<Self>> {
        if args.tls_cert.is_some() {
            return Ok(None);
        }
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
        let generated = certs::generate("hcp-etcd-admission dev CA", &names, 30)?;
        let dir = std::env::temp_dir().join(format!("hcp-etcd-admission-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let stage = TempDir(dir);
        let staged = certs::write(&stage.0, &generated)?;
        Ok(Some(Self { generated, staged, _stage: stage, target: args.dev_cert_dir.clone() }))
    }

    /// Writes the certificate set to `--dev-cert-dir` and says how to use it.
    fn publish(&self, listen: SocketAddr) -> anyhow::Result<()> {
        let paths = certs::write(&self.target, &self.generated)?;
        eprintln!(
            "no --tls-cert/--tls-key given: made a development certificate for localhost/127.0.0.1\n  CA: {}\n  try: curl --cacert {} https://{}/healthz",
            paths.ca.display(),
            paths.ca.display(),
            listen
        );
        Ok(())
    }
}

/// Threads of the blocking pool: the decision units (16 by default) run
/// there, plus TLS reloads and DNS lookups.
const BLOCKING_THREADS: usize = 16;

/// The server's runtime. The blocking pool runs every decision (and the
/// rare blocking call): capped, so the allocator keeps a few thread heaps,
/// not one for each of tokio's default 512 threads (an unbounded pool held
/// 280-360 MiB of freed memory under a 32-connection load and halved the
/// throughput, BENCHMARKS.md).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
        .context("starting tokio")
}
