//! The backup verify step end to end, on real etcd (issue #33).
//!
//! HyperShift's backup Job, as `hypershift-operator/controllers/etcdbackup/
//! reconciler.go` builds it (`../shared/reference/hypershift-facts.md` §2,
//! "The Job": `fetch-certs`, `snapshot` running `/usr/bin/etcdctl --endpoints
//! https://etcd-client.<ns>.svc:2379 --cacert … --cert … --key … snapshot save
//! /etc/etcd-backup/snapshot.db`, `upload`), is mutated by the webhook's
//! decision (a Job CREATE review through `admission::review`), and its
//! containers run as the kubelet runs a pod with `restartPolicy: Never`:
//! init containers in order, each must exit 0, then the main container.
//! Each container's env and command come from the mutated object, `$(VAR)`
//! expanded; each volume mount is a bind of the pod's volume onto its
//! mountPath in a private mount namespace, whose /etc/hosts resolves the
//! `etcd-client` Service name to the live etcd (TLS with client
//! certificates), and whose /dev/termination-log is a file the test reads.
//!
//! What the test does in the kubelet's and the operator's place, and says so:
//! `fetch-certs` (the control-plane-operator copying the etcd client
//! certificates) is replaced by writing them into the `etcd-certs` volume;
//! the image's `/usr/bin/etcdctl` is the etcd version under test; `upload`
//! (the control-plane-operator's uploader) is a copy into a directory that
//! stands for the bucket. Between `snapshot` and `verify` a case may replace
//! the saved file (truncated, corrupt, empty, an error document, another
//! cluster's snapshot, a newer etcd's): what a failing save or disk gives.

mod common;
use common::Proc;

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::kubelet::{expand, in_namespace, private_dev};
use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    settings::Settings,
};
use serde_json::{json, Value};

const NS: &str = "clusters-hc1";
const SERVICE: &str = "etcd-client.clusters-hc1.svc";

struct Tools {
    /// Whether etcd writes a storage version (3.6 and later), a moment after it starts.
    storage_version: bool,
    etcd: PathBuf,
    etcdctl: PathBuf,
    etcdutl: PathBuf,
}

fn tools(label: &'static str) -> Tools {
    let tool = format!("etcd-{label}");
    Tools {
        storage_version: label != "3.5",
        etcd: common::tools::go_bin(&tool, "etcd"),
        etcdctl: common::tools::go_bin(&tool, "etcdctl"),
        etcdutl: common::tools::go_bin(&tool, "etcdutl"),
    }
}

fn ready(test: &str, labels: &[&'static str]) -> bool {
    let mut needs = vec![
        common::env::Need::Root,
        common::env::Need::Program("/usr/bin/unshare", "apt-get install util-linux"),
        common::env::Need::Program("sha256sum", "coreutils"),
    ];
    for label in labels {
        let tool: &'static str = match *label {
            "3.5" => "etcd-3.5",
            "3.6" => "etcd-3.6",
            _ => "etcd-3.7",
        };
        for bin in ["etcd", "etcdctl", "etcdutl"] {
            needs.push(common::tools::go_tool(tool, bin));
        }
    }
    common::env::ready(test, &needs)
}

fn tmp(tag: &str) -> PathBuf {
    common::fresh_dir("hcp-backup", tag)
}

/// A CA, a server certificate for the Service name and the address, and a client certificate.
fn certs(dir: &Path, ips: &[Ipv4Addr]) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "etcd-signer");
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca, ca_key);
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).expect("ca");
    for (name, sans, usage) in [
        (
            "server",
            std::iter::once(SERVICE.to_string()).chain(ips.iter().map(Ipv4Addr::to_string)).collect(),
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        ("etcd-client", vec![], ExtendedKeyUsagePurpose::ClientAuth),
    ] {
        let mut p = CertificateParams::new(sans).expect("params");
        p.extended_key_usages = vec![usage];
        p.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &issuer).expect("sign");
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).expect("crt");
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("key");
    }
}

/// An etcd cluster of `members` on 127.0.`subnet`.`host`.. (one address
/// each): clients over TLS with client certificates when `tls` holds the
/// certificates, plain HTTP otherwise; the first member's client URL.
fn etcd(t: &Tools, dir: &Path, subnet: u8, host: u8, members: u8, tls: Option<&Path>) -> (Vec<Proc>, String) {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let ip = |i: u8| Ipv4Addr::new(127, 0, subnet, host + i);
    let initial: Vec<String> = (0..members).map(|i| format!("etcd-{i}=http://{}:2380", ip(i))).collect();
    let mut procs = Vec::new();
    for i in 0..members {
        let client = format!("{scheme}://{}:2379", ip(i));
        let peer = format!("http://{}:2380", ip(i));
        let mut cmd = Command::new(&t.etcd);
        cmd.args(["--name", &format!("etcd-{i}"), "--data-dir"])
            .arg(dir.join(format!("etcd-{i}")))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args([
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-token",
                &format!("live-{subnet}-{host}"),
            ])
            .args(["--listen-metrics-urls", &format!("http://{}:2381", ip(i))]);
        if let Some(c) = tls {
            cmd.arg("--cert-file").arg(c.join("server.crt")).arg("--key-file").arg(c.join("server.key"));
            cmd.arg("--trusted-ca-file").arg(c.join("ca.crt")).arg("--client-cert-auth");
        }
        procs.push(Proc(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("etcd")));
    }
    let client = format!("{scheme}://{}:2379", ip(0));
    let start = Instant::now();
    while !ctl(t, &client, tls, &["endpoint", "health", "--cluster"]).0 {
        assert!(start.elapsed() < Duration::from_secs(60), "etcd at {client} never became healthy");
        std::thread::sleep(Duration::from_millis(200));
    }
    // etcd >= 3.6 records its storage version a moment after the cluster
    // version is decided: a snapshot saved before has none.
    while t.storage_version && !ctl(t, &client, tls, &["endpoint", "status", "-w", "json"]).1.contains("storageVersion")
    {
        assert!(start.elapsed() < Duration::from_secs(60), "etcd at {client} never recorded its storage version");
        std::thread::sleep(Duration::from_millis(200));
    }
    (procs, client)
}

fn ctl(t: &Tools, endpoint: &str, tls: Option<&Path>, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(&t.etcdctl);
    cmd.arg("--endpoints").arg(endpoint).args(args);
    if let Some(c) = tls {
        cmd.arg("--cacert").arg(c.join("ca.crt"));
        cmd.arg("--cert").arg(c.join("etcd-client.crt")).arg("--key").arg(c.join("etcd-client.key"));
    }
    let out = cmd.output().expect("etcdctl");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A snapshot of another cluster (other keys), or of another etcd version.
fn other_snapshot(t: &Tools, root: &Path, subnet: u8, tag: &str, keys: usize) -> Vec<u8> {
    let dir = root.join(format!("other-{tag}"));
    let (_p, client) = etcd(t, &dir.join("data"), subnet, 10, 1, None);
    for i in 1..=keys {
        assert!(ctl(t, &client, None, &["put", &format!("/registry/other/{i}"), "x"]).0);
    }
    let file = dir.join("s.db");
    assert!(ctl(t, &client, None, &["snapshot", "save", &file.to_string_lossy()]).0, "snapshot save");
    std::fs::read(&file).expect("snapshot")
}

/// HyperShift's backup Job (reconciler.go), mutated by the webhook's decision.
fn mutated_job(settings: &Value) -> Value {
    let job = common::hypershift_backup_job("hypershift", NS, "etcd-backup-daily-x7k2p");
    let rev = common::admission_review("b-1", "jobs", None, "CREATE", Some(&job), None);
    let settings = Settings::from_json(settings).expect("settings");
    let input = DecisionInput { settings: &settings, lookup: None, now: Ok(0), expect: None };
    let answer = review(&rev, &input).expect("review");
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patch = common::decode_patch(&answer["response"]).expect("a patch").expect("a JSON patch");
    let mut out = job;
    json_patch::patch(&mut out, &patch).expect("patch applies");
    out
}

/// One pod of the Job on this machine.
struct Pod<'a> {
    t: &'a Tools,
    root: PathBuf,
    bin: PathBuf,
    hosts: PathBuf,
    certs: PathBuf,
}

impl Pod<'_> {
    fn volume(&self, name: &str) -> PathBuf {
        let d = self.root.join("volumes").join(name);
        std::fs::create_dir_all(&d).expect("volume");
        d
    }

    /// Runs container `c` as the kubelet would: (exit code, stderr, termination message).
    fn run(&self, c: &Value) -> (i32, String, String) {
        self.run_with(c, &[])
    }

    /// [`Self::run`], with `extra` mount steps after the volumes' (a full volume).
    fn run_with(&self, c: &Value, extra: &[String]) -> (i32, String, String) {
        let mut env: Vec<(String, String)> = Vec::new();
        for e in c["env"].as_array().cloned().unwrap_or_default() {
            let value = expand(e["value"].as_str().expect("literal env values only"), &env);
            env.push((e["name"].as_str().expect("name").to_string(), value));
        }
        let mut argv: Vec<String> = ["command", "args"]
            .iter()
            .filter_map(|k| c[*k].as_array())
            .flatten()
            .filter_map(|s| s.as_str().map(|s| expand(s, &env)))
            .collect();
        // The image's etcdctl is the version under test.
        if argv.first().is_some_and(|a| a == "/usr/bin/etcdctl") {
            argv[0] = self.t.etcdctl.to_string_lossy().into_owned();
        }
        let name = c["name"].as_str().expect("name");
        let term = self.root.join(format!("{name}.termination-log"));
        let mut setup = vec![format!("mount --bind '{}' /etc/hosts", self.hosts.display())];
        for vm in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let target = vm["mountPath"].as_str().expect("mountPath");
            let source = self.volume(vm["name"].as_str().expect("volume"));
            setup.push(format!("mkdir -p '{target}'"));
            setup.push(format!("mount --bind '{}' '{target}'", source.display()));
        }
        setup.extend(extra.iter().cloned());
        setup.extend(private_dev(&term));
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut cmd = in_namespace(&setup, &args);
        cmd.env_clear().env("PATH", format!("{}:/usr/bin:/bin", self.bin.display())).env("HOME", "/root");
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("container");
        let message = std::fs::read_to_string(&term).unwrap_or_default();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), message)
    }
}

/// What one run of the Job's pod did.
struct Ran {
    verify_code: i32,
    verify_log: String,
    manifest: Value,
    uploaded: Option<Vec<u8>>,
}

/// Runs the pod: `fetch-certs` (the certificates written in its place),
/// `snapshot`, then `tamper` on the saved file, `verify`, and `upload` (a
/// copy into the bucket directory) only when every init container exited 0.
fn run_job(pod: &Pod<'_>, job: &Value, tamper: &dyn Fn(&Path)) -> Ran {
    run_job_with(pod, job, tamper, &[])
}

/// [`run_job`], with `verify_setup` as extra mount steps of the verify container.
fn run_job_with(pod: &Pod<'_>, job: &Value, tamper: &dyn Fn(&Path), verify_setup: &[String]) -> Ran {
    let _ = std::fs::remove_dir_all(pod.root.join("volumes"));
    let _ = std::fs::remove_dir_all(pod.root.join("bucket"));
    let certs = pod.volume("etcd-certs");
    for f in ["ca.crt", "etcd-client.crt", "etcd-client.key"] {
        std::fs::copy(pod.certs.join(f), certs.join(f)).expect("certs");
    }
    let spec = &job["spec"]["template"]["spec"];
    let inits = spec["initContainers"].as_array().expect("init containers");
    let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["fetch-certs", "snapshot", "verify"], "the verify step follows the snapshot");
    let (code, log, _) = pod.run(&inits[1]);
    assert_eq!(code, 0, "snapshot save: {log}");
    tamper(&pod.volume("etcd-backup").join("snapshot.db"));
    let (verify_code, verify_log, message) = pod.run_with(&inits[2], verify_setup);
    let manifest: Value = serde_json::from_str(message.trim())
        .unwrap_or_else(|e| panic!("the termination message is one JSON manifest ({e}): {message:?}\n{verify_log}"));
    let uploaded = (verify_code == 0).then(|| {
        // upload: the control-plane-operator's uploader, a copy here.
        let bucket = pod.root.join("bucket");
        std::fs::create_dir_all(&bucket).expect("bucket");
        let snap = pod.volume("etcd-backup").join("snapshot.db");
        std::fs::copy(&snap, bucket.join("1764950400.db")).expect("upload");
        std::fs::read(bucket.join("1764950400.db")).expect("uploaded")
    });
    Ran { verify_code, verify_log, manifest, uploaded }
}

fn failed_check(m: &Value) -> String {
    m["failures"][0]["check"].as_str().unwrap_or_default().to_string()
}

fn sha256_hex(b: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b).expect("write");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

/// The live cluster (three members; the `etcd-client` Service name resolves
/// to the first), its keys, the pod's hosts file and the image's tools.
fn rig<'a>(t: &'a Tools, root: &Path, subnet: u8) -> (Pod<'a>, Vec<Proc>, String) {
    let ip = Ipv4Addr::new(127, 0, subnet, 1);
    let certs = root.join("pki");
    std::fs::create_dir_all(&certs).expect("pki");
    let ips: Vec<Ipv4Addr> = (1..=3).map(|h| Ipv4Addr::new(127, 0, subnet, h)).collect();
    self::certs(&certs, &ips);
    let (live, client) = etcd(t, &root.join("live"), subnet, 1, 3, Some(&certs));
    for i in 1..=5 {
        assert!(ctl(t, &client, Some(&certs), &["put", &format!("/registry/test/key{i}"), &format!("v{i}")]).0);
    }
    // A Secret as the kube-apiserver seals it with an aescbc key named key1.
    assert!(ctl(t, &client, Some(&certs), &["put", "/registry/secrets/ns/s", "k8s:enc:aescbc:v1:key1:\u{1}sealed"]).0);
    let hosts = root.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{ip} {SERVICE}\n")).expect("hosts");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    for (name, target) in [("etcd", &t.etcd), ("etcdctl", &t.etcdctl), ("etcdutl", &t.etcdutl)] {
        let _ = std::fs::remove_file(bin.join(name));
        std::os::unix::fs::symlink(target, bin.join(name)).expect("symlink");
    }
    (Pod { t, root: root.to_path_buf(), bin, hosts, certs }, live, client)
}

fn enforced() -> Value {
    json!({"enforcement": {"rules": {"backup-verified": "deny"}}})
}

/// A good snapshot verifies and its manifest is uploaded with it; every bad
/// one fails the Job before the upload, naming the check.
fn good_and_bad_snapshots(label: &'static str, newer: Option<&'static str>, subnet: u8) {
    let t = tools(label);
    let root = tmp(&format!("verify-{label}"));
    let (pod, _live, client) = rig(&t, &root, subnet);
    let has_hashkv = label != "3.5";

    // A good snapshot, warn mode (the default): verified, uploaded.
    let job = mutated_job(&json!({}));
    let ran = run_job(&pod, &job, &|_| {});
    let m = &ran.manifest;
    assert_eq!((ran.verify_code, m["verified"].as_bool()), (0, Some(true)), "{m}\n{}", ran.verify_log);
    assert_eq!(m["enforced"], false);
    let uploaded = ran.uploaded.expect("a verified snapshot is uploaded");
    assert_eq!(m["file"]["sha256"], sha256_hex(&uploaded), "the manifest names the uploaded bytes");
    assert_eq!(m["file"]["bytes"], uploaded.len());
    let (_, status) = ctl(&t, &client, Some(&pod.certs), &["endpoint", "status", "-w", "json"]);
    let live: Value = serde_json::from_str(&status).expect("status json");
    let live_rev = live[0]["Status"]["header"]["revision"].as_u64().expect("revision");
    assert_eq!(m["snapshot"]["revision"], live_rev, "{m}");
    assert_eq!(m["live"]["revision"], live_rev, "{m}");
    assert_eq!(m["snapshot"]["totalKey"].as_u64().map(|k| k >= 6), Some(true), "{m}");
    assert_eq!(m["hostedControlPlane"], json!({"namespace": NS, "name": "hc1"}));
    assert_eq!(m["backup"], "daily");
    assert!(m["encryptionKeys"].as_str().is_some_and(|k| k.contains("k8s:enc:aescbc:v1:key1:")), "{m}");
    assert!(!m.to_string().contains("sealed"), "names only, never data: {m}");
    if has_hashkv {
        let rev = format!("--rev={live_rev}");
        let (_, kv) = ctl(&t, &client, Some(&pod.certs), &["endpoint", "hashkv", "--cluster", &rev, "-w", "json"]);
        let kv: Value = serde_json::from_str(&kv).expect("hashkv json");
        let members = kv.as_array().expect("members");
        assert_eq!(members.len(), 3, "{kv}");
        for member in members {
            assert_eq!(m["kvHash"]["live"], member["HashKV"]["hash"], "every member: {m} {kv}");
        }
        assert_eq!(m["kvHash"]["snapshot"], m["kvHash"]["live"], "{m}");
        assert_eq!(m["snapshot"]["storageVersion"].as_str().map(|v| v.starts_with(label)), Some(true), "{m}");
    } else {
        assert!(m["notChecked"].to_string().contains("has no hashkv"), "said so: {m}");
    }
    let beside = std::fs::read_to_string(pod.volume("etcd-backup").join("snapshot.db.manifest.json")).expect("beside");
    assert_eq!(serde_json::from_str::<Value>(&beside).ok().as_ref(), Some(m), "the manifest beside the snapshot");

    // Every bad snapshot, enforced: the Job fails, nothing is uploaded.
    let job = mutated_job(&enforced());
    // Another cluster's snapshot, at a revision below the live cluster's (its
    // KV hash differs) and above it (revisions never go back).
    let foreign = other_snapshot(&t, &root, subnet, "foreign", 3);
    let ahead = other_snapshot(&t, &root, subnet, "ahead", 12);
    let newer = newer.map(|n| other_snapshot(&tools(n), &root, subnet, "newer", 3));
    type Tamper = Box<dyn Fn(&Path)>;
    let mut cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "truncated",
            Box::new(|f: &Path| {
                let b = std::fs::read(f).expect("read");
                std::fs::write(f, &b[..b.len() / 2]).expect("truncate");
            }),
            "integrity",
        ),
        (
            "corrupt",
            Box::new(|f: &Path| {
                let mut b = std::fs::read(f).expect("read");
                let mid = b.len() / 2;
                b[mid] ^= 0xff;
                std::fs::write(f, &b).expect("corrupt");
            }),
            "integrity",
        ),
        ("empty", Box::new(|f: &Path| std::fs::write(f, b"").expect("empty")), "empty"),
        ("another cluster ahead", Box::new(move |f: &Path| std::fs::write(f, &ahead).expect("w")), "revision"),
        (
            "error document",
            Box::new(|f: &Path| {
                std::fs::write(f, b"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code></Error>").expect("xml")
            }),
            "error-document",
        ),
    ];
    if has_hashkv {
        let bytes = foreign.clone();
        cases.push(("foreign cluster", Box::new(move |f: &Path| std::fs::write(f, &bytes).expect("w")), "kv-hash"));
    }
    if let Some(bytes) = newer.clone() {
        cases.push((
            "newer storage version",
            Box::new(move |f: &Path| std::fs::write(f, &bytes).expect("w")),
            "storage-version",
        ));
    }
    for (case, tamper, check) in &cases {
        let ran = run_job(&pod, &job, tamper.as_ref());
        assert_eq!(ran.verify_code, 1, "{case}: the Job fails\n{}", ran.verify_log);
        assert!(ran.uploaded.is_none(), "{case}: never uploaded");
        assert_eq!(ran.manifest["verified"], false, "{case}");
        assert_eq!(failed_check(&ran.manifest), *check, "{case}: {}", ran.manifest);
        let message = ran.manifest["failures"][0]["message"].as_str().unwrap_or_default();
        assert!(message.len() > 30, "{case}: a message that says what failed: {message}");
    }
    if !has_hashkv {
        // etcd 3.5's tools have no hashkv: another cluster's snapshot below the
        // live revision restores and is not recognised (the manifest says the
        // check did not run).
        let bytes = foreign;
        let ran = run_job(&pod, &job, &move |f: &Path| std::fs::write(f, &bytes).expect("w"));
        assert_eq!(ran.verify_code, 0, "{}", ran.verify_log);
        assert!(ran.manifest["notChecked"].to_string().contains("no hashkv"), "{}", ran.manifest);
    }

    // Warn mode: the failure is reported, the upload goes on.
    let job = mutated_job(&json!({}));
    let ran = run_job(&pod, &job, &|f: &Path| {
        let b = std::fs::read(f).expect("read");
        std::fs::write(f, &b[..b.len() - 100]).expect("truncate");
    });
    assert_eq!((ran.verify_code, ran.manifest["verified"].as_bool()), (0, Some(false)), "{}", ran.manifest);
    assert!(ran.uploaded.is_some(), "warn mode uploads");
    assert!(ran.verify_log.contains("warn mode"), "{}", ran.verify_log);

    // What the step cannot judge is "not checked", never a failure, even enforced.
    let job = mutated_job(&enforced());
    // No room for a trial restore (a 512 KiB scratch volume).
    let scratch = "/etc/etcd-backup/verify-scratch";
    let full = [format!("mkdir -p '{scratch}' && mount -t tmpfs -o size=512k tmpfs '{scratch}'")];
    let ran = run_job_with(&pod, &job, &|_| {}, &full);
    assert_eq!(ran.verify_code, 0, "{}\n{}", ran.manifest, ran.verify_log);
    assert!(ran.uploaded.is_some() && ran.manifest["verified"] == true, "{}", ran.manifest);
    assert!(ran.manifest["notChecked"].to_string().contains("no trial restore"), "{}", ran.manifest);
    if has_hashkv {
        // The live cluster compacts between the save and the check (kube-apiserver
        // compacts every 5 minutes): the KV hashes are not comparable, not different.
        let certs = pod.certs.clone();
        let ran = run_job(&pod, &job, &|_| {
            let (_, status) = ctl(&t, &client, Some(&certs), &["endpoint", "status", "-w", "json"]);
            let rev = serde_json::from_str::<Value>(&status).expect("status")[0]["Status"]["header"]["revision"]
                .as_u64()
                .expect("revision");
            for i in 0..3 {
                assert!(ctl(&t, &client, Some(&certs), &["put", &format!("/registry/later/{i}"), "x"]).0);
            }
            // Below the snapshot's revision, as kube-apiserver compacts (to 5 minutes ago).
            assert!(ctl(&t, &client, Some(&certs), &["compaction", &(rev - 2).to_string()]).0, "compaction");
        });
        assert_eq!(ran.verify_code, 0, "{}\n{}", ran.manifest, ran.verify_log);
        assert_eq!(ran.manifest["verified"], true, "{}", ran.manifest);
        assert!(ran.manifest["notChecked"].to_string().contains("since the save"), "{}", ran.manifest);
        assert_eq!(ran.manifest["kvHash"]["live"], Value::Null, "{}", ran.manifest);
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd36() {
    if ready("a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd36", &["3.6", "3.7"]) {
        good_and_bad_snapshots("3.6", Some("3.7"), 81);
    }
}

#[test]
fn a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd37() {
    if ready("a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd37", &["3.7"]) {
        good_and_bad_snapshots("3.7", None, 82);
    }
}

/// etcd 3.5 (HyperShift's etcd before 4.20): no `etcdutl hashkv`, so the
/// checks 3.5 supports; a newer storage version is still found (read from the bytes).
#[test]
fn a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd35() {
    if ready("a_backup_verifies_before_upload_and_bad_snapshots_fail_the_job_etcd35", &["3.5", "3.6"]) {
        good_and_bad_snapshots("3.5", Some("3.6"), 83);
    }
}

/// The snapshot-facts block (free space, storage version) is one piece of code in both scripts.
#[test]
fn the_snapshot_facts_are_the_same_in_etcd_init_and_the_verify_step() {
    let block = |file: &str| {
        let s = std::fs::read_to_string(common::root().join("src/mutate").join(file)).expect("script");
        let a = s.find("# BEGIN snapshot-facts").expect("begin");
        let b = s.find("# END snapshot-facts").expect("end");
        s[a..b].to_string()
    };
    assert_eq!(block("etcd-init.sh"), block("backup-verify.sh"));
}

#[test]
fn the_verify_script_is_shellcheck_clean() {
    if !common::env::ready("the_verify_script_is_shellcheck_clean", &common::env::script_checkers()) {
        return;
    }
    let script = common::root().join("src/mutate/backup-verify.sh");
    let out = Command::new("shellcheck").args(["-s", "sh"]).arg(&script).output().expect("shellcheck");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    for shell in [&["/bin/dash", "-n"][..], &["/bin/bash", "-n"], &["/bin/busybox", "sh", "-n"]] {
        let out = Command::new(shell[0]).args(&shell[1..]).arg(&script).output().expect("shell");
        assert!(out.status.success(), "{shell:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
