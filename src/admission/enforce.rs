//! Applies the `enforcement` settings to a decision, once, for every shell:
//! each finding of a denial gets the outcome [`Enforcement::outcome`] gives
//! it. Denied findings stay in the denial (its message rebuilt from them),
//! warned ones become warnings with the same text, audited and exempt ones
//! become audit annotations, `off` ones disappear. Every finding, and every
//! warning a project rule raised, is listed in [`Decision::rules`] for the
//! metrics and the log line.

use super::{
    decision::{invalid_message, Decision, DenialReason, Details, Verdict},
    AdmissionRequest,
};
use crate::enforcement::{self, Enforced, Enforcement, Requester, RuleResult};

/// Audit annotation keys (the apiserver records `<webhook name>/<key>`).
pub const AUDIT_KEY: &str = "audit";
pub const EXEMPT_KEY: &str = "exempt";
/// Longest audit annotation value, bytes (longer is cut at a character boundary).
pub const MAX_ANNOTATION: usize = 4096;

/// One finding of a denial: its rule, its text and (for an Invalid denial) its cause.
struct Finding {
    rule: &'static str,
    text: String,
    cause: Option<super::Cause>,
}

/// The rule id at the end of a warning (`... (rule <id>)`), if it is a known one.
fn warning_rule(w: &str) -> Option<&'static str> {
    let inner = w.strip_suffix(')')?;
    let start = inner.rfind("(rule ")?;
    enforcement::known_rule(inner.get(start + "(rule ".len()..)?)
}

fn findings(decision: &Decision, mutating: bool) -> Vec<Finding> {
    let Verdict::Denied(denial) = &decision.verdict else { return Vec::new() };
    let causes = denial.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
    if denial.reason == DenialReason::Invalid && !causes.is_empty() {
        let unnamed = if mutating { enforcement::ETCD_INIT_TEMPLATE } else { enforcement::UPSTREAM_SCHEMA };
        return causes
            .iter()
            .map(|c| Finding { rule: c.rule.unwrap_or(unnamed), text: c.text(), cause: Some(c.clone()) })
            .collect();
    }
    let rule = match denial.reason {
        DenialReason::Forbidden => enforcement::ETCD_INIT_UNDECIDABLE,
        DenialReason::BadRequest => enforcement::BAD_REQUEST,
        DenialReason::InternalError => enforcement::INTERNAL_ERROR,
        DenialReason::Invalid if mutating => enforcement::ETCD_INIT_TEMPLATE,
        DenialReason::Invalid => enforcement::UPSTREAM_SCHEMA,
    };
    vec![Finding { rule, text: denial.message.clone(), cause: None }]
}

fn bounded(mut s: String) -> String {
    if s.len() > MAX_ANNOTATION {
        let mut end = MAX_ANNOTATION - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// The decision with `enforcement` applied (`mutating`: the etcd StatefulSet path).
pub fn apply(mut decision: Decision, req: &AdmissionRequest, enforcement: &Enforcement, mutating: bool) -> Decision {
    let mut results: Vec<RuleResult> = decision
        .warnings
        .iter()
        .filter_map(|w| warning_rule(w))
        .map(|rule| RuleResult { rule, outcome: Enforced::Warned })
        .collect();
    let found = findings(&decision, mutating);
    if found.is_empty() {
        decision.rules = results;
        return decision;
    }
    let namespace = req.namespace_or_object();
    let user = req.user_info.as_ref();
    let who = Requester {
        namespace,
        username: user.map_or("", |u| u.username.as_str()),
        groups: user.map_or(&[], |u| u.groups.as_slice()),
    };
    let exemption = if enforcement.is_default() { None } else { enforcement.exemption(&who) };
    let (mut kept, mut audited, mut exempted) = (Vec::new(), Vec::new(), Vec::new());
    for f in found {
        let outcome = enforcement.outcome(f.rule, exemption.is_some());
        results.push(RuleResult { rule: f.rule, outcome });
        match outcome {
            Enforced::Denied => kept.push(f),
            Enforced::Warned => decision.warnings.push(f.text),
            Enforced::Audited => audited.push(f.text),
            Enforced::Exempt => exempted.push(f.text),
            Enforced::Off => {}
        }
    }
    decision.rules = results;
    if !audited.is_empty() {
        decision.audit_annotations.insert(AUDIT_KEY.to_string(), bounded(audited.join("; ")));
    }
    if let (Some(why), false) = (exemption, exempted.is_empty()) {
        decision.audit_annotations.insert(EXEMPT_KEY.to_string(), bounded(format!("{why}: {}", exempted.join("; "))));
    }
    let Verdict::Denied(denial) = &mut decision.verdict else { return decision };
    if kept.is_empty() {
        decision.verdict = Verdict::Allowed;
        return decision;
    }
    // Some findings still deny: the denial keeps exactly those.
    if let Some(Details { name, group, kind, causes }) = denial.details.as_mut() {
        let kept_causes: Vec<_> = kept.into_iter().filter_map(|f| f.cause).collect();
        if !kept_causes.is_empty() && kept_causes.len() != causes.len() {
            denial.message = invalid_message(kind, group, name, kept_causes.iter().map(super::Cause::text));
            *causes = kept_causes;
        }
    }
    decision
}
