//! The command-line shell: reads files, calls the decision core, writes
//! output. Nothing here decides anything.

#[cfg(feature = "server")]
pub mod certs;
pub mod check;
pub mod crd;
pub mod document_bounds;
pub mod input;
pub mod redact;
pub mod review;
pub mod rules;
#[cfg(feature = "server")]
pub mod serve;

use anyhow::Context as _;
use hcp_etcd_admission::json_at::At;

/// Whether an error is a closed stdout (`| head`): the command then ends
/// quietly with exit 0, as a reader that stopped reading asked for.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
use hcp_etcd_admission::settings::Settings;

/// Options shared by `review`, `check` and `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct DecisionArgs {
    /// Files with objects the decision may look up (e.g. the HostedControlPlane
    /// of a StatefulSet's namespace); multi-document YAML or JSON.
    #[arg(long = "context", value_name = "FILE")]
    pub context: Vec<std::path::PathBuf>,
    /// Settings: a bare settings file (YAML or JSON; the same keys as the
    /// Kubewarden policy settings), the shipped ConfigMap (its `settings.yaml`
    /// key) or a Kubewarden (Cluster)AdmissionPolicy (its `spec.settings`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// `--now` of the offline commands (`serve` always reads the clock, once per request).
#[derive(clap::Args, Debug, Clone)]
pub struct ClockArgs {
    /// The current time (RFC 3339) for presigned-URL expiry; default: the system clock.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
}

impl ClockArgs {
    /// `--now`, or the system clock read once (a clock error is passed on:
    /// the rules that need the time deny with it).
    pub fn now(&self) -> anyhow::Result<hcp_etcd_admission::time::Now> {
        match &self.now {
            Some(s) => Ok(Ok(hcp_etcd_admission::time::parse_rfc3339(s)
                .with_context(|| format!("--now {s:?} is not an RFC 3339 time (e.g. 2026-11-29T15:00:00Z)"))?)),
            None => Ok(hcp_etcd_admission::time::system_now()),
        }
    }
}

impl DecisionArgs {
    /// The objects of the `--context` files.
    pub fn context(&self) -> anyhow::Result<hcp_etcd_admission::lookup::ContextObjects> {
        let mut all = Vec::new();
        for path in &self.context {
            all.extend(input::read_documents(path)?);
        }
        Ok(hcp_etcd_admission::lookup::ContextObjects::from_values(all))
    }

    pub fn settings(&self) -> anyhow::Result<Settings> {
        let Some(path) = &self.config else {
            return Ok(Settings::default());
        };
        let docs = input::read_documents(path)?;
        let doc = docs.into_iter().next().unwrap_or(serde_json::Value::Null);
        let doc = settings_document(doc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Settings::from_json(&doc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// The settings inside what `--config` was given: a bare settings document,
/// the shipped ConfigMap (`data["settings.yaml"]`, or its only key) or a
/// Kubewarden policy (`spec.settings`).
fn settings_document(doc: serde_json::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let settings = match kind {
        "ConfigMap" if api_version == "v1" => {
            let data = doc.get("data").and_then(Value::as_object);
            let text = match data {
                Some(d) if d.contains_key("settings.yaml") => d.get("settings.yaml"),
                Some(d) if d.len() == 1 => d.values().next(),
                _ => None,
            };
            let Some(text) = text.and_then(Value::as_str) else {
                return Err(
                    "ConfigMap has no data key \"settings.yaml\" (the ConfigMap kustomize generates from webhooks/base/settings.yaml has it)"
                        .to_string(),
                );
            };
            input::parse_settings_text(text).map_err(|e| format!("data[\"settings.yaml\"]: {e}"))?
        }
        "ClusterAdmissionPolicy" | "AdmissionPolicy" if api_version.starts_with("policies.kubewarden.io/") => {
            doc.at("/spec/settings").cloned().unwrap_or(Value::Null)
        }
        _ => doc,
    };
    Ok(if settings.is_null() { serde_json::json!({}) } else { settings })
}
