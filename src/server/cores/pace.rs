//! Snapshot pacing: a server short of CPU lowers every player's snapshot rate evenly
//! (60 → 30 → 20 → 15 Hz at a 60 Hz tick) instead of leaving whoever is last in the
//! fan-out without its snapshot, and raises it again when there is room. Sans-IO: the
//! broadcaster tells it, each tick, how many snapshots it handed out and how many of them
//! replaced one the player had not yet taken (the sign of a fan-out that does not keep
//! up); it answers the interval, in ticks, between two snapshots of a player.
//!
//! | what it sees | what it does |
//! | --- | --- |
//! | over 1 % of a second's snapshots replaced, and the fan-out busy: over half the period to hand out its snapshots in over 10 % of the rounds | one step down (interval + 1), up to the configured floor |
//! | snapshots replaced by a round right behind the one before (a world catching up), or with a fan-out that has room (a slow world, a stalled player actor) | nothing: fewer snapshots would not help |
//! | the second after a change | nothing: the old interval's backlog drains |
//! | none replaced for `calm` seconds (10 at first), and room: in 90 % of the rounds the fan-out, scaled to one step up, hands out its last snapshot within half the period | one step up (interval − 1) |
//! | a step up followed within 5 s by a step down | `calm` doubles (at most 160 s): the server does not flap |
//!
//! A player at interval `n` gets the snapshots of the ticks where `(tick + id) % n == 0`:
//! staggered, so each tick serves a `1/n` share of the players. Each player is told the
//! interval ([`Pace`](crate::protocol::system::Pace)) and sends its inputs at the same rate
//! (each packet carries the last few inputs: none is lost), which is what lowers the
//! server's receiving work as well as its sending.

use std::time::Duration;

/// The most ticks between two of a player's snapshots: a client's input packet then carries
/// its last `interval ×` [`REDUNDANT_INPUTS`](crate::protocol::input::REDUNDANT_INPUTS)
/// inputs, at most [`MAX_PACKET_INPUTS`](crate::protocol::input::MAX_PACKET_INPUTS).
pub(crate) const MAX_INTERVAL: u8 = crate::protocol::input::REDUNDANT_INPUTS as u8;

/// A second's snapshots replaced above this share: one step down.
const LATE_SHARE: f64 = 0.01;

/// A step up needs room: the fan-out, scaled to the interval one step up (`interval /
/// (interval - 1)` times the players a tick), would hand out its last snapshot within this
/// share of the snapshot period ...
const ROOM: f64 = 0.5;

/// ... in all but this share of a second's rounds.
const TIGHT_SHARE: f64 = 0.1;

/// Seconds without any snapshot replaced before the first step up.
const FIRST_CALM_SECS: u32 = 10;

/// At most this many seconds of calm asked for before a step up.
const MOST_CALM_SECS: u32 = 160;

/// A step down this soon (seconds) after a step up: the step up was too early.
const RELAPSE_SECS: u32 = 5;

/// One round of the fan-out (the snapshots of one server tick, every world's), as the
/// broadcaster saw it when the next began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// Snapshots handed to players ...
    pub handed: usize,
    /// ... and how many of them replaced one the player had not taken.
    pub replaced: usize,
    /// How long after the round before it this one began.
    pub after: Duration,
    /// How long the fan-out took to hand out its last snapshot (`None`: it had not yet) ...
    pub drained: Option<Duration>,
    /// ... when the next round began, this long after this one.
    pub lasted: Duration,
}

/// Decides the interval between two snapshots of a player (see the module's docs).
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    /// The interval now, in ticks (1: every tick).
    interval: u8,
    /// The most it may be.
    most: u8,
    ticks_per_second: u32,
    /// This second so far: ticks, snapshots handed out, snapshots replaced.
    ticks: u32,
    handed: u64,
    replaced: u64,
    /// ... rounds whose fan-out was judged (the next began at least half a period later),
    /// those that took over half the period to hand out their snapshots, and those that
    /// would have one step up.
    judged: u32,
    busy: u32,
    tight: u32,
    /// The snapshot period.
    period: Duration,
    /// Seconds in a row with none replaced.
    calm: u32,
    /// Seconds of calm a step up waits for.
    calm_needed: u32,
    /// Seconds since the last step up (`None`: none yet, or long ago).
    since_up: Option<u32>,
    /// Set by hand ([`Pacer::pin`]): the figures do not move it.
    pinned: bool,
    /// The interval changed in the last second: this second's figures are the old
    /// interval's backlog draining, not the new one's, and are not judged.
    settling: bool,
}

impl Pacer {
    /// A pacer for a server ticking `ticks_per_second` times a second that may go down to
    /// `min_rate_hz` snapshots a second per player (at most [`MAX_INTERVAL`] ticks apart; a
    /// minimum at or above the tick rate turns pacing off).
    pub(crate) fn new(ticks_per_second: u32, min_rate_hz: u32) -> Self {
        let tps = ticks_per_second.max(1);
        let most = tps.div_ceil(min_rate_hz.max(1)).clamp(1, u32::from(MAX_INTERVAL)) as u8;
        Self {
            interval: 1,
            most,
            ticks_per_second: tps,
            ticks: 0,
            handed: 0,
            replaced: 0,
            judged: 0,
            busy: 0,
            tight: 0,
            period: Duration::from_secs(1) / tps,
            calm: 0,
            calm_needed: FIRST_CALM_SECS,
            since_up: None,
            pinned: false,
            settling: false,
        }
    }

    /// The interval now, in ticks.
    pub(crate) fn interval(&self) -> u8 {
        self.interval
    }

    /// Whether player `id` gets the snapshot of `tick`.
    pub(crate) fn due(&self, tick: u32, id: u32) -> bool {
        self.interval <= 1 || tick.wrapping_add(id).is_multiple_of(u32::from(self.interval))
    }

    /// Holds the interval at `interval` (1 to [`MAX_INTERVAL`]), whatever the figures say,
    /// or (`None`) lets them decide again, from where it is. The new interval when it
    /// changes.
    pub(crate) fn pin(&mut self, interval: Option<u8>) -> Option<u8> {
        self.pinned = interval.is_some();
        (self.ticks, self.handed, self.replaced, self.calm, self.since_up) = (0, 0, 0, 0, None);
        (self.judged, self.busy, self.tight) = (0, 0, 0);
        let new = interval.map_or(self.interval, |i| i.clamp(1, MAX_INTERVAL));
        (new != self.interval).then(|| {
            self.interval = new;
            new
        })
    }

    /// One round of the fan-out (see [`Round`]). The new interval when it changes.
    pub(crate) fn on_round(&mut self, round: Round) -> Option<u8> {
        if self.pinned {
            return None;
        }
        let half = self.period / 2;
        if round.after >= half {
            // A round right behind the one before it (a world catching up on late ticks)
            // replaces snapshots whatever the fan-out does: its figures say nothing.
            self.handed += round.handed as u64;
            self.replaced += round.replaced as u64;
        }
        if round.lasted >= half {
            let room = ROOM * self.period.as_secs_f64();
            let took = |scale: f64| round.drained.is_none_or(|d| d.as_secs_f64() * scale > room);
            self.judged += 1;
            self.busy += u32::from(took(1.0));
            if self.interval > 1 {
                self.tight += u32::from(took(f64::from(self.interval) / f64::from(self.interval - 1)));
            }
        }
        self.ticks += 1;
        if self.ticks < self.ticks_per_second {
            return None;
        }
        let share = |n: u32| f64::from(n) > TIGHT_SHARE * f64::from(self.judged);
        // Late: snapshots replaced, and the fan-out is what makes them late (a slow world
        // or a stalled player actor replaces snapshots too, with a fan-out that has room).
        let late = self.handed > 0 && self.replaced as f64 > LATE_SHARE * self.handed as f64 && share(self.busy);
        let none = self.replaced == 0 && !share(self.tight);
        tracing::debug!(
            interval = self.interval,
            handed = self.handed,
            replaced = self.replaced,
            judged = self.judged,
            busy = self.busy,
            tight = self.tight,
            "snapshot pacing: the last second"
        );
        (self.ticks, self.handed, self.replaced, self.judged, self.busy, self.tight) = (0, 0, 0, 0, 0, 0);
        if std::mem::take(&mut self.settling) {
            return None;
        }
        self.since_up = self.since_up.map(|s| s + 1).filter(|s| *s <= RELAPSE_SECS);
        if late {
            self.calm = 0;
            if self.interval >= self.most {
                return None;
            }
            if self.since_up.take().is_some() {
                self.calm_needed = (self.calm_needed * 2).min(MOST_CALM_SECS);
            }
            self.interval += 1;
            self.settling = true;
            return Some(self.interval);
        }
        if !none {
            self.calm = 0;
            return None;
        }
        self.calm += 1;
        if self.interval > 1 && self.calm >= self.calm_needed {
            self.calm = 0;
            self.interval -= 1;
            self.since_up = Some(0);
            self.settling = true;
            return Some(self.interval);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round a period after the one before, the next a period after it.
    fn round(replaced: usize, drained: Option<Duration>) -> Round {
        let period = Duration::from_micros(16_667);
        Round { handed: 100, replaced, after: period, drained, lasted: period }
    }

    /// Runs `secs` seconds of 60 ticks with `replaced` of 100 snapshots replaced a tick;
    /// the changes, by second.
    fn run(p: &mut Pacer, secs: u32, replaced: usize) -> Vec<(u32, u8)> {
        let mut out = Vec::new();
        for s in 0..secs {
            for _ in 0..60 {
                // Replaced snapshots come with a busy fan-out here (still handing out when
                // the next round began).
                let drained = (replaced == 0).then_some(Duration::from_millis(2));
                if let Some(i) = p.on_round(round(replaced, drained)) {
                    out.push((s, i));
                }
            }
        }
        out
    }

    #[test]
    fn a_late_fan_out_lowers_the_rate_step_by_step_to_the_floor_and_calm_raises_it() {
        let mut p = Pacer::new(60, 15);
        assert_eq!(p.most, 4);
        assert!(run(&mut p, 5, 0).is_empty(), "no pacing without lateness");
        assert_eq!(
            run(&mut p, 6, 2),
            [(0, 2), (2, 3), (4, 4)],
            "one step a late second (the second after a step is not judged), to the floor"
        );
        assert_eq!(p.interval(), 4);
        assert_eq!(run(&mut p, 9, 0), [], "nine calm seconds are not enough");
        assert_eq!(run(&mut p, 1, 0), [(0, 3)]);
        assert_eq!(run(&mut p, 1, 9), [], "the second after a step up is not judged");
        // 1 % is not over 1 %.
        assert_eq!(run(&mut p, 10, 1), []);
    }

    #[test]
    fn a_step_up_that_brings_lateness_back_doubles_the_calm_asked_for() {
        let mut p = Pacer::new(60, 30);
        assert_eq!(p.most, 2);
        run(&mut p, 2, 5);
        assert_eq!(run(&mut p, 10, 0), [(9, 1)]);
        assert_eq!(run(&mut p, 2, 5), [(1, 2)], "late again at once");
        assert_eq!(run(&mut p, 20, 0), [], "the next try waits twice as long");
        assert_eq!(run(&mut p, 1, 0), [(0, 1)]);
        // Late long after the step up: not a relapse, the calm asked for stays.
        run(&mut p, 10, 0);
        run(&mut p, 1, 5);
        assert_eq!(run(&mut p, 21, 0), [(20, 1)]);
    }

    #[test]
    fn a_fan_out_without_room_for_a_step_up_keeps_the_interval() {
        let mut p = Pacer::new(60, 15);
        run(&mut p, 2, 5);
        assert_eq!(p.interval(), 2);
        // 5 ms at interval 2 would be 10 ms at 1: more than half of 16.7 ms.
        let calm = |p: &mut Pacer, drained: Option<Duration>, secs: u32| {
            let mut changes: Vec<u8> = Vec::new();
            for _ in 0..secs * 60 {
                changes.extend(p.on_round(round(0, drained)));
            }
            changes
        };
        assert_eq!(calm(&mut p, Some(Duration::from_millis(5)), 30), [0u8; 0]);
        assert_eq!(calm(&mut p, None, 30), [0u8; 0], "a fan-out still running at the next tick has no room");
        assert_eq!(calm(&mut p, Some(Duration::from_millis(4)), 10), [1], "4 ms: 8 of 16.7 at interval 1");
    }

    #[test]
    fn snapshots_replaced_that_fewer_snapshots_would_not_save_change_nothing() {
        let mut p = Pacer::new(60, 15);
        // A slow world or a stalled player actor: replaced, with a fan-out that had room.
        for _ in 0..600 {
            assert_eq!(p.on_round(round(50, Some(Duration::from_millis(1)))), None);
        }
        // A world catching up on late ticks: rounds right behind each other.
        for _ in 0..600 {
            let burst =
                Round { after: Duration::from_micros(100), lasted: Duration::from_micros(100), ..round(80, None) };
            assert_eq!(p.on_round(burst), None);
        }
        assert_eq!(p.interval(), 1);
    }

    #[test]
    fn a_pinned_interval_holds_whatever_the_figures_say() {
        let mut p = Pacer::new(60, 15);
        assert_eq!(p.pin(Some(3)), Some(3));
        assert_eq!(p.pin(Some(3)), None, "no change");
        assert_eq!(run(&mut p, 20, 50), []);
        assert_eq!(run(&mut p, 20, 0), []);
        assert_eq!(p.pin(Some(9)), Some(MAX_INTERVAL), "clamped");
        assert_eq!(p.pin(None), None, "let go where it is");
        assert_eq!(run(&mut p, 10, 0), [(9, 3)], "then calm raises it");
    }

    #[test]
    fn players_are_staggered_over_the_interval() {
        let mut p = Pacer::new(60, 15);
        assert!((0..10).all(|t| p.due(t, 7)), "every tick at interval 1");
        run(&mut p, 1, 50);
        assert_eq!(p.interval(), 2);
        for tick in 0..8u32 {
            let due = (0..1000u32).filter(|&id| p.due(tick, id)).count();
            assert_eq!(due, 500, "half the players each tick");
        }
        assert_eq!((0..10u32).filter(|&t| p.due(t, 3)).count(), 5);
        let off = Pacer::new(60, 60);
        assert_eq!(off.most, 1, "a floor at the tick rate: no pacing");
    }
}
