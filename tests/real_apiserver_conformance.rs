//! The differential: every conformance case that the CRD alone decides goes
//! through the real kube-apiserver (1.35 and 1.34) and must get the same
//! verdict, status code, message and causes there as from `review` with
//! `kubernetesVersion` set to that apiserver's version.
//!
//! "The CRD alone decides" a case when the core's own schema check (the
//! generated CRD's OpenAPI schema and CEL rules) gives exactly the causes the
//! whole decision gives: no rule of rules/ (clock, URL parsing, lookups) adds
//! one. Those cases need the webhook and are not the CRD's to judge.
//!
//! How each case reaches the apiserver:
//! - CREATE: a dry-run POST.
//! - UPDATE (main resource or the status subresource): the old object is
//!   stored first, then the new one is PUT with a dry run. Ratcheting cases
//!   need an old object that today's schema rejects, as after a CRD upgrade;
//!   so every old object is stored while a permissive version of the CRD
//!   (same group, kind, status subresource; any content) is installed, and the
//!   real CRD is put back before the updates run. Each UPDATE case gets a
//!   namespace of its own (many cases share an object name).
//!   Objects keep their name, labels and annotations; the namespace is the
//!   test's, and server-set metadata (uid, resourceVersion, …) is dropped.

mod common;

use std::collections::BTreeMap;

use common::{
    differential::{
        apiserver_warnings, crd_decides, crd_warnings, for_apiserver, install, library_review, test_crds,
        verdict_of_status, Verdict, RESOURCES,
    },
    kube_apiserver::{self, Auth, Kube},
};
use serde_json::Value;

struct Sent {
    name: String,
    got: Verdict,
    want: Verdict,
}

async fn differential(v: Kube) {
    let test = format!("differential_{}", v.minor());
    let Some(api) = kube_apiserver::shared(&test, v) else { return };
    let crds = test_crds();
    let cases = common::load_cases();
    let mut chosen = Vec::new();
    let mut by_resource: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    // An UPDATE never renames: a case whose two objects differ in name is
    // sent (to both) with the old object's name.
    let cases: Vec<common::Case> = cases
        .into_iter()
        .map(|mut c| {
            let req = &mut c.review["request"];
            if req["operation"] == "UPDATE" && req["oldObject"]["metadata"]["name"].is_string() {
                let name = req["oldObject"]["metadata"]["name"].clone();
                req["object"]["metadata"]["name"] = name.clone();
                req["name"] = name;
            }
            c
        })
        .collect();
    for case in &cases {
        let req = &case.review["request"];
        let res = req["resource"]["resource"].as_str().unwrap_or_default().to_string();
        if !RESOURCES.contains(&res.as_str()) {
            continue;
        }
        let resp = library_review(case, v)["response"].clone();
        let entry = by_resource.entry(res).or_default();
        entry.1 += 1;
        if crd_decides(case, &resp, v) {
            entry.0 += 1;
            chosen.push((case, resp));
        }
    }

    // Old objects first, under the permissive CRDs.
    let create_ns = api.namespace(&format!("diff-create-{}", v.minor())).await;
    install(api, &crds, true, &create_ns).await;
    let mut update_ns = Vec::new();
    for (i, (case, _)) in chosen.iter().enumerate() {
        let req = &case.review["request"];
        if req["operation"] != "UPDATE" {
            update_ns.push(None);
            continue;
        }
        let ns = api.namespace(&format!("diff-{i}")).await;
        let old = for_apiserver(&req["oldObject"], &ns);
        let r = api.create(&old, false, &Auth::Admin).await.expect("store old");
        assert!(r.ok(), "{}: storing the old object: {} {}", case.name, r.status, r.text);
        if old.get("status").is_some() {
            let r = api.update(&old, Some("status"), false, &Auth::Admin).await.expect("store old status");
            assert!(r.ok(), "{}: storing the old status: {} {}", case.name, r.status, r.text);
        }
        update_ns.push(Some(ns));
    }
    install(api, &crds, false, &create_ns).await;

    let mut sent = Vec::new();
    for ((case, resp), ns) in chosen.iter().zip(update_ns) {
        let req = &case.review["request"];
        let sub = req["subResource"].as_str();
        let reply = match ns {
            None => api.create(&for_apiserver(&req["object"], &create_ns), true, &Auth::Admin).await,
            Some(ns) => api.update(&for_apiserver(&req["object"], &ns), sub, true, &Auth::Admin).await,
        }
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let got =
            verdict_of_status(reply.ok(), &reply.body, apiserver_warnings(reply.warnings.iter().map(String::as_str)));
        let want = verdict_of_status(resp["allowed"] == true, &resp["status"], crd_warnings(case, v, resp));
        sent.push(Sent { name: format!("{}: {}", case.file, case.name), got, want });
    }

    let disagreements: Vec<String> = sent
        .iter()
        .filter(|s| s.got != s.want)
        .map(|s| format!("{}\n    apiserver {:?}\n    review    {:?}", s.name, s.got, s.want))
        .collect();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "kube-apiserver {}: {} cases sent ({} of them UPDATEs), {} disagreements; CRD-decided per resource (sent/all): {by_resource:?}\n",
            api.git_version().await.unwrap_or_default(),
            sent.len(),
            chosen.iter().filter(|(c, _)| c.review["request"]["operation"] == "UPDATE").count(),
            disagreements.len()
        )
        .as_bytes(),
    );
    // The differential must cover every kind of case it claims to.
    let count = |pred: &dyn Fn(&Value) -> bool| chosen.iter().filter(|(c, _)| pred(&c.review["request"])).count();
    assert!(count(&|r| r["operation"] == "CREATE" && r["resource"]["resource"] == "hcpetcdbackups") >= 20);
    assert!(count(&|r| r["operation"] == "UPDATE" && r["subResource"].is_null()) >= 5);
    assert!(count(&|r| r["subResource"] == "status") >= 3);
    assert!(count(&|r| r["resource"]["resource"] == "hostedclusters") >= 5);
    assert!(count(&|r| r["resource"]["resource"] == "hostedcontrolplanes") >= 5);
    assert!(sent.iter().any(|s| !s.want.allowed) && sent.iter().any(|s| s.want.allowed));
    assert!(
        disagreements.is_empty(),
        "{} of {} cases: the real kube-apiserver {} and review disagree:\n{}",
        disagreements.len(),
        sent.len(),
        v.minor(),
        disagreements.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_35() {
    differential(Kube::V1_35).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_36() {
    differential(Kube::V1_36).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_37() {
    differential(Kube::V1_37).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_1_34() {
    differential(Kube::V1_34).await;
}
