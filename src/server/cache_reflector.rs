//! One reflector, started and watched the same way for every cache (the
//! HostedControlPlanes, the HCPEtcdBackups): its errors logged and retried
//! with backoff, and a flag that turns true after the initial list (the
//! readiness probe waits for it). Kept apart so the caches depend on it,
//! not on each other.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use futures::StreamExt;
use kube::{
    api::{Api, ApiResource, DynamicObject},
    runtime::{reflector, watcher, WatchStreamExt},
};

/// Starts a reflector over `api` (its errors logged as `what`, retried with
/// backoff): the store, and a flag that turns true after the initial list.
pub fn spawn(
    api: Api<DynamicObject>,
    resource: ApiResource,
    config: watcher::Config,
    what: &'static str,
) -> (reflector::Store<DynamicObject>, Arc<AtomicBool>) {
    let writer = reflector::store::Writer::<DynamicObject>::new(resource);
    let reader = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let stream = watcher(api, config).default_backoff();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(reflector(writer, stream));
        while let Some(ev) = events.next().await {
            if let Err(e) = ev {
                tracing::warn!(error = %e, what, "watch error (retrying with backoff)");
            }
        }
    });
    let flag = synced.clone();
    let r = reader.clone();
    tokio::spawn(async move {
        if r.wait_until_ready().await.is_ok() {
            flag.store(true, Ordering::Release);
            tracing::info!(objects = r.len(), what, "cache synced");
        }
    });
    (reader, synced)
}
