//! The etcd member's identity and data layout, read from the etcd container
//! exactly as etcd reads it: environment (`ETCD_*`) and command-line flags
//! (`--flag=value`, `--flag value`, one or two dashes, as Go's flag package
//! accepts). A template that hides a setting from this reading (flags inside
//! a shell `-c` string, a config file, `envFrom`) or sets it twice with
//! different values is refused with the reason, never guessed.

use serde_json::Value;

use crate::schema::{go_quote, FieldError};

crate::labels::pair_enum!(
    /// One etcd setting this project must know: (its flag, its environment variable).
    pub Key {
        Name => ("name", "ETCD_NAME"),
        DataDir => ("data-dir", "ETCD_DATA_DIR"),
        WalDir => ("wal-dir", "ETCD_WAL_DIR"),
        InitialCluster => ("initial-cluster", "ETCD_INITIAL_CLUSTER"),
        InitialClusterToken => ("initial-cluster-token", "ETCD_INITIAL_CLUSTER_TOKEN"),
        InitialAdvertisePeerUrls => ("initial-advertise-peer-urls", "ETCD_INITIAL_ADVERTISE_PEER_URLS"),
        ListenPeerUrls => ("listen-peer-urls", "ETCD_LISTEN_PEER_URLS"),
        AdvertiseClientUrls => ("advertise-client-urls", "ETCD_ADVERTISE_CLIENT_URLS"),
        CertFile => ("cert-file", "ETCD_CERT_FILE"),
        KeyFile => ("key-file", "ETCD_KEY_FILE"),
        TrustedCaFile => ("trusted-ca-file", "ETCD_TRUSTED_CA_FILE"),
        PeerCertFile => ("peer-cert-file", "ETCD_PEER_CERT_FILE"),
        PeerKeyFile => ("peer-key-file", "ETCD_PEER_KEY_FILE"),
        PeerTrustedCaFile => ("peer-trusted-ca-file", "ETCD_PEER_TRUSTED_CA_FILE"),
        CipherSuites => ("cipher-suites", "ETCD_CIPHER_SUITES"),
        TlsMinVersion => ("tls-min-version", "ETCD_TLS_MIN_VERSION"),
        TlsMaxVersion => ("tls-max-version", "ETCD_TLS_MAX_VERSION"),
        PeerClientCertAuth => ("peer-client-cert-auth", "ETCD_PEER_CLIENT_CERT_AUTH"),
        PeerCertAllowedCn => ("peer-cert-allowed-cn", "ETCD_PEER_CERT_ALLOWED_CN"),
        PeerCertAllowedHostname => ("peer-cert-allowed-hostname", "ETCD_PEER_CERT_ALLOWED_HOSTNAME"),
        PeerClientCertFile => ("peer-client-cert-file", "ETCD_PEER_CLIENT_CERT_FILE"),
        PeerClientKeyFile => ("peer-client-key-file", "ETCD_PEER_CLIENT_KEY_FILE"),
        PeerCrlFile => ("peer-crl-file", "ETCD_PEER_CRL_FILE"),
    }
);

/// The etcd container's TLS profile: etcd-init's beacon and its join's
/// local etcd serve the peer port with it (issue #28: a beacon without it
/// answered where the member would refuse, e.g. TLS 1.2 next to a TLS 1.3
/// minimum, or a peer without a client certificate), and the outgoing peer
/// certificate and CRL it presents and checks. Read where visible;
/// not required, and a shell script that sets them is not refused for it
/// (the identity keys are what a restore cannot do without).
pub const PROFILE: &[Key] = KEYS.split_at(14).1;

/// The TLS files etcd reads (client and peer): their volumes are mounted
/// read-only into etcd-init for its probes.
pub const TLS_FILES: [Key; 9] = [
    Key::CertFile,
    Key::KeyFile,
    Key::TrustedCaFile,
    Key::PeerCertFile,
    Key::PeerKeyFile,
    Key::PeerTrustedCaFile,
    // etcd's own outgoing peer certificate (3.5+: a peer server certificate
    // may lack the client usage) and the peer CRL.
    Key::PeerClientCertFile,
    Key::PeerClientKeyFile,
    Key::PeerCrlFile,
];

/// Every key, identity first, then the TLS profile ([`PROFILE`]).
pub const KEYS: &[Key] = Key::ALL;

impl Key {
    /// The environment variable (`ETCD_DATA_DIR`).
    pub fn env(self) -> &'static str {
        self.pair().1
    }

    /// The flag, without dashes (`data-dir`).
    pub fn flag(self) -> &'static str {
        self.pair().0
    }

    /// Part of the TLS profile ([`PROFILE`]), not of the identity.
    pub fn is_profile(self) -> bool {
        PROFILE.contains(&self)
    }

    /// A boolean flag: Go's flag package takes `--flag` alone as true and
    /// a value only after `=` (`--flag false` leaves `false` an argument).
    fn is_bool(self) -> bool {
        self == Key::PeerClientCertAuth
    }

    fn of_flag(flag: &str) -> Option<Key> {
        KEYS.iter().copied().find(|k| k.flag() == flag)
    }
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// An env entry of the etcd container (copied as is: value or valueFrom).
    Env(Value),
    /// A command-line flag; the raw value (the kubelet expands `$(VAR)` in
    /// args exactly as in env values, so it is copied into env verbatim).
    Flag(String),
}

impl Origin {
    /// The literal value, when there is one (`valueFrom` has none).
    pub fn literal(&self) -> Option<&str> {
        match self {
            Origin::Env(e) => e.get("value").and_then(Value::as_str),
            Origin::Flag(v) => Some(v),
        }
    }
}

/// The etcd container's settings that matter to a restore.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    settings: Vec<Setting>,
}

/// One setting: which, its source, and the field path it was read from.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    pub key: Key,
    pub source: Origin,
    pub field: String,
}

impl Identity {
    pub fn get(&self, key: Key) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }

    pub fn literal(&self, key: Key) -> Option<&str> {
        self.get(key).and_then(|s| s.source.literal())
    }

    pub fn settings(&self) -> &[Setting] {
        &self.settings
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(|s| s.as_str().map(str::to_string).unwrap_or_default()).collect())
        .unwrap_or_default()
}

const SHELLS: &[&str] = &["sh", "bash", "dash", "ash", "ksh", "zsh", "busybox"];

/// A `-c` script when argv runs a shell (`sh -c '...'`, `bash -ec '...'`,
/// `sh -o pipefail -c '...'`, `sh -c -- '...'`): the first operand after the
/// options once an option holding `c` was seen.
fn shell_script(argv: &[String]) -> Option<(usize, &str)> {
    let program = argv.first()?;
    let base = program.rsplit('/').next().unwrap_or(program);
    if !SHELLS.contains(&base) {
        return None;
    }
    let mut i = 1;
    if base == "busybox" && argv.get(1).map(String::as_str) == Some("sh") {
        i = 2;
    }
    let mut dash_c = false;
    while let Some(a) = argv.get(i) {
        if a == "--" {
            i += 1;
            break;
        }
        let option = (a.starts_with('-') || a.starts_with('+')) && a.len() > 1;
        if !option {
            break;
        }
        if a.starts_with('-') && !a.starts_with("--") && a.contains('c') {
            dash_c = true;
        }
        // -o/+o and -O/+O take the next word (an option name).
        i += if matches!(a.as_str(), "-o" | "+o" | "-O" | "+O") { 2 } else { 1 };
    }
    if !dash_c {
        return None;
    }
    argv.get(i).map(|s| (i, s.as_str()))
}

/// Whether a shell script passes `flag` to a program or assigns `env`
/// (also inside `${X:+--flag=v}`-style expansions).
fn script_mentions(script: &str, key: Key) -> bool {
    let flag = key.flag();
    let words = script.split(|c: char| {
        c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '"' | '\'' | '{' | '}' | ':' | '+' | '`')
    });
    words.into_iter().any(|w| {
        let w = w.trim_start_matches('\\');
        let bare = w.trim_start_matches('-');
        let dashes = w.len() - bare.len();
        let name = bare.split('=').next().unwrap_or_default();
        ((dashes == 1 || dashes == 2) && name == flag)
            || w.strip_prefix(key.env()).is_some_and(|rest| rest.starts_with('='))
    })
}

/// Reads the identity of the container at `spec.template.spec.containers[index]`.
pub fn read(container: &Value, index: usize) -> Result<Identity, Vec<FieldError>> {
    let command = strings(container.get("command"));
    let args = strings(container.get("args"));
    let mut r = Reader {
        base: format!("spec.template.spec.containers[{index}]"),
        command_len: command.len(),
        problems: Vec::new(),
    };
    let from_env = r.env(container);
    let argv: Vec<String> = command.iter().chain(args.iter()).cloned().collect();
    let from_flags = match shell_script(&argv) {
        Some((pos, script)) => {
            r.script(pos, script);
            Vec::new()
        }
        None => {
            r.hidden_scripts(&argv);
            // argv[0] is the program, unless the image's entrypoint is (args only).
            let program_is_etcd = command.first().is_none_or(|p| p.rsplit('/').next() == Some("etcd"));
            r.flags(&argv, usize::from(!command.is_empty()), program_is_etcd)
        }
    };
    let id = r.combine(&from_env, &from_flags);
    if r.problems.is_empty() {
        Ok(id)
    } else {
        Err(r.problems)
    }
}

/// Where an identity setting was found: its key, its position, its value.
type Found<T> = Vec<(Key, usize, T)>;

/// Reads one container's identity, collecting every problem.
struct Reader {
    /// `spec.template.spec.containers[i]`.
    base: String,
    /// How many of argv's elements are `command` (the rest are `args`).
    command_len: usize,
    problems: Vec<FieldError>,
}

const CONFIG_FILE: &str =
    "etcd reads its settings from a config file, which admission cannot read: set the identity in env or flags";

impl Reader {
    /// The field of argv element `pos`.
    fn field_of(&self, pos: usize) -> String {
        if pos < self.command_len {
            format!("{}.command[{pos}]", self.base)
        } else {
            format!("{}.args[{}]", self.base, pos - self.command_len)
        }
    }

    /// Env, as the kubelet builds it: a later entry of the same name wins.
    fn env(&mut self, container: &Value) -> Found<Value> {
        let base = &self.base;
        if container.get("envFrom").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            self.problems.push(FieldError::forbidden(
                format!("{base}.envFrom"),
                "etcd settings may come from envFrom, which admission cannot read: set ETCD_* identity (ETCD_NAME, ETCD_DATA_DIR, ETCD_INITIAL_CLUSTER, ...) in env or as flags",
            ));
        }
        let mut found: Found<Value> = Vec::new();
        let env = container.get("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        for (i, e) in env.iter().enumerate() {
            let name = e.get("name").and_then(Value::as_str).unwrap_or_default();
            if name == "ETCD_CONFIG_FILE" {
                self.problems.push(FieldError::forbidden(format!("{base}.env[{i}]"), CONFIG_FILE));
            }
            if let Some(k) = KEYS.iter().copied().find(|k| k.env() == name) {
                found.retain(|(kk, _, _)| *kk != k);
                found.push((k, i, e.clone()));
            }
        }
        found
    }

    /// A shell script as the command: an identity setting inside it cannot be read exactly.
    fn script(&mut self, pos: usize, script: &str) {
        for k in KEYS.iter().copied().filter(|k| !k.is_profile()) {
            if script_mentions(script, k) {
                let (flag, env) = (k.flag(), k.env());
                self.problems.push(FieldError::forbidden(
                    self.field_of(pos),
                    format!(
                        "the etcd container sets --{flag} (or {env}) inside a shell script, which admission cannot read exactly: pass it as a command/args element (--{flag}=<value>) or as env {env}"
                    ),
                ));
            }
        }
        if script.split_whitespace().any(|w| w.trim_start_matches('-').starts_with("config-file")) {
            self.problems.push(FieldError::forbidden(self.field_of(pos), CONFIG_FILE));
        }
    }

    /// A wrapper (env, tini, dumb-init, nice, a shell behind one of them)
    /// may hand a script to a shell: an element that reads like one and
    /// mentions an identity setting hides it.
    fn hidden_scripts(&mut self, argv: &[String]) {
        for (pos, a) in argv.iter().enumerate() {
            if !a.chars().any(|c| c.is_whitespace() || c == ';') {
                continue;
            }
            for k in KEYS.iter().copied().filter(|k| !k.is_profile() && script_mentions(a, *k)) {
                let (flag, env) = (k.flag(), k.env());
                self.problems.push(FieldError::forbidden(
                    self.field_of(pos),
                    format!(
                        "this element reads like a shell script that sets --{flag} (or {env}), which admission cannot read exactly: pass it as a command/args element (--{flag}=<value>) or as env {env}"
                    ),
                ));
            }
        }
    }

    /// The identity flags of argv from `start`. etcd (Go's flag package)
    /// stops at "--": what follows is no flag. A wrapper's "--" (tini --)
    /// only ends the wrapper's own options.
    fn flags(&mut self, argv: &[String], start: usize, program_is_etcd: bool) -> Found<String> {
        let mut found: Found<String> = Vec::new();
        let mut i = start;
        while let Some(a) = argv.get(i) {
            let bare = a.trim_start_matches('-');
            let dashes = a.len() - bare.len();
            if a == "--" && program_is_etcd {
                break;
            }
            if a == "--" || !(dashes == 1 || dashes == 2) {
                i += 1;
                continue;
            }
            let (flag, inline) = match bare.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (bare, None),
            };
            if flag == "config-file" {
                self.problems.push(FieldError::forbidden(self.field_of(i), CONFIG_FILE));
            }
            let Some(k) = Key::of_flag(flag) else {
                i += 1;
                continue;
            };
            let (value, next) = match inline {
                Some(v) => (Some(v), i + 1),
                None if k.is_bool() => (Some("true".to_string()), i + 1),
                None => (argv.get(i + 1).cloned(), i + 2),
            };
            let Some(value) = value else {
                self.problems.push(FieldError::invalid(
                    self.field_of(i),
                    go_quote(a),
                    format!("--{flag} has no value"),
                ));
                break;
            };
            match found.iter().find(|(kk, _, _)| *kk == k) {
                Some((_, first, v)) if *v != value => {
                    let message = format!(
                        "--{flag} is given twice with different values ({v:?} at {}); etcd's identity must be unambiguous",
                        self.field_of(*first)
                    );
                    self.problems.push(FieldError::invalid(self.field_of(i), go_quote(&value), message));
                }
                Some(_) => {}
                None => found.push((k, i, value)),
            }
            i = next;
        }
        found
    }

    /// Env and flags together: each setting once, or a problem where they disagree.
    fn combine(&mut self, from_env: &Found<Value>, from_flags: &Found<String>) -> Identity {
        let base = self.base.clone();
        let mut id = Identity::default();
        for &k in KEYS {
            let env = from_env.iter().find(|(kk, _, _)| *kk == k);
            let flag = from_flags.iter().find(|(kk, _, _)| *kk == k);
            let setting = match (env, flag) {
                (Some((_, ei, e)), Some((_, fi, f))) if e.get("value").and_then(Value::as_str) != Some(f.as_str()) => {
                    self.problems.push(FieldError::invalid(
                        self.field_of(*fi),
                        go_quote(f),
                        format!(
                            "--{} contradicts env {} ({base}.env[{ei}]); etcd's identity must be unambiguous: set it once",
                            k.flag(),
                            k.env(),
                        ),
                    ));
                    continue;
                }
                (Some((_, ei, e)), _) => {
                    Setting { key: k, source: Origin::Env(e.clone()), field: format!("{base}.env[{ei}]") }
                }
                (None, Some((_, fi, f))) => {
                    Setting { key: k, source: Origin::Flag(f.clone()), field: self.field_of(*fi) }
                }
                (None, None) => continue,
            };
            id.settings.push(setting);
        }
        id
    }
}

/// `$(VAR)` references in a value (Kubernetes dependent-variable syntax; `$$` escapes).
pub fn references(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
            continue;
        }
        if let Some(inner) = after.strip_prefix('(') {
            if let Some(end) = inner.find(')') {
                out.push(inner[..end].to_string());
                rest = &inner[end + 1..];
                continue;
            }
        }
        rest = after;
    }
    out
}

/// Escapes a literal for an env `value`: the kubelet turns `$$` into `$`.
pub fn escape_env(value: &str) -> String {
    value.replace('$', "$$")
}

/// The volume mount of `mounts` holding `path`: the longest mount path that
/// is a whole-component prefix of it.
pub fn mount_for<'a>(mounts: &'a [Value], path: &str) -> Option<(usize, &'a Value)> {
    mounts
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let mp = m.get("mountPath").and_then(Value::as_str)?;
            let mp = if mp == "/" { "/" } else { mp.trim_end_matches('/') };
            let under = path == mp || mp == "/" || path.strip_prefix(mp).is_some_and(|rest| rest.starts_with('/'));
            under.then_some((i, m, mp.len()))
        })
        .max_by_key(|(_, _, len)| *len)
        .map(|(i, m, _)| (i, m))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn dependent_variable_references() {
        assert_eq!(
            references("https://$(HOSTNAME).etcd-discovery.$(NAMESPACE).svc:2380"),
            vec!["HOSTNAME", "NAMESPACE"]
        );
        assert_eq!(references("$$(NOT) $(YES) $(unterminated"), vec!["YES"]);
    }

    #[test]
    fn the_tls_profile_is_read_but_never_required() {
        let c = json!({"name": "etcd", "command": ["/usr/bin/etcd", "--peer-client-cert-auth", "--name", "n",
                "--tls-min-version=TLS1.3", "--cipher-suites", "TLS_AES_128_GCM_SHA256"],
            "env": [{"name": "ETCD_PEER_CERT_ALLOWED_CN", "value": "etcd-peer"}]});
        let id = read(&c, 0).expect("identity");
        // A bare boolean flag is true and does not take the next element.
        assert_eq!(id.literal(Key::PeerClientCertAuth), Some("true"));
        assert_eq!(id.literal(Key::Name), Some("n"));
        assert_eq!(id.literal(Key::TlsMinVersion), Some("TLS1.3"));
        assert_eq!(id.literal(Key::CipherSuites), Some("TLS_AES_128_GCM_SHA256"));
        assert_eq!(id.literal(Key::PeerCertAllowedCn), Some("etcd-peer"));
        let explicit = json!({"command": ["/usr/bin/etcd", "--peer-client-cert-auth=false", "--name", "n"]});
        assert_eq!(read(&explicit, 0).expect("identity").literal(Key::PeerClientCertAuth), Some("false"));
        // In a shell script: the identity is refused, the profile is not.
        let script =
            json!({"command": ["/bin/sh", "-c", "exec etcd --tls-min-version=TLS1.3 --peer-client-cert-auth"]});
        assert!(read(&script, 0).is_ok());
        let hidden = json!({"command": ["/bin/sh", "-c", "exec etcd --name=x --tls-min-version=TLS1.3"]});
        let e = read(&hidden, 0).expect_err("hidden name");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].to_string().contains("--name"), "{e:?}");
        // Contradictory: refused like any setting.
        let twice = json!({"command": ["/usr/bin/etcd", "--tls-min-version=TLS1.2"],
            "env": [{"name": "ETCD_TLS_MIN_VERSION", "value": "TLS1.3"}]});
        assert!(read(&twice, 0).is_err());
    }

    #[test]
    fn flags_in_both_forms_and_env() {
        let c = json!({"name": "etcd", "command": ["/usr/bin/etcd", "--name=$(HOSTNAME)", "-data-dir", "/var/lib/etcd-data"],
            "args": ["--wal-dir", "/wal", "--listen-client-urls", "https://0.0.0.0:2379", "--initial-cluster-token=t"],
            "env": [{"name": "ETCD_INITIAL_CLUSTER", "value": "a=b"}, {"name": "ETCD_WAL_DIR", "value": "/wal"}]});
        let id = read(&c, 0).expect("identity");
        assert_eq!(id.literal(Key::Name), Some("$(HOSTNAME)"));
        assert_eq!(id.literal(Key::DataDir), Some("/var/lib/etcd-data"));
        assert_eq!(id.literal(Key::WalDir), Some("/wal"));
        assert!(matches!(id.get(Key::WalDir).map(|s| &s.source), Some(Origin::Env(_))));
        assert_eq!(id.get(Key::DataDir).map(|s| s.field.as_str()), Some("spec.template.spec.containers[0].command[2]"));
        assert_eq!(id.literal(Key::InitialClusterToken), Some("t"));
        assert_eq!(id.literal(Key::InitialCluster), Some("a=b"));
        assert!(id.get(Key::CertFile).is_none());
    }

    #[test]
    fn hidden_and_contradictory_identity_is_refused() {
        let hidden = json!({"command": ["/bin/sh", "-c", "exec etcd --data-dir=/var/lib/x"]});
        let e = read(&hidden, 0).expect_err("hidden");
        assert!(e[0].to_string().contains("containers[0].command[2]"), "{e:?}");
        assert!(e[0].to_string().contains("--data-dir"));
        let assigned = json!({"args": ["-ec", "ETCD_NAME=x exec etcd"], "command": ["bash"]});
        assert!(read(&assigned, 0).is_err());
        // Upstream's own wrapper sets only the cluster state: allowed.
        let upstream = json!({"command": ["/bin/sh", "-c", "ETCD_INITIAL_CLUSTER_STATE=$(cat /etc/etcd/clusterstate/state) /usr/bin/etcd"],
            "env": [{"name": "ETCD_DATA_DIR", "value": "/var/lib/data"}]});
        assert_eq!(read(&upstream, 0).expect("upstream").literal(Key::DataDir), Some("/var/lib/data"));
        let twice = json!({"command": ["etcd", "--name=a", "--name", "b"]});
        assert!(read(&twice, 1).expect_err("twice")[0].to_string().contains("containers[1].command[2]"));
        let args_only = json!({"args": ["--data-dir=/d"]});
        assert_eq!(read(&args_only, 0).expect("args only").literal(Key::DataDir), Some("/d"));
        let same_twice = json!({"command": ["etcd", "--name=a", "--name", "a"]});
        assert!(read(&same_twice, 0).is_ok());
        let both =
            json!({"command": ["etcd"], "args": ["--data-dir=/a"], "env": [{"name": "ETCD_DATA_DIR", "value": "/b"}]});
        let e = read(&both, 0).expect_err("contradiction");
        assert!(e[0].to_string().contains("args[0]") && e[0].to_string().contains("contradicts env ETCD_DATA_DIR"));
        let agree =
            json!({"command": ["etcd"], "args": ["--data-dir=/a"], "env": [{"name": "ETCD_DATA_DIR", "value": "/a"}]});
        assert!(read(&agree, 0).is_ok());
        // Shell forms that used to slip past: options with arguments, "--"
        // before the script, wrappers, ${X:+...} expansions.
        for hidden in [
            json!({"command": ["sh", "-o", "pipefail", "-c", "exec etcd --data-dir=/x"]}),
            json!({"command": ["/bin/bash", "-e", "-c", "--", "exec etcd --name x"]}),
            json!({"command": ["sh", "-c", "exec etcd ${X:+--data-dir=/x}"]}),
            json!({"command": ["/usr/bin/env", "sh", "-c", "exec etcd --data-dir=/x"]}),
            json!({"command": ["tini", "--", "/bin/sh", "-c", "ETCD_NAME=a exec etcd"]}),
            json!({"command": ["dumb-init"], "args": ["bash", "-c", "etcd --initial-cluster=a=b"]}),
            json!({"command": ["busybox", "sh", "+o", "noglob", "-ec", "etcd -wal-dir /w"]}),
        ] {
            let e = read(&hidden, 0).expect_err(&hidden.to_string());
            assert!(e[0].to_string().contains("shell script"), "{hidden}: {e:?}");
        }
        // A plain wrapper with real argv elements is read as flags.
        let tini = json!({"command": ["tini", "--", "etcd", "--data-dir=/d"]});
        assert_eq!(read(&tini, 0).expect("tini").literal(Key::DataDir), Some("/d"));
        // etcd itself ignores everything after "--".
        let after = json!({"command": ["/usr/bin/etcd", "--name=a", "--", "--data-dir=/d"]});
        let id = read(&after, 0).expect("after --");
        assert_eq!(id.literal(Key::Name), Some("a"));
        assert!(id.get(Key::DataDir).is_none());
        let args_only = json!({"args": ["--", "--data-dir=/d"]});
        assert!(read(&args_only, 0).expect("args only").get(Key::DataDir).is_none());
        let env_from = json!({"envFrom": [{"configMapRef": {"name": "etcd"}}]});
        assert!(read(&env_from, 0).is_err());
        let cfg = json!({"command": ["etcd", "--config-file=/etc/etcd.yaml"]});
        assert!(read(&cfg, 0).is_err());
    }

    #[test]
    fn longest_mount_prefix_wins() {
        let mounts = vec![
            json!({"name": "root", "mountPath": "/var"}),
            json!({"name": "data", "mountPath": "/var/lib/", "subPath": "etcd"}),
            json!({"name": "lib2", "mountPath": "/var/lib2"}),
        ];
        assert_eq!(mount_for(&mounts, "/var/lib/data").map(|(i, _)| i), Some(1));
        assert_eq!(mount_for(&mounts, "/var/lib").map(|(i, _)| i), Some(1));
        assert_eq!(mount_for(&mounts, "/var/lib2x/data").map(|(i, _)| i), Some(0));
        assert_eq!(mount_for(&mounts, "/opt/data"), None);
        assert_eq!(escape_env("a$(B)$$c"), "a$$(B)$$$$c");
    }
}
