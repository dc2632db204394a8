//! A link conditioner: latency, jitter, random loss and burst loss (Gilbert–Elliott), and a
//! bottleneck of limited bandwidth with a drop-tail queue, applied to datagrams in one
//! direction. Deterministic for a given seed; time is passed in.

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

/// A link's narrowest part: it carries `bytes_per_second`, and what arrives faster waits in
/// a queue that holds at most `queue` of sending; a datagram that finds it full is dropped
/// (as a home router's buffer drops). A 256 kbit/s line with a quarter second of buffer:
///
/// ```
/// use std::time::Duration;
/// use volley::transport::conditioner::Bottleneck;
/// let line = Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(250) };
/// # let _ = line;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bottleneck {
    /// What the link carries, in bytes a second (at least 1).
    pub bytes_per_second: u32,
    /// The longest a datagram may wait in its queue.
    pub queue: Duration,
}

/// What a conditioner did to the datagrams it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// Datagrams given.
    pub datagrams: u64,
    /// Lost at random (the profile's loss and bursts).
    pub lost: u64,
    /// Dropped because the bottleneck's queue was full.
    pub queue_drops: u64,
}

/// Decides each datagram's fate.
#[derive(Debug, Clone)]
pub struct LinkConditioner {
    profile: LinkProfile,
    rng: u64,
    bad: bool,
    bottleneck: Option<Bottleneck>,
    /// When the bottleneck has sent everything queued on it.
    busy_until: Duration,
    counts: LinkCounts,
}

impl LinkConditioner {
    /// A conditioner with its own random sequence.
    pub fn new(profile: LinkProfile, seed: u64) -> Self {
        Self {
            profile,
            rng: seed | 1,
            bad: false,
            bottleneck: None,
            busy_until: Duration::ZERO,
            counts: LinkCounts::default(),
        }
    }

    /// Puts a bottleneck on the link, or takes it off (`None`); it can change at any time.
    pub fn set_bottleneck(&mut self, bottleneck: Option<Bottleneck>) {
        self.bottleneck = bottleneck;
    }

    /// Changes the latency, jitter and loss from now on (the bottleneck and its queue stay).
    pub fn set_profile(&mut self, profile: LinkProfile) {
        self.profile = profile;
    }

    /// The latency, jitter and loss.
    pub fn profile(&self) -> LinkProfile {
        self.profile
    }

    /// The bottleneck on the link, if any.
    pub fn bottleneck(&self) -> Option<Bottleneck> {
        self.bottleneck
    }

    /// What it did so far.
    pub fn counts(&self) -> LinkCounts {
        self.counts
    }

    /// The fate of a datagram of `bytes` sent at `now` (a clock that does not go back):
    /// `None` if it is lost (at random, or to the bottleneck's full queue), else how long it
    /// takes to arrive, its wait in the bottleneck's queue and its own sending included.
    pub fn pass(&mut self, now: Duration, bytes: usize) -> Option<Duration> {
        self.counts.datagrams += 1;
        let mut queued = Duration::ZERO;
        if let Some(b) = self.bottleneck {
            let start = self.busy_until.max(now);
            if start - now > b.queue {
                self.counts.queue_drops += 1;
                return None;
            }
            let sending = Duration::from_secs_f64(bytes as f64 / f64::from(b.bytes_per_second.max(1)));
            self.busy_until = start + sending;
            queued = self.busy_until - now;
        }
        match self.fate() {
            Some(d) => Some(d + queued),
            None => {
                self.counts.lost += 1;
                None
            }
        }
    }

    fn next(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `None` if this datagram is lost, else how long to hold it (the profile alone: no
    /// bottleneck, no counts; [`pass`](Self::pass) is the whole link).
    pub fn decide(&mut self) -> Option<Duration> {
        self.fate()
    }

    fn fate(&mut self) -> Option<Duration> {
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
    fn a_bottleneck_queues_then_drops_and_its_rate_holds() {
        let mut c = LinkConditioner::new(LinkProfile::PERFECT, 5);
        c.set_bottleneck(Some(Bottleneck { bytes_per_second: 10_000, queue: Duration::from_millis(100) }));
        // 1000 bytes every 50 ms is 20 000 bytes a second into a 10 000 one: the queue fills
        // (each datagram waits 50 ms longer than the one before), then half are dropped.
        let mut delivered = 0u64;
        let mut last = Duration::ZERO;
        for i in 0..200u64 {
            let now = Duration::from_millis(50 * i);
            if let Some(d) = c.pass(now, 1000) {
                delivered += 1000;
                assert!(d <= Duration::from_millis(200), "waited at most the queue and its own sending: {d:?}");
                last = now + d;
            }
        }
        assert_eq!(c.counts().datagrams, 200);
        assert!((95..=103).contains(&c.counts().queue_drops), "{:?}", c.counts());
        let rate = delivered as f64 / last.as_secs_f64();
        assert!((9_500.0..=10_100.0).contains(&rate), "the link carried {rate} bytes a second");
        // Taken off while running: nothing waits any more.
        c.set_bottleneck(None);
        assert_eq!(c.pass(Duration::from_secs(20), 1000), Some(Duration::ZERO));
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
