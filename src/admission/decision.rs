//! The core's answer to one request, typed: a verdict (allowed, or a denial
//! with the `metav1.Status` parts the apiserver would build), warnings and
//! an optional JSON patch. Only the wire (`wire.rs`) turns it into an
//! AdmissionReview; every shell reads it as it is.
//!
//! A 422 denial is `errors.NewInvalid`: reason Invalid, one cause per field
//! error, and the message `<Kind>.<group> "<name>" is invalid: ...`.

use serde::Serialize;

use crate::{
    finding::Warning,
    schema::{go_quote, FieldError},
};

/// The decision for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    /// Shown by kubectl; also on an allowed request.
    pub warnings: Vec<Warning>,
    /// The JSON patch (RFC 6902) to apply; mutations only, never with a denial.
    pub patch: Option<json_patch::Patch>,
    /// What the etcd-init mutation did, when it ran (for metrics).
    pub etcd_init: Option<crate::mutate::Outcome>,
    /// What the backup Job mutation did, when it ran (for metrics).
    pub backup_verify: Option<crate::mutate::backup_job::Verify>,
    /// The credentials Secret the decision read and judged, when it did (the
    /// server's `credentials_valid` gauge): the shells count what the core
    /// found, never judge the Secret again.
    pub credentials: Option<crate::rules::CredentialsSeen>,
    /// Every finding and what enforcement did with it (metrics, log line).
    pub rules: Vec<crate::enforcement::RuleResult>,
    /// Audit annotations for the response (audit-mode and exempt findings).
    pub audit_annotations: std::collections::BTreeMap<String, String>,
}

/// Allowed, or denied with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied(Denial),
}

/// A denial as the apiserver would report it (`metav1.Status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub reason: DenialReason,
    pub message: String,
    /// The object and every cause (422 Invalid; 403 Forbidden without causes).
    pub details: Option<Details>,
}

crate::labels::label_enum!(
    /// `metav1.StatusReason` (its text), with its HTTP code.
    pub DenialReason {
        /// 422: the object violates its schema or a rule.
        Invalid => "Invalid",
        /// 400: the request cannot be judged (wrong kind, no object).
        BadRequest => "BadRequest",
        /// 403: what the decision needs cannot be established (the etcd
        /// StatefulSet without its HostedControlPlane).
        Forbidden => "Forbidden",
        /// 500: this webhook cannot work (a schema that does not parse, a patch
        /// that does not serialise); fails closed.
        InternalError => "InternalError",
    }
);

impl DenialReason {
    pub fn code(self) -> u16 {
        match self {
            DenialReason::Invalid => 422,
            DenialReason::BadRequest => 400,
            DenialReason::Forbidden => 403,
            DenialReason::InternalError => 500,
        }
    }
}

/// `metav1.StatusDetails` of an Invalid or Forbidden denial (serialised as
/// the wire's `status.details`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Details {
    pub name: String,
    pub group: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
}

/// `metav1.StatusCause`: one field error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueTooMany`, ...
    pub reason: &'static str,
    /// The field error without its path (`field.Error.ErrorBody()`).
    pub message: String,
    pub field: String,
    /// The project rule that found it (`None`: the upstream schema, or the
    /// etcd StatefulSet template); never on the wire.
    #[serde(skip)]
    pub rule: Option<&'static str>,
}

impl Cause {
    fn of(e: &FieldError) -> Self {
        Self { reason: e.kind.cause_reason(), message: e.body(), field: e.field.clone(), rule: e.rule_id }
    }

    /// The error as the denial message shows it (`field.Error.Error()`).
    pub fn text(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// The message of `errors.NewInvalid`: `<Kind>.<group> "<name>" is invalid: <err>`
/// for one distinct error, `... is invalid: [<err>, <err>]` for several (the
/// error list's aggregate drops repeated messages; the causes keep them), and
/// `... is invalid` with none. The name is quoted with Go's `%q`.
pub fn denial_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    invalid_message(kind, group, name, errors.iter().map(ToString::to_string))
}

/// [`denial_message`] from the errors' texts.
pub(crate) fn invalid_message(kind: &str, group: &str, name: &str, texts: impl Iterator<Item = String>) -> String {
    let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    // A set of the texts seen, as Go's aggregate keeps one: linear, where
    // `Vec::contains` made a review with one error per list item quadratic.
    let mut seen = std::collections::HashSet::new();
    let mut distinct: Vec<String> = Vec::new();
    for text in texts {
        if seen.insert(text.clone()) {
            distinct.push(text);
        }
    }
    let name = go_quote(name);
    match distinct.as_slice() {
        [] => format!("{qualified} {name} is invalid"),
        [one] => format!("{qualified} {name} is invalid: {one}"),
        many => format!("{qualified} {name} is invalid: [{}]", many.join(", ")),
    }
}

impl Decision {
    /// Allowed, with warnings.
    pub fn allow(warnings: Vec<Warning>) -> Self {
        Self::of(Verdict::Allowed, warnings)
    }

    /// Allowed with a JSON patch.
    pub fn mutate(patch: json_patch::Patch, warnings: Vec<Warning>) -> Self {
        Self { patch: Some(patch), ..Self::allow(warnings) }
    }

    /// A verdict and its warnings; nothing else recorded yet.
    fn of(verdict: Verdict, warnings: Vec<Warning>) -> Self {
        Self {
            verdict,
            warnings,
            patch: None,
            etcd_init: None,
            backup_verify: None,
            credentials: None,
            rules: Vec::new(),
            audit_annotations: Default::default(),
        }
    }

    /// Records what the etcd-init mutation did.
    pub fn with_etcd_init(mut self, outcome: crate::mutate::Outcome) -> Self {
        self.etcd_init = Some(outcome);
        self
    }

    /// Records what the backup Job mutation did.
    pub fn with_backup_verify(mut self, verify: crate::mutate::backup_job::Verify) -> Self {
        self.backup_verify = Some(verify);
        self
    }

    /// Records the credentials Secret the decision judged.
    pub fn with_credentials(mut self, seen: Option<crate::rules::CredentialsSeen>) -> Self {
        self.credentials = seen;
        self
    }

    /// A 422 Invalid denial listing every field error.
    /// At most [`super::answer_bounds::MAX_CAUSES`] errors are reported;
    /// one last cause says there were more.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError], warnings: Vec<Warning>) -> Self {
        let max = super::answer_bounds::MAX_CAUSES;
        let capped: Vec<FieldError>;
        // One over the cap passes as it is: the schema's own list ends with its marker there.
        let errors = if errors.len() > max + 1 {
            capped = errors.iter().take(max).cloned().chain([FieldError::too_many_errors(max)]).collect();
            capped.as_slice()
        } else {
            errors
        };
        let denial = Denial {
            reason: DenialReason::Invalid,
            message: denial_message(kind, group, name, errors),
            details: Some(Details {
                name: name.to_string(),
                group: group.to_string(),
                kind: kind.to_string(),
                causes: errors.iter().map(Cause::of).collect(),
            }),
        };
        Self::of(Verdict::Denied(denial), warnings)
    }

    /// A 403 denial in `errors.NewForbidden`'s shape:
    /// `<resource>.<group> "<name>" is forbidden: <reason>`.
    pub fn forbidden(resource: &str, group: &str, name: &str, reason: &str, warnings: Vec<Warning>) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        let denial = Denial {
            reason: DenialReason::Forbidden,
            message: format!("{qualified} {} is forbidden: {reason}", go_quote(name)),
            details: Some(Details {
                name: name.to_string(),
                group: group.to_string(),
                kind: resource.to_string(),
                causes: Vec::new(),
            }),
        };
        Self::of(Verdict::Denied(denial), warnings)
    }

    /// A 400 denial for a request that cannot be judged.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(DenialReason::BadRequest, message.into())
    }

    /// A 500 denial: this webhook failed; it fails closed, with the reason.
    pub fn internal_error(message: impl Into<String>) -> Self {
        Self::failure(DenialReason::InternalError, message.into())
    }

    fn failure(reason: DenialReason, message: String) -> Self {
        let denial = Denial { reason, message, details: None };
        Self::of(Verdict::Denied(denial), Vec::new())
    }

    pub fn allowed(&self) -> bool {
        matches!(self.verdict, Verdict::Allowed)
    }

    /// The denial, when denied.
    pub fn denial(&self) -> Option<&Denial> {
        match &self.verdict {
            Verdict::Allowed => None,
            Verdict::Denied(d) => Some(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_reports_at_most_max_causes_and_says_there_were_more() {
        let max = super::super::answer_bounds::MAX_CAUSES;
        let errors: Vec<FieldError> = (0..20_000).map(|i| FieldError::required(format!("spec.f{i}"))).collect();
        let d = Decision::invalid("K", "g", "n", &errors, vec![]);
        let Verdict::Denied(denial) = &d.verdict else { panic!("{d:?}") };
        let causes = &denial.details.as_ref().expect("details").causes;
        assert_eq!(causes.len(), max + 1);
        assert!(denial.message.contains("spec.f255: Required value") && !denial.message.contains("spec.f256:"));
        assert!(denial
            .message
            .ends_with(&format!("only the first {max} are reported; correct them and validate again]")));
        // At the cap (the schema's own list, its marker last): as it is.
        let d = Decision::invalid("K", "g", "n", &errors[..max + 1], vec![]);
        let Verdict::Denied(denial) = &d.verdict else { panic!("{d:?}") };
        assert!(denial.message.contains(&format!("spec.f{max}: Required value")));
    }

    #[test]
    fn denial_message_has_the_shapes_of_errors_new_invalid() {
        let e1 = FieldError::required("spec.a");
        let e2 = FieldError::too_long("spec.b", 3);
        let kind = "HCPEtcdBackup";
        let group = "hypershift.openshift.io";
        assert_eq!(
            denial_message(kind, group, "x", std::slice::from_ref(&e1)),
            r#"HCPEtcdBackup.hypershift.openshift.io "x" is invalid: spec.a: Required value"#
        );
        assert_eq!(
            denial_message(kind, group, "x", &[e1.clone(), e2.clone()]),
            r#"HCPEtcdBackup.hypershift.openshift.io "x" is invalid: [spec.a: Required value, spec.b: Too long: may not be more than 3 bytes]"#
        );
        // The aggregate drops repeated messages (one left: the single form); causes keep both.
        assert_eq!(
            denial_message(kind, group, "x", &[e1.clone(), e1.clone()]),
            r#"HCPEtcdBackup.hypershift.openshift.io "x" is invalid: spec.a: Required value"#
        );
        let d = Decision::invalid(kind, group, "x", &[e1.clone(), e1], Vec::new());
        assert_eq!(d.denial().and_then(|d| d.details.as_ref()).map(|d| d.causes.len()), Some(2));
        assert_eq!(d.denial().map(|d| d.reason.code()), Some(422));
        assert_eq!(denial_message("Pod", "", "a\u{1}", &[]), "Pod \"a\\x01\" is invalid");
    }
}
