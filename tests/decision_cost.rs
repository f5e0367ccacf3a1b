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
//!
//! And the decision's memory is bounded by what the server charges for it
//! before parsing (security review C1): for generated hostile shapes, the
//! peak heap of parsing and deciding a body, measured by a counting global
//! allocator, stays under `cost::shape(body).decision_bytes()`.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering},
};

use hcp_etcd_admission::{
    admission::{cost, review, DecisionInput},
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};

/// Nanoseconds the calling thread has run on a CPU.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat (Linux)");
    text.split_whitespace().next().and_then(|n| n.parse().ok()).expect("the first field is the run time")
}

/// The library's answer to `body`, with default settings, no cluster.
fn decide(body: &Value) -> Option<Value> {
    let settings = Settings::default();
    let input = DecisionInput {
        settings: &settings,
        lookup: None,
        now: Ok(parse_rfc3339("2026-11-29T15:10:00Z").expect("now")),
        expect: None,
    };
    review(body, &input).ok()
}

/// The CPU time of deciding `body`, the best of three runs (the least
/// disturbed by cache misses and preemption).
fn decide_cpu_ns(body: &Value) -> u64 {
    (0..3)
        .map(|_| {
            let start = thread_cpu_ns();
            let answer = decide(body).expect("an answer");
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
    // One test of this binary at a time: the allocation counter is process-wide.
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
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
    assert_linear("set list on CREATE", 20_000, make);
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
    assert_linear("list-type map on a status UPDATE", 4_000, make);
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

/// Counts live heap bytes and their peak since the last reset, for the whole
/// process: every test of this binary runs alone ([`MEASURE`]).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static MEASURE: std::sync::Mutex<()> = std::sync::Mutex::new(());

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak heap (above what was live before) of parsing `body` and deciding it.
fn decision_peak(body: &[u8]) -> usize {
    // Warm the lazily compiled rules first: they are process-wide, not per decision.
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let _ = decide(&v);
    }
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let answer = serde_json::from_slice::<Value>(body).ok().map(|v| decide(&v));
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    drop(answer);
    peak
}

/// Hostile and ordinary bodies of about `size` bytes, one per shape, on every webhook's kind.
fn shapes(size: usize) -> Vec<(String, Value)> {
    let hc = |storage: Value| {
        admission_review(
            "hostedclusters",
            "HostedCluster",
            "hypershift.openshift.io",
            "CREATE",
            json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
                   "metadata": {"name": "prod", "namespace": "clusters"},
                   "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": storage}}}}),
            Value::Null,
        )
    };
    let backup_with = |extra: (&str, Value)| {
        let mut b = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
            "metadata": {"name": "b", "namespace": "clusters"},
            "spec": {"storage": {"storageType": "S3", "s3": {"bucket": "hcp-etcd-backups", "region": "us-east-1",
                "keyPrefix": "k", "credentials": {"name": "creds"}}}}});
        b[extra.0] = extra.1;
        admission_review("hcpetcdbackups", "HCPEtcdBackup", "hypershift.openshift.io", "CREATE", b, Value::Null)
    };
    let n = |per: usize| (size / per).max(1);
    let deep = {
        // serde_json refuses nesting beyond 128 (its recursion limit).
        let depth = n(2).min(100);
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)
    };
    vec![
        ("many one-member objects".into(), hc(json!({"type": "PersistentVolume", "x": vec![json!({"a": 0}); n(8)]}))),
        ("many empty objects".into(), hc(json!({"type": "PersistentVolume", "x": vec![json!({}); n(3)]}))),
        ("many empty arrays".into(), hc(json!({"type": "PersistentVolume", "x": vec![json!([]); n(3)]}))),
        ("many small numbers".into(), hc(json!({"type": "PersistentVolume", "x": vec![json!(0); n(2)]}))),
        ("many nulls".into(), hc(json!({"type": "PersistentVolume", "x": vec![Value::Null; n(5)]}))),
        (
            "a set of many URLs".into(),
            hc(json!({"type": "PersistentVolume",
                "restoreSnapshotURL": (0..n(12)).map(|i| format!("https://{i:07}")).collect::<Vec<_>>()})),
        ),
        (
            // One type error per item: each a FieldError, a cause and a line of the message.
            "a set of many wrong-typed items".into(),
            hc(json!({"type": "PersistentVolume", "restoreSnapshotURL": vec![json!(0); n(2)]})),
        ),
        (
            "C1-control-character string".into(),
            backup_with(("metadata", json!({"name": "\u{85}".repeat(n(2)), "namespace": "c"}))),
        ),
        (
            "many one-character keys".into(),
            backup_with(("metadata", {
                let labels: serde_json::Map<String, Value> =
                    (0..n(12)).map(|i| (format!("{i:x}"), json!(""))).collect();
                json!({"name": "b", "namespace": "clusters", "labels": labels})
            })),
        ),
        ("one long string".into(), backup_with(("metadata", json!({"name": "x".repeat(size), "namespace": "c"})))),
        (
            "DEL-heavy string".into(),
            backup_with(("metadata", json!({"name": "\u{7f}".repeat(n(1)), "namespace": "c"}))),
        ),
        ("quote-heavy string".into(), backup_with(("metadata", json!({"name": "\"".repeat(n(2)), "namespace": "c"})))),
        (
            "control-character string".into(),
            backup_with(("metadata", json!({"name": "\u{1}".repeat(n(6)), "namespace": "c"}))),
        ),
        ("deep nesting".into(), backup_with(("status", json!({"x": deep})))),
        (
            "many conditions".into(),
            backup_with((
                "status",
                json!({"conditions": (0..n(120)).map(|i| json!({"type": format!("T{i}"), "status": "True",
                    "reason": "R", "message": "", "lastTransitionTime": "2026-11-29T15:05:00Z"})).collect::<Vec<_>>()}),
            )),
        ),
        (
            // The shape of a big real object: managedFields entries.
            "managedFields padding (an UPDATE)".into(),
            {
                let entry = json!({"manager": "hypershift-operator", "operation": "Update",
                    "apiVersion": "hypershift.openshift.io/v1beta1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}}}, "time": "2026-11-29T15:00:00Z"});
                let hc = |image: &str| {
                    json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
                    "metadata": {"name": "prod", "namespace": "clusters", "managedFields": vec![entry.clone(); n(400)]},
                    "spec": {"release": {"image": image}, "platform": {"type": "AWS"},
                        "etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume"}}}}})
                };
                admission_review(
                    "hostedclusters",
                    "HostedCluster",
                    "hypershift.openshift.io",
                    "UPDATE",
                    hc("quay.io/ocp-release:4.20.1"),
                    hc("quay.io/ocp-release:4.20.0"),
                )
            },
        ),
        (
            "a Secret with many keys".into(),
            admission_review(
                "secrets",
                "Secret",
                "",
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "c", "namespace": "hypershift", "labels": {"hypershift.openshift.io/etcd-backup": "true"}},
                    "data": (0..n(16)).map(|i| (format!("a{i:06}"), json!(0))).collect::<serde_json::Map<String, Value>>()}),
                Value::Null,
            ),
        ),
    ]
}

#[test]
fn the_decision_heap_stays_under_what_is_charged_for_it() {
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let mut report = Vec::new();
    let mut over = Vec::new();
    for size in [64 * 1024, 1024 * 1024] {
        for (what, body) in shapes(size) {
            let text = serde_json::to_vec(&body).expect("json");
            let charged = cost::shape(&text).decision_bytes();
            let peak = decision_peak(&text) as u64;
            let line = format!(
                "{what} ({} KiB): peak {} KiB, charged {} KiB ({:.2} of it; {:.0} B of heap a body byte)",
                text.len() / 1024,
                peak / 1024,
                charged / 1024,
                peak as f64 / charged as f64,
                peak as f64 / text.len() as f64
            );
            if peak > charged {
                over.push(line.clone());
            }
            report.push(line);
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(over.is_empty(), "the decision used more heap than it was charged for:\n{}", over.join("\n"));
}

/// A seeded xorshift generator (the seed is printed; `HCP_FUZZ_SEED` replays one).
#[path = "common/xorshift.rs"]
mod xorshift;

/// The generator with the shapes this test builds.
struct Gen(xorshift::XorShift);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0.next()
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
    /// A string that is ordinary, escape-heavy, URL-like or long.
    fn string(&mut self, budget: usize) -> String {
        let len = self.below(budget.clamp(1, 4096)) + 1;
        match self.below(5) {
            0 => "\u{7f}".repeat(len),
            1 => "\"\\\u{0}\n".repeat(len / 4 + 1),
            2 => format!("https://b.s3.amazonaws.com/{}?X-Amz-Signature=s", "k".repeat(len)),
            3 => "é".repeat(len / 2 + 1),
            _ => format!("v{}", self.next()),
        }
    }
    /// A JSON value of about `budget` bytes: wide, deep, duplicate-heavy,
    /// many small objects, or scalars.
    fn value(&mut self, budget: usize, depth: usize) -> Value {
        if budget < 16 || depth > 60 {
            return match self.below(4) {
                0 => json!(self.next() % 1000),
                1 => Value::Null,
                2 => json!(self.below(2) == 0),
                _ => json!(self.string(budget)),
            };
        }
        match self.below(6) {
            0 => Value::Array((0..budget / 8).map(|i| json!({"a": i % 7})).collect()),
            1 => Value::Array(vec![json!("dup"); budget / 6]),
            2 => {
                let n = self.below(8) + 1;
                Value::Array((0..n).map(|_| self.value(budget / n, depth + 1)).collect())
            }
            3 => {
                let n = self.below(8) + 1;
                Value::Object(
                    (0..n).map(|i| (format!("k{i}{}", self.below(3)), self.value(budget / n, depth + 1))).collect(),
                )
            }
            4 => Value::Object((0..budget / 10).map(|i| (format!("f{i}"), json!(i))).collect()),
            _ => json!(self.string(budget)),
        }
    }
}

/// Generated hostile bodies on every webhook's kind, with a budget per body:
/// the decision's peak heap stays under what the server charges for it
/// before parsing, and its CPU per body byte under a bound a quadratic pass
/// would break (thread CPU time, 64 KiB bodies and up, debug build). Not a
/// speed goal: a bound on the cost's growth with the input.
#[test]
fn generated_hostile_reviews_stay_within_their_charge_and_linear_cpu() {
    const CPU_NS_PER_BYTE: f64 = 2_000.0;
    let _one = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let seed = std::env::var("HCP_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(7, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("generated hostile reviews: seed {seed} (HCP_FUZZ_SEED replays it)");
    let mut g = Gen(xorshift::XorShift(seed));
    let (mut worst_heap, mut worst_cpu, mut over) = (0f64, 0f64, Vec::new());
    for i in 0..60 {
        let budget = [4 * 1024, 64 * 1024, 512 * 1024][i % 3];
        let v = g.value(budget, 0);
        let body = match g.below(5) {
            0 => admission_review(
                "hcpetcdbackups",
                "HCPEtcdBackup",
                "hypershift.openshift.io",
                "CREATE",
                json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
                    "metadata": {"name": "b", "namespace": "clusters", "labels": {"x": v.clone()}},
                    "spec": {"storage": {"storageType": "S3", "s3": {"bucket": "b", "region": "us-east-1",
                        "keyPrefix": v.clone(), "credentials": {"name": "c"}}}, "extra": v}}),
                Value::Null,
            ),
            1 => admission_review(
                "hostedclusters",
                "HostedCluster",
                "hypershift.openshift.io",
                "UPDATE",
                json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
                    "metadata": {"name": "h", "namespace": "clusters"},
                    "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {"restoreSnapshotURL": v.clone()}}}}}),
                json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
                    "metadata": {"name": "h", "namespace": "clusters"}, "spec": {"etcd": v}}),
            ),
            2 => admission_review(
                "secrets",
                "Secret",
                "",
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "hypershift",
                    "labels": {"hypershift.openshift.io/etcd-backup": "true"}}, "data": v.clone(), "stringData": v}),
                Value::Null,
            ),
            3 => admission_review(
                "statefulsets",
                "StatefulSet",
                "apps",
                "CREATE",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "etcd", "namespace": "clusters-x"},
                    "spec": {"template": {"spec": {"containers": [{"name": "etcd", "env": v.clone(), "args": v}]}}}}),
                Value::Null,
            ),
            _ => admission_review(
                "hcpetcdbackups",
                "HCPEtcdBackup",
                "hypershift.openshift.io",
                "UPDATE",
                json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
                    "metadata": {"name": "b", "namespace": "clusters"}, "spec": v.clone()}),
                json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
                    "metadata": {"name": "b", "namespace": "clusters"}, "spec": v}),
            ),
        };
        let text = serde_json::to_vec(&body).expect("json");
        let charged = cost::shape(&text).decision_bytes();
        let peak = decision_peak(&text) as u64;
        let heap = peak as f64 / charged as f64;
        worst_heap = worst_heap.max(heap);
        if peak > charged {
            over.push(format!(
                "body {i} ({} KiB): peak {} KiB over the {} KiB charged",
                text.len() >> 10,
                peak >> 10,
                charged >> 10
            ));
        }
        if text.len() >= 64 * 1024 {
            let cpu = decide_cpu_ns(&body) as f64 / text.len() as f64;
            worst_cpu = worst_cpu.max(cpu);
            if cpu > CPU_NS_PER_BYTE {
                over.push(format!("body {i} ({} KiB): {cpu:.0} ns of CPU a byte", text.len() >> 10));
            }
        }
    }
    eprintln!(
        "generated hostile reviews: worst heap {worst_heap:.2} of the charge, worst CPU {worst_cpu:.0} ns a byte"
    );
    assert!(over.is_empty(), "seed {seed}:\n{}", over.join("\n"));
}
