//! `HCPEtcdBackup` (hypershift.openshift.io/v1beta1): a one-shot etcd backup request.
//!
//! Mirrors upstream `api/hypershift/v1beta1/etcdbackup_types.go` field for field:
//! JSON names, enums, lengths, required keys and every CEL rule with its exact
//! message. Rules upstream does not have live in [`crate::rules`], not here,
//! so the generated CRD stays a faithful copy of upstream's.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    condition::Condition,
    patterns::{KEY_VAULT_URL_MESSAGE, KEY_VAULT_URL_RULE, KMS_ARN_MESSAGE, KMS_ARN_RULE, SNAPSHOT_URL_RULE},
    secret_ref::SecretReference,
};

/// The condition type the backup controller maintains.
pub const BACKUP_COMPLETED: &str = "BackupCompleted";
/// Reason: the snapshot was taken and uploaded.
pub const REASON_BACKUP_SUCCEEDED: &str = "BackupSucceeded";
/// Reason: the backup Job failed (terminal).
pub const REASON_BACKUP_FAILED: &str = "BackupFailed";
/// Reason: the backup Job is running.
pub const REASON_BACKUP_IN_PROGRESS: &str = "BackupInProgress";
/// Reason: the credentials Secret does not exist yet; the controller waits
/// for it (up to 2 minutes, then `BackupFailed`). Not terminal, and the
/// serial guard counts it as in progress.
pub const REASON_BACKUP_WAITING_FOR_CREDENTIALS: &str = "BackupWaitingForCredentials";
/// How long the controller waits for a missing credentials Secret, as Go prints it.
pub const CREDENTIALS_WAIT: &str = "2m0s";
/// Reason: another backup was running for the same hosted control plane (terminal).
pub const REASON_BACKUP_REJECTED: &str = "BackupRejected";
/// Reason: etcd was not fully ready; the controller retries.
pub const REASON_ETCD_UNHEALTHY: &str = "EtcdUnhealthy";

/// HCPEtcdBackupSpec defines the desired state of an etcd backup: where to
/// store the snapshot. The whole spec is immutable.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[kube(
    group = "hypershift.openshift.io",
    version = "v1beta1",
    kind = "HCPEtcdBackup",
    plural = "hcpetcdbackups",
    singular = "hcpetcdbackup",
    shortname = "hcpetcdbk",
    namespaced,
    status = "HCPEtcdBackupStatus",
    doc = "HCPEtcdBackup is a one-shot request to back up the etcd of the hosted control plane in its namespace.",
    printcolumn = r#"{"name":"Completed","type":"string","jsonPath":".status.conditions[?(@.type==\"BackupCompleted\")].status","description":"Backup completion status"}"#,
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.snapshotURL","description":"Snapshot URL"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("HCPEtcdBackupSpec is immutable"))]
pub struct HCPEtcdBackupSpec {
    /// storage configures the backup destination.
    pub storage: HCPEtcdBackupStorage,
}

/// The destination of a backup: a union discriminated by `storageType`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.storageType == 'S3' ? has(self.s3) : !has(self.s3)").message("s3 configuration is required when storageType is S3, and forbidden otherwise"))]
#[x_kube(validation = Rule::new("self.storageType == 'AzureBlob' ? has(self.azureBlob) : !has(self.azureBlob)").message("azureBlob configuration is required when storageType is AzureBlob, and forbidden otherwise"))]
pub struct HCPEtcdBackupStorage {
    /// storageType is the backup destination: S3 or AzureBlob.
    pub storage_type: StorageType,
    /// s3 configures an AWS S3 destination. Required when storageType is S3, forbidden otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<HCPEtcdBackupS3>,
    /// azureBlob configures an Azure Blob Storage destination. Required when storageType is AzureBlob, forbidden otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_blob: Option<HCPEtcdBackupAzureBlob>,
}

/// The backup destination type.
#[derive(JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StorageType {
    S3,
    AzureBlob,
}

/// An AWS S3 destination.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.kmsKeyARN) || has(self.kmsKeyARN)").message("kmsKeyARN cannot be removed once set"))]
pub struct HCPEtcdBackupS3 {
    /// bucket is the S3 bucket name.
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')").message("bucket must consist of lowercase letters, numbers, hyphens, and periods, and must start and end with a letter or number"))]
    #[x_kube(validation = Rule::new("!self.contains('..')").message("bucket must not contain consecutive periods"))]
    pub bucket: String,
    /// region is the AWS region of the bucket.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z][a-z0-9-]*[a-z0-9]$')").message("region must consist of lowercase letters, digits, and hyphens, must start with a letter and end with an alphanumeric character"))]
    #[x_kube(validation = Rule::new("!self.contains('--')").message("region must not contain consecutive hyphens"))]
    pub region: String,
    /// keyPrefix is the key prefix of the snapshot object; the object is `<keyPrefix>/<unix-seconds>.db`.
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9!_.*\\'()/-]+$')").message("keyPrefix must consist of safe S3 key characters: alphanumeric characters, forward slashes, hyphens, underscores, periods, exclamation marks, asterisks, single quotes, and parentheses"))]
    pub key_prefix: String,
    /// credentials references the Secret with the AWS credentials (a role ARN for STS, or a shared credentials file).
    pub credentials: SecretReference,
    /// kmsKeyARN is the ARN of the KMS key for SSE-KMS. Immutable once set.
    #[serde(rename = "kmsKeyARN", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(KMS_ARN_RULE).message(KMS_ARN_MESSAGE))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("kmsKeyARN is immutable"))]
    pub kms_key_arn: Option<String>,
}

/// An Azure Blob Storage destination.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(oldSelf.encryptionKeyURL) || has(self.encryptionKeyURL)").message("encryptionKeyURL cannot be removed once set"))]
pub struct HCPEtcdBackupAzureBlob {
    /// container is the blob container name.
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$')").message("container must consist of lowercase letters, numbers, and hyphens, and must start and end with a letter or number"))]
    #[x_kube(validation = Rule::new("!self.contains('--')").message("container must not contain consecutive hyphens"))]
    pub container: String,
    /// storageAccount is the Azure storage account name.
    #[schemars(length(min = 3, max = 24))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]+$')").message("storageAccount must consist of lowercase letters and numbers only"))]
    pub storage_account: String,
    /// keyPrefix is the blob name prefix; the blob is `<keyPrefix>/<unix-seconds>.db`.
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z0-9/_.-]+$')").message("keyPrefix must consist of alphanumeric characters, forward slashes, hyphens, underscores, and periods"))]
    pub key_prefix: String,
    /// credentials references the Secret with the Azure credentials.
    pub credentials: SecretReference,
    /// encryptionKeyURL is the Key Vault or Managed HSM key URL. Immutable once set.
    #[serde(rename = "encryptionKeyURL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 210))]
    #[x_kube(validation = Rule::new(KEY_VAULT_URL_RULE).message(KEY_VAULT_URL_MESSAGE))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("encryptionKeyURL is immutable"))]
    pub encryption_key_url: Option<String>,
}

/// HCPEtcdBackupStatus is the observed state of a backup.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct HCPEtcdBackupStatus {
    /// conditions: `BackupCompleted` with reasons BackupSucceeded, BackupFailed,
    /// BackupInProgress, BackupRejected and EtcdUnhealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 10))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// snapshotURL is the URL of the uploaded snapshot.
    #[serde(rename = "snapshotURL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new(SNAPSHOT_URL_RULE).message("snapshotURL must be a valid URL with scheme https or s3"))]
    pub snapshot_url: Option<String>,
    /// encryptionMetadata records the key the snapshot was encrypted with; exactly one of aws or azure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_metadata: Option<EncryptionMetadata>,
}

/// The encryption key a snapshot was written with: exactly one of `aws` and `azure`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct EncryptionMetadata {
    /// aws: the KMS key used for SSE-KMS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsEncryptionMetadata>,
    /// azure: the Key Vault key used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureEncryptionMetadata>,
}

/// The AWS KMS key of a snapshot.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwsEncryptionMetadata {
    /// kmsKeyARN is the ARN of the KMS key.
    #[serde(rename = "kmsKeyARN")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new(KMS_ARN_RULE).message(KMS_ARN_MESSAGE))]
    pub kms_key_arn: String,
}

/// The Azure Key Vault key of a snapshot.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AzureEncryptionMetadata {
    /// encryptionKeyURL is the Key Vault or Managed HSM key URL.
    #[serde(rename = "encryptionKeyURL")]
    #[schemars(length(min = 1, max = 210))]
    #[x_kube(validation = Rule::new(KEY_VAULT_URL_RULE).message(KEY_VAULT_URL_MESSAGE))]
    pub encryption_key_url: String,
}
