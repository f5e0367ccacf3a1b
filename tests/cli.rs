//! The binary on real files: `review`, `check`, `crd --check`, `rules`.

mod common;

use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
    c.current_dir(common::root());
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn review_allows_a_valid_backup_and_echoes_the_uid() {
    let o = run(&["review", "--now", "2026-11-29T15:00:00Z", "tests/reviews/hcpetcdbackup-create-s3.json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert!(v["response"].get("patchType").is_none());
}

#[test]
fn review_denies_with_every_cause() {
    let o = run(&["review", "tests/reviews/hcpetcdbackup-create-invalid.json"]);
    assert_eq!(o.status.code(), Some(0), "a denial is still a response");
    let v: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let status = &v["response"]["status"];
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    let causes = status["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 6, "{causes:?}");
    assert!(causes.iter().all(|c| c["field"].is_string() && c["reason"].is_string()));
    assert!(status["message"]
        .as_str()
        .unwrap_or_default()
        .starts_with("HCPEtcdBackup.hypershift.openshift.io \"oadp-nightly-x7k2\" is invalid: ["));
}

#[test]
fn review_reads_yaml_from_stdin() {
    let json =
        std::fs::read_to_string(common::root().join("tests/reviews/hcpetcdbackup-create-s3.json")).expect("read");
    let v: Value = serde_json::from_str(&json).expect("json");
    let yaml = serde_yaml_ng::to_string(&v).expect("yaml");
    let mut child = bin().args(["review", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
    {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(yaml.as_bytes()).expect("write");
    }
    let o = child.wait_with_output().expect("wait");
    let out: Value = serde_json::from_slice(&o.stdout).expect("JSON out");
    assert_eq!(out["response"]["allowed"], true);
}

#[test]
fn review_rejects_what_is_not_a_review_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("hcp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (name, body, needle) in [
        ("garbage.json", "{not json", "neither JSON nor YAML"),
        ("object.json", r#"{"apiVersion":"v1","kind":"ConfigMap"}"#, "not an AdmissionReview"),
        (
            "v1beta1.json",
            r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
            "admission.k8s.io/v1 only",
        ),
        ("norequest.json", r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#, "no request"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, body).expect("write");
        let o = bin().arg("review").arg(&f).output().expect("run");
        assert_eq!(o.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn review_denies_a_request_that_does_not_parse() {
    let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","operation":7}}"#;
    let mut child = bin().args(["review"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
    {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(body.as_bytes()).expect("write");
    }
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["response"]["uid"], "u-1");
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 400);
}

#[test]
fn check_passes_valid_files_and_fails_invalid_ones() {
    let ok = run(&["check", "examples/backups.yaml"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(stdout(&ok).contains("2 allowed, 0 denied, 0 skipped"));
    let bad = run(&["check", "examples/invalid.yaml", "examples/backups.yaml"]);
    assert_eq!(bad.status.code(), Some(1));
    let text = stdout(&bad);
    assert!(text.contains("error: spec.storage.s3.bucket: Invalid value: \"xn--backups\""), "{text}");
    assert!(text.contains("restore-url-s3-scheme"), "{text}");
    assert!(text.contains("2 allowed, 2 denied, 0 skipped"), "{text}");
}

#[test]
fn check_json_output_and_skipped_kinds() {
    let dir = std::env::temp_dir().join(format!("hcp-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("mixed.yaml");
    std::fs::write(&f, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n").expect("write");
    let o = bin().args(["check", "--output", "json"]).arg(&f).arg("examples/invalid.yaml").output().expect("run");
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let results: Vec<&str> = v.as_array().expect("array").iter().filter_map(|r| r["result"].as_str()).collect();
    assert_eq!(results, vec!["skipped", "denied", "denied"]);
    assert!(v[1]["causes"].as_array().is_some_and(|c| c.len() == 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn crd_check_passes_on_the_committed_file_and_fails_on_drift() {
    let o = run(&["crd", "--check"]);
    assert_eq!(o.status.code(), Some(0), "crds/ is stale: {}", String::from_utf8_lossy(&o.stderr));
    let dir = std::env::temp_dir().join(format!("hcp-crd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let committed =
        std::fs::read_to_string(common::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml")).expect("read");
    std::fs::write(
        dir.join("hypershift.openshift.io_hcpetcdbackups.yaml"),
        committed.replace("maxLength: 63", "maxLength: 64"),
    )
    .expect("write");
    let o = bin().args(["crd", "--check", "--out"]).arg(&dir).output().expect("run");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-      maxLength: 64") || err.contains("maxLength: 64"), "{err}");
    assert!(err.contains("is stale"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn readme_rule_table_is_generated_from_the_code() {
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README");
    let start = readme.find("<!-- rules:start -->").expect("rules:start marker") + "<!-- rules:start -->\n".len();
    let end = readme.find("<!-- rules:end -->").expect("rules:end marker");
    let table = stdout(&run(&["rules"]));
    assert_eq!(
        &readme[start..end],
        table,
        "README rule table is stale: run `hcp-etcd-admission rules` and paste it between the markers"
    );
}

#[test]
fn every_subcommand_help_shows_an_example() {
    for sub in ["serve", "certs", "review", "check", "crd", "rules", "completion"] {
        let o = run(&[sub, "--help"]);
        assert!(stdout(&o).contains("Example:"), "{sub} --help has no example");
    }
}

/// The README's preflight example: the output printed there is what `check` prints.
#[test]
fn check_preflight_example_matches_the_readme() {
    let o = run(&["check", "--context", "examples/cluster.yaml", "examples/backups.yaml"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let readme = std::fs::read_to_string(common::root().join("README.md")).expect("README");
    let start = readme
        .find("$ hcp-etcd-admission check --context examples/cluster.yaml examples/backups.yaml\n")
        .expect("example in README");
    let block = &readme[start..];
    let block = &block[block.find('\n').map_or(0, |i| i + 1)..block.find("```").unwrap_or(block.len())];
    assert_eq!(out, block, "README example is stale");
}

/// `serve` reads the clock for every request; it has no `--now` to ignore.
#[test]
fn serve_has_no_now_flag() {
    let o = run(&["serve", "--now", "2026-11-29T15:00:00Z"]);
    assert_eq!(o.status.code(), Some(2), "clap rejects the flag");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--now"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// An impossible date is an error, not the next valid day.
#[test]
fn review_rejects_an_impossible_now() {
    let o = run(&["review", "--now", "2027-02-30T00:00:00Z", "tests/reviews/hcpetcdbackup-create-s3.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not an RFC 3339 time"));
}
