//! The HCPEtcdBackup preflight and the credentials Secret webhook in the real
//! server, fed by its cluster watch against a fake apiserver: the reflectors
//! over HostedControlPlanes, HCPEtcdBackups and etcd StatefulSets, the live
//! Secret read in the operator namespace, `/readyz` waiting for the
//! HostedControlPlane cache only, and the `backup_credentials_valid` gauge. The fixtures are those of
//! tests/conformance/preflight.yaml.

mod common;

use std::{sync::Arc, time::Duration};

use common::https::Client;
use hcp_etcd_admission::server::{certs, LookupSource};
use serde_json::Value;

const MARKER: &str = "MARKER-7f3a";

fn fixtures() -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance/preflight.yaml")).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    doc["fixtures"].clone()
}

fn with_name(mut v: Value, name: &str) -> Value {
    v["metadata"]["name"] = Value::from(name);
    v
}

/// Waits until the preflight's caches have synced (they do not gate /readyz):
/// a probe backup is no longer answered with the "skipped" warning.
async fn wait_for_preflight(https: &Client, addr: std::net::SocketAddr, fx: &Value) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let v = https
            .post_json(addr, "/validate/hcpetcdbackups", &backup_review("probe", fx, "s3", "probe"))
            .await
            .expect("probe")
            .json();
        if !v["response"]["warnings"].to_string().contains("preflight skipped") {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the preflight caches never synced: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The real server watching `api` with `settings`, once ready and once the
/// preflight's caches answer; its dev-CA client and certificate dir.
async fn serve_cluster(
    api: &common::fake_apiserver::FakeApi,
    tag: &str,
    settings: hcp_etcd_admission::settings::Settings,
    fx: &Value,
) -> (common::running::Running, Client, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("hcp-preflight-{tag}-{}", std::process::id()));
    let set = certs::generate("preflight CA", &["localhost".into(), "127.0.0.1".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let srv = common::running::start_settings(&dir, settings, LookupSource::Cluster(api.client())).await;
    let https = Client::new(&[&set.ca_pem], None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while https.request(srv.addr, "GET", "/readyz", vec![]).await.expect("readyz").status != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for_preflight(&https, srv.addr, fx).await;
    (srv, https, dir)
}

fn backup_review(uid: &str, fx: &Value, base: &str, secret: &str) -> Value {
    let mut b = fx[base].clone();
    let block = if base == "s3" { "s3" } else { "azureBlob" };
    b["spec"]["storage"][block]["credentials"]["name"] = Value::from(secret);
    b["metadata"]["name"] = Value::from(format!("backup-{uid}"));
    common::admission_review(uid, "hcpetcdbackups", None, "CREATE", Some(&b), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_from_the_cluster_watch_and_a_live_secret_read() {
    common::https::install_provider();
    let fx = fixtures();
    let objects = vec![
        fx["hcp"].clone(),
        fx["etcdnotready"].clone(),
        fx["unhealthy"].clone(),
        with_name(fx["secretsts"].clone(), "good"),
        with_name(fx["secretkms"].clone(), "bad"),
        // In the backup's namespace, not the operator's: must not be found.
        with_name(fx["secretwrongns"].clone(), "elsewhere"),
    ];
    let api = common::fake_apiserver::start(objects, Duration::from_millis(600)).await;
    let dir = std::env::temp_dir().join(format!("hcp-preflight-srv-{}", std::process::id()));
    let set = certs::generate("preflight CA", &["localhost".into(), "127.0.0.1".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let srv = common::running::start(&dir, None, Duration::from_secs(60), LookupSource::Cluster(api.client())).await;
    let addr = srv.addr;
    let https = Arc::new(Client::new(&[&set.ca_pem], None));

    let first = https.request(addr, "GET", "/readyz", vec![]).await.expect("readyz");
    assert_eq!(first.status, 503, "{}", first.text());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = https.request(addr, "GET", "/readyz", vec![]).await.expect("readyz");
        if r.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "caches never synced: {}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for_preflight(&https, addr, &fx).await;

    let post = |path: &'static str, review: Value| {
        let https = https.clone();
        async move { https.post_json(addr, path, &review).await.expect("post") }
    };
    // Good Secret: allowed, with the warnings from the watched objects.
    let r = post("/validate/hcpetcdbackups", backup_review("a", &fx, "s3", "good")).await;
    let v = r.json();
    assert_eq!(v["response"]["allowed"], true, "{v}");
    let warnings = v["response"]["warnings"].to_string();
    assert!(warnings.contains("etcd StatefulSet not fully ready: 1/3 replicas ready"), "{warnings}");
    assert!(
        warnings.contains("\\\"oadp-earlier-a1b2\\\" in this namespace has not finished (reason EtcdUnhealthy)"),
        "{warnings}"
    );
    // Missing (only in another namespace): as the controller, a warning that
    // it waits 2 minutes for the Secret, then fails the backup.
    let v = post("/validate/hcpetcdbackups", backup_review("b", &fx, "s3", "elsewhere")).await.json();
    assert_eq!(v["response"]["allowed"], true, "{v}");
    let warnings = v["response"]["warnings"].to_string();
    assert!(
        warnings.contains("BackupWaitingForCredentials: waiting for credential Secret \\\"elsewhere\\\" in namespace \\\"hypershift\\\""),
        "{warnings}"
    );
    // Does not fit S3: denied, naming the detected mode, never the value.
    let v = post("/validate/hcpetcdbackups", backup_review("c", &fx, "s3", "bad")).await.json();
    assert_eq!(v["response"]["allowed"], false);
    assert!(v.to_string().contains("the controller detects mode aws-sts"), "{v}");
    assert!(!v.to_string().contains(MARKER), "{v}");
    // The Secret webhook (Secret object in the request; no lookup).
    let secret = with_name(fx["secretgarbage"].clone(), "typed-by-hand");
    let v = post(
        "/validate/etcd-backup-secrets",
        common::admission_review("s", "secrets", None, "CREATE", Some(&secret), None),
    )
    .await
    .json();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert!(!v.to_string().contains(MARKER));
    // A usable Secret posted by a caller without a client certificate (the
    // review's m2: it set the series, and 600 names evicted the real one):
    // allowed, and recorded nowhere.
    let forged = with_name(fx["secretsts"].clone(), "forged-usable");
    let v = post(
        "/validate/etcd-backup-secrets",
        common::admission_review("f", "secrets", None, "CREATE", Some(&forged), None),
    )
    .await
    .json();
    assert_eq!(v["response"]["allowed"], true, "{v}");

    let metrics = https.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    let line = "hcp_etcd_admission_backup_credentials_valid{namespace=\"hypershift\",secret=\"good\"} 1";
    assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    // Denied reviews make no series (a caller cannot add one by being
    // refused), nor does a name that does not exist (any caller can name
    // one), nor a Secret posted by a caller that is not the apiserver.
    for absent in ["secret=\"bad\"", "secret=\"typed-by-hand\"", "secret=\"elsewhere\"", "secret=\"forged-usable\""] {
        assert!(!metrics.contains(absent), "{absent} in\n{metrics}");
    }
    assert!(!metrics.contains(MARKER));

    // Least privilege, as asked of the apiserver: StatefulSets only by GET of
    // `etcd` (never listed or watched), Secrets only by GET in the operator
    // namespace.
    let requests = api.requests();
    assert!(requests.iter().any(|r| r.contains("/statefulsets")), "the etcd StatefulSet is read: {requests:#?}");
    for r in &requests {
        if r.contains("/statefulsets") {
            assert!(r.starts_with("GET /apis/apps/v1/namespaces/") && r.contains("/statefulsets/etcd"), "{r}");
            assert!(!r.contains("watch"), "{r}");
        }
        if r.contains("secrets") {
            assert!(r.starts_with("GET /api/v1/namespaces/hypershift/secrets/"), "{r}");
            assert!(!r.contains("watch"), "{r}");
        }
    }
    let reads = requests.iter().filter(|r| r.contains("/secrets/") && !r.contains("/secrets/probe")).count();
    assert_eq!(reads, 3, "{requests:#?}");
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_off_watches_and_reads_nothing_for_it() {
    common::https::install_provider();
    let api = common::fake_apiserver::start(vec![fixtures()["hcp"].clone()], Duration::from_millis(0)).await;
    let dir = std::env::temp_dir().join(format!("hcp-preflight-off-{}", std::process::id()));
    let set = certs::generate("preflight CA", &["localhost".into(), "127.0.0.1".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let settings = hcp_etcd_admission::settings::Settings { backup_preflight: false, ..Default::default() };
    let srv = common::running::start_settings(&dir, settings, LookupSource::Cluster(api.client())).await;
    let https = Client::new(&[&set.ca_pem], None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while https.request(srv.addr, "GET", "/readyz", vec![]).await.expect("readyz").status != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = https
        .post_json(srv.addr, "/validate/hcpetcdbackups", &backup_review("x", &fixtures(), "s3", "missing"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], true, "{v}");
    assert!(v["response"].get("warnings").is_none(), "{v}");
    let requests = api.requests();
    assert!(
        requests.iter().all(|r| r.contains("/hostedcontrolplanes")),
        "with backupPreflight off only HostedControlPlanes are watched: {requests:#?}"
    );
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Secret read the apiserver refuses (no Role in that namespace): that one
/// check is skipped with a warning saying so; the others still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_secret_read_skips_that_check_with_a_warning() {
    common::https::install_provider();
    let fx = fixtures();
    let api =
        common::fake_apiserver::start(vec![fx["hcp"].clone(), fx["etcd"].clone()], Duration::from_millis(0)).await;
    let settings =
        hcp_etcd_admission::settings::Settings { operator_namespace: "forbidden".into(), ..Default::default() };
    let (srv, https, dir) = serve_cluster(&api, "403", settings, &fx).await;
    let v = https
        .post_json(srv.addr, "/validate/hcpetcdbackups", &backup_review("y", &fx, "azure", "any"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], true, "{v}");
    assert_eq!(
        v["response"]["warnings"],
        serde_json::json!([
            "spec.storage.azureBlob.credentials.name: the credentials Secret not checked: it could not be looked up (rule hcpetcdbackup-preflight-unavailable)"
        ])
    );
    let metrics = https.request(srv.addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(!metrics.contains("secret=\"any\""), "an unread Secret has no gauge value: {metrics}");
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A denial is never made on a lagging cache: a HostedControlPlane created
/// after the watch listed, and a backup that finished after it, are read live
/// before the preflight denies (the fake's watches never send events, so the
/// server's caches keep their first list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_watch_never_denies_a_backup() {
    common::https::install_provider();
    let fx = fixtures();
    let good = with_name(fx["secretsts"].clone(), "good");
    // As first listed: no HostedControlPlane yet, another backup in progress.
    let api = common::fake_apiserver::start(
        vec![fx["running"].clone(), fx["etcd"].clone(), good.clone()],
        Duration::from_millis(0),
    )
    .await;
    let (srv, https, dir) = serve_cluster(&api, "lag", Default::default(), &fx).await;

    // The live reads agree with the cache: both denials.
    let v = https
        .post_json(srv.addr, "/validate/hcpetcdbackups", &backup_review("l1", &fx, "s3", "good"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    let message = v["response"]["status"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("HostedControlPlane not found in namespace clusters-prod"), "{message}");
    assert!(message.contains("\"oadp-earlier-a1b2\" in namespace \"clusters-prod\" is in progress"), "{message}");

    // The cluster moves on; the watch does not tell: the HostedControlPlane
    // now exists and the other backup has completed.
    let mut finished = fx["running"].clone();
    finished["status"] = fx["done"]["status"].clone();
    api.set_objects(vec![fx["hcp"].clone(), finished, fx["etcd"].clone(), good]);
    // A namespace a live read found empty is trusted as empty for the
    // negative-cache TTL (so repeating a review does not repeat the read).
    let ttl = hcp_etcd_admission::server::limits::LimitOptions::default().negative_cache_ttl;
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let v = https
        .post_json(srv.addr, "/validate/hcpetcdbackups", &backup_review("l2", &fx, "s3", "good"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], true, "read live, not denied from the lagging cache: {v}");
    let requests = api.requests();
    for live in ["/namespaces/clusters-prod/hostedcontrolplanes", "/namespaces/clusters-prod/hcpetcdbackups"] {
        assert!(requests.iter().any(|r| r.starts_with("GET ") && r.contains(live)), "{live} never read: {requests:#?}");
    }
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Callers that make the server read (a fresh namespace each time: a cache
/// miss and a live LIST; a fresh Secret name each time: a live GET) against
/// a slow apiserver (1.5 s a read). Before, those reads held decision slots
/// and 5 of 8 real reviews got 429; now they happen before a slot is taken,
/// at most 2 at once for one source (half of `max_live_reads`), and a
/// HostedCluster review that needs no read is answered at once throughout.
/// Reviews denied without the preflight (schema) and names that are not
/// object names are never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_make_the_server_read_hold_no_decision_slot() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    common::https::install_provider();
    let fx = fixtures();
    let delay = Duration::from_millis(1500);
    let objects = vec![fx["hcp"].clone(), fx["etcd"].clone(), with_name(fx["secretsts"].clone(), "good")];
    let api = common::fake_apiserver::start_with_delays(objects, delay, delay).await;
    let (srv, https, dir) = serve_cluster(&api, "slots", Default::default(), &fx).await;
    let (addr, https) = (srv.addr, Arc::new(https));
    let attacker: std::net::IpAddr = "127.0.0.2".parse().expect("ip");

    // Nothing is read for a review the schema denies or a name that is not an object name.
    let seen = api.requests().len();
    let mut no_schema = backup_review("schema", &fx, "s3", "fresh-but-denied");
    no_schema["request"]["object"]["spec"]["storage"]["s3"]["bucket"] = Value::from("Not_A_Bucket");
    for (what, review) in [
        ("schema", no_schema),
        ("query", backup_review("q", &fx, "s3", "x?labelSelector=a")),
        ("dotdot", backup_review("d", &fx, "s3", "../../../apis/apps/v1/statefulsets")),
        ("list", backup_review("l", &fx, "s3", "?")),
    ] {
        let v = https.post_json(addr, "/validate/hcpetcdbackups", &review).await.expect("post").json();
        assert_eq!(v["response"]["allowed"], false, "{what}: {v}");
    }
    let after: Vec<String> = api.requests().split_off(seen);
    assert!(after.iter().all(|r| !r.contains("/secrets")), "nothing read: {after:#?}");

    // A namespace found empty is remembered: repeating the review reads once.
    let sts_review = |ns: &str| {
        let text = std::fs::read_to_string(common::root().join("tests/conformance/statefulset.yaml")).expect("sts");
        let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
        let mut sts = doc["fixtures"]["sts3"].clone();
        sts["metadata"]["namespace"] = Value::from(ns);
        common::admission_review(ns, "statefulsets", None, "CREATE", Some(&sts), None)
    };
    for _ in 0..3 {
        let v = https.post_json(addr, "/mutate/etcd-statefulsets", &sts_review("clusters-empty")).await.expect("post");
        assert_eq!(v.json()["response"]["allowed"], false, "no HostedControlPlane: {}", v.text());
    }
    let lists = api.requests().iter().filter(|r| r.contains("/namespaces/clusters-empty/hostedcontrolplanes")).count();
    assert_eq!(lists, 1, "the empty answer was remembered");

    // 32 callers from another address, for 4 s, each making the server read.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, busy) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reads_before = api.requests().len();
    let mut tasks = Vec::new();
    for t in 0..32u64 {
        let (https, stop, sent, fx) = (https.clone(), stop.clone(), sent.clone(), fx.clone());
        tasks.push(tokio::spawn(async move {
            use http_body_util::BodyExt as _;
            let mut i = 0u64;
            // One keep-alive connection each (reconnected if closed), a review every 100 ms.
            while !stop.load(Ordering::Relaxed) {
                let Ok(tls) = https.connect_from(addr, attacker).await else { continue };
                let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake::<
                    _,
                    http_body_util::Full<hyper::body::Bytes>,
                >(hyper_util::rt::TokioIo::new(tls))
                .await
                else {
                    continue;
                };
                tokio::spawn(conn);
                while !stop.load(Ordering::Relaxed) && sender.ready().await.is_ok() {
                    i += 1;
                    let (path, review) = if (t + i).is_multiple_of(2) {
                        ("/mutate/etcd-statefulsets", sts_review(&format!("attack-{t}-{i}")))
                    } else {
                        let name = format!("guess-{t}-{i}");
                        ("/validate/hcpetcdbackups", backup_review(&format!("a{t}-{i}"), &fx, "s3", &name))
                    };
                    let body = http_body_util::Full::new(hyper::body::Bytes::from(review.to_string()));
                    let req = hyper::Request::post(path)
                        .header("host", "localhost")
                        .header("content-type", "application/json")
                        .body(body)
                        .expect("request");
                    match sender.send_request(req).await {
                        Ok(r) => {
                            let _ = r.into_body().collect().await;
                        }
                        Err(_) => break,
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    let attack_started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hc = {
        let text = std::fs::read_to_string(common::root().join("tests/conformance/hostedcluster.yaml")).expect("hc");
        let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
        common::admission_review("victim", "hostedclusters", None, "CREATE", Some(&doc["fixtures"]["hc"]), None)
    };
    let mut lat = Vec::new();
    let attempts = 20;
    for _ in 0..attempts {
        let started = std::time::Instant::now();
        match https.post_json(addr, "/validate/hostedclusters", &hc).await {
            Ok(r) if r.status == 200 && r.json()["response"]["allowed"] == true => lat.push(started.elapsed()),
            Ok(r) => {
                busy.fetch_add(1, Ordering::Relaxed);
                eprintln!("victim: HTTP {} {}", r.status, r.text());
            }
            Err(e) => eprintln!("victim: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let attack = attack_started.elapsed();
    lat.sort();
    let p99 = lat.last().copied().unwrap_or_default();
    let reads: Vec<String> = api.requests().split_off(reads_before);
    let live = reads.iter().filter(|r| r.contains("/secrets/") || r.contains("/namespaces/attack-")).count();
    let metrics = https.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hcp_etcd_admission_rejected_requests_total{reason=\"live_reads\"} "))
        .unwrap_or("0")
        .to_string();
    eprintln!(
        "slow apiserver (1.5 s), {attack:?} of attack: {} attacker reviews making the server read, {live} live reads done, {refused} refused \
         by the live-read budget; victim HostedCluster reviews {}/{attempts} allowed, p50 {:?}, p99 {p99:?}",
        sent.load(Ordering::Relaxed),
        lat.len(),
        lat.get(lat.len() / 2).copied().unwrap_or_default(),
    );
    assert_eq!(lat.len(), attempts, "every real review was answered, none turned away for a slot");
    assert!(p99 < Duration::from_secs(4), "within the request deadline: p99 {p99:?}");
    // One source: at most 2 reads at once, each 1.5 s long, for as long as the attack ran.
    let bound = 2 * (attack.as_millis() as usize / 1500 + 2);
    assert!(live <= bound, "the attacker's reads were bounded by its share of the budget: {live} in {attack:?}");
    // Attacker-named Secrets that do not exist are counted (allowed with a
    // warning), but never more than the series cap.
    assert!(metrics.len() < 256 * 1024, "{} bytes of /metrics", metrics.len());
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The security review's C3: any namespace admin can create a StatefulSet
/// named `etcd` of 1.4 MiB, and a reflector of every such object took the
/// webhook down at every start. The server never lists or watches
/// StatefulSets; it reads the etcd StatefulSet of a backup's namespace live,
/// only when that namespace has a HostedControlPlane, and keeps its replica
/// counts only: a tenant's StatefulSet is never requested, even when a
/// backup names the tenant's namespace, and a big one in a hosted namespace
/// is still judged by its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_statefulsets_named_etcd_are_never_listed_and_a_big_one_is_read_by_its_counts() {
    common::https::install_provider();
    let fx = fixtures();
    let big = |ns: &str, ready: i64| {
        let env: Vec<Value> =
            (0..50_000).map(|i| serde_json::json!({"name": format!("E{i:05}"), "value": ""})).collect();
        serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "etcd", "namespace": ns},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "x", "image": "x", "env": env}]}}},
            "status": {"readyReplicas": ready}})
    };
    let mut objects = vec![fx["hcp"].clone(), big("clusters-prod", 1)];
    objects.extend((0..20).map(|i| big(&format!("tenant-{i}"), 0)));
    let size = serde_json::to_vec(&objects[1]).expect("json").len();
    assert!(size > 1_300_000, "a 1.4 MiB StatefulSet: {size} bytes");
    let api = common::fake_apiserver::start(objects, Duration::from_millis(0)).await;
    let (srv, https, dir) = serve_cluster(&api, "tenant-etcd", Default::default(), &fx).await;

    // A backup in the hosted namespace: its big etcd StatefulSet is judged by its counts.
    let v = https.post_json(srv.addr, "/validate/hcpetcdbackups", &backup_review("t1", &fx, "s3", "any")).await;
    let v = v.expect("post").json();
    assert!(
        v["response"]["warnings"].to_string().contains("etcd StatefulSet not fully ready: 1/3 replicas ready"),
        "{v}"
    );
    // A backup naming a tenant's namespace: denied (no HostedControlPlane), its StatefulSet never read.
    let mut tenant = backup_review("t2", &fx, "s3", "any");
    tenant["request"]["namespace"] = "tenant-3".into();
    tenant["request"]["object"]["metadata"]["namespace"] = "tenant-3".into();
    let v = https.post_json(srv.addr, "/validate/hcpetcdbackups", &tenant).await.expect("post").json();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert!(!v.to_string().contains("StatefulSet"), "{v}");

    let requests = api.requests();
    let sts: Vec<&String> = requests.iter().filter(|r| r.contains("statefulsets")).collect();
    assert!(!sts.is_empty(), "{requests:#?}");
    for r in sts {
        assert!(r.starts_with("GET /apis/apps/v1/namespaces/clusters-prod/statefulsets/etcd?"), "{requests:#?}");
    }
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
