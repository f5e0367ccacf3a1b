//! The objects the suite sends (shapes from tests/conformance/), and the
//! library's answer for the same request, to compare the apiserver's with.
#![allow(dead_code)]

use hcp_etcd_admission::{
    admission::{review, DecisionInput},
    lookup::ContextObjects,
    settings::Settings,
};
use serde_json::{json, Value};

use crate::setup::Answer;

/// Credentials that fit neither storage type (base64 of "not a credential").
pub const GARBAGE: &str = "bm90IGEgY3JlZGVudGlhbA==";
/// A bare IAM role ARN (aws-sts).
pub const ROLE_ARN: &str = "YXJuOmF3czppYW06OjEyMzQ1Njc4OTAxMjpyb2xlL2V0Y2QtYmFja3VwCg==";

pub fn backup(ns: &str, name: &str, secret: &str) -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1",
        "kind": "HCPEtcdBackup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"storage": {"storageType": "S3", "s3": {
            "bucket": "hcp-etcd-backups", "region": "us-east-1",
            "keyPrefix": "backups/nightly/etcd-backup",
            "credentials": {"name": secret}}}}
    })
}

/// A presigned S3 URL signed now, valid for an hour.
pub fn presigned_url(object: &str) -> String {
    let now = hcp_etcd_admission::time::system_now().expect("clock");
    let date = hcp_etcd_admission::time::format_rfc3339(now).replace(['-', ':'], "");
    format!(
        "https://hcp-etcd-backups.s3.us-east-1.amazonaws.com/backups/{object}.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date={date}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=0f1e2d3c4b5a6978"
    )
}

/// A HostedCluster or HostedControlPlane with managed etcd and, if given, a restore URL.
pub fn hosted(kind: &str, ns: &str, name: &str, url: Option<&str>) -> Value {
    let mut obj = json!({
        "apiVersion": "hypershift.openshift.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "release": {"image": "quay.io/openshift-release-dev/ocp-release:4.20.0-x86_64"},
            "platform": {"type": "AWS"},
            "etcd": {"managementType": "Managed", "managed": {"storage": {
                "type": "PersistentVolume", "persistentVolume": {"size": "8Gi"}}}}
        }
    });
    if let Some(u) = url {
        obj["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = json!([u]);
    }
    obj
}

pub fn secret(ns: &str, name: &str, labelled: bool, credentials: &str) -> Value {
    let mut obj = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        "data": {"credentials": credentials}
    });
    if labelled {
        obj["metadata"]["labels"] = json!({"hypershift.openshift.io/etcd-backup": "true"});
    }
    obj
}

/// The etcd StatefulSet as the control-plane-operator writes it (three
/// replicas: ensure-dns and reset-member init containers, the member
/// identity from env; one replica: the bare shape).
pub fn etcd_sts(ns: &str, name: &str, replicas: u32) -> Value {
    if replicas == 1 {
        return json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "replicas": 1, "serviceName": "etcd-discovery",
                "selector": {"matchLabels": {"app": "etcd"}},
                "template": {"metadata": {"labels": {"app": "etcd"}}, "spec": {"containers": [{
                    "name": "etcd", "image": "quay.io/openshift/etcd:4.20",
                    "env": [{"name": "ETCD_DATA_DIR", "value": "/var/lib/data"}, {"name": "ETCD_NAME", "value": "etcd-0"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Gi"}}}}]
            }
        });
    }
    let members: Vec<String> =
        (0..replicas).map(|i| format!("etcd-{i}=https://etcd-{i}.etcd-discovery.{ns}.svc:2380")).collect();
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "etcd"}},
        "spec": {
            "replicas": replicas, "serviceName": "etcd-discovery", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "etcd"}},
            "template": {"metadata": {"labels": {"app": "etcd"}}, "spec": {
                "initContainers": [
                    {"name": "ensure-dns", "image": "quay.io/hypershift/control-plane-operator:latest",
                     "command": ["/usr/bin/control-plane-operator", "resolve-dns", format!("etcd-discovery.{ns}.svc")]},
                    {"name": "reset-member", "image": "quay.io/openshift/etcd:4.20",
                     "command": ["/bin/bash", "-c", "exec /usr/bin/reset-member"]}
                ],
                "containers": [{
                    "name": "etcd", "image": "quay.io/openshift/etcd:4.20", "command": ["/usr/bin/etcd"],
                    "env": [
                        {"name": "HOSTNAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                        {"name": "ETCD_NAME", "value": "$(HOSTNAME)"},
                        {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
                        {"name": "ETCD_INITIAL_ADVERTISE_PEER_URLS", "value": "https://$(HOSTNAME).etcd-discovery.$(NAMESPACE).svc:2380"},
                        {"name": "ETCD_INITIAL_CLUSTER", "value": members.join(",")}
                    ],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}, {"name": "peer-tls", "mountPath": "/etc/etcd/tls/peer"}],
                    "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
                }],
                "volumes": [{"name": "peer-tls", "secret": {"secretName": "etcd-peer-tls"}}]
            }},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Gi"}}}}]
        }
    })
}

/// The resource of a kind the suite sends.
fn resource_of(obj: &Value) -> &'static str {
    kube_plural(obj["kind"].as_str().unwrap_or_default())
}

fn kube_plural(kind: &str) -> &'static str {
    crate::common::kube_apiserver::plural(kind).unwrap_or_else(|| panic!("no resource for {kind}"))
}

/// The library's response to the AdmissionReview the apiserver sends for
/// `op` of `obj` (`old` on UPDATE), deciding from `context` (the objects
/// the cluster holds that the decision reads), with the manifests' settings
/// and the system clock.
pub fn library(settings: &Value, op: &str, obj: &Value, old: Option<&Value>, context: &[Value]) -> Value {
    let settings = Settings::from_json(settings).expect("the manifests' settings");
    let review_in = crate::common::admission_review("uid-1", resource_of(obj), None, op, Some(obj), old);
    let context = ContextObjects::from_values(context.to_vec());
    let out = review(
        &review_in,
        &DecisionInput {
            settings: &settings,
            lookup: Some(&context),
            now: hcp_etcd_admission::time::system_now(),
            expect: None,
        },
    )
    .expect("a response");
    out["response"].clone()
}

/// How the apiserver's answer differs from the library's response (empty
/// when it is the same verdict, message, code, causes and warnings).
/// `webhook` is the name the apiserver puts in front of a denial.
pub fn differences(answer: &Answer, lib: &Value, webhook: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lib_warnings: Vec<String> = lib["warnings"]
        .as_array()
        .map(|a| a.iter().filter_map(|w| w.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if lib["allowed"] == true {
        if !(200..300).contains(&answer.status) {
            out.push(format!("the library allows, the apiserver answered {} {}", answer.status, answer.text));
        }
    } else {
        let s = &lib["status"];
        if Some(u64::from(answer.status)) != s["code"].as_u64() {
            out.push(format!("code {} (library {})", answer.status, s["code"]));
        }
        let want = format!(
            "admission webhook \"{webhook}\" denied the request: {}",
            s["message"].as_str().unwrap_or_default()
        );
        if answer.body["message"].as_str() != Some(want.as_str()) {
            out.push(format!("message {}\n  expected {want:?}", answer.body["message"]));
        }
        if answer.body["reason"] != s["reason"] {
            out.push(format!("reason {} (library {})", answer.body["reason"], s["reason"]));
        }
        // The apiserver decodes the response into its Go types and encodes
        // the Status again: `group: ""` (the core group) is dropped there
        // (`omitempty`), as in the apiserver's own Status for core kinds.
        let mut details = s.get("details").cloned();
        if let Some(d) = details.as_mut().and_then(Value::as_object_mut) {
            if d.get("group").is_some_and(|g| g == "") {
                d.remove("group");
            }
        }
        if answer.body.get("details") != details.as_ref() {
            out.push(format!("details {}\n  library {}", answer.body["details"], s["details"]));
        }
    }
    if answer.warnings != lib_warnings {
        out.push(format!("warnings {:?}\n  library {lib_warnings:?}", answer.warnings));
    }
    out
}

/// Asserts the apiserver's answer is the library's response.
#[track_caller]
pub fn assert_same(answer: &Answer, lib: &Value, webhook: &str) {
    let d = differences(answer, lib, webhook);
    assert!(d.is_empty(), "through the apiserver vs the library ({webhook}):\n{}", d.join("\n"));
}
