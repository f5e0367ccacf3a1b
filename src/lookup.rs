//! Objects a decision may look up (today: the HostedControlPlane of the etcd
//! StatefulSet's namespace). The core only sees this trait; the shells fill
//! it from `--context` files (CLI), a kube-rs reflector (server) or
//! Kubewarden's context-aware host capability (Wasm).
//!
//! Objects are kept as JSON and read by path: a HostedControlPlane carries far
//! more than this project models, and a field we do not know about must never
//! make the lookup (and with it a restore) fail.

use serde_json::Value;

/// Read-only access to cluster objects.
pub trait Lookup {
    /// The HostedControlPlane objects in `namespace`, or why they cannot be
    /// looked up (the caller warns and does not mutate).
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, String>;
}

/// Objects given up front (from `--context` files or test fixtures).
#[derive(Debug, Default, Clone)]
pub struct ContextObjects {
    hcps: Vec<Value>,
}

impl ContextObjects {
    /// Keeps the HostedControlPlanes among `objects` (`*List` objects are unpacked).
    pub fn from_values(objects: impl IntoIterator<Item = Value>) -> Self {
        let mut out = Self::default();
        let mut queue: Vec<Value> = objects.into_iter().collect();
        while let Some(obj) = queue.pop() {
            match obj.get("kind").and_then(Value::as_str) {
                Some(k) if k.ends_with("List") => {
                    if let Some(items) = obj.get("items").and_then(Value::as_array) {
                        queue.extend(items.iter().cloned());
                    }
                }
                Some("HostedControlPlane") => out.hcps.push(obj),
                _ => {}
            }
        }
        out
    }
}

impl Lookup for ContextObjects {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, String> {
        Ok(self
            .hcps
            .iter()
            .filter(|h| h.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
            .cloned()
            .collect())
    }
}

/// The restore URL of a HostedControlPlane, when managed etcd has one.
pub fn restore_snapshot_url(hcp: &Value) -> Option<&str> {
    if hcp.pointer("/spec/etcd/managementType").and_then(Value::as_str) == Some("Unmanaged") {
        return None;
    }
    hcp.pointer("/spec/etcd/managed/storage/restoreSnapshotURL/0").and_then(Value::as_str).filter(|u| !u.is_empty())
}

/// Whether the HostedControlPlane's `EtcdSnapshotRestored` condition is True.
pub fn snapshot_restored(hcp: &Value) -> bool {
    hcp.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
        cs.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(crate::api::ETCD_SNAPSHOT_RESTORED)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    })
}
