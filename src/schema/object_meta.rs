//! The object-metadata check kube-apiserver runs on every custom resource it
//! creates, before the schema (`ValidateObjectMetaAccessor` with
//! `NameIsDNSSubdomain`): the name must be a lowercase RFC 1123 subdomain of
//! at most 253 characters. Its errors come first in the apiserver's list, so
//! an offline review of such an object gives the same causes in the same
//! order. In a cluster a webhook never sees these objects (the apiserver
//! refuses them before validating admission); offline it does.

use serde_json::Value;

use super::field_error::FieldError;

const MAX_LEN: usize = 253;
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`.
fn is_subdomain(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(&f), Some(&l)) => alnum(f) && alnum(l) && b.iter().all(|&c| alnum(c) || c == b'-'),
                _ => false,
            }
        })
}

/// The errors of a CREATE's `metadata.name` (none when the name is not a
/// string: the apiserver refuses such a body before validation).
pub fn validate_name(object: &Value) -> Vec<FieldError> {
    let meta = object.get("metadata");
    let name = meta.and_then(|m| m.get("name"));
    let generate = meta.and_then(|m| m.get("generateName")).and_then(Value::as_str).unwrap_or_default();
    match name {
        None | Some(Value::Null) if generate.is_empty() => {
            vec![FieldError::required("metadata.name").with_detail("name or generateName is required")]
        }
        Some(Value::String(s)) if s.is_empty() && generate.is_empty() => {
            vec![FieldError::required("metadata.name").with_detail("name or generateName is required")]
        }
        Some(Value::String(s)) if !s.is_empty() => {
            let mut out = Vec::new();
            let value = super::go_quote(s);
            if s.len() > MAX_LEN {
                out.push(FieldError::invalid(
                    "metadata.name",
                    value.clone(),
                    format!("must be no more than {MAX_LEN} characters"),
                ));
            }
            if !is_subdomain(s) {
                out.push(FieldError::invalid("metadata.name", value, SUBDOMAIN_MSG));
            }
            out
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(name: Value) -> Vec<String> {
        validate_name(&json!({"metadata": {"name": name}})).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_names_pass() {
        for n in ["a", "oadp-nightly-x7k2", "a.b.c", "0", &"a".repeat(253)] {
            assert!(msgs(json!(n)).is_empty(), "{n}");
        }
    }

    #[test]
    fn invalid_names_get_the_apiservers_errors() {
        assert_eq!(msgs(json!("Bad")), vec![format!("metadata.name: Invalid value: \"Bad\": {SUBDOMAIN_MSG}")]);
        for n in ["bad_name", "-a", "a-", "a..b", ".a", "é"] {
            assert_eq!(msgs(json!(n)).len(), 1, "{n}");
        }
        let long = "a".repeat(254);
        assert_eq!(
            msgs(json!(long)),
            vec![format!("metadata.name: Invalid value: \"{long}\": must be no more than 253 characters")]
        );
        assert_eq!(msgs(json!(format!("{}_", "a".repeat(253)))).len(), 2);
        assert_eq!(
            msgs(json!("")),
            vec!["metadata.name: Required value: name or generateName is required".to_string()]
        );
        assert!(validate_name(&json!({"metadata": {"generateName": "x-"}})).is_empty());
        assert!(msgs(json!(12)).is_empty());
    }
}
