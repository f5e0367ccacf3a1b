//! The lookup sources every shell can use: objects given up front
//! ([`ContextObjects`]: `--context` files, the Kubewarden policy's
//! pre-initialised fixtures, tests) and an answer read before the decision
//! ([`Prefetched`]: the server's live read). The port itself is
//! [`crate::lookup`], below the rules.

use serde_json::Value;

pub use crate::lookup::{hosted_control_plane, HcpLookup, Lookup, LookupError};

/// Objects given up front (from `--context` files or test fixtures).
#[derive(Debug, Default, Clone)]
pub struct ContextObjects {
    hcps: Vec<Value>,
    /// Everything given (for the preflight lookups); empty: no source.
    all: Vec<Value>,
}

impl ContextObjects {
    /// Keeps the HostedControlPlanes among `objects` (`*List` objects are unpacked).
    pub fn from_values(objects: impl IntoIterator<Item = Value>) -> Self {
        let mut out = Self::default();
        let mut queue: Vec<Value> = objects.into_iter().collect();
        while let Some(obj) = queue.pop() {
            match obj.get("kind").and_then(Value::as_str) {
                Some(k) if k.ends_with("List") => {
                    if let Some(items) = obj.get("items").and_then(Value::as_array) {
                        queue.extend(items.iter().cloned());
                    }
                }
                Some("HostedControlPlane") => {
                    out.all.push(obj.clone());
                    out.hcps.push(obj);
                }
                _ => out.all.push(obj),
            }
        }
        out
    }
}

impl Lookup for ContextObjects {
    fn hosted_control_planes(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        Ok(self
            .hcps
            .iter()
            .filter(|h| h.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
            .cloned()
            .collect())
    }

    fn hcp_etcd_backups(&self, namespace: &str) -> Result<Vec<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.of_kind("HCPEtcdBackup", namespace).cloned().collect())
    }

    fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.named("Secret", namespace, name))
    }

    fn etcd_stateful_set(&self, namespace: &str) -> Result<Option<Value>, LookupError> {
        self.preflight_source()?;
        Ok(self.named("StatefulSet", namespace, "etcd"))
    }
}

impl ContextObjects {
    /// The context files are a snapshot of the cluster: an object not in
    /// them does not exist. With no context objects at all there is no
    /// snapshot, and the preflight is skipped (offline `check` of one file).
    fn preflight_source(&self) -> Result<(), LookupError> {
        if self.all.is_empty() {
            Err(LookupError::NotProvided)
        } else {
            Ok(())
        }
    }

    fn of_kind<'a>(&'a self, kind: &'a str, namespace: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.all.iter().filter(move |o| {
            o.get("kind").and_then(Value::as_str) == Some(kind)
                && o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
        })
    }

    fn named(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.of_kind(kind, namespace)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .cloned()
    }
}

/// A lookup answer fetched before the decision (the server's live read on a
/// cache miss): the same answer for every namespace asked.
#[derive(Debug, Clone)]
pub struct Prefetched(pub Result<Vec<Value>, LookupError>);

impl Lookup for Prefetched {
    fn hosted_control_planes(&self, _namespace: &str) -> Result<Vec<Value>, LookupError> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Fails(LookupError);
    impl Lookup for Fails {
        fn hosted_control_planes(&self, _: &str) -> Result<Vec<Value>, LookupError> {
            Err(self.0.clone())
        }
    }

    #[test]
    fn every_lookup_answer_is_classified() {
        let hcp = |ns: &str| json!({"kind": "HostedControlPlane", "metadata": {"name": "a", "namespace": ns}});
        let ctx = ContextObjects::from_values([hcp("one"), hcp("two"), hcp("two")]);
        assert_eq!(hosted_control_plane(Some(&ctx), "one"), HcpLookup::One(hcp("one")));
        assert_eq!(hosted_control_plane(Some(&ctx), "two"), HcpLookup::Several(2));
        assert_eq!(hosted_control_plane(Some(&ctx), "none"), HcpLookup::NotFound);
        assert_eq!(hosted_control_plane(None, "one"), HcpLookup::NoSource);
        assert_eq!(hosted_control_plane(Some(&Fails(LookupError::NotSynced)), "one"), HcpLookup::NotSynced);
        assert_eq!(
            hosted_control_plane(Some(&Fails(LookupError::Failed("forbidden".into()))), "one"),
            HcpLookup::Failed("forbidden".into())
        );
    }
}
