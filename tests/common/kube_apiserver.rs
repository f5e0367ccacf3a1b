//! The real kube-apiserver (1.34 to 1.37, built by `scripts/go-tools.sh`) on
//! loopback, backed by a real etcd 3.6: secure port only, a serving
//! certificate for `IP:127.0.0.1`, an admin client certificate
//! (`O=system:masters`), RBAC, service-account signing keys. No
//! controller-manager runs (no ServiceAccount tokens minted by controllers, no
//! garbage collection, a deleted namespace stays Terminating), so every test
//! works in a fresh namespace of its own ([`KubeApiserver::namespace`]).
//!
//! One apiserver per Kubernetes version per test binary ([`shared`]); a test
//! that needs its own flags starts one with [`KubeApiserver::start`] and stops
//! it by dropping it. Every process is started under a small `sh` watchdog
//! that holds the process id and kills it by that id when its stdin closes —
//! on drop, and also when the test binary exits (the shared instances live in
//! statics, which are never dropped) — then removes the instance's directory.
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{atomic::AtomicUsize, atomic::Ordering, Arc, OnceLock},
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full};
use hyper::{body::Bytes, Request};
use hyper_util::rt::TokioIo;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, RootCertStore,
};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{env::Need, tools};

/// A Kubernetes minor version the suites run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kube {
    V1_37,
    V1_36,
    V1_35,
    V1_34,
}

impl Kube {
    /// Every version CI runs, newest first.
    pub const ALL: [Kube; 4] = [Kube::V1_37, Kube::V1_36, Kube::V1_35, Kube::V1_34];

    /// The tool name in `tests/tools/` and the cache.
    pub fn tool(self) -> &'static str {
        match self {
            Kube::V1_37 => "kube-1.37",
            Kube::V1_36 => "kube-1.36",
            Kube::V1_35 => "kube-1.35",
            Kube::V1_34 => "kube-1.34",
        }
    }

    /// `major.minor`, as the `kubernetesVersion` setting spells it.
    pub fn minor(self) -> &'static str {
        match self {
            Kube::V1_37 => "1.37",
            Kube::V1_36 => "1.36",
            Kube::V1_35 => "1.35",
            Kube::V1_34 => "1.34",
        }
    }
}

/// The etcd the apiservers store into.
const ETCD: &str = "etcd-3.6";

/// What an apiserver of version `v` needs.
pub fn needs(v: Kube) -> Vec<Need> {
    vec![tools::go_tool(v.tool(), "kube-apiserver"), tools::go_tool(ETCD, "etcd"), Need::Program("/bin/sh", "dash")]
}

static SHARED_1_37: OnceLock<KubeApiserver> = OnceLock::new();
static SHARED_1_36: OnceLock<KubeApiserver> = OnceLock::new();
static SHARED_1_35: OnceLock<KubeApiserver> = OnceLock::new();
static SHARED_1_34: OnceLock<KubeApiserver> = OnceLock::new();

/// The test binary's apiserver of version `v`, started on first use; `None`
/// (after saying why) when its binaries are missing under plain `cargo test`
/// (a failure under `HCP_REQUIRE_ALL_SUITES=1`).
pub fn shared(test: &str, v: Kube) -> Option<&'static KubeApiserver> {
    if !super::env::ready(test, &needs(v)) {
        return None;
    }
    let cell = match v {
        Kube::V1_37 => &SHARED_1_37,
        Kube::V1_36 => &SHARED_1_36,
        Kube::V1_35 => &SHARED_1_35,
        Kube::V1_34 => &SHARED_1_34,
    };
    Some(cell.get_or_init(|| {
        // Started on a thread of its own with its own runtime: the caller may
        // be inside a tokio runtime, which cannot block on another future.
        std::thread::spawn(move || KubeApiserver::start_blocking(v, &[]))
            .join()
            .unwrap_or_else(|_| panic!("starting kube-apiserver {} panicked", v.minor()))
            .unwrap_or_else(|e| panic!("kube-apiserver {}: {e}", v.minor()))
    }))
}

/// A process under the watchdog: closing `stdin` makes the watchdog kill the
/// process by its id, wait for it, and remove `cleanup` (if any).
struct Guarded {
    watchdog: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
}

impl Guarded {
    fn spawn(program: &Path, args: &[String], log: &Path, cleanup: Option<&Path>) -> Result<Self, String> {
        // `$1` log, `$2` dir to remove (or empty), the rest the command.
        let script = r#"log=$1; dir=$2; shift 2
"$@" >"$log" 2>&1 </dev/null &
p=$!
echo "$p"
read -r _
kill -KILL "$p" 2>/dev/null
wait "$p" 2>/dev/null
[ -n "$dir" ] && rm -rf "$dir"
exit 0"#;
        let mut watchdog = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .arg(log)
            .arg(cleanup.map(Path::as_os_str).unwrap_or_default())
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", program.display()))?;
        let stdin = watchdog.stdin.take();
        let mut line = String::new();
        let out = watchdog.stdout.take().ok_or("watchdog stdout")?;
        BufReader::new(out).read_line(&mut line).map_err(|e| format!("watchdog: {e}"))?;
        let pid = line.trim().parse().map_err(|_| format!("watchdog printed {line:?}, not a pid"))?;
        Ok(Self { watchdog, stdin, pid })
    }

    /// Whether the process is still running.
    fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"stop\n");
        }
        let _ = self.watchdog.wait();
    }
}

/// A free loopback port (bound and released; the processes bind it next).
///
/// Not the kernel's pick (`bind(0)`): that comes from the ephemeral range,
/// where the next outgoing connection of any process (the apiserver's own
/// to etcd, a test's client) may take it before the process that was given
/// it binds it, and a port released by one test thread can be handed to
/// the next. Ports are handed out once per process, walking 20000–32767
/// (below Linux's ephemeral range) from an offset of the process id, and
/// only if bindable now. [`KubeApiserver::start`] still retries a start
/// that lost the race to another process.
fn free_port() -> Result<u16, String> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_768;
    static NEXT: AtomicUsize = AtomicUsize::new(usize::MAX);
    let _ = NEXT.compare_exchange(
        usize::MAX,
        (std::process::id().wrapping_mul(7919) % SPAN) as usize,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let i = NEXT.fetch_add(1, Ordering::SeqCst) as u32 % SPAN;
        let port = (LOW + i) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(port);
        }
    }
    Err("free port: none bindable in 20000-32767".into())
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert: String,
    pub key: String,
}

/// The instance's certificate authority (it signs the serving certificate
/// and every client certificate the apiserver accepts).
pub struct TestCa {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> Result<Self, String> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = ca.self_signed(&key).map_err(|e| e.to_string())?;
        Ok(Self { pem: cert.pem(), issuer: Issuer::new(ca, key) })
    }

    /// A client certificate: CN `user`, O for each of `groups`.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertPair, String> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        p.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            p.distinguished_name.push(DnType::OrganizationName, *g);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = p.signed_by(&key, &self.issuer).map_err(|e| e.to_string())?;
        Ok(CertPair { cert: cert.pem(), key: key.serialize_pem() })
    }

    /// A serving certificate for `127.0.0.1` and `localhost`.
    pub fn serving_cert(&self) -> Result<CertPair, String> {
        use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .map_err(|e| e.to_string())?;
        p.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = p.signed_by(&key, &self.issuer).map_err(|e| e.to_string())?;
        Ok(CertPair { cert: cert.pem(), key: key.serialize_pem() })
    }
}

/// Who a request is sent as.
#[derive(Clone, Debug)]
pub enum Auth {
    /// The admin client certificate (`O=system:masters`).
    Admin,
    /// A bearer token (a ServiceAccount's, from [`KubeApiserver::token`]).
    Token(String),
    /// No credentials at all.
    Anonymous,
}

/// One answer of the apiserver: its status code and body (JSON, or `Null`
/// when the body is not JSON; the text is kept), and the warnings it sent
/// (`Warning: 299 - "…"` headers, unquoted, in order).
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub text: String,
    pub warnings: Vec<String>,
}

/// The text of one `Warning` header (`299 - "text"`, Go-quoted).
fn warning_text(header: &str) -> String {
    let quoted = header.splitn(3, ' ').nth(2).unwrap_or(header).trim();
    let inner = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"')).unwrap_or(quoted);
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A running etcd + kube-apiserver pair.
pub struct KubeApiserver {
    pub version: Kube,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub addr: SocketAddr,
    /// Holds the certificates, keys, data dir and logs.
    pub dir: PathBuf,
    pub ca: Arc<TestCa>,
    pub admin: CertPair,
    /// The apiserver's log (stdout and stderr).
    pub log: PathBuf,
    /// How long it took from start to `/readyz` 200.
    pub startup: Duration,
    admin_config: Arc<ClientConfig>,
    anonymous_config: Arc<ClientConfig>,
    namespaces: AtomicUsize,
    // Declared last: dropped after everything above (apiserver before etcd).
    apiserver: Guarded,
    etcd: Guarded,
}

fn client_config(ca_pem: &str, cert: Option<&CertPair>) -> Result<Arc<ClientConfig>, String> {
    super::https::install_provider();
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let builder = ClientConfig::builder().with_root_certificates(roots);
    let config = match cert {
        None => builder.with_no_client_auth(),
        Some(p) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(p.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).map_err(|e| e.to_string())?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
    };
    Ok(Arc::new(config))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

impl KubeApiserver {
    /// Starts etcd and kube-apiserver `v` (with `extra_args` appended to the
    /// apiserver's flags) and waits until `/readyz` answers 200.
    pub async fn start(v: Kube, extra_args: &[String]) -> Result<Self, String> {
        let mut last = String::new();
        for attempt in 1..=4 {
            match Self::start_once(v, extra_args).await {
                Ok(me) => return Ok(me),
                // Another process bound one of its ports between our check
                // and its bind: new ports, new start.
                Err(e) if e.contains("address already in use") => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "kube-apiserver {} start {attempt}: a port was taken; retrying",
                        v.minor()
                    );
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    async fn start_once(v: Kube, extra_args: &[String]) -> Result<Self, String> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let t0 = Instant::now();
        let dir = std::env::temp_dir().join(format!(
            "hcp-kas-{}-{}-{}",
            v.minor(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("certs")).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;

        let ca = TestCa::new(&format!("kube-apiserver {} test CA", v.minor()))?;
        let serving = ca.serving_cert()?;
        let admin = ca.client_cert("admin", &["system:masters"])?;
        let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let f = |n: &str| dir.join(n);
        write(&f("ca.crt"), &ca.pem)?;
        write(&f("serving.crt"), &serving.cert)?;
        write(&f("serving.key"), &serving.key)?;
        write(&f("sa.key"), &sa.serialize_pem())?;
        write(&f("sa.pub"), &sa.public_key_pem())?;

        let (client, peer, metrics, secure) = (free_port()?, free_port()?, free_port()?, free_port()?);
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let etcd_args: Vec<String> = vec![
            "--name=kas".into(),
            format!("--data-dir={}", f("etcd").display()),
            format!("--listen-client-urls={}", url(client)),
            format!("--advertise-client-urls={}", url(client)),
            format!("--listen-peer-urls={}", url(peer)),
            format!("--initial-advertise-peer-urls={}", url(peer)),
            format!("--initial-cluster=kas={}", url(peer)),
            format!("--listen-metrics-urls={}", url(metrics)),
            // A test store: durability across a power cut is not a concern.
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        // etcd's watchdog removes the directory: it is stopped last.
        let etcd = Guarded::spawn(&tools::go_bin(ETCD, "etcd"), &etcd_args, &f("etcd.log"), Some(&dir))?;

        let mut args: Vec<String> = vec![
            format!("--etcd-servers={}", url(client)),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // 1.37 refuses a loopback advertise address with an endpoint
            // reconciler (the `kubernetes` Service's endpoints, which nothing
            // here reads): none, on every version alike.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={secure}"),
            format!("--tls-cert-file={}", f("serving.crt").display()),
            format!("--tls-private-key-file={}", f("serving.key").display()),
            format!("--client-ca-file={}", f("ca.crt").display()),
            "--authorization-mode=RBAC".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--service-account-issuer=https://127.0.0.1".into(),
            format!("--service-account-key-file={}", f("sa.pub").display()),
            format!("--service-account-signing-key-file={}", f("sa.key").display()),
            // No controller-manager creates the `default` ServiceAccounts it checks for.
            "--disable-admission-plugins=ServiceAccount".into(),
            format!("--cert-dir={}", f("certs").display()),
        ];
        args.extend(extra_args.iter().cloned());
        let log = f("kube-apiserver.log");
        // On an error `etcd` is dropped here, which stops it.
        let apiserver = Guarded::spawn(&tools::go_bin(v.tool(), "kube-apiserver"), &args, &log, None)?;
        let admin_config = client_config(&ca.pem, Some(&admin))?;
        let anonymous_config = client_config(&ca.pem, None)?;
        let mut me = Self {
            version: v,
            url: format!("https://127.0.0.1:{secure}"),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, secure)),
            dir: dir.clone(),
            ca: Arc::new(ca),
            admin,
            log: log.clone(),
            startup: Duration::ZERO,
            admin_config,
            anonymous_config,
            namespaces: AtomicUsize::new(0),
            apiserver,
            etcd,
        };
        // Generous: two cores shared with builds; it is usually ready in seconds.
        let deadline = t0 + Duration::from_secs(180);
        loop {
            if let Ok(r) = me.request("GET", "/readyz", None, &Auth::Admin).await {
                if r.status == 200 {
                    break;
                }
            }
            if !me.apiserver.alive() || !me.etcd.alive() || Instant::now() > deadline {
                let tail = |p: &Path| {
                    let t = std::fs::read_to_string(p).unwrap_or_default();
                    t.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
                };
                return Err(format!(
                    "not ready after {:?} (apiserver alive {}, etcd alive {})\n--- kube-apiserver.log\n{}\n--- etcd.log\n{}",
                    t0.elapsed(),
                    me.apiserver.alive(),
                    me.etcd.alive(),
                    tail(&log),
                    tail(&dir.join("etcd.log"))
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        me.startup = t0.elapsed();
        let _ = writeln!(std::io::stderr(), "kube-apiserver {} ready in {:?} at {}", v.minor(), me.startup, me.url);
        Ok(me)
    }

    /// [`KubeApiserver::start`] on a runtime of its own.
    pub fn start_blocking(v: Kube, extra_args: &[String]) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(Self::start(v, extra_args))
    }

    /// The server's `/version` `gitVersion` (e.g. `v1.35.4`).
    pub async fn git_version(&self) -> Result<String, String> {
        let r = self.request("GET", "/version", None, &Auth::Admin).await?;
        r.body["gitVersion"].as_str().map(str::to_string).ok_or_else(|| format!("/version: {}", r.text))
    }

    /// One request on a fresh connection. `path` includes any query.
    pub async fn request(&self, method: &str, path: &str, body: Option<&Value>, auth: &Auth) -> Result<Reply, String> {
        self.request_raw(method, path, "application/json", body.map(|b| b.to_string().into_bytes()), auth).await
    }

    /// One request with a body of the given content type (e.g. a merge patch).
    pub async fn request_raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
        auth: &Auth,
    ) -> Result<Reply, String> {
        let config = match auth {
            Auth::Admin => self.admin_config.clone(),
            Auth::Token(_) | Auth::Anonymous => self.anonymous_config.clone(),
        };
        let tcp = TcpStream::connect(self.addr).await.map_err(|e| format!("connect: {e}"))?;
        let tls = TlsConnector::from(config)
            .connect(ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()), tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("accept", "application/json");
        if body.is_some() {
            req = req.header("content-type", content_type);
        }
        if let Auth::Token(t) = auth {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| e.to_string())?;
        let resp = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
            .await
            .map_err(|_| format!("{method} {path}: no answer in 60 s"))?
            .map_err(|e| format!("send: {e}"))?;
        let status = resp.status().as_u16();
        let warnings = resp
            .headers()
            .get_all("warning")
            .iter()
            .map(|h| warning_text(&String::from_utf8_lossy(h.as_bytes())))
            .collect();
        let bytes = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(Reply { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), text, warnings })
    }

    /// An admin request that must succeed (2xx); its body.
    pub async fn must(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let r = self.request(method, path, body, &Auth::Admin).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        assert!(r.ok(), "{method} {path}: {} {}", r.status, r.text);
        r.body
    }

    /// A fresh namespace for one test, named after `prefix`.
    pub async fn namespace(&self, prefix: &str) -> String {
        let n = self.namespaces.fetch_add(1, Ordering::SeqCst);
        let clean: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let name = format!("t{n}-{}", clean.trim_matches('-'));
        let name = name.trim_end_matches('-').to_string();
        self.must(
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
        )
        .await;
        name
    }

    /// Creates (or replaces) a CustomResourceDefinition and waits until it is
    /// Established and its resource answers a LIST.
    pub async fn apply_crd(&self, crd: &Value) -> Result<(), String> {
        let name = crd["metadata"]["name"].as_str().ok_or("the CRD has no name")?.to_string();
        let base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let r = self.request("POST", base, Some(crd), &Auth::Admin).await?;
        if r.status == 409 {
            let cur = self.request("GET", &format!("{base}/{name}"), None, &Auth::Admin).await?;
            let mut next = crd.clone();
            next["metadata"]["resourceVersion"] = cur.body["metadata"]["resourceVersion"].clone();
            let r = self.request("PUT", &format!("{base}/{name}"), Some(&next), &Auth::Admin).await?;
            if !r.ok() {
                return Err(format!("replacing CRD {name}: {} {}", r.status, r.text));
            }
        } else if !r.ok() {
            return Err(format!("creating CRD {name}: {} {}", r.status, r.text));
        }
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let version = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
            .and_then(|v| v["name"].as_str())
            .unwrap_or_default()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let cur = self.request("GET", &format!("{base}/{name}"), None, &Auth::Admin).await?;
            let established = cur.body["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
            if established {
                let list =
                    self.request("GET", &format!("/apis/{group}/{version}/{plural}"), None, &Auth::Admin).await?;
                if list.ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("CRD {name} not established in 60 s: {}", cur.body["status"]));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A kubeconfig file for `auth` (Admin: the client certificate; Token:
    /// the bearer token), written into the instance's directory as `name`.
    pub fn kubeconfig(&self, name: &str, auth: &Auth) -> PathBuf {
        let user = match auth {
            Auth::Admin => {
                let (c, k) = (self.dir.join(format!("{name}.crt")), self.dir.join(format!("{name}.key")));
                write(&c, &self.admin.cert).expect("admin cert");
                write(&k, &self.admin.key).expect("admin key");
                json!({"client-certificate": c, "client-key": k})
            }
            Auth::Token(t) => json!({"token": t}),
            Auth::Anonymous => json!({}),
        };
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": self.dir.join("ca.crt")}}],
            "users": [{"name": "test", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        });
        let path = self.dir.join(name);
        write(&path, &config.to_string()).expect("kubeconfig");
        path
    }

    /// A kube client for `auth`.
    pub async fn client(&self, auth: &Auth) -> kube::Client {
        let path = self.kubeconfig(&format!("kubeconfig-{}", self.namespaces.fetch_add(1, Ordering::SeqCst)), auth);
        let kc = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
        kube::Client::try_from(config).expect("kube client")
    }

    /// Creates ServiceAccount `ns/name` (if missing) and returns a token for
    /// it from the TokenRequest API: requests with it run under exactly the
    /// RBAC bound to that ServiceAccount.
    pub async fn token(&self, ns: &str, name: &str) -> Result<String, String> {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}});
        let r =
            self.request("POST", &format!("/api/v1/namespaces/{ns}/serviceaccounts"), Some(&sa), &Auth::Admin).await?;
        if !r.ok() && r.status != 409 {
            return Err(format!("ServiceAccount {ns}/{name}: {} {}", r.status, r.text));
        }
        let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
        let r = self
            .request("POST", &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"), Some(&tr), &Auth::Admin)
            .await?;
        r.body["status"]["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("TokenRequest: {} {}", r.status, r.text))
    }

    /// Applies RBAC objects (Roles, ClusterRoles, bindings) or any other
    /// core/grouped objects by POST, as admin; an existing one is replaced.
    pub async fn apply(&self, obj: &Value) -> Result<Value, String> {
        let (collection, item) = object_paths(obj)?;
        let r = self.request("POST", &collection, Some(obj), &Auth::Admin).await?;
        if r.status == 409 {
            let cur = self.request("GET", &item, None, &Auth::Admin).await?;
            let mut next = obj.clone();
            next["metadata"]["resourceVersion"] = cur.body["metadata"]["resourceVersion"].clone();
            let r = self.request("PUT", &item, Some(&next), &Auth::Admin).await?;
            return if r.ok() { Ok(r.body) } else { Err(format!("PUT {item}: {} {}", r.status, r.text)) };
        }
        if r.ok() {
            Ok(r.body)
        } else {
            Err(format!("POST {collection}: {} {}", r.status, r.text))
        }
    }

    /// CREATE of `obj` (dry run when `dry_run`) as `auth`: the raw answer
    /// (the stored object, or the apiserver's Status).
    pub async fn create(&self, obj: &Value, dry_run: bool, auth: &Auth) -> Result<Reply, String> {
        let (collection, _) = object_paths(obj)?;
        self.request("POST", &with_dry_run(&collection, dry_run), Some(obj), auth).await
    }

    /// UPDATE (PUT) of `obj`, or of its `subresource` (e.g. `status`). A
    /// missing `metadata.resourceVersion` is taken from the stored object.
    pub async fn update(
        &self,
        obj: &Value,
        subresource: Option<&str>,
        dry_run: bool,
        auth: &Auth,
    ) -> Result<Reply, String> {
        let (_, item) = object_paths(obj)?;
        let mut obj = obj.clone();
        if obj["metadata"].get("resourceVersion").is_none() {
            let cur = self.request("GET", &item, None, &Auth::Admin).await?;
            obj["metadata"]["resourceVersion"] = cur.body["metadata"]["resourceVersion"].clone();
        }
        let path = match subresource {
            Some(s) => format!("{item}/{s}"),
            None => item,
        };
        self.request("PUT", &with_dry_run(&path, dry_run), Some(&obj), auth).await
    }

    /// GET of the stored `obj` (by its apiVersion, kind, namespace and name).
    pub async fn get(&self, obj: &Value) -> Result<Reply, String> {
        let (_, item) = object_paths(obj)?;
        self.request("GET", &item, None, &Auth::Admin).await
    }
}

fn with_dry_run(path: &str, dry_run: bool) -> String {
    if dry_run {
        format!("{path}?dryRun=All")
    } else {
        path.to_string()
    }
}

/// The resource (plural) of the kinds the suites create.
pub fn plural(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "HCPEtcdBackup" => "hcpetcdbackups",
        "HostedCluster" => "hostedclusters",
        "HostedControlPlane" => "hostedcontrolplanes",
        "StatefulSet" => "statefulsets",
        "Job" => "jobs",
        "Secret" => "secrets",
        "ConfigMap" => "configmaps",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        "CustomResourceDefinition" => "customresourcedefinitions",
        _ => return None,
    })
}

/// The collection and item paths of `obj` (namespaced when it has a namespace).
pub fn object_paths(obj: &Value) -> Result<(String, String), String> {
    let api_version = obj["apiVersion"].as_str().ok_or("no apiVersion")?;
    let kind = obj["kind"].as_str().ok_or("no kind")?;
    let resource = plural(kind).ok_or_else(|| format!("no resource known for kind {kind}"))?;
    let prefix = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
    let collection = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{resource}"),
        None => format!("{prefix}/{resource}"),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let item = format!("{collection}/{name}");
    Ok((collection, item))
}

// Helpers for suites that run processes of their own next to the apiserver
// (the webhook server, on loopback): the same watchdog, free ports, and a
// certificate authority that is not the apiserver's.

/// A suite's own process (e.g. `serve`) under the same watchdog as the
/// apiserver: killed by its id on drop and when the test binary exits, and
/// `cleanup` (if any) removed then. Its stdout and stderr go to `log`.
pub struct Watched(Guarded);

impl Watched {
    pub fn spawn(program: &Path, args: &[String], log: &Path, cleanup: Option<&Path>) -> Result<Self, String> {
        Guarded::spawn(program, args, log, cleanup).map(Self)
    }

    /// The process id (the watchdog's child, not the watchdog).
    pub fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Whether the process is still running.
    pub fn alive(&self) -> bool {
        self.0.alive()
    }
}

/// A free loopback port (bound and released; the caller's process binds it next).
pub fn loopback_port() -> Result<u16, String> {
    free_port()
}

impl TestCa {
    /// A certificate authority of the suite's own (e.g. the one a webhook
    /// server trusts for the apiserver's client certificate).
    pub fn standalone(name: &str) -> Result<Self, String> {
        Self::new(name)
    }
}
