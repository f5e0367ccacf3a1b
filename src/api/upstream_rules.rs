//! Stable ids for upstream's CEL rules (the `x_kube(validation = ...)`
//! attributes on the types in this module's siblings), so each one can be
//! found by name in the code, the rule table, `rules -o json` and SARIF
//! output. A rule is known by the object, the field it sits on and its
//! message; `catalog::tests` fails when a rule of the generated schemas has
//! no id here, or an id here names no rule.

/// (object prefix, field, message, id).
pub const IDS: &[(&str, &str, &str, &str)] = &[
    ("upstream.hcpetcdbackup", "spec", "HCPEtcdBackupSpec is immutable", "upstream.hcpetcdbackup.spec.immutable"),
    ("upstream.hcpetcdbackup", "spec.storage", "s3 configuration is required when storageType is S3, and forbidden otherwise", "upstream.hcpetcdbackup.spec.storage.s3-union"),
    ("upstream.hcpetcdbackup", "spec.storage", "azureBlob configuration is required when storageType is AzureBlob, and forbidden otherwise", "upstream.hcpetcdbackup.spec.storage.azureblob-union"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob", "encryptionKeyURL cannot be removed once set", "upstream.hcpetcdbackup.spec.storage.azureblob.encryptionkeyurl-kept"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.container", "container must consist of lowercase letters, numbers, and hyphens, and must start and end with a letter or number", "upstream.hcpetcdbackup.spec.storage.azureblob.container-format"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.container", "container must not contain consecutive hyphens", "upstream.hcpetcdbackup.spec.storage.azureblob.container-hyphens"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.credentials.name", "name must consist only of lowercase alphanumeric characters, hyphens, and periods. Each period-separated segment must start and end with an alphanumeric character.", "upstream.hcpetcdbackup.spec.storage.azureblob.credentials-name"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.encryptionKeyURL", "encryptionKeyURL must be a valid Azure Key Vault or Managed HSM HTTPS URL", "upstream.hcpetcdbackup.spec.storage.azureblob.encryptionkeyurl-format"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.encryptionKeyURL", "encryptionKeyURL is immutable", "upstream.hcpetcdbackup.spec.storage.azureblob.encryptionkeyurl-immutable"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.keyPrefix", "keyPrefix must consist of alphanumeric characters, forward slashes, hyphens, underscores, and periods", "upstream.hcpetcdbackup.spec.storage.azureblob.keyprefix-format"),
    ("upstream.hcpetcdbackup", "spec.storage.azureBlob.storageAccount", "storageAccount must consist of lowercase letters and numbers only", "upstream.hcpetcdbackup.spec.storage.azureblob.storageaccount-format"),
    ("upstream.hcpetcdbackup", "spec.storage.s3", "kmsKeyARN cannot be removed once set", "upstream.hcpetcdbackup.spec.storage.s3.kmskeyarn-kept"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.bucket", "bucket must consist of lowercase letters, numbers, hyphens, and periods, and must start and end with a letter or number", "upstream.hcpetcdbackup.spec.storage.s3.bucket-format"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.bucket", "bucket must not contain consecutive periods", "upstream.hcpetcdbackup.spec.storage.s3.bucket-periods"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.credentials.name", "name must consist only of lowercase alphanumeric characters, hyphens, and periods. Each period-separated segment must start and end with an alphanumeric character.", "upstream.hcpetcdbackup.spec.storage.s3.credentials-name"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.keyPrefix", "keyPrefix must consist of safe S3 key characters: alphanumeric characters, forward slashes, hyphens, underscores, periods, exclamation marks, asterisks, single quotes, and parentheses", "upstream.hcpetcdbackup.spec.storage.s3.keyprefix-format"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.kmsKeyARN", "kmsKeyARN must be a valid AWS KMS key ARN (arn:<partition>:kms:<region>:<account-id>:key/<key-id>)", "upstream.hcpetcdbackup.spec.storage.s3.kmskeyarn-format"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.kmsKeyARN", "kmsKeyARN is immutable", "upstream.hcpetcdbackup.spec.storage.s3.kmskeyarn-immutable"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.region", "region must consist of lowercase letters, digits, and hyphens, must start with a letter and end with an alphanumeric character", "upstream.hcpetcdbackup.spec.storage.s3.region-format"),
    ("upstream.hcpetcdbackup", "spec.storage.s3.region", "region must not contain consecutive hyphens", "upstream.hcpetcdbackup.spec.storage.s3.region-hyphens"),
    ("upstream.hcpetcdbackup", "status.encryptionMetadata.aws.kmsKeyARN", "kmsKeyARN must be a valid AWS KMS key ARN (arn:<partition>:kms:<region>:<account-id>:key/<key-id>)", "upstream.hcpetcdbackup.status.encryptionmetadata.kmskeyarn-format"),
    ("upstream.hcpetcdbackup", "status.encryptionMetadata.azure.encryptionKeyURL", "encryptionKeyURL must be a valid Azure Key Vault or Managed HSM HTTPS URL", "upstream.hcpetcdbackup.status.encryptionmetadata.encryptionkeyurl-format"),
    ("upstream.hcpetcdbackup", "status.snapshotURL", "snapshotURL must be a valid URL with scheme https or s3", "upstream.hcpetcdbackup.status.snapshoturl-scheme"),
    ("upstream.hostedcluster", "spec.etcd", "Only managed configuration must be set when managementType is Managed", "upstream.hostedcluster.spec.etcd.managed-union"),
    ("upstream.hostedcluster", "spec.etcd", "Only unmanaged configuration must be set when managementType is Unmanaged", "upstream.hostedcluster.spec.etcd.unmanaged-union"),
    ("upstream.hostedcluster", "spec.etcd.managed.backup", "aws configuration is required when platform is AWS, and forbidden otherwise", "upstream.hostedcluster.spec.etcd.managed.backup.aws-union"),
    ("upstream.hostedcluster", "spec.etcd.managed.backup", "azure configuration is required when platform is Azure, and forbidden otherwise", "upstream.hostedcluster.spec.etcd.managed.backup.azure-union"),
    ("upstream.hostedcluster", "spec.etcd.managed.backup.aws.kmsKeyARN", "kmsKeyARN must be a valid AWS KMS key ARN (arn:<partition>:kms:<region>:<account-id>:key/<key-id>)", "upstream.hostedcluster.spec.etcd.managed.backup.kmskeyarn-format"),
    ("upstream.hostedcluster", "spec.etcd.managed.backup.azure.encryptionKeyURL", "encryptionKeyURL must be a valid Azure Key Vault or Managed HSM HTTPS URL", "upstream.hostedcluster.spec.etcd.managed.backup.encryptionkeyurl-format"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage", "restoreSnapshotURL cannot be added or removed after creation", "upstream.hostedcluster.spec.etcd.managed.storage.restoresnapshoturl-kept"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage.persistentVolume.size", "Etcd PV storage size is immutable", "upstream.hostedcluster.spec.etcd.managed.storage.pv-size-immutable"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage.persistentVolume.storageClassName", "storageClassName is immutable", "upstream.hostedcluster.spec.etcd.managed.storage.pv-storageclass-immutable"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage.restoreSnapshotURL", "RestoreSnapshotURL shouldn't contain more than 1 entry", "upstream.hostedcluster.spec.etcd.managed.storage.restoresnapshoturl-one"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage.restoreSnapshotURL", "restoreSnapshotURL is immutable", "upstream.hostedcluster.spec.etcd.managed.storage.restoresnapshoturl-immutable"),
    ("upstream.hostedcluster", "spec.etcd.managed.storage.restoreSnapshotURL", "restoreSnapshotURL must be a valid URL with scheme https or s3", "upstream.hostedcluster.spec.etcd.managed.storage.restoresnapshoturl-scheme"),
    ("upstream.hostedcluster", "spec.etcd.managementType", "managementType is immutable", "upstream.hostedcluster.spec.etcd.managementtype-immutable"),
];

/// The id of the upstream rule with `message` on `field` of `prefix`'s object.
pub fn id(prefix: &str, field: &str, message: &str) -> Option<&'static str> {
    IDS.iter().find(|(p, f, m, _)| *p == prefix && *f == field && *m == message).map(|(_, _, _, id)| *id)
}

/// [`id`] for the HCPEtcdBackup schema (a `schema::RuleIds`).
pub fn hcpetcdbackup(field: &str, message: &str) -> Option<&'static str> {
    id("upstream.hcpetcdbackup", field, message)
}

/// [`id`] for the HostedCluster and HostedControlPlane schemas (one set of
/// ids: the same rules on the same fields).
pub fn hostedcluster(field: &str, message: &str) -> Option<&'static str> {
    id("upstream.hostedcluster", field, message)
}

/// Whether `rule` is one of upstream's ids.
pub fn is_upstream(rule: &str) -> bool {
    IDS.iter().any(|(_, _, _, id)| *id == rule)
}
