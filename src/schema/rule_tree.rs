//! The `x-kubernetes-validations` of a schema as a tree that holds only the
//! nodes that carry rules (or lead to one), each rule compiled on first use.
//!
//! Compiling lazily matters for the Wasm policy: Kubewarden evaluates every
//! request in a fresh instance, so anything compiled up front is paid per
//! request. A CREATE never compiles a transition rule, an S3 backup never
//! compiles the Azure rules.

use std::{collections::HashMap, sync::OnceLock};

use kube_cel::cel::{
    common::ast::{EntryExpr, Expr, LiteralValue},
    IdedExpr, Program,
};
use serde_json::Value;

/// One rule with its program, compiled on first use.
pub struct LazyRule {
    pub rule: String,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
    /// Mentions `oldSelf`: runs only on UPDATE with an old value.
    pub transition: bool,
    program: OnceLock<Result<Program, String>>,
}

impl LazyRule {
    /// The compiled program (or the compile error, reported as a violation).
    pub fn program(&self) -> Result<&Program, &str> {
        self.program
            .get_or_init(|| Program::compile(&self.rule).map_err(|e| format!("rule does not compile: {e}")))
            .as_ref()
            .map_err(String::as_str)
    }
}

/// A schema node with rules, or on the way to one.
#[derive(Default)]
pub struct RuleNode {
    pub rules: Vec<LazyRule>,
    pub properties: HashMap<String, RuleNode>,
    pub items: Option<Box<RuleNode>>,
    pub additional: Option<Box<RuleNode>>,
}

impl RuleNode {
    /// Builds the tree of `schema`; `None` when no rule is anywhere below.
    pub fn build(schema: &Value) -> Option<Self> {
        let rules: Vec<LazyRule> = schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| {
                        let text = r.get("rule")?.as_str()?.to_string();
                        let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
                        Some(LazyRule {
                            transition: text.contains("oldSelf"),
                            message: s("message"),
                            reason: s("reason"),
                            field_path: s("fieldPath"),
                            rule: text,
                            program: OnceLock::new(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let properties: HashMap<String, RuleNode> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|ps| ps.iter().filter_map(|(k, v)| Some((k.clone(), RuleNode::build(v)?))).collect())
            .unwrap_or_default();
        let items = schema.get("items").and_then(RuleNode::build).map(Box::new);
        let additional =
            schema.get("additionalProperties").filter(|a| a.is_object()).and_then(RuleNode::build).map(Box::new);
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
