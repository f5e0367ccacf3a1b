//! Whole files the crate embeds (the committed schemas, the shell scripts),
//! kept in writable data instead of among the string literals.
//!
//! *Why:* Kubewarden's policy-server runs every request on a fresh instance
//! of the policy module, whose memory image is mapped copy-on-write; the
//! first read of a page maps the 64 KiB window around it (the kernel's
//! fault-around), and each window a request reads costs about 5 µs of
//! mapping and unmapping (BENCHMARKS.md, issue #35). `include_str!` places a
//! file among the crate's string literals (`.rodata`), which every request
//! reads: the five files (115 KB) spread those over three windows. The
//! validations never read the files (pre-initialisation compiles the schemas
//! and prepares the restore script; only the backup Job mutation copies
//! `backup-verify.sh` into the Job), so they are kept apart.
//!
//! *How:* a `static` whose type is not `Freeze` (it holds an atomic) is
//! emitted as a writable global, which LLVM places in a `.data` section and
//! wasm-ld after all of `.rodata`. LLVM may still turn a global that is only
//! ever read into a constant; [`EmbeddedText::get`] hands the bytes through
//! [`std::hint::black_box`], so their address escapes and it cannot.
//! `tests/wasm_policy.rs` holds the shipped module to it. Elsewhere (server,
//! CLI) it changes nothing but the section.

use std::sync::atomic::AtomicBool;

/// A text of `N` bytes in `.data`, read-only in fact (nothing writes either
/// field). Make one with [`embedded_text!`](crate::embedded_text!).
pub struct EmbeddedText<const N: usize> {
    bytes: [u8; N],
    /// Makes the type not `Freeze`, so the static is writable data (module docs).
    _not_constant: AtomicBool,
}

impl<const N: usize> EmbeddedText<N> {
    /// The text of `bytes`; UTF-8 is checked at compile time.
    pub const fn new(bytes: &[u8; N]) -> Self {
        assert!(std::str::from_utf8(bytes).is_ok(), "an embedded text is UTF-8");
        Self { bytes: *bytes, _not_constant: AtomicBool::new(false) }
    }

    /// The text.
    pub fn get(&'static self) -> &'static str {
        // The address escapes: the static stays writable data (module docs).
        let bytes: &'static [u8; N] = std::hint::black_box(&self.bytes);
        // Checked in `new` already: the empty text is unreachable.
        std::str::from_utf8(bytes).unwrap_or_default()
    }
}

/// `include_str!`, with the text in `.data` (see the module docs):
/// `embedded_text!("file")` is the file's `&'static str`, the path relative
/// to the file that invokes it.
#[macro_export]
macro_rules! embedded_text {
    ($path:literal) => {{
        static TEXT: $crate::embedded_text::EmbeddedText<{ ::core::include_bytes!($path).len() }> =
            $crate::embedded_text::EmbeddedText::new(::core::include_bytes!($path));
        // Checked once per process, not at every use (a backup Job's mutation reads one).
        static CHECKED: ::std::sync::OnceLock<&'static str> = ::std::sync::OnceLock::new();
        *CHECKED.get_or_init(|| TEXT.get())
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_embedded_text_is_the_file() {
        let text = crate::embedded_text!("mutate/etcd-init.sh");
        assert_eq!(text, include_str!("mutate/etcd-init.sh"));
        assert!(text.starts_with("#!/bin/sh\n") && text.len() > 10_000);
    }
}
