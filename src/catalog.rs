//! The rule catalog: every upstream CEL rule (read from the generated
//! schemas, so it cannot drift from what is enforced) and every rule beyond
//! upstream, rendered as the README's rule table.

use serde_json::Value;

use crate::{crd, rules::BEYOND_RULES};

/// One row of the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub objects: String,
    pub field: String,
    pub message: String,
    pub origin: &'static str,
    pub severity: &'static str,
}

fn collect(schema: &Value, path: &str, objects: &str, prefix: &str, out: &mut Vec<Entry>) {
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        for (i, r) in rules.iter().enumerate() {
            let field = if path.is_empty() { "(root)".to_string() } else { path.to_string() };
            out.push(Entry {
                id: format!("{prefix}.{field}#{}", i + 1),
                objects: objects.to_string(),
                field,
                message: r.get("message").and_then(Value::as_str).unwrap_or_default().to_string(),
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
pub fn entries() -> Result<Vec<Entry>, crd::CrdError> {
    let mut out = Vec::new();
    collect(&crd::hcpetcdbackup_schema()?, "", "HCPEtcdBackup", "upstream.hcpetcdbackup", &mut out);
    collect(&crd::hostedcluster_schema()?, "", "HostedCluster, HostedControlPlane", "upstream.hostedcluster", &mut out);
    for r in BEYOND_RULES {
        out.push(Entry {
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
