//! Applies the `enforcement` settings to a decision, once, for every shell:
//! each finding of a denial gets the outcome [`Enforcement::outcome`] gives
//! it. Denied findings stay in the denial (its message rebuilt from them),
//! warned ones become warnings with the same text, audited and exempt ones
//! become audit annotations, `off` ones disappear. A rule's warning follows
//! the same dial, capped at a warning ([`Enforcement::warning_outcome`]);
//! a note (a warning without a rule) always stays. Every finding, warnings
//! included, is listed in [`Decision::rules`] for the metrics and the log line.

use super::{
    decision::{invalid_message, Decision, DenialReason, Details, Verdict},
    AdmissionRequest,
};
use crate::{
    enforcement::{self, Enforced, Enforcement, Requester, RuleResult},
    finding::Warning,
};

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

/// Where enforcement sends findings that no longer deny.
#[derive(Default)]
struct Relaxed {
    audited: Vec<String>,
    exempted: Vec<String>,
}

/// The decision with `enforcement` applied (`mutating`: the etcd StatefulSet path).
pub fn apply(mut decision: Decision, req: &AdmissionRequest, enforcement: &Enforcement, mutating: bool) -> Decision {
    let found = findings(&decision, mutating);
    let exemption = exemption(req, enforcement);
    let mut results = Vec::new();
    let mut relaxed = Relaxed::default();
    // The denial's findings first (the annotations list them first), then
    // the warnings: a note stays, a rule's warning follows the dial.
    let (mut kept, mut warned) = (Vec::new(), Vec::new());
    for f in found {
        let outcome = enforcement.outcome(f.rule, exemption.is_some());
        results.push(RuleResult { rule: f.rule, outcome });
        match outcome {
            Enforced::Denied => kept.push(f),
            Enforced::Warned => warned.push(Warning::ruled(f.rule, f.text)),
            Enforced::Audited => relaxed.audited.push(f.text),
            Enforced::Exempt => relaxed.exempted.push(f.text),
            Enforced::Off => {}
        }
    }
    let mut warnings = Vec::with_capacity(decision.warnings.len() + warned.len());
    for w in std::mem::take(&mut decision.warnings) {
        let Some(rule) = w.rule else {
            warnings.push(w);
            continue;
        };
        let outcome = enforcement.warning_outcome(rule, exemption.is_some());
        results.push(RuleResult { rule, outcome });
        match outcome {
            Enforced::Denied | Enforced::Warned => warnings.push(w),
            Enforced::Audited => relaxed.audited.push(w.text),
            Enforced::Exempt => relaxed.exempted.push(w.text),
            Enforced::Off => {}
        }
    }
    // The decision's own warnings keep their place before the relaxed denial's.
    warnings.extend(warned);
    decision.warnings = warnings;
    decision.rules = results;
    if !relaxed.audited.is_empty() {
        decision.audit_annotations.insert(AUDIT_KEY.to_string(), bounded(relaxed.audited.join("; ")));
    }
    if let (Some(why), false) = (exemption, relaxed.exempted.is_empty()) {
        let text = bounded(format!("{why}: {}", relaxed.exempted.join("; ")));
        decision.audit_annotations.insert(EXEMPT_KEY.to_string(), text);
    }
    keep_denying(decision, kept)
}

/// Who sent `req`, and the object's namespace.
/// Why the requester of `req` is exempt from `enforcement`, if they are.
pub(super) fn exemption(req: &AdmissionRequest, enforcement: &Enforcement) -> Option<String> {
    if enforcement.is_default() {
        None
    } else {
        enforcement.exemption(&requester(req))
    }
}

fn requester(req: &AdmissionRequest) -> Requester<'_> {
    let user = req.user_info.as_ref();
    Requester {
        namespace: req.namespace_or_object(),
        username: user.map_or("", |u| u.username.as_str()),
        groups: user.map_or(&[], |u| u.groups.as_slice()),
    }
}

/// The denial with exactly the findings that still deny (allowed when none does).
fn keep_denying(mut decision: Decision, kept: Vec<Finding>) -> Decision {
    let Verdict::Denied(denial) = &mut decision.verdict else { return decision };
    if kept.is_empty() {
        decision.verdict = Verdict::Allowed;
        return decision;
    }
    if let Some(Details { name, group, kind, causes }) = denial.details.as_mut() {
        let kept_causes: Vec<_> = kept.into_iter().filter_map(|f| f.cause).collect();
        if !kept_causes.is_empty() && kept_causes.len() != causes.len() {
            denial.message = invalid_message(kind, group, name, kept_causes.iter().map(super::Cause::text));
            *causes = kept_causes;
        }
    }
    decision
}
