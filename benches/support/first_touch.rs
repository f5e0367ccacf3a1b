//! Which pages of a live instance's linear memory a call touches first, and
//! from which guest code (`fresh_profile -- --first-touch K`).
//!
//! *Why:* a fresh Kubewarden instance pays for every page its first call
//! touches: a fault, and for a read of the memory image the kernel maps the
//! whole 64 KiB window around it (fault-around), then unmaps it all again at
//! teardown. `--pages` counts those windows; this names what pulls each one
//! in. It found that two literals of the structural walk (`"pattern"`,
//! `"format"`) and the SigV4 date's `T` had been merged with regex-syntax's
//! equal strings, three windows read for a few bytes (BENCHMARKS.md,
//! "Fresh Wasm instances, fourth pass").
//!
//! How: every page of the memory is made inaccessible; a SIGSEGV handler
//! installed over wasmtime's records the first address touched on each page
//! with the faulting code address and two callers (wasmtime keeps frame
//! pointers in compiled code), reopens the page and returns, so the access
//! is retried and the call runs to its end. Host code touching guest memory
//! (waPC copying the request in and the answer out) is recorded the same way.
//! A fault outside the memory goes to the handler that was installed before.
//! Measurement only: the timings of a recorded call mean nothing.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Most pages recorded per call.
const MAX: usize = 4096;
/// Code addresses kept per touch: the faulting one and two callers.
const DEPTH: usize = 3;

static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static OFFSETS: [AtomicUsize; MAX] = [const { AtomicUsize::new(0) }; MAX];
static CODE: [AtomicUsize; DEPTH * MAX] = [const { AtomicUsize::new(0) }; DEPTH * MAX];
static PREVIOUS: AtomicUsize = AtomicUsize::new(0);

/// The first touch of one page.
pub struct Touch {
    /// Offset in linear memory of the first byte touched.
    pub offset: usize,
    /// The faulting code address, then its callers (0: not known).
    pub code: Vec<usize>,
}

/// Runs `call` with every page of `[base, end)` (a live instance's linear
/// memory, page aligned) recorded on first touch; the pages are readable and
/// writable again afterwards, as wasmtime mapped them.
pub fn record(base: usize, end: usize, call: impl FnOnce()) -> Vec<Touch> {
    // SAFETY: a zeroed sigaction is a valid value; the handler only touches
    // atomics, the recorded page and the interrupted context.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_fault as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        let mut previous: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGSEGV, &action, &mut previous);
        PREVIOUS.store(Box::into_raw(Box::new(previous)) as usize, SeqCst);
        COUNT.store(0, SeqCst);
        END.store(end, SeqCst);
        BASE.store(base, SeqCst);
        libc::mprotect(base as *mut libc::c_void, end - base, libc::PROT_NONE);
    }
    call();
    BASE.store(0, SeqCst);
    // SAFETY: restores the handler saved above, and the memory's protection.
    unsafe {
        let previous = Box::from_raw(PREVIOUS.swap(0, SeqCst) as *mut libc::sigaction);
        libc::sigaction(libc::SIGSEGV, &*previous, std::ptr::null_mut());
        libc::mprotect(base as *mut libc::c_void, end - base, libc::PROT_READ | libc::PROT_WRITE);
    }
    let n = COUNT.load(SeqCst).min(MAX);
    (0..n)
        .map(|i| Touch {
            offset: OFFSETS[i].load(SeqCst),
            code: (0..DEPTH).map(|d| CODE[i * DEPTH + d].load(SeqCst)).collect(),
        })
        .collect()
}

extern "C" fn on_fault(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler; frame pointers are followed only while non-zero.
    unsafe {
        let addr = (*info).si_addr() as usize;
        let (base, end) = (BASE.load(SeqCst), END.load(SeqCst));
        if base != 0 && (base..end).contains(&addr) {
            let page = addr & !4095;
            let i = COUNT.fetch_add(1, SeqCst);
            if i < MAX {
                OFFSETS[i].store(addr - base, SeqCst);
                let registers = &(*(context as *mut libc::ucontext_t)).uc_mcontext.gregs;
                CODE[i * DEPTH].store(registers[libc::REG_RIP as usize] as usize, SeqCst);
                let mut frame = registers[libc::REG_RBP as usize] as usize;
                for d in 1..DEPTH {
                    if frame == 0 {
                        break;
                    }
                    CODE[i * DEPTH + d].store(*((frame + 8) as *const usize), SeqCst);
                    frame = *(frame as *const usize);
                }
            }
            libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ | libc::PROT_WRITE);
            return;
        }
        let previous = PREVIOUS.load(SeqCst) as *const libc::sigaction;
        if !previous.is_null() && (*previous).sa_flags & libc::SA_SIGINFO != 0 && (*previous).sa_sigaction > 1 {
            let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute((*previous).sa_sigaction);
            handler(signal, info, context);
        } else {
            libc::abort();
        }
    }
}

/// Names of a module's compiled functions, by code address.
pub struct JitNames(Vec<(usize, usize, String)>);

impl JitNames {
    /// From the module's own function table (names when the module keeps
    /// its name section: an unstripped build).
    pub fn of(module: &wasmtime_provider::wasmtime::Module) -> Self {
        let text = module.text().as_ptr() as usize;
        let mut v: Vec<(usize, usize, String)> = module
            .functions()
            .map(|f| (text + f.offset, f.len, f.name.unwrap_or_else(|| format!("wasm function {}", f.index.as_u32()))))
            .collect();
        v.sort();
        Self(v)
    }

    /// The function holding `pc` (its hash suffix cut), or the address (host code).
    pub fn name(&self, pc: usize) -> String {
        let i = self.0.partition_point(|(start, _, _)| *start <= pc);
        match i.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some((start, len, name)) if pc < start + len => format!("{:#}", rustc_demangle::demangle(name)),
            _ => format!("{pc:#x}"),
        }
    }
}
