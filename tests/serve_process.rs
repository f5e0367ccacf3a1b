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
