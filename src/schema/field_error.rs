//! `FieldError`: one violation, rendered exactly like k8s.io/apimachinery's
//! `field.Error`, so offline and in-cluster messages are the same text.

use std::fmt;

use serde_json::Value;

/// The `field.ErrorType` values this crate produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    NotSupported,
    Invalid,
    TypeInvalid,
    TooLong,
    TooMany,
    Forbidden,
    Duplicate,
}

impl ErrorType {
    /// Whether apiextensions-apiserver skips the CEL rules after this schema
    /// error (`hasBlockingErr` in its custom resource strategy).
    pub fn blocks_rules(self) -> bool {
        matches!(
            self,
            ErrorType::NotSupported
                | ErrorType::Required
                | ErrorType::TooLong
                | ErrorType::TooMany
                | ErrorType::TypeInvalid
        )
    }

    /// The `StatusCause.reason` (CauseType) of this error type.
    pub fn cause_reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// One field violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path as the apiserver prints it (`spec.storage.s3.bucket`, `items[0]`).
    pub field: String,
    pub kind: ErrorType,
    /// The already-rendered value (`"GCS"`, `2`, `"object"`), where the type
    /// shows one; empty when it is omitted (`field.OmitValueType{}`: a
    /// rendered value is never empty, an empty string renders as `""`).
    pub value: String,
    /// The detail text (a rule's message, a bound).
    pub detail: String,
    /// The stable id of the project rule that produced this, if any.
    pub rule_id: Option<&'static str>,
}

impl FieldError {
    pub fn required(field: impl Into<String>) -> Self {
        Self::new(field, ErrorType::Required, String::new(), String::new())
    }
    pub fn invalid(field: impl Into<String>, value: String, detail: impl Into<String>) -> Self {
        Self::new(field, ErrorType::Invalid, value, detail)
    }
    pub fn type_invalid(field: impl Into<String>, value: String, detail: impl Into<String>) -> Self {
        Self::new(field, ErrorType::TypeInvalid, value, detail)
    }
    /// `field.NotSupported` as apiextensions builds it from an enum failure:
    /// string values as they are, any other value as its JSON text, each then
    /// quoted with Go's `strconv.Quote`.
    pub fn not_supported(field: impl Into<String>, value: String, supported: &[Value]) -> Self {
        let list: Vec<String> = supported
            .iter()
            .map(|v| match v {
                Value::String(s) => go_quote(s),
                other => go_quote(&other.to_string()),
            })
            .collect();
        Self::new(field, ErrorType::NotSupported, value, format!("supported values: {}", list.join(", ")))
    }
    /// `field.TooLong` (what `TooLongMaxLength` now is): the value is never shown.
    pub fn too_long(field: impl Into<String>, max: u64) -> Self {
        let unit = if max == 1 { "byte" } else { "bytes" };
        Self::new(field, ErrorType::TooLong, String::new(), format!("may not be more than {max} {unit}"))
    }
    /// `field.TooMany(actual, max)`, for maxItems and maxProperties alike.
    pub fn too_many(field: impl Into<String>, actual: usize, max: u64) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        Self::new(field, ErrorType::TooMany, actual.to_string(), format!("must have at most {max} {unit}"))
    }
    pub fn duplicate(field: impl Into<String>, value: String) -> Self {
        Self::new(field, ErrorType::Duplicate, value, String::new())
    }
    /// The last error of an object that has more than `max`: the rest are
    /// not reported (every one names the same kind of mistake).
    pub fn too_many_errors(max: usize) -> Self {
        Self::invalid(
            "<nil>",
            "null".to_string(),
            format!("more than {max} errors: only the first {max} are reported; correct them and validate again"),
        )
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(field, ErrorType::Forbidden, String::new(), detail)
    }

    fn new(field: impl Into<String>, kind: ErrorType, value: String, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind, value: cap_shown_value(value), detail: detail.into(), rule_id: None }
    }

    /// Replaces the detail text.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Tags the error with a project rule id.
    pub fn with_rule(mut self, id: &'static str) -> Self {
        self.rule_id = Some(id);
        self
    }

    /// The error without its field prefix (`field.Error.ErrorBody()`), which is
    /// what the apiserver puts in `status.details.causes[].message`.
    pub fn body(&self) -> String {
        let omitted = self.value.is_empty();
        match self.kind {
            ErrorType::Invalid | ErrorType::TypeInvalid if omitted => {
                if self.detail.is_empty() {
                    "Invalid value".to_string()
                } else {
                    format!("Invalid value: {}", self.detail)
                }
            }
            ErrorType::Duplicate if omitted => "Duplicate value".to_string(),
            ErrorType::Required => {
                if self.detail.is_empty() {
                    "Required value".to_string()
                } else {
                    format!("Required value: {}", self.detail)
                }
            }
            ErrorType::NotSupported => {
                format!("Unsupported value: {}: {}", self.value, self.detail)
            }
            ErrorType::Invalid | ErrorType::TypeInvalid => {
                format!("Invalid value: {}: {}", self.value, self.detail)
            }
            ErrorType::TooLong => format!("Too long: {}", self.detail),
            ErrorType::TooMany => format!("Too many: {}: {}", self.value, self.detail),
            ErrorType::Forbidden => format!("Forbidden: {}", self.detail),
            ErrorType::Duplicate => format!("Duplicate value: {}", self.value),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Bytes of a rendered value an error shows: a longer one is cut (the
/// request sent it; an answer that quoted it whole could be ten times the
/// request, `\x7f` being four bytes for one). 16 KiB is more than any value
/// within a maxLength of this schema renders to (1,024 characters, at most
/// `\U0010fffd`'s ten bytes each), which the apiserver shows whole: the cut
/// reaches only values no schema bound limits (an enum, a pattern without
/// maxLength), where the apiserver itself would echo megabytes.
pub const MAX_SHOWN_VALUE: usize = 16 * 1024;

/// `value` (as rendered: a Go-quoted string or a bare scalar) cut to
/// [`MAX_SHOWN_VALUE`] bytes: a quoted string keeps whole escapes and its
/// closing quote, followed by `...`. Linear in the value.
fn cap_shown_value(value: String) -> String {
    if value.len() <= MAX_SHOWN_VALUE {
        return value;
    }
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        let end = (0..=MAX_SHOWN_VALUE).rev().find(|&i| value.is_char_boundary(i)).unwrap_or(0);
        return format!("{}...", value.get(..end).unwrap_or_default());
    };
    // Token ends: after a plain character, or after a whole escape
    // (`\x`, `\xHH`, `\uHHHH`, `\UHHHHHHHH`).
    let mut end = 0;
    let mut chars = inner.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let mut next = i + c.len_utf8();
        if c == '\\' {
            let extra = match chars.next() {
                Some((_, 'x')) => 2,
                Some((_, 'u')) => 4,
                Some((_, 'U')) => 8,
                _ => 0,
            };
            for _ in 0..extra {
                chars.next();
            }
            next = chars.peek().map_or(inner.len(), |(j, _)| *j);
        }
        if next > MAX_SHOWN_VALUE - 2 {
            break;
        }
        end = next;
    }
    format!("\"{}\"...", inner.get(..end).unwrap_or_default())
}

/// Renders a JSON value the way `field.Error` prints values: strings quoted
/// Go-style, numbers and booleans bare, `null` for null, and the type name for
/// objects and arrays. Strings that look like URLs are redacted first: a
/// presigned URL is a bearer credential and must never be echoed.
pub fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_quote(&redact_url(s)),
        Value::Array(_) => "\"array\"".to_string(),
        Value::Object(_) => "\"object\"".to_string(),
    }
}

/// Quotes like Go's `%q` (`strconv.Quote`): double quotes, backslash
/// escapes, `\x..`/`\u....` for other control characters.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Redacts a URL to `scheme://host/path`: the query (SAS / SigV4 signature),
/// the fragment and any userinfo are dropped. Text that is not a URL with a
/// scheme is returned unchanged.
pub fn redact_url(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    let scheme = &s[..scheme_end];
    if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
        return s.to_string();
    }
    let rest = &s[scheme_end + 3..];
    let cut = rest.find(['?', '#']).unwrap_or(rest.len());
    let mut kept = &rest[..cut];
    // Drop userinfo (user:password@) from the authority.
    let authority_end = kept.find('/').unwrap_or(kept.len());
    if let Some(at) = kept[..authority_end].rfind('@') {
        kept = &kept[at + 1..];
    }
    let mut out = format!("{scheme}://{kept}");
    if cut < rest.len() {
        out.push_str("?<redacted>");
    }
    out
}

/// Every URL inside `text` (an error message that may quote values) as
/// [`redact_url`] gives it: a presigned URL's query never reaches a message.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c))).map_or(0, |i| i + 1);
        let end =
            rest[at..].find(|c: char| c.is_whitespace() || "\"'\\,)]}".contains(c)).map_or(rest.len(), |e| at + e);
        out.push_str(&rest[..start]);
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_apiserver() {
        assert_eq!(
            FieldError::required("spec.storage.s3.bucket").to_string(),
            "spec.storage.s3.bucket: Required value"
        );
        let e = FieldError::not_supported(
            "spec.storage.storageType",
            render_value(&Value::from("GCS")),
            &[Value::from("S3"), Value::from("AzureBlob")],
        );
        assert_eq!(
            e.to_string(),
            r#"spec.storage.storageType: Unsupported value: "GCS": supported values: "S3", "AzureBlob""#
        );
        assert_eq!(
            FieldError::too_long("spec.storage.s3.bucket", 63).to_string(),
            "spec.storage.s3.bucket: Too long: may not be more than 63 bytes"
        );
        // apimachinery's TooMany/TooLong use the singular for a bound of 1.
        assert_eq!(
            FieldError::too_many("spec.etcd.managed.storage.restoreSnapshotURL", 2, 1).to_string(),
            "spec.etcd.managed.storage.restoreSnapshotURL: Too many: 2: must have at most 1 item"
        );
        assert_eq!(FieldError::too_many("l", 11, 10).body(), "Too many: 11: must have at most 10 items");
        assert_eq!(FieldError::too_long("x", 1).body(), "Too long: may not be more than 1 byte");
        // Enum values that are not strings are shown as their JSON text, quoted.
        let e = FieldError::not_supported("n", "3".to_string(), &[Value::from(1), Value::from("a")]);
        assert_eq!(e.body(), r#"Unsupported value: 3: supported values: "1", "a""#);
        assert!(ErrorType::TypeInvalid.blocks_rules() && !ErrorType::Invalid.blocks_rules());
        // An omitted value (1.35+ CEL rules on objects and lists).
        assert_eq!(
            FieldError::invalid("spec", String::new(), "HCPEtcdBackupSpec is immutable").to_string(),
            "spec: Invalid value: HCPEtcdBackupSpec is immutable"
        );
        assert_eq!(FieldError::duplicate("l", String::new()).body(), "Duplicate value");
        assert_eq!(FieldError::invalid("s", go_quote(""), "x").body(), r#"Invalid value: "": x"#);
    }

    #[test]
    fn urls_anywhere_in_a_text_are_redacted() {
        let t = r#"String("https://u:p@h/b/k.db?X-Amz-Signature=abc") can not be compared to url=s3://b/k?sig=1, ok"#;
        assert_eq!(
            redact_urls_in(t),
            r#"String("https://h/b/k.db?<redacted>") can not be compared to url=s3://b/k?<redacted>, ok"#
        );
        assert_eq!(redact_urls_in("no url here"), "no url here");
    }

    #[test]
    fn redaction_drops_query_fragment_and_userinfo() {
        assert_eq!(
            redact_url("https://b.s3.amazonaws.com/k/1.db?X-Amz-Signature=abc"),
            "https://b.s3.amazonaws.com/k/1.db?<redacted>"
        );
        assert_eq!(redact_url("https://u:p@host/x#sha256=00"), "https://host/x?<redacted>");
        assert_eq!(redact_url("plain text"), "plain text");
        assert_eq!(go_quote("a\"b\n\u{1}"), "\"a\\\"b\\n\\x01\"");
        assert_eq!(go_quote("\u{7}\u{8}\u{b}\u{c}\u{7f}"), "\"\\a\\b\\v\\f\\x7f\"");
    }
}

#[cfg(test)]
mod shown_value_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_long_value_is_cut_on_a_whole_escape_and_keeps_its_quotes() {
        for (raw, unit) in [("\u{7f}", "\\x7f"), ("a", "a"), ("é", "é"), ("\"", "\\\""), ("\u{85}", "\\u0085")] {
            let long = raw.repeat(1 << 20);
            let e = FieldError::not_supported("spec.x", render_value(&json!(long)), &[json!("S3")]);
            assert!(e.value.len() <= MAX_SHOWN_VALUE + 3, "{}", e.value.len());
            let inner = e.value.strip_prefix('"').and_then(|v| v.strip_suffix("\"...")).expect("quoted, then ...");
            assert!(!inner.is_empty() && inner.len().is_multiple_of(unit.len()), "{inner}");
            assert_eq!(inner, unit.repeat(inner.len() / unit.len()));
            assert!(e.to_string().len() < MAX_SHOWN_VALUE + 512, "{}", e.to_string().len());
        }
        // A short value is shown whole, as the apiserver shows it.
        let e = FieldError::invalid("spec.x", render_value(&json!("short")), "bad");
        assert_eq!(e.to_string(), "spec.x: Invalid value: \"short\": bad");
    }
}
