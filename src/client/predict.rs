//! Client-side prediction with server reconciliation (opt-in).
//!
//! The client applies its own inputs at once to a local copy of its state; when a snapshot
//! says which of its inputs the server has applied, the prediction restarts from the server's
//! state and replays only the inputs the server has not seen yet.

use std::collections::VecDeque;
use std::ops::{Add, Mul, Sub};
use std::time::Duration;

/// The inputs sent but not yet known to be applied.
#[derive(Debug, Clone)]
pub struct Reconciler<I> {
    history: VecDeque<(u32, I)>,
    capacity: usize,
}

impl<I: Clone> Reconciler<I> {
    /// Remembers at most `capacity` unacknowledged inputs (a second's worth is plenty).
    pub fn new(capacity: usize) -> Self {
        Self { history: VecDeque::with_capacity(capacity), capacity: capacity.max(1) }
    }

    /// Records an input just sent with sequence `seq` ([`super::GameClient::input_seq`]).
    pub fn record(&mut self, seq: u32, input: I) {
        if self.history.len() == self.capacity {
            self.history.pop_front();
        }
        self.history.push_back((seq, input));
    }

    /// Inputs not yet applied by the server, as far as the client knows.
    pub fn pending(&self) -> usize {
        self.history.len()
    }

    /// The predicted state: `authoritative` (the server's state in a snapshot whose applied
    /// input was `applied`) with every later input replayed through `step`.
    pub fn reconcile<S: Clone>(
        &mut self,
        authoritative: &S,
        applied: Option<u32>,
        mut step: impl FnMut(&mut S, &I),
    ) -> S {
        if let Some(a) = applied {
            while self.history.front().is_some_and(|(s, _)| s.wrapping_sub(a) as i32 <= 0) {
                self.history.pop_front();
            }
        }
        let mut state = authoritative.clone();
        for (_, input) in &self.history {
            step(&mut state, input);
        }
        state
    }
}

/// Hides prediction corrections (Bazinga's exponential smoothing, applied to the error
/// rather than the position, so a smoothed value never lags a moving one): when a
/// reconciliation moves the predicted value, the drawn value keeps where it was and the
/// difference fades by half every `half_life`. Off (`Smoother::off`, or a zero half-life),
/// the drawn value is the prediction itself. Works for anything that adds, subtracts and
/// scales: `f32`, `glam::Vec2`, `glam::Vec3`.
///
/// ```
/// use std::time::Duration;
/// use volley::client::predict::Smoother;
///
/// let mut s = Smoother::new(Duration::from_millis(50));
/// let t = Duration::from_secs(1);
/// // The prediction said 10; the server's state, replayed, says 12.
/// s.correct(10.0_f32, 12.0);
/// assert_eq!(s.show(t, 12.0), 10.0); // drawn where it was
/// let later = s.show(t + Duration::from_millis(50), 12.0);
/// assert!((later - 11.0).abs() < 1e-4); // half the error gone after a half-life
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Smoother<T> {
    offset: T,
    half_life: Duration,
    last: Option<Duration>,
    /// Errors larger than this (in `length`) are not smoothed: a teleport snaps.
    snap_beyond: Option<f32>,
}

/// What [`Smoother`] needs of a value.
pub trait Smoothable: Copy + Default + Add<Output = Self> + Sub<Output = Self> + Mul<f32, Output = Self> {
    /// The size of a difference (for [`Smoother::snap_beyond`]).
    fn size(self) -> f32;
}

impl Smoothable for f32 {
    fn size(self) -> f32 {
        self.abs()
    }
}

impl Smoothable for glam::Vec2 {
    fn size(self) -> f32 {
        self.length()
    }
}

impl Smoothable for glam::Vec3 {
    fn size(self) -> f32 {
        self.length()
    }
}

impl<T: Smoothable> Smoother<T> {
    /// Corrections fade by half every `half_life` (zero: off).
    pub fn new(half_life: Duration) -> Self {
        Self { offset: T::default(), half_life, last: None, snap_beyond: None }
    }

    /// No smoothing: [`Smoother::show`] gives the prediction as it is.
    pub fn off() -> Self {
        Self::new(Duration::ZERO)
    }

    /// Switches smoothing on (a non-zero half-life) or off (zero) from now on.
    pub fn set_half_life(&mut self, half_life: Duration) {
        self.half_life = half_life;
        if half_life.is_zero() {
            self.offset = T::default();
        }
    }

    /// Corrections larger than `distance` snap at once (a respawn or teleport is not
    /// smoothed across the map).
    pub fn snap_beyond(mut self, distance: f32) -> Self {
        self.snap_beyond = Some(distance);
        self
    }

    /// The prediction moved from `before` to `after` for the same moment (what the client
    /// drew, and what reconciling with the server's state gives): the drawn value keeps to
    /// `before` and fades towards the prediction.
    pub fn correct(&mut self, before: T, after: T) {
        if self.half_life.is_zero() {
            return;
        }
        let offset = self.offset + (before - after);
        self.offset = if self.snap_beyond.is_some_and(|d| offset.size() > d) { T::default() } else { offset };
    }

    /// What to draw at `now` for the current prediction: `predicted` plus what is left of
    /// the corrections.
    pub fn show(&mut self, now: Duration, predicted: T) -> T {
        if self.half_life.is_zero() {
            return predicted;
        }
        if let Some(last) = self.last {
            let halves = now.saturating_sub(last).as_secs_f32() / self.half_life.as_secs_f32();
            self.offset = self.offset * 0.5_f32.powf(halves);
        }
        self.last = Some(now);
        predicted + self.offset
    }

    /// What is left of the corrections.
    pub fn offset(&self) -> T {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_fades_a_correction_without_lagging_motion_and_can_be_off() {
        let mut s = Smoother::new(Duration::from_millis(100));
        let ms = Duration::from_millis;
        // Moving at 1 unit a millisecond; a correction of 5 at t = 0.
        s.correct(glam::Vec2::ZERO, glam::Vec2::new(5.0, 0.0));
        assert_eq!(s.show(ms(0), glam::Vec2::new(5.0, 0.0)), glam::Vec2::ZERO);
        let at = s.show(ms(100), glam::Vec2::new(105.0, 0.0));
        assert!((at.x - 102.5).abs() < 1e-3, "half the error left, the motion whole: {at}");
        let at = s.show(ms(1000), glam::Vec2::new(1005.0, 0.0));
        assert!((at.x - 1005.0).abs() < 0.01, "faded: {at}");
        // A teleport snaps.
        let mut s = Smoother::new(ms(100)).snap_beyond(10.0);
        s.correct(0.0_f32, 50.0);
        assert_eq!(s.show(ms(0), 50.0), 50.0);
        // Off: the prediction as it is.
        let mut s = Smoother::off();
        s.correct(0.0_f32, 5.0);
        assert_eq!(s.show(ms(0), 5.0), 5.0);
    }

    #[test]
    fn replays_only_what_the_server_has_not_applied() {
        let mut p = Reconciler::new(8);
        for seq in 1..=5u32 {
            p.record(seq, 10 * seq as i32);
        }
        // The server applied up to 3: its state includes 10 + 20 + 30.
        let s = p.reconcile(&60, Some(3), |s, i| *s += i);
        assert_eq!(s, 60 + 40 + 50);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.reconcile(&150, Some(5), |s, i| *s += i), 150);
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn capacity_bounds_memory() {
        let mut p = Reconciler::new(3);
        for seq in 0..100u32 {
            p.record(seq, ());
        }
        assert_eq!(p.pending(), 3);
    }
}
