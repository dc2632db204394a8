//! The player (connection) actor: one per connected client. It owns the client's netcode
//! connection, reliability channel and snapshot history (its shared state, [`PlayerShared`]), takes its
//! datagrams from the socket, and encodes its snapshot from each tick's shared world
//! snapshot.
//!
//! A datagram does not always need the actor to wake, nor does a snapshot: the socket actor
//! and the fan-out take that work themselves when the rules in [`super::shared`] allow
//! (the session free, nothing waiting for the actor that must go first), through the same
//! code. So most players cost no wake-up in most ticks.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::broadcaster::FanOut;
use super::metrics::{EndReason, PlayerStats, ServerMetrics};
use super::session::PlayerSession;
use super::shared::{
    BroadcastMsg, DatagramEnv, MessageBatch, PlayerMsg, PlayerRef, PlayerShared, SnapshotEnv, SocketCtl,
};
use super::world::JoinInfo;
use super::worlds::ToPlayer;
use crate::protocol::netcode::DisconnectReason;
use crate::protocol::session::SessionEnd;
use crate::transport::udp::UdpTx;

/// What a player actor starts with.
pub(crate) struct PlayerArgs {
    /// What it shares with the socket actor and the fan-out (its session among them).
    pub shared: Arc<PlayerShared>,
    /// The parts of the server it talks to.
    pub shell: PlayerShell,
}

/// A player actor's state: the sans-IO session plus what the actor needs to move bytes.
pub(crate) struct PlayerState {
    args: PlayerShell,
    shared: Arc<PlayerShared>,
    reason: EndReason,
    figures: Figures,
    /// The inbox's batches, taken (kept to reuse, so taking them does not allocate).
    batches: Vec<MessageBatch>,
}

/// What this player has added to the server-wide sums, and its own totals for `/players`.
#[derive(Debug, Default)]
struct Figures {
    heartbeats: u64,
    resends: u64,
    reliable_queue: u64,
    rate_cuts: u64,
    path_changes: u64,
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

impl PlayerState {
    /// Once a second: link figures into the histograms, this player's sums into the totals,
    /// and its row of `/players`.
    fn sample(&mut self, session: &PlayerSession) {
        let m = &self.args.metrics;
        let link = session.channel().link();
        let (rtt, jitter, loss) = (link.rtt(), link.jitter(), link.loss());
        let rate = session.send_rate();
        m.record_link(rtt, jitter, loss, rate.bytes_per_second());
        m.send_rate_cuts.fetch_add(rate.cuts().saturating_sub(self.figures.rate_cuts), Ordering::Relaxed);
        self.figures.rate_cuts = rate.cuts();
        m.send_rate_path_changes.fetch_add(rate.rebased().saturating_sub(self.figures.path_changes), Ordering::Relaxed);
        self.figures.path_changes = rate.rebased();
        let resends = session.channel().stats().resends;
        m.reliable_resends.fetch_add(resends.saturating_sub(self.figures.resends), Ordering::Relaxed);
        self.figures.resends = resends;
        let queue = session.channel().unacked_messages() as u64;
        m.reliable_queue.fetch_add(queue, Ordering::Relaxed);
        m.reliable_queue.fetch_sub(self.figures.reliable_queue, Ordering::Relaxed);
        self.figures.reliable_queue = queue;
        m.set_player(self.row(session));
    }

    /// This player's row of `/players` (and what the admin's link conditioner finds it by).
    fn row(&self, session: &PlayerSession) -> PlayerStats {
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
            received_bytes: fig.received_bytes.load(Ordering::Relaxed),
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
        let PlayerArgs { shared, shell } = args;
        let user_data = *shared.session()?.connection().user_data();
        myself.send_interval(Duration::from_millis(100), || PlayerMsg::Heartbeat);
        let join = JoinInfo::new(shared.client_id(), user_data);
        let player = PlayerRef { actor: myself.clone(), shared: shared.clone() };
        // The broadcaster puts it in the entry world (whose `join_with` it calls).
        shell.broadcaster.cast(BroadcastMsg::Add(shared.id(), Arc::new(player), Box::new(join)))?;
        shell.metrics.players.fetch_add(1, Ordering::Relaxed);
        shell.metrics.connects.fetch_add(1, Ordering::Relaxed);
        let figures = Figures { connected_at: Some(Instant::now()), ..Figures::default() };
        let state = PlayerState { args: shell, shared, reason: EndReason::Local, figures, batches: Vec::new() };
        // Its row of `/players` from the start, not only from the first second's sample:
        // the admin can find (and condition) a player as soon as it is connected.
        if let Ok(session) = state.shared.session() {
            state.args.metrics.set_player(state.row(&session));
        }
        Ok(state)
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
        // The session for this message (the socket actor or a fan-out chain may hold it for
        // a moment).
        let shared = s.shared.clone();
        let mut session = shared.session()?;
        // A snapshot's fan-out chain, passed on once this player's session is free again.
        let mut chain = None;
        let mut cut_off = false;
        match msg {
            PlayerMsg::Datagram(mut bytes, at) => {
                shared.dequeue_datagram(&s.args.metrics);
                let env = DatagramEnv { socket: &socket, metrics: &s.args.metrics };
                if shared.take_datagram(&mut session, &env, now, &mut bytes, at) {
                    s.reason = EndReason::of(DisconnectReason::ByPeer, session.ending());
                    myself.stop(Some("client disconnected".into()));
                }
            }
            PlayerMsg::PeerGone => {
                s.reason = EndReason::of(DisconnectReason::ByPeer, session.ending());
                myself.stop(Some("client disconnected".into()));
            }
            PlayerMsg::SnapshotReady(generation) => {
                // Messages to everyone left before this snapshot go out with it.
                cut_off = shared.send_waiting_snapshot(&mut session, &s.args.env, &mut s.batches);
                s.args.env.batcher.done();
                chain = Some(generation);
            }
            PlayerMsg::Message(data, reliable, upto) => {
                // Messages to everyone that the broadcaster left before this one go first.
                cut_off = shared.queue_own_message(&mut session, data, reliable, upto, &mut s.batches);
            }
            PlayerMsg::Heartbeat => {
                s.figures.heartbeats += 1;
                if s.figures.heartbeats.is_multiple_of(10) {
                    s.sample(&session);
                }
                if let Some(reason) = session.heartbeat(now, &mut tx) {
                    s.reason = EndReason::of(reason, session.ending());
                    myself.stop(Some("connection over".into()));
                }
            }
            PlayerMsg::Board(updates) => session.queue_board(now, &updates, &mut tx),
            PlayerMsg::System(data) => session.send_notice(now, data, &mut tx),
            PlayerMsg::Told(told) => {
                if let ToPlayer::Close(end) = &told {
                    tracing::debug!(player = session.id(), reason = end.label(), "saying goodbye");
                }
                session.handle(now, told, &mut tx);
            }
        }
        drop(session);
        shared.count_sent(&s.args.metrics, &tx);
        if cut_off {
            // A reliable message could not be queued: the player is disconnected.
            myself.send_message(PlayerMsg::close(SessionEnd::TooFarBehind))?;
        }
        if let Some(generation) = chain {
            s.args.fanout.finished(generation);
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PlayerMsg>, s: &mut PlayerState) -> Result<(), ActorProcessingErr> {
        let m = &s.args.metrics;
        m.record_end(s.reason);
        m.replace_rtt(s.shared.figures.rtt_us.swap(0, Ordering::Relaxed), 0);
        m.replace_received_held(s.shared.figures.received_held.swap(0, Ordering::Relaxed), 0);
        m.reliable_queue.fetch_sub(s.figures.reliable_queue, Ordering::Relaxed);
        let (id, addr, client_id) = (s.shared.id(), s.shared.addr(), s.shared.client_id());
        m.remove_player(id);
        tracing::debug!(player = id, %addr, reason = s.reason.label(), "player left");
        // The broadcaster has its world call `leave`.
        let _ = s.args.broadcaster.cast(BroadcastMsg::Remove(id));
        let _ = s.args.socket_ctl.send(SocketCtl::Release { addr, client_id, slot: id });
        Ok(())
    }
}
