//! A game's own prediction for predicted snapshots.
//!
//! A sender that predicts ([`SenderConfig::predict`](super::SenderConfig)) codes each changed
//! entity against an extrapolation of what the client already has: by default a straight
//! line (and a steady spin) through the baseline and the snapshot before it. A game whose
//! state follows rules the client knows too — a rigid-body simulation, a projectile's
//! ballistics, a door's animation — can do much better by running those rules: the residuals
//! shrink to what the rules could not foresee (contacts that went differently, inputs the
//! client has not seen). A [`Predictor`] is that hook. The sender and the receiver both call
//! it on the same client snapshots, so it costs CPU on both sides once per predicted packet.

use std::fmt;

use super::world::WorldSnapshot;

/// Predicts entities from the client's own snapshots, identically on the server and on the
/// client.
///
/// The contract: given the same inputs, `predict` returns the same words on every machine
/// that runs it (integer arithmetic, or floating point that does not depend on the platform,
/// such as a physics engine built for cross-platform determinism), and it reads nothing but
/// its arguments and constants both sides share (the game's rules, a timer derived from the
/// tick). A predictor that breaks the contract makes the client rebuild different state than
/// the server sent; nothing on the wire can detect it, so a change to a predictor is a change
/// of the game's protocol (change the netcode protocol id with it).
///
/// Entities the prediction leaves out, or puts with another kind or a different number of
/// words than the schema has, fall back to the built-in extrapolation.
pub trait Predictor: Send + Sync {
    /// The client's snapshot `baseline` (the delta's baseline) and `older`, the same client's
    /// snapshot `behind` ticks before it: the state `ahead` ticks after the baseline, as a
    /// snapshot (of tick `baseline.tick() + ahead`, built with
    /// [`SnapshotBuilder`](super::SnapshotBuilder)) of the entities it predicts. `None`
    /// predicts nothing (every entity falls back).
    fn predict(
        &self,
        baseline: &WorldSnapshot,
        older: &WorldSnapshot,
        ahead: u32,
        behind: u32,
    ) -> Option<WorldSnapshot>;
}

impl fmt::Debug for dyn Predictor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Predictor")
    }
}

/// Walks a prediction in id order: the predicted words of entity `id` of `kind`, if the
/// prediction has them with `words` words.
pub(crate) struct PredictedWalk<'a> {
    world: &'a WorldSnapshot,
    pos: usize,
}

impl<'a> PredictedWalk<'a> {
    pub(crate) fn new(world: &'a WorldSnapshot) -> Self {
        Self { world, pos: 0 }
    }

    /// The prediction's words for entity `id` (ids asked in ascending order).
    pub(crate) fn words(&mut self, id: u32, kind: u16, words: usize) -> Option<&'a [u32]> {
        let ids = self.world.ids();
        while ids.get(self.pos).is_some_and(|x| *x < id) {
            self.pos += 1;
        }
        let e = self.world.get(self.pos).filter(|e| e.id == id)?;
        (e.kind == kind && e.words.len() == words).then_some(e.words)
    }
}
