//! Applies the decision's JSON patch to the request's object, moving each
//! `add` value in.
//!
//! *Why:* `json_patch::patch` clones every value it adds, and the mutation's
//! init container carries the ~36 KB restore script: one more copy of it per
//! request, nine more pages a fresh Kubewarden instance writes (issue #35).
//! Every operation is still applied by `json_patch` (same semantics, same
//! errors): an `add` is applied with a `null` in place of its value, which
//! then moves into the slot the add made.

use json_patch::{AddOperation, Patch, PatchError, PatchOperation};
use serde_json::Value;

/// Applies `patch` to `doc` as `json_patch::patch` does, without cloning
/// the values it adds. On error `doc` is left part-way (the caller drops
/// it), and the error reads as json_patch's: the failed operation's index
/// in the whole patch, its path, what went wrong.
pub fn apply_moving(doc: &mut Value, patch: Patch) -> Result<(), String> {
    let failed = |i: usize, e: PatchError| format!("operation '/{i}' failed at path '{}': {}", e.path, e.kind);
    for (i, op) in patch.0.into_iter().enumerate() {
        match op {
            PatchOperation::Add(AddOperation { path, value }) => {
                let placeholder = PatchOperation::Add(AddOperation { path: path.clone(), value: Value::Null });
                json_patch::patch(doc, &[placeholder]).map_err(|e| failed(i, e))?;
                // The slot the add made: the end of a list for `-` under a
                // list; else the path itself (under an object `-` is a key).
                let slot = match path.split_back() {
                    Some((parent, last))
                        if last.decoded() == "-" && doc.pointer(parent.as_str()).is_some_and(Value::is_array) =>
                    {
                        doc.pointer_mut(parent.as_str()).and_then(Value::as_array_mut).and_then(|l| l.last_mut())
                    }
                    _ => doc.pointer_mut(path.as_str()),
                };
                // json_patch made the slot; should it not be found, the patch
                // fails rather than leave a `null` where the value belongs.
                let Some(slot) = slot else {
                    return Err(format!("operation '/{i}' failed at path '{path}': the added value has no place"));
                };
                *slot = value;
            }
            other => json_patch::patch(doc, &[other]).map_err(|e| failed(i, e))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn applies_as_json_patch_does() {
        let doc = json!({"a": [1, {"b": 2}], "c": {"d": "x"}, "e": "y"});
        let patches = [
            json!([{"op": "add", "path": "/a/-", "value": {"big": "v"}}]),
            json!([{"op": "add", "path": "/a/0", "value": [1, 2]}, {"op": "copy", "from": "/c/d", "path": "/a/0/0"}]),
            json!([{"op": "add", "path": "/c/new", "value": {"k": 1}}, {"op": "remove", "path": "/e"}]),
            json!([{"op": "add", "path": "/c/d", "value": "replaced"}]),
            json!([{"op": "add", "path": "", "value": {"whole": true}}]),
            json!([{"op": "add", "path": "/a/1/b/~1x", "value": 1}]),
            json!([{"op": "add", "path": "/a/9", "value": 1}]),
            json!([{"op": "remove", "path": "/nope"}]),
            json!([{"op": "add", "path": "/a/-", "value": 3}, {"op": "test", "path": "/a/2", "value": 3}]),
            // `-` under an object is a key.
            json!([{"op": "add", "path": "/c/-", "value": 42}]),
            // The failed operation is named by its index in the whole patch.
            json!([{"op": "add", "path": "/a/0", "value": 5}, {"op": "remove", "path": "/nope"}]),
            json!([{"op": "remove", "path": "/e"}, {"op": "add", "path": "/x/y", "value": 1}]),
        ];
        for p in patches {
            let patch: Patch = serde_json::from_value(p.clone()).expect("patch");
            let mut expected = doc.clone();
            let want = json_patch::patch(&mut expected, &patch.0).map(|_| expected);
            let mut got = doc.clone();
            let have = apply_moving(&mut got, patch).map(|_| got);
            match (want, have) {
                (Ok(w), Ok(h)) => assert_eq!(w, h, "{p}"),
                (Err(w), Err(h)) => assert_eq!(w.to_string(), h, "{p}"),
                (w, h) => panic!("{p}: json_patch {w:?}, apply_moving {h:?}"),
            }
        }
    }
}
