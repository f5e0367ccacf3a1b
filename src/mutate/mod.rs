//! The `etcd-init` restore injection into a hosted control plane's etcd
//! StatefulSet (pure: object in, decision and JSON patch out).
//!
//! Upstream HEAD appends a container that restores every member as its own
//! one-member cluster (split brain at 3 replicas) and runs it after
//! `reset-member`. Here each member restores with its own name and peer URL,
//! the full initial cluster and one token, before `reset-member`; member
//! identity is taken from the etcd container's own env and flags so the two
//! can never disagree. The URL reaches the container only as an environment
//! variable.
//!
//! The decision fails closed: the StatefulSet is admitted without etcd-init
//! only when it is established that no restore is pending (exactly one
//! HostedControlPlane read, and it has no restore URL, unmanaged etcd or
//! `EtcdSnapshotRestored=True`; or the stored StatefulSet reports every
//! replica ready, so the restore is over). Every other case
//! is denied with what is missing; the control-plane-operator retries.
//!
//! The answer never holds the restore URL. It is a presigned URL, a bearer
//! credential for every Secret of the hosted cluster, and an unauthenticated
//! caller can forge a review for any namespace. The control-plane-operator
//! renders its own etcd-init with the URL (`RESTORE_URL_ETCD`, a literal)
//! whenever a restore is pending, in every generation that has
//! `restoreSnapshotURL`; the patch `copy`s the value from there into the
//! injected container. A StatefulSet that does not carry the
//! HostedControlPlane's URL is denied (`restore_url_not_rendered`): the
//! caller learns nothing it did not send.
//!
//! Every restore gets its own generation, a digest of the HostedControlPlane
//! UID, the namespace and the URL: the same on every member of one restore,
//! different for any other. etcd-init derives the cluster token from it and
//! from the snapshot's digest, so a member of an earlier restore (or of a
//! different object behind the same URL) meeting this one fails loudly with a
//! cluster ID mismatch instead of merging raft logs.

pub mod backup_job;
pub(crate) mod container;
pub mod identity;

use crate::json_at::At;
use serde_json::Value;

pub use container::{
    build_init_container, injected_script, is_stashed_script, recognise_stashed_script, stash_script_copy,
    STAGE_DIR_NAME,
};

use crate::{
    api::{restore_snapshot_url, snapshot_restored, unmanaged_etcd},
    lookup::{self, Freshness, HcpLookup, Lookup},
    schema::FieldError,
    settings::Settings,
};

/// Name of the injected init container.
pub const INIT_CONTAINER: &str = "etcd-init";
/// The init container etcd-init must run before.
pub const RESET_MEMBER: &str = "reset-member";
/// Name of the StatefulSet this mutates.
pub const ETCD_STATEFULSET: &str = "etcd";

crate::labels::label_enum!(
    /// Why an etcd StatefulSet was denied (a closed set: metrics label it).
    pub Blocker {
        /// The shell has no HostedControlPlane lookup at all.
        NoLookupSource => "no_lookup_source",
        /// The lookup failed (API error, RBAC, host capability missing).
        LookupFailed => "lookup_failed",
        /// The lookup's cache has not synced and no live read answered.
        CacheNotSynced => "cache_not_synced",
        /// No HostedControlPlane in the namespace.
        NoHostedControlPlane => "no_hostedcontrolplane",
        /// More than one HostedControlPlane in the namespace.
        SeveralHostedControlPlanes => "several_hostedcontrolplanes",
        /// The template's identity or layout cannot be established exactly.
        Template => "template",
        /// A restore is pending, but the object carries no etcd-init with the
        /// HostedControlPlane's restore URL to copy it from.
        UrlNotRendered => "restore_url_not_rendered",
    }
);

/// What the decision did (a closed set: metrics label it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Outcome {
    /// Not the etcd StatefulSet, or not a CREATE/UPDATE of it.
    #[default]
    NotApplicable,
    /// etcd-init added (or replaced, or moved before reset-member).
    Injected,
    /// etcd-init already there, identical, in place: no patch.
    Unchanged,
    /// No restore pending and a stale etcd-init removed.
    Removed,
    /// No restore pending and nothing to remove.
    NotNeeded,
    /// The decision could not be established (it would be denied), but the
    /// UPDATE leaves `spec` as it was: no pod starts from it, so it passes
    /// (a label, an annotation, a finalizer removed at deletion).
    SpecUnchanged,
    /// Denied.
    Denied(Blocker),
}

impl Outcome {
    /// `(outcome, reason)` metrics label values; reason is `none` unless denied.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            Outcome::NotApplicable => ("not_applicable", "none"),
            Outcome::Injected => ("injected", "none"),
            Outcome::Unchanged => ("unchanged", "none"),
            Outcome::Removed => ("removed", "none"),
            Outcome::NotNeeded => ("not_needed", "none"),
            Outcome::SpecUnchanged => ("spec_unchanged", "none"),
            Outcome::Denied(r) => ("denied", r.as_str()),
        }
    }
}

/// Why the StatefulSet is denied.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The HostedControlPlane could not be established (403 Forbidden shape).
    Lookup(String),
    /// The template's identity/layout: field errors (422 Invalid shape).
    Template(Vec<FieldError>),
}

/// The result of a mutation decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mutation {
    /// The JSON patch (RFC 6902) to apply, when the object must change.
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<crate::finding::Warning>,
    pub outcome: Outcome,
    /// Set exactly when `outcome` is `Denied`.
    pub denial: Option<Refusal>,
}

impl Mutation {
    fn outcome(outcome: Outcome, patch: Option<json_patch::Patch>) -> Self {
        Self { patch, outcome, ..Self::default() }
    }

    fn denied(reason: Blocker, denial: Refusal) -> Self {
        Self { outcome: Outcome::Denied(reason), denial: Some(denial), ..Self::default() }
    }
}

/// The tail of every lookup denial: what is at stake and who retries.
fn lookup_denial(namespace: &str, what: &str) -> String {
    format!(
        "{what}: whether an etcd restore is pending (HostedControlPlane spec.etcd.managed.storage.restoreSnapshotURL, \
         condition EtcdSnapshotRestored) cannot be established, and admitting etcd without that decision can start it \
         empty and lose the restore. Admitted once exactly one HostedControlPlane in namespace {namespace:?} can be read; \
         the control-plane-operator retries"
    )
}

/// Decides the etcd-init injection for a StatefulSet in `namespace`.
/// The decision for `sts` (`old`: the stored object on an UPDATE).
pub fn etcd_init(
    sts: &Value,
    old: Option<&Value>,
    namespace: &str,
    lookup: Option<&dyn Lookup>,
    settings: &Settings,
) -> Mutation {
    etcd_init_at(sts, old, namespace, lookup, settings, None)
}

/// [`etcd_init`] with the request's clock: an etcd-init injected (or kept)
/// with a presigned URL that has expired, or expires within the download's
/// time bound, also gets a warning. The clock never changes the decision.
pub fn etcd_init_at(
    sts: &Value,
    old: Option<&Value>,
    namespace: &str,
    lookup: Option<&dyn Lookup>,
    settings: &Settings,
    now: Option<&crate::time::Now>,
) -> Mutation {
    let write = EtcdWrite { sts, old, namespace, settings, now };
    let m = if sts.at("/metadata/name").and_then(Value::as_str) != Some(ETCD_STATEFULSET) {
        Mutation::default()
    } else {
        match the_hosted_control_plane(lookup, namespace) {
            Ok(hcp) => restore_decision(&write, &hcp),
            Err(refused) => refused,
        }
    };
    let spec_unchanged = old.is_some_and(|o| o.is_object() && o.get("spec") == sts.get("spec"));
    if !spec_unchanged {
        return m;
    }
    let why = match &m.denial {
        Some(Refusal::Lookup(reason)) => reason.clone(),
        Some(Refusal::Template(errors)) => errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
        None => return m,
    };
    let mut allowed = Mutation::outcome(Outcome::SpecUnchanged, None);
    allowed.warnings = m.warnings;
    allowed.warnings.push(crate::finding::Warning::note(format!(
        "etcd-init restore decision not established ({why}); admitted because this update leaves spec unchanged, so no etcd pod starts from it"
    )));
    allowed
}

/// What the etcd-init decision for `sts` reads (the HostedControlPlanes of
/// its namespace), and how fresh the answer must be; `None`: this
/// StatefulSet is not etcd, nothing is read. A CREATE is read live, and so
/// is an UPDATE whose HostedControlPlane owner a cache does not hold: the
/// decision that can lose a restore rests on facts, never on a stale cache.
pub fn reads(sts: &Value, create: bool) -> Option<Freshness> {
    if sts.at("/metadata/name").and_then(Value::as_str) != Some(ETCD_STATEFULSET) {
        return None;
    }
    if create {
        return Some(Freshness::Live);
    }
    let owners = sts.at("/metadata/ownerReferences").and_then(Value::as_array).into_iter().flatten();
    let uids: Vec<String> = owners
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("HostedControlPlane"))
        .map(|o| o.get("uid").and_then(Value::as_str).unwrap_or_default().to_string())
        .collect();
    // No HostedControlPlane owner: nothing to hold the cache against.
    Some(if uids.is_empty() { Freshness::Cached } else { Freshness::LiveUnlessCached(uids) })
}

/// The restore generation: 16 hex digits of SHA-256 over the
/// HostedControlPlane UID, the namespace and the URL.
pub fn restore_generation(hcp: &Value, namespace: &str, url: &str) -> String {
    use sha2::{Digest, Sha256};
    let uid = hcp.at("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    let mut h = Sha256::new();
    for part in ["hcp-etcd-admission restore generation", uid, namespace, url] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The settings a restore in progress keeps (issue #28, M1): when the
/// stored StatefulSet's etcd-init is of this `generation`, its revision bump
/// and its allow-without-bump flag stay, whatever the webhook's settings say
/// now. A settings change or an upgrade with another default mid-restore
/// would otherwise change the template, roll the pods still restoring, and
/// restore members of one cluster with revisions 10^12 apart.
fn pinned<'a>(old: Option<&Value>, generation: &str, settings: &'a Settings) -> std::borrow::Cow<'a, Settings> {
    let env = old
        .and_then(|o| o.at(LIST))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("name").and_then(Value::as_str) == Some(INIT_CONTAINER))
        .filter_map(|c| c.get("env").and_then(Value::as_array))
        .find(|env| env_value(env, "ETCD_INIT_RESTORE_GENERATION") == Some(generation));
    let Some(env) = env else { return std::borrow::Cow::Borrowed(settings) };
    let mut kept = settings.clone();
    // Only a bump the settings could have given: a hand-edited 0 or 1 is
    // never carried on (the setting stands, and the template changes).
    if let Some(bump) = env_value(env, "RESTORE_REVISION_BUMP")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|b| crate::settings::REVISION_BUMP_RANGE.contains(b))
    {
        kept.restore_revision_bump = bump;
    }
    match env_value(env, "RESTORE_ALLOW_WITHOUT_REVISION_BUMP") {
        Some("true") => kept.allow_restore_without_revision_bump = true,
        Some("false") => kept.allow_restore_without_revision_bump = false,
        _ => {}
    }
    std::borrow::Cow::Owned(kept)
}

/// The literal value of env item `name`.
fn env_value<'v>(env: &'v [Value], name: &str) -> Option<&'v str> {
    env.iter().find(|e| e.get("name").and_then(Value::as_str) == Some(name))?.get("value")?.as_str()
}

/// Revisions a restore of this HostedControlPlane starts at, at least
/// (issue #28, M5): its creation time in Unix seconds × 10^7. A later
/// restore of the same snapshot is a new HostedControlPlane, created later,
/// so it lands above every revision the earlier one reached while that one
/// wrote fewer than 10^7 revisions a second. Int64 holds it until the year
/// 2999. `0` (no floor) without a readable creation time.
pub fn revision_floor(hcp: &Value) -> u64 {
    hcp.at("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| crate::time::parse_rfc3339(t).ok())
        .and_then(|t| u64::try_from(t).ok())
        .map_or(0, |t| t.saturating_mul(REVISION_FLOOR_PER_SECOND))
}

/// Whose volumes a restore's members are (`ETCD_INIT_VOLUME_OWNER`): the
/// namespace and the HostedControlPlane's UID. etcd-init stamps every member
/// it places with it and refuses a volume stamped for another owner: another
/// hosted cluster's volume, or one a recreated HostedControlPlane of the same
/// name left behind (a retained PersistentVolume bound again).
pub fn volume_owner(hcp: &Value, namespace: &str) -> String {
    let uid = hcp.at("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    format!("{namespace} (HostedControlPlane UID {uid})")
}

/// See [`revision_floor`].
pub const REVISION_FLOOR_PER_SECOND: u64 = 10_000_000;

/// Ready members out of the replicas of the stored StatefulSet, when every
/// replica is ready: every member restored or joined, so the restore is
/// over. Not at a bare quorum (issue #28, M4): the control-plane-operator
/// sets `EtcdSnapshotRestored` only when every replica is ready and every
/// pod shows a finished etcd-init, and it computes that in the same
/// reconcile, before the update this decides; a removal at a quorum rolled
/// the pods without etcd-init first, so the condition was never set (the
/// restore "pending" for the cluster's life, etcd-init re-injected at each
/// quorum loss), and a member still in etcd-init was restarted without it
/// (reset-member then started it outside the cluster; the model in
/// tests/restore_model finds both).
fn all_ready(old: Option<&Value>) -> Option<(u64, u64)> {
    let old = old?;
    let replicas = old.at("/spec/replicas").and_then(Value::as_u64).unwrap_or(1);
    let ready = old.at("/status/readyReplicas").and_then(Value::as_u64)?;
    (replicas > 0 && ready >= replicas).then_some((ready, replicas))
}

/// The etcd StatefulSet write being decided, with what the decision may use.
struct EtcdWrite<'a> {
    sts: &'a Value,
    /// The stored object, on an UPDATE.
    old: Option<&'a Value>,
    namespace: &'a str,
    settings: &'a Settings,
    now: Option<&'a crate::time::Now>,
}

/// The decision for the etcd StatefulSet, given its one HostedControlPlane.
fn restore_decision(write: &EtcdWrite<'_>, hcp: &Value) -> Mutation {
    let EtcdWrite { sts, old, namespace, settings, now } = *write;
    let url = restore_snapshot_url(hcp);
    let running = all_ready(old);
    let no_restore_pending = unmanaged_etcd(hcp) || url.is_none() || snapshot_restored(hcp) || running.is_some();
    let Some(url) = url.filter(|_| !no_restore_pending) else {
        // Established: no restore pending. A stale etcd-init goes, so a later
        // empty volume can never restore an old snapshot into a live cluster.
        return match remove_patch(sts) {
            Some(patch) => {
                let why = if snapshot_restored(hcp) {
                    "EtcdSnapshotRestored is True".to_string()
                } else if unmanaged_etcd(hcp) {
                    "etcd is unmanaged".to_string()
                } else if url.is_none() {
                    "the HostedControlPlane has no restoreSnapshotURL".to_string()
                } else {
                    let (ready, replicas) = running.unwrap_or_default();
                    format!("{ready} of {replicas} etcd members are ready (every member restored or joined, so the restore is complete)")
                };
                let mut m = Mutation::outcome(Outcome::Removed, Some(patch));
                m.warnings.push(crate::finding::Warning::note(format!(
                    "etcd-init removed from the etcd StatefulSet: {why}, so no restore is pending and an empty data volume must be re-added by reset-member, never restored"
                )));
                m
            }
            None => Mutation::outcome(Outcome::NotNeeded, None),
        };
    };
    let generation = restore_generation(hcp, namespace, url);
    let settings = &pinned(old, &generation, settings);
    let owner = volume_owner(hcp, namespace);
    let container = match build_init_container(sts, &generation, url, (revision_floor(hcp), &owner), settings) {
        Ok(c) => c,
        Err(errors) => return Mutation::denied(Blocker::Template, Refusal::Template(errors)),
    };
    let source = match rendered_url(sts, url) {
        Ok(source) => source,
        Err(error) => return Mutation::denied(Blocker::UrlNotRendered, Refusal::Template(vec![error])),
    };
    let mut m = match init_container_patch(sts, container, source) {
        Some(patch) => Mutation::outcome(Outcome::Injected, Some(patch)),
        None => Mutation::outcome(Outcome::Unchanged, None),
    };
    m.warnings.extend(now.and_then(|now| crate::rules::restore_url_injection_warning(url, now, settings)));
    m
}

/// The one HostedControlPlane of `namespace`, or the mutation that refuses
/// the StatefulSet because it cannot be established (never a guess).
fn the_hosted_control_plane(lookup: Option<&dyn Lookup>, namespace: &str) -> Result<Value, Mutation> {
    let (reason, what) = match lookup::hosted_control_plane(lookup, namespace) {
        HcpLookup::One(hcp) => return Ok(hcp),
        HcpLookup::NoSource => (
            Blocker::NoLookupSource,
            "this webhook has no HostedControlPlane lookup (no cluster watch, no --context, or a Kubewarden policy that is not context aware)".to_string(),
        ),
        HcpLookup::NotSynced => (
            Blocker::CacheNotSynced,
            "the HostedControlPlane cache has not synced and a live read did not answer".to_string(),
        ),
        HcpLookup::Failed(why) => (
            Blocker::LookupFailed,
            format!("the HostedControlPlanes of namespace {namespace:?} could not be read ({why})"),
        ),
        HcpLookup::NotFound => {
            (Blocker::NoHostedControlPlane, format!("no HostedControlPlane found in namespace {namespace:?}"))
        }
        HcpLookup::Several(n) => (
            Blocker::SeveralHostedControlPlanes,
            format!("{n} HostedControlPlanes found in namespace {namespace:?}, expected exactly one"),
        ),
    };
    Err(Mutation::denied(reason, Refusal::Lookup(lookup_denial(namespace, &what))))
}

/// A pod template's init container list (the StatefulSet's and the Job's).
const LIST: &str = "/spec/template/spec/initContainers";
const LIST_TOKENS: [&str; 4] = ["spec", "template", "spec", "initContainers"];

/// The pointer to the init container list, or to one of its items (an index
/// or `-`): built from tokens, there is no text to mis-parse.
fn list_pointer(item: Option<String>) -> json_patch::jsonptr::PointerBuf {
    let mut p = json_patch::jsonptr::PointerBuf::from_tokens(LIST_TOKENS);
    if let Some(token) = item {
        p.push_back(token);
    }
    p
}

fn init_names(sts: &Value) -> Option<Vec<Option<String>>> {
    sts.at(LIST)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|c| c.get("name").and_then(Value::as_str).map(str::to_string)).collect())
}

fn is_init(name: &Option<String>) -> bool {
    name.as_deref() == Some(INIT_CONTAINER)
}

/// Removes of every `etcd-init`, highest index first.
fn remove_ops(names: &[Option<String>]) -> Vec<json_patch::PatchOperation> {
    let stale: Vec<usize> = names.iter().enumerate().filter(|(_, n)| is_init(n)).map(|(i, _)| i).collect();
    stale
        .into_iter()
        .rev()
        .map(|i| {
            json_patch::PatchOperation::Remove(json_patch::RemoveOperation { path: list_pointer(Some(i.to_string())) })
        })
        .collect()
}

/// The patch removing every `etcd-init`; `None` when there is none.
fn remove_patch(sts: &Value) -> Option<json_patch::Patch> {
    let ops = remove_ops(&init_names(sts)?);
    (!ops.is_empty()).then_some(json_patch::Patch(ops))
}

/// Where the object carries the restore URL: an `etcd-init` init container
/// (`init`) whose env item `env` is `RESTORE_URL_ETCD` with the URL as a
/// literal value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UrlSource {
    init: usize,
    env: usize,
}

/// The field every "URL not rendered" denial names.
const URL_FIELD: &str = "spec.template.spec.initContainers[name=etcd-init].env[name=RESTORE_URL_ETCD]";

/// The first `etcd-init` of `sts` whose literal `RESTORE_URL_ETCD` is `url`,
/// or the denial that says the object does not carry it. Never shows either
/// URL: both are bearer credentials. Linear in the init containers' env.
fn rendered_url(sts: &Value, url: &str) -> Result<UrlSource, FieldError> {
    let inits = sts.at(LIST).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    // The value etcd-init must carry: the kubelet expands `$$` and `$(VAR)`
    // in env values, so a `$` travels doubled (what the injected container
    // holds). The control-plane-operator writes the URL as it is, which is
    // the same text unless the URL has a `$`.
    let escaped = identity::escape_env(url);
    let (mut carries_another, mut unescaped) = (false, false);
    for (init, c) in
        inits.iter().enumerate().filter(|(_, c)| c.get("name").and_then(Value::as_str) == Some(INIT_CONTAINER))
    {
        let env = c.get("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, e) in env.iter().enumerate() {
            if e.get("name").and_then(Value::as_str) != Some(container::URL_ENV) {
                continue;
            }
            match e.get("value").and_then(Value::as_str) {
                Some(v) if v == escaped && e.get("valueFrom").is_none() => return Ok(UrlSource { init, env: i }),
                Some(v) if v == url => unescaped = true,
                _ => carries_another = true,
            }
        }
    }
    const WHY: &str =
        "the restore URL is a presigned URL, a bearer credential, so this webhook never writes it into an \
        admission answer: it copies it from the etcd-init container the control-plane-operator renders into this \
        StatefulSet (env RESTORE_URL_ETCD, a literal value) while a restore is pending";
    Err(if unescaped {
        FieldError::forbidden(
            URL_FIELD,
            format!(
                "the HostedControlPlane's spec.etcd.managed.storage.restoreSnapshotURL[0] contains '$', which the kubelet \
                 expands in an env value ('$$' becomes '$', '$(NAME)' a variable), so the URL rendered here reaches etcd-init \
                 changed, and this webhook cannot escape it: {WHY}. Restore from a URL without '$' (percent-encoded as %24; \
                 a presigned URL has none)"
            ),
        )
    } else if carries_another {
        FieldError::forbidden(
            URL_FIELD,
            format!(
                "differs from the HostedControlPlane's spec.etcd.managed.storage.restoreSnapshotURL[0] (neither is shown); {WHY}. \
                 Admitted once the StatefulSet carries the HostedControlPlane's current URL; the control-plane-operator renders it on its next reconcile"
            ),
        )
    } else {
        FieldError::required(URL_FIELD).with_detail(format!(
            "a restore is pending (HostedControlPlane spec.etcd.managed.storage.restoreSnapshotURL is set, EtcdSnapshotRestored is not True) \
             and {WHY}. Admitted once the StatefulSet carries it; the control-plane-operator renders it on every reconcile while the restore is pending"
        ))
    })
}

/// The JSON patch that puts `container` immediately before `reset-member`
/// (appended when there is none), replacing every other `etcd-init`; `None`
/// when it is already there, identical, in the right place. Built by hand,
/// not diffed: a handful of operations and no copy of the StatefulSet.
///
/// The restore URL is never in the patch: the added container's
/// `RESTORE_URL_ETCD` has no value, and a `copy` from `source` (the
/// object's own etcd-init) fills it in before the old etcd-inits are
/// removed. The operations, in order: add at the slot (an index of the
/// list as it stands), copy, remove the stale ones (indexes shifted past the
/// added container, highest first).
fn init_container_patch(sts: &Value, mut container: Value, source: UrlSource) -> Option<json_patch::Patch> {
    use json_patch::{AddOperation, CopyOperation, PatchOperation, RemoveOperation};
    let names = init_names(sts).unwrap_or_default();
    let current = sts.at(LIST).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let others: Vec<usize> = names.iter().enumerate().filter(|(_, n)| !is_init(n)).map(|(i, _)| i).collect();
    let stale: Vec<usize> = names.iter().enumerate().filter(|(_, n)| is_init(n)).map(|(i, _)| i).collect();
    // Where etcd-init belongs: before reset-member, else after everything.
    let slot = others.iter().position(|&i| names.get(i).and_then(Option::as_deref) == Some(RESET_MEMBER));
    if let [only] = stale.as_slice() {
        let before = others.iter().filter(|&&i| i < *only).count();
        if before == slot.unwrap_or(others.len()) && current.get(*only) == Some(&container) {
            return None;
        }
    }
    // The index, in the list as it stands, the container is added at.
    let at = slot.and_then(|s| others.get(s).copied()).unwrap_or(names.len());
    let shifted = |i: usize| if i >= at { i + 1 } else { i };
    let url_env = container::strip_url(&mut container);
    let item = |i: usize, rest: &[&str]| {
        let mut p = list_pointer(Some(i.to_string()));
        rest.iter().for_each(|t| p.push_back(*t));
        p
    };
    let mut ops = vec![PatchOperation::Add(AddOperation {
        path: list_pointer(Some(if at == names.len() { "-".to_string() } else { at.to_string() })),
        value: container,
    })];
    if let Some(j) = url_env {
        let env = source.env.to_string();
        let to = j.to_string();
        ops.push(PatchOperation::Copy(CopyOperation {
            from: item(shifted(source.init), &["env", &env, "value"]),
            path: item(at, &["env", &to, "value"]),
        }));
    }
    ops.extend(
        stale
            .iter()
            .rev()
            .map(|&i| PatchOperation::Remove(RemoveOperation { path: list_pointer(Some(shifted(i).to_string())) })),
    );
    Some(json_patch::Patch(ops))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::lookup::{Lookup, LookupError};

    /// One answer for every namespace asked.
    struct Prefetched(Result<Vec<Value>, LookupError>);

    impl Lookup for Prefetched {
        fn hosted_control_planes(&self, _namespace: &str) -> Result<Vec<Value>, LookupError> {
            self.0.clone()
        }
    }

    /// A HostedControlPlane lookup with a restore pending.
    fn restore_pending() -> Prefetched {
        Prefetched(Ok(vec![json!({"spec": {"etcd": {"managementType": "Managed",
            "managed": {"storage": {"restoreSnapshotURL": ["https://h/k.db"]}}}}})]))
    }

    /// The etcd-init the control-plane-operator renders (HEAD's shape), with
    /// `url`: where the patch copies the URL from.
    fn rendered(url: &str) -> Value {
        json!({"name": "etcd-init", "image": "etcd", "command": ["/bin/sh", "-ce", "restore"],
            "env": [{"name": "RESTORE_URL_ETCD", "value": url}], "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]})
    }

    fn sts() -> Value {
        json!({"metadata": {"name": "etcd", "namespace": "ns"}, "spec": {"serviceName": "etcd-discovery", "template": {"spec": {
            "initContainers": [rendered("https://h/k.db")],
            "containers": [{"name": "etcd", "image": "etcd", "env": [{"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
                {"name": "ETCD_NAME", "value": "$(HOSTNAME)"}, {"name": "ETCD_INITIAL_CLUSTER", "value": "etcd-0=https://e0:2380"},
                {"name": "ETCD_INITIAL_ADVERTISE_PEER_URLS", "value": "https://$(HOSTNAME):2380"}],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]}]}}}})
    }

    #[test]
    fn every_lookup_failure_is_a_denial_with_its_reason() {
        let s = Settings::default();
        let cases: Vec<(Option<Prefetched>, Blocker, &str)> = vec![
            (None, Blocker::NoLookupSource, "no HostedControlPlane lookup"),
            (Some(Prefetched(Err(LookupError::NotSynced))), Blocker::CacheNotSynced, "has not synced"),
            (
                Some(Prefetched(Err(LookupError::Failed("forbidden: RBAC".into())))),
                Blocker::LookupFailed,
                "could not be read (forbidden: RBAC)",
            ),
            (Some(Prefetched(Ok(vec![]))), Blocker::NoHostedControlPlane, "no HostedControlPlane found"),
            (
                Some(Prefetched(Ok(vec![json!({}), json!({})]))),
                Blocker::SeveralHostedControlPlanes,
                "2 HostedControlPlanes",
            ),
        ];
        for (lookup, reason, needle) in cases {
            let m = etcd_init(&sts(), None, "ns", lookup.as_ref().map(|l| l as &dyn Lookup), &s);
            assert_eq!(m.outcome, Outcome::Denied(reason));
            assert!(m.patch.is_none());
            match m.denial {
                Some(Refusal::Lookup(msg)) => {
                    assert!(msg.contains(needle), "{msg}");
                    assert!(msg.contains("control-plane-operator retries"), "{msg}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(Outcome::Denied(reason).labels(), ("denied", reason.as_str()));
        }
        // Other StatefulSets are not this webhook's business, whatever the lookup.
        let mut other = sts();
        other["metadata"]["name"] = json!("kube-apiserver");
        assert_eq!(etcd_init(&other, None, "ns", None, &s).outcome, Outcome::NotApplicable);
    }

    /// Every init container list of up to four items drawn from the shapes
    /// a StatefulSet can hold (other containers, reset-member, etcd-inits
    /// with the URL, another URL, none): whenever a patch is made it never
    /// holds the URL, it applies, and it leaves exactly the injected
    /// container, once, before reset-member (or last), with the URL copied
    /// in and every other container in its order. Without an etcd-init that
    /// carries the URL: denied, and the denial does not show it.
    #[test]
    fn the_patch_copies_the_url_and_never_holds_it() {
        let s = Settings::default();
        let url = "https://h/k.db?X-Amz-Signature=secret";
        let inject = Prefetched(Ok(vec![json!({"spec": {"etcd": {"managementType": "Managed",
            "managed": {"storage": {"restoreSnapshotURL": [url]}}}}})]));
        let shapes = [
            json!({"name": "ensure-dns", "image": "x"}),
            json!({"name": "reset-member", "image": "x"}),
            rendered(url),
            rendered("https://other/x.db"),
            json!({"name": "etcd-init", "image": "x"}),
        ];
        let (mut lists, mut last, mut decided): (Vec<Vec<usize>>, Vec<Vec<usize>>, usize) =
            (vec![vec![]], vec![vec![]], 0);
        for _ in 0..4 {
            last = last.iter().flat_map(|l| (0..shapes.len()).map(move |k| [l.clone(), vec![k]].concat())).collect();
            lists.extend(last.iter().cloned());
        }
        for list in &lists {
            let mut t = sts();
            t["spec"]["template"]["spec"]["initContainers"] = list.iter().map(|&k| shapes[k].clone()).collect();
            let m = etcd_init(&t, None, "ns", Some(&inject), &s);
            if !list.contains(&2) {
                assert_eq!(m.outcome, Outcome::Denied(Blocker::UrlNotRendered), "{list:?}");
                let Some(Refusal::Template(e)) = &m.denial else { panic!("{list:?}: {m:?}") };
                let text = e.iter().map(ToString::to_string).collect::<String>();
                assert!(!text.contains("h/k.db") && !text.contains("other/x.db"), "{text}");
                let want =
                    if list.contains(&3) { "Forbidden: differs" } else { "Required value: a restore is pending" };
                assert!(text.contains(want), "{list:?}: {text}");
                continue;
            }
            decided += 1;
            let patch = match m.outcome {
                Outcome::Injected => m.patch.expect("patch"),
                Outcome::Unchanged => continue,
                other => panic!("{list:?}: {other:?}"),
            };
            let text = serde_json::to_string(&patch).expect("json");
            assert!(!text.contains("h/k.db"), "{list:?}: {text}");
            let mut patched = t.clone();
            json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("{list:?}: {e}: {text}"));
            let inits = patched["spec"]["template"]["spec"]["initContainers"].as_array().expect("list").clone();
            let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
            let mut want: Vec<&str> =
                list.iter().filter(|&&k| k < 2).map(|&k| if k == 0 { "ensure-dns" } else { "reset-member" }).collect();
            let at = want.iter().position(|n| *n == "reset-member").unwrap_or(want.len());
            want.insert(at, "etcd-init");
            assert_eq!(names, want, "{list:?}: {text}");
            let init = &inits[at];
            let env = init["env"].as_array().expect("env");
            assert!(env.iter().any(|e| e["name"] == "RESTORE_URL_ETCD" && e["value"] == url), "{list:?}: {init}");
            // Admitted again as stored: nothing to change.
            assert_eq!(etcd_init(&patched, None, "ns", Some(&inject), &s).outcome, Outcome::Unchanged, "{list:?}");
        }
        assert!(decided > 300, "{decided}");
    }

    #[test]
    fn a_dollar_in_the_url_is_copied_only_escaped() {
        let s = Settings::default();
        let url = "https://h/k.db?sig=a$(HOME)b$$c";
        let inject = Prefetched(Ok(vec![json!({"spec": {"etcd": {"managementType": "Managed",
            "managed": {"storage": {"restoreSnapshotURL": [url]}}}}})]));
        let mut t = sts();
        t["spec"]["template"]["spec"]["initContainers"] = json!([rendered(url)]);
        let m = etcd_init(&t, None, "ns", Some(&inject), &s);
        assert_eq!(m.outcome, Outcome::Denied(Blocker::UrlNotRendered));
        let Some(Refusal::Template(e)) = &m.denial else { panic!("{m:?}") };
        assert!(e[0].to_string().contains("contains '$'") && !e[0].to_string().contains("HOME"), "{e:?}");
        // Escaped as the kubelet needs it (what the injected container holds): copied.
        t["spec"]["template"]["spec"]["initContainers"] = json!([rendered(&identity::escape_env(url))]);
        let m = etcd_init(&t, None, "ns", Some(&inject), &s);
        assert_eq!(m.outcome, Outcome::Injected, "{m:?}");
    }

    #[test]
    fn the_first_container_after_a_stash_takes_the_copy_and_the_next_copies() {
        let s = Settings::default();
        // (address, is the script, recognised by address)
        let script = |m: &Mutation| {
            let Some(json_patch::PatchOperation::Add(add)) = m.patch.as_ref().and_then(|p| p.0.first()) else {
                panic!("an add first: {:?}", m.patch)
            };
            let text = add.value["command"][2].as_str().expect("the script");
            (text.as_ptr() as usize, text == injected_script(), container::is_stashed_script(text))
        };
        let stashed = container::stash_script_copy();
        let first = etcd_init(&sts(), None, "ns", Some(&restore_pending()), &s);
        let second = etcd_init(&sts(), None, "ns", Some(&restore_pending()), &s);
        let ((at1, script1, known1), (at2, script2, known2)) = (script(&first), script(&second));
        assert_eq!(at1, stashed, "the stashed copy moved in");
        assert_ne!(at2, stashed, "taken once");
        assert!(script1 && script2);
        assert_eq!(first.patch, second.patch);
        // Only the Kubewarden pre-initialisation makes an address known (an
        // allocator that reuses it would make another string the script).
        assert!(!known1 && !known2);
    }

    #[test]
    fn established_outcomes() {
        let s = Settings::default();
        let hcp = |extra: Value| {
            let mut h = json!({"spec": {"etcd": {"managementType": "Managed", "managed": {"storage": {"restoreSnapshotURL": ["https://h/k.db"]}}}}});
            json_patch::merge(&mut h, &extra);
            h
        };
        let inject = Prefetched(Ok(vec![hcp(json!({}))]));
        let m = etcd_init(&sts(), None, "ns", Some(&inject), &s);
        assert_eq!(m.outcome, Outcome::Injected);
        let patch = m.patch.expect("patch");
        let mut patched = sts();
        json_patch::patch(&mut patched, &patch).expect("applies");
        assert_eq!(etcd_init(&patched, None, "ns", Some(&inject), &s).outcome, Outcome::Unchanged);
        let restored = Prefetched(Ok(vec![hcp(
            json!({"status": {"conditions": [{"type": "EtcdSnapshotRestored", "status": "True"}]}}),
        )]));
        let m = etcd_init(&patched, None, "ns", Some(&restored), &s);
        assert_eq!(m.outcome, Outcome::Removed);
        let mut cleaned = patched.clone();
        json_patch::patch(&mut cleaned, &m.patch.expect("removal")).expect("applies");
        assert_eq!(cleaned["spec"]["template"]["spec"]["initContainers"], json!([]));
        assert_eq!(etcd_init(&cleaned, None, "ns", Some(&restored), &s).outcome, Outcome::NotNeeded);
    }

    #[test]
    fn identity_is_never_guessed() {
        let s = Settings::default();
        let inject = restore_pending();
        let without = |names: &[&str], replicas: u64| {
            let mut t = sts();
            t["spec"]["replicas"] = json!(replicas);
            if let Some(env) = t.pointer_mut("/spec/template/spec/containers/0/env").and_then(Value::as_array_mut) {
                env.retain(|e| !names.iter().any(|n| e["name"] == *n));
            }
            t
        };
        let denial = |t: &Value| match etcd_init(t, None, "ns", Some(&inject), &s).denial {
            Some(Refusal::Template(e)) => e.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"),
            other => panic!("{other:?}"),
        };
        let msg = denial(&without(&["ETCD_NAME"], 1));
        assert!(msg.contains("env[name=ETCD_NAME]: Required value") && msg.contains("\"default\""), "{msg}");
        let msg = denial(&without(&["ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_ADVERTISE_PEER_URLS"], 3));
        assert!(msg.contains("env[name=ETCD_INITIAL_CLUSTER]: Required value") && msg.contains("3 replicas"), "{msg}");
        let msg = denial(&without(&["ETCD_INITIAL_ADVERTISE_PEER_URLS"], 3));
        assert!(msg.contains("env[name=ETCD_INITIAL_ADVERTISE_PEER_URLS]: Required value"), "{msg}");
        // One member with etcd's defaults for the rest: injected, and nothing
        // is invented (the script uses etcd's own defaults).
        let one = without(&["ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_ADVERTISE_PEER_URLS"], 1);
        let m = etcd_init(&one, None, "ns", Some(&inject), &s);
        assert_eq!(m.outcome, Outcome::Injected);
        let mut patched = one.clone();
        json_patch::patch(&mut patched, &m.patch.expect("patch")).expect("applies");
        let env = &patched["spec"]["template"]["spec"]["initContainers"][0]["env"];
        let names: Vec<&str> = env.as_array().expect("env").iter().filter_map(|e| e["name"].as_str()).collect();
        assert!(!names.iter().any(|n| n.starts_with("ETCD_INITIAL")), "{names:?}");
    }

    #[test]
    fn an_update_that_leaves_spec_unchanged_passes_when_undecidable() {
        let s = Settings::default();
        let mut relabelled = sts();
        relabelled["metadata"]["labels"] = json!({"rev": "2"});
        let old = sts();
        // No lookup at all: a metadata-only UPDATE passes with a warning ...
        let m = etcd_init(&relabelled, Some(&old), "ns", None, &s);
        assert_eq!(m.outcome, Outcome::SpecUnchanged);
        assert!(m.patch.is_none() && m.denial.is_none());
        assert!(m.warnings.iter().any(|w| w.contains("no HostedControlPlane lookup") && w.contains("spec unchanged")));
        assert_eq!(Outcome::SpecUnchanged.labels(), ("spec_unchanged", "none"));
        // ... a finalizer removal too, and a template the rules refuse ...
        let mut nameless = sts();
        if let Some(env) = nameless.pointer_mut("/spec/template/spec/containers/0/env").and_then(Value::as_array_mut) {
            env.retain(|e| e["name"] != "ETCD_NAME");
        }
        let inject = restore_pending();
        let mut finalizing = nameless.clone();
        finalizing["metadata"]["finalizers"] = json!([]);
        assert_eq!(etcd_init(&finalizing, Some(&nameless), "ns", Some(&inject), &s).outcome, Outcome::SpecUnchanged);
        // ... but any spec change (replicas, template) is decided as ever.
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        assert_eq!(etcd_init(&scaled, Some(&old), "ns", None, &s).outcome, Outcome::Denied(Blocker::NoLookupSource));
        let mut retemplated = old.clone();
        retemplated["spec"]["template"]["metadata"] = json!({"annotations": {"x": "y"}});
        assert_eq!(
            etcd_init(&retemplated, Some(&old), "ns", None, &s).outcome,
            Outcome::Denied(Blocker::NoLookupSource)
        );
        // A decidable metadata-only UPDATE is decided normally (injected).
        assert_eq!(etcd_init(&relabelled, Some(&old), "ns", Some(&inject), &s).outcome, Outcome::Injected);
        // CREATE has no old object: denied.
        assert_eq!(etcd_init(&relabelled, None, "ns", None, &s).outcome, Outcome::Denied(Blocker::NoLookupSource));
    }

    #[test]
    fn env_resolves_in_etcd_init_exactly_as_in_etcd() {
        let s = Settings::default();
        let inject = restore_pending();
        let env_of = |env: Value| {
            let mut t = sts();
            t["spec"]["template"]["spec"]["containers"][0]["env"] = env;
            let m = etcd_init(&t, None, "ns", Some(&inject), &s);
            let mut patched = t.clone();
            json_patch::patch(&mut patched, &m.patch.expect("patch")).expect("applies");
            patched["spec"]["template"]["spec"]["initContainers"][0]["env"].clone()
        };
        let names = |env: &Value| -> Vec<String> {
            env.as_array().expect("env").iter().filter_map(|e| e["name"].as_str().map(str::to_string)).collect()
        };
        // ETCD_NAME before the entry it references: literal in etcd, so in
        // etcd-init too (the entries keep etcd's order).
        let env = env_of(json!([
            {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
            {"name": "ETCD_NAME", "value": "$(POD)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]));
        let n = names(&env);
        assert_eq!(&n[..3], ["ETCD_DATA_DIR", "ETCD_NAME", "POD"], "{n:?}");
        // $(HOSTNAME) without a HOSTNAME entry stays literal in etcd: etcd-init
        // defines no HOSTNAME (nor HCP_NAMESPACE) of its own.
        let env = env_of(json!([
            {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
            {"name": "ETCD_NAME", "value": "$(HOSTNAME)"}
        ]));
        let n = names(&env);
        assert!(!n.iter().any(|x| x == "HOSTNAME" || x == "HCP_NAMESPACE"), "{n:?}");
        // Referencing a name etcd-init sets itself is denied.
        let mut t = sts();
        t["spec"]["template"]["spec"]["containers"][0]["env"] = json!([
            {"name": "ETCD_DATA_DIR", "value": "/var/lib/data"},
            {"name": "RESTORE_URL_ETCD", "value": "x"},
            {"name": "ETCD_NAME", "value": "$(RESTORE_URL_ETCD)"}
        ]);
        match etcd_init(&t, None, "ns", Some(&inject), &s).denial {
            Some(Refusal::Template(e)) => {
                assert!(e[0].to_string().contains("env[name=RESTORE_URL_ETCD]: Forbidden"), "{e:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_generation_per_restore() {
        let hcp = |uid: &str| json!({"metadata": {"uid": uid}});
        let g = restore_generation(&hcp("u1"), "ns", "https://h/k.db");
        assert_eq!(g.len(), 16);
        assert!(g.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{g}");
        // The same restore: the same generation on every member (every admission).
        assert_eq!(g, restore_generation(&hcp("u1"), "ns", "https://h/k.db"));
        // Another incarnation, namespace or URL: another generation.
        assert_ne!(g, restore_generation(&hcp("u2"), "ns", "https://h/k.db"));
        assert_ne!(g, restore_generation(&hcp("u1"), "ns2", "https://h/k.db"));
        assert_ne!(g, restore_generation(&hcp("u1"), "ns", "https://h/k2.db"));
        // Parts cannot run into each other.
        assert_ne!(
            restore_generation(&hcp("ab"), "c", "https://h/k.db"),
            restore_generation(&hcp("a"), "bc", "https://h/k.db")
        );
    }

    #[test]
    fn every_replica_ready_ends_the_restore_a_quorum_does_not() {
        let s = Settings::default();
        let inject = restore_pending();
        let mut three = sts();
        three["spec"]["replicas"] = json!(3);
        let patched = {
            let m = etcd_init(&three, None, "ns", Some(&inject), &s);
            let mut p = three.clone();
            json_patch::patch(&mut p, &m.patch.expect("patch")).expect("applies");
            p
        };
        let with_ready = |ready: Value| {
            let mut old = patched.clone();
            old["status"] = json!({"replicas": 3, "readyReplicas": ready});
            old
        };
        let mut update = patched.clone();
        update["metadata"]["labels"] = json!({"rev": "2"});
        for (ready, removed) in [
            (json!(3), true),
            (json!(4), true),
            (json!(2), false),
            (json!(1), false),
            (json!(0), false),
            (json!("3"), false),
        ] {
            let m = etcd_init(&update, Some(&with_ready(ready.clone())), "ns", Some(&inject), &s);
            let want = if removed { Outcome::Removed } else { Outcome::Unchanged };
            assert_eq!(m.outcome, want, "readyReplicas {ready}");
        }
        // No stored object (a CREATE): a status in the request is no fact.
        let mut created = three.clone();
        created["status"] = json!({"replicas": 3, "readyReplicas": 3});
        assert_eq!(etcd_init(&created, None, "ns", Some(&inject), &s).outcome, Outcome::Injected);
    }

    #[test]
    fn replicas_are_bounded() {
        let s = Settings::default();
        let inject = restore_pending();
        for (replicas, ok) in
            [(json!(1), true), (json!(9), true), (json!(10), false), (json!(2147483647), false), (json!(-1), false)]
        {
            let mut t = sts();
            t["spec"]["replicas"] = replicas.clone();
            let m = etcd_init(&t, None, "ns", Some(&inject), &s);
            if ok {
                assert_eq!(m.outcome, Outcome::Injected, "{replicas}");
                continue;
            }
            assert_eq!(m.outcome, Outcome::Denied(Blocker::Template), "{replicas}");
            match m.denial {
                Some(Refusal::Template(e)) => {
                    let msg = e[0].to_string();
                    assert!(msg.contains(&format!("spec.replicas: Invalid value: {replicas}")), "{msg}");
                    assert!(msg.contains("1 to 9 members"), "{msg}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// The injected etcd-init's literal env value `name`, after patching.
    fn injected_env(sts: &Value, m: &Mutation, name: &str) -> Option<String> {
        let mut p = sts.clone();
        json_patch::patch(&mut p, m.patch.as_ref()?).ok()?;
        let inits = p.at(LIST)?.as_array()?.clone();
        let init = inits.iter().find(|c| c["name"] == INIT_CONTAINER)?;
        env_value(init["env"].as_array()?, name).map(str::to_string)
    }

    #[test]
    fn a_restore_in_progress_keeps_its_bump_whatever_the_settings_say_now() {
        let inject = restore_pending();
        let mut three = sts();
        three["spec"]["replicas"] = json!(3);
        let first = Settings { restore_revision_bump: 10_000_000_000, ..Settings::default() };
        let m = etcd_init(&three, None, "ns", Some(&inject), &first);
        assert_eq!(injected_env(&three, &m, "RESTORE_REVISION_BUMP").as_deref(), Some("10000000000"));
        let mut stored = three.clone();
        json_patch::patch(&mut stored, &m.patch.expect("patch")).expect("applies");
        stored["status"] = json!({"replicas": 3, "readyReplicas": 1});
        // The setting changes mid-restore (or an upgrade brings another
        // default): the CPO's next UPDATE keeps the restore's own bump.
        let later = Settings {
            restore_revision_bump: 1_000_000_000_000,
            allow_restore_without_revision_bump: true,
            ..Settings::default()
        };
        let m = etcd_init(&three, Some(&stored), "ns", Some(&inject), &later);
        // (The CPO's object carries its own etcd-init: replaced as always,
        // with the stored restore's values, so the template stays the same.)
        assert_eq!(injected_env(&three, &m, "RESTORE_REVISION_BUMP").as_deref(), Some("10000000000"));
        assert_eq!(injected_env(&three, &m, "RESTORE_ALLOW_WITHOUT_REVISION_BUMP").as_deref(), Some("false"));
        let mut next = three.clone();
        json_patch::patch(&mut next, &m.patch.expect("patch")).expect("applies");
        assert_eq!(next.at(LIST), stored.at(LIST), "the template must not change mid-restore");
        // Another restore (another generation in the stored object) takes the setting.
        let mut other = stored.clone();
        let list = other.pointer_mut(LIST).and_then(Value::as_array_mut).expect("list");
        for c in list.iter_mut().filter(|c| c["name"] == INIT_CONTAINER) {
            for e in c["env"].as_array_mut().into_iter().flatten() {
                if e["name"] == "ETCD_INIT_RESTORE_GENERATION" {
                    e["value"] = json!("0123456789abcdef");
                }
            }
        }
        let m = etcd_init(&three, Some(&other), "ns", Some(&inject), &later);
        assert_eq!(m.outcome, Outcome::Injected);
        assert_eq!(injected_env(&three, &m, "RESTORE_REVISION_BUMP").as_deref(), Some("1000000000000"));
        assert_eq!(injected_env(&three, &m, "RESTORE_ALLOW_WITHOUT_REVISION_BUMP").as_deref(), Some("true"));
        // A stored bump outside the settings' range is never carried on.
        let mut edited = stored.clone();
        let list = edited.pointer_mut(LIST).and_then(Value::as_array_mut).expect("list");
        for c in list.iter_mut().filter(|c| c["name"] == INIT_CONTAINER) {
            for e in c["env"].as_array_mut().into_iter().flatten() {
                if e["name"] == "RESTORE_REVISION_BUMP" {
                    e["value"] = json!("0");
                }
            }
        }
        let m = etcd_init(&three, Some(&edited), "ns", Some(&inject), &later);
        assert_eq!(injected_env(&three, &m, "RESTORE_REVISION_BUMP").as_deref(), Some("1000000000000"));
    }

    #[test]
    fn the_revision_floor_is_the_hosted_control_planes_creation_time() {
        let s = Settings::default();
        let created = |t: Option<&str>| {
            let mut hcp = restore_pending().0.expect("hcp").remove(0);
            if let Some(t) = t {
                hcp["metadata"] = json!({"creationTimestamp": t});
            }
            Prefetched(Ok(vec![hcp]))
        };
        let floor = |t: Option<&str>| {
            let m = etcd_init(&sts(), None, "ns", Some(&created(t)), &s);
            injected_env(&sts(), &m, "RESTORE_REVISION_FLOOR")
        };
        // 2026-12-04T00:00:00Z is 1796342400 s.
        assert_eq!(floor(Some("2026-12-04T00:00:00Z")).as_deref(), Some("17963424000000000"));
        // A later incarnation lands above every revision the earlier one
        // reached below 10^7 writes a second.
        let a: u64 = floor(Some("2026-12-04T00:00:00Z")).and_then(|f| f.parse().ok()).expect("a");
        let b: u64 = floor(Some("2026-12-04T00:00:01Z")).and_then(|f| f.parse().ok()).expect("b");
        assert_eq!(b - a, REVISION_FLOOR_PER_SECOND);
        assert!(b < i64::MAX as u64 / 100, "int64 revisions keep their headroom");
        // No readable creation time: no floor (the bump alone, as before).
        assert_eq!(floor(None).as_deref(), Some("0"));
        assert_eq!(floor(Some("yesterday")).as_deref(), Some("0"));
    }
}
