//! Issue #30, part 1: re-applying the registrations (the README's upgrade
//! step, a GitOps self-heal) keeps the caBundle an injector wrote. The
//! manifests carry no `caBundle` field, so neither client-side apply (its
//! three-way merge) nor server-side apply with `--force-conflicts` (what
//! Argo CD's server-side sync does) owns or clears it. Against a real
//! kube-apiserver 1.35 of this test's own (the registrations fail closed,
//! so no other suite shares it) and the real kubectl 1.35. The Service
//! references are rewritten to a loopback URL (never called: nothing here
//! matches them), as every real-apiserver suite registers webhooks.

mod common;

use std::process::Command;

use base64::Engine as _;
use common::kube_apiserver::{Auth, Kube, KubeApiserver};
use serde_json::{json, Value};

fn kubectl() -> std::path::PathBuf {
    common::tools::go_bin("kube-1.35", "kubectl")
}

/// The registration stage as `kubectl kustomize` renders it, each webhook
/// pointed at a loopback URL instead of the Service.
fn rendered(dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl()).arg("kustomize").arg(dir).output().expect("kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        use serde::Deserialize as _;
        let mut v = Value::deserialize(doc).expect("yaml");
        for w in v["webhooks"].as_array_mut().expect("webhooks") {
            let path = w["clientConfig"]["service"]["path"].as_str().expect("path").to_string();
            assert!(w["clientConfig"].get("caBundle").is_none(), "the manifests own a caBundle: {w}");
            let cc = w["clientConfig"].as_object_mut().expect("clientConfig");
            cc.remove("service");
            cc.insert("url".into(), json!(format!("https://127.0.0.1:9{path}")));
        }
        objects.push(v);
    }
    objects
}

fn item_path(obj: &Value) -> String {
    let plural = match obj["kind"].as_str() {
        Some("ValidatingWebhookConfiguration") => "validatingwebhookconfigurations",
        _ => "mutatingwebhookconfigurations",
    };
    format!("/apis/admissionregistration.k8s.io/v1/{plural}/{}", obj["metadata"]["name"].as_str().expect("name"))
}

/// Each stored webhook's caBundle, by configuration and webhook name.
async fn bundles(api: &KubeApiserver, objects: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for o in objects {
        let got = api.must("GET", &item_path(o), None).await;
        for w in got["webhooks"].as_array().expect("webhooks") {
            let name = format!(
                "{}/{}",
                o["metadata"]["name"].as_str().unwrap_or_default(),
                w["name"].as_str().unwrap_or_default()
            );
            out.push((name, w["clientConfig"]["caBundle"].as_str().unwrap_or_default().to_string()));
        }
    }
    out
}

fn apply(kubeconfig: &std::path::Path, file: &std::path::Path, extra: &[&str]) {
    let out = Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("apply")
        .args(extra)
        .arg("-f")
        .arg(file)
        .output()
        .expect("kubectl");
    assert!(out.status.success(), "kubectl apply {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reapplying_the_registrations_keeps_the_injected_ca_bundle() {
    let mut needs = common::kube_apiserver::needs(Kube::V1_35);
    needs.push(common::tools::go_tool("kube-1.35", "kubectl"));
    if !common::env::ready("reapplying_the_registrations_keeps_the_injected_ca_bundle", &needs) {
        return;
    }
    let api = KubeApiserver::start(Kube::V1_35, &[]).await.expect("kube-apiserver");
    let kubeconfig = api.kubeconfig("reapply-admin", &Auth::Admin);
    for (stage, dir) in [
        ("kubernetes (cert-manager's cainjector)", "webhooks/install/kubernetes/registration"),
        ("openshift (service-ca)", "webhooks/install/openshift/registration"),
    ] {
        let objects = rendered(dir);
        let file = std::env::temp_dir().join(format!("hcp-reapply-{}.json", std::process::id()));
        std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()).expect("file");
        // The install: client-side apply, as the README says.
        apply(&kubeconfig, &file, &[]);
        // The injector fills every caBundle (an update under its own field manager).
        let ca = base64::engine::general_purpose::STANDARD.encode(format!("-----BEGIN CERTIFICATE-----\n{stage}\n"));
        inject(&api, &objects, &ca).await;
        let injected = bundles(&api, &objects).await;
        assert!(injected.iter().all(|(_, b)| *b == ca), "{stage}: not injected: {injected:?}");
        // The upgrade step: client-side apply of a changed registration (a
        // new version's timeout), then what Argo CD's server-side sync does
        // (server-side apply, forcing conflicts), then the same again.
        let mut next = objects.clone();
        for o in &mut next {
            for w in o["webhooks"].as_array_mut().expect("webhooks") {
                w["timeoutSeconds"] = json!(w["timeoutSeconds"].as_u64().unwrap_or(5) + 1);
            }
        }
        std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": next}).to_string()).expect("file");
        apply(&kubeconfig, &file, &[]);
        let stored = api.must("GET", &item_path(&objects[0]), None).await;
        assert_eq!(stored["webhooks"][0]["timeoutSeconds"], next[0]["webhooks"][0]["timeoutSeconds"], "not applied");
        assert_eq!(bundles(&api, &objects).await, injected, "{stage}: client-side re-apply changed the caBundle");
        apply(&kubeconfig, &file, &["--server-side", "--force-conflicts", "--field-manager=argocd-controller"]);
        assert_eq!(bundles(&api, &objects).await, injected, "{stage}: server-side apply (forced) changed the caBundle");
        apply(&kubeconfig, &file, &[]);
        assert_eq!(
            bundles(&api, &objects).await,
            injected,
            "{stage}: client-side after server-side changed the caBundle"
        );
        for o in &objects {
            api.must("DELETE", &item_path(o), None).await;
        }
        // The upgrade from registrations that set `caBundle: ""` (0.1.0),
        // applied client-side and injected: the CHANGELOG's upgrade note.
        // Server-side apply of this version keeps the bundle (the old
        // manager's field is not this one's to remove); a client-side apply
        // drops it once (the three-way merge removes what the last apply
        // set), as the note says.
        let mut old = objects.clone();
        for o in &mut old {
            for w in o["webhooks"].as_array_mut().expect("webhooks") {
                w["clientConfig"]["caBundle"] = json!("");
            }
        }
        for (how, extra) in [("server-side", &["--server-side", "--force-conflicts"][..]), ("client-side", &[][..])] {
            std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": old}).to_string()).expect("file");
            apply(&kubeconfig, &file, &[]);
            inject(&api, &objects, &ca).await;
            std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string())
                .expect("file");
            apply(&kubeconfig, &file, extra);
            let after = bundles(&api, &objects).await;
            if how == "server-side" {
                assert_eq!(after, injected, "{stage}: the server-side upgrade dropped the caBundle");
            } else {
                assert!(after.iter().all(|(_, b)| b.is_empty()), "{stage}: the upgrade note is wrong: {after:?}");
            }
            for o in &objects {
                api.must("DELETE", &item_path(o), None).await;
            }
        }
        let _ = std::fs::remove_file(&file);
    }
}

/// What an injector does: every webhook's caBundle set by an update under
/// its own field manager.
async fn inject(api: &KubeApiserver, objects: &[Value], ca: &str) {
    for o in objects {
        let mut cur = api.must("GET", &item_path(o), None).await;
        for w in cur["webhooks"].as_array_mut().expect("webhooks") {
            w["clientConfig"]["caBundle"] = json!(ca);
        }
        let put = format!("{}?fieldManager=cainjector", item_path(o));
        api.must("PUT", &put, Some(&cur)).await;
    }
}
