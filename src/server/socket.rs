//! The socket actor: owns the UDP socket, answers handshakes statelessly, and hands each
//! connected address's datagrams to its player actor.
//!
//! Receiving runs in one task that the actor starts: a datagram from a connected address is
//! taken right there through the player's [`PlayerLink`] when that is free and the player
//! actor has none waiting (no wake-up of the actor), else copied once and cast to that
//! player's actor, unless that actor already has `player_queue` datagrams waiting (then it
//! is dropped and counted, so one slow or flooding client never grows memory or delays the
//! others). A datagram from any other address goes
//! through the netcode handshake right there, rate-limited per address and in total; only a
//! completed challenge creates a player actor. The actor itself supervises the player actors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::broadcaster::{BroadcastMsg, FanOut};
use super::metrics::{DatagramDrop, EndReason, ReceivedKind, SentKind, ServerMetrics};
use super::player::{DatagramEnv, PlayerActor, PlayerArgs, PlayerLink, PlayerMsg, SnapshotEnv, guarded, take_datagram};
use super::session::PlayerSession;
use super::world::{Relevancy, WorldMsg};
use crate::protocol::netcode::server::{Connection, Endpoint, EndpointConfig, Handled, NewConnection};
use crate::protocol::netcode::slots::Occupant;
use crate::protocol::session::SessionParams;
use crate::protocol::snapshot::Predictor;
use crate::protocol::snapshot::{Schema, SenderConfig};
use crate::transport::batch::{BATCH, RecvBatch};
use crate::transport::udp::UdpTx;

/// Control messages to the receive loop.
#[derive(Debug)]
pub enum SocketCtl {
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

/// Messages to the socket actor.
#[derive(Debug)]
pub enum SocketMsg {
    /// Disconnect every player, telling each client.
    DisconnectAll,
    /// Stop the receive loop.
    Stop,
    /// The receive loop ended while the actor still runs (it panicked, or could not start):
    /// the actor fails, and with it the server (see the supervision tree in [`crate::server`]).
    LoopEnded(String),
    /// Panics the receive loop (supervision tests force each failure with these).
    #[doc(hidden)]
    InjectFault,
}

/// What the socket actor starts with.
pub struct SocketArgs {
    /// The bound socket.
    pub socket: Arc<UdpSocket>,
    /// What sending a snapshot needs (the batcher, figures, clock, tick period), shared
    /// by the player actors and the fan-out.
    pub env: SnapshotEnv,
    /// The broadcaster's relay of snapshot wake-ups, which player actors continue.
    pub fanout: Arc<FanOut>,
    /// The endpoint's settings (protocol id, key, public address, slots, rates).
    pub netcode: EndpointConfig,
    /// Datagrams a player actor may have queued before more are dropped.
    pub player_queue: usize,
    /// The replicated kinds.
    pub schema: Arc<Schema>,
    /// Who sees what.
    pub relevancy: Arc<dyn Relevancy>,
    /// The world actor.
    pub world: ActorRef<WorldMsg>,
    /// Where player actors leave inputs for the world.
    pub inputs: super::world::InputQueue,
    /// The broadcaster.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// Session parameters announced to clients.
    pub session: SessionParams,
    /// Send a snapshot every this many ticks.
    pub snapshot_every: u32,
    /// How each player's snapshots are encoded.
    pub sender: SenderConfig,
    /// The game's own predictor for snapshots, if any.
    pub predictor: Option<Arc<dyn Predictor>>,
    /// Figures.
    pub metrics: Arc<ServerMetrics>,
    /// Unix time.
    pub clock: fn() -> Duration,
}

/// The socket actor's state.
pub struct SocketState {
    ctl: mpsc::UnboundedSender<SocketCtl>,
    /// The receive loop, and the task that watches it.
    receive: tokio::task::AbortHandle,
    watcher: tokio::task::JoinHandle<()>,
    metrics: Arc<ServerMetrics>,
}

/// The socket actor.
#[derive(Debug, Default)]
pub struct SocketActor;

struct Route {
    player: ActorRef<PlayerMsg>,
    /// The player's session, which this task may take datagrams through itself.
    link: Arc<PlayerLink>,
    /// Says goodbye to the client if its player actor fails.
    farewell: Connection,
    inflight: Arc<AtomicUsize>,
}

/// The receive loop's state: the endpoint (handshake, limits, and each connected slot's
/// [`Route`]), and which player actor holds which slot.
struct Slots {
    endpoint: Endpoint<Route>,
    by_actor: HashMap<ActorId, usize>,
}

impl Slots {
    fn release(&mut self, slot: usize) -> Option<Occupant<Route>> {
        let o = self.endpoint.remove(slot)?;
        self.by_actor.remove(&o.value.player.get_id());
        Some(o)
    }
}

impl Actor for SocketActor {
    type Msg = SocketMsg;
    type State = SocketState;
    type Arguments = SocketArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SocketMsg>,
        args: SocketArgs,
    ) -> Result<SocketState, ActorProcessingErr> {
        let (ctl, rx) = mpsc::unbounded_channel();
        let metrics = args.metrics.clone();
        let task = tokio::spawn(receive_loop(args, myself.get_cell(), ctl.clone(), rx));
        let receive = task.abort_handle();
        // The actor supervises its receive loop: however the loop ends while the actor runs,
        // the actor fails (a stopped actor aborts the loop first, and this watcher with it).
        let watcher = tokio::spawn(async move {
            let why = match task.await {
                Ok(()) => "the receive loop ended".to_string(),
                Err(e) if e.is_panic() => "the receive loop panicked".to_string(),
                Err(_) => return,
            };
            let _ = myself.cast(SocketMsg::LoopEnded(why));
        });
        Ok(SocketState { ctl, receive, watcher, metrics })
    }

    async fn handle(
        &self,
        _: ActorRef<SocketMsg>,
        msg: SocketMsg,
        s: &mut SocketState,
    ) -> Result<(), ActorProcessingErr> {
        let _ = s.ctl.send(match msg {
            SocketMsg::DisconnectAll => SocketCtl::DisconnectAll,
            SocketMsg::Stop => SocketCtl::Stop,
            SocketMsg::InjectFault => SocketCtl::InjectFault,
            SocketMsg::LoopEnded(why) => return Err(why.into()),
        });
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<SocketMsg>,
        evt: SupervisionEvent,
        s: &mut SocketState,
    ) -> Result<(), ActorProcessingErr> {
        // A player actor's end never stops the socket: a failed one is cleaned up alone.
        if let SupervisionEvent::ActorFailed(who, err) = evt {
            tracing::warn!(actor = %who.get_id(), error = %err, "player actor failed; disconnecting that player only");
            s.metrics.actor_failures.fetch_add(1, Ordering::Relaxed);
            let _ = s.ctl.send(SocketCtl::Failed(who.get_id()));
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<SocketMsg>, s: &mut SocketState) -> Result<(), ActorProcessingErr> {
        let _ = s.ctl.send(SocketCtl::Stop);
        s.watcher.abort();
        s.receive.abort();
        Ok(())
    }
}

async fn receive_loop(
    args: SocketArgs,
    supervisor: ActorCell,
    ctl: mpsc::UnboundedSender<SocketCtl>,
    mut rx: mpsc::UnboundedReceiver<SocketCtl>,
) {
    let endpoint = match Endpoint::new(args.netcode.clone(), (args.clock)()) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "no randomness for the challenge key; socket not serving");
            return;
        }
    };
    let mut hs = Slots { endpoint, by_actor: HashMap::new() };
    let mut batch = RecvBatch::default();
    loop {
        tokio::select! {
            biased;
            c = rx.recv() => match c {
                None | Some(SocketCtl::Stop) => break,
                Some(SocketCtl::InjectFault) => panic!("injected fault in the receive loop"),
                Some(SocketCtl::Release { addr, client_id, slot }) => {
                    if let Some(o) = hs.endpoint.release(slot as usize, addr, client_id) {
                        hs.by_actor.remove(&o.value.player.get_id());
                    }
                }
                Some(SocketCtl::Failed(actor)) => {
                    let released = hs.by_actor.get(&actor).copied().and_then(|slot| Some((slot as u32, hs.release(slot)?)));
                    if let Some((slot, mut o)) = released {
                        let mut tx = UdpTx::new(&args.socket);
                        o.value.farewell.disconnect((args.clock)(), &mut tx);
                        let _ = args.world.cast(WorldMsg::Leave(slot));
                        let _ = args.broadcaster.cast(BroadcastMsg::Remove(slot));
                        args.metrics.record_end(EndReason::Failed);
                        args.metrics.remove_player(slot);
                        // Datagrams it never took out of its mailbox.
                        let stranded = o.value.inflight.swap(0, Ordering::Relaxed) as u64;
                        args.metrics.player_backlog.fetch_sub(stranded, Ordering::Relaxed);
                    }
                }
                Some(SocketCtl::DisconnectAll) => {
                    for (_, o) in hs.endpoint.iter() {
                        let _ = o.value.player.cast(PlayerMsg::Disconnect);
                    }
                }
            },
            r = args.socket.readable() => {
                if r.is_err() {
                    continue;
                }
                // A few batches, then back to the control channel: a flood cannot starve it.
                for _ in 0..4 {
                    let n = match batch.recv(&args.socket) {
                        Ok(n) => n,
                        Err(_) => break,
                    };
                    args.metrics.record_receive_batch(n);
                    let arrived = Instant::now();
                    for i in 0..n {
                        let Some((datagram, from)) = batch.get_mut(i) else { break };
                        on_datagram(&args, &supervisor, &ctl, &mut hs, datagram, from, arrived).await;
                    }
                    if n < BATCH {
                        break;
                    }
                }
            }
        }
    }
}

/// One datagram, through the endpoint: to its player if its address is connected, else
/// the handshake's, which may start a player actor.
async fn on_datagram(
    args: &SocketArgs,
    supervisor: &ActorCell,
    ctl: &mpsc::UnboundedSender<SocketCtl>,
    hs: &mut Slots,
    datagram: &mut [u8],
    from: SocketAddr,
    arrived: Instant,
) {
    let now = (args.clock)();
    let mut tx = UdpTx::new(&args.socket);
    let new = match hs.endpoint.handle(now, from, datagram, &mut tx) {
        Handled::Route(slot) => {
            if let Some(o) = hs.endpoint.get(slot) {
                route_datagram(args, &o.value, datagram, from, now, arrived);
            }
            return;
        }
        Handled::Handled => {
            args.metrics.record_received(ReceivedKind::Control, datagram.len() as u64);
            count_control(&args.metrics, &tx);
            return;
        }
        Handled::Dropped(reason) => {
            args.metrics.record_received(ReceivedKind::Control, datagram.len() as u64);
            args.metrics.record_rejection(reason);
            count_control(&args.metrics, &tx);
            return;
        }
        Handled::Connected(new) => new,
    };
    args.metrics.record_received(ReceivedKind::Control, datagram.len() as u64);
    count_control(&args.metrics, &tx);
    let NewConnection { connection, reservation } = *new;
    let farewell = connection.farewell_copy();
    let inflight = Arc::new(AtomicUsize::new(0));
    let link = PlayerLink::new(PlayerSession::new(
        connection,
        args.schema.clone(),
        args.relevancy.clone(),
        args.session,
        args.snapshot_every,
        args.sender,
        args.predictor.clone(),
    ));
    let player_args = PlayerArgs {
        link: link.clone(),
        socket: args.socket.clone(),
        env: args.env.clone(),
        fanout: args.fanout.clone(),
        world: args.world.clone(),
        inputs: args.inputs.clone(),
        broadcaster: args.broadcaster.clone(),
        slot: Arc::default(),
        socket_ctl: ctl.clone(),
        inflight: inflight.clone(),
        session: args.session,
        metrics: args.metrics.clone(),
        clock: args.clock,
    };
    match Actor::spawn_linked(None, PlayerActor, player_args, supervisor.clone()).await {
        Ok((player, _)) => {
            hs.by_actor.insert(player.get_id(), reservation.slot());
            hs.endpoint.attach(reservation, Route { player, link, farewell, inflight });
        }
        Err(e) => {
            tracing::error!(error = %e, "could not start a player actor");
            hs.endpoint.abandon(reservation);
        }
    }
}

/// A datagram from a connected player's address: taken right here through the player's link
/// when that is free and nothing waits for its actor, else queued for the actor (or dropped
/// when the actor has `player_queue` waiting).
fn route_datagram(
    args: &SocketArgs,
    route: &Route,
    datagram: &mut [u8],
    from: SocketAddr,
    now: Duration,
    arrived: Instant,
) {
    let waiting = route.inflight.load(Ordering::Relaxed);
    // Nothing queued for the actor (so order is kept) and the link free: take it here.
    if let Some(session) = (waiting == 0).then(|| route.link.try_session()).flatten() {
        let env = DatagramEnv { socket: &args.socket, inputs: &args.inputs, metrics: &args.metrics };
        let taken = guarded(session, |session| take_datagram(session, &route.link, &env, now, datagram, arrived));
        args.metrics.datagram_paths[0].fetch_add(1, Ordering::Relaxed);
        match taken {
            Some(false) => {}
            Some(true) => {
                let _ = route.player.cast(PlayerMsg::PeerGone);
            }
            None => {
                // The lock is poisoned now: the actor fails at its next message and is
                // cleaned up like any failed player actor. This wakes it for that.
                tracing::error!(%from, "taking a datagram panicked; the player is disconnected");
                let _ = route.player.cast(PlayerMsg::Heartbeat);
            }
        }
        return;
    }
    if waiting >= args.player_queue {
        args.metrics.record_drop(DatagramDrop::QueueFull, 1);
        return;
    }
    route.inflight.fetch_add(1, Ordering::Relaxed);
    args.metrics.player_backlog.fetch_add(1, Ordering::Relaxed);
    args.metrics.datagram_paths[1].fetch_add(1, Ordering::Relaxed);
    let _ = route.player.cast(PlayerMsg::Datagram(datagram.to_vec(), arrived));
}

/// Counts what `tx` sent as control traffic, and what it failed to send.
pub(crate) fn count_control(metrics: &ServerMetrics, tx: &UdpTx<'_>) {
    if tx.sent > 0 {
        metrics.record_sent(SentKind::Control, tx.sent, tx.bytes);
    }
    metrics.record_drop(DatagramDrop::SendFailed, tx.dropped);
}
