//! What the actors share: the messages they send each other (to a player, to the
//! broadcaster, to a world, to the socket's receive loop), and each player's [`Mailbox`]:
//! what the other tasks leave for its actor without waking it.
//!
//! A player's session (its netcode send half, reliability channels, snapshot history and
//! merged delta) is its actor's alone: no other task holds it, and nothing here is a lock on
//! it. What other tasks know of a player, and how they reach it:
//!
//! | what | written by | read by | rule |
//! | --- | --- | --- | --- |
//! | payloads (acks, the client's messages, control) | socket, after the player's [`Inlet`](crate::server::cores::inlet::Inlet) read its inputs | actor, first thing at every wake-up | at most `player_queue` wait (more are dropped and counted); the socket casts a wake-up only for a control message, the client's messages, or half the room used, at most one in flight |
//! | when the client was last heard | socket | actor (timeouts) | a relaxed atomic |
//! | closing | actor | socket | once set, the client's inputs no longer reach the world |
//! | the inbox (newest snapshot, messages and batches from the world) | broadcaster | actor | see [`PlayerInbox`]: newest-wins snapshot, at most [`MAX_PENDING_MESSAGES`] messages; the fan-out wakes the actor at most once a tick for its snapshot |
//! | the route (its world's input queue) | broadcaster | socket, actor | read again only when its version changes |
//! | figures for `/players` | socket, actor | actor, broadcaster (pings) | relaxed counters |

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ractor::{ActorId, ActorRef};
use tokio::time::Instant;

use super::batcher::{BatchTx, SnapshotBatcher};
use crate::protocol::netcode::server::SendHalf;
use crate::protocol::scoreboard::BoardUpdates;
use crate::protocol::session::SessionEnd;
use crate::server::cores::directory::{ToPlayer, ToWorld, View};
use crate::server::cores::inputs::{AppliedInputs, InputQueue};
use crate::server::cores::session::PlayerSession;
use crate::server::game::world::{JoinInfo, PlayerId, Relevancy, TapBox, WorldFault, WorldId, WorldOptions};
use crate::server::ops::metrics::{SentKind, ServerMetrics, count_control};
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
    /// Payloads wait in the mailbox that should be read now (a control message, the client's
    /// messages for the world, or half the room used).
    Frames,
    /// The client said goodbye in a datagram the socket actor took.
    PeerGone,
    /// The player's snapshot slot holds a new tick's world snapshot and the inputs it
    /// applied; the number is the fan-out's generation, passed back when done.
    SnapshotReady(u32),
    /// Time to check timeouts and send keep-alives: from the socket actor, for a player
    /// actor that no snapshot woke for a while (the heartbeat's work runs at the first
    /// wake-up 100 ms after the last, whatever woke it).
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
    /// A message for the client on the framework's channel (a playback status, a resume
    /// ticket).
    System(Bytes),
    /// The client resumed the session on a new connection (its resume ticket): the session
    /// sends through this send half from now on.
    Rebind(Box<SendHalf>),
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
    /// A player's client went silent within the resume grace (true), or is back.
    Presence(PlayerId, bool),
    /// Holds every player's snapshot interval at this many ticks, or lets the pacer decide
    /// ([`ServerHandle::pin_snapshot_interval`](crate::server::ServerHandle::pin_snapshot_interval)).
    PinPace(Option<u8>),
    /// What a world's tick asked, in the tick's order ([`Command`]: its teams, messages,
    /// scoreboard, kicks, snapshot, moves and watches), with the inputs the tick applied;
    /// carried out by the [`Executor`](crate::server::cores::executor::Executor), as in the stepper. Its
    /// snapshot is shared (never copied per player).
    ///
    /// [`Command`]: crate::server::cores::simulation::Command
    Tick(WorldId, Vec<crate::server::cores::simulation::Command>, AppliedInputs),
    /// Hand a world's frames to a tap (a spectators' world's feed), once its actor runs.
    Tap(WorldId, TapBox),
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
    /// Fails the broadcaster (supervision tests force each failure with these).
    #[cfg(feature = "test-hooks")]
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
        /// The actor.
        actor: ActorId,
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
    #[cfg(feature = "test-hooks")]
    InjectFault,
}

// ----- one player's mailbox -----

/// A player as the socket actor and the broadcaster hold it: its actor and its mailbox.
#[derive(Debug, Clone)]
pub(crate) struct PlayerRef {
    /// Its actor.
    pub actor: ActorRef<PlayerMsg>,
    /// What the other tasks leave for it.
    pub mailbox: Arc<Mailbox>,
}

impl PlayerRef {
    /// Casts `msg` to the player actor.
    pub(crate) fn tell(&self, msg: PlayerMsg) {
        let _ = self.actor.cast(msg);
    }
}

/// What the other tasks leave for one player actor besides its ractor mailbox, none of it
/// the session: the session is the actor's alone (see the module docs).
pub(crate) struct Mailbox {
    /// Its slot (also its world id) and netcode client id, fixed at connect, and its address
    /// (a resumed session's moves with its client).
    id: PlayerId,
    addr: Mutex<SocketAddr>,
    client_id: u64,
    /// Payloads left for the session, and whether a wake-up for them is on its way.
    post: Post,
    /// What the socket writes for every datagram (its own cache line: the actor reads it
    /// seldom).
    heard: Heard,
    /// The session is closing: what its client sends no longer reaches the world.
    closing: AtomicBool,
    /// When its actor last ran its heartbeat (netcode clock, microseconds), and whether the
    /// socket has asked it for one since.
    beat_us: AtomicU64,
    beat_asked: AtomicBool,
    /// What the broadcaster leaves for it.
    inbox: PlayerInbox,
    /// The input queue of the world it is in (`None` until the broadcaster has put it in
    /// one), and how many times it changed: set by the broadcaster, read (cached) by the
    /// socket and the actor.
    route: Mutex<Option<InputQueue>>,
    route_version: AtomicU64,
    /// Its figures, by every task (for `/players`).
    pub figures: PlayerFigures,
}

/// Payloads its inlet read and left for the session (the socket in, the actor out), and
/// whether a wake-up for them is on its way to the actor (the socket casts at most one).
#[repr(align(64))]
#[derive(Debug, Default)]
struct Post {
    frames: Mutex<Frames>,
    wake: AtomicBool,
}

/// When the client was last heard (netcode clock, microseconds; at first, when it
/// connected), whether it has been since it connected, and the bytes it sent that
/// authenticated: written by the socket for every datagram.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Heard {
    at_us: AtomicU64,
    confirmed: AtomicBool,
    bytes: AtomicU64,
}

/// Payloads left for a session, in order, in one buffer (reused: leaving one allocates
/// nothing once the buffer has grown).
#[derive(Debug, Default)]
pub(crate) struct Frames {
    /// Some payload carries messages for the world or a control message (the session's
    /// messages are taken only then).
    messages: bool,
    bytes: Vec<u8>,
    /// Each payload's arrival (netcode clock and monotonic) and where it ends in `bytes`.
    list: Vec<(Duration, Instant, usize)>,
}

impl Frames {
    /// Payloads waiting.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Leaves one payload that arrived `at` (netcode clock) and `arrived`, at most `limit`
    /// waiting: `Queued(true)` when the session should read them now (`wake`: the payload
    /// asks for it; or half the room is used), `Full` (dropped) past the limit.
    pub(crate) fn leave(&mut self, at: Duration, arrived: Instant, frame: &[u8], limit: usize, wake: bool) -> Left {
        if self.list.len() >= limit {
            return Left::Full;
        }
        self.bytes.extend_from_slice(frame);
        self.list.push((at, arrived, self.bytes.len()));
        self.messages |= wake;
        Left::Queued(wake || self.list.len() * 2 >= limit)
    }

    /// Has the session read every payload, in order (see [`PlayerSession::on_frame`]), and
    /// empties the buffer; counts what it dropped. Returns when the last one arrived, if any
    /// did and some carried messages or a control message (the session's messages are then
    /// to be taken). Every shell reads its players' payloads through this.
    pub(crate) fn read_into(
        &mut self,
        session: &mut PlayerSession,
        now: Duration,
        tx: &mut impl crate::protocol::netcode::Transmit,
        mut dropped: impl FnMut(crate::server::cores::session::PacketDrop),
    ) -> Option<Instant> {
        let messages = std::mem::take(&mut self.messages);
        let mut start = 0;
        let mut last = None;
        for &(at, arrived, end) in &self.list {
            if let Err(why) = session.on_frame(at, now, &self.bytes[start..end], tx) {
                dropped(why);
            }
            start = end;
            last = Some(arrived);
        }
        self.bytes.clear();
        self.list.clear();
        last.filter(|_| messages)
    }
}

/// A time on the netcode clock in microseconds.
fn micros(at: Duration) -> u64 {
    u64::try_from(at.as_micros()).unwrap_or(u64::MAX)
}

/// How leaving a payload went ([`Mailbox::leave`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// Left; `true`: cast the actor a wake-up for it (none is on its way yet).
    Queued(bool),
    /// Dropped: `limit` payloads wait already.
    Full,
}

/// One player's running figures, by every path (the actor reads them for `/players`).
#[derive(Debug)]
pub(crate) struct PlayerFigures {
    /// Every byte sent to it.
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
    /// The server tick whose snapshot last woke its actor (the fan-out counts a second
    /// wake-up in one tick).
    pub woken_tick: AtomicU32,
}

impl Default for PlayerFigures {
    fn default() -> Self {
        Self {
            sent_bytes: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            full_snapshots: AtomicU64::new(0),
            baseline_age_ticks: AtomicU32::new(u32::MAX),
            rtt_us: AtomicU64::new(0),
            received_held: AtomicU64::new(0),
            woken_tick: AtomicU32::new(u32::MAX),
        }
    }
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox").field("id", &self.id).field("addr", &self.addr()).finish_non_exhaustive()
    }
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

/// A cached copy of the input queue a [`Mailbox`] routes to: read again only when the
/// broadcaster changed it.
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    version: u64,
    queue: Option<InputQueue>,
}

impl RouteCache {
    /// The queue of the world the player is in, if it is in one.
    pub(crate) fn get(&mut self, mailbox: &Mailbox) -> Option<&InputQueue> {
        let v = mailbox.route_version.load(Ordering::Acquire);
        if v != self.version {
            self.version = v;
            self.queue = mailbox.route.lock().ok().and_then(|r| r.clone());
        }
        self.queue.as_ref()
    }
}

impl Mailbox {
    /// The mailbox of player `id` at `addr`, connected at `at` (netcode clock).
    pub(crate) fn new(id: PlayerId, addr: SocketAddr, client_id: u64, at: Duration) -> Arc<Self> {
        Arc::new(Self {
            id,
            addr: Mutex::new(addr),
            client_id,
            post: Post::default(),
            heard: Heard { at_us: AtomicU64::new(micros(at)), ..Heard::default() },
            beat_us: AtomicU64::new(micros(at)),
            beat_asked: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            inbox: PlayerInbox::default(),
            route: Mutex::new(None),
            route_version: AtomicU64::new(0),
            figures: PlayerFigures::default(),
        })
    }

    /// A stand-in (tests of the broadcaster).
    #[cfg(test)]
    pub fn stand_in() -> Arc<Self> {
        Self::new(0, SocketAddr::from(([127, 0, 0, 1], 0)), 0, Duration::ZERO)
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
        self.route_version.fetch_add(1, Ordering::Release);
    }

    /// Its address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr.lock().map_or_else(|e| *e.into_inner(), |a| *a)
    }

    /// Its client resumed the session on a new connection from `addr`: not confirmed on it
    /// until heard there (so payloads go after a keep-alive until then).
    pub(crate) fn rebound(&self, addr: SocketAddr, now: Duration) {
        if let Ok(mut a) = self.addr.lock() {
            *a = addr;
        }
        // Its handshake was heard just now (as the new receive half says): a heartbeat before
        // its next packet must not judge the new connection by the old one's silence.
        self.heard.at_us.store(micros(now), Ordering::Relaxed);
        self.heard.confirmed.store(false, Ordering::Relaxed);
    }

    /// Its netcode client id.
    pub(crate) fn client_id(&self) -> u64 {
        self.client_id
    }

    /// What the broadcaster left for it.
    pub(crate) fn inbox(&self) -> &PlayerInbox {
        &self.inbox
    }

    /// The socket heard the client at `at` (netcode clock), `bytes` that authenticated: it
    /// has confirmed the connection.
    pub(crate) fn heard(&self, at: Duration, bytes: u64) {
        let h = &self.heard;
        h.at_us.store(micros(at), Ordering::Relaxed);
        h.bytes.fetch_add(bytes, Ordering::Relaxed);
        if !h.confirmed.load(Ordering::Relaxed) {
            h.confirmed.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the client has been heard since it connected (it confirmed the connection).
    pub(crate) fn confirmed(&self) -> bool {
        self.heard.confirmed.load(Ordering::Relaxed)
    }

    /// The bytes received from the client that authenticated.
    pub(crate) fn received_bytes(&self) -> u64 {
        self.heard.bytes.load(Ordering::Relaxed)
    }

    /// When the socket last heard the client (zero: never since connect).
    pub(crate) fn last_heard(&self) -> Duration {
        Duration::from_micros(self.heard.at_us.load(Ordering::Relaxed))
    }

    /// Its actor ran its heartbeat at `at` (netcode clock).
    pub(crate) fn beaten(&self, at: Duration) {
        self.beat_us.store(micros(at), Ordering::Relaxed);
        if self.beat_asked.load(Ordering::Relaxed) {
            self.beat_asked.store(false, Ordering::Relaxed);
        }
    }

    /// Whether its actor should be woken for its heartbeat at `now` (none for `late` since
    /// the last, and none asked for since): true once until it runs.
    pub(crate) fn wants_beat(&self, now: Duration, late: Duration) -> bool {
        let last = Duration::from_micros(self.beat_us.load(Ordering::Relaxed));
        now.saturating_sub(last) >= late && !self.beat_asked.swap(true, Ordering::Relaxed)
    }

    /// The session is closing: the socket stops handing what its client sends to the world.
    pub(crate) fn close_inputs(&self) {
        if !self.closing.load(Ordering::Relaxed) {
            self.closing.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the client's inputs still go to the world.
    pub(crate) fn inputs_open(&self) -> bool {
        !self.closing.load(Ordering::Relaxed)
    }

    /// Leaves a payload for the session (the socket), at most `limit` waiting.
    pub(crate) fn leave(&self, at: Duration, arrived: Instant, frame: &[u8], limit: usize, wake: bool) -> Left {
        let left = match self.post.frames.lock() {
            Ok(mut f) => f.leave(at, arrived, frame, limit, wake),
            Err(_) => Left::Full,
        };
        match left {
            // One wake-up on its way is enough.
            Left::Queued(true) => Left::Queued(!self.post.wake.swap(true, Ordering::AcqRel)),
            other => other,
        }
    }

    /// Takes the waiting payloads (the actor), leaving `spare` (emptied by the last read)
    /// in their place; how many it took.
    pub(crate) fn take_frames(&self, spare: &mut Frames) -> usize {
        if self.post.wake.load(Ordering::Relaxed) {
            self.post.wake.store(false, Ordering::Release);
        }
        if let Ok(mut f) = self.post.frames.lock() {
            std::mem::swap(&mut *f, spare);
        }
        spare.len()
    }

    /// How many payloads wait for the actor (for the backlog gauge).
    pub(crate) fn waiting(&self) -> usize {
        self.post.frames.lock().map_or(0, |f| f.len())
    }

    /// Forgets the payloads its actor never read (it stopped or failed): how many.
    pub(crate) fn strand_frames(&self) -> usize {
        let mut gone = Frames::default();
        self.take_frames(&mut gone)
    }

    /// Counts what `tx` sent to this player as control traffic.
    pub(crate) fn count_sent(&self, metrics: &ServerMetrics, tx: &UdpTx<'_>) {
        count_control(metrics, tx);
        self.figures.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
    }

    /// The actor's snapshot: takes the waiting one, if any, with the batches left before
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
    /// applied), and counts it.
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

/// What the broadcaster has handed a player that its actor has not yet taken.
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
    /// The batches' counts of left and taken, readable without the lock (the broadcaster
    /// alone leaves, the actor alone takes).
    left: AtomicU64,
    taken: AtomicU64,
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
        self.left.store(b.left, Ordering::Release);
        true
    }

    /// How many batches have been left so far: a snapshot or message handed over now comes
    /// after them (only the broadcaster leaves them, so it reads its own count).
    pub(crate) fn left(&self) -> u64 {
        self.left.load(Ordering::Acquire)
    }

    /// Moves the batches left before the `upto`-th into `into`, in order (a snapshot or
    /// message handed over after them is handled after them; later ones wait their turn).
    pub(crate) fn take_batches(&self, upto: u64, into: &mut Vec<MessageBatch>) {
        // Only the actor takes them: nothing left before `upto` that it has not taken, no lock.
        if upto <= self.taken.load(Ordering::Relaxed) {
            return;
        }
        let before = into.len();
        if let Ok(mut b) = self.batches.lock() {
            b.pop_until(upto, into);
            self.taken.store(b.taken, Ordering::Relaxed);
        }
        let n: usize = into[before..].iter().map(|b| b.len()).sum();
        self.messages.fetch_sub(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_taken_in_order_up_to_the_snapshot_they_came_before() {
        let inbox = PlayerInbox::default();
        let batch = |n: usize| -> MessageBatch { (0..n).map(|i| (Bytes::from(vec![i as u8]), true)).collect() };
        for n in [3, 2, 4] {
            inbox.messages.fetch_add(n, Ordering::Relaxed);
            assert!(inbox.leave(batch(n)));
        }
        let mut into = Vec::new();
        inbox.take_batches(2, &mut into);
        assert_eq!(into.iter().map(|b| b.len()).collect::<Vec<_>>(), [3, 2], "the two left before the snapshot");
        assert_eq!(inbox.messages.load(Ordering::Relaxed), 4, "the later batch still counts");
        inbox.take_batches(3, &mut into);
        assert_eq!(into.len(), 3);
        assert_eq!(inbox.messages.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_mailbox_wakes_its_actor_once_for_what_must_be_read_now_and_holds_at_most_its_room() {
        let m = Mailbox::stand_in();
        let at = Instant::now();
        let t = Duration::from_millis;
        // Acknowledgements wait for the actor's tick.
        assert_eq!(m.leave(t(1), at, b"ack", 8, false), Left::Queued(false));
        // A message for the world wakes it, once while the wake-up is on its way.
        assert_eq!(m.leave(t(2), at, b"msg", 8, true), Left::Queued(true));
        assert_eq!(m.leave(t(3), at, b"msg2", 8, true), Left::Queued(false));
        // Half the room used asks for a wake-up too (one is on its way already).
        assert_eq!(m.leave(t(4), at, b"ack2", 8, false), Left::Queued(false));
        let mut frames = Frames::default();
        assert_eq!(m.take_frames(&mut frames), 4);
        assert_eq!(frames.bytes, b"ackmsgmsg2ack2");
        assert_eq!(frames.list.iter().map(|f| f.0).collect::<Vec<_>>(), [t(1), t(2), t(3), t(4)], "in order");
        // Taken: the next payload that must be read now wakes it again.
        assert_eq!(m.leave(t(5), at, b"x", 8, true), Left::Queued(true));
        for i in 0..7 {
            assert_ne!(m.leave(t(6 + i), at, b"y", 8, false), Left::Full);
        }
        assert_eq!(m.leave(t(20), at, b"z", 8, true), Left::Full, "past its room, dropped");
        assert_eq!(m.strand_frames(), 8);
    }
}
