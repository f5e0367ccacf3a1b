//! The OpenAPI part of CRD validation: types, required, enum, lengths, counts,
//! patterns, formats, list-map keys; with null pruning and update ratcheting
//! as kube-apiserver (≥ 1.33) does them. Messages are go-openapi's, wrapped in
//! the `field.Error` shapes apiextensions-apiserver converts them to.

use serde_json::{Map, Value};

use super::{
    canonical,
    field_error::{render_value, FieldError},
    keyword, regex_cache, KubernetesVersion, SchemaOutcome,
};

/// The most schema errors (and unknown fields) one object is reported with.
/// A list of n wrong-typed items makes n errors, each kept as an error, a
/// cause and a line of the message: 1 KiB of heap per 2 bytes of body, so an
/// uncapped 1 MiB list took 1.1 GiB. The apiserver checks the schema before
/// any webhook is called, so a review it sends never comes near this; a
/// direct caller's is cut here, and the answer says so.
pub const MAX_SCHEMA_ERRORS: usize = 256;

/// One validation pass: where its errors go, and the Kubernetes minor whose
/// OpenAPI behaviour it imitates (1.36 keeps `int32`/`int64`/`float`/`double`
/// formats that 1.35 strips, and checks a number's range against them).
struct Pass<'o> {
    out: &'o mut SchemaOutcome,
    version: KubernetesVersion,
}

impl std::ops::Deref for Pass<'_> {
    type Target = SchemaOutcome;
    fn deref(&self) -> &SchemaOutcome {
        self.out
    }
}

impl std::ops::DerefMut for Pass<'_> {
    fn deref_mut(&mut self) -> &mut SchemaOutcome {
        self.out
    }
}

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

/// How the apiserver's pruning treats field `key` of an object under
/// `schema`: known (with its schema), kept without a schema
/// (`x-kubernetes-preserve-unknown-fields`, an embedded resource,
/// `additionalProperties: true`, the root's `apiVersion`/`kind`/`metadata`),
/// or unknown (removed, and warned about).
enum Field<'s> {
    Known(&'s Value),
    Kept,
    Unknown,
}

fn field_of<'s>(schema: &'s Value, key: &str, root: bool) -> Field<'s> {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    if let Some(child) = props.and_then(|p| p.get(key)).or(additional) {
        return Field::Known(child);
    }
    let keep_all = preserves_unknown(schema)
        || schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true)
        || schema.get("additionalProperties") == Some(&Value::Bool(true));
    if keep_all || (root && matches!(key, "apiVersion" | "kind" | "metadata")) {
        Field::Kept
    } else {
        Field::Unknown
    }
}

/// The fields pruning removes from `value` (the apiserver's `unknown field`
/// warnings, in its order), and the fields of the root's `metadata` that are
/// not ObjectMeta's. Changed or not, wrong-typed or not: pruning happens
/// while the request is decoded, before any validation. Allocates only for
/// what it finds.
pub fn unknown_fields(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    unknown_at(schema, value, &mut String::new(), &mut out);
    out.truncate(MAX_SCHEMA_ERRORS);
    out
}

/// `path` is a buffer: each level appends its segment and takes it off again.
fn unknown_at(schema: &Value, value: &Value, path: &mut String, out: &mut Vec<String>) {
    if out.len() >= MAX_SCHEMA_ERRORS {
        return;
    }
    match value {
        Value::Object(obj) => {
            let root = path.is_empty();
            for (k, v) in obj {
                let field = field_of(schema, k, root);
                // A kept field has nothing unknown, but the root's metadata.
                if matches!(field, Field::Kept) && !(root && k == "metadata") {
                    continue;
                }
                under_key(path, k, |path| match field {
                    Field::Known(child) => unknown_at(child, v, path, out),
                    Field::Unknown => out.push(path.clone()),
                    // The root's metadata: ObjectMeta's fields only.
                    Field::Kept => out.extend(
                        v.as_object()
                            .into_iter()
                            .flat_map(|m| m.keys())
                            .filter(|f| !OBJECT_META_FIELDS.contains(&f.as_str()))
                            .map(|f| format!("metadata.{f}")),
                    ),
                });
            }
        }
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            for (i, item) in items.iter().enumerate() {
                under_index(path, i, |path| unknown_at(item_schema, item, path, out));
            }
        }
        _ => {}
    }
}

/// Removes the fields [`unknown_fields`] reports, as the apiserver prunes
/// them while decoding, before any rule runs: the counts and the CEL rules
/// (immutability among them) see the object as it will be stored.
pub fn prune_unknown(schema: &Value, value: &Value) -> Value {
    prune_unknown_at(schema, value, true)
}

fn prune_unknown_at(schema: &Value, value: &Value, root: bool) -> Value {
    match value {
        Value::Object(obj) => {
            let mut out = Map::with_capacity(obj.len());
            for (k, v) in obj {
                match field_of(schema, k, root) {
                    Field::Known(child) => {
                        out.insert(k.clone(), prune_unknown_at(child, v, false));
                    }
                    Field::Kept => {
                        out.insert(k.clone(), v.clone());
                    }
                    Field::Unknown => {}
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            Value::Array(items.iter().map(|i| prune_unknown_at(item_schema, i, false)).collect())
        }
        other => other.clone(),
    }
}

/// Fills in every absent property whose schema has a `default`, as the
/// apiserver does when it decodes a request and when it reads the stored
/// object (structural defaulting), so the rules compare what will be stored.
/// Borrowed when nothing is missing; linear in the value.
pub fn apply_defaults<'a>(schema: &Value, value: &'a Value) -> std::borrow::Cow<'a, Value> {
    if missing_default(schema, value) {
        let mut owned = value.clone();
        fill_defaults(schema, &mut owned);
        std::borrow::Cow::Owned(owned)
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

fn missing_default(schema: &Value, value: &Value) -> bool {
    match value {
        Value::Object(obj) => schema.get("properties").and_then(Value::as_object).is_some_and(|props| {
            props.iter().any(|(k, child)| match obj.get(k) {
                None => child.get("default").is_some(),
                Some(v) => missing_default(child, v),
            })
        }),
        Value::Array(items) => schema.get("items").is_some_and(|s| items.iter().any(|i| missing_default(s, i))),
        _ => false,
    }
}

fn fill_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
            for (k, child) in props {
                match obj.get_mut(k) {
                    Some(v) => fill_defaults(child, v),
                    None => {
                        if let Some(d) = child.get("default") {
                            obj.insert(k.clone(), d.clone());
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                items.iter_mut().for_each(|i| fill_defaults(s, i));
            }
        }
        _ => {}
    }
}

/// Validates `value` against `schema` (root level), appending to `out`.
pub fn validate(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    version: KubernetesVersion,
    out: &mut SchemaOutcome,
) {
    walk(schema, value, old, &mut String::new(), &mut Pass { out: &mut *out, version });
    let walked = out.errors.len();
    // x-kubernetes-list-type set/map uniqueness is a pass of its own after the
    // OpenAPI checks (structurallisttype); on UPDATE it runs only when the old
    // object passes it (ratcheting).
    let mut old_list_errors = Vec::new();
    if let Some(o) = old {
        list_errors(schema, o, "", &mut old_list_errors);
    }
    if old_list_errors.is_empty() {
        list_errors(schema, value, "", &mut out.errors);
    }
    if walked >= MAX_SCHEMA_ERRORS || out.errors.len() >= MAX_SCHEMA_ERRORS {
        out.errors.truncate(MAX_SCHEMA_ERRORS);
        out.errors.push(FieldError::too_many_errors(MAX_SCHEMA_ERRORS));
    }
}

/// Rewrites a go-openapi message (`<name> in body …`) to name the field
/// relative to `status`, as the apiserver's separate validation of the status
/// of a status UPDATE prints it (the root itself is the empty name). The
/// field path stays absolute.
pub fn relative_to_status(e: &mut FieldError) {
    // A number's range error (1.36+) is reported on the validation's root,
    // which for the status is `status`, and names the path inside it.
    if e.field == "<nil>" && e.detail.starts_with("Checked value ") {
        if let Some((head, rest)) = e.detail.split_once(" in status") {
            e.detail = format!("{head} in {}", rest.strip_prefix('.').unwrap_or(rest));
            e.field = "status".to_string();
        }
        return;
    }
    let relative = if e.field == "status" {
        ""
    } else if let Some(rest) = e.field.strip_prefix("status.") {
        rest
    } else {
        return;
    };
    if let Some(tail) = e.detail.strip_prefix(&format!("{} in body", e.field)) {
        e.detail = format!("{relative} in body{tail}");
    }
}

/// Duplicate items of `x-kubernetes-list-type: set` lists and duplicate keys
/// of `map` lists, as `field.Duplicate` with the value `field.Error` prints
/// (a string quoted, a key map as JSON); only the first repeat of a value is
/// reported.
fn list_errors(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let mut at = String::from(path);
    list_errors_at(schema, value, &mut at, out);
}

/// [`list_errors`] with the path in one buffer (a field's path is written
/// only where an error names it).
fn list_errors_at(schema: &Value, value: &Value, path: &mut String, out: &mut Vec<FieldError>) {
    if out.len() >= MAX_SCHEMA_ERRORS {
        return;
    }
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, v) in obj {
                if let Some(child) = props.and_then(|p| p.get(k)).or(additional) {
                    under_key(path, k, |path| list_errors_at(child, v, path, out));
                }
            }
        }
        Value::Array(items) => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
            // A list-type map holds objects (or nulls) only; the first other
            // item is reported and no duplicate is looked for.
            let not_object =
                (list_type == Some("map")).then(|| items.iter().position(|i| !i.is_null() && !i.is_object())).flatten();
            if let Some(i) = not_object {
                out.push(FieldError::invalid(
                    item_path(path, i),
                    items.get(i).map(error_value).unwrap_or_default(),
                    "must be an object for an array of list-type map",
                ));
            }
            // The second occurrence of each identity is reported, once; one
            // hash lookup per item (structurallisttype keeps a map too).
            let identity = |i: &Value| match list_type {
                Some("set") => Some(i.clone()),
                Some("map") => Some(map_key(i, &keys)),
                _ => None,
            };
            if matches!(list_type, Some("set" | "map")) && not_object.is_none() {
                let mut seen: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
                for (i, item) in items.iter().enumerate() {
                    let Some(id) = identity(item) else { continue };
                    let count = seen.entry(canonical::key(&id)).or_insert(0);
                    *count = count.saturating_add(1);
                    if *count == 2 {
                        if out.len() >= MAX_SCHEMA_ERRORS {
                            return;
                        }
                        out.push(FieldError::duplicate(item_path(path, i), error_value(&id)));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    under_index(path, i, |path| list_errors_at(item_schema, item, path, out));
                }
            }
        }
        _ => {}
    }
}

/// A value as `field.Error` prints it: strings quoted (`%q`), numbers and
/// booleans bare, anything else as Go's `json.Marshal` writes it (sorted
/// keys, no spaces, `<`, `>` and `&` escaped).
fn error_value(v: &Value) -> String {
    match v {
        // A presigned URL's query is a credential: never echoed.
        Value::String(s) => super::field_error::go_quote(&super::field_error::redact_url(s)),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        other => go_json(other),
    }
}

fn go_json(v: &Value) -> String {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => v.to_string(),
        Value::String(s) => Value::String(super::field_error::redact_url(s))
            .to_string()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026"),
        Value::Array(items) => format!("[{}]", items.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", go_json(&Value::String((*k).clone())), go_json(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
    }
}

/// `parent.key` as field paths are printed (`key` at the root). Paths are
/// built without the formatting machinery: the walks make one per field they
/// visit, and `format!` was a tenth of a request's instructions.
pub(super) fn join(path: &str, key: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1 + key.len());
    out.push_str(path);
    push_key(&mut out, key);
    out
}

/// `path[i]`, as [`join`].
pub(super) fn item_path(path: &str, i: usize) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    out.push_str(path);
    push_index(&mut out, i);
    out
}

/// Runs `f` on `path` extended by `.key` ([`join`] in place), then takes
/// the segment off again: each walk keeps one path buffer and copies a
/// field's path only into what it reports.
fn under_key<R>(path: &mut String, key: &str, f: impl FnOnce(&mut String) -> R) -> R {
    let len = path.len();
    push_key(path, key);
    let r = f(path);
    path.truncate(len);
    r
}

/// [`under_key`] for `[i]`.
fn under_index<R>(path: &mut String, i: usize, f: impl FnOnce(&mut String) -> R) -> R {
    let len = path.len();
    push_index(path, i);
    let r = f(path);
    path.truncate(len);
    r
}

/// Extends `path` by `.key` (`key` at the root): [`join`] in place.
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// Extends `path` by `[i]`: [`item_path`] in place.
fn push_index(path: &mut String, i: usize) {
    path.push('[');
    push_decimal(path, i);
    path.push(']');
}

/// `n` in decimal (at most 20 digits deep).
fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from_digit((n % 10) as u32, 10).unwrap_or('0'));
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        // The apiserver decodes a whole number beyond int64 as a float64.
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The JSON type and the Go format kube-openapi infers from a decoded value.
fn go_format(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Number(n) if n.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        other => (json_type(other), ""),
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() {
        "<nil>"
    } else {
        path
    }
}

// The order of checks is kube-openapi's `SchemaValidator`: type, string
// (maxLength, minLength, pattern: the first failure only), format, number,
// slice (items, then minItems, maxItems), enum, object (min/maxProperties,
// properties, then required). A type failure does not stop the enum check.
//
// `path` is one buffer for the whole walk ([`under_key`]).
fn walk(schema: &Value, value: &Value, old: Option<&Value>, path: &mut String, out: &mut Pass) {
    if out.errors.len() >= MAX_SCHEMA_ERRORS {
        return;
    }
    // Ratcheting (KEP-4008, GA in 1.33): an unchanged value is not re-validated.
    if old.is_some_and(|o| correlated_equal(schema, value, o)) {
        return;
    }
    let shown = display_path(path);
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        if let Some(t) = schema.get("type").and_then(Value::as_str) {
            // go-openapi's InvalidType carries the actual type's name as its value.
            out.errors.push(FieldError::type_invalid(
                shown,
                "\"null\"".to_string(),
                format!("{shown} in body must be of type {t}: \"null\""),
            ));
        }
        check_enum(schema, value, shown, out);
        return;
    }
    let typed = check_type(schema, value, shown, out);
    if value.is_number() && !matches!(typed, Typed::Settled) {
        check_number(schema, value, shown, out);
    }
    match typed {
        Typed::Yes => {}
        Typed::No => return check_enum(schema, value, shown, out),
        Typed::Settled => return,
    }
    match value {
        Value::String(s) => {
            check_string(schema, s, value, shown, out);
            check_enum(schema, value, shown, out);
        }
        Value::Array(items) => {
            check_array(schema, items, old, path, out);
            check_enum(schema, value, display_path(path), out);
        }
        Value::Object(obj) => {
            check_enum(schema, value, shown, out);
            check_object(schema, obj, old, path, out);
        }
        _ => check_enum(schema, value, shown, out),
    }
}

/// minItems/maxItems or minProperties/maxProperties: go-openapi's
/// TooFew*/TooMany* carry the actual count; apiextensions turns the second
/// into field.TooMany.
fn check_count(schema: &Value, (min_key, max_key, what): (&str, &str, &str), len: usize, shown: &str, out: &mut Pass) {
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64) {
        if (len as u64) < min {
            out.errors.push(FieldError::invalid(
                shown,
                len.to_string(),
                format!("{shown} in body should have at least {min} {what}"),
            ));
        }
    }
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64) {
        if len as u64 > max {
            out.errors.push(FieldError::too_many(shown, len, max));
        }
    }
}

/// What the type check left to do.
enum Typed {
    /// The type matches: every other check applies.
    Yes,
    /// A type error was reported: only the enum check still applies.
    No,
    /// Passed as kube-openapi's format quirk lets it, and fully checked.
    Settled,
}

/// The type check, as kube-openapi's typeValidator does it with the format
/// the apiserver kept (see [`kept_format`]): a value of another type is named
/// by its Go format when the schema has a format (`must be of type
/// date-time: "int64"`, from 1.36 also `must be of type int64: "float64"`),
/// by its JSON type otherwise; a string or a list passes a non-numeric
/// format's type check (nothing else then applies to it).
fn check_type(schema: &Value, value: &Value, shown: &str, out: &mut Pass) -> Typed {
    let Some(t) = schema.get("type").and_then(Value::as_str) else { return Typed::Yes };
    let format = kept_format(schema, t, out.version);
    let (actual, actual_format) = go_format(value);
    let float_int = actual == "number" && t == "integer" && value.as_f64().is_some_and(is_json_integer);
    let int_float = actual == "integer" && t == "number";
    if t == actual || float_int || int_float {
        return Typed::Yes;
    }
    let stringish = value.is_string() || value.is_array();
    if !format.is_empty() && !stringish && actual_format != format {
        out.errors.push(FieldError::type_invalid(
            shown,
            format!("\"{actual_format}\""),
            format!("{shown} in body must be of type {format}: \"{actual_format}\""),
        ));
        return Typed::No;
    }
    if !format.is_empty() && stringish && t != "number" && t != "integer" {
        check_enum(schema, value, shown, out);
        return Typed::Settled;
    }
    out.errors.push(FieldError::type_invalid(
        shown,
        format!("\"{actual}\""),
        format!("{shown} in body must be of type {t}: \"{actual}\""),
    ));
    Typed::No
}

/// The format the apiserver's schema keeps for type `t`: a string's format
/// always (our schemas use only `date-time`, supported by every version);
/// from 1.36 an integer's `int32`/`int64` and a number's `float`/`double`
/// (apiextensions-apiserver `StripUnsupportedFormatsPostProcessorForVersion`;
/// 1.35 and older strip them); no other.
fn kept_format<'s>(schema: &'s Value, t: &str, version: KubernetesVersion) -> &'s str {
    let format = schema.get(keyword::format()).and_then(Value::as_str).unwrap_or_default();
    let kept = match t {
        "string" => true,
        "integer" => version.keeps_numeric_formats() && matches!(format, "int32" | "int64"),
        "number" => version.keeps_numeric_formats() && matches!(format, "float" | "double"),
        _ => false,
    };
    if kept {
        format
    } else {
        ""
    }
}

/// go-openapi's `swag.IsFloat64AJSONInteger` (v0.23): within ±(2⁵³−1), and
/// equal to its truncation or within a relative error of 1e-9 of it (so
/// `1000000000.5` counts as an integer there). Go's `uint64(f)` of a negative
/// float on amd64 wraps the `int64` truncation, as `(f as i64) as u64` does.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    const EPSILON: f64 = 1e-9;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    let truncated = f as i64;
    let g = truncated as u64 as f64;
    let diff = (f - g).abs();
    let smallest = f64::from_bits(1);
    if f == g || f == truncated as f64 {
        return true;
    }
    if f == 0.0 || g == 0.0 || diff < smallest {
        return diff < EPSILON * smallest;
    }
    diff / (f.abs() + g.abs()).min(f64::MAX) < EPSILON
}

/// kube-openapi's numberValidator, which applies to every number whatever the
/// type check said: from 1.36 the value's range for the schema's numeric type
/// and format (`Checked value must be of type integer with format int64 in
/// <path>`: a plain error, which apiextensions reports on the validation's
/// root with an empty value), then the minimum.
fn check_number(schema: &Value, value: &Value, shown: &str, out: &mut Pass) {
    if out.version.checks_number_range() {
        let t = schema.get("type").and_then(Value::as_str).unwrap_or_default();
        if let Some(why) = out_of_range(value, t, kept_format(schema, t, out.version)) {
            out.errors.push(FieldError::invalid(
                "<nil>",
                "\"\"".to_string(),
                format!("Checked value {why} in {shown}"),
            ));
        }
    }
    if let (Some(min), Some(v)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if v < min {
            out.errors.push(FieldError::invalid(
                shown,
                render_value(value),
                format!("{shown} in body should be greater than or equal to {}", schema["minimum"]),
            ));
        }
    }
}

/// kube-openapi's `IsValueValidAgainstRange` for a schema of type `t` with
/// the kept `format`: whether the value, printed as Go prints it, converts to
/// the type (a float64 never converts to an integer unless it prints whole).
fn out_of_range(value: &Value, t: &str, format: &str) -> Option<String> {
    let fits = match (t, format) {
        ("integer", "int32") => as_go_integer(value).is_some_and(|i| i32::try_from(i).is_ok()),
        ("integer", _) => as_go_integer(value).is_some(),
        ("number", "float") => value.as_f64().is_some_and(|f| f.abs() <= f64::from(f32::MAX)),
        _ => true,
    };
    if fits {
        None
    } else if format.is_empty() {
        Some(format!("must be of type {t} (default format)"))
    } else {
        Some(format!("must be of type {t} with format {format}"))
    }
}

/// The value as an int64 the way Go's `strconv.ParseInt` reads what
/// `swag.FormatFloat64`/`FormatInt64` printed (`'f'` format: never an
/// exponent): an int64 itself, or a whole float64 within int64's range.
fn as_go_integer(value: &Value) -> Option<i64> {
    if let Some(i) = value.as_i64() {
        return Some(i);
    }
    let f = value.as_f64()?;
    // strconv.FormatFloat(f, 'f', -1, 64) for |f| < 1e21 is plain digits.
    (f.fract() == 0.0 && f.abs() < 1e21 && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

fn check_enum(schema: &Value, value: &Value, shown: &str, out: &mut Pass) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            // `field.Error` prints a list or an object as its JSON (a string
            // quoted, a number or boolean bare, as everywhere).
            out.errors.push(FieldError::not_supported(shown, error_value(value), allowed));
        }
    }
}

fn check_string(schema: &Value, s: &str, value: &Value, shown: &str, out: &mut Pass) {
    let chars = s.chars().count() as u64;
    // kube-openapi's stringValidator stops at its first failure.
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if chars > max {
            out.errors.push(FieldError::too_long(shown, max));
            return check_format(schema, s, value, shown, out);
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if chars < min {
            out.errors.push(FieldError::invalid(
                shown,
                render_value(value),
                format!("{shown} in body should be at least {min} chars long"),
            ));
            return check_format(schema, s, value, shown, out);
        }
    }
    if let Some(pattern) = schema.get(keyword::pattern()).and_then(Value::as_str) {
        match regex_cache::get(pattern) {
            Ok(re) if re.is_match(s) => {}
            Ok(_) => out.errors.push(FieldError::invalid(
                shown,
                render_value(value),
                format!("{shown} in body should match '{pattern}'"),
            )),
            // go-openapi reports a pattern it cannot compile on the value.
            Err(e) => out.errors.push(FieldError::invalid(
                shown,
                render_value(value),
                format!("{shown} in body should match '{pattern}, but pattern is invalid: {e}'"),
            )),
        }
    }
    check_format(schema, s, value, shown, out);
}

/// `format: date-time` (the only format our schemas use): go-openapi's
/// `InvalidType(path, in, "date-time", value)`, a type error.
fn check_format(schema: &Value, s: &str, value: &Value, shown: &str, out: &mut Pass) {
    if schema.get(keyword::format()).and_then(Value::as_str) == Some("date-time")
        && crate::time::parse_rfc3339(s).is_err()
    {
        out.errors.push(FieldError::type_invalid(
            shown,
            render_value(value),
            format!("{shown} in body must be of type date-time: {}", render_value(value)),
        ));
    }
}

fn check_array(schema: &Value, items: &[Value], old: Option<&Value>, path: &mut String, out: &mut Pass) {
    if let Some(item_schema) = schema.get("items") {
        check_items(schema, item_schema, items, old, path, out);
    }
    check_count(schema, ("minItems", "maxItems", "items"), items.len(), display_path(path), out);
}

fn check_items(
    schema: &Value,
    item_schema: &Value,
    items: &[Value],
    old: Option<&Value>,
    path: &mut String,
    out: &mut Pass,
) {
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let map_keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Correlate with the old list the way ratcheting does: by key for
    // list-type map, by value for set; atomic lists do not correlate. The old
    // list is indexed once, so this is linear in both lists.
    let identity = |i: &Value| match list_type {
        Some("map") => Some(canonical::key(&map_key(i, &map_keys))),
        Some("set") => Some(canonical::key(i)),
        _ => None,
    };
    let old_items = old.and_then(Value::as_array).filter(|_| matches!(list_type, Some("map" | "set")));
    let old_index = old_items.map(|o| canonical::FirstByKey::new(o, identity));
    for (i, item) in items.iter().enumerate() {
        let correlated = old_index.as_ref().and_then(|index| identity(item).and_then(|k| index.get(&k)));
        under_index(path, i, |path| walk(item_schema, item, correlated, path, out));
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

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
}

/// Whether `new` is unchanged from `old` as apiextensions' ratcheting
/// decides it (`CorrelatedObject.CachedDeepEqual`), which is stricter than
/// equality: an object is unchanged only if every one of its fields has a
/// schema (a field kept by `x-kubernetes-preserve-unknown-fields`, or the
/// root's `apiVersion`/`kind`/`metadata`, makes it "changed"); the items of
/// a list-type map are matched by their keys (order does not matter); any
/// other list, and a scalar, by plain equality.
pub fn correlated_equal(schema: &Value, new: &Value, old: &Value) -> bool {
    match (new, old) {
        (Value::Object(n), Value::Object(o)) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            n.len() == o.len()
                && n.iter().all(|(k, v)| {
                    let sub = props.and_then(|p| p.get(k)).or(additional);
                    matches!((o.get(k), sub), (Some(ov), Some(s)) if correlated_equal(s, v, ov))
                })
        }
        (Value::Array(n), Value::Array(o)) => match (list_map_keys(schema), schema.get("items")) {
            (Some(keys), Some(items)) => {
                n.len() == o.len() && {
                    let index = MapListIndex::new(o, &keys);
                    n.iter().all(|item| index.get(item).is_some_and(|old_item| correlated_equal(items, item, old_item)))
                }
            }
            _ => n == o,
        },
        _ => new == old,
    }
}

/// The `x-kubernetes-list-map-keys` of a list-type map schema.
pub fn list_map_keys(schema: &Value) -> Option<Vec<&str>> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys = schema.get("x-kubernetes-list-map-keys").and_then(Value::as_array)?;
    Some(keys.iter().filter_map(Value::as_str).collect())
}

/// The items of an old list-type map by their keys, as the apiserver's map
/// list finds the old item of a new one: the new item must be an object with
/// every key set to a scalar; the first old item with equal keys. Built once
/// (linear), then O(1) a lookup.
pub struct MapListIndex<'a, 'k> {
    keys: &'k [&'k str],
    first: canonical::FirstByKey<'a>,
}

impl<'a, 'k> MapListIndex<'a, 'k> {
    pub fn new(old: &'a [Value], keys: &'k [&'k str]) -> Self {
        let first = canonical::FirstByKey::new(old, |o| map_list_key(o, keys, |_| true));
        Self { keys, first }
    }

    /// The first old item whose keys equal `item`'s (every key a scalar).
    pub fn get(&self, item: &Value) -> Option<&'a Value> {
        let scalar = |v: &Value| matches!(v, Value::Bool(_) | Value::Number(_) | Value::String(_));
        self.first.get(&map_list_key(item, self.keys, scalar)?)
    }
}

/// The canonical key of a list-type map item: its key fields, each present
/// and accepted by `ok`; `None` for a non-object or no keys.
fn map_list_key(item: &Value, keys: &[&str], ok: impl Fn(&Value) -> bool) -> Option<String> {
    if keys.is_empty() || !item.is_object() {
        return None;
    }
    let mut out = String::new();
    for k in keys {
        let v = item.get(*k).filter(|v| ok(v))?;
        out.push_str(&canonical::key(v));
    }
    Some(out)
}

/// The JSON fields of `metav1.ObjectMeta`.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn check_object(schema: &Value, obj: &Map<String, Value>, old: Option<&Value>, path: &mut String, out: &mut Pass) {
    check_count(schema, ("minProperties", "maxProperties", "properties"), obj.len(), display_path(path), out);
    // Unknown fields are not the walk's: the object it sees is pruned.
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in obj {
        if let Some(child) = props.and_then(|p| p.get(k)).or(additional) {
            under_key(path, k, |path| walk(child, v, old.and_then(|o| o.get(k)), path, out));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                out.errors.push(FieldError::required(join(path, r)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_are_printed_as_format_would() {
        for i in [0usize, 1, 9, 10, 11, 99, 100, 4096, 1_000_000_007, usize::MAX] {
            assert_eq!(item_path("spec.list", i), format!("spec.list[{i}]"));
            assert_eq!(item_path("", i), format!("[{i}]"));
        }
        assert_eq!(join("", "spec"), "spec");
        assert_eq!(join("spec", "storage"), "spec.storage");
        assert_eq!(join("spec.l[3]", "x.y"), "spec.l[3].x.y");
        // The walks that keep one path buffer print the same paths.
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "l": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "array", "items": {
                "type": "object", "properties": {"ok": {"type": "string"}}}}}}}}});
        let v = json!({"spec": {"l": [[{"ok": "a"}], [{"ok": "a", "x": 1}, {"y": 2}], [{"ok": "a"}]]}});
        assert_eq!(unknown_fields(&schema, &v), vec!["spec.l[1][0].x", "spec.l[1][1].y"]);
        assert_eq!(run(schema, v, None), vec!["spec.l[2]: Duplicate value: [{\"ok\":\"a\"}]"]);
    }

    fn run(schema: Value, v: Value, old: Option<Value>) -> Vec<String> {
        let mut out = SchemaOutcome::default();
        let v = prune_nulls(&schema, &v);
        validate(&schema, &v, old.as_ref(), KubernetesVersion::default(), &mut out);
        out.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn errors_are_capped_and_the_answer_says_so() {
        let s = json!({"type":"object","properties":{"l":{"type":"array","items":{"type":"string"}}}});
        let many = json!({"l": vec![json!(0); MAX_SCHEMA_ERRORS + 50]});
        let errors = run(s.clone(), many, None);
        assert_eq!(errors.len(), MAX_SCHEMA_ERRORS + 1, "{:?}", errors.last());
        assert!(errors[MAX_SCHEMA_ERRORS - 1]
            .starts_with(&format!("l[{}]: Invalid value: \"integer\"", MAX_SCHEMA_ERRORS - 1)));
        assert!(errors[MAX_SCHEMA_ERRORS].contains("only the first 256 are reported"), "{:?}", errors.last());
        // Below the cap nothing is added.
        let few = json!({"l": vec![json!(0); 3]});
        assert_eq!(run(s, few, None).len(), 3);
        // Unknown fields likewise.
        let schema =
            json!({"type":"object","properties":{"k":{"type":"array","items":{"type":"object","properties":{}}}}});
        let wide: serde_json::Map<String, Value> =
            (0..MAX_SCHEMA_ERRORS + 10).map(|i| (format!("u{i}"), json!(1))).collect();
        assert_eq!(unknown_fields(&schema, &json!({"k": [wide]})).len(), MAX_SCHEMA_ERRORS);
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
    fn unknown_fields_are_pruned_as_the_walk_reports_them() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "map": {"type": "object", "additionalProperties": {"type": "string"}}}});
        let v = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n"},
            "spec": {"a": "x", "b": 1}, "open": {"z": 1}, "map": {"k": "v"}, "extra": true});
        assert_eq!(unknown_fields(&schema, &v), vec!["extra".to_string(), "spec.b".to_string()]);
        let wrong = json!({"metadata": {"name": "n", "bogus": 1}, "spec": {"a": {"x": 1}}, "l": 1});
        assert_eq!(unknown_fields(&schema, &wrong), vec!["l", "metadata.bogus", "spec.a.x"]);
        assert_eq!(
            prune_unknown(&schema, &v),
            json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n"},
                "spec": {"a": "x"}, "open": {"z": 1}, "map": {"k": "v"}})
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
            // go-openapi's TooFewItems/TooFewProperties carry the actual count
            // (as `spec.x: Invalid value: 0: spec.x in body should have at least 1 items`).
            vec![
                "l: Invalid value: 0: l in body should have at least 1 items",
                "o: Invalid value: 0: o in body should have at least 1 properties"
            ]
        );
        let s = json!({"type":"object","properties":{"o":{"type":"object","maxProperties":1},"n":{"type":"string"},"e":{"type":"string","enum":["a"]}}});
        assert_eq!(
            run(s, json!({"o":{"a":1,"b":2},"n":5,"e":7}), None),
            vec![
                r#"e: Invalid value: "integer": e in body must be of type string: "integer""#,
                r#"e: Unsupported value: 7: supported values: "a""#,
                r#"n: Invalid value: "integer": n in body must be of type string: "integer""#,
                "o: Too many: 2: must have at most 1 item",
            ]
        );
    }

    #[test]
    fn string_checks_stop_at_the_first_failure_and_required_comes_last() {
        let s = json!({"type":"object","required":["z"],"properties":{"a":{"type":"string","maxLength":2,"pattern":"^b$"}}});
        assert_eq!(
            run(s, json!({"a":"aaa"}), None),
            vec!["a: Too long: may not be more than 2 bytes", "z: Required value"]
        );
    }

    #[test]
    fn list_map_duplicates_show_the_key_as_json() {
        let s = json!({"type":"object","properties":{"c":{"type":"array","x-kubernetes-list-type":"map",
            "x-kubernetes-list-map-keys":["type"],"items":{"type":"object"}}}});
        let v = json!({"c":[{"type":"A"},{"type":"A"},{"type":"A"}]});
        assert_eq!(run(s.clone(), v.clone(), None), vec![r#"c[1]: Duplicate value: {"type":"A"}"#]);
        assert_eq!(go_json(&json!({"b": "<&>", "a": [1, null]})), r#"{"a":[1,null],"b":"\u003c\u0026\u003e"}"#);
        assert_eq!(error_value(&json!("x")), r#""x""#);
        // Ratcheting: an old object that already had the duplicate is not judged again.
        assert!(run(s, v.clone(), Some(json!({"c":[{"type":"A"},{"type":"A"}]}))).is_empty());
    }

    #[test]
    fn list_map_items_that_are_not_objects_are_named_and_no_duplicate_is_looked_for() {
        let s = json!({"type":"object","properties":{"c":{"type":"array","x-kubernetes-list-type":"map",
            "x-kubernetes-list-map-keys":["type"],"items":{"type":"object"}}}});
        let mut out = SchemaOutcome::default();
        list_errors(&s, &json!({"c":[{"type":"A"},null,12,"x",{"type":"A"}]}), "", &mut out.errors);
        let texts: Vec<String> = out.errors.iter().map(ToString::to_string).collect();
        assert_eq!(texts, vec!["c[2]: Invalid value: 12: must be an object for an array of list-type map"]);
        let mut out = SchemaOutcome::default();
        list_errors(&s, &json!({"c":[{"type":"A"},{"type":"B"}]}), "", &mut out.errors);
        assert!(out.errors.is_empty(), "objects only: nothing to say");
    }

    #[test]
    fn enum_failures_show_a_list_or_an_object_as_json_and_redact_urls() {
        let s = json!({"type":"object","properties":{"e":{"type":"string","enum":["S3"]}}});
        let errors = run(s.clone(), json!({"e":{"a":[1,"b"]}}), None);
        assert!(
            errors.contains(&r#"e: Unsupported value: {"a":[1,"b"]}: supported values: "S3""#.to_string()),
            "{errors:?}"
        );
        let errors = run(s, json!({"e":["https://h/p?X-Amz-Signature=secret"]}), None);
        assert!(errors.iter().any(|e| e.contains(r#"["https://h/p?\u003credacted\u003e"]"#)), "{errors:?}");
        assert!(!errors.iter().any(|e| e.contains("secret")), "{errors:?}");
    }

    #[test]
    fn unchanged_means_every_field_has_a_schema_and_map_items_match_by_key() {
        let s = json!({"type":"object","x-kubernetes-preserve-unknown-fields":true,"properties":{
            "a":{"type":"string"},
            "l":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["k"],
                 "items":{"type":"object","properties":{"k":{"type":"string"},"v":{"type":"string"}}}}}});
        let v = json!({"a":"x","l":[{"k":"1","v":"a"},{"k":"2","v":"b"}]});
        assert!(correlated_equal(&s, &v, &v));
        let reordered = json!({"a":"x","l":[{"k":"2","v":"b"},{"k":"1","v":"a"}]});
        assert!(correlated_equal(&s, &reordered, &v), "list-type map items match by key");
        let kept = json!({"a":"x","extra":1});
        assert!(!correlated_equal(&s, &kept, &kept), "a field without a schema is never unchanged");
        assert!(!correlated_equal(&s, &json!({"a":"y"}), &json!({"a":"x"})));
        // Ratcheting follows: an invalid unchanged value under an unknown-field-keeping
        // object is judged again.
        let schema = json!({"type":"object","x-kubernetes-preserve-unknown-fields":true,"required":["r"],
            "properties":{"r":{"type":"string"}}});
        let old = json!({"extra":1});
        assert_eq!(run(schema, old.clone(), Some(old)), vec!["r: Required value"]);
    }
}
