//! `SecretReference`: the credentials Secret of a backup destination.
//!
//! Upstream's type doc says "same namespace as the referencing resource"; the
//! controller actually reads the Secret from the HyperShift Operator namespace.
//! The field docs here say what the controller does.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A reference to a Secret in the HyperShift Operator namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct SecretReference {
    /// name is the name of the Secret holding the storage credentials. The
    /// Secret must exist in the HyperShift Operator namespace.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("name must consist only of lowercase alphanumeric characters, hyphens, and periods. Each period-separated segment must start and end with an alphanumeric character."))]
    pub name: String,
}
