//! `certs`: a CA and a serving certificate for the webhook Service, and the
//! caBundle for the webhook configurations.
//!
//! Nothing is written until every target has been checked: an existing CA is
//! never replaced without `--force` (its bundle is what the apiserver trusts),
//! and an `--inject` or `--patch-out` target that cannot take the bundle fails
//! before a new CA exists. `--patch-out` writes a kustomize Component instead
//! of editing the tracked manifests (one per cluster, GitOps-friendly).

use hcp_etcd_admission::json_at::At;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use hcp_etcd_admission::server::certs;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission certs --out certs --patch-out my-cluster/ca-bundle\n  hcp-etcd-admission certs --out certs --ca-cert certs/ca.crt --ca-key certs/ca.key   # renew, same caBundle"
)]
pub struct CertsArgs {
    /// Service name.
    #[arg(long, default_value = "hcp-etcd-admission")]
    pub service: String,
    /// Service namespace.
    #[arg(long, default_value = "hcp-etcd-admission")]
    pub namespace: String,
    /// Output directory (ca.crt, tls.crt, tls.key, and ca.key for a new CA).
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub out: PathBuf,
    /// Serving certificate lifetime in days.
    #[arg(long, default_value_t = 365)]
    pub days: i64,
    /// Lifetime of a new CA in days (at least --days). Renewing the serving
    /// pair with --ca-cert/--ca-key keeps the caBundle until the CA expires.
    #[arg(long, default_value_t = 3650)]
    pub ca_days: i64,
    /// Sign with this existing CA certificate (PEM) instead of making a new CA:
    /// the caBundle stays the same across renewals. Needs --ca-key.
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The existing CA's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Replace a CA already in --out (the webhooks then trust only the new one).
    #[arg(long)]
    pub force: bool,
    /// Write the caBundle into every webhook configuration YAML in this
    /// directory (edits those files in place).
    #[arg(long, value_name = "DIR")]
    pub inject: Option<PathBuf>,
    /// Instead of editing manifests: write a kustomize Component that sets the
    /// caBundle (DIR/kustomization.yaml); list it under `components:` of your
    /// registration kustomization.
    #[arg(long, value_name = "DIR", conflicts_with = "inject")]
    pub patch_out: Option<PathBuf>,
    /// With --patch-out: the webhook configurations the patch is for.
    /// (Without a checkout: the registrations this binary ships.)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_REGISTRATION)]
    pub registration: PathBuf,
}

const DEFAULT_REGISTRATION: &str = "webhooks/registration";

/// A webhook configuration found in a manifest file: its kind, name and
/// webhooks' names.
struct WebhookConfig {
    path: PathBuf,
    kind: String,
    name: String,
    webhooks: Vec<String>,
}

/// The registrations this binary ships (`webhooks/registration/`), for
/// `--patch-out` without a checkout at hand.
const SHIPPED: [(&str, &str); 2] = [
    // In the order a directory listing gives them.
    (
        "mutatingwebhookconfiguration.yaml",
        include_str!("../../webhooks/registration/mutatingwebhookconfiguration.yaml"),
    ),
    (
        "validatingwebhookconfiguration.yaml",
        include_str!("../../webhooks/registration/validatingwebhookconfiguration.yaml"),
    ),
];

/// The webhook configurations in one YAML text.
fn configs_in(path: &Path, text: &str) -> Vec<WebhookConfig> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let Ok(v) = <serde_json::Value as serde::Deserialize>::deserialize(doc) else { continue };
        let kind = v.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default();
        if kind != "ValidatingWebhookConfiguration" && kind != "MutatingWebhookConfiguration" {
            continue;
        }
        let name = v.at("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or_default();
        let webhooks = v
            .get("webhooks")
            .and_then(serde_json::Value::as_array)
            .map(|ws| ws.iter().filter_map(|w| w.get("name")?.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        out.push(WebhookConfig { path: path.to_path_buf(), kind: kind.to_string(), name: name.to_string(), webhooks });
    }
    out
}

fn webhook_configs(dir: &Path) -> anyhow::Result<Vec<WebhookConfig>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml")) {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        out.extend(configs_in(&path, &text));
    }
    anyhow::ensure!(
        out.iter().any(|c| !c.webhooks.is_empty()),
        "no webhook configuration with webhooks in {} (nothing written)",
        dir.display()
    );
    Ok(out)
}

/// `--registration`'s configurations: the directory's, or, when the default
/// directory is not there (no checkout), the ones this binary ships.
fn registration_configs(dir: &Path) -> anyhow::Result<Vec<WebhookConfig>> {
    if dir == Path::new(DEFAULT_REGISTRATION) && !dir.exists() {
        return Ok(SHIPPED.iter().flat_map(|(name, text)| configs_in(Path::new(name), text)).collect());
    }
    webhook_configs(dir)
}

/// `text` (webhook configuration YAML, block style) with `caBundle: bundle`
/// in every `clientConfig`: an existing caBundle line replaced, or one
/// added as the block's first field. (The shipped registrations carry none:
/// an injector owns that field, and a manifest that sets it, even empty,
/// clears the injected one on re-apply.)
fn with_ca_bundle(text: &str, bundle: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4096);
    for line in text.lines() {
        if line.trim_start().starts_with("caBundle:") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        // `clientConfig:` (a comment after it allowed), also as a list item's first key.
        let code = line.split(" #").next().unwrap_or(line).trim_end();
        if let Some(at) = code.strip_suffix("clientConfig:").map(str::len) {
            if code.get(..at).is_some_and(|lead| lead.trim_start_matches([' ', '-']).is_empty()) {
                let indent = at + 2;
                out.push_str(&format!("{:indent$}caBundle: {bundle}\n", ""));
            }
        }
    }
    out
}

/// Checks that [`with_ca_bundle`] did exactly its job on `text`: every
/// webhook of every webhook configuration has `bundle`, and nothing else of
/// any document changed. Otherwise the file is one this line editor cannot
/// handle (flow style, unusual indentation): an error, nothing written.
fn check_injected(path: &Path, text: &str, injected: &str, bundle: &str) -> anyhow::Result<()> {
    let docs = |t: &str| -> anyhow::Result<Vec<serde_json::Value>> {
        serde_yaml_ng::Deserializer::from_str(t)
            .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).map_err(anyhow::Error::from))
            .collect()
    };
    let cannot = || {
        anyhow::anyhow!(
            "{}: the caBundle cannot be put into every webhook's clientConfig by editing lines (flow style or unusual indentation): nothing written; use --patch-out instead",
            path.display()
        )
    };
    let (before, after) = (docs(text)?, docs(injected).map_err(|_| cannot())?);
    anyhow::ensure!(before.len() == after.len(), cannot());
    for (b, mut a) in before.into_iter().zip(after) {
        let kind = a.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default();
        if kind == "ValidatingWebhookConfiguration" || kind == "MutatingWebhookConfiguration" {
            let mut b = b;
            for (doc, want) in [(&mut a, Some(bundle)), (&mut b, None)] {
                for w in doc.get_mut("webhooks").and_then(serde_json::Value::as_array_mut).into_iter().flatten() {
                    let cc = w.get_mut("clientConfig").and_then(serde_json::Value::as_object_mut).ok_or_else(cannot)?;
                    let got = cc.remove("caBundle");
                    if let Some(want) = want {
                        anyhow::ensure!(got.as_ref().and_then(serde_json::Value::as_str) == Some(want), cannot());
                    }
                }
            }
            anyhow::ensure!(a == b, cannot());
        } else {
            anyhow::ensure!(a == b, cannot());
        }
    }
    Ok(())
}

/// The Component `--patch-out` writes: one strategic-merge patch per
/// configuration, each webhook matched by its name (the merge key of
/// `webhooks`), never by its position.
fn patch_component(configs: &[WebhookConfig], bundle: &str) -> String {
    let mut s = String::from(
        "# Written by `hcp-etcd-admission certs --patch-out`: the caBundle of this\n\
         # cluster's webhook CA. List this directory under `components:` of the\n\
         # registration kustomization.\n\
         apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n",
    );
    for c in configs.iter().filter(|c| !c.webhooks.is_empty()) {
        s.push_str(&format!(
            "  - patch: |-\n      apiVersion: admissionregistration.k8s.io/v1\n      kind: {}\n      metadata:\n        name: {}\n      webhooks:\n",
            c.kind, c.name
        ));
        for w in &c.webhooks {
            s.push_str(&format!("        - name: {w}\n          clientConfig:\n            caBundle: \"{bundle}\"\n"));
        }
    }
    s
}

/// The registration files under `dir` a caBundle goes into, each checked
/// (editable exactly, writable) before anything is written.
fn injectable(dir: &std::path::Path) -> anyhow::Result<Vec<PathBuf>> {
    let configs = webhook_configs(dir)?;
    let files: Vec<PathBuf> = configs.iter().filter(|c| !c.webhooks.is_empty()).map(|c| c.path.clone()).collect();
    for f in &files {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        anyhow::ensure!(
            text.lines().any(|l| l.trim_end().ends_with("clientConfig:")),
            "{} has no block-style clientConfig to put a caBundle in (nothing written)",
            f.display()
        );
        check_injected(f, &text, &with_ca_bundle(&text, "Q0hFQ0s="), "Q0hFQ0s=")?;
        let meta = std::fs::metadata(f).with_context(|| format!("reading {}", f.display()))?;
        anyhow::ensure!(!meta.permissions().readonly(), "{} is read-only (nothing written)", f.display());
    }
    Ok(files)
}

pub fn run(args: &CertsArgs) -> anyhow::Result<i32> {
    // Check every target before anything is written.
    anyhow::ensure!(args.days > 0, "--days must be positive");
    anyhow::ensure!(args.ca_days >= args.days, "--ca-days ({}) must be at least --days ({})", args.ca_days, args.days);
    anyhow::ensure!(!args.out.is_file(), "--out {} is a file, not a directory", args.out.display());
    let paths = certs::CertPaths::in_dir(&args.out);
    let new_ca = args.ca_cert.is_none();
    if new_ca && !args.force {
        if let Some(existing) = [&paths.ca_key, &paths.ca].into_iter().find(|p| p.exists()) {
            anyhow::bail!(
                "{} exists: a new CA would replace the one the webhooks trust. Renew the serving pair with \
                 --ca-cert {} --ca-key {} (same caBundle), choose another --out, or pass --force to replace the CA",
                existing.display(),
                paths.ca.display(),
                paths.ca_key.display()
            );
        }
    }
    let inject = args.inject.as_deref().map(injectable).transpose()?;
    let patch = match &args.patch_out {
        Some(dir) => {
            anyhow::ensure!(!dir.is_file(), "--patch-out {} is a file, not a directory", dir.display());
            Some((dir.clone(), registration_configs(&args.registration)?))
        }
        None => None,
    };

    let names = certs::service_names(&args.service, &args.namespace);
    let generated = match (&args.ca_cert, &args.ca_key) {
        (Some(c), Some(k)) => {
            let ca = std::fs::read_to_string(c).with_context(|| format!("reading {}", c.display()))?;
            let key = std::fs::read_to_string(k).with_context(|| format!("reading {}", k.display()))?;
            certs::generate_with_ca(&ca, &key, &names, args.days)
                .with_context(|| format!("signing with the CA in {} / {}", c.display(), k.display()))?
        }
        _ => certs::generate_with_ca_days(&format!("{} CA", args.service), &names, args.days, args.ca_days)?,
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
    for path in inject.unwrap_or_default() {
        let text = std::fs::read_to_string(&path)?;
        let injected = with_ca_bundle(&text, &bundle);
        check_injected(&path, &text, &injected, &bundle)?;
        certs::write_file(&path, &injected, false)?;
        eprintln!("injected caBundle into {}", path.display());
    }
    if let Some((dir, configs)) = patch {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = dir.join("kustomization.yaml");
        certs::write_file(&file, &patch_component(&configs, &bundle), false)?;
        eprintln!("wrote {} (a kustomize Component setting the caBundle)", file.display());
    }
    println!("{bundle}");
    Ok(0)
}
