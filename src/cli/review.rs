//! `review`: one AdmissionReview in (file or stdin, JSON or YAML), the
//! response AdmissionReview out — the same code path the server runs. The
//! presigned URL inside a mutation's patch is redacted unless
//! `--show-secrets` is given.

use std::{io::Write as _, path::PathBuf};

use hcp_etcd_admission::admission::{self, DecisionInput, ParsedReview};

use super::{input, redact, ClockArgs, DecisionArgs};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  hcp-etcd-admission review --now 2026-11-29T15:00:00Z tests/reviews/hcpetcdbackup-create-s3.json\n  kubectl create -f backup.yaml --dry-run=server  # sends the same review in a cluster"
)]
pub struct ReviewArgs {
    #[command(flatten)]
    pub decision: DecisionArgs,
    #[command(flatten)]
    pub clock: ClockArgs,
    /// Print the patch with the presigned restore URL as the apiserver
    /// receives it (a bearer credential); by default it is shown as
    /// scheme://host/path?<redacted>.
    #[arg(long)]
    pub show_secrets: bool,
    /// The AdmissionReview file; `-` or nothing reads stdin.
    #[arg(value_name = "FILE", default_value = "-")]
    pub file: PathBuf,
}

/// Returns the process exit code.
pub fn run(args: &ReviewArgs) -> anyhow::Result<i32> {
    admission::warm_up()?;
    let settings = args.decision.settings()?;
    let now = args.clock.now()?;
    let docs = input::read_documents(&args.file)?;
    let [doc] = docs.as_slice() else {
        anyhow::bail!("{}: expected exactly one AdmissionReview, found {} documents", args.file.display(), docs.len());
    };
    let context = args.decision.context()?;
    let reviewed = ParsedReview::parse(doc.clone()).and_then(|parsed| {
        // What the decision reads, read first from the context files.
        let answers = parsed.plan(&settings, None).read_from(&context);
        let decision = DecisionInput { settings: &settings, lookup: Some(&answers), now, expect: None };
        admission::review_parsed(&parsed, &decision)
    });
    match reviewed.map(|r| r.review) {
        Ok(mut response) => {
            if !args.show_secrets {
                redact::review(&mut response);
            }
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string_pretty(&response)?)?;
            out.flush()?;
            Ok(0)
        }
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            Ok(2)
        }
    }
}
