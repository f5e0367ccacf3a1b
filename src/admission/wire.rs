//! AdmissionReview v1 as it goes on the wire.
//!
//! kube-core's `AdmissionResponse` serialises `patch` as an array of numbers
//! (kube-rs#1781); the apiserver requires a base64 string and rejects a
//! `patchType` without a `patch`. So this crate owns its wire types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{response::Verdict, ReviewError};

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
    pub operation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// `metav1.StatusCause`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// `metav1.StatusDetails` (the parts the apiserver fills for Invalid).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    pub name: String,
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
}

/// `metav1.Status` of a denial.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub metadata: serde_json::Map<String, Value>,
    pub status: String,
    pub message: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    pub code: u16,
}

/// `AdmissionResponse` exactly as the apiserver accepts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl AdmissionResponse {
    pub fn from_verdict(uid: String, v: Verdict) -> Self {
        Self { uid, allowed: v.allowed, status: v.status, patch: None, patch_type: None, warnings: v.warnings }
    }

    /// Sets the JSON patch (base64 on the wire, with `patchType: JSONPatch`).
    pub fn with_patch(mut self, patch: &json_patch::Patch) -> Self {
        use base64::Engine as _;
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        self.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
        self.patch_type = Some("JSONPatch".to_string());
        self
    }

    /// The JSON patch carried by the response, decoded from its wire form.
    pub fn patch_operations(&self) -> Option<Result<json_patch::Patch, String>> {
        use base64::Engine as _;
        let b64 = self.patch.as_deref()?;
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("patch is not base64: {e}"))
                .and_then(|bytes| {
                    serde_json::from_slice(&bytes).map_err(|e| format!("patch is not a JSON patch: {e}"))
                }),
        )
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

/// Parses an AdmissionReview. `Ok(Err((uid, problem)))` is a request that has
/// a uid (so it can be answered) but does not parse.
#[allow(clippy::type_complexity)]
pub fn parse_review(input: &Value) -> Result<Result<AdmissionRequest, (String, String)>, ReviewError> {
    let Some(obj) = input.as_object() else {
        return Err(ReviewError::NotAReview(format!("expected a JSON object, got {}", type_name(input))));
    };
    match obj.get("kind").and_then(Value::as_str) {
        Some("AdmissionReview") => {}
        Some(other) => return Err(ReviewError::NotAReview(format!("kind is {other:?}, expected \"AdmissionReview\""))),
        None => return Err(ReviewError::NotAReview("missing \"kind\": \"AdmissionReview\"".to_string())),
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(other) => return Err(ReviewError::WrongApiVersion(other.to_string())),
        None => return Err(ReviewError::WrongApiVersion(String::new())),
    }
    let Some(request) = obj.get("request").filter(|r| !r.is_null()) else {
        return Err(ReviewError::MissingRequest);
    };
    let uid = request.get("uid").and_then(Value::as_str).filter(|u| !u.is_empty());
    let Some(uid) = uid else {
        return Err(ReviewError::MissingUid);
    };
    // Deserialize from the borrowed value: no copy of the whole request first.
    match AdmissionRequest::deserialize(request) {
        Ok(req) => Ok(Ok(req)),
        Err(e) => Ok(Err((uid.to_string(), format!("the AdmissionReview request does not parse: {e}")))),
    }
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
