//! Pre-initialisation: everything the first decision in a fresh process or
//! Wasm instance would otherwise pay, done once ahead of time.
//!
//! Kubewarden's policy-server evaluates every request on a **fresh instance**
//! of the policy module, so one-time work is paid per request there: parsing
//! the schemas, compiling every CEL rule (the `cel` parser builds its ANTLR
//! tables on first use, ≈ 1 ms), compiling every regex, first-touch
//! allocations. [`warm_up`] does all of it; `scripts/build-wasm.sh` runs it at
//! build time through wasmtime-wizer (the export `wizer-initialize` below)
//! and ships the snapshot, so every instance starts with it done. (The
//! server and the CLI warm up once at start with [`admission::warm_up`].)
//!
//! What the snapshot holds is valid in every instance: compiled schemas,
//! programs and regexes (pure functions of the code) and allocator state. The
//! sample decisions run with a fixed time and an in-memory lookup: no clock,
//! no host call, no request of anyone's. One thing is fixed per build: the
//! seed std's `HashMap`s draw from WASI `random_get` on first use is part of
//! the snapshot (see the README's Kubewarden section for why that is
//! acceptable here).

use crate::json_at::At;
use serde_json::{json, Value};

use crate::{admission, kubewarden, lookup::ContextObjects};

/// 2026-11-29T15:10:00Z: the fixed "now" of the sample decisions.
const SAMPLE_NOW: i64 = 1_795_965_000;

/// Compiles every schema, CEL rule and regex, then decides a few sample
/// requests so that every path a real request takes has run once. Returns
/// what failed to compile (empty: a test holds it so).
pub fn warm_up() -> Vec<String> {
    let problems: Vec<String> = admission::warm_up().err().map(|e| e.to_string()).into_iter().collect();
    let lookup = ContextObjects::from_values(sample_cluster());
    for request in sample_requests() {
        let payload = json!({"settings": {}, "request": request});
        let answer = kubewarden::validate(payload.to_string().as_bytes(), Some(&lookup), Ok(SAMPLE_NOW));
        // Serialised as the guest does: what that first use builds (the
        // restore script's escaped form) is in the snapshot too.
        let _ = kubewarden::encode(&answer, payload.to_string().len());
    }
    let _ = kubewarden::validate_settings(br#"{"allowS3RestoreURL": false}"#);
    problems
}

fn request(uid: &str, resource: &str, operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let (group, version, kind) = match resource {
        "statefulsets" => ("apps", "v1", "StatefulSet"),
        "hostedclusters" => (crate::api::GROUP, crate::api::VERSION, "HostedCluster"),
        "hostedcontrolplanes" => (crate::api::GROUP, crate::api::VERSION, "HostedControlPlane"),
        _ => (crate::api::GROUP, crate::api::VERSION, "HCPEtcdBackup"),
    };
    json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": object.at("/metadata/name"),
        "namespace": object.at("/metadata/namespace"),
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:openshift-adp:velero", "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    })
}

fn backup(storage: Value) -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
        "metadata": {"name": "warm-up", "namespace": "clusters-warm-up"},
        "spec": {"storage": storage},
    })
}

fn etcd_spec(url: &str) -> Value {
    json!({
        "managementType": "Managed",
        "managed": {
            "storage": {"type": "PersistentVolume", "persistentVolume": {"size": "8Gi"}, "restoreSnapshotURL": [url]},
            "backup": {"platform": "AWS", "aws": {"kmsKeyARN": "arn:aws:kms:us-east-1:123456789012:key/warm-up"}},
        },
    })
}

/// The in-memory cluster of the samples: the HostedControlPlane, and for the
/// HCPEtcdBackup preflight a ready etcd StatefulSet and a credentials Secret
/// that fits both storage types (role ARN for S3; workload identity for Azure).
fn sample_cluster() -> Vec<Value> {
    vec![
        sample_hcp(),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "etcd", "namespace": "clusters-warm-up"},
            "spec": {"replicas": 1}, "status": {"readyReplicas": 1}}),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "warm-up-creds", "namespace": "hypershift"},
            "stringData": {
                "credentials": "arn:aws:iam::123456789012:role/warm-up",
                "cloud": "AZURE_CLIENT_ID=00000000-0000-0000-0000-000000000000"}}),
    ]
}

/// The sample HostedControlPlane's restore URL (the sample StatefulSet's
/// rendered etcd-init carries it, as the control-plane-operator's does).
const SAMPLE_URL: &str =
    "https://bucket.s3.us-east-1.amazonaws.com/warm-up.db?X-Amz-Date=20261129T150000Z&X-Amz-Expires=3600&X-Amz-Signature=00";

fn sample_hcp() -> Value {
    json!({
        "apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
        "metadata": {"name": "warm-up", "namespace": "clusters-warm-up"},
        "spec": {"etcd": etcd_spec(SAMPLE_URL)},
    })
}

/// Requests that take every path once: both storage types with and without
/// encryption, CREATE and UPDATE (transition rules), the status subresource,
/// every presigned-URL flavour, a denial with many causes, and the mutation.
pub(crate) fn sample_requests() -> Vec<Value> {
    let creds = json!({"name": "warm-up-creds"});
    let s3 = backup(json!({"storageType": "S3", "s3": {
        "bucket": "warm-up-bucket", "region": "us-east-1", "keyPrefix": "backups/warm-up", "credentials": creds,
        "kmsKeyARN": "arn:aws:kms:us-east-1:123456789012:key/warm-up"}}));
    let mut s3_changed = s3.clone();
    s3_changed["spec"]["storage"]["s3"]["bucket"] = json!("other-bucket");
    s3_changed["status"] = json!({
        "snapshotURL": "s3://warm-up-bucket/backups/warm-up/1795965000.db",
        "encryptionMetadata": {"aws": {"kmsKeyARN": "arn:aws:kms:us-east-1:123456789012:key/warm-up"}},
        "conditions": [{"type": "BackupCompleted", "status": "True", "reason": "BackupSucceeded",
                        "message": "", "lastTransitionTime": "2026-11-29T15:00:00Z", "observedGeneration": 1}],
    });
    let azure = backup(json!({"storageType": "AzureBlob", "azureBlob": {
        "container": "warm-up", "storageAccount": "warmup01", "keyPrefix": "backups/warm-up", "credentials": creds,
        "encryptionKeyURL": "https://warm-up.vault.azure.net/keys/etcd/0123456789abcdef0123456789abcdef"}}));
    let bad = backup(json!({"storageType": "S3", "s3": {
        "bucket": "xn--Bad..Bucket-", "region": "us--east-1", "keyPrefix": "//a/../b", "credentials": {"name": "Bad_Name"},
        "kmsKeyARN": "arn:aws:kms:eu-west-1:1:key/x"}, "azureBlob": {
        "container": "a--b", "storageAccount": "NOPE", "credentials": {"name": "x"},
        "encryptionKeyURL": "https://warm-up.vault.azure.cn/keys/etcd"}}));
    let hosted = |kind: &str, url: &str| {
        json!({
            "apiVersion": "hypershift.openshift.io/v1beta1", "kind": kind,
            "metadata": {"name": "warm-up", "namespace": "clusters-warm-up"},
            "spec": {"platform": {"type": "AWS"}, "etcd": etcd_spec(url)},
        })
    };
    let urls = [
        "https://bucket.s3.us-east-1.amazonaws.com/k.db?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T150000Z&X-Amz-Expires=3600&X-Amz-Signature=00",
        "https://bucket.s3.amazonaws.com/k.db?AWSAccessKeyId=A&Expires=1795968600&Signature=00",
        "https://storage.googleapis.com/b/k.db?X-Goog-Date=20261129T150000Z&X-Goog-Expires=3600&X-Goog-Signature=00",
        "https://account.blob.core.windows.net/c/k.db?sv=2022-11-02&se=2026-11-29T15%3A20%3A00Z&sig=00",
        "s3://bucket/k.db",
        "https://user@bad host/k.db",
    ];
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "etcd", "namespace": "clusters-warm-up", "labels": {"app": "etcd"}},
        "spec": {"replicas": 3, "serviceName": "etcd-discovery", "selector": {"matchLabels": {"app": "etcd"}},
            "template": {"metadata": {"labels": {"app": "etcd"}}, "spec": {
                "initContainers": [
                    {"name": "etcd-init", "image": "quay.io/openshift/etcd:4.20", "env": [{"name": "RESTORE_URL_ETCD", "value": SAMPLE_URL}]},
                    {"name": "reset-member", "image": "quay.io/openshift/etcd:4.20"}],
                "containers": [{"name": "etcd", "image": "quay.io/openshift/etcd:4.20", "env": [
                    {"name": "ETCD_NAME", "value": "$(HOSTNAME)"},
                    {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
                    {"name": "ETCD_INITIAL_ADVERTISE_PEER_URLS", "value": "https://$(HOSTNAME).etcd-discovery.clusters-warm-up.svc:2380"},
                    {"name": "ETCD_INITIAL_CLUSTER", "value": "etcd-0=https://etcd-0.etcd-discovery.clusters-warm-up.svc:2380,etcd-1=https://etcd-1.etcd-discovery.clusters-warm-up.svc:2380,etcd-2=https://etcd-2.etcd-discovery.clusters-warm-up.svc:2380"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]},
    });
    let mut out = vec![
        request("w1", "hcpetcdbackups", "CREATE", &s3, None),
        request("w2", "hcpetcdbackups", "UPDATE", &s3_changed, Some(&s3)),
        request("w3", "hcpetcdbackups", "CREATE", &azure, None),
        request("w4", "hcpetcdbackups", "UPDATE", &azure, Some(&azure)),
        request("w5", "hcpetcdbackups", "CREATE", &bad, None),
        request("w6", "statefulsets", "CREATE", &sts, None),
    ];
    let mut status = request("w7", "hcpetcdbackups", "UPDATE", &s3_changed, Some(&s3_changed));
    status["subResource"] = json!("status");
    out.push(status);
    for (i, url) in urls.iter().enumerate() {
        for (kind, resource) in [("HostedCluster", "hostedclusters"), ("HostedControlPlane", "hostedcontrolplanes")] {
            let obj = hosted(kind, url);
            out.push(request(&format!("h{i}"), resource, "CREATE", &obj, None));
            out.push(request(&format!("u{i}"), resource, "UPDATE", &obj, Some(&hosted(kind, urls[0]))));
        }
    }
    out
}

/// The wizer init function: run once at build time by scripts/build-wasm.sh,
/// never by a host (wizer removes the export from the shipped module).
#[cfg(all(feature = "wasm", target_arch = "wasm32"))]
#[unsafe(export_name = "wizer-initialize")]
pub extern "C" fn wizer_initialize() {
    // The waPC operations' registry, which every call reads, made in the
    // snapshot (`wapc_init` then writes nothing) and first: it lies at the
    // start of the heap, beside the statics, whose 64 KiB window every
    // instance maps at `wapc_init` already.
    crate::kubewarden::guest::register();
    let problems = warm_up();
    // A rule or regex that does not compile fails the build, not a request.
    assert!(problems.is_empty(), "pre-initialisation: {problems:?}");
    drop(problems);
    // Each compiled schema is copied, after a copy of every pattern served
    // with it only, into fresh 64 KiB windows of its own: a request reads its
    // target's windows only …
    // The windows follow each other (one 64 KiB page reserved at a time).
    for target in admission::VALIDATED {
        crate::kubewarden::arena::global::freeze(crate::kubewarden::arena::global::COPY_PAGES);
        admission::compact(target);
    }
    // … with the one copy of the restore script a mutation takes …
    let stashed = crate::mutate::container::stash_script_copy();
    // … and every allocation from here on comes from fresh pages above them.
    crate::kubewarden::arena::global::freeze(crate::kubewarden::arena::global::REQUEST_PAGES);
    // The copy is known by its address only if the arena can never hand
    // that address out again (the last freeze worked: it lies below it).
    if crate::kubewarden::arena::global::below_arena(stashed) {
        crate::mutate::container::recognise_stashed_script(stashed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_and_regex_compiles_and_the_samples_take_the_paths_they_should() {
        assert_eq!(warm_up(), Vec::<String>::new());
        let lookup = ContextObjects::from_values(sample_cluster());
        let answers: Vec<kubewarden::ValidationResponse> = sample_requests()
            .into_iter()
            .map(|r| {
                let payload = json!({"settings": {}, "request": r}).to_string();
                let answer = kubewarden::validate(payload.as_bytes(), Some(&lookup), Ok(SAMPLE_NOW));
                // The guest's encoding is serde_json's, into a buffer it never grows.
                let encoded = kubewarden::encode(&answer, payload.len()).expect("encodes");
                assert_eq!(encoded, serde_json::to_vec(&answer).expect("encodes"));
                let capacity =
                    super::super::mutated_json::answer_capacity(answer.mutated_object.is_some(), payload.len());
                assert!(encoded.len() <= capacity, "{} > {capacity}", encoded.len());
                answer
            })
            .collect();
        // S3 create allowed, spec change denied, Azure allowed, the bad one denied with many causes.
        assert!(answers[0].accepted, "{:?}", answers[0]);
        assert!(!answers[1].accepted && answers[1].message.as_deref().unwrap_or("").contains("immutable"));
        assert!(answers[2].accepted, "{:?}", answers[2]);
        // (A required, enum, maxLength or type error blocks the CEL rules, as in
        // the apiserver: the message lists the schema errors and that note.)
        let bad = answers[4].message.as_deref().unwrap_or("");
        assert!(!answers[4].accepted && bad.matches(", ").count() >= 2, "{bad}");
        // The mutation ran: etcd-init injected.
        let m = answers[5]
            .mutated_object
            .as_ref()
            .unwrap_or_else(|| panic!("the sample mutation mutates: {:?}", answers[5]));
        assert!(m.to_string().contains("etcd-init"));
        // Presigned URLs: the first four are accepted, s3:// and the malformed one denied.
        let hc: Vec<bool> = answers[7..].iter().step_by(2).map(|a| a.accepted).collect();
        assert_eq!(hc, [true, true, true, true, true, true, true, true, false, false, false, false], "{answers:?}");
    }
}
