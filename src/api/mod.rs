//! API types: the single source of truth for every schema rule.
//!
//! Each CEL rule the apiserver can enforce lives here once, as an
//! `x-kubernetes-validations` entry on the Rust type (kube's `KubeSchema`
//! derive). The CRD in `crds/` is generated from these types, and the webhook,
//! the CLI and the Wasm policy evaluate the very same rule text locally
//! (see [`crate::schema`]). Upstream HyperShift messages are kept verbatim
//! because users search for them.

pub mod condition;
pub mod etcdbackup;
pub mod hostedcluster;
pub mod names;
pub mod patterns;
pub mod readers;
pub mod secret_ref;
pub mod upstream_rules;

pub use condition::Condition;
pub use etcdbackup::*;
pub use hostedcluster::*;
pub use readers::{restore_snapshot_url, snapshot_restored, unmanaged_etcd};
pub use secret_ref::SecretReference;

/// The API group every type of this crate belongs to.
pub const GROUP: &str = "hypershift.openshift.io";
/// The served and storage version.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of this crate's types: `GROUP/VERSION` (a test holds it so).
pub const API_VERSION: &str = "hypershift.openshift.io/v1beta1";

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_version_is_group_slash_version() {
        assert_eq!(super::API_VERSION, format!("{}/{}", super::GROUP, super::VERSION));
    }
}
