//! HCPEtcdBackup preflight: on CREATE, what the HyperShift Operator's
//! controller checks at run time (its `controllers/etcdbackup` package), judged at
//! admission from the objects a [`Lookup`] provides, so that whoever creates
//! the backup sees the failure instead of a terminal condition nobody reads.
//!
//! Messages carry names, key names and modes only, never a Secret value.

use crate::json_at::At;
use serde_json::Value;

use super::{
    credentials::{self, Fit, SecretData},
    CredentialsSeen, Findings, RuleInfo, Severity,
};
use crate::{
    api::{
        StorageType, CREDENTIALS_WAIT, REASON_BACKUP_FAILED, REASON_BACKUP_IN_PROGRESS, REASON_BACKUP_REJECTED,
        REASON_BACKUP_WAITING_FOR_CREDENTIALS,
    },
    lookup::Lookup,
    schema::{go_quote, FieldError},
    settings::Settings,
};

pub const UNAVAILABLE: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-preflight-unavailable",
    objects: "HCPEtcdBackup",
    field: "(CREATE)",
    severity: Severity::Warn,
    summary: "warns that the preflight rules below were skipped because the objects they read could not be looked up (no `--context`, no cluster watch, Kubewarden policy not context aware); setting `backupPreflight: false` turns the preflight off",
};

pub const HCP_EXISTS: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-hcp-exists",
    objects: "HCPEtcdBackup",
    field: "metadata.namespace",
    severity: Severity::Deny,
    summary: "a HostedControlPlane exists in the backup's namespace (otherwise the controller fails it: `HostedControlPlane not found in namespace <ns>`)",
};

pub const IN_PROGRESS: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-backup-in-progress",
    objects: "HCPEtcdBackup",
    field: "metadata.namespace",
    severity: Severity::Deny,
    summary: "no other HCPEtcdBackup in the namespace is `BackupInProgress` (its backup Job runs: the controller's serial guard would reject this one as `BackupRejected`, which is terminal); a backup in `BackupWaitingForCredentials` has no Job yet and does not count (`hcpetcdbackup-backup-pending` warns)",
};

pub const PENDING: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-backup-pending",
    objects: "HCPEtcdBackup",
    field: "metadata.namespace",
    severity: Severity::Warn,
    summary: "warns when another HCPEtcdBackup in the namespace is not terminal for another reason (no status yet, `EtcdUnhealthy`: whichever Job starts second is rejected; `BackupWaitingForCredentials`: the waiting one is rejected if its Secret appears while this one's Job runs)",
};

pub const SECRET_EXISTS: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-credentials-secret-exists",
    objects: "HCPEtcdBackup",
    field: "spec.storage.{s3,azureBlob}.credentials.name",
    severity: Severity::Warn,
    summary: "warns when the credentials Secret is not (yet) in the HyperShift Operator namespace (setting `operatorNamespace`, default `hypershift`), where the controller reads it: the controller waits up to 2 minutes for it (`BackupWaitingForCredentials`), then fails the backup; a Secret that exists but does not fit is still denied (`hcpetcdbackup-credentials-format`); not looked at in a namespace without a HostedControlPlane (denied by `hcpetcdbackup-hcp-exists`), so naming a namespace never reads the operator namespace's Secrets",
};

pub const SECRET_FORMAT: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-credentials-format",
    objects: "HCPEtcdBackup",
    field: "spec.storage.{s3,azureBlob}.credentials.name",
    severity: Severity::Deny,
    summary: "the Secret's content works in the mode the controller detects: S3 a bare IAM role ARN (aws-sts) or a shared-credentials file with a `[default]` profile (aws-static); AzureBlob `cloud` with a GUID `AZURE_CLIENT_ID` (workload identity), else `credentials` JSON (client secret or managed identity). Denials name the detected mode and what is expected, never a value",
};

pub const SECRET_FALLBACK: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-credentials-fallback",
    objects: "HCPEtcdBackup",
    field: "spec.storage.{s3,azureBlob}.credentials.name",
    severity: Severity::Warn,
    summary: "warns where the controller silently picks another mode than the content suggests (Azure: `cloud` without `AZURE_CLIENT_ID` → managed identity; a `clientSecret` ignored or empty)",
};

pub const ETCD_READY: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-etcd-ready",
    objects: "HCPEtcdBackup",
    field: "metadata.namespace",
    severity: Severity::Warn,
    summary: "warns when the `etcd` StatefulSet is missing or not fully ready: the controller marks the backup `EtcdUnhealthy` and retries every 10 s",
};

const SKIPPED: &str = "HCPEtcdBackup preflight skipped: the objects the HyperShift Operator checks (HostedControlPlane, other HCPEtcdBackups, the credentials Secret, the etcd StatefulSet) could not be looked up; give --context files, run the server with its cluster watch, or make the Kubewarden policy context aware";

fn skipped_part(f: &mut Findings, field: &str, what: &str) {
    f.warn(&UNAVAILABLE, field, format!("{what} not checked: it could not be looked up"));
}

/// A condition's reason, when `BackupCompleted` is present.
fn backup_state(backup: &Value) -> (Option<&str>, Option<&str>) {
    let cond = backup
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("BackupCompleted")));
    match cond {
        Some(c) => (c.get("status").and_then(Value::as_str), c.get("reason").and_then(Value::as_str)),
        None => (None, None),
    }
}

/// Whether `backup` is running as far as its status says (BackupCompleted
/// False with reason BackupInProgress: its Job was created and has not
/// finished): what the serial-guard rule denies on.
pub fn in_progress(backup: &Value) -> bool {
    let (status, reason) = backup_state(backup);
    !terminal(status, reason) && reason.is_some_and(running_reason)
}

/// The reason that means a backup Job exists and runs. The controller's serial
/// guard (`findActiveJob`, before `validatePrerequisites` in `Reconcile`)
/// rejects a backup only while another backup's Job is active; a backup in
/// BackupWaitingForCredentials returned before creating its Job (upstream
/// HyperShift #9074), so it has none and blocks nobody.
fn running_reason(reason: &str) -> bool {
    reason == REASON_BACKUP_IN_PROGRESS
}

/// Terminal as the controller defines it: completed, or failed, or rejected.
fn terminal(status: Option<&str>, reason: Option<&str>) -> bool {
    status == Some("True") || reason.is_some_and(|r| r == REASON_BACKUP_FAILED || r == REASON_BACKUP_REJECTED)
}

/// What the preflight of an HCPEtcdBackup CREATE reads, besides the
/// namespace's HostedControlPlanes (read first: the Secret is read only for
/// a namespace that has one, see [`check`]), the namespace's HCPEtcdBackups
/// and its etcd StatefulSet: the credentials Secret it names, in the
/// operator namespace (`None`: it names none).
pub fn reads(obj: &Value, namespace: &str, settings: &Settings) -> Option<Option<(StorageType, String)>> {
    if !settings.backup_preflight || namespace.is_empty() {
        return None;
    }
    let secret = StorageType::of_backup(obj)
        .and_then(|storage| storage.credentials_name(obj).map(|name| (storage, name.to_string())));
    Some(secret)
}

/// The preflight of an HCPEtcdBackup CREATE in `namespace`.
pub fn check(obj: &Value, namespace: &str, lookup: Option<&dyn Lookup>, settings: &Settings) -> Findings {
    let mut f = Findings::default();
    if !settings.backup_preflight || namespace.is_empty() {
        return f;
    }
    let Some(lookup) = lookup else {
        f.warnings.push(crate::finding::Warning::ruled(UNAVAILABLE.id, format!("{SKIPPED} (rule {})", UNAVAILABLE.id)));
        return f;
    };
    // The backups list doubles as the probe of whether the source serves the preflight at all.
    let Ok(backups) = lookup.hcp_etcd_backups(namespace) else {
        f.warnings.push(crate::finding::Warning::ruled(UNAVAILABLE.id, format!("{SKIPPED} (rule {})", UNAVAILABLE.id)));
        return f;
    };
    let hcps = lookup.hosted_control_planes(namespace);
    // A namespace without a HostedControlPlane is denied on that alone (and
    // one whose HostedControlPlanes could not be read is not known to be
    // hosted): its credentials Secret is not looked at, so that naming any namespace
    // never makes a shell read (or tell about) the operator namespace's
    // Secrets. Every shell reads it only for a hosted namespace.
    let hosted = matches!(&hcps, Ok(found) if !found.is_empty()).then_some(lookup);
    let hcps_unread = hcps.is_err();
    match hcps {
        Ok(hcps) if hcps.is_empty() => f.deny(
            &HCP_EXISTS,
            FieldError::invalid(
                "metadata.namespace",
                go_quote(namespace),
                format!("HostedControlPlane not found in namespace {namespace}: the HyperShift Operator would fail this backup (BackupFailed); create HCPEtcdBackups in a hosted control plane namespace"),
            ),
        ),
        Ok(_) => {}
        Err(_) => skipped_part(&mut f, "metadata.namespace", "the HostedControlPlane"),
    }
    serial_guard(obj, namespace, &backups, &mut f);
    // Unread HostedControlPlanes: the Secret is not read either, and the
    // answer says so (its format check, a denial, did not run).
    if hosted.is_some() || hcps_unread {
        check_credentials(obj, hosted, settings, &mut f);
    }
    // The etcd StatefulSet likewise: only a hosted namespace's is read (a
    // tenant may own a StatefulSet named etcd of any size elsewhere).
    match hosted {
        Some(lookup) => etcd_ready(lookup, namespace, &mut f),
        None if hcps_unread => skipped_part(&mut f, "metadata.namespace", "the etcd StatefulSet"),
        None => {}
    }
    f
}

/// The controller's serial guard: another backup in progress (its Job runs)
/// denies; one that has not finished for another reason warns, and one
/// waiting for its credentials Secret warns that it is the one at risk.
fn serial_guard(obj: &Value, namespace: &str, backups: &[Value], f: &mut Findings) {
    let own = obj.at("/metadata/name").and_then(Value::as_str);
    let mut others: Vec<(&str, Option<&str>, Option<&str>)> = backups
        .iter()
        .filter_map(|b| {
            let name = b.at("/metadata/name").and_then(Value::as_str)?;
            let (status, reason) = backup_state(b);
            (Some(name) != own && !terminal(status, reason)).then_some((name, status, reason))
        })
        .collect();
    others.sort();
    for (name, _, reason) in others {
        if let Some(reason) = reason.filter(|r| running_reason(r)) {
            f.deny(
                &IN_PROGRESS,
                FieldError::forbidden(
                    "metadata.namespace",
                    format!("HCPEtcdBackup {} in namespace {} is in progress (BackupCompleted=False, reason {reason}): the controller's serial guard would reject this backup with BackupRejected, which is terminal; create it after {} completes", go_quote(name), go_quote(namespace), go_quote(name)),
                ),
            );
        } else if reason == Some(REASON_BACKUP_WAITING_FOR_CREDENTIALS) {
            f.warn(
                &PENDING,
                "metadata.namespace",
                format!("HCPEtcdBackup {q} in this namespace is waiting for its credential Secret (reason {REASON_BACKUP_WAITING_FOR_CREDENTIALS}) and has no backup Job yet, so the controller goes on with this backup; it is {q} that is at risk: if its Secret appears while this backup's Job runs, the controller rejects {q} with BackupRejected (terminal)", q = go_quote(name)),
            );
        } else {
            let state = match reason {
                Some(r) => format!("reason {r}"),
                None => "no status yet".to_string(),
            };
            f.warn(
                &PENDING,
                "metadata.namespace",
                format!("HCPEtcdBackup {} in this namespace has not finished ({state}): if its backup Job is running when this one starts, the controller rejects this one with BackupRejected (terminal)", go_quote(name)),
            );
        }
    }
}

/// The etcd StatefulSet the backup Job needs: missing or not fully ready warns.
fn etcd_ready(lookup: &dyn Lookup, namespace: &str, f: &mut Findings) {
    match lookup.etcd_stateful_set(namespace) {
        Ok(None) => f.warn(
            &ETCD_READY,
            "metadata.namespace",
            "etcd StatefulSet not found: the controller marks the backup EtcdUnhealthy and retries every 10 s"
                .to_string(),
        ),
        Ok(Some(sts)) => {
            let want = sts.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
            let ready = sts.at("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0);
            if ready < want {
                f.warn(
                    &ETCD_READY,
                    "metadata.namespace",
                    format!("etcd StatefulSet not fully ready: {ready}/{want} replicas ready: the controller marks the backup EtcdUnhealthy and retries every 10 s"),
                );
            }
        }
        Err(_) => skipped_part(f, "metadata.namespace", "the etcd StatefulSet"),
    }
}

/// The credentials Secret rules; `lookup` is `None` when the Secret must not
/// be read (the namespace is not known to be hosted): reported as not checked.
fn check_credentials(obj: &Value, lookup: Option<&dyn Lookup>, settings: &Settings, f: &mut Findings) {
    let Some(storage) = StorageType::of_backup(obj) else { return };
    let Some(name) = storage.credentials_name(obj) else { return };
    let field = format!("spec.storage.{}.credentials.name", storage.block());
    let Some(lookup) = lookup else { return skipped_part(f, &field, "the credentials Secret") };
    let ns = settings.operator_namespace.as_str();
    let secret = match lookup.secret(ns, name) {
        Ok(s) => s,
        Err(_) => return skipped_part(f, &field, "the credentials Secret"),
    };
    let Some(secret) = secret else {
        // As the controller: a missing Secret is waited for (a client may
        // copy it right after creating the backup), then the backup fails.
        // No gauge series for a name that does not exist: any caller can
        // name one (a series per guessed name would evict the real ones).
        let (n, q) = (go_quote(name), go_quote(ns));
        f.warn(
            &SECRET_EXISTS,
            &field,
            format!("credential Secret {n} not found in namespace {q}: the HyperShift Operator waits for it ({REASON_BACKUP_WAITING_FOR_CREDENTIALS}: waiting for credential Secret {n} in namespace {q}) and fails the backup if it is still missing after {CREDENTIALS_WAIT} ({REASON_BACKUP_FAILED}: timed out after {CREDENTIALS_WAIT} waiting for credential Secret {n} in namespace {q}); create the Secret there now"),
        );
        return;
    };
    let d = credentials::detect(storage, &SecretData::from_secret(&secret));
    f.credentials = Some(CredentialsSeen { namespace: ns.to_string(), name: name.to_string(), usable: d.usable() });
    match &d.fit {
        Fit::Fits => {}
        Fit::Fallback(why) => f.warn(
            &SECRET_FALLBACK,
            &field,
            format!(
                "Secret {ns}/{name} ({}): the controller will use mode {} ({}): {why}",
                d.key_list(),
                d.mode.as_str(),
                d.mode.describe()
            ),
        ),
        Fit::Unfit(why) => f.deny(
            &SECRET_FORMAT,
            FieldError::invalid(
                &field,
                go_quote(name),
                format!(
                    "Secret {ns}/{name} ({}) does not fit storageType {}: {why}; the controller detects mode {}; expected {}",
                    d.key_list(),
                    storage.as_str(),
                    d.mode.as_str(),
                    d.expected()
                ),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::lookup::ContextObjects;

    fn backup(name: &str, reason: Option<(&str, &str)>) -> Value {
        let mut b = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
            "metadata": {"name": name, "namespace": "clusters-prod"},
            "spec": {"storage": {"storageType": "S3", "s3": {"credentials": {"name": "creds"}}}}});
        if let Some((status, reason)) = reason {
            b["status"] = json!({"conditions": [{"type": "BackupCompleted", "status": status, "reason": reason}]});
        }
        b
    }

    fn world(extra: Vec<Value>) -> ContextObjects {
        let mut objs = vec![
            json!({"kind": "HostedControlPlane", "metadata": {"name": "prod", "namespace": "clusters-prod"}}),
            json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "creds", "namespace": "hypershift"},
                   "stringData": {"credentials": "arn:aws:iam::123456789012:role/backup"}}),
            json!({"kind": "StatefulSet", "metadata": {"name": "etcd", "namespace": "clusters-prod"},
                   "spec": {"replicas": 3}, "status": {"readyReplicas": 3}}),
        ];
        objs.extend(extra);
        ContextObjects::from_values(objs)
    }

    fn run(ctx: Option<&ContextObjects>) -> Findings {
        check(&backup("new", None), "clusters-prod", ctx.map(|c| c as &dyn Lookup), &Settings::default())
    }

    #[test]
    fn all_good_is_silent() {
        let f = run(Some(&world(vec![])));
        assert!(f.errors.is_empty() && f.warnings.is_empty(), "{f:?}");
        let seen = CredentialsSeen { namespace: "hypershift".into(), name: "creds".into(), usable: true };
        assert_eq!(f.credentials, Some(seen), "the judged Secret is reported for the gauge");
    }

    #[test]
    fn no_source_warns_and_the_setting_turns_it_off() {
        let f = run(None);
        assert!(f.errors.is_empty());
        assert!(f.warnings[0].contains("preflight skipped"));
        assert_eq!(run(Some(&ContextObjects::default())).warnings, f.warnings);
        let off = Settings { backup_preflight: false, ..Settings::default() };
        assert_eq!(check(&backup("new", None), "clusters-prod", None, &off), Findings::default());
    }

    #[test]
    fn serial_guard_and_terminal_states() {
        let w = world(vec![
            backup("running", Some(("False", "BackupInProgress"))),
            backup("waitingcreds", Some(("False", "BackupWaitingForCredentials"))),
            backup("waiting", Some(("False", "EtcdUnhealthy"))),
            backup("fresh", None),
            backup("done", Some(("True", "BackupSucceeded"))),
            backup("failed", Some(("False", "BackupFailed"))),
            backup("rejected", Some(("False", "BackupRejected"))),
        ]);
        let f = run(Some(&w));
        assert_eq!(f.errors.len(), 1, "{:?}", f.errors);
        assert!(f.errors[0].to_string().contains("\"running\" in namespace \"clusters-prod\" is in progress (BackupCompleted=False, reason BackupInProgress)"));
        // Waiting for its Secret: no Job yet, so the serial guard lets others go on (#9074).
        assert!(!in_progress(&backup("w", Some(("False", "BackupWaitingForCredentials")))));
        assert!(!in_progress(&backup("w", Some(("True", "BackupWaitingForCredentials")))));
        assert_eq!(f.warnings.len(), 3, "{:?}", f.warnings);
        assert!(f.warnings[0].contains("\"fresh\"") && f.warnings[0].contains("no status yet"));
        assert!(f.warnings[1].contains("\"waiting\"") && f.warnings[1].contains("EtcdUnhealthy"));
        assert!(
            f.warnings[2].contains("\"waitingcreds\" in this namespace is waiting for its credential Secret")
                && f.warnings[2].contains("the controller rejects \"waitingcreds\" with BackupRejected")
                && f.warnings[2].text.ends_with("(rule hcpetcdbackup-backup-pending)")
                && f.warnings[2].rule == Some(PENDING.id),
            "{:?}",
            f.warnings
        );
    }

    #[test]
    fn hcp_secret_and_etcd() {
        let empty = ContextObjects::from_values(vec![json!({"kind": "ConfigMap", "metadata": {"name": "x"}})]);
        let f = run(Some(&empty));
        let text: Vec<String> = f.errors.iter().map(ToString::to_string).collect();
        assert!(text[0].contains("HostedControlPlane not found in namespace clusters-prod"), "{text:?}");
        assert_eq!(text.len(), 1, "{text:?}");
        // No HostedControlPlane: neither the credentials Secret nor the etcd
        // StatefulSet is looked at.
        assert!(!f.warnings.iter().any(|w| w.contains("credential") || w.contains("StatefulSet")), "{f:?}");
        let objs = vec![
            json!({"kind": "StatefulSet", "metadata": {"name": "etcd", "namespace": "clusters-prod"},
                "spec": {"replicas": 3}, "status": {"readyReplicas": 1}}),
            json!({"kind": "HostedControlPlane", "metadata": {"name": "prod", "namespace": "clusters-prod"}}),
        ];
        let f = run(Some(&ContextObjects::from_values(objs)));
        assert!(f.errors.is_empty(), "{f:?}");
        assert!(f.warnings.iter().any(|w| w.contains("etcd StatefulSet not fully ready: 1/3 replicas ready")), "{f:?}");
        // HostedControlPlanes that could not be read: the Secret is not read, and said so.
        struct Unread;
        impl Lookup for Unread {
            fn hosted_control_planes(&self, _: &str) -> Result<Vec<Value>, crate::lookup::LookupError> {
                Err(crate::lookup::LookupError::Failed("forbidden".into()))
            }
            fn hcp_etcd_backups(&self, _: &str) -> Result<Vec<Value>, crate::lookup::LookupError> {
                Ok(Vec::new())
            }
            fn secret(&self, _: &str, _: &str) -> Result<Option<Value>, crate::lookup::LookupError> {
                panic!("the Secret of an unknown namespace is never read")
            }
        }
        let u = check(&backup("new", None), "clusters-prod", Some(&Unread), &Settings::default());
        assert!(u.warnings.iter().any(|w| w.contains("the credentials Secret not checked")), "{u:?}");
        // A hosted namespace: a missing Secret is waited for, not denied.
        assert!(
            f.warnings
                .iter()
                .any(|w| w.contains("waiting for credential Secret \"creds\" in namespace \"hypershift\"")),
            "{f:?}"
        );
        assert!(
            f.warnings.iter().any(|w| w.contains("timed out after 2m0s waiting for credential Secret \"creds\"")),
            "{f:?}"
        );
    }
}
