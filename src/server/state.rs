//! The state every handler shares ([`App`]) and what the TLS handshake
//! tells the handlers about the caller ([`PeerIdentity`]). Built once by
//! [`App::new`] from the options; nothing here does I/O but starting the
//! watch caches.

use std::sync::{atomic::AtomicBool, Arc};

use super::{backup_cache, hcp_cache, limits, metrics, reads, ServeOptions};
use crate::settings::Settings;

/// Where the mutating path finds HostedControlPlanes.
#[derive(Clone, Default)]
pub enum LookupSource {
    /// Nowhere: the mutation denies etcd StatefulSets (no restore decision without a HostedControlPlane).
    #[default]
    None,
    /// Fixed objects (`--context` files).
    Static(crate::lookup::ContextObjects),
    /// A reflector over the cluster this client talks to.
    Cluster(kube::Client),
}

impl std::fmt::Debug for LookupSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LookupSource::None => "None",
            LookupSource::Static(_) => "Static",
            LookupSource::Cluster(_) => "Cluster",
        })
    }
}

/// Client-certificate requirements of the admission paths.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    pub allowed: Vec<String>,
    pub scope: ClientAuthScope,
    /// DNS and URI SANs count as identities too (off by default: Kubernetes
    /// identifies a client certificate by its CN).
    pub sans: bool,
}

/// What the TLS handshake established about the client (a request extension).
#[derive(Debug, Default)]
pub struct PeerIdentity {
    /// A certificate was presented and verified against the client CA.
    pub verified: bool,
    /// Its identity as Kubernetes reads a client certificate: the subject CN
    /// (plus its DNS and URI SANs only with `client_identity_sans`).
    pub names: Vec<String>,
    /// The certificate's NotAfter (Unix seconds).
    pub not_after: Option<i64>,
}

/// Which admission paths need a client certificate when a client CA is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientAuthScope {
    /// Every admission path.
    #[default]
    All,
    /// Only the mutating path (the one whose answer carries a restore URL);
    /// the validating paths answer any caller.
    Mutating,
}

/// Shared state of the handlers.
pub struct App {
    pub settings: Settings,
    /// Where the mutation finds HostedControlPlanes (context files or a reflector).
    pub lookup: Option<SharedLookup>,
    /// The HostedControlPlane reflector, when watching a cluster (readiness waits for its sync).
    pub hcp_cache: Option<Arc<hcp_cache::HcpCache>>,
    /// The HCPEtcdBackup preflight's caches and live Secret reader, when
    /// watching a cluster with `backupPreflight` on.
    pub backup_cache: Option<Arc<backup_cache::BackupCache>>,
    pub metrics: Arc<metrics::Metrics>,
    pub ready: AtomicBool,
    /// Set on SIGTERM: `/readyz` answers 503.
    pub draining: AtomicBool,
    pub limits: limits::Limits,
    /// `Some` when `--client-ca` is given.
    pub client_auth: Option<ClientAuth>,
    /// The budget and negative cache of live reads.
    pub reads: reads::LiveReads,
    /// "admission review" log lines per source.
    pub log_budget: super::log_budget::LogBudget,
}

/// A lookup source the handlers share.
pub type SharedLookup = Arc<dyn crate::lookup::Lookup + Send + Sync>;

impl App {
    /// The handlers' state for `opts`: with a cluster, the watch caches are
    /// started here (they sync in the background; `/readyz` waits for the
    /// HostedControlPlane one). Not ready until [`App::ready`] is set.
    pub fn new(opts: &ServeOptions, metrics: Arc<metrics::Metrics>) -> Self {
        let (lookup, hcp_cache, backup_cache): (Option<SharedLookup>, _, _) = match &opts.lookups {
            LookupSource::None => (None, None, None),
            LookupSource::Static(objects) => (Some(Arc::new(objects.clone())), None, None),
            LookupSource::Cluster(client) => {
                let cache = hcp_cache::HcpCache::start(client.clone());
                let backups = opts.settings.backup_preflight.then(|| {
                    backup_cache::BackupCache::start(client.clone(), opts.settings.operator_namespace.clone())
                });
                let lookup = backup_cache::ClusterLookup { hcps: cache.clone(), backups: backups.clone() };
                (Some(Arc::new(lookup) as SharedLookup), Some(cache), backups)
            }
        };
        App {
            settings: opts.settings.clone(),
            lookup,
            hcp_cache,
            backup_cache,
            metrics,
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            limits: limits::Limits::new(opts.limits.clone()),
            client_auth: opts.client_ca.as_ref().map(|_| ClientAuth {
                allowed: opts.allowed_client_names.clone(),
                scope: opts.client_auth_scope,
                sans: opts.client_identity_sans,
            }),
            reads: reads::LiveReads::new(&opts.limits),
            log_budget: super::log_budget::LogBudget::default(),
        }
    }
}
