//! HCPEtcdBackup naming and key-layout rules that upstream only finds out
//! about when the backup Job runs.

use serde_json::Value;

use super::{changed_str, Findings, RuleContext, RuleInfo, Severity};
use crate::schema::{go_quote, FieldError};

/// Label values are at most 63 characters.
pub const MAX_NAME: usize = 63;
/// 1024 (S3 key and Azure blob-name limit) − len("/") − 10 digits − len(".db").
pub const MAX_KEY_PREFIX: usize = 1024 - 1 - 10 - 3;

pub const NAME_LENGTH: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-name-length",
    objects: "HCPEtcdBackup",
    field: "metadata.name",
    severity: Severity::Deny,
    summary: "at most 63 characters: the name becomes the `hypershift.openshift.io/backup-name` label value of the backup Job",
};

/// The verify step the webhook adds to HyperShift's backup Job
/// (`mutate::backup_job`, `backup-verify.sh`): judged when the Job runs, not
/// at admission, so its dial is read by the mutation. Unnamed it reports
/// (warn first); `deny` fails the Job before the upload.
pub const VERIFIED: RuleInfo = RuleInfo {
    id: "backup-verified",
    objects: "etcd backup Job",
    field: "the snapshot file",
    severity: Severity::Deny,
    summary: "the snapshot passes its sha256, a trial restore (with the restore's bump) and, on etcd >= 3.6, the live cluster's KV hash at its revision; warn unless set to deny (then a failed check fails the Job before the upload), off: no step",
};

pub const KEY_PREFIX_LENGTH: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-key-prefix-length",
    objects: "HCPEtcdBackup",
    field: "spec.storage.{s3,azureBlob}.keyPrefix",
    severity: Severity::Deny,
    summary: "at most 1010 bytes (one trailing `/` not counted): `<keyPrefix>/<10-digit unix time>.db` must fit the 1024-byte S3 key / Azure blob-name limit",
};

pub const KEY_PREFIX_SEGMENTS: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-key-prefix-segments",
    objects: "HCPEtcdBackup",
    field: "spec.storage.{s3,azureBlob}.keyPrefix",
    severity: Severity::Warn,
    summary:
        "warns on a leading `/`, an empty segment (`//`) or a `.`/`..` segment: the object lands at a surprising key",
};

pub const SOVEREIGN_KEY_URL: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-sovereign-key-url",
    objects: "HCPEtcdBackup",
    field: "spec.storage.azureBlob.encryptionKeyURL",
    severity: Severity::Warn,
    summary: "warns on a sovereign-cloud Key Vault / Managed HSM URL: the upstream uploader only talks to the public blob endpoint (blob.core.windows.net)",
};

/// Key Vault / Managed HSM DNS suffixes of the sovereign clouds upstream accepts
/// (US Gov, China, Germany, Bleu).
const SOVEREIGN_SUFFIXES: &[&str] = &[
    ".vault.usgovcloudapi.net",
    ".vault.azure.cn",
    ".vault.microsoftazure.de",
    ".vault.sovcloud-api.fr",
    ".managedhsm.usgovcloudapi.net",
    ".managedhsm.azure.cn",
    ".managedhsm.microsoftazure.de",
    ".managedhsm.sovcloud-api.fr",
];

pub fn check(obj: &Value, old: Option<&Value>, _ctx: &RuleContext<'_>, f: &mut Findings) {
    if let Some(name) = changed_str(obj, old, "/metadata/name") {
        let n = name.chars().count();
        if n > MAX_NAME {
            f.deny(
                &NAME_LENGTH,
                FieldError::invalid(
                    "metadata.name",
                    go_quote(name),
                    format!(
                        "must be no more than {MAX_NAME} characters (it is {n}): the name becomes the value of the hypershift.openshift.io/backup-name label on the backup Job"
                    ),
                ),
            );
        }
    }
    for block in ["s3", "azureBlob"] {
        let pointer = format!("/spec/storage/{block}/keyPrefix");
        let Some(prefix) = changed_str(obj, old, &pointer) else {
            continue;
        };
        let field = format!("spec.storage.{block}.keyPrefix");
        let effective = prefix.strip_suffix('/').unwrap_or(prefix);
        if effective.len() > MAX_KEY_PREFIX {
            let limit = if block == "s3" { "S3 object key" } else { "Azure blob name" };
            f.deny(
                &KEY_PREFIX_LENGTH,
                FieldError::too_long(&field, MAX_KEY_PREFIX as u64).with_detail(format!(
                    "may not be more than {MAX_KEY_PREFIX} bytes (it is {}): the uploaded name <keyPrefix>/<10-digit unix time>.db must fit the 1024-byte {limit} limit",
                    effective.len()
                )),
            );
        }
        let segments: Vec<&str> = effective.split('/').collect();
        if prefix.starts_with('/') {
            f.warn(
                &KEY_PREFIX_SEGMENTS,
                &field,
                format!("{} starts with \"/\": the object key will begin with an empty segment", go_quote(prefix)),
            );
        } else if prefix.contains("//") {
            f.warn(
                &KEY_PREFIX_SEGMENTS,
                &field,
                format!("{} contains \"//\": the object key will contain an empty segment", go_quote(prefix)),
            );
        }
        if segments.iter().any(|s| *s == "." || *s == "..") {
            f.warn(
                &KEY_PREFIX_SEGMENTS,
                &field,
                format!("{} has a \".\" or \"..\" segment: S3 and Azure store it literally, and tools that normalise paths will look elsewhere", go_quote(prefix)),
            );
        }
    }
    if let Some(url) = changed_str(obj, old, "/spec/storage/azureBlob/encryptionKeyURL") {
        let host = url.strip_prefix("https://").and_then(|r| r.split('/').next()).unwrap_or("");
        let sovereign = SOVEREIGN_SUFFIXES.iter().any(|s| host.ends_with(s));
        if sovereign {
            f.warn(
                &SOVEREIGN_KEY_URL,
                "spec.storage.azureBlob.encryptionKeyURL",
                format!("key host {host:?} is in a sovereign cloud, but the backup uploader writes to the public-cloud endpoint <account>.blob.core.windows.net; the upload is expected to fail"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::settings::Settings;

    fn run(obj: Value, old: Option<Value>) -> Findings {
        let s = Settings::default();
        let mut f = Findings::default();
        check(&obj, old.as_ref(), &RuleContext { settings: &s, now: Ok(0) }, &mut f);
        f
    }

    #[test]
    fn name_length_is_ratcheted() {
        let long = "a".repeat(64);
        let obj = json!({"metadata":{"name": long}});
        assert_eq!(run(obj.clone(), None).errors.len(), 1);
        assert!(run(obj.clone(), Some(obj)).errors.is_empty());
        assert!(run(json!({"metadata":{"name": "a".repeat(63)}}), None).errors.is_empty());
    }

    #[test]
    fn key_prefix_limits_and_warnings() {
        let ok = "p".repeat(1010);
        assert!(run(json!({"spec":{"storage":{"s3":{"keyPrefix": format!("{ok}/")}}}}), None).errors.is_empty());
        let f = run(json!({"spec":{"storage":{"azureBlob":{"keyPrefix": format!("{ok}x")}}}}), None);
        assert_eq!(f.errors.len(), 1);
        assert!(f.errors[0].to_string().contains("Azure blob name"), "{}", f.errors[0]);
        let f = run(json!({"spec":{"storage":{"s3":{"keyPrefix": "/a//./b"}}}}), None);
        assert_eq!(f.warnings.len(), 2, "{:?}", f.warnings);
    }
}
