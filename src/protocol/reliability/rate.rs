//! A client's send rate: a byte budget per second that follows its link (sans-IO; time is
//! passed in).
//!
//! The budget is a token bucket: it fills at the rate, and what is sent spends it. The rate
//! follows the link with a delay-based controller, in the spirit of the delay half of
//! WebRTC's Google Congestion Control and of LEDBAT (RFC 6817):
//!
//! - the **queueing delay** is the smoothed round trip over the smallest of the last
//!   30 to 60 seconds (a link's own delay is its floor; what is above it waits in some queue);
//! - over the target ([`RateConfig::queue_target`], plus three times the link's own round-trip
//!   variation, its least lately: a jittery link's smoothed round trip wanders above its
//!   floor without any queue) the link is full: the rate drops to
//!   0.85 × what the link delivered lately (the bytes the peer acknowledged a second), so the
//!   queue drains, and holds for a round trip before it may drop again;
//! - under it, the rate grows: 5 % every 100 ms, or 1 % when it was cut within two seconds
//!   (it probes gently near the rate that filled the link), up to
//!   [`RateConfig::max_bytes_per_second`];
//! - a rise that cutting does not drain is the path's, not a queue's: when the queueing
//!   delay has stood over the target for three seconds without falling under 80 % of its
//!   peak, and the link delivers no more than is sent (a queue being drained delivers
//!   more), the path's own delay changed (a new route, Wi-Fi to mobile, a narrow line's
//!   sending time): the floor becomes the round trip now, and the rate grows back to what it
//!   was before the rise by 25 % every 100 ms until the link fills again. Without this, a
//!   path 40 ms longer would hold the rate at its least until the floor's window ran out, up
//!   to a minute.
//!
//! - **a peer that acknowledges nothing** is not a quiet link: when more than two packets'
//!   bytes were sent and none of them acknowledged for [`ACK_SILENCE`] (or four round trips,
//!   if longer), the rate halves every 100 ms down to its least, and stays there until
//!   something is acknowledged again; then it grows back to the rate it had by 25 % every
//!   100 ms. A broken downlink, or a client that keeps sending but never acknowledges, gets
//!   the least in under a second and a half instead of the most for as long as it stays.
//!
//! Loss alone is not taken for congestion: on the links games run over (Wi-Fi, mobile) most
//! loss is not a full queue, and a full drop-tail queue shows as delay before it drops. A
//! window-based controller (QUIC's NewReno or CUBIC) is made for streams that wait for every
//! byte; snapshots replace each other, so what matters is the rate and the queue, not a
//! window of bytes in flight.
//!
//! ```
//! use std::time::Duration;
//! use volley::protocol::reliability::{LinkEstimate, RateConfig, SendRate};
//!
//! let mut rate = SendRate::new(RateConfig::default());
//! let mut link = LinkEstimate::default();
//! let ms = Duration::from_millis;
//! // A quiet 40 ms link for two seconds, the peer acknowledging 30 000 bytes a second: the
//! // budget stays at the most a client is sent.
//! let mut acked = 0;
//! for i in 0..20u64 {
//!     link.rtt_sample(ms(40));
//!     acked += 3_000;
//!     rate.update(ms(100 * i), &link, acked);
//! }
//! assert_eq!(rate.bytes_per_second(), 125_000);
//! assert!(rate.room(ms(2_000)) >= 1200);
//! // Then the round trip grows to 140 ms: a queue is building, the rate drops under what
//! // the link delivers.
//! for i in 20..60u64 {
//!     link.rtt_sample(ms(140));
//!     acked += 3_000;
//!     rate.update(ms(100 * i), &link, acked);
//! }
//! assert!(rate.bytes_per_second() < 30_000, "{}", rate.bytes_per_second());
//! ```

use std::time::Duration;

use super::rtt::LinkEstimate;
use crate::protocol::netcode::MAX_PAYLOAD_BYTES;

/// Settings of a [`SendRate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    /// The most a client is sent, in bytes a second (the budget of a quiet link). Less than
    /// [`MIN_RATE`] is taken as [`MIN_RATE`].
    pub max_bytes_per_second: u32,
    /// The least, however full its link looks (at most the most).
    pub min_bytes_per_second: u32,
    /// The queueing delay (smoothed round trip over the smallest lately) above which the link
    /// is taken to be full.
    pub queue_target: Duration,
}

impl Default for RateConfig {
    /// 125 000 bytes a second (1 Mbit/s: more than a full packet every tick at 60 Hz), at
    /// least 4 000 (32 kbit/s), 15 ms of queueing (a 256 kbit/s line sends a 500-byte packet in 16 ms).
    fn default() -> Self {
        Self { max_bytes_per_second: 125_000, min_bytes_per_second: 4_000, queue_target: Duration::from_millis(15) }
    }
}

/// The least any budget is, in bytes a second, whatever the settings say: a small snapshot
/// (and the reliable messages riding with it) every few ticks, so a session always moves.
pub const MIN_RATE: u32 = 1_000;

/// How often the rate may change.
const UPDATE: Duration = Duration::from_millis(100);
/// The smallest round trip is kept over two windows of this.
const BASE_WINDOW: Duration = Duration::from_secs(30);
/// The target stands this many times the link's own round-trip variation above the queueing
/// target.
const JITTERS: f64 = 3.0;
/// After a cut, the growth is gentle for this long.
const NEAR: Duration = Duration::from_secs(2);
/// A rise over the target that lasts this long without draining is the path's.
const STANDING: Duration = Duration::from_secs(3);
/// ... without draining: still at least this share of its peak.
const UNDRAINED: f64 = 0.8;
/// After a change of path, the rate grows back by this every update (from the least to the
/// most in under two seconds).
const RECOVERY: f64 = 1.25;

/// Sent bytes left unacknowledged this long (or four smoothed round trips, if longer) mean
/// the peer hears nothing: the rate falls to its least.
pub const ACK_SILENCE: Duration = Duration::from_secs(1);

/// A run of updates over the target.
#[derive(Debug, Clone, Copy)]
struct Rise {
    /// Since when the queueing delay has not fallen under [`UNDRAINED`] of `peak`.
    since: Duration,
    /// The most queueing delay seen since then.
    peak: f64,
    /// The rate when the run began.
    rate_before: f64,
}

/// One client's send budget (see the [module](self)).
#[derive(Debug, Clone)]
pub struct SendRate {
    config: RateConfig,
    /// Bytes a second.
    rate: f64,
    /// Bytes that may be sent now (negative: sent ahead, to be paid back).
    tokens: f64,
    filled_at: Option<Duration>,
    /// The last update, with the bytes acknowledged then.
    updated: Option<(Duration, u64)>,
    /// The smallest smoothed round trip in this window and the one before, and when this
    /// one began.
    base: [f64; 2],
    /// The same for the round trip's variation.
    jitter_base: [f64; 2],
    base_since: Duration,
    /// When the rate was last cut, and until when it may not be cut again.
    cut_at: Option<Duration>,
    hold_until: Duration,
    cuts: u64,
    /// Updates in a row over the target.
    over: u32,
    /// Bytes a second the peer acknowledged lately (smoothed over about half a second).
    delivered: Option<f64>,
    /// The rise over the target going on, if one is.
    rise: Option<Rise>,
    /// Times the path's own delay was found to have changed.
    rebased: u64,
    /// After such a change, the rate to grow back to quickly (until the link fills again).
    recover_to: Option<f64>,
    /// The peer's count of acknowledged bytes when it last grew, and when.
    acked: (u64, Duration),
    /// Bytes sent since then.
    unacked: u64,
    /// While nothing is acknowledged: the rate before the silence.
    silenced_from: Option<f64>,
    /// Times the rate fell for want of acknowledgements.
    silences: u64,
}

impl SendRate {
    /// A budget at `config`'s most, full.
    pub fn new(config: RateConfig) -> Self {
        let max = f64::from(config.max_bytes_per_second.max(MIN_RATE));
        Self {
            config,
            rate: max,
            tokens: Self::burst_of(max),
            filled_at: None,
            updated: None,
            base: [f64::INFINITY; 2],
            jitter_base: [f64::INFINITY; 2],
            base_since: Duration::ZERO,
            cut_at: None,
            hold_until: Duration::ZERO,
            cuts: 0,
            over: 0,
            delivered: None,
            rise: None,
            rebased: 0,
            recover_to: None,
            acked: (0, Duration::ZERO),
            unacked: 0,
            silenced_from: None,
            silences: 0,
        }
    }

    /// The most the bucket holds at `rate`: 50 ms of sending, at least two full packets.
    fn burst_of(rate: f64) -> f64 {
        (rate * 0.05).max(2.0 * MAX_PAYLOAD_BYTES as f64)
    }

    /// The rate now, in bytes a second.
    pub fn bytes_per_second(&self) -> u32 {
        self.rate as u32
    }

    /// Times the rate was cut for a full link.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Times a rise of the round trip that cutting did not drain was taken for a change of
    /// the path's own delay (the floor moved to it and the rate went back).
    pub fn rebased(&self) -> u64 {
        self.rebased
    }

    /// Times the rate fell to its least because nothing sent was acknowledged for
    /// [`ACK_SILENCE`].
    pub fn silences(&self) -> u64 {
        self.silences
    }

    /// Whether the peer acknowledges nothing lately (the rate is falling or at its least
    /// for it).
    pub fn is_silent(&self) -> bool {
        self.silenced_from.is_some()
    }

    /// While the peer acknowledges nothing ([`is_silent`](Self::is_silent)): when it last
    /// acknowledged something (the first update, when it never has). A session whose client
    /// has acknowledged nothing for its connection timeout takes it for a drop.
    pub fn deaf_since(&self) -> Option<Duration> {
        self.silenced_from.map(|_| self.acked.1)
    }

    /// The settings.
    pub fn config(&self) -> &RateConfig {
        &self.config
    }

    /// Changes the settings while running; the rate is brought within the new bounds.
    pub fn set_config(&mut self, config: RateConfig) {
        self.config = config;
        self.rate = self.clamp(self.rate);
    }

    fn clamp(&self, rate: f64) -> f64 {
        let max = f64::from(self.config.max_bytes_per_second.max(MIN_RATE));
        rate.clamp(f64::from(self.config.min_bytes_per_second).min(max), max)
    }

    /// The bytes that may be sent at `now` (0 while what was sent ahead is paid back).
    pub fn room(&mut self, now: Duration) -> usize {
        if let Some(at) = self.filled_at {
            let dt = now.saturating_sub(at).as_secs_f64();
            self.tokens = (self.tokens + self.rate * dt).min(Self::burst_of(self.rate));
        }
        self.filled_at = Some(now);
        self.tokens.max(0.0) as usize
    }

    /// `bytes` were sent (they may be more than the room: the budget goes into debt).
    pub fn spend(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
        self.unacked = self.unacked.saturating_add(bytes as u64);
    }

    /// Follows the link: `link`'s round trip and `bytes_acked`, the peer's running count of
    /// acknowledged bytes ([`ChannelStats::bytes_acked`](super::ChannelStats::bytes_acked)).
    /// Call it as often as you like; the rate changes at most every 100 ms.
    pub fn update(&mut self, now: Duration, link: &LinkEstimate, bytes_acked: u64) {
        let Some((at, acked_then)) = self.updated else {
            self.updated = Some((now, bytes_acked));
            self.base_since = now;
            self.acked = (bytes_acked, now);
            return;
        };
        let dt = now.saturating_sub(at);
        if dt < UPDATE {
            return;
        }
        self.updated = Some((now, bytes_acked));
        let srtt = link.rtt().as_secs_f64();
        let fresh = bytes_acked.saturating_sub(acked_then) as f64 / dt.as_secs_f64();
        self.delivered = match self.delivered {
            None => Some(fresh),
            Some(d) => Some(0.7 * d + 0.3 * fresh),
        };
        if bytes_acked > self.acked.0 {
            self.acked = (bytes_acked, now);
            self.unacked = 0;
            if let Some(before) = self.silenced_from.take() {
                // Heard again: back to the rate of before, quickly (as after a new path).
                self.recover_to = Some(before);
                self.cut_at = None;
            }
        } else {
            let limit = ACK_SILENCE.max(Duration::from_secs_f64(4.0 * srtt.max(0.0)));
            let sent = self.unacked > 2 * MAX_PAYLOAD_BYTES as u64;
            if sent && now.saturating_sub(self.acked.1) >= limit {
                if self.silenced_from.is_none() {
                    self.silenced_from = Some(self.rate);
                    self.silences += 1;
                }
                self.rate = self.clamp(self.rate * 0.5);
                self.recover_to = None;
                self.rise = None;
                self.over = 0;
                return;
            }
        }
        if srtt <= 0.0 {
            return; // no round trip measured yet
        }
        if now.saturating_sub(self.base_since) >= BASE_WINDOW {
            self.base = [f64::INFINITY, self.base[0]];
            self.jitter_base = [f64::INFINITY, self.jitter_base[0]];
            self.base_since = now;
        }
        self.base[0] = self.base[0].min(srtt);
        self.jitter_base[0] = self.jitter_base[0].min(link.jitter().as_secs_f64());
        let floor = self.base[0].min(self.base[1]);
        // The link's own jitter: its least lately (a queue that fills and drains adds
        // variation of its own, which must not loosen the target).
        let jitter = self.jitter_base[0].min(self.jitter_base[1]);
        let queued = srtt - floor;
        // A jittery link's smoothed round trip wanders above its floor without any queue:
        // the target stands a few times the link's own variation higher.
        let target = self.config.queue_target.as_secs_f64() + JITTERS * jitter;
        if queued <= target {
            self.over = 0;
            self.rise = None;
            let near = self.cut_at.is_some_and(|c| now.saturating_sub(c) < NEAR);
            let grown = match self.recover_to {
                // Back to the rate of before a change of path, quickly but not at once: the
                // new path may be narrower too.
                Some(to) if self.rate < to => (self.rate * RECOVERY).min(to),
                _ if near => self.rate * 1.01,
                _ => self.rate * 1.05,
            };
            self.rate = self.clamp(grown);
            return;
        }
        self.recover_to = None;
        // Over the target twice in a row (a spike of one update is not a queue), and not
        // within a round trip of the last cut: at most halved, to 0.85 × what the link
        // delivered lately.
        self.over = self.over.saturating_add(1);
        let mut rise = self.rise.unwrap_or(Rise { since: now, peak: queued, rate_before: self.rate });
        if queued < UNDRAINED * rise.peak {
            // Draining: it is watched again from here.
            rise.since = now;
            rise.peak = queued;
        }
        rise.peak = rise.peak.max(queued);
        self.rise = Some(rise);
        // A queue drains while the link delivers more than is sent: not the path's then.
        let draining = self.delivered.is_some_and(|d| d > 1.1 * self.rate);
        if now.saturating_sub(rise.since) >= STANDING && queued >= UNDRAINED * rise.peak && !draining {
            // Cutting did not drain it: the path's delay, now its floor.
            self.base = [srtt; 2];
            self.base_since = now;
            self.recover_to = Some(rise.rate_before);
            self.cut_at = None;
            self.rise = None;
            self.over = 0;
            self.rebased += 1;
            return;
        }
        if self.over >= 2 && now >= self.hold_until {
            let delivered = self.delivered.unwrap_or(self.rate);
            self.rate = self.clamp((0.85 * delivered).clamp(0.5 * self.rate, self.rate));
            self.tokens = self.tokens.min(0.0);
            self.cut_at = Some(now);
            self.hold_until = now + Duration::from_secs_f64(srtt).max(UPDATE);
            self.cuts += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::conditioner::{Bottleneck, LinkConditioner, LinkProfile};

    /// A sender at 60 packets a second of up to `want` bytes each, through `line` and back
    /// over a quiet 20 ms link, for `secs`: the rate it settles at, the mean queueing delay of
    /// the last half, and the share of datagrams the queue dropped.
    fn run(want: usize, line: Bottleneck, loss: f64, secs: u64) -> (u32, f64, f64) {
        run_with(want, line, LinkProfile { latency: Duration::from_millis(20), loss, ..LinkProfile::PERFECT }, secs)
    }

    fn run_with(want: usize, line: Bottleneck, profile: LinkProfile, secs: u64) -> (u32, f64, f64) {
        let (rate, queued, drops) = run_path(want, line, profile, None, secs);
        (rate.bytes_per_second(), queued, drops)
    }

    /// [`run_with`], the link's profile changing to `later.1` at `later.0`: the sender's
    /// rate, and the same figures.
    fn run_path(
        want: usize,
        line: Bottleneck,
        profile: LinkProfile,
        later: Option<(Duration, LinkProfile)>,
        secs: u64,
    ) -> (SendRate, f64, f64) {
        let mut down = LinkConditioner::new(profile, 9);
        down.set_bottleneck(Some(line));
        let mut rate = SendRate::new(RateConfig::default());
        let mut link = LinkEstimate::default();
        let (mut acked, mut acks): (u64, Vec<(Duration, usize, Duration)>) = (0, Vec::new());
        let (mut queued, mut samples) = (0.0, 0);
        for i in 0..secs * 60 {
            let now = Duration::from_micros(i * 16_667);
            if let Some((at, p)) = later
                && now >= at
            {
                down.set_profile(p);
            }
            // Acknowledgements that came back by now (a quiet 20 ms way back).
            acks.retain(|(at, bytes, sent)| {
                if *at > now {
                    return true;
                }
                acked += *bytes as u64;
                link.rtt_sample(*at - *sent);
                false
            });
            rate.update(now, &link, acked);
            let n = rate.room(now).min(want);
            if n < 100 {
                continue;
            }
            rate.spend(n);
            if let Some(d) = down.pass(now, n) {
                acks.push((now + d + Duration::from_millis(20), n, now));
                if i >= secs * 30 {
                    queued += (d.as_secs_f64() - 0.020).max(0.0);
                    samples += 1;
                }
            }
        }
        let c = down.counts();
        (rate, queued / f64::from(samples.max(1)), c.queue_drops as f64 / c.datagrams as f64)
    }

    #[test]
    fn a_longer_path_is_not_taken_for_a_queue() {
        // A wide link whose path grows 40 ms longer at 10 s (Wi-Fi to mobile): 60 ms of
        // delay over the floor, and cutting does not drain it.
        let line = Bottleneck { bytes_per_second: 1_000_000, queue: Duration::from_millis(200) };
        let near = LinkProfile { latency: Duration::from_millis(20), ..LinkProfile::PERFECT };
        let far = LinkProfile { latency: Duration::from_millis(60), ..LinkProfile::PERFECT };
        let (rate, _, _) = run_path(1200, line, near, Some((Duration::from_secs(10), far)), 20);
        assert_eq!(rate.rebased(), 1, "the floor moved once");
        assert_eq!(rate.bytes_per_second(), 125_000, "and the rate came back ({} cuts)", rate.cuts());
    }

    #[test]
    fn a_deep_queue_drains_and_is_not_taken_for_a_longer_path() {
        // Up to four seconds of buffer on a 256 kbit/s line (a bloated cable modem): the queue
        // is the sender's, cutting drains it, and the floor stays. (Without the check that
        // the link delivers more than is sent, two seconds and more were taken for the path.)
        for queue in [250, 1000, 2000, 4000] {
            let line = Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(queue) };
            let profile = LinkProfile { latency: Duration::from_millis(20), ..LinkProfile::PERFECT };
            let (rate, queued, _) = run_path(1200, line, profile, None, 60);
            assert_eq!(rate.rebased(), 0, "{queue} ms of buffer: taken for the path");
            assert!((20_000..=36_000).contains(&rate.bytes_per_second()), "settled at {}", rate.bytes_per_second());
            assert!(queued < 0.040, "{queue} ms of buffer: mean queueing {queued} s");
        }
    }

    #[test]
    fn a_quiet_link_keeps_the_most() {
        let line = Bottleneck { bytes_per_second: 1_000_000, queue: Duration::from_millis(200) };
        let (rate, queued, drops) = run(1200, line, 0.0, 10);
        assert_eq!(rate, 125_000);
        assert!(queued < 0.002 && drops == 0.0, "{queued} {drops}");
    }

    #[test]
    fn a_narrow_link_is_filled_without_a_standing_queue() {
        // 60 full packets a second (72 000 bytes) into a 32 000 one (256 kbit/s) with a
        // quarter second of buffer and 2 % loss.
        let line = Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(250) };
        let (rate, queued, drops) = run(1200, line, 0.02, 60);
        assert!((20_000..=36_000).contains(&rate), "settled at {rate}");
        assert!(queued < 0.040, "mean queueing {queued} s");
        assert!(drops < 0.02, "queue drops {drops}");
        // Without the controller (room always a full packet), the queue stands full.
        let mut down = LinkConditioner::new(LinkProfile::PERFECT, 9);
        down.set_bottleneck(Some(line));
        for i in 0..3600u64 {
            let _ = down.pass(Duration::from_micros(i * 16_667), 1200);
        }
        assert!(down.counts().queue_drops > 1500, "{:?}", down.counts());
    }

    #[test]
    fn a_jittery_link_is_not_taken_for_a_queue() {
        let line = Bottleneck { bytes_per_second: 1_000_000, queue: Duration::from_millis(200) };
        for jitter in [10, 50] {
            let profile = LinkProfile {
                latency: Duration::from_millis(60),
                jitter: Duration::from_millis(jitter),
                loss: 0.2,
                burst: None,
            };
            let (rate, _, _) = run_with(1200, line, profile, 60);
            assert_eq!(rate, 125_000, "±{jitter} ms");
        }
    }

    #[test]
    fn random_loss_alone_does_not_lower_the_rate() {
        let line = Bottleneck { bytes_per_second: 1_000_000, queue: Duration::from_millis(200) };
        let (rate, _, _) = run(1200, line, 0.2, 20);
        assert_eq!(rate, 125_000);
    }

    #[test]
    fn the_bounds_hold_whatever_the_link_says() {
        let mut r = SendRate::new(RateConfig {
            min_bytes_per_second: 5_000,
            max_bytes_per_second: 9_000,
            ..RateConfig::default()
        });
        let mut link = LinkEstimate::default();
        link.rtt_sample(Duration::from_millis(10));
        r.update(Duration::ZERO, &link, 0);
        for i in 1..29u64 {
            link.rtt_sample(Duration::from_secs(3));
            r.update(Duration::from_millis(100 * i), &link, 0);
        }
        assert_eq!(r.bytes_per_second(), 5_000, "within the 3 s a rise may stand");
        r.set_config(RateConfig { min_bytes_per_second: 9_000, max_bytes_per_second: 8_000, ..r.config });
        assert_eq!(r.bytes_per_second(), 8_000, "max wins over a min above it");
        r.set_config(RateConfig { min_bytes_per_second: 0, max_bytes_per_second: 0, ..r.config });
        assert_eq!(r.bytes_per_second(), MIN_RATE, "a budget of nothing would stall the session");
        // Time going back and huge spends lose nothing.
        r.spend(usize::MAX / 2);
        assert_eq!(r.room(Duration::from_secs(1)), 0);
        r.update(Duration::ZERO, &link, u64::MAX);
    }

    #[test]
    fn a_peer_that_acknowledges_nothing_gets_the_least_then_what_it_had() {
        let mut r = SendRate::new(RateConfig::default());
        let mut link = LinkEstimate::default();
        let ms = Duration::from_millis;
        let (mut acked, mut at) = (0u64, Duration::ZERO);
        // Two seconds of a quiet 40 ms link, 30 000 bytes a second sent and acknowledged.
        for _ in 0..120 {
            at += ms(16);
            link.rtt_sample(ms(40));
            r.spend(500);
            acked += 500;
            r.update(at, &link, acked);
        }
        assert_eq!(r.bytes_per_second(), 125_000);
        assert!(!r.is_silent());
        // Then the peer acknowledges nothing more: within a second and a half, the least.
        let silent_at = at;
        let mut least_at = None;
        while at < silent_at + ms(3_000) {
            at += ms(16);
            r.spend(500);
            r.update(at, &link, acked);
            if least_at.is_none() && r.bytes_per_second() == 4_000 {
                least_at = Some(at - silent_at);
            }
        }
        let least_at = least_at.expect("fell to the least");
        assert!(least_at <= ms(1_600), "the least after {least_at:?}");
        assert!(least_at >= ACK_SILENCE, "not before the silence is long enough: {least_at:?}");
        assert!(r.is_silent());
        assert_eq!(r.silences(), 1);
        // What the budget lets out in the silence's third second: the least, and a burst.
        let mut sent = 0;
        let from = at;
        while at < from + ms(1_000) {
            at += ms(16);
            let room = r.room(at);
            r.spend(room);
            sent += room;
            r.update(at, &link, acked);
        }
        assert!(sent <= 4_000 + 2 * MAX_PAYLOAD_BYTES, "{sent} bytes in a silent second");
        // Acknowledged again: back to the most within two seconds.
        let heard_at = at;
        while at < heard_at + ms(2_000) {
            at += ms(16);
            link.rtt_sample(ms(40));
            r.spend(500);
            acked += 500;
            r.update(at, &link, acked);
        }
        assert!(!r.is_silent());
        assert_eq!(r.bytes_per_second(), 125_000);
        assert_eq!(r.silences(), 1);
    }
}
