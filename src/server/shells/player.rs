//! The player (connection) actor: one per connected client. It owns the client's session
//! (the send half of its netcode connection, its reliability channels, its snapshot history
//! and merged delta) and no other task touches it.
//!
//! It wakes once a tick, when the fan-out hands it its world's snapshot: it first reads what
//! the socket left in its [`Mailbox`] (acknowledgements first), hands the client's messages
//! to the world, then encodes and sends its snapshot. The client's inputs never wait for it:
//! the socket actor's [`Inlet`](crate::server::cores::inlet::Inlet) hands them to the world at once. A
//! control message, the client's messages, the directory's news, the scoreboard and a
//! heartbeat (every 100 ms: keep-alives, timeouts, the goodbye's repeats) wake it too.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::broadcaster::FanOut;
use super::mailbox::{
    BroadcastMsg, Frames, Mailbox, MessageBatch, PlayerMsg, PlayerRef, RouteCache, SnapshotEnv, SocketCtl,
};
use crate::protocol::netcode::DisconnectReason;
use crate::protocol::session::SessionEnd;
use crate::server::cores::directory::ToPlayer;
use crate::server::cores::inputs::ClientInput;
use crate::server::cores::session::{Beat, PlayerSession};
use crate::server::game::world::JoinInfo;
use crate::server::ops::metrics::{EndReason, PlayerStats, ServerMetrics, Wakeup};
use crate::transport::udp::UdpTx;

/// What a player actor starts with.
pub(crate) struct PlayerArgs {
    /// Its session (the actor's alone from now on).
    pub session: PlayerSession,
    /// What the other tasks leave for it.
    pub mailbox: Arc<Mailbox>,
    /// The parts of the server it talks to.
    pub shell: PlayerShell,
}

/// A player actor's state: the sans-IO session plus what the actor needs to move bytes.
pub(crate) struct PlayerState {
    args: PlayerShell,
    own: Own,
}

/// What the actor owns, beside the shell it talks through.
struct Own {
    session: PlayerSession,
    shared: Arc<Mailbox>,
    reason: EndReason,
    figures: Figures,
    /// The inbox's batches, taken (kept to reuse, so taking them does not allocate).
    batches: Vec<MessageBatch>,
    /// The payloads taken from the mailbox (swapped with its buffer: no allocation).
    frames: Frames,
    /// Its world's input queue, where its client's messages go.
    route: RouteCache,
}

/// What this player has added to the server-wide sums, and its own totals for `/players`.
#[derive(Debug, Default)]
struct Figures {
    heartbeats: u64,
    /// When the heartbeat's work last ran (netcode clock).
    last_beat: Duration,
    resends: u64,
    reliable_queue: u64,
    rate_cuts: u64,
    path_changes: u64,
    silences: u64,
    connected_at: Option<Instant>,
}

/// The parts of the server a player actor talks to: the same for every player.
#[derive(Clone)]
pub(crate) struct PlayerShell {
    /// The server socket.
    pub socket: Arc<UdpSocket>,
    /// What sending a snapshot needs (shared with the fan-out).
    pub env: SnapshotEnv,
    /// Wakes the next player actor once this one has sent its snapshot.
    pub fanout: Arc<FanOut>,
    /// The broadcaster, to subscribe to snapshots.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// The socket actor's control channel, for releasing the address on exit.
    pub socket_ctl: tokio::sync::mpsc::UnboundedSender<SocketCtl>,
    /// Server figures.
    pub metrics: Arc<ServerMetrics>,
    /// The server's clock (Unix time), as the netcode layer needs.
    pub clock: fn() -> Duration,
}

/// The player actor.
#[derive(Debug, Default)]
pub(crate) struct PlayerActor;

/// Tells the batcher a woken player actor is done with its snapshot when dropped, also
/// while a panic unwinds (the tick's last batch never waits for a failed actor).
struct BatchDone<'a>(&'a super::batcher::SnapshotBatcher);

impl Drop for BatchDone<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// How often a player's keep-alives, timeouts and goodbye repeats are looked at.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(100);

/// What `msg` woke the actor for (`volley_player_wakeups_total{reason}`).
fn wakeup(msg: &PlayerMsg) -> Wakeup {
    match msg {
        PlayerMsg::SnapshotReady(_) => Wakeup::Snapshot,
        PlayerMsg::Frames => Wakeup::Datagram,
        PlayerMsg::Heartbeat => Wakeup::Heartbeat,
        PlayerMsg::PeerGone
        | PlayerMsg::Board(_)
        | PlayerMsg::Told(_)
        | PlayerMsg::Message(..)
        | PlayerMsg::System(_)
        | PlayerMsg::Rebind(_) => Wakeup::World,
    }
}

impl Own {
    /// Once a second: link figures into the histograms, this player's sums into the totals,
    /// and its row of `/players`.
    fn sample(&mut self, m: &ServerMetrics) {
        let session = &self.session;
        let link = session.channel().link();
        let (rtt, jitter, loss) = (link.rtt(), link.jitter(), link.loss());
        let rate = session.send_rate();
        m.record_link(rtt, jitter, loss, rate.bytes_per_second());
        m.send_rate_cuts.fetch_add(rate.cuts().saturating_sub(self.figures.rate_cuts), Ordering::Relaxed);
        self.figures.rate_cuts = rate.cuts();
        m.send_rate_path_changes.fetch_add(rate.rebased().saturating_sub(self.figures.path_changes), Ordering::Relaxed);
        self.figures.path_changes = rate.rebased();
        m.send_rate_silences.fetch_add(rate.silences().saturating_sub(self.figures.silences), Ordering::Relaxed);
        self.figures.silences = rate.silences();
        let resends = session.channel().stats().resends;
        m.reliable_resends.fetch_add(resends.saturating_sub(self.figures.resends), Ordering::Relaxed);
        self.figures.resends = resends;
        let queue = session.channel().unacked_messages() as u64;
        m.reliable_queue.fetch_add(queue, Ordering::Relaxed);
        m.reliable_queue.fetch_sub(self.figures.reliable_queue, Ordering::Relaxed);
        self.figures.reliable_queue = queue;
        m.set_player(self.row());
    }

    /// Reads what the socket left in the mailbox, in order, and hands the client's messages
    /// to its world (bounded per tick, [`PlayerSession::take_messages`]).
    fn take_frames(&mut self, m: &ServerMetrics, now: Duration, tx: &mut UdpTx<'_>) {
        self.shared.take_frames(&mut self.frames);
        let Some(arrived) = self.frames.read_into(&mut self.session, now, tx, |why| m.record_player_drop(why)) else {
            return;
        };
        let id = self.session.id();
        let open = self.shared.inputs_open();
        let queue = self.route.get(&self.shared).filter(|_| open);
        let round = queue.map_or(0, crate::server::cores::inputs::InputQueue::round);
        let (mut queued, mut full, mut landed) = (0, 0, None);
        let drops = self.session.take_messages(now, round, tx, |data, reliable| {
            match queue.and_then(|q| q.push(ClientInput::message(id, data, reliable, arrived))) {
                Some(r) => {
                    queued += 1;
                    landed = Some(r);
                }
                None => full += 1,
            }
        });
        if let Some(r) = landed {
            self.session.messages_landed(r, queued as u32);
        }
        m.record_client_messages(queued, drops, full);
        let held = self.session.received_bytes_held() as u64;
        let f = &self.shared.figures;
        if f.received_held.load(Ordering::Relaxed) != held {
            m.replace_received_held(f.received_held.swap(held, Ordering::Relaxed), held);
        }
    }

    /// This player's row of `/players` (and what the admin's link conditioner finds it by).
    fn row(&self) -> PlayerStats {
        let session = &self.session;
        let link = session.channel().link();
        let (rtt, jitter, loss) = (link.rtt(), link.jitter(), link.loss());
        let (f, fig) = (&self.figures, &self.shared.figures);
        PlayerStats {
            id: session.id(),
            addr: self.shared.addr().to_string(),
            connected_seconds: f.connected_at.map(|t| t.elapsed().as_secs_f64()).unwrap_or_default(),
            rtt_seconds: rtt.as_secs_f64(),
            jitter_seconds: jitter.as_secs_f64(),
            loss_ratio: loss,
            baseline_age_ticks: Some(fig.baseline_age_ticks.load(Ordering::Relaxed)).filter(|a| *a != u32::MAX),
            sent_bytes: fig.sent_bytes.load(Ordering::Relaxed),
            received_bytes: self.shared.received_bytes(),
            snapshots: fig.snapshots.load(Ordering::Relaxed),
            full_snapshots: fig.full_snapshots.load(Ordering::Relaxed),
            reliable_resends: f.resends,
            reliable_queue: f.reliable_queue,
            send_rate_bytes_per_second: session.send_rate().bytes_per_second(),
        }
    }
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
        let PlayerArgs { session, mailbox: shared, shell } = args;
        let user_data = *session.send_half().user_data();
        let join = JoinInfo::new(shared.client_id(), user_data);
        let player = PlayerRef { actor: myself.clone(), mailbox: shared.clone() };
        // The broadcaster puts it in the entry world (whose `join_with` it calls).
        shell.broadcaster.cast(BroadcastMsg::Add(shared.id(), Arc::new(player), Box::new(join)))?;
        shell.metrics.players.fetch_add(1, Ordering::Relaxed);
        shell.metrics.connects.fetch_add(1, Ordering::Relaxed);
        let figures = Figures { connected_at: Some(Instant::now()), ..Figures::default() };
        let own = Own {
            session,
            shared,
            reason: EndReason::Local,
            figures,
            batches: Vec::new(),
            frames: Frames::default(),
            route: RouteCache::default(),
        };
        // Its row of `/players` from the start, not only from the first second's sample:
        // the admin can find (and condition) a player as soon as it is connected.
        shell.metrics.set_player(own.row());
        let state = PlayerState { args: shell, own };
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<PlayerMsg>,
        msg: PlayerMsg,
        s: &mut PlayerState,
    ) -> Result<(), ActorProcessingErr> {
        let PlayerState { args, own: s } = s;
        let now = (args.clock)();
        let mut tx = UdpTx::new(&args.socket);
        args.metrics.record_wakeup(wakeup(&msg));
        let beat = matches!(msg, PlayerMsg::Heartbeat);
        // What the socket left comes first (acknowledgements before this tick's snapshot).
        s.take_frames(&args.metrics, now, &mut tx);
        let (session, shared) = (&mut s.session, &*s.shared);
        let mut cut_off = false;
        match msg {
            PlayerMsg::Frames | PlayerMsg::Heartbeat => {}
            PlayerMsg::PeerGone => {
                session.on_disconnect();
                s.reason = EndReason::of(DisconnectReason::ByPeer, session.ending());
                myself.stop(Some("client disconnected".into()));
            }
            PlayerMsg::SnapshotReady(generation) => {
                // The next player actor of the tick can start now (whatever happens here).
                args.fanout.finished(generation);
                // The batcher hears this one is done even if the game's relevancy panics.
                let _done = BatchDone(&args.env.batcher);
                // Messages to everyone left before this snapshot go out with it.
                cut_off = shared.send_waiting_snapshot(session, &args.env, &mut s.batches);
            }
            PlayerMsg::Message(data, reliable, upto) => {
                // Messages to everyone that the broadcaster left before this one go first.
                cut_off = shared.queue_own_message(session, data, reliable, upto, &mut s.batches);
            }
            PlayerMsg::Board(updates) => session.queue_board(now, &updates, &mut tx),
            PlayerMsg::System(data) => session.send_notice(now, data, &mut tx),
            PlayerMsg::Rebind(out) => {
                tracing::debug!(player = session.id(), addr = %out.addr(), "session resumed");
                if session.rebind(*out) {
                    args.metrics.away.fetch_sub(1, Ordering::Relaxed);
                    let _ = args.broadcaster.cast(BroadcastMsg::Presence(session.id(), false));
                }
            }
            PlayerMsg::Told(told) => {
                if let ToPlayer::Close(end) = &told {
                    tracing::debug!(player = session.id(), reason = end.label(), "saying goodbye");
                }
                session.handle(now, told, &mut tx);
            }
        }
        // Keep-alives, timeouts and the goodbye's repeats every 100 ms, at whichever wake-up
        // comes first after that (the tick's snapshot, mostly; the socket's heartbeat for a
        // player that gets none).
        if beat || now.saturating_sub(s.figures.last_beat) >= HEARTBEAT {
            s.figures.last_beat = now;
            s.shared.beaten(now);
            s.figures.heartbeats += 1;
            if s.figures.heartbeats.is_multiple_of(10) {
                s.sample(&args.metrics);
            }
            let (session, shared) = (&mut s.session, &*s.shared);
            session.confirm(shared.confirmed());
            match session.heartbeat(now, shared.last_heard(), &mut tx) {
                None => {}
                Some(Beat::Away) => {
                    tracing::debug!(player = session.id(), "client silent: away until it resumes");
                    args.metrics.away.fetch_add(1, Ordering::Relaxed);
                    let _ = args.broadcaster.cast(BroadcastMsg::Presence(session.id(), true));
                }
                Some(Beat::Back) => {
                    args.metrics.away.fetch_sub(1, Ordering::Relaxed);
                    let _ = args.broadcaster.cast(BroadcastMsg::Presence(session.id(), false));
                }
                Some(Beat::Over(reason)) => {
                    s.reason = EndReason::of(reason, session.ending());
                    myself.stop(Some("connection over".into()));
                }
            }
        }
        if s.session.ending().is_some() {
            s.shared.close_inputs();
        }
        s.shared.count_sent(&args.metrics, &tx);
        if cut_off {
            // A reliable message could not be queued: the player is disconnected.
            myself.send_message(PlayerMsg::close(SessionEnd::TooFarBehind))?;
        }
        Ok(())
    }

    async fn post_stop(&self, myself: ActorRef<PlayerMsg>, state: &mut PlayerState) -> Result<(), ActorProcessingErr> {
        let PlayerState { args, own: s } = state;
        let m = &args.metrics;
        m.record_end(s.reason);
        if s.session.is_away() {
            m.away.fetch_sub(1, Ordering::Relaxed);
        }
        m.replace_rtt(s.shared.figures.rtt_us.swap(0, Ordering::Relaxed), 0);
        m.replace_received_held(s.shared.figures.received_held.swap(0, Ordering::Relaxed), 0);
        m.reliable_queue.fetch_sub(s.figures.reliable_queue, Ordering::Relaxed);
        s.shared.strand_frames();
        let (id, addr) = (s.shared.id(), s.shared.addr());
        m.remove_player(id);
        tracing::debug!(player = id, %addr, reason = s.reason.label(), "player left");
        // The broadcaster has its world call `leave`.
        let _ = args.broadcaster.cast(BroadcastMsg::Remove(id));
        let _ = args.socket_ctl.send(SocketCtl::Release { actor: myself.get_id(), slot: id });
        Ok(())
    }
}
