//! Local evaluation of a CRD's OpenAPI schema and its CEL rules, with the
//! apiserver's semantics and message shapes.
//!
//! Why not just kube-cel's `Validator`: it evaluates only the CEL rules (no
//! `required`, `enum`, lengths or counts), compiles `matches()` regexes on
//! every call, and has no update ratcheting. This module uses kube-cel to
//! compile the rules once ([`kube_cel::compile_schema`]) and the Kubernetes
//! CEL libraries, and adds the rest so that a user sees the same errors
//! offline as from kube-apiserver.

mod canonical;
mod cel_direct;
mod cel_eval;
mod convert;
mod field_error;
mod keyword;
mod object_meta;
pub(crate) mod regex_cache;
mod rule_tree;
/// The seeded generator the adversarial tests share (tests only).
#[cfg(test)]
#[path = "../../tests/common/xorshift.rs"]
pub(crate) mod xorshift;
pub use rule_tree::RuleIds;
mod structural;
mod version;

pub use field_error::{go_quote, redact_url, redact_urls_in, ErrorType, FieldError};
pub use structural::MAX_SCHEMA_ERRORS;
pub use version::KubernetesVersion;

use serde_json::Value;

/// What a request validates: the whole object (CREATE, UPDATE), or its
/// status through the `status` subresource. The apiserver validates the
/// status of a status UPDATE against the status schema on its own, so the
/// OpenAPI messages name fields relative to `status`
/// (`status.encryptionMetadata: … encryptionMetadata in body should …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scope {
    #[default]
    Object,
    StatusSubresource,
}

/// A schema compiled once: structural checks read the JSON schema, CEL rules
/// are precompiled programs. A clone is a deep copy of the schema and the
/// rule tree (sharing the compiled programs): the Kubewarden module's
/// pre-initialisation copies each schema into one contiguous block
/// (`admission::compact`).
///
/// The copy is laid out for the reads of a request: the rule tree first,
/// then the JSON schema with each object's keys and scalars before its
/// subtrees ([`keys_first`]), so the last of it is the subtree of the last property,
/// `status`, which a request without a status does not read; a copy's tail
/// that spills into another 64 KiB window then costs a fresh instance
/// nothing (issue #35).
pub struct CompiledCrdSchema {
    /// Only the nodes with rules; each rule compiled on first use.
    rules: Option<rule_tree::RuleNode>,
    schema: Value,
}

impl Clone for CompiledCrdSchema {
    fn clone(&self) -> Self {
        let rules = self.rules.clone();
        Self { rules, schema: keys_first(&self.schema) }
    }
}

/// A deep copy of `v` that allocates each object's map, keys and scalar
/// values (and lists of scalars) before its objects and other lists, depth
/// first. A lookup reads the keys up to the one it wants, and a check reads
/// a node's scalars (`type`, `format`, `pattern`, `required`) together: they
/// stay next to each other instead of each sitting after the whole subtree
/// of the key before it.
fn keys_first(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            // Lists of scalars (`required`, `enum`) count as scalars.
            let nested = |v: &Value| match v {
                Value::Object(_) => true,
                Value::Array(items) => items.iter().any(|i| i.is_object() || i.is_array()),
                _ => false,
            };
            let mut copy: serde_json::Map<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), if nested(v) { Value::Null } else { v.clone() })).collect();
            for (key, value) in map.iter().filter(|(_, v)| nested(v)) {
                if let Some(slot) = copy.get_mut(key) {
                    *slot = keys_first(value);
                }
            }
            Value::Object(copy)
        }
        Value::Array(items) => Value::Array(items.iter().map(keys_first).collect()),
        other => other.clone(),
    }
}

impl std::fmt::Debug for CompiledCrdSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledCrdSchema").finish_non_exhaustive()
    }
}

/// Removes `keywords` from every schema node: the `description`s (no check
/// reads one, and they are most of a schema's bytes: a request walking the
/// schema would step over them in memory), and once the rule tree holds
/// them, the `x-kubernetes-validations` (nothing reads them from the JSON
/// schema after that; in the Kubewarden module their copy took ~13 KiB of
/// the 64 KiB window a backup request reads, room the regexes' dense
/// tables now use, issue #35). Only schema keywords are touched: a property
/// named `description`, a default or an enum value stays as it is.
fn strip_keywords(node: &mut Value, keywords: &[&str]) {
    let Value::Object(map) = node else { return };
    keywords.iter().for_each(|k| {
        map.remove(*k);
    });
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(|p| strip_keywords(p, keywords));
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = map.get_mut(key) {
            strip_keywords(child, keywords);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(|c| strip_keywords(c, keywords));
        }
    }
}

/// The outcome of validating one object.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SchemaOutcome {
    /// Violations, in the order the apiserver reports them (schema first, then CEL).
    pub errors: Vec<FieldError>,
    /// Fields that are not in the schema (the apiserver prunes them; kubectl warns).
    pub unknown_fields: Vec<String>,
    /// Rules that are false on a value the UPDATE left unchanged (ratcheting):
    /// the apiserver lets them pass and sends each as a `Warning` header
    /// (`<field>: <error body>`), after the unknown-field warnings.
    pub ratcheted: Vec<FieldError>,
}

impl CompiledCrdSchema {
    /// Prepares `schema`: every `x-kubernetes-validations` rule is compiled
    /// once, on first use. Compilation errors surface as validation errors at
    /// evaluation time, so a bad rule can never pass silently (a test compiles
    /// every rule of every schema).
    pub fn compile(schema: Value) -> Self {
        Self::compile_named(schema, |_, _| None)
    }

    /// [`Self::compile`], each rule named by `ids` (its errors carry the id).
    pub fn compile_named(mut schema: Value, ids: rule_tree::RuleIds) -> Self {
        strip_keywords(&mut schema, &["description"]);
        let rules = rule_tree::RuleNode::build(&schema, ids);
        strip_keywords(&mut schema, &["x-kubernetes-validations"]);
        Self { schema, rules }
    }

    /// Every rule of the schema, in tree order.
    fn rules(&self) -> Vec<&rule_tree::LazyRule> {
        fn visit<'a>(n: &'a rule_tree::RuleNode, out: &mut Vec<&'a rule_tree::LazyRule>) {
            out.extend(n.rules.iter());
            n.properties.values().for_each(|c| visit(c, out));
            n.items.iter().chain(n.additional.iter()).for_each(|c| visit(c, out));
        }
        let mut out = Vec::new();
        if let Some(r) = &self.rules {
            visit(r, &mut out);
        }
        out
    }

    /// Compiles every rule now; returns the ones that do not compile.
    pub fn compile_all(&self) -> Vec<String> {
        let rules = self.rules();
        // Each rule's direct form too (and its transition test, which reads the tree).
        rules.iter().for_each(|r| {
            r.direct();
            r.transition();
        });
        rules.into_iter().filter_map(|r| r.program().err().map(|e| format!("{}: {e}", r.rule))).collect()
    }

    /// The rules that carry no id (their message, or their rule), for the
    /// test that every upstream rule is named.
    pub fn unnamed_rules(&self) -> Vec<String> {
        let text = |r: &rule_tree::LazyRule| r.message.clone().unwrap_or_else(|| r.rule.clone());
        self.rules().into_iter().filter(|r| r.id.is_none()).map(text).collect()
    }

    /// Every regex this schema's checks use: OpenAPI `pattern`s and the
    /// literal patterns of `matches()` in its CEL rules (sorted, once each).
    pub fn patterns(&self) -> Vec<String> {
        fn schema_patterns(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(o) => {
                    if let Some(p) = o.get("pattern").and_then(Value::as_str) {
                        out.push(p.to_string());
                    }
                    o.values().for_each(|c| schema_patterns(c, out));
                }
                Value::Array(a) => a.iter().for_each(|c| schema_patterns(c, out)),
                _ => {}
            }
        }
        let mut patterns = Vec::new();
        schema_patterns(&self.schema, &mut patterns);
        for r in self.rules() {
            if let Ok(p) = r.program() {
                rule_tree::matches_literals(p.expression(), &mut patterns);
            }
        }
        patterns.sort();
        patterns.dedup();
        patterns
    }

    /// Compiles every regex of [`Self::patterns`] into the cache, so no
    /// request pays for a first compile; returns the patterns that do not compile.
    pub fn compile_regexes(&self) -> Vec<String> {
        self.patterns().into_iter().filter(|p| regex_cache::get(p).is_err()).collect()
    }

    /// The OpenAPI schema this was compiled from, without its descriptions
    /// and its rules (the rule tree holds those).
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// [`Self::validate_as`] with the messages of the newest tested version.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> SchemaOutcome {
        self.validate_as(object, old, KubernetesVersion::default(), Scope::Object)
    }

    /// Validates `object` (CREATE when `old` is None, UPDATE otherwise) the way
    /// kube-apiserver `version` does for a custom resource: OpenAPI schema
    /// checks with update ratcheting, then the CEL rules (transition rules only
    /// when the old value exists), unless a blocking schema error stops them.
    pub fn validate_as(
        &self,
        object: &Value,
        old: Option<&Value>,
        version: KubernetesVersion,
        scope: Scope,
    ) -> SchemaOutcome {
        let mut out = SchemaOutcome::default();
        // A CREATE's name is checked first, as by the apiserver's
        // custom-resource validator (an UPDATE cannot rename).
        if old.is_none() && scope == Scope::Object {
            out.errors.extend(object_meta::validate_name(object));
        }
        let pruned = structural::prune_nulls(&self.schema, object);
        let pruned_old = old.map(|o| structural::prune_nulls(&self.schema, o));
        // The apiserver prunes unknown fields when it decodes the request,
        // before any validation: the counts (`maxProperties`) and the rules
        // see the object without them (the old one is stored, so pruned).
        out.unknown_fields = structural::unknown_fields(&self.schema, &pruned);
        let known = (!out.unknown_fields.is_empty()).then(|| structural::prune_unknown(&self.schema, &pruned));
        let object = known.as_ref().unwrap_or(&pruned);
        let old_known = pruned_old
            .as_deref()
            .filter(|o| !structural::unknown_fields(&self.schema, o).is_empty())
            .map(|o| structural::prune_unknown(&self.schema, o));
        let old = old_known.as_ref().or(pruned_old.as_deref());
        // Then defaulting, on the request and on the stored object alike.
        let object = structural::apply_defaults(&self.schema, object);
        let object = object.as_ref();
        let old_defaulted = old.map(|o| structural::apply_defaults(&self.schema, o));
        let old = old_defaulted.as_deref();
        structural::validate(&self.schema, object, old, version, &mut out);
        if scope == Scope::StatusSubresource {
            out.errors.iter_mut().for_each(structural::relative_to_status);
        }
        // apiextensions' `hasBlockingErr`: a type, required, enum, maxLength,
        // maxItems or maxProperties violation means the object does not have
        // the shape the rules were written for; they are not run.
        if out.errors.iter().any(|e| e.kind.blocks_rules()) {
            out.errors.push(FieldError::invalid(
                "<nil>",
                "null".to_string(),
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
            return out;
        }
        if let Some(rules) = &self.rules {
            // The rules see the object without its unknown fields, as it will
            // be stored; the old object too (the apiserver's is stored, so
            // pruned already; `check --audit` gives the file's object as both).
            let findings = (&mut out.errors, &mut out.ratcheted);
            cel_eval::validate(rules, &self.schema, (object, old), version, findings, true);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_keys_first_copy_is_equal_to_its_original() {
        let v = json!({"properties": {"b": {"type": "string", "enum": ["x", null, 1.5]}, "a": [{"k": {}}, [], 7]},
            "type": "object", "": null, "x-kubernetes-validations": [{"rule": "self.a == 1"}], "n": -3, "t": true});
        assert_eq!(keys_first(&v), v);
        for s in [crate::crd::hcpetcdbackup_schema(), crate::crd::hostedcluster_schema()] {
            let s = s.expect("schema");
            assert_eq!(keys_first(&s), s);
        }
    }

    /// Descriptions go from every schema node, and the rules once the rule
    /// tree holds them; a field named `description` or
    /// `x-kubernetes-validations`, defaults and enum values stay, and the
    /// rules still run.
    #[test]
    fn compiling_drops_descriptions_and_rules_and_nothing_else() {
        let rule = json!([{"rule": "self != 'bad'", "message": "not bad"}]);
        let schema = json!({"type": "object", "description": "root", "x-kubernetes-validations": [{"rule": "true"}],
            "properties": {
            "description": {"type": "string", "description": "a field called description",
                "default": {"description": "kept"}, "enum": ["description", "bad"], "x-kubernetes-validations": rule},
            "x-kubernetes-validations": {"type": "string", "enum": ["x-kubernetes-validations"]},
            "list": {"type": "array", "description": "x", "items": {"type": "object", "description": "y",
                "properties": {"a": {"type": "string", "description": "z", "x-kubernetes-validations": rule}}}},
            "map": {"type": "object", "additionalProperties": {"type": "string", "description": "w"}},
            "union": {"anyOf": [{"type": "integer", "description": "v"}, {"type": "string"}], "not": {"description": "u"}}
        }});
        let compiled = super::CompiledCrdSchema::compile(schema);
        assert_eq!(
            compiled.schema(),
            &json!({"type": "object", "properties": {
                "description": {"type": "string", "default": {"description": "kept"}, "enum": ["description", "bad"]},
                "x-kubernetes-validations": {"type": "string", "enum": ["x-kubernetes-validations"]},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "union": {"anyOf": [{"type": "integer"}, {"type": "string"}], "not": {}}
            }})
        );
        // The rules of the dropped keyword still run, from the rule tree, on
        // a copy too (the Kubewarden module's).
        let copy = compiled.clone();
        for c in [&compiled, &copy] {
            let obj = json!({"metadata": {"name": "n"}, "description": "bad", "list": [{"a": "bad"}, {"a": "ok"}]});
            let outcome = c.validate(&obj, None);
            // In no set order (the rule tree's properties are a map, as the
            // apiserver's walk of a Go map).
            let mut fields: Vec<&str> = outcome.errors.iter().map(|e| e.field.as_str()).collect();
            fields.sort_unstable();
            assert_eq!(fields, ["description", "list[0].a"], "{:?}", outcome.errors);
            assert!(outcome.errors.iter().all(|e| e.detail == "not bad"), "{:?}", outcome.errors);
        }
        // A field called `description` is still known to the schema.
        let outcome = compiled.validate(&json!({"description": 3}), None);
        assert!(
            outcome.errors.iter().any(|e| e.field == "description" && e.detail.contains("must be of type string")),
            "{:?}",
            outcome.errors
        );
    }
}
