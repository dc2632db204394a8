//! The broadcaster actor: hands each tick's shared snapshot to every player actor.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::metrics::ServerMetrics;
use super::player::PlayerMsg;
use super::world::{AppliedInputs, Audience, PlayerId};
use crate::protocol::snapshot::WorldSnapshot;
use bytes::Bytes;

/// What the broadcaster has handed a player actor that it has not yet taken.
#[derive(Debug, Default)]
pub struct PlayerInbox {
    /// The newest undelivered snapshot. The broadcaster overwrites it each tick and wakes the
    /// player actor only when it was empty, so a player actor that falls behind holds one
    /// snapshot — the newest — instead of a growing queue of stale ones.
    pub snapshot: Mutex<Option<(Arc<WorldSnapshot>, AppliedInputs)>>,
    /// World messages cast to the actor and not yet handled. Past [`MAX_PENDING_MESSAGES`]
    /// events are dropped and a reliable message disconnects the player (it cannot be
    /// delivered, and must not be lost silently).
    pub messages: AtomicUsize,
}

/// A player's inbox, shared by the broadcaster and the player actor.
pub type SnapshotSlot = Arc<PlayerInbox>;

/// World messages that may wait in one player actor's mailbox.
pub const MAX_PENDING_MESSAGES: usize = 1024;

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
                let send = |(r, inbox): &(ActorRef<PlayerMsg>, SnapshotSlot)| {
                    let pending = inbox.messages.fetch_add(1, Ordering::Relaxed);
                    if pending < MAX_PENDING_MESSAGES {
                        let _ = r.cast(PlayerMsg::Message(data.clone(), reliable));
                        return;
                    }
                    inbox.messages.fetch_sub(1, Ordering::Relaxed);
                    if reliable && pending == MAX_PENDING_MESSAGES {
                        tracing::warn!(actor = %r.get_id(), "player too far behind on reliable messages; disconnecting");
                        let _ = r.cast(PlayerMsg::Disconnect);
                    }
                };
                match to {
                    Audience::All => players.values().for_each(send),
                    Audience::Player(p) => players.get(&p).into_iter().for_each(send),
                }
            }
            BroadcastMsg::Snapshot(snap, applied) => {
                let mut replaced = 0;
                for (r, slot) in players.values() {
                    let was_empty = match slot.snapshot.lock() {
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
