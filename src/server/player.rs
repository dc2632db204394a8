//! The player (connection) actor: one per connected client. It owns the client's netcode
//! connection, reliability endpoint and snapshot history, takes its datagrams from the
//! socket, and encodes its snapshot from each tick's shared world snapshot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::broadcaster::BroadcastMsg;
use super::metrics::ServerMetrics;
use super::session::{Incoming, PlayerSession};
use super::socket::SocketCtl;
use super::world::{AppliedInputs, Relevancy, WorldMsg};
use crate::protocol::netcode::DisconnectReason;
use crate::protocol::netcode::server::Connection;
use crate::protocol::session::SessionParams;
use crate::protocol::snapshot::{Schema, WorldSnapshot};
use crate::transport::udp::UdpTx;

/// Messages to a player actor.
#[derive(Debug)]
pub enum PlayerMsg {
    /// A datagram from this player's address.
    Datagram(Bytes, Instant),
    /// This tick's world snapshot and the inputs it applied.
    Snapshot(Arc<WorldSnapshot>, AppliedInputs),
    /// Time to check timeouts and send keep-alives.
    Heartbeat,
    /// End the connection, telling the client.
    Disconnect,
    /// A message from the world: (bytes, reliable).
    Message(Bytes, bool),
}

/// What a player actor starts with.
pub struct PlayerArgs {
    /// The netcode connection the handshake produced.
    pub connection: Connection,
    /// The server socket.
    pub socket: Arc<UdpSocket>,
    /// The replicated kinds.
    pub schema: Arc<Schema>,
    /// Who sees what.
    pub relevancy: Arc<dyn Relevancy>,
    /// The world actor.
    pub world: ActorRef<WorldMsg>,
    /// The broadcaster, to subscribe to snapshots.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// The socket actor's control channel, for releasing the address on exit.
    pub socket_ctl: tokio::sync::mpsc::UnboundedSender<SocketCtl>,
    /// Datagrams queued for this actor (the socket drops beyond its limit).
    pub inflight: Arc<AtomicUsize>,
    /// Session parameters to announce.
    pub session: SessionParams,
    /// Send a snapshot every this many ticks.
    pub snapshot_every: u32,
    /// Server figures.
    pub metrics: Arc<ServerMetrics>,
    /// The server's clock (Unix time), as the netcode layer needs.
    pub clock: fn() -> Duration,
}

/// A player actor's state: the sans-IO session plus what the actor needs to move bytes.
pub struct PlayerState {
    args: PlayerShell,
    session: PlayerSession,
    rtt_us: u64,
    reason: DisconnectReason,
}

/// The parts of [`PlayerArgs`] the actor keeps once the session owns the connection.
struct PlayerShell {
    socket: Arc<UdpSocket>,
    world: ActorRef<WorldMsg>,
    broadcaster: ActorRef<BroadcastMsg>,
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
    fn count(&self, tx: &UdpTx<'_>) {
        let m = &self.args.metrics;
        m.packets_sent.fetch_add(tx.sent, Ordering::Relaxed);
        m.bytes_sent.fetch_add(tx.bytes, Ordering::Relaxed);
        m.dropped.fetch_add(tx.dropped, Ordering::Relaxed);
    }

    fn on_snapshot(&mut self, world: &Arc<WorldSnapshot>, applied: &AppliedInputs) {
        let now = (self.args.clock)();
        let socket = self.args.socket.clone();
        let mut tx = UdpTx::new(&socket);
        let id = self.session.id();
        let mine = applied.binary_search_by_key(&id, |(p, _)| *p).ok().map(|i| applied[i].1);
        let stats = self.session.on_snapshot(now, world, mine, &mut tx);
        self.count(&tx);
        let Some(stats) = stats else { return };
        let m = &self.args.metrics;
        m.snapshots.fetch_add(1, Ordering::Relaxed);
        m.snapshot_bytes.fetch_add(stats.bytes as u64, Ordering::Relaxed);
        if stats.baseline.is_none() {
            m.full_snapshots.fetch_add(1, Ordering::Relaxed);
        }
        let rtt = self.session.endpoint().link().rtt().as_micros() as u64;
        if rtt != self.rtt_us {
            m.rtt_sum_us.fetch_add(rtt, Ordering::Relaxed);
            m.rtt_sum_us.fetch_sub(self.rtt_us, Ordering::Relaxed);
            self.rtt_us = rtt;
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
        let id = args.connection.client_index();
        myself.send_interval(Duration::from_millis(100), || PlayerMsg::Heartbeat);
        args.world.cast(WorldMsg::Join(id))?;
        args.broadcaster.cast(BroadcastMsg::Add(id, myself.clone()))?;
        args.metrics.players.fetch_add(1, Ordering::Relaxed);
        args.metrics.connects.fetch_add(1, Ordering::Relaxed);
        let shell = PlayerShell {
            addr: args.connection.addr(),
            client_id: args.connection.client_id(),
            socket: args.socket,
            world: args.world,
            broadcaster: args.broadcaster,
            socket_ctl: args.socket_ctl,
            inflight: args.inflight,
            metrics: args.metrics,
            clock: args.clock,
        };
        let session =
            PlayerSession::new(args.connection, args.schema, args.relevancy, args.session, args.snapshot_every);
        Ok(PlayerState { args: shell, session, rtt_us: 0, reason: DisconnectReason::Local })
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
        match msg {
            PlayerMsg::Datagram(bytes, at) => {
                s.args.inflight.fetch_sub(1, Ordering::Relaxed);
                s.args.metrics.packets_received.fetch_add(1, Ordering::Relaxed);
                s.args.metrics.bytes_received.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                let mut bytes = bytes.to_vec();
                match s.session.on_datagram(now, &mut bytes, &mut tx) {
                    Incoming::Inputs(inputs) => {
                        for (seq, i) in inputs {
                            s.args.world.cast(WorldMsg::Input(s.session.id(), seq, i, at))?;
                        }
                    }
                    Incoming::Disconnected => {
                        s.reason = DisconnectReason::ByPeer;
                        myself.stop(Some("client disconnected".into()));
                    }
                    Incoming::Nothing => {}
                }
            }
            PlayerMsg::Snapshot(world, applied) => s.on_snapshot(&world, &applied),
            PlayerMsg::Message(data, reliable) => {
                // A client that stops acknowledging fills its reliable queue: it is cut off
                // rather than allowed to grow the server's memory. An event that does not fit
                // is simply not sent.
                if let Some(e) = s.session.queue_message(data, reliable).err().filter(|_| reliable) {
                    tracing::warn!(player = s.session.id(), error = %e, "reliable queue full; disconnecting");
                    myself.send_message(PlayerMsg::Disconnect)?;
                }
            }
            PlayerMsg::Heartbeat => {
                if let Some(reason) = s.session.heartbeat(now, &mut tx) {
                    s.reason = reason;
                    myself.stop(Some("timed out".into()));
                }
            }
            PlayerMsg::Disconnect => {
                s.session.disconnect(now, &mut tx);
                s.reason = DisconnectReason::Local;
                myself.stop(Some("server disconnected it".into()));
            }
        }
        s.count(&tx);
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PlayerMsg>, s: &mut PlayerState) -> Result<(), ActorProcessingErr> {
        let m = &s.args.metrics;
        m.players.fetch_sub(1, Ordering::Relaxed);
        m.disconnects.fetch_add(1, Ordering::Relaxed);
        m.rtt_sum_us.fetch_sub(s.rtt_us, Ordering::Relaxed);
        let id = s.session.id();
        tracing::debug!(player = id, addr = %s.args.addr, reason = s.reason.label(), "player left");
        let _ = s.args.world.cast(WorldMsg::Leave(id));
        let _ = s.args.broadcaster.cast(BroadcastMsg::Remove(id));
        let _ = s.args.socket_ctl.send(SocketCtl::Release { addr: s.args.addr, client_id: s.args.client_id, slot: id });
        Ok(())
    }
}
