//! The slice of `HostedCluster` / `HostedControlPlane` this project reads and checks.
//!
//! HC and HCP share `EtcdSpec` upstream, so both carry identical rules on
//! `spec.etcd`. Only the etcd part is modelled; every other field is preserved
//! as unknown so that the local schema check never judges what it does not own.
//! These types are never written to `crds/`: they are upstream's CRDs, and the
//! slice exists to evaluate upstream's rules and to read the HCP for the
//! restore injection.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    condition::Condition,
    patterns::{KEY_VAULT_URL_MESSAGE, KEY_VAULT_URL_RULE, KMS_ARN_MESSAGE, KMS_ARN_RULE},
};

/// HostedControlPlane condition set by the control-plane-operator once every
/// etcd member's `etcd-init` restore container has succeeded.
pub const ETCD_SNAPSHOT_RESTORED: &str = "EtcdSnapshotRestored";

/// The etcd part of `HostedCluster.spec`.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "hypershift.openshift.io",
    version = "v1beta1",
    kind = "HostedCluster",
    plural = "hostedclusters",
    namespaced,
    status = "HostedStatusSlice",
    doc = "The etcd slice of a HyperShift HostedCluster."
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HostedClusterSpec {
    /// etcd specifies how etcd is configured for the hosted control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdSpec>,
}

/// The etcd part of `HostedControlPlane.spec`.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "hypershift.openshift.io",
    version = "v1beta1",
    kind = "HostedControlPlane",
    plural = "hostedcontrolplanes",
    namespaced,
    status = "HostedStatusSlice",
    doc = "The etcd slice of a HyperShift HostedControlPlane."
)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HostedControlPlaneSpec {
    /// etcd specifies how etcd is configured for the hosted control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdSpec>,
}

/// The part of HC/HCP status this project reads: the conditions.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HostedStatusSlice {
    /// conditions of the hosted cluster / control plane.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// EtcdSpec: managed or unmanaged etcd (a union on `managementType`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
#[x_kube(validation = Rule::new("self.managementType == 'Managed' ? has(self.managed) : !has(self.managed)").message("Only managed configuration must be set when managementType is Managed"))]
#[x_kube(validation = Rule::new("self.managementType == 'Unmanaged' ? has(self.unmanaged) : !has(self.unmanaged)").message("Only unmanaged configuration must be set when managementType is Unmanaged"))]
pub struct EtcdSpec {
    /// managementType defines how the etcd cluster is managed.
    #[x_kube(validation = Rule::new("self == oldSelf").message("managementType is immutable"))]
    pub management_type: EtcdManagementType,
    /// managed specifies the behavior of an etcd cluster managed by HyperShift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<ManagedEtcdSpec>,
    /// unmanaged specifies configuration which enables the control plane to
    /// integrate with an externally managed etcd cluster (not checked here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unmanaged_schema")]
    pub unmanaged: Option<BTreeMap<String, serde_json::Value>>,
}

/// `unmanaged` is kept as it is, to any depth: `x-kubernetes-preserve-unknown-fields`
/// and nothing else. A map's usual `additionalProperties: true` would give
/// every value an empty schema, under which the apiserver prunes each key of
/// a nested object (`unmanaged.tls.clientSecret` would be dropped).
fn unmanaged_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "unmanaged specifies configuration which enables the control plane to\nintegrate with an externally managed etcd cluster (not checked here).",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// How etcd is managed.
#[derive(JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdManagementType {
    #[default]
    Managed,
    Unmanaged,
}

/// ManagedEtcdSpec: etcd run by HyperShift in the hosted control plane namespace.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ManagedEtcdSpec {
    /// storage specifies how etcd data is persisted.
    #[x_kube(validation = Rule::new("has(self.restoreSnapshotURL) == has(oldSelf.restoreSnapshotURL)").message("restoreSnapshotURL cannot be added or removed after creation"))]
    pub storage: ManagedEtcdStorageSpec,
    /// backup configures the encryption of etcd snapshots taken by HCPEtcdBackup
    /// (feature gate HCPEtcdBackup). Only used when an HCPEtcdBackup CR exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<HCPEtcdBackupConfig>,
}

/// ManagedEtcdStorageSpec: etcd persistence and the optional restore source.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ManagedEtcdStorageSpec {
    /// type is the kind of persistent storage for etcd.
    #[serde(rename = "type")]
    pub type_: ManagedEtcdStorageType,
    /// persistentVolume is the configuration for PersistentVolume etcd storage:
    /// one PersistentVolume for every etcd member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume: Option<PersistentVolumeEtcdStorageSpec>,
    /// restoreSnapshotURL is a pre-signed URL (or similar) from which an etcd
    /// snapshot is downloaded. It is restored on initial startup, only when the
    /// etcd PV is empty. One URL shared by every member.
    #[serde(rename = "restoreSnapshotURL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1), inner(length(max = 1024)))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    #[x_kube(validation = Rule::new("self.size() <= 1").message("RestoreSnapshotURL shouldn't contain more than 1 entry"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("restoreSnapshotURL is immutable"))]
    #[x_kube(validation = Rule::new("self.size() == 0 || self[0].matches('^(https|s3)://.*')").message("restoreSnapshotURL must be a valid URL with scheme https or s3"))]
    pub restore_snapshot_url: Option<Vec<String>>,
}

/// PersistentVolumeEtcdStorageSpec: the data volume of each etcd member. Both
/// fields are immutable in upstream HEAD (`hostedcluster_types.go`): the
/// StatefulSet's volumeClaimTemplates cannot change, so a change would only
/// ever be refused later.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeEtcdStorageSpec {
    /// storageClassName is the StorageClass of the data volume for each etcd member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("storageClassName is immutable"))]
    pub storage_class_name: Option<String>,
    /// size is the minimum size of the data volume for each etcd member.
    /// Default is 8Gi. This field is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("Etcd PV storage size is immutable"))]
    pub size: Option<serde_json::Value>,
}

/// A `resource.Quantity` as controller-gen writes it (integer or string, the
/// quantity pattern), with upstream's default of 8Gi, which the apiserver
/// applies before validating (so an omitted size is compared as 8Gi).
fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "size is the minimum size of the data volume for each etcd member.\nDefault is 8Gi. This field is immutable.",
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "default": "8Gi",
        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
        "x-kubernetes-int-or-string": true
    })
}

/// The storage type of managed etcd.
#[derive(JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManagedEtcdStorageType {
    #[default]
    PersistentVolume,
}

/// HCPEtcdBackupConfig: snapshot encryption for HCPEtcdBackup, a union on `platform`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[x_kube(validation = Rule::new("self.platform == 'AWS' ? has(self.aws) : !has(self.aws)").message("aws configuration is required when platform is AWS, and forbidden otherwise"))]
#[x_kube(validation = Rule::new("self.platform == 'Azure' ? has(self.azure) : !has(self.azure)").message("azure configuration is required when platform is Azure, and forbidden otherwise"))]
pub struct HCPEtcdBackupConfig {
    /// platform is the cloud of the backup destination.
    pub platform: BackupPlatform,
    /// aws configures the KMS key for S3 backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsBackupConfig>,
    /// azure configures the Key Vault key for Azure Blob backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureBackupConfig>,
}

/// The backup platform.
#[derive(JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackupPlatform {
    #[serde(rename = "AWS")]
    Aws,
    Azure,
}

/// KMS configuration for S3 backups.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwsBackupConfig {
    /// kmsKeyARN is the ARN of the KMS key for SSE-KMS.
    #[serde(rename = "kmsKeyARN")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(KMS_ARN_RULE).message(KMS_ARN_MESSAGE))]
    pub kms_key_arn: String,
}

/// Key Vault configuration for Azure Blob backups.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AzureBackupConfig {
    /// encryptionKeyURL is the Key Vault or Managed HSM key URL.
    #[serde(rename = "encryptionKeyURL")]
    #[schemars(length(min = 1, max = 210))]
    #[x_kube(validation = Rule::new(KEY_VAULT_URL_RULE).message(KEY_VAULT_URL_MESSAGE))]
    pub encryption_key_url: String,
}
