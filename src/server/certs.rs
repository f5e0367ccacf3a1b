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
    generate_for(ca_name, names, days, days + 365, ExtendedKeyUsagePurpose::ServerAuth)
}

/// [`generate`] with the CA's own lifetime (`ca_days`, at least the serving
/// certificate's `days`).
pub fn generate_with_ca_days(
    ca_name: &str,
    names: &[String],
    days: i64,
    ca_days: i64,
) -> Result<GeneratedCerts, CertError> {
    generate_for(ca_name, names, days, ca_days.max(days), ExtendedKeyUsagePurpose::ServerAuth)
}

/// A CA and a client certificate with common name `names[0]` (as kube-apiserver
/// presents to webhooks that require client certificates).
pub fn generate_client(ca_name: &str, names: &[String], days: i64) -> Result<GeneratedCerts, CertError> {
    generate_for(ca_name, names, days, days + 365, ExtendedKeyUsagePurpose::ClientAuth)
}

fn generate_for(
    ca_name: &str,
    names: &[String],
    days: i64,
    ca_days: i64,
    usage: ExtendedKeyUsagePurpose,
) -> Result<GeneratedCerts, CertError> {
    // Backdated a day so a skewed clock does not reject a fresh certificate.
    let start = time::OffsetDateTime::now_utc() - time::Duration::days(1);
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_before = start;
    ca.not_after = start + days_duration(ca_days);
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
    std::fs::create_dir_all(dir).map_err(|source| CertError::Write { path: dir.to_path_buf(), source })?;
    write_file(&paths.ca, &certs.ca_pem, false)?;
    write_file(&paths.cert, &certs.cert_pem, false)?;
    write_file(&paths.key, &certs.key_pem, true)?;
    if let Some(ca_key) = &certs.ca_key_pem {
        write_file(&paths.ca_key, ca_key, true)?;
    }
    Ok(paths)
}

/// Writes `data` to a new file next to `path` (a key: created with mode 0600,
/// never readable by others even for an instant), then renames it over
/// `path`: a reader sees the old file or the new one, never a part.
pub fn write_file(path: &Path, data: &str, secret: bool) -> Result<(), CertError> {
    use std::io::Write as _;
    let err = |source| CertError::Write { path: path.to_path_buf(), source };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let _ = std::fs::remove_file(&tmp);
    let result = open.open(&tmp).and_then(|mut f| {
        f.write_all(data.as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = result.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::write_file;

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
            write_file(path, data, true).expect("write");
            let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
            assert_eq!(std::fs::read_to_string(path).expect("read"), data, "replaced whole");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
