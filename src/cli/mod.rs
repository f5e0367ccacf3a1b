//! The command-line shell: reads files, calls the decision core, writes
//! output. Nothing here decides anything.

pub mod certs;
pub mod check;
pub mod crd;
pub mod input;
pub mod review;
pub mod serve;

use anyhow::Context as _;
use hcp_etcd_admission::settings::Settings;

/// Options shared by `review`, `check` and `serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct DecisionArgs {
    /// Files with objects the decision may look up (e.g. the HostedControlPlane
    /// of a StatefulSet's namespace); multi-document YAML or JSON.
    #[arg(long = "context", value_name = "FILE")]
    pub context: Vec<std::path::PathBuf>,
    /// Settings file (YAML or JSON; the same keys as the Kubewarden policy settings).
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
    pub fn context(&self) -> anyhow::Result<hcp_etcd_admission::admission::lookup::ContextObjects> {
        let mut all = Vec::new();
        for path in &self.context {
            all.extend(input::read_documents(path)?);
        }
        Ok(hcp_etcd_admission::admission::lookup::ContextObjects::from_values(all))
    }

    pub fn settings(&self) -> anyhow::Result<Settings> {
        let Some(path) = &self.config else {
            return Ok(Settings::default());
        };
        let docs = input::read_documents(path)?;
        let doc = docs.into_iter().next().unwrap_or(serde_json::Value::Null);
        let doc = if doc.is_null() { serde_json::json!({}) } else { doc };
        Settings::from_json(&doc).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}
