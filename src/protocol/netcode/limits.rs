//! Bounded tables for the handshake: per-address rate limits and the used-token history.
//!
//! Both are allocated once, at a size fixed by configuration, so no sender can grow them.
//! They are set-associative (four ways): an address or token maps to one set of four
//! entries, and a newcomer replaces the entry in its set that matters least.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::time::Duration;

const WAYS: usize = 4;

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f32,
    last: Duration,
}

/// Rate and burst of a [`TokenBucket`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f32,
    /// Most tokens held.
    pub burst: f32,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(rate: Rate, now: Duration) -> Self {
        Self { tokens: rate.burst, last: now }
    }

    fn refill(&mut self, rate: Rate, now: Duration) {
        let dt = now.saturating_sub(self.last).as_secs_f32();
        self.tokens = (self.tokens + dt * rate.per_second).min(rate.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, rate: Rate, now: Duration) -> bool {
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Per-address token buckets in a fixed table.
#[derive(Debug)]
pub struct RateLimiter {
    rate: Rate,
    hasher: RandomState,
    entries: Vec<Option<(SocketAddr, TokenBucket)>>,
    sets: usize,
}

impl RateLimiter {
    /// A table with room for about `capacity` addresses (rounded up to a power of two).
    pub fn new(rate: Rate, capacity: usize) -> Self {
        let sets = (capacity.max(WAYS) / WAYS).next_power_of_two();
        Self { rate, hasher: RandomState::new(), entries: vec![None; sets * WAYS], sets }
    }

    /// Takes a token for `addr`; false means the packet should be dropped.
    ///
    /// An address not in the table gets a full bucket in place of the entry of its set that
    /// has the most tokens (the most idle), so a flood from many addresses cannot evict a
    /// busy address in favour of itself more than once per set.
    pub fn allow(&mut self, addr: SocketAddr, now: Duration) -> bool {
        let set = (self.hasher.hash_one(addr) as usize & (self.sets - 1)) * WAYS;
        let ways = &mut self.entries[set..set + WAYS];
        if let Some((_, bucket)) = ways.iter_mut().flatten().find(|(a, _)| *a == addr) {
            return bucket.take(self.rate, now);
        }
        let rate = self.rate;
        let victim = ways
            .iter_mut()
            .min_by(|a, b| {
                let score = |e: &Option<(SocketAddr, TokenBucket)>| match e {
                    None => f32::NEG_INFINITY,
                    Some((_, b)) => {
                        let mut b = *b;
                        b.refill(rate, now);
                        -b.tokens
                    }
                };
                score(a).total_cmp(&score(b))
            })
            .expect("a set has four ways");
        let mut bucket = TokenBucket::full(rate, now);
        let allowed = bucket.take(rate, now);
        *victim = Some((addr, bucket));
        allowed
    }
}

#[derive(Debug, Clone, Copy)]
struct TokenUse {
    mac: [u8; 16],
    addr: SocketAddr,
    expire_timestamp: u64,
    established: bool,
}

/// Remembers which connect tokens were used from which address, until they expire.
///
/// The standard asks that a token be accepted from one address only. We go one step further:
/// a token that completed a handshake is not accepted again (a client that disconnects asks
/// its backend for a new token), so that no two sessions ever share keys and nonces.
#[derive(Debug)]
pub struct TokenHistory {
    entries: Vec<Option<TokenUse>>,
    sets: usize,
}

impl TokenHistory {
    /// A table with room for about `capacity` tokens.
    pub fn new(capacity: usize) -> Self {
        let sets = (capacity.max(WAYS) / WAYS).next_power_of_two();
        Self { entries: vec![None; sets * WAYS], sets }
    }

    fn set(&mut self, mac: &[u8; 16]) -> &mut [Option<TokenUse>] {
        // The tag of an authentic token is uniformly random: its bytes are a good hash.
        let h = u64::from_le_bytes(mac[..8].try_into().unwrap_or_default()) as usize;
        let start = (h & (self.sets - 1)) * WAYS;
        &mut self.entries[start..start + WAYS]
    }

    /// Records a use of the token with tag `mac` from `addr`; false if it must be refused.
    pub fn record(&mut self, mac: &[u8; 16], addr: SocketAddr, expire_timestamp: u64, now_secs: u64) -> bool {
        let set = self.set(mac);
        if let Some(used) = set.iter().flatten().find(|u| u.mac == *mac && u.expire_timestamp > now_secs) {
            return used.addr == addr && !used.established;
        }
        let victim = set
            .iter_mut()
            .min_by_key(|e| e.map_or(0, |u| if u.expire_timestamp <= now_secs { 1 } else { u.expire_timestamp + 1 }))
            .expect("a set has four ways");
        *victim = Some(TokenUse { mac: *mac, addr, expire_timestamp, established: false });
        true
    }

    /// Marks the token as having completed a handshake.
    pub fn establish(&mut self, mac: &[u8; 16]) {
        if let Some(used) = self.set(mac).iter_mut().flatten().find(|u| u.mac == *mac) {
            used.established = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 1000 + i))
    }

    #[test]
    fn bucket_refills_at_its_rate_up_to_the_burst() {
        let rate = Rate { per_second: 10.0, burst: 3.0 };
        let t0 = Duration::from_secs(100);
        let mut b = TokenBucket::full(rate, t0);
        assert!((0..3).all(|_| b.take(rate, t0)));
        assert!(!b.take(rate, t0));
        assert!(b.take(rate, t0 + Duration::from_millis(100)));
        assert!(!b.take(rate, t0 + Duration::from_millis(100)));
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.take(rate, later)).count(), 3);
    }

    #[test]
    fn a_flooding_address_does_not_limit_another() {
        let rate = Rate { per_second: 5.0, burst: 5.0 };
        let mut rl = RateLimiter::new(rate, 64);
        let now = Duration::from_secs(1);
        let flood = (0..1000).filter(|_| rl.allow(addr(1), now)).count();
        assert_eq!(flood, 5);
        assert!(rl.allow(addr(2), now));
    }

    #[test]
    fn many_addresses_cannot_evict_a_limited_one_to_reset_it() {
        // The flooder has used up its bucket; newcomers replace the fullest entry first.
        let rate = Rate { per_second: 1.0, burst: 2.0 };
        let mut rl = RateLimiter::new(rate, 4);
        let now = Duration::from_secs(1);
        while rl.allow(addr(1), now) {}
        for i in 2..5 {
            rl.allow(addr(i), now);
        }
        assert!(!rl.allow(addr(1), now), "still limited");
        assert_eq!(rl.entries.len(), 4, "the table never grows");
    }

    #[test]
    fn token_history_rules() {
        let mut h = TokenHistory::new(16);
        let mac = [7u8; 16];
        assert!(h.record(&mac, addr(1), 100, 10));
        assert!(h.record(&mac, addr(1), 100, 10), "same address may retry the handshake");
        assert!(!h.record(&mac, addr(2), 100, 10), "another address may not");
        h.establish(&mac);
        assert!(!h.record(&mac, addr(1), 100, 10), "a finished handshake's token is spent");
        assert!(h.record(&mac, addr(2), 100, 101), "expired entries are forgotten");
    }

    #[test]
    fn token_history_is_bounded_and_keeps_live_entries_over_expired() {
        let mut h = TokenHistory::new(4);
        let live = [1u8; 16];
        assert!(h.record(&live, addr(1), 1_000, 10));
        for i in 0..3u8 {
            let mut m = [0u8; 16];
            m[15] = i + 2;
            assert!(h.record(&m, addr(9), 11, 10));
        }
        let mut m = [0u8; 16];
        m[15] = 99;
        assert!(h.record(&m, addr(9), 50, 20), "evicts an expired entry");
        assert!(!h.record(&live, addr(2), 1_000, 20), "the live entry survived");
        assert_eq!(h.entries.len(), 4);
    }
}
