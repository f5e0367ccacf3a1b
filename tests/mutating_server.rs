//! The mutating path of the server with a kube-rs reflector over
//! HostedControlPlanes. There is no kube-apiserver on these machines, so a
//! minimal fake serves its side of the wire on loopback: the LIST of
//! hostedcontrolplanes (delayed, to observe /readyz waiting for the sync) and
//! a WATCH that stays open, exactly as kube-runtime's watcher requests them.

mod common;

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use axum::{body::Body, extract::RawQuery, response::IntoResponse, routing::get, Router};
use base64::Engine as _;
use common::https::Client;
use hcp_etcd_admission::{certs, server::LookupSource};
use serde_json::{json, Value};

fn hcp() -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
        "metadata": {"name": "prod", "namespace": "clusters-prod", "resourceVersion": "99", "uid": "1f0e"},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {
            "type": "PersistentVolume",
            "restoreSnapshotURL": ["https://b.s3.us-east-1.amazonaws.com/k/1764428700.db?X-Amz-Signature=abc"]}}},
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
    let app = Router::new().route("/apis/hypershift.openshift.io/v1beta1/hostedcontrolplanes", get(hcps));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn statefulset_review(resource: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance/statefulset.yaml")).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let sts = doc["fixtures"]["sts3"].clone();
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
    assert!(patch.to_string().contains("RESTORE_URL_ETCD"), "{patch}");
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
    srv.stop().await;
}
