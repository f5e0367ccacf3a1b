//! The waPC guest exports of the Kubewarden policy (`wasm32-wasip1`, feature
//! `wasm`): `validate`, `validate_settings`, `protocol_version`. Bytes in,
//! bytes out; the HostedControlPlane comes from the context-aware host
//! capability `kubewarden/kubernetes/list_resources_by_namespace`, read again
//! with `get_resource` (`disable_cache`) where the core asks for a live answer
//! (`fresh.rs`).

use kubewarden_policy_sdk::wapc_guest::{self as guest, CallResult};
use serde_json::Value;

use crate::{
    kubewarden,
    lookup::{Freshness, Lookup, LookupError},
};

/// HostedControlPlanes through Kubewarden's Kubernetes host capability.
struct HostLookup;

impl Lookup for HostLookup {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        let body = serde_json::to_vec(&kubewarden::list_hcps_request(namespace))
            .map_err(|e| LookupError::Failed(e.to_string()))?;
        let answer =
            guest::host_call("kubewarden", "kubernetes", "list_resources_by_namespace", &body).map_err(|e| {
                LookupError::Failed(format!(
                    "the Kubernetes host capability failed or is missing (is the policy context aware, with hostedcontrolplanes in contextAwareResources?): {e}"
                ))
            })?;
        kubewarden::list_items(&answer).map_err(LookupError::Failed)
    }

    fn hosted_control_planes_as(&self, namespace: &str, freshness: &Freshness) -> Result<Vec<Value>, LookupError> {
        kubewarden::fresh::hosted_control_planes(
            namespace,
            freshness,
            || self.hosted_control_planes(namespace),
            |name| {
                let answer = kubernetes("get_resource", &kubewarden::fresh::live_hcp_request(namespace, name))?;
                serde_json::from_slice(&answer)
                    .map_err(|e| LookupError::Failed(format!("the host's answer is not JSON: {e}")))
            },
        )
    }

    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        let answer = list(&kubewarden::list_request(crate::api::API_VERSION, "HCPEtcdBackup", namespace, None))?;
        kubewarden::list_items(&answer).map_err(LookupError::Failed)
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        // The labelled Secrets of the namespace: one reflector in
        // policy-server, whatever names requests carry.
        let answer = list(&kubewarden::credentials_list_request(namespace))?;
        if let Some(secret) = kubewarden::single_item(&answer, name).map_err(LookupError::Failed)? {
            return Ok(Some(secret));
        }
        // Not labelled, or absent: one live GET tells (no reflector). Only
        // the apiserver's NotFound means absent; any other failure (RBAC,
        // a timeout) leaves the Secret not checked, and says so.
        let body = serde_json::to_vec(&kubewarden::live_secret_request(namespace, name))
            .map_err(|e| LookupError::Failed(e.to_string()))?;
        match guest::host_call("kubewarden", "kubernetes", "get_resource", &body) {
            Ok(answer) => serde_json::from_slice(&answer)
                .map(Some)
                .map_err(|e| LookupError::Failed(format!("the host's answer is not JSON: {e}"))),
            Err(e) => kubewarden::absent_or_failed(&e.to_string()),
        }
    }

    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        let answer = list(&kubewarden::list_request("apps/v1", "StatefulSet", namespace, Some("etcd")))?;
        kubewarden::single_item(&answer, "etcd").map_err(LookupError::Failed)
    }
}

/// One `list_resources_by_namespace` host call. policy-server keeps a
/// reflector per namespace listed, for its life: a namespace no apiserver
/// would send (not a DNS-1123 label) is never listed.
fn list(request: &Value) -> Result<Vec<u8>, LookupError> {
    let ns = request.get("namespace").and_then(Value::as_str).unwrap_or_default();
    if !crate::api::names::is_dns1123_label(ns) {
        return Err(LookupError::Failed(format!(
            "namespace {:?} is not a Kubernetes namespace name; not listed",
            ns.chars().take(64).collect::<String>()
        )));
    }
    kubernetes("list_resources_by_namespace", request)
}

/// One host call of Kubewarden's Kubernetes capability (`op`: a list or a get).
fn kubernetes(op: &str, request: &Value) -> Result<Vec<u8>, LookupError> {
    let body = serde_json::to_vec(request).map_err(|e| LookupError::Failed(e.to_string()))?;
    guest::host_call("kubewarden", "kubernetes", op, &body).map_err(|e| {
        LookupError::Failed(format!(
            "the Kubernetes host capability ({op}) is unavailable or failed (is the policy context aware?): {e}"
        ))
    })
}

/// Pins the clock (Unix seconds) for hosts that cannot set the WASI clock
/// (wasmtime-provider, which the tests use, passes only arguments and
/// environment). The WASI host owns the clock either way; Kubewarden's
/// policy-evaluator passes no environment, so there the WASI clock is used.
pub const NOW_ENV: &str = "HCP_ETCD_ADMISSION_NOW";

/// Read once per request, never during pre-initialisation; a pinned value
/// that is not Unix seconds is a clock error (the expiry rule denies with it).
fn now() -> crate::time::Now {
    match std::env::var(NOW_ENV) {
        Ok(v) => v.parse().map_err(|_| crate::time::ClockError("HCP_ETCD_ADMISSION_NOW is not Unix seconds")),
        Err(_) => crate::time::system_now(),
    }
}

fn validate(payload: &[u8]) -> CallResult {
    let response = kubewarden::validate(payload, Some(&HostLookup), now());
    Ok(kubewarden::encode(&response, payload.len())?)
}

fn validate_settings(payload: &[u8]) -> CallResult {
    Ok(serde_json::to_vec(&kubewarden::validate_settings(payload))?)
}

/// Set once the operations are registered: in the shipped module, by the
/// pre-initialisation, so a fresh instance's `wapc_init` writes nothing
/// (registering again rewrites the registry's pages: copy-on-write faults).
static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers the waPC operations (once per instance, or once in the snapshot).
pub fn register() {
    if REGISTERED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    guest::register_function("validate", validate);
    guest::register_function("validate_settings", validate_settings);
    guest::register_function("protocol_version", kubewarden_policy_sdk::protocol_version_guest);
    REGISTERED.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register();
}
