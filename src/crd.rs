//! CRD generation: the `HCPEtcdBackup` CRD and the OpenAPI schemas the
//! local validator evaluates, all derived from the types in [`crate::api`].

use crate::json_at::At;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::api::{HCPEtcdBackup, HostedCluster, HostedControlPlane};

/// File name of the generated CRD inside `crds/`.
pub const CRD_FILE: &str = "hypershift.openshift.io_hcpetcdbackups.yaml";

/// A CRD or schema that cannot be produced: a bug in the types or a corrupt
/// committed file, reported at start-up and by the tests, never replaced by
/// an empty schema (which would switch every upstream rule off).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the {0} CRD does not serialise to JSON: {1}")]
    Serialise(&'static str, serde_json::Error),
    #[error("the {0} CRD has no spec.versions[0].schema.openAPIV3Schema")]
    NoSchema(&'static str),
    #[error("the committed schema crds/schemas/{0} is not JSON: {1}")]
    Committed(&'static str, serde_json::Error),
}

fn crd_json<K: CustomResourceExt>(kind: &'static str) -> Result<Value, CrdError> {
    let mut crd = serde_json::to_value(K::crd()).map_err(|e| CrdError::Serialise(kind, e))?;
    normalize(&mut crd);
    Ok(crd)
}

/// The HCPEtcdBackup CRD as a JSON value (the form written to `crds/`).
pub fn hcpetcdbackup_crd() -> Result<Value, CrdError> {
    crd_json::<HCPEtcdBackup>("HCPEtcdBackup")
}

/// A HostedCluster CRD carrying only the project's slice of upstream's
/// schema (the etcd storage part, with upstream's rules; everything else
/// preserved as unknown), generated from the types. Never installed in a real
/// cluster (upstream owns that CRD): the tests install it in a test apiserver
/// to check that the apiserver judges upstream's rules as the core does.
pub fn hostedcluster_test_crd() -> Result<Value, CrdError> {
    crd_json::<HostedCluster>("HostedCluster")
}

/// The HostedControlPlane counterpart of [`hostedcluster_test_crd`].
pub fn hostedcontrolplane_test_crd() -> Result<Value, CrdError> {
    crd_json::<HostedControlPlane>("HostedControlPlane")
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

fn schema_of(kind: &'static str, crd: Value) -> Result<Value, CrdError> {
    crd.at("/spec/versions/0/schema/openAPIV3Schema").cloned().ok_or(CrdError::NoSchema(kind))
}

/// The openAPIV3Schema of HCPEtcdBackup, generated from the types.
pub fn generate_hcpetcdbackup_schema() -> Result<Value, CrdError> {
    schema_of("HCPEtcdBackup", hcpetcdbackup_crd()?)
}

/// The openAPIV3Schema of the HostedCluster slice, generated from the types.
pub fn generate_hostedcluster_schema() -> Result<Value, CrdError> {
    schema_of("HostedCluster", crd_json::<HostedCluster>("HostedCluster")?)
}

/// The openAPIV3Schema of the HostedControlPlane slice, generated from the types.
pub fn generate_hostedcontrolplane_schema() -> Result<Value, CrdError> {
    schema_of("HostedControlPlane", crd_json::<HostedControlPlane>("HostedControlPlane")?)
}

/// The schemas the decision core evaluates, as committed in `crds/schemas/`
/// (file name, generated schema). `crd` writes them, `crd --check` verifies them.
pub fn generated_schemas() -> Result<Vec<(&'static str, Value)>, CrdError> {
    Ok(vec![
        ("hcpetcdbackup.json", generate_hcpetcdbackup_schema()?),
        ("hostedcluster.json", generate_hostedcluster_schema()?),
        ("hostedcontrolplane.json", generate_hostedcontrolplane_schema()?),
    ])
}

// The committed copies are what runs: parsing JSON is much cheaper than
// generating the schema with schemars, which matters when every request runs
// in a fresh Wasm instance. The drift check keeps them equal to the types.
// Kept apart from the literals (src/embedded_text.rs says why).
fn hcpetcdbackup_text() -> &'static str {
    crate::embedded_text::text(crate::embedded_text::Embedded::HcpEtcdBackupSchema)
}
fn hostedcluster_text() -> &'static str {
    crate::embedded_text::text(crate::embedded_text::Embedded::HostedClusterSchema)
}
fn hostedcontrolplane_text() -> &'static str {
    crate::embedded_text::text(crate::embedded_text::Embedded::HostedControlPlaneSchema)
}

/// The openAPIV3Schema of HCPEtcdBackup (committed copy of the generated one).
pub fn hcpetcdbackup_schema() -> Result<Value, CrdError> {
    serde_json::from_str(hcpetcdbackup_text()).map_err(|e| CrdError::Committed("hcpetcdbackup.json", e))
}

/// The openAPIV3Schema of the HostedCluster slice (committed copy).
pub fn hostedcluster_schema() -> Result<Value, CrdError> {
    serde_json::from_str(hostedcluster_text()).map_err(|e| CrdError::Committed("hostedcluster.json", e))
}

/// The openAPIV3Schema of the HostedControlPlane slice (committed copy).
pub fn hostedcontrolplane_schema() -> Result<Value, CrdError> {
    serde_json::from_str(hostedcontrolplane_text()).map_err(|e| CrdError::Committed("hostedcontrolplane.json", e))
}

/// A schema file's content exactly as committed.
pub fn render_schema_json(schema: &Value) -> Result<String, serde_json::Error> {
    Ok(format!("{}\n", serde_json::to_string_pretty(schema)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_schemas_equal_the_generated_ones() {
        let pairs = [
            (hcpetcdbackup_schema(), generate_hcpetcdbackup_schema()),
            (hostedcluster_schema(), generate_hostedcluster_schema()),
            (hostedcontrolplane_schema(), generate_hostedcontrolplane_schema()),
        ];
        for (committed, generated) in pairs {
            let (committed, generated) = (committed.expect("committed schema"), generated.expect("generated schema"));
            assert!(committed.get("properties").is_some(), "an empty schema would validate nothing");
            assert_eq!(committed, generated, "run `hcp-etcd-admission crd`");
        }
    }

    #[test]
    fn every_rule_of_every_schema_compiles() {
        for (name, schema) in generated_schemas().expect("schemas") {
            let compiled = crate::schema::CompiledCrdSchema::compile(schema);
            assert_eq!(compiled.compile_all(), Vec::<String>::new(), "{name}");
        }
    }
}
