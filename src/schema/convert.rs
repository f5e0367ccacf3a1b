//! JSON → CEL values with Kubernetes' typing: JSON integers are CEL `int`
//! (serde's binding would make them `uint`, so `self.replicas == 3` would be
//! false), other numbers `double`; under a schema ([`to_cel_typed`]) as
//! apiserver's `UnstructuredToVal` converts them, a value of the wrong type
//! becoming an error any rule that reads it fails with.

use std::{collections::HashMap, sync::Arc};

use kube_cel::cel::{
    objects::{Key, Map, Opaque},
    Value as Cel,
};
use serde_json::Value;

/// Converts a JSON value to a CEL value.
pub fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(obj) => {
            let map: HashMap<Key, Cel> = obj.iter().map(|(k, v)| (Key::from(k.as_str()), to_cel(v))).collect();
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// The child of a CEL map by key, or of a list by index.
pub fn child_by_key(v: &Cel, key: &str) -> Option<Cel> {
    match v {
        Cel::Map(m) => m.map.get(&Key::from(key)).cloned(),
        _ => None,
    }
}

/// The item of a CEL list at `index`.
pub fn child_by_index(v: &Cel, index: usize) -> Option<Cel> {
    match v {
        Cel::List(l) => l.get(index).cloned(),
        _ => None,
    }
}

/// Converts a JSON value to a CEL value typed by its structural `schema`, as
/// `UnstructuredToVal` does: a number under `type: number` is a `double`, and
/// a value that does not have the schema's type is an [`invalid_data`] value
/// (a stored object can hold one: the schema ratchets an unchanged value,
/// the rules still read it). Without a type, or under
/// `x-kubernetes-preserve-unknown-fields`, the value converts untyped.
pub fn to_cel_typed(v: &Value, schema: &Value) -> Cel {
    if v.is_null() {
        return if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            Cel::Null
        } else {
            invalid_data::value("invalid data, got null for schema with nullable=false".to_string())
        };
    }
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        return match v {
            Value::String(_) => to_cel(v),
            Value::Number(n) if n.is_i64() => to_cel(v),
            _ => invalid_data::value(
                "invalid data, expected XIntOrString value to be either a string or integer".to_string(),
            ),
        };
    }
    let expected = |what: &str| invalid_data::value(format!("invalid data, expected {what}, got {}", go_type(v)));
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let Value::Object(obj) = v else {
                return invalid_data::value(
                    "invalid data, expected a map for the provided schema with type=object".to_string(),
                );
            };
            let map: HashMap<Key, Cel> = obj
                .iter()
                .map(|(k, child)| {
                    let c = match field_schema(schema, k) {
                        Some(s) => to_cel_typed(child, s),
                        None => to_cel(child),
                    };
                    (Key::from(k.as_str()), c)
                })
                .collect();
            Cel::Map(Map { map: Arc::new(map) })
        }
        Some("array") => {
            let Value::Array(items) = v else {
                return invalid_data::value(
                    "invalid data, expected an array for the provided schema with type=array".to_string(),
                );
            };
            match schema.get("items") {
                Some(item) => Cel::List(Arc::new(items.iter().map(|i| to_cel_typed(i, item)).collect())),
                None => to_cel(v),
            }
        }
        Some("string") => match v {
            Value::String(_) => to_cel(v),
            _ => expected("string"),
        },
        Some("number") => match v.as_f64() {
            Some(f) if v.is_number() => Cel::Float(f),
            _ => expected("float"),
        },
        Some("integer") => match v.as_i64() {
            Some(i) => Cel::Int(i),
            None => expected("int"),
        },
        Some("boolean") => match v {
            Value::Bool(b) => Cel::Bool(*b),
            _ => expected("bool"),
        },
        _ => to_cel(v),
    }
}

/// The schema the value at `key` of an object under `schema` (`type:
/// object`) is converted with: its property's when the schema lists
/// properties (a key not listed converts untyped: `None`), else
/// `additionalProperties`. The one definition: the direct rule forms read
/// children under it, and the walker shares a parent's CEL value with a
/// child only where it is the schema the walk gives the child.
pub fn field_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) => props.get(key),
        None => schema.get("additionalProperties").filter(|a| a.is_object()),
    }
}

/// Go's `%T` of the value an unstructured object holds.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// A value of the wrong type where a rule may read it: an opaque CEL value
/// no function or operator accepts, whose every rendering (its type name,
/// its debug form, which cel's errors quote) carries the conversion error.
pub mod invalid_data {
    use super::*;

    const OPEN: &str = "InvalidData<<";
    const CLOSE: &str = ">>";

    #[derive(PartialEq, Eq)]
    struct InvalidData(String);

    impl std::fmt::Debug for InvalidData {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl Opaque for InvalidData {
        fn runtime_type_name(&self) -> &str {
            &self.0
        }
    }

    /// The CEL value for the conversion error `text`.
    pub fn value(text: String) -> Cel {
        Cel::Opaque(Arc::new(InvalidData(format!("{OPEN}{text}{CLOSE}"))))
    }

    /// The conversion error named in `text` (an opaque value's type name), if any.
    pub fn named_in(text: &str) -> Option<String> {
        let start = text.find(OPEN)? + OPEN.len();
        let len = text.get(start..)?.find(CLOSE)?;
        text.get(start..start + len).map(str::to_string)
    }

    /// Whether `v` holds a conversion error anywhere (no allocation: this
    /// runs for every whole-value comparison of every UPDATE).
    fn any_in(v: &Cel) -> bool {
        match v {
            Cel::Opaque(_) => true,
            Cel::List(items) => items.iter().any(any_in),
            Cel::Map(m) => m.map.values().any(any_in),
            _ => false,
        }
    }

    /// The first conversion error in `v` (depth first, map keys in order).
    pub fn first_in(v: &Cel) -> Option<String> {
        if !any_in(v) {
            return None;
        }
        match v {
            Cel::Opaque(o) => named_in(o.runtime_type_name()),
            Cel::List(items) => items.iter().find_map(first_in),
            Cel::Map(m) => {
                let mut entries: Vec<(&Key, &Cel)> = m.map.iter().collect();
                entries.sort_by_key(|(k, _)| k.to_string());
                entries.into_iter().find_map(|(_, c)| first_in(c))
            }
            _ => None,
        }
    }
}
