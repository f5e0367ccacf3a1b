//! hcp-etcd-admission: guards the etcd backup and restore path of HyperShift
//! hosted control planes.
//!
//! Layers (dependencies point down only): [`api`] (types and CEL rules) →
//! [`schema`] (apiserver-equivalent schema + CEL evaluation), [`rules`] (what
//! CEL cannot express) → [`admission`] (AdmissionReview in, response out) →
//! shells (the CLI in `main.rs`, the server, the Wasm policy). Everything in
//! this library is pure: no I/O, no clock, no tokio; it builds for
//! `wasm32-wasip1`.

pub mod admission;
pub mod api;
pub mod catalog;
#[cfg(feature = "cli")]
pub mod certs;
pub mod crd;
pub mod kubewarden;
pub mod lookup;
pub mod mutate;
pub mod preinit;
pub mod rules;
pub mod schema;
#[cfg(feature = "server")]
pub mod server;
pub mod settings;
pub mod time;
#[cfg(all(feature = "wasm", target_arch = "wasm32"))]
pub mod wasm;
