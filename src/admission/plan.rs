//! The read plan: which cluster objects one decision needs, said by the core
//! from the parsed request and the settings, before any is read. Every
//! shell carries the plan out with its own source (the server: watch caches
//! and live reads within the request deadline; the CLI: `--context` files;
//! Kubewarden: host calls), then hands what it read to [`super::decide`],
//! which does no I/O. Changing when a rule reads something means changing
//! the rule's `reads` function ([`crate::mutate::reads`],
//! [`crate::rules::preflight::reads`]), never a shell.
//!
//! The plan routes the way [`super::decide`] routes, so it can only name
//! reads the decision makes.

use serde_json::Value;

use super::{AdmissionRequest, Target};
use crate::{
    api::StorageType,
    lookup::{Answers, Freshness, Lookup, LookupError},
    rules::preflight,
    settings::Settings,
};

/// What one decision reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// The HostedControlPlanes of this namespace, and how fresh the answer must be.
    pub hosted_control_planes: Option<(String, Freshness)>,
    /// The credentials Secret of an HCPEtcdBackup CREATE: its storage type,
    /// its name, in the operator namespace. Read only once the namespace is
    /// known to have a HostedControlPlane ([`ReadPlan::hosted`]).
    pub credentials_secret: Option<CredentialsSecret>,
    /// The namespace's HCPEtcdBackups (the preflight's serial guard).
    pub backups: Option<String>,
    /// The namespace's etcd StatefulSet (the preflight's readiness warning).
    /// Read only once the namespace is known to have a HostedControlPlane
    /// ([`ReadPlan::hosted`]): in any other namespace a tenant may own a
    /// StatefulSet named `etcd` of any size.
    pub etcd_stateful_set: Option<String>,
    /// The decision can deny without these reads (schema, CEL and the other
    /// rules of an HCPEtcdBackup): a shell that pays for a read runs the
    /// decision without them first ([`without_preflight`]), and reads
    /// nothing for a request denied anyway.
    pub decide_first: bool,
}

/// The credentials Secret an HCPEtcdBackup CREATE names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsSecret {
    pub storage: StorageType,
    pub namespace: String,
    pub name: String,
}

impl ReadPlan {
    pub fn is_empty(&self) -> bool {
        self.hosted_control_planes.is_none()
            && self.credentials_secret.is_none()
            && self.backups.is_none()
            && self.etcd_stateful_set.is_none()
    }

    /// Whether the reads that wait for a hosted namespace (the credentials
    /// Secret, the etcd StatefulSet) may go ahead, given what the HostedControlPlane read gave:
    /// only a namespace with a HostedControlPlane is, so that naming any
    /// namespace never makes a shell read the operator namespace's Secrets.
    pub fn hosted(&self, hcps: Option<&Result<Vec<Value>, LookupError>>) -> bool {
        match (&self.hosted_control_planes, hcps) {
            (None, _) => true,
            (Some(_), Some(Ok(found))) => !found.is_empty(),
            (Some(_), _) => false,
        }
    }

    /// Whether a cache's view of the namespace's HCPEtcdBackups must be
    /// confirmed by a live list: the serial guard denies on a backup in
    /// progress, and a cache that is behind must not deny on one that has
    /// finished.
    pub fn confirm_backups(cached: &[Value]) -> bool {
        cached.iter().any(preflight::in_progress)
    }
}

/// The reads the decision of `req` makes (at the endpoint `expect`; `None`:
/// routed by the request's resource).
pub fn plan(req: &AdmissionRequest, settings: &Settings, expect: Option<Target>) -> ReadPlan {
    let mut plan = ReadPlan::default();
    if !req.writes_main_resource() {
        return plan;
    }
    let Some(object) = req.object.as_ref().filter(|o| o.is_object()) else { return plan };
    let namespace = req.namespace_or_object();
    match super::route(req, expect) {
        super::Route::Mutation(Target::EtcdStatefulSets) => {
            let freshness = crate::mutate::reads(object, req.operation == super::Operation::Create);
            plan.hosted_control_planes = freshness.map(|f| (namespace.to_string(), f));
        }
        super::Route::Validation(Target::HcpEtcdBackups) if req.creates_main_resource() => {
            let Some(secret) = preflight::reads(object, namespace, settings) else { return plan };
            plan.hosted_control_planes = Some((namespace.to_string(), Freshness::Cached));
            plan.credentials_secret = secret.map(|(storage, name)| CredentialsSecret {
                storage,
                namespace: settings.operator_namespace.clone(),
                name,
            });
            plan.backups = Some(namespace.to_string());
            plan.etcd_stateful_set = Some(namespace.to_string());
            plan.decide_first = true;
        }
        _ => {}
    }
    plan
}

impl ReadPlan {
    /// Carries the plan out on `source`, in the order the decision reads:
    /// the HCPEtcdBackups first (when they cannot be read the preflight is
    /// skipped, and nothing else of it is read), the HostedControlPlanes,
    /// the credentials Secret and the etcd StatefulSet only for a hosted
    /// namespace. A shell whose source does I/O (Kubewarden's host calls)
    /// reads here, before the decision; the decision then runs on the
    /// answers alone.
    pub fn read_from(&self, source: &dyn Lookup) -> Answers {
        let mut answers = Answers::default();
        if let Some(ns) = &self.backups {
            let read = source.hcp_etcd_backups(ns);
            let unread = read.is_err();
            answers.backups = Some((ns.clone(), read));
            if unread {
                return answers;
            }
        }
        if let Some((ns, freshness)) = &self.hosted_control_planes {
            answers.hcps = Some((ns.clone(), source.hosted_control_planes_as(ns, freshness)));
        }
        let hosted = self.hosted(answers.hcps.as_ref().map(|(_, read)| read));
        if let Some(s) = self.credentials_secret.as_ref().filter(|_| hosted) {
            answers.secret = Some((s.namespace.clone(), s.name.clone(), source.secret(&s.namespace, &s.name)));
        }
        if let Some(ns) = self.etcd_stateful_set.as_ref().filter(|_| hosted) {
            answers.etcd_stateful_set = Some((ns.clone(), source.etcd_stateful_set(ns)));
        }
        answers
    }
}

/// The settings of the decision a shell runs before paying for the
/// preflight's reads ([`ReadPlan::decide_first`]).
pub fn without_preflight(settings: &Settings) -> Settings {
    Settings { backup_preflight: false, ..settings.clone() }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::parse_request;

    fn request(resource: &str, operation: &str, object: Value) -> AdmissionRequest {
        let (group, kind) = match resource {
            "statefulsets" => ("apps", "StatefulSet"),
            _ => ("hypershift.openshift.io", "HCPEtcdBackup"),
        };
        parse_request(&json!({"uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": "clusters-a", "operation": operation, "object": object, "oldObject": object}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn sts(name: &str, owner: Option<&str>) -> Value {
        let mut s = json!({"kind": "StatefulSet", "metadata": {"name": name}});
        if let Some(uid) = owner {
            s["metadata"]["ownerReferences"] = json!([{"kind": "HostedControlPlane", "name": "a", "uid": uid}]);
        }
        s
    }

    fn backup(credentials: &str) -> Value {
        json!({"kind": "HCPEtcdBackup", "metadata": {"name": "b"},
            "spec": {"storage": {"storageType": "S3", "s3": {"credentials": {"name": credentials}}}}})
    }

    #[test]
    fn the_etcd_statefulset_reads_its_hosted_control_planes_live_on_create() {
        let s = Settings::default();
        let p = plan(&request("statefulsets", "CREATE", sts("etcd", None)), &s, Some(Target::EtcdStatefulSets));
        assert_eq!(p.hosted_control_planes, Some(("clusters-a".into(), Freshness::Live)));
        assert!(!p.decide_first && p.credentials_secret.is_none() && p.backups.is_none());
        assert!(p.etcd_stateful_set.is_none());
        let p = plan(&request("statefulsets", "UPDATE", sts("etcd", Some("u1"))), &s, None);
        assert_eq!(
            p.hosted_control_planes,
            Some(("clusters-a".into(), Freshness::LiveUnlessCached(vec!["u1".into()])))
        );
        // Another StatefulSet, a DELETE, a status write, or the wrong endpoint: nothing is read.
        assert!(plan(&request("statefulsets", "CREATE", sts("kube-apiserver", None)), &s, None).is_empty());
        assert!(plan(&request("statefulsets", "DELETE", sts("etcd", None)), &s, None).is_empty());
        let mut status = request("statefulsets", "UPDATE", sts("etcd", None));
        status.sub_resource = Some("status".into());
        assert!(plan(&status, &s, None).is_empty());
        let r = request("statefulsets", "CREATE", sts("etcd", None));
        assert!(plan(&r, &s, Some(Target::HcpEtcdBackups)).is_empty());
    }

    #[test]
    fn an_hcpetcdbackup_create_reads_what_its_preflight_judges() {
        let s = Settings::default();
        let p = plan(&request("hcpetcdbackups", "CREATE", backup("creds")), &s, Some(Target::HcpEtcdBackups));
        assert_eq!(p.hosted_control_planes, Some(("clusters-a".into(), Freshness::Cached)));
        let secret =
            CredentialsSecret { storage: StorageType::S3, namespace: "hypershift".into(), name: "creds".into() };
        assert_eq!(p.credentials_secret, Some(secret));
        assert_eq!(p.backups.as_deref(), Some("clusters-a"));
        assert_eq!(p.etcd_stateful_set.as_deref(), Some("clusters-a"));
        assert!(p.decide_first);
        // No credentials name: no Secret; an UPDATE reads nothing; preflight off reads nothing.
        let p = plan(&request("hcpetcdbackups", "CREATE", backup("")), &s, None);
        assert!(p.credentials_secret.is_none() && p.hosted_control_planes.is_some());
        assert!(plan(&request("hcpetcdbackups", "UPDATE", backup("creds")), &s, None).is_empty());
        let off = Settings { backup_preflight: false, ..Settings::default() };
        assert!(plan(&request("hcpetcdbackups", "CREATE", backup("creds")), &off, None).is_empty());
        assert!(!without_preflight(&s).backup_preflight);
    }

    #[test]
    fn the_secret_and_the_backups_wait_for_a_hosted_namespace() {
        let s = Settings::default();
        let p = plan(&request("hcpetcdbackups", "CREATE", backup("creds")), &s, None);
        assert!(p.hosted(Some(&Ok(vec![json!({"kind": "HostedControlPlane"})]))));
        assert!(!p.hosted(Some(&Ok(vec![]))), "no HostedControlPlane: not hosted");
        assert!(!p.hosted(Some(&Err(LookupError::NotSynced))), "unknown is not hosted");
        assert!(!p.hosted(None), "not read: not hosted");
        assert!(ReadPlan::default().hosted(None), "nothing to wait for");
        let running = json!({"status": {"conditions": [{"type": "BackupCompleted", "status": "False", "reason": "BackupInProgress"}]}});
        assert!(ReadPlan::confirm_backups(&[json!({}), running]));
        assert!(!ReadPlan::confirm_backups(&[json!({})]));
    }

    /// A source that counts what it was asked.
    #[derive(Default)]
    struct Counting {
        hcps: Vec<Value>,
        asked: std::cell::RefCell<Vec<&'static str>>,
    }

    impl Lookup for Counting {
        fn hosted_control_planes(&self, _: &str) -> Result<Vec<Value>, LookupError> {
            self.asked.borrow_mut().push("hcps");
            Ok(self.hcps.clone())
        }
        fn hcp_etcd_backups(&self, _: &str) -> Result<Vec<Value>, LookupError> {
            self.asked.borrow_mut().push("backups");
            Ok(Vec::new())
        }
        fn secret(&self, _: &str, _: &str) -> Result<Option<Value>, LookupError> {
            self.asked.borrow_mut().push("secret");
            Ok(None)
        }
        fn etcd_stateful_set(&self, _: &str) -> Result<Option<Value>, LookupError> {
            self.asked.borrow_mut().push("etcd");
            Ok(None)
        }
    }

    #[test]
    fn a_plan_is_read_in_order_and_answers_only_what_it_planned() {
        let s = Settings::default();
        let p = plan(&request("hcpetcdbackups", "CREATE", backup("creds")), &s, None);
        let hosted = Counting { hcps: vec![json!({"kind": "HostedControlPlane"})], ..Counting::default() };
        let answers = p.read_from(&hosted);
        assert_eq!(*hosted.asked.borrow(), ["backups", "hcps", "secret", "etcd"]);
        assert_eq!(answers.secret("hypershift", "creds"), Ok(None));
        assert_eq!(answers.secret("hypershift", "other"), Err(LookupError::NotProvided), "not planned");
        assert_eq!(answers.hosted_control_planes("elsewhere"), Err(LookupError::NotProvided));
        let empty = Counting::default();
        let answers = p.read_from(&empty);
        assert!(
            !empty.asked.borrow().contains(&"secret"),
            "no Secret read for a namespace without a HostedControlPlane"
        );
        assert_eq!(answers.secret("hypershift", "creds"), Err(LookupError::NotProvided));
    }
}
