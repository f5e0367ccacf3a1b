//! The `x-kubernetes-validations` of a schema as a tree that holds only the
//! nodes that carry rules (or lead to one), each rule compiled on first use.
//!
//! Compiling lazily matters for the Wasm policy: Kubewarden evaluates every
//! request in a fresh instance, so anything compiled up front is paid per
//! request. A CREATE never compiles a transition rule, an S3 backup never
//! compiles the Azure rules.

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use kube_cel::cel::{
    common::ast::{EntryExpr, Expr, LiteralValue},
    IdedExpr, Program,
};
use serde_json::Value;

use super::cel_direct::Direct;

/// One rule with its program, compiled on first use.
pub struct LazyRule {
    /// The rule's stable id, when the schema's owner named it (upstream's
    /// rules: `api::upstream_rules`); carried by every error it raises.
    pub id: Option<&'static str>,
    pub rule: String,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
    program: OnceLock<Result<Arc<Program>, String>>,
    reads: OnceLock<Vec<Read>>,
    /// [`LazyRule::transition`], decided once (every evaluation asks).
    transition: OnceLock<bool>,
    direct: OnceLock<Option<Direct>>,
}

/// A path a rule reads from `self` or `oldSelf` (`self.spec.storage` →
/// `["spec", "storage"]`), and whether the value at its end is compared
/// whole (an operand of `==` or `!=`, which reads every value below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub old: bool,
    pub path: Vec<String>,
    pub whole: bool,
}

impl Clone for LazyRule {
    /// A copy shares the compiled program, decides whether it is a
    /// transition rule now (so no request writes that answer into a
    /// snapshot page), and compiles its direct form anew, now: it links the
    /// patterns the regex cache serves now (the compacted copies, in the
    /// Kubewarden module) and sits next to the rest of the copy.
    fn clone(&self) -> Self {
        let copy = Self {
            id: self.id,
            rule: self.rule.clone(),
            message: self.message.clone(),
            reason: self.reason.clone(),
            field_path: self.field_path.clone(),
            program: self.program.clone(),
            reads: self.reads.clone(),
            transition: self.transition.clone(),
            direct: OnceLock::new(),
        };
        copy.direct();
        copy.transition();
        copy
    }
}

impl LazyRule {
    /// The compiled program (or the compile error, reported as a violation).
    pub fn program(&self) -> Result<&Program, &str> {
        self.program
            .get_or_init(|| {
                Program::compile(&self.rule).map(Arc::new).map_err(|e| format!("rule does not compile: {e}"))
            })
            .as_ref()
            .map(|p| &**p)
            .map_err(String::as_str)
    }

    /// The rule in the form decided straight from the JSON, when it has one.
    pub fn direct(&self) -> Option<&Direct> {
        self.direct.get_or_init(|| self.program().ok().and_then(|p| Direct::compile(p.expression()))).as_ref()
    }

    /// Reads `oldSelf` (from its syntax tree, not its text): a transition rule,
    /// run only on UPDATE with an old value and never ratcheted.
    /// (The text test first: a rule that never names it is not compiled for this.)
    pub fn transition(&self) -> bool {
        *self.transition.get_or_init(|| self.rule.contains("oldSelf") && self.reads().iter().any(|r| r.old))
    }

    /// What the rule reads from `self` and `oldSelf` (none when it does not compile).
    pub fn reads(&self) -> &[Read] {
        self.reads.get_or_init(|| {
            let mut out = Vec::new();
            if let Ok(p) = self.program() {
                reads(p.expression(), false, &mut out);
            }
            out
        })
    }
}

/// The `self`/`oldSelf` select chain `expr` is, if it is one.
fn chain(expr: &IdedExpr) -> Option<(bool, Vec<String>)> {
    match &expr.expr {
        Expr::Ident(name) if name == "self" => Some((false, Vec::new())),
        Expr::Ident(name) if name == "oldSelf" => Some((true, Vec::new())),
        // `has(self.a)` converts `self.a` as cel-go's field test does.
        Expr::Select(s) => {
            let (old, mut path) = chain(&s.operand)?;
            path.push(s.field.clone());
            Some((old, path))
        }
        _ => None,
    }
}

/// Every `self`/`oldSelf` chain read in `expr` (a `has()` test included:
/// Kubernetes' field test converts the value it finds).
fn reads(expr: &IdedExpr, whole: bool, out: &mut Vec<Read>) {
    if let Some((old, path)) = chain(expr) {
        // `has()` converts only the value it finds, never what is below it.
        let test = matches!(&expr.expr, Expr::Select(s) if s.test);
        out.push(Read { old, path, whole: whole && !test });
        return;
    }
    match &expr.expr {
        Expr::Call(call) => {
            let compares = call.func_name == "_==_" || call.func_name == "_!=_";
            call.target.iter().for_each(|t| reads(t, false, out));
            call.args.iter().for_each(|a| reads(a, compares, out));
        }
        Expr::Comprehension(c) => {
            for e in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                reads(e, false, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|e| reads(e, false, out)),
        Expr::Map(m) => m.entries.iter().for_each(|e| entry_reads(&e.expr, out)),
        Expr::Struct(st) => st.entries.iter().for_each(|e| entry_reads(&e.expr, out)),
        Expr::Select(sel) => reads(&sel.operand, false, out),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

fn entry_reads(entry: &EntryExpr, out: &mut Vec<Read>) {
    match entry {
        EntryExpr::StructField(f) => reads(&f.value, false, out),
        EntryExpr::MapEntry(m) => {
            reads(&m.key, false, out);
            reads(&m.value, false, out);
        }
    }
}

/// A schema node with rules, or on the way to one.
#[derive(Default, Clone)]
pub struct RuleNode {
    pub rules: Vec<LazyRule>,
    pub properties: HashMap<String, RuleNode>,
    pub items: Option<Box<RuleNode>>,
    pub additional: Option<Box<RuleNode>>,
}

/// Names a rule by the schema path it sits on (`spec.storage`, `(root)`,
/// `spec.list[*]`, as the rule catalog writes it) and its message.
pub type RuleIds = fn(field: &str, message: &str) -> Option<&'static str>;

impl RuleNode {
    /// Builds the tree of `schema`; `None` when no rule is anywhere below.
    /// `ids` names each rule.
    pub fn build(schema: &Value, ids: RuleIds) -> Option<Self> {
        Self::build_at(schema, "", ids)
    }

    fn build_at(schema: &Value, path: &str, ids: RuleIds) -> Option<Self> {
        let at = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
        let rules: Vec<LazyRule> = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| {
                        let text = r.get("rule")?.as_str()?.to_string();
                        let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
                        let field = if path.is_empty() { "(root)" } else { path };
                        Some(LazyRule {
                            id: ids(field, r.get("message").and_then(Value::as_str).unwrap_or_default()),
                            message: s("message"),
                            reason: s("reason"),
                            field_path: s("fieldPath"),
                            rule: text,
                            program: OnceLock::new(),
                            reads: OnceLock::new(),
                            transition: OnceLock::new(),
                            direct: OnceLock::new(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let properties: HashMap<String, RuleNode> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|ps| ps.iter().filter_map(|(k, v)| Some((k.clone(), RuleNode::build_at(v, &at(k), ids)?))).collect())
            .unwrap_or_default();
        let items = schema.get("items").and_then(|i| RuleNode::build_at(i, &format!("{path}[*]"), ids)).map(Box::new);
        let additional = schema
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .and_then(|a| RuleNode::build_at(a, &at("*"), ids))
            .map(Box::new);
        if rules.is_empty() && properties.is_empty() && items.is_none() && additional.is_none() {
            return None;
        }
        Some(Self { rules, properties, items, additional })
    }
}

/// The string-literal patterns of every `matches()` call in `expr` (receiver
/// or function style), so they can be compiled ahead of the first request.
pub fn matches_literals(expr: &IdedExpr, out: &mut Vec<String>) {
    match &expr.expr {
        Expr::Call(call) => {
            if call.func_name == "matches" {
                if let Some(IdedExpr { expr: Expr::Literal(LiteralValue::String(p)), .. }) = call.args.last() {
                    out.push(p.inner().to_string());
                }
            }
            call.target.iter().for_each(|t| matches_literals(t, out));
            call.args.iter().for_each(|a| matches_literals(a, out));
        }
        Expr::Comprehension(c) => {
            for e in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                matches_literals(e, out);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(|e| matches_literals(e, out)),
        Expr::Map(m) => m.entries.iter().for_each(|e| entry_literals(&e.expr, out)),
        Expr::Struct(s) => s.entries.iter().for_each(|e| entry_literals(&e.expr, out)),
        Expr::Select(s) => matches_literals(&s.operand, out),
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => {}
    }
}

fn entry_literals(entry: &EntryExpr, out: &mut Vec<String>) {
    match entry {
        EntryExpr::StructField(f) => matches_literals(&f.value, out),
        EntryExpr::MapEntry(m) => {
            matches_literals(&m.key, out);
            matches_literals(&m.value, out);
        }
    }
}
