//! The project's webhooks registered on a real kube-apiserver, as the
//! manifests in `webhooks/base` describe them: the RBAC applied unchanged,
//! `serve` started with the Deployment's arguments (addresses, file paths and
//! the expected SAN rewritten for loopback) under a token of the manifests'
//! ServiceAccount, and each webhook configuration registered with only its
//! `clientConfig` replaced by `url: https://127.0.0.1:PORT/<path>` + `caBundle`
//! (no Service: no cluster IP is reachable here).
//!
//! The manifests are found by following `kustomization.yaml` (resources and
//! components, files or directories) from `webhooks/base`, and picked by kind,
//! so moving a file does not break the suite.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::{body::Bytes, Request};
use hyper_util::rt::TokioIo;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, RootCertStore,
};
use serde::Deserialize as _;
use serde_json::{json, Value};

use crate::common::{
    self,
    kube_apiserver::{self, Auth, CertPair, Kube, KubeApiserver, Watched},
};

/// Where the manifests live.
pub fn base_dir() -> PathBuf {
    common::root().join("webhooks/base")
}

/// The files a `kustomize build` of `dir` reads (resources and components,
/// recursively); every YAML file under `dir` when it has no kustomization.
pub fn kustomize_files(dir: &Path) -> Vec<PathBuf> {
    let k =
        ["kustomization.yaml", "kustomization.yml", "Kustomization"].iter().map(|n| dir.join(n)).find(|p| p.exists());
    let Some(k) = k else {
        let mut out = Vec::new();
        walk_yaml(dir, &mut out);
        return out;
    };
    let text = std::fs::read_to_string(&k).unwrap_or_else(|e| panic!("{}: {e}", k.display()));
    let doc: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", k.display()));
    let mut out = Vec::new();
    for key in ["resources", "components"] {
        for entry in doc[key].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let p = dir.join(entry);
            if p.is_dir() {
                out.extend(kustomize_files(&p));
            } else if p.is_file() {
                out.push(p);
            } else {
                panic!("{}: {key} entry {entry} is neither a file nor a directory", k.display());
            }
        }
    }
    out
}

fn walk_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk_yaml(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
}

/// Every object of the multi-document YAML `text`.
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// Every object of the shipped install: the workload (`webhooks/base`) and
/// the webhook registrations (`webhooks/registration`), rendered by kubectl's
/// kustomize as a user applies them (the settings ConfigMap is generated).
pub fn manifests() -> Vec<Value> {
    let built = common::tools::go_bin("kube-1.35", "kubectl");
    let kubectl: PathBuf = if built.is_file() { built } else { "kubectl".into() };
    ["webhooks/base", "webhooks/registration"]
        .iter()
        .flat_map(|dir| {
            let out = std::process::Command::new(&kubectl)
                .arg("kustomize")
                .arg(common::root().join(dir))
                .output()
                .unwrap_or_else(|e| panic!("{}: {e}", kubectl.display()));
            assert!(out.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&out.stderr));
            documents(&String::from_utf8_lossy(&out.stdout))
        })
        .collect()
}

pub fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind` in the manifests.
pub fn the<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objs, kind);
    assert_eq!(found.len(), 1, "expected exactly one {kind} in webhooks/base");
    found[0]
}

/// The value of `--flag=` in any file under `webhooks/` (e.g. the allow-list
/// the client-auth overlay adds), wherever the file has moved to.
pub fn flag_in_manifests(flag: &str) -> Option<String> {
    let mut files = Vec::new();
    walk_yaml(&common::root().join("webhooks"), &mut files);
    let needle = format!("{flag}=");
    files.iter().find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        let at = text.find(&needle)?;
        let rest = &text[at + needle.len()..];
        let end = rest.find(|c: char| c.is_whitespace() || c == '"' || c == '\'').unwrap_or(rest.len());
        Some(rest[..end].to_string())
    })
}

/// A webhook configuration of the manifests with every `clientConfig` turned
/// into `url: https://127.0.0.1:PORT/<its path>` + `caBundle`; everything else
/// kept. `scope` (suffix, label) registers a copy under another name that
/// additionally requires the namespace label `label=suffix`, so that a test
/// can point a copy at another server without touching other namespaces.
pub fn on_loopback(cfg: &Value, port: u16, ca_pem: &str, scope: Option<(&str, &str)>) -> Value {
    let mut cfg = cfg.clone();
    let b64 = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    if let Some((suffix, _)) = scope {
        let name = cfg["metadata"]["name"].as_str().unwrap_or_default().to_string();
        cfg["metadata"]["name"] = json!(format!("{name}-{suffix}"));
    }
    for w in cfg["webhooks"].as_array_mut().into_iter().flatten() {
        let cc = &w["clientConfig"];
        let path = cc["service"]["path"].as_str().or_else(|| cc["url"].as_str()).unwrap_or("/").to_string();
        let path = if path.starts_with('/') { path } else { url_path(&path) };
        w["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": b64});
        if let Some((suffix, label)) = scope {
            let name = w["name"].as_str().unwrap_or_default().to_string();
            // Webhook names must be unique within a configuration only, but
            // keep them distinct across configurations for the messages.
            w["name"] = json!(format!("{suffix}.{name}"));
            let sel = &mut w["namespaceSelector"];
            if !sel.is_object() {
                *sel = json!({});
            }
            sel["matchLabels"][label] = json!(suffix);
        }
    }
    cfg
}

fn url_path(url: &str) -> String {
    url.split_once("://").and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string())).unwrap_or("/".into())
}

/// The arguments of the manifests' Deployment, for loopback: `--listen`,
/// `--metrics-listen`, the TLS and config paths and `--expect-san` rewritten,
/// everything else as the manifests pass it; then `extra` (`--flag=value`
/// entries replace a flag of the same name).
pub fn serve_args(
    deployment: &Value,
    port: u16,
    metrics_port: u16,
    files: &ServeFiles,
    extra: &[String],
) -> Vec<String> {
    let args = deployment.pointer("/spec/template/spec/containers/0/args").and_then(Value::as_array).expect("args");
    // `$(VAR)` of the container's literal env, as the kubelet expands args
    // (`--operator-namespace=$(OPERATOR_NAMESPACE)`).
    let env: Vec<(String, String)> = deployment
        .pointer("/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .collect();
    let expand = |a: &str| env.iter().fold(a.to_string(), |acc, (k, v)| acc.replace(&format!("$({k})"), v));
    let mut out: Vec<String> = Vec::new();
    for a in args.iter().filter_map(Value::as_str) {
        let a = expand(a);
        let a = a.as_str();
        let (flag, _) = a.split_once('=').unwrap_or((a, ""));
        let rewritten = match flag {
            "--listen" => format!("--listen=127.0.0.1:{port}"),
            "--metrics-listen" => format!("--metrics-listen=127.0.0.1:{metrics_port}"),
            "--tls-cert" => format!("--tls-cert={}", files.cert.display()),
            "--tls-key" => format!("--tls-key={}", files.key.display()),
            "--config" => format!("--config={}", files.settings.display()),
            // The manifests expect the Service's DNS name; the certificate
            // here is for the loopback address the webhooks are registered at.
            "--expect-san" => "--expect-san=127.0.0.1".to_string(),
            _ => a.to_string(),
        };
        out.push(rewritten);
    }
    for e in extra {
        let flag = e.split_once('=').map_or(e.as_str(), |(f, _)| f);
        out.retain(|a| a.split_once('=').map_or(a.as_str(), |(f, _)| f) != flag);
        out.push(e.clone());
    }
    assert!(out.first().is_some_and(|a| a == "serve"), "the Deployment runs `serve`: {out:?}");
    out
}

/// Files a `serve` process reads.
pub struct ServeFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub settings: PathBuf,
}

/// A running `serve`.
pub struct Serve {
    pub proc: Watched,
    pub port: u16,
    pub log: PathBuf,
}

impl Serve {
    /// Starts `hcp-etcd-admission <args>` with `KUBECONFIG=kubeconfig` (if
    /// given) and waits for `/readyz` 200 over TLS trusting `ca_pem`. The
    /// watchdog removes `cleanup` when it stops the process.
    pub async fn start(
        dir: &Path,
        name: &str,
        args: &[String],
        kubeconfig: Option<&Path>,
        port: u16,
        ca_pem: &str,
        cleanup: Option<&Path>,
    ) -> Result<Self, String> {
        let log = dir.join(format!("{name}.log"));
        let mut full: Vec<String> = vec!["RUST_LOG=info".into()];
        if let Some(k) = kubeconfig {
            full.push(format!("KUBECONFIG={}", k.display()));
        }
        full.push(env!("CARGO_BIN_EXE_hcp-etcd-admission").to_string());
        full.extend(args.iter().cloned());
        let proc = Watched::spawn(Path::new("/usr/bin/env"), &full, &log, cleanup)?;
        let client = common::https::Client::new(&[ca_pem], None);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = client.request(addr, "GET", "/readyz", vec![]).await {
                if r.status == 200 {
                    return Ok(Self { proc, port, log });
                }
            }
            if !proc.alive() || Instant::now() > deadline {
                return Err(format!(
                    "serve {name} not ready (alive {}): {}",
                    proc.alive(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`, `KILL`) to the process by its id.
    pub fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.proc.pid().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {}", self.proc.pid());
    }

    /// Log lines that report an error answer of the apiserver (403/401).
    pub fn refused_log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
                let e = v["error"].as_str().unwrap_or_default().to_ascii_lowercase();
                e.contains("403") || e.contains("forbidden") || e.contains("401") || e.contains("unauthorized")
            })
            .map(str::to_string)
            .collect()
    }
}

/// One answer of the apiserver, with its `Warning` headers decoded.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub text: String,
    pub warnings: Vec<String>,
}

/// `299 - "text"` → `text` (RFC 7234 warning, Go's quoting).
fn warning_text(h: &str) -> String {
    let inner = h.strip_prefix("299 - \"").and_then(|s| s.strip_suffix('"')).unwrap_or(h);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The suite's shared environment of one Kubernetes version.
pub struct Env {
    pub api: KubeApiserver,
    pub v: Kube,
    /// The suite's files (audit policy and log, serve's certificate, settings, logs).
    pub dir: PathBuf,
    pub manifests: Vec<Value>,
    /// The CA of serve's serving certificate (the configurations' caBundle).
    pub ca_pem: String,
    pub files: ServeFiles,
    /// A kubeconfig with a token of the manifests' ServiceAccount.
    pub kubeconfig: PathBuf,
    /// `system:serviceaccount:NS:NAME` of the manifests' ServiceAccount.
    pub user: String,
    pub audit_log: PathBuf,
    /// The settings' `operatorNamespace`.
    pub operator_ns: String,
    /// The manifests' settings (the ConfigMap's settings.yaml), as JSON.
    pub settings: Value,
    pub serve: Serve,
    admin: Arc<ClientConfig>,
}

/// Label that makes a namespace a hosted control plane namespace (the
/// mutation's namespaceSelector in the manifests).
pub fn hcp_label(manifests: &[Value]) -> (String, String) {
    let m = the(manifests, "MutatingWebhookConfiguration");
    let labels = m["webhooks"][0]["namespaceSelector"]["matchLabels"].as_object().expect("matchLabels");
    let (k, v) = labels.iter().next().expect("a label");
    (k.clone(), v.as_str().unwrap_or_default().to_string())
}

static ENV_1_37: OnceLock<Env> = OnceLock::new();
static ENV_1_36: OnceLock<Env> = OnceLock::new();
static ENV_1_35: OnceLock<Env> = OnceLock::new();
static ENV_1_34: OnceLock<Env> = OnceLock::new();

/// The binary's environment for `v`, set up on first use; `None` (after
/// saying why) when the tools are missing under plain `cargo test`.
pub fn env(test: &str, v: Kube) -> Option<&'static Env> {
    if !common::env::ready(test, &kube_apiserver::needs(v)) {
        return None;
    }
    let cell = match v {
        Kube::V1_37 => &ENV_1_37,
        Kube::V1_36 => &ENV_1_36,
        Kube::V1_35 => &ENV_1_35,
        Kube::V1_34 => &ENV_1_34,
    };
    Some(cell.get_or_init(|| {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(Env::start(v))
        })
        .join()
        .unwrap_or_else(|_| panic!("setting up {} panicked", v.minor()))
        .unwrap_or_else(|e| panic!("setting up {}: {e}", v.minor()))
    }))
}

/// The admin TLS client of `api`.
pub fn admin_tls(api: &KubeApiserver) -> Result<Arc<ClientConfig>, String> {
    tls_client(&api.ca.pem, Some(&api.admin))
}

pub fn tls_client(ca_pem: &str, cert: Option<&CertPair>) -> Result<Arc<ClientConfig>, String> {
    common::https::install_provider();
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let b = ClientConfig::builder().with_root_certificates(roots);
    Ok(Arc::new(match cert {
        None => b.with_no_client_auth(),
        Some(p) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(p.cert.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).map_err(|e| e.to_string())?;
            b.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
    }))
}

/// One admin request to `api` on a fresh connection, with the warnings.
pub async fn call(
    api: &KubeApiserver,
    tls: &Arc<ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Answer, String> {
    let tcp = tokio::net::TcpStream::connect(api.addr).await.map_err(|e| format!("connect: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()), tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", api.addr.to_string())
        .header("accept", "application/json");
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = req.body(Full::new(Bytes::from(bytes))).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
        .await
        .map_err(|_| format!("{method} {path}: no answer in 60 s"))?
        .map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().filter_map(|h| h.to_str().ok()).map(warning_text).collect();
    let bytes = resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?.to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), text, warnings })
}

/// Creates a namespace with `labels`.
pub async fn labelled_namespace(api: &KubeApiserver, prefix: &str, labels: &[(&str, &str)]) -> String {
    let ns = api.namespace(prefix).await;
    let mut obj = api.must("GET", &format!("/api/v1/namespaces/{ns}"), None).await;
    for (k, v) in labels {
        obj["metadata"]["labels"][*k] = json!(v);
    }
    api.must("PUT", &format!("/api/v1/namespaces/{ns}"), Some(&obj)).await;
    ns
}

/// A CRD for `kind` that keeps every field (the webhook, not the schema,
/// judges the object), with the status subresource.
pub fn open_crd(kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.hypershift.openshift.io")},
        "spec": {
            "group": "hypershift.openshift.io",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_ascii_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// Applies the CRDs the webhooks need: the generated HCPEtcdBackup CRD from
/// crds/, and open ones for HostedCluster and HostedControlPlane (always:
/// here the webhook judges `restoreSnapshotURL`, not a schema; the CRDs'
/// own rules are the differential conformance suite's business).
pub async fn apply_crds(api: &KubeApiserver) -> Result<(), String> {
    let mut crds = Vec::new();
    for e in std::fs::read_dir(common::root().join("crds")).map_err(|e| e.to_string())?.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            crds.extend(
                documents(&std::fs::read_to_string(&p).map_err(|e| e.to_string())?)
                    .into_iter()
                    .filter(|c| c["spec"]["names"]["kind"] == "HCPEtcdBackup"),
            );
        }
    }
    if crds.len() != 1 {
        return Err(format!("expected one HCPEtcdBackup CRD in crds/, found {}", crds.len()));
    }
    crds.push(open_crd("HostedCluster", "hostedclusters"));
    crds.push(open_crd("HostedControlPlane", "hostedcontrolplanes"));
    for c in &crds {
        api.apply_crd(c).await?;
    }
    Ok(())
}

/// Retries `f` until it returns `Some`, for up to `secs` seconds.
pub async fn until<T, F, Fut>(secs: u64, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(t) = f().await {
            return Some(t);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The probe object of each webhook of the manifests, by the resource its
/// rules name: a dry-run CREATE of it in `ns` is denied by that webhook once
/// the configuration is in effect (the backup Job's: mutated by it).
pub fn probe_object(resource: &str, ns: &str) -> Value {
    match resource {
        "hcpetcdbackups" => crate::objects::backup(ns, "probe", "probe-creds"),
        "hostedclusters" => {
            crate::objects::hosted("HostedCluster", ns, "probe", Some("http://insecure.example.com/s.db"))
        }
        "hostedcontrolplanes" => {
            crate::objects::hosted("HostedControlPlane", ns, "probe", Some("http://insecure.example.com/s.db"))
        }
        "secrets" => crate::objects::secret(ns, "probe", true, crate::objects::GARBAGE),
        "statefulsets" => crate::objects::etcd_sts(ns, "etcd", 1),
        // Never denied: the probe sees the verify step in the answer instead.
        "jobs" => crate::common::hypershift_backup_job(ns, ns, "probe"),
        other => panic!("no probe for resource {other}"),
    }
}

impl Env {
    pub fn admin(&self) -> &Arc<ClientConfig> {
        &self.admin
    }

    /// An admin request with the warnings.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        call(&self.api, &self.admin, method, path, body).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// CREATE of `obj` (dry run when `dry_run`).
    pub async fn create(&self, obj: &Value, dry_run: bool) -> Answer {
        let (collection, _) = kube_apiserver::object_paths(obj).expect("paths");
        let path = if dry_run { format!("{collection}?dryRun=All") } else { collection };
        self.call("POST", &path, Some(obj)).await
    }

    /// UPDATE of `obj` (its resourceVersion taken from the stored object).
    pub async fn update(&self, obj: &Value, subresource: Option<&str>, dry_run: bool) -> Answer {
        let (_, item) = kube_apiserver::object_paths(obj).expect("paths");
        let cur = self.call("GET", &item, None).await;
        let mut obj = obj.clone();
        obj["metadata"]["resourceVersion"] = cur.body["metadata"]["resourceVersion"].clone();
        let path = match subresource {
            Some(s) => format!("{item}/{s}"),
            None => item,
        };
        let path = if dry_run { format!("{path}?dryRun=All") } else { path };
        self.call("PUT", &path, Some(&obj)).await
    }

    pub async fn get(&self, obj: &Value) -> Answer {
        let (_, item) = kube_apiserver::object_paths(obj).expect("paths");
        self.call("GET", &item, None).await
    }

    /// Audit events of serve's ServiceAccount.
    pub fn audit_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == self.user.as_str())
            .collect()
    }

    /// Holds after every test: the apiserver never answered serve 401 or 403
    /// (its audit log), and serve logged no refused call.
    pub fn assert_never_forbidden(&self) {
        let refused: Vec<String> = self
            .audit_events()
            .iter()
            .filter(|e| matches!(e["responseStatus"]["code"].as_u64(), Some(401) | Some(403)))
            .map(|e| format!("{} {} -> {}", e["verb"], e["requestURI"], e["responseStatus"]))
            .collect();
        assert!(refused.is_empty(), "serve was refused under the manifests' RBAC:\n{}", refused.join("\n"));
        let lines = self.serve.refused_log_lines();
        assert!(lines.is_empty(), "serve logged refused calls:\n{}", lines.join("\n"));
    }

    async fn start(v: Kube) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("hcp-real-webhooks-{}-{}", v.minor(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let manifests = manifests();
        let sa = the(&manifests, "ServiceAccount");
        let (sa_ns, sa_name) = (
            sa["metadata"]["namespace"].as_str().ok_or("ServiceAccount namespace")?.to_string(),
            sa["metadata"]["name"].as_str().ok_or("ServiceAccount name")?.to_string(),
        );
        let user = format!("system:serviceaccount:{sa_ns}:{sa_name}");
        // Audit exactly what serve's ServiceAccount does.
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(
            &policy,
            format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  users: [\"{user}\"]\n- level: None\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let audit_log = dir.join("audit.log");
        let api = KubeApiserver::start(
            v,
            &[format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", audit_log.display())],
        )
        .await?;
        let admin = admin_tls(&api)?;

        // The manifests' namespaces, ServiceAccount, RBAC and settings as they are.
        let settings_cm = the(&manifests, "ConfigMap");
        let settings_yaml = settings_cm["data"]["settings.yaml"].as_str().ok_or("settings.yaml")?.to_string();
        let settings: Value = serde_yaml_ng::from_str(&settings_yaml).map_err(|e| e.to_string())?;
        let operator_ns = settings["operatorNamespace"].as_str().unwrap_or("hypershift").to_string();
        let mut namespaces: Vec<String> = manifests
            .iter()
            .filter_map(|o| o["metadata"]["namespace"].as_str().map(str::to_string))
            .chain([operator_ns.clone()])
            .collect();
        namespaces.sort();
        namespaces.dedup();
        for ns in &namespaces {
            let declared = of_kind(&manifests, "Namespace").into_iter().find(|n| n["metadata"]["name"] == ns.as_str());
            let obj = declared
                .cloned()
                .unwrap_or_else(|| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
            api.apply(&obj).await?;
        }
        for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"] {
            for o in of_kind(&manifests, kind) {
                api.apply(o).await?;
            }
        }
        apply_crds(&api).await?;

        // serve: a serving certificate for 127.0.0.1, the settings file,
        // the ServiceAccount's token.
        let serving = api.ca.serving_cert()?;
        let files =
            ServeFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key"), settings: dir.join("settings.yaml") };
        std::fs::write(&files.cert, &serving.cert).map_err(|e| e.to_string())?;
        std::fs::write(&files.key, &serving.key).map_err(|e| e.to_string())?;
        std::fs::write(&files.settings, &settings_yaml).map_err(|e| e.to_string())?;
        let token = api.token(&sa_ns, &sa_name).await?;
        let kubeconfig = api.kubeconfig("serve-kubeconfig", &Auth::Token(token));
        let (port, metrics_port) = (kube_apiserver::loopback_port()?, kube_apiserver::loopback_port()?);
        let args = serve_args(the(&manifests, "Deployment"), port, metrics_port, &files, &[]);
        let serve = Serve::start(&dir, "serve", &args, Some(&kubeconfig), port, &api.ca.pem, Some(&dir)).await?;

        let env = Self {
            ca_pem: api.ca.pem.clone(),
            api,
            v,
            dir,
            manifests,
            files,
            kubeconfig,
            user,
            audit_log,
            operator_ns,
            settings,
            serve,
            admin,
        };
        env.register(port).await?;
        Ok(env)
    }

    /// Registers every webhook configuration of the manifests at `port`
    /// and waits until each webhook denies its probe in a hosted control
    /// plane namespace.
    pub async fn register(&self, port: u16) -> Result<Vec<Value>, String> {
        let mut registered = Vec::new();
        for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
            for cfg in of_kind(&self.manifests, kind) {
                let cfg = on_loopback(cfg, port, &self.ca_pem, None);
                self.api.apply(&cfg).await?;
                registered.push(cfg);
            }
        }
        let (hk, hv) = hcp_label(&self.manifests);
        let ns = labelled_namespace(&self.api, "probe", &[(hk.as_str(), hv.as_str())]).await;
        probe(&self.api, &self.admin, &registered, &ns).await?;
        Ok(registered)
    }
}

/// Waits until every webhook of `configs` denies its probe in `ns` (the
/// apiserver picks up configurations through an informer).
pub async fn probe(api: &KubeApiserver, tls: &Arc<ClientConfig>, configs: &[Value], ns: &str) -> Result<(), String> {
    for cfg in configs {
        for w in cfg["webhooks"].as_array().into_iter().flatten() {
            let name = w["name"].as_str().unwrap_or_default().to_string();
            let resource = w["rules"][0]["resources"][0].as_str().unwrap_or_default();
            let obj = probe_object(resource, ns);
            let (collection, _) = kube_apiserver::object_paths(&obj)?;
            let path = format!("{collection}?dryRun=All");
            let by = format!("admission webhook \"{name}\"");
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let mutated = |a: &Answer| {
                    let inits = a.body.pointer("/spec/template/spec/initContainers").and_then(Value::as_array);
                    resource == "jobs" && inits.is_some_and(|l| l.iter().any(|c| c["name"] == "verify"))
                };
                let last = match call(api, tls, "POST", &path, Some(&obj)).await {
                    Ok(a) if a.body["message"].as_str().is_some_and(|m| m.contains(&by)) || mutated(&a) => break,
                    Ok(a) => format!("{} {}", a.status, a.text),
                    Err(e) => e,
                };
                if Instant::now() > deadline {
                    return Err(format!("webhook {name} never answered its probe: last {last}"));
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }
    }
    Ok(())
}
