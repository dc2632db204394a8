//! When to show what: a playback clock that maps local time to a (fractional) server tick a
//! little in the past, with a delay that adapts to the measured arrival jitter, so the game
//! can interpolate between two snapshots — and extrapolate when the next one is late.

use std::time::Duration;

/// How the frame being drawn relates to the snapshots held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Playback {
    /// Nothing received yet.
    Waiting,
    /// Draw `from` blended towards `to` by `alpha` (0 to 1).
    Interpolating {
        /// Older snapshot tick.
        from: u32,
        /// Newer snapshot tick.
        to: u32,
        /// Blend factor.
        alpha: f32,
    },
    /// The render time is past the newest snapshot: extrapolate from it by `ahead` ticks,
    /// never more than the clock's limit ([`PlaybackClock::set_max_extrapolation`]): past
    /// it, `ahead` stays at the limit and the picture holds.
    Extrapolating {
        /// Newest snapshot tick.
        from: u32,
        /// Ticks past it.
        ahead: f32,
    },
}

/// Estimates the server's clock from snapshot arrivals and picks a render time behind it.
#[derive(Debug, Clone)]
pub struct PlaybackClock {
    tick_rate: f64,
    /// The interval the server announced, in ticks.
    snapshot_interval_ticks: f64,
    /// The interval between the snapshots that arrive, in ticks (smoothed): more than the
    /// announced one while the server, short of CPU, sends fewer (or the link loses some).
    arriving_interval_ticks: f64,
    /// The newest snapshot tick recorded.
    newest: Option<u32>,
    /// Server time minus local time, seconds (smoothed, biased towards early arrivals).
    offset: Option<f64>,
    /// Mean absolute deviation of arrivals from the estimate, seconds.
    jitter: f64,
    /// The furthest past the newest snapshot it extrapolates.
    max_extrapolation: Duration,
}

/// How far past the newest snapshot a [`PlaybackClock`] extrapolates unless told otherwise:
/// a quarter second, then the picture holds (a server that went away does not send
/// everything sliding off the screen).
pub const DEFAULT_MAX_EXTRAPOLATION: Duration = Duration::from_millis(250);

impl PlaybackClock {
    /// A clock for a server at `tick_rate_hz` sending `snapshot_rate_hz` snapshots a second.
    pub fn new(tick_rate_hz: u16, snapshot_rate_hz: u16) -> Self {
        let tick_rate = f64::from(tick_rate_hz.max(1));
        let interval = tick_rate / f64::from(snapshot_rate_hz.max(1));
        Self {
            tick_rate,
            snapshot_interval_ticks: interval.max(1.0),
            arriving_interval_ticks: interval.max(1.0),
            newest: None,
            offset: None,
            jitter: 0.0,
            max_extrapolation: DEFAULT_MAX_EXTRAPOLATION,
        }
    }

    /// Extrapolates at most `limit` past the newest snapshot, then holds
    /// ([`DEFAULT_MAX_EXTRAPOLATION`] by default; zero: never extrapolate, hold the newest).
    pub fn set_max_extrapolation(&mut self, limit: Duration) {
        self.max_extrapolation = limit;
    }

    /// The extrapolation limit.
    pub fn max_extrapolation(&self) -> Duration {
        self.max_extrapolation
    }

    /// `render - newest` in ticks, capped at the extrapolation limit.
    fn ahead(&self, render: f64, newest: u32) -> f32 {
        let cap = self.max_extrapolation.as_secs_f64() * self.tick_rate;
        (render - f64::from(newest)).clamp(0.0, cap) as f32
    }

    /// Records that the snapshot of `tick` arrived at local time `now`.
    pub fn on_snapshot(&mut self, tick: u32, now: Duration) {
        if let Some(newest) = self.newest.filter(|n| tick > *n) {
            // At most a quarter second: a pause is not a rate.
            let gap = f64::from(tick - newest).min(self.tick_rate / 4.0);
            self.arriving_interval_ticks = 0.9 * self.arriving_interval_ticks + 0.1 * gap;
        }
        if self.newest.is_none_or(|n| tick > n) {
            self.newest = Some(tick);
        }
        let sample = f64::from(tick) / self.tick_rate - now.as_secs_f64();
        match self.offset {
            None => self.offset = Some(sample),
            Some(o) => {
                let dev = sample - o;
                self.jitter = 0.9 * self.jitter + 0.1 * dev.abs();
                // Follow early arrivals quickly and late ones slowly: the clock should track
                // the fastest path, and the delay absorbs the rest.
                let k = if dev > 0.0 { 0.2 } else { 0.02 };
                self.offset = Some(o + k * dev);
            }
        }
    }

    /// The measured arrival jitter.
    pub fn jitter(&self) -> Duration {
        Duration::from_secs_f64(self.jitter)
    }

    /// How far behind the estimated server time the render time is, in ticks: one snapshot
    /// interval (the announced one, or the one snapshots arrive at if longer: a server short
    /// of CPU lowers every player's rate) plus room for three times the jitter, at most a
    /// quarter second.
    pub fn delay_ticks(&self) -> f64 {
        let interval = self.snapshot_interval_ticks.max(self.arriving_interval_ticks);
        (interval + 3.0 * self.jitter * self.tick_rate).min(self.tick_rate / 4.0).max(1.0)
    }

    /// The (fractional) server tick to draw at local time `now`.
    pub fn render_tick(&self, now: Duration) -> Option<f64> {
        Some((now.as_secs_f64() + self.offset?) * self.tick_rate - self.delay_ticks())
    }

    /// Clock sync: the (fractional) tick the server is running at local time `now`. Snapshot
    /// arrivals give the server's clock one one-way trip late; half the round-trip time
    /// `rtt` puts it back.
    pub fn server_tick(&self, now: Duration, rtt: Duration) -> Option<f64> {
        Some((now.as_secs_f64() + self.offset? + rtt.as_secs_f64() / 2.0) * self.tick_rate)
    }

    /// The (fractional) tick at which an input sent at `now` reaches the server: half a
    /// round trip ahead of [`PlaybackClock::server_tick`], plus twice the arrival jitter as a
    /// margin. A predicting client simulates up to this tick, so its inputs arrive in time to
    /// be applied on the tick it predicted.
    pub fn input_arrival_tick(&self, now: Duration, rtt: Duration) -> Option<f64> {
        let ahead = rtt.as_secs_f64() / 2.0 + 2.0 * self.jitter;
        Some(self.server_tick(now, rtt)? + ahead * self.tick_rate)
    }

    /// What to draw at `now`, given which snapshot ticks are held (`has(tick)`) and the newest.
    pub fn playback(&self, now: Duration, newest: Option<u32>, has: impl Fn(u32) -> bool) -> Playback {
        let (Some(render), Some(newest)) = (self.render_tick(now), newest) else { return Playback::Waiting };
        if render >= f64::from(newest) {
            return Playback::Extrapolating { from: newest, ahead: self.ahead(render, newest) };
        }
        let floor = render.floor().max(0.0) as u32;
        let from = (0..64).map(|k| floor.saturating_sub(k)).find(|t| has(*t));
        let to = (1..=64).map(|k| floor.saturating_add(k)).find(|t| *t <= newest && has(*t));
        match (from, to) {
            (Some(a), Some(b)) => {
                let alpha = ((render - f64::from(a)) / f64::from(b - a)).clamp(0.0, 1.0) as f32;
                Playback::Interpolating { from: a, to: b, alpha }
            }
            (None, Some(b)) => Playback::Interpolating { from: b, to: b, alpha: 0.0 },
            _ => Playback::Extrapolating { from: newest, ahead: self.ahead(render, newest) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A server short of CPU sends one snapshot in two: the delay follows, so playback
    /// interpolates between the snapshots that come instead of extrapolating past them.
    #[test]
    fn the_delay_follows_a_lowered_snapshot_rate_and_comes_back() {
        let mut c = PlaybackClock::new(60, 60);
        let at = |t: u32| Duration::from_secs_f64(f64::from(t) / 60.0 + 0.03);
        for t in 0..120 {
            c.on_snapshot(t, at(t));
        }
        assert!(c.delay_ticks() < 1.2, "every tick: about one tick ({})", c.delay_ticks());
        for t in (120..360).step_by(2) {
            c.on_snapshot(t, at(t));
        }
        assert!(c.delay_ticks() > 1.9, "one in two: about two ticks ({})", c.delay_ticks());
        let render = c.render_tick(at(359) + Duration::from_millis(10)).unwrap_or(0.0);
        assert!(render < 358.0, "drawn between snapshots held, not past the newest ({render})");
        for t in 360..480 {
            c.on_snapshot(t, at(t));
        }
        assert!(c.delay_ticks() < 1.2, "every tick again: back to one tick ({})", c.delay_ticks());
    }

    #[test]
    fn clock_sync_recovers_the_server_tick_from_late_arrivals() {
        // The server runs tick t at t/60 s; snapshots take 40 ms to arrive; RTT 80 ms.
        let mut c = PlaybackClock::new(60, 60);
        assert_eq!(c.server_tick(ms(0), ms(80)), None);
        for t in 1..=120u32 {
            c.on_snapshot(t, Duration::from_secs_f64(f64::from(t) / 60.0 + 0.040));
        }
        let now = Duration::from_secs_f64(2.5);
        let server = c.server_tick(now, ms(80)).unwrap();
        assert!((server - 150.0).abs() < 0.1, "server tick {server}");
        // Inputs sent now land 40 ms (2.4 ticks) later; no jitter, no margin.
        let lands = c.input_arrival_tick(now, ms(80)).unwrap();
        assert!((lands - 152.4).abs() < 0.1, "arrival tick {lands}");
        // Rendering stays behind the server, by the playback delay plus the trip.
        assert!(c.render_tick(now).unwrap() < server - 2.0);
    }

    #[test]
    fn steady_arrivals_interpolate_between_neighbours() {
        let mut c = PlaybackClock::new(60, 60);
        // Snapshot t arrives at 1 s + t/60 s + 30 ms.
        for t in 0..120u32 {
            c.on_snapshot(t, ms(1_000 + u64::from(t) * 1000 / 60 + 30));
        }
        assert!(c.jitter() < ms(2));
        let p = c.playback(ms(1_000 + 110 * 1000 / 60 + 38), Some(119), |_| true);
        let Playback::Interpolating { from, to, alpha } = p else { panic!("{p:?}") };
        assert_eq!(to, from + 1);
        assert!((0.0..=1.0).contains(&alpha));
        assert!((109..=111).contains(&from), "about a tick behind the newest arrival: {from}");
    }

    #[test]
    fn jitter_grows_the_delay_and_a_gap_is_bridged() {
        let mut calm = PlaybackClock::new(60, 60);
        let mut rough = PlaybackClock::new(60, 60);
        for t in 0..300u32 {
            let base = 1_000 + u64::from(t) * 1000 / 60;
            calm.on_snapshot(t, ms(base + 30));
            rough.on_snapshot(t, ms(base + 30 + u64::from(t * 7919 % 50)));
        }
        assert!(rough.delay_ticks() > calm.delay_ticks() + 1.0, "{} vs {}", rough.delay_ticks(), calm.delay_ticks());
        // Ticks 100..=104 were lost: interpolate across the gap.
        let now = ms(1_000 + 103 * 1000 / 60 + 30) + Duration::from_secs_f64(rough.delay_ticks() / 60.0);
        match rough.playback(now, Some(299), |t| !(100..=104).contains(&t)) {
            Playback::Interpolating { from, to, .. } => assert!(from <= 99 && to >= 105, "{from}..{to}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn late_snapshots_mean_extrapolation_and_nothing_means_waiting() {
        let mut c = PlaybackClock::new(60, 60);
        assert_eq!(c.playback(ms(5), None, |_| true), Playback::Waiting);
        for t in 0..60u32 {
            c.on_snapshot(t, ms(1_000 + u64::from(t) * 1000 / 60));
        }
        // A tenth of a second after the last, nothing new has come: extrapolating.
        let short = match c.playback(ms(2_100), Some(59), |_| true) {
            Playback::Extrapolating { from: 59, ahead } => ahead,
            other => panic!("{other:?}"),
        };
        assert!(short > 0.0 && short < 15.0, "{short}");
        // Half a second later still nothing: held at the limit (a quarter second, 15 ticks).
        match c.playback(ms(2_500), Some(59), |_| true) {
            Playback::Extrapolating { from: 59, ahead } => assert_eq!(ahead, 15.0),
            other => panic!("{other:?}"),
        }
        // A game that wants more (or none) says so.
        c.set_max_extrapolation(Duration::from_secs(1));
        match c.playback(ms(2_500), Some(59), |_| true) {
            Playback::Extrapolating { ahead, .. } => assert!(ahead > 20.0 && ahead <= 60.0, "{ahead}"),
            other => panic!("{other:?}"),
        }
        c.set_max_extrapolation(Duration::ZERO);
        assert_eq!(c.playback(ms(2_500), Some(59), |_| true), Playback::Extrapolating { from: 59, ahead: 0.0 });
    }
}
