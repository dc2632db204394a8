//! One world's tick, sans-IO: the step the world actor and the
//! [`Stepper`](crate::testing::Stepper) both run. Inputs in the order they arrived (each with
//! its view, never after the newest snapshot made), then [`World::tick`], then
//! [`World::messages`], then [`World::snapshot`] built against the previous tick's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::world::{JoinInfo, Outbox, PlayerId, World};
use crate::protocol::input::ViewTime;
use crate::protocol::snapshot::{Schema, SnapshotBuilder, WorldError, WorldSnapshot};

/// One input on its way into a tick, however its shell holds it.
pub(crate) trait TickInput {
    /// Who sent it.
    fn player(&self) -> PlayerId;
    /// Its sequence number.
    fn seq(&self) -> u32;
    /// The input as the client encoded it.
    fn bytes(&self) -> &[u8];
    /// What the client was drawing when it made it.
    fn view(&self) -> Option<ViewTime>;
}

/// What one step made.
#[derive(Debug)]
pub(crate) struct Stepped {
    /// The tick's quantized world, shared by every player.
    pub snapshot: Arc<WorldSnapshot>,
    /// The messages the world sent this tick.
    pub outbox: Outbox,
}

/// A world's tick count, players, the inputs it applied and its previous snapshot: what a
/// step needs besides the [`World`] itself (which its shell owns).
#[derive(Debug)]
pub(crate) struct Simulation {
    schema: Arc<Schema>,
    tick: u32,
    dt: Duration,
    /// Per player, the sequence of the newest input applied.
    applied: BTreeMap<PlayerId, u32>,
    previous: Option<Arc<WorldSnapshot>>,
    players: u64,
}

impl Simulation {
    /// A simulation of `schema`'s kinds, `dt` a tick.
    pub fn new(schema: Arc<Schema>, dt: Duration) -> Self {
        Self { schema, tick: 0, dt, applied: BTreeMap::new(), previous: None, players: 0 }
    }

    /// A player joined.
    pub fn join<W: World>(&mut self, world: &mut W, player: PlayerId, who: &JoinInfo) {
        self.players += 1;
        world.join_with(player, who);
    }

    /// A player left.
    pub fn leave<W: World>(&mut self, world: &mut W, player: PlayerId) {
        self.players = self.players.saturating_sub(1);
        self.applied.remove(&player);
        world.leave(player);
    }

    /// Runs one tick: `inputs` in order (`applied(input, view)` is told of each as the world
    /// gets it, its view clamped to the newest snapshot made), then the world's tick,
    /// messages and snapshot.
    ///
    /// # Errors
    /// When the world's snapshot is invalid.
    pub fn step<W: World, I: TickInput>(
        &mut self,
        world: &mut W,
        inputs: impl IntoIterator<Item = I>,
        mut applied: impl FnMut(&I, Option<ViewTime>),
    ) -> Result<Stepped, WorldError> {
        self.tick += 1;
        // The newest snapshot made so far: no client can have drawn a later one.
        let latest = self.tick - 1;
        for input in inputs {
            let view = input.view().map(|v| v.not_after(latest));
            world.input_viewed(input.player(), input.bytes(), view);
            self.applied.insert(input.player(), input.seq());
            applied(&input, view);
        }
        world.tick(self.tick, self.dt);
        let mut outbox = Outbox::default();
        world.messages(&mut outbox);
        let mut b = SnapshotBuilder::new(&self.schema, self.tick);
        world.snapshot(&mut b);
        let snapshot = Arc::new(b.finish_after(self.previous.as_deref())?);
        self.previous = Some(snapshot.clone());
        Ok(Stepped { snapshot, outbox })
    }

    /// Ticks run.
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// The tick period.
    pub fn dt(&self) -> Duration {
        self.dt
    }

    /// The newest snapshot.
    pub fn latest(&self) -> Option<&Arc<WorldSnapshot>> {
        self.previous.as_ref()
    }

    /// Players joined.
    pub fn players(&self) -> u64 {
        self.players
    }

    /// The sequence of `player`'s newest applied input.
    pub fn applied_input(&self, player: PlayerId) -> Option<u32> {
        self.applied.get(&player).copied()
    }

    /// Per player, the sequence of the newest applied input (sorted by player).
    pub fn applied_inputs(&self) -> impl Iterator<Item = (PlayerId, u32)> + '_ {
        self.applied.iter().map(|(p, q)| (*p, *q))
    }
}
