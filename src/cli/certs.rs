//! `certs`: a CA and a serving certificate for the webhook Service, and the
//! caBundle for the webhook configurations.

use std::path::PathBuf;

use anyhow::Context as _;
use base64::Engine as _;
use hcp_etcd_admission::server::certs;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission certs --service hcp-etcd-admission --namespace hcp-etcd-admission --out certs --inject webhooks/base"
)]
pub struct CertsArgs {
    /// Service name.
    #[arg(long, default_value = "hcp-etcd-admission")]
    pub service: String,
    /// Service namespace.
    #[arg(long, default_value = "hcp-etcd-admission")]
    pub namespace: String,
    /// Output directory (ca.crt, tls.crt, tls.key).
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub out: PathBuf,
    /// Serving certificate lifetime in days.
    #[arg(long, default_value_t = 365)]
    pub days: i64,
    /// Sign with this existing CA certificate (PEM) instead of making a new CA:
    /// the caBundle stays the same across renewals. Needs --ca-key.
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The existing CA's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Write the caBundle into every webhook configuration YAML in this directory.
    #[arg(long, value_name = "DIR")]
    pub inject: Option<PathBuf>,
}

pub fn run(args: &CertsArgs) -> anyhow::Result<i32> {
    let names = certs::service_names(&args.service, &args.namespace);
    let generated = match (&args.ca_cert, &args.ca_key) {
        (Some(c), Some(k)) => {
            let ca = std::fs::read_to_string(c).with_context(|| format!("reading {}", c.display()))?;
            let key = std::fs::read_to_string(k).with_context(|| format!("reading {}", k.display()))?;
            certs::generate_with_ca(&ca, &key, &names, args.days)
                .with_context(|| format!("signing with the CA in {} / {}", c.display(), k.display()))?
        }
        _ => certs::generate(&format!("{} CA", args.service), &names, args.days)?,
    };
    let paths = certs::write(&args.out, &generated)?;
    let bundle = base64::engine::general_purpose::STANDARD.encode(generated.ca_pem.as_bytes());
    eprintln!("wrote {}, {}, {}", paths.ca.display(), paths.cert.display(), paths.key.display());
    if generated.ca_key_pem.is_some() {
        eprintln!(
            "wrote {}: keep it safe (it signs certificates the webhooks trust); renew with --ca-cert {} --ca-key {} to keep the caBundle",
            paths.ca_key.display(),
            paths.ca.display(),
            paths.ca_key.display()
        );
    }
    if let Some(dir) = &args.inject {
        let mut n = 0;
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            if !text.contains("WebhookConfiguration") || !text.contains("caBundle:") {
                continue;
            }
            let replaced: Vec<String> = text
                .lines()
                .map(|l| match l.find("caBundle:") {
                    Some(i) => format!("{}caBundle: {bundle}", &l[..i]),
                    None => l.to_string(),
                })
                .collect();
            std::fs::write(&path, replaced.join("\n") + "\n")?;
            eprintln!("injected caBundle into {}", path.display());
            n += 1;
        }
        anyhow::ensure!(n > 0, "no webhook configuration with a caBundle field in {}", dir.display());
    }
    println!("{bundle}");
    Ok(0)
}
