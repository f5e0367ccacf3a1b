//! Reading JSON or (multi-document) YAML from files or stdin.

use std::{io::Read, path::Path};

use anyhow::Context as _;
use serde_json::Value;

/// Reads a file (`-` is stdin) as text.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading stdin")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

/// Parses text as JSON, or else as multi-document YAML; empty documents are skipped.
pub fn parse_documents(text: &str, origin: &str) -> anyhow::Result<Vec<Value>> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(vec![v]);
    }
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v: Value = serde::Deserialize::deserialize(doc)
            .with_context(|| format!("{origin}: document {} is neither JSON nor YAML", i + 1))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Reads and parses a file.
pub fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = read_text(path)?;
    parse_documents(&text, &path.display().to_string())
}
