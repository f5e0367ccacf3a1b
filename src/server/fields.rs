//! Request-derived strings, made safe before the server uses them: in a log
//! line (bounded in bytes, control characters escaped so a name cannot
//! forge a line or an ANSI sequence in `--log-format text`), in a metric
//! label or in an apiserver URL (only Kubernetes object names).

/// Longest request-supplied string written to a log line, in bytes (before escaping).
pub const LOG_FIELD_MAX: usize = 256;

/// `s` for a log line: at most [`LOG_FIELD_MAX`] bytes (cut at a character
/// boundary, `…` when cut), every control character escaped (`\n`, `\u{1b}`),
/// as are the Unicode bidirectional overrides that reorder what a reader sees.
pub fn log_field(s: &str) -> String {
    let cut = super::metrics::truncate(s, LOG_FIELD_MAX);
    if !cut.chars().any(needs_escape) {
        return cut.into_owned();
    }
    let mut out = String::with_capacity(cut.len() + 16);
    for c in cut.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    c.is_control() || c == '\\' || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_fields_are_bounded_and_cannot_forge_lines() {
        let forged = "x\n2026-12-01T00:00:00Z  INFO tls: client CA reloaded\u{1b}[31m\r\u{202e}";
        let f = log_field(forged);
        assert!(!f.chars().any(|c| c.is_control() || c == '\u{202e}'), "{f:?}");
        assert!(f.starts_with("x\\n2026"), "{f}");
        assert!(f.contains("\\u{1b}[31m"), "{f}");
        assert_eq!(log_field("plain-name"), "plain-name");
        assert_eq!(log_field("a\\n"), "a\\\\n", "a literal backslash is escaped too, so an escape is unambiguous");
        let long = log_field(&"é".repeat(1 << 20));
        assert!(long.len() <= LOG_FIELD_MAX + 3, "{}", long.len());
        let nl = log_field(&"\n".repeat(1 << 20));
        assert!(nl.len() <= 2 * LOG_FIELD_MAX + 3, "escaping at most doubles the bound: {}", nl.len());
    }
}
