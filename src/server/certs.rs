//! Certificate generation (rcgen): a CA and a serving certificate signed by
//! it. Used by `certs` (Service DNS names for a cluster) and by `serve`
//! without TLS files (a development pair for localhost/127.0.0.1).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// Errors while generating or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// PEM files of a generated set.
#[derive(Debug, Clone)]
pub struct GeneratedCerts {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA's private key, when the CA was made here (`ca.key`): keep it to
    /// renew the serving pair with `certs --ca-cert/--ca-key` (same caBundle).
    pub ca_key_pem: Option<String>,
}

/// Paths of a set written to a directory.
#[derive(Debug, Clone)]
pub struct CertPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Written only when the CA was made here.
    pub ca_key: PathBuf,
}

impl CertPaths {
    pub fn in_dir(dir: &Path) -> Self {
        Self { ca: dir.join("ca.crt"), cert: dir.join("tls.crt"), key: dir.join("tls.key"), ca_key: dir.join("ca.key") }
    }
}

/// A CA (`<ca_name>`) and a serving certificate for `names` (DNS names or IPs).
pub fn generate(ca_name: &str, names: &[String], days: i64) -> Result<GeneratedCerts, CertError> {
    generate_for(ca_name, names, days, ExtendedKeyUsagePurpose::ServerAuth)
}

/// A CA and a client certificate with common name `names[0]` (as kube-apiserver
/// presents to webhooks that require client certificates).
pub fn generate_client(ca_name: &str, names: &[String], days: i64) -> Result<GeneratedCerts, CertError> {
    generate_for(ca_name, names, days, ExtendedKeyUsagePurpose::ClientAuth)
}

fn generate_for(
    ca_name: &str,
    names: &[String],
    days: i64,
    usage: ExtendedKeyUsagePurpose,
) -> Result<GeneratedCerts, CertError> {
    // Backdated a day so a skewed clock does not reject a fresh certificate.
    let start = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_before = start;
    ca.not_after = start + days_duration(days + 365);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(names.to_vec())?;
    leaf.distinguished_name.push(DnType::CommonName, names.first().map(String::as_str).unwrap_or("hcp-etcd-admission"));
    leaf.extended_key_usages = vec![usage];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    leaf.not_before = start;
    leaf.not_after = start + days_duration(days);
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    let ca_key_pem = Some(issuer.key().serialize_pem());
    Ok(GeneratedCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
        ca_key_pem,
    })
}

/// A serving certificate for `names` signed by an existing CA (PEM
/// certificate and key): renewing the serving pair keeps the caBundle.
pub fn generate_with_ca(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    names: &[String],
    days: i64,
) -> Result<GeneratedCerts, CertError> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)?;
    let start = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    let mut leaf = CertificateParams::new(names.to_vec())?;
    leaf.distinguished_name.push(DnType::CommonName, names.first().map(String::as_str).unwrap_or("hcp-etcd-admission"));
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    leaf.not_before = start;
    leaf.not_after = start + days_duration(days);
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
    Ok(GeneratedCerts {
        ca_pem: ca_cert_pem.to_string(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
        ca_key_pem: None,
    })
}

fn days_duration(days: i64) -> time::Duration {
    time::Duration::days(days)
}

/// Writes a set as `ca.crt`, `tls.crt`, `tls.key` and, when the CA was made
/// here, `ca.key` (keys mode 0600).
pub fn write(dir: &Path, certs: &GeneratedCerts) -> Result<CertPaths, CertError> {
    let paths = CertPaths::in_dir(dir);
    let w = |path: &Path, data: &str| {
        std::fs::write(path, data).map_err(|source| CertError::Write { path: path.to_path_buf(), source })
    };
    std::fs::create_dir_all(dir).map_err(|source| CertError::Write { path: dir.to_path_buf(), source })?;
    w(&paths.ca, &certs.ca_pem)?;
    w(&paths.cert, &certs.cert_pem)?;
    let private = |path: &Path, data: &str| {
        write_private(path, data).map_err(|source| CertError::Write { path: path.to_path_buf(), source })
    };
    private(&paths.key, &certs.key_pem)?;
    if let Some(ca_key) = &certs.ca_key_pem {
        private(&paths.ca_key, ca_key)?;
    }
    Ok(paths)
}

/// Writes a private key readable by its owner only from the first byte: the
/// file is created 0600 (not with the umask and narrowed afterwards), and an
/// existing one is narrowed before it is truncated and written.
fn write_private(path: &Path, data: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        open.mode(0o600);
    }
    let mut file = open.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.set_len(0)?;
    file.write_all(data.as_bytes())?;
    file.sync_all()
}

/// The DNS names a Service answers to.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn private_keys_are_owner_only_fresh_or_overwritten() {
        let dir = std::env::temp_dir().join(format!("hcp-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let stale = dir.join("tls.key");
        std::fs::write(&stale, "x".repeat(10_000)).expect("stale key");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let fresh = dir.join("ca.key");
        let _ = std::fs::remove_file(&fresh);
        for (path, data) in [(&stale, "new key"), (&fresh, "ca key")] {
            write_private(path, data).expect("write");
            let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
            assert_eq!(std::fs::read_to_string(path).expect("read"), data, "truncated and rewritten");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
