//! The validating decisions: HCPEtcdBackup, HostedCluster, HostedControlPlane.

use std::sync::OnceLock;

use serde_json::Value;

use super::{AdmissionRequest, Decision, DecisionInput, Operation, Target};
use crate::{
    api::{upstream_rules, GROUP},
    crd,
    finding::Warning,
    rules::{self, RuleContext},
    schema::{regex_cache, CompiledCrdSchema, Scope},
};

type Compiled = Result<CompiledCrdSchema, crd::CrdError>;

/// A compacted copy and the copies of the patterns made with it (served
/// with it: [`compiled`]).
type Compacted = (&'static Compiled, Option<&'static regex_cache::Copies>);

/// The compacted copies [`compact`] made, per validated target, when it has run.
static COMPACT: [OnceLock<Compacted>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];

/// The targets with a compiled schema, in the order [`compact`] is called.
pub const VALIDATED: [Target; 3] = [Target::HcpEtcdBackups, Target::HostedClusters, Target::HostedControlPlanes];

/// Copies `target`'s compiled schema (its JSON tree, its rule tree and their
/// direct forms) into memory allocated in one run, and serves the copy from
/// then on; a copy of every compiled pattern is made first, served with
/// this target only (the copied rules link the copied patterns, and a
/// request reads the patterns of its own target's windows). The Kubewarden module calls it at the
/// end of its pre-initialisation, each target on fresh 64 KiB windows of
/// its own, when the allocator has just switched to bump allocation
/// (src/kubewarden/arena.rs): the originals are scattered through a heap
/// full of what compiling left behind, so a request that read them mapped a
/// 64 KiB window of the image for nearly every schema node it visited; a
/// copy sits in one or two windows, and a request maps only its target's
/// (issue #35). Once per target and process; the decisions are the same
/// either way (the copies are clones).
pub fn compact(target: Target) {
    let Some(i) = VALIDATED.iter().position(|t| *t == target) else { return };
    let Some(Ok(schema)) = original(target) else { return };
    if COMPACT[i].get().is_some() {
        return;
    }
    let patterns = regex_cache::copies();
    // The copy's direct rules link what `get` serves while it is made.
    regex_cache::serve(patterns);
    // The root first (every request reads it), then the copy it holds.
    let mut copy: Box<Compiled> = Box::new(Err(crd::CrdError::NoSchema("")));
    *copy = Ok(schema.clone());
    let copy: &'static Compiled = Box::leak(copy);
    let _ = COMPACT[i].set((copy, patterns));
    regex_cache::serve(None);
}

/// The compiled schema of a validated target (parsed once per process):
/// its compacted copy where there is one, served with the patterns copied
/// with it (they lie in its windows).
fn compiled(target: Target) -> Option<&'static Compiled> {
    if let Some(i) = VALIDATED.iter().position(|t| *t == target) {
        if let Some((copy, patterns)) = COMPACT[i].get() {
            regex_cache::serve(*patterns);
            return Some(copy);
        }
    }
    original(target)
}

/// The compiled schema of a validated target as first compiled (what
/// [`compact`] copies).
fn original(target: Target) -> Option<&'static Compiled> {
    static BACKUP: OnceLock<Compiled> = OnceLock::new();
    static HC: OnceLock<Compiled> = OnceLock::new();
    static HCP: OnceLock<Compiled> = OnceLock::new();
    Some(match target {
        Target::HcpEtcdBackups => BACKUP.get_or_init(|| {
            crd::hcpetcdbackup_schema().map(|s| CompiledCrdSchema::compile_named(s, upstream_rules::hcpetcdbackup))
        }),
        Target::HostedClusters => HC.get_or_init(|| {
            crd::hostedcluster_schema().map(|s| CompiledCrdSchema::compile_named(s, upstream_rules::hostedcluster))
        }),
        Target::HostedControlPlanes => HCP.get_or_init(|| {
            crd::hostedcontrolplane_schema().map(|s| CompiledCrdSchema::compile_named(s, upstream_rules::hostedcluster))
        }),
        Target::EtcdStatefulSets | Target::EtcdBackupSecrets | Target::EtcdBackupJobs => return None,
    })
}

/// Why the decision core cannot start: a schema that does not parse, or a
/// rule or regex that does not compile (bugs of this build, caught by its tests).
#[derive(Debug, thiserror::Error)]
pub enum WarmUpError {
    #[error("{0}")]
    Schema(String),
    #[error("{kind}: {count} CEL rule(s) or regex(es) do not compile: {}", .errors.join("; "))]
    Rules { kind: &'static str, count: usize, errors: Vec<String> },
}

/// Parses every schema and compiles every CEL rule and regex now. The shells
/// call this before serving (the server before it reports ready, the CLI
/// before it decides, the Wasm module at build time: src/kubewarden/preinit.rs)
/// and fail when it fails; the first request then pays nothing.
pub fn warm_up() -> Result<(), WarmUpError> {
    for t in VALIDATED {
        let Some(compiled) = compiled(t) else { continue };
        let schema = match compiled {
            Ok(s) => s,
            Err(e) => return Err(WarmUpError::Schema(e.to_string())),
        };
        let mut errors = schema.compile_all();
        errors.extend(schema.compile_regexes().into_iter().map(|p| format!("regex {p:?} does not compile")));
        if !errors.is_empty() {
            return Err(WarmUpError::Rules { kind: t.kind(), count: errors.len(), errors });
        }
    }
    crate::schema::regex_cache::freeze();
    Ok(())
}

/// 400: a validating endpoint got a request for another resource.
pub(super) fn wrong_endpoint(req: &AdmissionRequest, expected: Target) -> Decision {
    Decision::bad_request(format!(
        "this endpoint validates {}, but the request is for {}; check the webhook configuration's rules",
        expected.resource(),
        resource_name(req)
    ))
}

/// 400: a resource no webhook here judges (no endpoint given).
pub(super) fn unhandled(req: &AdmissionRequest) -> Decision {
    Decision::bad_request(format!("hcp-etcd-admission does not handle {}", resource_name(req)))
}

/// Decides a request routed to `target`'s validating webhook.
pub(super) fn validation(req: &AdmissionRequest, input: &DecisionInput<'_>, target: Target) -> Decision {
    match req.operation {
        Operation::Create | Operation::Update => {}
        // Deleting or connecting is never judged here.
        Operation::Delete | Operation::Connect => return Decision::allow(Vec::new()),
    }
    let Some(object) = req.object.as_ref().filter(|o| o.is_object()) else {
        return Decision::bad_request(format!(
            "request.object must be a {} object for {}",
            target.kind(),
            req.operation.as_str()
        ));
    };
    if let Some(kind) = object.get("kind").and_then(Value::as_str) {
        if kind != target.kind() {
            return Decision::bad_request(format!("request.object is a {kind:?}, expected {:?}", target.kind()));
        }
    }
    let update = req.operation == Operation::Update;
    let old = if update { req.old_object.as_ref().filter(|o| o.is_object()) } else { None };
    if update && old.is_none() {
        return Decision::bad_request("request.oldObject must be an object for UPDATE");
    }
    let subresource = req.subresource();
    if !subresource.is_empty() && subresource != "status" {
        return Decision::allow(Vec::new());
    }
    if target == Target::EtcdBackupSecrets {
        // Secrets have no subresource this webhook judges.
        if !subresource.is_empty() {
            return Decision::allow(Vec::new());
        }
        let findings = rules::check_backup_secret(object, old);
        let seen = rules::backup_secret_seen(object, req.namespace_or_object(), req.object_name());
        return finish(req, target, "", findings.errors, findings.warnings).with_credentials(seen);
    }
    judge(req, input, target, object, old)
}

/// The schema (upstream rules, as the apiserver runs them) and the project
/// rules on the object as the apiserver hands it to validation.
fn judge(
    req: &AdmissionRequest,
    input: &DecisionInput<'_>,
    target: Target,
    object: &Value,
    old: Option<&Value>,
) -> Decision {
    let subresource = req.subresource();
    let schema = match compiled(target) {
        Some(Ok(schema)) => schema,
        Some(Err(e)) => {
            return Decision::internal_error(format!("hcp-etcd-admission cannot validate {}: {e}", target.resource()))
        }
        None => return Decision::bad_request(format!("{} is not validated by hcp-etcd-admission", target.resource())),
    };
    let prepared = prepare(object, old, subresource == "status");
    let scope = if subresource == "status" { Scope::StatusSubresource } else { Scope::Object };
    let outcome = schema.validate_as(&prepared, old, input.settings.kubernetes_version, scope);
    let ctx = RuleContext { settings: input.settings, now: input.now };
    let mut findings = match target {
        Target::HcpEtcdBackups => rules::check_hcpetcdbackup(&prepared, old, &ctx),
        Target::HostedClusters | Target::HostedControlPlanes => rules::check_hosted(&prepared, old, &ctx),
        Target::EtcdStatefulSets | Target::EtcdBackupSecrets | Target::EtcdBackupJobs => rules::Findings::default(),
    };
    if target == Target::HcpEtcdBackups && req.creates_main_resource() {
        let pre = rules::check_backup_preflight(&prepared, req.namespace_or_object(), input.lookup, input.settings);
        findings.errors.extend(pre.errors);
        findings.warnings.extend(pre.warnings);
        findings.credentials = pre.credentials;
    }
    let mut errors = outcome.errors;
    errors.extend(findings.errors);
    // The apiserver's notes: pruned fields, then the rules ratcheting let
    // pass (a value this UPDATE did not change). Notes, not findings: the
    // apiserver always sends them, enforcement neither hides nor counts them.
    let mut warnings: Vec<Warning> =
        outcome.unknown_fields.iter().map(|f| Warning::note(format!("unknown field {f:?}"))).collect();
    warnings.extend(outcome.ratcheted.iter().map(|e| Warning::note(e.to_string())));
    warnings.extend(findings.warnings);
    finish(req, target, GROUP, errors, warnings).with_credentials(findings.credentials)
}

fn finish(
    req: &AdmissionRequest,
    target: Target,
    group: &str,
    errors: Vec<crate::schema::FieldError>,
    warnings: Vec<Warning>,
) -> Decision {
    if errors.is_empty() {
        Decision::allow(warnings)
    } else {
        Decision::invalid(target.kind(), group, req.object_name(), &errors, warnings)
    }
}

fn resource_name(req: &AdmissionRequest) -> String {
    let r = &req.resource;
    if r.group.is_empty() {
        format!("{}/{}", r.version, r.resource)
    } else {
        format!("{}.{}", r.resource, r.group)
    }
}

/// The object as the apiserver hands it to validation: on CREATE, status is
/// dropped (status subresource); on a main UPDATE, status comes from the old
/// object; on a status UPDATE, spec comes from the old object.
fn prepare<'a>(object: &'a Value, old: Option<&Value>, status_update: bool) -> std::borrow::Cow<'a, Value> {
    let from_old = if status_update { "spec" } else { "status" };
    let wanted = old.and_then(|o| o.get(from_old));
    if object.get(from_old) == wanted {
        return std::borrow::Cow::Borrowed(object);
    }
    let mut obj = object.clone();
    if let Some(map) = obj.as_object_mut() {
        match wanted {
            Some(v) => {
                map.insert(from_old.to_string(), v.clone());
            }
            None => {
                map.remove(from_old);
            }
        }
    }
    std::borrow::Cow::Owned(obj)
}

#[cfg(test)]
mod tests {
    /// What the shells run before serving: every committed schema parses and
    /// every rule compiles (a broken schema fails this build's tests).
    #[test]
    fn the_core_warms_up() {
        assert!(super::warm_up().is_ok(), "{:?}", super::warm_up());
    }

    /// The compacted copies are other memory, and decide as a schema compiled
    /// anew does (a valid and an invalid backup, CREATE and UPDATE).
    #[test]
    fn compacted_copies_decide_as_the_originals() {
        use serde_json::json;
        // Patterns frozen first (as pre-initialisation does): the copy gets copies of them.
        assert!(super::warm_up().is_ok());
        super::compact(super::Target::HcpEtcdBackups);
        let copy = match super::compiled(super::Target::HcpEtcdBackups) {
            Some(Ok(s)) => s,
            _ => panic!("no compiled schema"),
        };
        let fresh = crate::schema::CompiledCrdSchema::compile_named(
            crate::crd::hcpetcdbackup_schema().expect("schema"),
            crate::api::upstream_rules::hcpetcdbackup,
        );
        assert!(super::COMPACT[0].get().is_some_and(|(_, patterns)| patterns.is_some()));
        let backup = |bucket: &str| {
            json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
                "metadata": {"name": "b", "namespace": "ns"},
                "spec": {"storage": {"storageType": "S3", "s3": {"bucket": bucket, "region": "us-east-1",
                    "keyPrefix": "p", "credentials": {"name": "c"}}}}})
        };
        let (mut failing, mut ratcheted) = (0, 0);
        for (object, old) in [
            (backup("ok-bucket"), None),
            (backup("Bad--Bucket"), None),
            (backup("ok-bucket"), Some(backup("other"))),
            (backup("Bad--Bucket"), Some(backup("Bad--Bucket"))),
        ] {
            let (a, b) = (copy.validate(&object, old.as_ref()), fresh.validate(&object, old.as_ref()));
            assert_eq!(a, b);
            failing += usize::from(!a.errors.is_empty());
            ratcheted += usize::from(!a.ratcheted.is_empty());
        }
        // The bad bucket on CREATE and the changed spec fail; the unchanged bad bucket is ratcheted.
        assert_eq!((failing, ratcheted), (2, 1));
    }

    /// Every pattern of every schema is searched by a read-only DFA: a
    /// `regex::Regex` search writes its cache (a page fault per regex per
    /// request in a fresh Kubewarden instance; schema/regex_cache.rs). It is
    /// the dense one (a table read a byte) for all but the Key Vault key URL
    /// (too large), and it answers as the regex does: on generated text around
    /// what the patterns accept, and on real values cut, extended and with a
    /// character replaced (each pattern matches some of them, so both answers
    /// are tried).
    #[test]
    fn every_pattern_of_every_schema_has_a_read_only_dfa() {
        use super::{compiled, Target};
        let mut patterns = Vec::new();
        for t in [Target::HcpEtcdBackups, Target::HostedClusters, Target::HostedControlPlanes] {
            if let Some(Ok(s)) = compiled(t) {
                patterns.extend(s.patterns());
            }
        }
        patterns.sort();
        patterns.dedup();
        assert!(patterns.len() >= 10, "{patterns:?}");
        let pieces = [
            "a",
            "z",
            "0",
            "9",
            "-",
            ".",
            "/",
            "_",
            ":",
            "A",
            "é",
            " ",
            "arn:aws:kms:us-east-1:123456789012:key/",
            "https://",
            "s3://",
            "x.vault.azure.net/keys/k/",
            "0123456789abcdef",
            "Ki",
            "e3",
            "+",
            "",
        ];
        let values = [
            "etcd-backup-1",
            "my.bucket-name",
            "us-east-1",
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/mrk-1",
            "https://my-vault.vault.azure.net/keys/etcd/0123456789abcdef",
            "https://hsm-1.managedhsm.azure.cn/keys/k",
            "s3://bucket/key.db",
            "https://bucket.s3.amazonaws.com/snap.db?X-Amz-Signature=abc",
            "example.com/name",
            "500Mi",
            "-1.5e+3",
            "A_b,c:d9",
            "prefix/sub_dir.v1",
        ];
        let alphabet: Vec<char> = "aZ09-_.:/+,!*'()?=%é".chars().collect();
        let mut rng = crate::schema::xorshift::XorShift(0x2545_f491_4f6c_dd1d);
        let mut dense = 0;
        for p in &patterns {
            let compiled = crate::schema::regex_cache::get(p).expect("compiles");
            assert!(compiled.has_dfa(), "{p:?} has no DFA");
            // A pattern past the size limit still answers (sparse), only slower.
            assert_eq!(
                compiled.dense_size().is_some(),
                !p.contains("managedhsm"),
                "{p:?}: {:?}",
                compiled.dense_size()
            );
            dense += usize::from(compiled.dense_size().is_some());
            let re = regex::Regex::new(p).expect("compiles");
            let mut generated: Vec<String> =
                (0..400).map(|_| (0..rng.below(6)).map(|_| pieces[rng.below(pieces.len())]).collect()).collect();
            for v in values {
                let chars: Vec<char> = v.chars().collect();
                for _ in 0..40 {
                    let mut c = chars.clone();
                    match rng.below(4) {
                        0 => c.truncate(rng.below(c.len() + 1)),
                        1 => (0..1 + rng.below(3)).for_each(|_| c.push(alphabet[rng.below(alphabet.len())])),
                        2 => {
                            let i = rng.below(c.len());
                            c[i] = alphabet[rng.below(alphabet.len())];
                        }
                        _ => {}
                    }
                    generated.push(c.into_iter().collect());
                }
            }
            let mut matched = 0;
            for h in &generated {
                assert_eq!(compiled.is_match(h), re.is_match(h), "{p:?} on {h:?}");
                matched += usize::from(re.is_match(h));
            }
            assert!(matched > 0, "nothing generated matches {p:?}: only its refusals were tried");
        }
        assert_eq!(dense, patterns.len() - 1);
    }

    /// Every upstream CEL rule of every validated schema carries its id (a
    /// rule without one would fall back to `upstream-schema` silently).
    #[test]
    fn every_upstream_rule_is_named_in_every_schema() {
        use super::{compiled, Target};
        for t in [Target::HcpEtcdBackups, Target::HostedClusters, Target::HostedControlPlanes] {
            let schema = match compiled(t) {
                Some(Ok(s)) => s,
                other => panic!("{t:?}: {other:?}"),
            };
            assert_eq!(schema.unnamed_rules(), Vec::<String>::new(), "{t:?}");
        }
    }
}
