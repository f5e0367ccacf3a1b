//! The `etcd-init` container itself.
//!
//! Fields the apiserver defaults (terminationMessagePath, fieldRef apiVersion,
//! imagePullPolicy) are written out explicitly, so the stored, defaulted
//! object equals what this builds and re-admission yields no patch.

use crate::json_at::At;
use serde_json::{json, Map, Value};

use super::{
    identity::{self, escape_env, mount_for, references, Identity, Key, Origin},
    INIT_CONTAINER,
};
use crate::{
    schema::{go_quote, FieldError},
    settings::Settings,
};

/// The restore script as kept in the repository (POSIX sh; shellcheck-clean;
/// runs under dash, busybox sh and bash); apart from the literals (src/embedded_text.rs).
pub fn restore_script() -> &'static str {
    crate::embedded_text::text(crate::embedded_text::Embedded::RestoreScript)
}

/// The script as injected: comment lines and indentation dropped (it travels
/// in every StatefulSet revision and every admission response). The restore
/// tests run exactly this text, taken from the patched object.
pub fn injected_script() -> &'static str {
    static SCRIPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| {
        restore_script()
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    })
}

thread_local! {
    /// One owned copy of [`injected_script`] made ahead of time, for the first
    /// container built (per thread; the Kubewarden module has one).
    ///
    /// *Why:* the container owns its command's strings, so each mutation copies
    /// the ~36 KB script. In the Kubewarden module the copy is made during
    /// pre-initialisation ([`stash_script_copy`]) and lives in the snapshot: a
    /// fresh instance's only mutation moves it in instead of writing nine fresh
    /// pages (issue #35). Elsewhere nothing is stashed and every container copies.
    static SPARE: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// Where the stashed copy's text lies (0: none), once recognised
/// ([`recognise_stashed_script`]: the Kubewarden module only).
static SPARE_TEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Makes the copy the next container this thread builds takes (the
/// Kubewarden pre-initialisation); returns the address of its text.
pub fn stash_script_copy() -> usize {
    let copy = injected_script().to_owned();
    let at = copy.as_ptr() as usize;
    SPARE.set(Some(copy));
    at
}

/// From now on the text at `at` (the stashed copy, [`stash_script_copy`])
/// is recognised as the script by its address. Only where that memory is
/// never handed out again: the Kubewarden pre-initialisation calls it once
/// the copy lies below the arena, which never reuses a block of the
/// snapshot (`kubewarden::arena`). Nowhere else: an allocator that reuses
/// the address would make another string of the same length the script.
pub fn recognise_stashed_script(at: usize) {
    SPARE_TEXT.store(at, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `s` is the stashed copy (moved into a container), by address: the
/// copy is never written after it is made, and its memory is never reused
/// (see [`recognise_stashed_script`]); `false` wherever nothing was recognised.
pub fn is_stashed_script(s: &str) -> bool {
    let at = SPARE_TEXT.load(std::sync::atomic::Ordering::Relaxed);
    at != 0 && s.as_ptr() as usize == at && s.len() == injected_script().len()
}

/// The script, owned: the stashed copy if there is one, else a new copy.
fn script_owned() -> String {
    SPARE.take().unwrap_or_else(|| injected_script().to_owned())
}

/// The env variable that carries the restore URL, in the control-plane-operator's
/// etcd-init and in the injected one alike.
pub const URL_ENV: &str = "RESTORE_URL_ETCD";

/// Removes the restore URL's value from `container` (built by
/// [`build_init_container`]), leaving `{"name": "RESTORE_URL_ETCD"}` for a
/// patch's `copy` to fill in; the index of that env item.
pub fn strip_url(container: &mut Value) -> Option<usize> {
    let env = container.get_mut("env")?.as_array_mut()?;
    let (i, item) = env.iter_mut().enumerate().find(|(_, e)| e.get("name").and_then(Value::as_str) == Some(URL_ENV))?;
    item.as_object_mut()?.remove("value");
    Some(i)
}

/// Env names the init container sets itself (never copied from etcd).
const OWN_ENV: &[&str] = &[
    URL_ENV,
    "RESTORE_MAX_BYTES",
    "RESTORE_MAX_TIME_SECONDS",
    "RESTORE_ALLOW_WITHOUT_REVISION_BUMP",
    "ETCD_INIT_STAGE_DIR",
    "ETCD_INIT_WAL_STAGE_DIR",
    "ETCD_INIT_PROBE_TIMEOUT",
    "ETCD_INIT_RESTORE_GENERATION",
    "ETCD_INIT_WAIT_SECONDS",
    "RESTORE_REVISION_BUMP",
    "RESTORE_REVISION_FLOOR",
    "ETCD_INIT_VOLUME_OWNER",
];

/// The largest etcd cluster a restore is built for.
pub const MAX_MEMBERS: u64 = 9;

/// Directory, under a volume's mount path, where etcd-init stages its work.
pub const STAGE_DIR_NAME: &str = ".etcd-init-restore";

fn env_name(e: &Value) -> &str {
    e.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// The etcd container and its index.
fn etcd_container(sts: &Value) -> Option<(usize, &Value)> {
    sts.at("/spec/template/spec/containers")?
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, c)| c.get("name").and_then(Value::as_str) == Some("etcd"))
}

/// Builds the etcd-init container for `sts`, or the field errors that say
/// why the template's identity or layout cannot be established.
pub fn build_init_container(
    sts: &Value,
    generation: &str,
    url: &str,
    (floor, owner): (u64, &str),
    settings: &Settings,
) -> Result<Value, Vec<FieldError>> {
    let Some((index, etcd)) = etcd_container(sts) else {
        return Err(vec![FieldError::required("spec.template.spec.containers[name=etcd]")
            .with_detail("the etcd StatefulSet has no container named \"etcd\"")]);
    };
    let template = Template {
        etcd,
        base: format!("spec.template.spec.containers[{index}]"),
        id: identity::read(etcd, index)?,
        mounts: etcd.get("volumeMounts").and_then(Value::as_array).cloned().unwrap_or_default(),
    };
    let layout = template.layout(sts, settings)?;
    let own_mounts = template.own_mounts(&layout);
    let restore = Restore {
        url,
        generation,
        floor,
        owner,
        stage: format!("{}/{STAGE_DIR_NAME}", template.mount_path(layout.data)),
        wal_stage: layout
            .wal
            .filter(|i| *i != layout.data)
            .map(|i| format!("{}/{STAGE_DIR_NAME}-wal", template.mount_path(i))),
    };
    let env = init_env(&template, &own_mounts, &restore, settings)?;
    Ok(container(layout.image, env, own_mounts, etcd, settings))
}

/// The etcd container of the template, as admission reads it.
struct Template<'a> {
    etcd: &'a Value,
    /// `spec.template.spec.containers[i]`.
    base: String,
    id: Identity,
    mounts: Vec<Value>,
}

/// Where the restore goes: the volume mounts (indexes into the etcd
/// container's) of the data dir and the WAL dir, and the image it runs.
struct Layout {
    data: usize,
    wal: Option<usize>,
    image: String,
}

/// What this restore is: its URL and generation, and where it stages.
struct Restore<'a> {
    url: &'a str,
    generation: &'a str,
    /// The revision the restore lands at, at least (`RESTORE_REVISION_FLOOR`).
    floor: u64,
    /// Whose volumes these are (`ETCD_INIT_VOLUME_OWNER`, see `volume_owner`).
    owner: &'a str,
    stage: String,
    wal_stage: Option<String>,
}

impl Template<'_> {
    /// A data or WAL dir: an absolute, literal path on a mounted volume
    /// (`Ok(None)`: not set).
    fn dir(&self, key: Key, problems: &mut Vec<FieldError>) -> Option<(String, usize)> {
        let setting = self.id.get(key)?;
        let field = setting.field.clone();
        let Some(raw) = setting.source.literal() else {
            problems.push(FieldError::forbidden(
                field,
                format!("{} comes from valueFrom: admission must know the path to find its volume", key.env()),
            ));
            return None;
        };
        if !raw.starts_with('/') || raw.contains("$(") {
            problems.push(FieldError::invalid(
                field,
                go_quote(raw),
                "must be an absolute path without $(VAR) references, so admission knows which volume holds it",
            ));
            return None;
        }
        let path = if raw.len() > 1 { raw.trim_end_matches('/') } else { raw };
        let Some((i, _)) = mount_for(&self.mounts, path) else {
            problems.push(FieldError::invalid(
                field,
                go_quote(raw),
                format!("{path} is on no volume mount of the etcd container: a restore there would be lost with the container"),
            ));
            return None;
        };
        Some((path.to_string(), i))
    }

    /// The layout, or every reason the template has none a restore can use.
    fn layout(&self, sts: &Value, settings: &Settings) -> Result<Layout, Vec<FieldError>> {
        let mut problems = Vec::new();
        if self.id.get(Key::DataDir).is_none() {
            problems.push(FieldError::required(format!("{}.env[name=ETCD_DATA_DIR]", self.base)).with_detail(
                "the etcd container sets no data dir (env ETCD_DATA_DIR or --data-dir): etcd would use <name>.etcd in its working directory, which admission cannot place on a volume",
            ));
        }
        let data = self.dir(Key::DataDir, &mut problems);
        let wal = self.dir(Key::WalDir, &mut problems);
        if let (Some((d, _)), Some((w, _))) = (&data, &wal) {
            if w == d || w.starts_with(&format!("{d}/")) || d.starts_with(&format!("{w}/")) {
                problems.push(FieldError::invalid(
                    self.id.get(Key::WalDir).map(|s| s.field.clone()).unwrap_or_default(),
                    go_quote(w),
                    format!("the WAL dir must be outside the data dir {d} (and the other way round)"),
                ));
            }
        }
        self.check_identity(sts, &mut problems);
        let image = settings
            .etcd_init_image
            .clone()
            .or_else(|| self.etcd.get("image").and_then(Value::as_str).map(str::to_string));
        if image.is_none() {
            problems.push(
                FieldError::required(format!("{}.image", self.base))
                    .with_detail("the etcd container has no image and no etcdInitImage setting is set"),
            );
        }
        match (data, image, problems.is_empty()) {
            (Some((_, data)), Some(image), true) => Ok(Layout { data, wal: wal.map(|(_, i)| i), image }),
            _ => Err(problems),
        }
    }

    /// Identity exactly as etcd has it, never guessed: etcd names a member
    /// "default" and advertises http://localhost:2380 unless told otherwise,
    /// so a template without a name (or, with several members, without the
    /// initial cluster and this member's peer URL) has no identity a restore
    /// could match.
    fn check_identity(&self, sts: &Value, problems: &mut Vec<FieldError>) {
        let base = &self.base;
        if let Some(r) = sts.at("/spec/replicas").filter(|r| r.as_u64().is_none_or(|r| r > MAX_MEMBERS)) {
            if !r.is_null() {
                problems.push(FieldError::invalid(
                    "spec.replicas",
                    r.to_string(),
                    format!(
                        "an etcd cluster restored by etcd-init has 1 to {MAX_MEMBERS} members (etcd recommends 3 or 5)"
                    ),
                ));
            }
        }
        let replicas = sts.at("/spec/replicas").and_then(Value::as_u64).unwrap_or(1);
        if self.id.get(Key::Name).is_none() {
            problems.push(FieldError::required(format!("{base}.env[name=ETCD_NAME]")).with_detail(
                "the etcd container sets no member name (env ETCD_NAME or --name; etcd would call every member \"default\"): set ETCD_NAME=$(HOSTNAME) with HOSTNAME from metadata.name",
            ));
        }
        if replicas > 1 && self.id.get(Key::InitialCluster).is_none() {
            problems.push(FieldError::required(format!("{base}.env[name=ETCD_INITIAL_CLUSTER]")).with_detail(format!(
                "the etcd container sets no initial cluster (env ETCD_INITIAL_CLUSTER or --initial-cluster) for {replicas} replicas: etcd would start every member as a cluster of its own"
            )));
        }
        if self.id.get(Key::InitialCluster).is_some() && self.id.get(Key::InitialAdvertisePeerUrls).is_none() {
            problems.push(FieldError::required(format!("{base}.env[name=ETCD_INITIAL_ADVERTISE_PEER_URLS]")).with_detail(
                "the etcd container sets an initial cluster but not this member's peer URL (env ETCD_INITIAL_ADVERTISE_PEER_URLS or --initial-advertise-peer-urls; etcd's default http://localhost:2380 is in no multi-member cluster)",
            ));
        }
    }

    /// Mounts: the data volume (with its subPath), the WAL volume, and the
    /// volumes holding the client and peer TLS files (read-only) for the
    /// liveness probe.
    fn own_mounts(&self, layout: &Layout) -> Vec<Value> {
        let mut own: Vec<Value> = Vec::new();
        let mut push = |i: usize, read_only: bool| {
            let Some(m) = self.mounts.get(i) else { return };
            let mut m = m.clone();
            if let (true, Some(o)) = (read_only, m.as_object_mut()) {
                o.insert("readOnly".into(), json!(true));
            }
            if !own.iter().any(|o| o.get("mountPath") == m.get("mountPath")) {
                own.push(m);
            }
        };
        push(layout.data, false);
        if let Some(i) = layout.wal {
            push(i, false);
        }
        for k in identity::TLS_FILES {
            if let Some((i, _)) = self.id.literal(k).and_then(|p| mount_for(&self.mounts, p)) {
                push(i, true);
            }
        }
        own
    }

    /// The mount path of volume mount `i`, without a trailing `/`.
    fn mount_path(&self, i: usize) -> &str {
        self.mounts.get(i).and_then(|m| m.get("mountPath")).and_then(Value::as_str).unwrap_or("/").trim_end_matches('/')
    }
}

/// The container object, every field the apiserver would default written out.
fn container(image: String, env: Vec<Value>, mounts: Vec<Value>, etcd: &Value, settings: &Settings) -> Value {
    let mut c = Map::new();
    c.insert("name".into(), json!(INIT_CONTAINER));
    c.insert("image".into(), json!(image));
    c.insert("imagePullPolicy".into(), json!("IfNotPresent"));
    c.insert(
        "command".into(),
        Value::Array(vec![json!("/bin/sh"), json!("-c"), Value::String(script_owned()), json!(INIT_CONTAINER)]),
    );
    c.insert("env".into(), Value::Array(env));
    c.insert(
        "resources".into(),
        json!({
            "requests": {"cpu": settings.restore_cpu_request, "memory": settings.restore_memory_request},
            "limits": {"memory": settings.restore_memory_limit},
        }),
    );
    c.insert("volumeMounts".into(), Value::Array(mounts));
    c.insert("securityContext".into(), security_context(etcd.get("securityContext")));
    c.insert("terminationMessagePath".into(), json!("/dev/termination-log"));
    // etcd-init writes its one-line result (RESTORED / SKIPPED / HANDED OFF /
    // FAILED) there; should it not get to, the last lines of the log become
    // the termination message, so `kubectl describe pod` shows what happened.
    c.insert("terminationMessagePolicy".into(), json!("FallbackToLogsOnError"));
    Value::Object(c)
}

/// A hardened security context: a network-facing container holding a bearer
/// URL gets no privilege escalation, no capabilities, the runtime's seccomp
/// profile and a read-only root filesystem; it runs as the etcd container's
/// user and group so the restored files belong to etcd.
fn security_context(etcd: Option<&Value>) -> Value {
    let mut sc = Map::new();
    sc.insert("allowPrivilegeEscalation".into(), json!(false));
    sc.insert("capabilities".into(), json!({"drop": ["ALL"]}));
    sc.insert("readOnlyRootFilesystem".into(), json!(true));
    for key in ["runAsUser", "runAsGroup", "runAsNonRoot"] {
        if let Some(v) = etcd.and_then(|e| e.get(key)).filter(|v| !v.is_null()) {
            sc.insert(key.into(), v.clone());
        }
    }
    sc.insert("seccompProfile".into(), json!({"type": "RuntimeDefault"}));
    Value::Object(sc)
}

/// The init container's env: the etcd container's identity entries and
/// what they reference, the identity flags as env, then etcd-init's own.
fn init_env(
    template: &Template<'_>,
    mounts: &[Value],
    restore: &Restore<'_>,
    settings: &Settings,
) -> Result<Vec<Value>, Vec<FieldError>> {
    let (etcd, id, base) = (template.etcd, &template.id, &template.base);
    let etcd_env: Vec<Value> = etcd.get("env").and_then(Value::as_array).cloned().unwrap_or_default();
    // The identity's env entries and every entry they, the flag values and
    // subPathExpr reference through $(VAR), transitively.
    let mut wanted: Vec<String> = Vec::new();
    let mut queue: Vec<String> = id
        .settings()
        .iter()
        .filter(|s| matches!(s.source, Origin::Env(_)))
        .map(|s| s.key.env().to_string())
        .chain(id.settings().iter().filter_map(|s| s.source.literal()).flat_map(references))
        .chain(mounts.iter().filter_map(|m| m.get("subPathExpr").and_then(Value::as_str)).flat_map(references))
        .collect();
    while let Some(r) = queue.pop() {
        if wanted.contains(&r) {
            continue;
        }
        for e in etcd_env.iter().filter(|e| env_name(e) == r) {
            queue.extend(references(e.get("value").and_then(Value::as_str).unwrap_or_default()));
        }
        wanted.push(r);
    }
    let own: Vec<&String> = wanted.iter().filter(|w| OWN_ENV.contains(&w.as_str())).collect();
    if !own.is_empty() {
        return Err(own
            .into_iter()
            .map(|name| {
                FieldError::forbidden(
                    format!("{base}.env[name={name}]"),
                    format!("{name} is set by etcd-init itself: the etcd container's identity must not reference it"),
                )
            })
            .collect());
    }
    // One pass in the etcd container's order (a $(VAR) resolves against the
    // entries before it, exactly as in etcd), then the flag values (the
    // kubelet expands args against the whole env), then etcd-init's own.
    // Nothing else is defined: a reference etcd leaves literal stays literal.
    let mut env: Vec<Value> = etcd_env.iter().filter(|e| wanted.iter().any(|w| w == env_name(e))).cloned().collect();
    for s in id.settings() {
        if let Origin::Flag(v) = &s.source {
            env.push(json!({"name": s.key.env(), "value": v}));
        }
    }
    env.push(json!({"name": "ETCD_INIT_STAGE_DIR", "value": escape_env(&restore.stage)}));
    if let Some(w) = &restore.wal_stage {
        env.push(json!({"name": "ETCD_INIT_WAL_STAGE_DIR", "value": escape_env(w)}));
    }
    env.push(json!({"name": "RESTORE_URL_ETCD", "value": escape_env(restore.url)}));
    env.push(json!({"name": "ETCD_INIT_RESTORE_GENERATION", "value": restore.generation}));
    env.push(json!({"name": "RESTORE_MAX_BYTES", "value": settings.restore_max_bytes.to_string()}));
    env.push(json!({"name": "RESTORE_MAX_TIME_SECONDS", "value": settings.restore_max_time_seconds.to_string()}));
    env.push(json!({
        "name": "RESTORE_ALLOW_WITHOUT_REVISION_BUMP",
        "value": settings.allow_restore_without_revision_bump.to_string(),
    }));
    env.push(json!({"name": "RESTORE_REVISION_BUMP", "value": settings.restore_revision_bump.to_string()}));
    env.push(json!({"name": "RESTORE_REVISION_FLOOR", "value": restore.floor.to_string()}));
    env.push(json!({"name": "ETCD_INIT_VOLUME_OWNER", "value": escape_env(restore.owner)}));
    env.push(json!({"name": "ETCD_INIT_WAIT_SECONDS", "value": settings.restore_wait_seconds.to_string()}));
    Ok(env)
}
