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

use clap::{CommandFactory as _, Parser, Subcommand};

/// Writes the completion script for `shell` to stdout.
fn completion(shell: clap_complete::Shell) -> anyhow::Result<i32> {
    use std::io::Write as _;
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "hcp-etcd-admission", &mut buf);
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()?;
    Ok(0)
}

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
    #[cfg(feature = "server")]
    Serve(Box<cli::serve::ServeArgs>),
    /// Generate a CA and serving certificate for the webhook Service.
    #[cfg(feature = "server")]
    Certs(cli::certs::CertsArgs),
    /// Answer one AdmissionReview (JSON or YAML) exactly as the webhook would.
    Review(cli::review::ReviewArgs),
    /// Check every object in YAML/JSON files, directories or stdin (as a CREATE, or with --audit as
    /// the next write of a live object); exit 1 if any is denied, 2 on an input error.
    Check(cli::check::CheckArgs),
    /// Write (or --check) the generated HCPEtcdBackup CRD in crds/.
    Crd(cli::crd::CrdArgs),
    /// Print the rule catalog (the README table) as Markdown, JSON or YAML.
    Rules(cli::rules::RulesArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  source <(hcp-etcd-admission completion bash)\n  hcp-etcd-admission completion zsh > \"${fpath[1]}/_hcp-etcd-admission\"\n  hcp-etcd-admission completion fish > ~/.config/fish/completions/hcp-etcd-admission.fish"
    )]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        #[cfg(feature = "server")]
        Command::Serve(a) => cli::serve::run(a),
        #[cfg(feature = "server")]
        Command::Certs(a) => cli::certs::run(a),
        Command::Review(a) => cli::review::run(a),
        Command::Check(a) => cli::check::run(a),
        Command::Crd(a) => cli::crd::run(a),
        Command::Rules(a) => cli::rules::run(a),
        Command::Completion { shell } => completion(*shell),
    };
    match result {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) if cli::is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
