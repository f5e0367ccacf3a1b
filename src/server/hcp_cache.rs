//! A kube-rs reflector over HostedControlPlanes, so the mutating path never
//! makes an API call per admission in the common case. On a miss (cache not
//! synced yet, or no HostedControlPlane cached for the namespace) the server
//! reads the namespace live before deciding: a watch that lags behind a new
//! HostedControlPlane must not turn into a denial, and a cache that never
//! synced must not turn into a guess. The etcd StatefulSet's decision can
//! lose data when it trusts a stale entry (an earlier HostedControlPlane of
//! the same namespace name left in the reflector lets etcd start without its
//! restore), so every CREATE of it, and every request whose owner reference
//! names another HostedControlPlane UID than the cached one, is decided from a
//! live read. Objects are kept as raw JSON
//! ([`DynamicObject`]): an HCP field this project does not model must never
//! break the cache.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use kube::{
    api::{Api, ApiResource, DynamicObject, ListParams},
    runtime::{reflector, watcher},
    Client,
};
use serde_json::Value;

use super::metrics::truncate;
use crate::{
    api::{names::is_dns1123_label, HostedControlPlane},
    lookup::{Freshness, Lookup, LookupError},
};

/// Longest a live read on a cache miss may take (the apiserver's webhook
/// timeout is 10 s by default).
pub const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// HostedControlPlanes whose managed etcd has a `restoreSnapshotURL` and
/// whose `EtcdSnapshotRestored` is not True (linear in the objects).
pub fn restores_pending<'a>(objects: impl Iterator<Item = &'a DynamicObject>) -> usize {
    // `data` holds everything but apiVersion, kind and metadata: spec and status as stored.
    objects.map(|o| &o.data).filter(|v| crate::api::readers::restore_pending(v)).count()
}

/// The HostedControlPlane cache.
pub struct HcpCache {
    store: reflector::Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    client: Client,
    resource: ApiResource,
}

impl HcpCache {
    /// Starts the reflector on `client`; returns at once, `synced()` turns
    /// true after the initial list.
    pub fn start(client: Client) -> Arc<Self> {
        let resource = ApiResource::erase::<HostedControlPlane>(&());
        let (store, synced) = super::cache_reflector::spawn(
            Api::all_with(client.clone(), &resource),
            resource.clone(),
            watcher::Config::default(),
            "HostedControlPlanes",
        );
        Arc::new(Self { store, synced, client, resource })
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// How many cached HostedControlPlanes have a restore pending (`None`
    /// before the cache synced): what "not while a restore is pending" asks
    /// of an upgrade, across a fleet.
    pub fn restores_pending(&self) -> Option<usize> {
        self.synced().then(|| restores_pending(self.store.state().iter().map(AsRef::as_ref)))
    }

    fn cached(&self, namespace: &str) -> Vec<Value> {
        in_namespace(self.store.state().iter().map(AsRef::as_ref), namespace)
    }

    /// Whether the cache holds a HostedControlPlane in `namespace` (the live
    /// reads about it then use the budget of known hosted namespaces).
    pub fn knows_hosted(&self, namespace: &str) -> bool {
        !self.cached(namespace).is_empty()
    }

    /// The answer as fresh as the decision asks ([`Freshness`], from the
    /// core's read plan): the cache when it answers, else a live read.
    pub async fn lookup_fresh(&self, namespace: &str, freshness: &Freshness) -> Result<Vec<Value>, LookupError> {
        if !freshness.live() || !is_dns1123_label(namespace) || freshness.cache_answers(&self.cached_view(namespace)) {
            return self.lookup_for(namespace).await;
        }
        self.read_live(namespace).await
    }

    /// What a synced cache holds for `namespace` (nothing before it syncs).
    pub fn cached_view(&self, namespace: &str) -> Vec<Value> {
        if self.synced() && is_dns1123_label(namespace) {
            self.cached(namespace)
        } else {
            Vec::new()
        }
    }

    /// A live read of the namespace's HostedControlPlanes, whatever the cache
    /// holds: for the decisions whose [`Freshness`] asks for one. A failed read is a
    /// failure (the decision denies), never the cache's view.
    pub async fn read_live(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        if !is_dns1123_label(namespace) {
            return self.lookup_for(namespace).await;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &self.resource);
        let answer = match tokio::time::timeout(LIVE_READ_TIMEOUT, api.list(&ListParams::default())).await {
            Ok(Ok(list)) => Ok(in_namespace(&list.items, namespace)),
            Ok(Err(e)) => Err(LookupError::Failed(format!(
                "the live read this etcd StatefulSet decision requires (a CREATE, an owner reference to a HostedControlPlane the cache does not hold, or a cache miss) failed: {e}"
            ))),
            Err(_) => Err(LookupError::Failed(format!(
                "the live read this etcd StatefulSet decision requires (a CREATE, an owner reference to a HostedControlPlane the cache does not hold, or a cache miss) timed out after {}s",
                LIVE_READ_TIMEOUT.as_secs()
            ))),
        };
        tracing::debug!(
            namespace,
            ok = answer.is_ok(),
            "HostedControlPlane live read for an etcd StatefulSet decision"
        );
        answer
    }

    /// The answer for one decision: the cache when it is synced and holds
    /// the namespace's HostedControlPlane(s), else a live read of the
    /// namespace (bounded by [`LIVE_READ_TIMEOUT`]; the server calls this
    /// with no decision slot held, under its live-read budget:
    /// [`super::reads`]). A namespace that is not a DNS-1123 label is never
    /// sent to the API.
    pub async fn lookup_for(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        if !is_dns1123_label(namespace) {
            return Err(LookupError::Failed(format!(
                "request namespace {:?} is not a namespace name (a DNS-1123 label: at most 63 characters, \
                 lower-case letters, digits and '-', starting and ending with a letter or digit)",
                truncate(namespace, 64)
            )));
        }
        let synced = self.synced();
        let cached = if synced { self.cached(namespace) } else { Vec::new() };
        if !cached.is_empty() {
            return Ok(cached);
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &self.resource);
        let live = tokio::time::timeout(LIVE_READ_TIMEOUT, api.list(&ListParams::default())).await;
        let answer = match live {
            Ok(Ok(list)) => Ok(in_namespace(&list.items, namespace)),
            Ok(Err(e)) if synced => Err(LookupError::Failed(format!("live read after a cache miss failed: {e}"))),
            Err(_) if synced => Err(LookupError::Failed(format!(
                "live read after a cache miss timed out after {}s",
                LIVE_READ_TIMEOUT.as_secs()
            ))),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, namespace, "live HostedControlPlane read failed; cache not synced");
                Err(LookupError::NotSynced)
            }
            Err(_) => Err(LookupError::NotSynced),
        };
        tracing::debug!(namespace, synced, ok = answer.is_ok(), "HostedControlPlane live read on a cache miss");
        answer
    }
}

impl Lookup for HcpCache {
    /// The cache alone (no live read: that is async, see [`HcpCache::lookup_for`]).
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        if !self.synced() {
            return Err(LookupError::NotSynced);
        }
        Ok(self.cached(namespace))
    }

    /// The cache where it may answer; where the core asks for a live read it
    /// cannot make here (that is async: [`HcpCache::lookup_fresh`]), a
    /// failure, never the cache's view.
    fn hosted_control_planes_as(&self, namespace: &str, freshness: &Freshness) -> Result<Vec<Value>, LookupError> {
        let cached = self.hosted_control_planes(namespace)?;
        if freshness.live() && !freshness.cache_answers(&cached) {
            return Err(LookupError::Failed(
                "this decision needs a live read of the namespace's HostedControlPlanes, which the cache alone cannot give".into(),
            ));
        }
        Ok(cached)
    }
}

/// The objects of `namespace`, as JSON: a cache holds every namespace, and a
/// live namespaced LIST is filtered too rather than trusted blindly.
pub(crate) fn in_namespace<O: std::borrow::Borrow<DynamicObject>>(
    objects: impl IntoIterator<Item = O>,
    namespace: &str,
) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| o.borrow().metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|o| serde_json::to_value(o.borrow()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_pending_counts_a_url_without_the_condition() {
        let hcp = |url: Option<&str>, restored: Option<&str>, managed: &str| -> DynamicObject {
            let mut v = serde_json::json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedControlPlane",
                "metadata": {"name": "h", "namespace": "n"},
                "spec": {"etcd": {"managementType": managed, "managed": {"storage": {"type": "PersistentVolume"}}}}});
            if let Some(u) = url {
                v["spec"]["etcd"]["managed"]["storage"]["restoreSnapshotURL"] = serde_json::json!([u]);
            }
            if let Some(status) = restored {
                v["status"] = serde_json::json!({"conditions": [{"type": "EtcdSnapshotRestored", "status": status}]});
            }
            serde_json::from_value(v).expect("object")
        };
        let objects = [
            hcp(Some("https://b/s.db"), None, "Managed"),
            hcp(Some("https://b/s.db"), Some("False"), "Managed"),
            hcp(Some("https://b/s.db"), Some("True"), "Managed"),
            hcp(None, None, "Managed"),
            hcp(Some("https://b/s.db"), None, "Unmanaged"),
        ];
        assert_eq!(restores_pending(objects.iter()), 2);
    }
}
