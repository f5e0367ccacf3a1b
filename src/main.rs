//! `hcp-etcd-admission`: the binary. Subcommands are thin shells over the
//! library's decision core.

mod cli;

/// The server allocates per request (the JSON tree of the review, CEL values,
/// the answer): with glibc malloc a fifth of `serve`'s CPU went to
/// malloc/free under scripts/bench-load.sh. mimalloc nearly doubled `serve`'s
/// requests/s there, level with jemalloc and cheaper to build (BENCHMARKS.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "hcp-etcd-admission",
    version = hcp_etcd_admission::build_info::LONG_VERSION,
    about = "Admission webhooks and offline checks for HyperShift etcd backup and restore"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the admission webhooks over HTTPS.
    Serve(Box<cli::serve::ServeArgs>),
    /// Generate a CA and serving certificate for the webhook Service.
    Certs(cli::certs::CertsArgs),
    /// Answer one AdmissionReview (JSON or YAML) exactly as the webhook would.
    Review(cli::review::ReviewArgs),
    /// Check every object in YAML/JSON files as a CREATE; exit 1 if any is denied.
    Check(cli::check::CheckArgs),
    /// Write (or --check) the generated HCPEtcdBackup CRD in crds/.
    Crd(cli::crd::CrdArgs),
    /// Print the rule catalog (the README table) as Markdown.
    #[command(after_help = "Example:\n  hcp-etcd-admission rules > rules.md")]
    Rules,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Serve(a) => cli::serve::run(a),
        Command::Certs(a) => cli::certs::run(a),
        Command::Review(a) => cli::review::run(a),
        Command::Check(a) => cli::check::run(a),
        Command::Crd(a) => cli::crd::run(a),
        Command::Rules => hcp_etcd_admission::catalog::markdown_table().map_err(anyhow::Error::from).map(|table| {
            print!("{table}");
            0
        }),
    };
    match result {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
