//! Compiled regexes, kept for the life of the process.
//!
//! The `cel` crate compiles the pattern of `matches()` on every call (19–128 µs
//! measured), and OpenAPI `pattern` checks need the same. Patterns come from
//! our own schema, not from requests, so the set is small and fixed; the cap
//! only guards against a future caller passing request data as a pattern.
//!
//! *Read-only once warm:* a `regex::Regex` writes to its lazy DFA's cache on
//! every search, and the cache lives wherever the regex was compiled. In the
//! Kubewarden module every request runs on a fresh copy-on-write instance of
//! the pre-initialised memory, so each regex a request used cost a page
//! fault and a 4 KiB copy (issue #35). Every pattern here is therefore also
//! compiled to a full DFA (dense when small, [`Dfa`]), which a search only reads, and [`freeze`] (the end
//! of `admission::warm_up`) turns the cache into a map no lookup writes to
//! (no lock, no `RefCell` borrow, no reference count). A pattern whose DFA
//! would be too large, or a search the DFA gives up on (a Unicode word
//! boundary next to non-ASCII text), uses the `regex::Regex`: same syntax,
//! same answer.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use regex::Regex;
use regex_automata::{
    dfa::{dense, sparse, Automaton},
    Input,
};

const MAX_CACHED: usize = 512;
/// A DFA larger than this is not built (the regex serves the pattern).
const DFA_SIZE_LIMIT: usize = 1 << 20;

/// A DFA larger than this (dense) is kept sparse.
const DENSE_LIMIT: usize = 16 << 10;

/// A pattern's full DFA: dense (one table read per byte) when small, sparse
/// when not.
///
/// A sparse DFA is a tenth of the dense one's size, but a search decodes
/// the current state's transitions at every byte: ~140 instructions a byte
/// against ~5, and the regexes were a seventh of a backup CREATE's
/// instructions. Every pattern of our schemas is dense but the Key Vault
/// key URL's (38 KiB dense, 2.5 KiB sparse): 22 KiB of tables (the largest,
/// the KMS key ARN's, 11.6 KiB), of which a search reads only the rows of the
/// states it visits (issue #35).
#[derive(Clone, Debug)]
enum Dfa {
    Dense(dense::DFA<Vec<u32>>),
    Sparse(sparse::DFA<Vec<u8>>),
}

impl Dfa {
    fn build(pattern: &str) -> Option<Self> {
        let dense = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .dfa_size_limit(Some(DFA_SIZE_LIMIT))
                    .determinize_size_limit(Some(DFA_SIZE_LIMIT))
                    .unicode_word_boundary(true),
            )
            .build(pattern)
            .ok()?;
        if dense.memory_usage() <= DENSE_LIMIT {
            return Some(Self::Dense(dense));
        }
        dense.to_sparse().ok().map(Self::Sparse)
    }

    /// Whether `haystack` has a match; `None` when the DFA gives up (a
    /// Unicode word boundary next to non-ASCII text).
    fn is_match(&self, haystack: &str) -> Option<bool> {
        let input = Input::new(haystack).earliest(true);
        let found = match self {
            Self::Dense(d) => d.try_search_fwd(&input),
            Self::Sparse(d) => d.try_search_fwd(&input),
        };
        found.ok().map(|m| m.is_some())
    }
}

/// One compiled pattern.
#[derive(Debug)]
pub struct Pattern {
    dfa: Option<Dfa>,
    /// Shared by a pattern's copies ([`copies`]): a `Regex`'s clone makes a
    /// cache pool of its own (~2 KiB), which spread the copied DFAs one to a
    /// page.
    regex: Arc<Regex>,
}

impl Pattern {
    fn new(pattern: &str) -> Result<Self, regex::Error> {
        let regex = Arc::new(Regex::new(pattern)?);
        Ok(Self { dfa: Dfa::build(pattern), regex })
    }

    /// Whether `haystack` has a match anywhere (as `Regex::is_match`).
    pub fn is_match(&self, haystack: &str) -> bool {
        match self.dfa.as_ref().and_then(|d| d.is_match(haystack)) {
            Some(found) => found,
            None => self.regex.is_match(haystack),
        }
    }

    /// Whether searches use the read-only DFA (tests).
    #[cfg(test)]
    pub fn has_dfa(&self) -> bool {
        self.dfa.is_some()
    }

    /// The size of the DFA's tables when it is the dense one (tests).
    #[cfg(test)]
    pub fn dense_size(&self) -> Option<usize> {
        match &self.dfa {
            Some(Dfa::Dense(d)) => Some(d.memory_usage()),
            _ => None,
        }
    }
}

/// A compiled pattern: shared for the life of the process, or (past the
/// cache's cap) this caller's own.
#[derive(Debug)]
pub enum Compiled {
    Shared(&'static Pattern),
    Own(Box<Pattern>),
}

impl std::ops::Deref for Compiled {
    type Target = Pattern;
    fn deref(&self) -> &Pattern {
        match self {
            Compiled::Shared(p) => p,
            Compiled::Own(p) => p,
        }
    }
}

thread_local! {
    static CACHE: RefCell<HashMap<String, &'static Pattern>> = RefCell::new(HashMap::new());
}

/// The patterns compiled before [`freeze`]: read by every thread, written by none.
static FROZEN: OnceLock<HashMap<String, &'static Pattern>> = OnceLock::new();

/// Copies of every frozen pattern, made by [`copies`].
pub type Copies = HashMap<String, &'static Pattern>;

thread_local! {
    /// The copies [`get`] serves on this thread ([`serve`]; none: the frozen patterns).
    static SERVING: Cell<Option<&'static Copies>> = const { Cell::new(None) };
}

/// Returns the compiled regex for `pattern`, compiling it on first use.
pub fn get(pattern: &str) -> Result<Compiled, regex::Error> {
    if let Some(p) = SERVING.get().and_then(|f| f.get(pattern)) {
        return Ok(Compiled::Shared(p));
    }
    if let Some(p) = FROZEN.get().and_then(|f| f.get(pattern)) {
        return Ok(Compiled::Shared(p));
    }
    if let Some(p) = CACHE.with(|c| c.borrow().get(pattern).copied()) {
        return Ok(Compiled::Shared(p));
    }
    compile(pattern)
}

/// A pattern seen for the first time: compiled and cached. Out of line:
/// compiling needs a 2.7 KiB stack frame, which inlined into [`get`] every
/// request's walk paid for, a stack page more in a fresh Kubewarden
/// instance, where every pattern is already compiled (issue #35).
#[cold]
#[inline(never)]
fn compile(pattern: &str) -> Result<Compiled, regex::Error> {
    let compiled = Pattern::new(pattern)?;
    Ok(CACHE.with(|c| {
        let mut map = c.borrow_mut();
        if map.len() >= MAX_CACHED {
            return Compiled::Own(Box::new(compiled));
        }
        // Kept for the life of the process (at most MAX_CACHED per thread).
        let shared: &'static Pattern = Box::leak(Box::new(compiled));
        map.insert(pattern.to_string(), shared);
        Compiled::Shared(shared)
    }))
}

/// Makes this thread's compiled patterns the shared, read-only set (once per
/// process: later calls do nothing). `admission::warm_up` calls it after
/// compiling every pattern of every schema.
pub fn freeze() {
    let patterns = CACHE.with(|c| c.borrow().clone());
    let _ = FROZEN.set(patterns);
}

/// Copies of every frozen pattern, allocated one after the other (`None`
/// before [`freeze`]). The Kubewarden module's pre-initialisation makes one
/// set per validated target, just before that target's schema copy
/// (`admission::compact`), when the allocator has just switched to bump
/// allocation: the DFAs a request searches then sit in its target's 64 KiB
/// windows of the memory image, not in one every target shares nor wherever
/// compiling left them (issue #35). The copies answer as the originals (a
/// DFA's copy is the same tables; the fallback regex is shared).
pub fn copies() -> Option<&'static Copies> {
    let frozen = FROZEN.get()?;
    let mut sorted: Vec<(&String, &&'static Pattern)> = frozen.iter().collect();
    sorted.sort_by_key(|(k, _)| k.as_str());
    let copies: Copies = sorted
        .into_iter()
        .map(|(k, p)| {
            let copy: &'static Pattern =
                Box::leak(Box::new(Pattern { dfa: p.dfa.clone(), regex: Arc::clone(&p.regex) }));
            (k.clone(), copy)
        })
        .collect();
    Some(Box::leak(Box::new(copies)))
}

/// [`get`] serves `copies` on this thread from now on, before the frozen
/// patterns (`None`: the frozen patterns). Same answers either way.
pub fn serve(copies: Option<&'static Copies>) {
    SERVING.set(copies);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dfa_answers_as_the_regex_does() {
        let cases: &[(&str, &[&str])] = &[
            (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", &["etcd", "Etcd", "a-", "", "ab-c", "é"]),
            (
                r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/.+$",
                &["arn:aws:kms:us-east-1:123456789012:key/x", "arn:aws:kms::1:key/"],
            ),
            (r"\bfoo\b", &["a foo b", "afoob", "é foo é", "éfooé"]),
            (r"[\p{L}]+", &["abc", "123", "ü"]),
            (r"", &["", "x"]),
        ];
        for (pattern, haystacks) in cases {
            let p = get(pattern).expect("compiles");
            let re = Regex::new(pattern).expect("compiles");
            for h in *haystacks {
                assert_eq!(p.is_match(h), re.is_match(h), "{pattern:?} on {h:?}");
            }
        }
        assert!(get(r"^[a-z]+$").expect("compiles").has_dfa());
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_an_error() {
        assert!(get("(").is_err());
    }

    #[test]
    fn frozen_patterns_are_served_to_every_thread() {
        let pattern = r"^frozen-[0-9]+$";
        get(pattern).expect("compiles");
        freeze();
        let other = std::thread::spawn(move || {
            let from_frozen = FROZEN.get().is_some_and(|f| f.contains_key(pattern));
            let p = get(pattern).expect("compiles");
            (from_frozen, p.is_match("frozen-1"), CACHE.with(|c| c.borrow().len()))
        })
        .join()
        .expect("thread");
        // Another test may have frozen first: then the pattern is in this thread's cache only.
        if other.0 {
            assert_eq!(other.2, 0, "served from the frozen set, nothing compiled again");
        }
        assert!(other.1);
    }
}
