//! What one input document may cost to read: its nesting checked before any
//! parser runs, and its YAML aliases expanded to at most as many nodes as
//! the document has bytes.
//!
//! Why: `check` runs in CI on GitOps repositories, where anyone who can open
//! a pull request writes the input, and `docs/cli.md` promises memory
//! bounded by the largest document. A YAML parser's repetition limit counts
//! alias *jumps*, not the nodes each jump replays: one anchor of W items
//! referenced W times is W² nodes (50 KB of text needed more than 2 GiB).
//! And libyaml scans deep flow nesting (`[[[[…`) in quadratic time before the
//! deserializer's recursion limit refuses it (200 KB took 23 s). Kubernetes
//! manifests need neither: the bounds refuse both with a clear error, in time
//! and memory linear in the document.

use std::cell::Cell;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deepest nesting accepted (serde_json's and serde_yaml_ng's recursion limit).
pub const MAX_DEPTH: usize = 128;

/// The deepest flow nesting (`[`/`{` outside quotes, comments and block
/// scalars) of `text`, when it is over [`MAX_DEPTH`]: an error naming the
/// line. Linear, no allocation: a first pass counts every bracket; only a
/// text that nests too deep by that count is scanned again with YAML's
/// quoting rules (a quote opens only where a scalar starts, never inside a
/// plain or block scalar, so no stray quote can hide the brackets after it).
pub fn check_nesting(text: &str) -> Result<(), String> {
    if raw_depth(text) <= MAX_DEPTH {
        return Ok(());
    }
    match deepest(text) {
        Some(line) => Err(format!(
            "nests deeper than {MAX_DEPTH} levels at line {line} (a Kubernetes manifest needs a few dozen at most)"
        )),
        None => Ok(()),
    }
}

/// The deepest nesting counting every bracket (an upper bound).
fn raw_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The line where flow nesting first passes [`MAX_DEPTH`], outside quoted,
/// comment and block-scalar text.
fn deepest(text: &str) -> Option<usize> {
    let mut scan = FlowScan::default();
    for (n, line) in text.split('\n').enumerate() {
        if scan.in_block(line) {
            continue;
        }
        if scan.line(line) {
            return Some(n + 1);
        }
        scan.block_header(line);
    }
    None
}

#[derive(Default, PartialEq)]
enum Quote {
    #[default]
    None,
    Single,
    Double,
}

/// The state [`deepest`] carries from line to line: flow depth, an open
/// quote, and the indentation of the line that opened a block scalar.
#[derive(Default)]
struct FlowScan {
    depth: usize,
    quote: Quote,
    escaped: bool,
    block: Option<usize>,
}

impl FlowScan {
    /// Whether `line` is text of the open block scalar (`|`, `>`): blank or
    /// indented deeper than the line that opened it.
    fn in_block(&mut self, line: &str) -> bool {
        if let Some(b) = self.block {
            if self.quote == Quote::None && (line.trim().is_empty() || indent(line) > b) {
                return true;
            }
            self.block = None;
        }
        false
    }

    /// Scans one line; true when the nesting passes [`MAX_DEPTH`] in it.
    /// A scalar may start after the indentation, `[`, `{`, `,`, and after
    /// `: `, `- `, `? `: only there does a quote open.
    fn line(&mut self, line: &str) -> bool {
        let mut start = self.quote == Quote::None;
        let mut prev = ' ';
        let mut last_plain = ' ';
        for c in line.chars() {
            if self.quoted(c) {
                prev = c;
                continue;
            }
            match c {
                '#' if prev == ' ' || prev == '\t' => break,
                '"' if start => self.quote = Quote::Double,
                '\'' if start => self.quote = Quote::Single,
                '[' | '{' => {
                    self.depth += 1;
                    if self.depth > MAX_DEPTH {
                        return true;
                    }
                    start = true;
                }
                ']' | '}' => {
                    self.depth = self.depth.saturating_sub(1);
                    start = false;
                }
                ',' => start = self.depth > 0,
                ' ' | '\t' => {
                    if matches!(prev, ':' | '-' | '?') && (last_plain == ' ' || prev == ':') {
                        start = true;
                    }
                }
                _ => start = false,
            }
            if c != ' ' && c != '\t' {
                last_plain = prev;
            }
            prev = c;
        }
        false
    }

    /// Inside an open quote, `c` is text (it may close the quote): true.
    fn quoted(&mut self, c: char) -> bool {
        match self.quote {
            Quote::Double => {
                match (self.escaped, c) {
                    (true, _) => self.escaped = false,
                    (false, '\\') => self.escaped = true,
                    (false, '"') => self.quote = Quote::None,
                    _ => {}
                }
                true
            }
            Quote::Single => {
                if c == '\'' {
                    self.quote = Quote::None;
                }
                true
            }
            Quote::None => false,
        }
    }

    /// A block scalar's header ends the line's value (`key: |`, `- >-`):
    /// the lines after it, indented deeper, are text.
    fn block_header(&mut self, line: &str) {
        let value = line.split(" #").next().unwrap_or_default().trim_end();
        let header = value.trim_end_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
        if self.quote == Quote::None && self.depth == 0 && (header.ends_with('|') || header.ends_with('>')) {
            let before = header.get(..header.len().saturating_sub(1)).unwrap_or_default().trim_end();
            if before.is_empty() || before.ends_with(':') || before.ends_with('-') {
                self.block = Some(indent(line));
            }
        }
    }
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Deserializes a [`Value`] as `serde_json::Value` does, counting every node
/// the deserializer hands over (a replayed alias counts each time) against
/// `budget` (a string or key counts its bytes as well): past it, an error.
/// With a budget of twice the document's length, memory and time stay
/// linear in it, aliases or not.
pub struct Bounded<'a> {
    pub budget: &'a Cell<usize>,
}

impl Bounded<'_> {
    fn take<E: de::Error>(&self) -> Result<(), E> {
        self.take_n(1)
    }

    /// A node of `n` units: a string counts its bytes too, so an alias of a
    /// long string replays its length, not one node.
    fn take_n<E: de::Error>(&self, n: usize) -> Result<(), E> {
        match self.budget.get().checked_sub(n) {
            Some(left) => {
                self.budget.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "YAML aliases expand the document beyond twice its size: refused (a Kubernetes manifest needs no aliases)",
            )),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.take()?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.take_n(1 + v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.take_n(1 + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Bounded { budget: self.budget })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.take_n(1 + key.len())?;
            let v = map.next_value_seed(Bounded { budget: self.budget })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Vec<Value>, String> {
        check_nesting(text)?;
        let budget = Cell::new(2 * text.len() + 64);
        serde_yaml_ng::Deserializer::from_str(text)
            .map(|doc| Bounded { budget: &budget }.deserialize(doc).map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn manifests_parse_as_serde_json_values() {
        let text = "a: 1\nb: [x, 'y', \"z\"]\nc: {d: null, e: 1.5, f: true, g: ~}\nh: -3\n---\n- 1\n";
        let got = yaml(text).expect("parses");
        let want: Vec<Value> = serde_yaml_ng::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).expect("v"))
            .collect();
        assert_eq!(got, want);
        // One small alias is fine: within the document's own size.
        assert!(yaml("a: &x [1, 2]\nb: *x\n").is_ok());
    }

    #[test]
    fn alias_bombs_are_refused_within_linear_memory() {
        // M3's shape: an anchor of W items referenced W times.
        let w = 3000;
        let items = vec!["0"; w].join(",");
        let refs = vec!["*a"; w].join(",");
        let text = format!("a: &a [{items}]\nb: [{refs}]\n");
        let e = yaml(&text).expect_err("refused");
        assert!(e.contains("aliases expand the document beyond twice its size"), "{e}");
        // Aliases of a long string count its bytes (the review's 90 KB file reached 550 MB).
        let text = format!("a: &a {}\nb: [{}]\n", "x".repeat(64 * 1024), vec!["*a"; 8000].join(","));
        assert!(yaml(&text).expect_err("refused").contains("beyond twice its size"));
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_any_parser_runs() {
        let n = 100_000;
        let text = format!("{}{}", "[".repeat(n), "]".repeat(n));
        let e = check_nesting(&text).expect_err("refused");
        assert!(e.contains("deeper than 128 levels at line 1"), "{e}");
        // Brackets in quotes and comments do not count; 128 levels pass.
        let quoted = format!("a: \"{}\" # {}\n", "[".repeat(500), "{".repeat(500));
        assert!(check_nesting(&quoted).is_ok());
        assert!(check_nesting(&format!("{}{}", "[".repeat(128), "]".repeat(128))).is_ok());
        assert!(check_nesting("a: 'it''s [' \nb: x'[[[' \n").is_ok());
        // A stray quote inside a plain scalar opens nothing (the review's bypass).
        for head in ["a: 5\" long\n", "a: it is 'quoted\n", "a: |\n  \"in a block\n  [[[\n"] {
            let text = format!("{head}b: {}{}\n", "[".repeat(n), "]".repeat(n));
            let e = check_nesting(&text).expect_err("refused");
            assert!(e.contains("deeper than 128 levels"), "{head:?}: {e}");
        }
        // Brackets in a block scalar are text.
        let block = format!("a: |\n  {}\nb: 1\n", "[".repeat(500));
        assert!(check_nesting(&block).is_ok());
    }
}
