//! The broadcaster actor: hands each tick's shared snapshot to every player actor.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::metrics::ServerMetrics;
use super::player::PlayerMsg;
use super::world::{AppliedInputs, Audience, PlayerId};
use crate::protocol::snapshot::WorldSnapshot;
use bytes::Bytes;

/// A player's newest undelivered snapshot. The broadcaster overwrites it each tick and wakes
/// the player actor only when it was empty, so a player actor that falls behind holds one
/// snapshot — the newest — instead of a growing queue of stale ones.
pub type SnapshotSlot = Arc<Mutex<Option<(Arc<WorldSnapshot>, AppliedInputs)>>>;

/// Messages to the broadcaster.
#[derive(Debug)]
pub enum BroadcastMsg {
    /// A player to send snapshots to, through its slot.
    Add(PlayerId, ActorRef<PlayerMsg>, SnapshotSlot),
    /// A player that left.
    Remove(PlayerId),
    /// This tick's snapshot, shared (never copied per player), and each player's newest
    /// applied input.
    Snapshot(Arc<WorldSnapshot>, AppliedInputs),
    /// A message from the world to players.
    Message {
        /// Who gets it.
        to: Audience,
        /// The bytes.
        data: Bytes,
        /// Reliable (else an unreliable event).
        reliable: bool,
    },
}

/// The broadcaster actor. Each player actor encodes its own delta, so the encoding spreads
/// over every core of the runtime.
#[derive(Debug, Default)]
pub struct Broadcaster;

/// The broadcaster's state: the players and the server's figures.
#[derive(Debug)]
pub struct BroadcastState {
    players: BTreeMap<PlayerId, (ActorRef<PlayerMsg>, SnapshotSlot)>,
    metrics: Arc<ServerMetrics>,
}

impl Actor for Broadcaster {
    type Msg = BroadcastMsg;
    type State = BroadcastState;
    type Arguments = Arc<ServerMetrics>;

    async fn pre_start(
        &self,
        _: ActorRef<BroadcastMsg>,
        metrics: Arc<ServerMetrics>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(BroadcastState { players: BTreeMap::new(), metrics })
    }

    async fn handle(
        &self,
        _: ActorRef<BroadcastMsg>,
        msg: BroadcastMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let players = &mut state.players;
        match msg {
            BroadcastMsg::Add(p, r, slot) => {
                players.insert(p, (r, slot));
            }
            BroadcastMsg::Remove(p) => {
                players.remove(&p);
            }
            BroadcastMsg::Message { to, data, reliable } => {
                let send = |r: &ActorRef<PlayerMsg>| {
                    let _ = r.cast(PlayerMsg::Message(data.clone(), reliable));
                };
                match to {
                    Audience::All => players.values().for_each(|(r, _)| send(r)),
                    Audience::Player(p) => players.get(&p).into_iter().for_each(|(r, _)| send(r)),
                }
            }
            BroadcastMsg::Snapshot(snap, applied) => {
                let mut replaced = 0;
                for (r, slot) in players.values() {
                    let was_empty = match slot.lock() {
                        Ok(mut s) => s.replace((snap.clone(), applied.clone())).is_none(),
                        Err(_) => continue, // its actor panicked holding it; it is being cleaned up
                    };
                    if was_empty {
                        // A player actor that stopped is removed by its own post_stop.
                        let _ = r.cast(PlayerMsg::SnapshotReady);
                    } else {
                        replaced += 1;
                    }
                }
                state.metrics.snapshots_replaced.fetch_add(replaced, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
