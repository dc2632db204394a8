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
use super::socket::SocketCtl;
use super::world::{PlayerId, Relevancy, WorldMsg};
use crate::protocol::input::{InputDedup, read_input_packet};
use crate::protocol::netcode::packet::Packet;
use crate::protocol::netcode::server::Connection;
use crate::protocol::netcode::{DisconnectReason, MAX_PAYLOAD_BYTES};
use crate::protocol::reliability::{Endpoint, EndpointConfig};
use crate::protocol::session::{CONTROL_FRAME, Control, SessionParams, answer_hello};
use crate::protocol::snapshot::{Interest, Schema, SenderConfig, SnapshotSender, WorldSnapshot};
use crate::transport::udp::UdpTx;

/// Messages to a player actor.
#[derive(Debug)]
pub enum PlayerMsg {
    /// A datagram from this player's address.
    Datagram(Bytes, Instant),
    /// This tick's world snapshot.
    Snapshot(Arc<WorldSnapshot>),
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

/// A player actor's state.
pub struct PlayerState {
    args: PlayerArgs,
    id: PlayerId,
    endpoint: Endpoint,
    sender: SnapshotSender,
    dedup: InputDedup,
    interest: Vec<Interest>,
    snapshot_buf: Vec<u8>,
    welcomed: bool,
    rtt_us: u64,
    reason: DisconnectReason,
}

/// The player actor.
#[derive(Debug, Default)]
pub struct PlayerActor;

impl PlayerState {
    fn addr(&self) -> SocketAddr {
        self.args.connection.addr()
    }

    fn send_payload(&mut self, now: Duration, payload: &[u8]) {
        let mut tx = UdpTx::new(&self.args.socket);
        let _ = self.args.connection.send_payload(now, payload, &mut tx);
        self.count(&tx);
    }

    fn count(&self, tx: &UdpTx<'_>) {
        let m = &self.args.metrics;
        m.packets_sent.fetch_add(tx.sent, Ordering::Relaxed);
        m.bytes_sent.fetch_add(tx.bytes, Ordering::Relaxed);
        m.dropped.fetch_add(tx.dropped, Ordering::Relaxed);
    }

    fn on_datagram(&mut self, mut bytes: Vec<u8>, arrived: Instant) -> Result<bool, ActorProcessingErr> {
        let now = (self.args.clock)();
        let m = &self.args.metrics;
        m.packets_received.fetch_add(1, Ordering::Relaxed);
        m.bytes_received.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let payload = match self.args.connection.receive(now, &mut bytes) {
            Ok(Packet::Payload(p)) => p.to_vec(),
            Ok(Packet::Disconnect) => {
                self.reason = DisconnectReason::ByPeer;
                return Ok(false);
            }
            Ok(_) | Err(_) => return Ok(true),
        };
        if payload.first() == Some(&CONTROL_FRAME) {
            if let Ok(Control::Hello { protocol_version }) = Control::decode(&payload) {
                let answer = answer_hello(protocol_version, self.args.session);
                let mut b = [0u8; 16];
                let n = answer.encode(&mut b);
                self.send_payload(now, &b[..n]);
                self.welcomed = matches!(answer, Control::Welcome(_));
            }
            return Ok(true);
        }
        let Ok(Some(state)) = self.endpoint.receive(now, &payload) else { return Ok(true) };
        let Ok(input) = read_input_packet(state) else { return Ok(true) };
        if let Some(t) = input.ack_tick {
            self.sender.ack(t);
        }
        for (_, i) in self.dedup.fresh(&input) {
            self.args.world.cast(WorldMsg::Input(self.id, i.to_vec(), arrived))?;
        }
        Ok(true)
    }

    fn on_snapshot(&mut self, world: &Arc<WorldSnapshot>) {
        if !self.welcomed || !world.tick().is_multiple_of(self.args.snapshot_every.max(1)) {
            return;
        }
        let now = (self.args.clock)();
        self.args.relevancy.interest(world, self.id, &mut self.interest);
        let room = self.endpoint.state_room().min(MAX_PAYLOAD_BYTES - 64);
        self.snapshot_buf.resize(room, 0);
        let Ok(stats) = self.sender.encode(world, &self.interest, &mut self.snapshot_buf) else { return };
        let m = self.args.metrics.clone();
        m.snapshots.fetch_add(1, Ordering::Relaxed);
        m.snapshot_bytes.fetch_add(stats.bytes as u64, Ordering::Relaxed);
        if stats.baseline.is_none() {
            m.full_snapshots.fetch_add(1, Ordering::Relaxed);
        }
        let mut packet = [0u8; MAX_PAYLOAD_BYTES];
        let n = self.endpoint.build_packet(now, Some(&self.snapshot_buf[..stats.bytes]), &mut packet);
        self.send_payload(now, &packet[..n]);
        let rtt = self.endpoint.link().rtt().as_micros() as u64;
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
        Ok(PlayerState {
            endpoint: Endpoint::new(EndpointConfig::default()),
            sender: SnapshotSender::new(args.schema.clone(), SenderConfig::default()),
            dedup: InputDedup::default(),
            interest: Vec::new(),
            snapshot_buf: Vec::with_capacity(MAX_PAYLOAD_BYTES),
            welcomed: false,
            rtt_us: 0,
            reason: DisconnectReason::Local,
            id,
            args,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<PlayerMsg>,
        msg: PlayerMsg,
        s: &mut PlayerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PlayerMsg::Datagram(bytes, at) => {
                s.args.inflight.fetch_sub(1, Ordering::Relaxed);
                if !s.on_datagram(bytes.to_vec(), at)? {
                    myself.stop(Some("client disconnected".into()));
                }
            }
            PlayerMsg::Snapshot(world) => s.on_snapshot(&world),
            PlayerMsg::Message(data, reliable) => {
                let queued = if reliable { s.endpoint.send_reliable(data) } else { s.endpoint.send_event(data) };
                if let Err(e) = queued {
                    // A client that stops acknowledging fills its queue: it is cut off rather
                    // than allowed to grow the server's memory.
                    if reliable {
                        tracing::warn!(player = s.id, error = %e, "reliable queue full; disconnecting");
                        myself.send_message(PlayerMsg::Disconnect)?;
                    }
                }
            }
            PlayerMsg::Heartbeat => {
                let now = (s.args.clock)();
                let mut tx = UdpTx::new(&s.args.socket);
                let timed_out = s.args.connection.update(now, &mut tx);
                s.count(&tx);
                if let Some(reason) = timed_out {
                    s.reason = reason;
                    myself.stop(Some("timed out".into()));
                }
            }
            PlayerMsg::Disconnect => {
                let now = (s.args.clock)();
                let mut tx = UdpTx::new(&s.args.socket);
                s.args.connection.disconnect(now, &mut tx);
                s.count(&tx);
                s.reason = DisconnectReason::Local;
                myself.stop(Some("server disconnected it".into()));
            }
        }
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<PlayerMsg>, s: &mut PlayerState) -> Result<(), ActorProcessingErr> {
        let m = &s.args.metrics;
        m.players.fetch_sub(1, Ordering::Relaxed);
        m.disconnects.fetch_add(1, Ordering::Relaxed);
        m.rtt_sum_us.fetch_sub(s.rtt_us, Ordering::Relaxed);
        tracing::debug!(player = s.id, addr = %s.addr(), reason = s.reason.label(), "player left");
        let _ = s.args.world.cast(WorldMsg::Leave(s.id));
        let _ = s.args.broadcaster.cast(BroadcastMsg::Remove(s.id));
        let _ = s.args.socket_ctl.send(SocketCtl::Release {
            addr: s.addr(),
            client_id: s.args.connection.client_id(),
            slot: s.id,
        });
        Ok(())
    }
}
