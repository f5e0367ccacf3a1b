//! The rule catalog: every upstream CEL rule (read from the generated
//! schemas, so it cannot drift from what is enforced) and every rule beyond
//! upstream, rendered as the README's rule table.

use serde_json::Value;

use crate::{
    api::upstream_rules,
    crd,
    rules::{self, BEYOND_RULES},
    settings::Settings,
};

impl Settings {
    /// Checks the values, and every rule id of the enforcement block against
    /// the catalog; returns every problem found.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems = self.value_problems();
        problems.extend(self.enforcement.problems(rules::severity_of));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Parses settings from JSON, with readable errors for unknown keys and bad values.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let s = Settings::parse_json(v)?;
        s.validate().map_err(|p| format!("invalid settings: {}", p.join("; ")))?;
        Ok(s)
    }
}

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

    /// Every id the rule table prints is accepted by `enforcement.rules`,
    /// with the severity the table shows.
    #[test]
    fn every_printed_id_is_a_setting() {
        for e in entries().unwrap_or_else(|e| panic!("{e}")) {
            let severity = rules::severity_of(&e.id).map(crate::finding::Severity::as_str);
            assert_eq!(severity, Some(e.severity), "{}", e.id);
            let json = serde_json::json!({"enforcement": {"rules": {e.id.clone(): "off"}}});
            Settings::from_json(&json).unwrap_or_else(|err| panic!("{}: {err}", e.id));
        }
    }
}
