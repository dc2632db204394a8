//! The socket actor: owns the UDP socket, answers handshakes statelessly, and hands each
//! connected address's datagrams to its player.
//!
//! Receiving runs in one task that the actor starts. A datagram from a connected address goes
//! through that player's [`Inlet`] (the receive half of its connection: authentication,
//! replay window, packet budget, input de-duplication): its new inputs go straight into the
//! world's input queue, and the rest of its payload is left in the player's [`Mailbox`] for
//! the session, without waking the player actor unless the payload asks for it now (see
//! [`super::mailbox`]); past `player_queue` payloads waiting, more are dropped and counted, so
//! one slow or flooding client never grows memory or delays the others. A datagram from any
//! other address goes
//! through the netcode handshake right there, rate-limited per address and in total; only a
//! completed challenge creates a player actor. The actor itself supervises the player actors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::broadcaster::FanOut;
use super::mailbox::{BroadcastMsg, Left, Mailbox, PlayerMsg, PlayerRef, RouteCache, SnapshotEnv, SocketCtl};
use super::player::{PlayerActor, PlayerArgs, PlayerShell};
use crate::protocol::input::FreshInputs;
use crate::protocol::netcode::server::{
    Connection, Endpoint, EndpointConfig, Handled, NewConnection, Reservation, SendHalf,
};
use crate::protocol::netcode::slots::Occupant;
use crate::protocol::session::SessionEnd;
use crate::server::cores::inlet::{Arrived, Inlet};
use crate::server::cores::inputs::{ClientInput, InputQueue};
use crate::server::cores::resume::{Judged, TicketHolder, Tickets, refuse_gone, renewal_due};
use crate::server::cores::session::SessionSettings;
use crate::server::ops::metrics::{DatagramDrop, DeliveryPath, EndReason, ReceivedKind, ServerMetrics, count_control};
use crate::transport::batch::{BATCH, RecvBatch};
use crate::transport::udp::UdpTx;

/// Messages to the socket actor.
#[derive(Debug)]
pub(crate) enum SocketMsg {
    /// Disconnect every player, telling each client.
    DisconnectAll,
    /// The receive loop ended while the actor still runs (it panicked, or could not start):
    /// the actor fails, and with it the server (see the supervision tree in [`crate::server`]).
    LoopEnded(String),
    /// Panics the receive loop (supervision tests force each failure with these).
    #[cfg(feature = "test-hooks")]
    InjectFault,
}

/// What the socket actor starts with.
pub(crate) struct SocketArgs {
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
    /// What each player's session starts with.
    pub sessions: SessionSettings,
    /// The broadcaster.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// Figures.
    pub metrics: Arc<ServerMetrics>,
    /// Unix time.
    pub clock: fn() -> Duration,
}

/// The socket actor's state.
pub(crate) struct SocketState {
    ctl: mpsc::UnboundedSender<SocketCtl>,
    /// The receive loop, and the task that watches it.
    receive: tokio::task::AbortHandle,
    watcher: tokio::task::JoinHandle<()>,
    metrics: Arc<ServerMetrics>,
}

/// The socket actor.
#[derive(Debug, Default)]
pub(crate) struct SocketActor;

/// What the receive loop keeps for a connected address.
struct Route {
    /// Its actor and its mailbox.
    player: PlayerRef,
    /// The receive half of its connection.
    inlet: Inlet,
    /// Its world's input queue.
    inputs: RouteCache,
    /// Says goodbye to the client if its player actor fails.
    farewell: SendHalf,
    /// Who its resume tickets are for, and when the newest was minted.
    holder: TicketHolder,
    ticket_at: Duration,
}

/// The receive loop's state: the endpoint (handshake, limits, and each connected slot's
/// [`Route`]), and which player actor holds which slot.
struct Slots {
    endpoint: Endpoint<Route>,
    by_actor: HashMap<ActorId, usize>,
    tickets: Tickets,
}

impl Slots {
    fn release(&mut self, slot: usize) -> Option<Occupant<Route>> {
        let o = self.endpoint.remove(slot)?;
        self.by_actor.remove(&o.value.player.actor.get_id());
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
            #[cfg(feature = "test-hooks")]
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
    let tickets = Tickets::new(&args.netcode, args.sessions.resume_grace);
    let mut hs = Slots { endpoint, by_actor: HashMap::new(), tickets };
    let mut batch = RecvBatch::default();
    let mut tables = tokio::time::interval(Duration::from_secs(1));
    tables.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // The heartbeat of player actors that no snapshot woke for a while (the others run
    // theirs at their tick's wake-up).
    let mut beats = tokio::time::interval(super::player::HEARTBEAT);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            biased;
            _ = tables.tick() => {
                args.metrics.set_socket_tables(hs.endpoint.tables(), hs.by_actor.len());
                renew_tickets(&args, &mut hs);
                let waiting: usize = hs.endpoint.iter().map(|(_, o)| o.value.player.mailbox.waiting()).sum();
                args.metrics.player_backlog.store(waiting as u64, Ordering::Relaxed);
            }
            _ = beats.tick() => {
                let now = (args.clock)();
                for (_, o) in hs.endpoint.iter() {
                    if o.value.player.mailbox.wants_beat(now, super::player::HEARTBEAT * 3 / 2) {
                        o.value.player.tell(PlayerMsg::Heartbeat);
                    }
                }
            }
            c = rx.recv() => match c {
                None | Some(SocketCtl::Stop) => break,
                #[cfg(feature = "test-hooks")]
                Some(SocketCtl::InjectFault) => panic!("injected fault in the receive loop"),
                Some(SocketCtl::Release { actor, slot }) => {
                    // Only the actor that holds the slot frees it (a late release of a slot
                    // since given to someone else does nothing).
                    if hs.by_actor.get(&actor) == Some(&(slot as usize)) {
                        hs.release(slot as usize);
                    }
                }
                Some(SocketCtl::Failed(actor)) => {
                    let released = hs.by_actor.get(&actor).copied().and_then(|slot| Some((slot as u32, hs.release(slot)?)));
                    if let Some((slot, mut o)) = released {
                        let mut tx = UdpTx::new(&args.socket);
                        // Its client reads why (`SessionEnd::ServerFault`), then the disconnect.
                        let now = (args.clock)();
                        let mut b = [0u8; crate::protocol::session::MAX_CONTROL_BYTES];
                        let n = crate::protocol::session::Control::Goodbye(SessionEnd::ServerFault).encode(&mut b);
                        for _ in 0..3 {
                            let _ = o.value.farewell.send_payload(now, &b[..n], &mut tx);
                        }
                        o.value.farewell.disconnect(now, &mut tx);
                        let _ = args.broadcaster.cast(BroadcastMsg::Remove(slot));
                        args.metrics.record_end(EndReason::Failed);
                        args.metrics.remove_player(slot);
                        // Payloads it never read.
                        o.value.player.mailbox.strand_frames();
                    }
                }
                Some(SocketCtl::DisconnectAll) => {
                    for (_, o) in hs.endpoint.iter() {
                        o.value.player.tell(PlayerMsg::close(SessionEnd::ShuttingDown));
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
            if let Some(o) = hs.endpoint.get_mut(slot) {
                route_datagram(args, &mut o.value, datagram, now, arrived);
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
    // (The handshake sent nothing for it: its first keep-alive goes once its slot is known.)
    let NewConnection { mut connection, reservation, replaces } = *new;
    match hs.tickets.judge(&connection, replaces, now) {
        Judged::Resume(slot) => {
            connection.greet(slot as u32, now, &mut tx);
            count_control(&args.metrics, &tx);
            return resume(args, hs, connection, reservation, slot, now);
        }
        Judged::Gone => {
            // A ticket of a session that is over: told why on the new connection, then gone.
            refuse_gone(&mut connection, reservation.slot(), now, &mut tx);
            count_control(&args.metrics, &tx);
            args.metrics.resume_refusals.fetch_add(1, Ordering::Relaxed);
            hs.endpoint.abandon(reservation);
            return;
        }
        Judged::Replace(slot) => {
            // The same client came back with a fresh token (a new address, a restart) while
            // its old session lingered: that one ends now, its client told why, and releases
            // its slot as any ending session does.
            if let Some(old) = hs.endpoint.get(slot) {
                old.value.player.tell(PlayerMsg::close(SessionEnd::Replaced));
            }
        }
        Judged::Fresh => {}
    }
    connection.greet(reservation.slot() as u32, now, &mut tx);
    count_control(&args.metrics, &tx);
    let holder = TicketHolder::of(&connection);
    let farewell = connection.farewell_copy();
    let mailbox = Mailbox::new(connection.client_index(), connection.addr(), connection.client_id(), now);
    let (inlet, session) = crate::server::cores::inlet::open(&args.sessions, connection);
    let shell = PlayerShell {
        socket: args.socket.clone(),
        env: args.env.clone(),
        fanout: args.fanout.clone(),
        broadcaster: args.broadcaster.clone(),
        socket_ctl: ctl.clone(),
        metrics: args.metrics.clone(),
        clock: args.clock,
    };
    let player_args = PlayerArgs { session, mailbox: mailbox.clone(), shell };
    match Actor::spawn_linked(None, PlayerActor, player_args, supervisor.clone()).await {
        Ok((actor, _)) => {
            hs.by_actor.insert(actor.get_id(), reservation.slot());
            let player = PlayerRef { actor, mailbox };
            if let Some(ticket) = hs.tickets.mint(&holder, now) {
                player.tell(PlayerMsg::System(ticket));
            }
            let route = Route { player, inlet, inputs: RouteCache::default(), farewell, holder, ticket_at: now };
            hs.endpoint.attach(reservation, route);
        }
        Err(e) => {
            tracing::error!(error = %e, "could not start a player actor");
            hs.endpoint.abandon(reservation);
        }
    }
}

/// A resume ticket's handshake: the session in `slot` goes on over the new connection (its
/// receive half into the route's inlet, its send half to the player actor), from the new
/// address; the client gets a new ticket for next time (this one is spent).
fn resume(
    args: &SocketArgs,
    hs: &mut Slots,
    connection: Connection,
    reservation: Reservation,
    slot: usize,
    now: Duration,
) {
    let farewell = connection.farewell_copy();
    let (rx, tx) = connection.split();
    let Some(o) = hs.endpoint.rebind(reservation, slot) else { return };
    let route = &mut o.value;
    let gap = now.saturating_sub(route.inlet.receive_half().last_received());
    route.inlet.rebind(rx);
    route.farewell = farewell;
    route.player.mailbox.rebound(o.addr, now);
    route.player.tell(PlayerMsg::Rebind(Box::new(tx)));
    if let Some(ticket) = hs.tickets.mint(&route.holder, now) {
        route.ticket_at = now;
        route.player.tell(PlayerMsg::System(ticket));
    }
    args.metrics.record_resumed(gap);
}

/// Once a second: each player whose ticket is a minute old gets a new one.
fn renew_tickets(args: &SocketArgs, hs: &mut Slots) {
    let now = (args.clock)();
    for (_, o) in hs.endpoint.iter_mut() {
        let r = &mut o.value;
        if renewal_due(r.ticket_at, now)
            && let Some(ticket) = hs.tickets.mint(&r.holder, now)
        {
            r.ticket_at = now;
            r.player.tell(PlayerMsg::System(ticket));
        }
    }
}

/// A datagram from a connected player's address, through its inlet: its inputs to its
/// world's queue, its payload left for its session (waking the player actor only when the
/// payload asks for it).
fn route_datagram(args: &SocketArgs, route: &mut Route, datagram: &mut [u8], now: Duration, arrived: Instant) {
    let m = &args.metrics;
    let mailbox = &route.player.mailbox;
    let len = datagram.len() as u64;
    let queue = route.inputs.get(mailbox).filter(|_| mailbox.inputs_open());
    let round = queue.map_or(0, InputQueue::round);
    let (frame, fresh, wake) = match route.inlet.receive(now, round, datagram) {
        Arrived::Dropped(why) => {
            m.record_player_drop(why);
            m.record_received(ReceivedKind::Rejected, len);
            return;
        }
        Arrived::KeepAlive => {
            mailbox.heard(now, len);
            m.record_received(ReceivedKind::Control, len);
            return;
        }
        Arrived::Disconnected => {
            mailbox.heard(now, len);
            m.record_received(ReceivedKind::Control, len);
            route.player.tell(PlayerMsg::PeerGone);
            return;
        }
        Arrived::Unreadable { why, frame, close } => {
            mailbox.heard(now, len);
            m.record_player_drop(why);
            m.record_received(ReceivedKind::Input, len);
            if close {
                route.player.tell(PlayerMsg::close(SessionEnd::Malformed));
            }
            let Some(frame) = frame else { return };
            (frame, FreshInputs::default(), false)
        }
        Arrived::Payload { frame, inputs, wake } => {
            mailbox.heard(now, len);
            m.record_received(ReceivedKind::Input, len);
            (frame, inputs, wake)
        }
    };
    let id = mailbox.id();
    let (mut dropped, mut landed) = (0, None);
    for i in fresh.as_slice() {
        match queue.and_then(|q| q.push(ClientInput::new(id, i.seq, i.bytes, i.view, arrived))) {
            Some(r) => landed = Some((r, fresh.as_slice().len() as u32)),
            None => dropped += 1,
        }
    }
    match mailbox.leave(now, arrived, frame, args.player_queue, wake) {
        Left::Queued(true) => {
            m.record_delivery(DeliveryPath::Woke);
            route.player.tell(PlayerMsg::Frames);
        }
        Left::Queued(false) => m.record_delivery(DeliveryPath::Left),
        Left::Full => m.record_drop(DatagramDrop::QueueFull, 1),
    }
    if let Some((r, n)) = landed {
        route.inlet.inputs_landed(r, n);
    }
    m.record_inputs_dropped(dropped + route.inlet.take_refused_inputs());
}
