//! `check` as a fleet audit, on the real binary: the inputs kubectl takes
//! (Lists, directories, stdin, a bad document among good ones, empty input,
//! `--strict`), audit semantics (a live object judged as a no-op UPDATE of
//! itself), same-file context, streaming, broken pipes, every output format,
//! and the other CLI surfaces (`rules -o`, `completion`, `crd --stdout`,
//! settings errors, `--config` with the shipped ConfigMap or Kubewarden policy).

mod common;

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::{json, Value};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hcp-etcd-admission"));
    c.current_dir(common::root());
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).stdin(Stdio::null()).output().expect("run binary")
}

fn with_stdin(args: &[&str], input: &str) -> Output {
    let mut child =
        bin().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    child.wait_with_output().expect("wait")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("hcp-cli-check-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("tmp dir");
        Self(d)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("dir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

const NOW: &str = "2026-12-01T00:00:00Z";

/// A HostedCluster restored from a presigned URL that expired on 2026-11-01.
fn restored_hostedcluster() -> Value {
    json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
        "metadata": {"name": "restored", "namespace": "clusters"},
        "spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume",
            "restoreSnapshotURL": ["https://b.s3.us-east-1.amazonaws.com/k/1.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261101T000000Z&X-Amz-Expires=3600&X-Amz-Signature=deadbeef"]}}}}})
}

fn invalid_backup() -> Value {
    json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
        "metadata": {"name": "bad-s3", "namespace": "clusters-prod"},
        "spec": {"storage": {"storageType": "S3", "s3": {"bucket": "xn--backups", "region": "us-east-1",
            "keyPrefix": "backups", "credentials": {"name": "creds"}}}}})
}

#[test]
fn kubectl_get_lists_are_expanded_and_judged() {
    // What `kubectl get hostedclusters,hcpetcdbackups -A -o yaml` prints.
    let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
        "items": [restored_hostedcluster(), invalid_backup()]});
    let t = Tmp::new("list");
    let f = t.file("list.yaml", &serde_yaml_ng::to_string(&list).expect("yaml"));
    let o = run(&["check", "--now", NOW, s(&f)]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains("list.yaml#1.items[0]: HostedCluster/clusters/restored: denied"), "{text}");
    assert!(text.contains("list.yaml#1.items[1]: HCPEtcdBackup/clusters-prod/bad-s3: denied"), "{text}");
    assert!(text.contains("(rule hcpetcdbackup-s3-bucket-naming)"), "{text}");
    assert!(text.contains("0 allowed, 2 denied, 0 skipped"), "{text}");
    // kubectl's own layout (items in column 0, `kind: List` after them) is read item by item;
    // the same List with indented items (yq, by hand) is judged the same way.
    let yaml = serde_yaml_ng::to_string(&list).expect("yaml");
    let kubectl_layout = format!(
        "apiVersion: v1\nitems:\n{}kind: List\nmetadata:\n  resourceVersion: \"\"\n",
        yaml.split("items:\n").nth(1).and_then(|rest| rest.split("kind: List").next()).unwrap_or_default()
    );
    let indented = kubectl_layout
        .lines()
        .map(|l| {
            if l.starts_with("- ") || l.starts_with("  ") && !l.starts_with("  resourceVersion") {
                format!("  {l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    for (name, text) in [("kubectl.yaml", kubectl_layout.clone()), ("indented.yaml", indented)] {
        let f = t.file(name, &text);
        let o = run(&["check", "--now", NOW, s(&f)]);
        let got = out(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {got}\n{text}");
        assert!(
            got.contains(&format!("{name}#1.items[1]: HCPEtcdBackup/clusters-prod/bad-s3: denied")),
            "{name}: {got}"
        );
        assert!(got.contains("0 allowed, 2 denied, 0 skipped"), "{name}: {got}");
    }
    // A typed list from the API: items without kind/apiVersion get the list's.
    let typed = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackupList",
        "items": [{"metadata": invalid_backup()["metadata"], "spec": invalid_backup()["spec"]}]});
    let o = with_stdin(&["check", "-"], &typed.to_string());
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(out(&o).contains("<stdin>#1.items[0]: HCPEtcdBackup/clusters-prod/bad-s3: denied"), "{}", out(&o));
    // An empty list from kubectl is no object at all.
    let o = with_stdin(&["check", "--strict"], r#"{"apiVersion":"v1","kind":"HostedClusterList","items":[]}"#);
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    assert!(err(&o).contains("no objects in the input"), "{}", err(&o));
}

#[test]
fn directories_are_walked_like_kubectl() {
    let t = Tmp::new("dir");
    t.file("a.yaml", &serde_yaml_ng::to_string(&invalid_backup()).expect("yaml"));
    t.file("README.md", "not an object");
    t.file("sub/b.json", &restored_hostedcluster().to_string());
    let o = run(&["check", "--now", NOW, s(t.path())]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    let text = out(&o);
    assert!(text.contains("a.yaml#1: HCPEtcdBackup/clusters-prod/bad-s3: denied"), "{text}");
    assert!(!text.contains("b.json") && !text.contains("README"), "-R not given, .md never read: {text}");
    assert!(text.contains("0 allowed, 1 denied, 0 skipped"), "{text}");
    let o = run(&["check", "-R", "--now", NOW, s(t.path())]);
    let text = out(&o);
    assert!(text.contains("sub/b.json#1: HostedCluster/clusters/restored: denied"), "{text}");
    assert!(text.contains("0 allowed, 2 denied, 0 skipped"), "{text}");
}

#[test]
fn a_bad_document_is_reported_and_the_rest_still_judged() {
    let t = Tmp::new("bad");
    let good = serde_yaml_ng::to_string(&restored_hostedcluster()).expect("yaml");
    let mixed = t.file("mixed.yaml", &format!("{good}---\nmetadata: [unclosed\n---\n{good}"));
    let o = run(&["check", "--audit", s(&mixed), "examples/backups.yaml"]);
    assert_eq!(o.status.code(), Some(2), "an input error: {}", out(&o));
    let text = out(&o);
    assert!(text.contains("mixed.yaml#1: HostedCluster/clusters/restored: allowed"), "{text}");
    assert!(text.contains("mixed.yaml#3: HostedCluster/clusters/restored: allowed"), "{text}");
    assert!(text.contains("examples/backups.yaml#2: HCPEtcdBackup/clusters-prod/nightly-azure: allowed"), "{text}");
    assert!(text.contains("4 allowed, 0 denied, 0 skipped, 1 input error"), "{text}");
    let e = err(&o);
    let line = good.lines().count() + 2;
    assert!(e.contains(&format!("mixed.yaml: document 2 (line {line}): is neither JSON nor YAML")), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    // A file that does not exist is an input error too; the others are judged.
    let o = run(&["check", "--audit", "no/such/file.yaml", "examples/backups.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("no/such/file.yaml: cannot be read"), "{}", err(&o));
    assert!(out(&o).contains("2 allowed, 0 denied, 0 skipped, 1 input error"), "{}", out(&o));
}

#[test]
fn empty_input_unknown_kinds_and_unserved_versions_are_reported_and_strict_fails_on_them() {
    let t = Tmp::new("strict");
    let empty = t.file("empty.yaml", "# nothing here\n---\n");
    let o = run(&["check", s(&empty)]);
    assert_eq!(o.status.code(), Some(0));
    assert!(err(&o).contains("warning: no objects in the input"), "{}", err(&o));
    let o = run(&["check", "--strict", s(&empty)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("error: no objects in the input"), "{}", err(&o));

    let mut wrong_case = invalid_backup();
    wrong_case["kind"] = json!("HcpEtcdBackup");
    let mut alpha = restored_hostedcluster();
    alpha["apiVersion"] = json!("hypershift.openshift.io/v1alpha1");
    let docs = [
        wrong_case,
        alpha,
        json!({"metadata": {"name": "x"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    ];
    let text: Vec<String> = docs.iter().map(|d| serde_yaml_ng::to_string(d).expect("yaml")).collect();
    let f = t.file("odd.yaml", &text.join("---\n"));
    let o = run(&["check", s(&f)]);
    assert_eq!(o.status.code(), Some(0), "skipped objects do not fail without --strict: {}", out(&o));
    let text = out(&o);
    assert!(
        text.contains("kind \"HcpEtcdBackup\" is not checked by hcp-etcd-admission; did you mean \"HCPEtcdBackup\"?"),
        "{text}"
    );
    assert!(
        text.contains("apiVersion \"hypershift.openshift.io/v1alpha1\" is not served for HostedCluster (served: \"hypershift.openshift.io/v1beta1\"); not judged"),
        "not judged as v1beta1: {text}"
    );
    assert!(
        text.contains("odd.yaml#3: (no kind)/x: skipped\n  not a Kubernetes object: apiVersion and kind must be set"),
        "{text}"
    );
    assert!(
        text.contains("kind \"ConfigMap\" is not checked by hcp-etcd-admission\n"),
        "no suggestion for a foreign kind: {text}"
    );
    assert!(text.contains("0 allowed, 0 denied, 4 skipped"), "{text}");
    let o = run(&["check", "--strict", s(&f)]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
}

#[test]
fn stdin_is_read_when_no_file_is_given() {
    let o = with_stdin(&["check", "--now", NOW], &restored_hostedcluster().to_string());
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(out(&o).contains("<stdin>#1: HostedCluster/clusters/restored: denied"), "{}", out(&o));
}

/// A restored HostedCluster whose immutable presigned URL has since expired:
/// a CREATE of it is denied, but the cluster admits its next write (the rule
/// is ratcheted), and that is what `--audit` reports.
#[test]
fn audit_judges_a_live_object_as_its_next_write() {
    let t = Tmp::new("audit");
    let f = t.file("hc.json", &restored_hostedcluster().to_string());
    let create = run(&["check", "--now", NOW, s(&f)]);
    assert_eq!(create.status.code(), Some(1));
    assert!(out(&create).contains("the presigned URL expired at 2026-11-01T01:00:00Z"), "{}", out(&create));
    let audit = run(&["check", "--audit", "--now", NOW, s(&f)]);
    assert_eq!(audit.status.code(), Some(0), "{}", out(&audit));
    let text = out(&audit);
    assert!(text.contains("hc.json#1: HostedCluster/clusters/restored: allowed"), "{text}");
    assert!(
        text.contains("1 allowed, 0 denied, 0 skipped (audit: each object judged as an UPDATE that leaves it unchanged, as the apiserver judges its next write)"),
        "{text}"
    );
    let json = run(&["check", "--audit", "-o", "json", "--now", NOW, s(&f)]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v[0]["operation"], "UPDATE");
    assert_eq!(v[0]["result"], "allowed");
    // Ratcheting covers the schema, not the rules that read the value: a
    // stored bucket of the wrong type passes the schema while the write
    // leaves it as it is, but the CEL rules on it cannot evaluate it, and
    // kube-apiserver 1.34/1.35 deny the next write (checked against them in
    // tests/real_apiserver_variants.rs).
    let mut stored = invalid_backup();
    stored["spec"]["storage"]["s3"]["bucket"] = json!(7);
    let g = t.file("stored.json", &stored.to_string());
    assert_eq!(run(&["check", s(&g)]).status.code(), Some(1), "a CREATE of it is denied");
    let next = run(&["check", "--audit", s(&g)]);
    assert_eq!(next.status.code(), Some(1), "its next write too: {}", out(&next));
    assert!(out(&next).contains("invalid data, expected string, got int64 evaluating rule"), "{}", out(&next));
    // A stored value of the right type that a rule rejects is ratcheted: the
    // next write passes, with the rule's message as a warning.
    let mut upper = invalid_backup();
    upper["spec"]["storage"]["s3"]["bucket"] = json!("Upper");
    let u = t.file("upper.json", &upper.to_string());
    let next = run(&["check", "--audit", s(&u)]);
    assert_eq!(next.status.code(), Some(0), "{}", out(&next));
    assert!(out(&next).contains("spec.storage.s3.bucket: Invalid value: \"Upper\""), "{}", out(&next));
    // An etcd StatefulSet whose HostedControlPlane is nowhere: a metadata-only next write passes, with a warning.
    let o = run(&["check", "--audit", "examples/etcd-statefulset.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(out(&o).contains("admitted because this update leaves spec unchanged"), "{}", out(&o));
}

/// The HostedControlPlane in the same file (even after the StatefulSet) is
/// the context of the etcd StatefulSet's mutation; without it, the denial
/// says how to give it.
#[test]
fn objects_in_the_judged_files_are_context() {
    let t = Tmp::new("ctx");
    let sts = std::fs::read_to_string(common::root().join("examples/etcd-statefulset.yaml")).expect("sts");
    let hcp = std::fs::read_to_string(common::root().join("examples/hostedcontrolplane.yaml")).expect("hcp");
    let f = t.file("both.yaml", &format!("{sts}\n---\n{hcp}"));
    let o = run(&["check", "--now", "2026-11-29T15:10:00Z", s(&f)]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = out(&o);
    assert!(
        text.contains("both.yaml#1: StatefulSet/clusters-prod/etcd: allowed (mutated: 3 JSON patch operations"),
        "{text}"
    );
    assert!(text.contains("both.yaml#2: HostedControlPlane/clusters-prod/prod: allowed"), "{text}");
    // Given both ways (the file as --context too), it is still one HostedControlPlane.
    let o = run(&["check", "--now", "2026-11-29T15:10:00Z", "--context", s(&f), s(&f)]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let o = run(&["check", "examples/etcd-statefulset.yaml"]);
    assert_eq!(o.status.code(), Some(1));
    let text = out(&o);
    assert!(text.contains("  error: statefulsets.apps \"etcd\" is forbidden: no HostedControlPlane found"), "{text}");
    assert!(
        text.contains("    hint: offline, the HostedControlPlane comes from the judged files or --context FILE"),
        "{text}"
    );
}

fn many_backups(n: usize) -> String {
    let one = std::fs::read_to_string(common::root().join("examples/backups.yaml")).expect("backups");
    let first = one.split("\n---\n").next().expect("first doc").to_string();
    let mut text = String::with_capacity(first.len() * n);
    for i in 0..n {
        text.push_str(&first.replace("name: nightly-s3", &format!("name: nightly-{i}")));
        text.push_str("\n---\n");
    }
    text
}

#[test]
fn a_repeated_warning_is_printed_once_with_its_count() {
    let o = with_stdin(&["check"], &many_backups(50));
    assert_eq!(o.status.code(), Some(0));
    let text = out(&o);
    assert_eq!(text.matches("HCPEtcdBackup preflight skipped").count(), 2, "once inline, once in the summary: {text}");
    assert!(text.contains("warning on 50 objects (printed once above): HCPEtcdBackup preflight skipped"), "{text}");
    assert!(text.ends_with("50 allowed, 0 denied, 0 skipped\n"), "{text}");
}

/// Results come out as they are decided: the first is printed while stdin is still open.
#[test]
fn results_stream_while_the_input_is_still_being_read() {
    let mut child = bin()
        .args(["check", "--now", NOW, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let doc = serde_yaml_ng::to_string(&restored_hostedcluster()).expect("yaml");
    stdin.write_all(format!("{doc}---\n").as_bytes()).expect("write");
    stdin.flush().expect("flush");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line before stdin closes").expect("line");
    assert_eq!(first, "<stdin>#1: HostedCluster/clusters/restored: denied");
    drop(stdin);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(rest.last().map(String::as_str), Some("0 allowed, 1 denied, 0 skipped"), "{rest:?}");
    assert_eq!(child.wait().expect("wait").code(), Some(1));
}

/// Runs the binary, reads the first 64 bytes of its output and closes the
/// pipe, as `head` does once it has its line.
fn read_then_close(args: &[&str]) -> Output {
    let mut child =
        bin().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    child.wait_with_output().expect("wait")
}

/// `check … | head -1` and `review … | head -1`: a closed stdout ends the
/// command quietly (exit 0), never with a panic (exit 101).
#[test]
fn a_closed_stdout_ends_quietly() {
    let t = Tmp::new("pipe");
    let big = t.file("big.yaml", &many_backups(3000));
    for format in ["text", "json", "yaml", "sarif", "junit"] {
        let o = read_then_close(&["check", "-o", format, s(&big)]);
        assert_eq!(o.status.code(), Some(0), "{format}: {}", err(&o));
        assert!(!err(&o).contains("panicked") && err(&o).is_empty(), "{format}: {}", err(&o));
    }
    // review: the pipe is closed before it writes anything.
    let mut child = bin()
        .args(["review", "tests/reviews/hcpetcdbackup-create-s3.json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!err(&o).contains("panicked"), "{}", err(&o));
}

const SIGNATURE: &str = "X-Amz-Signature=abc123";

#[test]
fn every_output_format() {
    let args = |fmt: &'static str| {
        vec![
            "check",
            "-o",
            fmt,
            "--now",
            "2026-11-29T15:10:00Z",
            "examples/invalid.yaml",
            "examples/etcd-statefulset.yaml",
            "examples/hostedcontrolplane.yaml",
        ]
    };
    // json: one element per object, causes with their rule, the patch redacted.
    let o = run(&args("json"));
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json array");
    let results: Vec<&str> = v.as_array().expect("array").iter().filter_map(|r| r["result"].as_str()).collect();
    assert_eq!(results, vec!["denied", "denied", "allowed", "allowed"], "{v:#}");
    assert_eq!(v[0]["causes"][0]["rule"], "hcpetcdbackup-s3-bucket-naming");
    assert_eq!(v[0]["operation"], "CREATE");
    let sts = v.as_array().and_then(|a| a.iter().find(|r| r["file"] == "examples/etcd-statefulset.yaml")).expect("sts");
    // The patch copies the URL from the object's own etcd-init (add, copy, remove).
    let ops: Vec<&str> = sts["patch"].as_array().expect("ops").iter().filter_map(|o| o["op"].as_str()).collect();
    assert_eq!(ops, ["add", "copy", "remove"], "{sts}");
    assert!(!sts["patch"].to_string().contains("1764428700.db"), "{sts}");
    assert!(!out(&o).contains(SIGNATURE));
    // yaml: one document per object.
    let o = run(&args("yaml"));
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_slice(&o.stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml doc"))
        .collect();
    assert_eq!(docs.len(), 4);
    assert_eq!(docs[1]["kind"], "HostedCluster");
    assert!(!out(&o).contains(SIGNATURE));
    // junit: totals, one testsuite per file, a failure per denied object.
    let o = run(&args("junit"));
    let x = out(&o);
    assert!(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"hcp-etcd-admission check\" tests=\"4\" failures=\"2\" errors=\"0\" skipped=\"0\">"), "{x}");
    assert_eq!(x.matches("<testsuite ").count(), 3, "{x}");
    assert_eq!(x.matches("<failure ").count(), 2, "{x}");
    assert_eq!(x.matches("<testcase ").count(), x.matches("</testcase>").count());
    assert!(x.trim_end().ends_with("</testsuites>"), "{x}");
    // sarif: 2.1.0, one result per error and warning, located by file and line, rules listed.
    let o = run(&args("sarif"));
    let v: Value = serde_json::from_slice(&o.stdout).expect("sarif json");
    assert_eq!(v["version"], "2.1.0");
    let run0 = &v["runs"][0];
    let ids: Vec<&str> =
        run0["tool"]["driver"]["rules"].as_array().expect("rules").iter().filter_map(|r| r["id"].as_str()).collect();
    assert!(
        ids.contains(&"restore-url-s3-scheme") && ids.contains(&"upstream.hcpetcdbackup.spec.immutable"),
        "{ids:?}"
    );
    let results = run0["results"].as_array().expect("results");
    let first = &results[0];
    assert_eq!(first["ruleId"], "hcpetcdbackup-s3-bucket-naming");
    assert_eq!(first["level"], "error");
    assert_eq!(first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "examples/invalid.yaml");
    assert_eq!(first["locations"][0]["physicalLocation"]["region"]["startLine"], 2);
    assert!(results.iter().all(|r| ids.contains(&r["ruleId"].as_str().unwrap_or_default())), "every ruleId is listed");
    assert!(results.iter().any(|r| r["level"] == "warning"));
    assert_eq!(run0["properties"]["denied"], 2);
    // text: the kubectl-style lines.
    let o = run(&args("text"));
    assert!(out(&o).starts_with("examples/invalid.yaml#1: HCPEtcdBackup/clusters-prod/bad-s3: denied\n  error: spec.storage.s3.bucket: Invalid value: \"xn--backups\""), "{}", out(&o));
}

#[test]
fn show_patched_prints_the_stored_object_with_the_url_redacted() {
    let base = ["check", "--now", "2026-11-29T15:10:00Z", "--context", "examples/hostedcontrolplane.yaml"];
    let mut args = base.to_vec();
    args.extend(["--show-patched", "examples/etcd-statefulset.yaml"]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains("\n  patched:\n    apiVersion: apps/v1\n    kind: StatefulSet\n"), "{text}");
    assert!(text.contains("name: etcd-init"), "{text}");
    assert!(
        text.contains("value: https://hcp-etcd-backups.s3.us-east-1.amazonaws.com/backups/1764428700.db?<redacted>"),
        "{text}"
    );
    assert!(!text.contains(SIGNATURE), "{text}");
    let mut args = base.to_vec();
    args.extend(["-o", "json", "--show-patched", "examples/etcd-statefulset.yaml"]);
    let v: Value = serde_json::from_slice(&run(&args).stdout).expect("json");
    let inits = v[0]["patched"]["spec"]["template"]["spec"]["initContainers"].as_array().expect("patched");
    let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, vec!["ensure-dns", "etcd-init", "reset-member"]);
    // --show-secrets: the stored object as the apiserver stores it.
    let mut args = base.to_vec();
    args.extend(["-o", "json", "--show-secrets", "--show-patched", "examples/etcd-statefulset.yaml"]);
    assert!(out(&run(&args)).contains(SIGNATURE));
}

#[test]
fn review_patches_never_hold_the_restore_url() {
    let t = Tmp::new("review");
    let sts: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(common::root().join("examples/etcd-statefulset.yaml")).expect("sts"),
    )
    .expect("yaml");
    let review = common::admission_review("u", "statefulsets", None, "CREATE", Some(&sts), None);
    let f = t.file("review.json", &review.to_string());
    let decode = |o: &Output| {
        use base64::Engine as _;
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        let patch = v["response"]["patch"].as_str().expect("patch");
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(patch).expect("base64")).expect("utf-8")
    };
    let ctx = ["review", "--now", "2026-11-29T15:10:00Z", "--context", "examples/hostedcontrolplane.yaml"];
    let mut args = ctx.to_vec();
    args.push(s(&f));
    // The patch copies the URL from the object's own etcd-init: it never
    // holds it, redacted or not.
    let patch = decode(&run(&args));
    assert!(patch.contains(r#""op":"copy""#) && !patch.contains("1764428700.db"), "{patch}");
    let mut args = ctx.to_vec();
    args.extend(["--show-secrets", s(&f)]);
    let patch = decode(&run(&args));
    assert!(patch.contains(r#""op":"copy""#) && !patch.contains("1764428700.db"), "{patch}");
}

#[test]
fn apiserver_artefacts_get_a_note() {
    let mut typo = invalid_backup();
    typo["spec"]["storage"]["s3"]["bucket"] = json!("hcp-etcd-backups");
    if let Some(s3) = typo["spec"]["storage"]["s3"].as_object_mut() {
        s3.remove("region");
        s3.insert("regoin".into(), json!("us-east-1"));
    }
    let o = with_stdin(&["check"], &typo.to_string());
    let text = out(&o);
    assert!(text.contains("error: spec.storage.s3.region: Required value"), "{text}");
    assert!(text.contains("some validation rules were not checked"), "{text}");
    assert!(text.contains("    note: the apiserver's own message: CEL rules are not evaluated while"), "{text}");
    let mut typed = invalid_backup();
    typed["spec"]["storage"]["s3"]["bucket"] = json!(7);
    let text = out(&with_stdin(&["check"], &typed.to_string()));
    assert!(text.contains("    note: \"integer\" is the value's JSON type, not the value"), "{text}");
}

#[test]
fn rules_completion_and_crd_stdout() {
    let o = run(&["rules", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let rules = v.as_array().expect("array");
    assert!(rules.iter().any(|r| r["id"] == "restore-url-expired" && r["action"] == "deny"));
    assert!(rules.iter().any(|r| r["id"] == "etcd-init-restore-url-expiry" && r["action"] == "warn"));
    let table = out(&run(&["rules"]));
    assert_eq!(rules.len(), table.lines().count() - 2, "the same rules as the table");
    let y: Value = serde_yaml_ng::from_slice(&run(&["rules", "-o", "yaml"]).stdout).expect("yaml");
    assert_eq!(y, v);
    for (shell, needle) in
        [("bash", "complete -F"), ("zsh", "#compdef hcp-etcd-admission"), ("fish", "complete -c hcp-etcd-admission")]
    {
        let o = run(&["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = out(&o);
        assert!(script.contains(needle) && script.contains("audit"), "{shell}: {script:.300}");
    }
    let o = run(&["crd", "--stdout"]);
    assert_eq!(o.status.code(), Some(0));
    let committed =
        std::fs::read_to_string(common::root().join("crds/hypershift.openshift.io_hcpetcdbackups.yaml")).expect("crd");
    assert_eq!(out(&o), committed);
}

#[test]
fn settings_errors_name_their_key_and_config_takes_the_shipped_files() {
    let t = Tmp::new("settings");
    let bad = t.file("bad.yaml", "restoreMaxTimeSeconds: 15m\n");
    let o = run(&["check", "--config", s(&bad), "examples/backups.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("invalid settings: restoreMaxTimeSeconds: invalid type: string \"15m\", expected u64"),
        "{}",
        err(&o)
    );
    let typo = t.file("typo.yaml", "allowS3RestoreUrl: true\n");
    let e = err(&run(&["check", "--config", s(&typo), "examples/backups.yaml"]));
    assert!(e.contains("unknown field `allowS3RestoreUrl`"), "{e}");
    // The shipped settings file (the ConfigMap is generated from it) and Kubewarden policies as they are.
    for shipped in ["webhooks/base/settings.yaml", "webhooks/kubewarden/validate.yaml"] {
        let o = run(&["check", "--config", shipped, "examples/backups.yaml"]);
        assert_eq!(o.status.code(), Some(0), "{shipped}: {}", err(&o));
    }
    // A ConfigMap's settings are really read: a bad value in it is reported with its key.
    let cm = t.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndata:\n  settings.yaml: |\n    restoreMaxBytes: lots\n",
    );
    let e = err(&run(&["check", "--config", s(&cm), "examples/backups.yaml"]));
    assert!(e.contains("restoreMaxBytes: invalid type: string \"lots\""), "{e}");
    let policy = t.file(
        "policy.yaml",
        "apiVersion: policies.kubewarden.io/v1\nkind: ClusterAdmissionPolicy\nmetadata: {name: p}\nspec:\n  settings:\n    allowS3RestoreURL: true\n",
    );
    let o = run(&["check", "--now", NOW, "--config", s(&policy), "examples/invalid.yaml"]);
    let text = out(&o);
    assert!(text.contains("HostedCluster/clusters/restored: allowed"), "allowS3RestoreURL from the policy: {text}");
    // A valid ConfigMap's settings take effect.
    let cm = t.file(
        "cm-ok.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndata:\n  settings.yaml: |\n    allowS3RestoreURL: true\n",
    );
    let text = out(&run(&["check", "--now", NOW, "--config", s(&cm), "examples/invalid.yaml"]));
    assert!(text.contains("HostedCluster/clusters/restored: allowed"), "allowS3RestoreURL from the ConfigMap: {text}");
}

/// `check` applies the `enforcement` settings as every shell does: warn mode
/// allows with the denial's text as a warning, audit mode records it (shown
/// as the response's audit annotation), an exempt namespace is recorded as
/// exempt; deny (the default) denies.
#[test]
fn check_applies_enforcement_like_every_shell() {
    let t = Tmp::new("enforcement");
    let cfg = |name: &str, body: &str| t.file(name, body);
    let base = out(&run(&["check", "--now", NOW, "examples/invalid.yaml"]));
    assert!(base.contains("HCPEtcdBackup/clusters-prod/bad-s3: denied"), "{base}");
    let warn = cfg("warn.yaml", "enforcement: {mode: warn}\n");
    let o = run(&["check", "--now", NOW, "--config", s(&warn), "examples/invalid.yaml"]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "warn mode denies nothing: {text}");
    assert!(text.contains("HCPEtcdBackup/clusters-prod/bad-s3: allowed"), "{text}");
    assert!(text.contains("  warning: spec.storage.s3.bucket: Invalid value: \"xn--backups\""), "{text}");
    let audit = cfg("audit.yaml", "enforcement: {mode: audit}\n");
    let text = out(&run(&["check", "--now", NOW, "--config", s(&audit), "examples/invalid.yaml"]));
    assert!(text.contains("HCPEtcdBackup/clusters-prod/bad-s3: allowed"), "{text}");
    assert!(text.contains("  audit: spec.storage.s3.bucket: Invalid value: \"xn--backups\""), "{text}");
    assert!(!text.contains("warning: spec.storage.s3.bucket"), "audit mode does not warn: {text}");
    let exempt = cfg("exempt.yaml", "enforcement: {exemptions: {namespaces: [clusters-prod]}}\n");
    let o = run(&["check", "--now", NOW, "-o", "json", "--config", s(&exempt), "examples/invalid.yaml"]);
    let text = out(&o);
    assert!(text.contains("\"exempt\": \"namespace \\\"clusters-prod\\\": spec.storage.s3.bucket"), "{text}");
}

/// The review's M3: a 50 KB YAML alias bomb (one anchor of 10,000 items
/// referenced 10,000 times: 10^8 nodes) and 200 KB of flow nesting are
/// refused with what is wrong, the other documents of the file still judged.
#[test]
fn alias_bombs_and_deep_nesting_are_refused_bounded_by_the_document() {
    let t = Tmp::new("bombs");
    let w = 10_000;
    let bomb = format!("a: &a [{}]\nb: [{}]\n", vec!["0"; w].join(","), vec!["*a"; w].join(","));
    let deep = format!("{}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let sts = std::fs::read_to_string(common::root().join("examples/invalid.yaml")).expect("example");
    let f = t.file("bombs.yaml", &format!("{bomb}---\n{deep}---\n{sts}"));
    let o = run(&["check", s(&f)]);
    let (text, errors) = (out(&o), String::from_utf8_lossy(&o.stderr).into_owned());
    assert_eq!(o.status.code(), Some(2), "input errors: {text}{errors}");
    assert!(errors.contains("aliases expand the document beyond twice its size"), "{errors}");
    assert!(errors.contains("nests deeper than 128 levels at line 4"), "{errors}");
    assert!(text.contains("HCPEtcdBackup/clusters-prod/bad-s3: denied"), "the rest is judged: {text}");
    assert!(text.contains("2 input errors"), "{text}");
}

/// Issue #30: a closed pipe keeps the verdict. `check big.yaml | head -1`
/// on objects that are denied exits 1 (what was judged so far), never 0.
#[test]
fn a_closed_stdout_keeps_the_exit_code_of_what_was_judged() {
    let t = Tmp::new("pipe-denied");
    let one = serde_yaml_ng::to_string(&invalid_backup()).expect("yaml");
    let many: String = (0..3000).map(|i| one.replace("name: bad", &format!("name: bad-{i}")) + "---\n").collect();
    let big = t.file("denied.yaml", &many);
    for format in ["text", "json", "sarif"] {
        let o = read_then_close(&["check", "-o", format, s(&big)]);
        assert_eq!(o.status.code(), Some(1), "{format}: a denial before the pipe closed: {}", err(&o));
        assert!(!err(&o).contains("panicked"), "{format}: {}", err(&o));
    }
}

/// Issue #30: one fleet report. `--audit` judges each live object as its
/// next write and still lists what a CREATE of it would meet, marked
/// ratcheted (an S3-refused bucket, a KMS key in another region, an s3://
/// restore URL: 0 denied, and none of them hidden); `--failures-only`
/// prints only the objects that need attention; `--warn-exit-code` makes
/// warnings alone fail a run.
#[test]
fn the_fleet_report_marks_ratcheted_findings_and_filters_failures() {
    let audit = run(&["check", "--audit", "examples/invalid.yaml", "examples/backups.yaml"]);
    assert_eq!(audit.status.code(), Some(0), "{}", out(&audit));
    let text = out(&audit);
    for rule in ["hcpetcdbackup-s3-bucket-naming", "hcpetcdbackup-kms-region", "restore-url-s3-scheme"] {
        assert!(
            text.lines().any(|l| l.starts_with("  ratcheted: ") && l.ends_with(&format!("(rule {rule})"))),
            "{rule}: {text}"
        );
    }
    assert!(
        !text.contains("ratcheted: HCPEtcdBackup preflight skipped"),
        "the tool's own limits are no finding: {text}"
    );
    assert!(
        text.contains(", 2 with ratcheted findings (admitted as they are; a new object like them would meet them)"),
        "{text}"
    );
    let json = run(&["check", "--audit", "-o", "json", "examples/invalid.yaml"]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v[0]["result"], "allowed");
    assert_eq!(v[0]["ratcheted"][0]["rule"], "hcpetcdbackup-s3-bucket-naming", "{v}");
    assert_eq!(v[0]["ratcheted"][0]["field"], "spec.storage.s3.bucket");
    // Without --audit nothing is ratcheted: a CREATE meets everything.
    let plain: Value =
        serde_json::from_slice(&run(&["check", "-o", "json", "examples/invalid.yaml"]).stdout).expect("json");
    assert!(plain[0].get("ratcheted").is_none() && plain[0]["result"] == "denied", "{plain}");
    // --failures-only: the allowed backups are counted, not printed.
    let only = run(&["check", "--audit", "--failures-only", "examples/invalid.yaml", "examples/backups.yaml"]);
    let text = out(&only);
    assert!(!text.contains("examples/backups.yaml#"), "{text}");
    assert!(text.contains("examples/invalid.yaml#1:") && text.contains("4 allowed, 0 denied"), "{text}");
    // Warnings alone: exit 0 by default, the given code with --warn-exit-code.
    let t = Tmp::new("warn-only");
    let mut sovereign = invalid_backup();
    sovereign["spec"]["storage"] = json!({"storageType": "AzureBlob", "azureBlob": {
        "container": "backups", "storageAccount": "acct", "keyPrefix": "etcd",
        "credentials": {"name": "creds"}, "encryptionKeyURL": "https://vault1.vault.azure.cn/keys/k/0123456789abcdef0123456789abcdef"}});
    let f = t.file("sovereign.json", &sovereign.to_string());
    let plain = run(&["check", s(&f)]);
    assert_eq!(plain.status.code(), Some(0), "{}", out(&plain));
    assert!(
        out(&plain).contains("(rule hcpetcdbackup-sovereign-key-url)"),
        "not a warnings-only case any more: {}",
        out(&plain)
    );
    assert_eq!(run(&["check", "--warn-exit-code", "3", s(&f)]).status.code(), Some(3));
    // The preflight's "skipped" alone is no warning about the object.
    let g =
        t.file("clean.yaml", &std::fs::read_to_string(common::root().join("examples/backups.yaml")).expect("backups"));
    assert_eq!(run(&["check", "--warn-exit-code", "3", s(&g)]).status.code(), Some(0));
    // A denial wins over warnings.
    assert_eq!(run(&["check", "--warn-exit-code", "3", "examples/invalid.yaml", s(&f)]).status.code(), Some(1));
    // --failures-only shows what sets the exit code: the warned object, with --warn-exit-code.
    let shown = run(&["check", "--failures-only", "--warn-exit-code", "3", s(&f)]);
    assert_eq!(shown.status.code(), Some(3));
    assert!(out(&shown).contains("sovereign.json#1:"), "the object behind exit 3 is not shown: {}", out(&shown));
}

/// The README's fleet check before an upgrade: a HostedControlPlane with a
/// restore in progress (restoreSnapshotURL set, EtcdSnapshotRestored not
/// True) is named as such, in text and JSON, with or without --audit; a
/// restored one, one whose restore failed to set True yet, a HostedCluster
/// and unmanaged etcd are told apart. The exit code is the judgement's.
#[test]
fn a_pending_restore_is_named_by_check() {
    let hcp = |name: &str, status: Value, managed: bool| {
        let etcd = if managed {
            json!({"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume",
                "restoreSnapshotURL": ["https://bucket.s3.amazonaws.com/snapshot.db"]}}})
        } else {
            json!({"managementType": "Unmanaged", "unmanaged": {"endpoint": "https://etcd:2379", "tls": {"clientSecret": {"name": "c"}}}})
        };
        json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
            "metadata": {"name": name, "namespace": "clusters"}, "spec": {"etcd": etcd}, "status": status})
    };
    let cond = |status: &str| {
        json!({"conditions": [{"type": "EtcdSnapshotRestored", "status": status,
        "reason": "AsExpected", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    };
    let mut hc = hcp("hc", json!({}), true);
    hc["kind"] = json!("HostedCluster");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        hcp("pending", json!({}), true),
        hcp("failed", cond("False"), true),
        hcp("restored", cond("True"), true),
        hcp("unmanaged", json!({}), false),
        hc,
    ]});
    let t = Tmp::new("pending");
    let f = t.file("hcps.json", &list.to_string());
    for audit in [true, false] {
        let args: Vec<&str> = if audit { vec!["check", "--audit", s(&f)] } else { vec!["check", s(&f)] };
        let o = run(&args);
        let text = out(&o);
        assert_eq!(o.status.code(), Some(0), "{text}");
        let pending: Vec<&str> = text
            .lines()
            .zip(text.lines().skip(1))
            .filter(|(_, next)| {
                next.starts_with("  restore pending: restoreSnapshotURL is set and EtcdSnapshotRestored is not True")
            })
            .map(|(line, _)| line)
            .collect();
        assert_eq!(
            pending,
            [
                "hcps.json#1.items[0]: HostedControlPlane/clusters/pending: allowed".replace("hcps.json", s(&f)),
                format!("{}#1.items[1]: HostedControlPlane/clusters/failed: allowed", s(&f)),
            ],
            "{text}"
        );
        assert!(
            text.contains(", 2 restores pending (not the moment to upgrade: README, Upgrade and uninstall)"),
            "{text}"
        );
    }
    let json = run(&["check", "--audit", "-o", "json", s(&f)]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("json");
    let flags: Vec<bool> = (0..5).map(|i| v[i]["restorePending"] == true).collect();
    assert_eq!(flags, [true, true, false, false, false], "{v}");
}
