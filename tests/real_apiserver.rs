//! The generated CRD on the real kube-apiserver (1.35 and 1.34): accepted,
//! established, and judging a dry-run CREATE. The harness itself
//! (tests/common/kube_apiserver.rs) is proven here: certificates, admin,
//! RBAC under a ServiceAccount token, one namespace per test.

mod common;

use common::kube_apiserver::{self, Auth, Kube};
use serde_json::{json, Value};

/// The CRD as `crd` writes it into crds/.
pub fn generated_crd() -> Value {
    let text = std::fs::read_to_string(common::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml"))
        .expect("crds/hypershift.openshift.io_hcpetcdbackups.yaml");
    serde_yaml_ng::from_str(&text).expect("CRD YAML")
}

fn backup(ns: &str, name: &str, bucket: &str) -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1",
        "kind": "HCPEtcdBackup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"storage": {"storageType": "S3", "s3": {
            "bucket": bucket, "region": "us-east-1", "keyPrefix": "backups/etcd",
            "credentials": {"name": "creds"},
            "kmsKeyARN": "arn:aws:kms:us-east-1:123456789012:key/mrk-1234abcd"}}}
    })
}

async fn crd_accepted_and_dry_run_create(v: Kube) {
    let Some(api) = kube_apiserver::shared("crd_accepted_and_dry_run_create", v) else { return };
    let version = api.git_version().await.expect("/version");
    assert!(version.starts_with(&format!("v{}.", v.minor())), "{version}");
    api.apply_crd(&generated_crd()).await.expect("the generated CRD is accepted and established");
    let ns = api.namespace("crd-smoke").await;

    let good = api.create(&backup(&ns, "good", "hcp-etcd-backups"), true, &Auth::Admin).await.expect("create");
    assert_eq!(good.status, 201, "{}", good.text);
    // A dry run stores nothing.
    let stored = api.get(&backup(&ns, "good", "x")).await.expect("get");
    assert_eq!(stored.status, 404, "{}", stored.text);

    let bad = api.create(&backup(&ns, "bad", "MyBucket"), true, &Auth::Admin).await.expect("create");
    assert_eq!(bad.status, 422, "{}", bad.text);
    assert_eq!(bad.body["kind"], "Status");
    assert_eq!(bad.body["reason"], "Invalid");
    let causes = bad.body["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert!(causes.iter().any(|c| c["field"] == "spec.storage.s3.bucket"), "{}", bad.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_accepted_and_dry_run_create_1_35() {
    crd_accepted_and_dry_run_create(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_accepted_and_dry_run_create_1_36() {
    crd_accepted_and_dry_run_create(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_accepted_and_dry_run_create_1_37() {
    crd_accepted_and_dry_run_create(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_accepted_and_dry_run_create_1_34() {
    crd_accepted_and_dry_run_create(Kube::V1_34).await;
}

/// A ServiceAccount token runs under exactly the RBAC bound to it: nothing
/// before a Role is bound, the Role's verbs after, and no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_token_runs_under_exact_rbac() {
    let Some(api) = kube_apiserver::shared("service_account_token_runs_under_exact_rbac", Kube::V1_35) else {
        return;
    };
    let ns = api.namespace("sa-rbac").await;
    let token = Auth::Token(api.token(&ns, "reader").await.expect("token"));
    let list = format!("/api/v1/namespaces/{ns}/configmaps");
    let before = api.request("GET", &list, None, &token).await.expect("list");
    assert_eq!(before.status, 403, "{}", before.text);
    assert!(before.text.contains(&format!("system:serviceaccount:{ns}:reader")), "{}", before.text);

    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cm-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "cm-reader", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]});
    api.apply(&role).await.expect("role");
    api.apply(&binding).await.expect("binding");
    // RBAC reads from an informer: the binding takes effect a moment later.
    let mut status = 0;
    for _ in 0..100 {
        status = api.request("GET", &list, None, &token).await.expect("list").status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "the bound Role lets the ServiceAccount list");
    // Only what the Role grants: no create, no Secrets.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}});
    assert_eq!(api.create(&cm, true, &token).await.expect("create").status, 403);
    let secrets = api.request("GET", &format!("/api/v1/namespaces/{ns}/secrets"), None, &token).await.expect("secrets");
    assert_eq!(secrets.status, 403, "{}", secrets.text);

    // The kube client the server shells use works with the same token.
    let client = api.client(&token).await;
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client, &ns);
    cms.list(&Default::default()).await.expect("kube client lists under the token");
}
