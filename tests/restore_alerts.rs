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

    let ksm = |metric: &str, labels: &str| format!("{metric}{{{labels}}}");
    let alert = |name: &str, labels: &[(&str, &str)]| {
        let mut l = serde_json::Map::new();
        l.insert("severity".into(), "warning".into());
        for (k, v) in labels {
            l.insert((*k).into(), (*v).into());
        }
        serde_json::json!({"exp_labels": l, "exp_annotations": rendered(&spec, name, labels)})
    };
    let crash = "HcpEtcdInitCrashLooping";
    let pending = "HcpEtcdInitRestorePending";
    let still = "HcpEtcdInitStillInTemplate";
    let init = |ns: &str, pod: &str| format!(r#"namespace="{ns}",pod="{pod}",container="etcd-init""#);
    let sts = |ns: &str| format!(r#"namespace="{ns}",statefulset="etcd""#);
    // One promtool test group: series (metric, labels, values) and, per
    // evaluation time, the alerts expected to be firing.
    let group = |name: &str, series: &[(&str, String, &str)], evals: &[(&str, &str, Vec<Value>)]| {
        let input: Vec<Value> =
            series.iter().map(|(m, l, v)| serde_json::json!({"series": ksm(m, l), "values": v})).collect();
        let tests: Vec<Value> = evals
            .iter()
            .map(|(at, name, alerts)| serde_json::json!({"eval_time": at, "alertname": name, "exp_alerts": alerts}))
            .collect();
        serde_json::json!({"name": name, "interval": "1m", "input_series": input, "alert_rule_test": tests})
    };
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
    let file = dir.join("tests.json");
    std::fs::write(&file, tests.to_string()).expect("tests.json");
    let out = std::process::Command::new(&promtool).arg("test").arg("rules").arg(&file).output().expect("promtool");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
