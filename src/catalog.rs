//! The rule catalog: every upstream CEL rule (read from the generated
//! schemas, so it cannot drift from what is enforced) and every rule beyond
//! upstream, rendered as the README's rule table.

use serde_json::Value;

use crate::{api::upstream_rules, crd, rules::BEYOND_RULES};

/// One row of the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: String,
    pub objects: String,
    pub field: String,
    pub message: String,
    pub origin: &'static str,
    pub severity: &'static str,
}

fn collect(schema: &Value, path: &str, objects: &str, prefix: &str, out: &mut Vec<Row>) {
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        for (i, r) in rules.iter().enumerate() {
            let field = if path.is_empty() { "(root)".to_string() } else { path.to_string() };
            let message = r.get("message").and_then(Value::as_str).unwrap_or_default();
            out.push(Row {
                // A rule without an id is caught by the tests; it still shows, by position.
                id: upstream_rules::id(prefix, &field, message)
                    .map_or_else(|| format!("{prefix}.{field}#{}", i + 1), str::to_string),
                objects: objects.to_string(),
                field,
                message: message.to_string(),
                origin: "upstream (CEL)",
                severity: "deny",
            });
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            collect(v, &p, objects, prefix, out);
        }
    }
    if let Some(items) = schema.get("items") {
        collect(items, &format!("{path}[*]"), objects, prefix, out);
    }
}

/// Every rule, upstream first.
pub fn entries() -> Result<Vec<Row>, crd::CrdError> {
    let mut out = Vec::new();
    collect(&crd::hcpetcdbackup_schema()?, "", "HCPEtcdBackup", "upstream.hcpetcdbackup", &mut out);
    collect(&crd::hostedcluster_schema()?, "", "HostedCluster, HostedControlPlane", "upstream.hostedcluster", &mut out);
    for r in BEYOND_RULES {
        out.push(Row {
            id: r.id.to_string(),
            objects: r.objects.to_string(),
            field: r.field.to_string(),
            message: r.summary.to_string(),
            origin: "beyond upstream",
            severity: r.severity.as_str(),
        });
    }
    Ok(out)
}

/// The README table (Markdown).
pub fn markdown_table() -> Result<String, crd::CrdError> {
    let mut s = String::from(
        "| id | object | field | message / what is accepted | origin | action |\n|---|---|---|---|---|---|\n",
    );
    for e in entries()? {
        let esc = |t: &str| t.replace('|', "\\|");
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} | {} |\n",
            e.id,
            e.objects,
            e.field,
            esc(&e.message),
            e.origin,
            e.severity
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_upstream_rule_has_one_stable_id_and_every_id_a_rule() {
        let entries = entries().unwrap_or_else(|e| panic!("{e}"));
        let upstream: Vec<&Row> = entries.iter().filter(|e| e.origin.starts_with("upstream")).collect();
        for e in &upstream {
            assert!(!e.id.contains('#'), "upstream rule without an id in api/upstream_rules.rs: {e:?}");
        }
        assert_eq!(upstream.len(), upstream_rules::IDS.len(), "an id in api/upstream_rules.rs names no rule");
        let mut ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), entries.len(), "rule ids are unique");
    }
}
