//! A kube-rs reflector over HostedControlPlanes, so the mutating path never
//! makes an API call per admission. Objects are kept as raw JSON
//! ([`DynamicObject`]): the mutation reads two fields, and an HCP field this
//! project does not model must never break the cache.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use futures::StreamExt;
use kube::{
    api::{Api, ApiResource, DynamicObject, GroupVersionKind},
    runtime::{reflector, watcher, WatchStreamExt},
    Client,
};
use serde_json::Value;

use crate::lookup::Lookup;

/// The HostedControlPlane cache.
pub struct HcpCache {
    store: reflector::Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

impl HcpCache {
    /// Starts the reflector on `client`; returns at once, `synced()` turns
    /// true after the initial list.
    pub fn start(client: Client) -> Arc<Self> {
        let gvk = GroupVersionKind::gvk(crate::api::GROUP, crate::api::VERSION, "HostedControlPlane");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "hostedcontrolplanes");
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let reader = writer.as_reader();
        let synced = Arc::new(AtomicBool::new(false));
        let cache = Arc::new(Self { store: reader.clone(), synced: synced.clone() });
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(reflector(writer, stream));
            while let Some(ev) = events.next().await {
                if let Err(e) = ev {
                    tracing::warn!(error = %e, "HostedControlPlane watch error (retrying with backoff)");
                }
            }
        });
        tokio::spawn(async move {
            if reader.wait_until_ready().await.is_ok() {
                synced.store(true, Ordering::Release);
                tracing::info!(objects = reader.len(), "HostedControlPlane cache synced");
            }
        });
        cache
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

impl Lookup for HcpCache {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, String> {
        Ok(self
            .store
            .state()
            .iter()
            .filter(|o| o.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect())
    }
}
