//! The project's webhooks registered for real on kube-apiserver 1.35 (and
//! 1.34 for the core cases), from the project's own manifests, with `serve`
//! running under exactly `webhooks/base`'s RBAC (tests/real_webhooks/setup.rs
//! says how the manifests are applied). Every answer that goes through the
//! apiserver is compared with the library's answer to the AdmissionReview the
//! apiserver sends, deciding from the objects the cluster holds: the same
//! verdict, code, causes, warnings, and the message behind the apiserver's
//! `admission webhook "<name>" denied the request: ` prefix.
//!
//! After every test the apiserver's audit log must show no 401/403 for
//! serve's ServiceAccount, and serve's log no refused call.
//!
//! What the real apiserver cannot produce (a hostile caller, a malformed
//! AdmissionReview, a body past the limits) stays on raw posts over TLS in
//! tests/server*.rs.

mod common;
#[path = "real_webhooks/objects.rs"]
mod objects;
#[path = "real_webhooks/setup.rs"]
mod setup;

use std::time::{Duration, Instant};

use common::kube_apiserver::Kube;
use objects::{assert_same, backup, differences, etcd_sts, hosted, library, presigned_url, secret, GARBAGE, ROLE_ARN};
use serde_json::{json, Value};
use setup::{env, hcp_label, labelled_namespace, of_kind, Env};

/// The name of the manifests' webhook whose rules cover `resource`.
fn webhook(env: &Env, resource: &str) -> String {
    env.manifests
        .iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration")))
        .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
        .find(|w| w["rules"][0]["resources"][0] == resource)
        .and_then(|w| w["name"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no webhook for {resource} in webhooks/base"))
}

async fn hcp_namespace(env: &Env, prefix: &str) -> String {
    let (k, v) = hcp_label(&env.manifests);
    labelled_namespace(&env.api, prefix, &[(&k, &v)]).await
}

/// Sends `send` until the apiserver's answer is the library's (serve's
/// caches catch up with objects just written), then asserts it.
async fn eventually_same<F, Fut>(webhook: &str, lib: &Value, mut send: F) -> setup::Answer
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = setup::Answer>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = send().await;
        if differences(&a, lib, webhook).is_empty() || Instant::now() > deadline {
            assert_same(&a, lib, webhook);
            return a;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The stored object, which must exist.
async fn stored(env: &Env, obj: &Value) -> Value {
    let a = env.get(obj).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

async fn configurations_stored_as_the_manifests_say(v: Kube) {
    let Some(env) = env("configurations_stored_as_the_manifests_say", v) else { return };
    let port = env.serve.port;
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        for cfg in of_kind(&env.manifests, kind) {
            let name = cfg["metadata"]["name"].as_str().expect("name");
            let plural = common::kube_apiserver::plural(kind).expect("plural");
            let got = env.call("GET", &format!("/apis/admissionregistration.k8s.io/v1/{plural}/{name}"), None).await;
            assert_eq!(got.status, 200, "{}", got.text);
            let want = cfg["webhooks"].as_array().expect("webhooks");
            let have = got.body["webhooks"].as_array().expect("stored webhooks");
            assert_eq!(want.len(), have.len(), "{name}");
            for (w, h) in want.iter().zip(have) {
                for (k, val) in w.as_object().expect("webhook") {
                    if k == "clientConfig" {
                        let path = val["service"]["path"].as_str().expect("the manifests name a path");
                        assert_eq!(h[k]["url"], json!(format!("https://127.0.0.1:{port}{path}")));
                        assert!(h[k]["caBundle"].as_str().is_some_and(|b| !b.is_empty()));
                        assert!(h[k].get("service").is_none(), "never a Service: {}", h[k]);
                        continue;
                    }
                    // Everything else exactly as the manifests say (the
                    // apiserver only adds defaults for what they leave out).
                    assert_eq!(&h[k], val, "{name}: webhook {} field {k}", w["name"]);
                }
            }
        }
    }
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_stored_as_the_manifests_say_1_35() {
    configurations_stored_as_the_manifests_say(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_stored_as_the_manifests_say_1_36() {
    configurations_stored_as_the_manifests_say(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_stored_as_the_manifests_say_1_37() {
    configurations_stored_as_the_manifests_say(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_stored_as_the_manifests_say_1_34() {
    configurations_stored_as_the_manifests_say(Kube::V1_34).await;
}

/// The HCPEtcdBackup CREATE preflight reads the cluster through serve's
/// caches and a live Secret GET, as the manifests' ServiceAccount.
async fn backup_preflight(v: Kube) {
    let Some(env) = env("backup_preflight", v) else { return };
    let wh = webhook(env, "hcpetcdbackups");
    let ns = hcp_namespace(env, "preflight").await;
    let creds = format!("creds-{ns}");
    let b = backup(&ns, "nightly", &creds);

    // Nothing in place: no HostedControlPlane, no etcd, no Secret. (The
    // library's context is a snapshot of the cluster: it holds the namespace.)
    let namespace = env.call("GET", &format!("/api/v1/namespaces/{ns}"), None).await.body;
    let lib = library(&env.settings, "CREATE", &b, None, std::slice::from_ref(&namespace));
    assert_eq!(lib["allowed"], false);
    let a = eventually_same(&wh, &lib, || env.create(&b, true)).await;
    assert_eq!(a.status, 422, "{}", a.text);

    // A HostedControlPlane, a ready etcd StatefulSet, the credentials Secret
    // in the operator namespace.
    let hcp = hosted("HostedControlPlane", &ns, "prod", None);
    assert_eq!(env.create(&hcp, false).await.status, 201);
    let sts = etcd_sts(&ns, "etcd", 3);
    let created = setup::until(30, || async { Some(env.create(&sts, false).await).filter(|a| a.status == 201) }).await;
    assert!(created.is_some(), "etcd StatefulSet not created");
    let mut st = stored(env, &sts).await;
    st["status"] =
        json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3});
    let a = env.update(&st, Some("status"), false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let s = secret(&env.operator_ns, &creds, true, ROLE_ARN);
    let a = env.create(&s, false).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let context = vec![namespace.clone(), stored(env, &hcp).await, stored(env, &sts).await, s.clone()];

    // The credentials Secret named is not in the operator namespace.
    let missing = backup(&ns, "missing", &format!("absent-{ns}"));
    // Waited for, as the controller waits: allowed with a warning.
    let lib = library(&env.settings, "CREATE", &missing, None, &context);
    assert_eq!(lib["allowed"], true, "{lib}");
    assert!(lib["warnings"].to_string().contains("BackupWaitingForCredentials"), "{lib}");
    eventually_same(&wh, &lib, || env.create(&missing, true)).await;

    // Everything in place: allowed and stored.
    let lib = library(&env.settings, "CREATE", &b, None, &context);
    assert_eq!(lib["allowed"], true, "{lib}");
    let a = eventually_same(&wh, &lib, || env.create(&b, true)).await;
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    let a = env.create(&b, false).await;
    assert_same(&a, &lib, &wh);

    // That backup in progress: another one is denied, naming it.
    let mut running = stored(env, &b).await;
    running["status"] = json!({"conditions": [{"type": "BackupCompleted", "status": "False", "reason": "BackupInProgress",
        "message": "", "lastTransitionTime": "2026-11-29T15:00:00Z", "observedGeneration": 1}]});
    let a = env.update(&running, Some("status"), false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let running = stored(env, &b).await;
    let second = backup(&ns, "second", &creds);
    let mut with_running = context.clone();
    with_running.push(running.clone());
    let lib = library(&env.settings, "CREATE", &second, None, &with_running);
    assert_eq!(lib["allowed"], false, "{lib}");
    assert!(lib["status"]["message"].as_str().is_some_and(|m| m.contains("\"nightly\"")), "{lib}");
    eventually_same(&wh, &lib, || env.create(&second, true)).await;

    // An UPDATE is not preflighted.
    let mut relabelled = running.clone();
    relabelled["metadata"]["labels"] = json!({"team": "storage"});
    let lib = library(&env.settings, "UPDATE", &relabelled, Some(&running), &with_running);
    let a = env.update(&relabelled, None, false).await;
    assert_same(&a, &lib, &wh);

    // serve read what the preflight needs, as its own ServiceAccount.
    let events = env.audit_events();
    let did = |verb: &str, needle: &str| {
        events.iter().any(|e| e["verb"] == verb && e["requestURI"].as_str().is_some_and(|u| u.contains(needle)))
    };
    assert!(
        did("get", &format!("/namespaces/{}/secrets/{creds}", env.operator_ns)),
        "no live Secret GET in the audit log"
    );
    for r in ["hostedcontrolplanes", "hcpetcdbackups"] {
        assert!(did("watch", r) && did("list", r), "serve never listed and watched {r}");
    }
    // The etcd StatefulSet is read live, by its name, in the backup's namespace: never listed.
    assert!(
        did("get", &format!("/namespaces/{ns}/statefulsets/etcd")),
        "no live etcd StatefulSet GET in the audit log"
    );
    assert!(!did("list", "statefulsets") && !did("watch", "statefulsets"), "serve listed or watched StatefulSets");
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_preflight_1_35() {
    backup_preflight(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_preflight_1_36() {
    backup_preflight(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_preflight_1_37() {
    backup_preflight(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_preflight_1_34() {
    backup_preflight(Kube::V1_34).await;
}

/// `restoreSnapshotURL` on HostedCluster and HostedControlPlane, CREATE and
/// UPDATE (the CRDs here keep every field: the webhook judges).
async fn hosted_restore_url(v: Kube) {
    let Some(env) = env("hosted_restore_url", v) else { return };
    for (kind, resource) in [("HostedCluster", "hostedclusters"), ("HostedControlPlane", "hostedcontrolplanes")] {
        let wh = webhook(env, resource);
        let ns = env.api.namespace(&format!("url-{resource}")).await;

        let http = hosted(kind, &ns, "plain", Some("http://backups.example.com/snapshot.db"));
        let lib = library(&env.settings, "CREATE", &http, None, &[]);
        assert_eq!(lib["allowed"], false, "{lib}");
        let a = env.create(&http, true).await;
        assert_same(&a, &lib, &wh);

        let good = hosted(kind, &ns, "prod", Some(&presigned_url("nightly")));
        let lib = library(&env.settings, "CREATE", &good, None, &[]);
        assert_eq!(lib["allowed"], true, "{lib}");
        let a = env.create(&good, false).await;
        assert_same(&a, &lib, &wh);
        let old = stored(env, &good).await;

        // Changing the URL after creation is denied.
        let mut moved = old.clone();
        moved["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = json!([presigned_url("other")]);
        let lib = library(&env.settings, "UPDATE", &moved, Some(&old), &[]);
        assert_eq!(lib["allowed"], false, "{lib}");
        let a = env.update(&moved, None, true).await;
        assert_same(&a, &lib, &wh);

        // An UPDATE that leaves spec.etcd alone passes (matchConditions skip it).
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"] = json!({"restored": "yes"});
        let a = env.update(&relabelled, None, false).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_restore_url_1_35() {
    hosted_restore_url(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_restore_url_1_36() {
    hosted_restore_url(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_restore_url_1_37() {
    hosted_restore_url(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_restore_url_1_34() {
    hosted_restore_url(Kube::V1_34).await;
}

fn init_names(sts: &Value) -> Vec<String> {
    sts.pointer("/spec/template/spec/initContainers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn etcd_init(sts: &Value) -> Value {
    sts.pointer("/spec/template/spec/initContainers")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["name"] == "etcd-init").cloned())
        .unwrap_or(Value::Null)
}

/// The etcd StatefulSet the apiserver stores after the mutation and its own
/// StatefulSet validation: etcd-init as the library computes it, before
/// reset-member; an UPDATE keeps exactly one; another StatefulSet is left alone.
/// Creates `obj`, retrying while serve's caches catch up (a denial first), for 30 s.
async fn created_once_allowed(env: &Env, obj: &Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = env.create(obj, false).await;
        if a.status == 201 {
            return;
        }
        assert!(Instant::now() < deadline, "not created: {} {}", a.status, a.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn mutation_stored(v: Kube, replicas: u32) {
    let Some(env) = env("mutation_stored", v) else { return };
    let ns = hcp_namespace(env, &format!("mutate-{replicas}")).await;
    let hcp = hosted("HostedControlPlane", &ns, "prod", Some(&presigned_url("restore")));
    let a = env.create(&hcp, false).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let hcp = stored(env, &hcp).await;

    // As the control-plane-operator renders it while the restore is pending:
    // its own etcd-init carries the URL, and the stored patch copies it.
    let mut sts = etcd_sts(&ns, "etcd", replicas);
    let url = hcp["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0].as_str().expect("url").to_string();
    common::render_etcd_init(&mut sts, &url);
    let lib = library(&env.settings, "CREATE", &sts, None, std::slice::from_ref(&hcp));
    assert_eq!(lib["allowed"], true, "{lib}");
    let want = common::patched_request_object(&sts, &lib).expect("the patch applies").expect("a patch");
    created_once_allowed(env, &sts).await;
    let got = stored(env, &sts).await;
    let expected_order: Vec<&str> =
        if replicas == 1 { vec!["etcd-init"] } else { vec!["ensure-dns", "etcd-init", "reset-member"] };
    assert_eq!(init_names(&got), expected_order, "{}", got["spec"]["template"]);
    // The stored etcd-init is the library's, plus the apiserver's defaults.
    common::subset(&etcd_init(&want), &etcd_init(&got), "etcd-init").unwrap_or_else(|e| panic!("{e}"));
    let env_of = |name: &str| {
        etcd_init(&got)["env"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name).cloned())
            .unwrap_or_default()
    };
    let url = hcp["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0].clone();
    assert_eq!(env_of("RESTORE_URL_ETCD")["value"], url);

    // An UPDATE (a label) keeps exactly one etcd-init, unchanged.
    let mut relabelled = got.clone();
    relabelled["metadata"]["labels"]["rev"] = json!("2");
    let a = env.update(&relabelled, None, false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let again = stored(env, &sts).await;
    assert_eq!(init_names(&again), expected_order);
    assert_eq!(etcd_init(&again), etcd_init(&got));
    // And the library, given what the apiserver stored, patches nothing more.
    let lib = library(&env.settings, "UPDATE", &relabelled, Some(&got), std::slice::from_ref(&hcp));
    assert!(lib.get("patch").is_none(), "{lib}");
    // A write without the control-plane-operator's etcd-init (what a forged
    // review holds) is refused, and the answer the caller gets has no URL.
    let mut forged = again.clone();
    if let Some(list) = forged.pointer_mut("/spec/template/spec/initContainers").and_then(Value::as_array_mut) {
        list.retain(|c| c["name"] != "etcd-init");
    }
    let a = env.update(&forged, None, true).await;
    assert_eq!(a.status, 422, "{}", a.text);
    assert!(a.text.contains("env[name=RESTORE_URL_ETCD]: Required value"), "{}", a.text);
    let url = url.as_str().unwrap_or_default();
    let path = url.split('?').next().unwrap_or_default().rsplit('/').next().unwrap_or_default();
    assert!(!path.is_empty() && !a.text.contains(path), "the answer names the restore URL: {}", a.text);

    // A StatefulSet not named etcd is stored as sent.
    let other = etcd_sts(&ns, "etcd-backup", replicas);
    let a = env.create(&other, false).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let other_stored = stored(env, &other).await;
    assert_eq!(init_names(&other_stored), init_names(&other));
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_3_replicas_1_35() {
    mutation_stored(Kube::V1_35, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_3_replicas_1_36() {
    mutation_stored(Kube::V1_36, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_3_replicas_1_37() {
    mutation_stored(Kube::V1_37, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_1_replica_1_35() {
    mutation_stored(Kube::V1_35, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_1_replica_1_36() {
    mutation_stored(Kube::V1_36, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_1_replica_1_37() {
    mutation_stored(Kube::V1_37, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_3_replicas_1_34() {
    mutation_stored(Kube::V1_34, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_stored_1_replica_1_34() {
    mutation_stored(Kube::V1_34, 1).await;
}

/// The etcd-backup credentials Secret webhook: only labelled Secrets reach
/// it (objectSelector), and no byte of a value comes back.
async fn secret_webhook(v: Kube) {
    let Some(env) = env("secret_webhook", v) else { return };
    let wh = webhook(env, "secrets");
    let ns = env.api.namespace("secrets").await;

    let bad = secret(&ns, "garbage", true, GARBAGE);
    let lib = library(&env.settings, "CREATE", &bad, None, &[]);
    assert_eq!(lib["allowed"], false, "{lib}");
    let a = env.create(&bad, true).await;
    assert_same(&a, &lib, &wh);
    assert!(!a.text.contains("not a credential") && !a.text.contains(GARBAGE), "{}", a.text);

    let good = secret(&ns, "role", true, ROLE_ARN);
    let lib = library(&env.settings, "CREATE", &good, None, &[]);
    assert_eq!(lib["allowed"], true, "{lib}");
    let a = env.create(&good, false).await;
    assert_same(&a, &lib, &wh);
    assert!(!a.warnings.is_empty(), "the mode warning comes back through the apiserver");

    // Unlabelled: never sent.
    let a = env.create(&secret(&ns, "unlabelled", false, GARBAGE), false).await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);

    // UPDATE to malformed data is denied.
    let old = stored(env, &good).await;
    let mut broken = old.clone();
    broken["data"]["credentials"] = json!(GARBAGE);
    let lib = library(&env.settings, "UPDATE", &broken, Some(&old), &[]);
    assert_eq!(lib["allowed"], false, "{lib}");
    let a = env.update(&broken, None, false).await;
    assert_same(&a, &lib, &wh);
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_webhook_1_35() {
    secret_webhook(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_webhook_1_36() {
    secret_webhook(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_webhook_1_37() {
    secret_webhook(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_webhook_1_34() {
    secret_webhook(Kube::V1_34).await;
}

/// The webhooks of the manifests' configurations, each with the object that
/// the shared registrations allow in `ns` (set up by the caller) and that
/// reaches the webhook: what a copy pointed at a slow or dead server gets.
/// The verify step (issue #33) as the apiserver stores it: HyperShift's
/// backup Job gets the library's `verify` init container after `snapshot`
/// (plus the apiserver's defaults); a Job without the operator's labels is
/// stored as sent; the stored Job, reviewed again, needs no patch.
async fn backup_job_mutation_stored(v: Kube) {
    let Some(env) = env("backup_job_mutation_stored", v) else { return };
    let ns = setup::labelled_namespace(&env.api, "backup-job", &[]).await;
    let job = common::hypershift_backup_job(&ns, "clusters-hc1", "etcd-backup-daily-x7k2p");
    let lib = library(&env.settings, "CREATE", &job, None, &[]);
    assert_eq!(lib["allowed"], true, "{lib}");
    let want = common::patched_request_object(&job, &lib).expect("the patch applies").expect("a patch");
    created_once_allowed(env, &job).await;
    let got = stored(env, &job).await;
    let inits = |o: &Value| -> Vec<String> {
        o["spec"]["template"]["spec"]["initContainers"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    assert_eq!(inits(&got), ["fetch-certs", "snapshot", "verify"], "{}", got["spec"]["template"]);
    let verify = |o: &Value| o["spec"]["template"]["spec"]["initContainers"][2].clone();
    common::subset(&verify(&want), &verify(&got), "verify").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got["spec"]["template"]["spec"]["containers"][0]["name"], "upload");
    // The apiserver takes the podFailurePolicy rule that names the step.
    assert_eq!(
        got["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["containerName"], "verify",
        "{}",
        got["spec"]
    );
    let again = library(&env.settings, "CREATE", &got, None, &[]);
    assert!(again.get("patch").is_none(), "the stored Job needs no second step: {again}");
    // Nothing can take the step out again (or fight over it): a Job's pod
    // template is immutable, and the HyperShift Operator never updates it.
    let mut without = got.clone();
    if let Some(list) = without.pointer_mut("/spec/template/spec/initContainers").and_then(Value::as_array_mut) {
        list.retain(|c| c["name"] != "verify");
    }
    let a = env.update(&without, None, false).await;
    assert_eq!(a.status, 422, "{}", a.text);
    assert!(a.text.contains("field is immutable"), "{}", a.text);

    let mut other = common::hypershift_backup_job(&ns, "clusters-hc1", "not-a-backup");
    other["metadata"]["labels"] = json!({"app": "something-else"});
    assert_eq!(env.create(&other, false).await.status, 201);
    assert_eq!(inits(&stored(env, &other).await), ["fetch-certs", "snapshot"]);
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_job_mutation_stored_1_35() {
    backup_job_mutation_stored(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_job_mutation_stored_1_37() {
    backup_job_mutation_stored(Kube::V1_37).await;
}

fn allowed_objects(env: &Env, ns: &str, creds: &str) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        for cfg in of_kind(&env.manifests, kind) {
            for w in cfg["webhooks"].as_array().into_iter().flatten() {
                let obj = match w["rules"][0]["resources"][0].as_str().unwrap_or_default() {
                    "hcpetcdbackups" => backup(ns, "allowed", creds),
                    "hostedclusters" => hosted("HostedCluster", ns, "allowed", Some(&presigned_url("a"))),
                    "hostedcontrolplanes" => hosted("HostedControlPlane", ns, "second", Some(&presigned_url("b"))),
                    "secrets" => secret(ns, "role", true, ROLE_ARN),
                    "statefulsets" => etcd_sts(ns, "etcd", 3),
                    "jobs" => common::hypershift_backup_job(ns, ns, "etcd-backup-daily"),
                    other => panic!("no allowed object for {other}"),
                };
                out.push((w.clone(), obj));
            }
        }
    }
    out
}

/// `failurePolicy` and `timeoutSeconds` as the manifests set them, with
/// serve slow (its process stopped: the kernel accepts the connection,
/// nothing answers) and down (killed: connection refused). A second serve
/// with the same arguments takes copies of the configurations that apply
/// only in one labelled namespace, so the shared registrations keep serving
/// the other tests.
async fn failure_policy_and_timeout(v: Kube) {
    let Some(env) = env("failure_policy_and_timeout", v) else { return };
    let (hk, hv) = hcp_label(&env.manifests);
    let scope = ("failure-probe", "hcp-etcd-admission.test/scope");
    let ns = labelled_namespace(&env.api, "failure", &[(&hk, &hv), (scope.1, scope.0)]).await;
    // What the shared registrations need to allow the objects.
    assert_eq!(env.create(&hosted("HostedControlPlane", &ns, "prod", None), false).await.status, 201);
    let creds = format!("creds-{ns}");
    assert_eq!(env.create(&secret(&env.operator_ns, &creds, true, ROLE_ARN), false).await.status, 201);
    let objects = allowed_objects(env, &ns, &creds);
    for (w, obj) in &objects {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let a = env.create(obj, true).await;
            if (200..300).contains(&a.status) {
                break;
            }
            assert!(Instant::now() < deadline, "{} never allowed its object in {ns}: {}", w["name"], a.text);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let (port, metrics_port) = (
        common::kube_apiserver::loopback_port().expect("port"),
        common::kube_apiserver::loopback_port().expect("port"),
    );
    let args = setup::serve_args(setup::the(&env.manifests, "Deployment"), port, metrics_port, &env.files, &[]);
    let second = setup::Serve::start(&env.dir, "serve-failure", &args, Some(&env.kubeconfig), port, &env.ca_pem, None)
        .await
        .expect("second serve");
    let mut copies = Vec::new();
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        for cfg in of_kind(&env.manifests, kind) {
            let copy = setup::on_loopback(cfg, port, &env.ca_pem, Some(scope));
            env.api.apply(&copy).await.expect("copy registered");
            copies.push(copy);
        }
    }

    // Slow: every webhook gives up after its timeoutSeconds and, failing
    // closed, refuses the write.
    second.signal("STOP");
    let slow = objects.iter().map(|(w, obj)| async move {
        let name = format!("{}.{}", scope.0, w["name"].as_str().unwrap_or_default());
        assert_eq!(w["failurePolicy"], "Fail", "{name}");
        let timeout = w["timeoutSeconds"].as_u64().expect("the manifests set timeoutSeconds");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let t0 = Instant::now();
            let a = env.create(obj, true).await;
            let took = t0.elapsed();
            let msg = a.body["message"].as_str().unwrap_or_default().to_string();
            if msg.contains(&format!("failed calling webhook \"{name}\"")) {
                return (name, timeout, took, a);
            }
            // Allowed: the copy is not in effect yet.
            assert!((200..300).contains(&a.status), "{name}: {} {}", a.status, a.text);
            assert!(Instant::now() < deadline, "{name}: the copy never took effect");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    for (name, timeout, took, a) in futures::future::join_all(slow).await {
        eprintln!("{name}: slow server refused after {took:?}: {} {}", a.status, a.body["message"]);
        assert!(!(200..300).contains(&a.status), "{name}: {}", a.text);
        let msg = a.body["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("?timeout={timeout}s")), "{name}: {msg}");
        assert!(
            took >= Duration::from_secs(timeout),
            "{name}: refused after {took:?}, before timeoutSeconds {timeout}"
        );
    }

    // Down: refused at once, nothing stored.
    second.signal("KILL");
    for (w, obj) in &objects {
        let name = format!("{}.{}", scope.0, w["name"].as_str().unwrap_or_default());
        let timeout = w["timeoutSeconds"].as_u64().unwrap_or_default();
        let t0 = Instant::now();
        let a = env.create(obj, false).await;
        let took = t0.elapsed();
        let msg = a.body["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("failed calling webhook \"{name}\"")), "{name}: {} {}", a.status, a.text);
        assert!(msg.contains("connection refused"), "{name}: {msg}");
        assert!(took < Duration::from_secs(timeout), "{name}: took {took:?}");
        assert_eq!(env.get(obj).await.status, 404, "{name}: stored although its webhook is down");
    }
    for copy in &copies {
        let plural = common::kube_apiserver::plural(copy["kind"].as_str().unwrap_or_default()).expect("plural");
        let name = copy["metadata"]["name"].as_str().unwrap_or_default();
        env.call("DELETE", &format!("/apis/admissionregistration.k8s.io/v1/{plural}/{name}"), None).await;
    }
    drop(second);
    env.assert_never_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_and_timeout_1_35() {
    failure_policy_and_timeout(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_and_timeout_1_36() {
    failure_policy_and_timeout(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_and_timeout_1_37() {
    failure_policy_and_timeout(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_and_timeout_1_34() {
    failure_policy_and_timeout(Kube::V1_34).await;
}

/// The apiserver calls the webhooks with a client certificate
/// (`--admission-control-config-file`: a `kubeConfigFile` user named for the
/// webhook's host:port), which serve with the client-auth overlay's
/// `--client-ca` and `--allowed-client-names` lets in; another certificate of
/// the same CA is refused (403), and so is no certificate (401): with
/// failurePolicy Fail the write is refused either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_accepted_and_wrong_one_refused_1_35() {
    client_certificate_accepted_and_wrong_one_refused(Kube::V1_35).await;
}

/// 1.36 removed `apiserver.config.k8s.io/v1alpha1` and decodes the admission
/// configuration strictly: the `v1` files the runbook gives must still load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_accepted_and_wrong_one_refused_1_37() {
    client_certificate_accepted_and_wrong_one_refused(Kube::V1_37).await;
}

async fn client_certificate_accepted_and_wrong_one_refused(v: Kube) {
    use base64::Engine as _;
    use common::kube_apiserver::{loopback_port, KubeApiserver, TestCa};
    let test = format!("client_certificate_accepted_and_wrong_one_refused_{}", v.minor());
    let test = test.as_str();
    if !common::env::ready(test, &common::kube_apiserver::needs(v)) {
        return;
    }
    let manifests = setup::manifests();
    let dir = std::env::temp_dir().join(format!("hcp-real-webhooks-client-cert-{}-{}", v.minor(), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let ca = TestCa::standalone("webhook client and serving CA").expect("CA");
    let allowed = setup::flag_in_manifests("--allowed-client-names").expect("the client-auth overlay's allow-list");
    let apiserver_name = allowed.split(',').next().expect("a name").to_string();
    let good = ca.client_cert(&apiserver_name, &[]).expect("cert");
    let wrong = ca.client_cert("system:node:worker-0", &[]).expect("cert");
    let ports: Vec<u16> = (0..3).map(|_| loopback_port().expect("port")).collect();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user = |port: u16, c: &common::kube_apiserver::CertPair| {
        json!({"name": format!("127.0.0.1:{port}"),
               "user": {"client-certificate-data": b64(&c.cert), "client-key-data": b64(&c.key)}})
    };
    let kubeconfig = json!({"apiVersion": "v1", "kind": "Config",
        "users": [user(ports[0], &good), user(ports[1], &wrong)], "clusters": [], "contexts": []});
    std::fs::write(dir.join("webhook-kubeconfig"), kubeconfig.to_string()).expect("write");
    let plugin = |name: &str| {
        json!({"name": name, "configuration": {"apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration", "kubeConfigFile": dir.join("webhook-kubeconfig")}})
    };
    let admission = json!({"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [plugin("ValidatingAdmissionWebhook"), plugin("MutatingAdmissionWebhook")]});
    std::fs::write(dir.join("admission.json"), admission.to_string()).expect("write");
    let api =
        KubeApiserver::start(v, &[format!("--admission-control-config-file={}", dir.join("admission.json").display())])
            .await
            .expect("kube-apiserver with an admission configuration");
    let tls = setup::admin_tls(&api).expect("admin");
    setup::apply_crds(&api).await.expect("CRDs");

    let serving = ca.serving_cert().expect("serving");
    let files =
        setup::ServeFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key"), settings: dir.join("settings.yaml") };
    std::fs::write(&files.cert, &serving.cert).expect("write");
    std::fs::write(&files.key, &serving.key).expect("write");
    let settings_yaml =
        setup::the(&manifests, "ConfigMap")["data"]["settings.yaml"].as_str().expect("settings").to_string();
    std::fs::write(&files.settings, &settings_yaml).expect("write");
    std::fs::write(dir.join("client-ca.crt"), &ca.pem).expect("write");
    let extra = [
        format!("--client-ca={}", dir.join("client-ca.crt").display()),
        format!("--allowed-client-names={allowed}"),
        // Only the HostedCluster webhook is registered here: no lookups.
        "--watch-hostedcontrolplanes=never".to_string(),
    ];
    let mut serves = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let args = setup::serve_args(
            setup::the(&manifests, "Deployment"),
            *port,
            loopback_port().expect("port"),
            &files,
            &extra,
        );
        serves.push(
            // The first one's watchdog removes the directory, also on a panic.
            setup::Serve::start(&dir, &format!("serve-{i}"), &args, None, *port, &ca.pem, (i == 0).then_some(&*dir))
                .await
                .expect("serve"),
        );
    }

    // The HostedCluster webhook of the manifests, registered once per server,
    // each copy applying in its own namespace.
    let mut hc_cfg = setup::the(&manifests, "ValidatingWebhookConfiguration").clone();
    hc_cfg["webhooks"] = json!(hc_cfg["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .filter(|w| w["rules"][0]["resources"][0] == "hostedclusters")
        .cloned()
        .collect::<Vec<_>>());
    let base_name = hc_cfg["webhooks"][0]["name"].as_str().expect("name").to_string();
    let label = "hcp-etcd-admission.test/scope";
    let mut namespaces = Vec::new();
    for (suffix, port) in ["good", "wrong", "none"].into_iter().zip(&ports) {
        let copy = setup::on_loopback(&hc_cfg, *port, &ca.pem, Some((suffix, label)));
        api.apply(&copy).await.expect("registered");
        namespaces.push((suffix, labelled_namespace(&api, suffix, &[(label, suffix)]).await, copy));
    }
    let settings: Value = serde_yaml_ng::from_str(&settings_yaml).expect("settings");

    // The apiserver's certificate is let in: the webhook decides.
    let (_, ns, copy) = &namespaces[0];
    setup::probe(&api, &tls, std::slice::from_ref(copy), ns).await.expect("the good copy answers");
    let http = hosted("HostedCluster", ns, "plain", Some("http://backups.example.com/snapshot.db"));
    let a = setup::call(
        &api,
        &tls,
        "POST",
        &format!("/apis/hypershift.openshift.io/v1beta1/namespaces/{ns}/hostedclusters?dryRun=All"),
        Some(&http),
    )
    .await
    .expect("post");
    assert_same(&a, &library(&settings, "CREATE", &http, None, &[]), &format!("good.{base_name}"));
    let ok = hosted("HostedCluster", ns, "prod", Some(&presigned_url("nightly")));
    let a = setup::call(
        &api,
        &tls,
        "POST",
        &format!("/apis/hypershift.openshift.io/v1beta1/namespaces/{ns}/hostedclusters?dryRun=All"),
        Some(&ok),
    )
    .await
    .expect("post");
    assert_eq!(a.status, 201, "{}", a.text);

    // Another certificate of the same CA, and none: refused by serve, so the
    // apiserver refuses the write (failurePolicy Fail).
    for (i, (suffix, ns, _)) in namespaces.iter().enumerate().skip(1) {
        let name = format!("{suffix}.{base_name}");
        let ok = hosted("HostedCluster", ns, "prod", Some(&presigned_url("nightly")));
        let path = format!("/apis/hypershift.openshift.io/v1beta1/namespaces/{ns}/hostedclusters");
        let refused = setup::until(60, || {
            let (ok, path, name) = (ok.clone(), path.clone(), name.clone());
            let (api, tls) = (&api, &tls);
            async move {
                let a = setup::call(api, tls, "POST", &path, Some(&ok)).await.ok()?;
                a.body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&format!("failed calling webhook \"{name}\"")))
                    .then_some(a)
            }
        })
        .await
        .unwrap_or_else(|| panic!("{name}: the write was never refused"));
        eprintln!("{name}: {} {}", refused.status, refused.body["message"]);
        // serve's own reason comes back through the apiserver (403 and 401 bodies).
        let why = if *suffix == "wrong" {
            "this client certificate's identity (CN) is not allowed to call admission paths"
        } else {
            "a client certificate signed by the configured client CA is required on admission paths"
        };
        let msg = refused.body["message"].as_str().unwrap_or_default();
        assert!(msg.ends_with(&format!("failed to call webhook: {why}")), "{name}: {}", refused.text);
        assert_eq!(refused.status, 500, "{name}: {}", refused.text);
        let stored = setup::call(&api, &tls, "GET", &format!("{path}/prod"), None).await.expect("get");
        assert_eq!(stored.status, 404, "{name}: stored although refused");
        let log = std::fs::read_to_string(&serves[i].log).unwrap_or_default();
        if *suffix == "wrong" {
            assert!(log.contains("not in --allowed-client-names"), "{log}");
        }
    }
    drop(serves);
    drop(api);
    let _ = std::fs::remove_dir_all(&dir);
}
