//! The deploy manifests in webhooks/: they parse, every kustomization
//! resource exists, every webhook path they name is served by the real server,
//! registration fields are what the README promises, the Deployment's flags
//! exist, the settings ConfigMap is valid, and `certs --inject` fills caBundles.

mod common;

use std::{path::Path, process::Command, time::Duration};

use common::https::Client;
use hcp_etcd_admission::{server::certs, server::LookupSource, settings::Settings};
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
    for (path, doc) in objects.iter().filter(|(_, d)| d["kind"] == "Kustomization" || d["kind"] == "Component") {
        let dir = path.parent().expect("dir");
        let listed = doc["resources"].as_array().into_iter().chain(doc["components"].as_array()).flatten();
        for r in listed {
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
    assert_eq!(
        n, 19,
        "base, registration, two install flavours x three (workload, registration, gitops), ten components, kubewarden"
    );
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
                if w["clientConfig"]["service"]["path"] == "/mutate/etcd-backup-jobs" {
                    // Only HyperShift's backup Jobs, only on CREATE.
                    assert_eq!(w["objectSelector"]["matchLabels"], serde_json::json!({"app": "etcd-backup"}), "{name}");
                    assert!(w["objectSelector"].to_string().contains("hypershift.openshift.io/backup-name"), "{name}");
                    assert_eq!(
                        w["rules"],
                        serde_json::json!([{"apiGroups": ["batch"], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["jobs"], "scope": "Namespaced"}]),
                        "{name}"
                    );
                } else {
                    assert!(w["matchConditions"].to_string().contains("object.metadata.name == 'etcd'"));
                    assert!(w["namespaceSelector"].is_object(), "mutation scoped to HCP namespaces");
                }
            }
        }
    }
    let vwc = objects.iter().find(|(_, d)| d["kind"] == "ValidatingWebhookConfiguration").expect("vwc");
    assert!(
        !vwc.1.to_string().contains("hcpetcdbackups/status"),
        "status writes are judged by the CRD itself, not sent here (README)"
    );
    // The Secret webhook only ever sees labelled Secrets.
    let secrets = vwc.1["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|w| w["clientConfig"]["service"]["path"] == "/validate/etcd-backup-secrets")
        .expect("secret webhook");
    assert_eq!(
        secrets["objectSelector"],
        serde_json::json!({"matchLabels": {"hypershift.openshift.io/etcd-backup": "true"}})
    );
    assert_eq!(secrets["rules"][0]["resources"], serde_json::json!(["secrets"]));
}

/// Evaluates a webhook's matchConditions the way the apiserver does (CEL over
/// `request`, `object`, `oldObject`; all must be true).
fn matches(conditions: &Value, review: &Value) -> bool {
    use kube_cel::cel::{Context, Program, Value as Cel};
    let req = &review["request"];
    let mut ctx = Context::default();
    ctx.add_variable("request", req).expect("request");
    ctx.add_variable("object", &req["object"]).expect("object");
    ctx.add_variable("oldObject", &req["oldObject"]).expect("oldObject");
    conditions.as_array().expect("matchConditions").iter().all(|c| {
        let expr = c["expression"].as_str().expect("expression");
        let program = Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e:?}"));
        match program.execute(&ctx) {
            Ok(Cel::Bool(b)) => b,
            other => panic!("{}: {other:?}", c["name"]),
        }
    })
}

#[test]
fn match_conditions_send_only_what_is_judged() {
    let objects = all_objects();
    let hc = serde_json::json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
        "metadata": {"name": "prod", "namespace": "clusters", "finalizers": ["hypershift.openshift.io/finalizer"]},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume"}}}},
        "status": {"conditions": []}
    });
    let with = |f: &dyn Fn(&mut Value)| {
        let mut o = hc.clone();
        f(&mut o);
        o
    };
    let url_added = with(&|o| {
        o["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = serde_json::json!(["https://b.example/x.db"])
    });
    let status_only = with(&|o| o["status"]["conditions"] = serde_json::json!([{"type": "Available"}]));
    let other_spec = with(&|o| o["spec"]["release"] = serde_json::json!({"image": "x"}));
    let deleting = with(&|o| {
        o["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-29T15:00:00Z");
        o["metadata"]["finalizers"] = serde_json::json!([]);
    });
    let no_etcd = with(&|o| o["spec"] = serde_json::json!({}));
    let url_changed = with(&|o| {
        o["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = serde_json::json!(["https://b.example/y.db"])
    });
    let unmanaged = with(&|o| o["spec"]["etcd"]["managementType"] = "Unmanaged".into());
    let deleting_url_added = with(&|o| {
        o["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-29T15:00:00Z");
        o["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = serde_json::json!(["https://b.example/x.db"]);
    });
    let mut kubewarden = None;
    let mut checked = 0;
    for (_, doc) in &objects {
        let hooks: Vec<Value> = match doc["kind"].as_str() {
            Some("ValidatingWebhookConfiguration") => doc["webhooks"].as_array().cloned().unwrap_or_default(),
            Some("ClusterAdmissionPolicy") if doc["spec"]["mutating"] == false => {
                if doc["metadata"]["name"] == "hcp-etcd-admission-validate" {
                    kubewarden = Some(doc["spec"].clone());
                }
                vec![doc["spec"].clone()]
            }
            _ => continue,
        };
        for w in hooks {
            let resources = w["rules"][0]["resources"].as_array().cloned().unwrap_or_default();
            for resource in resources.iter().filter_map(Value::as_str) {
                let conds = &w["matchConditions"];
                let send = |op: &str, new: &Value, old: Option<&Value>| {
                    let mut new = new.clone();
                    let mut old = old.cloned();
                    if resource == "hcpetcdbackups" {
                        new["kind"] = "HCPEtcdBackup".into();
                        if let Some(o) = old.as_mut() {
                            o["kind"] = "HCPEtcdBackup".into();
                        }
                    }
                    matches(conds, &common::admission_review("u", resource, None, op, Some(&new), old.as_ref()))
                };
                let what = format!("{}: {resource}", w["name"].as_str().or(Some("kubewarden")).unwrap_or_default());
                assert!(send("CREATE", &hc, None), "{what}: CREATE is judged");
                assert!(!send("UPDATE", &deleting, Some(&hc)), "{what}: an object being deleted is skipped");
                if resource == "hcpetcdbackups" {
                    assert!(send("UPDATE", &status_only, Some(&hc)), "{what}: backups UPDATEs are judged");
                    continue;
                }
                if resource == "secrets" {
                    // Data changes are judged (an unchanged UPDATE is ratcheted in the webhook).
                    assert!(send("UPDATE", &other_spec, Some(&hc)), "{what}: Secret UPDATEs are judged");
                    continue;
                }
                assert!(send("UPDATE", &url_added, Some(&hc)), "{what}: a spec.etcd change is judged");
                assert!(send("UPDATE", &url_changed, Some(&url_added)), "{what}: a changed restore URL is judged");
                assert!(send("UPDATE", &unmanaged, Some(&hc)), "{what}: a managementType change is judged");
                assert!(
                    send("UPDATE", &deleting_url_added, Some(&hc)),
                    "{what}: a spec.etcd change on an object being deleted is judged"
                );
                assert!(!send("UPDATE", &status_only, Some(&hc)), "{what}: status-only UPDATE is skipped");
                assert!(!send("UPDATE", &other_spec, Some(&hc)), "{what}: spec.etcd unchanged is skipped");
                assert!(send("UPDATE", &hc, Some(&no_etcd)), "{what}: spec.etcd added is judged");
                assert!(send("UPDATE", &no_etcd, Some(&hc)), "{what}: spec.etcd removed is judged");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4, "HostedCluster and HostedControlPlane, webhook and Kubewarden policy");
    let kw = kubewarden.expect("kubewarden validate policy");
    assert_eq!(kw["backgroundAudit"], false, "audit has no oldObject: ratcheted rules would report falsely");
}

#[test]
fn the_mutation_skips_statefulsets_being_deleted() {
    let sts = |name: &str, deleting: bool| {
        let mut o = serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "clusters-prod"}, "spec": {}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-29T15:00:00Z");
        }
        o
    };
    let mut checked = 0;
    for (_, doc) in all_objects() {
        let conds = match doc["kind"].as_str() {
            Some("MutatingWebhookConfiguration") => doc["webhooks"][0]["matchConditions"].clone(),
            Some("ClusterAdmissionPolicy")
                if doc["spec"]["mutating"] == true && doc["spec"]["rules"][0]["resources"][0] == "statefulsets" =>
            {
                doc["spec"]["matchConditions"].clone()
            }
            _ => continue,
        };
        let send = |op: &str, o: &Value| {
            matches(
                &conds,
                &common::admission_review("u", "statefulsets", None, op, Some(o), Some(&sts("etcd", false))),
            )
        };
        assert!(send("CREATE", &sts("etcd", false)), "the etcd StatefulSet is sent");
        assert!(send("UPDATE", &sts("etcd", false)), "and its updates");
        assert!(!send("UPDATE", &sts("etcd", true)), "not while it is being deleted (finalizer removal)");
        assert!(!send("CREATE", &sts("kube-apiserver", false)), "other StatefulSets are not sent");
        checked += 1;
    }
    assert_eq!(checked, 2, "webhook and Kubewarden policy");
}

#[test]
fn network_policy_admits_only_the_apiserver_and_monitoring() {
    let objects = all_objects();
    let np = &objects.iter().find(|(_, d)| d["kind"] == "NetworkPolicy").expect("NetworkPolicy in webhooks/").1;
    let deploy = &objects.iter().find(|(_, d)| d["kind"] == "Deployment").expect("deployment").1;
    assert_eq!(np["spec"]["podSelector"]["matchLabels"], deploy["spec"]["template"]["metadata"]["labels"]);
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let ingress = np["spec"]["ingress"].as_array().expect("ingress");
    assert_eq!(ingress.len(), 2, "apiserver and monitoring, nothing else");
    assert_eq!(
        ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["policy-group.network.openshift.io/host-network"],
        ""
    );
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["network.openshift.io/policy-group"],
        "monitoring"
    );
    // The apiserver reaches the admission port only, monitoring the metrics port only.
    assert_eq!(ingress[0]["ports"], serde_json::json!([{"port": 8443, "protocol": "TCP"}]));
    assert_eq!(ingress[1]["ports"], serde_json::json!([{"port": 8080, "protocol": "TCP"}]));
    let ports = &deploy["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(ports.to_string().contains("\"containerPort\":8080"), "{ports}");
    assert!(ports.to_string().contains("\"containerPort\":8443"), "{ports}");
    let sm = &objects.iter().find(|(_, d)| d["kind"] == "ServiceMonitor").expect("ServiceMonitor").1;
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["scheme"], "http");
    let base = &docs(&common::root().join("webhooks/base/kustomization.yaml"))[0];
    assert!(base["resources"].to_string().contains("networkpolicy.yaml"));
}

#[test]
fn kubewarden_policy_server_may_list_hostedcontrolplanes() {
    let objects = all_objects();
    let role = objects
        .iter()
        .map(|(_, d)| d)
        .find(|d| {
            d["kind"] == "ClusterRole" && d["metadata"]["name"].as_str().unwrap_or_default().contains("kubewarden")
        })
        .expect("ClusterRole for the PolicyServer");
    assert!(role["rules"][0]["resources"].to_string().contains("hostedcontrolplanes"));
    assert!(role["rules"][0]["verbs"].to_string().contains("list"));
    let binding = objects
        .iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == "ClusterRoleBinding" && d["roleRef"]["name"] == role["metadata"]["name"])
        .expect("binding");
    assert_eq!(binding["subjects"][0]["name"], "hcp-etcd-admission-policy-server");
    assert_eq!(binding["subjects"][0]["namespace"], "kubewarden");
    for (_, p) in objects.iter().filter(|(_, d)| d["kind"] == "ClusterAdmissionPolicy") {
        assert_eq!(p["spec"]["backgroundAudit"], false, "{}", p["metadata"]["name"]);
    }
}

#[test]
fn cert_manager_overlay_is_a_ca_chain() {
    let objs = docs(&common::root().join("webhooks/components/cert-manager/certificate.yaml"));
    let find = |kind: &str, name: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };
    let ca = find("Certificate", "hcp-etcd-admission-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    let selfsigned = find("Issuer", ca["spec"]["issuerRef"]["name"].as_str().expect("issuer"));
    assert!(selfsigned["spec"]["selfSigned"].is_object());
    let serving = find("Certificate", "hcp-etcd-admission");
    let ca_issuer = find("Issuer", serving["spec"]["issuerRef"]["name"].as_str().expect("issuer"));
    assert_eq!(ca_issuer["spec"]["ca"]["secretName"], ca["spec"]["secretName"]);
    assert!(serving["spec"]["dnsNames"].to_string().contains("hcp-etcd-admission.hcp-etcd-admission.svc"));
    let k = std::fs::read_to_string(common::root().join("webhooks/components/cert-manager-inject/kustomization.yaml"))
        .expect("k");
    assert!(
        k.contains("inject-ca-from: hcp-etcd-admission/hcp-etcd-admission-ca"),
        "the injected bundle is the CA, stable across serving renewals"
    );
}

#[test]
fn prometheus_rule_alerts_on_metrics_the_server_exports() {
    let rule = &docs(&common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))[0];
    use hcp_etcd_admission::{
        admission::Target,
        server::metrics::{Metrics, OperationLabel, Reply},
    };
    let m = Metrics::new();
    m.observe(Target::HostedClusters, OperationLabel::Create, Reply::Allowed, 0.001);
    let finding = hcp_etcd_admission::enforcement::RuleResult {
        rule: "restore-url-expired",
        outcome: hcp_etcd_admission::enforcement::Enforced::Denied,
    };
    m.rule_results(Target::HostedClusters, &[finding]);
    let metrics = m.render();
    let rules = rule["spec"]["groups"][0]["rules"].as_array().expect("rules");
    let text: String = rules.iter().filter_map(|r| r["expr"].as_str()).collect();
    for needle in [
        "certificate_expiry_timestamp_seconds",
        "result=\"failure\"",
        "decision=\"error\"",
        "cannot_decide",
        "histogram_quantile(0.99",
        "rule_results_total",
    ] {
        assert!(text.contains(needle), "no alert uses {needle}");
    }
    for r in rules {
        let expr = r["expr"].as_str().expect("expr");
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if let Some(name) = word.strip_prefix("hcp_etcd_admission_") {
                let base = name.trim_end_matches("_bucket").trim_end_matches("_total");
                assert!(
                    metrics.contains(&format!("hcp_etcd_admission_{base}")),
                    "{}: unknown metric {word}",
                    r["alert"]
                );
            }
        }
    }
}

/// RBAC grants exactly what the rules read: HostedControlPlanes and
/// HCPEtcdBackups and StatefulSets read-only cluster-wide, Secrets `get` only
/// and only in the HyperShift Operator namespace, through a Role.
#[test]
fn rbac_is_least_privilege() {
    let objects = all_objects();
    let mut grants: Vec<(String, String, String, String, Value)> = Vec::new();
    // The webhook's own RBAC (webhooks/base); the Kubewarden PolicyServer's is separate.
    let base: Vec<&(std::path::PathBuf, Value)> =
        objects.iter().filter(|(p, _)| p.parent().is_some_and(|d| d.ends_with("webhooks/base"))).collect();
    for (_, d) in
        base.iter().map(|o| (&o.0, &o.1)).filter(|(_, d)| matches!(d["kind"].as_str(), Some("ClusterRole" | "Role")))
    {
        for r in d["rules"].as_array().expect("rules") {
            for res in r["resources"].as_array().expect("resources") {
                grants.push((
                    d["kind"].as_str().unwrap_or_default().to_string(),
                    d["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                    r["apiGroups"][0].as_str().unwrap_or_default().to_string(),
                    res.as_str().unwrap_or_default().to_string(),
                    r["verbs"].clone(),
                ));
                if let Some(names) = r.get("resourceNames") {
                    grants.push((
                        d["kind"].as_str().unwrap_or_default().to_string(),
                        d["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                        r["apiGroups"][0].as_str().unwrap_or_default().to_string(),
                        format!("{}/resourceNames", res.as_str().unwrap_or_default()),
                        names.clone(),
                    ));
                }
            }
        }
    }
    grants.sort_by(|a, b| (&a.0, &a.1, &a.2, &a.3).cmp(&(&b.0, &b.1, &b.2, &b.3)));
    let want: Vec<(String, String, String, String, Value)> = [
        ("ClusterRole", "", "apps", "statefulsets", serde_json::json!(["get"])),
        ("ClusterRole", "", "apps", "statefulsets/resourceNames", serde_json::json!(["etcd"])),
        ("ClusterRole", "", "hypershift.openshift.io", "hcpetcdbackups", serde_json::json!(["list", "watch"])),
        ("ClusterRole", "", "hypershift.openshift.io", "hostedcontrolplanes", serde_json::json!(["list", "watch"])),
        ("Role", "hypershift", "", "secrets", serde_json::json!(["get"])),
    ]
    .into_iter()
    .map(|(a, b, c, d, e)| (a.to_string(), b.to_string(), c.to_string(), d.to_string(), e))
    .collect();
    assert_eq!(grants, want);
    // Every Role and ClusterRole is bound to the webhook's ServiceAccount, in the Role's namespace.
    for (_, d) in base
        .iter()
        .map(|o| (&o.0, &o.1))
        .filter(|(_, d)| matches!(d["kind"].as_str(), Some("ClusterRoleBinding" | "RoleBinding")))
    {
        assert_eq!(d["subjects"][0]["name"], "hcp-etcd-admission");
        if d["kind"] == "RoleBinding" {
            assert_eq!(d["metadata"]["namespace"], "hypershift");
            assert_eq!(d["roleRef"]["kind"], "Role");
        }
    }
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
    let args = c["args"].to_string();
    assert!(args.contains("--listen=[::]:8443"), "dual-stack listener");
    assert!(args.contains("--metrics-listen=[::]:8080"), "metrics and probes on their own port");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "metrics");
    assert!(args.contains("--drain-seconds=10") && args.contains("--shutdown-grace-seconds=20"));
    let grace = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64().expect("grace");
    assert!(grace > 10 + 20, "terminationGracePeriodSeconds {grace} must cover drain + shutdown grace");
    let kubernetes = std::fs::read_to_string(common::root().join("webhooks/components/kubernetes/kustomization.yaml"))
        .expect("kubernetes component");
    let user: u64 = kubernetes
        .split("/securityContext/runAsUser\n        value: ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("the kubernetes component pins runAsUser");
    let containerfile = std::fs::read_to_string(common::root().join("Containerfile")).expect("Containerfile");
    assert!(containerfile.contains(&format!("USER {user}:")), "Deployment runAsUser matches the image's USER");
    assert!(containerfile.contains("FROM scratch"));
    let kustomization = &docs(&common::root().join("webhooks/base/kustomization.yaml"))[0];
    assert_eq!(kustomization["images"][0]["name"], c["image"], "the Deployment's image is the one kustomize sets");
    let built = std::fs::read_to_string(common::root().join("scripts/build-image.sh")).expect("build-image.sh");
    let image = kustomization["images"][0]["name"].as_str().expect("name");
    assert!(kustomization["images"][0].get("newName").is_none(), "a renamed image escapes an overlay's images: entry");
    assert!(built.contains(&format!("{image}:$version")), "build-image.sh tags the image the manifests deploy");
    assert_eq!(kustomization["images"][0]["newTag"], env!("CARGO_PKG_VERSION"));
    assert!(objects.iter().any(|(_, d)| d["kind"] == "PodDisruptionBudget"));
    let settings = &docs(&common::root().join("webhooks/base/settings.yaml"))[0];
    Settings::from_json(settings).expect("the shipped settings are valid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_webhook_path_in_the_manifests_is_served() {
    common::https::install_provider();
    let dir = std::env::temp_dir().join(format!("hcp-manifests-{}", std::process::id()));
    let set = certs::generate("manifest CA", &["localhost".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let mut opts = common::running::options(&dir, None, Duration::from_secs(60), LookupSource::None);
    opts.metrics_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let srv = common::running::start_with(opts).await;
    let addr = srv.addr;
    let plain = srv.metrics_addr.expect("metrics port");
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
                // The probes use the plain metrics port (scheme HTTP).
                assert_eq!(plain_get(plain, p).await.0, 200, "{p}");
            }
        }
    }
    assert_eq!(paths, 6);
    let (status, text) = plain_get(plain, "/metrics").await;
    assert_eq!(status, 200);
    assert!(text.contains("hcp_etcd_admission_"), "{text}");
    // No admission path on the metrics port.
    assert_eq!(plain_get(plain, "/validate/hcpetcdbackups").await.0, 404);
    srv.stop().await;
}

/// A plain-HTTP GET: status and body.
async fn plain_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[test]
fn certs_inject_fills_every_ca_bundle() {
    let dir = std::env::temp_dir().join(format!("hcp-inject-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("base")).expect("dir");
    for f in ["validatingwebhookconfiguration.yaml", "mutatingwebhookconfiguration.yaml"] {
        std::fs::copy(common::root().join("webhooks/registration").join(f), dir.join("base").join(f)).expect("copy");
    }
    std::fs::copy(common::root().join("webhooks/base/service.yaml"), dir.join("base/service.yaml")).expect("copy");
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

/// `certs --inject` edits lines; a file it cannot edit exactly (a webhook
/// whose clientConfig is indented otherwise, flow style) is refused before
/// anything is written, never left as broken YAML with exit 0.
#[test]
fn certs_inject_refuses_a_file_it_cannot_edit_exactly() {
    let dir = std::env::temp_dir().join(format!("hcp-inject-odd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("reg")).expect("dir");
    let odd = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: x}\nwebhooks:\n  - clientConfig:\n      service: {name: s, namespace: n, path: /a}\n    name: a.x.io\n  - name: c.x.io\n    clientConfig:\n        service: {name: s, namespace: n, path: /c}\n";
    std::fs::write(dir.join("reg/v.yaml"), odd).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["certs", "--out"])
        .arg(dir.join("certs"))
        .arg("--inject")
        .arg(dir.join("reg"))
        .output()
        .expect("certs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use --patch-out instead"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(dir.join("reg/v.yaml")).expect("read"), odd, "the file was touched");
    assert!(!dir.join("certs").exists(), "certificates written before the target was checked");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_renews_with_an_existing_ca_and_keeps_the_bundle() {
    let dir = std::env::temp_dir().join(format!("hcp-reuse-ca-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let certs_cmd = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
            .arg("certs")
            .args(["--service", "localhost", "--namespace", "ns"])
            .args(args)
            .output()
            .expect("certs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let first = certs_cmd(&["--out", &dir.join("one").display().to_string()]);
    assert!(dir.join("one/ca.key").is_file(), "the CA key is kept for renewals");
    let second = certs_cmd(&[
        "--out",
        &dir.join("two").display().to_string(),
        "--ca-cert",
        &dir.join("one/ca.crt").display().to_string(),
        "--ca-key",
        &dir.join("one/ca.key").display().to_string(),
    ]);
    assert_eq!(first, second, "the caBundle is unchanged");
    assert!(!dir.join("two/ca.key").exists(), "the CA key is not copied");
    let leaf = |d: &str| std::fs::read(dir.join(d).join("tls.crt")).expect("leaf");
    assert_ne!(leaf("one"), leaf("two"), "a new serving pair");
    // The renewed pair is trusted by a client that only knows the old bundle.
    let srv = common::running::start(&dir.join("two"), None, Duration::from_secs(60), LookupSource::None).await;
    let ca = std::fs::read_to_string(dir.join("one/ca.crt")).expect("ca");
    let r = Client::new(&[&ca], None).request(srv.addr, "GET", "/healthz", vec![]).await.expect("trusted");
    assert_eq!(r.status, 200);
    srv.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Kubewarden package matches what ships: one metadata file per policy
/// with the policy's rules, context-aware resources and flags; the root
/// metadata.yml (what is annotated into the module) is the validating one;
/// only keys Kubewarden knows; one version everywhere; the dedicated
/// PolicyServer is the one every policy names; questions-ui defaults are the
/// settings defaults.
#[test]
fn kubewarden_metadata_and_policies_agree() {
    let version = env!("CARGO_PKG_VERSION");
    let root = common::root();
    let meta = &docs(&root.join("metadata.yml"))[0];
    assert_eq!(
        meta,
        &docs(&root.join("kubewarden/validate.metadata.yml"))[0],
        "metadata.yml is the validating policy's"
    );
    let known = [
        "rules",
        "mutating",
        "contextAwareResources",
        "executionMode",
        "policyType",
        "backgroundAudit",
        "annotations",
        "minimumKubewardenVersion",
    ];
    let objects = all_objects();
    let policies: Vec<&Value> =
        objects.iter().map(|(_, d)| d).filter(|d| d["kind"] == "ClusterAdmissionPolicy").collect();
    assert_eq!(policies.len(), 4);
    let server =
        objects.iter().map(|(_, d)| d).find(|d| d["kind"] == "PolicyServer").expect("a dedicated PolicyServer");
    for (file, policy) in [
        ("validate", "hcp-etcd-admission-validate"),
        ("mutate-etcd", "hcp-etcd-admission-etcd-init"),
        ("validate-secrets", "hcp-etcd-admission-backup-secrets"),
        ("mutate-backup-jobs", "hcp-etcd-admission-backup-verify"),
    ] {
        let m = &docs(&root.join(format!("kubewarden/{file}.metadata.yml")))[0];
        for k in m.as_object().expect("mapping").keys() {
            assert!(known.contains(&k.as_str()), "{file}: {k} is not a Kubewarden metadata field");
        }
        let p = policies.iter().find(|p| p["metadata"]["name"] == policy).expect("policy");
        let spec = &p["spec"];
        assert_eq!(m["rules"], spec["rules"], "{file}: rules");
        assert_eq!(m["mutating"], spec["mutating"], "{file}: mutating");
        assert_eq!(m["backgroundAudit"], false);
        assert_eq!(spec["backgroundAudit"], false);
        let ctx = |v: &Value| v.as_array().cloned().unwrap_or_default();
        assert_eq!(
            ctx(&m["contextAwareResources"]),
            ctx(&spec["contextAwareResources"]),
            "{file}: contextAwareResources"
        );
        assert_eq!(m["annotations"]["io.kubewarden.policy.version"], version, "{file}");
        assert!(!m.to_string().contains("example.com"), "{file}: placeholder URL");
        let module = spec["module"].as_str().expect("module");
        let oci = m["annotations"]["io.kubewarden.policy.ociUrl"].as_str().expect("ociUrl");
        assert_eq!(module, format!("registry://{oci}:v{version}"), "{policy}: module reference");
        assert_eq!(spec["policyServer"], server["metadata"]["name"], "{policy} runs on the dedicated PolicyServer");
        Settings::from_json(&spec["settings"]).expect("policy settings are valid");
    }
    let sa = server["spec"]["serviceAccountName"].as_str().expect("serviceAccountName");
    for b in objects.iter().map(|(_, d)| d).filter(|d| {
        matches!(d["kind"].as_str(), Some("ClusterRoleBinding" | "RoleBinding"))
            && d["metadata"]["name"].as_str().is_some_and(|n| n.contains("kubewarden"))
    }) {
        assert_eq!(b["subjects"][0]["name"], sa, "{}: bound to the dedicated PolicyServer", b["metadata"]["name"]);
    }
    let pkg = &docs(&root.join("artifacthub-pkg.yml"))[0];
    assert_eq!(pkg["version"], version);
    assert!(pkg["containersImages"][0]["image"].as_str().expect("image").ends_with(&format!(":v{version}")));
    let questions = &docs(&root.join("questions-ui.yml"))[0];
    // Artifact Hub shows the annotation's content: the questions, not a file name.
    let embedded: Value =
        serde_yaml_ng::from_str(pkg["annotations"]["kubewarden/questions-ui"].as_str().expect("questions-ui"))
            .expect("the questions-ui annotation is YAML");
    assert_eq!(&embedded, questions, "artifacthub-pkg.yml's questions-ui differs from questions-ui.yml");
    // kwctl scaffold artifacthub's shape; the package-level annotations are
    // the union of the four policies' metadata (one module serves them all).
    for key in ["homeURL", "displayName", "createdAt", "description", "license", "provider"] {
        assert!(!pkg[key].is_null(), "artifacthub-pkg.yml: {key}");
    }
    let link = |name: &str| {
        pkg["links"].as_array().and_then(|l| l.iter().find(|x| x["name"] == name)).map(|x| x["url"].clone())
    };
    assert_eq!(
        link("policy"),
        Some(Value::String(format!(
            "{}/releases/download/v{version}/hcp-etcd-admission-{version}.wasm",
            pkg["homeURL"].as_str().unwrap_or_default()
        ))),
        "the policy link is the release's module (scripts/release.sh names it)"
    );
    assert_eq!(link("source"), Some(pkg["homeURL"].clone()));
    let metas: Vec<Value> = std::fs::read_dir(root.join("kubewarden"))
        .expect("kubewarden/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".metadata.yml"))
        .map(|p| docs(&p).remove(0))
        .collect();
    assert_eq!(metas.len(), 4, "one metadata file per policy");
    let any_mutating = metas.iter().any(|m| m["mutating"] == true);
    assert_eq!(pkg["annotations"]["kubewarden/mutation"], any_mutating.to_string());
    let union = |key: &str| {
        let mut all: Vec<Value> = Vec::new();
        for m in &metas {
            for r in m[key].as_array().cloned().unwrap_or_default() {
                if !all.contains(&r) {
                    all.push(r);
                }
            }
        }
        all.sort_by_key(|v| v.to_string());
        all
    };
    let annotated = |key: &str| {
        let text = pkg["annotations"][key].as_str().unwrap_or_else(|| panic!("annotation {key}"));
        let mut v: Vec<Value> = serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}"));
        v.sort_by_key(|v| v.to_string());
        v
    };
    assert_eq!(annotated("kubewarden/rules"), union("rules"), "kubewarden/rules: the four policies' rules");
    assert_eq!(
        annotated("kubewarden/contextAwareResources"),
        union("contextAwareResources"),
        "kubewarden/contextAwareResources: what the four policies read"
    );
    let install = pkg["install"].as_str().expect("install");
    assert!(
        install.contains("kubectl apply -k webhooks/kubewarden/"),
        "webhooks/kubewarden is a kustomization: {install}"
    );
    let defaults = serde_json::to_value(Settings::default()).expect("settings");
    let mut asked = Vec::new();
    for q in questions["questions"].as_array().expect("questions") {
        let var = q["variable"].as_str().expect("variable");
        let pointer = format!("/{}", var.replace('.', "/"));
        let default = defaults.pointer(&pointer).unwrap_or_else(|| panic!("questions-ui: {var} is not a setting"));
        let want = match default {
            Value::String(_) | Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => {
                default.clone()
            }
            // Unset (etcdInitImage): the form's empty string.
            Value::Null => Value::String(String::new()),
        };
        assert_eq!(q["default"], want, "questions-ui default of {var}");
        asked.push(var.to_string());
    }
    // Every setting has a question: the leaves of the settings (a map such
    // as `enforcement.rules` is one question).
    fn leaves(v: &Value, path: &str, out: &mut Vec<String>) {
        match v.as_object() {
            Some(o) if path != "enforcement.rules" && !o.is_empty() => {
                for (k, child) in o {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    leaves(child, &p, out);
                }
            }
            _ => out.push(path.to_string()),
        }
    }
    let mut settings = Vec::new();
    leaves(&defaults, "", &mut settings);
    for key in settings {
        assert!(asked.contains(&key), "questions-ui.yml has no question for the setting {key}");
    }
}

/// One version: the crate's, in the image tag, the Kubewarden metadata and
/// policies, the Artifact Hub package, the CHANGELOG and the README matrix.
#[test]
fn one_version_everywhere() {
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(hcp_etcd_admission::build_info::VERSION, version);
    let k = &docs(&common::root().join("webhooks/base/kustomization.yaml"))[0];
    assert_eq!(k["images"][0]["newTag"], version);
    let text = |f: &str| std::fs::read_to_string(common::root().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    assert!(text("CHANGELOG.md").contains(&format!("## [{version}]")), "CHANGELOG has no entry for {version}");
    let minor = version.rsplit_once('.').map_or(version, |(m, _)| m);
    assert!(text("SECURITY.md").contains(&format!("| {minor}.x")), "SECURITY.md does not list {minor}.x as supported");
    assert!(text("LICENSE").contains("Apache License") && text("LICENSE").contains("Version 2.0, January 2004"));
    for f in [
        "webhooks/kubewarden/validate.yaml",
        "webhooks/kubewarden/mutate-etcd.yaml",
        "webhooks/kubewarden/validate-secrets.yaml",
        "webhooks/kubewarden/mutate-backup-jobs.yaml",
    ] {
        assert!(text(f).contains(&format!(":v{version}\n")), "{f}");
    }
    assert!(text("README.md").contains(&format!("| {version} |")), "README compatibility matrix names {version}");
}

/// Issue #30: the release discipline is a script, and its checks hold on
/// main: the version agrees everywhere a release names it, and the CHANGELOG
/// has its dated section. A version that is not the crate's is refused with
/// what to bump; a release needs a clean tree (not run here: the suite does
/// not build releases, it builds and checks their parts).
#[test]
fn the_release_script_checks_the_discipline() {
    let run = |args: &[&str]| {
        Command::new(common::root().join("scripts/release.sh")).args(args).output().expect("release.sh")
    };
    let ok = run(&["--check"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("version, CHANGELOG section and manifests agree"));
    let other = run(&["--check", "9.9.9"]);
    assert_eq!(other.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&other.stderr).contains("Cargo.toml says"),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let junk = run(&["--check", "v1"]);
    assert_eq!(junk.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&junk.stderr).contains("not a semantic version"));
    let usage = run(&[]);
    assert_eq!(usage.status.code(), Some(2));
}

/// The kubectl that renders: the one scripts/go-tools.sh builds (v1.35.4,
/// kustomize v5), else one on PATH.
fn kubectl() -> std::path::PathBuf {
    let built = common::tools::go_bin("kube-1.35", "kubectl");
    if built.is_file() {
        built
    } else {
        "kubectl".into()
    }
}

/// `kubectl kustomize` of a directory, as objects.
fn render(dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl()).arg("kustomize").arg(dir).output().expect("kubectl");
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn render_tools() -> Vec<common::env::Need> {
    vec![
        if common::tools::go_bin("kube-1.35", "kubectl").is_file() {
            common::tools::go_tool("kube-1.35", "kubectl")
        } else {
            common::env::Need::Program(
                "kubectl",
                "scripts/go-tools.sh builds kubectl 1.35 (kustomize v5 with Components)",
            )
        },
        common::env::Need::Program("kubernetes-validate", "pip install kubernetes-validate==1.37.0"),
    ]
}

/// Every documented combination: workload = platform x certificate source x
/// client auth x monitoring; registration = caBundle source. Written as
/// kustomizations in a temporary directory that list the shipped components.
fn combinations() -> Vec<(String, String, Vec<String>)> {
    let c = |name: &str| common::root().join("webhooks/components").join(name).display().to_string();
    let base = common::root().join("webhooks/base").display().to_string();
    let registration = common::root().join("webhooks/registration").display().to_string();
    let mut out = Vec::new();
    for platform in ["openshift", "kubernetes"] {
        for certs in ["", "service-ca", "cert-manager"] {
            for client_auth in [false, true] {
                for monitoring in ["", "monitoring", "monitoring-openshift"] {
                    let mut comps = vec![c(platform)];
                    comps.extend([certs, monitoring].iter().filter(|n| !n.is_empty()).map(|n| c(n)));
                    if client_auth {
                        comps.push(c("client-auth"));
                    }
                    let name = format!("workload-{platform}-{}-{client_auth}-{}", certs.replace('-', ""), monitoring);
                    out.push((name, base.clone(), comps));
                }
            }
        }
    }
    for inject in ["", "service-ca-inject", "cert-manager-inject"] {
        let comps: Vec<String> = [inject].iter().filter(|n| !n.is_empty()).map(|n| c(n)).collect();
        out.push((format!("registration-{inject}"), registration.clone(), comps));
    }
    out
}

/// `target` relative to `from` (kustomize refuses absolute paths).
fn relative(from: &Path, target: &str) -> String {
    let up = from.components().count().saturating_sub(1);
    format!("{}{}", "../".repeat(up), target.trim_start_matches('/'))
}

/// A kustomization in `dir` with `resource` and `components` (absolute paths, made relative).
fn write_kustomization(dir: &Path, resource: &str, components: &[String]) {
    std::fs::create_dir_all(dir).expect("dir");
    let comps: Vec<String> = components.iter().map(|c| relative(dir, c)).collect();
    std::fs::write(dir.join("kustomization.yaml"), kustomization(&relative(dir, resource), &comps)).expect("write");
}

fn kustomization(resource: &str, components: &[String]) -> String {
    let mut k =
        format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{resource:?}]\n");
    if !components.is_empty() {
        k += &format!("components: [{}]\n", components.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", "));
    }
    k
}

/// Every documented combination (and the shipped install kustomizations)
/// renders with kubectl's kustomize and passes `kubernetes-validate --strict`
/// for the oldest and newest Kubernetes the README's matrix names.
#[test]
fn every_documented_combination_renders_and_validates_strictly() {
    if !common::env::ready("every_documented_combination_renders_and_validates_strictly", &render_tools()) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hcp-kustomize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    for (name, resource, comps) in combinations() {
        let d = dir.join(&name);
        write_kustomization(&d, &resource, &comps);
        dirs.push(d);
    }
    for flavour in ["openshift", "kubernetes"] {
        for stage in ["workload", "registration", "gitops"] {
            dirs.push(common::root().join("webhooks/install").join(flavour).join(stage));
        }
    }
    assert_eq!(dirs.len(), 2 * 3 * 2 * 3 + 3 + 6);
    // The Kubewarden install (`kubectl apply -k webhooks/kubewarden/`) renders and validates too.
    let kubewarden = common::root().join("webhooks/kubewarden");
    dirs.push(kubewarden.clone());
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for d in &dirs {
        let objects = render(d);
        let is_registration = d.file_name().is_some_and(|n| n.to_string_lossy().starts_with("registration"));
        // Both stages in one kustomization (one Argo CD Application): the waves keep the order.
        let is_gitops = d.file_name().is_some_and(|n| n == "gitops");
        let registration = |o: &Value| o["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration"));
        assert_eq!(
            objects.iter().filter(|o| registration(o)).count(),
            if is_registration || is_gitops { 2 } else { 0 },
            "{}: registrations only in stage 2",
            d.display()
        );
        if is_gitops {
            assert!(objects.iter().any(|o| o["kind"] == "Deployment"), "{}: the workload too", d.display());
        }
        for o in objects.iter().filter(|_| *d != kubewarden) {
            let wave = o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"].as_str();
            let want = if is_registration || registration(o) {
                "5"
            } else if o["kind"] == "Namespace" {
                "-1"
            } else {
                "0"
            };
            if o["apiVersion"]
                .as_str()
                .is_some_and(|a| a.contains("monitoring.coreos.com") || a.contains("cert-manager"))
                || o["metadata"]["name"] == "hcp-etcd-admission-prometheus-user-workload"
            {
                continue;
            }
            assert_eq!(wave, Some(want), "{}: {} {} sync-wave", d.display(), o["kind"], o["metadata"]["name"]);
        }
        // Into the temporary directory (never beside the shipped kustomizations).
        let file = dir.join(format!("rendered-{}.yaml", files.len()));
        let out = Command::new(kubectl()).arg("kustomize").arg(d).output().expect("kubectl");
        std::fs::write(&file, &out.stdout).expect("rendered");
        files.push(file);
    }
    // One kubernetes-validate run per version (its start-up dominates).
    for version in ["1.30.0", "1.35.0"] {
        let v = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output()
            .expect("kubernetes-validate");
        assert!(
            v.status.success(),
            "against {version}: {}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        );
        // kubernetes-validate knows the Kubernetes kinds only: it warns on a
        // custom resource and passes it. Those are exactly these kinds (their
        // fields are checked by the other tests here); any other warning is
        // an object that escaped validation.
        let custom =
            ["Certificate", "Issuer", "ServiceMonitor", "PrometheusRule", "ClusterAdmissionPolicy", "PolicyServer"];
        let output = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
        for line in output.lines().filter(|l| l.starts_with("WARN")) {
            assert!(
                custom.iter().any(|k| line.contains(&format!("for kind {k} with"))),
                "against {version}: an object kubernetes-validate did not check: {line}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The OpenShift variant's pod against the `restricted-v2` SCC: no fixed UID,
/// GID or fsGroup (MustRunAsRange assigns them), no host namespaces or ports,
/// no privilege escalation, every capability dropped, seccomp RuntimeDefault,
/// only the volume types the SCC allows, non-root. The Kubernetes variant pins
/// the image's numeric user instead.
#[test]
fn openshift_variant_passes_restricted_v2() {
    if !common::env::ready("openshift_variant_passes_restricted_v2", &render_tools()[..1]) {
        return;
    }
    let pod = |flavour: &str| {
        let objects = render(&common::root().join("webhooks/install").join(flavour).join("workload"));
        objects.into_iter().find(|o| o["kind"] == "Deployment").expect("Deployment")["spec"]["template"]["spec"].clone()
    };
    let spec = pod("openshift");
    let psc = &spec["securityContext"];
    for forbidden in ["runAsUser", "runAsGroup", "fsGroup", "supplementalGroups", "seLinuxOptions"] {
        assert!(psc.get(forbidden).is_none(), "pod securityContext.{forbidden} is set: restricted-v2 assigns it");
    }
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(spec.get(host).is_none_or(|v| v == false), "{host}");
    }
    assert_eq!(spec["priorityClassName"], "openshift-user-critical");
    let allowed_volumes =
        ["configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let kind = v.as_object().expect("volume").keys().find(|k| *k != "name").expect("volume type");
        assert!(allowed_volumes.contains(&kind.as_str()), "volume type {kind} not allowed by restricted-v2");
    }
    let containers = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten());
    for c in containers {
        let sc = &c["securityContext"];
        for forbidden in ["runAsUser", "runAsGroup", "privileged"] {
            assert!(sc.get(forbidden).is_none_or(|v| v == false), "{}: {forbidden}", c["name"]);
        }
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert!(sc["capabilities"].get("add").is_none(), "no capability added");
        for p in c["ports"].as_array().into_iter().flatten() {
            assert!(p.get("hostPort").is_none(), "hostPort");
        }
        assert_eq!(c["resources"]["requests"]["memory"], c["resources"]["limits"]["memory"], "memory request = limit");
    }
    let spread = spec["topologySpreadConstraints"].to_string();
    assert!(spread.contains("topology.kubernetes.io/zone") && spread.contains("kubernetes.io/hostname"), "{spread}");
    let k8s = pod("kubernetes");
    assert_eq!(k8s["securityContext"]["runAsUser"], 65532);
    assert_eq!(k8s["securityContext"]["runAsGroup"], 65532);
    assert!(k8s.get("priorityClassName").is_none());
}

/// The HyperShift Operator namespace is set once (the `operatorNamespace`
/// literal of webhooks/base/kustomization.yaml): changing it moves the Role,
/// its RoleBinding and the server flag together; the literal's ConfigMap is
/// never deployed; the settings ConfigMap is generated (hashed name) and
/// mounted by the Deployment, so a settings change rolls the pods.
#[test]
fn operator_namespace_is_set_in_one_place_and_settings_roll_the_pods() {
    if !common::env::ready("operator_namespace_is_set_in_one_place_and_settings_roll_the_pods", &render_tools()[..1]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hcp-opns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("base")).expect("dir");
    for e in std::fs::read_dir(common::root().join("webhooks/base")).expect("base").flatten() {
        std::fs::copy(e.path(), dir.join("base").join(e.file_name())).expect("copy");
    }
    let k = std::fs::read_to_string(dir.join("base/kustomization.yaml")).expect("k");
    assert_eq!(k.matches("operatorNamespace=hypershift").count(), 1);
    std::fs::write(
        dir.join("base/kustomization.yaml"),
        k.replace("operatorNamespace=hypershift", "operatorNamespace=hs-operator"),
    )
    .expect("write");
    let objects = render(&dir.join("base"));
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };
    assert_eq!(find("Role", "hcp-etcd-admission-backup-credentials")["metadata"]["namespace"], "hs-operator");
    assert_eq!(find("RoleBinding", "hcp-etcd-admission-backup-credentials")["metadata"]["namespace"], "hs-operator");
    let deploy = find("Deployment", "hcp-etcd-admission");
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--operator-namespace=$(OPERATOR_NAMESPACE)"), "{args}");
    let env = &deploy["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array().expect("env").iter().any(|e| e["name"] == "OPERATOR_NAMESPACE" && e["value"] == "hs-operator"),
        "{env}"
    );
    assert!(!serde_json::to_string(&objects).expect("json").contains("hypershift\""), "no other place names it");
    assert!(!objects.iter().any(|o| o["metadata"]["name"] == "hcp-etcd-admission-install"), "local-config only");
    let cm = objects
        .iter()
        .find(|o| {
            o["kind"] == "ConfigMap"
                && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("hcp-etcd-admission-settings-"))
        })
        .expect("generated settings ConfigMap with a content hash");
    let settings: Value =
        serde_yaml_ng::from_str(cm["data"]["settings.yaml"].as_str().expect("settings")).expect("yaml");
    Settings::from_json(&settings).expect("valid settings");
    assert!(
        deploy.to_string().contains(cm["metadata"]["name"].as_str().expect("name")),
        "the Deployment mounts it by its hashed name"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `certs` never replaces an existing CA without --force, checks its targets
/// before writing anything, honours --ca-days, writes keys 0600, and
/// `--patch-out` writes a Component that kustomize applies to the registrations.
#[test]
fn certs_refuses_foot_guns_and_emits_a_patch() {
    let dir = std::env::temp_dir().join(format!("hcp-certs-guns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
            .arg("certs")
            .args(args)
            .current_dir(common::root())
            .output()
            .expect("certs")
    };
    let out = dir.join("certs").display().to_string();
    // A bad --inject target fails before anything is written.
    let bad = run(&["--out", &out, "--inject", &dir.join("nowhere").display().to_string()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(!dir.join("certs").exists(), "nothing written before the targets are checked");
    let first = run(&["--out", &out, "--ca-days", "800"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let key = std::fs::read(dir.join("certs/ca.key")).expect("ca.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for k in ["ca.key", "tls.key"] {
            let mode = std::fs::metadata(dir.join("certs").join(k)).expect("key").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{k}");
        }
    }
    let again = run(&["--out", &out]);
    assert_eq!(again.status.code(), Some(2), "a second run must not replace the CA");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(std::fs::read(dir.join("certs/ca.key")).expect("ca.key"), key, "CA untouched");
    let ca = std::fs::read_to_string(dir.join("certs/ca.crt")).expect("ca");
    let (_, pem) = x509_parser::pem::parse_x509_pem(ca.as_bytes()).expect("pem");
    let cert = pem.parse_x509().expect("x509");
    let days = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()) / 86400;
    assert_eq!(days, 800, "--ca-days");
    let patch_dir = dir.join("patch");
    let renewed = run(&[
        "--out",
        &dir.join("renewed").display().to_string(),
        "--ca-cert",
        &dir.join("certs/ca.crt").display().to_string(),
        "--ca-key",
        &dir.join("certs/ca.key").display().to_string(),
        "--patch-out",
        &patch_dir.display().to_string(),
    ]);
    assert!(renewed.status.success(), "{}", String::from_utf8_lossy(&renewed.stderr));
    let bundle = String::from_utf8_lossy(&renewed.stdout).trim().to_string();
    // Webhooks matched by name, never by position.
    let component = std::fs::read_to_string(patch_dir.join("kustomization.yaml")).expect("component");
    assert!(!component.contains("/webhooks/0") && component.contains("- name: etcd-statefulsets."), "{component}");
    // Without a checkout (another working directory): the shipped registrations, the same patch.
    let elsewhere = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .arg("certs")
        .args(["--out", &dir.join("elsewhere").display().to_string()])
        .args(["--ca-cert", &dir.join("certs/ca.crt").display().to_string()])
        .args(["--ca-key", &dir.join("certs/ca.key").display().to_string()])
        .args(["--patch-out", &dir.join("patch-elsewhere").display().to_string()])
        .current_dir(&dir)
        .output()
        .expect("certs");
    assert!(elsewhere.status.success(), "{}", String::from_utf8_lossy(&elsewhere.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("patch-elsewhere/kustomization.yaml")).expect("component"), component);
    let forced = run(&["--out", &out, "--force"]);
    assert!(forced.status.success());
    assert_ne!(std::fs::read(dir.join("certs/ca.key")).expect("ca.key"), key, "--force replaces the CA");
    if common::env::ready("certs_refuses_foot_guns_and_emits_a_patch (kustomize)", &render_tools()[..1]) {
        let reg = dir.join("reg");
        let registration = common::root().join("webhooks/registration").display().to_string();
        write_kustomization(&reg, &registration, &[patch_dir.display().to_string()]);
        let objects = render(&reg);
        let mut n = 0;
        for o in &objects {
            for w in o["webhooks"].as_array().expect("webhooks") {
                assert_eq!(w["clientConfig"]["caBundle"].as_str(), Some(bundle.as_str()));
                n += 1;
            }
        }
        assert!(n >= 5, "{n} webhooks patched");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Kubewarden install sets the policy module and the HyperShift Operator
/// namespace in one place (validate.yaml); kustomize copies them into the
/// other policies and the Secret-reading Role and RoleBinding.
#[test]
fn kubewarden_module_and_operator_namespace_are_set_once() {
    if !common::env::ready("kubewarden_module_and_operator_namespace_are_set_once", &render_tools()) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hcp-kw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    for entry in std::fs::read_dir(common::root().join("webhooks/kubewarden")).expect("dir").flatten() {
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
    }
    let validate = dir.join("validate.yaml");
    let text = std::fs::read_to_string(&validate).expect("validate.yaml");
    let text = text
        .replace(
            "registry://quay.io/hcp-etcd-admission/policies/hcp-etcd-admission:",
            "registry://registry.example.internal/p:",
        )
        .replace("operatorNamespace: hypershift", "operatorNamespace: hypershift-prod");
    std::fs::write(&validate, text).expect("write");
    let objects = render(&dir);
    let modules: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterAdmissionPolicy")
        .filter_map(|o| o["spec"]["module"].as_str())
        .collect();
    assert_eq!(modules.len(), 4, "{modules:?}");
    assert!(modules.iter().all(|m| m.starts_with("registry://registry.example.internal/p:")), "{modules:?}");
    for kind in ["Role", "RoleBinding"] {
        let o = objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
        assert_eq!(o["metadata"]["namespace"], "hypershift-prod", "{kind}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #30: an overlay on the ready-made install overrides the image (by
/// tag, by digest) with an `images:` entry, and the HyperShift Operator
/// namespace with components/operator-namespace, as the README and the
/// component's header say; nothing else keeps the defaults.
#[test]
fn an_overlay_overrides_the_image_and_the_operator_namespace() {
    if !common::env::ready("an_overlay_overrides_the_image_and_the_operator_namespace", &render_tools()[..1]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hcp-overlay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let root = common::root();
    let install = relative(&dir, &root.join("webhooks/install/openshift/workload").display().to_string());
    let component = relative(&dir, &root.join("webhooks/components/operator-namespace").display().to_string());
    std::fs::write(
        dir.join("operator-namespace.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hcp-etcd-admission-operator-namespace\n  annotations: {config.kubernetes.io/local-config: \"true\"}\ndata: {operatorNamespace: hypershift-prod}\n",
    )
    .expect("write");
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    for (image, want) in [
        ("newName: registry.example/hcp\n    newTag: 9.9.9", "registry.example/hcp:9.9.9".to_string()),
        (&*format!("newName: registry.example/hcp\n    digest: {digest}"), format!("registry.example/hcp@{digest}")),
    ] {
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{install:?}, operator-namespace.yaml]\n\
                 components: [{component:?}]\nimages:\n  - name: quay.io/hcp-etcd-admission/hcp-etcd-admission\n    {image}\n"
            ),
        )
        .expect("write");
        let objects = render(&dir);
        let find = |kind: &str, name: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{kind} {name}"))
        };
        let c = &find("Deployment", "hcp-etcd-admission")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], want.as_str());
        assert!(
            c["env"]
                .as_array()
                .expect("env")
                .iter()
                .any(|e| e["name"] == "OPERATOR_NAMESPACE" && e["value"] == "hypershift-prod"),
            "{}",
            c["env"]
        );
        for kind in ["Role", "RoleBinding"] {
            assert_eq!(find(kind, "hcp-etcd-admission-backup-credentials")["metadata"]["namespace"], "hypershift-prod");
        }
        let text = serde_json::to_string(&objects).expect("json");
        assert!(
            !text.contains("\"hypershift\"") && !text.contains("quay.io/hcp-etcd-admission/"),
            "a default was kept"
        );
        assert!(
            !text.contains("hcp-etcd-admission-operator-namespace"),
            "the overlay's ConfigMap is local-config only"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #30: the Kubernetes flavour ships a NetworkPolicy that works there
/// as it is (no OpenShift policy-group selector, which matches nothing
/// elsewhere and blocks the apiserver): the two ports from any source,
/// nothing else; the OpenShift flavour keeps its selectors.
#[test]
fn each_flavour_ships_a_network_policy_for_its_platform() {
    if !common::env::ready("each_flavour_ships_a_network_policy_for_its_platform", &render_tools()[..1]) {
        return;
    }
    let policy = |dir: &str| {
        render(&common::root().join(dir))
            .into_iter()
            .find(|o| o["kind"] == "NetworkPolicy")
            .unwrap_or_else(|| panic!("{dir}: no NetworkPolicy"))
    };
    let k8s = policy("webhooks/install/kubernetes/workload");
    let text = k8s.to_string();
    assert!(!text.contains("openshift.io"), "an OpenShift selector on Kubernetes: {text}");
    let ingress = k8s["spec"]["ingress"].as_array().expect("ingress");
    for port in [8443, 8080] {
        assert!(
            ingress.iter().any(|r| r.get("from").is_none()
                && r["ports"].as_array().is_some_and(|p| p.iter().any(|p| p["port"] == port))),
            "port {port} not admitted: {text}"
        );
    }
    assert_eq!(k8s["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let ocp = policy("webhooks/install/openshift/workload").to_string();
    assert!(ocp.contains("policy-group.network.openshift.io/host-network"), "{ocp}");
}

/// Issue #30: every object the GitOps kustomizations render carries an
/// Argo CD sync wave, the components' too: the Namespace first (-1), the
/// workload (0), the registrations last (5), once the Deployment is healthy.
#[test]
fn every_gitops_object_has_its_sync_wave() {
    if !common::env::ready("every_gitops_object_has_its_sync_wave", &render_tools()[..1]) {
        return;
    }
    for dir in ["webhooks/install/openshift/gitops", "webhooks/install/kubernetes/gitops"] {
        for o in render(&common::root().join(dir)) {
            let kind = o["kind"].as_str().unwrap_or_default();
            let want = match kind {
                "Namespace" => "-1",
                "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => "5",
                _ => "0",
            };
            assert_eq!(
                o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"].as_str(),
                Some(want),
                "{dir}: {kind} {}",
                o["metadata"]["name"]
            );
        }
    }
}
