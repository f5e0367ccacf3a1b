//! Runs the conformance suite (tests/conformance/*.yaml) through the library
//! and through the `review` binary, and requires both to give exactly the
//! same AdmissionReview.

mod common;

use std::process::Command;

use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
    time::parse_rfc3339,
};

fn library_review(case: &common::Case) -> serde_json::Value {
    let settings = Settings::from_json(&case.settings).expect("case settings");
    let now = Ok(parse_rfc3339(&case.now).expect("case now"));
    let context = ContextObjects::from_values(case.context.clone());
    review(&case.review, &DecisionInput { settings: &settings, lookup: Some(&context), now, expect: None })
        .expect("a response")
}

#[test]
fn conformance_suite_through_the_library() {
    let cases = common::load_cases();
    assert!(cases.len() > 100, "suite shrank to {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let problems = common::check_response(case, &library_review(case));
        if !problems.is_empty() {
            failures.push(format!("{}: {}\n    {}", case.file, case.name, problems.join("\n    ")));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    eprintln!("{} conformance cases passed", cases.len());
}

/// Admitting the patched object again yields no patch (reinvocationPolicy: IfNeeded).
#[test]
fn mutation_is_idempotent() {
    let mut checked = 0;
    for case in common::load_cases().iter().filter(|c| c.patched) {
        let first = library_review(case);
        let patched = common::patched_object(case, &first["response"]).expect("applies").expect("patched");
        let mut again = case.clone();
        again.review["request"]["object"] = patched;
        let second = library_review(&again);
        assert!(second["response"].get("patch").is_none(), "{}: second admission patched again: {}", case.name, second);
        assert!(second["response"].get("patchType").is_none());
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} mutation cases");
}

#[test]
fn conformance_suite_through_the_review_binary() {
    let dir = std::env::temp_dir().join(format!("hcp-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut failures = Vec::new();
    for (i, case) in common::load_cases().iter().enumerate() {
        let file = dir.join(format!("review-{i}.json"));
        std::fs::write(&file, case.review.to_string()).expect("write review");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
        // --show-secrets: the patch as the apiserver receives it (review redacts it by default).
        cmd.arg("review").arg("--show-secrets").arg("--now").arg(&case.now).arg(&file);
        for (j, obj) in case.context.iter().enumerate() {
            let ctx = dir.join(format!("context-{i}-{j}.json"));
            std::fs::write(&ctx, obj.to_string()).expect("write context");
            cmd.arg("--context").arg(ctx);
        }
        if case.settings.as_object().is_some_and(|o| !o.is_empty()) {
            let cfg = dir.join(format!("settings-{i}.json"));
            std::fs::write(&cfg, case.settings.to_string()).expect("write settings");
            cmd.arg("--config").arg(cfg);
        }
        let out = cmd.output().expect("run review");
        if !out.status.success() {
            failures.push(format!(
                "{}: exit {:?}: {}",
                case.name,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("review prints JSON");
        if got != library_review(case) {
            failures.push(format!("{}: binary and library disagree", case.name));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The enforcement cases through the HTTPS server (each with its own
/// settings): the server answers exactly what the library does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcement_cases_through_the_server() {
    use hcp_etcd_admission::server::{certs, LookupSource};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("hcp-conf-srv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let set = certs::generate("conformance CA", &["localhost".into()], 2).expect("certs");
    certs::write(&dir, &set).expect("write");
    let client = common::https::Client::new(&[&set.ca_pem], None);
    let cases: Vec<_> = common::load_cases().into_iter().filter(|c| c.file == "enforcement.yaml").collect();
    assert!(cases.len() >= 20, "only {} enforcement cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let settings = Settings::from_json(&case.settings).expect("case settings");
        let lookups = LookupSource::Static(ContextObjects::from_values(case.context.clone()));
        let srv = common::running::start_settings(&dir, settings, lookups).await;
        let resource = case.review["request"]["resource"]["resource"].as_str().unwrap_or_default();
        let path = common::webhook_path(resource);
        let reply = client.request(srv.addr, "POST", &path, case.review.to_string().into_bytes()).await;
        srv.stop().await;
        let got = match reply {
            Ok(r) if r.status == 200 => r.json(),
            Ok(r) => {
                failures.push(format!("{}: HTTP {}: {}", case.name, r.status, r.text()));
                continue;
            }
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        let problems = common::check_response(case, &got);
        if !problems.is_empty() {
            failures.push(format!("{}: {}", case.name, problems.join("\n    ")));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
