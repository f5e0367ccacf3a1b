//! Inputs as kubectl takes them: files, directories (`.yaml`, `.yml` and
//! `.json` files in them; every level with `-R`), `-` or nothing for stdin.
//! Multi-document YAML is split on `---` lines the way kubectl's YAML reader
//! splits it, one document at a time, so a 50 MB stream is never held in
//! memory at once and a document that does not parse is reported while the
//! others are still read. `kind: List` and every `*List` are expanded into
//! their items, the shape `kubectl get -o yaml` prints.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
};

use serde_json::Value;

/// Where documents come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Stdin,
    File(PathBuf),
}

impl Source {
    /// How the source is named in output (`<stdin>` for stdin).
    pub fn label(&self) -> String {
        match self {
            Source::Stdin => "<stdin>".to_string(),
            Source::File(p) => p.display().to_string(),
        }
    }

    fn open(&self) -> std::io::Result<Box<dyn BufRead>> {
        Ok(match self {
            Source::Stdin => Box::new(BufReader::with_capacity(1 << 16, std::io::stdin())),
            Source::File(p) => Box::new(BufReader::with_capacity(1 << 16, std::fs::File::open(p)?)),
        })
    }
}

fn wanted_in_dir(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

fn walk(dir: &Path, recursive: bool, out: &mut Vec<Result<Source, String>>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            out.push(Err(format!("reading directory {}: {e}", dir.display())));
            return;
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            if recursive {
                walk(&p, recursive, out);
            }
        } else if wanted_in_dir(&p) {
            out.push(Ok(Source::File(p)));
        }
    }
}

/// The sources named on the command line, in order: `-` is stdin, a
/// directory contributes its `.yaml`/`.yml`/`.json` files (sorted; every
/// level with `recursive`), no path at all is stdin. A path that cannot be
/// read is an `Err` naming it; the others are still read.
pub fn sources(paths: &[PathBuf], recursive: bool) -> Vec<Result<Source, String>> {
    if paths.is_empty() {
        return vec![Ok(Source::Stdin)];
    }
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            out.push(Ok(Source::Stdin));
        } else if p.is_dir() {
            walk(p, recursive, &mut out);
        } else {
            out.push(Ok(Source::File(p.clone())));
        }
    }
    out
}

/// One entry of a source: an object to judge, or a document that could not be read.
#[derive(Debug)]
pub enum Entry {
    Object(Object),
    Error(InputError),
}

/// An object and where it came from.
#[derive(Debug)]
pub struct Object {
    pub file: String,
    /// 1-based document number in the file.
    pub document: usize,
    /// The index in the document's `items` when the document is a List.
    pub item: Option<usize>,
    /// The document's first line (1-based).
    pub line: usize,
    pub value: Value,
}

impl Object {
    /// `file#document`, or `file#document.items[i]` for an item of a List.
    pub fn origin(&self) -> String {
        match self.item {
            Some(i) => format!("{}#{}.items[{i}]", self.file, self.document),
            None => format!("{}#{}", self.file, self.document),
        }
    }
}

/// A document (or a whole source) that could not be read.
#[derive(Debug)]
pub struct InputError {
    pub file: String,
    /// 0: the source itself could not be read.
    pub document: usize,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.document == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: document {} (line {}): {}", self.file, self.document, self.line, self.message)
        }
    }
}

/// Whether a line separates YAML documents, as kubectl's YAML reader decides:
/// it starts with `---` and nothing but whitespace follows.
fn is_separator(line: &[u8]) -> bool {
    line.strip_prefix(b"---").is_some_and(|rest| rest.iter().all(u8::is_ascii_whitespace))
}

/// Reads the documents of a source one by one.
pub struct Documents {
    reader: Option<Box<dyn BufRead>>,
    file: String,
    /// Lines read so far.
    line: usize,
    /// Documents started so far (the number of the one being read).
    document: usize,
    /// Entries parsed and not handed out yet (a List's items, JSON streams).
    pending: std::collections::VecDeque<Entry>,
    /// Set by `next_chunk` when the document is a v1 `List` in kubectl's
    /// YAML shape and its `items:` line was reached: the items are then read
    /// one at a time ([`Documents::next_item`]), never the whole List at once.
    list: Option<ListItems>,
}

/// The items of a streamed List document.
#[derive(Debug, Default)]
struct ListItems {
    /// Items handed out so far.
    index: usize,
    /// The current item's text (its `- ` / `  ` indentation removed) and first line.
    item: Vec<u8>,
    item_line: usize,
    /// Past the items (`kind: List`, `metadata:`): the rest of the document is skipped.
    tail: bool,
    /// A sequence was found in the tail (reported once, as an input error).
    stray: bool,
    /// Whether the item list was entered: `next_chunk` found `items:`.
    started: bool,
    /// kubectl's JSON layout (`-o json`: `"items": [`, items at 8 spaces).
    json: bool,
    /// The document so far (up to and with `items:`) and its first line:
    /// kept until the first item shows kubectl's layout (`- ` in column 0);
    /// any other layout is read whole after all.
    header: Vec<u8>,
    start: usize,
}

/// Whether a document that starts with `header` and then has a line
/// `items:` is a v1 `List` printed by kubectl (`apiVersion: v1` at the top
/// level, before the items; `kind: List` comes after them).
/// Whether a document whose text so far is `header` and whose next line is
/// `line` is a v1 `List` exactly as `kubectl -o json` prints it: `{`, then
/// `"apiVersion": "v1",`, then `"items": [` (4 spaces). Anything else
/// (another order, a nested or repeated `items`) is read whole. Constant
/// time: the header is compared, never scanned.
fn json_list_header(header: &[u8], line: &[u8]) -> bool {
    const HEAD: &[u8] = b"{\n    \"apiVersion\": \"v1\",\n";
    line.trim_ascii_end() == b"    \"items\": [" && header == HEAD
}

fn list_header(api_v1: bool, line: &[u8]) -> bool {
    api_v1 && line.strip_suffix(b"\n").unwrap_or(line).trim_ascii_end() == b"items:"
}

impl Documents {
    pub fn open(source: &Source) -> Self {
        let file = source.label();
        match source.open() {
            Ok(reader) => {
                Self { reader: Some(reader), file, line: 0, document: 0, pending: Default::default(), list: None }
            }
            Err(e) => {
                let err = InputError { file: file.clone(), document: 0, line: 0, message: read_error(&e) };
                let mut pending = std::collections::VecDeque::new();
                pending.push_back(Entry::Error(err));
                Self { reader: None, file, line: 0, document: 0, pending, list: None }
            }
        }
    }

    /// Reads the next document's text: `(first line, text)`, `None` at the end.
    fn next_chunk(&mut self) -> Option<Result<(usize, Vec<u8>), String>> {
        let reader = self.reader.as_mut()?;
        let mut chunk = Vec::new();
        let mut line = Vec::new();
        let start = self.line + 1;
        let mut api_v1 = false;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => {
                    self.reader = None;
                    return (!chunk.is_empty()).then_some(Ok((start, chunk)));
                }
                Ok(_) => {
                    self.line += 1;
                    if is_separator(&line) {
                        // A separator ends the document before it (empty ones are skipped later).
                        return Some(Ok((start, chunk)));
                    }
                    // Whether the document so far has `apiVersion: v1` at its top
                    // level: kept as it is read (a rescan per line is quadratic).
                    api_v1 |= line.trim_ascii_end() == b"apiVersion: v1";
                    let json = json_list_header(&chunk, &line);
                    if json || list_header(api_v1, &line) {
                        // The items follow, one at a time.
                        let mut header = chunk.clone();
                        header.extend_from_slice(&line);
                        self.list = Some(ListItems { started: true, json, header, start, ..ListItems::default() });
                        return Some(Ok((start, chunk)));
                    }
                    chunk.extend_from_slice(&line);
                }
                Err(e) => {
                    self.reader = None;
                    return Some(Err(read_error(&e)));
                }
            }
        }
    }

    /// Reads the next line of a streamed List: `Some(true)` at the end of its
    /// document (a separator, the end of the source, a read error).
    fn list_line(&mut self, line: &mut Vec<u8>) -> bool {
        line.clear();
        let read = match self.reader.as_mut() {
            Some(r) => r.read_until(b'\n', line),
            None => Ok(0),
        };
        match read {
            Ok(0) => {
                self.reader = None;
                true
            }
            Ok(_) => {
                self.line += 1;
                is_separator(line)
            }
            Err(e) => {
                self.reader = None;
                let (line, message) = (self.line + 1, read_error(&e));
                self.pending.push_back(self.error(line, message));
                true
            }
        }
    }

    /// [`Self::next_item`] for kubectl's JSON layout: an item is the lines
    /// from `        {` to `        }` (its comma dropped); `    ]` ends the
    /// items, and the rest of the document (`"kind": "List"`, `metadata`)
    /// holds nothing to judge. Any other layout before the first item is
    /// read whole, as any other document.
    fn next_json_item(&mut self) -> bool {
        let mut line = Vec::new();
        loop {
            let end = self.list_line(&mut line);
            let Some(list) = self.list.as_mut() else { return false };
            if end {
                if !list.item.is_empty() {
                    let message = "the JSON List ends inside an item".to_string();
                    let at = list.item_line;
                    list.item.clear();
                    self.pending.push_back(self.error(at, message));
                    return true;
                }
                return false;
            }
            let t = line.trim_ascii_end();
            if list.tail {
                // kubectl's tail: `"kind": "List"` and `metadata`, up to the
                // `}` in column 0 that ends the List; what follows is read as
                // any other input. A second `items` is never skipped silently.
                if t == b"}" {
                    self.list = None;
                    return false;
                }
                if t.trim_ascii_start().starts_with(b"\"items\"") && !list.stray {
                    list.stray = true;
                    let message = "a second \"items\" after the List's items (not kubectl's layout): it is not judged; give one List per document".to_string();
                    let at = self.line;
                    self.pending.push_back(self.error(at, message));
                    return true;
                }
                continue;
            }
            if list.item.is_empty() {
                if t == b"        {" {
                    list.item_line = self.line;
                    list.item.extend_from_slice(&line);
                    continue;
                }
                if list.index > 0 && (t == b"    ]" || t == b"    ],") {
                    list.tail = true;
                    continue;
                }
                if list.index == 0 {
                    self.read_list_whole(line);
                    return false;
                }
                list.tail = true;
                let message =
                    "not kubectl's JSON List layout after this item: the rest of the List is not judged".to_string();
                let at = self.line;
                self.pending.push_back(self.error(at, message));
                return true;
            }
            list.item.extend_from_slice(&line);
            if t == b"        }" || t == b"        }," {
                let mut text = std::mem::take(&mut list.item);
                if let Some(close) = text.iter().rposition(|b| *b == b'}') {
                    text.truncate(close + 1);
                }
                let at = list.item_line;
                self.emit_item(text, at);
                return true;
            }
        }
    }

    /// Reads the streamed List's next item into `pending`; `false` at the end
    /// of the List's document (a separator or the end of the source).
    fn next_item(&mut self) -> bool {
        if self.list.as_ref().is_some_and(|l| l.json) {
            return self.next_json_item();
        }
        let mut line = Vec::new();
        loop {
            let end = self.list_line(&mut line);
            let Some(list) = self.list.as_mut() else { return false };
            if end {
                self.finish_item();
                return false;
            }
            let starts_item = line.starts_with(b"- ") || line.trim_ascii_end() == b"-";
            if list.tail {
                // Past `kind: List`/`metadata:` kubectl prints no sequence: a
                // `- ` line here is not skipped silently (it may be an item).
                if starts_item && !list.stray {
                    list.stray = true;
                    let message = "a sequence after the List's items (not kubectl's layout): it is not judged; give the List with its items under `items:` only".to_string();
                    let line = self.line;
                    self.pending.push_back(self.error(line, message));
                    return true;
                }
                continue;
            }
            let blank = line.trim_ascii().is_empty() || line.starts_with(b"#");
            if list.index == 0 && list.item.is_empty() && !starts_item && !blank {
                // Not kubectl's layout (indented items, a flow list on the
                // next line): the document is read whole, as any other.
                self.read_list_whole(line);
                return false;
            }
            let continues = line.starts_with(b"  ") || blank;
            if starts_item {
                let finished = (std::mem::take(&mut list.item), list.item_line);
                list.item_line = self.line;
                list.item.extend_from_slice(line.get(2..).unwrap_or_default());
                if !finished.0.is_empty() {
                    self.emit_item(finished.0, finished.1);
                    return true;
                }
            } else if continues {
                // An item's line without its indentation; a blank or top-level comment line as a blank one.
                let text = if line.starts_with(b"  ") { line.get(2..).unwrap_or_default() } else { b"\n" };
                list.item.extend_from_slice(text);
            } else {
                // `kind: List`, `metadata:`: the items are over.
                list.tail = true;
                if self.finish_item() {
                    return true;
                }
            }
        }
    }

    /// Reads the rest of the List's document (from `line` on) and parses it
    /// whole with what came before, into `pending`.
    fn read_list_whole(&mut self, line: Vec<u8>) {
        let Some(list) = self.list.take() else { return };
        let mut text = list.header;
        text.extend_from_slice(&line);
        let mut next = Vec::new();
        while let Some(reader) = self.reader.as_mut() {
            next.clear();
            match reader.read_until(b'\n', &mut next) {
                Ok(0) => self.reader = None,
                Ok(_) => {
                    self.line += 1;
                    if is_separator(&next) {
                        break;
                    }
                    text.extend_from_slice(&next);
                }
                Err(e) => {
                    self.reader = None;
                    let (line, message) = (self.line + 1, read_error(&e));
                    self.pending.push_back(self.error(line, message));
                }
            }
        }
        let parsed = String::from_utf8(text)
            .map_err(|e| format!("is not UTF-8 text: {}", e.utf8_error()))
            .and_then(|t| parse_chunk(&t, list.start));
        match parsed {
            Ok(values) => {
                for v in values {
                    self.push_value(list.start, v);
                }
            }
            Err(message) => self.pending.push_back(self.error(list.start, message)),
        }
    }

    /// Hands out the current item, if any; whether there was one.
    fn finish_item(&mut self) -> bool {
        let Some(list) = self.list.as_mut() else { return false };
        let item = std::mem::take(&mut list.item);
        if item.is_empty() {
            return false;
        }
        let line = list.item_line;
        self.emit_item(item, line);
        true
    }

    /// Parses one item of the streamed List (its text and first line) into `pending`.
    fn emit_item(&mut self, text: Vec<u8>, line: usize) {
        let Some(list) = self.list.as_mut() else { return };
        let index = list.index;
        list.index += 1;
        let document = self.document;
        let parsed = String::from_utf8(text)
            .map_err(|e| format!("is not UTF-8 text: {}", e.utf8_error()))
            .and_then(|t| parse_chunk(&t, line));
        match parsed {
            Ok(values) => {
                for value in values.into_iter().filter(|v| !v.is_null()) {
                    let file = self.file.clone();
                    expand(value, &mut |_, value| {
                        let item = Some(index);
                        self.pending.push_back(Entry::Object(Object {
                            file: file.clone(),
                            document,
                            item,
                            line,
                            value,
                        }));
                    });
                }
            }
            Err(message) => self.pending.push_back(self.error(line, message)),
        }
    }

    fn error(&self, line: usize, message: String) -> Entry {
        Entry::Error(InputError { file: self.file.clone(), document: self.document, line, message })
    }

    fn push_value(&mut self, line: usize, value: Value) {
        if value.is_null() {
            return;
        }
        let document = self.document;
        expand(value, &mut |item, value| {
            self.pending.push_back(Entry::Object(Object { file: self.file.clone(), document, item, line, value }));
        });
    }
}

impl Iterator for Documents {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            if self.list.as_ref().is_some_and(|l| !l.started) {
                if self.next_item() {
                    continue;
                }
                self.list = None;
                continue;
            }
            let (start, bytes) = match self.next_chunk()? {
                Ok(c) => c,
                Err(message) => {
                    self.document += 1;
                    let line = self.line + 1;
                    return Some(self.error(line, message));
                }
            };
            let text = match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(e) => {
                    self.document += 1;
                    return Some(self.error(start, format!("is not UTF-8 text: {}", e.utf8_error())));
                }
            };
            if let Some(list) = self.list.as_mut().filter(|l| l.started) {
                // A streamed List: its header holds nothing to judge.
                list.started = false;
                self.document += 1;
                continue;
            }
            if is_blank(&text) {
                continue; // only comments or whitespace: not a document (kubectl skips it too)
            }
            self.document += 1;
            // The document's line is its first line of content (comments before it are not the object).
            let first = start + text.lines().take_while(|l| is_blank(l)).count();
            match parse_chunk(&text, start) {
                Ok(values) => {
                    for v in values {
                        self.push_value(first, v);
                    }
                }
                Err(message) => return Some(self.error(first, message)),
            }
        }
    }
}

/// Only whitespace, comments and directives.
fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t.starts_with('%')
    })
}

fn read_error(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::IsADirectory {
        "is a directory (give it as a path to read its .yaml/.yml/.json files; -R walks subdirectories)".to_string()
    } else {
        format!("cannot be read: {e}")
    }
}

/// A document's values: a JSON stream (one or more values) or one YAML document.
/// Bounded by the document: its nesting is checked before any parser runs,
/// and YAML aliases may not expand it beyond twice its size
/// ([`super::document_bounds`]).
fn parse_chunk(text: &str, first_line: usize) -> Result<Vec<Value>, String> {
    use serde::de::DeserializeSeed as _;
    super::document_bounds::check_nesting(text).map_err(|e| {
        let line = e.rsplit("line ").next().and_then(|l| l.split(' ').next()).and_then(|l| l.parse::<usize>().ok());
        let shifted = line.map(|l| l.saturating_add(first_line).saturating_sub(1));
        match (line, shifted) {
            (Some(l), Some(s)) => {
                format!("is refused: it {}", e.replacen(&format!("line {l}"), &format!("line {s}"), 1))
            }
            _ => format!("is refused: it {e}"),
        }
    })?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let json: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(text).into_iter::<Value>().collect();
        if let Ok(values) = json {
            return Ok(values);
        }
    }
    let budget = std::cell::Cell::new(text.len().saturating_mul(2).saturating_add(64));
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = super::document_bounds::Bounded { budget: &budget }
            .deserialize(doc)
            .map_err(|e| yaml_error(&e, first_line))?;
        out.push(v);
    }
    Ok(out)
}

/// The YAML error with its line counted from the start of the file.
fn yaml_error(e: &serde_yaml_ng::Error, first_line: usize) -> String {
    let text = e.to_string();
    let Some(loc) = e.location() else { return format!("is neither JSON nor YAML: {text}") };
    let relative = format!(" at line {} column {}", loc.line(), loc.column());
    let body = text.split(&relative).next().unwrap_or(&text);
    format!(
        "is neither JSON nor YAML: {body} at line {} column {}",
        loc.line().saturating_add(first_line).saturating_sub(1),
        loc.column()
    )
}

/// Calls `f` for the value, or for every item of a `List`/`*List` (items of
/// a typed list without `kind`/`apiVersion` get the list's), recursively.
fn expand(value: Value, f: &mut dyn FnMut(Option<usize>, Value)) {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let is_list = kind.ends_with("List") && value.get("items").is_some_and(Value::is_array);
    if !is_list {
        f(None, value);
        return;
    }
    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty()).map(str::to_string);
    let api_version = value.get("apiVersion").cloned();
    let Value::Object(mut map) = value else { return };
    let Some(Value::Array(items)) = map.remove("items") else { return };
    for (i, mut item) in items.into_iter().enumerate() {
        if let Some(obj) = item.as_object_mut() {
            if let Some(k) = &item_kind {
                obj.entry("kind").or_insert_with(|| Value::String(k.clone()));
                if let Some(v) = &api_version {
                    obj.entry("apiVersion").or_insert_with(|| v.clone());
                }
            }
        }
        let mut nested = false;
        if item.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")) {
            nested = true;
        }
        if nested {
            expand(item, &mut |_, v| f(Some(i), v));
        } else {
            f(Some(i), item);
        }
    }
}

/// Every object of a file (`-`: stdin), Lists expanded; the first document
/// that cannot be read is an error (for `--context` and `--config`).
pub fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let source = if path.as_os_str() == "-" { Source::Stdin } else { Source::File(path.to_path_buf()) };
    let mut out = Vec::new();
    for entry in Documents::open(&source) {
        match entry {
            Entry::Object(o) => out.push(o.value),
            Entry::Error(e) => anyhow::bail!("{e}"),
        }
    }
    Ok(out)
}

/// One document of settings text (the value of a ConfigMap key).
pub fn parse_settings_text(text: &str) -> Result<Value, String> {
    let mut values = parse_chunk(text, 1)?;
    Ok(if values.is_empty() { Value::Null } else { values.swap_remove(0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<Entry> {
        let mut d = Documents {
            reader: Some(Box::new(std::io::Cursor::new(text.as_bytes().to_vec()))),
            file: "f".into(),
            line: 0,
            document: 0,
            pending: Default::default(),
            list: None,
        };
        d.by_ref().collect()
    }

    #[test]
    fn splits_like_kubectl_and_keeps_going_after_a_bad_document() {
        let text =
            "# c\n---\na: 1\n--- \nb: [\n---\n\n---\nkind: List\napiVersion: v1\nitems: [{kind: X}, {kind: Y}]\n";
        let got = docs(text);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(matches!(&got[0], Entry::Object(o) if o.document == 1 && o.line == 3));
        match &got[1] {
            Entry::Error(e) => {
                assert_eq!((e.document, e.line), (2, 5));
                assert!(e.message.contains("at line 6") || e.message.contains("at line 5"), "{}", e.message);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&got[3], Entry::Object(o) if o.item == Some(1) && o.document == 3 && o.value["kind"] == "Y"));
    }

    #[test]
    fn typed_lists_give_their_items_kind_and_version() {
        let got = docs(
            r#"{"apiVersion":"hypershift.openshift.io/v1beta1","kind":"HostedClusterList","items":[{"metadata":{"name":"a"}}]}"#,
        );
        match got.as_slice() {
            [Entry::Object(o)] => {
                assert_eq!(o.value["kind"], "HostedCluster");
                assert_eq!(o.value["apiVersion"], "hypershift.openshift.io/v1beta1");
                assert_eq!(o.origin(), "f#1.items[0]");
            }
            other => panic!("{other:?}"),
        }
        assert!(docs("").is_empty());
        assert!(docs("# only a comment\n---\n").is_empty());
        // A JSON stream of several objects is several objects.
        assert_eq!(docs("{\"a\":1}\n{\"b\":2}\n").len(), 2);
    }

    /// `kubectl get -o yaml` prints one `kind: List` document: its items are
    /// read one at a time, with their lines, and what follows still counts.
    #[test]
    fn a_kubectl_list_is_streamed_item_by_item() {
        let text = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: A\n  metadata:\n    name: a\n\n  # c\n- apiVersion: v1\n  kind: B\n  spec: [x,\n- kind: C\nkind: List\nmetadata:\n  resourceVersion: \"\"\n---\nkind: D\n";
        let got = docs(text);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            matches!(&got[0], Entry::Object(o) if o.value["metadata"]["name"] == "a" && o.item == Some(0) && o.line == 3 && o.document == 1),
            "{got:#?}"
        );
        assert!(matches!(&got[1], Entry::Error(e) if e.line >= 9 && e.document == 1), "{:?}", got[1]);
        assert!(matches!(&got[2], Entry::Object(o) if o.value["kind"] == "C" && o.item == Some(2) && o.line == 12));
        assert!(matches!(&got[3], Entry::Object(o) if o.value["kind"] == "D" && o.document == 2 && o.item.is_none()));
        // A sequence after the items is an input error, never skipped silently.
        let stray = docs("apiVersion: v1\nitems:\n- kind: A\nkind: List\nmore:\n- kind: B\n");
        assert!(
            matches!(stray.as_slice(), [Entry::Object(a), Entry::Error(e)] if a.value["kind"] == "A" && e.line == 6),
            "{stray:#?}"
        );
        // A List with its kind before the items, and one in flow style (parsed whole): the same objects.
        let before = docs("kind: List\napiVersion: v1\nitems:\n- kind: A\n- kind: B\n");
        assert_eq!(before.len(), 2, "{before:?}");
        let whole = docs("apiVersion: v1\nkind: List\nitems: [{kind: A}, {kind: B}]\n");
        assert_eq!(whole.len(), 2, "{whole:?}");
        // Indented items (yq, by hand): not kubectl's layout, read whole, the same objects.
        let indented = docs(
            "apiVersion: v1\nitems:\n  - kind: A\n    metadata: {name: a}\n  - kind: B\nkind: List\n---\nkind: C\n",
        );
        assert!(
            matches!(indented.as_slice(), [Entry::Object(a), Entry::Object(b), Entry::Object(c)]
                if a.value["metadata"]["name"] == "a" && a.item == Some(0) && b.value["kind"] == "B" && b.item == Some(1)
                    && c.value["kind"] == "C" && c.document == 2),
            "{indented:#?}"
        );
        // kubectl -o json: streamed too, item by item, with their lines.
        let json = docs("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"kind\": \"A\",\n            \"metadata\": {\"name\": \"a\"}\n        },\n        {\n            \"kind\": \"B\"\n        }\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n");
        assert!(
            matches!(json.as_slice(), [Entry::Object(a), Entry::Object(b)]
                if a.value["metadata"]["name"] == "a" && a.item == Some(0) && a.line == 4 && b.value["kind"] == "B" && b.item == Some(1) && b.line == 8),
            "{json:#?}"
        );
        // What follows the List's closing brace is judged too; a second items is an input error.
        let then = docs("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"kind\": \"A\"\n        }\n    ],\n    \"kind\": \"List\"\n}\n{\"kind\": \"B\"}\n");
        assert!(
            matches!(then.as_slice(), [Entry::Object(a), Entry::Object(b)] if a.value["kind"] == "A" && b.value["kind"] == "B"),
            "{then:#?}"
        );
        let twice = docs("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"kind\": \"A\"\n        }\n    ],\n    \"items\": [{\"kind\": \"B\"}],\n    \"kind\": \"List\"\n}\n");
        assert!(matches!(twice.as_slice(), [Entry::Object(_), Entry::Error(_)]), "{twice:#?}");
        // items nested before the real ones (not kubectl's layout): read whole, as the apiserver would.
        let nested = docs("{\n    \"metadata\": {},\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n            \"kind\": \"A\"\n        }\n    ],\n    \"kind\": \"List\"\n}\n");
        assert!(
            matches!(nested.as_slice(), [Entry::Object(a)] if a.value["kind"] == "A" && a.item == Some(0)),
            "{nested:#?}"
        );
        // Compact JSON (one line) is read whole: the same objects.
        let compact = docs("{\"apiVersion\":\"v1\",\"items\":[{\"kind\":\"A\"},{\"kind\":\"B\"}],\"kind\":\"List\"}\n");
        assert_eq!(compact.len(), 2, "{compact:?}");
        let streamed = docs("apiVersion: v1\nitems:\n- kind: A\n- kind: B\nkind: List\n");
        assert!(
            matches!(streamed.as_slice(), [Entry::Object(a), Entry::Object(b)] if a.value["kind"] == "A" && b.item == Some(1))
        );
    }
}
