//! Writing `check` results in each output format, one object at a time (the
//! text, JSON, YAML and SARIF outputs are written as each object is decided;
//! JUnit needs its totals in the opening tags and is written at the end).
//! A write error (a closed pipe) ends the run: the caller exits quietly.

use std::{
    collections::{hash_map::DefaultHasher, HashMap},
    hash::{Hash, Hasher},
    io::{BufWriter, Read, Seek, Write},
};

use hcp_etcd_admission::catalog;
use serde_json::{json, Value};

use hcp_etcd_admission::{api::upstream_rules, enforcement};

use super::{Output, Report, Summary};

/// A JUnit testsuite: a run of consecutive results from one input file (the
/// etcd StatefulSets, judged last, make a second suite of their file). Its
/// testcases are spooled to a temporary file, so memory stays bounded.
#[derive(Default)]
struct Suite {
    file: String,
    tests: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
    /// Bytes of its testcases in the spool.
    bytes: u64,
}

trait Spool: Read + Write + Seek {}
impl<T: Read + Write + Seek> Spool for T {}

/// An unnamed temporary file (removed at once; it lives while open), or
/// memory when none can be made.
fn spool() -> Box<dyn Spool> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let path = std::env::temp_dir().join(format!("hcp-etcd-admission-junit-{}-{nanos}", std::process::id()));
    match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
        Ok(f) => {
            let _ = std::fs::remove_file(&path);
            Box::new(f)
        }
        Err(_) => Box::new(std::io::Cursor::new(Vec::new())),
    }
}

pub struct Emitter<'a, W: Write> {
    out: BufWriter<W>,
    format: Output,
    rules: &'a [catalog::Row],
    /// Reports written so far.
    written: usize,
    /// How often each warning text was seen (by hash: the texts themselves
    /// are kept only for the repeated ones).
    seen: HashMap<u64, usize>,
    repeated: Vec<(u64, String)>,
    suites: Vec<Suite>,
    spool: Option<BufWriter<Box<dyn Spool>>>,
    /// SARIF results written so far.
    results: usize,
}

fn hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Text that is safe inside XML attributes and elements (XML 1.0 forbids
/// most control characters even when escaped).
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A SARIF artifact URI for a file label (stdin has no path).
fn uri(file: &str) -> String {
    if file == "<stdin>" || file.is_empty() {
        return "stdin".to_string();
    }
    let mut out = String::with_capacity(file.len());
    for b in file.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What the text output says under a HostedControlPlane with a restore in progress.
const RESTORE_PENDING: &str = "restore pending: restoreSnapshotURL is set and EtcdSnapshotRestored is not True; \
upgrading this project or deleting its mutating webhook now can stall the restore (README: Upgrade and uninstall)";

/// The synthetic SARIF rules (results that no catalog rule names).
const SYNTHETIC: [(&str, &str); 5] = [
    ("schema", "the object violates its OpenAPI schema (required, type, enum, length, pattern ...)"),
    ("denied", "the object is denied without a field error (the etcd StatefulSet's restore decision cannot be established, a request that cannot be judged)"),
    ("warning", "a warning the apiserver would return with the answer (unknown fields, ...)"),
    ("skipped", "the object was not judged (a kind that is not checked, an apiVersion that is not served, no apiVersion/kind)"),
    ("input-error", "an input that could not be read or parsed"),
];

impl<'a, W: Write> Emitter<'a, W> {
    pub fn new(out: W, format: Output, rules: &'a [catalog::Row]) -> Self {
        Self {
            out: BufWriter::with_capacity(1 << 16, out),
            format,
            rules,
            written: 0,
            seen: HashMap::new(),
            repeated: Vec::new(),
            suites: Vec::new(),
            spool: None,
            results: 0,
        }
    }

    pub fn begin(&mut self) -> std::io::Result<()> {
        if self.format != Output::Sarif {
            return Ok(());
        }
        let mut rules: Vec<Value> = self
            .rules
            .iter()
            .map(|e| {
                let text = if e.message.is_empty() { e.field.clone() } else { e.message.clone() };
                json!({"id": e.id, "shortDescription": {"text": text},
                    "properties": {"origin": e.origin, "objects": e.objects, "field": e.field, "action": e.severity}})
            })
            .collect();
        rules.extend(SYNTHETIC.iter().map(|(id, text)| json!({"id": id, "shortDescription": {"text": text}})));
        // The ids a finding carries besides the catalog's: every ruleId a result names is defined.
        rules.extend(
            enforcement::PSEUDO_RULES
                .iter()
                .map(|id| json!({"id": id, "shortDescription": {"text": enforcement::pseudo_rule_summary(id)}})),
        );
        let driver = json!({"name": "hcp-etcd-admission", "version": env!("CARGO_PKG_VERSION"), "rules": rules});
        write!(
            self.out,
            "{{\"$schema\":\"https://json.schemastore.org/sarif-2.1.0.json\",\"version\":\"2.1.0\",\"runs\":[{{\"tool\":{{\"driver\":{driver}}},\"results\":["
        )
    }

    pub fn report(&mut self, r: &Report) -> std::io::Result<()> {
        match self.format {
            Output::Text => self.text(r)?,
            Output::Json => {
                let pretty = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
                self.out.write_all(if self.written == 0 { b"[\n" } else { b",\n" })?;
                for (i, line) in pretty.lines().enumerate() {
                    if i > 0 {
                        self.out.write_all(b"\n")?;
                    }
                    write!(self.out, "  {line}")?;
                }
            }
            Output::Yaml => {
                let yaml = serde_yaml_ng::to_string(r).map_err(std::io::Error::other)?;
                write!(self.out, "---\n{yaml}")?;
            }
            Output::Junit => self.junit(r)?,
            Output::Sarif => self.sarif(r)?,
        }
        self.written += 1;
        if self.format != Output::Junit {
            self.out.flush()?;
        }
        Ok(())
    }

    /// Whether a warning is printed (its first occurrence) or only counted.
    fn first_time(&mut self, w: &str) -> bool {
        let h = hash(w);
        let n = self.seen.entry(h).or_insert(0);
        *n += 1;
        if *n == 2 {
            self.repeated.push((h, w.to_string()));
        }
        *n == 1
    }

    fn text(&mut self, r: &Report) -> std::io::Result<()> {
        if r.result == "error" {
            return Ok(()); // already on stderr, where kubectl puts input errors
        }
        let suffix = match r.patch.as_ref().and_then(Value::as_array) {
            Some(ops) => format!(" (mutated: {} JSON patch operations; --output json shows them)", ops.len()),
            None => String::new(),
        };
        writeln!(self.out, "{}: {}: {}{suffix}", r.origin(), r.object(), r.result)?;
        if r.result == "skipped" {
            writeln!(self.out, "  {}", r.message)?;
        }
        if r.result == "denied" && r.causes.is_empty() {
            writeln!(self.out, "  error: {}", r.message)?;
            if let Some(hint) = r.hint {
                writeln!(self.out, "    hint: {hint}")?;
            }
        }
        for c in &r.causes {
            // A project rule's message names its rule already; upstream's do not.
            match c.rule.as_deref().filter(|id| upstream_rules::is_upstream(id)) {
                Some(id) => writeln!(self.out, "  error: {}: {} (rule {id})", c.field, c.message)?,
                None => writeln!(self.out, "  error: {}: {}", c.field, c.message)?,
            }
            if let Some(note) = &c.note {
                writeln!(self.out, "    note: {note}")?;
            }
        }
        for w in &r.warnings {
            let w = &w.text;
            if self.first_time(w) {
                writeln!(self.out, "  warning: {w}")?;
            }
        }
        for (key, text) in &r.audit_annotations {
            writeln!(self.out, "  {key}: {text}")?;
        }
        for c in &r.ratcheted {
            let field = if c.field.is_empty() { String::new() } else { format!("{}: ", c.field) };
            match c.rule.as_deref().filter(|id| upstream_rules::is_upstream(id)) {
                Some(id) => writeln!(self.out, "  ratcheted: {field}{} (rule {id})", c.message)?,
                None => writeln!(self.out, "  ratcheted: {field}{}", c.message)?,
            }
        }
        if r.restore_pending {
            writeln!(self.out, "  {RESTORE_PENDING}")?;
        }
        if let Some(patched) = &r.patched {
            writeln!(self.out, "  patched:")?;
            let yaml = serde_yaml_ng::to_string(patched).map_err(std::io::Error::other)?;
            for line in yaml.lines() {
                writeln!(self.out, "    {line}")?;
            }
        }
        Ok(())
    }

    fn junit(&mut self, r: &Report) -> std::io::Result<()> {
        if self.suites.last().is_none_or(|s| s.file != r.file) {
            self.suites.push(Suite { file: r.file.clone(), ..Suite::default() });
        }
        let place = r.origin();
        let place = place.strip_prefix(&r.file).unwrap_or(&place);
        let name = if r.result == "error" { format!("{place} (input)") } else { format!("{place} {}", r.object()) };
        let mut case = format!(
            "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" line=\"{}\">\n",
            xml(&r.file),
            xml(&name),
            xml(&r.file),
            r.line.max(1)
        );
        let details: Vec<String> = if r.causes.is_empty() {
            vec![r.message.clone()]
        } else {
            r.causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
        };
        let Some(suite) = self.suites.last_mut() else { return Ok(()) };
        suite.tests += 1;
        match r.result {
            "denied" => {
                suite.failures += 1;
                case.push_str(&format!(
                    "      <failure type=\"denied\" message=\"{}\">{}</failure>\n",
                    xml(&r.message),
                    xml(&details.join("\n"))
                ));
            }
            "skipped" => {
                suite.skipped += 1;
                case.push_str(&format!("      <skipped message=\"{}\"/>\n", xml(&r.message)));
            }
            "error" => {
                suite.errors += 1;
                case.push_str(&format!("      <error type=\"input\" message=\"{}\"/>\n", xml(&r.message)));
            }
            _ => {}
        }
        if !r.warnings.is_empty() || !r.ratcheted.is_empty() {
            let text: Vec<String> = r
                .warnings
                .iter()
                .map(|w| format!("warning: {w}"))
                .chain(r.ratcheted.iter().map(|c| format!("ratcheted: {}", c.message)))
                .collect();
            case.push_str(&format!("      <system-out>{}</system-out>\n", xml(&text.join("\n"))));
        }
        case.push_str("    </testcase>\n");
        suite.bytes += case.len() as u64;
        self.spool.get_or_insert_with(|| BufWriter::new(spool())).write_all(case.as_bytes())
    }

    fn sarif(&mut self, r: &Report) -> std::io::Result<()> {
        let location = json!([{
            "physicalLocation": {"artifactLocation": {"uri": uri(&r.file)}, "region": {"startLine": r.line.max(1)}},
            "logicalLocations": [{"fullyQualifiedName": r.object(), "kind": "object"}],
        }]);
        let mut results: Vec<Value> = Vec::new();
        let mut push = |rule: &str, level: &str, text: String| {
            results.push(json!({"ruleId": rule, "level": level, "message": {"text": text}, "locations": location}));
        };
        match r.result {
            "denied" if r.causes.is_empty() => {
                let text = match r.hint {
                    Some(h) => format!("{} ({h})", r.message),
                    None => r.message.clone(),
                };
                push(r.denied_by.unwrap_or("denied"), "error", text);
            }
            "denied" => {
                for c in &r.causes {
                    push(c.rule.as_deref().unwrap_or("schema"), "error", format!("{}: {}", c.field, c.message));
                }
            }
            "skipped" => push("skipped", "note", r.message.clone()),
            "error" => push("input-error", "error", r.message.clone()),
            _ => {}
        }
        for w in &r.warnings {
            push(w.rule.unwrap_or("warning"), "warning", w.text.clone());
        }
        for c in &r.ratcheted {
            let text = format!("ratcheted (a new object would meet it): {}", c.message);
            push(c.rule.as_deref().unwrap_or("schema"), "note", text);
        }
        for v in results {
            if self.results > 0 {
                self.out.write_all(b",")?;
            }
            serde_json::to_writer(&mut self.out, &v).map_err(std::io::Error::other)?;
            self.results += 1;
        }
        Ok(())
    }

    pub fn finish(&mut self, s: &Summary) -> std::io::Result<()> {
        let audit = " (audit: each object judged as an UPDATE that leaves it unchanged, as the apiserver judges its next write)";
        match self.format {
            Output::Text => {
                for (h, text) in &self.repeated {
                    let n = self.seen.get(h).copied().unwrap_or_default();
                    writeln!(self.out, "warning on {n} objects (printed once above): {text}")?;
                }
                let errors = match s.errors {
                    0 => String::new(),
                    1 => ", 1 input error".to_string(),
                    n => format!(", {n} input errors"),
                };
                let audit = if s.audit { audit } else { "" };
                let ratcheted = match s.ratcheted {
                    0 => String::new(),
                    n => format!(
                        ", {n} with ratcheted findings (admitted as they are; a new object like them would meet them)"
                    ),
                };
                let pending = match s.restores_pending {
                    0 => String::new(),
                    1 => ", 1 restore pending (not the moment to upgrade: README, Upgrade and uninstall)".to_string(),
                    n => format!(", {n} restores pending (not the moment to upgrade: README, Upgrade and uninstall)"),
                };
                writeln!(
                    self.out,
                    "{} allowed, {} denied, {} skipped{errors}{ratcheted}{pending}{audit}",
                    s.allowed, s.denied, s.skipped
                )?;
            }
            Output::Json => self.out.write_all(if self.written == 0 { b"[]\n" } else { b"\n]\n" })?,
            Output::Yaml => {}
            Output::Junit => {
                let total = |f: fn(&Suite) -> usize| self.suites.iter().map(f).sum::<usize>();
                let (tests, failures, errors, skipped) =
                    (total(|s| s.tests), total(|s| s.failures), total(|s| s.errors), total(|s| s.skipped));
                let name = if s.audit { "hcp-etcd-admission check --audit" } else { "hcp-etcd-admission check" };
                write!(
                    self.out,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">\n"
                )?;
                let mut spool = match self.spool.take() {
                    Some(w) => {
                        let mut inner = w.into_inner().map_err(|e| e.into_error())?;
                        inner.seek(std::io::SeekFrom::Start(0))?;
                        Some(inner)
                    }
                    None => None,
                };
                for suite in &self.suites {
                    writeln!(
                        self.out,
                        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
                        xml(&suite.file),
                        suite.tests,
                        suite.failures,
                        suite.errors,
                        suite.skipped
                    )?;
                    if let Some(spool) = spool.as_mut() {
                        std::io::copy(&mut Read::by_ref(spool).take(suite.bytes), &mut self.out)?;
                    }
                    self.out.write_all(b"  </testsuite>\n")?;
                }
                self.out.write_all(b"</testsuites>\n")?;
            }
            Output::Sarif => {
                let properties = json!({"allowed": s.allowed, "denied": s.denied, "skipped": s.skipped, "ratcheted": s.ratcheted,
                    "inputErrors": s.errors, "operation": if s.audit { "UPDATE" } else { "CREATE" }});
                writeln!(self.out, "],\"properties\":{properties}}}]}}")?;
            }
        }
        self.out.flush()
    }
}
