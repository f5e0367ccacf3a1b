//! How many "admission review" log lines one source may cause.
//!
//! Why: one line per decided review is what an operator needs from the
//! apiserver's traffic (a few reviews a second), but a direct caller on the
//! unauthenticated port decides the rate: one attacker wrote 2 MB/s, and the
//! container runtime's rotation (10 MiB × 5) then erased the webhook's whole
//! log history in under a minute. Each source gets [`LINES_PER_SECOND`]
//! lines a second (bursts of [`BURST`]); the lines past it are counted, and
//! the next line the source is allowed carries how many were suppressed.
//! Metrics still count every review.

use std::{collections::HashMap, net::IpAddr, sync::Mutex, time::Instant};

/// Lines a second each source may cause, on average.
pub const LINES_PER_SECOND: f64 = 20.0;
/// Lines a source may cause at once.
pub const BURST: f64 = 60.0;
/// Sources remembered at most; beyond, the table starts over (a source then
/// gets a fresh burst: bounded memory matters more than a perfect count).
const MAX_SOURCES: usize = 4096;

struct Bucket {
    tokens: f64,
    at: Instant,
    suppressed: u64,
}

/// The per-source token buckets.
#[derive(Default)]
pub struct LogBudget {
    sources: Mutex<HashMap<IpAddr, Bucket>>,
}

impl LogBudget {
    /// Whether `source` may log a line now: `Some(n)` with the lines
    /// suppressed since its last one, `None` when this one is suppressed.
    pub fn admit(&self, source: IpAddr) -> Option<u64> {
        self.admit_at(source, Instant::now())
    }

    fn admit_at(&self, source: IpAddr, now: Instant) -> Option<u64> {
        let Ok(mut sources) = self.sources.lock() else { return Some(0) };
        if sources.len() >= MAX_SOURCES && !sources.contains_key(&source) {
            sources.clear();
        }
        let b = sources.entry(source).or_insert(Bucket { tokens: BURST, at: now, suppressed: 0 });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * LINES_PER_SECOND).min(BURST);
        b.at = now;
        if b.tokens < 1.0 {
            b.suppressed += 1;
            return None;
        }
        b.tokens -= 1.0;
        Some(std::mem::take(&mut b.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_flooding_source_is_cut_to_its_rate_and_others_are_not() {
        let budget = LogBudget::default();
        let (attacker, apiserver) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 1]));
        let t0 = Instant::now();
        // 10,000 reviews in one second from one source: the burst, then the rate.
        let (mut logged, mut reported) = (0u64, 0u64);
        for i in 0..10_000 {
            if let Some(n) = budget.admit_at(attacker, t0 + Duration::from_micros(i * 100)) {
                logged += 1;
                reported += n;
            }
        }
        assert!(logged as f64 <= BURST + LINES_PER_SECOND + 1.0, "{logged}");
        // Another source is untouched.
        assert_eq!(budget.admit_at(apiserver, t0 + Duration::from_secs(1)), Some(0));
        // Every suppressed line is reported, on the source's next allowed ones.
        reported += budget.admit_at(attacker, t0 + Duration::from_secs(3)).expect("allowed again");
        assert_eq!(reported + logged, 10_000);
    }
}
