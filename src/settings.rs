//! Every knob of the decision core, in one serde struct shared by the server
//! (`--config`), the CLI (`--config`) and the Wasm policy (Kubewarden
//! `settings`). Unknown keys are rejected so a typo cannot silently fall back
//! to a default.

use serde::{Deserialize, Serialize};

use crate::schema::KubernetesVersion;

/// Settings of the decision core. All fields have safe defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// Accept `s3://` in `restoreSnapshotURL`. Upstream's schema allows it, but
    /// the etcd-init container downloads with curl, which cannot fetch `s3://`:
    /// the restore would fail at run time. Default: false (denied).
    #[serde(rename = "allowS3RestoreURL")]
    pub allow_s3_restore_url: bool,
    /// A presigned restore URL that expires within this many seconds gets a
    /// warning. Default: 900 (15 minutes).
    pub restore_url_expiry_warning_seconds: u64,
    /// Image of the injected `etcd-init` container. Default: the etcd
    /// container's own image (it must carry `sh`, `curl` and `etcdutl` or
    /// `etcdctl`; the OpenShift etcd image does, upstream's distroless one does not).
    pub etcd_init_image: Option<String>,
    /// Largest snapshot etcd-init downloads, bytes. Default 16 GiB.
    pub restore_max_bytes: u64,
    /// Longest a snapshot download may take, seconds. Default 1800.
    pub restore_max_time_seconds: u64,
    /// etcd-init CPU request. Default `100m`.
    pub restore_cpu_request: String,
    /// etcd-init memory request. Default `512Mi`.
    pub restore_memory_request: String,
    /// etcd-init memory limit: a restore needs about 1.3 × the database size;
    /// the default `10Gi` covers etcd's 8 GiB quota.
    pub restore_memory_limit: String,
    /// Restore even when the image's etcdutl/etcdctl lacks `snapshot restore
    /// --bump-revision/--mark-compacted` (etcd < 3.5.10 / 3.4.27). Risk:
    /// revisions go back to the snapshot's, so guest-cluster watches and
    /// informers that saw later revisions keep stale caches until they relist.
    /// Default: false (etcd-init fails with a clear message instead).
    pub allow_restore_without_revision_bump: bool,
    /// How far a restore moves revisions past the snapshot's
    /// (`--bump-revision`): more than the writes made between the snapshot and
    /// the last revision any client saw. Default 10^10 (about 10 weeks at 1500
    /// writes per second); revisions are int64, a larger bump costs nothing.
    pub restore_revision_bump: u64,
    /// How long one etcd-init run waits for the other members to answer as
    /// this restore's etcd-init (and, after restoring, to restore too),
    /// seconds. Default 600; the kubelet then retries. With more than one
    /// member keep it at 300 or more: the kubelet's back-off between retries
    /// grows to 5 minutes, and retrying members must still overlap.
    pub restore_wait_seconds: u64,
    /// HCPEtcdBackup preflight: on CREATE, look up what the HyperShift
    /// Operator's controller will check (the HostedControlPlane, other
    /// backups, the credentials Secret, the etcd StatefulSet). `false` turns
    /// the whole feature off: no lookups, no watches, no Secret reads.
    /// Default: true.
    pub backup_preflight: bool,
    /// The HyperShift Operator namespace, where the controller reads the
    /// credentials Secret. Default: `hypershift`.
    pub operator_namespace: String,
    /// The Kubernetes minor version (`"1.37"`, `"1.36"`, … down to `"1.31"`)
    /// whose apiserver messages the decision reproduces: the CRD's schema and
    /// CEL errors are printed differently by different versions, and a user
    /// searches for what their cluster prints. Default: the newest version CI
    /// runs the real apiserver of (1.37); a newer minor is refused.
    #[serde(with = "version_text")]
    pub kubernetes_version: KubernetesVersion,
    /// What a finding does (deny, warn, audit, off) and who is exempt; see
    /// [`crate::enforcement`]. Default: every finding denies, nobody is exempt.
    pub enforcement: crate::enforcement::Enforcement,
}

/// `kubernetesVersion` as text (`"1.37"`).
mod version_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::schema::KubernetesVersion;

    pub fn serialize<S: Serializer>(v: &KubernetesVersion, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<KubernetesVersion, D::Error> {
        let text = String::deserialize(d)?;
        KubernetesVersion::parse(&text).map_err(|e| serde::de::Error::custom(format!("kubernetesVersion: {e}")))
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allow_s3_restore_url: false,
            restore_url_expiry_warning_seconds: 900,
            etcd_init_image: None,
            restore_max_bytes: 16 * 1024 * 1024 * 1024,
            restore_max_time_seconds: 1800,
            restore_cpu_request: "100m".to_string(),
            restore_memory_request: "512Mi".to_string(),
            restore_memory_limit: "10Gi".to_string(),
            allow_restore_without_revision_bump: false,
            restore_revision_bump: DEFAULT_REVISION_BUMP,
            restore_wait_seconds: 600,
            backup_preflight: true,
            operator_namespace: "hypershift".to_string(),
            kubernetes_version: KubernetesVersion::default(),
            enforcement: crate::enforcement::Enforcement::default(),
        }
    }
}

fn is_quantity(s: &str) -> bool {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &s[digits.len()..];
    !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"].contains(&suffix)
}

/// The default revision bump of a restore.
pub const DEFAULT_REVISION_BUMP: u64 = 10_000_000_000;
/// Bounds of the revision bump: below 10^6 covers minutes of writes on a busy
/// cluster; above 10^15 leaves int64 revisions too little room.
pub const REVISION_BUMP_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=1_000_000_000_000_000;
/// Bounds of the etcd-init wait, seconds.
pub const RESTORE_WAIT_RANGE: std::ops::RangeInclusive<u64> = 10..=3600;

/// Upper bound for the expiry warning window: a week (longer is a typo).
pub const MAX_EXPIRY_WARNING_SECONDS: u64 = 7 * 24 * 3600;

/// A serde error with the key it is about: serde's type errors
/// (`invalid type: string "15m", expected u64`) do not say which key; each
/// key is tried on its own (every field has a default) to find it.
fn name_the_key(v: &serde_json::Value, e: serde_json::Error) -> String {
    let Some(map) = v.as_object() else { return format!("{e} (settings must be a mapping of keys to values)") };
    for (key, value) in map {
        let one = serde_json::Value::Object(std::iter::once((key.clone(), value.clone())).collect());
        if let Err(single) = serde_json::from_value::<Settings>(one) {
            if single.to_string().contains(&format!("`{key}`")) {
                return single.to_string(); // the unknown-key error names it already
            }
            return format!("{key}: {single}");
        }
    }
    e.to_string()
}

impl Settings {
    /// Every problem of the values, except the enforcement block's rule ids:
    /// those are checked against the rule catalog, which sits above the
    /// rules that read these settings (`Settings::validate` and
    /// `Settings::from_json` are in `catalog.rs`, so no import goes round).
    pub(crate) fn value_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.restore_url_expiry_warning_seconds > MAX_EXPIRY_WARNING_SECONDS {
            problems.push(format!(
                "restoreUrlExpiryWarningSeconds: {} is more than the maximum of {MAX_EXPIRY_WARNING_SECONDS} (7 days)",
                self.restore_url_expiry_warning_seconds
            ));
        }
        if self.etcd_init_image.as_deref().is_some_and(|i| i.trim().is_empty() || i.chars().any(char::is_whitespace)) {
            problems.push("etcdInitImage: must be an image reference without whitespace".to_string());
        }
        if self.restore_max_bytes == 0 {
            problems.push("restoreMaxBytes: must be positive".to_string());
        }
        if !REVISION_BUMP_RANGE.contains(&self.restore_revision_bump) {
            problems.push(format!(
                "restoreRevisionBump: {} is outside {}..={}",
                self.restore_revision_bump,
                REVISION_BUMP_RANGE.start(),
                REVISION_BUMP_RANGE.end()
            ));
        }
        if !RESTORE_WAIT_RANGE.contains(&self.restore_wait_seconds) {
            problems.push(format!(
                "restoreWaitSeconds: {} is outside {}..={}",
                self.restore_wait_seconds,
                RESTORE_WAIT_RANGE.start(),
                RESTORE_WAIT_RANGE.end()
            ));
        }
        if self.restore_max_time_seconds == 0 {
            problems.push("restoreMaxTimeSeconds: must be positive".to_string());
        }
        for (key, v) in [
            ("restoreCpuRequest", &self.restore_cpu_request),
            ("restoreMemoryRequest", &self.restore_memory_request),
            ("restoreMemoryLimit", &self.restore_memory_limit),
        ] {
            if !is_quantity(v) {
                problems.push(format!("{key}: {v:?} is not a Kubernetes quantity (e.g. 100m, 512Mi, 10Gi)"));
            }
        }
        let ns = &self.operator_namespace;
        let dns_label = !ns.is_empty()
            && ns.len() <= 63
            && ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !ns.starts_with('-')
            && !ns.ends_with('-');
        if !dns_label {
            problems.push(format!("operatorNamespace: {ns:?} is not a namespace name (a DNS label)"));
        }
        problems
    }

    /// Parses settings from JSON without checking them, naming the key a
    /// type error is about.
    pub(crate) fn parse_json(v: &serde_json::Value) -> Result<Self, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("invalid settings: {}", name_the_key(v, e)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kubernetes_version_is_text_and_checked() {
        assert_eq!(Settings::default().kubernetes_version.to_string(), "1.37");
        let s = Settings::from_json(&json!({"kubernetesVersion": "1.34"})).expect("1.34");
        assert_eq!(s.kubernetes_version.minor(), 34);
        assert_eq!(serde_json::to_value(&s).expect("json")["kubernetesVersion"], "1.34");
        let old = Settings::from_json(&json!({"kubernetesVersion": "1.29"})).expect_err("too old");
        assert!(old.contains("kubernetesVersion") && old.contains("oldest is 1.31"), "{old}");
        // Newer than the newest tested: refused, never given an older minor's messages.
        let new = Settings::from_json(&json!({"kubernetesVersion": "1.38"})).expect_err("too new");
        assert!(new.contains("kubernetesVersion") && new.contains("newest whose messages are tested (1.37)"), "{new}");
        for tested in ["1.36", "1.37"] {
            let s = Settings::from_json(&json!({"kubernetesVersion": tested})).expect(tested);
            assert_eq!(s.kubernetes_version.to_string(), tested);
        }
        let junk = Settings::from_json(&json!({"kubernetesVersion": "latest"})).expect_err("not a version");
        assert!(junk.contains("not a Kubernetes version"), "{junk}");
        assert!(Settings::from_json(&json!({"kubernetesVersion": 35})).is_err());
    }
}
