//! The decision's CPU cost grows linearly with the shapes an attacker can
//! make large (the security review's C2): a `set` list with many items, a
//! list-type `map` on both sides of an UPDATE (duplicate check and ratcheting
//! correlation), and a Secret whose `data` and `stringData` have many keys.
//! Each used to compare every item with every other one: 100,000
//! `restoreSnapshotURL` entries took 15–30 s, a 1 MiB Secret 10 s.
//!
//! Not a speed goal (those live in `cargo bench`): each shape is decided at
//! n and at 4n items and the ratio of the thread's CPU time is checked. A
//! linear pass gives about 4, a quadratic one 16; the bound is 8. CPU time
//! comes from `/proc/thread-self/schedstat` (nanoseconds this thread ran),
//! so other load on the machine does not count.

use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};

/// Nanoseconds the calling thread has run on a CPU.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat (Linux)");
    text.split_whitespace().next().and_then(|n| n.parse().ok()).expect("the first field is the run time")
}

/// The CPU time of deciding `body`, the best of three runs (the least
/// disturbed by cache misses and preemption).
fn decide_cpu_ns(body: &Value) -> u64 {
    let settings = Settings::default();
    let input = DecisionInput {
        settings: &settings,
        lookup: None,
        now: Ok(parse_rfc3339("2026-11-29T15:10:00Z").expect("now")),
        expect: None,
    };
    (0..3)
        .map(|_| {
            let start = thread_cpu_ns();
            let answer = review(body, &input).expect("an answer");
            let spent = thread_cpu_ns().saturating_sub(start);
            assert!(answer["response"]["uid"].is_string(), "{answer}");
            spent
        })
        .min()
        .unwrap_or(u64::MAX)
}

/// Decides `make(n)` and `make(4n)` and requires the CPU time to grow by at
/// most 8× (linear: ~4×; quadratic: ~16×).
fn assert_linear(what: &str, n: usize, make: impl Fn(usize) -> Value) {
    let small = decide_cpu_ns(&make(n)).max(1);
    let large = decide_cpu_ns(&make(4 * n));
    let ratio = large as f64 / small as f64;
    eprintln!("{what}: n={n} {:.1} ms, 4n {:.1} ms, ratio {ratio:.1}", small as f64 / 1e6, large as f64 / 1e6);
    assert!(ratio < 8.0, "{what}: 4× the items cost {ratio:.1}× the CPU ({small} ns → {large} ns): not linear");
}

fn admission_review(resource: &str, kind: &str, group: &str, operation: &str, object: Value, old: Value) -> Value {
    let version = if group.is_empty() { "v1" } else { "v1beta1" };
    let mut request = json!({
        "uid": "cost", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "namespace": "clusters", "operation": operation, "object": object,
        "userInfo": {"username": "cost"},
    });
    if !old.is_null() {
        request["oldObject"] = old;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

#[test]
fn a_set_list_with_many_items_is_decided_in_linear_time() {
    // restoreSnapshotURL is a `set` (maxItems 1, which a direct caller ignores).
    let make = |n: usize| {
        let urls: Vec<String> = (0..n).map(|i| format!("https://b.example.com/{i:07}.db")).collect();
        let hc = json!({
            "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
            "metadata": {"name": "prod", "namespace": "clusters"},
            "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {
                "type": "PersistentVolume", "restoreSnapshotURL": urls}}}},
        });
        admission_review("hostedclusters", "HostedCluster", "hypershift.openshift.io", "CREATE", hc, Value::Null)
    };
    assert_linear("set list on CREATE", 5_000, make);
}

#[test]
fn a_list_type_map_on_both_sides_of_an_update_is_decided_in_linear_time() {
    // status.conditions is a list-type map keyed by `type`: the old list is
    // checked for duplicates, and every new item is correlated with its old one.
    let make = |n: usize| {
        let conditions: Vec<Value> = (0..n)
            .map(|i| {
                json!({"type": format!("T{i}"), "status": "True", "reason": "R", "message": "",
                       "lastTransitionTime": "2026-11-29T15:05:00Z"})
            })
            .collect();
        let backup = |conditions: Vec<Value>| {
            json!({
                "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
                "metadata": {"name": "b", "namespace": "clusters"},
                "spec": {"storage": {"storageType": "S3", "s3": {"bucket": "hcp-etcd-backups", "region": "us-east-1",
                    "keyPrefix": "k", "credentials": {"name": "creds"}}}},
                "status": {"conditions": conditions},
            })
        };
        let mut changed = conditions.clone();
        changed.reverse();
        let mut r = admission_review(
            "hcpetcdbackups",
            "HCPEtcdBackup",
            "hypershift.openshift.io",
            "UPDATE",
            backup(changed),
            backup(conditions),
        );
        r["request"]["subResource"] = json!("status");
        r
    };
    assert_linear("list-type map on a status UPDATE", 2_000, make);
}

#[test]
fn a_secret_with_many_data_and_string_data_keys_is_decided_in_linear_time() {
    // Every data value undecodable and every stringData key another one: the
    // worst case of merging the two.
    let make = |n: usize| {
        let data: serde_json::Map<String, Value> = (0..n).map(|i| (format!("a{i:06}"), json!(0))).collect();
        let string_data: serde_json::Map<String, Value> = (0..n).map(|i| (format!("b{i:06}"), json!(""))).collect();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c", "namespace": "hypershift",
                         "labels": {"hypershift.openshift.io/etcd-backup": "true"}},
            "data": data, "stringData": string_data,
        });
        admission_review("secrets", "Secret", "", "CREATE", secret, Value::Null)
    };
    assert_linear("Secret data and stringData", 5_000, make);
}
