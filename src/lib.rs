//! hcp-etcd-admission: guards the etcd backup and restore path of HyperShift
//! hosted control planes.
//!
//! Layers (dependencies point down only; `tests/layers.rs` fails on an
//! upward import): [`api`] (types, CEL rules, field readers, object names)
//! → [`schema`] (apiserver-equivalent schema + CEL evaluation), [`lookup`]
//! (the port the decisions read cluster objects through), [`rules`] (what
//! CEL cannot express), [`mutate`] (the etcd-init injection) → [`admission`]
//! (an AdmissionReview parsed once, the reads its decision needs planned,
//! the typed decision, the AdmissionReview out) → shells: `server` (feature
//! `server`), `kubewarden` (feature `wasm`) and the CLI in `src/cli/`. Each
//! shell reads its input, carries out the core's read plan with its own
//! source, calls the core and writes the output.
//!
//! The decision core (everything but the shells) is pure: no I/O, no clock,
//! no tokio; `cargo build --lib --target wasm32-wasip1 --no-default-features`
//! builds exactly it. [`time::system_now`] is the one clock read, called by
//! the shells once per request.

pub mod admission;
pub mod api;
pub mod build_info;
pub mod catalog;
pub mod crd;
/// Embedded files, laid out apart from the literals (fresh Wasm instances read fewer pages).
pub mod embedded_text;
pub mod enforcement;
pub mod finding;
/// JSON pointers read without allocating.
pub mod json_at;
#[cfg(feature = "wasm")]
pub mod kubewarden;
/// The policy module's allocator: the system one until the snapshot, then
/// fresh pages only (src/kubewarden/arena.rs says why).
#[cfg(all(feature = "wasm", target_arch = "wasm32"))]
#[global_allocator]
static ALLOC: kubewarden::arena::global::PolicyAlloc = kubewarden::arena::global::PolicyAlloc;
mod labels;
pub mod lookup;
pub mod mutate;
pub mod rules;
pub mod schema;
#[cfg(feature = "server")]
pub mod server;
pub mod settings;
pub mod time;
