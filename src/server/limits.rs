//! What bounds the server's memory and time, and the bounded body reader.
//!
//! A request goes through, in order:
//!
//! 1. an **in-flight slot** (`max_requests`). When none is free, a request
//!    still reading its body is evicted (answered 408): the oldest of the
//!    source address with the most such requests, and its slot is handed to
//!    the new request directly: a client trickling bodies cannot fill
//!    the slots, because a real caller sends its body in milliseconds and the
//!    tricklers are evicted oldest first. Only when every slot holds a request
//!    past its body (queued for or in a decision) does a new one wait up to
//!    `queue_wait` and then get 503 + `Retry-After`;
//! 2. the **body**, read to the end before any decision slot is taken, within
//!    the body deadline (408) and the size limit (413). The first
//!    [`Limits::body_free`] bytes of every body are covered by its in-flight
//!    slot; anything beyond is charged to a shared **body budget** (none left:
//!    503 + `Retry-After`), so clients that stall big bodies can hold at most
//!    that budget, and small reviews never wait for it;
//! 3. a **decision slot**, weighted by what the body will take to parse and
//!    decide, read from its shape before it is parsed
//!    ([`crate::admission::cost`]: one unit per started
//!    [`DECISION_UNIT_BYTES`]), waited for at most `queue_wait` (then 429 +
//!    `Retry-After`); a body that would need more than every unit together is
//!    refused (413) unparsed;
//! 4. the decision, all of it inside the per-request deadline (503 after it).
//!    A review that needs live apiserver reads gives its decision slot back
//!    after parsing, has them done under the live-read budget
//!    ([`super::reads`]), and takes a slot again for the decision.
//!
//! Worst-case memory is therefore about `max_requests × body_free +
//! body_budget + max_decision_units × DECISION_UNIT_BYTES`, plus per
//! connection: rustls buffers, the HTTP/1.1 read buffer (`max_header_bytes`)
//! or the HTTP/2 receive window (`h2_window`) and send buffer. The README's
//! deploy section has the numbers behind the Deployment's memory limit.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::body::{Body, Bytes};

use super::source_share::{Share, SourceShares};
use http_body_util::BodyExt as _;
use tokio::{
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

/// Largest AdmissionReview body accepted: an UPDATE carries `object` and
/// `oldObject`, each up to kube-apiserver's 3 MiB request limit, plus the
/// envelope (userInfo, options, names): 2 × 3 MiB + 1 MiB.
pub const MAX_BODY: usize = 7 * 1024 * 1024;

/// Heap one decision unit stands for: the parse and the decision of a review
/// are charged by [`crate::admission::cost::Shape::decision_bytes`], so 16
/// units hold at most 96 MiB of decisions (the README's sizing).
pub const DECISION_UNIT_BYTES: u64 = 6 * 1024 * 1024;

/// The limits of one server (see the module documentation).
#[derive(Debug, Clone)]
pub struct LimitOptions {
    /// Largest body (413 above).
    pub max_body: usize,
    /// Time from request headers to the last body byte (408 after).
    pub body_timeout: Duration,
    /// Time from request headers to the answer (503 after); below the
    /// webhook's `timeoutSeconds` so the apiserver gets an answer, not a timeout.
    pub request_timeout: Duration,
    /// Requests in flight at once, all connections and streams together.
    pub max_requests: usize,
    /// Bytes of body buffered for all requests together beyond each request's
    /// first `body_free` bytes.
    pub body_budget: usize,
    /// Bytes of every body not charged to the shared budget.
    pub body_free: usize,
    /// Decision units (one per started [`DECISION_UNIT_BYTES`] of heap the
    /// decision is charged) at once.
    pub max_decision_units: u32,
    /// Longest a request waits for a decision slot before a 429.
    pub queue_wait: Duration,
    /// Open connections at once. A new connection is never refused: at the
    /// cap the source holding the most places closes its costliest
    /// connection for it (see [`super::conns`]).
    pub max_connections: usize,
    /// Open connections one source address may hold, in any state; a
    /// newcomer from a source at this share replaces one of its own.
    pub max_connections_per_source: usize,
    /// A connection is closed (gracefully, after its current requests) this
    /// long after its handshake, or when its client certificate expires:
    /// client-CA rotation and certificate expiry reach every connection.
    pub max_connection_age: Duration,
    /// Live apiserver reads at once (cache misses, Secret reads, live
    /// confirmations), taken before any decision slot; one source may hold
    /// at most half.
    pub max_live_reads: usize,
    /// How long a live read that found nothing (no HostedControlPlane in a
    /// namespace, no such Secret) is remembered, so a caller repeating a
    /// review does not repeat the read.
    pub negative_cache_ttl: Duration,
    /// A new connection has this long for its TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// After the handshake, the first request's headers must arrive within this.
    pub header_read_timeout: Duration,
    /// HTTP/1.1 read buffer (the request line and headers must fit: 431
    /// above) and HTTP/2 header list limit.
    pub max_header_bytes: usize,
    /// HTTP/2 receive window, per stream and per connection: what a client
    /// can make the server buffer on one connection without it being read.
    pub h2_window: u32,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/1.1 keep-alive and HTTP/2 alike).
    pub idle_timeout: Duration,
    /// Streams one HTTP/2 connection may have open at once.
    pub h2_max_streams: u32,
    /// Bytes of decided answers not yet written, all connections together
    /// (one source at most half): an answer that finds no room is not sent
    /// (503 + `Retry-After`).
    pub answer_budget: usize,
    /// An answer not written within this (the client does not read it)
    /// closes its connection.
    pub write_timeout: Duration,
}

/// The limits' defaults, written once: [`LimitOptions::default`] and the
/// CLI's flags (`serve --help` shows them) both read these, in the flags' units.
pub mod defaults {
    pub const BODY_TIMEOUT_MS: u64 = 2000;
    pub const REQUEST_TIMEOUT_MS: u64 = 4000;
    pub const MAX_REQUESTS: usize = 512;
    pub const BODY_BUDGET_MIB: usize = 64;
    pub const MAX_DECISION_UNITS: u32 = 16;
    pub const QUEUE_WAIT_MS: u64 = 1000;
    pub const MAX_CONNECTIONS: usize = 512;
    pub const MAX_CONNECTIONS_PER_SOURCE: usize = 128;
    pub const MAX_CONNECTION_AGE_SECONDS: u64 = 300;
    pub const MAX_LIVE_READS: usize = 4;
    pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 1000;
    pub const HEADER_READ_TIMEOUT_MS: u64 = 5000;
    pub const MAX_HEADER_BYTES: usize = 16 * 1024;
    pub const IDLE_TIMEOUT_MS: u64 = 30_000;
    pub const ANSWER_BUDGET_MIB: usize = 32;
    pub const WRITE_TIMEOUT_MS: u64 = 5000;
}

impl Default for LimitOptions {
    fn default() -> Self {
        use defaults::*;
        let ms = Duration::from_millis;
        Self {
            max_body: MAX_BODY,
            body_timeout: ms(BODY_TIMEOUT_MS),
            request_timeout: ms(REQUEST_TIMEOUT_MS),
            max_requests: MAX_REQUESTS,
            body_budget: BODY_BUDGET_MIB * 1024 * 1024,
            body_free: 64 * 1024,
            max_decision_units: MAX_DECISION_UNITS,
            queue_wait: ms(QUEUE_WAIT_MS),
            max_connections: MAX_CONNECTIONS,
            max_connections_per_source: MAX_CONNECTIONS_PER_SOURCE,
            max_connection_age: Duration::from_secs(MAX_CONNECTION_AGE_SECONDS),
            max_live_reads: MAX_LIVE_READS,
            negative_cache_ttl: Duration::from_secs(2),
            tls_handshake_timeout: ms(TLS_HANDSHAKE_TIMEOUT_MS),
            header_read_timeout: ms(HEADER_READ_TIMEOUT_MS),
            max_header_bytes: MAX_HEADER_BYTES,
            h2_window: 128 * 1024,
            idle_timeout: ms(IDLE_TIMEOUT_MS),
            h2_max_streams: 8,
            answer_budget: ANSWER_BUDGET_MIB * 1024 * 1024,
            write_timeout: ms(WRITE_TIMEOUT_MS),
        }
    }
}

/// The live limits: options plus the semaphores that enforce them.
pub struct Limits {
    pub opts: LimitOptions,
    requests: Arc<Semaphore>,
    /// In KiB.
    body_budget: Arc<Semaphore>,
    decisions: Arc<Semaphore>,
    /// The units reviews of more than one unit may hold together.
    big_decisions: Arc<Semaphore>,
    /// In KiB: answers decided and not yet written.
    answers: Arc<Semaphore>,
    /// In KiB: what answers over [`SMALL_ANSWER_KIB`] may hold together
    /// (all but an eighth of `answers`).
    big_answers: Arc<Semaphore>,
    /// KiB of `answers` each source holds (at most half).
    answers_by_source: SourceShares,
    /// Requests holding an in-flight slot while their body is still coming,
    /// oldest first, each with the signal that evicts it.
    readers: Arc<Mutex<BTreeMap<u64, Arc<Reader>>>>,
    next_reader: AtomicU64,
}

/// A request reading its body: evicting it hands its slot to the evictor
/// directly (not back to the semaphore, where requests queued earlier would
/// take it first).
struct Reader {
    evict: Notify,
    handoff: Mutex<Option<tokio::sync::oneshot::Sender<OwnedSemaphorePermit>>>,
    /// The request's source address: the source with the most readers loses one first.
    source: IpAddr,
}

/// The reader to evict: the oldest of the source holding the most readers
/// (a caller sending many slow bodies evicts its own before anyone else's).
fn reader_to_evict(readers: &BTreeMap<u64, Arc<Reader>>) -> Option<u64> {
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for r in readers.values() {
        *held.entry(r.source).or_default() += 1;
    }
    let most = held.values().copied().max()?;
    readers.iter().find(|(_, r)| held.get(&r.source) == Some(&most)).map(|(id, _)| *id)
}

type Readers = Arc<Mutex<BTreeMap<u64, Arc<Reader>>>>;

/// An in-flight slot. While its body is being read the request is listed as
/// a reader and can be evicted for a newer request.
pub struct RequestSlot {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    id: u64,
    reader: Arc<Reader>,
    readers: Readers,
}

impl RequestSlot {
    /// The body is in: no longer evictable.
    fn done_reading(&self) {
        if let Ok(mut r) = self.readers.lock() {
            r.remove(&self.id);
        }
    }
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.done_reading();
    }
}

/// Why a body was not read.
#[derive(Debug)]
pub enum BodyError {
    TooLarge,
    Timeout,
    Budget,
    /// Its slot was taken for a newer request while the body was still coming.
    Evicted,
    Read(String),
}

/// An answer's bytes in the answer budget, and its source's share; given
/// back when dropped (the answer written, or its connection closed).
pub struct AnswerCharge {
    _permit: OwnedSemaphorePermit,
    _big: Option<OwnedSemaphorePermit>,
    _share: Share,
}

/// Answers up to this many KiB (every answer the apiserver's own reviews
/// get) may use the eighth of the answer budget big answers cannot hold.
pub const SMALL_ANSWER_KIB: u32 = 16;

/// The answer budget in KiB (one permit each).
fn answer_kib(opts: &LimitOptions) -> usize {
    (opts.answer_budget / 1024).clamp(1, Semaphore::MAX_PERMITS)
}

/// Holds what a request was granted; released when dropped.
pub struct Held {
    _budget: Option<OwnedSemaphorePermit>,
}

impl Limits {
    pub fn new(opts: LimitOptions) -> Self {
        let budget_kib = (opts.body_budget / 1024).min(Semaphore::MAX_PERMITS);
        Self {
            requests: Arc::new(Semaphore::new(opts.max_requests.clamp(1, Semaphore::MAX_PERMITS))),
            body_budget: Arc::new(Semaphore::new(budget_kib)),
            decisions: Arc::new(Semaphore::new(opts.max_decision_units.max(1) as usize)),
            big_decisions: Arc::new(Semaphore::new(
                (opts.max_decision_units.max(1) - reserved_units(opts.max_decision_units)) as usize,
            )),
            answers: Arc::new(Semaphore::new(answer_kib(&opts))),
            big_answers: Arc::new(Semaphore::new(answer_kib(&opts) - answer_kib(&opts) / 8)),
            answers_by_source: SourceShares::new(((opts.answer_budget / 1024) as u64).div_ceil(2)),
            readers: Arc::default(),
            next_reader: AtomicU64::new(0),
            opts,
        }
    }

    /// An in-flight slot for a request from `source`. When none is free, a
    /// request still reading its body is evicted (the oldest of the source
    /// with the most) and its slot handed over; `None`
    /// when no slot frees up within `queue_wait` (every slot is past its body).
    pub async fn request_slot(&self, source: IpAddr) -> Option<RequestSlot> {
        let permit = match self.requests.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let victim = self.readers.lock().ok().and_then(|mut r| {
                    let id = reader_to_evict(&r)?;
                    r.remove_entry(&id)
                });
                let (tx, handed) = tokio::sync::oneshot::channel();
                if let Some((_, reader)) = victim {
                    if let Ok(mut h) = reader.handoff.lock() {
                        *h = Some(tx);
                    }
                    reader.evict.notify_one();
                }
                let wait = async {
                    tokio::select! {
                        Ok(p) = handed => Some(p),
                        p = self.requests.clone().acquire_owned() => p.ok(),
                    }
                };
                tokio::time::timeout(self.opts.queue_wait, wait).await.ok()??
            }
        };
        let id = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let reader = Arc::new(Reader { evict: Notify::new(), handoff: Mutex::new(None), source });
        if let Ok(mut r) = self.readers.lock() {
            r.insert(id, reader.clone());
        }
        Some(RequestSlot { permit: Mutex::new(Some(permit)), id, reader, readers: self.readers.clone() })
    }

    /// Room for an answer of `len` bytes to `source` until it is written
    /// (the charge drops with the body): at most half the answer budget per
    /// source; waits for room until `deadline`, `None` when there is none.
    /// An answer over [`SMALL_ANSWER_KIB`] first takes its room from the
    /// share big answers may hold (all but an eighth), so however many
    /// unread big answers are pending, from however many sources, the
    /// apiserver's answers (a few KiB) still find room.
    pub async fn answer_charge(&self, source: IpAddr, len: usize, deadline: Instant) -> Option<AnswerCharge> {
        let kib = u32::try_from(len.div_ceil(1024)).unwrap_or(u32::MAX).max(1);
        let share = self.answers_by_source.take(source, u64::from(kib))?;
        let take = async {
            let big = if kib > SMALL_ANSWER_KIB {
                Some(self.big_answers.clone().acquire_many_owned(kib).await.ok()?)
            } else {
                None
            };
            let permit = self.answers.clone().acquire_many_owned(kib).await.ok()?;
            Some(AnswerCharge { _permit: permit, _big: big, _share: share })
        };
        tokio::time::timeout_at(deadline, take).await.ok()?
    }

    /// KiB of answers decided and not yet written.
    pub fn answers_pending_kib(&self) -> usize {
        (self.opts.answer_budget / 1024).saturating_sub(self.answers.available_permits())
    }

    /// Requests reading their body now (evictable).
    pub fn readers(&self) -> usize {
        self.readers.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Reads the whole body by `deadline`, charging the shared budget for
    /// bytes beyond the free allowance. On error the unread rest of the body
    /// is handed back: the answer must be sent before it is dropped (HTTP/2
    /// then ends the request stream with NO_ERROR after the answer, not with
    /// CANCEL before it).
    pub async fn read_body(
        &self,
        mut body: Body,
        declared: Option<usize>,
        deadline: Instant,
        slot: &RequestSlot,
    ) -> Result<(Bytes, Held), (BodyError, Body)> {
        let read = tokio::select! {
            r = self.read_into(&mut body, declared, deadline) => r,
            _ = slot.reader.evict.notified() => Err(BodyError::Evicted),
        };
        slot.done_reading();
        if matches!(read, Err(BodyError::Evicted)) {
            // The evictor gets this slot (if it still waits; else it goes back).
            let permit = slot.permit.lock().ok().and_then(|mut p| p.take());
            let to = slot.reader.handoff.lock().ok().and_then(|mut h| h.take());
            if let (Some(p), Some(to)) = (permit, to) {
                let _ = to.send(p);
            }
        }
        match read {
            Ok(done) => Ok(done),
            Err(e) => Err((e, body)),
        }
    }

    async fn read_into(
        &self,
        body: &mut Body,
        declared: Option<usize>,
        deadline: Instant,
    ) -> Result<(Bytes, Held), BodyError> {
        let max = self.opts.max_body;
        if declared.is_some_and(|n| n > max) {
            return Err(BodyError::TooLarge);
        }
        let mut budget: Option<OwnedSemaphorePermit> = None;
        let mut charged_kib = 0usize;
        let mut charge = |bytes: usize, budget: &mut Option<OwnedSemaphorePermit>| -> Result<(), BodyError> {
            let kib = bytes.saturating_sub(self.opts.body_free).div_ceil(1024);
            if kib > charged_kib {
                let more = u32::try_from(kib - charged_kib).map_err(|_| BodyError::Budget)?;
                let permit = self.body_budget.clone().try_acquire_many_owned(more).map_err(|_| BodyError::Budget)?;
                match budget {
                    Some(p) => p.merge(permit),
                    None => *budget = Some(permit),
                }
                charged_kib = kib;
            }
            Ok(())
        };
        // Memory is charged as it is allocated, and it is only allocated as
        // bytes arrive: a client that declares a large body and stalls holds
        // nothing. Growth doubles, capped by the declared length.
        let cap_limit = declared.unwrap_or(max);
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(BodyError::Timeout),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else { continue };
            let len = buf.len().saturating_add(data.len());
            if len > max {
                return Err(BodyError::TooLarge);
            }
            if len > buf.capacity() {
                let want = buf.capacity().saturating_mul(2).max(len).max(16 * 1024).min(cap_limit.max(len));
                charge(want, &mut budget)?;
                buf.reserve_exact(want - buf.len());
            }
            buf.extend_from_slice(&data);
        }
        Ok((Bytes::from(buf), Held { _budget: budget }))
    }

    /// Decision units for a decision charged `bytes` of heap: one per started
    /// [`DECISION_UNIT_BYTES`]; `Err(budget)` when that is more than every
    /// unit together (`budget` bytes): such a review is never decided.
    pub fn units_for(&self, bytes: u64) -> Result<u32, u64> {
        let max = self.opts.max_decision_units.max(1) - reserved_units(self.opts.max_decision_units);
        let units = bytes.div_ceil(DECISION_UNIT_BYTES).max(1);
        if units > u64::from(max) {
            return Err(u64::from(max).saturating_mul(DECISION_UNIT_BYTES));
        }
        Ok(u32::try_from(units).unwrap_or(max))
    }

    /// `units` decision units, waiting at most `queue_wait`. A review of
    /// more than one unit first takes its units from the share big reviews
    /// may hold (all but [`reserved_units`]): however many big reviews
    /// arrive, from however many sources, a one-unit review (what the
    /// apiserver sends) always finds units within a few small decisions.
    pub async fn decision_slot(&self, units: u32) -> Option<DecisionSlot> {
        let take = async {
            let big =
                if units > 1 { Some(self.big_decisions.clone().acquire_many_owned(units).await.ok()?) } else { None };
            let units = self.decisions.clone().acquire_many_owned(units).await.ok()?;
            Some(DecisionSlot { _units: units, _big: big })
        };
        tokio::time::timeout(self.opts.queue_wait, take).await.ok()?
    }
}

/// Decision units of `max` kept for one-unit reviews: an eighth, at least
/// one once there are four.
pub fn reserved_units(max: u32) -> u32 {
    if max >= 4 {
        (max / 8).max(1)
    } else {
        0
    }
}

/// Decision units held (and, for a review of more than one, its share of
/// the big reviews' units); released when dropped.
pub struct DecisionSlot {
    _units: OwnedSemaphorePermit,
    _big: Option<OwnedSemaphorePermit>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(ip: [u8; 4]) -> Arc<Reader> {
        Arc::new(Reader { evict: Notify::new(), handoff: Mutex::new(None), source: IpAddr::from(ip) })
    }

    #[test]
    fn the_source_with_the_most_slow_bodies_loses_its_oldest_first() {
        let mut r = BTreeMap::new();
        // The caller's body (oldest of all), then a flood from another address.
        r.insert(0, reader([127, 0, 0, 1]));
        for id in 1..5 {
            r.insert(id, reader([127, 0, 0, 2]));
        }
        assert_eq!(reader_to_evict(&r), Some(1));
        // Equal shares: the oldest overall.
        let mut even = BTreeMap::new();
        even.insert(7, reader([127, 0, 0, 2]));
        even.insert(3, reader([127, 0, 0, 1]));
        assert_eq!(reader_to_evict(&even), Some(3));
        assert_eq!(reader_to_evict(&BTreeMap::new()), None);
    }

    #[tokio::test]
    async fn an_evicted_reader_hands_its_slot_to_the_newcomer() {
        let limits = Arc::new(Limits::new(LimitOptions { max_requests: 1, ..LimitOptions::default() }));
        let slow = limits.request_slot(IpAddr::from([127, 0, 0, 2])).await.expect("first slot");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let l = limits.clone();
        // A body that never ends: the reader holds the only slot.
        let (_sender, body) = {
            let (s, b) =
                futures::channel::mpsc::channel::<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>>(1);
            (s, Body::new(http_body_util::StreamBody::new(b)))
        };
        let reading = tokio::spawn(async move {
            let far = Instant::now() + Duration::from_secs(30);
            let r = l.read_body(body, None, far, &slow).await;
            let _ = tx.send(());
            matches!(r, Err((BodyError::Evicted, _)))
        });
        tokio::task::yield_now().await;
        while limits.readers() == 0 {
            tokio::task::yield_now().await;
        }
        let newcomer = tokio::time::timeout(Duration::from_secs(1), limits.request_slot(IpAddr::from([127, 0, 0, 1])))
            .await
            .expect("in time");
        assert!(newcomer.is_some(), "the newcomer got the evicted reader's slot");
        let _ = rx.await;
        assert!(reading.await.unwrap_or(false), "the reader was evicted");
    }

    #[tokio::test]
    async fn unread_big_answers_leave_room_for_the_apiservers_small_ones() {
        // 1 MiB of answers: 896 KiB for big ones, the last 128 KiB small only.
        let limits = Limits::new(LimitOptions { answer_budget: 1024 * 1024, ..LimitOptions::default() });
        let soon = || Instant::now() + Duration::from_millis(50);
        let (a, b, apiserver) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]), IpAddr::from([10, 0, 0, 3]));
        // Two sources hold every KiB big answers may: 448 KiB each.
        let mut held = Vec::new();
        for source in [a, b] {
            for _ in 0..14 {
                held.push(limits.answer_charge(source, 32 * 1024, soon()).await.expect("room for a big answer"));
            }
        }
        assert_eq!(limits.answers_pending_kib(), 896);
        // A third source's big answer finds no room; its small answers do,
        // up to the reserve (no source more than half the budget).
        assert!(limits.answer_charge(apiserver, 32 * 1024, soon()).await.is_none(), "big answers stop at 7/8");
        for i in 0..128 {
            let small = limits.answer_charge(apiserver, 3 * 1024, soon()).await;
            assert!(small.is_some() || i >= 42, "small answer {i} found room");
            held.extend(small);
        }
        assert_eq!(limits.answers_pending_kib(), 896 + 42 * 3);
        // A source over half the budget gets nothing, whatever the size.
        assert!(limits.answer_charge(a, 128 * 1024, soon()).await.is_none());
        drop(held);
        assert_eq!(limits.answers_pending_kib(), 0, "every charge is given back");
    }
}
