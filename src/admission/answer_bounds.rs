//! The bounds every answer keeps, whatever the request: the warnings as the
//! kube-apiserver records them, and at most [`MAX_CAUSES`] causes.
//!
//! Why: an answer is built from the request (quoted values, one cause per
//! wrong item, one warning per unknown field), so without bounds a small
//! request could make a large answer, held in memory until the client reads
//! it. The apiserver itself shows a webhook's warnings through its warning
//! recorder (`k8s.io/apiserver/pkg/endpoints/filters/warning.go`): duplicates
//! dropped, and once they pass 4,096 runes in all, each cut to 256 runes and
//! no more added once 4,096 are written. Applying the same recorder here
//! makes the answer bounded and shows offline exactly what a user of the
//! cluster sees. Quoted values are capped where they are rendered
//! ([`crate::schema::FieldError`]).

use std::collections::HashSet;

use crate::finding::Warning;

/// Runes of warnings after which the recorder truncates.
pub const WARNING_TOTAL_RUNES: usize = 4 * 1024;
/// Runes each warning keeps once the recorder truncates.
pub const WARNING_ITEM_RUNES: usize = 256;
/// Causes of one denial at most (the schema's own cap): the rest are
/// summarised by one last cause.
pub const MAX_CAUSES: usize = crate::schema::MAX_SCHEMA_ERRORS;

/// `warnings` as the kube-apiserver's warning recorder keeps them (the
/// algorithm of `recorder.AddWarning`, empty texts and duplicates dropped).
/// At most `WARNING_TOTAL_RUNES + WARNING_ITEM_RUNES` runes in all; linear in
/// the input.
pub fn recorded_warnings(warnings: Vec<Warning>) -> Vec<Warning> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut ordered: Vec<Warning> = Vec::new();
    let mut out: Vec<Warning> = Vec::new();
    let (mut written, mut truncating) = (0usize, false);
    for w in warnings {
        if w.text.is_empty() || (truncating && written >= WARNING_TOTAL_RUNES) {
            continue;
        }
        if !seen.insert(w.text.clone()) {
            continue;
        }
        ordered.push(w.clone());
        let mut shown = w;
        let mut runes = shown.text.chars().count();
        if truncating && runes > WARNING_ITEM_RUNES {
            shown.text = cut(&shown.text);
            runes = WARNING_ITEM_RUNES;
        }
        if written + runes <= WARNING_TOTAL_RUNES || truncating {
            written += runes;
            out.push(shown);
            continue;
        }
        // The first warning past the limit: replay every one, truncated.
        truncating = true;
        written = 0;
        out.clear();
        for w in &ordered {
            let mut w = w.clone();
            if w.text.chars().count() > WARNING_ITEM_RUNES {
                w.text = cut(&w.text);
            }
            written += w.text.chars().count();
            out.push(w);
        }
    }
    out
}

fn cut(s: &str) -> String {
    s.chars().take(WARNING_ITEM_RUNES).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(texts: Vec<String>) -> Vec<String> {
        recorded_warnings(texts.into_iter().map(Warning::note).collect()).into_iter().map(|w| w.text).collect()
    }

    /// upstream's `TestTruncation`, with its limits scaled as it scales them
    /// (25 total, 5 per item) by scaling the inputs instead.
    #[test]
    fn the_recorder_keeps_short_warnings_and_truncates_past_the_total() {
        let few = vec!["a".repeat(10), "a".repeat(10), "bb".into(), String::new()];
        assert_eq!(recorded(few), vec!["a".repeat(10), "bb".to_string()]);
        // Past 4,096 runes: every warning cut to 256, and none added once
        // 4,096 are written.
        let many: Vec<String> = (0..40).map(|i| format!("{i:03}{}", "x".repeat(997))).collect();
        let out = recorded(many);
        assert!(out.iter().all(|w| w.chars().count() == WARNING_ITEM_RUNES), "{:?}", out[0].len());
        assert_eq!(out.len(), WARNING_TOTAL_RUNES / WARNING_ITEM_RUNES);
        assert!(out[0].starts_with("000") && out[15].starts_with("015"));
        // Multi-byte text is cut on a rune boundary.
        let wide: Vec<String> = (0..10).map(|i| format!("{i}{}", "é".repeat(600))).collect();
        let out = recorded(wide);
        assert!(out.iter().all(|w| w.chars().count() <= WARNING_ITEM_RUNES));
        let total: usize = out.iter().map(|w| w.chars().count()).sum();
        assert!(total <= WARNING_TOTAL_RUNES + WARNING_ITEM_RUNES, "{total}");
    }

    #[test]
    fn a_million_unknown_field_warnings_stay_a_few_kib() {
        let many: Vec<String> = (0..1_000_000).map(|i| format!("unknown field \"spec.f{i}\"")).collect();
        let out = recorded(many);
        let bytes: usize = out.iter().map(String::len).sum();
        assert!(bytes <= 4 * (WARNING_TOTAL_RUNES + WARNING_ITEM_RUNES), "{bytes}");
        assert_eq!(out[0], "unknown field \"spec.f0\"");
    }

    #[test]
    fn a_truncated_warning_keeps_its_rule() {
        let many: Vec<Warning> =
            (0..40).map(|i| Warning::ruled("restore-url-expiring", format!("{i:03}{}", "x".repeat(997)))).collect();
        let out = recorded_warnings(many);
        assert!(out
            .iter()
            .all(|w| w.rule == Some("restore-url-expiring") && w.text.chars().count() == WARNING_ITEM_RUNES));
    }
}
