//! Where a fresh Kubewarden instance's time goes (issue #35), per step, with
//! nothing else running in the process: the shipped module against the
//! yardstick (the smallest SDK policy), interleaved call by call so both see
//! the same machine.
//!
//! ```sh
//! scripts/bench-decision.sh --quick    # builds the modules
//! cargo bench --bench fresh_profile [-- calls]
//! cargo bench --bench fresh_profile -- --split         # set-up / first call / teardown
//! cargo bench --bench fresh_profile -- --pages         # pages written, 64 KiB windows read
//! cargo bench --bench fresh_profile -- --first-touch 0 # what each page is touched for
//! cargo bench --bench fresh_profile -- --only 0           # one scenario, fresh, for perf
//! cargo bench --bench fresh_profile -- --only-yardstick 0 # the yardstick on it
//! cargo bench --bench fresh_profile -- --only-warm 0      # one scenario, warm
//! ```
//!
//! `--first-touch` names guest functions when `HCP_POLICY_WASM` points at a
//! module built with its names
//! (`HCP_POLICY_OUT=/tmp/kw CARGO_PROFILE_WASM_STRIP=false scripts/build-wasm.sh`);
//! `HCP_PERFMAP=1` names them for `perf` too.
//!
//! Prints, per module and request: median µs and minor page faults of
//! (1) a fresh instance with `wapc_init` and no call, (2) a fresh instance
//! plus the first `validate` (what policy-server pays per request), and
//! (3) `validate` on a warm instance.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;
// Reads x86-64 registers from the signal context: Linux on x86-64 only.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "support/first_touch.rs"]
mod first_touch;
#[allow(dead_code)]
#[path = "support/scenarios.rs"]
mod scenarios;
#[path = "../tests/common/wasm_host.rs"]
mod wasm_host;

use std::{hint::black_box, time::Instant};

use serde_json::{json, Value};
use wasm_host::{Policy, PolicyModule};
use wasmtime_provider::WasmtimeEngineProviderPre;

fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(7)?.parse().ok()))
        .unwrap_or(0)
}

/// (median µs, mean faults) of `f` over `n` calls.
fn measure(n: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..n / 10 + 1 {
        f();
    }
    let faults = minor_faults();
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    let faults = (minor_faults() - faults) as f64 / n as f64;
    (median(&mut t), faults)
}

/// The median of `v` (sorted in place; NaN when empty).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn fresh(pre: &WasmtimeEngineProviderPre, context: &[Value], payload: Option<&[u8]>) -> Option<Vec<u8>> {
    let policy = Policy::rehydrate(pre, wasm_host::context_handler(context.to_vec())).ok()?;
    match payload {
        Some(p) => policy.call("validate", p).ok(),
        None => Some(Vec::new()),
    }
}

/// The pages of the live instance's linear memory a call wrote, as offsets
/// (4 KiB pages) from the memory's base: read from /proc/self/maps (the
/// copy-on-write image wasmtime maps from its memfd, and the anonymous
/// mappings around it) and /proc/self/pagemap (present and no longer the
/// file's page: written). Only one instance may be alive.
fn written_pages() -> Option<(Vec<usize>, usize)> {
    written_in().map(|(w, image, _)| (w, image))
}

/// The memory's range in this process as well.
fn written_in() -> Option<(Vec<usize>, usize, (usize, usize))> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let ranges: Vec<(usize, usize, bool, bool)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (a, b) = f.next()?.split_once('-')?;
            let perms = f.next()?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
                perms.starts_with("rw"),
                l.contains("wasm-memory-image"),
            ))
        })
        .collect();
    let image = ranges.iter().position(|r| r.3)?;
    let mut first = image;
    while first > 0 && ranges[first - 1].1 == ranges[first].0 && ranges[first - 1].2 {
        first -= 1;
    }
    let mut last = image;
    while last + 1 < ranges.len() && ranges[last + 1].0 == ranges[last].1 && ranges[last + 1].2 {
        last += 1;
    }
    let (base, end) = (ranges[first].0, ranges[last].1);
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").ok()?;
    pagemap.seek(SeekFrom::Start((base / 4096 * 8) as u64)).ok()?;
    let mut buf = vec![0u8; (end - base) / 4096 * 8];
    pagemap.read_exact(&mut buf).ok()?;
    // Present pages (bit 63): still the image's file page (bit 61, read only) or a private copy (written).
    let pages = |file: u64| -> Vec<usize> {
        buf.chunks_exact(8)
            .enumerate()
            .filter_map(|(i, e)| {
                let v = u64::from_le_bytes(e.try_into().ok()?);
                (v >> 63 == 1 && (v >> 61) & 1 == file).then_some(i)
            })
            .collect()
    };
    let (written, read) = (pages(0), pages(1));
    READ.with(|r| *r.borrow_mut() = read);
    Some((written, (ranges[image].1 - base) / 4096, (base, end)))
}

thread_local! {
    /// The image pages mapped (read, not written) at the last `written_in`.
    static READ: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Byte runs that differ between two copies of a page: (offset, before, after).
fn diff_runs(before: &[u8], after: &[u8]) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
    let mut runs: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        if a != b {
            match runs.last_mut() {
                Some((o, x, y)) if *o + x.len() + 8 >= i => {
                    let from = *o + x.len();
                    x.extend_from_slice(&before[from..=i]);
                    y.extend_from_slice(&after[from..=i]);
                }
                _ => runs.push((i, vec![*a], vec![*b])),
            }
        }
    }
    runs
}

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(2000);
    let load = |p: std::path::PathBuf| {
        PolicyModule::load(&p).unwrap_or_else(|e| panic!("{e}")).pre(None).unwrap_or_else(|e| panic!("{e}"))
    };
    let shipped = load(wasm_host::module_path());
    let yard = load(wasm_host::yardstick_module_path());
    if let Some(i) = std::env::args().position(|a| a == "--only" || a == "--only-yardstick") {
        // One scenario's fresh instance and first validate, n times, nothing
        // else: for a sampling profiler (`perf record … --only 0`); the
        // yardstick's on the same request with `--only-yardstick`.
        let k: usize = std::env::args().nth(i + 1).and_then(|a| a.parse().ok()).unwrap_or(0);
        let Some(s) = scenarios::scenarios().into_iter().nth(k) else { return };
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        let pre = if std::env::args().any(|a| a == "--only-yardstick") { &yard } else { &shipped };
        let (t, f) = measure(n, || drop(black_box(fresh(pre, &s.context, Some(&payload)))));
        println!("{}: {t:.1} µs, {f:.1} faults", s.name);
        return;
    }
    if let Some(i) = std::env::args().position(|a| a == "--only-warm") {
        // The same scenario's `validate` n times on one warm instance: the
        // profile to hold against `--only`'s, function by function.
        let k: usize = std::env::args().nth(i + 1).and_then(|a| a.parse().ok()).unwrap_or(0);
        let Some(s) = scenarios::scenarios().into_iter().nth(k) else { return };
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        let policy = Policy::rehydrate(&shipped, wasm_host::context_handler(s.context.clone())).expect("instance");
        let (t, f) = measure(n, || drop(black_box(policy.call("validate", &payload))));
        println!("{} warm: {t:.1} µs, {f:.1} faults", s.name);
        return;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if let Some(i) = std::env::args().position(|a| a == "--first-touch") {
        // Every page of linear memory the first `validate` of a fresh
        // instance touches, in order, with the address touched first and the
        // guest functions touching it (by name when the module keeps its name
        // section: HCP_POLICY_WASM=<an unstripped build>). A read of the image maps
        // the 64 KiB window around it: this names what pulls each one in.
        let k: usize = std::env::args().nth(i + 1).and_then(|a| a.parse().ok()).unwrap_or(0);
        let Some(s) = scenarios::scenarios().into_iter().nth(k) else { return };
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        // The module compiled here, so that its code's addresses name its functions.
        let module = PolicyModule::load(&wasm_host::module_path()).unwrap_or_else(|e| panic!("{e}"));
        let pre = module.pre(None).unwrap_or_else(|e| panic!("{e}"));
        let policy = Policy::rehydrate(&pre, wasm_host::context_handler(s.context.clone())).expect("instance");
        let Some((_, image, (base, end))) = written_in() else { return };
        let touches = first_touch::record(base, end, || drop(black_box(policy.call("validate", &payload))));
        let names = first_touch::JitNames::of(module.module());
        println!("{}: {} pages touched (the image ends at {:#x})", s.name, touches.len(), image * 4096);
        for t in touches {
            let window = t.offset / 65536;
            let chain: Vec<String> = t.code.iter().map(|pc| names.name(*pc)).collect();
            println!("  {:#08x} window {window:>3}  {}", t.offset, chain.join(" <- "));
        }
        return;
    }
    if std::env::args().any(|a| a == "--split") {
        // Where a fresh instance's time goes: set-up (instance and
        // `wapc_init`), the first `validate`, the teardown (dropping the
        // instance unmaps every page it mapped).
        for (k, s) in scenarios::scenarios().into_iter().enumerate() {
            let payload =
                serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
            for (name, pre) in [("shipped", &shipped), ("yard", &yard)] {
                if name == "yard" && k > 0 {
                    continue;
                }
                let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..n {
                    let t0 = Instant::now();
                    let policy =
                        Policy::rehydrate(pre, wasm_host::context_handler(s.context.clone())).expect("instance");
                    let t1 = Instant::now();
                    let _ = black_box(policy.call("validate", &payload));
                    let t2 = Instant::now();
                    drop(policy);
                    let t3 = Instant::now();
                    a.push((t1 - t0).as_secs_f64() * 1e6);
                    b.push((t2 - t1).as_secs_f64() * 1e6);
                    c.push((t3 - t2).as_secs_f64() * 1e6);
                }
                println!(
                    "{} {name}: set-up {:.1} call {:.1} drop {:.1}",
                    s.name,
                    median(&mut a),
                    median(&mut b),
                    median(&mut c)
                );
            }
        }
        return;
    }
    if std::env::args().any(|a| a == "--touch") {
        // The cost of read faults: the first validate on a fresh instance, with
        // and without every image page read by the host beforehand (untimed).
        for s in scenarios::scenarios() {
            let payload =
                serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
            let mut cold = Vec::new();
            let mut touched = Vec::new();
            let mut second = Vec::new();
            for i in 0..2 * n {
                let policy =
                    Policy::rehydrate(&shipped, wasm_host::context_handler(s.context.clone())).expect("instance");
                if i % 2 == 1 {
                    let Some((_, image, (base, _))) = written_in() else { return };
                    let mut sum = 0u8;
                    for page in 0..image {
                        // SAFETY: the live instance's memory, readable.
                        sum = sum.wrapping_add(unsafe { std::ptr::read_volatile((base + page * 4096) as *const u8) });
                    }
                    black_box(sum);
                }
                let t = Instant::now();
                let _ = black_box(policy.call("validate", &payload));
                let first = t.elapsed().as_secs_f64() * 1e6;
                if i % 2 == 1 {
                    touched.push(first)
                } else {
                    cold.push(first);
                    let t = Instant::now();
                    let _ = black_box(policy.call("validate", &payload));
                    second.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            println!(
                "{}: first validate {:.1} µs, with the image read beforehand {:.1} µs, second validate {:.1} µs",
                s.name,
                median(&mut cold),
                median(&mut touched),
                median(&mut second)
            );
        }
        return;
    }
    if std::env::args().any(|a| a == "--pages") {
        for s in scenarios::scenarios() {
            let payload =
                serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
            let policy = Policy::rehydrate(&shipped, wasm_host::context_handler(s.context.clone())).expect("instance");
            let diff = std::env::args().any(|a| a == "--diff");
            let init = written_pages();
            let Some((_, image, (base, end))) = written_in() else { return };
            // SAFETY: the live instance's linear memory, mapped readable in this process.
            let before = if diff {
                unsafe { std::slice::from_raw_parts(base as *const u8, end - base) }.to_vec()
            } else {
                Vec::new()
            };
            let read_before = READ.with(|r| r.borrow().clone());
            let faults = minor_faults();
            let _ = policy.call("validate", &payload);
            let faults = minor_faults() - faults;
            let call = written_pages();
            let written = call.as_ref().map(|c| c.0.clone()).unwrap_or_default();
            let count = |r: std::ops::Range<usize>| written.iter().filter(|p| r.contains(p)).count();
            let read_after = READ.with(|r| r.borrow().clone());
            let mut windows: Vec<usize> =
                read_after.iter().filter(|p| !read_before.contains(p)).map(|p| p / 16).collect();
            windows.dedup();
            println!(
                "  image pages mapped by reads: {} before the call, {} after; 64 KiB windows newly mapped: {} {:?}",
                read_before.len(),
                read_after.len(),
                windows.len(),
                windows
            );
            println!(
                "{}: {faults} faults in validate; pages written: stack {}, image {} {:?}, fresh {} (after wapc_init: {:?})",
                s.name,
                count(0..256),
                count(256..image),
                written.iter().filter(|p| (256..image).contains(*p)).collect::<Vec<_>>(),
                count(image..usize::MAX),
                init.map(|i| i.0)
            );
            if diff {
                // SAFETY: as above.
                let after = unsafe { std::slice::from_raw_parts(base as *const u8, end - base) };
                for page in call.map(|c| c.0).unwrap_or_default().into_iter().filter(|p| *p >= 256 && *p < image) {
                    let r = page * 4096..(page + 1) * 4096;
                    let runs = diff_runs(&before[r.clone()], &after[r.clone()]);
                    println!(
                        "  page {page}: {} runs, {} bytes",
                        runs.len(),
                        runs.iter().map(|x| x.1.len()).sum::<usize>()
                    );
                    for (o, x, y) in runs.iter().take(6) {
                        let at = page * 4096 + o;
                        let ctx = &before[at.saturating_sub(24)..(at + 24).min(before.len())];
                        println!(
                            "    {:#x}: {:02x?} -> {:02x?}   ctx {:?}",
                            at,
                            &x[..x.len().min(16)],
                            &y[..y.len().min(16)],
                            String::from_utf8_lossy(ctx)
                        );
                    }
                }
            }
        }
        return;
    }
    let (s_init, s_init_f) = measure(n, || drop(black_box(fresh(&shipped, &[], None))));
    let (y_init, y_init_f) = measure(n, || drop(black_box(fresh(&yard, &[], None))));
    println!("{:<26} {:>22} {:>22} {:>8}", "", "shipped µs (faults)", "yardstick µs (faults)", "ratio");
    println!(
        "{:<26} {:>13.1} ({:>5.1}) {:>14.1} ({:>5.1}) {:>7.2}×",
        "instance + wapc_init",
        s_init,
        s_init_f,
        y_init,
        y_init_f,
        s_init / y_init
    );
    for s in scenarios::scenarios() {
        let payload = serde_json::to_vec(&json!({"settings": {}, "request": s.review["request"]})).expect("payload");
        let answer: Value =
            serde_json::from_slice(&fresh(&shipped, &s.context, Some(&payload)).expect("validate")).expect("json");
        let (sf, sf_f) = measure(n, || drop(black_box(fresh(&shipped, &s.context, Some(&payload)))));
        let (yf, yf_f) = measure(n, || drop(black_box(fresh(&yard, &[], Some(&payload)))));
        let warm = Policy::rehydrate(&shipped, wasm_host::context_handler(s.context.clone())).expect("instance");
        let ywarm = Policy::rehydrate(&yard, wasm_host::context_handler(vec![])).expect("instance");
        let (sw, _) = measure(n, || drop(black_box(warm.call("validate", &payload))));
        let (yw, _) = measure(n, || drop(black_box(ywarm.call("validate", &payload))));
        println!("{:<26} {:>13.1} ({:>5.1}) {:>14.1} ({:>5.1}) {:>7.2}×   warm {sw:.1} / {yw:.1} µs, accepted {}, host calls {}",
            s.name, sf, sf_f, yf, yf_f, sf / yf, answer["accepted"], warm.host_calls().len());
    }
}
