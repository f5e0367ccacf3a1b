//! `check`: every object in the given files is reviewed as a CREATE; exit 1
//! if any is denied.

use std::path::PathBuf;

use hcp_etcd_admission::admission::{
    self, AdmissionRequest, DecisionInput, GroupVersionKind, GroupVersionResource, Operation, Target,
};
use serde::Serialize;
use serde_json::Value;

use super::{input, ClockArgs, DecisionArgs};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission check examples/*.yaml\n  hcp-etcd-admission check --output json --now 2026-11-29T15:00:00Z hostedcluster.yaml"
)]
pub struct CheckArgs {
    #[command(flatten)]
    pub decision: DecisionArgs,
    #[command(flatten)]
    pub clock: ClockArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// YAML (multi-document) or JSON files; `-` reads stdin.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    file: String,
    document: usize,
    kind: String,
    namespace: String,
    name: String,
    /// "allowed", "denied" or "skipped".
    result: &'static str,
    /// The JSON patch a mutating decision would apply (StatefulSets).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<json_patch::Patch>,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<admission::Cause>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

/// Returns the process exit code.
pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    admission::warm_up()?;
    let settings = args.decision.settings()?;
    let now = args.clock.now()?;
    let context = args.decision.context()?;
    let decision = DecisionInput { settings: &settings, lookup: Some(&context), now, expect: None };
    let mut reports = Vec::new();
    for file in &args.files {
        for (i, doc) in input::read_documents(file)?.into_iter().enumerate() {
            let kind = str_at(&doc, "/kind").to_string();
            let mut report = Report {
                file: file.display().to_string(),
                document: i + 1,
                kind: kind.clone(),
                namespace: str_at(&doc, "/metadata/namespace").to_string(),
                name: str_at(&doc, "/metadata/name").to_string(),
                result: "skipped",
                patch: None,
                message: String::new(),
                causes: Vec::new(),
                warnings: Vec::new(),
            };
            let Some(target) = Target::for_kind(&kind) else {
                report.message = format!("kind {kind:?} is not checked by hcp-etcd-admission");
                reports.push(report);
                continue;
            };
            let (group, version) = str_at(&doc, "/apiVersion").split_once('/').unwrap_or(("", ""));
            let req = AdmissionRequest {
                uid: format!("check-{}-{}", report.file, i + 1),
                kind: GroupVersionKind { group: group.to_string(), version: version.to_string(), kind: kind.clone() },
                resource: GroupVersionResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    resource: target.resource().split('.').next().unwrap_or_default().to_string(),
                },
                sub_resource: None,
                name: Some(report.name.clone()),
                namespace: Some(report.namespace.clone()),
                operation: Operation::Create,
                object: Some(doc.clone()),
                old_object: None,
                dry_run: Some(true),
                user_info: None,
            };
            let decided = admission::decide(&req, &decision);
            report.result = if decided.allowed() { "allowed" } else { "denied" };
            if let Some(denial) = decided.denial() {
                report.message = denial.message.clone();
                report.causes = denial.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
            }
            report.patch = decided.patch;
            report.warnings = decided.warnings;
            reports.push(report);
        }
    }
    let denied = reports.iter().any(|r| r.result == "denied");
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        Output::Text => {
            for r in &reports {
                let what = if r.namespace.is_empty() {
                    format!("{}/{}", r.kind, r.name)
                } else {
                    format!("{}/{}/{}", r.kind, r.namespace, r.name)
                };
                let patched = match &r.patch {
                    Some(ops) => format!(" (mutated: {} JSON patch operations; --output json shows them)", ops.0.len()),
                    None => String::new(),
                };
                println!("{}#{}: {what}: {}{patched}", r.file, r.document, r.result);
                if r.causes.is_empty() && !r.message.is_empty() {
                    println!("  {}", r.message);
                }
                for c in &r.causes {
                    println!("  error: {}: {}", c.field, c.message);
                }
                for w in &r.warnings {
                    println!("  warning: {w}");
                }
            }
            let count = |s: &str| reports.iter().filter(|r| r.result == s).count();
            println!("{} allowed, {} denied, {} skipped", count("allowed"), count("denied"), count("skipped"));
        }
    }
    Ok(i32::from(denied))
}
