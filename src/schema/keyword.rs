//! Schema keywords the structural walk looks up on every string node, kept
//! as statics of this crate.
//!
//! *Why:* a string literal equal to one of another crate is merged with it
//! by the compiler and laid out in that crate's read-only data. regex-syntax
//! names a Unicode property `format` and a parse error `pattern`, so the
//! walk's `"format"` and `"pattern"` sat in two 64 KiB windows of the
//! module's data that nothing else a request does reads: a fresh Kubewarden
//! instance mapped 32 pages to read 13 bytes (issue #35, BENCHMARKS.md
//! "Fresh Wasm instances, fourth pass"). Both are cut from one literal that
//! no other crate holds (so nothing is merged with it: a static of the same
//! bytes is merged all the same), which lies with this crate's other data.

const KEYWORDS: &str = "patternformat";

/// `"pattern"`.
pub(super) fn pattern() -> &'static str {
    KEYWORDS.get(..7).unwrap_or_default()
}

/// `"format"`.
pub(super) fn format() -> &'static str {
    KEYWORDS.get(7..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_keywords_read_as_themselves() {
        assert_eq!(super::pattern(), "pattern");
        assert_eq!(super::format(), "format");
    }
}
