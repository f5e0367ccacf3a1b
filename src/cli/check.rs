//! `check`: every object in the inputs judged as the cluster would judge it,
//! streamed as it is decided. By default each object is a CREATE (a GitOps
//! repository: what applying it would meet); with `--audit` each is a no-op
//! UPDATE of itself (oldObject = object), which is how the apiserver judges
//! the next write of a live object (`kubectl get -o yaml`): ratcheting,
//! immutability and the clock apply exactly as they would there.
//!
//! The judged inputs are also context: a HostedControlPlane among them is
//! the one an etcd StatefulSet's mutation looks up (`--context` adds more).
//! etcd StatefulSets are therefore judged after every other object, once
//! all inputs have been read. Nothing else is kept: memory stays bounded by
//! the largest document, whatever the number of documents.
//!
//! Exit codes: 0 every object allowed, 1 some denied, 2 an input could not
//! be read (or, with `--strict`, an object was skipped or there was none).

mod emit;

use hcp_etcd_admission::json_at::At;
use std::path::PathBuf;

use hcp_etcd_admission::{
    admission::{self, AdmissionRequest, DecisionInput, GroupVersionKind, GroupVersionResource, Operation, Target},
    catalog,
    enforcement::Enforced,
    finding::Warning,
    lookup::{ContextObjects, Lookup, LookupError},
    settings::Settings,
};
use serde::Serialize;
use serde_json::Value;

use super::{
    input::{self, Entry, Object},
    redact, ClockArgs, DecisionArgs,
};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// kubectl-style lines and a summary.
    #[default]
    Text,
    /// A JSON array of results, one element per object, written as decided.
    Json,
    /// One YAML document per object, written as decided.
    Yaml,
    /// JUnit XML (one testsuite per file, one testcase per object) for CI test reports.
    Junit,
    /// SARIF 2.1.0 (one result per error or warning, with file and line) for code-scanning annotations.
    Sarif,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:
  hcp-etcd-admission check examples/                       # every .yaml/.yml/.json in a directory (-R: subdirectories too)
  kubectl get hostedclusters,hostedcontrolplanes,hcpetcdbackups -A -o yaml | hcp-etcd-admission check --audit
  hcp-etcd-admission check --output sarif -R deploy/ > check.sarif
  hcp-etcd-admission check --show-patched examples/cluster.yaml examples/etcd-statefulset.yaml

Exit codes: 0 all allowed, 1 some denied, 2 an input error (or, with --strict, a skipped object or no object),
--warn-exit-code CODE when the only findings are warnings. A closed pipe (| head) stops the run with the code of
the objects judged so far. See docs/cli.md.")]
pub struct CheckArgs {
    #[command(flatten)]
    pub decision: DecisionArgs,
    #[command(flatten)]
    pub clock: ClockArgs,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Walk directories recursively (without it, only the files directly in a given directory).
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Judge each object as a live one: a no-op UPDATE of itself (oldObject = object), as the
    /// apiserver judges its next write. Without it every object is a CREATE.
    #[arg(long)]
    pub audit: bool,
    /// Exit 2 when an object is skipped (a kind that is not checked, a typo'd kind, an apiVersion
    /// that is not served, a document without apiVersion/kind) or when the input has no object.
    #[arg(long)]
    pub strict: bool,
    /// Exit with this code when no object is denied and no input failed, but some object has
    /// warnings (default 0: warnings do not fail a run; CI that wants them fixed sets e.g. 3).
    #[arg(long, value_name = "CODE", default_value_t = 0)]
    pub warn_exit_code: u8,
    /// Print only the objects that need attention: denied, unreadable, (with --audit) with
    /// ratcheted findings, and whatever else sets the exit code (warnings with --warn-exit-code,
    /// skipped objects with --strict). The summary still counts every object.
    #[arg(long)]
    pub failures_only: bool,
    /// Show each mutated object as it would be stored (the patch applied); presigned URLs redacted.
    #[arg(long)]
    pub show_patched: bool,
    /// Show presigned restore URLs in patches and patched objects as they are (bearer credentials:
    /// keep such output out of CI logs); by default scheme://host/path?<redacted>.
    #[arg(long)]
    pub show_secrets: bool,
    /// YAML (multi-document) or JSON files and directories; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// The result for one object (or one input that could not be read).
#[derive(Serialize, Debug, Default)]
pub struct Report {
    file: String,
    document: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<usize>,
    line: usize,
    #[serde(rename = "apiVersion", skip_serializing_if = "String::is_empty")]
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
    /// CREATE, or UPDATE with `--audit`; absent when the object was not judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    operation: Option<&'static str>,
    /// "allowed", "denied", "skipped" or "error" (the input could not be read).
    result: &'static str,
    /// The JSON patch a mutating decision applies (etcd StatefulSets).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Value>,
    /// The object after the patch (`--show-patched`).
    #[serde(skip_serializing_if = "Option::is_none")]
    patched: Option<Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    /// What to do about a denial that has no field (offline).
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<CauseReport>,
    /// The rule of a denial without causes (SARIF's `ruleId`).
    #[serde(skip)]
    denied_by: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<Warning>,
    /// Findings enforcement recorded without denying or warning (audit mode,
    /// exemptions): the response's audit annotations.
    #[serde(rename = "auditAnnotations", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    audit_annotations: std::collections::BTreeMap<String, String>,
    /// With `--audit`: the findings a CREATE of this object meets and its
    /// next write does not (ratcheting, immutability): the live object is
    /// admitted, a new one like it would be refused or warned about.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ratcheted: Vec<CauseReport>,
    /// A HostedControlPlane with a restore in progress (`restoreSnapshotURL`
    /// set, `EtcdSnapshotRestored` not True): not the moment to upgrade or
    /// bypass this project (README, Upgrade and uninstall).
    #[serde(rename = "restorePending", skip_serializing_if = "std::ops::Not::not")]
    restore_pending: bool,
}

impl Report {
    /// `file#document`, or `file#document.items[i]`.
    fn origin(&self) -> String {
        match self.item {
            Some(i) => format!("{}#{}.items[{i}]", self.file, self.document),
            None => format!("{}#{}", self.file, self.document),
        }
    }

    /// `Kind/namespace/name` (`Kind/name` for cluster-scoped objects).
    fn object(&self) -> String {
        let kind = if self.kind.is_empty() { "(no kind)" } else { &self.kind };
        if self.namespace.is_empty() {
            format!("{kind}/{}", self.name)
        } else {
            format!("{kind}/{}/{}", self.namespace, self.name)
        }
    }
}

/// One cause of a denial, with the rule it comes from when that is known.
#[derive(Serialize, Debug)]
pub struct CauseReport {
    reason: &'static str,
    message: String,
    field: String,
    /// The rule id (the README's rule table).
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<String>,
    /// What an apiserver artefact in the message means.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// Counts over a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    allowed: usize,
    denied: usize,
    skipped: usize,
    errors: usize,
    /// Judged objects with warnings.
    warned: usize,
    /// Objects with ratcheted findings (`--audit`).
    ratcheted: usize,
    /// HostedControlPlanes with a restore pending.
    restores_pending: usize,
    audit: bool,
}

/// The kinds `check` judges, and the apiVersion each is served at.
const SERVED: [(&str, &str); 5] = [
    ("HCPEtcdBackup", hcp_etcd_admission::api::API_VERSION),
    ("HostedCluster", hcp_etcd_admission::api::API_VERSION),
    ("HostedControlPlane", hcp_etcd_admission::api::API_VERSION),
    ("StatefulSet", "apps/v1"),
    ("Secret", "v1"),
];

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.at(p).and_then(Value::as_str).unwrap_or_default()
}

/// Edit distance (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row.first().copied().unwrap_or_default();
        if let Some(first) = row.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let next = (prev + cost)
                .min(row.get(j).copied().unwrap_or(usize::MAX) + 1)
                .min(row.get(j + 1).copied().unwrap_or(usize::MAX) + 1);
            prev = row.get(j + 1).copied().unwrap_or_default();
            if let Some(slot) = row.get_mut(j + 1) {
                *slot = next;
            }
        }
    }
    row.last().copied().unwrap_or_default()
}

/// The checked kind a misspelt one probably means.
pub fn did_you_mean(kind: &str) -> Option<&'static str> {
    let lower = kind.to_ascii_lowercase();
    let lower = lower.strip_suffix("list").filter(|_| kind.len() > 4).unwrap_or(&lower);
    SERVED.iter().map(|(k, _)| *k).find(|k| k.to_ascii_lowercase() == lower).or_else(|| {
        SERVED
            .iter()
            .map(|(k, _)| (*k, distance(&k.to_ascii_lowercase(), lower)))
            .filter(|(_, d)| *d <= 2)
            .min_by_key(|(_, d)| *d)
            .map(|(k, _)| k)
    })
}

/// The lookup of a `check` run: the `--context` objects, plus the
/// HostedControlPlanes of the judged inputs (one per namespace/name).
struct CheckLookup<'a> {
    given: &'a ContextObjects,
    inline: &'a [Value],
}

impl Lookup for CheckLookup<'_> {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        let mut out = self.given.hosted_control_planes(namespace)?;
        for h in self.inline.iter().filter(|h| str_at(h, "/metadata/namespace") == namespace) {
            let name = str_at(h, "/metadata/name");
            if !out.iter().any(|o| str_at(o, "/metadata/name") == name) {
                out.push(h.clone());
            }
        }
        Ok(out)
    }

    // The preflight's snapshot of the cluster comes from --context only: the
    // judged files are what is about to be applied, not what exists.
    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        self.given.hcp_etcd_backups(namespace)
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        self.given.secret(namespace, name)
    }

    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        self.given.etcd_stateful_set(namespace)
    }
}

/// Findings of a CREATE that are never reported as ratcheted: "preflight
/// skipped" says what this run could not read, nothing about the object;
/// a restore URL's expiry is about the moment of a restore, which for a
/// stored HostedCluster is over (or pending, and then the etcd-init alerts
/// and `HcpEtcdInitRestorePending` say so), so every long-restored cluster
/// would be listed for nothing; the credentials Secret's detected mode is
/// information, not a finding.
const NOT_RATCHETED: [&str; 5] = [
    hcp_etcd_admission::rules::preflight::UNAVAILABLE.id,
    hcp_etcd_admission::rules::secret::MODE.id,
    hcp_etcd_admission::rules::URL_EXPIRED.id,
    hcp_etcd_admission::rules::URL_EXPIRING.id,
    hcp_etcd_admission::rules::INIT_URL_EXPIRY.id,
];

/// What is fixed for a run.
struct Judge<'a> {
    args: &'a CheckArgs,
    settings: &'a Settings,
    now: hcp_etcd_admission::time::Now,
    given: &'a ContextObjects,
}

const JSON_TYPES: [&str; 6] = ["string", "object", "integer", "number", "boolean", "array"];

/// A one-line explanation of what looks like a bug but is the apiserver's own wording.
fn note_for(message: &str) -> Option<String> {
    if message.contains("some validation rules were not checked because the object was invalid") {
        return Some("the apiserver's own message: CEL rules are not evaluated while a type, required, enum or size error is present; fix the other errors and check again".to_string());
    }
    let shown = message.strip_prefix("Invalid value: \"")?;
    let (ty, rest) = shown.split_once('"')?;
    (JSON_TYPES.contains(&ty) && rest.starts_with(':')).then(|| {
        format!("\"{ty}\" is the value's JSON type, not the value: the apiserver reports type errors and failed CEL rules this way")
    })
}

/// What to do about a denial without a field, offline.
fn hint_for(message: &str) -> Option<&'static str> {
    (message.contains("HostedControlPlane") && message.contains("etcd restore is pending")).then_some(
        "offline, the HostedControlPlane comes from the judged files or --context FILE; in a cluster the control-plane-operator retries until it can be read",
    )
}

impl Judge<'_> {
    fn cause(&self, c: &admission::Cause) -> CauseReport {
        CauseReport {
            reason: c.reason,
            message: c.message.clone(),
            field: c.field.clone(),
            rule: c.rule.map(str::to_string),
            note: note_for(&c.message),
        }
    }

    /// The review `check` judges `o` as: a CREATE, or with `--audit` a no-op
    /// UPDATE of itself (the apiserver's judgement of the object's next write).
    fn request_for(&self, o: Object, target: Target, served: &str, audit: bool) -> AdmissionRequest {
        let (group, version) = served.split_once('/').unwrap_or(("", served));
        let operation = if audit { Operation::Update } else { Operation::Create };
        let old_object = audit.then(|| o.value.clone());
        AdmissionRequest {
            uid: format!("check-{}", o.origin()),
            kind: GroupVersionKind {
                group: group.to_string(),
                version: version.to_string(),
                kind: target.kind().to_string(),
            },
            resource: GroupVersionResource {
                group: group.to_string(),
                version: version.to_string(),
                resource: target.resource().split('.').next().unwrap_or_default().to_string(),
            },
            sub_resource: None,
            name: Some(str_at(&o.value, "/metadata/name").to_string()),
            namespace: Some(str_at(&o.value, "/metadata/namespace").to_string()),
            operation,
            object: Some(o.value),
            old_object,
            dry_run: Some(true),
            user_info: None,
        }
    }

    /// The decision for `req`, on the objects it reads from the context
    /// files (given and inline), read first: as in every shell.
    fn decide(&self, req: &AdmissionRequest, inline: &[Value]) -> admission::Decision {
        let source = CheckLookup { given: self.given, inline };
        let answers = admission::plan(req, self.settings, None).read_from(&source);
        let decision = DecisionInput { settings: self.settings, lookup: Some(&answers), now: self.now, expect: None };
        admission::decide(req, &decision)
    }

    /// The causes and warnings of `create` that `update` (the same object's
    /// no-op UPDATE) does not have.
    fn ratcheted(&self, create: &admission::Decision, update: &admission::Decision) -> Vec<CauseReport> {
        let causes = |d: &admission::Decision| -> Vec<admission::Cause> {
            d.denial().and_then(|x| x.details.as_ref()).map(|x| x.causes.clone()).unwrap_or_default()
        };
        let kept = causes(update);
        // What the UPDATE still says, as a cause or inside a warning, is not ratcheted.
        let said = |c: &admission::Cause| {
            kept.iter().any(|k| k.field == c.field && k.message == c.message)
                || update.warnings.iter().any(|w| w.contains(&c.message))
        };
        let mut out: Vec<CauseReport> = causes(create)
            .iter()
            .filter(|c| !said(c))
            .map(|c| self.cause(c))
            .filter(|c| !c.rule.as_deref().is_some_and(|r| NOT_RATCHETED.contains(&r)))
            .collect();
        let no_causes = causes(create).is_empty();
        if let (Some(denial), true) = (create.denial(), no_causes && update.allowed()) {
            // A denial without causes (no field): the rule that denied, and its message.
            let rule = create.rules.iter().find(|r| r.outcome == Enforced::Denied).map(|r| r.rule);
            if rule.is_some_and(|r| NOT_RATCHETED.contains(&r)) {
                return out;
            }
            out.push(CauseReport {
                reason: "Denied",
                message: denial.message.clone(),
                field: String::new(),
                rule: rule.map(str::to_string),
                note: None,
            });
        }
        let listed = |w: &&Warning| w.rule.is_some_and(|r| NOT_RATCHETED.contains(&r));
        for w in create.warnings.iter().filter(|w| !update.warnings.contains(w) && !listed(w)) {
            out.push(CauseReport {
                reason: "Warning",
                message: w.text.clone(),
                field: String::new(),
                rule: w.rule.map(str::to_string),
                note: None,
            });
        }
        out
    }

    /// Judges one object.
    fn judge(&self, o: Object, inline: &[Value]) -> Report {
        let v = &o.value;
        let mut report = Report {
            file: o.file.clone(),
            document: o.document,
            item: o.item,
            line: o.line,
            api_version: str_at(v, "/apiVersion").to_string(),
            kind: str_at(v, "/kind").to_string(),
            namespace: str_at(v, "/metadata/namespace").to_string(),
            name: str_at(v, "/metadata/name").to_string(),
            result: "skipped",
            ..Report::default()
        };
        if report.kind.is_empty() || report.api_version.is_empty() || !v.is_object() {
            report.message = "not a Kubernetes object: apiVersion and kind must be set".to_string();
            return report;
        }
        let kind = report.kind.clone();
        let Some(target) = Target::for_kind(&kind) else {
            report.message = match did_you_mean(&kind) {
                Some(k) => format!("kind {kind:?} is not checked by hcp-etcd-admission; did you mean {k:?}?"),
                None => format!("kind {kind:?} is not checked by hcp-etcd-admission"),
            };
            return report;
        };
        let served = SERVED.iter().find(|(k, _)| *k == kind).map_or("", |(_, v)| *v);
        if report.api_version != served {
            report.message = format!(
                "apiVersion {:?} is not served for {kind} (served: {served:?}); not judged",
                report.api_version
            );
            return report;
        }
        // With --audit, the CREATE too: what it meets and the next write
        // does not is reported as ratcheted.
        let create = self.args.audit.then(|| {
            let copy = Object { file: String::new(), document: 0, item: None, line: 0, value: o.value.clone() };
            self.decide(&self.request_for(copy, target, served, false), inline)
        });
        report.restore_pending =
            kind == "HostedControlPlane" && hcp_etcd_admission::api::readers::restore_pending(&o.value);
        let mut req = self.request_for(o, target, served, self.args.audit);
        let decided = self.decide(&req, inline);
        if let Some(create) = create {
            report.ratcheted = self.ratcheted(&create, &decided);
        }
        report.operation = Some(req.operation.as_str());
        report.result = if decided.allowed() { "allowed" } else { "denied" };
        if let Some(denial) = decided.denial() {
            report.message = denial.message.clone();
            let causes = denial.details.as_ref().map(|d| d.causes.as_slice()).unwrap_or_default();
            report.causes = causes.iter().map(|c| self.cause(c)).collect();
            if report.causes.is_empty() {
                report.hint = hint_for(&denial.message);
                report.denied_by = decided.rules.iter().find(|r| r.outcome == Enforced::Denied).map(|r| r.rule);
            }
        }
        if let Some(patch) = &decided.patch {
            if self.args.show_patched {
                if let Some(mut object) = req.object.take() {
                    if json_patch::patch(&mut object, patch).is_ok() {
                        report.patched = Some(object);
                    }
                }
            }
            report.patch = serde_json::to_value(patch).ok();
        }
        if !self.args.show_secrets {
            report.patch.iter_mut().chain(report.patched.iter_mut()).for_each(redact::value);
        }
        report.warnings = decided.warnings;
        report.audit_annotations = decided.audit_annotations;
        report
    }
}

fn count(r: &Report, s: &mut Summary) {
    // "Preflight skipped" says what this run could not read, nothing about the object.
    let tool = hcp_etcd_admission::rules::preflight::UNAVAILABLE.id;
    s.warned += usize::from(r.warnings.iter().any(|w| w.rule != Some(tool)));
    s.ratcheted += usize::from(!r.ratcheted.is_empty());
    s.restores_pending += usize::from(r.restore_pending);
    match r.result {
        "allowed" => s.allowed += 1,
        "denied" => s.denied += 1,
        "skipped" => s.skipped += 1,
        _ => s.errors += 1,
    }
}

fn input_error(e: &input::InputError) -> Report {
    Report {
        file: e.file.clone(),
        document: e.document,
        line: e.line,
        result: "error",
        message: e.message.clone(),
        ..Report::default()
    }
}

/// Whether the object must wait until every input is read: the etcd
/// StatefulSet looks up its namespace's HostedControlPlane, which may come later.
fn needs_all_inputs(v: &Value) -> bool {
    str_at(v, "/kind") == "StatefulSet" && str_at(v, "/metadata/name") == "etcd"
}

/// Returns the process exit code.
pub fn run(args: &CheckArgs) -> anyhow::Result<i32> {
    use std::io::IsTerminal as _;
    admission::warm_up()?;
    let settings = args.decision.settings()?;
    let now = args.clock.now()?;
    let given = args.decision.context()?;
    if args.files.is_empty() && std::io::stdin().is_terminal() {
        anyhow::bail!("no input: give files or directories, or pipe objects in (e.g. kubectl get hostedclusters -A -o yaml | hcp-etcd-admission check --audit)");
    }
    let rules = catalog::entries()?;
    let judge = Judge { args, settings: &settings, now, given: &given };
    let mut out = Out {
        emit: emit::Emitter::new(std::io::stdout().lock(), args.output, &rules),
        summary: Summary { audit: args.audit, ..Summary::default() },
        failures_only: args.failures_only,
        warnings_fail: args.warn_exit_code != 0,
        strict: args.strict,
    };
    match judge_all(args, &judge, &mut out) {
        Ok(()) => {}
        // The reader stopped reading (`| head`): the verdict of what was
        // judged so far, never a silent 0 after a denial.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit_code(args, &out.summary)),
        Err(e) => return Err(e.into()),
    }
    let summary = out.summary;
    let objects = summary.allowed + summary.denied + summary.skipped;
    if objects == 0 && summary.errors == 0 {
        eprintln!(
            "{}: no objects in the input (kubectl: \"no objects passed to apply\")",
            if args.strict { "error" } else { "warning" }
        );
    }
    match out.emit.finish(&summary) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other?,
    }
    Ok(exit_code(args, &summary))
}

/// Where reports go: counted, then written unless `--failures-only` hides them.
struct Out<'a, W: std::io::Write> {
    emit: emit::Emitter<'a, W>,
    summary: Summary,
    failures_only: bool,
    warnings_fail: bool,
    strict: bool,
}

impl<W: std::io::Write> Out<'_, W> {
    fn report(&mut self, r: &Report) -> std::io::Result<()> {
        count(r, &mut self.summary);
        // Whatever sets the exit code is shown: warnings with --warn-exit-code,
        // skipped objects with --strict.
        let attention = matches!(r.result, "denied" | "error")
            || !r.ratcheted.is_empty()
            || (self.warnings_fail && !r.warnings.is_empty())
            || (self.strict && r.result == "skipped");
        if self.failures_only && !attention {
            return Ok(());
        }
        self.emit.report(r)
    }
}

/// Judges every input, streaming reports; etcd StatefulSets last.
fn judge_all<W: std::io::Write>(args: &CheckArgs, judge: &Judge<'_>, out: &mut Out<'_, W>) -> std::io::Result<()> {
    out.emit.begin()?;
    let mut inline: Vec<Value> = Vec::new();
    let mut deferred: Vec<Object> = Vec::new();
    for source in input::sources(&args.files, args.recursive) {
        let source = match source {
            Ok(s) => s,
            Err(message) => {
                let e = input::InputError { file: String::new(), document: 0, line: 0, message };
                eprintln!("error: {}", e.message);
                out.report(&input_error(&e))?;
                continue;
            }
        };
        for entry in input::Documents::open(&source) {
            let o = match entry {
                Entry::Object(o) => o,
                Entry::Error(e) => {
                    eprintln!("error: {e}");
                    out.report(&input_error(&e))?;
                    continue;
                }
            };
            if str_at(&o.value, "/kind") == "HostedControlPlane" {
                let (ns, name) = (str_at(&o.value, "/metadata/namespace"), str_at(&o.value, "/metadata/name"));
                // The same object twice: the later one wins, as with kubectl apply.
                inline.retain(|h| str_at(h, "/metadata/namespace") != ns || str_at(h, "/metadata/name") != name);
                inline.push(o.value.clone());
            }
            if needs_all_inputs(&o.value) {
                deferred.push(o);
                continue;
            }
            out.report(&judge.judge(o, &inline))?;
        }
    }
    for o in deferred {
        out.report(&judge.judge(o, &inline))?;
    }
    Ok(())
}

/// 2 for an input error (or `--strict` and a skipped object or none), 1 for
/// a denial, `--warn-exit-code` for warnings alone, else 0.
fn exit_code(args: &CheckArgs, s: &Summary) -> i32 {
    let objects = s.allowed + s.denied + s.skipped;
    let strict_failed = args.strict && (s.skipped > 0 || objects == 0);
    if s.errors > 0 || strict_failed {
        2
    } else if s.denied > 0 {
        1
    } else if s.warned > 0 {
        i32::from(args.warn_exit_code)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_case_and_spelling_slips() {
        assert_eq!(did_you_mean("HcpEtcdBackup"), Some("HCPEtcdBackup"));
        assert_eq!(did_you_mean("HostedClusters"), Some("HostedCluster"));
        assert_eq!(did_you_mean("hostedcontrolplane"), Some("HostedControlPlane"));
        assert_eq!(did_you_mean("ConfigMap"), None);
        assert_eq!(did_you_mean("Deployment"), None);
    }

    #[test]
    fn notes_explain_the_apiservers_type_wording() {
        assert!(note_for("Invalid value: \"string\": bucket must ...").is_some());
        assert!(note_for("Invalid value: \"xn--b\": must not").is_none());
    }
}
