//! The backup verify step: an init container added to HyperShift's etcd
//! backup Job between `snapshot` (`etcdctl snapshot save`) and `upload`, so a
//! snapshot is proven restorable, and this cluster's history, before it is
//! uploaded (issue #33; the checks are in `backup-verify.sh`).
//!
//! Why the Job, on CREATE: the HyperShift Operator creates the Job once
//! (generateName, `backoffLimit: 0`) and afterwards only reads its status and
//! the `upload` container's termination message; a Job's pod template is
//! immutable, so nothing can fight the change, and every pod of the Job has
//! the step. The Pod would be mutated once per pod and outside the object
//! the operator owns. The step runs with the `snapshot` container's image
//! (the hosted cluster's own etcd release), mounts and TLS flags, so it
//! reaches the live cluster exactly as the snapshot did.
//!
//! Enforcement (`enforcement.rules.backup-verified`): unnamed, `warn` or
//! `audit`: the step reports (its manifest) and the upload goes on; `deny`:
//! a failed check fails the Job and nothing is uploaded; `off`: no step.
//! An exempt requester never enforces; the rule's own action beats `mode`, as
//! for every rule. The one rule whose
//! default is not `deny`: a backup lost to a check nobody has watched yet
//! would be worse than the unverified backup.

use crate::json_at::At;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{json, Value};

use crate::{
    enforcement::{Enforced, RuleAction},
    finding::Warning,
    settings::Settings,
};

/// The verify script, run with `sh -c` in the snapshot container's image;
/// apart from the literals (src/embedded_text.rs).
pub fn verify_script() -> &'static str {
    crate::embedded_text::text(crate::embedded_text::Embedded::VerifyScript)
}
/// The injected init container's name.
pub const VERIFY_CONTAINER: &str = "verify";
/// The rule id of the step (`enforcement.rules`).
pub const RULE: &str = crate::rules::BACKUP_VERIFIED.id;
/// HyperShift's backup Job: the label its pods and the Job carry.
pub const JOB_APP_LABEL: (&str, &str) = ("app", "etcd-backup");
/// The HCPEtcdBackup a Job belongs to.
pub const BACKUP_NAME_LABEL: &str = "hypershift.openshift.io/backup-name";
const HCP_LABEL: &str = "hypershift.openshift.io/hcp";
const HCP_NAMESPACE_LABEL: &str = "hypershift.openshift.io/hcp-namespace";
/// The init container that saves the snapshot, in HyperShift's Job.
const SNAPSHOT_CONTAINER: &str = "snapshot";

/// What the mutation did with one Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Not HyperShift's backup Job, not a CREATE: unchanged.
    NotApplicable,
    /// The step was added; `enforced`: a failed check fails the Job.
    Injected { enforced: bool },
    /// The Job already has a `verify` init container.
    AlreadyThere,
    /// `enforcement.rules.backup-verified: off`.
    Off,
    /// The Job's shape is not HyperShift's (no `snapshot save` to follow): unchanged, with a note.
    UnknownShape,
}

impl Verify {
    /// Every outcome (the metric's series exist from the start).
    pub const ALL: [Verify; 6] = [
        Verify::NotApplicable,
        Verify::Injected { enforced: true },
        Verify::Injected { enforced: false },
        Verify::AlreadyThere,
        Verify::Off,
        Verify::UnknownShape,
    ];

    /// The metric label of the outcome (a closed set).
    pub fn label(self) -> &'static str {
        match self {
            Verify::NotApplicable => "not_applicable",
            Verify::Injected { enforced: true } => "injected_enforced",
            Verify::Injected { enforced: false } => "injected_warn",
            Verify::AlreadyThere => "already_there",
            Verify::Off => "off",
            Verify::UnknownShape => "unknown_shape",
        }
    }
}

/// The mutation of one Job: the patch (if any), its notes, what it did.
#[derive(Debug)]
pub struct JobMutation {
    pub patch: Option<Patch>,
    pub warnings: Vec<Warning>,
    pub verify: Verify,
}

/// Whether `job` is HyperShift's etcd backup Job (the labels the operator sets).
pub fn is_backup_job(job: &Value) -> bool {
    let labels = &job["metadata"]["labels"];
    labels[JOB_APP_LABEL.0].as_str() == Some(JOB_APP_LABEL.1) && labels[BACKUP_NAME_LABEL].is_string()
}

/// Whether a failed check fails the Job, or `None` for no step: the
/// enforcement dial every rule has (`Enforcement::outcome`: the rule's own
/// action beats `mode`, an exempt requester is never denied), except that an
/// unnamed rule reports instead of following `mode`.
fn enforced(settings: &Settings, exempt: bool) -> Option<bool> {
    let e = &settings.enforcement;
    match e.rules.get(RULE) {
        None => Some(false),
        Some(RuleAction::Off) => None,
        Some(_) => Some(e.outcome(RULE, exempt) == Enforced::Denied),
    }
}

/// The verify step for a Job CREATE (`exempt`: the requester is exempt from enforcement).
pub fn verify_at(job: &Value, settings: &Settings, exempt: bool) -> JobMutation {
    let unchanged = |verify: Verify, warnings: Vec<Warning>| JobMutation { patch: None, warnings, verify };
    if !is_backup_job(job) {
        return unchanged(Verify::NotApplicable, Vec::new());
    }
    let Some(enforce) = enforced(settings, exempt) else { return unchanged(Verify::Off, Vec::new()) };
    let inits = job.at(super::LIST).and_then(Value::as_array);
    let inits = inits.map(Vec::as_slice).unwrap_or_default();
    if inits.iter().any(|c| c["name"] == VERIFY_CONTAINER) {
        return unchanged(Verify::AlreadyThere, Vec::new());
    }
    let found = inits.iter().position(|c| c["name"] == SNAPSHOT_CONTAINER);
    let Some((at, snapshot)) = found.and_then(|i| inits.get(i).map(|c| (i, c))) else {
        return unchanged(Verify::UnknownShape, vec![unknown_shape("it has no init container named \"snapshot\"")]);
    };
    let Some(saved) = Saved::of(snapshot) else {
        return unchanged(
            Verify::UnknownShape,
            vec![unknown_shape("its \"snapshot\" init container runs no `etcdctl snapshot save <file>`")],
        );
    };
    let container = verify_container(job, snapshot, &saved, settings, enforce);
    let path = super::list_pointer(Some((at + 1).to_string()));
    let mut ops = vec![PatchOperation::Add(AddOperation { path, value: container })];
    ops.push(fail_job_rule(job));
    // A Job with a podFailurePolicy must replace pods only once they have
    // failed (the apiserver defaulted `TerminatingOrFailed` before this
    // mutation and refuses it with a policy; backoffLimit 0 makes it moot).
    let path = json_patch::jsonptr::PointerBuf::from_tokens(["spec", "podReplacementPolicy"]);
    ops.push(PatchOperation::Add(AddOperation { path, value: json!("Failed") }));
    let patch = Patch(ops);
    let mode =
        if enforce { "a failed check fails the Job" } else { "warn: a failed check is reported, the upload goes on" };
    let note = format!("hcp-etcd-admission: added the init container \"{VERIFY_CONTAINER}\" after \"snapshot\": the snapshot is trial-restored and compared with the live cluster before the upload ({RULE}: {mode})");
    JobMutation {
        patch: Some(patch),
        warnings: vec![Warning::note(note)],
        verify: Verify::Injected { enforced: enforce },
    }
}

/// A `podFailurePolicy` rule: the step's exit 1 fails the Job with a
/// condition that names it ("Container verify … failed with exit code 1
/// matching FailJob rule"), which the HyperShift Operator copies into the
/// HCPEtcdBackup's `BackupFailed` message; the Job's own rules stay after it.
fn fail_job_rule(job: &Value) -> PatchOperation {
    let rule = json!({"action": "FailJob", "onExitCodes": {"containerName": VERIFY_CONTAINER, "operator": "In", "values": [1]}});
    let tokens = ["spec", "podFailurePolicy"];
    if job.at("/spec/podFailurePolicy/rules").is_some_and(Value::is_array) {
        let mut path = json_patch::jsonptr::PointerBuf::from_tokens(tokens);
        path.push_back("rules");
        path.push_back("0");
        PatchOperation::Add(AddOperation { path, value: rule })
    } else {
        let path = json_patch::jsonptr::PointerBuf::from_tokens(tokens);
        PatchOperation::Add(AddOperation { path, value: json!({"rules": [rule]}) })
    }
}

fn unknown_shape(why: &str) -> Warning {
    Warning::note(format!(
        "hcp-etcd-admission: this etcd backup Job is not verified: {why} (HyperShift's backup Job shape); the Job is unchanged"
    ))
}

/// What the `snapshot` container saves, and how it reaches the cluster.
#[derive(Debug, Default, PartialEq, Eq)]
struct Saved {
    file: String,
    endpoints: Option<String>,
    cacert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl Saved {
    /// Reads `etcdctl … snapshot save <file>` from the container's command
    /// and args (`--flag=v` and `--flag v`); `None` without a save.
    fn of(c: &Value) -> Option<Self> {
        let argv: Vec<&str> =
            ["command", "args"].iter().filter_map(|k| c[*k].as_array()).flatten().filter_map(Value::as_str).collect();
        let at = argv.windows(2).position(|w| w == ["snapshot", "save"])?;
        let file = argv.get(at + 2).filter(|f| !f.starts_with('-'))?.to_string();
        let flag = |name: &str| {
            let long = format!("--{name}");
            let prefix = format!("--{name}=");
            argv.iter().enumerate().find_map(|(i, a)| match a.strip_prefix(&prefix) {
                Some(v) => Some(v.to_string()),
                None if *a == long => argv.get(i + 1).map(|v| v.to_string()),
                None => None,
            })
        };
        Some(Self { file, endpoints: flag("endpoints"), cacert: flag("cacert"), cert: flag("cert"), key: flag("key") })
    }
}

fn verify_container(job: &Value, snapshot: &Value, saved: &Saved, settings: &Settings, enforce: bool) -> Value {
    let labels = &job["metadata"]["labels"];
    let label = |k: &str| labels[k].as_str().unwrap_or_default().to_string();
    let mut env: Vec<Value> = snapshot["env"].as_array().cloned().unwrap_or_default();
    env.retain(|e| e["name"].as_str().is_some_and(|n| !n.starts_with("ETCDCTL_") || n == "ETCDCTL_API"));
    // Values as the snapshot container has them: the kubelet expands a
    // `$(VAR)` in them from the same env (copied first), as it does there.
    let mut set = |name: &str, value: String| env.push(json!({"name": name, "value": value}));
    set("SNAPSHOT_PATH", saved.file.clone());
    for (name, value) in [
        ("ETCDCTL_ENDPOINTS", &saved.endpoints),
        ("ETCDCTL_CACERT", &saved.cacert),
        ("ETCDCTL_CERT", &saved.cert),
        ("ETCDCTL_KEY", &saved.key),
    ] {
        if let Some(v) = value {
            set(name, v.clone());
        }
    }
    set("VERIFY_ENFORCE", enforce.to_string());
    set("RESTORE_REVISION_BUMP", settings.restore_revision_bump.to_string());
    set("HCP_NAMESPACE", label(HCP_NAMESPACE_LABEL));
    set("HCP_NAME", label(HCP_LABEL));
    set("BACKUP_NAME", label(BACKUP_NAME_LABEL));
    let mut c = json!({
        "name": VERIFY_CONTAINER,
        "image": snapshot["image"],
        "command": ["/bin/sh", "-c", verify_script(), "etcd-backup-verify"],
        "env": env,
        "terminationMessagePolicy": "File",
    });
    for key in ["imagePullPolicy", "volumeMounts", "resources", "securityContext"] {
        if let Some(v) = snapshot.get(key).filter(|v| !v.is_null()) {
            c[key] = v.clone();
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforcement::Mode;

    /// HyperShift's backup Job, as `etcdbackup/reconciler.go` builds it
    /// (`../shared/reference/hypershift-facts.md` §2, "The Job").
    pub(crate) fn job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "etcd-backup-daily-", "namespace": "hypershift", "labels": {
                "app": "etcd-backup", "hypershift.openshift.io/hcp": "hc1",
                "hypershift.openshift.io/backup-name": "daily", "hypershift.openshift.io/hcp-namespace": "clusters-hc1"}},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 900, "ttlSecondsAfterFinished": 600,
                "template": {"spec": {"restartPolicy": "Never",
                    "initContainers": [
                        {"name": "fetch-certs", "image": "quay.io/hypershift/cpo:4.20",
                         "command": ["control-plane-operator", "fetch-etcd-certs", "--hcp-namespace", "clusters-hc1", "--output-dir", "/etc/etcd-certs"],
                         "volumeMounts": [{"name": "etcd-certs", "mountPath": "/etc/etcd-certs"}]},
                        {"name": "snapshot", "image": "quay.io/openshift/etcd:4.20",
                         "env": [{"name": "ETCDCTL_API", "value": "3"}],
                         "command": ["/usr/bin/etcdctl", "--endpoints", "https://etcd-client.clusters-hc1.svc:2379",
                            "--cacert", "/etc/etcd-certs/ca.crt", "--cert", "/etc/etcd-certs/etcd-client.crt",
                            "--key", "/etc/etcd-certs/etcd-client.key", "snapshot", "save", "/etc/etcd-backup/snapshot.db"],
                         "volumeMounts": [{"name": "etcd-certs", "mountPath": "/etc/etcd-certs"},
                                          {"name": "etcd-backup", "mountPath": "/etc/etcd-backup"}]}],
                    "containers": [{"name": "upload", "image": "quay.io/hypershift/cpo:4.20",
                        "command": ["control-plane-operator", "etcd-upload", "--snapshot-path", "/etc/etcd-backup/snapshot.db"]}]}}}
        })
    }

    fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
        c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
    }

    fn applied(job: &Value, m: &JobMutation) -> Value {
        let mut out = job.clone();
        if let Some(p) = &m.patch {
            json_patch::patch(&mut out, p).unwrap_or_else(|e| panic!("{e}"));
        }
        out
    }

    #[test]
    fn the_step_goes_between_snapshot_and_upload_with_the_snapshots_image_mounts_and_tls() {
        let m = verify_at(&job(), &Settings::default(), false);
        assert_eq!(m.verify, Verify::Injected { enforced: false });
        let out = applied(&job(), &m);
        let inits = out.at("/spec/template/spec/initContainers").and_then(Value::as_array).expect("inits");
        let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["fetch-certs", "snapshot", "verify"]);
        let v = &inits[2];
        assert_eq!(v["image"], "quay.io/openshift/etcd:4.20");
        assert_eq!(v["volumeMounts"], inits[1]["volumeMounts"]);
        assert_eq!(env(v, "SNAPSHOT_PATH"), Some("/etc/etcd-backup/snapshot.db"));
        assert_eq!(env(v, "ETCDCTL_ENDPOINTS"), Some("https://etcd-client.clusters-hc1.svc:2379"));
        assert_eq!(env(v, "ETCDCTL_CACERT"), Some("/etc/etcd-certs/ca.crt"));
        assert_eq!(env(v, "ETCDCTL_CERT"), Some("/etc/etcd-certs/etcd-client.crt"));
        assert_eq!(env(v, "ETCDCTL_KEY"), Some("/etc/etcd-certs/etcd-client.key"));
        assert_eq!(env(v, "ETCDCTL_API"), Some("3"));
        assert_eq!(env(v, "VERIFY_ENFORCE"), Some("false"));
        assert_eq!(env(v, "HCP_NAMESPACE"), Some("clusters-hc1"));
        assert_eq!(env(v, "BACKUP_NAME"), Some("daily"));
        assert_eq!(v["command"][2], verify_script());
        assert_eq!(out["spec"]["template"]["spec"]["containers"], job()["spec"]["template"]["spec"]["containers"]);
        let rule = &out["spec"]["podFailurePolicy"]["rules"][0];
        assert_eq!(
            (rule["action"].as_str(), rule["onExitCodes"]["containerName"].as_str()),
            (Some("FailJob"), Some("verify"))
        );
        // A Job with rules of its own keeps them, after the step's.
        let mut own = job();
        own["spec"]["podFailurePolicy"] =
            json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
        let out = applied(&own, &verify_at(&own, &Settings::default(), false));
        let rules = out["spec"]["podFailurePolicy"]["rules"].as_array().expect("rules");
        assert_eq!(
            (rules.len(), rules[0]["action"].as_str(), rules[1]["action"].as_str()),
            (2, Some("FailJob"), Some("Ignore"))
        );
    }

    #[test]
    fn enforcement_decides_whether_a_failed_check_fails_the_job() {
        let with = |action: Option<RuleAction>, mode: Mode, exempt: bool| {
            let mut s = Settings::default();
            s.enforcement.mode = mode;
            if let Some(a) = action {
                s.enforcement.rules.insert(RULE.into(), a);
            }
            verify_at(&job(), &s, exempt).verify
        };
        assert_eq!(with(None, Mode::Deny, false), Verify::Injected { enforced: false }, "warn first");
        assert_eq!(with(Some(RuleAction::Warn), Mode::Deny, false), Verify::Injected { enforced: false });
        assert_eq!(with(Some(RuleAction::Audit), Mode::Deny, false), Verify::Injected { enforced: false });
        assert_eq!(with(Some(RuleAction::Deny), Mode::Deny, false), Verify::Injected { enforced: true });
        assert_eq!(with(Some(RuleAction::Deny), Mode::Warn, false), Verify::Injected { enforced: true });
        assert_eq!(with(Some(RuleAction::Deny), Mode::Audit, false), Verify::Injected { enforced: true }, "beats mode");
        assert_eq!(with(None, Mode::Audit, false), Verify::Injected { enforced: false });
        assert_eq!(with(Some(RuleAction::Deny), Mode::Deny, true), Verify::Injected { enforced: false }, "exempt");
        assert_eq!(with(Some(RuleAction::Off), Mode::Deny, false), Verify::Off);
    }

    #[test]
    fn other_jobs_and_other_shapes_are_left_as_they_are() {
        let mut other = job();
        other["metadata"]["labels"] = json!({"app": "something-else"});
        assert_eq!(verify_at(&other, &Settings::default(), false).verify, Verify::NotApplicable);
        let mut no_snapshot = job();
        no_snapshot["spec"]["template"]["spec"]["initContainers"][1]["name"] = json!("save");
        let m = verify_at(&no_snapshot, &Settings::default(), false);
        assert_eq!((m.verify, m.patch.is_none()), (Verify::UnknownShape, true));
        assert!(m.warnings.iter().any(|w| w.text.contains("no init container named \"snapshot\"")), "{m:?}");
        let mut no_save = job();
        no_save["spec"]["template"]["spec"]["initContainers"][1]["command"] = json!(["/bin/true"]);
        assert_eq!(verify_at(&no_save, &Settings::default(), false).verify, Verify::UnknownShape);
        let again = applied(&job(), &verify_at(&job(), &Settings::default(), false));
        assert_eq!(verify_at(&again, &Settings::default(), false).verify, Verify::AlreadyThere, "idempotent");
    }

    #[test]
    fn flags_in_either_form_and_references_expand_as_in_the_snapshot_container() {
        let mut j = job();
        j["spec"]["template"]["spec"]["initContainers"][1]["command"] = json!(["etcdctl"]);
        j["spec"]["template"]["spec"]["initContainers"][1]["args"] =
            json!(["--endpoints=https://e:2379", "--cacert=/c/$(X)ca", "snapshot", "save", "/b/s.db"]);
        let out = applied(&j, &verify_at(&j, &Settings::default(), false));
        let v = &out["spec"]["template"]["spec"]["initContainers"][2];
        assert_eq!(env(v, "ETCDCTL_ENDPOINTS"), Some("https://e:2379"));
        assert_eq!(env(v, "ETCDCTL_CACERT"), Some("/c/$(X)ca"), "the kubelet expands it as in the snapshot container");
        assert_eq!(env(v, "ETCDCTL_CERT"), None);
        assert_eq!(env(v, "SNAPSHOT_PATH"), Some("/b/s.db"));
    }
}
