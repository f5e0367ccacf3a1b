//! The live apiserver reads one review needs, planned from the parsed review
//! and carried out **before** the review takes a decision slot, so a caller
//! that makes the server read (a fresh namespace each time is always a cache
//! miss; a fresh Secret name is always a GET) holds no decision slot while
//! the apiserver answers, and real reviews that need no read (every
//! HostedCluster, most StatefulSets) are never queued behind it.
//!
//! * The core says what the decision reads ([`crate::admission::plan`]);
//!   [`live`] keeps what the watch caches cannot answer: the namespace's
//!   HostedControlPlanes on a cache miss or when the decision asks for a
//!   live answer (an etcd StatefulSet CREATE, an owner the cache does not
//!   hold), the credentials Secret an HCPEtcdBackup CREATE names, and a live
//!   list of the namespace's backups when the cache shows one in progress.
//!   Only Kubernetes object names are read ([`live`] drops any other
//!   Secret name; the caches answer any other namespace without I/O), and
//!   the server reads nothing for an HCPEtcdBackup that the decision denies
//!   without the preflight (schema, CEL, rules): it runs that decision first.
//! * [`LiveReads::execute`] carries the plan out within the request deadline
//!   (the credentials Secret and the live backups list only once the
//!   namespace is known to have a HostedControlPlane)
//!   under a budget of its own: `max_live_reads` at once, at most half of
//!   them for one source address, waited for at most the queue wait, in two
//!   pools (namespaces the cache knows as hosted, and every other), so cache
//!   misses a caller causes at will never crowd out the reads real reviews
//!   of hosted namespaces need. A read
//!   that gets no place, fails or times out reaches the decision as not
//!   read, and the core says so (a warning for the preflight, a denial for
//!   the etcd-init mutation: never a guess).
//! * Negative answers (no HostedControlPlane in a namespace, no such Secret)
//!   are remembered for `negative_cache_ttl`, so repeating a review does not
//!   repeat its read.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

use super::{
    fields::log_field,
    limits::LimitOptions,
    metrics::RejectReason,
    source_share::{Share, SourceShares},
    App,
};
use crate::{
    admission::ReadPlan,
    api::names::{is_dns1123_label, is_dns1123_subdomain},
    lookup::{Answers, LookupError},
};

/// Most negative answers remembered at once (the map is cleared of expired
/// entries, then emptied, beyond this).
const NEGATIVE_CACHE_MAX: usize = 4096;

/// What of the core's read plan this server must read live (the reads its
/// caches cannot answer), and what the caches already answered: the
/// HostedControlPlanes of a cache hit, handed to the decision as they were
/// judged fresh enough, so they are not converted from the cache twice.
/// Nothing is read for a preflight this server cannot serve (no backup
/// watch: the core skips the preflight and says so).
pub fn live(app: &App, mut plan: ReadPlan) -> (ReadPlan, Answers) {
    let mut cached = Answers::default();
    // Only an object name reaches an apiserver URL (anything else is
    // answered as not read).
    if plan.etcd_stateful_set.as_deref().is_some_and(|ns| !is_dns1123_label(ns)) {
        plan.etcd_stateful_set = None;
    }
    if plan.credentials_secret.as_ref().is_some_and(|s| !is_dns1123_subdomain(&s.name)) {
        plan.credentials_secret = None;
    }
    match &app.backup_cache {
        None if plan.decide_first => return (ReadPlan::default(), cached),
        None => {
            plan.credentials_secret = None;
            plan.backups = None;
            plan.etcd_stateful_set = None;
        }
        Some(cache) => {
            let confirm = plan
                .backups
                .as_deref()
                .is_some_and(|ns| cache.backups_in(ns).is_ok_and(|b| ReadPlan::confirm_backups(&b)));
            if !confirm {
                plan.backups = None;
            }
        }
    }
    if let Some((ns, freshness)) = &plan.hosted_control_planes {
        match &app.hcp_cache {
            // Without a cache there is nothing to read them from (the
            // decision says the lookup is not provided, and fails closed).
            None => plan.hosted_control_planes = None,
            Some(cache) => {
                let view = cache.cached_view(ns);
                if freshness.cache_answers(&view) {
                    cached.hcps = Some((ns.clone(), Ok(view)));
                    plan.hosted_control_planes = None;
                }
            }
        }
    }
    plan.decide_first &= !plan.is_empty();
    (plan, cached)
}

const LIVE_READS_TAKEN: &str = "the server's live-read budget is taken (too many reads at once); not read";
const LIVE_READ_LATE: &str = "the live read did not finish within the request deadline";

/// A live-read slot; given back (and its source's count) when dropped.
struct ReadSlot {
    _permit: OwnedSemaphorePermit,
    _share: Share,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Negative {
    /// No HostedControlPlane in this namespace.
    Hcps(String),
    /// No such Secret in the operator namespace.
    Secret(String),
}

/// One pool of live-read places: at most half of them for one source.
struct Budget {
    places: Arc<Semaphore>,
    shares: SourceShares,
}

impl Budget {
    fn new(max: usize) -> Self {
        Self { places: Arc::new(Semaphore::new(max)), shares: SourceShares::new((max as u64 / 2).max(1)) }
    }

    /// A place for a read from `source`, waiting until `until`; `None` when
    /// the source holds its share or none freed up.
    async fn place(&self, source: IpAddr, until: Instant) -> Option<ReadSlot> {
        let share = self.shares.take(source, 1)?;
        let permit = tokio::time::timeout_at(until, self.places.clone().acquire_owned()).await.ok()?.ok()?;
        Some(ReadSlot { _permit: permit, _share: share })
    }
}

/// The live-read budgets and the negative cache.
///
/// Two pools: reads about a namespace the HostedControlPlane cache already
/// holds a HostedControlPlane for (what the apiserver's real reviews need:
/// the etcd StatefulSet of a hosted cluster, a backup's preflight) and reads
/// about any other namespace (cache misses, which a caller naming fresh
/// namespaces causes at will). A flood of the second kind, behind a slow
/// apiserver, can never take the places of the first.
pub struct LiveReads {
    known: Budget,
    unknown: Budget,
    wait: Duration,
    ttl: Duration,
    negative: Mutex<BTreeMap<Negative, Instant>>,
}

impl LiveReads {
    pub fn new(opts: &LimitOptions) -> Self {
        let max = opts.max_live_reads.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            known: Budget::new(max),
            unknown: Budget::new(max),
            wait: opts.queue_wait,
            ttl: opts.negative_cache_ttl,
            negative: Mutex::default(),
        }
    }

    /// A place for a read from `source` about a namespace the cache knows
    /// as hosted (`known`) or not, waiting until `deadline` or the queue wait.
    async fn place(&self, source: IpAddr, deadline: Instant, known: bool) -> Option<ReadSlot> {
        let until = deadline.min(Instant::now() + self.wait);
        if known {
            self.known.place(source, until).await
        } else {
            self.unknown.place(source, until).await
        }
    }

    fn remembered(&self, key: &Negative) -> bool {
        if self.ttl.is_zero() {
            return false;
        }
        self.negative.lock().is_ok_and(|n| n.get(key).is_some_and(|at| at.elapsed() < self.ttl))
    }

    fn remember(&self, key: Negative) {
        if self.ttl.is_zero() {
            return;
        }
        if let Ok(mut n) = self.negative.lock() {
            if n.len() >= NEGATIVE_CACHE_MAX {
                let ttl = self.ttl;
                n.retain(|_, at| at.elapsed() < ttl);
                if n.len() >= NEGATIVE_CACHE_MAX {
                    n.clear();
                }
            }
            n.insert(key, Instant::now());
        }
    }

    /// One live read in a place of `source`'s, within `deadline`; not read
    /// (an error the decision reports) without a place or in time.
    async fn placed<T>(
        &self,
        app: &App,
        (source, known): (IpAddr, bool),
        deadline: Instant,
        read: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let Some(_place) = self.place(source, deadline, known).await else {
            return Err(Self::busy(app));
        };
        tokio::time::timeout_at(deadline, read).await.unwrap_or_else(|_| Err(LIVE_READ_LATE.to_string()))
    }

    /// Carries out `plan` for a review from `source`, every read bounded by
    /// `deadline` (the request's).
    pub async fn execute(&self, app: &App, plan: &ReadPlan, source: IpAddr, deadline: Instant) -> Answers {
        // The namespace the plan reads about, and whether the cache already
        // holds a HostedControlPlane there (its reads use the other pool).
        let known = match (&plan.hosted_control_planes, &app.hcp_cache) {
            (Some((ns, _)), Some(cache)) => cache.knows_hosted(ns),
            _ => false,
        };
        let from = (source, known);
        // The HostedControlPlanes first: the Secret, the other backups and
        // the etcd StatefulSet are read only for a namespace that has one
        // (the namespace's own denial already stands otherwise), so a caller
        // naming any namespace cannot use the server to probe the operator
        // namespace's Secrets.
        let hcps = self.read_hcps(app, plan, from, deadline).await;
        if !plan.hosted(hcps.as_ref().map(|(_, read)| read)) {
            return Answers { hcps, ..Answers::default() };
        }
        let backups = async {
            let (Some(ns), Some(cache)) = (&plan.backups, &app.backup_cache) else { return None };
            let read = self.placed(app, from, deadline, cache.list_backups_live(ns)).await;
            Some((ns.clone(), read.map_err(LookupError::Failed)))
        };
        // Two at once at most: one source holds at most half the places.
        let (secret, backups) = tokio::join!(self.read_secret(app, plan, from, deadline), backups);
        let etcd_stateful_set = match (&plan.etcd_stateful_set, &app.backup_cache) {
            (Some(ns), Some(cache)) => {
                let read = self.placed(app, from, deadline, cache.read_etcd(ns)).await;
                Some((ns.clone(), read.map_err(LookupError::Failed)))
            }
            _ => None,
        };
        Answers { hcps, secret, backups, etcd_stateful_set }
    }

    /// The plan's HostedControlPlanes: without I/O for an invalid namespace
    /// or a remembered "none"; otherwise one placed, deadline-bound read.
    async fn read_hcps(
        &self,
        app: &App,
        plan: &ReadPlan,
        from: (IpAddr, bool),
        deadline: Instant,
    ) -> Option<(String, Result<Vec<Value>, LookupError>)> {
        let (Some((ns, freshness)), Some(cache)) = (&plan.hosted_control_planes, &app.hcp_cache) else {
            return None;
        };
        Some((ns.clone(), self.read_hcps_of(app, ns, freshness, cache, from, deadline).await))
    }

    async fn read_hcps_of(
        &self,
        app: &App,
        ns: &str,
        freshness: &crate::lookup::Freshness,
        cache: &super::hcp_cache::HcpCache,
        from: (IpAddr, bool),
        deadline: Instant,
    ) -> Result<Vec<Value>, LookupError> {
        // An invalid namespace is answered without I/O (and without a place).
        if !is_dns1123_label(ns) {
            return cache.lookup_for(ns).await;
        }
        let key = Negative::Hcps(ns.to_string());
        // A remembered "none" answers every decision, a live one too: it can
        // only deny (fail closed, the control-plane-operator retries), never
        // skip a restore, and it keeps a caller naming fresh namespaces from
        // making the server read each time.
        if self.remembered(&key) {
            return Ok(Vec::new());
        }
        let Some(_place) = self.place(from.0, deadline, from.1).await else {
            return Err(LookupError::Failed(Self::busy(app)));
        };
        let read = match tokio::time::timeout_at(deadline, cache.lookup_fresh(ns, freshness)).await {
            Ok(p) => p,
            Err(_) => Err(LookupError::Failed(LIVE_READ_LATE.to_string())),
        };
        if read.as_ref().is_ok_and(Vec::is_empty) {
            self.remember(key);
        }
        read
    }

    /// The backup's credentials Secret in the operator namespace: a
    /// remembered "not found" without I/O, otherwise one placed read; a
    /// failed read is logged (the preflight skips it and says so).
    async fn read_secret(
        &self,
        app: &App,
        plan: &ReadPlan,
        from: (IpAddr, bool),
        deadline: Instant,
    ) -> Option<(String, String, Result<Option<Value>, LookupError>)> {
        let (Some(secret), Some(cache)) = (&plan.credentials_secret, &app.backup_cache) else { return None };
        let name = &secret.name;
        let ns = cache.operator_namespace().to_string();
        let key = Negative::Secret(name.clone());
        if self.remembered(&key) {
            return Some((ns, name.clone(), Ok(None)));
        }
        let read = self.placed(app, from, deadline, cache.read_secret(name)).await;
        match &read {
            Ok(None) => self.remember(key),
            Ok(Some(_)) => {}
            Err(e) => tracing::warn!(
                namespace = %log_field(&ns),
                secret = %log_field(name),
                error = %log_field(e),
                "credentials Secret not read; the preflight skips it"
            ),
        }
        Some((ns, name.clone(), read.map_err(LookupError::Failed)))
    }

    /// Every place taken: counted, and the error the decision reports.
    fn busy(app: &App) -> String {
        app.metrics.rejected(RejectReason::LiveReads);
        LIVE_READS_TAKEN.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(max: usize, ttl_ms: u64) -> LiveReads {
        LiveReads::new(&LimitOptions {
            max_live_reads: max,
            negative_cache_ttl: Duration::from_millis(ttl_ms),
            queue_wait: Duration::from_millis(50),
            ..LimitOptions::default()
        })
    }

    /// The review's m1: reads for fresh namespaces (cache misses) from
    /// several sources take every place of their pool; a read about a
    /// namespace the cache knows as hosted still gets one at once.
    #[tokio::test]
    async fn reads_for_unknown_namespaces_never_take_the_places_of_known_hosted_ones() {
        let r = reads(4, 0);
        let soon = Instant::now() + Duration::from_secs(5);
        let sources: Vec<IpAddr> = (2..6).map(|i| IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, i))).collect();
        let mut held = Vec::new();
        for s in &sources {
            if let Some(p) = r.place(*s, soon, false).await {
                held.push(p);
            }
        }
        assert_eq!(held.len(), 4, "the unknown pool is full");
        assert!(r.place(A, soon, false).await.is_none(), "a fifth unknown read waits in vain");
        assert!(r.place(A, soon, true).await.is_some(), "a read for a known hosted namespace is not crowded out");
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    #[tokio::test]
    async fn one_source_holds_at_most_half_of_the_live_read_places() {
        let r = reads(4, 0);
        let soon = Instant::now() + Duration::from_secs(1);
        let a1 = r.place(A, soon, false).await.expect("a1");
        let a2 = r.place(A, soon, false).await.expect("a2");
        assert!(r.place(A, soon, false).await.is_none(), "A holds its half");
        let b1 = r.place(B, soon, false).await.expect("another source still gets a place");
        let b2 = r.place(B, soon, false).await.expect("b2");
        assert!(r.place(B, soon, false).await.is_none());
        drop((a1, b1));
        assert!(r.place(A, soon, false).await.is_some(), "a place given back is taken again");
        drop((a2, b2));
        assert!(r.unknown.shares.sources() <= 1);
    }

    #[tokio::test]
    async fn a_full_budget_is_waited_for_at_most_the_queue_wait() {
        let r = reads(2, 0);
        let soon = Instant::now() + Duration::from_secs(5);
        let _a = r.place(A, soon, false).await.expect("a");
        let _b = r.place(B, soon, false).await.expect("b");
        let c = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));
        assert!(r.place(c, soon, false).await.is_none(), "no place freed within the wait");
        assert!(!r.unknown.shares.holds(c), "the refused source holds nothing");
    }

    #[test]
    fn negative_answers_are_remembered_for_the_ttl_only() {
        let r = reads(4, 60_000);
        let k = Negative::Hcps("attack-1".into());
        assert!(!r.remembered(&k));
        r.remember(k.clone());
        assert!(r.remembered(&k));
        assert!(!r.remembered(&Negative::Secret("attack-1".into())));
        for i in 0..(NEGATIVE_CACHE_MAX + 10) {
            r.remember(Negative::Secret(format!("s{i}")));
        }
        assert!(r.negative.lock().map(|n| n.len() <= NEGATIVE_CACHE_MAX).unwrap_or(false), "bounded");
        let off = reads(4, 0);
        off.remember(k.clone());
        assert!(!off.remembered(&k), "a zero TTL remembers nothing");
    }
}
