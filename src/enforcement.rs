//! Enforcement you can dial: what happens to a rule's finding (deny, warn,
//! audit, off) and who is exempt. The settings block and the one function
//! that resolves a finding's action; `admission` applies it to every
//! decision, so the server, the CLI and the Kubewarden policy agree.
//!
//! Two kinds of finding:
//!
//! * **rule findings** — a project rule (stable id) or the upstream schema
//!   (`upstream-schema`) says the object is wrong. The default `mode` and
//!   the exemptions apply to them, and a per-rule override beats the mode.
//! * **fail-closed denials** — the webhook cannot decide (the etcd
//!   StatefulSet without its HostedControlPlane, a template it cannot
//!   understand, a request it cannot judge, an internal error). Letting one
//!   through can start etcd empty and lose a restore, so neither the mode nor
//!   an exemption ever relaxes one: only naming its id under `rules` does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{api::upstream_rules, finding::Severity};

/// Every upstream schema or CEL error (the CRD's own rules).
pub const UPSTREAM_SCHEMA: &str = "upstream-schema";
/// The etcd StatefulSet's restore decision cannot be established (403).
pub const ETCD_INIT_UNDECIDABLE: &str = "etcd-init-undecidable";
/// The etcd StatefulSet's template cannot be understood (422).
pub const ETCD_INIT_TEMPLATE: &str = "etcd-init-template";
/// The request cannot be judged (400: wrong endpoint, no object).
pub const BAD_REQUEST: &str = "bad-request";
/// The webhook failed (500).
pub const INTERNAL_ERROR: &str = "internal-error";

/// The fail-closed ids: never relaxed by `mode` or an exemption.
pub const FAIL_CLOSED: &[&str] = &[ETCD_INIT_UNDECIDABLE, ETCD_INIT_TEMPLATE, BAD_REQUEST, INTERNAL_ERROR];

/// The ids a finding can carry besides the project rules' and upstream's.
pub const PSEUDO_RULES: &[&str] =
    &[UPSTREAM_SCHEMA, ETCD_INIT_UNDECIDABLE, ETCD_INIT_TEMPLATE, BAD_REQUEST, INTERNAL_ERROR];

/// What a pseudo id stands for (SARIF's rule list, the docs).
pub fn pseudo_rule_summary(id: &str) -> &'static str {
    match id {
        UPSTREAM_SCHEMA => "upstream's schema: structural errors (type, required, enum, size), and every upstream CEL rule at once",
        ETCD_INIT_UNDECIDABLE => "the etcd StatefulSet's restore decision cannot be established (no readable HostedControlPlane): fails closed",
        ETCD_INIT_TEMPLATE => "the etcd StatefulSet's template cannot be understood exactly: fails closed",
        BAD_REQUEST => "the request cannot be judged (wrong endpoint or kind, no object)",
        INTERNAL_ERROR => "the webhook failed: fails closed",
        _ => "",
    }
}

/// The default for every rule finding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Findings deny (the default).
    #[default]
    Deny,
    /// Findings become warnings with the same text; the request is allowed.
    Warn,
    /// Findings are recorded (audit annotation, metric, log) without a warning.
    Audit,
}

/// A per-rule override.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    Deny,
    Warn,
    Audit,
    Off,
}

/// Requests whose rule findings never deny.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Exemptions {
    /// Namespaces (exact names) of the object.
    pub namespaces: Vec<String>,
    /// `userInfo.username` values (exact).
    pub users: Vec<String>,
    /// `userInfo.groups` entries (exact).
    pub groups: Vec<String>,
}

/// The `enforcement` settings block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Enforcement {
    pub mode: Mode,
    /// Rule id → action; beats `mode`. The only way to relax a fail-closed id.
    pub rules: BTreeMap<String, RuleAction>,
    pub exemptions: Exemptions,
}

crate::labels::label_enum!(
    /// What happened to one finding (a closed set: metric label values).
    pub Enforced {
        Denied => "denied",
        Warned => "warned",
        Audited => "audited",
        Off => "off",
        Exempt => "exempt",
    }
);

/// One finding and what enforcement did with it (carried by the decision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleResult {
    /// A rule id of the catalog (a project rule, an upstream rule, or one of
    /// [`PSEUDO_RULES`]): a closed set, fit for a metric label.
    pub rule: &'static str,
    pub outcome: Enforced,
}

/// Who sent the request and where the object lives.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requester<'a> {
    pub namespace: &'a str,
    pub username: &'a str,
    pub groups: &'a [String],
}

impl Enforcement {
    /// Why `who` is exempt, if they are (`namespace "x"`, `user "y"`, `group "z"`).
    pub fn exemption(&self, who: &Requester<'_>) -> Option<String> {
        let e = &self.exemptions;
        if !who.namespace.is_empty() && e.namespaces.iter().any(|n| n == who.namespace) {
            return Some(format!("namespace {:?}", who.namespace));
        }
        if !who.username.is_empty() && e.users.iter().any(|u| u == who.username) {
            return Some(format!("user {:?}", who.username));
        }
        who.groups.iter().find(|g| e.groups.contains(g)).map(|g| format!("group {g:?}"))
    }

    /// The action named for `rule`: its own entry, else for one of
    /// upstream's rules the `upstream-schema` entry ("all upstream").
    fn named(&self, rule: &str) -> Option<RuleAction> {
        self.rules
            .get(rule)
            .copied()
            .or_else(|| upstream_rules::is_upstream(rule).then(|| self.rules.get(UPSTREAM_SCHEMA).copied()).flatten())
    }

    /// What to do with a denying finding of `rule` for a request (`exempt`:
    /// the requester is exempt). Fail-closed ids deny unless named under `rules`.
    pub fn outcome(&self, rule: &str, exempt: bool) -> Enforced {
        let named = self.named(rule).map(|a| match a {
            RuleAction::Deny => Enforced::Denied,
            RuleAction::Warn => Enforced::Warned,
            RuleAction::Audit => Enforced::Audited,
            RuleAction::Off => Enforced::Off,
        });
        if FAIL_CLOSED.contains(&rule) {
            return named.unwrap_or(Enforced::Denied);
        }
        if exempt {
            return Enforced::Exempt;
        }
        named.unwrap_or(match self.mode {
            Mode::Deny => Enforced::Denied,
            Mode::Warn => Enforced::Warned,
            Mode::Audit => Enforced::Audited,
        })
    }

    /// What to do with a warning of `rule`: the same dial, capped at a
    /// warning (a warning never becomes a denial; `deny` for a warn-level
    /// rule is refused by [`Self::problems`]). `mode: deny` and `mode: warn`
    /// keep it a warning, `mode: audit` and `audit` record it without one,
    /// `off` drops it, an exempt requester has it recorded as exempt.
    pub fn warning_outcome(&self, rule: &str, exempt: bool) -> Enforced {
        match self.outcome(rule, exempt) {
            Enforced::Denied => Enforced::Warned,
            other => other,
        }
    }

    /// Whether this block changes nothing (every finding denies, nobody is exempt).
    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Checks the block against the rule catalog (`severity_of` gives each
    /// known id's severity, `None` for an unknown one); every problem names
    /// its key and what is accepted.
    pub fn problems(&self, severity_of: impl Fn(&str) -> Option<Severity>) -> Vec<String> {
        let mut out = Vec::new();
        for (id, action) in &self.rules {
            match severity_of(id) {
                None => out.push(format!(
                    "enforcement.rules: unknown rule id {id:?} (every id `hcp-etcd-admission rules` prints is accepted, and {})",
                    PSEUDO_RULES.join(", ")
                )),
                Some(Severity::Warn) if *action == RuleAction::Deny => out.push(format!(
                    "enforcement.rules.{id}: deny: {id} is a warn-level rule (it reports what may fail later, not what is invalid now), so it cannot deny; use warn, audit or off"
                )),
                Some(_) => {}
            }
        }
        for ns in &self.exemptions.namespaces {
            if !is_dns_label(ns) {
                out.push(format!("enforcement.exemptions.namespaces: {ns:?} is not a namespace name (a DNS label)"));
            }
        }
        for (key, list) in [("users", &self.exemptions.users), ("groups", &self.exemptions.groups)] {
            if list.iter().any(|v| v.trim().is_empty()) {
                out.push(format!("enforcement.exemptions.{key}: entries must not be empty"));
            }
        }
        out
    }
}

/// A namespace name: a DNS label (RFC 1123).
fn is_dns_label(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= 63
        && ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !ns.starts_with('-')
        && !ns.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(mode: Mode, rules: &[(&str, RuleAction)]) -> Enforcement {
        Enforcement {
            mode,
            rules: rules.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            exemptions: Exemptions::default(),
        }
    }

    #[test]
    fn mode_sets_the_default_and_overrides_beat_it() {
        let e = with(Mode::Warn, &[("restore-url-expired", RuleAction::Deny), ("restore-url-format", RuleAction::Off)]);
        assert_eq!(e.outcome("restore-url-s3-scheme", false), Enforced::Warned);
        assert_eq!(e.outcome("restore-url-expired", false), Enforced::Denied);
        assert_eq!(e.outcome("restore-url-format", false), Enforced::Off);
        assert_eq!(with(Mode::Audit, &[]).outcome(UPSTREAM_SCHEMA, false), Enforced::Audited);
        assert_eq!(with(Mode::Deny, &[]).outcome(UPSTREAM_SCHEMA, false), Enforced::Denied);
    }

    #[test]
    fn fail_closed_ids_deny_in_every_mode_and_for_the_exempt_unless_named() {
        for mode in [Mode::Deny, Mode::Warn, Mode::Audit] {
            for id in FAIL_CLOSED {
                assert_eq!(with(mode, &[]).outcome(id, true), Enforced::Denied, "{id} in {mode:?}");
            }
        }
        let named = with(Mode::Deny, &[(ETCD_INIT_UNDECIDABLE, RuleAction::Warn)]);
        assert_eq!(named.outcome(ETCD_INIT_UNDECIDABLE, false), Enforced::Warned);
        assert_eq!(named.outcome(ETCD_INIT_TEMPLATE, true), Enforced::Denied);
    }

    #[test]
    fn exemptions_match_namespace_user_or_group_exactly() {
        let mut e = Enforcement::default();
        e.exemptions.namespaces = vec!["clusters-dev".into()];
        e.exemptions.users = vec!["alice".into()];
        e.exemptions.groups = vec!["sre".into()];
        let groups = vec!["system:authenticated".to_string(), "sre".to_string()];
        let who = |namespace, username, groups| Requester { namespace, username, groups };
        assert_eq!(e.exemption(&who("clusters-dev", "", &[])).as_deref(), Some("namespace \"clusters-dev\""));
        assert_eq!(e.exemption(&who("clusters-prod", "alice", &[])).as_deref(), Some("user \"alice\""));
        assert_eq!(e.exemption(&who("clusters-prod", "bob", &groups)).as_deref(), Some("group \"sre\""));
        assert_eq!(e.exemption(&who("clusters-devx", "alic", &groups[..1])), None);
        assert_eq!(e.outcome("restore-url-expired", true), Enforced::Exempt);
    }

    #[test]
    fn unknown_ids_and_bad_exemptions_are_refused_by_key() {
        let mut e = with(Mode::Deny, &[("restore-url-expird", RuleAction::Off)]);
        e.exemptions.namespaces = vec!["Bad_NS".into()];
        e.exemptions.groups = vec![" ".into()];
        let p = e.problems(known);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("enforcement.rules: unknown rule id \"restore-url-expird\""), "{p:?}");
        assert!(p[1].starts_with("enforcement.exemptions.namespaces"), "{p:?}");
        assert!(p[2].starts_with("enforcement.exemptions.groups"), "{p:?}");
        assert!(with(Mode::Warn, &[(ETCD_INIT_TEMPLATE, RuleAction::Deny)]).problems(known).is_empty());
    }

    /// A stand-in catalog: one warn-level rule, one deny-level rule, the pseudo ids.
    fn known(id: &str) -> Option<Severity> {
        match id {
            "restore-url-expiring" => Some(Severity::Warn),
            "restore-url-expired" => Some(Severity::Deny),
            id if PSEUDO_RULES.contains(&id) || upstream_rules::is_upstream(id) => Some(Severity::Deny),
            _ => None,
        }
    }

    #[test]
    fn a_warn_level_rule_cannot_deny_and_upstream_ids_are_accepted() {
        let e = with(
            Mode::Deny,
            &[
                ("restore-url-expiring", RuleAction::Deny),
                ("upstream.hcpetcdbackup.spec.storage.s3-union", RuleAction::Off),
            ],
        );
        let p = e.problems(known);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("enforcement.rules.restore-url-expiring: deny:")
                && p[0].contains("use warn, audit or off")
        );
    }

    #[test]
    fn warnings_follow_the_dial_but_never_deny() {
        let w = "restore-url-expiring";
        assert_eq!(with(Mode::Deny, &[]).warning_outcome(w, false), Enforced::Warned);
        assert_eq!(with(Mode::Warn, &[]).warning_outcome(w, false), Enforced::Warned);
        assert_eq!(with(Mode::Audit, &[]).warning_outcome(w, false), Enforced::Audited);
        assert_eq!(with(Mode::Deny, &[(w, RuleAction::Off)]).warning_outcome(w, false), Enforced::Off);
        assert_eq!(with(Mode::Deny, &[(w, RuleAction::Audit)]).warning_outcome(w, false), Enforced::Audited);
        assert_eq!(with(Mode::Deny, &[]).warning_outcome(w, true), Enforced::Exempt);
    }

    #[test]
    fn upstream_schema_off_never_relaxes_a_fail_closed_id() {
        for mode in [Mode::Deny, Mode::Warn, Mode::Audit] {
            let e = with(mode, &[(UPSTREAM_SCHEMA, RuleAction::Off)]);
            for id in FAIL_CLOSED {
                assert_eq!(e.outcome(id, false), Enforced::Denied, "{id} in {mode:?}");
                assert_eq!(e.outcome(id, true), Enforced::Denied, "{id} exempt in {mode:?}");
            }
        }
        assert!(PSEUDO_RULES.iter().all(|id| !pseudo_rule_summary(id).is_empty()));
    }

    #[test]
    fn upstream_schema_names_every_upstream_rule_and_an_id_beats_it() {
        let s3 = "upstream.hcpetcdbackup.spec.storage.s3-union";
        let azure = "upstream.hcpetcdbackup.spec.storage.azureblob-union";
        let e = with(Mode::Deny, &[(UPSTREAM_SCHEMA, RuleAction::Audit), (s3, RuleAction::Off)]);
        assert_eq!(e.outcome(s3, false), Enforced::Off);
        assert_eq!(e.outcome(azure, false), Enforced::Audited);
        assert_eq!(e.outcome("restore-url-expired", false), Enforced::Denied);
    }
}
