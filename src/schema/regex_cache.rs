//! Compiled regexes, kept for the life of the thread.
//!
//! The `cel` crate compiles the pattern of `matches()` on every call (19–128 µs
//! measured), and OpenAPI `pattern` checks need the same. Patterns come from
//! our own schema, not from requests, so the set is small and fixed; the cap
//! only guards against a future caller passing request data as a pattern.
//! Per thread, not behind a lock: the server's workers never contend for it.

use std::{cell::RefCell, collections::HashMap, rc::Rc};

use regex::Regex;

const MAX_CACHED: usize = 512;

thread_local! {
    static CACHE: RefCell<HashMap<String, Rc<Regex>>> = RefCell::new(HashMap::new());
}

/// Returns the compiled regex for `pattern`, compiling it on first use.
pub fn get(pattern: &str) -> Result<Rc<Regex>, regex::Error> {
    if let Some(re) = CACHE.with(|c| c.borrow().get(pattern).cloned()) {
        return Ok(re);
    }
    let re = Rc::new(Regex::new(pattern)?);
    CACHE.with(|c| {
        let mut map = c.borrow_mut();
        if map.len() < MAX_CACHED {
            map.insert(pattern.to_string(), Rc::clone(&re));
        }
    });
    Ok(re)
}
