//! A stale cache never decides the etcd StatefulSet's CREATE. The reflector
//! holds an earlier HostedControlPlane of the namespace (no restore URL);
//! the cluster now has a new one, with a restore pending, that the watch has
//! not delivered. Every CREATE, and every UPDATE whose owner reference names
//! a HostedControlPlane UID the cache does not hold, is decided from a live
//! read: etcd-init is injected. (The apiserver is the project's minimal fake,
//! a stand-in: the watch it serves stays silent, which is the lag under test.)

mod common;

use std::time::Duration;

use hcp_etcd_admission::{
    lookup::{Lookup, LookupError},
    mutate::{self, etcd_init, Outcome},
    server::hcp_cache::HcpCache,
    settings::Settings,
};
use serde_json::{json, Value};

const NS: &str = "clusters-prod";
/// The new HostedControlPlane's restore URL (the control-plane-operator
/// renders its etcd-init with it; the webhook copies it from there).
const URL: &str = "https://b.s3.us-east-1.amazonaws.com/k/1.db";

fn hcp(uid: &str, url: Option<&str>) -> Value {
    let storage = match url {
        Some(u) => json!({"type": "PersistentVolume", "restoreSnapshotURL": [u]}),
        None => json!({"type": "PersistentVolume"}),
    };
    json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
        "metadata": {"name": "prod", "namespace": NS, "uid": uid, "resourceVersion": "7"},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": storage}}}})
}

fn sts(owner: Option<&str>) -> Value {
    let mut s = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "etcd", "namespace": NS},
        "spec": {"replicas": 1, "serviceName": "etcd-discovery", "template": {"spec": {"containers": [{
            "name": "etcd", "image": "etcd",
            "env": [{"name": "ETCD_DATA_DIR", "value": "/var/lib/data"}, {"name": "ETCD_NAME", "value": "etcd-0"}],
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]}]}}}});
    common::render_etcd_init(&mut s, URL);
    if let Some(uid) = owner {
        s["metadata"]["ownerReferences"] = json!([{"apiVersion": "hypershift.openshift.io/v1beta1",
            "kind": "HostedControlPlane", "name": "prod", "uid": uid, "controller": true}]);
    }
    s
}

/// How fresh the core's read plan asks the answer to be.
fn freshness(create: bool, object: &Value) -> hcp_etcd_admission::lookup::Freshness {
    mutate::reads(object, create).expect("the etcd StatefulSet reads its HostedControlPlanes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_cache_never_skips_a_restore() {
    let api = common::fake_apiserver::start(vec![hcp("old-uid", None)], Duration::ZERO).await;
    let cache = HcpCache::start(api.client());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cache.synced() {
        assert!(tokio::time::Instant::now() < deadline, "the cache never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The HostedControlPlane is replaced in the cluster; the watch does not say so.
    api.set_objects(vec![hcp("new-uid", Some(URL))]);
    let cached = cache.hosted_control_planes(NS).expect("cached");
    assert_eq!(cached[0]["metadata"]["uid"], "old-uid", "the cache must be stale for this test");
    let s = Settings::default();
    // The decision on the answer read (as the server lays it over its cache).
    let decide = |p: &Result<Vec<Value>, LookupError>, object: &Value, old: Option<&Value>| {
        let answers =
            hcp_etcd_admission::lookup::Answers { hcps: Some((NS.to_string(), p.clone())), ..Default::default() };
        etcd_init(object, old, NS, Some(&answers as &dyn Lookup), &s).outcome
    };

    // CREATE, with or without an owner reference: live, and a restore is pending.
    for owner in [None, Some("new-uid"), Some("old-uid")] {
        let object = sts(owner);
        let p = cache.lookup_fresh(NS, &freshness(true, &object)).await;
        assert_eq!(decide(&p, &object, None), Outcome::Injected, "CREATE with owner {owner:?}");
    }
    // An UPDATE owned by a HostedControlPlane the cache does not know: live.
    let object = sts(Some("new-uid"));
    let p = cache.lookup_fresh(NS, &freshness(false, &object)).await;
    assert_eq!(decide(&p, &object, Some(&object)), Outcome::Injected);
    // An UPDATE owned by the cached one: the cache answers (no live read).
    let lists = |api: &common::fake_apiserver::FakeApi| {
        api.requests().iter().filter(|r| r.contains("/namespaces/clusters-prod/hostedcontrolplanes")).count()
    };
    let before = lists(&api);
    let object = sts(Some("old-uid"));
    let p = cache.lookup_fresh(NS, &freshness(false, &object)).await;
    // (The cached one has no restore URL: the rendered etcd-init goes.)
    assert_eq!(decide(&p, &object, Some(&object)), Outcome::Removed);
    assert_eq!(lists(&api), before, "an UPDATE owned by the cached HostedControlPlane read live");
    assert!(before >= 4, "every CREATE and the foreign-owner UPDATE read live: {:?}", api.requests());

    // Asked synchronously (a Lookup, no live read possible there), the cache
    // answers only where the core lets it, and refuses where it may not.
    let refused = cache.hosted_control_planes_as(NS, &freshness(true, &sts(None)));
    assert!(matches!(refused, Err(LookupError::Failed(ref w)) if w.contains("needs a live read")), "{refused:?}");
    let refused = cache.hosted_control_planes_as(NS, &freshness(false, &sts(Some("new-uid"))));
    assert!(refused.is_err(), "an owner the cache lacks was answered from it: {refused:?}");
    let answered = cache.hosted_control_planes_as(NS, &freshness(false, &sts(Some("old-uid")))).expect("cached");
    assert_eq!(answered[0]["metadata"]["uid"], "old-uid");
}

/// The same through the running server (HTTPS, the router, the read plan and
/// its live reads): what kube-apiserver sends is what is decided on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_decides_a_create_from_a_live_read_through_its_route() {
    let api = common::fake_apiserver::start(vec![hcp("old-uid", None)], Duration::ZERO).await;
    let dir = std::env::temp_dir().join(format!("hcp-stale-route-{}", std::process::id()));
    let set = hcp_etcd_admission::server::certs::generate("stale CA", &["localhost".into(), "127.0.0.1".into()], 2)
        .expect("certs");
    hcp_etcd_admission::server::certs::write(&dir, &set).expect("write");
    let srv = common::running::start(
        &dir,
        None,
        Duration::from_secs(60),
        hcp_etcd_admission::server::LookupSource::Cluster(api.client()),
    )
    .await;
    let https = common::https::Client::new(&[&set.ca_pem], None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while https.request(srv.addr, "GET", "/readyz", vec![]).await.map(|r| r.status) != Ok(200) {
        assert!(tokio::time::Instant::now() < deadline, "the server's cache never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api.set_objects(vec![hcp("new-uid", Some(URL))]);
    // Injected: the patch adds etcd-init (a stale cache would only remove it).
    let patched = |reply: &Value| {
        assert_eq!(reply["response"]["allowed"], true, "{reply}");
        match common::decode_patch(&reply["response"]) {
            Some(Ok(patch)) => patch.0.iter().any(|op| matches!(op, json_patch::PatchOperation::Add(_))),
            _ => false,
        }
    };
    let post = |review: Value| {
        let (https, addr) = (&https, srv.addr);
        async move { https.post_json(addr, "/mutate/etcd-statefulsets", &review).await.expect("post").json() }
    };
    for owner in [None, Some("old-uid"), Some("new-uid")] {
        let object = sts(owner);
        let review = common::admission_review("c", "statefulsets", None, "CREATE", Some(&object), None);
        assert!(patched(&post(review).await), "CREATE with owner {owner:?} was decided from the stale cache");
    }
    let object = sts(Some("new-uid"));
    let review = common::admission_review("u", "statefulsets", None, "UPDATE", Some(&object), Some(&object));
    assert!(patched(&post(review).await), "an UPDATE owned by a HostedControlPlane the cache lacks");
    // Owned by the cached one: the cache answers, and it says no restore is pending.
    let object = sts(Some("old-uid"));
    let review = common::admission_review("o", "statefulsets", None, "UPDATE", Some(&object), Some(&object));
    assert!(!patched(&post(review).await), "an UPDATE owned by the cached HostedControlPlane");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}
