//! Records the git commit the binary is built from (`HCP_GIT_COMMIT`), for
//! `--version`, the start-up log and the `build_info` metric. Outside a git
//! checkout (a source tarball, the image build without `.git`) it is
//! "unknown"; `HCP_GIT_COMMIT` in the build environment wins over git.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=HCP_GIT_COMMIT");
    let from_env = std::env::var("HCP_GIT_COMMIT").ok().filter(|s| !s.trim().is_empty());
    let commit = from_env.or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuild when HEAD moves (a worktree's git dir is not ./.git).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            println!("cargo:rerun-if-changed={common}/packed-refs");
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                println!("cargo:rerun-if-changed={common}/{r}");
            }
        }
    }
    let commit: String = commit
        .unwrap_or_else(|| "unknown".to_string())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(40)
        .collect();
    let commit = if commit.is_empty() { "unknown".to_string() } else { commit };
    println!("cargo:rustc-env=HCP_GIT_COMMIT={commit}");
}
