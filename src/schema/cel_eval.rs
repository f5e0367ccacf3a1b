//! Evaluates precompiled `x-kubernetes-validations` rules with the apiserver's
//! semantics: `self` bound per node, `oldSelf` for transition rules only on
//! UPDATE when the old value exists, unchanged subtrees ratcheted, and errors
//! rendered as the apiserver of the chosen version renders them: 1.35+
//! `<path>: Invalid value: <value>: <message>` for a scalar and
//! `<path>: Invalid value: <message>` for an object or a list, earlier
//! `<path>: Invalid value: "<type>": <message>`.

use std::sync::Arc;

use kube_cel::{
    cel::{extractors::This, Context, ExecutionError, FunctionContext, Value as Cel},
    KubeCelExt,
};
use serde_json::Value;

use super::{
    convert::{child_by_index, child_by_key, to_cel},
    field_error::{render_value, ErrorType, FieldError},
    regex_cache,
    rule_tree::{LazyRule, RuleNode},
    structural::join,
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

/// Runs every compiled rule in `compiled` against `value` (and `old`).
pub fn validate(
    compiled: &RuleNode,
    value: &Value,
    old: Option<&Value>,
    version: KubernetesVersion,
    errors: &mut Vec<FieldError>,
) {
    BASE.with(|base| {
        let node = Node { json: value, old_json: old, cel: None, old_cel: None };
        let walker = Walker { base, version };
        walker.walk(compiled, node, "", errors);
    });
}

/// What stays the same through one walk.
struct Walker<'b> {
    base: &'b Context<'static>,
    version: KubernetesVersion,
}

/// A node under evaluation. CEL values are made only where a rule needs
/// them (and then shared with the children): metadata, managedFields and
/// other subtrees without rules are never converted.
struct Node<'a> {
    json: &'a Value,
    old_json: Option<&'a Value>,
    cel: Option<Cel>,
    old_cel: Option<Cel>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Walker<'_> {
    fn walk(&self, compiled: &RuleNode, mut node: Node<'_>, path: &str, errors: &mut Vec<FieldError>) {
        if node.old_json == Some(node.json) {
            return; // ratcheting: an unchanged value is not re-validated
        }
        if !compiled.rules.is_empty() {
            if node.cel.is_none() {
                node.cel = Some(to_cel(node.json));
            }
            if node.old_cel.is_none() {
                node.old_cel = node.old_json.map(to_cel);
            }
            self.evaluate_rules(&compiled.rules, &node, path, errors);
        }
        match node.json {
            Value::Object(obj) => {
                let mut visit = |key: &str, child_json: &Value, child_schema: &RuleNode| {
                    let child = Node {
                        json: child_json,
                        old_json: node.old_json.and_then(|o| o.get(key)),
                        cel: node.cel.as_ref().and_then(|c| child_by_key(c, key)),
                        old_cel: node.old_cel.as_ref().and_then(|c| child_by_key(c, key)),
                    };
                    self.walk(child_schema, child, &join(path, key), errors);
                };
                for (key, child_schema) in &compiled.properties {
                    if let Some(child_json) = obj.get(key) {
                        visit(key, child_json, child_schema);
                    }
                }
                if let Some(additional) = compiled.additional.as_deref() {
                    for (key, child_json) in obj.iter().filter(|(k, _)| !compiled.properties.contains_key(*k)) {
                        visit(key, child_json, additional);
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = compiled.items.as_deref() else {
                    return;
                };
                for (i, item_json) in items.iter().enumerate() {
                    // Items correlate with the old list only by equal value (sets);
                    // our schemas have no transition rules on list items.
                    let old_pos =
                        node.old_json.and_then(Value::as_array).and_then(|o| o.iter().position(|x| x == item_json));
                    let child = Node {
                        json: item_json,
                        old_json: old_pos.and_then(|p| node.old_json.and_then(|o| o.get(p))),
                        cel: node.cel.as_ref().and_then(|c| child_by_index(c, i)),
                        old_cel: old_pos.and_then(|p| node.old_cel.as_ref().and_then(|o| child_by_index(o, p))),
                    };
                    self.walk(item_schema, child, &format!("{path}[{i}]"), errors);
                }
            }
            _ => {}
        }
    }

    fn evaluate_rules(&self, rules: &[LazyRule], node: &Node<'_>, path: &str, errors: &mut Vec<FieldError>) {
        let shown = if path.is_empty() { "<nil>" } else { path };
        let mut ctx = self.base.new_inner_scope();
        ctx.add_variable_from_value("self", node.cel.clone().unwrap_or(Cel::Null));
        if let Some(old) = &node.old_cel {
            ctx.add_variable_from_value("oldSelf", old.clone());
        }
        // Errors of the rules themselves (compile, evaluation) always show the
        // schema type; a rule that is false shows what the version shows.
        let type_value = format!("\"{}\"", type_name(node.json));
        let failed_value = if !self.version.cel_rule_shows_value() {
            type_value.clone()
        } else if node.json.is_object() || node.json.is_array() {
            String::new() // field.OmitValueType{}
        } else {
            render_value(node.json)
        };
        for rule in rules {
            if rule.transition && node.old_cel.is_none() {
                continue; // transition rules run only on UPDATE with an old value
            }
            let field = match rule.field_path.as_deref() {
                Some(fp) if fp.starts_with('.') => format!("{path}{fp}"),
                Some(fp) => join(path, fp),
                None => shown.to_string(),
            };
            let program = match rule.program() {
                Ok(p) => p,
                Err(e) => {
                    errors.push(FieldError::invalid(field, type_value.clone(), format!("{e}: {}", rule.rule)));
                    continue;
                }
            };
            match program.execute(&ctx) {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => {
                    let message = rule.message.clone().unwrap_or_else(|| format!("failed rule: {}", rule.rule));
                    errors.push(rule_error(&field, &failed_value, rule.reason.as_deref(), message))
                }
                Ok(other) => errors.push(FieldError::invalid(
                    field,
                    type_value.clone(),
                    format!("rule did not evaluate to bool: {other:?} evaluating rule: {}", rule.rule),
                )),
                Err(e) => errors.push(FieldError::invalid(
                    field,
                    type_value.clone(),
                    format!("{} evaluating rule: {}", eval_error_text(&e), rule.rule),
                )),
            }
        }
    }
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

fn eval_error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        other => other.to_string(),
    }
}
