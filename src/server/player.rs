//! The player (connection) actor: one per connected client. It owns the client's netcode
//! connection, reliability endpoint and snapshot history (its [`PlayerLink`]), takes its
//! datagrams from the socket, and encodes its snapshot from each tick's shared world
//! snapshot.
//!
//! A datagram does not always need the actor to wake: when the link is free (the actor is
//! not busy with it) and nothing waits in the actor's mailbox, the socket actor takes the
//! datagram through the same code (`take_datagram`) itself, under the link's lock. Inputs then
//! reach the world without an actor hop, and a player costs one wake-up a tick (its
//! snapshot) instead of two. Otherwise the datagram is cast to the actor as before, behind
//! the ones already waiting, so a player's datagrams are taken in the order they came.
//!
//! Its snapshot is sent the same way: a fan-out chain passing this player sends it through
//! the same code (`send_snapshot`) when the link is free and nothing waits for the actor;
//! otherwise the actor is woken for it. So most players cost no wake-up in most ticks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::batcher::{BatchTx, SnapshotBatcher};
use super::broadcaster::{BroadcastMsg, FanOut, PlayerHandle, SnapshotSlot};
use super::metrics::{EndReason, PlayerStats, ReceivedKind, SentKind, ServerMetrics};
use super::session::{Incoming, PlayerSession};
use super::socket::{SocketCtl, count_control};
use super::world::{AppliedInputs, ClientInput, InputQueue, JoinInfo, WorldMsg};
use crate::protocol::netcode::DisconnectReason;
use crate::protocol::session::SessionParams;
use crate::protocol::snapshot::WorldSnapshot;
use crate::transport::udp::UdpTx;

/// Messages to a player actor.
#[derive(Debug)]
pub enum PlayerMsg {
    /// A datagram from this player's address (owned: it is decrypted in place).
    Datagram(Vec<u8>, Instant),
    /// The client said goodbye in a datagram the socket actor took.
    PeerGone,
    /// The player's snapshot slot holds a new tick's world snapshot and the inputs it
    /// applied; the number is the fan-out's generation, passed back when done.
    SnapshotReady(u32),
    /// Time to check timeouts and send keep-alives.
    Heartbeat,
    /// End the connection, telling the client.
    Disconnect,
    /// A message from the world: (bytes, reliable, how many message batches to everyone
    /// the broadcaster had left in the inbox before it).
    Message(Bytes, bool, u64),
}

/// A player's protocol state (the sans-IO session), shared by its actor and the socket
/// actor, which takes datagrams itself when the lock is free (see the module docs).
pub struct PlayerLink {
    session: Mutex<PlayerSession>,
    /// Bytes received by either path, and every byte sent to this player (for `/players`).
    received_bytes: AtomicU64,
    sent_bytes: AtomicU64,
    /// Snapshots sent, full ones among them, and the last one's baseline age in ticks
    /// (`u32::MAX`: none), by either path (for `/players`).
    snapshots: AtomicU64,
    full_snapshots: AtomicU64,
    baseline_age_ticks: AtomicU32,
    /// The RTT this player last added to the server-wide sum, in microseconds.
    rtt_us: AtomicU64,
    /// Its reliable queue overflowed and a disconnect is on its way: later messages from
    /// the world are dropped without another warning each.
    cut_off: AtomicBool,
}

impl PlayerLink {
    /// The link of a new session.
    pub fn new(session: PlayerSession) -> Arc<Self> {
        Arc::new(Self {
            session: Mutex::new(session),
            received_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            full_snapshots: AtomicU64::new(0),
            baseline_age_ticks: AtomicU32::new(u32::MAX),
            rtt_us: AtomicU64::new(0),
            cut_off: AtomicBool::new(false),
        })
    }

    /// The session, if nothing holds it (the socket actor does not wait for the actor).
    pub(crate) fn try_session(&self) -> Option<MutexGuard<'_, PlayerSession>> {
        self.session.try_lock().ok()
    }

    /// The session, waiting for whoever holds it; an error once a panic poisoned it (the
    /// actor then fails and the socket actor cleans up, as for any failure).
    fn session(&self) -> Result<MutexGuard<'_, PlayerSession>, ActorProcessingErr> {
        self.session
            .lock()
            .map_err(|_| ActorProcessingErr::from("a panic outside the player actor poisoned its session"))
    }
}

/// Runs `f` on what `guard` holds, catching a panic. The guard is dropped inside, so a panic
/// leaves the mutex poisoned (a guard dropped after `catch_unwind` returns would not poison
/// it: the thread is no longer panicking by then), and the player's actor fails at its next
/// message. `None` after a panic.
pub(crate) fn guarded<T, R>(guard: MutexGuard<'_, T>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut guard = guard;
        f(&mut guard)
    }))
    .ok()
}

impl std::fmt::Debug for PlayerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlayerLink").field("received_bytes", &self.received_bytes).finish_non_exhaustive()
    }
}

/// What taking a datagram needs besides the session.
pub(crate) struct DatagramEnv<'a> {
    /// The server socket (answers to control packets leave at once).
    pub socket: &'a UdpSocket,
    /// Where inputs go for the world's next tick.
    pub inputs: &'a InputQueue,
    /// Server figures.
    pub metrics: &'a ServerMetrics,
}

/// Takes one datagram from the player's address (`now` in the netcode clock, `at` when it
/// arrived): decrypts it, processes its acks, and queues its new inputs for the world.
/// True when the client said goodbye. Run by the player actor, or by the socket actor when
/// the link is free.
pub(crate) fn take_datagram(
    session: &mut PlayerSession,
    link: &PlayerLink,
    env: &DatagramEnv<'_>,
    now: Duration,
    bytes: &mut [u8],
    at: Instant,
) -> bool {
    // The netcode prefix byte's low nibble is the packet type; 5 is a payload.
    let payload = bytes.first().is_some_and(|b| b & 0x0F == 5);
    let len = bytes.len() as u64;
    let mut tx = UdpTx::new(env.socket);
    let id = session.id();
    let incoming = session.on_datagram(now, bytes, &mut tx);
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
        link.received_bytes.fetch_add(len, Ordering::Relaxed);
    }
    let gone = match incoming {
        Incoming::Inputs(inputs) => {
            let mut dropped = 0;
            for i in inputs.as_slice() {
                dropped += u64::from(!env.inputs.push(ClientInput::new(id, i.seq, i.bytes, i.view, at)));
            }
            if dropped > 0 {
                env.metrics.inputs_dropped.fetch_add(dropped, Ordering::Relaxed);
            }
            false
        }
        Incoming::Disconnected => true,
        Incoming::Nothing | Incoming::Dropped(_) => false,
    };
    count_control(env.metrics, &tx);
    link.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
    gone
}

/// What a player actor starts with.
pub struct PlayerArgs {
    /// The player's session (made from the connection the handshake produced), shared with
    /// the socket actor.
    pub link: Arc<PlayerLink>,
    /// The server socket.
    pub socket: Arc<UdpSocket>,
    /// What sending a snapshot needs (shared with the fan-out).
    pub env: SnapshotEnv,
    /// Wakes the next player actor once this one has sent its snapshot.
    pub fanout: Arc<FanOut>,
    /// The world actor.
    pub world: ActorRef<WorldMsg>,
    /// Where inputs go for the world's next tick.
    pub inputs: InputQueue,
    /// The broadcaster, to subscribe to snapshots.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// Where the broadcaster leaves this player's newest snapshot.
    pub slot: SnapshotSlot,
    /// The socket actor's control channel, for releasing the address on exit.
    pub socket_ctl: tokio::sync::mpsc::UnboundedSender<SocketCtl>,
    /// Datagrams queued for this actor (the socket drops beyond its limit).
    pub inflight: Arc<AtomicUsize>,
    /// Session parameters announced (the tick rate).
    pub session: SessionParams,
    /// Server figures.
    pub metrics: Arc<ServerMetrics>,
    /// The server's clock (Unix time), as the netcode layer needs.
    pub clock: fn() -> Duration,
}

/// A player actor's state: the sans-IO session plus what the actor needs to move bytes.
pub struct PlayerState {
    args: PlayerShell,
    link: Arc<PlayerLink>,
    reason: DisconnectReason,
    figures: Figures,
    /// The inbox's batches, taken (kept to swap back, so neither side allocates).
    batches: Vec<super::broadcaster::MessageBatch>,
}

/// What this player has added to the server-wide sums, and its own totals for `/players`.
#[derive(Debug, Default)]
struct Figures {
    heartbeats: u64,
    resends: u64,
    reliable_queue: u64,
    connected_at: Option<Instant>,
}

/// The parts of [`PlayerArgs`] the actor keeps once the session owns the connection.
struct PlayerShell {
    socket: Arc<UdpSocket>,
    env: SnapshotEnv,
    fanout: Arc<FanOut>,
    world: ActorRef<WorldMsg>,
    inputs: InputQueue,
    broadcaster: ActorRef<BroadcastMsg>,
    slot: SnapshotSlot,
    socket_ctl: tokio::sync::mpsc::UnboundedSender<SocketCtl>,
    inflight: Arc<AtomicUsize>,
    metrics: Arc<ServerMetrics>,
    clock: fn() -> Duration,
    addr: SocketAddr,
    client_id: u64,
}

/// The player actor.
#[derive(Debug, Default)]
pub struct PlayerActor;

impl PlayerState {
    /// Counts what `tx` sent as control traffic.
    fn count(&mut self, tx: &UdpTx<'_>) {
        count_control(&self.args.metrics, tx);
        self.link.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
    }

    /// Once a second: link figures into the histograms, this player's sums into the totals,
    /// and its row of `/players`.
    fn sample(&mut self, session: &PlayerSession) {
        let m = &self.args.metrics;
        let link = session.endpoint().link();
        let (rtt, jitter, loss) = (link.rtt(), link.jitter(), link.loss());
        m.record_link(rtt, jitter, loss);
        let resends = session.endpoint().stats().resends;
        m.reliable_resends.fetch_add(resends.saturating_sub(self.figures.resends), Ordering::Relaxed);
        self.figures.resends = resends;
        let queue = session.endpoint().unacked_messages() as u64;
        m.reliable_queue.fetch_add(queue, Ordering::Relaxed);
        m.reliable_queue.fetch_sub(self.figures.reliable_queue, Ordering::Relaxed);
        self.figures.reliable_queue = queue;
        let f = &self.figures;
        m.set_player(PlayerStats {
            id: session.id(),
            addr: self.args.addr.to_string(),
            connected_seconds: f.connected_at.map(|t| t.elapsed().as_secs_f64()).unwrap_or_default(),
            rtt_seconds: rtt.as_secs_f64(),
            jitter_seconds: jitter.as_secs_f64(),
            loss_ratio: loss,
            baseline_age_ticks: Some(self.link.baseline_age_ticks.load(Ordering::Relaxed)).filter(|a| *a != u32::MAX),
            sent_bytes: self.link.sent_bytes.load(Ordering::Relaxed),
            received_bytes: self.link.received_bytes.load(Ordering::Relaxed),
            snapshots: self.link.snapshots.load(Ordering::Relaxed),
            full_snapshots: self.link.full_snapshots.load(Ordering::Relaxed),
            reliable_resends: resends,
            reliable_queue: queue,
        });
    }
}

/// What sending a snapshot needs besides the session: shared by every player.
#[derive(Debug, Clone)]
pub struct SnapshotEnv {
    /// Where snapshot datagrams leave in batches.
    pub batcher: Arc<SnapshotBatcher>,
    /// Server figures.
    pub metrics: Arc<ServerMetrics>,
    /// The server's clock (Unix time), as the netcode layer needs.
    pub clock: fn() -> Duration,
    /// The world's tick period.
    pub tick_period: Duration,
}

/// Encodes and sends this player's snapshot of `world` (with the inputs the tick applied),
/// and counts it. Run by the player actor, or by the fan-out when the link is free.
pub(crate) fn send_snapshot(
    session: &mut PlayerSession,
    link: &PlayerLink,
    env: &SnapshotEnv,
    world: &Arc<WorldSnapshot>,
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
    let Some(sent) = sent else { return };
    link.sent_bytes.fetch_add(tx.bytes, Ordering::Relaxed);
    if tx.sent > 0 {
        // One payload packet: its snapshot section, the rest of its frame (acks, messages,
        // events), and the netcode header and tag around it.
        let snapshot = (sent.state_bytes as u64).min(tx.bytes);
        let frame = (sent.frame_bytes as u64).clamp(snapshot, tx.bytes);
        m.record_sent(SentKind::Snapshot, tx.sent, snapshot);
        m.record_sent_bytes(SentKind::Reliable, frame - snapshot);
        m.record_sent_bytes(SentKind::Control, tx.bytes - frame);
    }
    let age = sent.encode.baseline.map(|b| sent.tick.wrapping_sub(b));
    m.record_snapshot(sent.encode.bytes, sent.frame_bytes, age.map(|t| env.tick_period * t));
    link.snapshots.fetch_add(1, Ordering::Relaxed);
    link.full_snapshots.fetch_add(u64::from(age.is_none()), Ordering::Relaxed);
    link.baseline_age_ticks.store(age.unwrap_or(u32::MAX), Ordering::Relaxed);
    let rtt = session.endpoint().link().rtt().as_micros() as u64;
    let before = link.rtt_us.swap(rtt, Ordering::Relaxed);
    if rtt != before {
        m.rtt_sum_us.fetch_add(rtt, Ordering::Relaxed);
        m.rtt_sum_us.fetch_sub(before, Ordering::Relaxed);
    }
}

/// Queues one world message for the client. A client that stops acknowledging fills its
/// reliable queue: it is cut off rather than allowed to grow the server's memory. An event
/// that does not fit is simply not sent.
fn queue_message(
    myself: &ActorRef<PlayerMsg>,
    s: &mut PlayerState,
    session: &mut PlayerSession,
    data: Bytes,
    reliable: bool,
) -> Result<(), ActorProcessingErr> {
    if queue_from_world(session, &s.link, data, reliable) {
        myself.send_message(PlayerMsg::Disconnect)?;
    }
    Ok(())
}

/// Queues a message from the world on the session; true when a reliable one could not be
/// queued, and the player must now be disconnected (messages after it are dropped: the
/// player is cut off, so none arrives out of order).
pub(crate) fn queue_from_world(session: &mut PlayerSession, link: &PlayerLink, data: Bytes, reliable: bool) -> bool {
    if link.cut_off.load(Ordering::Relaxed) {
        return false;
    }
    if let Some(e) = session.queue_message(data, reliable).err().filter(|_| reliable) {
        tracing::warn!(player = session.id(), error = %e, "reliable queue full; disconnecting");
        link.cut_off.store(true, Ordering::Relaxed);
        return true;
    }
    false
}

/// Queues the batches of messages to everyone that the broadcaster left in the inbox before
/// the `upto`-th.
fn take_batches(
    myself: &ActorRef<PlayerMsg>,
    s: &mut PlayerState,
    session: &mut PlayerSession,
    upto: u64,
) -> Result<(), ActorProcessingErr> {
    let mut batches = std::mem::take(&mut s.batches);
    s.args.slot.take_batches(upto, &mut batches);
    let mut result = Ok(());
    for batch in batches.drain(..) {
        for (data, reliable) in batch.iter() {
            if result.is_ok() {
                result = queue_message(myself, s, session, data.clone(), *reliable);
            }
        }
    }
    s.batches = batches;
    result
}

impl Actor for PlayerActor {
    type Msg = PlayerMsg;
    type State = PlayerState;
    type Arguments = PlayerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PlayerMsg>,
        args: PlayerArgs,
    ) -> Result<PlayerState, ActorProcessingErr> {
        let (id, addr, client_id, user_data) = {
            let session = args.link.session()?;
            let c = session.connection();
            (c.client_index(), c.addr(), c.client_id(), *c.user_data())
        };
        myself.send_interval(Duration::from_millis(100), || PlayerMsg::Heartbeat);
        args.world.cast(WorldMsg::Join(id, Box::new(JoinInfo { client_id, user_data })))?;
        let handle = PlayerHandle {
            actor: myself.clone(),
            slot: args.slot.clone(),
            link: Some(args.link.clone()),
            inflight: args.inflight.clone(),
        };
        args.broadcaster.cast(BroadcastMsg::Add(id, Arc::new(handle)))?;
        args.metrics.players.fetch_add(1, Ordering::Relaxed);
        args.metrics.connects.fetch_add(1, Ordering::Relaxed);
        let shell = PlayerShell {
            env: args.env,
            addr,
            client_id,
            socket: args.socket,
            fanout: args.fanout,
            world: args.world,
            broadcaster: args.broadcaster,
            inputs: args.inputs,
            slot: args.slot,
            socket_ctl: args.socket_ctl,
            inflight: args.inflight,
            metrics: args.metrics,
            clock: args.clock,
        };
        let figures = Figures { connected_at: Some(Instant::now()), ..Figures::default() };
        Ok(PlayerState { args: shell, link: args.link, reason: DisconnectReason::Local, figures, batches: Vec::new() })
    }

    async fn handle(
        &self,
        myself: ActorRef<PlayerMsg>,
        msg: PlayerMsg,
        s: &mut PlayerState,
    ) -> Result<(), ActorProcessingErr> {
        let now = (s.args.clock)();
        let socket = s.args.socket.clone();
        let mut tx = UdpTx::new(&socket);
        // The session for this message (the socket actor may hold it for a moment).
        let link = s.link.clone();
        let mut session = link.session()?;
        // A snapshot's fan-out chain, passed on once this player's link is free again.
        let mut chain = None;
        match msg {
            PlayerMsg::Datagram(mut bytes, at) => {
                s.args.inflight.fetch_sub(1, Ordering::Relaxed);
                s.args.metrics.player_backlog.fetch_sub(1, Ordering::Relaxed);
                let env = DatagramEnv { socket: &socket, inputs: &s.args.inputs, metrics: &s.args.metrics };
                if take_datagram(&mut session, &link, &env, now, &mut bytes, at) {
                    s.reason = DisconnectReason::ByPeer;
                    myself.stop(Some("client disconnected".into()));
                }
            }
            PlayerMsg::PeerGone => {
                s.reason = DisconnectReason::ByPeer;
                myself.stop(Some("client disconnected".into()));
            }
            PlayerMsg::SnapshotReady(generation) => {
                let taken = s.args.slot.snapshot.lock().ok().and_then(|mut slot| slot.take());
                if let Some((world, applied, upto)) = taken {
                    // Messages to everyone left before this snapshot go out with it.
                    take_batches(&myself, s, &mut session, upto)?;
                    s.args.metrics.snapshot_paths[1].fetch_add(1, Ordering::Relaxed);
                    send_snapshot(&mut session, &link, &s.args.env, &world, &applied);
                }
                s.args.env.batcher.done();
                chain = Some(generation);
            }
            PlayerMsg::Message(data, reliable, upto) => {
                // Messages to everyone that the broadcaster left before this one go first.
                take_batches(&myself, s, &mut session, upto)?;
                s.args.slot.messages.fetch_sub(1, Ordering::Relaxed);
                queue_message(&myself, s, &mut session, data, reliable)?;
            }
            PlayerMsg::Heartbeat => {
                s.figures.heartbeats += 1;
                if s.figures.heartbeats.is_multiple_of(10) {
                    s.sample(&session);
                }
                if let Some(reason) = session.heartbeat(now, &mut tx) {
                    s.reason = reason;
                    myself.stop(Some("timed out".into()));
                }
            }
            PlayerMsg::Disconnect => {
                session.disconnect(now, &mut tx);
                s.reason = DisconnectReason::Local;
                myself.stop(Some("server disconnected it".into()));
            }
        }
        drop(session);
        s.count(&tx);
        if let Some(generation) = chain {
            s.args.fanout.finished(generation);
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PlayerMsg>, s: &mut PlayerState) -> Result<(), ActorProcessingErr> {
        let m = &s.args.metrics;
        m.record_end(EndReason::from(s.reason));
        m.rtt_sum_us.fetch_sub(s.link.rtt_us.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        m.reliable_queue.fetch_sub(s.figures.reliable_queue, Ordering::Relaxed);
        // Read even from a session a panic poisoned: only its id is needed.
        let id = s.link.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner).id();
        m.remove_player(id);
        tracing::debug!(player = id, addr = %s.args.addr, reason = s.reason.label(), "player left");
        let _ = s.args.world.cast(WorldMsg::Leave(id));
        let _ = s.args.broadcaster.cast(BroadcastMsg::Remove(id));
        let _ = s.args.socket_ctl.send(SocketCtl::Release { addr: s.args.addr, client_id: s.args.client_id, slot: id });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::guarded;
    use std::sync::Mutex;

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
}
