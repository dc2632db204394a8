//! What the actors share: the messages they send each other (to a player, to the
//! broadcaster, to a world, to the socket's receive loop), and what more than one task knows
//! of one player, with the one protocol for touching it.
//!
//! A player's state is used by three tasks: its own actor, the socket actor's receive loop
//! (which takes the player's datagrams itself when it may) and a fan-out chain (which sends
//! the player's snapshot itself when it may). Everything they share lives in one
//! [`PlayerShared`], and every rule for who may do what is a method here:
//!
//! | state | written by | rule |
//! | --- | --- | --- |
//! | the session (connection, reliability, snapshot history) | whoever holds its lock | the actor waits for the lock; the socket and the fan-out only try it, and only when nothing waits in the actor's mailbox that must go first ([`PlayerShared::try_take_datagram`], [`PlayerShared::try_send_snapshot`]) |
//! | datagrams queued for the actor | socket (up), actor (down) | at most `player_queue`; while any wait, the socket queues behind them (order kept) and the fan-out leaves the snapshot to the actor |
//! | the inbox (newest snapshot, messages and batches from the world) | broadcaster (in), actor or fan-out (out) | see [`PlayerInbox`]: newest-wins snapshot, at most [`MAX_PENDING_MESSAGES`] messages |
//! | poisoned (a panic under the lock) | the task that panicked | the session's mutex is left poisoned; the actor fails at its next message and is cleaned up as any failed player |
//! | cut off (its reliable queue overflowed) | whoever queued the message | later world messages are dropped; the actor disconnects the player |
//! | figures for `/players` | every path | relaxed counters, read once a second by the actor |
//!
//! The direct paths return a [`Direct`] outcome that the caller reacts to: `Busy` means
//! "give the work to the actor", `Tell` means "cast this to the actor".

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use ractor::{ActorId, ActorProcessingErr, ActorRef};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::batcher::{BatchTx, SnapshotBatcher};
use super::inputs::{AppliedInputs, ClientInput, InputQueue};
use super::metrics::{DeliveryPath, ReceivedKind, SentKind, ServerMetrics, count_control};
use super::session::{Incoming, PlayerSession};
use super::world::{Audience, JoinInfo, PlayerId, Relevancy, TapBox, WorldFault, WorldId, WorldOptions};
use super::worlds::{ToPlayer, ToWorld, View};
use crate::protocol::scoreboard::{BoardUpdates, ScoreRow};
use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::WorldSnapshot;
use crate::transport::udp::UdpTx;

/// World messages that may wait for one player actor.
pub(crate) const MAX_PENDING_MESSAGES: usize = 1024;

/// Messages from the world to every player, in order, shared by all player actors:
/// (bytes, reliable).
pub(crate) type MessageBatch = Arc<[(Bytes, bool)]>;

/// The newest undelivered snapshot, the inputs its tick applied, and how many message
/// batches were left before it.
pub(crate) type PendingSnapshot = (Arc<View>, AppliedInputs, u64);

// ----- the actors' messages -----

/// Messages to a player actor.
#[derive(Debug)]
pub(crate) enum PlayerMsg {
    /// A datagram from this player's address (owned: it is decrypted in place).
    Datagram(Vec<u8>, Instant),
    /// The client said goodbye in a datagram the socket actor took.
    PeerGone,
    /// The player's snapshot slot holds a new tick's world snapshot and the inputs it
    /// applied; the number is the fan-out's generation, passed back when done.
    SnapshotReady(u32),
    /// Time to check timeouts and send keep-alives.
    Heartbeat,
    /// The scoreboard's next update.
    Board(Arc<BoardUpdates>),
    /// What the directory (or the shell) tells its session: it entered a world (its client
    /// is told), or its connection ends, telling the client why (the goodbye is repeated
    /// until the client answers or a second has passed; then the actor stops).
    Told(ToPlayer),
    /// A message from the world: (bytes, reliable, how many message batches to everyone
    /// the broadcaster had left in the inbox before it).
    Message(Bytes, bool, u64),
    /// A message for the client on the framework's channel (a playback status).
    System(Bytes),
}

impl PlayerMsg {
    /// End the player's connection, telling its client why.
    pub(crate) fn close(end: SessionEnd) -> Self {
        PlayerMsg::Told(ToPlayer::Close(end))
    }
}

/// Messages to the broadcaster.
#[derive(Debug)]
pub(crate) enum BroadcastMsg {
    /// A player connected: to send snapshots to, through its slot, and who it is.
    Add(PlayerId, Arc<PlayerRef>, Box<JoinInfo>),
    /// A player that left.
    Remove(PlayerId),
    /// Holds every player's snapshot interval at this many ticks, or lets the pacer decide
    /// ([`ServerHandle::pin_snapshot_interval`](super::ServerHandle::pin_snapshot_interval)).
    PinPace(Option<u8>),
    /// A world's tick: its snapshot, shared (never copied per player), and each of its
    /// players' newest applied input.
    Snapshot(WorldId, Arc<WorldSnapshot>, AppliedInputs),
    /// A message from a world to players.
    Message {
        /// The world that sends it.
        world: WorldId,
        /// Who gets it.
        to: Audience,
        /// The bytes.
        data: Bytes,
        /// Reliable (else an unreliable event).
        reliable: bool,
    },
    /// Hand a world's frames to a tap (a spectators' world's feed), once its actor runs.
    Tap(WorldId, TapBox),
    /// A message on the framework's channel from a world (playback status).
    System {
        /// The world that sends it.
        world: WorldId,
        /// Who gets it.
        to: Audience,
        /// The bytes.
        data: Bytes,
    },
    /// A world ends one of its players' sessions, saying why (kicked, with the world's
    /// words; moved to another zone).
    Kick(WorldId, PlayerId, SessionEnd),
    /// A world's scoreboard rows, for its next update (the broadcaster adds each player's
    /// ping).
    Board(WorldId, Vec<ScoreRow>),
    /// A world is starting (its actor is on its way: what is for it waits until then).
    AddWorld(Box<NewWorld>),
    /// A world's actor runs.
    WorldReady(WorldId, ActorRef<WorldMsg>),
    /// A world stopped (why, for its players' clients): its players go to its fallback.
    WorldEnded(WorldId, String),
    /// Move a player to a world (`by`: only if it is in that world, the one asking).
    Move {
        /// The world asking, if a world asks.
        by: Option<WorldId>,
        /// The player.
        player: PlayerId,
        /// Where to.
        to: WorldId,
    },
    /// A player starts or stops watching a world (`by`: only if it is in that world).
    Watch {
        /// The world asking, if a world asks.
        by: Option<WorldId>,
        /// The player.
        player: PlayerId,
        /// The world watched.
        world: WorldId,
        /// Start (else stop).
        on: bool,
    },
    /// A world puts one of its players in a team.
    Team(WorldId, PlayerId, Option<u16>),
    /// Fails the broadcaster (supervision tests force each failure with these).
    #[doc(hidden)]
    InjectFault,
}

/// A world on its way in.
#[derive(Debug)]
pub(crate) struct NewWorld {
    /// Its number.
    pub id: WorldId,
    /// The world that started it, if one did (it hears when this one stops).
    pub parent: Option<WorldId>,
    /// How it runs.
    pub options: WorldOptions,
    /// Its game's relevancy.
    pub relevancy: Arc<dyn Relevancy>,
    /// Where its players' inputs go.
    pub inputs: InputQueue,
    /// Its scoreboard's columns (none: no scoreboard).
    pub board_columns: Vec<String>,
}

/// Messages to the world actor.
#[derive(Debug)]
pub(crate) enum WorldMsg {
    /// What the directory tells the world: a player joins or leaves, a world it started
    /// stopped.
    Told(ToWorld),
    /// Time to step (sent by the actor's timer).
    Tick,
    /// The server is shutting down: every player still joined leaves, then
    /// [`World::shutdown`] runs; the reply says it has.
    Shutdown(ractor::RpcReplyPort<()>),
    /// Stop this world: every player still joined leaves, [`World::shutdown`] runs, and the
    /// actor stops (its players go to its fallback).
    Stop,
    /// Hand every tick's frame to this tap from now on (a spectators' world's feed).
    Tap(TapBox),
}

/// Control messages to the receive loop.
#[derive(Debug)]
pub(crate) enum SocketCtl {
    /// A player actor ended: free its address, id and slot.
    Release {
        /// Its address.
        addr: SocketAddr,
        /// Its netcode client id.
        client_id: u64,
        /// Its slot.
        slot: u32,
    },
    /// A player actor failed (panicked) without cleaning up.
    Failed(ActorId),
    /// Disconnect every player (graceful shutdown).
    DisconnectAll,
    /// Stop receiving.
    Stop,
    /// Panic in the receive loop (supervision tests force each failure with these).
    InjectFault,
}

// ----- one player's shared state -----

/// A player as the socket actor and the broadcaster hold it: its actor and its shared state.
#[derive(Debug, Clone)]
pub(crate) struct PlayerRef {
    /// Its actor.
    pub actor: ActorRef<PlayerMsg>,
    /// What its actor shares with the other tasks.
    pub shared: Arc<PlayerShared>,
}

impl PlayerRef {
    /// Casts what a direct path asked for (see [`Direct::Tell`]).
    pub(crate) fn tell(&self, msg: PlayerMsg) {
        let _ = self.actor.cast(msg);
    }
}

/// How a direct path (the socket's or the fan-out's) went.
#[derive(Debug)]
pub(crate) enum Direct {
    /// Done here; the actor need not know.
    Done,
    /// Not done: the actor is busy with the session or has work queued that must go first.
    /// The caller hands the work to the actor instead.
    Busy,
    /// Done here, and the actor must be told this (the client said goodbye, the player must
    /// be disconnected, or the work panicked and the actor must wake to fail).
    Tell(PlayerMsg),
}

/// Everything about one player that more than one task touches (see the module docs).
pub(crate) struct PlayerShared {
    /// `None` only for stand-in players in tests: then every path wakes the actor.
    session: Option<Mutex<PlayerSession>>,
    /// Its slot (also its world id), address and netcode client id, fixed at connect.
    id: PlayerId,
    addr: SocketAddr,
    client_id: u64,
    /// What the broadcaster leaves for it.
    inbox: PlayerInbox,
    /// The input queue of the world it is in (`None` until the broadcaster has put it in
    /// one): set by the broadcaster, read by whoever takes its datagrams.
    route: Mutex<Option<InputQueue>>,
    /// Datagrams cast to its actor and not yet taken.
    queued: AtomicUsize,
    /// Its figures, by every path (for `/players`).
    pub figures: PlayerFigures,
}

/// One player's running figures, by every path (the actor reads them for `/players`).
#[derive(Debug)]
pub(crate) struct PlayerFigures {
    /// Bytes received that authenticated as its own, and every byte sent to it.
    pub received_bytes: AtomicU64,
    pub sent_bytes: AtomicU64,
    /// Snapshots sent, full ones among them, and the last one's baseline age in ticks
    /// (`u32::MAX`: none).
    pub snapshots: AtomicU64,
    pub full_snapshots: AtomicU64,
    pub baseline_age_ticks: AtomicU32,
    /// The RTT this player last added to the server-wide sum, in microseconds.
    pub rtt_us: AtomicU64,
    /// The bytes of its client's messages its session held, as last added to the
    /// server-wide sum.
    pub received_held: AtomicU64,
}

impl Default for PlayerFigures {
    fn default() -> Self {
        Self {
            received_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            full_snapshots: AtomicU64::new(0),
            baseline_age_ticks: AtomicU32::new(u32::MAX),
            rtt_us: AtomicU64::new(0),
            received_held: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for PlayerShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlayerShared").field("id", &self.id).field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// What taking a datagram needs besides the player.
pub(crate) struct DatagramEnv<'a> {
    /// The server socket (answers to control packets leave at once).
    pub socket: &'a UdpSocket,
    /// Server figures.
    pub metrics: &'a ServerMetrics,
}

/// What sending a snapshot needs besides the player: shared by every player.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotEnv {
    /// Where snapshot datagrams leave in batches.
    pub batcher: Arc<SnapshotBatcher>,
    /// Server figures.
    pub metrics: Arc<ServerMetrics>,
    /// The server's clock (Unix time), as the netcode layer needs.
    pub clock: fn() -> Duration,
    /// The world's tick period.
    pub tick_period: Duration,
}

impl PlayerShared {
    /// The shared state of a new session.
    pub(crate) fn new(session: PlayerSession) -> Arc<Self> {
        let c = session.connection();
        let (id, addr, client_id) = (c.client_index(), c.addr(), c.client_id());
        Arc::new(Self::with(Some(Mutex::new(session)), id, addr, client_id))
    }

    /// A stand-in with no session (tests of the broadcaster): every path wakes the actor.
    #[cfg(test)]
    pub fn without_session() -> Arc<Self> {
        Arc::new(Self::with(None, 0, SocketAddr::from(([127, 0, 0, 1], 0)), 0))
    }

    fn with(session: Option<Mutex<PlayerSession>>, id: PlayerId, addr: SocketAddr, client_id: u64) -> Self {
        Self {
            session,
            id,
            addr,
            client_id,
            inbox: PlayerInbox::default(),
            route: Mutex::new(None),
            queued: AtomicUsize::new(0),
            figures: PlayerFigures::default(),
        }
    }

    /// Its slot, which is also its id in the world.
    pub(crate) fn id(&self) -> PlayerId {
        self.id
    }

    /// From now on its inputs and messages go to `inputs` (its world's queue).
    pub(crate) fn route_to(&self, inputs: InputQueue) {
        if let Ok(mut r) = self.route.lock() {
            *r = Some(inputs);
        }
    }

    /// Its address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its netcode client id.
    pub(crate) fn client_id(&self) -> u64 {
        self.client_id
    }

    /// What the broadcaster left for it.
    pub(crate) fn inbox(&self) -> &PlayerInbox {
        &self.inbox
    }

    /// The session for the actor, waiting for whoever holds it; an error once a panic
    /// poisoned it (the actor then fails and the socket actor cleans up, as for any failure).
    pub(crate) fn session(&self) -> Result<MutexGuard<'_, PlayerSession>, ActorProcessingErr> {
        let Some(session) = &self.session else { return Err("a player without a session".into()) };
        session.lock().map_err(|_| ActorProcessingErr::from("a panic outside the player actor poisoned its session"))
    }

    /// The session if nothing holds it and nothing waits for the actor that must go first.
    fn try_session(&self) -> Option<MutexGuard<'_, PlayerSession>> {
        if self.queued.load(Ordering::Acquire) != 0 {
            return None; // a waiting datagram (an ack, an input) is taken first, by the actor
        }
        self.session.as_ref()?.try_lock().ok()
    }

    // ----- datagrams: the socket actor and the player actor -----

    /// The socket's direct path: takes one datagram here when the session is free and no
    /// datagram waits for the actor (so order is kept). `Busy`: queue it for the actor.
    pub(crate) fn try_take_datagram(
        &self,
        env: &DatagramEnv<'_>,
        now: Duration,
        datagram: &mut [u8],
        arrived: Instant,
    ) -> Direct {
        let Some(session) = self.try_session() else { return Direct::Busy };
        env.metrics.record_delivery(DeliveryPath::DatagramDirect);
        match guarded(session, |session| self.take_datagram(session, env, now, datagram, arrived)) {
            Some(false) => Direct::Done,
            Some(true) => Direct::Tell(PlayerMsg::PeerGone),
            None => {
                tracing::error!(addr = %self.addr, "taking a datagram panicked; the player is disconnected");
                Direct::Tell(PlayerMsg::Heartbeat)
            }
        }
    }

    /// Counts a datagram about to be cast to the actor; false (drop it) when `limit` wait
    /// already.
    pub(crate) fn queue_datagram(&self, limit: usize, metrics: &ServerMetrics) -> bool {
        if self.queued.load(Ordering::Relaxed) >= limit {
            return false;
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        metrics.add_player_backlog(1);
        metrics.record_delivery(DeliveryPath::DatagramQueued);
        true
    }

    /// The actor took a queued datagram out of its mailbox.
    pub(crate) fn dequeue_datagram(&self, metrics: &ServerMetrics) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        metrics.sub_player_backlog(1);
    }

    /// Forgets the datagrams its (failed) actor never took out of its mailbox.
    pub(crate) fn strand_queued(&self, metrics: &ServerMetrics) {
        metrics.sub_player_backlog(self.queued.swap(0, Ordering::AcqRel) as u64);
    }

    /// Takes one datagram from the player's address (`now` in the netcode clock, `arrived`
    /// when it came): decrypts it, processes its acks, and queues its new inputs for the
    /// world. True when the client said goodbye. Both paths run this.
    pub(crate) fn take_datagram(
        &self,
        session: &mut PlayerSession,
        env: &DatagramEnv<'_>,
        now: Duration,
        bytes: &mut [u8],
        arrived: Instant,
    ) -> bool {
        // The netcode prefix byte's low nibble is the packet type; 5 is a payload.
        let payload = bytes.first().is_some_and(|b| b & 0x0F == 5);
        let len = bytes.len() as u64;
        let mut tx = UdpTx::new(env.socket);
        let id = session.id();
        // Inputs go to the world the player is in (none before it is in one).
        let route = self.route.lock().ok();
        let inputs = route.as_ref().and_then(|r| r.as_ref());
        let round = inputs.map_or(0, InputQueue::round);
        let incoming = session.on_datagram(now, round, bytes, &mut tx);
        // Counted by what it turned out to be: only what authenticated is the player's.
        let kind = match &incoming {
            Incoming::Dropped(why) => {
                env.metrics.record_player_drop(*why);
                if why.authenticated() { ReceivedKind::Input } else { ReceivedKind::Rejected }
            }
            _ if payload => ReceivedKind::Input,
            _ => ReceivedKind::Control,
        };
        env.metrics.record_received(kind, len);
        if kind != ReceivedKind::Rejected {
            self.figures.received_bytes.fetch_add(len, Ordering::Relaxed);
        }
        let gone = match incoming {
            Incoming::Inputs(fresh) => {
                let (mut dropped, mut landed) = (0, None);
                for i in fresh.as_slice() {
                    let input = ClientInput::new(id, i.seq, i.bytes, i.view, arrived);
                    match inputs.and_then(|q| q.push(input)) {
                        Some(r) => landed = Some((r, fresh.as_slice().len() as u32)),
                        None => dropped += 1,
                    }
                }
                env.metrics.record_inputs_dropped(dropped);
                if let Some((r, n)) = landed {
                    session.inputs_landed(r, n);
                }
                false
            }
            Incoming::Disconnected => true,
            Incoming::Nothing | Incoming::Dropped(_) => false,
        };
        env.metrics.record_inputs_dropped(session.take_refused_inputs());
        // The client's messages for the world go with its inputs, bounded per tick.
        let (mut queued, mut full, mut landed) = (0, 0, None);
        let drops = session.take_messages(now, round, &mut tx, |data, reliable| {
            match inputs.and_then(|q| q.push(ClientInput::message(id, data, reliable, arrived))) {
                Some(r) => {
                    queued += 1;
                    landed = Some(r);
                }
                None => full += 1,
            }
        });
        if let Some(r) = landed {
            session.messages_landed(r, queued as u32);
        }
        drop(route);
        env.metrics.record_client_messages(queued, drops, full);
        let held = session.received_bytes_held() as u64;
        if self.figures.received_held.load(Ordering::Relaxed) != held {
            env.metrics.replace_received_held(self.figures.received_held.swap(held, Ordering::Relaxed), held);
        }
        self.count_sent(env.metrics, &tx);
        gone
    }

    /// Counts what `tx` sent to this player as control traffic.
    pub(crate) fn count_sent(&self, metrics: &ServerMetrics, tx: &UdpTx<'_>) {
        count_control(metrics, tx);
        self.figures.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
    }

    // ----- snapshots and messages: the broadcaster, the fan-out and the player actor -----

    /// The fan-out's direct path: sends the waiting snapshot here (with the batches to
    /// everyone left before it) when the session is free and nothing waits for the actor
    /// that must go first (a datagram, a message to this player alone). `Busy`: wake the
    /// actor for it.
    pub(crate) fn try_send_snapshot(&self, env: &SnapshotEnv) -> Direct {
        let Some(session) = self.try_session() else { return Direct::Busy };
        let mut batches = Vec::new();
        let taken = {
            let Ok(mut slot) = self.inbox.snapshot.lock() else { return Direct::Busy };
            // World messages handed over before this snapshot go out before it. Batches to
            // everyone are taken here; a message to this player alone is in the actor's
            // mailbox, and then the actor sends the snapshot after it. Checked under the
            // slot's lock: the broadcaster counts a message before it puts the next snapshot
            // in (under this lock), so a message not counted yet comes after this snapshot.
            let Some((_, _, upto)) = slot.as_ref() else { return Direct::Busy };
            if !self.inbox.take_batches_alone(*upto, &mut batches) {
                return Direct::Busy;
            }
            slot.take()
        };
        let Some((world, applied, _)) = taken else { return Direct::Busy };
        env.metrics.record_delivery(DeliveryPath::SnapshotDirect);
        let sent = guarded(session, |session| {
            let cut_off = batches
                .iter()
                .flat_map(|b| b.iter())
                .fold(false, |cut, (data, reliable)| session.queue_message(data.clone(), *reliable) || cut);
            self.send_snapshot(session, env, &world, &applied);
            cut_off
        });
        env.batcher.done();
        match sent {
            Some(false) => Direct::Done,
            // A reliable message could not be queued: the actor disconnects the player.
            Some(true) => Direct::Tell(PlayerMsg::close(SessionEnd::TooFarBehind)),
            None => {
                tracing::error!(addr = %self.addr, "sending a snapshot panicked; the player is disconnected");
                Direct::Tell(PlayerMsg::Heartbeat)
            }
        }
    }

    /// The actor's path: takes the waiting snapshot, if any, with the batches left before
    /// it, queues those, and sends the snapshot. True when a reliable message could not be
    /// queued (the player must be disconnected).
    pub(crate) fn send_waiting_snapshot(
        &self,
        session: &mut PlayerSession,
        env: &SnapshotEnv,
        batches: &mut Vec<MessageBatch>,
    ) -> bool {
        let Some((world, applied, upto)) = self.inbox.snapshot.lock().ok().and_then(|mut s| s.take()) else {
            return false;
        };
        let cut_off = self.queue_batches(session, upto, batches);
        env.metrics.record_delivery(DeliveryPath::SnapshotWoken);
        self.send_snapshot(session, env, &world, &applied);
        cut_off
    }

    /// Queues the batches to everyone left before the `upto`-th (reusing `batches`); true
    /// when a reliable message could not be queued.
    pub(crate) fn queue_batches(
        &self,
        session: &mut PlayerSession,
        upto: u64,
        batches: &mut Vec<MessageBatch>,
    ) -> bool {
        self.inbox.take_batches(upto, batches);
        let mut cut_off = false;
        for batch in batches.drain(..) {
            for (data, reliable) in batch.iter() {
                cut_off |= session.queue_message(data.clone(), *reliable);
            }
        }
        cut_off
    }

    /// The actor handled a message cast to it alone: queues it after the batches left
    /// before it. True when a reliable message could not be queued.
    pub(crate) fn queue_own_message(
        &self,
        session: &mut PlayerSession,
        data: Bytes,
        reliable: bool,
        upto: u64,
        batches: &mut Vec<MessageBatch>,
    ) -> bool {
        let cut_off = self.queue_batches(session, upto, batches);
        self.inbox.messages.fetch_sub(1, Ordering::Relaxed);
        session.queue_message(data, reliable) || cut_off
    }

    /// Encodes and sends this player's snapshot of `world` (with the inputs the tick
    /// applied), and counts it. Both paths run this.
    fn send_snapshot(
        &self,
        session: &mut PlayerSession,
        env: &SnapshotEnv,
        world: &Arc<View>,
        applied: &AppliedInputs,
    ) {
        let now = (env.clock)();
        let id = session.id();
        let mine = applied.newest.binary_search_by_key(&id, |(p, _)| *p).ok().map(|i| applied.newest[i].1);
        // When this snapshot carries the effect of an input the tick applied, its added
        // latency is the input's way to the world plus the tick and this send (measured by
        // the batcher when the datagram leaves), without the wait for the tick to begin.
        let effect =
            applied.fresh.binary_search_by_key(&id, |(p, _)| *p).ok().map(|i| (applied.fresh[i].1, applied.started));
        let mut tx = BatchTx::new(&env.batcher, effect);
        let sent = session.on_snapshot(now, world, mine, &mut tx);
        let m = &env.metrics;
        let held = session.take_held_for_rate();
        if held > 0 {
            m.snapshots_held.fetch_add(held, Ordering::Relaxed);
        }
        let Some(sent) = sent else { return };
        if sent.relevancy_fixed {
            let n = m.record_world_fault(WorldFault::RelevancyOrder);
            if n.is_power_of_two() {
                tracing::error!(
                    kind = WorldFault::RelevancyOrder.label(),
                    player = id,
                    times = n,
                    "the game's relevancy list was out of order, repeated or past the end; sorted, and the server goes on"
                );
            }
        }
        let f = &self.figures;
        f.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
        if tx.sent > 0 {
            // One payload packet: its snapshot section, the rest of its frame (acks,
            // messages, events), and the netcode header and tag around it.
            let snapshot = (sent.state_bytes as u64).min(tx.bytes);
            let frame = (sent.frame_bytes as u64).clamp(snapshot, tx.bytes);
            m.record_sent(SentKind::Snapshot, tx.sent, snapshot);
            m.record_sent_bytes(SentKind::Reliable, frame - snapshot);
            m.record_sent_bytes(SentKind::Overhead, tx.bytes - frame);
        }
        let age = sent.encode.baseline.map(|b| sent.tick.wrapping_sub(b));
        m.record_snapshot(sent.encode.bytes, sent.frame_bytes, age.map(|t| env.tick_period * t), sent.encode.deferred);
        if sent.encode.skipped > 0 {
            m.entities_skipped.fetch_add(u64::from(sent.encode.skipped), Ordering::Relaxed);
        }
        f.snapshots.fetch_add(1, Ordering::Relaxed);
        f.full_snapshots.fetch_add(u64::from(age.is_none()), Ordering::Relaxed);
        f.baseline_age_ticks.store(age.unwrap_or(u32::MAX), Ordering::Relaxed);
        let rtt = session.channel().link().rtt().as_micros() as u64;
        let before = f.rtt_us.swap(rtt, Ordering::Relaxed);
        m.replace_rtt(before, rtt);
    }
}

/// Runs `f` on what `guard` holds, catching a panic. The guard is dropped inside, so a panic
/// leaves the mutex poisoned (a guard dropped after `catch_unwind` returns would not poison
/// it: the thread is no longer panicking by then), and the player's actor fails at its next
/// message. `None` after a panic.
fn guarded<T, R>(guard: MutexGuard<'_, T>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut guard = guard;
        f(&mut guard)
    }))
    .ok()
}

/// What the broadcaster has handed a player that its actor (or a fan-out chain) has not yet
/// taken.
#[derive(Debug, Default)]
pub(crate) struct PlayerInbox {
    /// The newest undelivered snapshot. The broadcaster overwrites it each tick and wakes the
    /// player actor only when it was empty, so a player actor that falls behind holds one
    /// snapshot — the newest — instead of a growing queue of stale ones.
    snapshot: Mutex<Option<PendingSnapshot>>,
    /// World messages handed to the actor and not yet handled (cast, or waiting in
    /// `batches`). Past [`MAX_PENDING_MESSAGES`] events are dropped and a reliable message
    /// disconnects the player (it cannot be delivered, and must not be lost silently).
    pub messages: AtomicUsize,
    /// Batches of messages to every player, in order, waiting for the actor: it takes them
    /// when it is next woken by the broadcaster (the tick's snapshot, or a message to it
    /// alone), so they cost no cast of their own.
    batches: Mutex<Batches>,
}

/// The batches waiting in a [`PlayerInbox`], numbered in the order they were left.
#[derive(Debug, Default)]
struct Batches {
    queue: VecDeque<MessageBatch>,
    /// Batches ever left.
    left: u64,
    /// Batches ever taken.
    taken: u64,
}

impl Batches {
    /// Moves the batches left before the `upto`-th into `into`, in order.
    fn pop_until(&mut self, upto: u64, into: &mut Vec<MessageBatch>) {
        while self.taken < upto {
            let Some(batch) = self.queue.pop_front() else { break };
            self.taken += 1;
            into.push(batch);
        }
    }
}

impl PlayerInbox {
    /// Leaves this tick's snapshot (the broadcaster): `Some(true)` when the slot was empty
    /// (wake the actor), `Some(false)` when it replaced an older one, `None` when its actor
    /// panicked holding the lock (it is being cleaned up).
    pub(crate) fn deliver(&self, snapshot: Arc<View>, applied: AppliedInputs) -> Option<bool> {
        let left = self.left();
        let mut slot = self.snapshot.lock().ok()?;
        Some(slot.replace((snapshot, applied, left)).is_none())
    }

    /// Takes the waiting snapshot (stand-in actors in tests).
    #[cfg(test)]
    pub fn take_snapshot(&self) -> Option<PendingSnapshot> {
        self.snapshot.lock().ok().and_then(|mut s| s.take())
    }

    /// Leaves a batch of messages to everyone (the broadcaster).
    pub(crate) fn leave(&self, batch: MessageBatch) -> bool {
        let Ok(mut b) = self.batches.lock() else { return false };
        b.queue.push_back(batch);
        b.left += 1;
        true
    }

    /// How many batches have been left so far: a snapshot or message handed over now comes
    /// after them.
    pub(crate) fn left(&self) -> u64 {
        self.batches.lock().map_or(0, |b| b.left)
    }

    /// Moves the batches left before the `upto`-th into `into`, in order (a snapshot or
    /// message handed over after them is handled after them; later ones wait their turn).
    pub(crate) fn take_batches(&self, upto: u64, into: &mut Vec<MessageBatch>) {
        let before = into.len();
        if let Ok(mut b) = self.batches.lock() {
            b.pop_until(upto, into);
        }
        let n: usize = into[before..].iter().map(|b| b.len()).sum();
        self.messages.fetch_sub(n, Ordering::Relaxed);
    }

    /// Like [`PlayerInbox::take_batches`], but only if nothing else is waiting for the actor
    /// (no message to this player alone): false, and nothing taken, otherwise.
    pub(crate) fn take_batches_alone(&self, upto: u64, into: &mut Vec<MessageBatch>) -> bool {
        let Ok(mut b) = self.batches.lock() else { return false };
        let due = usize::try_from(upto.saturating_sub(b.taken)).unwrap_or(usize::MAX);
        let n: usize = b.queue.iter().take(due).map(|batch| batch.len()).sum();
        if self.messages.load(Ordering::Acquire) != n {
            return false;
        }
        b.pop_until(upto, into);
        self.messages.fetch_sub(n, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_returns_the_result_and_leaves_the_lock_clean() {
        let m = Mutex::new(1);
        assert_eq!(guarded(m.lock().unwrap(), |v| *v + 1), Some(2));
        assert!(!m.is_poisoned());
    }

    #[test]
    fn a_panic_under_guarded_is_caught_and_poisons_the_lock() {
        let m = Mutex::new(1);
        let r: Option<()> = guarded(m.lock().unwrap(), |_| panic!("relevancy failed"));
        assert_eq!(r, None);
        // What the player actor relies on to fail at its next message.
        assert!(m.is_poisoned());
    }

    #[test]
    fn batches_are_taken_for_a_snapshot_only_when_nothing_else_waits_for_the_actor() {
        let inbox = PlayerInbox::default();
        let batch = |n: usize| -> MessageBatch { (0..n).map(|i| (Bytes::from(vec![i as u8]), true)).collect() };
        // Two batches (3 and 2 messages) left before the snapshot, one after it.
        for n in [3, 2, 4] {
            inbox.messages.fetch_add(n, Ordering::Relaxed);
            assert!(inbox.leave(batch(n)));
        }
        // A message to this player alone is on its way to the actor: the actor goes first.
        inbox.messages.fetch_add(1, Ordering::Relaxed);
        let mut into = Vec::new();
        assert!(!inbox.take_batches_alone(2, &mut into));
        assert!(into.is_empty());
        assert_eq!(inbox.messages.load(Ordering::Relaxed), 10, "nothing taken");
        // Once the actor has handled it, the two batches before the snapshot are taken.
        inbox.messages.fetch_sub(1, Ordering::Relaxed);
        assert!(!inbox.take_batches_alone(2, &mut into), "the batch after the snapshot still counts");
        let mut only = Vec::new();
        inbox.take_batches(3, &mut only);
        assert_eq!(only.len(), 3);
        for n in [3, 2] {
            inbox.messages.fetch_add(n, Ordering::Relaxed);
            assert!(inbox.leave(batch(n)));
        }
        assert!(inbox.take_batches_alone(5, &mut into));
        assert_eq!(into.iter().map(|b| b.len()).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(inbox.messages.load(Ordering::Relaxed), 0);
        assert!(inbox.take_batches_alone(5, &mut into), "nothing left, nothing waits");
        assert_eq!(into.len(), 2);
    }
}
