//! Secret admission for etcd-backup credentials: Secrets labelled
//! `hypershift.openshift.io/etcd-backup: "true"` (the label the OADP plugin
//! puts on its copies; the webhook's objectSelector sends only those). The
//! storage type is not known here, so the content is run through the
//! controller's detection for both; it must work for at least one.
//!
//! Never a value in the output: key names, modes and fixed text only.

use crate::json_at::At;
use serde_json::Value;

use super::{
    credentials::{Fit, SecretAssessment, SecretData},
    Findings, RuleInfo, Severity,
};
use crate::schema::FieldError;

/// The label that marks an etcd-backup credentials Secret.
pub const LABEL: &str = "hypershift.openshift.io/etcd-backup";

pub const FORMAT: RuleInfo = RuleInfo {
    id: "etcd-backup-secret-format",
    objects: "Secret (labelled `hypershift.openshift.io/etcd-backup: \"true\"`)",
    field: "data",
    severity: Severity::Deny,
    summary: "the content works for S3 or AzureBlob under the controller's own detection (as `hcpetcdbackup-credentials-format`); the denial names the key names, detected modes and what is expected",
};

pub const MODE: RuleInfo = RuleInfo {
    id: "etcd-backup-secret-mode",
    objects: "Secret (labelled `hypershift.openshift.io/etcd-backup: \"true\"`)",
    field: "data",
    severity: Severity::Warn,
    summary: "tells which mode the controller will use for each storage type the content works for, and warns where it silently falls back",
};

/// Whether a Secret carries the etcd-backup label.
pub fn labelled(secret: &Value) -> bool {
    secret.at("/metadata/labels").and_then(|l| l.get(LABEL)).and_then(Value::as_str) == Some("true")
}

/// Whether a labelled Secret's content is usable for some storage type
/// (`None`: not labelled, not judged). For the server's gauge.
pub fn usable(secret: &Value) -> Option<bool> {
    labelled(secret).then(|| SecretAssessment::of(&SecretData::from_secret(secret)).usable())
}

/// The rules for a Secret CREATE/UPDATE. An UPDATE that leaves the data
/// alone is not judged again (ratcheting, as everywhere in this project).
pub fn check(secret: &Value, old: Option<&Value>) -> Findings {
    let mut f = Findings::default();
    if !labelled(secret) {
        return f;
    }
    if let Some(old) = old {
        if old.get("data") == secret.get("data") && old.get("stringData") == secret.get("stringData") && labelled(old) {
            return f;
        }
    }
    let data = SecretData::from_secret(secret);
    let a = SecretAssessment::of(&data);
    if !a.usable() {
        let reason = |d: &super::credentials::Detection| match &d.fit {
            Fit::Unfit(r) | Fit::Fallback(r) => r.clone(),
            Fit::Fits => String::new(),
        };
        f.deny(
            &FORMAT,
            FieldError::invalid(
                "data",
                "\"object\"".to_string(),
                format!(
                    "the content ({}) works for neither storage type under the HyperShift Operator's detection: for S3 (mode {}): {}; for AzureBlob (mode {}): {}; expected for S3: {}; expected for AzureBlob: {}",
                    a.s3.key_list(),
                    a.s3.mode.as_str(),
                    reason(&a.s3),
                    a.azure.mode.as_str(),
                    reason(&a.azure),
                    a.s3.expected(),
                    a.azure.expected()
                ),
            ),
        );
        return f;
    }
    let parts: Vec<String> = [&a.s3, &a.azure]
        .into_iter()
        .map(|d| match &d.fit {
            Fit::Fits => {
                format!("an {} HCPEtcdBackup will use {} ({})", d.storage.as_str(), d.mode.as_str(), d.mode.describe())
            }
            Fit::Fallback(why) => format!(
                "an {} HCPEtcdBackup will use {} ({}), a silent fallback: {why}",
                d.storage.as_str(),
                d.mode.as_str(),
                d.mode.describe()
            ),
            Fit::Unfit(_) => format!("not usable for {}", d.storage.as_str()),
        })
        .collect();
    f.warn(&MODE, "data", format!("etcd-backup credentials ({}): {}", a.s3.key_list(), parts.join("; ")));
    f
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c", "namespace": "hypershift",
            "labels": {LABEL: "true"}}, "stringData": data})
    }

    #[test]
    fn modes_denials_and_ratcheting() {
        let sts = secret(json!({"credentials": "arn:aws:iam::123456789012:role/r"}));
        let f = check(&sts, None);
        assert!(f.errors.is_empty());
        assert!(f.warnings[0].contains("an S3 HCPEtcdBackup will use aws-sts"), "{:?}", f.warnings);
        assert!(f.warnings[0].contains("not usable for AzureBlob"), "{:?}", f.warnings);
        let bad = secret(json!({"credentials": "hello"}));
        let f = check(&bad, None);
        assert_eq!(f.errors.len(), 1);
        assert!(!f.errors[0].to_string().contains("hello"));
        assert!(check(&bad, Some(&bad)).errors.is_empty(), "unchanged data is not judged again");
        let mut unlabelled = bad.clone();
        unlabelled["metadata"]["labels"] = json!({});
        assert_eq!(check(&unlabelled, None), Findings::default());
        assert_eq!(usable(&unlabelled), None);
        assert_eq!(usable(&bad), Some(false));
        assert_eq!(usable(&sts), Some(true));
        let fallback =
            secret(json!({"cloud": "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=k", "credentials": "{\"client_id\":\"c\"}"}));
        let f = check(&fallback, None);
        assert!(f.warnings[0].contains("silent fallback"), "{:?}", f.warnings);
    }
}
