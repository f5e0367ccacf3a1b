//! The OpenAPI part of CRD validation: types, required, enum, lengths, counts,
//! patterns, formats, list-map keys; with null pruning and update ratcheting
//! as kube-apiserver (≥ 1.33) does them. Messages are go-openapi's, wrapped in
//! the `field.Error` shapes apiextensions-apiserver converts them to.

use serde_json::{Map, Value};

use super::{
    field_error::{render_value, FieldError},
    regex_cache, SchemaOutcome,
};

fn contains_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.iter().any(contains_null),
        Value::Object(o) => o.values().any(contains_null),
        _ => false,
    }
}

/// Removes `null` from properties that are not `nullable`, as the apiserver
/// does before validation (no copy when there is no null at all).
pub fn prune_nulls<'a>(schema: &Value, value: &'a Value) -> std::borrow::Cow<'a, Value> {
    if contains_null(value) {
        std::borrow::Cow::Owned(prune(schema, value))
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

fn prune(schema: &Value, value: &Value) -> Value {
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let mut out = Map::with_capacity(obj.len());
            for (k, v) in obj {
                let child = props.and_then(|p| p.get(k)).or(additional);
                if v.is_null() {
                    let nullable = child.and_then(|c| c.get("nullable")).and_then(Value::as_bool) == Some(true);
                    if child.is_some() && !nullable {
                        continue;
                    }
                }
                out.insert(k.clone(), child.map_or_else(|| v.clone(), |c| prune(c, v)));
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            Value::Array(items.iter().map(|i| prune(item_schema, i)).collect())
        }
        other => other.clone(),
    }
}

/// Validates `value` against `schema` (root level), appending to `out`.
pub fn validate(schema: &Value, value: &Value, old: Option<&Value>, out: &mut SchemaOutcome) {
    walk(schema, value, old, "", out);
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, v: &Value) -> bool {
    match expected {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        _ => true,
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "<nil>"
    } else {
        path
    }
}

fn walk(schema: &Value, value: &Value, old: Option<&Value>, path: &str, out: &mut SchemaOutcome) {
    // Ratcheting (KEP-4008, GA in 1.33): an unchanged value is not re-validated.
    if old == Some(value) {
        return;
    }
    let shown = display_path(path);
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        if let Some(t) = schema.get("type").and_then(Value::as_str) {
            out.errors.push(FieldError::type_invalid(
                shown,
                "null".to_string(),
                format!("{shown} in body must be of type {t}: \"null\""),
            ));
        }
        return;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(t, value) {
            out.errors.push(FieldError::type_invalid(
                shown,
                render_value(value),
                format!("{shown} in body must be of type {t}: \"{}\"", json_type(value)),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            out.errors.push(FieldError::not_supported(shown, render_value(value), allowed));
        }
    }
    match value {
        Value::String(s) => check_string(schema, s, value, shown, out),
        Value::Number(n) => {
            if let (Some(min), Some(v)) = (schema.get("minimum").and_then(Value::as_f64), n.as_f64()) {
                if v < min {
                    out.errors.push(FieldError::invalid(
                        shown,
                        render_value(value),
                        format!("{shown} in body should be greater than or equal to {}", schema["minimum"]),
                    ));
                }
            }
        }
        Value::Array(items) => check_array(schema, items, old, path, out),
        Value::Object(obj) => check_object(schema, obj, old, path, out),
        _ => {}
    }
}

fn check_string(schema: &Value, s: &str, value: &Value, shown: &str, out: &mut SchemaOutcome) {
    let chars = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if chars < min {
            out.errors.push(FieldError::invalid(
                shown,
                render_value(value),
                format!("{shown} in body should be at least {min} chars long"),
            ));
        }
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if chars > max {
            out.errors.push(FieldError::too_long(shown, max));
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if let Ok(re) = regex_cache::get(pattern) {
            if !re.is_match(s) {
                out.errors.push(FieldError::invalid(
                    shown,
                    render_value(value),
                    format!("{shown} in body should match '{pattern}'"),
                ));
            }
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time") && !is_rfc3339(s) {
        out.errors.push(FieldError::invalid(
            shown,
            render_value(value),
            format!("{shown} in body must be of type date-time: {}", render_value(value)),
        ));
    }
}

fn is_rfc3339(s: &str) -> bool {
    regex_cache::get(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
        .map(|re| re.is_match(s))
        .unwrap_or(false)
}

fn check_array(schema: &Value, items: &[Value], old: Option<&Value>, path: &str, out: &mut SchemaOutcome) {
    let shown = display_path(path);
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if (items.len() as u64) < min {
            // The value is the list itself, which field.Error prints with Go's %#v.
            let value = if items.is_empty() { "[]interface {}{}".to_string() } else { "\"array\"".to_string() };
            out.errors.push(FieldError::invalid(
                shown,
                value,
                format!("{shown} in body should have at least {min} items"),
            ));
        }
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if items.len() as u64 > max {
            out.errors.push(FieldError::too_many(shown, items.len(), max));
        }
    }
    let Some(item_schema) = schema.get("items") else {
        return;
    };
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let map_keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let old_items = old.and_then(Value::as_array);
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        // Correlate with the old list the way ratcheting does: by key for
        // list-type map, by value for set; atomic lists do not correlate.
        let correlated = match list_type {
            Some("map") => {
                let key = map_key(item, &map_keys);
                if list_type == Some("map") && seen.contains(&key) {
                    out.errors.push(FieldError::duplicate(&item_path, key.to_string()));
                }
                seen.push(key.clone());
                old_items.and_then(|o| o.iter().find(|oi| map_key(oi, &map_keys) == key))
            }
            Some("set") => {
                if seen.contains(item) {
                    out.errors.push(FieldError::duplicate(&item_path, render_value(item)));
                }
                seen.push(item.clone());
                old_items.and_then(|o| o.iter().find(|oi| *oi == item))
            }
            _ => None,
        };
        walk(item_schema, item, correlated, &item_path, out);
    }
}

fn map_key(item: &Value, keys: &[&str]) -> Value {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(*k) {
            m.insert((*k).to_string(), v.clone());
        }
    }
    Value::Object(m)
}

fn check_object(schema: &Value, obj: &Map<String, Value>, old: Option<&Value>, path: &str, out: &mut SchemaOutcome) {
    let shown = display_path(path);
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
        if (obj.len() as u64) < min {
            // go-openapi's TooFewProperties carries the bound as its value.
            out.errors.push(FieldError::invalid(
                shown,
                min.to_string(),
                format!("{shown} in body should have at least {min} properties"),
            ));
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
        if obj.len() as u64 > max {
            out.errors.push(FieldError::invalid(
                shown,
                max.to_string(),
                format!("{shown} in body should have at most {max} properties"),
            ));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                out.errors.push(FieldError::required(join(path, r)));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let embedded = schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
    for (k, v) in obj {
        let child_path = join(path, k);
        let child_old = old.and_then(|o| o.get(k));
        match props.and_then(|p| p.get(k)).or(additional) {
            Some(child) => walk(child, v, child_old, &child_path, out),
            None => {
                // apiVersion/kind/metadata are always known at the root of a resource.
                let root_meta = path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                if !preserve
                    && !embedded
                    && !root_meta
                    && schema.get("additionalProperties") != Some(&Value::Bool(true))
                {
                    out.unknown_fields.push(child_path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(schema: Value, v: Value, old: Option<Value>) -> Vec<String> {
        let mut out = SchemaOutcome::default();
        let v = prune_nulls(&schema, &v);
        validate(&schema, &v, old.as_ref(), &mut out);
        out.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn ratcheting_skips_unchanged_invalid_values_on_update() {
        let s = json!({"type":"object","properties":{"a":{"type":"string","maxLength":2},"b":{"type":"string","maxLength":2}}});
        let old = json!({"a":"toolong","b":"ok"});
        assert!(run(s.clone(), json!({"a":"toolong","b":"ok"}), Some(old.clone())).is_empty());
        assert_eq!(
            run(s, json!({"a":"toolong","b":"changed"}), Some(old)),
            vec!["b: Too long: may not be more than 2 bytes"]
        );
    }

    #[test]
    fn nulls_are_pruned_unless_nullable() {
        let s = json!({"type":"object","required":["a"],"properties":{"a":{"type":"string"},"b":{"type":"object"}}});
        assert_eq!(run(s, json!({"a":null,"b":null}), None), vec!["a: Required value"]);
    }

    #[test]
    fn type_and_count_errors() {
        let s = json!({"type":"object","properties":{"l":{"type":"array","maxItems":1,"minItems":1,"items":{"type":"string"}},"o":{"type":"object","minProperties":1}}});
        assert_eq!(
            run(s, json!({"l":[],"o":{}}), None),
            vec![
                "l: Invalid value: []interface {}{}: l in body should have at least 1 items",
                "o: Invalid value: 1: o in body should have at least 1 properties"
            ]
        );
    }
}
