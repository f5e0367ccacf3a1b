//! Presigned restore URLs are bearer credentials. The core never puts one in
//! a message, but the etcd-init patch must carry it (as the container's
//! environment), and `check`/`review` print patches: by default every URL
//! in them is shown as scheme://host/path?<redacted>; `--show-secrets` shows
//! them as the apiserver would receive them.

use base64::Engine as _;
use hcp_etcd_admission::schema::redact_url;
use serde_json::Value;

/// Whether `s` is one URL token that carries something to hide (a query,
/// a fragment or user information).
fn secret_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else { return false };
    !scheme.is_empty()
        && !s.chars().any(char::is_whitespace)
        && (rest.contains(['?', '#']) || rest.split('/').next().is_some_and(|authority| authority.contains('@')))
}

/// Redacts every URL string anywhere in `v`.
pub fn value(v: &mut Value) {
    match v {
        Value::String(s) if secret_url(s) => *s = redact_url(s),
        Value::Array(items) => items.iter_mut().for_each(value),
        Value::Object(map) => map.values_mut().for_each(value),
        _ => {}
    }
}

/// Redacts the URLs inside a response AdmissionReview's (base64) patch.
pub fn review(review: &mut Value) {
    let Some(encoded) = review.pointer_mut("/response/patch") else { return };
    let engine = base64::engine::general_purpose::STANDARD;
    let decoded = encoded.as_str().and_then(|s| engine.decode(s).ok());
    let Some(mut patch) = decoded.and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok()) else {
        // Not a patch this program wrote: show nothing of it rather than a secret.
        *encoded = Value::String("<redacted: not a JSON patch>".to_string());
        return;
    };
    value(&mut patch);
    *encoded = Value::String(engine.encode(patch.to_string()));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn urls_lose_their_query_and_nothing_else_changes() {
        let mut v = json!({"env": [{"name": "RESTORE_URL_ETCD", "value": "https://b.s3.amazonaws.com/k.db?X-Amz-Signature=abc"},
            {"name": "U", "value": "https://user:pw@h/x"}, {"name": "S", "value": "set -eu\ncurl \"https://h/x?y\""},
            {"name": "P", "value": "https://h/plain"}]});
        value(&mut v);
        assert_eq!(v["env"][0]["value"], "https://b.s3.amazonaws.com/k.db?<redacted>");
        assert_eq!(v["env"][1]["value"], "https://h/x");
        assert_eq!(v["env"][2]["value"], "set -eu\ncurl \"https://h/x?y\"", "scripts are not URLs");
        assert_eq!(v["env"][3]["value"], "https://h/plain");
    }
}
