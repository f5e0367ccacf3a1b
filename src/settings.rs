//! Every knob of the decision core, in one serde struct shared by the server
//! (`--config`), the CLI (`--config`) and the Wasm policy (Kubewarden
//! `settings`). Unknown keys are rejected so a typo cannot silently fall back
//! to a default.

use serde::{Deserialize, Serialize};

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
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allow_s3_restore_url: false,
            restore_url_expiry_warning_seconds: 900,
        }
    }
}

/// Upper bound for the expiry warning window: a week (longer is a typo).
pub const MAX_EXPIRY_WARNING_SECONDS: u64 = 7 * 24 * 3600;

impl Settings {
    /// Checks the values; returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if self.restore_url_expiry_warning_seconds > MAX_EXPIRY_WARNING_SECONDS {
            problems.push(format!(
                "restoreUrlExpiryWarningSeconds: {} is more than the maximum of {MAX_EXPIRY_WARNING_SECONDS} (7 days)",
                self.restore_url_expiry_warning_seconds
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Parses settings from JSON, with readable errors for unknown keys and bad values.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let s: Settings =
            serde_json::from_value(v.clone()).map_err(|e| format!("invalid settings: {e}"))?;
        s.validate()
            .map_err(|p| format!("invalid settings: {}", p.join("; ")))?;
        Ok(s)
    }
}
