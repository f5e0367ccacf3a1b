//! How much of a budget each source address holds, so one source can take
//! at most its share (the live-read places, the answer budget).
//!
//! Why one type: both budgets are "a semaphore, and at most N of it per
//! source", and the bookkeeping (count up before waiting, count down on
//! every way out, drop the entry at zero so the map stays as small as the
//! set of sources holding something) must be the same in both.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
};

/// The amounts each source holds, and the most one may.
pub struct SourceShares {
    per_source: u64,
    held: Arc<Mutex<HashMap<IpAddr, u64>>>,
}

impl SourceShares {
    pub fn new(per_source: u64) -> Self {
        Self { per_source: per_source.max(1), held: Arc::default() }
    }

    /// `amount` more for `source`, when that stays within its share; given
    /// back when the [`Share`] drops.
    pub fn take(&self, source: IpAddr, amount: u64) -> Option<Share> {
        let mut held = self.held.lock().ok()?;
        let n = held.entry(source).or_default();
        if n.saturating_add(amount) > self.per_source {
            if *n == 0 {
                held.remove(&source);
            }
            return None;
        }
        *n += amount;
        Some(Share { source, amount, held: self.held.clone() })
    }

    /// Sources holding anything now.
    pub fn sources(&self) -> usize {
        self.held.lock().map(|h| h.len()).unwrap_or(0)
    }

    /// Whether `source` holds anything now.
    pub fn holds(&self, source: IpAddr) -> bool {
        self.held.lock().is_ok_and(|h| h.contains_key(&source))
    }
}

/// A source's part of a budget; given back when dropped.
pub struct Share {
    source: IpAddr,
    amount: u64,
    held: Arc<Mutex<HashMap<IpAddr, u64>>>,
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Ok(mut h) = self.held.lock() {
            if let Some(n) = h.get_mut(&self.source) {
                *n = n.saturating_sub(self.amount);
                if *n == 0 {
                    h.remove(&self.source);
                }
            }
        }
    }
}
