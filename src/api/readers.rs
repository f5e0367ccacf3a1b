//! Readers of objects kept as JSON (as the lookup port and the review hand
//! them over): a HostedControlPlane carries far more than this project
//! models, and a field we do not know about must never make a read (and with
//! it a restore) fail. An HCPEtcdBackup is read the same way by the rules,
//! which must judge objects the typed model would reject.

use crate::json_at::At;
use serde_json::Value;

/// Whether etcd of this HostedControlPlane is unmanaged (no restore by us).
pub fn unmanaged_etcd(hcp: &Value) -> bool {
    hcp.at("/spec/etcd/managementType").and_then(Value::as_str) == Some("Unmanaged")
}

/// The restore URL of a HostedControlPlane, when managed etcd has one.
pub fn restore_snapshot_url(hcp: &Value) -> Option<&str> {
    if unmanaged_etcd(hcp) {
        return None;
    }
    hcp.at("/spec/etcd/managed/storage/restoreSnapshotURL/0").and_then(Value::as_str).filter(|u| !u.is_empty())
}

/// Whether a restore is pending on the HostedControlPlane: a
/// `restoreSnapshotURL` on managed etcd and `EtcdSnapshotRestored` not True
/// (the server's `restores_pending` gauge and `check`'s "restore pending"
/// both ask this).
pub fn restore_pending(hcp: &Value) -> bool {
    restore_snapshot_url(hcp).is_some() && !snapshot_restored(hcp)
}

/// Whether the HostedControlPlane's `EtcdSnapshotRestored` condition is True.
pub fn snapshot_restored(hcp: &Value) -> bool {
    hcp.at("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(super::ETCD_SNAPSHOT_RESTORED)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    })
}

impl super::StorageType {
    /// The storage type of an HCPEtcdBackup (`None`: unknown; the controller
    /// then falls back to aws-static, which the schema makes unreachable).
    pub fn of_backup(obj: &Value) -> Option<Self> {
        match obj.at("/spec/storage/storageType").and_then(Value::as_str) {
            Some("S3") => Some(Self::S3),
            Some("AzureBlob") => Some(Self::AzureBlob),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::S3 => "S3",
            Self::AzureBlob => "AzureBlob",
        }
    }

    /// The spec block of this storage type (`s3`, `azureBlob`).
    pub fn block(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::AzureBlob => "azureBlob",
        }
    }

    /// The credentials Secret name an HCPEtcdBackup gives for this storage
    /// type (`spec.storage.<block>.credentials.name`), when set.
    pub fn credentials_name(self, obj: &Value) -> Option<&str> {
        let storage = obj.at("/spec/storage")?.get(self.block())?;
        storage.at("/credentials/name").and_then(Value::as_str).filter(|n| !n.is_empty())
    }
}
