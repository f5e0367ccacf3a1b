//! `rules`: the rule catalog (every upstream CEL rule and every rule beyond
//! upstream) as the README's Markdown table, or as JSON/YAML for tools.

use std::io::Write as _;

use hcp_etcd_admission::catalog;
use serde_json::{json, Value};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// The README's Markdown table.
    #[default]
    Text,
    Json,
    Yaml,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission rules > rules.md\n  hcp-etcd-admission rules -o json | jq -r '.[] | select(.action == \"deny\") | .id'"
)]
pub struct RulesArgs {
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Format::Text)]
    pub output: Format,
}

/// Returns the process exit code.
pub fn run(args: &RulesArgs) -> anyhow::Result<i32> {
    let text = match args.output {
        Format::Text => catalog::markdown_table()?,
        Format::Json | Format::Yaml => {
            let rules: Vec<Value> = catalog::entries()?
                .into_iter()
                .map(|e| {
                    json!({"id": e.id, "objects": e.objects, "field": e.field, "message": e.message,
                        "origin": e.origin, "action": e.severity})
                })
                .collect();
            if args.output == Format::Json {
                format!("{}\n", serde_json::to_string_pretty(&rules)?)
            } else {
                serde_yaml_ng::to_string(&rules)?
            }
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(0)
}
