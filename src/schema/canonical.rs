//! Canonical keys for JSON values, so that finding an equal item in a list
//! (duplicates of a `set` or `map` list, the old item ratcheting correlates a
//! new one with) is a hash lookup instead of a scan: every such pass is linear
//! in the lists' size. A list of n items compared item by item is n² — one
//! request of 100,000 `restoreSnapshotURL` entries took 15–30 s of CPU that
//! way. Two values get the same key exactly when `serde_json`'s `==` holds
//! (an integer and a float are different; object key order does not matter).

use std::collections::HashMap;

use serde_json::Value;

/// The key of `v`: linear in its size (plus sorting each object's keys).
pub fn key(v: &Value) -> String {
    let mut out = String::new();
    write(v, &mut out);
    out
}

fn write(v: &Value, out: &mut String) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    match v {
        Value::Null => out.push('n'),
        Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                let _ = write!(out, "u{u};");
            } else if let Some(i) = n.as_i64() {
                let _ = write!(out, "i{i};");
            } else {
                // -0.0 == 0.0 under `==`: one key for both.
                let f = n.as_f64().unwrap_or_default();
                let _ = write!(out, "d{};", if f == 0.0 { 0 } else { f.to_bits() });
            }
        }
        Value::String(s) => {
            let _ = write!(out, "s{}:", s.len());
            out.push_str(s);
        }
        Value::Array(items) => {
            let _ = write!(out, "a{}:", items.len());
            items.iter().for_each(|i| write(i, out));
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let _ = write!(out, "o{}:", entries.len());
            for (k, v) in entries {
                let _ = write!(out, "{}:", k.len());
                out.push_str(k);
                write(v, out);
            }
        }
    }
}

/// The first item of a list for each key: built once per list (linear), then
/// each lookup is O(1) on average, as `find` on the list would answer it.
pub struct FirstByKey<'a> {
    first: HashMap<String, &'a Value>,
}

impl<'a> FirstByKey<'a> {
    /// Indexes `items` by `key_of`; an item it gives `None` is left out.
    pub fn new(items: &'a [Value], key_of: impl Fn(&Value) -> Option<String>) -> Self {
        let mut first = HashMap::with_capacity(items.len());
        for item in items {
            if let Some(k) = key_of(item) {
                first.entry(k).or_insert(item);
            }
        }
        Self { first }
    }

    /// The first item with `key`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.first.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_values_share_a_key_and_others_do_not() {
        let same = [
            (json!({"a": 1, "b": [true, null]}), json!({"b": [true, null], "a": 1})),
            (json!("x"), json!("x")),
            (json!(-3), json!(-3)),
            (json!(1.5), json!(1.5)),
            (json!(0.0), json!(-0.0)),
        ];
        for (a, b) in same {
            assert_eq!(a, b);
            assert_eq!(key(&a), key(&b), "{a} {b}");
        }
        // Each pair differs under serde_json's `==`, and so must the keys,
        // including values a naive concatenation would confuse.
        let different = [
            (json!(1), json!(1.0)),
            (json!("ab"), json!(["a", "b"])),
            (json!(["a", "bc"]), json!(["ab", "c"])),
            (json!({"a": "b:c"}), json!({"a:b": "c"})),
            (json!(null), json!("n")),
            (json!([]), json!({})),
            (json!(true), json!("t")),
        ];
        for (a, b) in different {
            assert_ne!(a, b);
            assert_ne!(key(&a), key(&b), "{a} {b}");
        }
    }

    #[test]
    fn first_by_key_answers_as_find_does() {
        let items = vec![json!({"k": 1, "v": "first"}), json!({"k": 2}), json!({"k": 1, "v": "second"}), json!("x")];
        let by = FirstByKey::new(&items, |i| i.get("k").map(key));
        assert_eq!(by.get(&key(&json!(1))), Some(&items[0]));
        assert_eq!(by.get(&key(&json!(2))), Some(&items[1]));
        assert_eq!(by.get(&key(&json!(3))), None);
    }
}
