//! The layers point down only (DESIGN.md): the decision modules (`api/`,
//! `schema/`, `rules/`, `mutate/`, and the lookup port) never import from
//! `admission/` or a shell (`server/`, `cli/`, `kubewarden/`). The compiler
//! does not catch an upward import; this test does. Test modules
//! (`#[cfg(test)]` and below) may use the adapters above them.

use std::path::{Path, PathBuf};

/// Modules a decision module must not import from.
const ABOVE: [&str; 4] = ["admission", "server", "cli", "kubewarden"];

/// The decision modules: directories and single files under `src/`.
const DECISION: [&str; 5] = ["api", "schema", "rules", "mutate", "lookup.rs"];

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
    let production = source.split("#[cfg(test)]").next().unwrap_or_default();
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

fn upward_imports(source: &str) -> Vec<String> {
    crate_modules(source).into_iter().filter(|m| ABOVE.contains(&m.as_str())).collect()
}

#[test]
fn decision_modules_import_nothing_from_admission_or_a_shell() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for d in DECISION {
        rust_files(&src.join(d), &mut files);
    }
    assert!(files.len() > 20, "the decision modules were not found under {}", src.display());
    let offences: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            upward_imports(&text).into_iter().map(move |m| format!("{} imports crate::{m}", f.display()))
        })
        .collect();
    assert!(offences.is_empty(), "upward imports (the layers point down only):\n{}", offences.join("\n"));
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
