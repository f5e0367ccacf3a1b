//! The AWS general-purpose bucket naming rules upstream's regex misses.

use serde_json::Value;

use super::{changed_str, Findings, RuleInfo, Severity};
use crate::schema::{go_quote, FieldError};

pub const BUCKET_NAMING: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-s3-bucket-naming",
    objects: "HCPEtcdBackup",
    field: "spec.storage.s3.bucket",
    severity: Severity::Deny,
    summary: "AWS bucket naming rules: not an IPv4 address; no `xn--`, `sthree-`, `amzn-s3-demo-` prefix; no `-s3alias`, `--ol-s3`, `.mrap`, `--x-s3`, `--table-s3` suffix; no `.-` or `-.`",
};

const RESERVED_PREFIXES: &[&str] = &["xn--", "sthree-", "amzn-s3-demo-"];
const RESERVED_SUFFIXES: &[&str] = &["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];

fn is_ipv4(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4 && parts.iter().all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Every naming problem of `bucket`, as sentences.
pub fn problems(bucket: &str) -> Vec<String> {
    let mut out = Vec::new();
    if is_ipv4(bucket) {
        out.push("must not be formatted as an IP address".to_string());
    }
    for p in RESERVED_PREFIXES {
        if bucket.starts_with(p) {
            out.push(format!("must not start with the reserved prefix {p:?}"));
        }
    }
    for s in RESERVED_SUFFIXES {
        if bucket.ends_with(s) {
            out.push(format!("must not end with the reserved suffix {s:?}"));
        }
    }
    if bucket.contains(".-") || bucket.contains("-.") {
        out.push("must not have a period next to a hyphen (\".-\" or \"-.\")".to_string());
    }
    out
}

pub fn check(obj: &Value, old: Option<&Value>, f: &mut Findings) {
    let Some(bucket) = changed_str(obj, old, "/spec/storage/s3/bucket") else {
        return;
    };
    for p in problems(bucket) {
        f.deny(
            &BUCKET_NAMING,
            FieldError::invalid(
                "spec.storage.s3.bucket",
                go_quote(bucket),
                format!("{p}: S3 rejects this bucket name (see the AWS general purpose bucket naming rules)"),
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::problems;

    #[test]
    fn aws_rules() {
        for ok in ["my-bucket", "a.b.c", "xn-a", "bucket-s3", "1.2.3", "192.168.5.4a"] {
            assert!(problems(ok).is_empty(), "{ok}");
        }
        for bad in [
            "192.168.5.4",
            "xn--abc",
            "sthree-x",
            "amzn-s3-demo-x",
            "x-s3alias",
            "x--ol-s3",
            "x.mrap",
            "x--x-s3",
            "a.-b",
            "a-.b",
            "t--table-s3",
        ] {
            assert_eq!(problems(bad).len(), 1, "{bad}");
        }
    }
}
