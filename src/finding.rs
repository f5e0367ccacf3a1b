//! A warning, typed: the rule that raised it and the text kubectl shows;
//! and a rule's [`Severity`].
//!
//! Denials were always typed (a [`crate::schema::FieldError`] with its rule
//! id, then a `Cause`); warnings were strings with `" (rule <id>)"` appended
//! and parsed back by enforcement and `check`, so `enforcement` could not
//! reach a warn-level rule (an `off` rule still warned). A warning now
//! carries its rule id from where it is raised to every shell, next to its
//! text; nothing reads an id out of text.
//!
//! A warning without a rule is a *note*: the apiserver's own `unknown
//! field` notes and what the etcd-init mutation did. Notes are not findings:
//! no setting hides them.

use std::fmt;

/// Whether a rule denies or only warns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Deny,
    Warn,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Deny => "deny",
            Severity::Warn => "warn",
        }
    }
}

/// One warning: its rule (`None`: a note) and the text shown to the user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Warning {
    /// A project rule, an upstream CEL rule or a fail-closed id.
    pub rule: Option<&'static str>,
    /// What kubectl shows, whole (a rule's warning ends `(rule <id>)`).
    pub text: String,
}

impl Warning {
    /// A rule's warning about `field`: `<field>: <text> (rule <id>)`.
    pub fn of_rule(rule: &'static str, field: &str, text: impl fmt::Display) -> Self {
        Self { rule: Some(rule), text: format!("{field}: {text} (rule {rule})") }
    }

    /// A rule's warning whose text is already whole (it names the rule).
    pub fn ruled(rule: &'static str, text: String) -> Self {
        Self { rule: Some(rule), text }
    }

    /// A note: no rule, never hidden by enforcement.
    pub fn note(text: impl Into<String>) -> Self {
        Self { rule: None, text: text.into() }
    }

    /// Whether the text contains `needle` (tests and `check`'s comparisons).
    pub fn contains(&self, needle: &str) -> bool {
        self.text.contains(needle)
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A warning is serialised as its text, as the AdmissionReview carries it.
impl serde::Serialize for Warning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The texts of `warnings`, in order (the wire and the Kubewarden response).
pub fn texts(warnings: &[Warning]) -> Vec<String> {
    warnings.iter().map(|w| w.text.clone()).collect()
}
