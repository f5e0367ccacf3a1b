//! CRD generation: the `HCPEtcdBackup` CRD and the OpenAPI schemas the
//! local validator evaluates, all derived from the types in [`crate::api`].

use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::{HCPEtcdBackup, HostedCluster, HostedControlPlane};

/// File name of the generated CRD inside `crds/`.
pub const CRD_FILE: &str = "hypershift.openshift.io_hcpetcdbackups.yaml";

/// The HCPEtcdBackup CRD as a JSON value (the form written to `crds/`).
pub fn hcpetcdbackup_crd() -> Value {
    // Serialising a CRD built from derived types cannot fail; Null is never reached.
    let mut crd = serde_json::to_value(HCPEtcdBackup::crd()).unwrap_or(Value::Null);
    normalize(&mut crd);
    crd
}

/// Brings schemars output to the shape controller-gen writes upstream:
/// optional fields are omitted rather than `nullable` (so a `null` is pruned,
/// as the apiserver does for non-nullable fields), and integral bounds are
/// integers (`minimum: 0`, not `0.0`).
fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("nullable") == Some(&Value::Bool(true)) {
                map.remove("nullable");
            }
            for key in ["minimum", "maximum"] {
                if let Some(n) = map.get(key).and_then(Value::as_f64) {
                    if n.fract() == 0.0 && n.abs() < 9.0e15 {
                        map.insert(key.to_string(), Value::from(n as i64));
                    }
                }
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn schema_of(crd: Value) -> Value {
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null)
}

/// The openAPIV3Schema of HCPEtcdBackup.
pub fn hcpetcdbackup_schema() -> Value {
    schema_of(hcpetcdbackup_crd())
}

/// The openAPIV3Schema of the HostedCluster slice.
pub fn hostedcluster_schema() -> Value {
    let mut crd = serde_json::to_value(HostedCluster::crd()).unwrap_or(Value::Null);
    normalize(&mut crd);
    schema_of(crd)
}

/// The openAPIV3Schema of the HostedControlPlane slice.
pub fn hostedcontrolplane_schema() -> Value {
    let mut crd = serde_json::to_value(HostedControlPlane::crd()).unwrap_or(Value::Null);
    normalize(&mut crd);
    schema_of(crd)
}
