//! Rule texts and messages shared by more than one field.
//!
//! The KMS key ARN and Key Vault key URL rules appear on the backup spec, on
//! its status and on the HostedCluster `backup` config; defining them once
//! keeps the three copies from drifting apart.

/// CEL rule on `kmsKeyARN` fields (upstream, verbatim).
pub const KMS_ARN_RULE: &str =
    "self.matches('^arn:(aws|aws-cn|aws-us-gov):kms:[a-z0-9-]+:[0-9]{12}:key/[a-zA-Z0-9-]+$')";
/// Message of [`KMS_ARN_RULE`] (upstream, verbatim).
pub const KMS_ARN_MESSAGE: &str =
    "kmsKeyARN must be a valid AWS KMS key ARN (arn:<partition>:kms:<region>:<account-id>:key/<key-id>)";

/// CEL rule on `encryptionKeyURL` fields (upstream, verbatim as it appears in the CRD YAML).
pub const KEY_VAULT_URL_RULE: &str = "self.matches('^https://[a-zA-Z0-9-]+\\\\.(vault\\\\.(azure\\\\.net|usgovcloudapi\\\\.net|azure\\\\.cn|microsoftazure\\\\.de|sovcloud-api\\\\.fr)|managedhsm\\\\.(azure\\\\.net|usgovcloudapi\\\\.net|azure\\\\.cn|microsoftazure\\\\.de|sovcloud-api\\\\.fr))/keys/[a-zA-Z0-9-]+(/[a-zA-Z0-9]+)?$')";
/// Message of [`KEY_VAULT_URL_RULE`] (upstream, verbatim).
pub const KEY_VAULT_URL_MESSAGE: &str = "encryptionKeyURL must be a valid Azure Key Vault or Managed HSM HTTPS URL";

/// CEL rule for URLs written to status by the backup controller.
pub const SNAPSHOT_URL_RULE: &str = "self.matches('^(https|s3)://.*')";
