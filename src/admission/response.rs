//! Verdicts and the `metav1.Status` the apiserver builds for an invalid
//! object (`errors.NewInvalid`): code 422, reason Invalid, one cause per
//! field error, and the message `<Kind>.<group> "<name>" is invalid: ...`.

use serde_json::Map;

use super::wire::{Status, StatusCause, StatusDetails};
use crate::schema::FieldError;

/// The decision for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub status: Option<Status>,
    pub warnings: Vec<String>,
}

/// `<Kind>.<group> "<name>" is invalid: <err>` or `... is invalid: [<err>, <err>]`.
pub fn denial_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let body = if list.len() == 1 { list.concat() } else { format!("[{}]", list.join(", ")) };
    format!("{qualified} {name:?} is invalid: {body}")
}

impl Verdict {
    pub fn allow(warnings: Vec<String>) -> Self {
        Self { allowed: true, status: None, warnings }
    }

    /// A 422 Invalid denial listing every field error.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError], warnings: Vec<String>) -> Self {
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.cause_reason().to_string(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect();
        let status = Status {
            metadata: Map::new(),
            status: "Failure".to_string(),
            message: denial_message(kind, group, name, errors),
            reason: "Invalid".to_string(),
            details: Some(StatusDetails {
                name: name.to_string(),
                group: group.to_string(),
                kind: kind.to_string(),
                causes,
            }),
            code: 422,
        };
        Self { allowed: false, status: Some(status), warnings }
    }

    /// A 403 denial in `errors.NewForbidden`'s shape:
    /// `<resource>.<group> "<name>" is forbidden: <reason>`.
    pub fn forbidden(resource: &str, group: &str, name: &str, reason: &str, warnings: Vec<String>) -> Self {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        let status = Status {
            metadata: Map::new(),
            status: "Failure".to_string(),
            message: format!("{qualified} {name:?} is forbidden: {reason}"),
            reason: "Forbidden".to_string(),
            details: Some(StatusDetails {
                name: name.to_string(),
                group: group.to_string(),
                kind: resource.to_string(),
                causes: Vec::new(),
            }),
            code: 403,
        };
        Self { allowed: false, status: Some(status), warnings }
    }

    /// A 400 denial for a request that cannot be judged (wrong kind, bad object).
    pub fn bad_request(message: impl Into<String>) -> Self {
        let status = Status {
            metadata: Map::new(),
            status: "Failure".to_string(),
            message: message.into(),
            reason: "BadRequest".to_string(),
            details: None,
            code: 400,
        };
        Self { allowed: false, status: Some(status), warnings: Vec::new() }
    }
}
