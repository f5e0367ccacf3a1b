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
//!
//! A pair is refused (at start-up: the server does not start; on reload: the
//! previous pair keeps serving) when it does not parse, the key does not match,
//! the leaf is expired or not yet valid, or it does not name every
//! `--expect-san` name. Each refusal is logged with its reason and counted in
//! `certificate_rejected_total{reason}`.
//!
//! The client CA (`--client-ca`) is reloaded the same way: the verifier is
//! swapped, so a rotated apiserver client CA needs no restart. Clients without
//! a certificate still complete the handshake (probes, Prometheus); the
//! admission paths then refuse them (see `routes::authorize`).

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

use rustls::{
    client::danger::HandshakeSignatureValid,
    pki_types::UnixTime,
    server::danger::{ClientCertVerified, ClientCertVerifier},
    DigitallySignedStruct, DistinguishedName, SignatureScheme,
};

use super::{
    metrics::{CertProblem, Metrics},
    ServerError,
};

/// Why a pair was refused, and the message for the log.
#[derive(Debug)]
pub struct CertRefused {
    pub problem: CertProblem,
    pub message: String,
}

impl std::fmt::Display for CertRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<CertRefused> for ServerError {
    fn from(e: CertRefused) -> Self {
        ServerError::Tls(e.message)
    }
}

fn invalid(message: String) -> CertRefused {
    CertRefused { problem: CertProblem::Invalid, message }
}

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

/// Loads a certificate chain and key from PEM files and checks the leaf: valid
/// now (`now`, Unix seconds) and naming every one of `expect_sans`.
pub fn load_pair(cert: &Path, key: &Path, expect_sans: &[String], now: i64) -> Result<LoadedCert, CertRefused> {
    let cert_pem = std::fs::read(cert).map_err(|e| invalid(format!("reading {}: {e}", cert.display())))?;
    let key_pem = std::fs::read(key).map_err(|e| invalid(format!("reading {}: {e}", key.display())))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("{}: {e}", cert.display())))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(format!("{}: no certificate in the file", cert.display())));
    };
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| invalid(format!("{}: {e}", cert.display())))?;
    let not_before = parsed.validity().not_before.timestamp();
    let not_after = parsed.validity().not_after.timestamp();
    if now > not_after {
        return Err(CertRefused {
            problem: CertProblem::Expired,
            message: format!(
                "{}: the certificate expired at {} (now {now}, Unix seconds); renew it",
                cert.display(),
                parsed.validity().not_after
            ),
        });
    }
    if now < not_before {
        return Err(CertRefused {
            problem: CertProblem::NotYetValid,
            message: format!(
                "{}: the certificate is not valid before {} (now {now}, Unix seconds); check the clock or the issuer",
                cert.display(),
                parsed.validity().not_before
            ),
        });
    }
    let names = san_names(&parsed);
    let missing: Vec<&String> =
        expect_sans.iter().filter(|want| !names.iter().any(|have| san_matches(have, want))).collect();
    if !missing.is_empty() {
        return Err(CertRefused {
            problem: CertProblem::WrongSan,
            message: format!(
                "{}: the certificate does not name {missing:?} (its subjectAltNames: {names:?}); the apiserver would refuse it",
                cert.display()
            ),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| invalid(format!("{}: {e}", key.display())))?;
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|e| invalid(format!("{} / {}: {e}", cert.display(), key.display())))?;
    let mut source = cert_pem;
    source.extend_from_slice(&key_pem);
    Ok(LoadedCert { key: Arc::new(certified), not_after, source })
}

/// DNS and IP subjectAltNames of a certificate, as text.
fn san_names(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let mut out = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => out.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        out.push(std::net::IpAddr::from(a).to_string());
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        out.push(std::net::IpAddr::from(a).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Whether SAN `have` covers `want` (exact, case-insensitive; `*.` covers one label).
fn san_matches(have: &str, want: &str) -> bool {
    let want = want.to_ascii_lowercase();
    if have == want {
        return true;
    }
    match (have.strip_prefix("*."), want.split_once('.')) {
        (Some(suffix), Some((label, rest))) => !label.is_empty() && rest == suffix,
        _ => false,
    }
}

/// What a verified client certificate says about its holder. The identity is
/// the subject's CN, as Kubernetes reads a client certificate (Go's
/// crypto/x509 keeps the last CN attribute of the subject); the DNS and URI
/// subjectAltNames count only when `sans` is set (a CSR approved for one user
/// may carry any SAN). An unparseable certificate has no identity.
pub fn client_identity(der: &[u8], sans: bool) -> super::PeerIdentity {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return super::PeerIdentity { verified: true, names: Vec::new(), not_after: None };
    };
    // The last CN attribute, whatever its string type: skipping one this
    // parser cannot read would pick an earlier CN that Kubernetes ignores.
    let mut names: Vec<String> = cert.subject().iter_common_name().last().and_then(cn_string).into_iter().collect();
    if sans {
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) | GeneralName::URI(d) => names.push((*d).to_string()),
                    _ => {}
                }
            }
        }
    }
    super::PeerIdentity { verified: true, names, not_after: Some(cert.validity().not_after.timestamp()) }
}

/// A CN attribute's value as Go's crypto/x509 reads it (UTF8String,
/// PrintableString, IA5String, NumericString, T61String as its bytes,
/// BMPString as UTF-16BE); `None` for anything else, so an unreadable CN is
/// no identity rather than a different one.
fn cn_string(cn: &x509_parser::x509::AttributeTypeAndValue<'_>) -> Option<String> {
    use x509_parser::asn1_rs::Tag;
    let value = cn.attr_value();
    match value.tag() {
        Tag::BmpString => {
            let data = value.data;
            if data.len() % 2 != 0 {
                return None;
            }
            let units = data.chunks_exact(2).filter_map(|c| <[u8; 2]>::try_from(c).ok()).map(u16::from_be_bytes);
            char::decode_utf16(units).collect::<Result<String, _>>().ok()
        }
        Tag::T61String => std::str::from_utf8(value.data).ok().map(str::to_string),
        _ => cn.as_str().ok().map(str::to_string),
    }
}

/// A client-certificate verifier that can be swapped when the CA file changes.
#[derive(Debug)]
pub struct ReloadingClientVerifier {
    current: ArcSwap<Arc<dyn ClientCertVerifier>>,
}

impl ReloadingClientVerifier {
    pub fn store(&self, v: Arc<dyn ClientCertVerifier>) {
        self.current.store(Arc::new(v));
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        // Probes and Prometheus connect without one; admission paths check.
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints (the CA can change under us); clients send their certificate anyway.
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current.load().verify_client_cert(end_entity, intermediates, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current.load().verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current.load().verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().supported_verify_schemes()
    }
}

/// A verifier for the CA bundle in `pem` (bytes of the `--client-ca` file).
pub fn client_verifier(pem: &[u8], path: &Path) -> Result<Arc<dyn ClientCertVerifier>, ServerError> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(|e| ServerError::Tls(format!("{}: {e}", path.display())))?;
        roots.add(c).map_err(|e| ServerError::Tls(format!("{}: {e}", path.display())))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| ServerError::Tls(format!("client CA {}: {e}", path.display())))
}

/// The rustls config: TLS 1.2 + 1.3, h2 and http/1.1, optional client CA
/// (then also the verifier, for [`reload_loop`] to swap).
pub fn server_config(
    resolver: Arc<ReloadingResolver>,
    client_ca: Option<&Path>,
) -> Result<(ServerConfig, Option<Arc<ReloadingClientVerifier>>), ServerError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ServerError::Tls(e.to_string()))?;
    let (builder, verifier) = match client_ca {
        None => (builder.with_no_client_auth(), None),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| ServerError::Tls(format!("reading {}: {e}", path.display())))?;
            let inner = client_verifier(&pem, path)?;
            let v = Arc::new(ReloadingClientVerifier { current: ArcSwap::new(Arc::new(inner)) });
            (builder.with_client_cert_verifier(v.clone()), Some(v))
        }
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if verifier.is_some() {
        // No session resumption with client certificates: a resumed session
        // carries the identity verified under the client CA of its first
        // handshake, which would outlive a client CA rotation. Every
        // connection verifies its certificate against the current CA.
        cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        cfg.send_tls13_tickets = 0;
    }
    Ok((cfg, verifier))
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

/// What [`reload_loop`] keeps current.
pub struct ReloadTargets {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub expect_sans: Vec<String>,
    pub resolver: Arc<ReloadingResolver>,
    /// The client CA file and the verifier built from it.
    pub client_ca: Option<(PathBuf, Arc<ReloadingClientVerifier>)>,
}

/// Reloads the certificate files (and the client CA) when watched or every
/// `interval`, and swaps in a changed, valid pair.
pub async fn reload_loop(t: ReloadTargets, mut last: Vec<u8>, interval: Duration, metrics: Arc<Metrics>) {
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut watched: Vec<&Path> = vec![&t.cert, &t.key];
    if let Some((ca, _)) = &t.client_ca {
        watched.push(ca);
    }
    let _watcher = watch(&watched, wake.clone());
    let mut last_ca: Option<Vec<u8>> = match &t.client_ca {
        Some((ca, _)) => std::fs::read(ca).ok(),
        None => None,
    };
    let (mut pending, mut reported): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
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
        let (c, k, sans) = (t.cert.clone(), t.key.clone(), t.expect_sans.clone());
        // File reads are blocking: keep them off the async workers.
        let loaded = tokio::task::spawn_blocking(move || {
            let seen = [std::fs::read(&c).unwrap_or_default(), std::fs::read(&k).unwrap_or_default()].concat();
            (seen, load_pair(&c, &k, &sans, unix_now()))
        })
        .await;
        match loaded {
            Ok((_, Ok(pair))) if pair.source != last => {
                t.resolver.store(pair.key);
                last = pair.source;
                (pending, reported) = (None, None);
                metrics.cert_reloaded(pair.not_after);
                tracing::info!(cert = %t.cert.display(), not_after = pair.not_after, "serving certificate reloaded");
            }
            Ok((_, Ok(_))) => {}
            Ok((seen, Err(e))) => {
                // Each refused content is reported once, and only when it is
                // still there at the next look: a pair caught mid-rotation
                // (certificate written, key not yet) is not a failure.
                if reported.as_ref() != Some(&seen) {
                    if pending.as_ref() == Some(&seen) {
                        metrics.cert_reload_failed(e.problem);
                        tracing::error!(
                            reason = e.problem.as_str(),
                            error = %e,
                            "new serving certificate refused; still serving the previous one"
                        );
                        reported = Some(seen);
                        pending = None;
                    } else {
                        pending = Some(seen);
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
        }
        if let Some((ca, verifier)) = &t.client_ca {
            let now = std::fs::read(ca).ok();
            if now.is_some() && now != last_ca {
                let pem = now.clone().unwrap_or_default();
                match client_verifier(&pem, ca) {
                    Ok(v) => {
                        verifier.store(v);
                        metrics.client_ca_reloaded(true);
                        tracing::info!(client_ca = %ca.display(), "client CA reloaded");
                    }
                    Err(e) => {
                        metrics.client_ca_reloaded(false);
                        tracing::error!(error = %e, "new client CA refused; still trusting the previous one");
                    }
                }
                last_ca = now;
            }
        }
    }
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate whose subject has two CN attributes: `kube-apiserver`
    /// (UTF8String) first, then `second` in the given string type.
    fn two_cns(second: rcgen::DnValue) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, "kube-apiserver");
        // The CN's OID as a custom type: rcgen keeps one value per type.
        dn.push(rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]), second);
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn the_identity_is_the_last_cn_whatever_its_string_type() {
        let bmp = rcgen::DnValue::BmpString(rcgen::string::BmpString::try_from("alice").expect("bmp"));
        let id = client_identity(&two_cns(bmp), false);
        assert_eq!(id.names, vec!["alice".to_string()], "Go reads the BMPString CN, the last one");
        let utf8 = client_identity(&two_cns("bob".into()), false);
        assert_eq!(utf8.names, vec!["bob".to_string()]);
        // A last CN of a type Go does not read as a string is no identity,
        // never the earlier `kube-apiserver`.
        let uni =
            rcgen::DnValue::UniversalString(rcgen::string::UniversalString::try_from("carol").expect("universal"));
        let id = client_identity(&two_cns(uni), false);
        assert!(id.names.is_empty(), "{:?}", id.names);
    }
}
