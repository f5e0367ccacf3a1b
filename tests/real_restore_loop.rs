//! The restore loop in a real cluster (issue #32): a HostedControlPlane with
//! `restoreSnapshotURL`; the control-plane-operator's etcd StatefulSet
//! (upstream's rendered shape, `tests/real_cluster/`); this project's
//! webhooks served in the cluster's network namespace and registered at
//! `https://127.0.0.1`; the StatefulSet controller creating the pods
//! (`Parallel`); a real kubelet running `ensure-dns`, `etcd-init`,
//! `reset-member` and `etcd` in order, retrying, expanding `$(VAR)`,
//! mounting the volumes and TLS Secrets, probing; CoreDNS answering for the
//! headless Service; kube-proxy routing `etcd-client`; the reconciler
//! re-applying the StatefulSet and computing `EtcdSnapshotRestored` as
//! upstream does; the webhook removing etcd-init; the rolling update.
//!
//! What stands in for what (and why) is in `docs/real-cluster.md`: the
//! control-plane-operator is [`Reconciler`] (only what it does for this
//! object, cited); ensure-dns and the healthz sidecar are stand-ins in the
//! StatefulSet's file (their images are not built here); S3 is a
//! Python HTTPS file server inside the namespace, whose CA the etcd image
//! trusts (`scripts/etcd-image.sh`). Everything else is the real component.
//!
//! The five scenarios run at once on one cluster (one cluster per machine at
//! a time), each in a namespace of its own with its own webhook server,
//! registration, reconciler and volumes; the test names every scenario that
//! failed.
mod common;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

use common::cluster::{self, Cluster};
use serde_json::{json, Value};

const HCP: &str = "restore";
const ETCD_VERSION: &str = "3.6";
/// The snapshot store, on the node's address inside the namespace (pods
/// reach it through the bridge's gateway).
const STORE: &str = "10.250.0.1:8443";
/// Keys in the snapshot.
const KEYS: usize = 20;
const CONDITION: &str = "EtcdSnapshotRestored";

fn needs() -> Vec<common::env::Need> {
    let mut n = cluster::needs();
    n.push(common::env::Need::Program("python3", "apt-get install python3 (the snapshot store)"));
    for b in ["etcd", "etcdctl", "etcdutl"] {
        n.push(common::env::Need::File(common::tools::go_bin("etcd-3.6", b), "scripts/go-tools.sh etcd-3.6"));
    }
    n
}

fn cache() -> PathBuf {
    common::tools::cache_dir().join("real-cluster")
}

fn write(path: &Path, text: impl AsRef<[u8]>) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// The snapshot store's certificate for `10.250.0.1`, kept in the cache so
/// the etcd image that trusts its CA is built once (a fresh pair, and so a
/// fresh image, once it is 20 days old).
fn store_certs() -> PathBuf {
    let dir = cache().join("snapshot-store");
    let fresh = std::fs::metadata(dir.join("tls.key"))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(20 * 86400));
    if !fresh {
        let set = hcp_etcd_admission::server::certs::generate("hcp-test snapshot store CA", &["10.250.0.1".into()], 30)
            .expect("store certs");
        std::fs::create_dir_all(&dir).expect("dir");
        write(&dir.join("ca.crt"), &set.ca_pem);
        write(&dir.join("tls.crt"), &set.cert_pem);
        write(&dir.join("tls.key"), &set.key_pem);
    }
    dir
}

/// The etcd image (`scripts/etcd-image.sh`) trusting the store's CA:
/// built when its archive for this CA is not in the cache.
fn etcd_image(store: &Path) -> (PathBuf, String) {
    use sha2::Digest as _;
    let ca = std::fs::read(store.join("ca.crt")).expect("ca");
    let bin = std::fs::read(common::tools::go_bin("etcd-3.6", "etcd")).expect("etcd");
    let mut h = sha2::Sha256::new();
    h.update(&ca);
    h.update(&bin);
    h.update(std::fs::read(common::root().join("scripts/etcd-image.sh")).expect("script"));
    let key: String = h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect();
    let out = cache().join(format!("etcd-{ETCD_VERSION}-{key}.tar"));
    if !out.exists() {
        for old in std::fs::read_dir(cache()).into_iter().flatten().flatten() {
            if old.file_name().to_string_lossy().starts_with(&format!("etcd-{ETCD_VERSION}-")) {
                let _ = std::fs::remove_file(old.path());
            }
        }
        let tmp = out.with_extension("partial");
        let st = Command::new(common::root().join("scripts/etcd-image.sh"))
            .arg(ETCD_VERSION)
            .arg(&tmp)
            .arg(store.join("ca.crt"))
            .status()
            .expect("etcd-image.sh");
        assert!(st.success(), "scripts/etcd-image.sh failed");
        std::fs::rename(&tmp, &out).expect("rename");
    }
    (out, format!("localhost/hcp-test/etcd:{ETCD_VERSION}"))
}

/// etcdctl 3.6 against `ep`.
fn etcdctl_at(ep: &str, args: &[&str]) -> std::process::Output {
    Command::new(common::tools::go_bin("etcd-3.6", "etcdctl"))
        .arg("--endpoints")
        .arg(ep)
        .args(args)
        .output()
        .expect("etcdctl")
}

/// A one-member etcd 3.6 on the host's loopback (spare ports) on `data`,
/// with `extra` flags, healthy; killed when the guard drops.
fn local_etcd(name: &str, data: &Path, extra: &[&str]) -> (Kill, String) {
    let port = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
    let (client, peer) = (port().expect("port"), port().expect("port"));
    let (ep, peer) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
    let etcd = Kill(
        Command::new(common::tools::go_bin("etcd-3.6", "etcd"))
            .args(["--name", name, "--data-dir"])
            .arg(data)
            .args(["--listen-client-urls", &ep, "--advertise-client-urls", &ep, "--listen-peer-urls", &peer])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !etcdctl_at(&ep, &["endpoint", "health"]).status.success() {
        assert!(Instant::now() < deadline, "the local etcd on {} never became healthy", data.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    (etcd, ep)
}

/// A snapshot of a real etcd 3.6 holding `KEYS` keys; (bytes, its revision).
fn make_snapshot(work: &Path) -> (Vec<u8>, u64) {
    let (etcd, ep) = local_etcd("source", &work.join("source-etcd"), &[]);
    let ctl = |args: &[&str]| etcdctl_at(&ep, args);
    for i in 1..=KEYS {
        assert!(ctl(&["put", &format!("/registry/test/key{i}"), &format!("value-{i}")]).status.success());
    }
    let file = work.join("snap.db");
    assert!(ctl(&["snapshot", "save", &file.to_string_lossy()]).status.success());
    let status: Value = serde_json::from_slice(&ctl(&["endpoint", "status", "-w", "json"]).stdout).expect("status");
    let rev = status[0]["Status"]["header"]["revision"].as_u64().expect("revision");
    drop(etcd);
    (std::fs::read(&file).expect("snapshot"), rev)
}

/// The etcd PKI HyperShift's pods mount (`pki/etcd.go`: the signer, the
/// server, peer and client pairs with upstream's names, SANs and usages; the
/// metrics CA), as Secrets and ConfigMaps in the test's namespace.
fn etcd_pki(work: &Path, ns: &str) -> String {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let dir = work.join("pki");
    std::fs::create_dir_all(&dir).expect("dir");
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.distinguished_name.push(DnType::CommonName, "etcd-signer");
    ca.distinguished_name.push(DnType::OrganizationName, "openshift");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    write(&dir.join("ca.crt"), ca_cert.pem());
    let issuer = Issuer::new(ca, ca_key);
    let svc = |s: &str| vec![format!("{s}.{ns}.svc"), format!("{s}.{ns}.svc.cluster.local")];
    let leaf = |file: &str, cn: &str, sans: Vec<String>, ekus: Vec<Eku>| {
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::new(sans).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.distinguished_name.push(DnType::OrganizationName, "kubernetes");
        p.extended_key_usages = ekus;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let cert = p.signed_by(&key, &issuer).expect("leaf");
        write(&dir.join(format!("{file}.crt")), cert.pem());
        write(&dir.join(format!("{file}.key")), key.serialize_pem());
    };
    let both = || vec![Eku::ServerAuth, Eku::ClientAuth];
    let mut server = svc("etcd-client");
    server.extend(svc("*.etcd-discovery"));
    server.extend(["etcd-client".into(), "localhost".into()]);
    leaf("server", "etcd-server", server, both());
    let mut peer = svc("*.etcd-discovery");
    peer.extend(["127.0.0.1".into(), "::1".into()]);
    leaf("peer", "etcd-discovery", peer, both());
    leaf("etcd-client", "etcd-client", Vec::new(), vec![Eku::ClientAuth]);
    let metrics = hcp_etcd_admission::server::certs::generate("etcd-metrics-signer", &["localhost".into()], 30)
        .expect("metrics ca");
    write(&dir.join("metrics-ca.crt"), metrics.ca_pem);
    format!(
        "kubectl -n {ns} create secret generic etcd-server-tls --from-file=server.crt=pki/server.crt --from-file=server.key=pki/server.key\n\
         kubectl -n {ns} create secret generic etcd-peer-tls --from-file=peer.crt=pki/peer.crt --from-file=peer.key=pki/peer.key\n\
         kubectl -n {ns} create secret generic etcd-client-tls --from-file=etcd-client.crt=pki/etcd-client.crt --from-file=etcd-client.key=pki/etcd-client.key\n\
         kubectl -n {ns} create configmap etcd-ca --from-file=ca.crt=pki/ca.crt\n\
         kubectl -n {ns} create configmap etcd-metrics-ca --from-file=ca.crt=pki/metrics-ca.crt\n"
    )
}

/// A YAML file of `tests/real_cluster/` with the test's namespace.
fn fixture(name: &str, ns: &str) -> String {
    std::fs::read_to_string(common::root().join("tests/real_cluster").join(name))
        .expect("fixture")
        .replace("hcp-namespace", ns)
}

/// Every container's `image` set to `image`.
fn set_images(v: &mut Value, image: &str) {
    match v {
        Value::Object(m) => {
            if m.contains_key("image") {
                m.insert("image".into(), json!(image));
            }
            m.values_mut().for_each(|x| set_images(x, image));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| set_images(x, image)),
        _ => {}
    }
}

/// `equality.Semantic.DeepDerivative(desired, existing)` as the
/// control-plane-operator's `ApplyManifest` uses it (support/upsert/apply.go;
/// k8s.io/apimachinery third_party/forked/golang/reflect/deep_equal.go): an
/// unset value in `desired` (nil, an empty string, list or map) matches
/// anything; a list matches a list at least as long whose elements match
/// index by index; a set number or bool must be equal (the JSON holds only
/// what the rendered YAML sets). `ApplyManifest` also updates when its
/// desired-state hash changes; here the desired object changes only when
/// etcd-init leaves it, which `DeepDerivative` sees too.
fn derivative(desired: &Value, existing: &Value) -> bool {
    match desired {
        Value::Null => true,
        Value::String(s) if s.is_empty() => true,
        Value::Array(a) => {
            a.is_empty()
                || existing
                    .as_array()
                    .is_some_and(|b| a.len() <= b.len() && a.iter().zip(b).all(|(x, y)| derivative(x, y)))
        }
        Value::Object(m) => {
            m.is_empty()
                || existing
                    .as_object()
                    .is_some_and(|e| m.iter().all(|(k, v)| derivative(v, e.get(k).unwrap_or(&Value::Null))))
        }
        Value::Number(n) => existing.as_f64() == n.as_f64(),
        other => other == existing,
    }
}

/// upstream's `etcdRestoredCondition` (hostedcontrolplane_controller.go
/// lines 2488-2525 @ 3ee9615567), line for line: only when every replica is
/// ready, every `app=etcd` pod's `etcd-init` status: ready counts, not ready
/// with a non-zero last exit is False; True when the count is the replicas.
fn etcd_restored_condition(sts: &Value, pods: &[Value]) -> Option<Value> {
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1);
    if sts["status"]["readyReplicas"].as_i64().unwrap_or(0) != replicas {
        return None;
    }
    let mut count = 0;
    for pod in pods {
        for status in pod["status"]["initContainerStatuses"].as_array().into_iter().flatten() {
            if status["name"] == "etcd-init" {
                if status["ready"] == true {
                    count += 1;
                } else if let Some(t) = status["lastState"]["terminated"].as_object() {
                    if t.get("exitCode").and_then(Value::as_i64).unwrap_or(0) != 0 {
                        return Some(json!({"type": CONDITION, "status": "False",
                            "reason": t.get("reason").cloned().unwrap_or(json!("")), "message": "",
                            "lastTransitionTime": now()}));
                    }
                }
            }
        }
    }
    (count == replicas).then(|| {
        json!({"type": CONDITION, "status": "True", "reason": "AsExpected", "message": "",
            "lastTransitionTime": now()})
    })
}

fn now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the reconciler did.
#[derive(Default, Debug, Clone)]
struct Stats {
    reconciles: u32,
    /// StatefulSet creates and updates it sent (each one an admission call
    /// of the mutating webhook), and how many the apiserver refused.
    writes: u32,
    refused: u32,
    last_refusal: String,
    /// Writes that met a newer object (the StatefulSet controller wrote its
    /// status in between): a conflict, retried at the next reconcile as
    /// upstream's requeue does. Admission ran for them too.
    conflicts: u32,
    /// Writes whose webhook call timed out (a loaded machine): retried.
    timeouts: u32,
    /// `EtcdSnapshotRestored` as it set it.
    condition: Option<String>,
}

/// The control-plane-operator, for the etcd StatefulSet only:
/// * a reconcile on every change of the HostedControlPlane or the
///   StatefulSet, on every Event and ConfigMap in the namespace (`eventHandlers`,
///   `hostedControlPlaneInNamespace`, lines 360-383 and 2469), and 15 s after
///   the last one while the control plane is not ready (lines 154-155, 733):
///   seen here by polling every 2 s;
/// * `reconcileEtcdStatus` first (line 637, the restore part lines 482-498):
///   while no `EtcdSnapshotRestored` condition is there, compute it;
/// * then the StatefulSet: upstream's rendered object, etcd-init appended
///   after reset-member while the condition is not True (`adaptStatefulSet`,
///   v2/etcd/statefulset.go lines 132-137), created when missing, updated
///   (a full PUT) when it is not a `DeepDerivative` of the stored one
///   (support/upsert/apply.go lines 71-204).
struct Reconciler {
    ns: String,
    stop: AtomicBool,
    stats: Mutex<Stats>,
    base: Value,
    init: Value,
}

impl Reconciler {
    fn new(image: &str, ns: &str) -> Self {
        let mut base: Value = serde_yaml_ng::from_str(&fixture("etcd-statefulset.yaml", ns)).expect("statefulset");
        let mut init: Value = serde_yaml_ng::from_str(&fixture("etcd-init-container.yaml", ns)).expect("etcd-init");
        if let Value::Array(a) = init {
            init = a.into_iter().next().expect("one container");
        }
        set_images(&mut base, image);
        set_images(&mut init, image);
        Self { ns: ns.into(), stop: AtomicBool::new(false), stats: Mutex::new(Stats::default()), base, init }
    }

    fn stats(&self) -> Stats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn run(&self, c: &Cluster, work: &Path) {
        let ns = self.ns.as_str();
        let mut last_seen = String::new();
        let mut last = Instant::now() - Duration::from_secs(3600);
        while !self.stop.load(Ordering::SeqCst) {
            let out = c.sh(
                work,
                &format!(
                    "kubectl -n {ns} get hostedcontrolplanes,statefulsets,configmaps,events -o jsonpath='{{range .items[*]}}{{.metadata.resourceVersion}} {{end}}'"
                ),
            );
            let seen = String::from_utf8_lossy(&out.stdout).to_string();
            if out.status.success() && (seen != last_seen || last.elapsed() >= Duration::from_secs(15)) {
                last_seen = seen;
                last = Instant::now();
                self.reconcile(c, work);
            }
            std::thread::sleep(Duration::from_millis(2000));
        }
    }

    fn get(&self, c: &Cluster, work: &Path, what: &str) -> Option<Value> {
        let ns = self.ns.as_str();
        let out = c.sh(work, &format!("kubectl -n {ns} get {what} -o json"));
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    }

    fn reconcile(&self, c: &Cluster, work: &Path) {
        let ns = self.ns.as_str();
        if let Ok(mut s) = self.stats.lock() {
            s.reconciles += 1;
        }
        let Some(hcp) = self.get(c, work, &format!("hostedcontrolplane {HCP}")) else { return };
        let url = hcp["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0].as_str().map(str::to_string);
        let mut conditions = hcp["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let existing = self.get(c, work, "statefulset etcd");
        if url.is_some() && !conditions.iter().any(|k| k["type"] == CONDITION) {
            if let Some(sts) = &existing {
                let pods = self
                    .get(c, work, "pods -l app=etcd")
                    .and_then(|l| l["items"].as_array().cloned())
                    .unwrap_or_default();
                if let Some(cond) = etcd_restored_condition(sts, &pods) {
                    conditions.push(cond.clone());
                    let patch = json!({"status": {"conditions": conditions}});
                    write(&work.join("hcp-status.json"), patch.to_string());
                    let out = c.sh(
                        work,
                        &format!("kubectl -n {ns} patch hostedcontrolplane {HCP} --subresource=status --type=merge --patch-file hcp-status.json"),
                    );
                    if !out.status.success() {
                        // Upstream returns the error and requeues before rendering.
                        return;
                    }
                    if let Ok(mut s) = self.stats.lock() {
                        s.condition = cond["status"].as_str().map(str::to_string);
                    }
                }
            }
        }
        let restored = conditions.iter().any(|k| k["type"] == CONDITION && k["status"] == "True");
        let mut desired = self.base.clone();
        desired["metadata"]["ownerReferences"][0]["name"] = json!(HCP);
        desired["metadata"]["ownerReferences"][0]["uid"] = hcp["metadata"]["uid"].clone();
        if let (Some(url), false) = (&url, restored) {
            let mut init = self.init.clone();
            init["env"][0]["value"] = json!(url);
            if let Some(list) = desired["spec"]["template"]["spec"]["initContainers"].as_array_mut() {
                list.push(init);
            }
        }
        let verb = match &existing {
            None => "create",
            Some(e) if derivative(&desired, e) => return,
            Some(e) => {
                desired["metadata"]["resourceVersion"] = e["metadata"]["resourceVersion"].clone();
                "replace"
            }
        };
        write(&work.join("sts-desired.json"), desired.to_string());
        let out = c.sh(work, &format!("kubectl {verb} -f sts-desired.json"));
        if let Ok(mut s) = self.stats.lock() {
            s.writes += 1;
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                // written
            } else if err.contains("the object has been modified") {
                s.conflicts += 1;
            } else if ["deadline exceeded", "Client.Timeout exceeded", "i/o timeout"].iter().any(|t| err.contains(t)) {
                s.timeouts += 1;
            } else {
                s.refused += 1;
                s.last_refusal = err;
            }
        }
    }
}

/// Stops a reconciler when dropped: a scenario that panics stops its
/// reconciler, so the thread scope it runs in ends and the failure is told.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A process killed (and reaped) when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The webhook server as a process in the cluster's network namespace.
struct Webhook {
    child: Child,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one cluster every scenario runs on, the snapshot store and the image.
struct Node {
    /// Stopped first when dropped (the work dir holds its volumes).
    c: Option<Cluster>,
    work: PathBuf,
    store: Child,
    image: String,
    snapshot: Vec<u8>,
    snapshot_rev: u64,
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.c.take());
        let _ = self.store.kill();
        let _ = self.store.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.work);
        }
    }
}

fn exec(c: &Cluster, work: &Path, log: &str, args: &[&str]) -> Child {
    let file = std::fs::File::create(work.join(log)).expect("log");
    Command::new(common::root().join("scripts/real-cluster.sh"))
        .arg("exec")
        .arg(&c.dir)
        .args(args)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("real-cluster.sh exec")
}

impl Node {
    fn up() -> Option<Self> {
        if !common::env::ready("real_restore_loop", &needs()) {
            return None;
        }
        let work = std::env::temp_dir().join(format!("hcp-rl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(work.join("store/snapshots")).expect("work");
        let store_dir = store_certs();
        let (image_tar, image) = etcd_image(&store_dir);
        let (snapshot, snapshot_rev) = make_snapshot(&work);
        let c = Cluster::up("restore", &[image_tar]).unwrap_or_else(|e| panic!("{e}"));
        c.hypershift_crds(&work);
        // S3: presigned-style URLs, served inside the namespace (no packet leaves it).
        write(&work.join("store.py"), STORE_PY);
        let (host, port) = STORE.split_once(':').expect("store addr");
        let store_dir_s = store_dir.display().to_string();
        let store = exec(
            &c,
            &work,
            "store.log",
            &[
                "python3",
                "store.py",
                "store",
                &format!("{store_dir_s}/tls.crt"),
                &format!("{store_dir_s}/tls.key"),
                host,
                port,
            ],
        );
        Some(Node { c: Some(c), work, store, image, snapshot, snapshot_rev })
    }
}

/// One scenario: a hosted control plane's namespace, its own webhook server
/// (port `9443 + k`) and registration (the shipped one, limited to this
/// namespace), its own reconciler and volumes, a snapshot URL of its own.
struct Rig<'a> {
    c: &'a Cluster,
    node: &'a Node,
    work: PathBuf,
    ns: String,
    k: u16,
    webhook: Mutex<Option<Webhook>>,
    reconciler: Reconciler,
    snapshot_rev: u64,
    url: String,
}

impl<'a> Rig<'a> {
    fn new(node: &'a Node, k: u16, name: &str) -> Self {
        let ns = format!("clusters-{name}");
        let work = node.work.join(name);
        std::fs::create_dir_all(&work).expect("work");
        write(&node.work.join(format!("store/snapshots/{name}.db")), &node.snapshot);
        // Signed now, valid for a day (the validating webhook refuses an
        // expired presigned URL).
        let date = Command::new("date").args(["-u", "+%Y%m%dT%H%M%SZ"]).output().expect("date");
        let date = String::from_utf8_lossy(&date.stdout).trim().to_string();
        let url = format!(
            "https://{STORE}/snapshots/{name}.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={date}&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=5ec2e7"
        );
        let rig = Rig {
            c: node.c.as_ref().expect("the cluster runs"),
            node,
            work,
            reconciler: Reconciler::new(&node.image, &ns),
            ns,
            k,
            webhook: Mutex::new(None),
            snapshot_rev: node.snapshot_rev,
            url,
        };
        rig.start_webhook();
        rig.register();
        rig.hosted_control_plane(&rig.url);
        rig
    }

    /// The scenario's name (its namespace without `clusters-`).
    fn name(&self) -> &str {
        self.ns.trim_start_matches("clusters-")
    }

    fn webhook_addr(&self) -> String {
        format!("127.0.0.1:{}", 9443 + self.k)
    }

    fn metrics_addr(&self) -> String {
        format!("127.0.0.1:{}", 9090 + self.k)
    }

    fn stop_webhook(&self) {
        if let Ok(mut w) = self.webhook.lock() {
            *w = None;
        }
    }

    fn sh(&self, script: &str) -> std::process::Output {
        self.c.sh(&self.work, script)
    }

    fn must(&self, script: &str) -> String {
        self.c.must(&self.work, script)
    }

    /// `hcp-etcd-admission serve` inside the namespace, watching
    /// HostedControlPlanes through the admin kubeconfig; ready when /readyz is.
    fn start_webhook(&self) {
        let certs = self.work.join("webhook-certs");
        if !certs.join("tls.crt").exists() {
            let set =
                hcp_etcd_admission::server::certs::generate("webhook CA", &["127.0.0.1".into()], 2).expect("certs");
            std::fs::create_dir_all(&certs).expect("dir");
            write(&certs.join("ca.crt"), set.ca_pem);
            write(&certs.join("tls.crt"), set.cert_pem);
            write(&certs.join("tls.key"), set.key_pem);
        }
        let bin = cluster::bin_dir().join("hcp-etcd-admission");
        let (cert, key) = (certs.join("tls.crt"), certs.join("tls.key"));
        let (listen, metrics) = (self.webhook_addr(), self.metrics_addr());
        let config = self.work.join("settings.json");
        // etcd-init's requests made small: fifteen members on one 2-CPU node.
        write(&config, json!({"restoreCpuRequest": "10m", "restoreMemoryRequest": "64Mi"}).to_string());
        let child = exec(
            self.c,
            &self.work,
            "webhook.log",
            &[
                &bin.to_string_lossy(),
                "serve",
                "--listen",
                &listen,
                "--metrics-listen",
                &metrics,
                "--config",
                &config.to_string_lossy(),
                "--tls-cert",
                &cert.to_string_lossy(),
                "--tls-key",
                &key.to_string_lossy(),
                "--watch-hostedcontrolplanes",
                "always",
                "--drain-seconds",
                "0",
                "--log-format",
                "text",
            ],
        );
        *self.webhook.lock().unwrap_or_else(|e| e.into_inner()) = Some(Webhook { child });
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.sh(&format!("curl -fsS http://{metrics}/readyz")).status.success() {
            assert!(
                Instant::now() < deadline,
                "the webhook never became ready: {}",
                std::fs::read_to_string(self.work.join("webhook.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The project's registrations as shipped (rules, match conditions,
    /// namespace selector, failurePolicy Fail), pointed at this scenario's
    /// server on the namespace's loopback, and limited to its namespace.
    fn register(&self) {
        let ns = self.ns.as_str();
        let addr = self.webhook_addr();
        use base64::Engine as _;
        let ca = std::fs::read(self.work.join("webhook-certs/ca.crt")).expect("ca");
        let ca = base64::engine::general_purpose::STANDARD.encode(ca);
        for (file, out) in [
            ("mutatingwebhookconfiguration.yaml", "mutating.json"),
            ("validatingwebhookconfiguration.yaml", "validating.json"),
        ] {
            let text = std::fs::read_to_string(common::root().join("webhooks/registration").join(file)).expect("reg");
            let mut reg: Value = serde_yaml_ng::from_str(&text).expect("registration");
            reg["metadata"]["name"] = json!(format!("hcp-etcd-admission-{ns}"));
            for w in reg["webhooks"].as_array_mut().expect("webhooks") {
                let path = w["clientConfig"]["service"]["path"].as_str().expect("path").to_string();
                w["clientConfig"] = json!({"url": format!("https://{addr}{path}"), "caBundle": ca});
                let only = json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]});
                match w["namespaceSelector"]["matchExpressions"].as_array_mut() {
                    Some(list) => list.push(only),
                    None => w["namespaceSelector"]["matchExpressions"] = json!([only]),
                }
            }
            write(&self.work.join(out), reg.to_string());
        }
        self.must("kubectl apply -f mutating.json -f validating.json");
    }

    /// The namespace, its TLS objects, Services, ServiceAccount, volumes
    /// and the HostedControlPlane whose etcd restores from the URL.
    fn hosted_control_plane(&self, url: &str) {
        let ns = self.ns.as_str();
        write(&self.work.join("services.yaml"), fixture("etcd-services.yaml", ns));
        let pki = etcd_pki(&self.work, ns);
        let mut pvs = String::new();
        for i in 0..3 {
            pvs.push_str(&self.pv_yaml(i));
        }
        write(&self.work.join("pvs.yaml"), pvs);
        let hcp = json!({
            "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
            "metadata": {"name": HCP, "namespace": ns},
            "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {
                "type": "PersistentVolume", "restoreSnapshotURL": [url]}}}}
        });
        write(&self.work.join("hcp.json"), hcp.to_string());
        self.must(&format!(
            "kubectl create namespace {ns}\n\
             kubectl label namespace {ns} hypershift.openshift.io/hosted-control-plane=true\n\
             {pki}\
             kubectl -n {ns} create serviceaccount etcd\n\
             kubectl apply -f services.yaml -f pvs.yaml\n\
             kubectl create -f hcp.json\n"
        ));
    }

    /// A hostPath PersistentVolume for claim `data-etcd-<i>` (pre-bound), on
    /// a directory of its own under the test's work dir.
    fn pv_yaml(&self, i: usize) -> String {
        let ns = self.ns.as_str();
        let gen = std::fs::read_dir(self.work.join("pv")).map(|d| d.count()).unwrap_or(0);
        let dir = self.work.join("pv").join(format!("data-etcd-{i}-{gen}"));
        std::fs::create_dir_all(&dir).expect("pv dir");
        format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {ns}-data-etcd-{i}-{gen}}}\n\
             spec:\n  capacity: {{storage: 8Gi}}\n  accessModes: [ReadWriteOnce]\n  \
             persistentVolumeReclaimPolicy: Retain\n  volumeMode: Filesystem\n  \
             hostPath: {{path: {}, type: Directory}}\n  claimRef: {{namespace: {ns}, name: data-etcd-{i}}}\n---\n",
            dir.display()
        )
    }

    /// The HostedControlPlane's `EtcdSnapshotRestored` status, if set.
    fn condition(&self) -> Option<String> {
        let ns = self.ns.as_str();
        let out = self.sh(&format!(
            "kubectl -n {ns} get hostedcontrolplane {HCP} -o jsonpath='{{.status.conditions[?(@.type==\"{CONDITION}\")].status}}'"
        ));
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!s.is_empty()).then_some(s)
    }

    fn sts(&self) -> Value {
        let ns = self.ns.as_str();
        serde_json::from_str(&self.must(&format!("kubectl -n {ns} get statefulset etcd -o json"))).expect("sts")
    }

    /// The StatefulSet settled: every replica ready and of the update revision.
    fn settled(&self) -> bool {
        let ns = self.ns.as_str();
        let out = self.sh(&format!("kubectl -n {ns} get statefulset etcd -o json"));
        let Ok(s) = serde_json::from_slice::<Value>(&out.stdout) else { return false };
        let st = &s["status"];
        st["observedGeneration"] == s["metadata"]["generation"]
            && st["readyReplicas"] == s["spec"]["replicas"]
            && st["updatedReplicas"] == s["spec"]["replicas"]
            && st["currentRevision"] == st["updateRevision"]
    }

    fn wait(&self, what: &str, budget: Duration, mut done: impl FnMut(&Rig<'a>) -> bool) {
        let deadline = Instant::now() + budget;
        while !done(self) {
            if Instant::now() > deadline {
                panic!("{what}: not within {budget:?}\n{}", self.describe());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// What is going on, for a failure message.
    fn describe(&self) -> String {
        let ns = self.ns.as_str();
        let out = self.sh(&format!(
            "kubectl -n {ns} get pods,statefulsets,pvc -o wide 2>&1; kubectl -n {ns} get hostedcontrolplane {HCP} -o jsonpath='{{.status}}' 2>&1; echo\n\
             for p in etcd-0 etcd-1 etcd-2; do for k in etcd-init reset-member etcd; do echo \"--- $p $k\"; kubectl -n {ns} logs $p -c $k --tail=15 2>&1; done; done\n\
             kubectl -n {ns} get events --sort-by=.lastTimestamp 2>&1 | tail -n 25"
        ));
        format!(
            "{}\nreconciler: {:?}\nwebhook log tail:\n{}\n(cluster logs in {})",
            String::from_utf8_lossy(&out.stdout),
            self.reconciler.stats(),
            std::fs::read_to_string(self.work.join("webhook.log"))
                .unwrap_or_default()
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join("\n"),
            self.c.logs()
        )
    }

    /// etcdctl in pod `pod`'s etcd container, with its client certificate.
    fn etcdctl(&self, pod: &str, args: &str) -> std::process::Output {
        let ns = self.ns.as_str();
        self.sh(&format!(
            "kubectl -n {ns} exec {pod} -c etcd -- etcdctl --endpoints=https://localhost:2379 \
             --cacert=/etc/etcd/tls/etcd-ca/ca.crt --cert=/etc/etcd/tls/client/etcd-client.crt \
             --key=/etc/etcd/tls/client/etcd-client.key --command-timeout=10s {args}"
        ))
    }

    /// The cluster ID every member answers with (one entry per member).
    fn cluster_ids(&self) -> Vec<u64> {
        (0..3)
            .map(|i| {
                let out = self.etcdctl(&format!("etcd-{i}"), "endpoint status -w json");
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                v[0]["Status"]["header"]["cluster_id"].as_u64().unwrap_or(0)
            })
            .collect()
    }

    /// One cluster of three started members, each holding the snapshot's
    /// keys, above the snapshot's revision (the bump).
    fn assert_one_cluster_with_the_snapshot(&self) {
        let ids = self.cluster_ids();
        assert!(ids[0] != 0 && ids.iter().all(|&i| i == ids[0]), "one cluster: {ids:?}\n{}", self.describe());
        let list = String::from_utf8_lossy(&self.etcdctl("etcd-0", "member list").stdout).into_owned();
        assert_eq!(list.lines().filter(|l| l.contains(", started, ")).count(), 3, "{list}");
        for i in 0..3 {
            let pod = format!("etcd-{i}");
            // `"Count" : 20`, `"Revision" : 17965...` (etcdctl's fields output).
            let out = self.etcdctl(&pod, "get /registry/test/ --prefix --count-only -w fields");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("\"{name}\" : ")))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            assert_eq!(field("Count"), Some(KEYS as u64), "{pod}: {text}");
            assert!(field("Revision").unwrap_or(0) > self.snapshot_rev, "{pod}: no bump: {text}");
            let got = self.etcdctl(&pod, &format!("get /registry/test/key{KEYS} --print-value-only"));
            assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), format!("value-{KEYS}"));
        }
    }

    /// The webhook's `admission_requests` and `etcd_init_decisions`
    /// counters for the StatefulSet webhook.
    fn webhook_counts(&self) -> BTreeMap<String, u64> {
        let out = self.sh(&format!("curl -fsS http://{}/metrics", self.metrics_addr()));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("hcp_etcd_admission_etcd_init_decisions_total"))
            .filter_map(|l| {
                l.rsplit_once(' ').map(|(k, v)| (k.to_string(), v.trim().parse::<f64>().unwrap_or(0.0) as u64))
            })
            .collect()
    }

    fn store_downloads(&self) -> usize {
        std::fs::read_to_string(self.node.work.join("store.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!("GET /snapshots/{}.db", self.name())))
            .count()
    }

    fn init_in_template(&self) -> bool {
        self.sts()["spec"]["template"]["spec"]["initContainers"]
            .as_array()
            .is_some_and(|l| l.iter().any(|c| c["name"] == "etcd-init"))
    }
}

/// The snapshot store: files under a directory over HTTPS; logs each
/// request's path (never its query: a presigned URL's signature).
const STORE_PY: &str = r#"
import http.server, ssl, sys
root, cert, key, host, port = sys.argv[1:6]
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.command, self.path.split("?")[0]))
        sys.stderr.flush()
srv = http.server.ThreadingHTTPServer((host, int(port)), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"#;

impl Rig<'_> {
    /// Runs `body` with this scenario's reconciler running beside it; the
    /// reconciler stops when `body` ends or fails (a panic would otherwise
    /// leave it running and the scope waiting for it).
    fn reconciling<T>(&self, body: impl FnOnce() -> T) -> T {
        self.reconciler.stop.store(false, Ordering::SeqCst);
        std::thread::scope(|s| {
            let _stop = StopOnDrop(&self.reconciler.stop);
            s.spawn(|| self.reconciler.run(self.c, &self.work));
            body()
        })
    }

    /// The loop to its end: `EtcdSnapshotRestored=True` (checked as
    /// upstream computes it), etcd-init out of the template, the roll done,
    /// one cluster with the snapshot's data; (when the condition was set,
    /// when the roll was done) since `t0`.
    fn completes(&self, t0: Instant) -> (Duration, Duration) {
        self.wait("EtcdSnapshotRestored", Duration::from_secs(600), |r| r.condition().is_some());
        let restored_at = t0.elapsed();
        assert_eq!(self.condition().as_deref(), Some("True"), "{}", self.describe());
        self.wait("etcd-init removed and the roll done", Duration::from_secs(600), |r| {
            !r.init_in_template() && r.settled()
        });
        let settled_at = t0.elapsed();
        self.assert_one_cluster_with_the_snapshot();
        (restored_at, settled_at)
    }

    /// No rollout loop: a whole requeue period (15 s) and more without a
    /// reconciler write or a new generation, while it keeps reconciling.
    fn stays_still(&self) {
        let (gen, before) = (self.sts()["metadata"]["generation"].clone(), self.reconciler.stats());
        std::thread::sleep(Duration::from_secs(35));
        let after = self.reconciler.stats();
        assert_eq!(self.sts()["metadata"]["generation"], gen, "the StatefulSet kept changing");
        assert_eq!(after.writes, before.writes, "the reconciler kept writing: {after:?}");
        assert!(after.reconciles > before.reconciles, "the reconciler stopped reconciling");
    }

    /// Deletes StatefulSet pods and waits until none of them is the pod it
    /// was (gone, or made again under its name: another UID).
    ///
    /// Not `kubectl delete --wait`: kubectl 1.35 waits for the pods one after
    /// another, each with a GET and then a watch from a LIST
    /// (`pkg/cmd/wait/delete.go`, `IsDeleted`). When the StatefulSet
    /// controller makes a pod again between that GET (the old UID) and that
    /// LIST (the new pod, same name), no Deleted event follows and the wait
    /// runs to its timeout. Two members killed together end together, so
    /// the second pod's wait starts just as its pod goes: CI hit it in the
    /// quorum scenario (etcd-2, gone at 18:57:24, "timed out" at 18:58:53).
    fn delete_pods(&self, pods: &[&str], budget: Duration) {
        let ns = self.ns.as_str();
        let uids: Vec<String> = pods.iter().map(|p| self.existing_pod_uid(p)).collect();
        self.must(&format!("kubectl -n {ns} delete pod {} --wait=false", pods.join(" ")));
        let what = format!("{} gone (deleted, or made again)", pods.join(" and "));
        // Only an answer without that UID counts: a failed GET (an apiserver
        // busy with five scenarios) proves nothing.
        self.wait(&what, budget, |r| {
            pods.iter().zip(&uids).all(|(p, uid)| r.pod_uid(p).is_some_and(|now| now != *uid))
        });
    }

    /// The pod's UID: empty when there is no such pod, `None` when the
    /// apiserver did not answer (a failed GET proves nothing either way).
    fn pod_uid(&self, pod: &str) -> Option<String> {
        let ns = self.ns.as_str();
        let out = self.sh(&format!("kubectl -n {ns} get pod {pod} --ignore-not-found -o jsonpath='{{.metadata.uid}}'"));
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The UID of a pod that exists, waited for (within a minute).
    fn existing_pod_uid(&self, pod: &str) -> String {
        let mut uid = String::new();
        self.wait(&format!("{pod}'s UID"), Duration::from_secs(60), |r| {
            uid = r.pod_uid(pod).unwrap_or_default();
            !uid.is_empty()
        });
        uid
    }

    /// Whether `pod`'s init container `name` runs now.
    fn init_running(&self, pod: &str, name: &str) -> bool {
        let ns = self.ns.as_str();
        let out = self.sh(&format!(
            "kubectl -n {ns} get pod {pod} -o jsonpath='{{.status.initContainerStatuses[?(@.name==\"{name}\")].state.running.startedAt}}'"
        ));
        out.status.success() && !out.stdout.is_empty()
    }
}

/// The first restore of three members, end to end: one cluster, the
/// snapshot's data, `EtcdSnapshotRestored=True`, etcd-init out of the
/// template after one rolling update, and then no more writes.
fn the_first_restore_of_three_members_runs_the_whole_loop(rig: &Rig<'_>) {
    let ns = rig.ns.as_str();
    let t0 = Instant::now();
    rig.reconciling(|| {
        // The pods run this project's etcd-init, before reset-member (the
        // control-plane-operator's own appends it after, and its script
        // needs bash as sh: it would crash-loop in this image).
        rig.wait("etcd-0's etcd-init running", Duration::from_secs(300), |r| r.init_running("etcd-0", "etcd-init"));
        let order = rig.must(&format!("kubectl -n {ns} get pod etcd-0 -o jsonpath='{{.spec.initContainers[*].name}}'"));
        assert_eq!(order.trim(), "ensure-dns etcd-init reset-member");
        let env =
            rig.must(&format!("kubectl -n {ns} get pod etcd-0 -o jsonpath='{{.spec.initContainers[1].env[*].name}}'"));
        assert!(env.contains("ETCD_INIT_RESTORE_GENERATION"), "not this project's etcd-init: {env}");
        let (restored_at, settled_at) = rig.completes(t0);
        // One roll: created (1), etcd-init removed (2); the writes while the
        // restore was pending changed nothing.
        assert_eq!(rig.sts()["metadata"]["generation"], 2, "the StatefulSet's template changed more than once");
        rig.stays_still();
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        let after = rig.reconciler.stats();
        let counts = rig.webhook_counts();
        let calls: u64 = counts.values().sum();
        eprintln!(
            "restored in {restored_at:?}, settled in {settled_at:?}; reconciler {after:?}; \
             webhook decisions {counts:?}; downloads {}",
            rig.store_downloads()
        );
        // Every StatefulSet write reached the webhook (the apiserver may call
        // it again for one write); it injected while the restore was
        // pending, let etcd-init go after, and denied nothing.
        let n = |outcome: &str| {
            counts.iter().filter(|(k, _)| k.contains(&format!("outcome=\"{outcome}\""))).map(|(_, v)| *v).sum::<u64>()
        };
        assert!(calls >= u64::from(after.writes), "webhook calls {calls} < reconciler writes: {counts:?}");
        assert!(after.writes > 2, "the writes while the restore was pending: {after:?}");
        assert!(n("injected") >= 1 && n("removed") + n("not_needed") >= 1, "{counts:?}");
        assert_eq!(n("denied"), 0, "{counts:?}");
        assert_eq!(after.refused, 0, "{}", after.last_refusal);
        assert!(rig.store_downloads() >= 3, "each member downloads the snapshot");
    });
}

/// A member's pod deleted while its etcd-init runs (an eviction, a node
/// drain): the StatefulSet controller makes it again, its etcd-init
/// resumes, and the loop ends as the first restore does.
fn a_pod_deleted_mid_restore_comes_back_into_the_same_cluster(rig: &Rig<'_>) {
    let ns = rig.ns.as_str();
    let t0 = Instant::now();
    rig.reconciling(|| {
        rig.wait("etcd-1's etcd-init running", Duration::from_secs(300), |r| r.init_running("etcd-1", "etcd-init"));
        let uid = rig.existing_pod_uid("etcd-1");
        rig.must(&format!("kubectl -n {ns} delete pod etcd-1 --wait=false"));
        rig.wait("etcd-1 made again", Duration::from_secs(120), |r| {
            r.pod_uid("etcd-1").is_some_and(|now| !now.is_empty() && now != uid)
        });
        let (restored_at, settled_at) = rig.completes(t0);
        rig.stays_still();
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        eprintln!(
            "pod deleted mid-restore: restored in {restored_at:?}, settled in {settled_at:?}; {:?}",
            rig.reconciler.stats()
        );
    });
}

/// The webhook down while a restore is in progress (failurePolicy Fail):
/// the control-plane-operator's StatefulSet writes are refused and wait;
/// the pods, already made from the mutated template, restore; the
/// condition is set; etcd-init stays in the template (harmless: every
/// member has data) until the webhook is back, then it leaves and the roll
/// runs. Before the StatefulSet exists, nothing is made at all: no pod ever
/// runs the control-plane-operator's own etcd-init.
fn the_webhook_down_during_a_restore_holds_the_statefulset_writes(rig: &Rig<'_>) {
    let ns = rig.ns.as_str();
    let t0 = Instant::now();
    // Down before the first write: the create is refused, nothing exists.
    rig.stop_webhook();
    rig.reconciling(|| {
        rig.wait("a refused create", Duration::from_secs(60), |r| r.reconciler.stats().refused > 0);
        std::thread::sleep(Duration::from_secs(5));
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        let st = rig.reconciler.stats();
        assert!(st.last_refusal.contains("failed calling webhook"), "{st:?}");
        assert!(!rig.sh(&format!("kubectl -n {ns} get statefulset etcd")).status.success(), "made without the webhook");
        assert_eq!(rig.store_downloads(), 0);
    });
    rig.start_webhook();
    rig.reconciling(|| {
        rig.wait("etcd-init running", Duration::from_secs(300), |r| r.init_running("etcd-0", "etcd-init"));
        // Down mid-restore.
        let refused = rig.reconciler.stats().refused;
        rig.stop_webhook();
        rig.wait("EtcdSnapshotRestored", Duration::from_secs(600), |r| r.condition().is_some());
        assert_eq!(rig.condition().as_deref(), Some("True"), "{}", rig.describe());
        rig.wait("a refused update", Duration::from_secs(60), |r| r.reconciler.stats().refused > refused);
        assert!(rig.init_in_template(), "etcd-init left the template without the webhook");
        rig.reconciler.stop.store(true, Ordering::SeqCst);
    });
    // Back: the removal goes through, the roll runs, one cluster.
    rig.start_webhook();
    rig.reconciling(|| {
        let (restored_at, settled_at) = rig.completes(t0);
        rig.stays_still();
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        eprintln!("webhook down: restored in {restored_at:?}, settled in {settled_at:?}; {:?}", rig.reconciler.stats());
    });
}

/// One member's volume lost after the restore (its PVC deleted, a new
/// empty volume bound): etcd-init is out of the template, so upstream's
/// reset-member removes and re-adds the member and etcd joins as
/// `existing`; one cluster again, the member holds the data, and the
/// reconciler writes nothing.
fn a_volume_lost_after_the_restore_rejoins_through_reset_member(rig: &Rig<'_>) {
    let ns = rig.ns.as_str();
    let t0 = Instant::now();
    rig.reconciling(|| {
        rig.completes(t0);
        let writes = rig.reconciler.stats().writes;
        assert!(rig.etcdctl("etcd-0", "put /registry/after-restore restored").status.success());
        write(&rig.work.join("pv-new.yaml"), rig.pv_yaml(2));
        rig.must(&format!("kubectl -n {ns} delete pvc data-etcd-2 --wait=false"));
        rig.delete_pods(&["etcd-2"], Duration::from_secs(120));
        rig.must("kubectl apply -f pv-new.yaml");
        rig.wait("etcd-2 back and the StatefulSet settled", Duration::from_secs(300), |r| r.settled());
        let log = rig.must(&format!("kubectl -n {ns} logs etcd-2 -c reset-member"));
        assert!(log.contains("A member with this name (etcd-2) already exists, removing"), "{log}");
        rig.wait("etcd-2 synced", Duration::from_secs(60), |r| {
            String::from_utf8_lossy(&r.etcdctl("etcd-2", "get /registry/after-restore --print-value-only").stdout)
                .trim()
                == "restored"
        });
        rig.assert_one_cluster_with_the_snapshot();
        assert_eq!(rig.reconciler.stats().writes, writes, "the reconciler wrote the StatefulSet");
        rig.reconciler.stop.store(true, Ordering::SeqCst);
    });
}

/// A quorum lost after the restore (two volumes gone) and the runbook's
/// recovery (docs/restore.md, "a live etcd member runs there ... and no
/// healthy cluster answers"): pause the control plane and scale etcd to 0;
/// start a copy of the survivor's data dir with `--force-new-cluster` on a
/// spare address and `snapshot save` it; restore every member from that
/// file with a new HostedControlPlane incarnation. Every write the survivor
/// held is back, in one cluster, above every revision the old one served.
fn a_quorum_lost_after_the_restore_recovers_by_the_runbook(rig: &Rig<'_>) {
    let ns = rig.ns.as_str();
    let t0 = Instant::now();
    let served = rig.reconciling(|| {
        rig.completes(t0);
        assert!(rig.etcdctl("etcd-0", "put /registry/after-restore written").status.success());
        let out = rig.etcdctl("etcd-0", "endpoint status -w json");
        let v: Value = serde_json::from_slice(&out.stdout).expect("status");
        // The quorum lost: two members' volumes gone while they run (their
        // claims deleted; no volume is there for the new claims, so their
        // pods stay Pending). The survivor answers without a leader.
        rig.must(&format!("kubectl -n {ns} delete pvc data-etcd-1 data-etcd-2 --wait=false"));
        rig.delete_pods(&["etcd-1", "etcd-2"], Duration::from_secs(120));
        rig.wait("etcd-0 without a quorum", Duration::from_secs(120), |r| {
            !r.etcdctl("etcd-0", "endpoint health").status.success()
        });
        // 1. Paused (`spec.pausedUntil`): the control-plane-operator does
        //    nothing for this HostedControlPlane; here, it stops.
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        v[0]["Status"]["header"]["revision"].as_u64().expect("revision")
    });
    rig.must(&format!(
        "kubectl -n {ns} scale statefulset etcd --replicas=0\n\
         kubectl -n {ns} wait --for=delete pod -l app=etcd --timeout=180s"
    ));
    let pv = |i: usize| rig.work.join("pv").join(format!("data-etcd-{i}-{i}"));
    // 2. A copy of the survivor's data dir, --force-new-cluster on a spare
    //    address, `snapshot save`.
    let copy = rig.work.join("survivor-copy");
    assert!(Command::new("cp").arg("-a").arg(pv(0).join("data")).arg(&copy).status().expect("cp").success());
    let (rescue, ep) = local_etcd("etcd-0", &copy, &["--force-new-cluster"]);
    let ctl = |args: &[&str]| etcdctl_at(&ep, args);
    let rescued = rig.node.work.join("store/snapshots/rescued.db");
    assert!(ctl(&["snapshot", "save", &rescued.to_string_lossy()]).status.success());
    drop(rescue);
    // 3. Every member restored from that one file: a new HostedControlPlane
    //    incarnation (restoreSnapshotURL is immutable), new volumes.
    rig.must(&format!("kubectl delete namespace {ns} --timeout=300s"));
    let url = rig.url.replace(&format!("/snapshots/{}.db", rig.name()), "/snapshots/rescued.db");
    rig.hosted_control_plane(&url);
    let t1 = Instant::now();
    rig.reconciling(|| {
        let (restored_at, settled_at) = rig.completes(t1);
        for i in 0..3 {
            let got = rig.etcdctl(&format!("etcd-{i}"), "get /registry/after-restore -w fields");
            let text = String::from_utf8_lossy(&got.stdout).into_owned();
            assert!(text.contains("\"Value\" : \"written\""), "etcd-{i} lost the survivor's write: {text}");
            let rev = text
                .lines()
                .find_map(|l| l.strip_prefix("\"Revision\" : "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            assert!(rev > served, "etcd-{i} serves revision {rev}, not above the old cluster's {served}");
        }
        rig.reconciler.stop.store(true, Ordering::SeqCst);
        eprintln!("quorum loss, runbook: restored in {restored_at:?}, settled in {settled_at:?}");
    });
}

type Scenario = fn(&Rig<'_>);

/// The five scenarios, at once on one cluster: each in a namespace of its
/// own with its own webhook server, registration, reconciler and volumes
/// (one cluster per machine at a time; together they take as long as the
/// longest). Every scenario runs to its end; the test fails naming each
/// one that failed, with its message.
#[test]
fn the_restore_loop_in_a_real_cluster() {
    let Some(node) = Node::up() else { return };
    let scenarios: [(&str, Scenario); 5] = [
        ("first", the_first_restore_of_three_members_runs_the_whole_loop),
        ("podgone", a_pod_deleted_mid_restore_comes_back_into_the_same_cluster),
        ("whdown", the_webhook_down_during_a_restore_holds_the_statefulset_writes),
        ("pvclost", a_volume_lost_after_the_restore_rejoins_through_reset_member),
        ("quorum", a_quorum_lost_after_the_restore_recovers_by_the_runbook),
    ];
    let t0 = Instant::now();
    let results: Vec<(&str, Result<(), String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = scenarios
            .iter()
            .enumerate()
            .map(|(k, &(name, run))| {
                let node = &node;
                let h = std::thread::Builder::new()
                    .name(name.to_string())
                    .spawn_scoped(s, move || {
                        let rig = Rig::new(node, k as u16, name);
                        run(&rig);
                        rig.reconciler.stop.store(true, Ordering::SeqCst);
                    })
                    .expect("thread");
                (name, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, h)| {
                let r = h.join().map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "(its panic message is above)".to_string())
                });
                (name, r)
            })
            .collect()
    });
    eprintln!("the five scenarios took {:?}", t0.elapsed());
    let failed: Vec<String> =
        results.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| format!("--- scenario {n}:\n{e}"))).collect();
    assert!(failed.is_empty(), "{} of 5 scenarios failed:\n{}", failed.len(), failed.join("\n"));
}
