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

/// The openAPIV3Schema of HCPEtcdBackup, generated from the types.
pub fn generate_hcpetcdbackup_schema() -> Value {
    schema_of(hcpetcdbackup_crd())
}

/// The openAPIV3Schema of the HostedCluster slice, generated from the types.
pub fn generate_hostedcluster_schema() -> Value {
    let mut crd = serde_json::to_value(HostedCluster::crd()).unwrap_or(Value::Null);
    normalize(&mut crd);
    schema_of(crd)
}

/// The openAPIV3Schema of the HostedControlPlane slice, generated from the types.
pub fn generate_hostedcontrolplane_schema() -> Value {
    let mut crd = serde_json::to_value(HostedControlPlane::crd()).unwrap_or(Value::Null);
    normalize(&mut crd);
    schema_of(crd)
}

/// The schemas the decision core evaluates, as committed in `crds/schemas/`
/// (file name, generated schema). `crd` writes them, `crd --check` verifies them.
pub fn generated_schemas() -> Vec<(&'static str, Value)> {
    vec![
        ("hcpetcdbackup.json", generate_hcpetcdbackup_schema()),
        ("hostedcluster.json", generate_hostedcluster_schema()),
        ("hostedcontrolplane.json", generate_hostedcontrolplane_schema()),
    ]
}

// The committed copies are what runs: parsing JSON is much cheaper than
// generating the schema with schemars, which matters when every request runs
// in a fresh Wasm instance. The drift check keeps them equal to the types.
const HCPETCDBACKUP_SCHEMA: &str = include_str!("../crds/schemas/hcpetcdbackup.json");
const HOSTEDCLUSTER_SCHEMA: &str = include_str!("../crds/schemas/hostedcluster.json");
const HOSTEDCONTROLPLANE_SCHEMA: &str = include_str!("../crds/schemas/hostedcontrolplane.json");

/// The openAPIV3Schema of HCPEtcdBackup (committed copy of the generated one).
pub fn hcpetcdbackup_schema() -> Value {
    serde_json::from_str(HCPETCDBACKUP_SCHEMA).unwrap_or(Value::Null)
}

/// The openAPIV3Schema of the HostedCluster slice (committed copy).
pub fn hostedcluster_schema() -> Value {
    serde_json::from_str(HOSTEDCLUSTER_SCHEMA).unwrap_or(Value::Null)
}

/// The openAPIV3Schema of the HostedControlPlane slice (committed copy).
pub fn hostedcontrolplane_schema() -> Value {
    serde_json::from_str(HOSTEDCONTROLPLANE_SCHEMA).unwrap_or(Value::Null)
}

/// A schema file's content exactly as committed.
pub fn render_schema_json(schema: &Value) -> String {
    format!("{}\n", serde_json::to_string_pretty(schema).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_schemas_equal_the_generated_ones() {
        assert_eq!(hcpetcdbackup_schema(), generate_hcpetcdbackup_schema(), "run `hcp-etcd-admission crd`");
        assert_eq!(hostedcluster_schema(), generate_hostedcluster_schema(), "run `hcp-etcd-admission crd`");
        assert_eq!(hostedcontrolplane_schema(), generate_hostedcontrolplane_schema(), "run `hcp-etcd-admission crd`");
    }

    #[test]
    fn every_rule_of_every_schema_compiles() {
        for (name, schema) in generated_schemas() {
            let compiled = crate::schema::CompiledCrdSchema::compile(schema);
            assert_eq!(compiled.compile_all(), Vec::<String>::new(), "{name}");
        }
    }
}
