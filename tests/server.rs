//! The real server on an ephemeral loopback port with generated certificates,
//! driven by a real HTTPS client (tokio-rustls + hyper). There is no
//! kube-apiserver on these machines: the client sends AdmissionReview JSON
//! exactly as kube-apiserver does (see tests/common/mod.rs) and the answers are
//! checked on the wire.

mod common;

use std::{path::Path, sync::Arc, time::Duration};

use common::https::Client;
use hcp_etcd_admission::{certs, server::LookupSource, settings::Settings};
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
    let client = Client::new(&[&c.ca_pem], None);

    // Every validating path, every case of the conformance suite for its resource:
    // the wire answer equals what the library (and so `review`) answers.
    let settings = Settings::default();
    for case in common::load_cases()
        .iter()
        .filter(|c| c.settings.as_object().is_none_or(|o| o.is_empty()) && c.context.is_empty())
    {
        let resource = case.review["request"]["resource"]["resource"].as_str().unwrap_or_default().to_string();
        let now = hcp_etcd_admission::time::parse_rfc3339(&case.now).expect("now");
        // The server reads the real clock: cases whose decision depends on a
        // presigned URL's expiry are left to the suites that fix the clock.
        let text = case.review.to_string();
        if ["X-Amz-Date", "X-Goog-Date", "&se=", "?se=", "Expires="].iter().any(|t| text.contains(t)) {
            continue;
        }
        // An etcd StatefulSet goes to the mutating path; this server has no
        // HostedControlPlane lookup, so it is denied exactly as the library denies it.
        let path = if resource == "statefulsets" {
            "/mutate/etcd-statefulsets".to_string()
        } else {
            format!("/validate/{resource}")
        };
        let reply = client.post_json(srv.addr, &path, &case.review).await.expect("request");
        assert_eq!(reply.status, 200, "{}: {}", case.name, reply.text());
        let got = reply.json();
        let want = hcp_etcd_admission::admission::review(
            &case.review,
            &hcp_etcd_admission::admission::DecisionInput { settings: &settings, lookup: None, now, expect: None },
        )
        .expect("library");
        assert_eq!(got, want, "{}", case.name);
        assert_eq!(got["response"]["uid"], case.review["request"]["uid"]);
        assert!(got["response"].get("patchType").is_none(), "no patchType without a patch");
    }
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
    // Over 3 MiB: 413 with a JSON body, even while the client is still writing.
    let huge = vec![b' '; 3 * 1024 * 1024 + 1];
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
    assert!(metrics.contains("hcp_etcd_admission_certificate_reloads_total{result=\"failure\"}"), "{metrics}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_enforced_with_client_ca() {
    let dir = tempdir("mtls");
    let serving = localhost_certs("serving CA");
    certs::write(&dir, &serving).expect("write");
    // A client CA and a client certificate signed by it (rcgen, like kube-apiserver's).
    let client_set = certs::generate("apiserver client CA", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &client_set.ca_pem).expect("client ca");
    let srv = start(&dir, Some(&dir.join("client-ca.crt")), Duration::from_secs(60)).await;
    let anonymous = Client::new(&[&serving.ca_pem], None);
    let review = review_file("hcpetcdbackup-create-s3.json");
    assert!(
        anonymous.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.is_err(),
        "no client cert must be refused"
    );
    let stranger_set = certs::generate("stranger CA", &["kube-apiserver".into()], 30).expect("stranger");
    let stranger = Client::new(&[&serving.ca_pem], Some((&stranger_set.cert_pem, &stranger_set.key_pem)));
    assert!(
        stranger.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.is_err(),
        "foreign client cert must be refused"
    );
    let ok = Client::new(&[&serving.ca_pem], Some((&client_set.cert_pem, &client_set.key_pem)));
    assert!(
        ok.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.is_err(),
        "a serverAuth-only certificate must not authenticate a client"
    );
    let apiserver = certs::generate_client("apiserver client CA 2", &["kube-apiserver".into()], 30).expect("client");
    std::fs::write(dir.join("client-ca.crt"), &apiserver.ca_pem).expect("client ca");
    srv.stop().await;
    let srv = start(&dir, Some(&dir.join("client-ca.crt")), Duration::from_secs(60)).await;
    let ok = Client::new(&[&serving.ca_pem], Some((&apiserver.cert_pem, &apiserver.key_pem)));
    let r = ok.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.expect("trusted client");
    assert_eq!(r.json()["response"]["allowed"], true);
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
