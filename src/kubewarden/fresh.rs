//! How the Kubewarden policy honours the core's [`Freshness`] for the
//! HostedControlPlanes it reads.
//!
//! policy-server answers `list_resources_by_namespace` from a reflector (a
//! watch cache, eventually consistent): the same kind of cache that, stale,
//! once let an etcd StatefulSet CREATE start etcd empty for good. Only
//! `get_resource` with `disable_cache: true` is a read against the apiserver.
//! So where the core asks for a live answer (every CREATE, and an UPDATE
//! whose HostedControlPlane owner UID the list does not hold), every
//! HostedControlPlane the list names is read again that way, and the decision
//! runs on those objects. A live read that fails (a name the list still holds
//! but the apiserver no longer does, RBAC, a timeout) is a failed lookup: the
//! decision denies and the control-plane-operator retries; it never falls
//! back to the list's copy.
//!
//! Pure over two closures, so it is tested natively; `guest.rs` passes the
//! host calls.

use crate::json_at::At;
use serde_json::{json, Value};

use crate::lookup::{Freshness, LookupError};

/// The HostedControlPlanes of `namespace` as fresh as `freshness` asks:
/// `list` answers from policy-server's cache, `get_live` reads one by name
/// with the cache disabled.
pub fn hosted_control_planes(
    namespace: &str,
    freshness: &Freshness,
    list: impl FnOnce() -> Result<Vec<Value>, LookupError>,
    get_live: impl Fn(&str) -> Result<Value, LookupError>,
) -> Result<Vec<Value>, LookupError> {
    let listed = list()?;
    // (An empty list is answered as it is: there is no name to read again.)
    if freshness.cache_answers(&listed) {
        return Ok(listed);
    }
    let live: Vec<Value> = listed
        .iter()
        .map(|cached| {
            let name = cached.at("/metadata/name").and_then(Value::as_str).ok_or_else(|| {
                LookupError::Failed(format!(
                    "policy-server listed a HostedControlPlane in {namespace} without metadata.name"
                ))
            })?;
            let live = get_live(name).map_err(|e| {
                LookupError::Failed(format!(
                    "the live read of HostedControlPlane {namespace}/{name} (get_resource, disable_cache) failed: {e}; the etcd StatefulSet is decided from a live read, never from policy-server's list cache alone"
                ))
            })?;
            let same = live.at("/metadata/name").and_then(Value::as_str) == Some(name)
                && live.at("/metadata/namespace").and_then(Value::as_str) == Some(namespace);
            if same {
                Ok(live)
            } else {
                Err(LookupError::Failed(format!(
                    "the live read of HostedControlPlane {namespace}/{name} answered another object"
                )))
            }
        })
        .collect::<Result<_, _>>()?;
    // An owner the list does not name cannot be read by name here (the
    // StatefulSet's owner reference is all there is): the decision would rest
    // on the others alone, where the server's live LIST would see it too.
    if let Freshness::LiveUnlessCached(uids) = freshness {
        let has = |uid: &String| live.iter().any(|h| h.at("/metadata/uid").and_then(Value::as_str) == Some(uid));
        if let Some(missing) = uids.iter().find(|uid| !has(uid)) {
            return Err(LookupError::Failed(format!(
                "the StatefulSet's owner HostedControlPlane (uid {missing}) is not among those policy-server lists in {namespace} (its cache is behind): decided once it is"
            )));
        }
    }
    Ok(live)
}

/// The body of Kubewarden's `get_resource` host call that reads one
/// HostedControlPlane from the apiserver, not from policy-server's cache.
pub fn live_hcp_request(namespace: &str, name: &str) -> Value {
    json!({
        "api_version": crate::api::API_VERSION,
        "kind": "HostedControlPlane",
        "name": name,
        "namespace": namespace,
        "disable_cache": true,
        "field_masks": null,
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    fn hcp(name: &str, uid: &str, url: Option<&str>) -> Value {
        let mut h = json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
            "metadata": {"name": name, "namespace": "clusters-a", "uid": uid}, "spec": {}});
        if let Some(url) = url {
            h["spec"] = json!({"etcd": {"managed": {"storage": {"restoreSnapshotURL": [url]}}}});
        }
        h
    }

    /// Runs the read with a list answer and a live store; returns the answer
    /// and the names read live.
    fn run(
        freshness: Freshness,
        listed: Vec<Value>,
        live: Vec<Value>,
    ) -> (Result<Vec<Value>, LookupError>, Vec<String>) {
        let asked = RefCell::new(Vec::new());
        let got = hosted_control_planes(
            "clusters-a",
            &freshness,
            || Ok(listed),
            |name| {
                asked.borrow_mut().push(name.to_string());
                live.iter()
                    .find(|h| h["metadata"]["name"] == name)
                    .cloned()
                    .ok_or_else(|| LookupError::Failed(format!("hostedcontrolplanes {name:?} not found")))
            },
        );
        (got, asked.into_inner())
    }

    #[test]
    fn a_create_is_decided_on_the_live_objects_not_the_list_cache() {
        // The stale case: the cache still holds the old incarnation (no restore
        // pending); the apiserver holds the new one with its restore URL.
        let old = hcp("a", "u-old", None);
        let new = hcp("a", "u-new", Some("https://s3/snap.db"));
        let (got, asked) = run(Freshness::Live, vec![old.clone()], vec![new.clone()]);
        assert_eq!(got, Ok(vec![new.clone()]));
        assert_eq!(asked, ["a"]);
        // An UPDATE whose owner the cache lacks: read live too.
        let (got, asked) = run(Freshness::LiveUnlessCached(vec!["u-new".into()]), vec![old.clone()], vec![new.clone()]);
        assert_eq!(got, Ok(vec![new.clone()]));
        assert_eq!(asked, ["a"]);
    }

    #[test]
    fn the_list_cache_answers_only_where_the_core_allows() {
        let cached = hcp("a", "u1", None);
        for freshness in [Freshness::Cached, Freshness::LiveUnlessCached(vec!["u1".into()])] {
            let (got, asked) = run(freshness.clone(), vec![cached.clone()], vec![]);
            assert_eq!(got, Ok(vec![cached.clone()]), "{freshness:?}");
            assert!(asked.is_empty(), "{freshness:?}: no live read needed");
        }
        // An empty list is no HostedControlPlane: nothing to read again (the
        // decision denies: exactly one is required).
        let (got, asked) = run(Freshness::Live, vec![], vec![cached]);
        assert_eq!(got, Ok(vec![]));
        assert!(asked.is_empty());
    }

    #[test]
    fn a_live_read_that_fails_fails_the_lookup_never_falls_back_to_the_cache() {
        // The cache holds a HostedControlPlane the apiserver no longer has.
        let (got, _) = run(Freshness::Live, vec![hcp("gone", "u1", None)], vec![]);
        let Err(LookupError::Failed(why)) = got else { panic!("{got:?}") };
        assert!(why.contains("live read of HostedControlPlane clusters-a/gone") && why.contains("not found"), "{why}");
        // A listed object without a name, and an answer for another object.
        let (got, _) = run(Freshness::Live, vec![json!({"metadata": {}})], vec![]);
        assert!(matches!(got, Err(LookupError::Failed(ref w)) if w.contains("without metadata.name")), "{got:?}");
        let mut other = hcp("a", "u2", None);
        other["metadata"]["namespace"] = json!("clusters-b");
        let (got, _) = run(Freshness::Live, vec![hcp("a", "u1", None)], vec![other]);
        assert!(matches!(got, Err(LookupError::Failed(ref w)) if w.contains("another object")), "{got:?}");
        // A failed list is passed on as it is.
        let got = hosted_control_planes(
            "clusters-a",
            &Freshness::Live,
            || Err(LookupError::Failed("no capability".into())),
            |_| unreachable!(),
        );
        assert_eq!(got, Err(LookupError::Failed("no capability".into())));
    }

    #[test]
    fn an_owner_the_list_does_not_name_is_never_decided_without() {
        // The list holds another HostedControlPlane; the owner is missing from it.
        let other = hcp("a", "u-a", None);
        let (got, asked) = run(Freshness::LiveUnlessCached(vec!["u-b".into()]), vec![other.clone()], vec![other]);
        let Err(LookupError::Failed(why)) = got else { panic!("{got:?}") };
        assert!(why.contains("owner HostedControlPlane (uid u-b)"), "{why}");
        assert_eq!(asked, ["a"]);
    }

    #[test]
    fn the_live_request_disables_policy_servers_cache() {
        let r = live_hcp_request("clusters-a", "a");
        assert_eq!(r["disable_cache"], true);
        assert_eq!(r["api_version"], "hypershift.openshift.io/v1beta1");
        assert_eq!(
            (r["kind"].as_str(), r["name"].as_str(), r["namespace"].as_str()),
            (Some("HostedControlPlane"), Some("a"), Some("clusters-a"))
        );
    }
}
