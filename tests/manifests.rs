//! The deploy manifests in webhooks/: they parse, every kustomization
//! resource exists, every webhook path they name is served by the real server,
//! registration fields are what the README promises, the Deployment's flags
//! exist, the settings ConfigMap is valid, and `certs --inject` fills caBundles.

mod common;

use std::{path::Path, process::Command, time::Duration};

use common::https::Client;
use hcp_etcd_admission::{certs, server::LookupSource, settings::Settings};
use serde_json::Value;

fn yaml_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn all_objects() -> Vec<(std::path::PathBuf, Value)> {
    let mut files = Vec::new();
    yaml_files(&common::root().join("webhooks"), &mut files);
    files.sort();
    files.iter().flat_map(|f| docs(f).into_iter().map(move |d| (f.clone(), d))).collect()
}

#[test]
fn kustomizations_reference_existing_files() {
    let objects = all_objects();
    let mut n = 0;
    for (path, doc) in objects.iter().filter(|(_, d)| d["kind"] == "Kustomization") {
        let dir = path.parent().expect("dir");
        for r in doc["resources"].as_array().expect("resources") {
            let target = dir.join(r.as_str().expect("string"));
            assert!(
                target.is_file() || target.join("kustomization.yaml").is_file(),
                "{}: resource {} does not exist",
                path.display(),
                target.display()
            );
        }
        n += 1;
    }
    assert_eq!(n, 3, "base + two overlays");
}

#[test]
fn registrations_are_explicit_and_safe() {
    let objects = all_objects();
    let configs: Vec<&Value> = objects
        .iter()
        .map(|(_, d)| d)
        .filter(|d| {
            matches!(d["kind"].as_str(), Some("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration"))
        })
        .collect();
    assert_eq!(configs.len(), 2);
    for c in configs {
        for w in c["webhooks"].as_array().expect("webhooks") {
            let name = w["name"].as_str().unwrap_or_default();
            assert_eq!(w["admissionReviewVersions"], serde_json::json!(["v1"]), "{name}");
            assert_eq!(w["sideEffects"], "None", "{name}");
            assert_eq!(w["failurePolicy"], "Fail", "{name}: failurePolicy must be explicit (see the README)");
            let t = w["timeoutSeconds"].as_u64().expect("timeoutSeconds");
            assert!((1..=30).contains(&t), "{name}");
            assert!(w["rules"].as_array().is_some_and(|r| !r.is_empty()));
            if c["kind"] == "MutatingWebhookConfiguration" {
                assert_eq!(w["reinvocationPolicy"], "IfNeeded");
                assert!(w["matchConditions"].to_string().contains("object.metadata.name == 'etcd'"));
                assert!(w["namespaceSelector"].is_object(), "mutation scoped to HCP namespaces");
            }
        }
    }
    let vwc = objects.iter().find(|(_, d)| d["kind"] == "ValidatingWebhookConfiguration").expect("vwc");
    assert!(vwc.1.to_string().contains("hcpetcdbackups/status"), "status updates are validated");
}

#[test]
fn deployment_flags_exist_and_settings_parse() {
    let objects = all_objects();
    let deploy = &objects.iter().find(|(_, d)| d["kind"] == "Deployment").expect("deployment").1;
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    let help = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission")).args(["serve", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    for a in c["args"].as_array().expect("args").iter().filter_map(Value::as_str).skip(1) {
        let flag = a.split('=').next().unwrap_or_default();
        assert!(help.contains(flag), "serve has no flag {flag}");
    }
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(objects.iter().any(|(_, d)| d["kind"] == "PodDisruptionBudget"));
    let cm = &objects.iter().find(|(_, d)| d["kind"] == "ConfigMap").expect("configmap").1;
    let settings: Value =
        serde_yaml_ng::from_str(cm["data"]["settings.yaml"].as_str().expect("settings")).expect("yaml");
    Settings::from_json(&settings).expect("the shipped settings are valid");
    let rbac = objects.iter().find(|(_, d)| d["kind"] == "ClusterRole").expect("role");
    assert_eq!(rbac.1["rules"][0]["verbs"], serde_json::json!(["get", "list", "watch"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_webhook_path_in_the_manifests_is_served() {
    common::https::install_provider();
    let dir = std::env::temp_dir().join(format!("hcp-manifests-{}", std::process::id()));
    let set = certs::generate("manifest CA", &["localhost".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let srv = common::running::start(&dir, None, Duration::from_secs(60), LookupSource::None).await;
    let addr = srv.addr;
    let client = Client::new(&[&set.ca_pem], None);
    let mut paths = 0;
    for (_, doc) in all_objects() {
        for w in doc["webhooks"].as_array().cloned().unwrap_or_default() {
            let path = w["clientConfig"]["service"]["path"].as_str().expect("path").to_string();
            let rule = &w["rules"][0];
            let resource = rule["resources"][0].as_str().expect("resource");
            let review = common::admission_review(
                "m-1",
                resource,
                None,
                "DELETE",
                None,
                Some(&serde_json::json!({"metadata": {"name": "x"}})),
            );
            let r = client.post_json(addr, &path, &review).await.expect("post");
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            assert_eq!(r.json()["response"]["uid"], "m-1", "{path}");
            paths += 1;
        }
        for probe in ["readinessProbe", "livenessProbe"] {
            if let Some(p) =
                doc.pointer(&format!("/spec/template/spec/containers/0/{probe}/httpGet/path")).and_then(Value::as_str)
            {
                assert_eq!(client.request(addr, "GET", p, vec![]).await.expect("probe").status, 200, "{p}");
            }
        }
    }
    assert_eq!(paths, 4);
    srv.stop().await;
}

#[test]
fn certs_inject_fills_every_ca_bundle() {
    let dir = std::env::temp_dir().join(format!("hcp-inject-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("base")).expect("dir");
    for f in ["validatingwebhookconfiguration.yaml", "mutatingwebhookconfiguration.yaml", "service.yaml"] {
        std::fs::copy(common::root().join("webhooks/base").join(f), dir.join("base").join(f)).expect("copy");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["certs", "--service", "hcp-etcd-admission", "--namespace", "hcp-etcd-admission", "--out"])
        .arg(dir.join("certs"))
        .arg("--inject")
        .arg(dir.join("base"))
        .output()
        .expect("certs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bundle = String::from_utf8_lossy(&out.stdout).trim().to_string();
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.decode(&bundle).expect("base64 caBundle");
    assert_eq!(ca, std::fs::read(dir.join("certs/ca.crt")).expect("ca"));
    for f in ["validatingwebhookconfiguration.yaml", "mutatingwebhookconfiguration.yaml"] {
        let d = docs(&dir.join("base").join(f));
        for w in d[0]["webhooks"].as_array().expect("webhooks") {
            assert_eq!(w["clientConfig"]["caBundle"].as_str(), Some(bundle.as_str()), "{f}");
        }
    }
    let leaf = std::fs::read_to_string(dir.join("certs/tls.crt")).expect("leaf");
    assert!(leaf.contains("BEGIN CERTIFICATE"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kubewarden_metadata_and_policies_agree() {
    let meta = &docs(&common::root().join("metadata.yml"))[0];
    assert_eq!(meta["executionMode"], "kubewarden-wapc");
    assert_eq!(meta["mutating"], true);
    assert_eq!(meta["contextAwareResources"][0]["kind"], "HostedControlPlane");
    let policies: Vec<Value> =
        all_objects().into_iter().map(|(_, d)| d).filter(|d| d["kind"] == "ClusterAdmissionPolicy").collect();
    assert_eq!(policies.len(), 2);
    let meta_resources: Vec<Value> = meta["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
        .collect();
    for p in &policies {
        Settings::from_json(&p["spec"]["settings"]).expect("policy settings are valid");
        for r in p["spec"]["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
        {
            assert!(meta_resources.contains(&r), "{r} is not in metadata.yml rules");
        }
        if p["spec"]["mutating"] == true {
            assert!(p["spec"]["contextAwareResources"].to_string().contains("HostedControlPlane"));
        }
    }
}
