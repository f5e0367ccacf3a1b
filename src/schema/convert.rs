//! JSON → CEL values with Kubernetes' typing: JSON integers are CEL `int`
//! (serde's binding would make them `uint`, so `self.replicas == 3` would be
//! false), other numbers `double`.

use std::{collections::HashMap, sync::Arc};

use kube_cel::cel::{
    objects::{Key, Map},
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
