//! The real server on an ephemeral loopback port with generated certificates,
//! driven by a real HTTPS client (tokio-rustls + hyper). There is no
//! kube-apiserver on these machines: the client sends AdmissionReview JSON
//! exactly as kube-apiserver does (see tests/common/mod.rs) and the answers are
//! checked on the wire.

mod common;

use std::{path::Path, sync::Arc, time::Duration};

use common::https::Client;
use hcp_etcd_admission::{server::certs, server::LookupSource, settings::Settings};
use serde_json::{json, Value};

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d =
        std::env::temp_dir().join(format!("hcp-srv-{tag}-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

fn localhost_certs(ca_name: &str) -> certs::GeneratedCerts {
    certs::generate(ca_name, &["localhost".into(), "127.0.0.1".into()], 30).expect("certs")
}

async fn start(dir: &Path, client_ca: Option<&Path>, reload: Duration) -> common::running::Running {
    common::running::start(dir, client_ca, reload, LookupSource::None).await
}

fn review_file(name: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/reviews").join(name)).expect("review file");
    serde_json::from_str(&text).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_answers_like_review_on_the_wire() {
    let dir = tempdir("paths");
    let c = localhost_certs("paths CA");
    certs::write(&dir, &c).expect("write");
    let srv = start(&dir, None, Duration::from_secs(60)).await;
    // The HCPEtcdBackup file runs with the preflight off (it has its own file).
    let no_preflight = Settings { backup_preflight: false, ..Settings::default() };
    let srv_np = common::running::start_settings(&dir, no_preflight.clone(), LookupSource::None).await;
    let client = Client::new(&[&c.ca_pem], None);

    // Every validating path, every case of the conformance suite for its resource:
    // the wire answer equals what the library (and so `review`) answers.
    let mut compared = 0;
    for case in common::load_cases().iter().filter(|c| c.context.is_empty()) {
        let (addr, settings) = if case.settings.as_object().is_none_or(|o| o.is_empty()) {
            (srv.addr, Settings::default())
        } else if case.settings == json!({"backupPreflight": false}) {
            (srv_np.addr, no_preflight.clone())
        } else {
            continue;
        };
        let resource = case.review["request"]["resource"]["resource"].as_str().unwrap_or_default();
        let now = Ok(hcp_etcd_admission::time::parse_rfc3339(&case.now).expect("now"));
        // The server reads the real clock: cases whose decision depends on a
        // presigned URL's expiry are left to the suites that fix the clock.
        let text = case.review.to_string();
        if ["X-Amz-Date", "X-Goog-Date", "&se=", "?se=", "Expires="].iter().any(|t| text.contains(t)) {
            continue;
        }
        // An etcd StatefulSet goes to the mutating path; this server has no
        // HostedControlPlane lookup, so it is denied exactly as the library denies it.
        let path = common::webhook_path(resource);
        let reply = client.post_json(addr, &path, &case.review).await.expect("request");
        assert_eq!(reply.status, 200, "{}: {}", case.name, reply.text());
        let got = reply.json();
        let want = hcp_etcd_admission::admission::review(
            &case.review,
            &hcp_etcd_admission::admission::DecisionInput { settings: &settings, lookup: None, now, expect: None },
        )
        .expect("library");
        assert_eq!(got, want, "{}", case.name);
        assert_eq!(got["response"]["uid"], case.review["request"]["uid"]);
        // A patch (the backup Job's verify step) always comes with its type.
        let has_patch = got["response"].get("patch").is_some();
        assert_eq!(got["response"].get("patchType").is_some(), has_patch, "patchType with a patch only");
        compared += 1;
    }
    assert!(compared > 150, "only {compared} cases compared on the wire");
    srv_np.stop().await;
    for path in ["/healthz", "/readyz"] {
        let r = client.request(srv.addr, "GET", path, vec![]).await.expect(path);
        assert_eq!((r.status, r.text().as_str()), (200, "ok"), "{path}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_json_errors_never_a_crash() {
    let dir = tempdir("bad");
    let c = localhost_certs("bad CA");
    certs::write(&dir, &c).expect("write");
    let srv = start(&dir, None, Duration::from_secs(60)).await;
    let client = Client::new(&[&c.ca_pem], None);
    let path = "/validate/hcpetcdbackups";
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("garbage", b"\x00\xffnot json".to_vec(), 400, "not JSON"),
        ("empty", vec![], 400, "not JSON"),
        (
            "wrong apiVersion",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"a"}}"#.to_vec(),
            400,
            "admission.k8s.io/v1 only",
        ),
        (
            "missing request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no request",
        ),
        ("array", b"[1,2]".to_vec(), 400, "not an AdmissionReview"),
    ];
    for (name, body, code, needle) in cases {
        let r = client.request(srv.addr, "POST", path, body).await.expect(name);
        assert_eq!(r.status, code, "{name}: {}", r.text());
        let v = r.json();
        assert_eq!(v["kind"], "Status", "{name}: JSON error body");
        assert!(v["message"].as_str().unwrap_or_default().contains(needle), "{name}: {}", v["message"]);
    }
    // Over the limit (7 MiB: object + oldObject of 3 MiB each + envelope): 413
    // with a JSON body, even while the client is still writing.
    let huge = vec![b' '; hcp_etcd_admission::server::limits::MAX_BODY + 1];
    let (status, body) = client.raw_post(srv.addr, path, &huge).await.expect("huge");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("\"kind\":\"Status\"") && body.contains("limit"), "{body}");
    // A request with a uid but an unparseable request is answered with a denial.
    let r = client
        .post_json(srv.addr, path, &json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":["x"]}}))
        .await
        .expect("bad request");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["response"]["allowed"], false);
    assert_eq!(r.json()["response"]["status"]["code"], 400);
    // Wrong resource on a validating path: a clear denial.
    let r = client
        .post_json(srv.addr, "/validate/hostedclusters", &review_file("hcpetcdbackup-create-s3.json"))
        .await
        .expect("wrong");
    assert_eq!(r.json()["response"]["allowed"], false);
    assert!(r.json()["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("this endpoint validates hostedclusters"));
    // Unknown path.
    assert_eq!(client.request(srv.addr, "POST", "/validate/pods", vec![]).await.expect("404").status, 404);
    // Still alive.
    assert_eq!(client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("alive").status, 200);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_decision() {
    let dir = tempdir("metrics");
    let c = localhost_certs("metrics CA");
    certs::write(&dir, &c).expect("write");
    let srv = start(&dir, None, Duration::from_secs(60)).await;
    let client = Client::new(&[&c.ca_pem], None);
    let count = |text: &str, decision: &str| -> u64 {
        text.lines()
            .find(|l| {
                l.starts_with("hcp_etcd_admission_admission_requests_total{")
                    && l.contains(&format!("decision=\"{decision}\""))
                    && l.contains("webhook=\"hcpetcdbackups\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let before = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    for _ in 0..3 {
        client
            .post_json(srv.addr, "/validate/hcpetcdbackups", &review_file("hcpetcdbackup-create-s3.json"))
            .await
            .expect("ok");
    }
    client
        .post_json(srv.addr, "/validate/hcpetcdbackups", &review_file("hcpetcdbackup-create-invalid.json"))
        .await
        .expect("bad");
    let after = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert_eq!(count(&after, "allowed") - count(&before, "allowed"), 3, "{after}");
    assert_eq!(count(&after, "denied") - count(&before, "denied"), 1);
    assert!(after.contains("hcp_etcd_admission_admission_duration_seconds_bucket{le=\"0.0001\""), "100 µs bucket");
    assert!(after.contains("hcp_etcd_admission_certificate_expiry_timestamp_seconds"));
    assert!(!after.contains("oadp-nightly"), "no object names in metrics");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_under_load_fails_no_request() {
    let dir = tempdir("rotate");
    // Kubernetes Secret volume layout: tls.crt -> ..data/tls.crt, ..data -> ..2026_v1
    let v1 = localhost_certs("rotation CA one");
    let v2 = localhost_certs("rotation CA two");
    let gen1 = dir.join("..2026_v1");
    let gen2 = dir.join("..2026_v2");
    certs::write(&gen1, &v1).expect("v1");
    certs::write(&gen2, &v2).expect("v2");
    std::os::unix::fs::symlink("..2026_v1", dir.join("..data")).expect("..data");
    std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).expect("crt link");
    std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).expect("key link");
    let srv = start(&dir, None, Duration::from_millis(200)).await;
    let client = Arc::new(Client::new(&[&v1.ca_pem, &v2.ca_pem], None));
    let review = review_file("hcpetcdbackup-create-s3.json");

    let addr = srv.addr;
    let load = {
        let client = client.clone();
        tokio::spawn(async move {
            let (mut ok, mut failed, mut certs_seen) = (0u32, Vec::new(), Vec::<Vec<u8>>::new());
            let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
            while tokio::time::Instant::now() < deadline {
                match client.post_json(addr, "/validate/hcpetcdbackups", &review).await {
                    Ok(r) if r.status == 200 && r.json()["response"]["allowed"] == true => {
                        ok += 1;
                        if !certs_seen.contains(&r.server_cert) {
                            certs_seen.push(r.server_cert);
                        }
                    }
                    Ok(r) => failed.push(format!("status {}: {}", r.status, r.text())),
                    Err(e) => failed.push(e),
                }
            }
            (ok, failed, certs_seen)
        })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // The atomic symlink swap kubelet does.
    std::os::unix::fs::symlink("..2026_v2", dir.join("..data_tmp")).expect("tmp link");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    let (ok, failed, seen) = load.await.expect("load task");
    assert!(
        failed.is_empty(),
        "{} failed requests during rotation: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(ok > 20, "only {ok} requests");
    assert_eq!(seen.len(), 2, "the new certificate was never served");
    // A broken pair is refused and the current one kept.
    std::fs::write(gen2.join("tls.crt"), "not a certificate").expect("break");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = client
        .post_json(addr, "/validate/hcpetcdbackups", &review_file("hcpetcdbackup-create-s3.json"))
        .await
        .expect("still serving");
    assert_eq!(r.status, 200);
    let metrics = client.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(metrics.contains("hcp_etcd_admission_certificate_reloads_total{result=\"success\"} 1"), "{metrics}");
    assert!(metrics.contains("hcp_etcd_admission_certificate_reloads_total{result=\"failure\"} 1"), "{metrics}");
    assert!(metrics.contains("hcp_etcd_admission_certificate_rejected_total{reason=\"invalid\"} 1"), "{metrics}");
    srv.stop().await;
}

/// A client certificate (clientAuth) with common name `cn`, signed by `ca`.
fn client_cert(ca: &certs::GeneratedCerts, cn: &str) -> (String, String) {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let ca_key = KeyPair::from_pem(ca.ca_key_pem.as_deref().expect("CA key")).expect("ca key");
    let issuer = Issuer::from_ca_cert_pem(&ca.ca_pem, ca_key).expect("issuer");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_enforced_on_admission_paths_with_probes_open() {
    let dir = tempdir("mtls");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    // The apiserver's client CA and its client certificate (CN kube-apiserver).
    let apiserver = certs::generate_client("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    let mut opts = common::running::options(
        &dir,
        Some(&dir.join("client-ca.crt")),
        Duration::from_millis(200),
        LookupSource::None,
    );
    opts.allowed_client_names = vec!["kube-apiserver".into()];
    let srv = common::running::start_with(opts).await;
    let review = review_file("hcpetcdbackup-create-s3.json");
    let path = "/validate/hcpetcdbackups";

    // No certificate: probes and metrics answer, admission paths say 401.
    let anonymous = Client::new(&[&serving.ca_pem], None);
    for p in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(anonymous.request(srv.addr, "GET", p, vec![]).await.expect(p).status, 200, "{p} stays open");
    }
    for p in ["/validate/hcpetcdbackups", "/validate/hostedclusters", "/mutate/etcd-statefulsets"] {
        let r = anonymous.post_json(srv.addr, p, &review).await.expect("anonymous");
        assert_eq!(r.status, 401, "{p}: {}", r.text());
        assert_eq!(r.json()["kind"], "Status");
        assert!(r.json().get("response").is_none(), "{p}: nothing decided for an anonymous caller");
    }
    // A certificate from another CA: the handshake fails.
    let stranger_ca = certs::generate_client("stranger CA", &["kube-apiserver".into()], 30).expect("stranger");
    let stranger = Client::new(&[&serving.ca_pem], Some((&stranger_ca.cert_pem, &stranger_ca.key_pem)));
    assert!(stranger.post_json(srv.addr, path, &review).await.is_err(), "foreign client cert must be refused");
    // A serverAuth-only certificate from the trusted CA does not authenticate a client.
    let server_only = certs::generate_with_ca(
        &apiserver.ca_pem,
        apiserver.ca_key_pem.as_deref().expect("ca key"),
        &["kube-apiserver".into()],
        30,
    )
    .expect("server-only");
    let wrong_usage = Client::new(&[&serving.ca_pem], Some((&server_only.cert_pem, &server_only.key_pem)));
    assert!(wrong_usage.post_json(srv.addr, path, &review).await.is_err(), "serverAuth-only must be refused");
    // The trusted CA, but an identity not on the allow-list: 403.
    let (cert, key) = client_cert(&apiserver, "intruder");
    let intruder = Client::new(&[&serving.ca_pem], Some((&cert, &key)));
    let r = intruder.post_json(srv.addr, path, &review).await.expect("intruder");
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(intruder.request(srv.addr, "GET", "/readyz", vec![]).await.expect("probe").status, 200);
    // The apiserver: reviewed.
    let ok = Client::new(&[&serving.ca_pem], Some((&apiserver.cert_pem, &apiserver.key_pem)));
    let r = ok.post_json(srv.addr, path, &review).await.expect("trusted client");
    assert_eq!(r.json()["response"]["allowed"], true, "{}", r.text());
    let metrics = ok.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(metrics.contains("hcp_etcd_admission_rejected_requests_total{reason=\"unauthenticated\"} 3"), "{metrics}");
    assert!(metrics.contains("hcp_etcd_admission_rejected_requests_total{reason=\"forbidden\"} 1"), "{metrics}");

    // The client CA rotates: reloaded without a restart.
    let rotated = certs::generate_client("apiserver client CA 2", &["kube-apiserver".into()], 30).expect("client 2");
    std::fs::write(dir.join("client-ca.crt"), &rotated.ca_pem).expect("rotate");
    let new_client = Client::new(&[&serving.ca_pem], Some((&rotated.cert_pem, &rotated.key_pem)));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(r) = new_client.post_json(srv.addr, path, &review).await {
            assert_eq!(r.json()["response"]["allowed"], true, "{}", r.text());
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rotated client CA was not picked up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok.post_json(srv.addr, path, &review).await.is_err(), "the old client CA is no longer trusted");
    srv.stop().await;
}

/// A CA and a localhost serving pair valid from `from` to `to` (Unix seconds).
fn pair_valid(names: &[&str], from: i64, to: i64) -> certs::GeneratedCerts {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ts = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).expect("time");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("leaf");
    leaf.not_before = ts(from);
    leaf.not_after = ts(to);
    let key = KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("sign");
    certs::GeneratedCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_key_pem: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_not_yet_valid_and_wrong_san_pairs_are_refused_at_load() {
    common::https::install_provider();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let day = 86_400;
    let expired = pair_valid(&["localhost"], now - 30 * day, now - day);
    let future = pair_valid(&["localhost"], now + day, now + 30 * day);
    let wrong_san = pair_valid(&["other.example"], now - day, now + 30 * day);
    let good = pair_valid(&["localhost", "127.0.0.1"], now - day, now + 30 * day);
    // At start-up: the server does not start, and says why.
    for (name, set, needle) in [
        ("expired", &expired, "expired"),
        ("future", &future, "not valid before"),
        ("wrong-san", &wrong_san, "does not name [\"localhost\"]"),
    ] {
        let dir = tempdir(name);
        certs::write(&dir, set).expect("write");
        let mut opts = common::running::options(&dir, None, Duration::from_secs(60), LookupSource::None);
        opts.expect_sans = vec!["localhost".into()];
        match hcp_etcd_admission::server::Server::bind(opts).await {
            Ok(_) => panic!("{name}: a bad pair was accepted"),
            Err(e) => assert!(e.to_string().contains(needle), "{name}: {e}"),
        }
    }
    // On reload: refused, counted by reason, and the good pair keeps serving.
    let dir = tempdir("reload-bad");
    certs::write(&dir, &good).expect("write");
    let mut opts = common::running::options(&dir, None, Duration::from_millis(150), LookupSource::None);
    opts.expect_sans = vec!["localhost".into()];
    let srv = common::running::start_with(opts).await;
    let client = Client::new(&[&good.ca_pem], None);
    let served = client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("good").server_cert;
    for (set, reason) in [(&expired, "expired"), (&future, "not_yet_valid"), (&wrong_san, "wrong_san")] {
        certs::write(&dir, set).expect("replace");
        let want = format!("hcp_etcd_admission_certificate_rejected_total{{reason=\"{reason}\"}} 1");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let m = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics");
            assert_eq!(m.server_cert, served, "{reason}: the refused pair was served");
            if m.text().contains(&want) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{reason} not counted: {}", m.text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_within_a_second_by_the_watch() {
    let dir = tempdir("watch");
    let v1 = localhost_certs("watch CA one");
    let v2 = localhost_certs("watch CA two");
    certs::write(&dir, &v1).expect("v1");
    // Poll only once a minute: a quick pickup can only come from the watch.
    let srv = start(&dir, None, Duration::from_secs(60)).await;
    let client = Client::new(&[&v1.ca_pem, &v2.ca_pem], None);
    let first = client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("v1").server_cert;
    // Atomic replacement, as cert-manager's and kubelet's writers do.
    let staging = dir.join("staging");
    certs::write(&staging, &v2).expect("v2");
    std::fs::rename(staging.join("tls.key"), dir.join("tls.key")).expect("key");
    std::fs::rename(staging.join("tls.crt"), dir.join("tls.crt")).expect("crt");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let now = client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("serving").server_cert;
        if now != first {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the watch did not pick up the new certificate");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    srv.stop().await;
}

/// Two TLS connections with one resuming client; the second handshake's kind.
async fn second_handshake(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    client: Option<(&str, &str)>,
) -> rustls::HandshakeKind {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("pem")).expect("root");
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>().expect("cert"),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
            )
            .expect("client auth"),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut kind = rustls::HandshakeKind::Full;
    for _ in 0..2 {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut tls = connector.connect(ServerName::try_from("localhost").expect("name"), tcp).await.expect("tls");
        kind = tls.get_ref().1.handshake_kind().expect("handshake done");
        // A whole exchange, so the client has read any session ticket.
        tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").await.expect("write");
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out));
    }
    kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tls_session_resumption_with_client_certificates() {
    common::https::install_provider();
    // Without client certificates a session is resumed (the check can see it)...
    let dir = tempdir("resume-plain");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    let srv = start(&dir, None, Duration::from_secs(60)).await;
    assert_eq!(second_handshake(srv.addr, &serving.ca_pem, None).await, rustls::HandshakeKind::Resumed);
    srv.stop().await;
    // ...with them, every connection is a full handshake against the current
    // client CA (a resumed session would keep an identity across a CA rotation).
    let dir = tempdir("resume-mtls");
    certs::write(&dir, &serving).expect("write");
    let apiserver = certs::generate_client("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    let mut opts =
        common::running::options(&dir, Some(&dir.join("client-ca.crt")), Duration::from_secs(60), LookupSource::None);
    opts.allowed_client_names = vec!["kube-apiserver".into()];
    let srv = common::running::start_with(opts).await;
    let kind = second_handshake(srv.addr, &serving.ca_pem, Some((&apiserver.cert_pem, &apiserver.key_pem))).await;
    assert_eq!(kind, rustls::HandshakeKind::Full);
    srv.stop().await;
}

/// A client certificate with common name `cn` and DNS SANs `sans`, signed by `ca`.
fn client_cert_with_sans(ca: &certs::GeneratedCerts, cn: &str, sans: &[&str]) -> (String, String) {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let ca_key = KeyPair::from_pem(ca.ca_key_pem.as_deref().expect("CA key")).expect("ca key");
    let issuer = Issuer::from_ca_cert_pem(&ca.ca_pem, ca_key).expect("issuer");
    let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = p.signed_by(&key, &issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

/// Kubernetes identifies a client certificate by its CN: a certificate for
/// `alice` that carries the SAN `kube-apiserver` is not the apiserver
/// (before, it was accepted). SANs count only when explicitly enabled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_identity_is_the_certificate_cn_unless_sans_are_enabled() {
    let dir = tempdir("cn");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    let apiserver = certs::generate_client("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    let (cert, key) = client_cert_with_sans(&apiserver, "alice", &["kube-apiserver"]);
    let alice = Client::new(&[&serving.ca_pem], Some((&cert, &key)));
    let review = review_file("hcpetcdbackup-create-s3.json");
    for sans in [false, true] {
        let mut opts = common::running::options(
            &dir,
            Some(&dir.join("client-ca.crt")),
            Duration::from_secs(60),
            LookupSource::None,
        );
        opts.allowed_client_names = vec!["kube-apiserver".into()];
        opts.client_identity_sans = sans;
        let srv = common::running::start_with(opts).await;
        let r = alice.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.expect("alice");
        if sans {
            assert_eq!(r.status, 200, "SANs enabled: {}", r.text());
        } else {
            assert_eq!(r.status, 403, "CN alice is not kube-apiserver: {}", r.text());
            assert!(r.text().contains("identity (CN)"), "{}", r.text());
        }
        srv.stop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a maximum connection age, a keep-alive connection authenticated
/// under a client CA that has since rotated away is closed within that age
/// (before, it kept working 40 s and more), and its certificate no longer
/// opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_end_at_their_maximum_age_so_a_client_ca_rotation_reaches_them() {
    use http_body_util::BodyExt as _;
    let dir = tempdir("age");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    let apiserver = certs::generate_client("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    let mut opts = common::running::options(
        &dir,
        Some(&dir.join("client-ca.crt")),
        Duration::from_millis(200),
        LookupSource::None,
    );
    opts.allowed_client_names = vec!["kube-apiserver".into()];
    opts.limits.max_connection_age = Duration::from_secs(2);
    let srv = common::running::start_with(opts).await;
    let old = Client::new(&[&serving.ca_pem], Some((&apiserver.cert_pem, &apiserver.key_pem)));
    let tls = old.connect(srv.addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, http_body_util::Full<hyper::body::Bytes>>(
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("handshake");
    let conn = tokio::spawn(conn);
    let body = serde_json::to_vec(&review_file("hcpetcdbackup-create-s3.json")).expect("json");
    let post = |body: Vec<u8>| {
        hyper::Request::post("/validate/hcpetcdbackups")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
            .expect("request")
    };
    let opened = std::time::Instant::now();
    let r = sender.send_request(post(body.clone())).await.expect("first request");
    assert_eq!(r.status(), 200);
    let _ = r.into_body().collect().await;
    // The client CA rotates; the old certificate is no longer trusted.
    let rotated = certs::generate_client("apiserver client CA 2", &["kube-apiserver".into()], 30).expect("client 2");
    std::fs::write(dir.join("client-ca.crt"), &rotated.ca_pem).expect("rotate");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while old
        .post_json(srv.addr, "/validate/hcpetcdbackups", &review_file("hcpetcdbackup-create-s3.json"))
        .await
        .is_ok()
    {
        assert!(tokio::time::Instant::now() < deadline, "the rotated client CA was not picked up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old keep-alive connection keeps being used until the server closes it.
    let mut served_after_rotation = 0;
    loop {
        if sender.ready().await.is_err() {
            break;
        }
        match sender.send_request(post(body.clone())).await {
            Ok(r) => {
                served_after_rotation += 1;
                let _ = r.into_body().collect().await;
            }
            Err(_) => break,
        }
        assert!(opened.elapsed() < Duration::from_secs(5), "the connection outlived its maximum age");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lived = opened.elapsed();
    eprintln!("keep-alive connection under the old client CA closed after {lived:?} (max age 2 s; {served_after_rotation} requests after the rotation)");
    assert!(lived < Duration::from_secs(4), "{lived:?}");
    let _ = conn.await;
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--require-client-cert mutating`: only the mutating paths (the etcd
/// StatefulSet's, whose answer carries a restore URL, and the backup Job's)
/// need a client certificate; the validating paths answer any caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_can_be_required_on_the_mutating_path_only() {
    let dir = tempdir("mutonly");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    let apiserver = certs::generate_client("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    let mut opts =
        common::running::options(&dir, Some(&dir.join("client-ca.crt")), Duration::from_secs(60), LookupSource::None);
    opts.allowed_client_names = vec!["kube-apiserver".into()];
    opts.client_auth_scope = hcp_etcd_admission::server::ClientAuthScope::Mutating;
    let srv = common::running::start_with(opts).await;
    let anonymous = Client::new(&[&serving.ca_pem], None);
    let review = review_file("hcpetcdbackup-create-s3.json");
    let r = anonymous.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.expect("validating");
    assert_eq!(r.json()["response"]["allowed"], true, "validating paths answer any caller: {}", r.text());
    let ok = Client::new(&[&serving.ca_pem], Some((&apiserver.cert_pem, &apiserver.key_pem)));
    for path in ["/mutate/etcd-statefulsets", "/mutate/etcd-backup-jobs"] {
        let r = anonymous.post_json(srv.addr, path, &review).await.expect("mutating");
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        let r = ok.post_json(srv.addr, path, &review).await.expect("apiserver");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
