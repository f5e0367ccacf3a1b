//! The rules our schemas carry, decided straight from the JSON when they
//! can be, with the interpreter's answer.
//!
//! *Why:* every rule evaluated through `cel` pays for a CEL copy of the
//! node's value, a scope with its variables, and a tree-walking
//! interpreter that clones values and looks functions up by name. Nearly
//! every rule in our CRDs is one of a few shapes (`self.matches('…')`,
//! `!self.contains('…')`, `self.x == 'S3' ? has(self.s3) : !has(self.s3)`,
//! `self.size() <= 1`), and in the Kubewarden module each request runs on
//! a fresh instance, where those copies are the memory the request
//! touches first (issue #35).
//!
//! *How it stays the interpreter's answer:* a rule compiles to a [`Direct`]
//! only when it is built from the operators below, and evaluating one
//! answers only when every value it reads is one that
//! [`super::convert::to_cel_typed`] makes a plain string, int, bool, list
//! or map of (no conversion error, no null, no double), and the result is
//! a bool. Everything is evaluated (no short circuit), so a rule that
//! reads a wrong-typed value anywhere, as the interpreter's
//! `touched_invalid` check would find, is never answered here. In every
//! other case [`Direct::eval`] says `None` and the walker runs the
//! interpreter, which gives the errors and their messages. The property
//! test in this module holds the two to the same answers over generated
//! values.

use kube_cel::cel::{
    common::ast::{operators as op, Expr, LiteralValue},
    IdedExpr,
};
use serde_json::{Map, Value};

use super::{
    convert,
    regex_cache::{self, Compiled, Pattern},
};

/// A rule in the shapes decided directly.
#[derive(Debug, Clone)]
pub struct Direct(Node);

#[derive(Debug, Clone)]
enum Node {
    Bool(bool),
    Int(i64),
    Str(Box<str>),
    /// `self…` or `oldSelf…`, through fields and list indices.
    Read {
        old: bool,
        steps: Box<[Step]>,
    },
    /// `has(<read>.field)`.
    Has {
        old: bool,
        steps: Box<[Step]>,
        field: Box<str>,
    },
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Compare(Cmp, Box<Node>, Box<Node>),
    Matches(Box<Node>, &'static Pattern),
    Text(TextOp, Box<Node>, Box<Node>),
    /// `size()` of a list or a map (a string's size is left to the interpreter).
    Size(Box<Node>),
}

#[derive(Debug, Clone)]
enum Step {
    Field(Box<str>),
    Index(usize),
}

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

impl Direct {
    /// The direct form of a compiled rule, when every part of it has one.
    pub fn compile(expr: &IdedExpr) -> Option<Self> {
        compile(expr).map(Direct)
    }

    /// The rule's answer on `this` (and `old`, the correlated old value),
    /// both under `schema`; `None` when the interpreter must decide.
    pub fn eval(&self, this: &Value, old: Option<&Value>, schema: &Value) -> Option<bool> {
        let answer = match eval(&self.0, &Scope { this, old, schema })? {
            V::Bool(b) => Some(b),
            _ => None,
        };
        #[cfg(test)]
        ANSWERED.with(|a| a.set(a.get() + usize::from(answer.is_some())));
        answer
    }
}

#[cfg(test)]
thread_local! {
    static ANSWERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many times a direct form answered on this thread (tests).
#[cfg(test)]
fn answered() -> usize {
    ANSWERED.with(std::cell::Cell::get)
}

fn compile(expr: &IdedExpr) -> Option<Node> {
    Some(match &expr.expr {
        Expr::Literal(LiteralValue::Boolean(b)) => Node::Bool(*b.inner()),
        Expr::Literal(LiteralValue::Int(i)) => Node::Int(*i.inner()),
        Expr::Literal(LiteralValue::String(s)) => Node::Str(s.inner().into()),
        Expr::Ident(_) => {
            let (old, steps) = read_chain(expr)?;
            Node::Read { old, steps: steps.into() }
        }
        Expr::Select(s) if s.test => {
            let (old, steps) = read_chain(&s.operand)?;
            Node::Has { old, steps: steps.into(), field: s.field.as_str().into() }
        }
        Expr::Select(_) => {
            let (old, steps) = read_chain(expr)?;
            Node::Read { old, steps: steps.into() }
        }
        Expr::Call(call) => {
            // Receiver style (`self.matches(p)`) and function style (`matches(self, p)`) alike.
            let mut operands: Vec<&IdedExpr> = call.target.iter().map(|t| &**t).collect();
            operands.extend(call.args.iter());
            let one = |f: fn(Box<Node>) -> Node| match operands.as_slice() {
                [a] => Some(f(Box::new(compile(a)?))),
                _ => None,
            };
            let two = |f: &dyn Fn(Box<Node>, Box<Node>) -> Node| match operands.as_slice() {
                [a, b] => Some(f(Box::new(compile(a)?), Box::new(compile(b)?))),
                _ => None,
            };
            let cmp = |c: Cmp| two(&|a, b| Node::Compare(c, a, b));
            let text = |t: TextOp| two(&|a, b| Node::Text(t, a, b));
            match call.func_name.as_str() {
                op::LOGICAL_NOT => one(Node::Not)?,
                op::LOGICAL_AND => two(&Node::And)?,
                op::LOGICAL_OR => two(&Node::Or)?,
                op::CONDITIONAL => match operands.as_slice() {
                    [c, t, f] => Node::Cond(Box::new(compile(c)?), Box::new(compile(t)?), Box::new(compile(f)?)),
                    _ => return None,
                },
                op::EQUALS => cmp(Cmp::Eq)?,
                op::NOT_EQUALS => cmp(Cmp::Ne)?,
                op::LESS => cmp(Cmp::Lt)?,
                op::LESS_EQUALS => cmp(Cmp::Le)?,
                op::GREATER => cmp(Cmp::Gt)?,
                op::GREATER_EQUALS => cmp(Cmp::Ge)?,
                op::INDEX => {
                    let (old, steps) = read_chain(expr)?;
                    Node::Read { old, steps: steps.into() }
                }
                "size" => one(Node::Size)?,
                "contains" => text(TextOp::Contains)?,
                "startsWith" => text(TextOp::StartsWith)?,
                "endsWith" => text(TextOp::EndsWith)?,
                "matches" => match operands.as_slice() {
                    [target, IdedExpr { expr: Expr::Literal(LiteralValue::String(p)), .. }] => {
                        // The interpreter's own compiled pattern (cached for the process).
                        let Ok(Compiled::Shared(pattern)) = regex_cache::get(p.inner()) else { return None };
                        Node::Matches(Box::new(compile(target)?), pattern)
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// `self`/`oldSelf` followed by field selections and constant list indices.
fn read_chain(expr: &IdedExpr) -> Option<(bool, Vec<Step>)> {
    match &expr.expr {
        Expr::Ident(name) if name == "self" => Some((false, Vec::new())),
        Expr::Ident(name) if name == "oldSelf" => Some((true, Vec::new())),
        Expr::Select(s) if !s.test => {
            let (old, mut steps) = read_chain(&s.operand)?;
            steps.push(Step::Field(s.field.as_str().into()));
            Some((old, steps))
        }
        Expr::Call(c) if c.func_name == op::INDEX && c.target.is_none() => match c.args.as_slice() {
            [list, IdedExpr { expr: Expr::Literal(LiteralValue::Int(i)), .. }] => {
                let (old, mut steps) = read_chain(list)?;
                steps.push(Step::Index(usize::try_from(*i.inner()).ok()?));
                Some((old, steps))
            }
            _ => None,
        },
        _ => None,
    }
}

struct Scope<'a> {
    this: &'a Value,
    old: Option<&'a Value>,
    schema: &'a Value,
}

/// A value as `to_cel_typed` would make it, borrowed from the JSON; the
/// schema (when typed) is what its children are converted under.
#[derive(Clone, Copy)]
enum V<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    List(&'a [Value], Option<&'a Value>),
    Map(&'a Map<String, Value>, Option<&'a Value>),
}

/// `v` under `schema` (`None`: untyped, as `to_cel`), when the conversion
/// gives a plain value; `None` for anything else (null, a double, a
/// conversion error).
fn typed<'a>(v: &'a Value, schema: Option<&'a Value>) -> Option<V<'a>> {
    let Some(schema) = schema else { return untyped(v) };
    if v.is_null() {
        return None;
    }
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        return match v {
            Value::String(s) => Some(V::Str(s)),
            Value::Number(n) => n.as_i64().map(V::Int),
            _ => None,
        };
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => v.as_object().map(|m| V::Map(m, Some(schema))),
        Some("array") => v.as_array().map(|items| V::List(items, schema.get("items"))),
        Some("string") => v.as_str().map(V::Str),
        Some("integer") => v.as_i64().map(V::Int),
        Some("boolean") => v.as_bool().map(V::Bool),
        Some("number") => None,
        _ => untyped(v),
    }
}

fn untyped(v: &Value) -> Option<V<'_>> {
    match v {
        Value::Bool(b) => Some(V::Bool(*b)),
        Value::Number(n) => n.as_i64().map(V::Int),
        Value::String(s) => Some(V::Str(s)),
        Value::Array(items) => Some(V::List(items, None)),
        Value::Object(m) => Some(V::Map(m, None)),
        Value::Null => None,
    }
}

/// The schema a map's `key` converts under (`to_cel_typed`'s choice; an
/// untyped map's children are untyped).
fn field_schema<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    convert::field_schema(schema?, key)
}

fn read<'a>(scope: &Scope<'a>, old: bool, steps: &[Step]) -> Option<V<'a>> {
    let root = if old { scope.old? } else { scope.this };
    let mut cur = typed(root, Some(scope.schema))?;
    for step in steps {
        cur = match (step, cur) {
            (Step::Field(key), V::Map(m, schema)) => typed(m.get(&**key)?, field_schema(schema, key))?,
            (Step::Index(i), V::List(items, item_schema)) => typed(items.get(*i)?, item_schema)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn eval<'a>(node: &'a Node, scope: &Scope<'a>) -> Option<V<'a>> {
    let boolean = |n: &'a Node| match eval(n, scope)? {
        V::Bool(b) => Some(b),
        _ => None,
    };
    Some(match node {
        Node::Bool(b) => V::Bool(*b),
        Node::Int(i) => V::Int(*i),
        Node::Str(s) => V::Str(s),
        Node::Read { old, steps } => read(scope, *old, steps)?,
        Node::Has { old, steps, field } => {
            let V::Map(m, schema) = read(scope, *old, steps)? else { return None };
            match m.get(&**field) {
                None => V::Bool(false),
                // The value found is converted (and must convert cleanly).
                Some(found) => {
                    typed(found, field_schema(schema, field))?;
                    V::Bool(true)
                }
            }
        }
        Node::Not(a) => V::Bool(!boolean(a)?),
        // Both sides, always (`?` before the operator: no short circuit), so a
        // side the interpreter would fail on sends the rule to it.
        Node::And(a, b) => {
            let (a, b) = (boolean(a)?, boolean(b)?);
            V::Bool(a && b)
        }
        Node::Or(a, b) => {
            let (a, b) = (boolean(a)?, boolean(b)?);
            V::Bool(a || b)
        }
        Node::Cond(c, t, f) => {
            let (c, t, f) = (boolean(c)?, eval(t, scope)?, eval(f, scope)?);
            if c {
                t
            } else {
                f
            }
        }
        Node::Compare(cmp, a, b) => V::Bool(compare(*cmp, eval(a, scope)?, eval(b, scope)?)?),
        Node::Matches(target, pattern) => match eval(target, scope)? {
            V::Str(s) => V::Bool(pattern.is_match(s)),
            _ => return None,
        },
        Node::Text(t, a, b) => {
            let (V::Str(s), V::Str(p)) = (eval(a, scope)?, eval(b, scope)?) else { return None };
            V::Bool(match t {
                TextOp::Contains => s.contains(p),
                TextOp::StartsWith => s.starts_with(p),
                TextOp::EndsWith => s.ends_with(p),
            })
        }
        Node::Size(a) => match eval(a, scope)? {
            V::List(items, _) => V::Int(i64::try_from(items.len()).ok()?),
            V::Map(m, _) => V::Int(i64::try_from(m.len()).ok()?),
            _ => return None,
        },
    })
}

/// `a <cmp> b` as the interpreter decides it, for the kinds compared here.
fn compare(cmp: Cmp, a: V<'_>, b: V<'_>) -> Option<bool> {
    let ord = match (a, b) {
        (V::Str(x), V::Str(y)) => x.cmp(y),
        (V::Int(x), V::Int(y)) => x.cmp(&y),
        // Bools, lists and maps are only compared for equality here.
        (V::Bool(x), V::Bool(y)) if matches!(cmp, Cmp::Eq | Cmp::Ne) => x.cmp(&y),
        (x @ (V::List(..) | V::Map(..)), y) if matches!(cmp, Cmp::Eq | Cmp::Ne) => {
            // Every value inside both is looked at first (no short circuit).
            if !(clean(x) && clean(y)) {
                return None;
            }
            if equal(x, y)? {
                std::cmp::Ordering::Equal
            } else {
                std::cmp::Ordering::Less
            }
        }
        _ => return None,
    };
    Some(match cmp {
        Cmp::Eq => ord.is_eq(),
        Cmp::Ne => ord.is_ne(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
    })
}

/// Whether every value inside `v` converts to a plain value ([`typed`]).
fn clean(v: V<'_>) -> bool {
    match v {
        V::List(items, item) => items.iter().all(|i| typed(i, item).is_some_and(clean)),
        V::Map(m, schema) => m.iter().all(|(k, c)| typed(c, field_schema(schema, k)).is_some_and(clean)),
        V::Bool(_) | V::Int(_) | V::Str(_) => true,
    }
}

/// CEL's `==` on two [`clean`] values, as the interpreter has it: lists
/// item by item in order, maps by their keys and the values under them
/// (the conversion keeps no list type: a `set` list compares in order
/// there too); `None` where kinds differ (the interpreter decides).
fn equal(a: V<'_>, b: V<'_>) -> Option<bool> {
    Some(match (a, b) {
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::List(xs, xi), V::List(ys, yi)) => {
            if xs.len() != ys.len() {
                return Some(false);
            }
            for (x, y) in xs.iter().zip(ys) {
                if !equal(typed(x, xi)?, typed(y, yi)?)? {
                    return Some(false);
                }
            }
            true
        }
        (V::Map(xs, xschema), V::Map(ys, yschema)) => {
            if xs.len() != ys.len() {
                return Some(false);
            }
            for (k, x) in xs {
                let Some(y) = ys.get(k) else { return Some(false) };
                if !equal(typed(x, field_schema(xschema, k))?, typed(y, field_schema(yschema, k))?)? {
                    return Some(false);
                }
            }
            true
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::{cel_eval, CompiledCrdSchema, KubernetesVersion};

    use crate::schema::xorshift::XorShift as Rng;

    /// `true` with the given chance.
    fn chance(rng: &mut Rng, percent: usize) -> bool {
        rng.below(100) < percent
    }

    /// Strings the rules of our schemas tell apart, and ones around them.
    const STRINGS: &[&str] = &[
        "",
        "a",
        "S3",
        "AzureBlob",
        "Managed",
        "Unmanaged",
        "AWS",
        "Azure",
        "bad",
        "my-bucket",
        "my--bucket",
        "my..bucket",
        "My_Bucket",
        "-x",
        "x-",
        "us-east-1",
        "é",
        "prefix/path_1.x",
        "arn:aws:kms:us-east-1:123456789012:key/abcd-1234",
        "arn:aws:kms:us-east-1:12345:key/abcd",
        "https://v1.vault.azure.net/keys/k1/0123abc",
        "https://v1.vault.azure.net/keys/k1/",
        "s3://bucket/snap.db",
        "https://bucket.s3.amazonaws.com/snap.db?X-Amz-Signature=abc",
        "http://plain",
        "a.b-c.d",
        "abc",
        "abcdef",
    ];

    /// A value for `schema`: mostly of its type, sometimes of another type,
    /// null, a double or an integer where a string belongs.
    fn gen(rng: &mut Rng, schema: &Value, depth: usize) -> Value {
        if chance(rng, 4) {
            return junk(rng);
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array).filter(|v| !v.is_empty()) {
            if chance(rng, 80) {
                return values[rng.below(values.len())].clone();
            }
        }
        if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
            return if chance(rng, 50) { json!(rng.below(5)) } else { json!(STRINGS[rng.below(STRINGS.len())]) };
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                let mut out = serde_json::Map::new();
                if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                    for (k, s) in props {
                        if depth < 8 && chance(rng, 70) {
                            out.insert(k.clone(), gen(rng, s, depth + 1));
                        }
                    }
                } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                    for i in 0..rng.below(3) {
                        out.insert(format!("k{i}"), gen(rng, add, depth + 1));
                    }
                }
                Value::Object(out)
            }
            Some("array") => {
                let item = schema.get("items").cloned().unwrap_or(json!({}));
                Value::Array((0..rng.below(4)).map(|_| gen(rng, &item, depth + 1)).collect())
            }
            Some("string") => json!(STRINGS[rng.below(STRINGS.len())]),
            Some("integer") => json!(rng.below(6) as i64 - 1),
            // A whole number arrives as a JSON integer as often as not.
            Some("number") if chance(rng, 50) => json!(rng.below(3)),
            Some("number") => json!(rng.below(4) as f64 / 2.0),
            Some("boolean") => json!(chance(rng, 50)),
            _ => junk(rng),
        }
    }

    fn junk(rng: &mut Rng) -> Value {
        match rng.below(8) {
            0 => Value::Null,
            1 => json!(chance(rng, 50)),
            2 => json!(rng.below(4)),
            3 => json!(1.5),
            4 => json!(u64::MAX),
            5 => json!(STRINGS[rng.below(STRINGS.len())]),
            6 => json!([STRINGS[rng.below(STRINGS.len())], 3]),
            _ => json!({"s3": {}, "storageType": "S3", "x": null}),
        }
    }

    /// The old object of an UPDATE: the same, or changed in places.
    fn mutate(rng: &mut Rng, v: &Value, schema: &Value) -> Value {
        if chance(rng, 15) {
            return gen(rng, schema, 4);
        }
        match v {
            Value::Object(m) => {
                let props = schema.get("properties");
                let mut out = serde_json::Map::new();
                for (k, c) in m {
                    if !chance(rng, 5) {
                        let s = props.and_then(|p| p.get(k)).cloned().unwrap_or(json!({}));
                        out.insert(k.clone(), mutate(rng, c, &s));
                    }
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    /// Shapes our CRDs do not use yet, and the values that trip them.
    fn shapes() -> Value {
        let rule = |r: &str| json!({"rule": r, "message": format!("fails: {r}")});
        json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            rule("self.kind == 'S3' ? has(self.s3) : !has(self.s3)"),
            rule("has(self.s3) && has(self.s3.bucket) ? self.s3.bucket.startsWith('my') : true"),
            rule("self.count >= 0 && self.count < 4"),
            rule("self.count != 2 || self.flag"),
            rule("size(self.tags) <= 2 && (self.tags.size() == 0 || self.tags[0].endsWith('c'))"),
            rule("self.labels.size() < 3 && (!has(self.labels.k0) || self.labels.k0 == 'abc')"),
            rule("self.port == 443 || self.port == 'https'"),
            rule("self.ratio < 1.0"),
            rule("self.ratio == 1 || self.counts.size() == 0 || self.counts[0] == 1"),
            rule("size(self.kind) < 3"),
            rule("self.flag == oldSelf.flag"),
            rule("self.kind.contains(self.s3.bucket)"),
            rule("self.tags[5] == 'x'"),
            rule("!(self.kind in ['S3', 'AzureBlob'])"),
            rule("self.untyped == 'abc' || self.untyped == 3"),
            rule("self == oldSelf"),
            rule("self.tags == oldSelf.tags && self.labels != oldSelf.labels"),
            rule("self.s3 == oldSelf.s3 || self.items == oldSelf.items"),
            rule("self.counts == oldSelf.counts"),
            rule("self.untyped == oldSelf.untyped"),
            rule("self.tags == ['abc'] || self.labels == self.labels"),
        ],
        "properties": {
            "kind": {"type": "string", "enum": ["S3", "AzureBlob", "a"]},
            "s3": {"type": "object", "nullable": true, "properties": {"bucket": {"type": "string",
                "x-kubernetes-validations": [rule("!self.contains('--')"), rule("self.matches('^[a-z0-9-]+$')")]}}},
            "count": {"type": "integer"},
            "flag": {"type": "boolean"},
            "ratio": {"type": "number"},
            "counts": {"type": "array", "items": {"type": "number"}},
            "port": {"x-kubernetes-int-or-string": true},
            "untyped": {},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "n": {"type": "integer"}, "on": {"type": "boolean"}}}}
        }}}})
    }

    /// Both paths' findings on one object.
    fn both(schema: Value, value: Value) -> (Vec<String>, Vec<String>) {
        let compiled = CompiledCrdSchema::compile(schema);
        let rules = compiled.rules.as_ref().expect("rules");
        let v = KubernetesVersion::default();
        let run = |direct| {
            let (mut e, mut w) = (Vec::new(), Vec::new());
            cel_eval::validate(rules, &compiled.schema, (&value, None), v, (&mut e, &mut w), direct);
            e.iter().chain(&w).map(ToString::to_string).collect::<Vec<_>>()
        };
        (run(true), run(false))
    }

    /// A child's CEL value never depends on whether its parent had rules
    /// (and so on which path decided them): under an untyped parent with
    /// `properties`, and for an `additionalProperties` key next to
    /// `properties`, the child is converted under its own schema.
    /// (Found by review: the direct path once left the child typed, the
    /// interpreter path gave it the parent's untyped conversion.)
    #[test]
    fn a_childs_value_does_not_depend_on_its_parents_rules() {
        let rule = |r: &str| json!({"rule": r, "message": format!("fails: {r}")});
        let cases = [
            json!({"type": "object", "properties": {"spec": {
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-validations": [rule("has(self.a) || !has(self.a)")],
                "properties": {"a": {"type": "string", "x-kubernetes-validations": [rule("self == 'x'")]}}}}}),
            json!({"type": "object", "properties": {"spec": {"type": "object",
                "x-kubernetes-validations": [rule("true")],
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string", "x-kubernetes-validations": [rule("self == 'x'")]}}}}),
        ];
        for (schema, value) in cases.into_iter().zip([json!({"spec": {"a": 5}}), json!({"spec": {"b": 5}})]) {
            let (direct, interpreted) = both(schema, value);
            assert_eq!(direct, interpreted);
            assert!(direct.iter().any(|e| e.contains("invalid data, expected string, got int64")), "{direct:?}");
        }
    }

    /// Every rule of our CRDs, and the shapes above, on generated CREATEs and
    /// UPDATEs: the findings (errors, ratcheted warnings, their messages) are
    /// the interpreter's, and the direct forms decided most of them.
    #[test]
    fn direct_forms_give_the_interpreters_answers() {
        let schemas = [
            crate::crd::hcpetcdbackup_schema().expect("schema"),
            crate::crd::hostedcluster_schema().expect("schema"),
            crate::crd::hostedcontrolplane_schema().expect("schema"),
            shapes(),
        ];
        let version = KubernetesVersion::default();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for schema in schemas {
            let compiled = CompiledCrdSchema::compile(schema);
            let rules = compiled.rules.as_ref().expect("rules");
            let (mut direct_forms, mut all) = (0, 0);
            for r in compiled.rules() {
                all += 1;
                direct_forms += usize::from(r.direct().is_some());
            }
            assert!(direct_forms * 4 >= all * 3, "{direct_forms} of {all} rules have a direct form");
            let before = super::answered();
            for i in 0..3000 {
                let value = gen(&mut rng, &compiled.schema, 0);
                let old = (i % 2 == 1).then(|| mutate(&mut rng, &value, &compiled.schema));
                let (mut e1, mut w1, mut e2, mut w2) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let input = (&value, old.as_ref());
                cel_eval::validate(rules, &compiled.schema, input, version, (&mut e1, &mut w1), true);
                cel_eval::validate(rules, &compiled.schema, input, version, (&mut e2, &mut w2), false);
                assert_eq!((&e1, &w1), (&e2, &w2), "value {value}\nold {old:?}");
            }
            let answered = super::answered() - before;
            assert!(answered > 3000, "the direct forms answered {answered} times");
        }
    }
}
