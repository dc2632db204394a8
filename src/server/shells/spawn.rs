//! The actor server's [`Host`]: each world an actor of its own, registered with the
//! broadcaster and watched by a task that hands its players to its fallback when it ends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorRef};

use super::mailbox::{BroadcastMsg, NewWorld, WorldMsg};
use super::world_actor::{TickClock, WorldActor, WorldArgs};
use crate::protocol::zone::ZoneCounters;
use crate::server::cores::inputs::InputQueue;
use crate::server::game::world::{Host, PlayerId, SpawnError, Tap, World, WorldId, WorldOptions, Worlds};
use crate::server::ops::metrics::ServerMetrics;

/// The actor server's side.
#[derive(Clone)]
pub(crate) struct ActorBackend {
    pub broadcaster: ActorRef<BroadcastMsg>,
    pub metrics: Arc<ServerMetrics>,
    pub clock: TickClock,
    /// Inputs one world may hold between two ticks.
    pub input_limit: usize,
    /// The running worlds' actors (for shutdown).
    pub actors: Arc<Mutex<BTreeMap<WorldId, ActorRef<WorldMsg>>>>,
    /// Record every world into this folder.
    pub record: Option<std::path::PathBuf>,
}

impl Host for ActorBackend {
    fn spawn(
        &self,
        worlds: &Worlds,
        id: WorldId,
        options: WorldOptions,
        world: Box<dyn World>,
        stride: u32,
    ) -> Result<(), SpawnError> {
        spawn_actor(self, worlds.clone(), id, options, world, stride, false).map(drop)
    }

    fn stop(&self, id: WorldId) {
        if let Some(a) = self.actors.lock().ok().and_then(|a| a.get(&id).cloned()) {
            let _ = a.cast(WorldMsg::Stop);
        }
    }

    fn move_player(&self, player: PlayerId, to: WorldId) {
        let _ = self.broadcaster.cast(BroadcastMsg::Move { by: None, player, to });
    }

    fn watch(&self, player: PlayerId, world: WorldId, on: bool) {
        let _ = self.broadcaster.cast(BroadcastMsg::Watch { by: None, player, world, on });
    }

    fn tap(&self, source: WorldId, tap: Box<dyn Tap>) -> Result<(), SpawnError> {
        // Through the broadcaster, which holds it for a world whose actor is starting.
        let tap = BroadcastMsg::Tap(source, crate::server::game::world::TapBox(tap));
        self.broadcaster.cast(tap).map_err(|_| SpawnError::NotRunning)
    }

    fn running(&self) -> Vec<WorldId> {
        self.actors.lock().map(|a| a.keys().copied().collect()).unwrap_or_default()
    }

    fn add_zone(&self, counters: Arc<ZoneCounters>) {
        self.metrics.add_zone(counters);
    }
}

/// Starts the entry world (by [`start`](crate::server::start)) on `host`; returns its actor and the
/// task to watch.
pub(crate) fn spawn_entry<W: World>(
    host: &ActorBackend,
    worlds: &Worlds,
    options: WorldOptions,
    world: W,
) -> Result<ActorStarted, SpawnError> {
    let stride = worlds.check(&options, &world.schema())?;
    let id = worlds.take_number()?;
    debug_assert_eq!(id, WorldId::ENTRY);
    worlds.set_columns(id, world.scoreboard_columns());
    spawn_actor(host, worlds.clone(), id, options, world, stride, true)?.ok_or(SpawnError::NotRunning)
}

/// The entry world's actor, once started.
pub(crate) type ActorStarted =
    tokio::sync::oneshot::Receiver<Result<(ActorRef<WorldMsg>, tokio::task::JoinHandle<()>), String>>;

/// Registers the world with the broadcaster, then starts its actor on a task. For the
/// essential (entry) world, returns where its actor and join handle arrive (the root
/// watcher watches it); any other world's end is watched here and handed to the broadcaster.
fn spawn_actor<W: World>(
    b: &ActorBackend,
    worlds: Worlds,
    id: WorldId,
    options: WorldOptions,
    world: W,
    stride: u32,
    essential: bool,
) -> Result<Option<ActorStarted>, SpawnError> {
    let inputs = InputQueue::new(b.input_limit);
    let kind = b.metrics.kind_index(&options.kind).unwrap_or(0);
    let record = options
        .record
        .clone()
        .or_else(|| b.record.clone())
        .map(|dir| (dir, options.kind.clone(), options.recording.clone()));
    let options_stop = options.stop_when_empty;
    let new = NewWorld {
        id,
        parent: worlds.me(),
        options,
        relevancy: world.relevancy(),
        inputs: inputs.clone(),
        board_columns: world.scoreboard_columns(),
    };
    b.broadcaster.cast(BroadcastMsg::AddWorld(Box::new(new))).map_err(|_| SpawnError::NotRunning)?;
    let why = Arc::new(Mutex::new(String::from("the world stopped")));
    let args = WorldArgs {
        world,
        id,
        clock: b.clock,
        stride,
        essential,
        kind,
        broadcaster: b.broadcaster.clone(),
        metrics: b.metrics.clone(),
        inputs,
        worlds,
        why: why.clone(),
        record,
        stop_when_empty: options_stop,
    };
    let (broadcaster, actors) = (b.broadcaster.clone(), b.actors.clone());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        match Actor::spawn(None, WorldActor::<W>::default(), args).await {
            Ok((actor, task)) => {
                if let Ok(mut a) = actors.lock() {
                    a.insert(id, actor.clone());
                }
                let _ = broadcaster.cast(BroadcastMsg::WorldReady(id, actor.clone()));
                if essential {
                    let _ = started_tx.send(Ok((actor, task)));
                    return;
                }
                let _ = task.await;
                if let Ok(mut a) = actors.lock() {
                    a.remove(&id);
                }
                let why = why.lock().map(|w| w.clone()).unwrap_or_default();
                let _ = broadcaster.cast(BroadcastMsg::WorldEnded(id, why));
            }
            Err(e) => {
                tracing::error!(world = %id, error = %e, "a world's actor did not start");
                let _ = broadcaster.cast(BroadcastMsg::WorldEnded(id, "the world did not start".into()));
                let _ = started_tx.send(Err(e.to_string()));
            }
        }
    });
    Ok(essential.then_some(started_rx))
}
