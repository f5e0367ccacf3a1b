//! Readers of a HostedControlPlane kept as JSON (as the lookup port returns
//! it): a HostedControlPlane carries far more than this project models, and a
//! field we do not know about must never make a read (and with it a restore)
//! fail.

use serde_json::Value;

/// Whether etcd of this HostedControlPlane is unmanaged (no restore by us).
pub fn unmanaged_etcd(hcp: &Value) -> bool {
    hcp.pointer("/spec/etcd/managementType").and_then(Value::as_str) == Some("Unmanaged")
}

/// The restore URL of a HostedControlPlane, when managed etcd has one.
pub fn restore_snapshot_url(hcp: &Value) -> Option<&str> {
    if unmanaged_etcd(hcp) {
        return None;
    }
    hcp.pointer("/spec/etcd/managed/storage/restoreSnapshotURL/0").and_then(Value::as_str).filter(|u| !u.is_empty())
}

/// Whether the HostedControlPlane's `EtcdSnapshotRestored` condition is True.
pub fn snapshot_restored(hcp: &Value) -> bool {
    hcp.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(super::ETCD_SNAPSHOT_RESTORED)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    })
}
