//! The broadcaster actor: hands each tick's shared snapshot to every player actor.

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::player::PlayerMsg;
use super::world::{AppliedInputs, Audience, PlayerId};
use crate::protocol::snapshot::WorldSnapshot;
use bytes::Bytes;

/// Messages to the broadcaster.
#[derive(Debug)]
pub enum BroadcastMsg {
    /// A player to send snapshots to.
    Add(PlayerId, ActorRef<PlayerMsg>),
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

impl Actor for Broadcaster {
    type Msg = BroadcastMsg;
    type State = BTreeMap<PlayerId, ActorRef<PlayerMsg>>;
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<BroadcastMsg>, _: ()) -> Result<Self::State, ActorProcessingErr> {
        Ok(BTreeMap::new())
    }

    async fn handle(
        &self,
        _: ActorRef<BroadcastMsg>,
        msg: BroadcastMsg,
        players: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BroadcastMsg::Add(p, r) => {
                players.insert(p, r);
            }
            BroadcastMsg::Remove(p) => {
                players.remove(&p);
            }
            BroadcastMsg::Message { to, data, reliable } => {
                let send = |r: &ActorRef<PlayerMsg>| {
                    let _ = r.cast(PlayerMsg::Message(data.clone(), reliable));
                };
                match to {
                    Audience::All => players.values().for_each(send),
                    Audience::Player(p) => players.get(&p).into_iter().for_each(send),
                }
            }
            BroadcastMsg::Snapshot(snap, applied) => {
                for r in players.values() {
                    // A player actor that stopped is removed by its own post_stop.
                    let _ = r.cast(PlayerMsg::Snapshot(snap.clone(), applied.clone()));
                }
            }
        }
        Ok(())
    }
}
