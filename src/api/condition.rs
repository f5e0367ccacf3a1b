//! `metav1.Condition` with the bounds the apiserver's own schema carries.
//!
//! k8s-openapi's `Condition` schema has no length or pattern bounds; upstream
//! CRDs carry the full metav1 schema, and unbounded strings would also blow
//! the CEL cost budget. So the schema is spelled out here.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Condition contains details for one aspect of the current state of this API Resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// lastTransitionTime is the last time the condition transitioned from one status to another.
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
    /// message is a human readable message indicating details about the transition.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// observedGeneration represents the .metadata.generation that the condition was set based upon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// reason contains a programmatic identifier indicating the reason for the condition's last transition.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"))]
    pub reason: String,
    /// status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,
    /// type of condition in CamelCase or in foo.example.com/CamelCase.
    #[serde(rename = "type")]
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        )
    )]
    pub type_: String,
}

/// The status of a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}
