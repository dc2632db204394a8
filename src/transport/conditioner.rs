//! A link conditioner: latency, jitter, random loss and burst loss (Gilbert–Elliott), applied
//! to datagrams in one direction. Deterministic for a given seed.

use std::time::Duration;

/// How a link misbehaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkProfile {
    /// One-way delay.
    pub latency: Duration,
    /// Each datagram's delay varies uniformly by up to this much either way (so datagrams
    /// can overtake each other).
    pub jitter: Duration,
    /// Chance that a datagram is lost (in the good state, for burst loss).
    pub loss: f64,
    /// Burst loss: (chance to enter the bad state per datagram, chance to leave it). In the
    /// bad state every datagram is lost.
    pub burst: Option<(f64, f64)>,
}

impl LinkProfile {
    /// A perfect link.
    pub const PERFECT: Self = Self { latency: Duration::ZERO, jitter: Duration::ZERO, loss: 0.0, burst: None };
}

/// Decides each datagram's fate.
#[derive(Debug, Clone)]
pub struct LinkConditioner {
    profile: LinkProfile,
    rng: u64,
    bad: bool,
}

impl LinkConditioner {
    /// A conditioner with its own random sequence.
    pub fn new(profile: LinkProfile, seed: u64) -> Self {
        Self { profile, rng: seed | 1, bad: false }
    }

    fn next(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `None` if this datagram is lost, else how long to hold it.
    pub fn decide(&mut self) -> Option<Duration> {
        if let Some((enter, leave)) = self.profile.burst {
            let r = self.next();
            self.bad = if self.bad { r >= leave } else { r < enter };
            if self.bad {
                return None;
            }
        }
        if self.next() < self.profile.loss {
            return None;
        }
        let j = self.profile.jitter.as_secs_f64();
        let d = self.profile.latency.as_secs_f64() + (self.next() * 2.0 - 1.0) * j;
        Some(Duration::from_secs_f64(d.max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_and_delay_follow_the_profile() {
        let p = LinkProfile {
            latency: Duration::from_millis(60),
            jitter: Duration::from_millis(50),
            loss: 0.2,
            burst: None,
        };
        let mut c = LinkConditioner::new(p, 7);
        let fates: Vec<_> = (0..10_000).map(|_| c.decide()).collect();
        let lost = fates.iter().filter(|f| f.is_none()).count();
        assert!((1_800..2_200).contains(&lost), "{lost}");
        let delays: Vec<_> = fates.iter().flatten().collect();
        assert!(delays.iter().all(|d| **d >= Duration::from_millis(10) && **d <= Duration::from_millis(110)));
    }

    #[test]
    fn bursts_lose_runs() {
        let p = LinkProfile { burst: Some((0.02, 0.25)), ..LinkProfile::PERFECT };
        let mut c = LinkConditioner::new(p, 3);
        let fates: Vec<bool> = (0..10_000).map(|_| c.decide().is_none()).collect();
        let runs = fates.windows(2).filter(|w| w[0] && w[1]).count();
        let lost = fates.iter().filter(|x| **x).count();
        assert!(lost > 300 && runs > lost / 2, "losses come in runs: {lost} lost, {runs} consecutive");
    }
}
