//! The real components built from the Go module proxy by `scripts/go-tools.sh`
//! (kube-apiserver 1.34/1.35, etcd 3.5/3.6/3.7), found in
//! `$HOME/.cache/hcp-etcd-admission/tools/<name>/` (or `$HCP_CACHE/tools/`).
//! Nothing here builds them: a test names what it needs through [`go_tool`]
//! and `env::ready` says how to get it when it is missing.

use std::path::PathBuf;

use super::env::Need;

/// The cache root scripts/go-tools.sh writes into.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HCP_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/hcp-etcd-admission")
}

/// The directory holding tool `name`'s binaries (e.g. `kube-1.35`, `etcd-3.6`).
pub fn tool_dir(name: &str) -> PathBuf {
    cache_dir().join("tools").join(name)
}

/// A binary of a Go-built tool, e.g. `go_bin("etcd-3.6", "etcdutl")`.
pub fn go_bin(name: &str, bin: &str) -> PathBuf {
    tool_dir(name).join(bin)
}

/// The need for one Go-built binary, with how to build it.
pub fn go_tool(name: &'static str, bin: &'static str) -> Need {
    Need::File(
        go_bin(name, bin),
        "scripts/go-tools.sh (builds kube-apiserver and etcd 3.5/3.6/3.7 from the Go module proxy)",
    )
}
