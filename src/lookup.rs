//! The lookup port: the cluster objects a decision may read (the
//! HostedControlPlane of a namespace, for the etcd-init mutation and the
//! backup preflight; the namespace's HCPEtcdBackups, the credentials Secret
//! and the etcd StatefulSet, for the preflight). It sits below `rules/` and
//! `mutate/`, which use it, and below `admission/` and the shells, which fill
//! it: from `--context` files (CLI), watch caches with live reads within the
//! request deadline (server), Kubewarden's context-aware host calls (Wasm).
//! `tests/layers.rs` fails when a decision module imports from above.
//!
//! Two sources every shell can use live here too, having no I/O: objects
//! given up front ([`ContextObjects`]: `--context` files, the Kubewarden
//! policy's pre-initialised fixtures, tests) and the answers to a read plan,
//! read before the decision ([`Answers`]: what every shell decides on).
//!
//! Objects are kept as JSON and read by path (the readers are with the API
//! types, [`crate::api::restore_snapshot_url`] and friends): a
//! HostedControlPlane carries far more than this project models, and a field
//! we do not know about must never make the lookup (and with it a restore) fail.
//!
//! A lookup that cannot answer says why ([`LookupError`]); the core turns
//! every answer into a [`HcpLookup`] and fails closed on anything but exactly
//! one HostedControlPlane.

use crate::json_at::At;
use serde_json::Value;

/// Why a lookup could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// This source does not serve this kind of object at all (no
    /// `--context`, a policy that is not context aware, a server without
    /// the backup watch): the part of the decision that needs it is skipped,
    /// and says so.
    #[error("this lookup source does not provide it")]
    NotProvided,
    /// The cache has not finished its initial list, and no live read answered.
    #[error("the HostedControlPlane cache has not synced yet")]
    NotSynced,
    /// The read failed (API error, RBAC, host capability missing, timeout).
    #[error("{0}")]
    Failed(String),
}

/// Read-only access to cluster objects. Implementations add methods for
/// other kinds with default bodies, so existing implementations keep compiling.
pub trait Lookup {
    /// The HostedControlPlane objects in `namespace`, or why they cannot be
    /// looked up (the mutation then denies: it never guesses).
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError>;

    /// The HostedControlPlanes of `namespace`, as fresh as `freshness` asks.
    /// A source without a cache (files, fixtures, an answer read live before
    /// the decision) answers as [`Lookup::hosted_control_planes`] does; a
    /// source that lists from a cache must override it: Kubewarden reads each
    /// one again live, the server's cache refuses (its live read is async).
    fn hosted_control_planes_as(&self, namespace: &str, freshness: &Freshness) -> Result<Vec<Value>, LookupError> {
        let _ = freshness;
        self.hosted_control_planes(namespace)
    }

    // The HCPEtcdBackup preflight's reads. A source that does not provide
    // them answers `NotProvided`, and the preflight is skipped with a warning.

    /// The HCPEtcdBackups in `namespace`.
    fn hcp_etcd_backups(&self, _namespace: &str) -> Result<Vec<Value>, LookupError> {
        Err(LookupError::NotProvided)
    }

    /// The Secret `namespace/name` (`Ok(None)`: it does not exist). Only ever
    /// asked for the HyperShift Operator namespace.
    fn secret(&self, _namespace: &str, _name: &str) -> Result<Option<Value>, LookupError> {
        Err(LookupError::NotProvided)
    }

    /// The StatefulSet `etcd` of a hosted control plane namespace (`Ok(None)`: it does not exist).
    fn etcd_stateful_set(&self, _namespace: &str) -> Result<Option<Value>, LookupError> {
        Err(LookupError::NotProvided)
    }
}

/// How fresh the answer about a namespace's HostedControlPlanes must be.
/// Decided by the core (the etcd-init mutation), carried out by the shells:
/// a shell with a watch cache reads live when the cache may not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// A synced cache that holds the namespace's HostedControlPlanes may answer.
    Cached,
    /// A live read, whatever the cache holds (an etcd StatefulSet CREATE: a
    /// stale "no restore pending" must never let etcd start empty).
    Live,
    /// A live read unless the cache holds a HostedControlPlane with each of
    /// these UIDs (the StatefulSet's owner references): an owner the cache
    /// does not know means the cache is older than the StatefulSet.
    LiveUnlessCached(Vec<String>),
}

impl Freshness {
    /// Whether `cached` (a synced cache's HostedControlPlanes of the
    /// namespace) answers the read; an empty answer never does (a cache miss
    /// is confirmed live).
    pub fn cache_answers(&self, cached: &[Value]) -> bool {
        if cached.is_empty() {
            return false;
        }
        match self {
            Freshness::Cached => true,
            Freshness::Live => false,
            Freshness::LiveUnlessCached(uids) => uids
                .iter()
                .all(|uid| cached.iter().any(|h| h.at("/metadata/uid").and_then(Value::as_str) == Some(uid.as_str()))),
        }
    }

    /// Whether the shell must read live even when its cache holds the namespace.
    pub fn live(&self) -> bool {
        !matches!(self, Freshness::Cached)
    }
}

/// The outcome of looking up the namespace's HostedControlPlane.
#[derive(Debug, Clone, PartialEq)]
pub enum HcpLookup {
    /// Exactly one HostedControlPlane: the only outcome a decision may act on.
    One(Value),
    /// The lookup answered: there is none in the namespace.
    NotFound,
    /// The lookup answered with more than one.
    Several(usize),
    /// This shell has no lookup at all (no cluster, no `--context`).
    NoSource,
    /// The lookup source has not synced (and a live read did not answer).
    NotSynced,
    /// The lookup failed.
    Failed(String),
}

/// Looks up the HostedControlPlane of `namespace` and classifies the answer.
pub fn hosted_control_plane(lookup: Option<&dyn Lookup>, namespace: &str) -> HcpLookup {
    let Some(lookup) = lookup else { return HcpLookup::NoSource };
    match lookup.hosted_control_planes(namespace) {
        Err(LookupError::NotSynced) => HcpLookup::NotSynced,
        Err(LookupError::NotProvided) => HcpLookup::NoSource,
        Err(LookupError::Failed(why)) => HcpLookup::Failed(why),
        Ok(mut hcps) => match hcps.len() {
            0 => HcpLookup::NotFound,
            1 => hcps.pop().map_or(HcpLookup::NotFound, HcpLookup::One),
            n => HcpLookup::Several(n),
        },
    }
}

/// Objects given up front (from `--context` files or test fixtures).
#[derive(Debug, Default, Clone)]
pub struct ContextObjects {
    hcps: Vec<Value>,
    /// Everything given (for the preflight lookups); empty: no source.
    all: Vec<Value>,
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
                Some("HostedControlPlane") => {
                    out.all.push(obj.clone());
                    out.hcps.push(obj);
                }
                _ => out.all.push(obj),
            }
        }
        out
    }
}

impl Lookup for ContextObjects {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        Ok(self
            .hcps
            .iter()
            .filter(|h| h.at("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
            .cloned()
            .collect())
    }

    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.of_kind("HCPEtcdBackup", namespace).cloned().collect())
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.named("Secret", namespace, name))
    }

    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.named("StatefulSet", namespace, "etcd"))
    }
}

impl ContextObjects {
    /// The context files are a snapshot of the cluster: an object not in
    /// them does not exist. With no context objects at all there is no
    /// snapshot, and the preflight is skipped (offline `check` of one file).
    fn preflight_source(&self) -> Result<(), LookupError> {
        if self.all.is_empty() {
            Err(LookupError::NotProvided)
        } else {
            Ok(())
        }
    }

    fn of_kind<'a>(&'a self, kind: &'a str, namespace: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.all.iter().filter(move |o| {
            o.get("kind").and_then(Value::as_str) == Some(kind)
                && o.at("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
        })
    }

    fn named(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.of_kind(kind, namespace).find(|o| o.at("/metadata/name").and_then(Value::as_str) == Some(name)).cloned()
    }
}

/// The answers to a read plan, read before the decision
/// (`admission::ReadPlan::read_from`): the decision runs on these alone, and
/// anything the plan did not name is not provided. Its `Debug` never shows
/// an object (a Secret's values stay out of any log).
#[derive(Clone, Default)]
pub struct Answers {
    pub hcps: Option<(String, Result<Vec<Value>, LookupError>)>,
    pub backups: Option<(String, Result<Vec<Value>, LookupError>)>,
    pub etcd_stateful_set: Option<(String, Result<Option<Value>, LookupError>)>,
    /// (namespace, name, what the read gave).
    pub secret: Option<(String, String, Result<Option<Value>, LookupError>)>,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = |r: &Option<(String, Result<Vec<Value>, LookupError>)>| {
            r.as_ref().map(|(k, a)| (k.clone(), a.as_ref().map(Vec::len).map_err(ToString::to_string)))
        };
        let found =
            |r: &Result<Option<Value>, LookupError>| r.as_ref().map(Option::is_some).map_err(ToString::to_string);
        f.debug_struct("Answers")
            .field("hcps", &count(&self.hcps))
            .field("backups", &count(&self.backups))
            .field("etcd_stateful_set", &self.etcd_stateful_set.as_ref().map(|(k, r)| (k, found(r))))
            .field("secret", &self.secret.as_ref().map(|(ns, n, r)| (ns, n, found(r))))
            .finish()
    }
}

/// The answer read for `key`, or not provided.
fn answered<T: Clone>(read: &Option<(String, Result<T, LookupError>)>, key: &str) -> Result<T, LookupError> {
    match read {
        Some((k, answer)) if k == key => answer.clone(),
        _ => Err(LookupError::NotProvided),
    }
}

impl Lookup for Answers {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        answered(&self.hcps, namespace)
    }

    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        answered(&self.backups, namespace)
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        match &self.secret {
            Some((ns, n, answer)) if ns == namespace && n == name => answer.clone(),
            _ => Err(LookupError::NotProvided),
        }
    }

    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        answered(&self.etcd_stateful_set, namespace)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Fails(LookupError);
    impl Lookup for Fails {
        fn hosted_control_planes(&self, _: &str) -> Result<Vec<Value>, LookupError> {
            Err(self.0.clone())
        }
    }

    #[test]
    fn a_cache_answers_only_the_reads_it_is_fresh_enough_for() {
        let hcp = |uid: &str| json!({"kind": "HostedControlPlane", "metadata": {"name": "a", "uid": uid}});
        let cached = [hcp("u1")];
        assert!(Freshness::Cached.cache_answers(&cached));
        assert!(!Freshness::Cached.cache_answers(&[]), "a miss is read live");
        assert!(!Freshness::Live.cache_answers(&cached), "a CREATE is always read live");
        assert!(Freshness::LiveUnlessCached(vec!["u1".into()]).cache_answers(&cached));
        assert!(Freshness::LiveUnlessCached(vec![]).cache_answers(&cached), "no owner: the cache answers");
        assert!(!Freshness::LiveUnlessCached(vec!["u2".into()]).cache_answers(&cached), "an owner the cache lacks");
        assert!(!Freshness::LiveUnlessCached(vec!["u1".into(), "u2".into()]).cache_answers(&cached));
        assert!(Freshness::Live.live() && Freshness::LiveUnlessCached(vec!["u1".into()]).live());
        assert!(!Freshness::Cached.live());
    }

    #[test]
    fn every_lookup_answer_is_classified() {
        let hcp = |ns: &str| json!({"kind": "HostedControlPlane", "metadata": {"name": "a", "namespace": ns}});
        let ctx = ContextObjects::from_values([hcp("one"), hcp("two"), hcp("two")]);
        assert_eq!(hosted_control_plane(Some(&ctx), "one"), HcpLookup::One(hcp("one")));
        assert_eq!(hosted_control_plane(Some(&ctx), "two"), HcpLookup::Several(2));
        assert_eq!(hosted_control_plane(Some(&ctx), "none"), HcpLookup::NotFound);
        assert_eq!(hosted_control_plane(None, "one"), HcpLookup::NoSource);
        assert_eq!(hosted_control_plane(Some(&Fails(LookupError::NotSynced)), "one"), HcpLookup::NotSynced);
        assert_eq!(
            hosted_control_plane(Some(&Fails(LookupError::Failed("forbidden".into()))), "one"),
            HcpLookup::Failed("forbidden".into())
        );
    }
}
