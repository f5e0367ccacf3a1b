//! `hcp-etcd-admission serve` as a process: the README's run command works
//! with no certificates (a dev CA is made), and SIGTERM drains: `/readyz`
//! turns 503 at once, new connections keep being served for the drain delay
//! (zero failures), then accepting stops and the request in flight finishes.

mod common;

use std::{process::Command, time::Duration};

use common::https::Client;
use common::running::spawn_serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_makes_a_dev_certificate_and_drains_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-proc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A 2 s drain; bodies may take 10 s so the in-flight request outlives it.
    let (mut child, addr) = spawn_serve(
        &dir,
        &[
            "--drain-seconds",
            "2",
            "--shutdown-grace-seconds",
            "5",
            "--body-timeout-ms",
            "10000",
            "--request-timeout-ms",
            "12000",
        ],
    );
    let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("dev CA written");
    let client = Client::new(&[&ca], None);
    assert_eq!(client.request(addr, "GET", "/readyz", vec![]).await.expect("readyz").status, 200);

    // Same answer as `review` for a sample from tests/.
    let sample = std::fs::read(common::root().join("tests/reviews/hcpetcdbackup-create-s3.json")).expect("sample");
    let wire = client.request(addr, "POST", "/validate/hcpetcdbackups", sample.clone()).await.expect("post").json();
    let cli = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["review", "tests/reviews/hcpetcdbackup-create-s3.json"])
        .current_dir(common::root())
        .output()
        .expect("review");
    assert_eq!(wire, serde_json::from_slice::<serde_json::Value>(&cli.stdout).expect("json"));

    // Start a request, send half of its body, then SIGTERM.
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let config = {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.expect("pem")).expect("root");
        }
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()
    };
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(rustls::pki_types::ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("tls");
    let head = format!(
        "POST /validate/hcpetcdbackups HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        sample.len()
    );
    tls.write_all(head.as_bytes()).await.expect("head");
    let half = sample.len() / 2;
    tls.write_all(&sample[..half]).await.expect("first half");
    tls.flush().await.expect("flush");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = child.id().to_string();
    let term_at = std::time::Instant::now();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The drain window: not ready, yet every new connection is served.
    let (mut served, mut failures, mut readyz_503) = (0, Vec::new(), 0);
    while term_at.elapsed() < Duration::from_millis(1700) {
        match client.request(addr, "POST", "/validate/hcpetcdbackups", sample.clone()).await {
            Ok(r) if r.status == 200 && r.json()["response"]["allowed"] == true => served += 1,
            Ok(r) => failures.push(format!("status {}: {}", r.status, r.text())),
            Err(e) => failures.push(e),
        }
        match client.request(addr, "GET", "/readyz", vec![]).await {
            Ok(r) if r.status == 503 => readyz_503 += 1,
            Ok(r) => failures.push(format!("/readyz answered {} during the drain", r.status)),
            Err(e) => failures.push(format!("/readyz: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures during the drain: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(served >= 5 && readyz_503 >= 5, "served {served}, /readyz 503 {readyz_503}");
    // After the drain delay: accepting stops.
    tokio::time::sleep(Duration::from_millis(2600).saturating_sub(term_at.elapsed())).await;
    assert!(
        client.request(addr, "GET", "/healthz", vec![]).await.is_err(),
        "new connections must be refused once the drain delay is over"
    );
    tls.write_all(&sample[half..]).await.expect("second half");
    tls.flush().await.expect("flush");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "in-flight request was not completed: {text:?}");
    assert!(text.contains("\"allowed\":true"), "{text}");
    let status = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("wait");
    assert!(status.success(), "serve exited with {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn client_ca_without_an_allow_list_refuses_to_start() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-ca-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let set = hcp_etcd_admission::server::certs::generate("client CA", &["localhost".into()], 2).expect("certs");
    std::fs::write(dir.join("ca.crt"), &set.ca_pem).expect("ca");
    let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["serve", "--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "never", "--client-ca"])
        .arg(dir.join("ca.crt"))
        .arg("--dev-cert-dir")
        .arg(dir.join("dev"))
        .output()
        .expect("serve");
    assert!(!out.status.success(), "started without an allow-list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allowed-client-names") && err.contains("--allow-any-client-of-ca"), "{err}");
}

/// `serve` as a process with stderr in a file (the log lines are checked).
fn spawn_logged(
    dir: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, std::path::PathBuf) {
    std::fs::create_dir_all(dir).expect("dir");
    let log = dir.join("serve.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
    cmd.args(["serve", "--drain-seconds", "0", "--dev-cert-dir"])
        .arg(dir.join("dev"))
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    (cmd.spawn().expect("spawn serve"), log)
}

/// Waits until the log says where the server listens.
async fn listening(log: &std::path::Path) -> std::net::SocketAddr {
    for _ in 0..600 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(a) = text.lines().find_map(|l| l.strip_prefix("listening on https://")) {
            return a.parse().expect("addr");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("serve did not start: {}", std::fs::read_to_string(log).unwrap_or_default());
}

/// A warn-mode review is counted per rule (webhook, rule id, result), the
/// review log line names the rules and the user, `build_info` carries the
/// version and commit, and the start-up log the version. Development mode
/// with a kubeconfig present does not watch that cluster (it says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_results_are_counted_and_logged_with_the_user() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-rules-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("settings.yaml"), "backupPreflight: false\nenforcement: {mode: warn}\n").expect("cfg");
    // A kubeconfig for a cluster that does not exist: watching it would keep /readyz at 503.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: prod-mgmt, context: {cluster: c, user: u}}]\ncurrent-context: prod-mgmt\n",
    )
    .expect("kubeconfig");
    let cfg = dir.join("settings.yaml").display().to_string();
    let kc = kubeconfig.display().to_string();
    let (mut child, log) = spawn_logged(&dir, &["--listen", "127.0.0.1:0", "--config", &cfg], &[("KUBECONFIG", &kc)]);
    let addr = listening(&log).await;
    let ca = std::fs::read_to_string(dir.join("dev/ca.crt")).expect("dev CA written");
    let client = Client::new(&[&ca], None);
    assert_eq!(client.request(addr, "GET", "/readyz", vec![]).await.expect("readyz").status, 200, "not watching");
    let sample = std::fs::read(common::root().join("tests/reviews/hcpetcdbackup-create-invalid.json")).expect("sample");
    let answer = client.request(addr, "POST", "/validate/hcpetcdbackups", sample).await.expect("post").json();
    assert_eq!(answer["response"]["allowed"], true, "warn mode allows: {answer}");
    assert!(answer["response"]["warnings"].as_array().is_some_and(|w| !w.is_empty()), "{answer}");
    let metrics = client.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    let series = |rule: &str| {
        format!(
            "hcp_etcd_admission_rule_results_total{{webhook=\"hcpetcdbackups\",rule=\"{rule}\",result=\"warned\"}} 1"
        )
    };
    assert!(metrics.contains(&series("hcpetcdbackup-s3-bucket-naming")), "{metrics}");
    assert!(metrics.contains(&series("hcpetcdbackup-kms-region")), "{metrics}");
    let build = format!(
        "hcp_etcd_admission_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        hcp_etcd_admission::build_info::VERSION,
        hcp_etcd_admission::build_info::COMMIT
    );
    assert!(metrics.contains(&build), "{build} not in {metrics}");
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success());
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("development mode: not watching"), "{text}");
    assert!(!text.contains("watching cluster"), "{text}");
    let start = text.lines().find(|l| l.contains("hcp-etcd-admission starting")).expect("start-up line");
    assert!(start.contains(&format!("\"version\":\"{}\"", hcp_etcd_admission::build_info::VERSION)), "{start}");
    assert!(start.contains("\"commit\":"), "{start}");
    let review: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "admission review")
        .expect("review log line");
    assert_eq!(review["user"], "system:serviceaccount:openshift-adp:velero", "{review}");
    let rules = review["rules"].as_str().expect("rules field");
    // Upstream's CEL findings by their own ids, the project's by theirs.
    assert!(rules.contains("upstream.hcpetcdbackup.spec.storage.s3.bucket-format=warned"), "{rules}");
    assert!(rules.contains("hcpetcdbackup-kms-region=warned"), "{rules}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second development `serve` on a busy port fails without touching the
/// first one's certificate files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_dev_serve_on_a_busy_port_leaves_the_dev_certs_alone() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-busy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut first, log) =
        spawn_logged(&dir, &["--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "never"], &[]);
    let addr = listening(&log).await.to_string();
    let before = std::fs::read(dir.join("dev/ca.crt")).expect("ca");
    let second = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["serve", "--watch-hostedcontrolplanes", "never", "--listen", &addr, "--dev-cert-dir"])
        .arg(dir.join("dev"))
        .output()
        .expect("second serve");
    assert_eq!(second.status.code(), Some(2), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(String::from_utf8_lossy(&second.stderr).contains("Address already in use"));
    assert_eq!(std::fs::read(dir.join("dev/ca.crt")).expect("ca"), before, "dev CA rewritten by the failed serve");
    let _ = first.kill();
    let _ = first.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--version` names the commit (the checkout's HEAD, or "unknown" without git).
#[test]
fn version_shows_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission")).arg("--version").output().expect("--version");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        text,
        format!("hcp-etcd-admission {} (commit {})", env!("CARGO_PKG_VERSION"), hcp_etcd_admission::build_info::COMMIT)
    );
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(common::root()).output();
    if let Some(h) = head.ok().filter(|h| h.status.success()) {
        // Built from this checkout (possibly an earlier commit of it): a 12-digit hex id.
        let commit = hcp_etcd_admission::build_info::COMMIT;
        assert!(commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{commit} vs {:?}", h.stdout);
    }
}

/// What OpenShift's restricted-v2 does to the image: an arbitrary UID from
/// the namespace's range, GID 0, no supplementary groups, nothing writable,
/// the serving pair mounted readable by group 0. The binary (copied as the
/// image has it: root:0, 0755) starts and answers a review. scripts/build-image.sh
/// does the same with the static binary from the built image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_under_an_arbitrary_uid_with_gid_0() {
    let needs = [
        common::env::Need::Root,
        common::env::Need::Program("setpriv", "util-linux (Debian: apt-get install util-linux)"),
    ];
    if !common::env::ready("serves_under_an_arbitrary_uid_with_gid_0", &needs) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("hcp-anyuid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tls")).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(dir.join("tls"), std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let bin = dir.join("hcp-etcd-admission");
    std::fs::copy(env!("CARGO_BIN_EXE_hcp-etcd-admission"), &bin).expect("copy binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let set = hcp_etcd_admission::server::certs::generate("anyuid CA", &["localhost".into()], 2).expect("certs");
    hcp_etcd_admission::server::certs::write(&dir.join("tls"), &set).expect("write");
    for f in ["tls.crt", "tls.key"] {
        std::fs::set_permissions(dir.join("tls").join(f), std::fs::Permissions::from_mode(0o640)).expect("chmod");
    }
    let log = dir.join("serve.log");
    let mut child = Command::new("setpriv")
        .args(["--reuid=1000730000", "--regid=0", "--clear-groups"])
        .arg(&bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "never", "--drain-seconds", "0"])
        .arg("--tls-cert")
        .arg(dir.join("tls/tls.crt"))
        .arg("--tls-key")
        .arg(dir.join("tls/tls.key"))
        .current_dir("/")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("setpriv");
    let addr = listening(&log).await;
    let client = Client::new(&[&set.ca_pem], None);
    let sample = std::fs::read(common::root().join("tests/reviews/hcpetcdbackup-create-s3.json")).expect("sample");
    let answer = client.request(addr, "POST", "/validate/hcpetcdbackups", sample).await.expect("post").json();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or_default().to_string();
    let gid_line = status.lines().find(|l| l.starts_with("Gid:")).unwrap_or_default().to_string();
    let _ = child.kill();
    let _ = child.wait();
    assert!(uid_line.contains("1000730000"), "{uid_line}");
    assert!(gid_line.split_whitespace().nth(1) == Some("0"), "{gid_line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watching a cluster says which one and with which kubeconfig context,
/// before anything is served (a "try it" `serve` must never watch a cluster
/// silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_a_cluster_names_the_cluster_and_the_context() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let api = common::fake_apiserver::start(Vec::new(), Duration::ZERO).await;
    let kc = api.kubeconfig(&dir).display().to_string();
    let (mut child, log) = spawn_logged(
        &dir,
        &["--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "always"],
        &[("KUBECONFIG", &kc)],
    );
    let _ = listening(&log).await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success());
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let text = std::fs::read_to_string(&log).expect("log");
    let line = text.lines().find(|l| l.starts_with("watching cluster ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&api.addr.to_string()) && line.ends_with("(context fake)"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #30: the development mode stops on one SIGTERM without a drain (no
/// endpoints route to it: the 10 s drain of a Deployment only made Ctrl-C
/// slow), and `--log-format text` writes no colour escape into a file or a
/// pipe. (The bound below only tells "no drain" from the 10 s one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_development_mode_stops_at_once_and_text_logs_have_no_colour_in_a_pipe() {
    let dir = std::env::temp_dir().join(format!("hcp-serve-dev-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "text", "--watch-hostedcontrolplanes", "never"])
        .arg("--dev-cert-dir")
        .arg(dir.join("dev"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn serve");
    listening(&log).await;
    let signalled = std::time::Instant::now();
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let mut status = None;
    while signalled.elapsed() < Duration::from_secs(8) {
        if let Some(s) = child.try_wait().expect("wait") {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let status = status.unwrap_or_else(|| panic!("still draining 8 s after SIGTERM (the 10 s Deployment drain)"));
    assert!(status.success(), "{status:?}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("INFO"), "no text log lines: {text}");
    assert!(!text.contains('\u{1b}'), "colour escapes in a file: {text:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
