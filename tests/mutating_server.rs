//! The mutating path of the server with a kube-rs reflector over
//! HostedControlPlanes. There is no kube-apiserver on these machines, so a
//! minimal fake serves its side of the wire on loopback: the LIST of
//! hostedcontrolplanes (delayed, to observe /readyz waiting for the sync) and
//! a WATCH that stays open, exactly as kube-runtime's watcher requests them,
//! and the namespaced LIST the server makes live on a cache miss.

mod common;

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use axum::{body::Body, extract::RawQuery, response::IntoResponse, routing::get, Router};
use base64::Engine as _;
use common::https::Client;
use hcp_etcd_admission::{server::certs, server::LookupSource};
use serde_json::{json, Value};

/// The restore URL of every HostedControlPlane the fake apiserver serves.
const URL: &str = "https://b.s3.us-east-1.amazonaws.com/k/1764428700.db?X-Amz-Signature=abc";

fn hcp() -> Value {
    hcp_in("clusters-prod")
}

fn hcp_in(ns: &str) -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
        "metadata": {"name": "prod", "namespace": ns, "resourceVersion": "99", "uid": "1f0e"},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {
            "type": "PersistentVolume",
            "restoreSnapshotURL": [URL]}}},
            "releaseImage": "quay.io/openshift-release-dev/ocp-release:4.20.0", "networking": {"clusterNetwork": [{"cidr": "10.132.0.0/14"}]}},
        "status": {"ready": false, "conditions": [{"type": "Available", "status": "False", "reason": "Waiting", "message": "", "lastTransitionTime": "2026-11-29T15:00:00Z"}]}
    })
}

async fn fake_apiserver() -> SocketAddr {
    async fn hcps(RawQuery(q): RawQuery) -> axum::response::Response {
        if q.unwrap_or_default().split('&').any(|kv| kv == "watch=true" || kv == "watch=1") {
            let stream = futures::stream::pending::<Result<axum::body::Bytes, Infallible>>();
            return ([("content-type", "application/json")], Body::from_stream(stream)).into_response();
        }
        tokio::time::sleep(Duration::from_millis(800)).await;
        let list = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlaneList",
            "metadata": {"resourceVersion": "100"}, "items": [hcp()]});
        ([("content-type", "application/json")], list.to_string()).into_response()
    }
    // The live read of one namespace: clusters-prod and clusters-new (created
    // after the watch's list) have one HostedControlPlane, clusters-none has
    // none, and reading clusters-forbidden is not allowed (RBAC).
    async fn namespaced(axum::extract::Path(ns): axum::extract::Path<String>) -> axum::response::Response {
        if ns == "clusters-forbidden" {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "hostedcontrolplanes.hypershift.openshift.io is forbidden: User \"system:serviceaccount:hcp:webhook\" cannot list resource \"hostedcontrolplanes\"",
                "reason": "Forbidden", "code": 403});
            return (axum::http::StatusCode::FORBIDDEN, [("content-type", "application/json")], status.to_string())
                .into_response();
        }
        let items = if ns == "clusters-prod" || ns == "clusters-new" { vec![hcp_in(&ns)] } else { vec![] };
        let list = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlaneList",
            "metadata": {"resourceVersion": "101"}, "items": items});
        ([("content-type", "application/json")], list.to_string()).into_response()
    }
    let app = Router::new()
        .route("/apis/hypershift.openshift.io/v1beta1/hostedcontrolplanes", get(hcps))
        .route("/apis/hypershift.openshift.io/v1beta1/namespaces/{ns}/hostedcontrolplanes", get(namespaced));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn statefulset_review(resource: &str) -> Value {
    statefulset_review_in(resource, "clusters-prod")
}

fn statefulset_review_in(resource: &str, ns: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance/statefulset.yaml")).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let mut sts = doc["fixtures"]["sts3"].clone();
    sts["metadata"]["namespace"] = json!(ns);
    common::render_etcd_init(&mut sts, URL);
    common::admission_review("mut-1", resource, None, "CREATE", Some(&sts), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_uses_the_reflector_and_readyz_waits_for_its_sync() {
    common::https::install_provider();
    let api = fake_apiserver().await;
    let config = kube::Config::new(format!("http://{api}").parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let dir = std::env::temp_dir().join(format!("hcp-mut-{}", std::process::id()));
    let set = certs::generate("mut CA", &["localhost".into(), "127.0.0.1".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let srv = common::running::start(&dir, None, Duration::from_secs(60), LookupSource::Cluster(client)).await;
    let addr = srv.addr;
    let https = Arc::new(Client::new(&[&set.ca_pem], None));
    // The list is delayed: not ready until the cache has synced.
    let first = https.request(addr, "GET", "/readyz", vec![]).await.expect("readyz");
    assert_eq!(first.status, 503, "{}", first.text());
    assert!(first.text().contains("HostedControlPlane cache"));
    // Restores pending: not known before the sync (-1).
    let unsynced = https.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(unsynced.lines().any(|l| l == "hcp_etcd_admission_restores_pending -1"), "{unsynced}");
    // Before the sync a decision reads the namespace live instead of guessing.
    let early =
        https.post_json(addr, "/mutate/etcd-statefulsets", &statefulset_review("statefulsets")).await.expect("post");
    let early = early.json();
    assert_eq!(early["response"]["allowed"], true, "{early}");
    assert_eq!(early["response"]["patchType"], "JSONPatch", "decided from the live read before the sync: {early}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = https.request(addr, "GET", "/readyz", vec![]).await.expect("readyz");
        if r.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "cache never synced: {}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reply =
        https.post_json(addr, "/mutate/etcd-statefulsets", &statefulset_review("statefulsets")).await.expect("post");
    let v = reply.json();
    let resp = &v["response"];
    assert_eq!(resp["allowed"], true);
    assert_eq!(resp["patchType"], "JSONPatch");
    let patch =
        base64::engine::general_purpose::STANDARD.decode(resp["patch"].as_str().expect("base64 string")).expect("b64");
    let patch: Value = serde_json::from_slice(&patch).expect("json patch");
    // The URL is copied from the object's own etcd-init, never written.
    assert!(patch.to_string().contains(r#""op":"copy""#) && !patch.to_string().contains("1764428700.db"), "{patch}");
    // The wrong resource on the mutating path: allowed, untouched, with a warning.
    let reply = https
        .post_json(
            addr,
            "/mutate/etcd-statefulsets",
            &serde_json::from_str::<Value>(
                &std::fs::read_to_string(common::root().join("tests/reviews/hcpetcdbackup-create-s3.json")).expect("r"),
            )
            .expect("j"),
        )
        .await
        .expect("post");
    let v = reply.json();
    assert_eq!(v["response"]["allowed"], true);
    assert!(v["response"].get("patch").is_none() && v["response"].get("patchType").is_none());
    assert!(v["response"]["warnings"][0].as_str().unwrap_or_default().contains("nothing changed"));
    // A cache miss after the sync: a HostedControlPlane the watch has not
    // delivered yet is found by the live read.
    let v = https
        .post_json(addr, "/mutate/etcd-statefulsets", &statefulset_review_in("statefulsets", "clusters-new"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], true, "{v}");
    assert_eq!(v["response"]["patchType"], "JSONPatch", "{v}");
    // None there, live either: denied, never admitted untouched.
    let v = https
        .post_json(addr, "/mutate/etcd-statefulsets", &statefulset_review_in("statefulsets", "clusters-none"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    assert_eq!(v["response"]["status"]["code"], 403);
    let msg = v["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("no HostedControlPlane found in namespace \"clusters-none\""), "{msg}");
    assert!(msg.contains("control-plane-operator retries"), "{msg}");
    assert!(v["response"].get("patch").is_none());
    // The live read fails (RBAC): denied with the reason.
    let v = https
        .post_json(addr, "/mutate/etcd-statefulsets", &statefulset_review_in("statefulsets", "clusters-forbidden"))
        .await
        .expect("post")
        .json();
    assert_eq!(v["response"]["allowed"], false, "{v}");
    let msg = v["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("could not be read") && msg.contains("forbidden"), "{msg}");
    // A forged review (no client certificate here) for the hosted namespace
    // with a pending restore, without the control-plane-operator's etcd-init,
    // or with a guessed URL: denied, and the answer holds nothing of the
    // namespace's presigned URL.
    let mut forged = statefulset_review_in("statefulsets", "clusters-prod");
    let inits =
        forged["request"]["object"]["spec"]["template"]["spec"]["initContainers"].as_array_mut().expect("inits");
    inits.retain(|c| c["name"] != "etcd-init");
    let mut guessed = statefulset_review_in("statefulsets", "clusters-prod");
    common::render_etcd_init(&mut guessed["request"]["object"], "https://b.s3.us-east-1.amazonaws.com/k/guess.db");
    for (what, review) in [("no etcd-init", forged), ("a guessed URL", guessed)] {
        let reply = https.post_json(addr, "/mutate/etcd-statefulsets", &review).await.expect("post");
        let v = reply.json();
        assert_eq!(v["response"]["allowed"], false, "{what}: {v}");
        assert!(v["response"].get("patch").is_none(), "{what}: {v}");
        let text = reply.text();
        assert!(text.contains("env[name=RESTORE_URL_ETCD]"), "{what}: {text}");
        assert!(!text.contains("1764428700.db") && !text.contains("X-Amz-Signature"), "{what}: {text}");
    }
    // Every outcome is counted, with a closed label set.
    let metrics = https.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    let count = |labels: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("hcp_etcd_admission_etcd_init_decisions_total{{{labels}}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no series {labels}:\n{metrics}"))
    };
    assert_eq!(count(r#"outcome="injected",reason="none""#), 3);
    // The cached HostedControlPlane has a restore URL and no EtcdSnapshotRestored: one restore pending.
    assert!(metrics.lines().any(|l| l == "hcp_etcd_admission_restores_pending 1"), "{metrics}");
    assert_eq!(count(r#"outcome="denied",reason="no_hostedcontrolplane""#), 1);
    assert_eq!(count(r#"outcome="denied",reason="lookup_failed""#), 1);
    assert_eq!(count(r#"outcome="denied",reason="cache_not_synced""#), 0);
    assert_eq!(count(r#"outcome="denied",reason="restore_url_not_rendered""#), 2);
    assert_eq!(count(r#"outcome="removed",reason="none""#), 0);
    srv.stop().await;
}
