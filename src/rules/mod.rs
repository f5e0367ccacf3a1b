//! Rules beyond upstream: what CEL cannot express (URL parsing, the clock,
//! cross-field cloud facts) or what upstream lets through only to fail at run
//! time. Each rule has a stable id, listed in [`BEYOND_RULES`] and in the
//! README's generated table.
//!
//! Rules are ratcheted like the apiserver's schema: on UPDATE, a field whose
//! value did not change is not judged again. Without that, a HostedCluster
//! created with a presigned URL could never be updated again once the URL
//! expired.

mod backup;
mod bucket;
pub mod credentials;
mod kms;
pub mod preflight;
mod restore_url;
pub mod secret;

/// The backup Job's verify step (its dial is read by the mutation).
pub use backup::VERIFIED as BACKUP_VERIFIED;
/// The rules about a restore URL's expiry (the clock, not the object).
pub use restore_url::{sha256_fragment as restore_url_sha256_fragment, INIT_URL_EXPIRY, URL_EXPIRED, URL_EXPIRING};

use crate::json_at::At;
use serde_json::Value;

pub use crate::finding::Severity;
use crate::{finding::Warning, schema::FieldError, settings::Settings};

/// Catalog entry of a project rule.
#[derive(Clone, Copy, Debug)]
pub struct RuleInfo {
    pub id: &'static str,
    /// The kinds the rule applies to.
    pub objects: &'static str,
    pub field: &'static str,
    pub severity: Severity,
    /// What the rule accepts, in one sentence.
    pub summary: &'static str,
}

/// Every rule beyond upstream, in README order.
pub const BEYOND_RULES: &[RuleInfo] = &[
    backup::NAME_LENGTH,
    backup::KEY_PREFIX_LENGTH,
    backup::KEY_PREFIX_SEGMENTS,
    kms::KMS_REGION,
    kms::KMS_PARTITION,
    bucket::BUCKET_NAMING,
    backup::SOVEREIGN_KEY_URL,
    restore_url::URL_FORMAT,
    restore_url::URL_S3_SCHEME,
    restore_url::URL_EXPIRED,
    restore_url::URL_EXPIRING,
    restore_url::INIT_URL_EXPIRY,
    preflight::UNAVAILABLE,
    preflight::HCP_EXISTS,
    preflight::IN_PROGRESS,
    preflight::PENDING,
    preflight::SECRET_EXISTS,
    preflight::SECRET_FORMAT,
    preflight::SECRET_FALLBACK,
    preflight::ETCD_READY,
    secret::FORMAT,
    secret::MODE,
    backup::VERIFIED,
];

/// What the rules found: denials and warnings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Findings {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<Warning>,
    /// The credentials Secret the rules judged, when they read one.
    pub credentials: Option<CredentialsSeen>,
}

/// A credentials Secret the rules judged: where it is and whether the
/// controller can use it (never a value). A Secret the preflight looked for
/// and did not find is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsSeen {
    pub namespace: String,
    pub name: String,
    pub usable: bool,
}

impl Findings {
    fn deny(&mut self, rule: &RuleInfo, err: FieldError) {
        let mut err = err.with_rule(rule.id);
        err.detail = format!("{} (rule {})", err.detail, rule.id);
        self.errors.push(err);
    }
    fn warn(&mut self, rule: &RuleInfo, field: &str, text: String) {
        self.warnings.push(Warning::of_rule(rule.id, field, text));
    }
}

/// Inputs every rule may use besides the objects: settings and the clock.
#[derive(Clone, Copy, Debug)]
pub struct RuleContext<'a> {
    pub settings: &'a Settings,
    /// The current time (Unix seconds) as the shell read it, or why it could
    /// not; never read inside the rules. Rules that need it deny on an error.
    pub now: crate::time::Now,
}

/// The string at a JSON pointer, when it changed from `old` (or on CREATE).
fn changed_str<'a>(obj: &'a Value, old: Option<&Value>, pointer: &str) -> Option<&'a str> {
    let v = obj.at(pointer)?;
    if old.and_then(|o| o.at(pointer)) == Some(v) {
        return None;
    }
    v.as_str()
}

/// Rules for an HCPEtcdBackup object (its spec and metadata; status when `status` is set).
pub fn check_hcpetcdbackup(obj: &Value, old: Option<&Value>, ctx: &RuleContext<'_>) -> Findings {
    let mut f = Findings::default();
    backup::check(obj, old, ctx, &mut f);
    bucket::check(obj, old, &mut f);
    kms::check_backup(obj, old, &mut f);
    f
}

/// Rules for a HostedCluster or HostedControlPlane object.
pub fn check_hosted(obj: &Value, old: Option<&Value>, ctx: &RuleContext<'_>) -> Findings {
    let mut f = Findings::default();
    restore_url::check(obj, old, ctx, &mut f);
    kms::check_hosted(obj, old, &mut f);
    f
}

/// The HCPEtcdBackup preflight (CREATE only): what the HyperShift Operator
/// checks at run time, from the objects `lookup` provides.
pub fn check_backup_preflight(
    obj: &Value,
    namespace: &str,
    lookup: Option<&dyn crate::lookup::Lookup>,
    settings: &Settings,
) -> Findings {
    preflight::check(obj, namespace, lookup, settings)
}

/// The warning for etcd-init injected with `url` at `now`, when the
/// presigned URL has expired or expires within the download's time bound.
pub fn restore_url_injection_warning(url: &str, now: &crate::time::Now, settings: &Settings) -> Option<Warning> {
    restore_url::injection_expiry_warning(url, now, settings)
}

/// The credentials Secret `namespace/name` a CREATE/UPDATE writes, as the
/// rules judge it (`None`: not labelled, not judged).
pub fn backup_secret_seen(obj: &Value, namespace: &str, name: &str) -> Option<CredentialsSeen> {
    let usable = secret::usable(obj)?;
    Some(CredentialsSeen { namespace: namespace.to_string(), name: name.to_string(), usable })
}

/// The rules for an etcd-backup credentials Secret (CREATE/UPDATE).
pub fn check_backup_secret(obj: &Value, old: Option<&Value>) -> Findings {
    secret::check(obj, old)
}

/// The severity of every id a finding can carry (project rules, upstream's
/// CEL rules, which deny, and the pseudo ids), `None` for an unknown id:
/// what `enforcement.rules` accepts.
pub fn severity_of(id: &str) -> Option<Severity> {
    if let Some(rule) = BEYOND_RULES.iter().find(|r| r.id == id) {
        return Some(rule.severity);
    }
    let upstream = crate::api::upstream_rules::is_upstream(id);
    (upstream || crate::enforcement::PSEUDO_RULES.contains(&id)).then_some(Severity::Deny)
}
