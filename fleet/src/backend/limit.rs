//! Rate limits per key (a player id, an address) in a table of bounded size.
//!
//! A token bucket per key: `rate` tokens a second up to `burst`. A bucket that has refilled
//! carries no information, so when the table is full those are dropped first; if every
//! entry is still draining, the new key is refused ([`Limited::TableFull`]) rather than the
//! table growing. Hand-written rather than taken from `governor`: its keyed limiter grows
//! without bound until swept, and the bound is the point here. Time is passed in.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Why a request was limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// This key asks faster than its rate.
    TooFast,
    /// The table holds its maximum of keys, all still draining.
    TableFull,
}

/// Token buckets per key.
#[derive(Debug)]
pub struct RateLimiter<K> {
    rate: f64,
    burst: f64,
    cap: usize,
    buckets: HashMap<K, (f64, Duration)>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// `rate` per second (0: no limit), up to `burst` at once, at most `cap` keys remembered.
    pub fn new(rate: f64, burst: f64, cap: usize) -> Self {
        Self { rate: rate.max(0.0), burst: burst.max(1.0), cap: cap.max(1), buckets: HashMap::new() }
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    fn level(&self, (tokens, at): (f64, Duration), now: Duration) -> f64 {
        (tokens + now.saturating_sub(at).as_secs_f64() * self.rate).min(self.burst)
    }

    /// Takes one token for `key` at `now`.
    ///
    /// # Errors
    /// When `key` has none left, or it is new and the table is full of draining keys.
    pub fn take(&mut self, key: &K, now: Duration) -> Result<(), Limited> {
        if self.rate == 0.0 {
            return Ok(());
        }
        if let Some(b) = self.buckets.get(key).copied() {
            let level = self.level(b, now);
            if level < 1.0 {
                return Err(Limited::TooFast);
            }
            self.buckets.insert(key.clone(), (level - 1.0, now));
            return Ok(());
        }
        if self.buckets.len() >= self.cap {
            let (rate, burst) = (self.rate, self.burst);
            self.buckets.retain(|_, (t, at)| *t + now.saturating_sub(*at).as_secs_f64() * rate < burst);
            if self.buckets.len() >= self.cap {
                return Err(Limited::TableFull);
            }
        }
        self.buckets.insert(key.clone(), (self.burst - 1.0, now));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_its_rate() {
        let mut l = RateLimiter::new(2.0, 3.0, 10);
        let t = Duration::from_secs(100);
        for _ in 0..3 {
            assert_eq!(l.take(&"a", t), Ok(()));
        }
        assert_eq!(l.take(&"a", t), Err(Limited::TooFast));
        assert_eq!(l.take(&"b", t), Ok(()), "another key has its own bucket");
        assert_eq!(l.take(&"a", t + Duration::from_millis(500)), Ok(()));
        assert_eq!(l.take(&"a", t + Duration::from_millis(500)), Err(Limited::TooFast));
    }

    #[test]
    fn the_table_never_outgrows_its_cap() {
        let mut l = RateLimiter::new(1.0, 2.0, 100);
        let t = Duration::from_secs(10);
        for k in 0..100u32 {
            assert_eq!(l.take(&k, t), Ok(()));
        }
        assert_eq!(l.take(&1000, t), Err(Limited::TableFull));
        assert_eq!(l.len(), 100);
        // Once they have refilled, the old keys make room.
        assert_eq!(l.take(&1000, t + Duration::from_secs(2)), Ok(()));
        assert_eq!(l.len(), 1);
    }
}
