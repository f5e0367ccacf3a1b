//! The server under hostile and heavy callers, over real TLS on loopback:
//! stalled bodies and idle connections cannot starve a real review; idle
//! connections are closed (HTTP/1.1 and HTTP/2); a 5.5 MiB UPDATE is reviewed;
//! an oversize body gets a clean 413 on both protocols; a stalled body loses
//! its in-flight slot to a real review; a used-up body budget is answered at
//! once with 503 and `Retry-After`; the connection cap evicts silent
//! connections and refuses only when every connection is busy; `/metrics` stays bounded whatever a
//! request says its operation is.

mod common;

use std::{path::PathBuf, time::Duration};

use common::https::{full, send_h2, streamed, Client};
use common::running::{small_review, start_limited};
use hcp_etcd_admission::server::{certs, limits::LimitOptions, LookupSource};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hcp-lim-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

/// Certificates in a fresh directory and a client trusting them.
fn setup(tag: &str) -> (PathBuf, Client) {
    let dir = tempdir(tag);
    let c = certs::generate(&format!("{tag} CA"), &["localhost".into(), "127.0.0.1".into()], 30).expect("certs");
    certs::write(&dir, &c).expect("write");
    let client = Client::new(&[&c.ca_pem], None);
    (dir, client)
}

/// A HostedCluster as the apiserver sends it, carrying `pad` bytes of
/// managedFields (real objects carry large ones).
fn hosted_cluster(pad: usize, image: &str) -> Value {
    let entry = json!({"manager": "hypershift-operator", "operation": "Update", "apiVersion": "hypershift.openshift.io/v1beta1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}, "time": "2026-11-29T15:00:00Z"});
    let one = entry.to_string().len() + 1;
    let managed: Vec<Value> = (0..pad / one).map(|_| entry.clone()).collect();
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
        "metadata": {"name": "prod", "namespace": "clusters", "managedFields": managed},
        "spec": {
            "release": {"image": image},
            "platform": {"type": "AWS"},
            "etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume", "persistentVolume": {"size": "8Gi"}}}}
        }
    })
}

/// Sends request headers with a declared body, then `sent` bytes of it, and stalls.
async fn stall(
    client: &Client,
    addr: std::net::SocketAddr,
    declared: usize,
    sent: usize,
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let mut tls = client.connect(addr).await.ok()?;
    let head = format!(
        "POST /validate/hcpetcdbackups HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await.ok()?;
    tls.write_all(&vec![b' '; sent]).await.ok()?;
    tls.flush().await.ok()?;
    Some(tls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_is_answered_while_hundreds_of_connections_stall_bodies_or_sit_idle() {
    let (dir, client) = setup("starve");
    let srv = start_limited(&dir, LimitOptions::default()).await;
    let mut held = Vec::new();
    // 300 clients that send headers and then stall their bodies, some after
    // sending 100 KiB of it.
    for i in 0..300 {
        let sent = if i % 10 == 0 { 100 * 1024 } else { 10 };
        held.push(Box::new(stall(&client, srv.addr, 1024 * 1024, sent).await.expect("staller")) as Box<dyn Send>);
    }
    // 200 that finished TLS and send nothing.
    for _ in 0..200 {
        held.push(Box::new(client.connect(srv.addr).await.expect("idle")) as Box<dyn Send>);
    }
    for attempt in 0..3 {
        let started = std::time::Instant::now();
        let r = client.post_json(srv.addr, "/validate/hcpetcdbackups", &small_review()).await.expect("review");
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["response"]["allowed"], true);
        // The webhook timeout is 5 s; the review must not wait for the stallers.
        assert!(took < Duration::from_millis(2500), "attempt {attempt}: answered after {took:?}");
        eprintln!("attempt {attempt}: review answered in {took:?} beside 300 stalled and 200 idle connections");
        let r = client.post_json_h2(srv.addr, "/validate/hcpetcdbackups", &small_review()).await.expect("h2 review");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The stallers are answered 408 once their body deadline (2 s) passes.
    let mut tls = stall(&client, srv.addr, 1000, 10).await.expect("one more");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(6), tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"kind\":\"Status\""), "{text}");
    drop(held);
    srv.stop().await;
}

/// Reads until EOF (or an error); `true` when the server closed the connection in time.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_on_http1_and_http2() {
    let (dir, client) = setup("idle");
    let limits = LimitOptions {
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(1000),
        ..LimitOptions::default()
    };
    let srv = start_limited(&dir, limits).await;
    // 200 connections that finish TLS and send nothing: closed after the header-read timeout.
    let mut silent = Vec::new();
    for _ in 0..200 {
        silent.push(client.connect(srv.addr).await.expect("connect"));
    }
    let mut closed = 0;
    for s in &mut silent {
        if closed_within(s, Duration::from_secs(3)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 200, "silent connections left open");
    // A keep-alive HTTP/1.1 connection after one request: closed once idle.
    let mut tls = client.connect(srv.addr).await.expect("connect");
    one_keep_alive_review(&mut tls).await;
    assert!(closed_within(&mut tls, Duration::from_secs(4)).await, "idle keep-alive connection left open");
    // An HTTP/2 connection after one request: GOAWAY and closed once idle.
    let mut sender = client.h2(srv.addr).await.expect("h2");
    let r = send_h2(
        &mut sender,
        "POST",
        "/validate/hcpetcdbackups",
        full(serde_json::to_vec(&small_review()).expect("json")),
    )
    .await
    .expect("h2 request");
    assert_eq!(r.status, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while !sender.is_closed() {
        assert!(tokio::time::Instant::now() < deadline, "idle HTTP/2 connection left open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    srv.stop().await;
}

/// A big UPDATE of an ordinary shape (1.2 MiB: two 600 KB HostedClusters
/// padded with managedFields) is decided on both protocols; one of 5.5 MiB
/// would take more heap to parse and decide (~115 MiB measured, charged
/// more: `admission::cost`) than big reviews may hold (14 of the 16 units × 6 MiB), so
/// it is refused unparsed with a 413 that says so; a body over the size
/// limit gets 413 too, never a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_update_is_reviewed_and_oversize_bodies_get_413_on_both_protocols() {
    let (dir, client) = setup("big");
    let srv = start_limited(&dir, LimitOptions::default()).await;
    let too_costly = {
        let old = hosted_cluster(2_800_000, "quay.io/openshift-release-dev/ocp-release:4.20.0-x86_64");
        let new = hosted_cluster(2_800_000, "quay.io/openshift-release-dev/ocp-release:4.20.1-x86_64");
        let review = common::admission_review("big-0", "hostedclusters", None, "UPDATE", Some(&new), Some(&old));
        serde_json::to_vec(&review).expect("json")
    };
    assert!(too_costly.len() > 5_500_000 && too_costly.len() < 6_000_000, "{} bytes", too_costly.len());
    let r = client.request(srv.addr, "POST", "/validate/hostedclusters", too_costly).await.expect("h1");
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("decision budget of 84 MiB"), "{}", r.text());
    let old = hosted_cluster(600_000, "quay.io/openshift-release-dev/ocp-release:4.20.0-x86_64");
    let new = hosted_cluster(600_000, "quay.io/openshift-release-dev/ocp-release:4.20.1-x86_64");
    let review = common::admission_review("big-1", "hostedclusters", None, "UPDATE", Some(&new), Some(&old));
    let body = serde_json::to_vec(&review).expect("json");
    assert!(body.len() > 1_100_000 && body.len() < 1_300_000, "{} bytes", body.len());
    let r = client.request(srv.addr, "POST", "/validate/hostedclusters", body.clone()).await.expect("h1");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["response"]["allowed"], true, "{}", r.text());
    let r = client.request_h2(srv.addr, "POST", "/validate/hostedclusters", full(body.clone())).await.expect("h2");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["response"]["uid"], "big-1");
    let r =
        client.request_h2(srv.addr, "POST", "/validate/hostedclusters", streamed(body, 16 * 1024)).await.expect("h2");
    assert_eq!(r.status, 200, "streamed, no declared length: {}", r.text());

    // Over the limit: 413 with a JSON Status body, never a reset.
    let huge = vec![b' '; hcp_etcd_admission::server::limits::MAX_BODY + 1];
    let (status, text) = client.raw_post(srv.addr, "/validate/hostedclusters", &huge).await.expect("h1 huge");
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("\"kind\":\"Status\"") && text.contains("limit"), "{text}");
    let r = client.request_h2(srv.addr, "POST", "/validate/hostedclusters", full(huge.clone())).await.expect("h2 huge");
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["kind"], "Status");
    let r = client
        .request_h2(srv.addr, "POST", "/validate/hostedclusters", streamed(huge, 64 * 1024))
        .await
        .expect("h2 huge streamed");
    assert_eq!(r.status, 413, "streamed, no declared length: {}", r.text());
    // curl (nghttp2) reports a stream error if the answer comes while it is
    // still uploading: a moderately oversize body is read to its end first.
    let file = dir.join("oversize.json");
    std::fs::write(&file, vec![b' '; 8_000_000]).expect("write");
    for extra in [None, Some("transfer-encoding: chunked")] {
        for proto in ["--http2", "--http1.1"] {
            let mut cmd = std::process::Command::new("curl");
            cmd.args(["-sS", proto, "--cacert"]).arg(dir.join("ca.crt"));
            cmd.args(["-H", "content-type: application/json", "-o", "/dev/null", "-w", "%{http_code} %{http_version}"]);
            if let Some(h) = extra {
                cmd.args(["-H", h]);
            }
            cmd.arg("--data-binary").arg(format!("@{}", file.display()));
            cmd.arg(format!("https://localhost:{}/validate/hostedclusters", srv.addr.port()));
            let out =
                tokio::task::spawn_blocking(move || cmd.output()).await.expect("join").expect("curl (CI installs it)");
            let got = String::from_utf8_lossy(&out.stdout).to_string();
            let want = if proto == "--http2" { "413 2" } else { "413 1.1" };
            assert_eq!(got, want, "curl {proto} {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let metrics = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(metrics.contains("hcp_etcd_admission_rejected_requests_total{reason=\"body_too_large\"} 7"), "{metrics}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturation_is_answered_at_once_with_retry_after() {
    let (dir, client) = setup("sat");
    // One request in flight at most: a client stalling its body does not
    // hold it against a real review (the stalled body is evicted, 408).
    let limits = LimitOptions { max_requests: 1, body_timeout: Duration::from_secs(3), ..LimitOptions::default() };
    let srv = start_limited(&dir, limits).await;
    let mut staller = stall(&client, srv.addr, 1000, 10).await.expect("staller");
    // Time for the server to give the staller the slot (generous: CI machines are loaded).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = client.post_json(srv.addr, "/validate/hcpetcdbackups", &small_review()).await.expect("review");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut out = Vec::new();
    // Evicted at once; were it to get the slot only after the review, its own
    // 3 s body deadline still answers 408 within this wait.
    let _ = tokio::time::timeout(Duration::from_secs(5), staller.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "the staller lost its slot: {text}");
    srv.stop().await;

    // The body budget: a client holding it with a big stalled body makes
    // other big bodies wait for nothing (503) while small reviews pass.
    let limits =
        LimitOptions { body_budget: 1024 * 1024, body_timeout: Duration::from_secs(3), ..LimitOptions::default() };
    let srv = start_limited(&dir, limits).await;
    // 900 KiB received: a 1 MiB buffer, 960 KiB of the budget charged.
    let hog = stall(&client, srv.addr, 3 * 1024 * 1024, 900 * 1024).await.expect("hog");
    // Time for the server to read the hog's 900 KiB (its deadline is 3 s away).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let big = vec![b' '; 2 * 1024 * 1024];
    let mut tls = client.connect(srv.addr).await.expect("connect");
    let head = format!(
        "POST /validate/hcpetcdbackups HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        big.len()
    );
    let _ = tls.write_all(head.as_bytes()).await;
    let _ = tls.write_all(&big).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), tls.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.to_ascii_lowercase().contains("retry-after: 1"), "{text}");
    let r = client.post_json(srv.addr, "/validate/hcpetcdbackups", &small_review()).await.expect("small");
    assert_eq!(r.status, 200, "a small review is never starved by the budget: {}", r.text());
    let metrics = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(metrics.contains("hcp_etcd_admission_rejected_requests_total{reason=\"body_budget\"} 1"), "{metrics}");
    drop(hog);
    srv.stop().await;

    // The connection cap: connections that have not started a request are
    // evicted for a newcomer, oldest first.
    let limits = LimitOptions { max_connections: 3, body_timeout: Duration::from_secs(3), ..LimitOptions::default() };
    let srv = start_limited(&dir, limits).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(client.connect(srv.addr).await.expect("within the cap"));
    }
    let r = client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("a newcomer evicts a silent connection");
    assert_eq!(r.status, 200);
    // One of the silent ones was closed (the oldest still in its handshake as
    // the server sees it, else the oldest without a request).
    let mut closed = 0;
    for s in &mut open {
        if closed_within(s, Duration::from_millis(500)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "exactly one silent connection was evicted");
    drop(open);
    // Even when every connection has a request in flight, a newcomer is
    // served: the connection reading its body the longest is closed for it.
    let mut busy = Vec::new();
    for _ in 0..3 {
        busy.push(stall(&client, srv.addr, 1000, 10).await.expect("staller"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = client.request(srv.addr, "GET", "/healthz", vec![]).await.expect("never refused at accept");
    assert_eq!(r.status, 200);
    let mut closed = 0;
    for s in &mut busy {
        if closed_within(s, Duration::from_millis(500)).await {
            closed += 1;
        }
    }
    assert!(closed >= 1, "a staller was closed for the newcomer");
    drop(busy);
    let metrics = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(
        !metrics.contains("hcp_etcd_admission_rejected_requests_total{reason=\"connection_source_share\"} 0"),
        "one source held every place, so its own connections gave way: {metrics}"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_stay_bounded_under_hostile_operation_values() {
    let (dir, client) = setup("labels");
    let srv = start_limited(&dir, LimitOptions::default()).await;
    // One ordinary review first, so the latency histogram exists in both snapshots.
    client.post_json(srv.addr, "/validate/hcpetcdbackups", &small_review()).await.expect("review");
    let before = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    for i in 0..100 {
        let mut review = small_review();
        review["request"]["operation"] = json!(format!("{i}{}", "X".repeat(20_000)));
        review["request"]["name"] = json!("n".repeat(20_000));
        let r = client.post_json(srv.addr, "/validate/hcpetcdbackups", &review).await.expect("review");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let after = client.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(!after.contains("XXXX"), "a request string became a label");
    // One new series at most (operation="other", decision="cannot_decide").
    assert!(after.len() < before.len() + 256, "/metrics grew from {} to {} bytes", before.len(), after.len());
    assert!(after.contains("operation=\"other\""), "{after}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_closes_idle_keep_alive_connections_at_once_and_keeps_serving_new_ones() {
    let (dir, client) = setup("drain");
    let mut opts = common::running::options(&dir, None, Duration::from_secs(60), LookupSource::None);
    opts.drain_delay = Duration::from_secs(3);
    let srv = common::running::start_with(opts).await;
    let addr = srv.addr;
    // A pooled keep-alive connection after one request.
    let mut tls = client.connect(addr).await.expect("connect");
    one_keep_alive_review(&mut tls).await;
    let stopping = tokio::spawn(srv.stop());
    // Closed when the drain starts, not when it ends 3 s later.
    assert!(closed_within(&mut tls, Duration::from_millis(1500)).await, "idle connection kept through the drain");
    // New connections are still served during the drain.
    let r = client.post_json(addr, "/validate/hcpetcdbackups", &small_review()).await.expect("served while draining");
    assert_eq!(r.status, 200, "{}", r.text());
    let _ = stopping.await;
}

/// One review on a raw keep-alive HTTP/1.1 connection, answered 200; the
/// connection stays open for what the test does next.
async fn one_keep_alive_review<S: AsyncReadExt + AsyncWriteExt + Unpin>(tls: &mut S) {
    let body = serde_json::to_vec(&small_review()).expect("json");
    let head = format!(
        "POST /validate/hcpetcdbackups HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("head");
    tls.write_all(&body).await.expect("body");
    let mut first = vec![0u8; 64];
    let n = tls.read(&mut first).await.expect("answer");
    assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&first[..n]));
}
