//! KMS key ARN facts the schema regex cannot see: SSE-KMS needs a key in the
//! bucket's region, and a key's partition is fixed by its region.

use crate::json_at::At;
use serde_json::Value;

use super::{changed_str, Findings, RuleInfo, Severity};
use crate::schema::{go_quote, FieldError};

pub const KMS_REGION: RuleInfo = RuleInfo {
    id: "hcpetcdbackup-kms-region",
    objects: "HCPEtcdBackup",
    field: "spec.storage.s3.kmsKeyARN",
    severity: Severity::Deny,
    summary: "the key's region equals `spec.storage.s3.region`: SSE-KMS needs a key in the bucket's region",
};

pub const KMS_PARTITION: RuleInfo = RuleInfo {
    id: "kms-key-partition",
    objects: "HCPEtcdBackup, HostedCluster, HostedControlPlane",
    field: "…kmsKeyARN",
    severity: Severity::Deny,
    summary: "the ARN partition fits its region: `cn-*` → `aws-cn`, `us-gov-*` → `aws-us-gov`, any other → `aws`",
};

/// The parts of a KMS key ARN that matter here.
struct KmsArn<'a> {
    partition: &'a str,
    region: &'a str,
}

fn parse(arn: &str) -> Option<KmsArn<'_>> {
    let mut parts = arn.splitn(6, ':');
    if parts.next()? != "arn" {
        return None;
    }
    let partition = parts.next()?;
    if parts.next()? != "kms" {
        return None;
    }
    let region = parts.next()?;
    if region.is_empty() {
        return None;
    }
    Some(KmsArn { partition, region })
}

/// The AWS partition a region belongs to.
pub fn partition_of(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

fn check_partition(arn: &str, field: &str, f: &mut Findings) {
    let Some(parsed) = parse(arn) else { return };
    let want = partition_of(parsed.region);
    if parsed.partition != want {
        f.deny(
            &KMS_PARTITION,
            FieldError::invalid(
                field,
                go_quote(arn),
                format!(
                    "partition {:?} does not match region {:?}: keys in that region have ARNs starting with \"arn:{want}:kms:\"",
                    parsed.partition, parsed.region
                ),
            ),
        );
    }
}

pub fn check_backup(obj: &Value, old: Option<&Value>, f: &mut Findings) {
    const ARN: &str = "/spec/storage/s3/kmsKeyARN";
    let arn_changed = changed_str(obj, old, ARN);
    let region_changed = changed_str(obj, old, "/spec/storage/s3/region");
    if arn_changed.is_some() || region_changed.is_some() {
        if let (Some(arn), Some(region)) =
            (obj.at(ARN).and_then(Value::as_str), obj.at("/spec/storage/s3/region").and_then(Value::as_str))
        {
            if let Some(parsed) = parse(arn) {
                if parsed.region != region {
                    f.deny(
                        &KMS_REGION,
                        FieldError::invalid(
                            "spec.storage.s3.kmsKeyARN",
                            go_quote(arn),
                            format!(
                                "the key is in region {:?} but the bucket is in {region:?}; SSE-KMS needs a key in the bucket's region",
                                parsed.region
                            ),
                        ),
                    );
                }
            }
        }
    }
    if let Some(arn) = arn_changed {
        check_partition(arn, "spec.storage.s3.kmsKeyARN", f);
    }
    if let Some(arn) = changed_str(obj, old, "/status/encryptionMetadata/aws/kmsKeyARN") {
        check_partition(arn, "status.encryptionMetadata.aws.kmsKeyARN", f);
    }
}

pub fn check_hosted(obj: &Value, old: Option<&Value>, f: &mut Findings) {
    if let Some(arn) = changed_str(obj, old, "/spec/etcd/managed/backup/aws/kmsKeyARN") {
        check_partition(arn, "spec.etcd.managed.backup.aws.kmsKeyARN", f);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn s3(arn: &str, region: &str) -> Value {
        json!({"spec":{"storage":{"s3":{"kmsKeyARN": arn, "region": region}}}})
    }

    #[test]
    fn region_and_partition() {
        let run = |o: Value| {
            let mut f = Findings::default();
            check_backup(&o, None, &mut f);
            f.errors.iter().map(|e| e.rule_id.unwrap_or("")).collect::<Vec<_>>()
        };
        assert!(run(s3("arn:aws:kms:us-east-1:123456789012:key/mrk-1", "us-east-1")).is_empty());
        assert_eq!(run(s3("arn:aws:kms:us-west-2:123456789012:key/k", "us-east-1")), vec!["hcpetcdbackup-kms-region"]);
        assert_eq!(run(s3("arn:aws:kms:cn-north-1:123456789012:key/k", "cn-north-1")), vec!["kms-key-partition"]);
        assert!(run(s3("arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/k", "us-gov-west-1")).is_empty());
        assert_eq!(run(s3("arn:aws-cn:kms:eu-west-1:123456789012:key/k", "eu-west-1")), vec!["kms-key-partition"]);
    }
}
