//! AdmissionReview v1 as it goes on the wire: the request parsed into typed
//! fields, the core's [`Decision`] encoded into the response.
//!
//! kube-core's `AdmissionResponse` serialises `patch` as an array of numbers
//! (kube-rs#1781); the apiserver requires a base64 string and rejects a
//! `patchType` without a `patch`. So this crate owns its wire types.

use crate::json_at::At;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    decision::{Decision, Verdict},
    ReviewError,
};

pub const API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

/// `request.operation`. Anything else does not parse (the request is answered
/// with a 400 naming the problem).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The fields of `AdmissionRequest` the decision uses.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Who sent the request (exemptions, the review log line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_info: Option<UserInfo>,
}

impl AdmissionRequest {
    /// The request's namespace, else the object's: the apiserver always
    /// fills the request's, a review written by hand may leave it out.
    pub fn namespace_or_object(&self) -> &str {
        self.namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .or_else(|| self.object.as_ref()?.at("/metadata/namespace").and_then(Value::as_str))
            .unwrap_or_default()
    }

    /// The object's name, else the request's (empty when neither says).
    pub fn object_name(&self) -> &str {
        self.object
            .as_ref()
            .and_then(|o| o.at("/metadata/name"))
            .and_then(Value::as_str)
            .or(self.name.as_deref())
            .unwrap_or_default()
    }

    /// The subresource written (`""`: the main resource).
    pub fn subresource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or_default()
    }

    /// A write of the object itself: CREATE or UPDATE of the main resource.
    pub fn writes_main_resource(&self) -> bool {
        matches!(self.operation, Operation::Create | Operation::Update) && self.subresource().is_empty()
    }

    /// A CREATE of the main resource.
    pub fn creates_main_resource(&self) -> bool {
        self.operation == Operation::Create && self.subresource().is_empty()
    }
}

/// `authenticationv1.UserInfo`: the parts the decision uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// `metav1.Status` of a denial; its details are the decision's own
/// ([`super::Details`], which serialises as `metav1.StatusDetails`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    pub metadata: serde_json::Map<String, Value>,
    pub status: String,
    pub message: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<super::Details>,
    pub code: u16,
}

/// `AdmissionResponse` exactly as the apiserver accepts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Base64 of the JSON patch; `patchType` is set only with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Recorded in the apiserver's audit log as `<webhook name>/<key>`
    /// (audit-mode and exempt findings).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub audit_annotations: std::collections::BTreeMap<String, String>,
}

impl AdmissionResponse {
    /// The wire form of `decision`: the status of a denial, the patch as
    /// base64 with `patchType: JSONPatch` (only with a patch). A patch that
    /// does not serialise is an error, never an empty patch.
    pub fn encode(uid: String, decision: &Decision) -> Result<Self, serde_json::Error> {
        use base64::Engine as _;
        let patch = match &decision.patch {
            Some(p) => Some(base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(p)?)),
            None => None,
        };
        let status = match &decision.verdict {
            Verdict::Allowed => None,
            Verdict::Denied(d) => Some(Status {
                metadata: serde_json::Map::new(),
                status: "Failure".to_string(),
                message: d.message.clone(),
                reason: d.reason.as_str().to_string(),
                details: d.details.clone(),
                code: d.reason.code(),
            }),
        };
        Ok(Self {
            uid,
            allowed: decision.allowed(),
            status,
            patch_type: patch.as_ref().map(|_| "JSONPatch".to_string()),
            patch,
            warnings: crate::finding::texts(&decision.warnings),
            audit_annotations: decision.audit_annotations.clone(),
        })
    }

    /// Wraps the response in an AdmissionReview v1.
    pub fn into_review(self) -> Value {
        serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "response": self,
        })
    }
}

/// Parses an AdmissionReview, taking its request over: the uid, and the
/// request or why it does not parse (a request with a uid can be answered).
pub fn parse_review(input: Value) -> Result<(String, Result<AdmissionRequest, String>), ReviewError> {
    let Value::Object(mut obj) = input else {
        return Err(ReviewError::NotAReview(format!("expected a JSON object, got {}", type_name(&input))));
    };
    match obj.get("kind").and_then(Value::as_str) {
        Some("AdmissionReview") => {}
        Some(other) => {
            return Err(ReviewError::NotAReview(format!("kind is {:?}, expected \"AdmissionReview\"", shown(other))))
        }
        None => return Err(ReviewError::NotAReview("missing \"kind\": \"AdmissionReview\"".to_string())),
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => return Err(ReviewError::WrongApiVersion(shown(other))),
        None => return Err(ReviewError::WrongApiVersion(String::new())),
    }
    let Some(request) = obj.remove("request").filter(|r| !r.is_null()) else {
        return Err(ReviewError::MissingRequest);
    };
    let uid = request.get("uid").and_then(Value::as_str).filter(|u| !u.is_empty());
    let Some(uid) = uid.map(str::to_string) else {
        return Err(ReviewError::MissingUid);
    };
    if uid.len() > MAX_UID {
        return Err(ReviewError::UidTooLong(MAX_UID));
    }
    let parsed = AdmissionRequest::deserialize(request).map_err(request_problem);
    Ok((uid, parsed))
}

/// Longest uid answered (it is echoed in the answer; the apiserver's are 36 bytes).
pub const MAX_UID: usize = 256;
/// Longest piece of the request an error message echoes (serde's messages
/// quote the offending value whole).
const MAX_ECHOED: usize = 256;

/// `text` cut to [`MAX_ECHOED`] bytes (on a character boundary), `...` after.
fn shown(text: &str) -> String {
    if text.len() <= MAX_ECHOED {
        return text.to_string();
    }
    let end = (0..=MAX_ECHOED).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}...", text.get(..end).unwrap_or_default())
}

fn request_problem(e: serde_json::Error) -> String {
    let text = e.to_string();
    // The message, not the value it quotes: at most MAX_ECHOED bytes of it each side.
    let text = if text.len() > 2 * MAX_ECHOED { shown(&text) } else { text };
    format!("the AdmissionReview request does not parse: {text}")
}

/// Parses `request` of an AdmissionReview (the webhook) or of a Kubewarden
/// ValidationRequest (the policy): one parser, one message.
pub fn parse_request(request: &Value) -> Result<AdmissionRequest, String> {
    // Deserialize from the borrowed value: no copy of the whole request first.
    AdmissionRequest::deserialize(request).map_err(request_problem)
}

/// As [`parse_request`], from a request the caller owns: its strings, maps
/// and lists move into the `AdmissionRequest` (no copy of the objects).
pub fn parse_request_owned(request: Value) -> Result<AdmissionRequest, String> {
    AdmissionRequest::deserialize(request).map_err(request_problem)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Error answers echo at most a few hundred bytes of the request (an
    /// error quoting a 1 MiB `kind` was 4 MiB), and a uid longer than any
    /// apiserver's is refused rather than echoed.
    #[test]
    fn what_an_error_echoes_is_bounded() {
        let long = "\u{300}".repeat(512 * 1024);
        let e = parse_review(json!({"kind": long, "apiVersion": API_VERSION})).expect_err("not a review");
        assert!(e.to_string().len() < 1024, "{}", e.to_string().len());
        let e = parse_review(json!({"kind": "AdmissionReview", "apiVersion": long})).expect_err("wrong version");
        assert!(e.to_string().len() < 1024);
        let review = |uid: String, op: Value| json!({"kind": "AdmissionReview", "apiVersion": API_VERSION, "request": {"uid": uid, "operation": op}});
        assert_eq!(
            parse_review(review("u".repeat(MAX_UID + 1), json!("CREATE"))),
            Err(ReviewError::UidTooLong(MAX_UID))
        );
        let (_, parsed) = parse_review(review("u".into(), json!("x".repeat(1 << 20)))).expect("a uid");
        let problem = parsed.expect_err("the operation does not parse");
        assert!(problem.len() < 2048, "{}", problem.len());
    }
}
