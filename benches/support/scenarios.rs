//! The four recorded requests of the decision benchmark and of
//! `benches/fresh_profile.rs` (built from the conformance fixtures).

use hcp_etcd_admission::time::format_rfc3339;
use serde_json::{json, Value};

use crate::common;

pub struct Scenario {
    pub name: &'static str,
    pub review: Value,
    pub context: Vec<Value>,
    pub now: i64,
}

pub fn fixture(file: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(common::root().join("tests/conformance").join(file)).expect("fixtures");
    let doc: Value = serde_yaml_ng::from_str(&text).expect("yaml");
    doc["fixtures"][name].clone()
}

pub fn scenarios() -> Vec<Scenario> {
    // The Wasm guest reads the real clock (WASI), so the presigned URL is
    // signed "now" and both runners judge it with the same clock.
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let amz_date = format_rfc3339(now).replace(['-', ':'], "");
    let s3kms = fixture("hcpetcdbackup.yaml", "s3kms");
    let mut changed = s3kms.clone();
    changed["spec"]["storage"]["s3"]["bucket"] = json!("other-bucket");
    let mut hc = fixture("hostedcluster.yaml", "hcurl");
    let url =
        hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0].as_str().unwrap_or_default().to_string();
    hc["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"][0] =
        json!(url.replace("X-Amz-Date=20261129T150000Z", &format!("X-Amz-Date={amz_date}")));
    let sts = fixture("statefulset.yaml", "sts3");
    let hcp = fixture("statefulset.yaml", "hcp");
    vec![
        Scenario {
            name: "backup_create_s3_kms",
            review: common::admission_review("b1", "hcpetcdbackups", None, "CREATE", Some(&s3kms), None),
            context: vec![],
            now,
        },
        Scenario {
            name: "backup_update_immutable",
            review: common::admission_review("b2", "hcpetcdbackups", None, "UPDATE", Some(&changed), Some(&s3kms)),
            context: vec![],
            now,
        },
        Scenario {
            name: "hostedcluster_presigned",
            review: common::admission_review("h1", "hostedclusters", None, "CREATE", Some(&hc), None),
            context: vec![],
            now,
        },
        Scenario {
            name: "statefulset_mutation_3",
            review: common::admission_review("s1", "statefulsets", None, "CREATE", Some(&sts), None),
            context: vec![hcp],
            now,
        },
    ]
}
