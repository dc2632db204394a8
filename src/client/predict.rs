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

/// Prediction of the player's own entity in one call a frame: the inputs recorded as they
/// are sent, the newest snapshot's state of the entity with every input the server had not
/// yet applied replayed on it ([`Reconciler`]), the correction faded ([`Smoother`]). When
/// the player enters another world (a match, back to the lobby) the new world's state is
/// drawn as it comes, not smoothed from the old one's, and an input the old world applied is
/// never replayed on it (the new world's first snapshots may not have applied one yet).
///
/// The server's side of the contract, for the prediction to be exact: the world applies
/// each input once, in [`World::input`](crate::server::World::input) (or `input_viewed`),
/// with the same step the client replays, and nothing else moves the entity (its tick does
/// not integrate it again). Then, at rest, the prediction is the server's state exactly;
/// while moving it is ahead of the newest snapshot by the inputs still in flight.
///
/// ```
/// use std::time::Duration;
/// use glam::Vec2;
/// use volley::client::predict::Prediction;
///
/// // One input a frame moves the player by its direction.
/// let step = |pos: &mut Vec2, dir: &Vec2| *pos += *dir * 0.05;
/// let mut me: Prediction<Vec2, Vec2> = Prediction::new(120, Duration::from_millis(80));
/// let t = Duration::from_secs(1);
/// // Frame 1: input 1 sent; the server's snapshot shows the player at the origin, no input applied.
/// me.sent(1, Vec2::X);
/// let drawn = me.reconcile_at(t, Some(0), Some(Vec2::ZERO), None, step);
/// assert_eq!(drawn, Some(Vec2::new(0.05, 0.0)));
/// // Frame 2: input 2 sent; the server has applied input 1.
/// me.sent(2, Vec2::X);
/// let drawn = me.reconcile_at(t, Some(0), Some(Vec2::new(0.05, 0.0)), Some(1), step);
/// assert_eq!(drawn, Some(Vec2::new(0.1, 0.0)));
/// ```
///
/// With a [`GameClient`](super::GameClient), one call a frame, after the frame's input went
/// out (by any driver): [`Prediction::frame`] with the game's [`Model`] reads the inputs the
/// client sent since the last frame, finds the player's own entity in the newest snapshot
/// ([`GameClient::own_entity`](super::GameClient::own_entity), across moves and zones),
/// reconciles and smooths. [`Prediction::corrections`] and [`Prediction::last_correction`]
/// show what reconciling changed (a game that smooths its own way sets a zero half-life and
/// reads them). By hand instead: `me.sent(client.input_seq(), input)` after sending, then
/// `me.update(&client, now, |snapshot| /* find your entity */, step)`.
#[derive(Debug, Clone)]
pub struct Prediction<S, I> {
    inputs: Reconciler<I>,
    capacity: usize,
    smoother: Smoother<S>,
    fresh: Smoother<S>,
    /// The world the prediction is in (the client's notice), once known.
    world: Option<u16>,
    /// The last prediction, and the inputs sent since it was made.
    last: Option<S>,
    since: Vec<I>,
    /// The newest input the server is known to have applied, in any world.
    applied: Option<u32>,
    /// The newest input sequence [`Prediction::frame`] has read from the client.
    seen: Option<u32>,
    /// Reconciliations that moved the prediction, and the last such move.
    corrections: u64,
    last_correction: S,
    tolerance: f32,
}

/// A correction up to this size ([`Smoothable::size`]) is not counted by
/// [`Prediction::corrections`] unless [`Prediction::tolerance`] says otherwise.
pub const CORRECTION_EPSILON: f32 = 1e-3;

/// What a game tells [`Prediction::frame`] about its own entity, written once: which kind it
/// is, what of it is predicted, how an input is read from the bytes the client sent, and the
/// step the world applies for each input (the same code the server runs).
///
/// ```
/// use std::time::Duration;
/// use glam::Vec2;
/// use volley::client::predict::{Model, Prediction};
/// use volley::prelude::*;
///
/// volley::replicated! {
///     /// A player.
///     #[derive(Debug, Clone, PartialEq)]
///     pub struct Avatar {
///         /// Where it is.
///         pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-50.0), Vec2::splat(50.0), 0.01),
///     }
/// }
///
/// /// Each input (two bytes: x, y) moves the avatar a step: the world applies the same.
/// struct Walk;
/// impl Model for Walk {
///     type Kind = Avatar;
///     type State = Vec2;
///     type Input = Vec2;
///     fn state(&mut self, a: &Avatar) -> Vec2 {
///         a.position
///     }
///     fn input(&self, bytes: &[u8]) -> Option<Vec2> {
///         match bytes {
///             [x, y] => Some(Vec2::new(f32::from(*x as i8), f32::from(*y as i8)) / 127.0),
///             _ => None,
///         }
///     }
///     fn step(&self, pos: &mut Vec2, dir: &Vec2) {
///         *pos += *dir * 0.1;
///     }
/// }
///
/// // Each frame, after the frame's input went out:
/// # fn frame(client: &GameClient, now: Duration, me: &mut Prediction<Vec2, Vec2>) {
/// if let Some(drawn) = me.frame(client, now, &mut Walk) {
///     // draw the own avatar at `drawn`, the others from `client.entities::<Avatar>(now)`
/// #   let _ = drawn;
/// }
/// # }
/// ```
pub trait Model {
    /// The replicated kind of the player's entity.
    type Kind: crate::protocol::snapshot::Replicate + 'static;
    /// What is predicted of it (its position, say).
    type State: Smoothable;
    /// An input, as the world reads it.
    type Input: Clone;
    /// The predicted state of the entity as the newest snapshot has it (the model may keep
    /// what else of it the step needs: a speed, a flag).
    fn state(&mut self, entity: &Self::Kind) -> Self::State;
    /// An input from the bytes the client sent; `None` is not one of the game's (skipped).
    fn input(&self, bytes: &[u8]) -> Option<Self::Input>;
    /// One input applied to the state, exactly as the world applies it.
    fn step(&self, state: &mut Self::State, input: &Self::Input);
    /// The entity's id in the client's snapshots: by default
    /// [`GameClient::own_entity`](super::GameClient::own_entity) (the player's id in its world).
    fn entity(&self, client: &super::GameClient) -> Option<crate::protocol::snapshot::EntityId> {
        client.own_entity()
    }
}

impl<S: Smoothable, I: Clone> Prediction<S, I> {
    /// Remembers at most `capacity` inputs not yet applied (a second's worth is plenty);
    /// corrections fade by half every `half_life` (zero: drawn as predicted).
    pub fn new(capacity: usize, half_life: Duration) -> Self {
        let smoother = Smoother::new(half_life);
        Self {
            inputs: Reconciler::new(capacity),
            capacity,
            smoother,
            fresh: smoother,
            world: None,
            last: None,
            since: Vec::new(),
            applied: None,
            seen: None,
            corrections: 0,
            last_correction: S::default(),
            tolerance: CORRECTION_EPSILON,
        }
    }

    /// Corrections up to `distance` are not counted ([`Prediction::corrections`]): the
    /// snapshot's rounding (a position quantized to 1 cm replays to within half of it on
    /// each axis, about 0.7 cm, of what was predicted from the snapshot before) is not a
    /// misprediction. They are still applied and smoothed.
    pub fn tolerance(mut self, distance: f32) -> Self {
        self.tolerance = distance.max(0.0);
        self
    }

    /// What to draw of the own entity at `now`, in one call a frame (after the frame's input
    /// went out): the inputs the client sent since the last call (read back from it,
    /// [`GameClient::sent_input`](super::GameClient::sent_input), decoded by `model`), the
    /// entity's state in the newest snapshot (its id from [`Model::entity`]), every input the
    /// server had not applied replayed on it with [`Model::step`], the correction smoothed.
    /// `None` until the entity has been seen.
    pub fn frame<M: Model<State = S, Input = I>>(
        &mut self,
        client: &super::GameClient,
        now: Duration,
        model: &mut M,
    ) -> Option<S> {
        let newest = client.input_seq();
        // The inputs sent since the last frame (the first frame: the newest only).
        let new = self.seen.map_or(1, |seen| newest.wrapping_sub(seen)).min(self.capacity as u32);
        for k in (0..new).rev() {
            let seq = newest.wrapping_sub(k);
            if let Some(input) = client.sent_input(seq).and_then(|b| model.input(b)) {
                self.sent(seq, input);
            }
        }
        self.seen = Some(newest);
        let world = client.world().map(|n| n.world);
        let latest = client.latest();
        let applied = latest.and_then(|l| client.applied_input(l.tick()));
        let server = latest
            .zip(model.entity(client))
            .and_then(|(l, id)| l.read::<M::Kind>(client.schema(), id))
            .map(|k| model.state(&k));
        self.reconcile_at(now, world, server, applied, |s, i| model.step(s, i))
    }

    /// Reconciliations that moved the prediction by more than its tolerance
    /// ([`Prediction::tolerance`], [`CORRECTION_EPSILON`] by default): the
    /// server's state, with the inputs it had not applied replayed, was not what the client
    /// had predicted (a misprediction, a collision the client did not know of, a lost input).
    /// Zero on a game whose step is exact.
    pub fn corrections(&self) -> u64 {
        self.corrections
    }

    /// The last such correction: the new prediction minus the old (what the smoothing hides
    /// as it fades: [`Prediction::smoothing_offset`]).
    pub fn last_correction(&self) -> S {
        self.last_correction
    }

    /// What is left of the corrections on screen now (zero once faded, or with smoothing off).
    pub fn smoothing_offset(&self) -> S {
        self.smoother.offset()
    }

    /// Corrections larger than `distance` snap at once (a respawn is not smoothed).
    pub fn snap_beyond(mut self, distance: f32) -> Self {
        self.smoother = self.smoother.snap_beyond(distance);
        self.fresh = self.smoother;
        self
    }

    /// The input just sent, with its sequence number
    /// ([`GameClient::input_seq`](super::GameClient::input_seq) right after sending it).
    pub fn sent(&mut self, seq: u32, input: I) {
        self.inputs.record(seq, input.clone());
        if self.last.is_some() && self.since.len() < self.capacity {
            self.since.push(input);
        }
    }

    /// Inputs sent that the server had not applied in the newest snapshot.
    pub fn pending(&self) -> usize {
        self.inputs.pending()
    }

    /// What to draw at `now`: [`Prediction::reconcile_at`] with the client's world, its
    /// newest snapshot (`own` reads the player's state from it: `None` when its entity is
    /// not there) and the newest input the server had applied in it.
    pub fn update(
        &mut self,
        client: &super::GameClient,
        now: Duration,
        own: impl FnOnce(&crate::protocol::snapshot::WorldSnapshot) -> Option<S>,
        step: impl FnMut(&mut S, &I),
    ) -> Option<S> {
        let world = client.world().map(|n| n.world);
        let latest = client.latest();
        let applied = latest.and_then(|l| client.applied_input(l.tick()));
        let server = latest.and_then(own);
        self.reconcile_at(now, world, server, applied, step)
    }

    /// What to draw at `now`, from the player's world, its state in the newest snapshot
    /// (`server`; `None` keeps the last prediction, or nothing before the first) and the
    /// newest input the server had applied there. A new world drops the
    /// old one's smoothing: the first state in it is drawn as it comes.
    pub fn reconcile_at(
        &mut self,
        now: Duration,
        world: Option<u16>,
        server: Option<S>,
        applied: Option<u32>,
        mut step: impl FnMut(&mut S, &I),
    ) -> Option<S> {
        if world != self.world {
            self.world = world;
            self.smoother = self.fresh;
            self.last = None;
            self.since.clear();
        }
        // Sequence numbers run on across worlds: what one world applied stays applied.
        let applied = match (applied, self.applied) {
            (Some(a), Some(b)) if (b.wrapping_sub(a) as i32) > 0 => Some(b),
            (a, b) => a.or(b),
        };
        self.applied = applied;
        let Some(server) = server else { return self.last.map(|l| self.smoother.show(now, l)) };
        let predicted = self.inputs.reconcile(&server, applied, &mut step);
        if let Some(mut before) = self.last {
            // What the last prediction becomes with this frame's inputs: any difference from
            // the new one is a correction, faded.
            for input in &self.since {
                step(&mut before, input);
            }
            if (predicted - before).size() > self.tolerance {
                self.corrections += 1;
                self.last_correction = predicted - before;
            }
            self.smoother.correct(before, predicted);
        }
        self.since.clear();
        self.last = Some(predicted);
        Some(self.smoother.show(now, predicted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prediction_moves_to_a_new_world_without_replaying_or_smoothing_the_old() {
        let step = |x: &mut f32, d: &f32| *x += *d;
        let t = Duration::from_secs(5);
        let mut p: Prediction<f32, f32> = Prediction::new(16, Duration::from_millis(100));
        for seq in 1..=3 {
            p.sent(seq, 1.0);
        }
        // World 0 applied input 2: the server's 10 plus input 3.
        assert_eq!(p.reconcile_at(t, Some(0), Some(10.0), Some(2), step), Some(11.0));
        // A correction in the same world is smoothed: drawn where it was, fading.
        p.sent(4, 1.0);
        assert_eq!(p.reconcile_at(t, Some(0), Some(20.0), Some(3), step), Some(12.0));
        // Moved to world 1, whose first snapshot has applied none of ours yet: inputs 1 to 3
        // were applied in world 0 and are not replayed; the new state is not smoothed.
        assert_eq!(p.reconcile_at(t, Some(1), Some(100.0), None, step), Some(101.0));
        assert_eq!(p.pending(), 1);
        // No state of its own in the newest snapshot: the last prediction is kept.
        assert_eq!(p.reconcile_at(t, Some(1), None, None, step), Some(101.0));
    }

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
