//! Secrets stay secret. Every credentials value in tests/conformance/preflight.yaml
//! carries the marker `MARKER-7f3a`; those Secrets go through every path
//! that reads them — the library, `review` and `check` (stdout and stderr,
//! trace logging on), the `serve` process watching a (fake) cluster with its
//! live Secret reads (responses, `/metrics`, its logs at trace level in every
//! `--log-format`: JSON and text),
//! and the Wasm module on wasmtime (its answers and its host calls) — and the
//! marker must never come out, in plain text or in base64.

mod common;
// The Kubewarden path: the shipped module on wasmtime, as policy-server runs it.
#[path = "common/wasm_host.rs"]
mod wasm_host;

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine as _;
use common::https::Client;
use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
    time::parse_rfc3339,
};
use serde_json::{json, Value};

const MARKER: &str = "MARKER-7f3a";

/// The marker and what would betray it (its base64 forms at each alignment).
fn needles() -> Vec<String> {
    let mut n = vec![MARKER.to_string()];
    for pad in ["", "x", "xx"] {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{pad}{MARKER}"));
        // The part that does not depend on neighbouring bytes: without the
        // first group when it mixes in the padding, and without the last.
        let skip = if pad.is_empty() { 0 } else { 4 };
        n.push(b[skip..b.len().saturating_sub(4)].to_string());
    }
    n.retain(|s| s.len() >= 6);
    n
}

fn assert_clean(what: &str, text: &str) {
    for n in needles() {
        assert!(!text.contains(&n), "{what} contains a secret value ({n:?}):\n{text}");
    }
}

fn cases() -> Vec<common::Case> {
    let cases: Vec<common::Case> = common::load_cases().into_iter().filter(|c| c.file == "preflight.yaml").collect();
    assert!(cases.len() >= 40, "{} preflight cases", cases.len());
    // The marker is really in the inputs (else this test proves nothing).
    let inputs: String = cases.iter().map(|c| format!("{}{:?}", c.review, c.context)).collect();
    assert!(inputs.contains(
        &base64::engine::general_purpose::STANDARD.encode(format!("arn:aws:kms:us-east-1:123456789012:key/{MARKER}"))
    ));
    cases
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("hcp-secret-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

#[test]
fn library_and_review_binary() {
    let dir = tmp("review");
    for (i, case) in cases().iter().enumerate() {
        let settings = Settings::from_json(&case.settings).expect("settings");
        let ctx = ContextObjects::from_values(case.context.clone());
        let now = parse_rfc3339(&case.now).expect("now");
        let out = review(
            &case.review,
            &DecisionInput { settings: &settings, lookup: Some(&ctx), now: Ok(now), expect: None },
        )
        .expect("review");
        assert_clean(&format!("library answer to {}", case.name), &out.to_string());

        let file = dir.join(format!("review-{i}.json"));
        std::fs::write(&file, case.review.to_string()).expect("write");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
        cmd.env("RUST_LOG", "trace").arg("review").arg("--now").arg(&case.now).arg(&file);
        let ctx_file = dir.join(format!("context-{i}.json"));
        if !case.context.is_empty() {
            std::fs::write(&ctx_file, json!({"apiVersion": "v1", "kind": "List", "items": case.context}).to_string())
                .expect("write");
            cmd.arg("--context").arg(&ctx_file);
        }
        let cfg = dir.join(format!("settings-{i}.json"));
        std::fs::write(&cfg, case.settings.to_string()).expect("write");
        let o = cmd.arg("--config").arg(&cfg).output().expect("review");
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert_clean(&format!("review stdout for {}", case.name), &String::from_utf8_lossy(&o.stdout));
        assert_clean(&format!("review stderr for {}", case.name), &String::from_utf8_lossy(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_binary_every_output_format() {
    let dir = tmp("check");
    let text = std::fs::read_to_string(common::root().join("tests/conformance/preflight.yaml")).expect("read");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let fixtures = doc["fixtures"].as_object().expect("fixtures");
    let secrets: Vec<&Value> = fixtures.values().filter(|v| v["kind"] == "Secret").collect();
    let backups: Vec<&Value> = fixtures.values().filter(|v| v["kind"] == "HCPEtcdBackup").collect();
    let ctx = dir.join("cluster.json");
    let cluster: Vec<&Value> = fixtures.values().filter(|v| v["kind"] != "HCPEtcdBackup").collect();
    std::fs::write(&ctx, json!({"apiVersion": "v1", "kind": "List", "items": cluster}).to_string()).expect("write");
    let objects = dir.join("objects.yaml");
    let docs: Vec<String> =
        secrets.iter().chain(backups.iter()).map(|v| serde_yaml_ng::to_string(v).expect("yaml")).collect();
    std::fs::write(&objects, docs.join("---\n")).expect("write");
    let mut denied = 0;
    for output in ["text", "json", "yaml", "junit", "sarif"] {
        let o = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
            .env("RUST_LOG", "trace")
            .args(["check", "--output", output, "--context"])
            .arg(&ctx)
            .arg(&objects)
            .output()
            .expect("check");
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "some of them are denied: {out}");
        assert_clean(&format!("check --output {output} stdout"), &out);
        assert_clean(&format!("check --output {output} stderr"), &String::from_utf8_lossy(&o.stderr));
        denied += out.matches("denied").count();
    }
    assert!(denied > 4, "the check run judged the Secrets: {denied}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The presigned restore URL: the etcd-init patch copies it from the
/// object's own etcd-init and never holds it; every output of `check` (each
/// format, with and without `--show-patched`) and `review` shows it redacted
/// at most; only `--show-secrets --show-patched` prints it (so this test can
/// fail).
#[test]
fn restore_url_in_patches_check_and_review() {
    let dir = tmp("patch");
    let root = common::root();
    let hcp_text = std::fs::read_to_string(root.join("examples/hostedcontrolplane.yaml")).expect("hcp");
    let secret_sig = format!("X-Amz-Signature={MARKER}");
    let hcp_text = hcp_text.replace("X-Amz-Signature=abc123", &secret_sig);
    assert!(hcp_text.contains(&secret_sig), "the marker is in the restore URL");
    let hcp = dir.join("hcp.yaml");
    std::fs::write(&hcp, &hcp_text).expect("write");
    // The StatefulSet carries the control-plane-operator's etcd-init with the same URL.
    let sts_text = std::fs::read_to_string(root.join("examples/etcd-statefulset.yaml")).expect("sts");
    let sts = dir.join("etcd-statefulset.yaml");
    std::fs::write(&sts, sts_text.replace("X-Amz-Signature=abc123", &secret_sig)).expect("write");
    let run = |args: &[&str], files: &[&std::path::Path]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
        c.env("RUST_LOG", "trace").args(args).args(["--now", "2026-11-29T15:10:00Z"]);
        for f in files {
            c.arg(f);
        }
        c.output().expect("run")
    };
    for output in ["text", "json", "yaml", "junit", "sarif"] {
        for patched in [false, true] {
            let mut args = vec!["check", "--output", output];
            if patched {
                args.push("--show-patched");
            }
            let o = run(&args, &[&hcp, &sts]);
            assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
            let out = String::from_utf8_lossy(&o.stdout);
            if output == "json" {
                assert!(out.contains("etcd-init"), "the patch is in the output: {out}");
            }
            assert_clean(&format!("check -o {output} (show-patched {patched}) stdout"), &out);
            assert_clean(&format!("check -o {output} stderr"), &String::from_utf8_lossy(&o.stderr));
        }
    }
    let shown = run(&["check", "--output", "json", "--show-secrets", "--show-patched"], &[&hcp, &sts]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains(MARKER), "--show-secrets prints the URL");
    // The patch itself never holds it (a copy from the object's own etcd-init).
    let shown = run(&["check", "--output", "json", "--show-secrets"], &[&hcp, &sts]);
    assert_clean("check --show-secrets (the patch)", &String::from_utf8_lossy(&shown.stdout));
    // review: the same StatefulSet as an AdmissionReview; its base64 patch decoded.
    let obj: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&sts).expect("sts")).expect("yaml");
    let review = common::admission_review("u", "statefulsets", None, "CREATE", Some(&obj), None);
    let file = dir.join("review.json");
    std::fs::write(&file, review.to_string()).expect("write");
    let decoded = |o: &std::process::Output| {
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        let b64 = v["response"]["patch"].as_str().expect("a patch").to_string();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).expect("base64")).expect("utf-8")
    };
    let ctx = hcp.display().to_string();
    let o = run(&["review", "--context", &ctx], &[&file]);
    assert_clean("review stdout", &String::from_utf8_lossy(&o.stdout));
    assert_clean("review patch (decoded)", &decoded(&o));
    assert_clean("review stderr", &String::from_utf8_lossy(&o.stderr));
    // As the apiserver receives it: the patch copies the URL, never holds it.
    let o = run(&["review", "--show-secrets", "--context", &ctx], &[&file]);
    assert!(decoded(&o).contains(r#""op":"copy""#), "{}", decoded(&o));
    assert_clean("review --show-secrets patch (decoded)", &decoded(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_process_against_a_cluster_json_logs() {
    serve_process_against_a_cluster("json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_process_against_a_cluster_text_logs() {
    serve_process_against_a_cluster("text").await;
}

/// The `serve` process with `--log-format <format>` at trace level.
async fn serve_process_against_a_cluster(format: &str) {
    common::https::install_provider();
    let all = cases();
    let mut objects: Vec<Value> = Vec::new();
    for c in &all {
        for o in &c.context {
            if !objects.contains(o) {
                objects.push(o.clone());
            }
        }
    }
    // Each Secret fixture under its own name, so every content is read live.
    let text = std::fs::read_to_string(common::root().join("tests/conformance/preflight.yaml")).expect("read");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    let mut names = Vec::new();
    for (key, v) in doc["fixtures"].as_object().expect("fixtures") {
        if v["kind"] == "Secret" && v["metadata"]["namespace"] == "hypershift" {
            let mut s = v.clone();
            s["metadata"]["name"] = json!(key);
            objects.push(s);
            names.push(key.clone());
        }
    }
    let api = common::fake_apiserver::start(objects, Duration::from_millis(0)).await;
    let dir = tmp(&format!("serve-{format}"));
    let kubeconfig = api.kubeconfig(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"))
        .args(["serve", "--listen", "127.0.0.1:0", "--watch-hostedcontrolplanes", "always", "--log-format", format])
        .arg("--dev-cert-dir")
        .arg(dir.join("certs"))
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "trace")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(String::new()));
    let mut lines = BufReader::new(stderr).lines();
    let addr: std::net::SocketAddr = loop {
        let line = lines.next().expect("serve printed its address").expect("line");
        log.lock().expect("log").push_str(&line);
        if let Some(a) = line.strip_prefix("listening on https://") {
            break a.parse().expect("addr");
        }
    };
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Ok(mut l) = sink.lock() {
                l.push_str(&line);
                l.push('\n');
            }
        }
    });
    let ca = std::fs::read_to_string(dir.join("certs/ca.crt")).expect("dev CA");
    let https = Client::new(&[&ca], None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while https.request(addr, "GET", "/readyz", vec![]).await.expect("readyz").status != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The preflight's caches do not gate /readyz: wait until a probe is judged.
    let probe = common::admission_review("probe", "hcpetcdbackups", None, "CREATE", Some(&doc["fixtures"]["s3"]), None);
    loop {
        let r = https.post_json(addr, "/validate/hcpetcdbackups", &probe).await.expect("probe").text();
        if !r.contains("preflight skipped") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the preflight caches never synced: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut answers = String::new();
    for c in &all {
        let path = if c.review["request"]["resource"]["resource"] == "secrets" {
            "/validate/etcd-backup-secrets"
        } else {
            "/validate/hcpetcdbackups"
        };
        let r = https.post_json(addr, path, &c.review).await.expect("post");
        assert_eq!(r.status, 200, "{}", r.text());
        answers.push_str(&r.text());
    }
    // Backups naming each Secret fixture: every content is read live and judged.
    for name in &names {
        for base in ["s3", "azure"] {
            let mut b = doc["fixtures"][base].clone();
            let block = if base == "s3" { "s3" } else { "azureBlob" };
            b["spec"]["storage"][block]["credentials"]["name"] = json!(name);
            let review = common::admission_review(name, "hcpetcdbackups", None, "CREATE", Some(&b), None);
            let r = https.post_json(addr, "/validate/hcpetcdbackups", &review).await.expect("post");
            answers.push_str(&r.text());
        }
    }
    assert!(answers.contains("the controller detects mode"), "the Secrets were judged: {answers}");
    assert_clean("server answers", &answers);
    let metrics = https.request(addr, "GET", "/metrics", vec![]).await.expect("metrics").text();
    assert!(
        metrics
            .contains("hcp_etcd_admission_backup_credentials_valid{namespace=\"hypershift\",secret=\"secretsts\"} 1"),
        "{metrics}"
    );
    assert_clean("/metrics", &metrics);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let _ = reader.join();
    let log = log.lock().expect("log").clone();
    assert!(log.contains("admission review"), "the logs were captured: {log}");
    assert!(api.requests().iter().any(|r| r.contains("/secrets/secretkms")), "Secrets were read live");
    assert_clean(&format!("serve logs (--log-format {format}, RUST_LOG=trace)"), &log);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wasm_module() {
    let module = wasm_host::PolicyModule::load(&wasm_host::module_path()).unwrap_or_else(|e| panic!("{e}"));
    for case in cases() {
        let now = parse_rfc3339(&case.now).expect("now");
        let policy = module.instance(Some(now), wasm_host::context_handler(case.context.clone())).expect("instance");
        let req = json!({"settings": case.settings, "request": case.review["request"]});
        let out = policy.call("validate", &serde_json::to_vec(&req).expect("json")).expect("validate");
        assert_clean(&format!("wasm answer to {}", case.name), &String::from_utf8_lossy(&out));
        // Everything the guest sent the host (its only channel besides the answer).
        for (_, _, op, payload) in policy.host_calls() {
            assert_clean(&format!("wasm host call {op} for {}", case.name), &String::from_utf8_lossy(&payload));
        }
    }
}
