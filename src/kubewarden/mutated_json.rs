//! The mutated object, serialised with the injected restore script escaped
//! once per process.
//!
//! *Why:* the etcd-init script (~30 KB) travels in every mutation answer, and
//! escaping it into a JSON string byte by byte was about half of the
//! mutation's instructions (BENCHMARKS.md). The script is a constant, so its
//! JSON form is too: [`serialize`] writes the object as `serde_json` would,
//! byte for byte, except that a string equal to the script is written from
//! that cached form (a `RawValue`). A test holds the two outputs equal.

use std::sync::OnceLock;

use serde::{ser::SerializeMap, ser::SerializeSeq, Serialize, Serializer};
use serde_json::{value::RawValue, Value};

use crate::mutate::container::{injected_script, is_stashed_script};

/// The script as a JSON string literal, escaped once.
fn script_json() -> Option<&'static RawValue> {
    static JSON: OnceLock<Option<Box<RawValue>>> = OnceLock::new();
    JSON.get_or_init(|| serde_json::to_string(injected_script()).ok().and_then(|s| RawValue::from_string(s).ok()))
        .as_deref()
}

/// `value` as `serde_json` writes it, with the script's string pre-escaped.
struct Fast<'a>(&'a Value);

impl Serialize for Fast<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(s)
                if is_stashed_script(s) || (s.len() == injected_script().len() && s == injected_script()) =>
            {
                match script_json() {
                    Some(raw) => raw.serialize(serializer),
                    None => serializer.serialize_str(s),
                }
            }
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    out.serialize_entry(k, &Fast(v))?;
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for v in items {
                    out.serialize_element(&Fast(v))?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// The buffer an answer to a request of `payload_len` bytes is written
/// into, so that it is not grown (each growth a fresh block and a copy: in a
/// fresh Kubewarden instance, pages written twice; issue #35). A mutated
/// object is the request's object plus the script, so that answer fits; a
/// denial usually fits 4 KiB (a longer one grows the buffer, as before).
pub fn answer_capacity(mutated: bool, payload_len: usize) -> usize {
    if mutated {
        payload_len.saturating_add(script_json().map_or(0, |s| s.get().len())).saturating_add(4096)
    } else {
        4096
    }
}

/// `serialize_with` for `ValidationResponse::mutated_object`.
pub fn serialize<S: Serializer>(value: &Option<Value>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => serializer.serialize_some(&Fast(v)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Serialize)]
    struct Both {
        #[serde(serialize_with = "serialize")]
        fast: Option<Value>,
        plain: Option<Value>,
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let script = injected_script().to_string();
        for v in [
            json!({"spec": {"initContainers": [{"name": "etcd-init", "args": ["-c", script.clone()]}]}, "n": 1.5, "b": null}),
            json!([script.clone(), "a\"b\\c\n\u{1}é", {"": []}, 0, -3, true]),
            json!(script.clone()),
            json!({"almost": format!("{script} ")}),
        ] {
            let fast = serde_json::to_string(&Both { fast: Some(v.clone()), plain: None }).expect("json");
            let plain = serde_json::to_string(&json!({"fast": v, "plain": null})).expect("json");
            assert_eq!(fast, plain);
        }
        let none = serde_json::to_string(&Both { fast: None, plain: None }).expect("json");
        assert_eq!(none, r#"{"fast":null,"plain":null}"#);
    }
}
