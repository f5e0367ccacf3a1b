//! What the HCPEtcdBackup preflight reads from the cluster, with the least
//! privilege that does it:
//!
//! * HCPEtcdBackups: a reflector over all namespaces (list/watch, ClusterRole);
//! * the etcd StatefulSet: **never cached**, read live (`get` of
//!   `statefulsets/etcd`, RBAC `resourceNames: [etcd]`) for an HCPEtcdBackup
//!   CREATE in a namespace that has a HostedControlPlane, and decoded into
//!   the fields the preflight reads: the body is buffered once (an object
//!   etcd holds: at most ~1.5 MiB) and never parsed into a tree. A reflector of every `StatefulSet/etcd` held whatever any
//!   tenant named `etcd`: ten of 1.4 MiB took the pod down at every start
//!   (security review C3); this costs one bounded read per backup CREATE;
//! * the credentials Secret: **never cached**. It is read live (`get` only,
//!   through a Role in the HyperShift Operator namespace) when an
//!   HCPEtcdBackup CREATE names it. A Secret cache would need list/watch on
//!   every Secret of that namespace (RBAC cannot narrow list by name or
//!   label), which puts the operator's other Secrets in this process's
//!   memory; backups are rare, so one GET per CREATE costs nothing.
//!
//! Objects are kept as JSON ([`DynamicObject`]), as for HostedControlPlanes.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    api::{Api, ApiResource, DynamicObject},
    runtime::{reflector, watcher},
    Client,
};
use serde_json::Value;

use crate::{
    api::HCPEtcdBackup,
    lookup::{Answers, Freshness, Lookup, LookupError},
};

/// Longest a live Secret read may take before the preflight skips it.
pub const SECRET_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The HCPEtcdBackup cache, and the live Secret and etcd StatefulSet readers.
pub struct BackupCache {
    backups: reflector::Store<DynamicObject>,
    backups_synced: Arc<AtomicBool>,
    client: Client,
    operator_namespace: String,
}

impl BackupCache {
    /// Starts the HCPEtcdBackup reflector on `client`; returns at once.
    pub fn start(client: Client, operator_namespace: String) -> Arc<Self> {
        let backups_res = ApiResource::erase::<HCPEtcdBackup>(&());
        let (backups, backups_synced) = super::cache_reflector::spawn(
            Api::all_with(client.clone(), &backups_res),
            backups_res,
            watcher::Config::default(),
            "HCPEtcdBackups",
        );
        Arc::new(Self { backups, backups_synced, client, operator_namespace })
    }

    pub fn operator_namespace(&self) -> &str {
        &self.operator_namespace
    }

    /// Reads the Secret `name` in the operator namespace, live (`Ok(None)`: not found).
    ///
    /// Read as raw JSON ([`DynamicObject`]): a typed `Secret` could fail to
    /// decode a `data` value, and a decoding error may quote the value. The
    /// error text never carries the body for the same reason.
    pub async fn read_secret(&self, name: &str) -> Result<Option<Value>, String> {
        // Only an object name reaches the URL: `?` would turn the GET into a
        // LIST, `../` would walk to another path.
        if !crate::api::names::is_dns1123_subdomain(name) {
            return Err("the Secret name is not an object name (a DNS-1123 subdomain); not read".to_string());
        }
        let resource = ApiResource::erase::<Secret>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.operator_namespace, &resource);
        match tokio::time::timeout(SECRET_READ_TIMEOUT, api.get_opt(name)).await {
            Err(_) => Err(format!("reading the Secret took longer than {SECRET_READ_TIMEOUT:?}")),
            Ok(Err(kube::Error::Api(status))) => {
                Err(format!("reading the Secret: the apiserver answered {} {}", status.code, status.reason))
            }
            Ok(Err(kube::Error::SerdeError(_))) => Err("reading the Secret: the answer does not parse".to_string()),
            Ok(Err(e)) => Err(format!("reading the Secret: {e}")),
            Ok(Ok(None)) => Ok(None),
            Ok(Ok(Some(s))) => {
                serde_json::to_value(s).map(Some).map_err(|_| "the Secret does not serialise".to_string())
            }
        }
    }

    /// The namespace's HCPEtcdBackups, read live (list, within
    /// [`SECRET_READ_TIMEOUT`]): confirms a cached "in progress" before the
    /// serial-guard rule denies on it.
    pub async fn list_backups_live(&self, namespace: &str) -> Result<Vec<Value>, String> {
        if !crate::api::names::is_dns1123_label(namespace) {
            return Err("the namespace is not a namespace name (a DNS-1123 label); not read".to_string());
        }
        let resource = ApiResource::erase::<HCPEtcdBackup>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &resource);
        match tokio::time::timeout(SECRET_READ_TIMEOUT, api.list(&kube::api::ListParams::default())).await {
            Err(_) => Err(format!("listing HCPEtcdBackups took longer than {SECRET_READ_TIMEOUT:?}")),
            Ok(Err(kube::Error::Api(status))) => {
                Err(format!("listing HCPEtcdBackups: the apiserver answered {} {}", status.code, status.reason))
            }
            Ok(Err(e)) => Err(format!("listing HCPEtcdBackups: {e}")),
            Ok(Ok(list)) => Ok(super::hcp_cache::in_namespace(&list.items, namespace)),
        }
    }

    pub fn backups_in(&self, namespace: &str) -> Result<Vec<Value>, String> {
        if !self.backups_synced.load(Ordering::Acquire) {
            return Err("the HCPEtcdBackup cache has not synced yet".to_string());
        }
        Ok(super::hcp_cache::in_namespace(self.backups.state().iter().map(AsRef::as_ref), namespace))
    }

    /// Reads `namespace`'s `StatefulSet/etcd`, live (`Ok(None)`: not found),
    /// keeping only `spec.replicas` and `status.readyReplicas`: the body
    /// (buffered once by the client) is decoded into [`EtcdReadiness`], which
    /// skips everything else without building it, whatever the pod template
    /// holds.
    pub async fn read_etcd(&self, namespace: &str) -> Result<Option<Value>, String> {
        if !crate::api::names::is_dns1123_label(namespace) {
            return Err("the namespace is not a namespace name (a DNS-1123 label); not read".to_string());
        }
        let request = kube::core::Request::new(format!("/apis/apps/v1/namespaces/{namespace}/statefulsets"))
            .get("etcd", &kube::api::GetParams::default())
            .map_err(|e| format!("reading the etcd StatefulSet: {e}"))?;
        let read = tokio::time::timeout(SECRET_READ_TIMEOUT, self.client.request::<EtcdReadiness>(request)).await;
        match read {
            Err(_) => Err(format!("reading the etcd StatefulSet took longer than {SECRET_READ_TIMEOUT:?}")),
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => Ok(None),
            Ok(Err(kube::Error::Api(status))) => {
                Err(format!("reading the etcd StatefulSet: the apiserver answered {} {}", status.code, status.reason))
            }
            Ok(Err(e)) => Err(format!("reading the etcd StatefulSet: {e}")),
            Ok(Ok(sts)) => Ok(Some(sts.to_value(namespace))),
        }
    }
}

/// What the preflight reads of the etcd StatefulSet; every other field of
/// the object is skipped by the decoder (serde's `IgnoredAny`).
#[derive(serde::Deserialize)]
pub struct EtcdReadiness {
    #[serde(default)]
    spec: EtcdReplicas,
    #[serde(default)]
    status: EtcdReady,
}

#[derive(serde::Deserialize, Default)]
struct EtcdReplicas {
    replicas: Option<i64>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct EtcdReady {
    ready_replicas: Option<i64>,
}

impl EtcdReadiness {
    /// The object as the preflight looks it up (the fields it reads).
    fn to_value(&self, namespace: &str) -> Value {
        let mut v = serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "etcd", "namespace": namespace}, "spec": {}, "status": {}});
        if let Some(r) = self.spec.replicas {
            v["spec"]["replicas"] = r.into();
        }
        if let Some(r) = self.status.ready_replicas {
            v["status"]["readyReplicas"] = r.into();
        }
        v
    }
}

/// The server's lookup when it watches a cluster: HostedControlPlanes from
/// their reflector, the preflight objects from [`BackupCache`] (the Secret
/// and what a request reads live are laid over it by [`CachedAndLive`]).
pub struct ClusterLookup {
    pub hcps: Arc<super::hcp_cache::HcpCache>,
    pub backups: Option<Arc<BackupCache>>,
}

impl Lookup for ClusterLookup {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        self.hcps.hosted_control_planes(namespace)
    }

    fn hosted_control_planes_as(&self, namespace: &str, freshness: &Freshness) -> Result<Vec<Value>, LookupError> {
        self.hcps.hosted_control_planes_as(namespace, freshness)
    }

    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        match &self.backups {
            Some(b) => b.backups_in(namespace).map_err(LookupError::Failed),
            None => Err(LookupError::NotProvided),
        }
    }

    /// Never cached: read live per request ([`CachedAndLive`]).
    fn etcd_stateful_set(&self, _namespace: &str) -> Result<Option<Value>, LookupError> {
        Err(LookupError::NotProvided)
    }
}

/// What one request read live ([`Answers`], the type every shell's
/// decision reads), laid over the server's cached lookup:
///
/// * the namespace's HostedControlPlanes (a cache miss is read live, so a
///   lagging watch never denies a backup or lets a StatefulSet through; a
///   cache hit judged fresh enough is handed over as read);
/// * the namespace's HCPEtcdBackups, read live only when the cache shows one
///   in progress, so the serial-guard denial is not made on a stale status;
///   when that read fails (no live-read place, the deadline) the cache's view
///   stands: a failed confirmation must not skip the whole preflight (every
///   denial of it a warning) for a caller that can exhaust the read budget;
/// * the credentials Secret and the etcd StatefulSet (never cached).
///
/// Whatever was not read live comes from `cache`.
pub struct CachedAndLive<'a> {
    pub cache: Option<&'a dyn Lookup>,
    pub live: &'a Answers,
}

impl CachedAndLive<'_> {
    /// Whether anything is looked up at all (no source: the decision says so).
    pub fn any(&self) -> bool {
        self.cache.is_some() || self.live.hcps.is_some()
    }
}

impl Lookup for CachedAndLive<'_> {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        match (&self.live.hcps, self.cache) {
            (Some((ns, read)), _) if ns == namespace => read.clone(),
            (_, Some(cache)) => cache.hosted_control_planes(namespace),
            _ => Err(LookupError::NotProvided),
        }
    }
    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        match (&self.live.backups, self.cache) {
            (Some((ns, Ok(live))), _) if ns == namespace => Ok(live.clone()),
            (_, Some(cache)) => cache.hcp_etcd_backups(namespace),
            (Some((ns, Err(e))), None) if ns == namespace => Err(e.clone()),
            _ => Err(LookupError::NotProvided),
        }
    }
    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        match (&self.live.secret, self.cache) {
            (Some((ns, n, read)), _) if ns == namespace && n == name => read.clone(),
            (_, Some(cache)) => cache.secret(namespace, name),
            _ => Err(LookupError::NotProvided),
        }
    }
    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        match (&self.live.etcd_stateful_set, self.cache) {
            (Some((ns, read)), _) if ns == namespace => read.clone(),
            (_, Some(cache)) => cache.etcd_stateful_set(namespace),
            _ => Err(LookupError::NotProvided),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stand-in for the watch caches (the real ones need an apiserver):
    /// one HostedControlPlane and one HCPEtcdBackup in progress in `ns`.
    struct Cached;

    const NS: &str = "clusters-a";

    impl Lookup for Cached {
        fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
            Ok((namespace == NS)
                .then(|| json!({"kind": "HostedControlPlane", "metadata": {"name": "a", "namespace": NS}}))
                .into_iter()
                .collect())
        }
        fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
            Ok((namespace == NS)
                .then(|| {
                    json!({"kind": "HCPEtcdBackup", "metadata": {"name": "running", "namespace": NS},
                       "status": {"conditions": [{"type": "BackupCompleted", "status": "False",
                                                   "reason": crate::api::REASON_BACKUP_IN_PROGRESS}]}})
                })
                .into_iter()
                .collect())
        }
        fn secret(&self, _: &str, _: &str) -> Result<Option<Value>, LookupError> {
            Ok(None)
        }
        fn etcd_stateful_set(&self, _: &str) -> Result<Option<Value>, LookupError> {
            Ok(None)
        }
    }

    fn backup() -> Value {
        json!({"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HCPEtcdBackup",
               "metadata": {"name": "next", "namespace": NS},
               "spec": {"storage": {"storageType": "S3", "s3": {"bucket": "b", "region": "us-east-1",
                        "keyPrefix": "p", "credentials": {"name": "creds"}}}}})
    }

    #[test]
    fn a_failed_live_confirmation_keeps_the_caches_in_progress_view() {
        let settings = crate::settings::Settings::default();
        let busy = "the server's live-read budget is taken (too many reads at once); not read".to_string();
        let live = Answers { backups: Some((NS.into(), Err(LookupError::Failed(busy)))), ..Default::default() };
        let reads = CachedAndLive { cache: Some(&Cached), live: &live };
        assert_eq!(reads.hcp_etcd_backups(NS).map(|b| b.len()), Ok(1), "the cache's view, not the failed read");
        let f = crate::rules::preflight::check(&backup(), NS, Some(&reads), &settings);
        assert!(
            f.errors.iter().any(|e| e.detail.contains(crate::rules::preflight::IN_PROGRESS.id)),
            "the serial guard still denies: errors {:?}, warnings {:?}",
            f.errors,
            f.warnings
        );
        // A live read that succeeded wins over the cache (it saw the backup finish).
        let reads = CachedAndLive {
            cache: Some(&Cached),
            live: &Answers { backups: Some((NS.into(), Ok(Vec::new()))), ..Default::default() },
        };
        let f = crate::rules::preflight::check(&backup(), NS, Some(&reads), &settings);
        assert!(!f.errors.iter().any(|e| e.detail.contains(crate::rules::preflight::IN_PROGRESS.id)), "{:?}", f.errors);
    }
}
