//! TLS: a certificate resolver that can be swapped without a restart, the
//! reload loop that feeds it, and the rustls server config (TLS 1.2 and 1.3
//! only, optional client-certificate verification).
//!
//! Reload is driven two ways: a filesystem watch on the directories holding
//! the files (inotify: reacts within milliseconds) and a poll of the files'
//! contents every few seconds. The poll is what makes it dependable:
//! Kubernetes Secret volumes swap a `..data` symlink atomically, which a watch
//! on the old inode can miss, while reading the paths again always sees the
//! new pair. A pair that fails to load is logged and the old one kept.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use arc_swap::ArcSwap;
use rustls::{
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
    RootCertStore, ServerConfig,
};

use super::{metrics::Metrics, ServerError};

/// A serving certificate and what is known about it.
pub struct LoadedCert {
    pub key: Arc<CertifiedKey>,
    /// NotAfter of the leaf, Unix seconds.
    pub not_after: i64,
    /// The raw PEM bytes it was loaded from (to detect changes).
    pub source: Vec<u8>,
}

/// Serves whatever certificate was stored last.
#[derive(Debug)]
pub struct ReloadingResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl ReloadingResolver {
    pub fn new(key: Arc<CertifiedKey>) -> Arc<Self> {
        Arc::new(Self { current: ArcSwap::new(key) })
    }
    pub fn store(&self, key: Arc<CertifiedKey>) {
        self.current.store(key);
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads a certificate chain and key from PEM files.
pub fn load_pair(cert: &Path, key: &Path) -> Result<LoadedCert, ServerError> {
    let cert_pem = std::fs::read(cert).map_err(|e| ServerError::Tls(format!("reading {}: {e}", cert.display())))?;
    let key_pem = std::fs::read(key).map_err(|e| ServerError::Tls(format!("reading {}: {e}", key.display())))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ServerError::Tls(format!("{}: {e}", cert.display())))?;
    let Some(leaf) = chain.first() else {
        return Err(ServerError::Tls(format!("{}: no certificate in the file", cert.display())));
    };
    let not_after = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map(|(_, c)| c.validity().not_after.timestamp())
        .map_err(|e| ServerError::Tls(format!("{}: {e}", cert.display())))?;
    let private =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| ServerError::Tls(format!("{}: {e}", key.display())))?;
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|e| ServerError::Tls(format!("{} / {}: {e}", cert.display(), key.display())))?;
    let mut source = cert_pem;
    source.extend_from_slice(&key_pem);
    Ok(LoadedCert { key: Arc::new(certified), not_after, source })
}

/// The rustls config: TLS 1.2 + 1.3, h2 and http/1.1, optional client CA.
pub fn server_config(resolver: Arc<ReloadingResolver>, client_ca: Option<&Path>) -> Result<ServerConfig, ServerError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ServerError::Tls(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| ServerError::Tls(format!("reading {}: {e}", path.display())))?;
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| ServerError::Tls(format!("{}: {e}", path.display())))?;
                roots.add(c).map_err(|e| ServerError::Tls(format!("{}: {e}", path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| ServerError::Tls(format!("client CA {}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Watches the directories of `files`; every event wakes `wake`. `None`
/// (logged) when watching is not possible: the poll still reloads.
pub fn watch(files: &[&Path], wake: Arc<tokio::sync::Notify>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let mut watcher = match notify::recommended_watcher(move |_event: notify::Result<notify::Event>| wake.notify_one())
    {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the certificate files; relying on polling");
            return None;
        }
    };
    for f in files {
        let dir = f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch; relying on polling");
        }
    }
    Some(watcher)
}

/// Reloads the certificate files when watched or every `interval`, and swaps
/// in a changed, valid pair.
pub async fn reload_loop(
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<ReloadingResolver>,
    mut last: Vec<u8>,
    interval: Duration,
    metrics: Arc<Metrics>,
) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let _watcher = watch(&[&cert, &key], wake.clone());
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = wake.notified() => {
                // Writers replace the certificate, then the key: let both land.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let (c, k) = (cert.clone(), key.clone());
        // File reads are blocking: keep them off the async workers.
        let loaded = tokio::task::spawn_blocking(move || load_pair(&c, &k)).await;
        match loaded {
            Ok(Ok(pair)) if pair.source != last => {
                resolver.store(pair.key);
                last = pair.source;
                metrics.cert_reloaded(true, pair.not_after);
                tracing::info!(cert = %cert.display(), not_after = pair.not_after, "serving certificate reloaded");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                // Mid-rotation (cert written, key not yet) or broken: keep the old pair.
                if std::fs::read(&cert).map(|c| !last.starts_with(&c)).unwrap_or(true) {
                    metrics.cert_reloaded(false, 0);
                    tracing::warn!(error = %e, "new certificate pair does not load; still serving the previous one");
                }
            }
            Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
        }
    }
}
