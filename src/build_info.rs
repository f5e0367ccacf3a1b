//! What this build is: the crate version (the one version source: the image
//! tag, `metadata.yml` and the Kubewarden policies are checked against it) and
//! the git commit `build.rs` recorded ("unknown" outside a git checkout).

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit (12 hex digits), or "unknown".
pub const COMMIT: &str = env!("HCP_GIT_COMMIT");
/// `--version`: `<version> (commit <commit>)`.
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("HCP_GIT_COMMIT"), ")");
