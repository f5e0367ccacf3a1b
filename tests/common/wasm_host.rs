//! A waPC host for the policy module on wasmi (a real Wasm interpreter),
//! implementing what Kubewarden's policy-evaluator offers a waPC guest: the
//! `wapc` imports, the WASI preview 1 functions the Rust std guest imports
//! (deterministic: the clock is the test's `now`), and host calls, answered by
//! a callback (the context-aware `list_resources_by_namespace`).
#![allow(dead_code)]

use std::path::PathBuf;

use wasmi::{Caller, Engine, Extern, Instance, Linker, Memory, Module, Store, TypedFunc};

/// Answers a host call `(binding, namespace, operation, payload)`.
pub type HostCallHandler = Box<dyn FnMut(&str, &str, &str, &[u8]) -> Result<Vec<u8>, String>>;

pub struct HostState {
    op: Vec<u8>,
    payload: Vec<u8>,
    response: Option<Vec<u8>>,
    error: Option<Vec<u8>>,
    host_response: Vec<u8>,
    host_error: Vec<u8>,
    pub host_calls: Vec<(String, String, String, Vec<u8>)>,
    handler: HostCallHandler,
    /// Unix seconds the guest's clock reads.
    pub now: i64,
    pub stderr: Vec<u8>,
}

pub struct Policy {
    store: Store<HostState>,
    instance: Instance,
    guest_call: TypedFunc<(i32, i32), i32>,
}

/// Where scripts/build-wasm.sh puts the module.
pub fn module_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HCP_POLICY_WASM") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/hcp-etcd-admission/target")
    });
    target.join("policy/hcp-etcd-admission.wasm")
}

fn memory(caller: &Caller<'_, HostState>) -> Memory {
    caller.get_export("memory").and_then(Extern::into_memory).expect("guest exports memory")
}

fn read(caller: &Caller<'_, HostState>, ptr: i32, len: i32) -> Vec<u8> {
    let mut buf = vec![0u8; len.max(0) as usize];
    memory(caller).read(caller, ptr as usize, &mut buf).expect("guest memory read");
    buf
}

fn write(caller: &mut Caller<'_, HostState>, ptr: i32, data: &[u8]) {
    let mem = memory(caller);
    mem.write(caller, ptr as usize, data).expect("guest memory write");
}

fn write_u32(caller: &mut Caller<'_, HostState>, ptr: i32, v: u32) {
    write(caller, ptr, &v.to_le_bytes());
}

impl Policy {
    pub fn load(bytes: &[u8], handler: HostCallHandler) -> Result<Self, String> {
        let engine = Engine::default();
        let module = Module::new(&engine, bytes).map_err(|e| format!("module: {e}"))?;
        let state = HostState {
            op: vec![],
            payload: vec![],
            response: None,
            error: None,
            host_response: vec![],
            host_error: vec![],
            host_calls: vec![],
            handler,
            now: 0,
            stderr: vec![],
        };
        let mut store = Store::new(&engine, state);
        let mut linker = <Linker<HostState>>::new(&engine);
        let w = |e: wasmi::errors::LinkerError| e.to_string();
        // ---- waPC
        linker
            .func_wrap("wapc", "__guest_request", |mut c: Caller<'_, HostState>, op_ptr: i32, ptr: i32| {
                let (op, payload) = (c.data().op.clone(), c.data().payload.clone());
                write(&mut c, op_ptr, &op);
                write(&mut c, ptr, &payload);
            })
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__guest_response", |mut c: Caller<'_, HostState>, ptr: i32, len: i32| {
                let data = read(&c, ptr, len);
                c.data_mut().response = Some(data);
            })
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__guest_error", |mut c: Caller<'_, HostState>, ptr: i32, len: i32| {
                let data = read(&c, ptr, len);
                c.data_mut().error = Some(data);
            })
            .map_err(w)?;
        linker
            .func_wrap(
                "wapc",
                "__host_call",
                |mut c: Caller<'_, HostState>,
                 bd: i32,
                 bdl: i32,
                 ns: i32,
                 nsl: i32,
                 op: i32,
                 opl: i32,
                 p: i32,
                 pl: i32|
                 -> i32 {
                    let s = |v: Vec<u8>| String::from_utf8_lossy(&v).into_owned();
                    let (binding, namespace, operation) =
                        (s(read(&c, bd, bdl)), s(read(&c, ns, nsl)), s(read(&c, op, opl)));
                    let payload = read(&c, p, pl);
                    c.data_mut().host_calls.push((
                        binding.clone(),
                        namespace.clone(),
                        operation.clone(),
                        payload.clone(),
                    ));
                    match (c.data_mut().handler)(&binding, &namespace, &operation, &payload) {
                        Ok(r) => {
                            c.data_mut().host_response = r;
                            1
                        }
                        Err(e) => {
                            c.data_mut().host_error = e.into_bytes();
                            0
                        }
                    }
                },
            )
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__host_response_len", |c: Caller<'_, HostState>| c.data().host_response.len() as i32)
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__host_response", |mut c: Caller<'_, HostState>, ptr: i32| {
                let data = c.data().host_response.clone();
                write(&mut c, ptr, &data);
            })
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__host_error_len", |c: Caller<'_, HostState>| c.data().host_error.len() as i32)
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__host_error", |mut c: Caller<'_, HostState>, ptr: i32| {
                let data = c.data().host_error.clone();
                write(&mut c, ptr, &data);
            })
            .map_err(w)?;
        linker
            .func_wrap("wapc", "__console_log", |mut c: Caller<'_, HostState>, ptr: i32, len: i32| {
                let data = read(&c, ptr, len);
                c.data_mut().stderr.extend(data);
            })
            .map_err(w)?;
        // ---- WASI preview 1 (what a Rust std guest imports)
        const W: &str = "wasi_snapshot_preview1";
        linker
            .func_wrap(W, "random_get", |mut c: Caller<'_, HostState>, ptr: i32, len: i32| -> i32 {
                // Deterministic bytes: HashMap seeds only.
                let bytes: Vec<u8> = (0..len.max(0) as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
                write(&mut c, ptr, &bytes);
                0
            })
            .map_err(w)?;
        linker
            .func_wrap(
                W,
                "clock_time_get",
                |mut c: Caller<'_, HostState>, _id: i32, _precision: i64, out: i32| -> i32 {
                    let ns = (c.data().now.max(0) as u64).saturating_mul(1_000_000_000);
                    write(&mut c, out, &ns.to_le_bytes());
                    0
                },
            )
            .map_err(w)?;
        linker
            .func_wrap(W, "environ_sizes_get", |mut c: Caller<'_, HostState>, count: i32, size: i32| -> i32 {
                write_u32(&mut c, count, 0);
                write_u32(&mut c, size, 0);
                0
            })
            .map_err(w)?;
        linker.func_wrap(W, "environ_get", |_: Caller<'_, HostState>, _: i32, _: i32| -> i32 { 0 }).map_err(w)?;
        linker
            .func_wrap(
                W,
                "fd_write",
                |mut c: Caller<'_, HostState>, _fd: i32, iovs: i32, n: i32, written: i32| -> i32 {
                    let mut total = 0u32;
                    for i in 0..n {
                        let iov = read(&c, iovs + i * 8, 8);
                        let ptr = i32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
                        let len = i32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
                        let data = read(&c, ptr, len);
                        total += data.len() as u32;
                        c.data_mut().stderr.extend(data);
                    }
                    write_u32(&mut c, written, total);
                    0
                },
            )
            .map_err(w)?;
        linker
            .func_wrap(W, "proc_exit", |_: Caller<'_, HostState>, code: i32| -> Result<(), wasmi::Error> {
                Err(wasmi::Error::i32_exit(code))
            })
            .map_err(w)?;
        linker.func_wrap(W, "sched_yield", |_: Caller<'_, HostState>| -> i32 { 0 }).map_err(w)?;
        for import in module.imports() {
            if linker.get(&store, import.module(), import.name()).is_none()
                && !matches!((import.module(), import.name()), ("wapc", _) | (W, _))
            {
                return Err(format!(
                    "the module imports {}::{}, which this host does not provide",
                    import.module(),
                    import.name()
                ));
            }
        }
        let instance = linker.instantiate_and_start(&mut store, &module).map_err(|e| format!("instantiate: {e}"))?;
        if let Ok(init) = instance.get_typed_func::<(), ()>(&store, "_initialize") {
            init.call(&mut store, ()).map_err(|e| format!("_initialize: {e}"))?;
        }
        let wapc_init =
            instance.get_typed_func::<(), ()>(&store, "wapc_init").map_err(|e| format!("wapc_init: {e}"))?;
        wapc_init.call(&mut store, ()).map_err(|e| format!("wapc_init: {e}"))?;
        let guest_call = instance
            .get_typed_func::<(i32, i32), i32>(&store, "__guest_call")
            .map_err(|e| format!("__guest_call: {e}"))?;
        Ok(Self { store, instance, guest_call })
    }

    pub fn set_now(&mut self, now: i64) {
        self.store.data_mut().now = now;
    }

    pub fn host_calls(&self) -> &[(String, String, String, Vec<u8>)] {
        &self.store.data().host_calls
    }

    /// Calls a guest operation: Ok(response) or Err(guest error text).
    pub fn call(&mut self, op: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        {
            let s = self.store.data_mut();
            s.op = op.as_bytes().to_vec();
            s.payload = payload.to_vec();
            s.response = None;
            s.error = None;
        }
        let rc = self.guest_call.call(&mut self.store, (op.len() as i32, payload.len() as i32)).map_err(|e| {
            format!("trap in {op}: {e}; guest stderr: {}", String::from_utf8_lossy(&self.store.data().stderr))
        })?;
        let s = self.store.data_mut();
        if rc == 1 {
            Ok(s.response.take().unwrap_or_default())
        } else {
            Err(String::from_utf8_lossy(&s.error.take().unwrap_or_default()).into_owned())
        }
    }

    pub fn instance(&self) -> &Instance {
        &self.instance
    }
}
