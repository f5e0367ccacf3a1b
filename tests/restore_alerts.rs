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
