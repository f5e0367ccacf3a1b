//! The connection table: a place per open connection, and which connection
//! is closed when a newcomer arrives at a cap.
//!
//! A newcomer is **never refused**: the real caller (kube-apiserver) opens a
//! new connection whenever its pool has none free, and a refusal there is a
//! denied write under `failurePolicy: Fail`. Instead, at a cap one open
//! connection is closed for it:
//!
//! * **per source**: a source address that already holds
//!   `max_per_source` places (whatever state they are in) gives up one of its
//!   own, so one address can never hold more than its share;
//! * **overall** (`max` places): the source holding the most places gives up
//!   one (a caller that holds few places keeps them however many others hold).
//!
//! Within the chosen source the connection that costs most and is worth
//! least goes first ([`Cost`]): one still in its TLS handshake, then one that
//! has not sent a request, then the longest idle, then the one reading a
//! request body the longest, then the one that has served the most requests,
//! then the oldest.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// Per-connection accounting: requests in flight, bodies being read, age.
pub struct Activity {
    in_flight: AtomicUsize,
    /// Requests started on this connection.
    served: AtomicU64,
    changed: Notify,
    /// When the last request ended (milliseconds since the table's epoch).
    last_done_ms: AtomicU64,
    /// When the connection was accepted (milliseconds since the epoch).
    opened_ms: u64,
    epoch: Instant,
    /// Closes the connection at once (evicted for a newer one).
    pub kill: Notify,
    /// The TLS handshake is done (or there is none: the plain port).
    tls_done: AtomicBool,
    ip: IpAddr,
    /// Requests of this connection whose body is still being read.
    reading: AtomicUsize,
    /// Since when (milliseconds since the epoch) `reading` has been non-zero.
    reading_since_ms: AtomicU64,
    /// Answers not yet written: id → when they started (milliseconds since
    /// the epoch). The write deadline watches the oldest.
    writing: Mutex<BTreeMap<u64, u64>>,
    next_write: AtomicU64,
}

/// What closing a connection costs, lowest first: the highest is evicted.
/// The order of the variants is the eviction order (last first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cost {
    /// A request is in flight past its body: the most requests served, then
    /// the oldest, goes first.
    Busy { served: u64, age_ms: u64 },
    /// A request body is still arriving: the longest reading goes first.
    Reading { for_ms: u64 },
    /// Nothing in flight after at least one request: the longest idle goes first.
    Idle { for_ms: u64 },
    /// Handshake done, no request yet: the oldest goes first.
    Unproven { age_ms: u64 },
    /// Still in its TLS handshake: the oldest goes first.
    Handshaking { age_ms: u64 },
}

impl Activity {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Where the connection stands now.
    pub fn cost(&self) -> Cost {
        let now = self.now_ms();
        let age_ms = now.saturating_sub(self.opened_ms);
        let served = self.served.load(Ordering::Acquire);
        if self.in_flight.load(Ordering::Acquire) > 0 {
            if self.reading.load(Ordering::Acquire) > 0 {
                return Cost::Reading { for_ms: now.saturating_sub(self.reading_since_ms.load(Ordering::Acquire)) };
            }
            return Cost::Busy { served, age_ms };
        }
        if served > 0 {
            return Cost::Idle { for_ms: now.saturating_sub(self.last_done_ms.load(Ordering::Acquire)) };
        }
        if self.tls_done.load(Ordering::Acquire) {
            Cost::Unproven { age_ms }
        } else {
            Cost::Handshaking { age_ms }
        }
    }

    /// The peer's address (IPv4-mapped IPv6 as IPv4).
    pub fn source(&self) -> IpAddr {
        self.ip
    }

    /// The TLS handshake is done.
    pub fn handshake_done(&self) {
        self.tls_done.store(true, Ordering::Release);
    }

    /// A request started (its headers are in); in flight until the guard drops.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.served.fetch_add(1, Ordering::AcqRel);
        // Every waiter (the idle timer and, while draining, the quiet
        // watch wait at once): notify_one would wake only one of them.
        self.changed.notify_waiters();
        InFlight(self.clone())
    }

    /// A request's body is being read until the guard drops.
    pub fn reading(self: &Arc<Self>) -> Reading {
        if self.reading.fetch_add(1, Ordering::AcqRel) == 0 {
            self.reading_since_ms.store(self.now_ms(), Ordering::Release);
        }
        Reading(self.clone())
    }

    /// An answer is being written until the guard drops (its body ended or
    /// was dropped with the connection).
    pub fn writing(self: &Arc<Self>) -> Writing {
        let id = self.next_write.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut w) = self.writing.lock() {
            w.insert(id, self.now_ms());
        }
        self.changed.notify_waiters();
        Writing(self.clone(), id)
    }

    /// Resolves when an answer has been waiting to be written for longer
    /// than `deadline`: the client does not read what it asked for, and the
    /// connection is closed (what the answer holds is released with it).
    pub async fn write_stalled(&self, deadline: Duration) {
        let deadline_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let oldest = self.writing.lock().ok().and_then(|w| w.values().min().copied());
            let Some(since) = oldest else {
                changed.await;
                continue;
            };
            let waited = self.now_ms().saturating_sub(since);
            if waited >= deadline_ms {
                return;
            }
            let left = Duration::from_millis(deadline_ms - waited);
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = changed => {}
            }
        }
    }

    /// Resolves when at least one request has been answered and none is in
    /// flight (a new connection gets to send its first request).
    pub async fn quiet(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) == 0 && self.served.load(Ordering::Acquire) > 0 {
                return;
            }
            changed.await;
        }
    }

    /// Resolves when the connection has had no request in flight for the
    /// idle timeout (or, before its first request, the header-read timeout).
    pub async fn idle(&self, header_read: Duration, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.in_flight.load(Ordering::Acquire) > 0 {
                changed.await;
                continue;
            }
            let wait = if self.served.load(Ordering::Acquire) == 0 { header_read } else { idle };
            tokio::select! {
                _ = tokio::time::sleep(wait) => return,
                _ = changed => {}
            }
        }
    }
}

/// Decrements `in_flight` when a request's handler finishes (or is dropped).
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_done_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

/// Takes an answer off the connection's "writing" list when dropped.
pub struct Writing(Arc<Activity>, u64);

impl Drop for Writing {
    fn drop(&mut self) {
        if let Ok(mut w) = self.0.writing.lock() {
            w.remove(&self.1);
        }
        self.0.changed.notify_waiters();
    }
}

/// Marks a body as read (or abandoned) when dropped.
pub struct Reading(Arc<Activity>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.reading.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections, oldest first.
pub struct ConnTable {
    max: usize,
    max_per_source: usize,
    next: AtomicU64,
    epoch: Instant,
    open: Mutex<BTreeMap<u64, Arc<Activity>>>,
    emptied: Notify,
}

/// A connection's place in the table; given back when dropped.
pub struct Place {
    id: u64,
    pub activity: Arc<Activity>,
    table: Arc<ConnTable>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut open) = self.table.open.lock() {
            open.remove(&self.id);
            if open.is_empty() {
                self.table.emptied.notify_waiters();
            }
        }
    }
}

/// Why a connection was closed for a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// The newcomer's source was at its share: one of its own connections.
    OwnSource,
    /// The table was full: one of the source holding the most places.
    Fullest,
}

/// The connection to close for a newcomer from `ip` (pure: the table's
/// choice, given each open connection's source and [`Cost`]). `None` when
/// neither cap is reached.
pub fn choose_victim(
    open: &[(u64, IpAddr, Cost)],
    ip: IpAddr,
    max: usize,
    max_per_source: usize,
) -> Option<(u64, Evicted)> {
    let held = |src: IpAddr| open.iter().filter(|(_, i, _)| *i == src).count();
    let costliest = |src: IpAddr| {
        open.iter().filter(|(_, i, _)| *i == src).max_by(|a, b| a.2.cmp(&b.2).then(b.0.cmp(&a.0))).map(|(id, _, _)| *id)
    };
    if held(ip) >= max_per_source.max(1) {
        return costliest(ip).map(|id| (id, Evicted::OwnSource));
    }
    if open.len() < max.max(1) {
        return None;
    }
    let most = open.iter().map(|(_, i, _)| held(*i)).max()?;
    // Among the sources holding the most places, the one whose costliest
    // connection costs most.
    let victim = open
        .iter()
        .filter(|(_, i, _)| held(*i) == most)
        .max_by(|a, b| a.2.cmp(&b.2).then(b.0.cmp(&a.0)))
        .map(|(id, _, _)| *id)?;
    Some((victim, Evicted::Fullest))
}

impl ConnTable {
    pub fn new(max: usize, max_per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            max_per_source: max_per_source.clamp(1, max.max(1)),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
            open: Mutex::default(),
            emptied: Notify::new(),
        })
    }

    /// A place for a new connection from `ip`, always; at a cap another
    /// connection is closed for it (see the module documentation), and the
    /// second value says why.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (Place, Option<Evicted>) {
        let ip = ip.to_canonical();
        let activity = Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            served: AtomicU64::new(0),
            changed: Notify::new(),
            last_done_ms: AtomicU64::new(0),
            opened_ms: u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX),
            epoch: self.epoch,
            kill: Notify::new(),
            tls_done: AtomicBool::new(false),
            ip,
            reading: AtomicUsize::new(0),
            reading_since_ms: AtomicU64::new(0),
            writing: Mutex::new(BTreeMap::new()),
            next_write: AtomicU64::new(0),
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let place = Place { id, activity: activity.clone(), table: self.clone() };
        let mut evicted = None;
        if let Ok(mut open) = self.open.lock() {
            let snapshot: Vec<(u64, IpAddr, Cost)> = open.iter().map(|(id, a)| (*id, a.ip, a.cost())).collect();
            if let Some((victim, why)) = choose_victim(&snapshot, ip, self.max, self.max_per_source) {
                if let Some(v) = open.remove(&victim) {
                    v.kill.notify_one();
                    evicted = Some(why);
                }
            }
            open.insert(id, activity);
        }
        (place, evicted)
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.open.lock().map(|o| o.len()).unwrap_or(0)
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves when no connection is open.
    pub async fn empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.open.lock().map(|o| o.is_empty()).unwrap_or(true) {
                return;
            }
            emptied.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const C: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

    fn busy(served: u64, age_ms: u64) -> Cost {
        Cost::Busy { served, age_ms }
    }

    #[test]
    fn below_both_caps_nobody_is_evicted() {
        let open = [(0, A, busy(1, 10)), (1, B, busy(1, 10))];
        assert_eq!(choose_victim(&open, C, 3, 3), None);
        assert_eq!(choose_victim(&[], A, 1, 1), None);
    }

    #[test]
    fn the_eviction_order_within_a_source() {
        // Lowest cost first; the highest is evicted.
        let order = [
            busy(1, 10),
            busy(1, 500),
            busy(9, 10),
            Cost::Reading { for_ms: 5 },
            Cost::Reading { for_ms: 1500 },
            Cost::Idle { for_ms: 1 },
            Cost::Idle { for_ms: 20_000 },
            Cost::Unproven { age_ms: 1 },
            Cost::Unproven { age_ms: 900 },
            Cost::Handshaking { age_ms: 1 },
            Cost::Handshaking { age_ms: 800 },
        ];
        for w in order.windows(2) {
            assert!(w[0] < w[1], "{:?} should cost less than {:?}", w[0], w[1]);
        }
        // At the cap the table evicts each in turn, costliest first.
        let mut open: Vec<(u64, IpAddr, Cost)> = order.iter().enumerate().map(|(i, c)| (i as u64, A, *c)).collect();
        let mut evicted = Vec::new();
        while let Some((id, why)) = choose_victim(&open, B, open.len(), 100) {
            assert_eq!(why, Evicted::Fullest);
            evicted.push(id);
            open.retain(|(i, _, _)| *i != id);
        }
        assert_eq!(evicted, (0..order.len() as u64).rev().collect::<Vec<_>>());
    }

    #[test]
    fn equal_costs_evict_the_oldest_place() {
        let open = [(3, A, busy(2, 100)), (7, A, busy(2, 100))];
        assert_eq!(choose_victim(&open, B, 2, 10), Some((3, Evicted::Fullest)));
    }

    #[test]
    fn a_source_at_its_share_evicts_its_own_whatever_their_state() {
        // A holds its 2 places with requests in flight; B's handshaking
        // connection is not touched although it is the costliest overall.
        let open = [(0, A, busy(50, 1000)), (1, A, busy(3, 10)), (2, B, Cost::Handshaking { age_ms: 999 })];
        assert_eq!(choose_victim(&open, A, 100, 2), Some((0, Evicted::OwnSource)));
        // B is below its share and the table is not full: nobody.
        assert_eq!(choose_victim(&open, B, 100, 2), None);
    }

    #[test]
    fn at_the_cap_the_source_holding_most_gives_way() {
        // The caller (B) holds one idle pooled connection and one new one in
        // its handshake; A holds every other place, each busy.
        let mut open: Vec<(u64, IpAddr, Cost)> = (0..6).map(|i| (i, A, busy(100 + i, 1000))).collect();
        open.push((6, B, Cost::Idle { for_ms: 30_000 }));
        open.push((7, B, Cost::Handshaking { age_ms: 900 }));
        // A's connection with the most requests served goes, for B and for A alike.
        assert_eq!(choose_victim(&open, B, 8, 8), Some((5, Evicted::Fullest)));
        assert_eq!(choose_victim(&open, A, 8, 8), Some((5, Evicted::Fullest)));
        // Among equally large sources, the costliest connection goes.
        let open = [(0, A, busy(1, 1)), (1, C, Cost::Unproven { age_ms: 5 }), (2, B, busy(9, 9))];
        assert_eq!(choose_victim(&open, B, 3, 3), Some((1, Evicted::Fullest)));
    }

    /// The idle timer and the drain's quiet watch wait on the same
    /// connection at once: the end of a request must reach both, or a
    /// draining connection stays open until its idle timeout.
    #[tokio::test]
    async fn the_end_of_a_request_reaches_every_waiter() {
        let table = ConnTable::new(4, 4);
        let (place, _) = table.admit(A);
        let a = place.activity.clone();
        let request = a.begin();
        let hour = Duration::from_secs(3600);
        let idle = a.idle(hour, hour);
        let quiet = a.quiet();
        tokio::pin!(idle, quiet);
        assert!(futures::poll!(idle.as_mut()).is_pending());
        assert!(futures::poll!(quiet.as_mut()).is_pending());
        drop(request);
        assert!(futures::poll!(quiet.as_mut()).is_ready(), "the drain sees the connection quiet");
        assert!(futures::poll!(idle.as_mut()).is_pending(), "the idle timer starts over");
    }

    #[tokio::test]
    async fn the_table_admits_every_newcomer_and_closes_one_for_it() {
        let table = ConnTable::new(2, 2);
        let (a1, none) = table.admit(A);
        assert_eq!(none, None);
        a1.activity.handshake_done();
        let _req = a1.activity.begin();
        let (a2, _) = table.admit(A);
        a2.activity.handshake_done();
        let (b1, why) = table.admit(B);
        // A holds both places; its unproven connection is closed, not B refused.
        assert_eq!(why, Some(Evicted::Fullest));
        assert_eq!(table.len(), 2);
        let killed = tokio::time::timeout(Duration::from_millis(100), a2.activity.kill.notified()).await;
        assert!(killed.is_ok(), "the unproven connection was told to close");
        let busy_kept = tokio::time::timeout(Duration::from_millis(20), a1.activity.kill.notified()).await;
        assert!(busy_kept.is_err(), "the busy one was kept");
        drop(b1);
        drop(a1);
        drop(a2);
        tokio::time::timeout(Duration::from_secs(1), table.empty()).await.expect("emptied");
    }

    #[test]
    fn costs_follow_what_the_connection_does() {
        let table = ConnTable::new(4, 4);
        let (p, _) = table.admit(A);
        let a = &p.activity;
        assert!(matches!(a.cost(), Cost::Handshaking { .. }));
        a.handshake_done();
        assert!(matches!(a.cost(), Cost::Unproven { .. }));
        let req = a.begin();
        assert!(matches!(a.cost(), Cost::Busy { served: 1, .. }));
        let body = a.reading();
        assert!(matches!(a.cost(), Cost::Reading { .. }));
        drop(body);
        drop(req);
        assert!(matches!(a.cost(), Cost::Idle { .. }));
    }
}
