//! JSON pointers read without allocating.
//!
//! `serde_json::Value::pointer` unescapes every token (`~1`, `~0`) into a
//! new `String`, two allocations per token; the rules read ~100 pointers per
//! request, all of them constants of this crate without escapes, and that
//! unescaping was ~7 % of a backup CREATE's instructions (BENCHMARKS.md).
//! [`At::at`] answers exactly as `pointer` does (an escaped pointer is
//! handed to it), without the allocations.

use serde_json::Value;

/// `pointer`, without allocating for pointers that hold no escape.
pub trait At {
    /// The value at the RFC 6901 JSON pointer `pointer`, as `Value::pointer`.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        if pointer.contains('~') {
            return self.pointer(pointer);
        }
        pointer.strip_prefix('/')?.split('/').try_fold(self, |v, token| match v {
            Value::Object(map) => map.get(token),
            Value::Array(list) => index(token).and_then(|i| list.get(i)),
            _ => None,
        })
    }
}

/// An array index as RFC 6901 (and serde_json) reads it: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::At;

    #[test]
    fn answers_as_pointer_does() {
        let v = json!({"a": {"b": [10, {"c/d": 1, "e~f": 2, "": 3}], "0": "zero"}, "": {"x": 4}});
        for p in [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1",
            "/a/b/01",
            "/a/b/+1",
            "/a/b/-1",
            "/a/b/2",
            "/a/b/1/c~1d",
            "/a/b/1/e~0f",
            "/a/b/1/",
            "/a/0",
            "//x",
            "a",
            "/a/b/0/x",
            "/nope",
            "/a/b/18446744073709551616",
        ] {
            assert_eq!(v.at(p), v.pointer(p), "{p:?}");
        }
    }
}
