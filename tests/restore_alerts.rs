//! The restore path's alerts: etcd-init crash loops, a restore pending too
//! long, and etcd-init left in the template after the restore is complete.
//! They read kube-state-metrics series; the runbooks they point to exist.

mod common;

use serde_json::Value;

#[test]
fn etcd_init_alerts_exist_and_point_at_runbooks() {
    let text = std::fs::read_to_string(common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))
        .expect("rule");
    let rule: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let groups = rule["spec"]["groups"].as_array().expect("groups");
    let group = groups.iter().find(|g| g["name"] == "hcp-etcd-init").expect("the hcp-etcd-init group");
    let rules = group["rules"].as_array().expect("rules");
    let docs = std::fs::read_to_string(common::root().join("docs/restore.md")).expect("docs/restore.md");
    for (alert, series) in [
        ("HcpEtcdInitCrashLooping", "kube_pod_init_container_status_restarts_total"),
        ("HcpEtcdInitRestorePending", "kube_pod_init_container_status_ready"),
        ("HcpEtcdInitStillInTemplate", "kube_pod_init_container_info"),
    ] {
        let r = rules.iter().find(|r| r["alert"] == alert).unwrap_or_else(|| panic!("no {alert}"));
        let expr = r["expr"].as_str().expect("expr");
        assert!(expr.contains(series) && expr.contains("container=\"etcd-init\""), "{alert}: {expr}");
        assert!(r["for"].as_str().is_some_and(|f| !f.is_empty()), "{alert} fires at once");
        assert!(r["annotations"]["description"].as_str().is_some_and(|d| d.contains("docs/restore.md")), "{alert}");
        assert!(docs.contains(alert), "docs/restore.md does not explain {alert}");
    }
    // A named section of the runbooks (`docs/restore.md, "…"`) exists there.
    let mut named = 0;
    for r in rules {
        let description = r["annotations"]["description"].as_str().unwrap_or_default().replace('\n', " ");
        for reference in description.split("docs/restore.md, \"").skip(1) {
            let section = reference.split('"').next().unwrap_or_default();
            assert!(
                docs.contains(&format!("**{section}**"))
                    || docs.lines().any(|l| l.starts_with('#') && l.ends_with(section)),
                "{}: docs/restore.md has no section {section:?}",
                r["alert"]
            );
            named += 1;
        }
    }
    assert!(named >= 1, "no alert names a runbook section any more: this check checks nothing");
    let expr = |alert: &str| {
        rules.iter().find(|r| r["alert"] == alert).and_then(|r| r["expr"].as_str()).unwrap_or_default().to_string()
    };
    // Complete is a quorum ready (as the webhook judges it), not every replica:
    // one member stuck Pending must not hide an armed etcd-init.
    assert!(expr("HcpEtcdInitStillInTemplate").contains("* 2 >"), "{}", expr("HcpEtcdInitStillInTemplate"));
    // A waiting member runs between failures: restarts count, not the waiting reason.
    assert!(expr("HcpEtcdInitCrashLooping").contains("increase("), "{}", expr("HcpEtcdInitCrashLooping"));
}

#[test]
fn a_rule_that_denies_for_the_first_time_still_raises_the_spike_alert() {
    let text = std::fs::read_to_string(common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))
        .expect("rule");
    let rule: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let all: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array())
        .flatten()
        .collect();
    let spike = all.iter().find(|r| r["alert"] == "HcpEtcdAdmissionRuleDenialSpike").expect("the spike alert");
    let expr = spike["expr"].as_str().expect("expr");
    // `baseline or current * 0`: without a series the day before, the comparison is with 0.
    assert!(expr.contains("offset 10m") && expr.contains(" or") && expr.contains("* 0"), "{expr}");
}

/// One promtool test group: series (metric, labels, values) and, per
/// evaluation time, the alerts expected to be firing.
fn group(name: &str, series: &[(&str, String, &str)], evals: &[(&str, &str, Vec<Value>)]) -> Value {
    let input: Vec<Value> =
        series.iter().map(|(m, l, v)| serde_json::json!({"series": format!("{m}{{{l}}}"), "values": v})).collect();
    let tests: Vec<Value> = evals
        .iter()
        .map(|(at, name, alerts)| serde_json::json!({"eval_time": at, "alertname": name, "exp_alerts": alerts}))
        .collect();
    serde_json::json!({"name": name, "interval": "1m", "input_series": input, "alert_rule_test": tests})
}

/// An alert expected to fire with `labels` (and `severity`), its
/// annotations rendered for them.
fn expected(spec: &Value, alert: &str, severity: &str, labels: &[(&str, &str)]) -> Value {
    let mut l = serde_json::Map::new();
    l.insert("severity".into(), severity.into());
    for (k, v) in labels {
        l.insert((*k).into(), (*v).into());
    }
    serde_json::json!({"exp_labels": l, "exp_annotations": rendered(spec, alert, labels)})
}

/// Runs `promtool test rules` on `tests` (its rule_files set) in `dir`,
/// which it removes.
fn promtool_test(promtool: &std::path::Path, dir: &std::path::Path, tests: Value) {
    let file = dir.join("tests.json");
    std::fs::write(&file, tests.to_string()).expect("tests.json");
    let out = std::process::Command::new(promtool).arg("test").arg("rules").arg(&file).output().expect("promtool");
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rules of the PrometheusRule (its `spec`), as promtool reads a rule file.
fn rule_file(dir: &std::path::Path) -> (std::path::PathBuf, Value) {
    let text = std::fs::read_to_string(common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))
        .expect("rule");
    let rule: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let path = dir.join("rules.json");
    std::fs::write(&path, rule["spec"].to_string()).expect("rules.json");
    (path, rule["spec"].clone())
}

/// An alert's annotations as Prometheus renders them for `labels`: the
/// templates here use `{{ $labels.X }}` only (anything else fails the test,
/// which then needs a better renderer, not a weaker check).
fn rendered(spec: &Value, alert: &str, labels: &[(&str, &str)]) -> Value {
    let rule = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .find(|r| r["alert"] == alert)
        .unwrap_or_else(|| panic!("no {alert}"));
    let mut out = serde_json::Map::new();
    for (k, v) in rule["annotations"].as_object().expect("annotations") {
        let mut text = v.as_str().expect("annotation").to_string();
        for (name, value) in labels {
            text = text.replace(&format!("{{{{ $labels.{name} }}}}"), value);
        }
        assert!(!text.contains("{{"), "{alert}.{k}: a template this test cannot render: {text}");
        out.insert(k.clone(), Value::String(text));
    }
    Value::Object(out)
}

/// The etcd-init alerts evaluated by the real promtool on kube-state-metrics
/// series: each fires when its condition has held for its `for`, with the
/// labels and rendered annotations the runbook needs, and stays silent for
/// the cases next to it (one restart, a member that finished, a restore that
/// is not complete, a template without etcd-init, a loop that stopped).
#[test]
fn etcd_init_alerts_fire_on_real_series_and_stay_silent_otherwise() {
    let needs = [common::tools::go_tool("promtool", "promtool")];
    if !common::env::ready("etcd_init_alerts_fire_on_real_series_and_stay_silent_otherwise", &needs) {
        return;
    }
    let promtool = common::tools::go_bin("promtool", "promtool");
    let dir = std::env::temp_dir().join(format!("hcp-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (rules, spec) = rule_file(&dir);

    // Every group's expressions and templates parse.
    let out = std::process::Command::new(&promtool).arg("check").arg("rules").arg(&rules).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let alert = |name: &str, labels: &[(&str, &str)]| expected(&spec, name, "warning", labels);
    let crash = "HcpEtcdInitCrashLooping";
    let pending = "HcpEtcdInitRestorePending";
    let still = "HcpEtcdInitStillInTemplate";
    let init = |ns: &str, pod: &str| format!(r#"namespace="{ns}",pod="{pod}",container="etcd-init""#);
    let sts = |ns: &str| format!(r#"namespace="{ns}",statefulset="etcd""#);

    let restarts = "kube_pod_init_container_status_restarts_total";
    let ready = "kube_pod_init_container_status_ready";
    let info = "kube_pod_init_container_info";
    let (sts_ready, sts_replicas) = ("kube_statefulset_status_replicas_ready", "kube_statefulset_replicas");
    let tests = serde_json::json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [
            group(
                "crash loop: three restarts within 30 min fire after 5 min; one restart does not; a loop that stopped resolves",
                &[
                    (restarts, init("clusters-a", "etcd-0"), "0 0 1 1 2 2 3x80"),
                    (restarts, init("clusters-a", "etcd-1"), "0 0 0 1x80"),
                ],
                &[
                    ("7m", crash, vec![]),
                    ("15m", crash, vec![alert(crash, &[("namespace", "clusters-a"), ("pod", "etcd-0")])]),
                    ("70m", crash, vec![]),
                ],
            ),
            group(
                "crash loop of a waiting member: one failure every 15 min (600 s wait, 300 s back-off) fires within the hour",
                &[(restarts, init("clusters-a", "etcd-2"), "0x14 1x14 2x14 3x14 4x14 5x14 6x14")],
                &[
                    ("40m", crash, vec![]),
                    ("75m", crash, vec![alert(crash, &[("namespace", "clusters-a"), ("pod", "etcd-2")])]),
                    ("100m", crash, vec![alert(crash, &[("namespace", "clusters-a"), ("pod", "etcd-2")])]),
                ],
            ),
            group(
                "restore pending: an etcd-init not done for an hour fires; one that finished after 30 min does not",
                &[(ready, init("clusters-a", "etcd-0"), "0x90"), (ready, init("clusters-a", "etcd-1"), "0x30 1x60")],
                &[
                    ("50m", pending, vec![]),
                    ("75m", pending, vec![alert(pending, &[("namespace", "clusters-a"), ("pod", "etcd-0")])]),
                ],
            ),
            group(
                "still in template: a quorum ready with one member Pending fires after 2 h; less than a quorum, or no etcd-init, does not",
                &[
                    (info, init("clusters-a", "etcd-0"), "1x200"),
                    (info, init("clusters-a", "etcd-1"), "1x200"),
                    (info, init("clusters-a", "etcd-2"), "1x200"),
                    (sts_ready, sts("clusters-a"), "2x200"),
                    (sts_replicas, sts("clusters-a"), "3x200"),
                    (info, init("clusters-b", "etcd-0"), "1x200"),
                    (sts_ready, sts("clusters-b"), "1x200"),
                    (sts_replicas, sts("clusters-b"), "3x200"),
                    (sts_ready, sts("clusters-c"), "3x200"),
                    (sts_replicas, sts("clusters-c"), "3x200"),
                ],
                &[("100m", still, vec![]), ("130m", still, vec![alert(still, &[("namespace", "clusters-a")])])],
            ),
        ]
    });
    promtool_test(&promtool, &dir, tests);
}

/// The backup verify alert on kube-state-metrics series: a verify step that
/// terminated with an error fires at once and stays up for the hour after
/// the Job's pod is gone (ttlSecondsAfterFinished); one that completed, or
/// another container's error, does not.
#[test]
fn the_backup_verify_alert_fires_on_a_failed_step_and_outlives_the_pod() {
    let needs = [common::tools::go_tool("promtool", "promtool")];
    if !common::env::ready("the_backup_verify_alert_fires_on_a_failed_step_and_outlives_the_pod", &needs) {
        return;
    }
    let promtool = common::tools::go_bin("promtool", "promtool");
    let dir = std::env::temp_dir().join(format!("hcp-backup-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (rules, spec) = rule_file(&dir);
    let name = "HcpEtcdBackupNotVerified";
    let series = |pod: &str, container: &str, reason: &str| {
        format!(r#"namespace="hypershift",pod="{pod}",container="{container}",reason="{reason}""#)
    };
    let metric = "kube_pod_init_container_status_terminated_reason";
    let fired = expected(&spec, name, "critical", &[("namespace", "hypershift"), ("pod", "etcd-backup-a-x1")]);
    let tests = serde_json::json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [group(
            "a failed verify step fires, and stays up an hour after its pod is deleted; a completed one does not",
            &[
                // The failed pod exists for 10 minutes (the Job's TTL), then its series ends.
                (metric, series("etcd-backup-a-x1", "verify", "Error"), "1x10"),
                (metric, series("etcd-backup-b-x2", "verify", "Completed"), "1x10"),
                (metric, series("etcd-backup-c-x3", "snapshot", "Error"), "1x10"),
            ],
            &[("5m", name, vec![fired.clone()]), ("40m", name, vec![fired]), ("80m", name, vec![])],
        )]
    });
    promtool_test(&promtool, &dir, tests);
}

/// Every alert has a `runbook_url` at its own section of docs/alerts.md,
/// and every link of that page to another doc's section lands on a heading.
#[test]
fn every_alert_has_a_runbook_that_exists() {
    let slug = |heading: &str| -> String {
        heading
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let anchors = |file: &str| -> Vec<String> {
        let text = std::fs::read_to_string(common::root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        text.lines().filter(|l| l.starts_with('#')).map(slug).collect()
    };
    let text = std::fs::read_to_string(common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))
        .expect("rule");
    let rule: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let page = anchors("docs/alerts.md");
    let mut alerts = 0;
    for r in rule["spec"]["groups"].as_array().expect("groups").iter().flat_map(|g| g["rules"].as_array()).flatten() {
        let Some(alert) = r["alert"].as_str() else { continue };
        alerts += 1;
        let url = r["annotations"]["runbook_url"].as_str().unwrap_or_else(|| panic!("{alert}: no runbook_url"));
        assert_eq!(url, format!("docs/alerts.md#{}", alert.to_lowercase()), "{alert}");
        assert!(page.contains(&alert.to_lowercase()), "docs/alerts.md has no section {alert}");
    }
    assert!(alerts >= 13, "{alerts} alerts");
    let doc = std::fs::read_to_string(common::root().join("docs/alerts.md")).expect("alerts.md");
    let mut links = 0;
    for part in doc.split("](").skip(1) {
        let target = part.split(')').next().unwrap_or_default();
        if let Some((file, anchor)) = target.split_once('#') {
            assert!(
                anchors(&format!("docs/{file}")).iter().any(|a| a == anchor),
                "docs/alerts.md links to {target}: no such section"
            );
            links += 1;
        }
    }
    assert!(links >= 3, "{links} links checked");
}

/// The two alerts for the outage no pod metric shows: no available replica
/// (kube-state-metrics) and the apiserver failing to call a webhook. The
/// apiserver's series is the real one: a kube-apiserver 1.35 of this test's
/// own, the registrations pointed at a loopback port nothing listens on, a
/// labelled Secret refused; the series it then exports (labels as they are)
/// is the input of the promtool test, so the alert is proven to match what
/// the apiserver really counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_alerts_fire_on_the_real_apiservers_series() {
    use common::kube_apiserver::{Kube, KubeApiserver};
    let mut needs = common::kube_apiserver::needs(Kube::V1_35);
    needs.push(common::tools::go_tool("promtool", "promtool"));
    if !common::env::ready("availability_alerts_fire_on_the_real_apiservers_series", &needs) {
        return;
    }
    let api = KubeApiserver::start(Kube::V1_35, &[]).await.expect("kube-apiserver");
    let text =
        std::fs::read_to_string(common::root().join("webhooks/registration/validatingwebhookconfiguration.yaml"))
            .expect("registration");
    let mut cfg: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let ca = hcp_etcd_admission::server::certs::generate("alerts CA", &["127.0.0.1".into()], 1).expect("ca");
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(&ca.ca_pem);
    for w in cfg["webhooks"].as_array_mut().expect("webhooks") {
        let path = w["clientConfig"]["service"]["path"].as_str().expect("path").to_string();
        w["clientConfig"] = serde_json::json!({"url": format!("https://127.0.0.1:9{path}"), "caBundle": bundle});
    }
    api.must("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", Some(&cfg)).await;
    let ns = api.namespace("alerts").await;
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": ns, "labels": {"hypershift.openshift.io/etcd-backup": "true"}},
        "stringData": {"credentials": "x"}});
    let path = format!("/api/v1/namespaces/{ns}/secrets");
    let mut refused = false;
    for _ in 0..20 {
        let r = api.request("POST", &path, Some(&secret), &common::kube_apiserver::Auth::Admin).await.expect("POST");
        if r.status >= 500 && r.text.contains("failed calling webhook") {
            refused = true;
            break;
        }
        // The registration may not be in the apiserver's cache yet.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert!(refused, "the dead webhook never refused the labelled Secret");
    let metrics = api.request("GET", "/metrics", None, &common::kube_apiserver::Auth::Admin).await.expect("metrics");
    let series = metrics
        .text
        .lines()
        .find(|l| {
            l.starts_with("apiserver_admission_webhook_rejection_count{")
                && l.contains("name=\"etcd-backup-secrets.hcp-etcd-admission.hypershift.openshift.io\"")
                && l.contains("error_type=\"calling_webhook_error\"")
        })
        .unwrap_or_else(|| panic!("no rejection series for the webhook in the apiserver's /metrics"))
        .to_string();
    let labels =
        series.split_once('{').and_then(|(_, r)| r.rsplit_once('}')).map(|(l, _)| l.to_string()).expect("labels");

    let promtool = common::tools::go_bin("promtool", "promtool");
    let dir = std::env::temp_dir().join(format!("hcp-availability-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (rules, spec) = rule_file(&dir);
    let (down, calls) = ("HcpEtcdAdmissionNoReadyReplica", "HcpEtcdAdmissionApiserverCallsFailing");
    let deploy = r#"namespace="hcp-etcd-admission",deployment="hcp-etcd-admission""#.to_string();
    let other = r#"namespace="hcp-etcd-admission",deployment="something-else""#.to_string();
    let webhook = [("name", "etcd-backup-secrets.hcp-etcd-admission.hypershift.openshift.io"), ("type", "validating")];
    let no_error = labels.replace("calling_webhook_error", "no_error");
    let foreign = labels.replace("etcd-backup-secrets.hcp-etcd-admission.", "etcd-backup-secrets.someone-else.");
    let tests = serde_json::json!({
        "rule_files": [rules],
        "evaluation_interval": "1m",
        "tests": [
            group(
                "no available replica for 2 min fires; one replica, or another Deployment at 0, does not",
                &[
                    ("kube_deployment_status_replicas_available", deploy, "2x5 0x10 1x10"),
                    ("kube_deployment_status_replicas_available", other, "0x25"),
                ],
                &[
                    ("4m", down, vec![]),
                    ("6m", down, vec![]),
                    ("9m", down, vec![expected(&spec, down, "critical", &[("namespace", "hcp-etcd-admission"), ("deployment", "hcp-etcd-admission")])]),
                    ("20m", down, vec![]),
                ],
            ),
            group(
                "the apiserver failing to call the webhook (its real series) for 5 min fires; a webhook's own denial or another webhook does not",
                &[
                    ("apiserver_admission_webhook_rejection_count", labels.clone(), "0x3 1+2x20"),
                    ("apiserver_admission_webhook_rejection_count", no_error, "0+5x25"),
                    ("apiserver_admission_webhook_rejection_count", foreign, "0+5x25"),
                ],
                &[("5m", calls, vec![]), ("12m", calls, vec![expected(&spec, calls, "critical", &webhook)])],
            ),
        ]
    });
    promtool_test(&promtool, &dir, tests);
}

/// Issue #30: the Grafana dashboard (`components/monitoring/dashboard.json`)
/// queries only series that exist: every `hcp_etcd_admission_*` name is a
/// family the server registers (its rendered `/metrics`; with its counter or
/// histogram suffix), and every kube-state-metrics or apiserver name is one
/// the PrometheusRule's alerts use (which the promtool tests above evaluate,
/// the apiserver's on a real kube-apiserver's series).
#[test]
fn the_dashboard_queries_only_series_that_exist() {
    // The families the server registers, as its /metrics shows them (a
    // family shows once it has a series: one of each is recorded).
    use hcp_etcd_admission::{
        admission::Target,
        enforcement::{Enforced, RuleResult},
        server::metrics::{Metrics, OperationLabel, Reply},
    };
    let m = Metrics::new();
    m.observe(Target::HcpEtcdBackups, OperationLabel::Create, Reply::Allowed, 0.001);
    m.rule_results(Target::HcpEtcdBackups, &[RuleResult { rule: "restore-url-format", outcome: Enforced::Denied }]);
    m.credentials_valid("hypershift", "etcd-backup-creds", true);
    let rendered = m.render();
    let families: Vec<String> = rendered
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(families.len() >= 10, "{families:?}");
    let rules = std::fs::read_to_string(common::root().join("webhooks/components/monitoring/prometheusrule.yaml"))
        .expect("rules");
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("webhooks/components/monitoring/dashboard.json"))
            .expect("dashboard"),
    )
    .expect("dashboard JSON");
    let name = regex::Regex::new(r"\b(hcp_etcd_admission_[a-z_]+|kube_[a-z_]+|apiserver_[a-z_]+)").expect("regex");
    let mut checked = 0;
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for m in name.find_iter(expr) {
                let metric = m.as_str();
                if metric.starts_with("hcp_etcd_admission_") {
                    let base = ["_total", "_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| metric.strip_suffix(s))
                        .unwrap_or(metric);
                    assert!(
                        families.iter().any(|f| f == base || f == metric),
                        "{}: {metric} is not registered ({families:?})",
                        panel["title"]
                    );
                } else {
                    assert!(rules.contains(metric), "{}: {metric} is not a series the alerts use", panel["title"]);
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 12, "{checked} series checked");
}
