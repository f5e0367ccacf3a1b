//! `restoreSnapshotURL` (HostedCluster / HostedControlPlane): what the etcd-init
//! container will actually be able to download. Upstream only checks the
//! prefix `^(https|s3)://`, so `https://x y`, control characters, `s3://`
//! (curl cannot fetch it) and an already-expired presigned URL all pass
//! admission and fail inside the pod.
//!
//! Presigned URLs are bearer credentials: every message here shows the URL
//! redacted to scheme://host/path.

use serde_json::Value;

use super::{Findings, RuleContext, RuleInfo, Severity};
use crate::{
    schema::{go_quote, redact_url, FieldError},
    time::{format_rfc3339, parse_amz_date, parse_rfc3339},
};

pub const URL_FORMAT: RuleInfo = RuleInfo {
    id: "restore-url-format",
    objects: "HostedCluster, HostedControlPlane",
    field: "spec.etcd.managed.storage.restoreSnapshotURL[0]",
    severity: Severity::Deny,
    summary: "a well-formed absolute URL with a host; no user information, whitespace or control characters",
};

pub const URL_S3_SCHEME: RuleInfo = RuleInfo {
    id: "restore-url-s3-scheme",
    objects: "HostedCluster, HostedControlPlane",
    field: "spec.etcd.managed.storage.restoreSnapshotURL[0]",
    severity: Severity::Deny,
    summary: "`https://` only: the etcd-init container downloads with curl, which cannot fetch `s3://` (setting `allowS3RestoreURL` turns this into a warning)",
};

pub const URL_EXPIRED: RuleInfo = RuleInfo {
    id: "restore-url-expired",
    objects: "HostedCluster, HostedControlPlane",
    field: "spec.etcd.managed.storage.restoreSnapshotURL[0]",
    severity: Severity::Deny,
    summary: "a presigned URL (SigV4 `X-Amz-Date`+`X-Amz-Expires`, SigV2 `Expires`, GCS `X-Goog-Date`+`X-Goog-Expires`, Azure SAS `se`) has not expired",
};

pub const URL_EXPIRING: RuleInfo = RuleInfo {
    id: "restore-url-expiring",
    objects: "HostedCluster, HostedControlPlane",
    field: "spec.etcd.managed.storage.restoreSnapshotURL[0]",
    severity: Severity::Warn,
    summary: "warns when a presigned URL expires within `restoreUrlExpiryWarningSeconds` (default 15 minutes)",
};

/// When a presigned URL stops working (Unix seconds), if it says.
pub fn parse_expiry(url: &url::Url) -> Option<i64> {
    let mut amz_date = None;
    let mut amz_expires = None;
    let mut goog_date = None;
    let mut goog_expires = None;
    let mut v2_expires = None;
    let mut sas_expiry = None;
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "X-Amz-Date" => amz_date = parse_amz_date(&v),
            "X-Amz-Expires" => amz_expires = v.parse::<i64>().ok(),
            "X-Goog-Date" => goog_date = parse_amz_date(&v),
            "X-Goog-Expires" => goog_expires = v.parse::<i64>().ok(),
            "Expires" => v2_expires = v.parse::<i64>().ok(),
            "se" => sas_expiry = parse_rfc3339(&v),
            _ => {}
        }
    }
    [
        amz_date.zip(amz_expires).map(|(d, e)| d.saturating_add(e)),
        goog_date.zip(goog_expires).map(|(d, e)| d.saturating_add(e)),
        sas_expiry,
        v2_expires,
    ]
    .into_iter()
    .flatten()
    .min()
}

fn format_problem(raw: &str) -> Option<String> {
    if let Some(c) = raw.chars().find(|c| c.is_whitespace() || c.is_control()) {
        let what = if c.is_control() { "a control character" } else { "whitespace" };
        return Some(format!("contains {what} ({c:?}); percent-encode it"));
    }
    // The WHATWG parser turns "https:///x" into host "x"; curl does not.
    let authority = raw.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if authority.is_empty() {
        return Some("has no host".to_string());
    }
    let url = match url::Url::parse(raw) {
        Ok(u) => u,
        Err(e) => return Some(format!("is not a valid absolute URL: {e}")),
    };
    if url.host_str().is_none_or(str::is_empty) {
        return Some("has no host".to_string());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Some("carries user information (user:password@); use a presigned URL instead".to_string());
    }
    None
}

pub fn check(obj: &Value, old: Option<&Value>, ctx: &RuleContext<'_>, f: &mut Findings) {
    const POINTER: &str = "/spec/etcd/managed/storage/restoreSnapshotURL";
    let Some(urls) = obj.pointer(POINTER).and_then(Value::as_array) else {
        return;
    };
    let old_urls = old.and_then(|o| o.pointer(POINTER)).and_then(Value::as_array);
    for (i, item) in urls.iter().enumerate() {
        let Some(raw) = item.as_str() else { continue };
        if old_urls.is_some_and(|o| o.contains(item)) {
            continue; // unchanged: ratcheted
        }
        let field = format!("spec.etcd.managed.storage.restoreSnapshotURL[{i}]");
        let shown = go_quote(&redact_url(raw));
        let scheme = raw.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("https") | Some("s3")) {
            continue; // upstream's scheme rule already denies it
        }
        if let Some(problem) = format_problem(raw) {
            f.deny(&URL_FORMAT, FieldError::invalid(&field, shown.clone(), format!("{problem}: must be an absolute https URL with a host, without user information, whitespace or control characters")));
            continue;
        }
        if scheme == Some("s3") {
            let text = "s3:// cannot be downloaded by the etcd-init container (it uses curl); give an https presigned URL (the OADP plugin presigns s3:// for you)";
            if ctx.settings.allow_s3_restore_url {
                f.warn(&URL_S3_SCHEME, &field, text.to_string());
            } else {
                f.deny(&URL_S3_SCHEME, FieldError::invalid(&field, shown.clone(), text));
            }
            continue;
        }
        let Some(expiry) = url::Url::parse(raw).ok().as_ref().and_then(parse_expiry) else {
            continue;
        };
        if expiry <= ctx.now {
            f.deny(
                &URL_EXPIRED,
                FieldError::invalid(
                    &field,
                    shown,
                    format!(
                        "the presigned URL expired at {} (now {}); etcd-init would fail to download the snapshot: presign the snapshot again",
                        format_rfc3339(expiry),
                        format_rfc3339(ctx.now)
                    ),
                ),
            );
        } else if (expiry - ctx.now) as u64 <= ctx.settings.restore_url_expiry_warning_seconds {
            f.warn(
                &URL_EXPIRING,
                &field,
                format!(
                    "the presigned URL expires at {} ({} s from now); the restore fails if etcd-init has not downloaded it by then",
                    format_rfc3339(expiry),
                    expiry - ctx.now
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::settings::Settings;

    fn run(url: &str, now: &str, settings: Settings) -> Findings {
        let obj = json!({"spec":{"etcd":{"managed":{"storage":{"restoreSnapshotURL":[url]}}}}});
        let mut f = Findings::default();
        let now = parse_rfc3339(now).unwrap_or(0);
        check(&obj, None, &RuleContext { settings: &settings, now }, &mut f);
        f
    }

    const SIGV4: &str = "https://b.s3.us-east-1.amazonaws.com/k/1.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T150000Z&X-Amz-Expires=3600&X-Amz-Signature=deadbeef";

    #[test]
    fn expiry_windows() {
        let d = Settings::default;
        assert!(run(SIGV4, "2026-11-29T15:10:00Z", d()).errors.is_empty());
        assert!(run(SIGV4, "2026-11-29T15:10:00Z", d()).warnings.is_empty());
        let f = run(SIGV4, "2026-11-29T15:50:00Z", d());
        assert_eq!((f.errors.len(), f.warnings.len()), (0, 1));
        let f = run(SIGV4, "2026-11-29T16:00:00Z", d());
        assert_eq!(f.errors.len(), 1);
        let msg = f.errors[0].to_string();
        assert!(!msg.contains("Signature") && !msg.contains("deadbeef"), "{msg}");
        let sas = "https://a.blob.core.windows.net/c/b.db?sv=2024-11-04&se=2026-11-29T15%3A00%3A00Z&sig=x";
        assert_eq!(run(sas, "2026-11-29T15:00:01Z", d()).errors.len(), 1);
        assert!(run(sas, "2026-11-29T14:00:00Z", d()).errors.is_empty());
    }

    #[test]
    fn format_and_s3() {
        let d = Settings::default;
        for bad in ["https://x y/z", "https://user:pw@host/x", "https:///path", "https://h/\u{7}"] {
            assert_eq!(run(bad, "2026-01-01T00:00:00Z", d()).errors.len(), 1, "{bad:?}");
        }
        assert_eq!(run("s3://bucket/key", "2026-01-01T00:00:00Z", d()).errors.len(), 1);
        let allow = Settings { allow_s3_restore_url: true, ..Settings::default() };
        let f = run("s3://bucket/key", "2026-01-01T00:00:00Z", allow);
        assert_eq!((f.errors.len(), f.warnings.len()), (0, 1));
        assert!(run("http://h/x", "2026-01-01T00:00:00Z", d()).errors.is_empty(), "left to the CEL rule");
    }
}
