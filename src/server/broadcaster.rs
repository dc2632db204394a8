//! The broadcaster actor: hands each tick's shared snapshot to every player actor.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::batcher::SnapshotBatcher;
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

/// What the broadcaster starts with.
#[derive(Debug)]
pub struct BroadcastArgs {
    /// The server's figures.
    pub metrics: Arc<ServerMetrics>,
    /// Where the player actors leave their snapshot datagrams (told how many were woken
    /// each tick); `None` in tests without a socket.
    pub batcher: Option<Arc<SnapshotBatcher>>,
}

/// The broadcaster's state: the players and the server's figures.
#[derive(Debug)]
pub struct BroadcastState {
    players: BTreeMap<PlayerId, (ActorRef<PlayerMsg>, SnapshotSlot)>,
    metrics: Arc<ServerMetrics>,
    batcher: Option<Arc<SnapshotBatcher>>,
    /// This tick's player actors to wake (reused tick after tick).
    to_wake: Vec<ActorRef<PlayerMsg>>,
}

impl Actor for Broadcaster {
    type Msg = BroadcastMsg;
    type State = BroadcastState;
    type Arguments = BroadcastArgs;

    async fn pre_start(
        &self,
        _: ActorRef<BroadcastMsg>,
        args: BroadcastArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(BroadcastState {
            players: BTreeMap::new(),
            metrics: args.metrics,
            batcher: args.batcher,
            to_wake: Vec::new(),
        })
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
                let to_wake = &mut state.to_wake;
                to_wake.clear();
                for (r, slot) in players.values() {
                    let was_empty = match slot.snapshot.lock() {
                        Ok(mut s) => s.replace((snap.clone(), applied.clone())).is_none(),
                        Err(_) => continue, // its actor panicked holding it; it is being cleaned up
                    };
                    if was_empty {
                        to_wake.push(r.clone());
                    } else {
                        replaced += 1;
                    }
                }
                // The batcher learns how many will answer before the first can.
                if let Some(b) = &state.batcher {
                    b.begin_tick(to_wake.len());
                }
                for r in to_wake.drain(..) {
                    // A player actor that stopped is removed by its own post_stop; it will
                    // not answer, so the batcher stops waiting for it.
                    if r.cast(PlayerMsg::SnapshotReady).is_err()
                        && let Some(b) = &state.batcher
                    {
                        b.done();
                    }
                }
                state.metrics.snapshots_replaced.fetch_add(replaced, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use tokio::sync::Notify;

    /// Stands in for a player actor held back (its first message blocks until released) and
    /// counts what reaches it, as the real one does with the inbox counter.
    struct Stuck {
        release: Arc<Notify>,
        inbox: SnapshotSlot,
        events: Arc<AtomicUsize>,
        reliable: Arc<AtomicUsize>,
        disconnected: Arc<AtomicBool>,
    }

    impl Actor for Stuck {
        type Msg = PlayerMsg;
        type State = bool;
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<PlayerMsg>, _: ()) -> Result<bool, ActorProcessingErr> {
            Ok(false)
        }

        async fn handle(
            &self,
            _: ActorRef<PlayerMsg>,
            msg: PlayerMsg,
            waited: &mut bool,
        ) -> Result<(), ActorProcessingErr> {
            if !*waited {
                *waited = true;
                self.release.notified().await;
            }
            match msg {
                PlayerMsg::Message(_, reliable) => {
                    self.inbox.messages.fetch_sub(1, Ordering::Relaxed);
                    let n = if reliable { &self.reliable } else { &self.events };
                    n.fetch_add(1, Ordering::Relaxed);
                }
                PlayerMsg::Disconnect => self.disconnected.store(true, Ordering::Relaxed),
                _ => {}
            }
            Ok(())
        }
    }

    /// Waits until `done`, ten seconds at most.
    async fn settle(done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() && start.elapsed() < std::time::Duration::from_secs(10) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_player_actor_that_falls_behind_holds_at_most_the_bound_then_is_disconnected() {
        let (broadcaster, _) =
            Actor::spawn(None, Broadcaster, BroadcastArgs { metrics: Arc::new(ServerMetrics::new()), batcher: None })
                .await
                .unwrap();
        let release = Arc::new(Notify::new());
        let inbox = SnapshotSlot::default();
        let (events, reliable) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let disconnected = Arc::new(AtomicBool::new(false));
        let stuck = Stuck {
            release: release.clone(),
            inbox: inbox.clone(),
            events: events.clone(),
            reliable: reliable.clone(),
            disconnected: disconnected.clone(),
        };
        let (player, _) = Actor::spawn(None, stuck, ()).await.unwrap();
        broadcaster.cast(BroadcastMsg::Add(7, player.clone(), inbox.clone())).unwrap();
        // The first message blocks the player actor; then the world floods it with events,
        // and then sends two reliable messages.
        let send = |reliable: bool| {
            broadcaster.cast(BroadcastMsg::Message {
                to: Audience::Player(7),
                data: Bytes::from_static(b"x"),
                reliable,
            })
        };
        for _ in 0..3000 {
            send(false).unwrap();
        }
        send(true).unwrap();
        send(true).unwrap();
        // Let the broadcaster work through its mailbox (the bound fills), then check it holds
        // before releasing the player actor.
        settle(|| {
            disconnected.load(Ordering::Relaxed) || inbox.messages.load(Ordering::Relaxed) >= MAX_PENDING_MESSAGES
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let pending = inbox.messages.load(Ordering::Relaxed);
        assert_eq!(pending, MAX_PENDING_MESSAGES, "messages waiting for the stuck player actor");
        release.notify_one();
        settle(|| disconnected.load(Ordering::Relaxed) && events.load(Ordering::Relaxed) >= MAX_PENDING_MESSAGES).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // What was queued arrived (the first message was one of them); the rest of the events
        // were dropped, and the reliable messages, which found no room, disconnected it.
        assert_eq!(events.load(Ordering::Relaxed), MAX_PENDING_MESSAGES);
        assert_eq!(reliable.load(Ordering::Relaxed), 0);
        assert!(disconnected.load(Ordering::Relaxed), "a reliable message with no room disconnects");
        assert_eq!(inbox.messages.load(Ordering::Relaxed), 0);
        player.stop(None);
        broadcaster.stop(None);
    }
}
