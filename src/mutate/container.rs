//! The `etcd-init` container itself.
//!
//! Fields the apiserver defaults (terminationMessagePath, fieldRef apiVersion,
//! imagePullPolicy) are written out explicitly, so the stored, defaulted
//! object equals what this builds and re-admission yields no patch.

use serde_json::{json, Map, Value};

use super::INIT_CONTAINER;
use crate::settings::Settings;

/// The restore script as kept in the repository (POSIX sh; shellcheck-clean;
/// runs under dash, busybox sh and bash).
pub const RESTORE_SCRIPT: &str = include_str!("etcd-init.sh");

/// The script as injected: comment lines and indentation dropped (it travels
/// in every StatefulSet revision and every admission response). The restore
/// tests run exactly this text, taken from the patched object.
pub fn injected_script() -> &'static str {
    static SCRIPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| {
        RESTORE_SCRIPT
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    })
}

/// Env names whose values define the member's identity, copied from the etcd
/// container when it has them.
const IDENTITY_ENV: &[&str] = &[
    "ETCD_NAME",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_INITIAL_CLUSTER",
    "ETCD_INITIAL_CLUSTER_TOKEN",
    "ETCD_DATA_DIR",
];
/// Env names the init container sets itself.
const OWN_ENV: &[&str] =
    &["HOSTNAME", "HCP_NAMESPACE", "RESTORE_URL_ETCD", "RESTORE_MAX_BYTES", "RESTORE_MAX_TIME_SECONDS"];

fn env_name(e: &Value) -> &str {
    e.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// `$(VAR)` references in an env value (Kubernetes dependent-variable syntax; `$$` escapes).
fn references(value: &str) -> Vec<String> {
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

fn etcd_container(sts: &Value) -> Option<&Value> {
    sts.pointer("/spec/template/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("etcd"))
}

/// The etcd-init container for `sts` (errors say why it cannot be built).
pub fn build_init_container(sts: &Value, namespace: &str, url: &str, settings: &Settings) -> Result<Value, String> {
    let etcd = etcd_container(sts).ok_or("the StatefulSet has no container named \"etcd\"")?;
    let mount = etcd
        .get("volumeMounts")
        .and_then(Value::as_array)
        .and_then(|m| m.iter().find(|m| m.get("name").and_then(Value::as_str) == Some("data")))
        .ok_or("the etcd container does not mount the \"data\" volume")?;
    let mount_path = mount.get("mountPath").and_then(Value::as_str).ok_or("the data volume mount has no mountPath")?;
    let image = settings
        .etcd_init_image
        .clone()
        .or_else(|| etcd.get("image").and_then(Value::as_str).map(str::to_string))
        .ok_or("the etcd container has no image and no etcdInitImage is set")?;
    let etcd_env: Vec<Value> = etcd.get("env").and_then(Value::as_array).cloned().unwrap_or_default();

    // Identity entries of the etcd container and, before them, every entry they
    // reference through $(VAR), transitively, in the etcd container's order.
    let mut wanted: Vec<String> = IDENTITY_ENV.iter().map(|s| s.to_string()).collect();
    let mut i = 0;
    while i < wanted.len() {
        if let Some(e) = etcd_env.iter().find(|e| env_name(e) == wanted[i]) {
            for r in references(e.get("value").and_then(Value::as_str).unwrap_or_default()) {
                if !wanted.contains(&r) {
                    wanted.push(r);
                }
            }
        }
        i += 1;
    }
    let copied: Vec<Value> = etcd_env
        .iter()
        .filter(|e| wanted.iter().any(|w| w == env_name(e)) && !OWN_ENV.contains(&env_name(e)))
        .cloned()
        .collect();
    let has = |name: &str| copied.iter().any(|e| env_name(e) == name);

    let mut env = vec![
        json!({"name": "HOSTNAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
        json!({"name": "HCP_NAMESPACE", "value": namespace}),
    ];
    env.extend(copied.iter().cloned());
    if !has("ETCD_INITIAL_CLUSTER") {
        let replicas = sts.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(1).max(1);
        let members: Vec<String> =
            (0..replicas).map(|i| format!("etcd-{i}=https://etcd-{i}.etcd-discovery.{namespace}.svc:2380")).collect();
        env.push(json!({"name": "ETCD_INITIAL_CLUSTER", "value": members.join(",")}));
    }
    if !has("ETCD_DATA_DIR") {
        env.push(json!({"name": "ETCD_DATA_DIR", "value": format!("{}/data", mount_path.trim_end_matches('/'))}));
    }
    env.push(json!({"name": "RESTORE_URL_ETCD", "value": url}));
    env.push(json!({"name": "RESTORE_MAX_BYTES", "value": settings.restore_max_bytes.to_string()}));
    env.push(json!({"name": "RESTORE_MAX_TIME_SECONDS", "value": settings.restore_max_time_seconds.to_string()}));

    let mut c = Map::new();
    c.insert("name".into(), json!(INIT_CONTAINER));
    c.insert("image".into(), json!(image));
    c.insert("imagePullPolicy".into(), json!("IfNotPresent"));
    c.insert("command".into(), json!(["/bin/sh", "-c", injected_script(), INIT_CONTAINER]));
    c.insert("env".into(), Value::Array(env));
    c.insert(
        "resources".into(),
        json!({
            "requests": {"cpu": settings.restore_cpu_request, "memory": settings.restore_memory_request},
            "limits": {"memory": settings.restore_memory_limit},
        }),
    );
    c.insert("volumeMounts".into(), json!([{"name": "data", "mountPath": mount_path}]));
    if let Some(sc) = etcd.get("securityContext") {
        c.insert("securityContext".into(), sc.clone());
    }
    c.insert("terminationMessagePath".into(), json!("/dev/termination-log"));
    // The last lines of the log become the termination message, so
    // `kubectl describe pod` shows why a restore failed.
    c.insert("terminationMessagePolicy".into(), json!("FallbackToLogsOnError"));
    Ok(Value::Object(c))
}

#[cfg(test)]
mod tests {
    use super::references;

    #[test]
    fn dependent_variable_references() {
        assert_eq!(
            references("https://$(HOSTNAME).etcd-discovery.$(NAMESPACE).svc:2380"),
            vec!["HOSTNAME", "NAMESPACE"]
        );
        assert_eq!(references("$$(NOT) $(YES) $(unterminated"), vec!["YES"]);
    }
}
