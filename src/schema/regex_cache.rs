//! Compiled regexes, kept for the life of the process.
//!
//! The `cel` crate compiles the pattern of `matches()` on every call (19–128 µs
//! measured), and OpenAPI `pattern` checks need the same. Patterns come from
//! our own schema, not from requests, so the set is small and fixed; the cap
//! only guards against a future caller passing request data as a pattern.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use regex::Regex;

const MAX_CACHED: usize = 512;

fn cache() -> &'static Mutex<HashMap<String, Arc<Regex>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Returns the compiled regex for `pattern`, compiling it on first use.
pub fn get(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    if let Ok(map) = cache().lock() {
        if let Some(re) = map.get(pattern) {
            return Ok(Arc::clone(re));
        }
    }
    let re = Arc::new(Regex::new(pattern)?);
    if let Ok(mut map) = cache().lock() {
        if map.len() < MAX_CACHED {
            map.insert(pattern.to_string(), Arc::clone(&re));
        }
    }
    Ok(re)
}
