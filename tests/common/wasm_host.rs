//! The policy module on the stack Kubewarden runs it on: wasmtime through
//! wapc's `wasmtime-provider` (what policy-evaluator uses), one **fresh
//! instance** per [`PolicyModule::instance`], rehydrated from a
//! pre-instantiated module exactly as policy-server does for every request.
//! Host calls (the context-aware `list_resources_by_namespace`) are answered
//! by a callback and recorded.
//!
//! The only thing this host does that Kubewarden's does not: it can pin the
//! guest's clock. wasmtime-provider exposes no WASI clock setting, only the
//! environment, so the policy reads `HCP_ETCD_ADMISSION_NOW` (Unix seconds)
//! when present (src/wasm.rs); policy-evaluator passes no environment, so in a
//! cluster the WASI clock is used.
#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use wasmtime_provider::{wasmtime, WasmtimeEngineProviderBuilder, WasmtimeEngineProviderPre};

/// The environment variable through which a host pins the policy's clock (src/wasm.rs).
pub const NOW_ENV: &str = "HCP_ETCD_ADMISSION_NOW";

/// Answers a host call `(binding, namespace, operation, payload)`.
pub type HostCallHandler = Box<dyn Fn(&str, &str, &str, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// Host calls the guest made: `(binding, namespace, operation, payload)`.
pub type HostCalls = Arc<Mutex<Vec<(String, String, String, Vec<u8>)>>>;

/// Where scripts/build-wasm.sh puts the shipped (pre-initialised) module.
pub fn module_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HCP_POLICY_WASM") {
        return PathBuf::from(p);
    }
    policy_dir().join("hcp-etcd-admission.wasm")
}

/// The module as compiled, before pre-initialisation (kept by scripts/build-wasm.sh).
pub fn uninitialised_module_path() -> PathBuf {
    policy_dir().join("hcp-etcd-admission.uninitialised.wasm")
}

/// The benchmark's yardstick, a minimal Kubewarden SDK policy (scripts/bench-decision.sh builds it).
pub fn yardstick_module_path() -> PathBuf {
    policy_dir().join("kw-yardstick.wasm")
}

fn policy_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/hcp-etcd-admission/target")
    });
    target.join("policy")
}

/// A compiled policy module (compiled once; instances are cheap).
pub struct PolicyModule {
    engine: wasmtime::Engine,
    module: wasmtime::Module,
}

/// One instance of the policy, as Kubewarden makes per evaluation.
pub struct Policy {
    host: wapc::WapcHost,
    calls: HostCalls,
}

impl PolicyModule {
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("{}: {e}; build it with scripts/build-wasm.sh", path.display()))?;
        Self::from_bytes(&bytes)
    }

    /// `HCP_PERFMAP` set: the engine writes `/tmp/perf-<pid>.map`, so `perf`
    /// and `fresh_profile --first-touch` name the guest's functions (an
    /// unstripped module keeps their names); code and timings are unchanged.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let engine = if std::env::var_os("HCP_PERFMAP").is_some() {
            let mut config = wasmtime::Config::new();
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
            wasmtime::Engine::new(&config).map_err(|e| format!("engine: {e}"))?
        } else {
            wasmtime::Engine::default()
        };
        let module = wasmtime::Module::new(&engine, bytes).map_err(|e| format!("module: {e}"))?;
        Ok(Self { engine, module })
    }

    pub fn module(&self) -> &wasmtime::Module {
        &self.module
    }

    /// A pre-instantiated module (policy-server keeps one per policy); `now`
    /// pins the guest's clock, `None` leaves the WASI clock.
    pub fn pre(&self, now: Option<i64>) -> Result<WasmtimeEngineProviderPre, String> {
        let mut builder = WasmtimeEngineProviderBuilder::new().engine(self.engine.clone()).module(self.module.clone());
        if let Some(now) = now {
            builder = builder.wasi_params(wapc::WasiParams {
                env_vars: vec![(NOW_ENV.into(), now.to_string())],
                ..Default::default()
            });
        }
        builder.build_pre().map_err(|e| format!("pre-instantiate: {e}"))
    }

    /// A fresh instance, initialised (`wapc_init`) and ready for calls.
    pub fn instance(&self, now: Option<i64>, handler: HostCallHandler) -> Result<Policy, String> {
        Policy::rehydrate(&self.pre(now)?, handler)
    }
}

impl Policy {
    /// A fresh instance from `pre`: what policy-server does per request.
    pub fn rehydrate(pre: &WasmtimeEngineProviderPre, handler: HostCallHandler) -> Result<Self, String> {
        let provider = pre.rehydrate(None).map_err(|e| format!("rehydrate: {e}"))?;
        let calls = HostCalls::default();
        let seen = Arc::clone(&calls);
        let callback: Box<wapc::HostCallback> = Box::new(move |_id, binding, namespace, operation, payload| {
            if let Ok(mut c) = seen.lock() {
                c.push((binding.to_string(), namespace.to_string(), operation.to_string(), payload.to_vec()));
            }
            handler(binding, namespace, operation, payload).map_err(Into::into)
        });
        let host = wapc::WapcHost::new(Box::new(provider), Some(callback)).map_err(|e| format!("wapc_init: {e}"))?;
        Ok(Self { host, calls })
    }

    /// Calls a guest operation: Ok(response) or Err(the guest's error).
    pub fn call(&self, op: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        self.host.call(op, payload).map_err(|e| e.to_string())
    }

    pub fn host_calls(&self) -> Vec<(String, String, String, Vec<u8>)> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// Serves `list_resources_by_namespace` from fixtures, as policy-server does
/// from its reflectors (including a `metadata.name=` field selector and an
/// equality label selector), and
/// `get_resource` from the same fixtures. A case without context objects
/// models a policy that is not context aware for the backup preflight's
/// kinds: those calls fail, as policy-server refuses them.
pub fn context_handler(objects: Vec<serde_json::Value>) -> HostCallHandler {
    cache_and_live_handler(objects.clone(), objects)
}

/// As policy-server with a stale reflector: `list_resources_by_namespace`
/// answers from `cached`, `get_resource` (the policy always asks with
/// `disable_cache`: checked) from `live`, the apiserver's objects; a name
/// `live` lacks is an error, as a 404 is.
pub fn cache_and_live_handler(cached: Vec<serde_json::Value>, live: Vec<serde_json::Value>) -> HostCallHandler {
    use serde_json::{json, Value};
    let same_kind = |o: &Value, req: &Value| {
        o["kind"] == req["kind"]
            && o["apiVersion"] == req["api_version"]
            && o["metadata"]["namespace"] == req["namespace"]
    };
    Box::new(move |binding, ns, op, payload| {
        let req: Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        match (binding, ns, op) {
            ("kubewarden", "kubernetes", "list_resources_by_namespace") => {
                if cached.is_empty() && live.is_empty() && req["kind"] != "HostedControlPlane" {
                    return Err(format!("{} is not in the policy's contextAwareResources", req["kind"]));
                }
                let name = req["field_selector"].as_str().and_then(|f| f.strip_prefix("metadata.name="));
                // `k=v[,k=v]` equality selectors, as the policy sends them.
                let labelled = |o: &Value| {
                    req["label_selector"].as_str().is_none_or(|sel| {
                        sel.split(',').all(|kv| {
                            kv.split_once('=').is_some_and(|(k, v)| o["metadata"]["labels"][k].as_str() == Some(v))
                        })
                    })
                };
                let items: Vec<&Value> = cached
                    .iter()
                    .filter(|o| same_kind(o, &req) && name.is_none_or(|n| o["metadata"]["name"] == n) && labelled(o))
                    .collect();
                Ok(serde_json::to_vec(
                    &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                )
                .unwrap_or_default())
            }
            ("kubewarden", "kubernetes", "get_resource") => {
                if req["disable_cache"] != true {
                    return Err("get_resource without disable_cache: policy-server would answer from its cache".into());
                }
                let name = &req["name"];
                let found = live.iter().find(|o| same_kind(o, &req) && &o["metadata"]["name"] == name);
                match found {
                    Some(o) => Ok(serde_json::to_vec(o).unwrap_or_default()),
                    // As policy-server passes kube-rs's error on.
                    None => {
                        let plural = format!("{}s", req["kind"].as_str().unwrap_or_default().to_lowercase());
                        let msg = format!("{plural} {name} not found");
                        Err(format!(
                            "ApiError: {msg}: NotFound (ErrorResponse {{ status: \"Failure\", message: {msg:?}, reason: \"NotFound\", code: 404 }})"
                        ))
                    }
                }
            }
            _ => Err(format!("unexpected host call {binding}/{ns}/{op}")),
        }
    })
}
