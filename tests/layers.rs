//! The layers point down only (the design's layers: api → rules/mutate →
//! admission → shells), held for **every module**: the
//! crate's top-level modules and `server/`'s submodules each have a place in
//! one order ([`CRATE_ORDER`], [`SERVER_ORDER`]), and a module may import only
//! from modules before it. A total order has no circles, so this also holds
//! "no import circle" (`enforcement → rules → settings → enforcement` and
//! `server/backup_cache ↔ hcp_cache` were two). A new module fails the test
//! until it is given its place. Doc comments and test modules
//! (`#[cfg(test)]` and below) may name anything.
//!
//! Why a test and not a workspace split (kube-core / kube-client): the
//! decision core is one small crate that must build for wasm32-wasip1; a
//! split would add a crate boundary per layer (eight) for what one order
//! checks in 100 ms. CONTRIBUTING.md says the same.

use std::path::{Path, PathBuf};

/// The crate's modules, bottom first: each imports only from those before it.
const CRATE_ORDER: [&str; 21] = [
    "embedded_text",
    "json_at",
    "labels",
    "time",
    "build_info",
    "api",
    "finding",
    "schema",
    "lookup",
    "enforcement",
    "settings",
    "rules",
    "mutate",
    "crd",
    "catalog",
    "admission",
    "kubewarden",
    "server",
    "cli",
    "main",
    "lib",
];

/// `server/`'s submodules, bottom first (`super::x` and `crate::server::x`;
/// an item `mod.rs` re-exports, `super::App`, is the parent's, not an edge).
const SERVER_ORDER: [&str; 20] = [
    "metrics",
    "conns",
    "source_share",
    "cache_reflector",
    "certs",
    "log_budget",
    "signals",
    "fields",
    "limits",
    "outgoing",
    "tls",
    "hcp_cache",
    "backup_cache",
    "reads",
    "connection",
    "routes",
    "state",
    "plain",
    "accept",
    "mod",
];

/// The decision modules must never reach the admission layer or a shell.
const DECISION: [&str; 5] = ["api", "schema", "rules", "mutate", "lookup"];
const ABOVE: [&str; 4] = ["admission", "server", "cli", "kubewarden"];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.to_path_buf());
        }
        return;
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        rust_files(&e, out);
    }
}

/// The top-level modules of `crate::` that `source` (production part only)
/// names: `crate::x::…` paths, and the first segments of `use crate::{x, y::z}`.
fn crate_modules(source: &str) -> Vec<String> {
    let production: String = source
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let production = production.as_str();
    let mut out = Vec::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut rest = production;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // The first segment of each item at depth 1 of the group.
            let mut depth = 1;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        start = true;
                        continue;
                    }
                    c if c.is_whitespace() => continue,
                    _ => {}
                }
                if start && depth == 1 {
                    let name = ident(&group[i..]);
                    if !name.is_empty() {
                        out.push(name);
                    }
                    start = false;
                }
            }
        } else {
            out.push(ident(after));
        }
        rest = after;
    }
    out
}

/// The `server` submodules `source` names: `super::x` and `crate::server::x`.
fn server_modules(source: &str) -> Vec<String> {
    let production = source.split("#[cfg(test)]").next().unwrap_or_default();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    let mut out = Vec::new();
    for line in production.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for prefix in ["super::", "crate::server::"] {
            let mut rest = line;
            while let Some(at) = rest.find(prefix) {
                let after = &rest[at + prefix.len()..];
                if let Some(group) = after.strip_prefix('{') {
                    // `use super::{a, b::c}` on one line (rustfmt keeps short groups there).
                    let inner = group.split('}').next().unwrap_or_default();
                    out.extend(inner.split(',').map(|i| ident(i.trim())).filter(|i| !i.is_empty()));
                } else {
                    out.push(ident(after));
                }
                rest = after;
            }
        }
    }
    // Multi-line `use super::{` groups: their items' first segments.
    if let Some(at) = production.find("use super::{\n") {
        let group = &production[at + "use super::{\n".len()..];
        let group = group.split("\n};").next().unwrap_or_default();
        for item in group.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//")) {
            out.push(ident(item));
        }
    }
    out.retain(|m| !m.is_empty() && m != "self" && m != "*");
    out
}

fn place(order: &[&str], m: &str) -> Option<usize> {
    order.iter().position(|o| *o == m)
}

/// Every import of `files` (module name, file) that points up or sideways in `order`.
fn offences(order: &[&str], files: &[(String, PathBuf)], imports: fn(&str) -> Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (module, f) in files {
        let Some(me) = place(order, module) else {
            out.push(format!("{}: module {module} has no place in the layer order (tests/layers.rs)", f.display()));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for m in imports(&text) {
            if m == *module {
                continue;
            }
            match place(order, &m) {
                Some(p) if p < me => {}
                Some(_) => out.push(format!("{} ({module}) imports {m}, which is not below it", f.display())),
                None => {} // not a module of this order (a type re-exported at the root, a macro)
            }
        }
    }
    out
}

#[test]
fn every_module_imports_only_from_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let named: Vec<(String, PathBuf)> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).ok()?;
            let top = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
            Some((top, f.clone()))
        })
        .collect();
    assert!(named.len() > 60, "the modules were not found under {}", src.display());
    let mut found = offences(&CRATE_ORDER, &named, crate_modules);
    let server: Vec<(String, PathBuf)> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src.join("server")).ok()?;
            let top = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
            Some((top, f.clone()))
        })
        .collect();
    assert!(server.len() > 15, "server/ modules not found");
    found.extend(offences(&SERVER_ORDER, &server, server_modules));
    assert!(found.is_empty(), "imports that do not point down:\n{}", found.join("\n"));
    // Every module of the order exists (a renamed one is not silently unchecked).
    for m in CRATE_ORDER {
        assert!(named.iter().any(|(n, _)| n == m), "{m} is in CRATE_ORDER but not under src/");
    }
    for m in SERVER_ORDER {
        assert!(server.iter().any(|(n, _)| n == m), "{m} is in SERVER_ORDER but not under src/server/");
    }
}

#[test]
fn decision_modules_import_nothing_from_admission_or_a_shell() {
    for d in DECISION {
        for a in ABOVE {
            assert!(place(&CRATE_ORDER, d) < place(&CRATE_ORDER, a), "{d} must sit below {a}");
        }
    }
}

#[test]
fn the_order_check_sees_a_circle_and_a_new_module() {
    let dir = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    let files = vec![
        ("settings".to_string(), write("settings.rs", "use crate::enforcement::Enforcement;")),
        (
            "enforcement".to_string(),
            write("enforcement.rs", "/// [`crate::rules`]\nfn f() { crate::rules::severity_of(\"x\"); }"),
        ),
        ("brand_new".to_string(), write("brand_new.rs", "")),
    ];
    let found = offences(&CRATE_ORDER, &files, crate_modules);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("(enforcement) imports rules"), "{found:?}");
    assert!(found[1].contains("brand_new has no place"), "{found:?}");
    let server = vec![
        ("hcp_cache".to_string(), write("hcp_cache.rs", "use super::{backup_cache, metrics::truncate};")),
        ("backup_cache".to_string(), write("backup_cache.rs", "use super::{\n    hcp_cache,\n    fields,\n};")),
    ];
    let found = offences(&SERVER_ORDER, &server, server_modules);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("(hcp_cache) imports backup_cache"), "{found:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn upward_imports(source: &str) -> Vec<String> {
    crate_modules(source).into_iter().filter(|m| ABOVE.contains(&m.as_str())).collect()
}

#[test]
fn the_check_finds_every_form_of_an_upward_import() {
    assert_eq!(upward_imports("use crate::admission::lookup::Lookup;"), ["admission"]);
    assert_eq!(upward_imports("fn f(l: &dyn crate::server::X) {}"), ["server"]);
    assert_eq!(
        upward_imports("use crate::{\n    api::GROUP,\n    kubewarden::{self, x},\n    lookup::Lookup,\n};"),
        ["kubewarden"]
    );
    assert!(upward_imports("use crate::{lookup::Lookup, schema::FieldError};").is_empty());
    assert!(upward_imports("#[cfg(test)]\nmod tests { use crate::admission::lookup::ContextObjects; }").is_empty());
}

/// Functions of `source` (production part) longer than `max` lines: (name,
/// lines). A function runs from its `fn` line to the first line that is its
/// indentation followed by `}` (rustfmt's layout).
fn long_functions(source: &str, max: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.split("#[cfg(test)]").next().unwrap_or_default().lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = &line[..line.len() - line.trim_start().len()];
        let rest = line.trim_start();
        let rest = rest.strip_prefix("pub ").or_else(|| rest.strip_prefix("pub(crate) ")).unwrap_or(rest);
        let rest = rest.strip_prefix("pub(super) ").unwrap_or(rest);
        let rest = rest.strip_prefix("async ").or_else(|| rest.strip_prefix("const ")).unwrap_or(rest);
        if let Some(sig) = rest.strip_prefix("fn ") {
            let name: String = sig.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let close = format!("{indent}}}");
            if let Some(end) = (i..lines.len()).find(|&j| lines[j] == close) {
                if end - i + 1 > max {
                    out.push((name, end - i + 1));
                }
                i = end;
            }
        }
        i += 1;
    }
    out
}

/// Issue #29: no function over 80 lines (start-up functions that grew with
/// every flag or metric were split; a new one fails here).
#[test]
fn no_function_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let long: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            long_functions(&text, 80).into_iter().map(move |(n, l)| format!("{}: fn {n} has {l} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "functions over 80 lines:\n{}", long.join("\n"));
    let sample = format!("fn short() {{\n}}\n    pub async fn long() {{\n{}    }}\n", "        x();\n".repeat(81));
    assert_eq!(long_functions(&sample, 80), [("long".to_string(), 83)]);
}
