//! Lag compensation: judging a player's input against the world as that player saw it.
//!
//! A client draws the world a little in the past (its playback delay, so that it can
//! interpolate), and its input reaches the server half a round trip later still: by then a
//! target it aimed at squarely has moved on. Each input carries the view the client drew when
//! it was made ([`ViewTime`]: two snapshot ticks and the blend between them). A world keeps a
//! short [`History`] of what it needs to judge a shot (positions, hitboxes), one entry a
//! tick, and tests the shot against [`History::rewind`] of the input's view: the shooter hits
//! what it saw ("favour the shooter", as Source and Overwatch do).
//!
//! The history's length bounds how far back anyone can shoot: a view older than the oldest
//! tick kept is judged at that tick (and flagged [`Rewound::clamped`]), whatever the client
//! claims. The world actor already refuses views after the newest snapshot it made. Keep
//! the history a little longer than the worst round trip you serve plus the playback delay
//! (at 60 Hz, 32 ticks are 533 ms).
//!
//! Sans-IO like the protocol core: nothing here reads a clock or touches a socket.

use crate::protocol::input::ViewTime;

/// The most ticks a history keeps.
pub const MAX_HISTORY_TICKS: usize = 1024;

/// The last few ticks of whatever a world needs to judge inputs against the past, one
/// entry a tick, in a ring (no allocation once full: [`History::record`] hands back the
/// entry that fell out, so its buffers can be reused).
#[derive(Debug, Clone)]
pub struct History<T> {
    ring: Vec<Option<(u32, T)>>,
    newest: Option<u32>,
}

/// The state a view saw: `from` blended towards `to` by `alpha` (interpolate what you
/// compare; `from` and `to` are the same entry when the view fell on one tick).
#[derive(Debug, Clone, Copy)]
pub struct Rewound<'a, T> {
    /// The entry of the view's older tick.
    pub from: &'a T,
    /// The entry of the view's newer tick.
    pub to: &'a T,
    /// How far from `from` towards `to`, 0 to 1.
    pub alpha: f32,
    /// The ticks recorded for `from` and `to`.
    pub ticks: (u32, u32),
    /// The view lay outside the history (older than its oldest tick, or newer than its
    /// newest) and was judged at its edge.
    pub clamped: bool,
}

impl<T> History<T> {
    /// A history of the last `ticks` ticks (1 to [`MAX_HISTORY_TICKS`]; clamped).
    pub fn new(ticks: usize) -> Self {
        let n = ticks.clamp(1, MAX_HISTORY_TICKS);
        Self { ring: (0..n).map(|_| None).collect(), newest: None }
    }

    /// How many ticks it keeps.
    pub fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// The newest tick recorded.
    pub fn newest(&self) -> Option<u32> {
        self.newest
    }

    /// The oldest tick still held.
    pub fn oldest(&self) -> Option<u32> {
        let newest = self.newest?;
        let first = newest.saturating_sub(self.ring.len() as u32 - 1);
        (first..=newest).find(|t| self.get(*t).is_some())
    }

    /// Records the state of `tick` (normally every tick, after the simulation stepped).
    /// Returns the entry it displaced, if any, for its allocation to be reused; a tick too
    /// old to keep is handed straight back.
    pub fn record(&mut self, tick: u32, state: T) -> Option<T> {
        let cap = self.ring.len() as u32;
        if self.newest.is_some_and(|n| tick < n.saturating_sub(cap - 1)) {
            return Some(state);
        }
        self.newest = Some(self.newest.map_or(tick, |n| n.max(tick)));
        let slot = &mut self.ring[(tick % cap) as usize];
        slot.replace((tick, state)).map(|(_, s)| s)
    }

    /// The entry recorded for `tick`, while it is kept.
    pub fn get(&self, tick: u32) -> Option<&T> {
        let newest = self.newest?;
        let cap = self.ring.len() as u32;
        if tick > newest || newest - tick >= cap {
            return None;
        }
        match &self.ring[(tick % cap) as usize] {
            Some((t, s)) if *t == tick => Some(s),
            _ => None,
        }
    }

    /// What `view` saw: the entries of its two ticks and its blend when both are held;
    /// otherwise the held ticks nearest around its time within the history (clamped to the
    /// oldest or newest). No view means the present (the newest entry). `None` only while
    /// nothing is recorded.
    pub fn rewind(&self, view: Option<ViewTime>) -> Option<Rewound<'_, T>> {
        let newest = self.newest?;
        let Some(view) = view else {
            let s = self.get(newest)?;
            return Some(Rewound { from: s, to: s, alpha: 0.0, ticks: (newest, newest), clamped: false });
        };
        if let (Some(from), Some(to)) = (self.get(view.from()), self.get(view.to())) {
            let ticks = (view.from(), view.to());
            return Some(Rewound { from, to, alpha: view.alpha(), ticks, clamped: false });
        }
        let oldest = self.oldest()?;
        let wanted = view.ticks();
        let t = wanted.clamp(f64::from(oldest), f64::from(newest));
        let clamped = t != wanted;
        // `t` lies within [oldest, newest], both held: each search finds a tick.
        let below = t.floor() as u32;
        let (lo, from) = (oldest..=below).rev().find_map(|k| Some((k, self.get(k)?)))?;
        let (hi, to) = ((t.ceil() as u32).max(lo)..=newest).find_map(|k| Some((k, self.get(k)?)))?;
        let alpha = if hi > lo { ((t - f64::from(lo)) / f64::from(hi - lo)).clamp(0.0, 1.0) as f32 } else { 0.0 };
        Some(Rewound { from, to, alpha, ticks: (lo, hi), clamped })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn filled(cap: usize, ticks: impl IntoIterator<Item = u32>) -> History<u32> {
        let mut h = History::new(cap);
        for t in ticks {
            h.record(t, t * 10);
        }
        h
    }

    #[test]
    fn a_view_of_two_held_ticks_gets_both_and_its_blend() {
        let h = filled(16, 0..100);
        let r = h.rewind(Some(ViewTime::between(90, 91, 0.5))).unwrap();
        assert_eq!((*r.from, *r.to, r.ticks, r.clamped), (900, 910, (90, 91), false));
        assert!((r.alpha - 0.5).abs() < 0.01);
        let r = h.rewind(Some(ViewTime::at(97))).unwrap();
        assert_eq!((*r.from, *r.to, r.alpha), (970, 970, 0.0));
        let now = h.rewind(None).unwrap();
        assert_eq!((*now.from, now.ticks), (990, (99, 99)), "no view: the present");
    }

    #[test]
    fn nobody_shoots_further_back_than_the_history() {
        let h = filled(16, 0..100);
        assert_eq!((h.oldest(), h.newest()), (Some(84), Some(99)));
        let r = h.rewind(Some(ViewTime::at(10))).unwrap();
        assert_eq!((*r.from, *r.to, r.clamped), (840, 840, true), "judged at the oldest tick kept");
        let r = h.rewind(Some(ViewTime::between(83, 85, 0.25))).unwrap();
        assert_eq!((r.ticks, r.clamped), ((84, 84), true), "83.5 is before the oldest, 84");
        let r = h.rewind(Some(ViewTime::between(99, 101, 0.5))).unwrap();
        assert_eq!((r.ticks, r.clamped), ((99, 99), true), "nor after the newest");
    }

    #[test]
    fn a_tick_missing_from_the_history_is_bridged_by_its_neighbours() {
        let h = filled(32, (0..100).filter(|t| t % 2 == 0));
        let r = h.rewind(Some(ViewTime::between(90, 91, 0.5))).unwrap();
        assert_eq!((r.ticks, r.clamped), ((90, 92), false));
        assert!((r.alpha - 0.25).abs() < 0.01, "90.5 is a quarter of the way to 92: {}", r.alpha);
    }

    #[test]
    fn the_displaced_entry_comes_back_for_reuse() {
        let mut h = History::new(4);
        for t in 0..4 {
            assert_eq!(h.record(t, vec![t]), None);
        }
        assert_eq!(h.record(4, vec![4]), Some(vec![0]), "tick 0 fell out");
        assert_eq!(h.record(0, vec![9]), Some(vec![9]), "too old to keep: handed back");
        assert_eq!(h.get(0), None);
        assert_eq!(h.get(1), Some(&vec![1]));
        assert!(History::<u8>::new(0).capacity() == 1 && History::<u8>::new(1 << 20).capacity() == MAX_HISTORY_TICKS);
    }

    #[test]
    fn nothing_recorded_means_nothing_to_rewind() {
        let h: History<u32> = History::new(8);
        assert!(h.rewind(None).is_none() && h.rewind(Some(ViewTime::at(3))).is_none());
        assert_eq!(h.oldest(), None);
    }

    proptest! {
        #[test]
        fn any_view_is_judged_between_held_ticks_in_order(
            cap in 1usize..40,
            steps in proptest::collection::vec(1u32..4, 1..120),
            from in 0u32..400,
            span in 0u32..5,
            alpha in 0.0f32..=1.0,
        ) {
            let mut h = History::new(cap);
            let mut t = 0;
            for s in steps {
                t += s;
                h.record(t, t);
            }
            let r = h.rewind(Some(ViewTime::between(from, from + span, alpha))).unwrap();
            let (oldest, newest) = (h.oldest().unwrap(), h.newest().unwrap());
            prop_assert!(oldest <= r.ticks.0 && r.ticks.0 <= r.ticks.1 && r.ticks.1 <= newest);
            prop_assert_eq!((*r.from, *r.to), r.ticks, "the entries are those of the ticks named");
            prop_assert!((0.0..=1.0).contains(&r.alpha));
            // The time judged is the view's, unless the view lies outside the history.
            let judged = f64::from(r.ticks.0) + f64::from(r.alpha) * f64::from(r.ticks.1 - r.ticks.0);
            let wanted = ViewTime::between(from, from + span, alpha).ticks();
            if r.clamped {
                prop_assert!(wanted < f64::from(oldest) || wanted > f64::from(newest));
            } else {
                prop_assert!((judged - wanted).abs() < 0.01, "judged {} for {}", judged, wanted);
            }
        }
    }
}
