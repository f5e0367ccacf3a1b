//! Whole files the crate embeds (the committed schemas, the shell scripts),
//! kept in writable data instead of among the string literals.
//!
//! *Why:* Kubewarden's policy-server runs every request on a fresh instance
//! of the policy module, whose memory image is mapped copy-on-write; the
//! first read of a page maps the 64 KiB window around it (the kernel's
//! fault-around), and each window a request reads costs about 5 µs of
//! mapping and unmapping (BENCHMARKS.md, issue #35). `include_str!` places a
//! file among the crate's string literals (`.rodata`), which every request
//! reads: the five files (115 KB) spread them over three windows. No request
//! reads these files (pre-initialisation compiles the schemas and prepares
//! the scripts), so they are kept apart: a `static` with interior mutability
//! goes to `.data`, which the linker places after all of `.rodata`.
//!
//! Elsewhere (server, CLI) it changes nothing but the section.

use std::cell::UnsafeCell;

/// A text of `N` bytes in `.data`; read-only in fact ([`EmbeddedText::get`]
/// only reads). Make one with [`embedded_text!`](crate::embedded_text).
pub struct EmbeddedText<const N: usize>(UnsafeCell<[u8; N]>);

// SAFETY: the cell is never written (no `&mut` to it is ever made; the only
// method reads): it exists to keep the bytes out of `.rodata`, so sharing it
// between threads shares immutable bytes.
unsafe impl<const N: usize> Sync for EmbeddedText<N> {}

impl<const N: usize> EmbeddedText<N> {
    /// The text of `bytes`; UTF-8 is checked at compile time.
    pub const fn new(bytes: &[u8; N]) -> Self {
        assert!(std::str::from_utf8(bytes).is_ok(), "an embedded text is UTF-8");
        Self(UnsafeCell::new(*bytes))
    }

    /// The text.
    pub fn get(&'static self) -> &'static str {
        // SAFETY: nothing writes the cell (see the `Sync` impl), so a shared
        // reference to its bytes lives as long as the static.
        let bytes: &'static [u8; N] = unsafe { &*self.0.get() };
        // Checked in `new` already: the empty text is unreachable.
        std::str::from_utf8(bytes).unwrap_or_default()
    }
}

/// `include_str!`, with the text in `.data` (see the module docs):
/// `embedded_text!("file")` is the file's `&'static str`.
#[macro_export]
macro_rules! embedded_text {
    ($path:literal) => {{
        static TEXT: $crate::embedded_text::EmbeddedText<{ include_bytes!($path).len() }> =
            $crate::embedded_text::EmbeddedText::new(include_bytes!($path));
        TEXT.get()
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
