//! Evaluates precompiled `x-kubernetes-validations` rules with the apiserver's
//! semantics: `self` bound per node, `oldSelf` for transition rules only on
//! UPDATE when the old value exists, unchanged subtrees ratcheted, and errors
//! rendered as the apiserver of the chosen version renders them: 1.35+
//! `<path>: Invalid value: <value>: <message>` for a scalar and
//! `<path>: Invalid value: <message>` for an object or a list, earlier
//! `<path>: Invalid value: "<type>": <message>`.

use std::sync::Arc;

use kube_cel::{
    cel::{extractors::This, objects::Key, Context, ExecutionError, FunctionContext, Value as Cel},
    KubeCelExt,
};
use serde_json::Value;

use super::{
    convert::{child_by_index, child_by_key, field_schema, invalid_data, to_cel_typed},
    field_error::{redact_urls_in, render_value, ErrorType, FieldError},
    regex_cache,
    rule_tree::{LazyRule, Read, RuleNode},
    structural::{correlated_equal, item_path, join, list_map_keys, MapListIndex},
    version::KubernetesVersion,
};

/// `matches()` with the compiled regex cached (the stock one recompiles per call).
fn cached_matches(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    match regex_cache::get(&pattern) {
        Ok(re) => Ok(re.is_match(&this)),
        Err(err) => Err(ftx.error(format!("'{pattern}' not a valid regex:\n{err}"))),
    }
}

fn base_context() -> Context<'static> {
    let mut ctx = Context::default();
    ctx.register_all();
    ctx.add_function("matches", cached_matches);
    ctx
}

thread_local! {
    // cel contexts are not Sync; one per thread, built once.
    static BASE: Context<'static> = base_context();
}

/// Runs every compiled rule in `compiled` against `value` (and `old`), with
/// `schema` the schema `compiled` was built from. A rule that is false on a
/// value equal to its correlated old value is ratcheted: it goes to
/// `warnings` (the apiserver's `Warning` header), not `errors`. With
/// `direct`, rules with a direct form are decided by it where it answers
/// (always, but in the test that holds it to the interpreter).
pub fn validate(
    compiled: &RuleNode,
    schema: &Value,
    (value, old): (&Value, Option<&Value>),
    version: KubernetesVersion,
    (errors, warnings): (&mut Vec<FieldError>, &mut Vec<FieldError>),
    direct: bool,
) {
    BASE.with(|base| {
        let node = Node { json: value, schema, old, parent_unchanged: false, cel: None };
        let mut walker = Walker { base, version, errors, warnings, direct };
        walker.walk(compiled, node, "");
    });
}

/// What the interpreter evaluates a node's rules with: the node's CEL
/// value, the old one when a transition rule reads it, and a scope binding
/// them.
struct Interpreter<'b> {
    ctx: Context<'b>,
    this: Cel,
    old: Option<Cel>,
}

impl<'b> Interpreter<'b> {
    fn new(base: &'b Context<'static>, node: &Node<'_>, rules: &[LazyRule]) -> Self {
        let this = node.cel.clone().unwrap_or_else(|| to_cel_typed(node.json, node.schema));
        let mut ctx = base.new_inner_scope();
        ctx.add_variable_from_value("self", this.clone());
        // Only transition rules read `oldSelf`: it is converted for them alone.
        let old = node.old.filter(|_| rules.iter().any(|r| r.transition())).map(|o| to_cel_typed(o, node.schema));
        if let Some(old) = &old {
            ctx.add_variable_from_value("oldSelf", old.clone());
        }
        Self { ctx, this, old }
    }
}

/// What stays the same through one walk, and where its findings go.
struct Walker<'b, 'o> {
    base: &'b Context<'static>,
    version: KubernetesVersion,
    errors: &'o mut Vec<FieldError>,
    warnings: &'o mut Vec<FieldError>,
    /// Rules with a direct form are decided by it when it answers.
    direct: bool,
}

/// A node under evaluation, as apiextensions' CEL validator walks it:
///
/// * every node is evaluated, changed or not (an unchanged one only has its
///   false rules turned into warnings, and a rule that cannot be evaluated
///   is an error either way);
/// * `old` is the correlated old value (`oldSelf`): a property of the old
///   object, or the item of a list-type map with the same keys; items of
///   other lists have none;
/// * an uncorrelated node is ratcheted when its nearest correlated ancestor
///   is unchanged (`ratchetingOptions.shouldRatchetError`).
///
/// CEL values are made only where a rule needs them (and then shared with
/// the children): metadata, managedFields and other subtrees without rules
/// are never converted.
struct Node<'a> {
    json: &'a Value,
    schema: &'a Value,
    old: Option<&'a Value>,
    parent_unchanged: bool,
    cel: Option<Cel>,
}

impl Node<'_> {
    fn unchanged(&self) -> bool {
        match self.old {
            Some(old) => correlated_equal(self.schema, self.json, old),
            None => self.parent_unchanged,
        }
    }
}

impl Walker<'_, '_> {
    fn walk(&mut self, compiled: &RuleNode, mut node: Node<'_>, path: &str) {
        if node.json.is_null() {
            return; // rules validate only non-null values
        }
        let unchanged = node.unchanged();
        if !compiled.rules.is_empty() {
            self.evaluate_rules(&compiled.rules, &mut node, unchanged, path);
        }
        match node.json {
            Value::Object(obj) => {
                let props = node.schema.get("properties");
                let additional = node.schema.get("additionalProperties").filter(|a| a.is_object());
                // A child shares the parent's CEL value only where `to_cel_typed`
                // converted it under the schema the walk gives it; otherwise it
                // converts its own, so a child's value never depends on whether
                // its parent had rules to run (or which path decided them).
                let typed = node.schema.get("type").and_then(Value::as_str) == Some("object");
                let mut visit = |key: &str, child_json: &Value, child_rules: &RuleNode, child_schema: &Value| {
                    let same = typed && field_schema(node.schema, key).is_some_and(|s| std::ptr::eq(s, child_schema));
                    let child = Node {
                        json: child_json,
                        schema: child_schema,
                        old: node.old.and_then(|o| o.get(key)),
                        parent_unchanged: unchanged,
                        cel: node.cel.as_ref().filter(|_| same).and_then(|c| child_by_key(c, key)),
                    };
                    self.walk(child_rules, child, &join(path, key));
                };
                for (key, child_rules) in &compiled.properties {
                    if let (Some(child_json), Some(child_schema)) = (obj.get(key), props.and_then(|p| p.get(key))) {
                        visit(key, child_json, child_rules, child_schema);
                    }
                }
                if let (Some(rules), Some(schema)) = (compiled.additional.as_deref(), additional) {
                    for (key, child_json) in obj.iter().filter(|(k, _)| !compiled.properties.contains_key(*k)) {
                        visit(key, child_json, rules, schema);
                    }
                }
            }
            Value::Array(items) => {
                let (Some(item_rules), Some(item_schema)) = (compiled.items.as_deref(), node.schema.get("items"))
                else {
                    return;
                };
                let keys = list_map_keys(node.schema);
                // Only list-type map items correlate (by their keys); the old
                // list is indexed once, so this stays linear.
                let index =
                    keys.as_deref().and_then(|k| node.old.and_then(Value::as_array).map(|o| MapListIndex::new(o, k)));
                for (i, item_json) in items.iter().enumerate() {
                    let old = index.as_ref().and_then(|ix| ix.get(item_json));
                    let child = Node {
                        json: item_json,
                        schema: item_schema,
                        old,
                        parent_unchanged: unchanged,
                        // Typed items only under a typed list (as `to_cel_typed`).
                        cel: node
                            .cel
                            .as_ref()
                            .filter(|_| node.schema.get("type").and_then(Value::as_str) == Some("array"))
                            .and_then(|c| child_by_index(c, i)),
                    };
                    self.walk(item_rules, child, &item_path(path, i));
                }
            }
            _ => {}
        }
    }

    fn evaluate_rules(&mut self, rules: &[LazyRule], node: &mut Node<'_>, unchanged: bool, path: &str) {
        // The interpreter's state, made for the first rule the direct form
        // cannot decide (most nodes never need it: no CEL copy, no scope).
        let mut interp: Option<Interpreter<'_>> = None;
        let base = self.base;
        // Where the node's findings report: rendered only when a rule fails or breaks.
        let mut site: Option<Site<'_>> = None;
        let version = self.version;
        let node_ref = &*node;
        let mut site_of = || site.get_or_insert_with(|| Self::site(version, node_ref, unchanged, path)).clone();
        for rule in rules {
            if node_ref.old.is_none() && rule.transition() {
                continue; // transition rules run only on UPDATE with an old value
            }
            // `ruleErrorString`: the message when there is one, else the rule.
            let named = rule.message.as_deref().map(str::trim).unwrap_or(rule.rule.trim());
            let program = match rule.program() {
                Ok(p) => p,
                Err(e) => {
                    self.rule_broke(rule, &site_of(), format!("{e}: {}", rule.rule));
                    continue;
                }
            };
            let direct = rule.direct().filter(|_| self.direct);
            if let Some(holds) = direct.and_then(|d| d.eval(node_ref.json, node_ref.old, node_ref.schema)) {
                if !holds {
                    self.rule_failed(rule, &site_of());
                }
                continue;
            }
            let it = interp.get_or_insert_with(|| Interpreter::new(base, node_ref, rules));
            let result = program.execute(&it.ctx);
            // A rule that reads a value of the wrong type cannot be evaluated,
            // whatever cel made of it (cel-go fails the whole expression).
            let result = match touched_invalid(rule.reads(), node_ref.schema, &it.this, it.old.as_ref(), self.version) {
                Some(Touch::Error(text)) => {
                    self.rule_broke(rule, &site_of(), format!("{text} evaluating rule: {named}"));
                    continue;
                }
                // A set compared whole with a wrong-typed item: cel-go's set
                // equality compares the raw values and says "not equal".
                Some(Touch::Unequal) => Ok(Cel::Bool(false)),
                None => result,
            };
            match result {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => self.rule_failed(rule, &site_of()),
                Ok(other) => {
                    let text = format!("rule did not evaluate to bool: {other:?} evaluating rule: {named}");
                    self.rule_broke(rule, &site_of(), redact_urls_in(&text));
                }
                Err(e) => {
                    let text = eval_error_text(&e, &it.this);
                    self.rule_broke(rule, &site_of(), format!("{text} evaluating rule: {named}"))
                }
            }
        }
        // The CEL copy made for this node's rules is shared with its children.
        if let Some(it) = interp {
            if node.cel.is_none() {
                node.cel = Some(it.this);
            }
        }
    }

    /// Where the rules of `node` report: its path, and the value their errors show.
    fn site<'p>(version: KubernetesVersion, node: &Node<'_>, unchanged: bool, path: &'p str) -> Site<'p> {
        // Errors of the rules themselves (compile, evaluation) show the
        // schema type at the node; a rule that is false shows what the
        // version shows.
        let schema_type = node.schema.get("type").and_then(Value::as_str).unwrap_or_default();
        let type_value = format!("\"{schema_type}\"");
        let failed_value = if !version.cel_rule_shows_value() {
            type_value.clone()
        } else if schema_type == "object" || schema_type == "array" {
            String::new() // field.OmitValueType{}
        } else {
            render_value(node.json)
        };
        Site { path, shown: if path.is_empty() { "<nil>" } else { path }, type_value, failed_value, unchanged }
    }

    /// `rule` is false: an error, or a warning where ratcheting lets it pass.
    fn rule_failed(&mut self, rule: &LazyRule, site: &Site<'_>) {
        let field = match rule.field_path.as_deref() {
            Some(fp) if fp.starts_with('.') => format!("{}{fp}", site.path),
            Some(fp) => join(site.path, fp),
            None => site.shown.to_string(),
        };
        let message = rule.message.clone().unwrap_or_else(|| format!("failed rule: {}", rule.rule));
        let e =
            FieldError { rule_id: rule.id, ..rule_error(&field, &site.failed_value, rule.reason.as_deref(), message) };
        if !rule.transition() && site.unchanged {
            self.warnings.push(e);
        } else {
            self.errors.push(e);
        }
    }

    /// `rule` could not be evaluated: an error with its id.
    fn rule_broke(&mut self, rule: &LazyRule, site: &Site<'_>, detail: String) {
        self.errors
            .push(FieldError { rule_id: rule.id, ..FieldError::invalid(site.shown, site.type_value.clone(), detail) });
    }
}

/// Where one node's rules report.
#[derive(Clone)]
struct Site<'p> {
    path: &'p str,
    /// The path as errors show it (`<nil>` at the root).
    shown: &'p str,
    /// The schema type, quoted (errors of the rules themselves).
    type_value: String,
    /// What a false rule shows as its value (by Kubernetes version).
    failed_value: String,
    /// The UPDATE left the value unchanged (ratcheting).
    unchanged: bool,
}

/// What a rule meets on the paths it reads, beyond what cel does itself.
enum Touch {
    /// A conversion error: the rule cannot be evaluated.
    Error(String),
    /// A set list holding a wrong-typed item, compared whole: not equal.
    Unequal,
}

/// The conversion error a rule meets on one of the paths it reads, if any:
/// on the way to the end of a path, at its end, or (a whole-value
/// comparison) anywhere below it — except in a set list, which the
/// apiserver compares by raw value: unequal, or (before 1.37) a Go panic for
/// an item that cannot be hashed. From 1.37 (k8s.io/apiserver
/// `setElementKey`) a wrong-typed item is keyed by its conversion error,
/// which equals nothing: the comparison is false, whatever the item.
fn touched_invalid(
    reads: &[Read],
    schema: &Value,
    this: &Cel,
    old: Option<&Cel>,
    version: KubernetesVersion,
) -> Option<Touch> {
    reads.iter().find_map(|r| {
        let mut cur = if r.old { old? } else { this };
        let mut at = schema;
        for key in &r.path {
            if matches!(cur, Cel::Opaque(_)) {
                return invalid_data::first_in(cur).map(Touch::Error);
            }
            cur = match cur {
                Cel::Map(m) => m.map.get(&Key::from(key.as_str()))?,
                _ => return None,
            };
            at = at
                .get("properties")
                .and_then(|p| p.get(key.as_str()))
                .or_else(|| at.get("additionalProperties").filter(|a| a.is_object()))
                .unwrap_or(&Value::Null);
        }
        if matches!(cur, Cel::Opaque(_)) {
            return invalid_data::first_in(cur).map(Touch::Error);
        }
        if !r.whole {
            return None;
        }
        let set = at.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set");
        match cur {
            Cel::List(items) if set => {
                let bad = items.iter().find_map(|i| match i {
                    Cel::Opaque(o) => Some(o.runtime_type_name().to_string()),
                    _ => None,
                })?;
                let unhashable = bad.contains("got map[") || bad.contains("got []");
                Some(if unhashable && !version.set_equality_keys_any_item() {
                    let go = if bad.contains("got map[") { "map[string]interface {}" } else { "[]interface {}" };
                    Touch::Error(format!("internal error: runtime error: hash of unhashable type {go}"))
                } else {
                    Touch::Unequal
                })
            }
            _ => invalid_data::first_in(cur).map(Touch::Error),
        }
    })
}

fn rule_error(field: &str, type_value: &str, reason: Option<&str>, message: String) -> FieldError {
    let mut e = match reason {
        Some("FieldValueRequired") => FieldError::required(field),
        Some("FieldValueForbidden") => FieldError::forbidden(field, message.clone()),
        Some("FieldValueDuplicate") => FieldError::duplicate(field, type_value.to_string()),
        _ => FieldError::invalid(field, type_value.to_string(), message.clone()),
    };
    if e.kind == ErrorType::Required {
        e.detail = message;
    }
    e
}

/// The evaluation error as cel-go words it, with any URL it quotes
/// redacted. A rule that touched a value of the wrong type (an opaque
/// [`invalid_data`] value) fails with Kubernetes' conversion error
/// (`invalid data, expected string, got int64`), whatever operation found it.
fn eval_error_text(e: &ExecutionError, this: &Cel) -> String {
    use ExecutionError as E;
    let values: &[&Cel] = match e {
        E::UnsupportedBinaryOperator(_, a, b) | E::ValuesNotComparable(a, b) | E::UnsupportedIndex(a, b) => &[a, b],
        E::UnsupportedUnaryOperator(_, a)
        | E::UnsupportedKeyType(a)
        | E::UnsupportedMapIndex(a)
        | E::UnsupportedListIndex(a)
        | E::UnsupportedTargetType { target: a }
        | E::NotSupportedAsMethod { target: a, .. } => &[a],
        _ => &[],
    };
    if let Some(text) = values.iter().find_map(|v| invalid_data::first_in(v)) {
        return text;
    }
    // The type name cel quotes is the opaque value's own, never input.
    if let Some(text) = match e {
        E::UnexpectedType { got, .. } => invalid_data::named_in(got),
        _ => None,
    } {
        return text;
    }
    // Errors that name no value: the conversion error of `self`, if any.
    if matches!(e, E::NoSuchOverload | E::FunctionError { .. }) {
        if let Some(text) = invalid_data::first_in(this) {
            return text;
        }
    }
    let text = match e {
        E::NoSuchKey(k) => format!("no such key: {k}"),
        other => other.to_string(),
    };
    redact_urls_in(&text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{CompiledCrdSchema, KubernetesVersion, SchemaOutcome, Scope};
    use serde_json::Value;

    fn schema() -> CompiledCrdSchema {
        CompiledCrdSchema::compile(json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "bucket": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self.matches('^[a-z]+$')", "message": "bucket must be lower case"}]},
                "frozen": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "frozen is immutable"}]},
                "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [
                    {"rule": "self.size() < 4", "message": "tag too long"}]}},
                "rules": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "value": {"type": "string", "x-kubernetes-validations": [
                            {"rule": "self != 'bad'", "message": "value is bad"}]}}}}}}}}))
    }

    fn run(obj: Value, old: Option<Value>) -> SchemaOutcome {
        let v = KubernetesVersion::parse("1.35").expect("version");
        schema().validate_as(&obj, old.as_ref(), v, Scope::Object)
    }

    fn texts(errors: &[super::FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    fn obj(spec: Value) -> Value {
        json!({"metadata": {"name": "n"}, "spec": spec})
    }

    #[test]
    fn a_false_rule_on_an_unchanged_value_is_a_warning_on_update_and_an_error_on_create() {
        let bad = obj(json!({"bucket": "Upper"}));
        let created = run(bad.clone(), None);
        assert_eq!(texts(&created.errors), vec![r#"spec.bucket: Invalid value: "Upper": bucket must be lower case"#]);
        assert!(created.ratcheted.is_empty());
        let mut relabelled = bad.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        let updated = run(relabelled, Some(bad.clone()));
        assert!(updated.errors.is_empty(), "{:?}", updated.errors);
        assert_eq!(
            texts(&updated.ratcheted),
            vec![r#"spec.bucket: Invalid value: "Upper": bucket must be lower case"#]
        );
        // Changed to another bad value: an error again.
        let changed = run(obj(json!({"bucket": "Other"})), Some(bad));
        assert_eq!(changed.errors.len(), 1, "{:?}", changed.errors);
        assert!(changed.ratcheted.is_empty());
    }

    #[test]
    fn transition_rules_are_never_ratcheted() {
        let old = obj(json!({"frozen": "a"}));
        assert!(run(old.clone(), Some(old.clone())).errors.is_empty());
        let moved = run(obj(json!({"frozen": "b"})), Some(old));
        assert_eq!(texts(&moved.errors), vec![r#"spec.frozen: Invalid value: "b": frozen is immutable"#]);
    }

    #[test]
    fn a_wrong_typed_stored_value_fails_the_rules_that_read_it_even_unchanged() {
        // The schema ratchets the unchanged int; the rule still reads it.
        let stored = obj(json!({"bucket": 12}));
        let mut relabelled = stored.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        let out = run(relabelled, Some(stored));
        assert_eq!(
            texts(&out.errors),
            vec![
                r#"spec.bucket: Invalid value: "string": invalid data, expected string, got int64 evaluating rule: bucket must be lower case"#
            ]
        );
        assert!(out.ratcheted.is_empty());
    }

    #[test]
    fn items_of_an_atomic_list_ratchet_only_with_the_whole_list() {
        let old = obj(json!({"tags": ["toolong", "ok"]}));
        let same = run(old.clone(), Some(old.clone()));
        assert!(same.errors.is_empty());
        assert_eq!(same.ratcheted.len(), 1);
        // The list changed: the unchanged item is judged again.
        let grown = run(obj(json!({"tags": ["toolong", "ok", "new"]})), Some(old));
        assert_eq!(texts(&grown.errors), vec![r#"spec.tags[0]: Invalid value: "toolong": tag too long"#]);
    }

    #[test]
    fn items_of_a_list_type_map_correlate_by_key() {
        let old = obj(json!({"rules": [{"name": "a", "value": "bad"}]}));
        // Another item added before it: item "a" is unchanged, so ratcheted.
        let out = run(obj(json!({"rules": [{"name": "b", "value": "ok"}, {"name": "a", "value": "bad"}]})), Some(old));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(texts(&out.ratcheted), vec![r#"spec.rules[1].value: Invalid value: "bad": value is bad"#]);
    }
}
