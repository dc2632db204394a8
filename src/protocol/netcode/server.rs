//! The server side: a stateless challenge, per-client connections, and a slot table.
//!
//! [`Handshake`] answers connection requests and responses. Before an address has answered a
//! challenge the server keeps only what the standard requires and only for holders of an
//! authentic connect token: an entry in a fixed-capacity table of pending encryption
//! mappings and one in the fixed-size [`TokenHistory`]. The challenge token itself is sealed
//! with a key made at start-up, so nothing else is stored.
//!
//! [`Connection`] is the state of one connected client (keys, sequence, replay window,
//! timers). [`Server`] puts both together with a slot table for single-threaded use; the
//! actor server can instead keep the handshake in its socket actor and move each
//! `Connection` into its own player actor.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::crypto::{self, Key};
use super::limits::{Rate, RateLimiter, TokenBucket, TokenHistory};
use super::packet::{self, Allowed, Packet, PacketKind};
use super::replay::ReplayWindow;
use super::slots::SlotTable;
use super::token::PrivateConnectToken;
use super::wire::{Reader, Writer};
use super::{
    CHALLENGE_TOKEN_BYTES, DisconnectReason, DropCounts, DropReason, MAC_BYTES, MAX_PAYLOAD_BYTES, PACKET_SEND_RATE_HZ,
    REDUNDANT_DISCONNECT_PACKETS, SendError, Transmit, USER_DATA_BYTES,
};

/// Sequences of handshake packets (challenge, denied) have the top bit set, so they can never
/// equal the sequence of a packet of the connection that later uses the same key.
const HANDSHAKE_SEQUENCE_BIT: u64 = 1 << 63;
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(1000 / PACKET_SEND_RATE_HZ as u64);

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The game's protocol id.
    pub protocol_id: u64,
    /// The key shared with the backend that mints connect tokens.
    pub private_key: Key,
    /// This server's public addresses: a token must name one of them.
    pub public_addresses: Vec<SocketAddr>,
    /// Client slots (any number; the standard's reference stops at 256).
    pub max_clients: usize,
    /// Limit for handshake packets from one address.
    pub handshake_rate_per_address: Rate,
    /// Limit for handshake packets from all addresses together (spoofed floods).
    pub handshake_rate_total: Rate,
    /// Limit for packets from one connected client.
    pub connection_rate: Rate,
    /// Addresses the per-address rate table can tell apart at once.
    pub rate_table_capacity: usize,
}

impl ServerConfig {
    /// Defaults for everything but identity and keys.
    pub fn new(protocol_id: u64, private_key: Key, public_addresses: Vec<SocketAddr>, max_clients: usize) -> Self {
        Self {
            protocol_id,
            private_key,
            public_addresses,
            max_clients,
            handshake_rate_per_address: Rate { per_second: 30.0, burst: 60.0 },
            handshake_rate_total: Rate { per_second: 20_000.0, burst: 20_000.0 },
            connection_rate: Rate { per_second: 1_000.0, burst: 2_000.0 },
            rate_table_capacity: 16_384,
        }
    }
}

/// What the rest of the server knows about its slots, as the handshake needs it.
pub trait Occupancy {
    /// A client is connected from `addr`.
    fn addr_connected(&self, addr: &SocketAddr) -> bool;
    /// A client with `client_id` is connected.
    fn id_connected(&self, client_id: u64) -> bool;
    /// No slot is free.
    fn is_full(&self) -> bool;
}

#[derive(Debug, Clone)]
struct Pending {
    send_key: Key,
    recv_key: Key,
    expire_at: Duration,
    timeout_seconds: i32,
    mac: [u8; MAC_BYTES],
}

/// A client that answered its challenge: everything needed to make its [`Connection`].
#[derive(Clone)]
pub struct Accepted {
    /// The backend's id of the client.
    pub client_id: u64,
    /// Where its packets come from.
    pub addr: SocketAddr,
    /// The token's user data.
    pub user_data: [u8; USER_DATA_BYTES],
    /// Key for packets to the client.
    pub send_key: Key,
    /// Key for packets from the client.
    pub recv_key: Key,
    /// Connection timeout (negative: none).
    pub timeout_seconds: i32,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted").field("client_id", &self.client_id).field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// The connection handshake: requests in, challenges out; responses in, clients accepted.
#[derive(Debug)]
pub struct Handshake {
    protocol_id: u64,
    private_key: Key,
    public_addresses: Vec<SocketAddr>,
    challenge_key: Key,
    challenge_sequence: u64,
    send_sequence: u64,
    pending: HashMap<SocketAddr, Pending>,
    pending_capacity: usize,
    history: TokenHistory,
    last_purge: Duration,
}

impl Handshake {
    /// A handshake for `max_clients` slots, sealing challenges with `challenge_key` (make it
    /// with [`generate_key`](super::generate_key) at start-up).
    pub fn new(
        protocol_id: u64,
        private_key: Key,
        public_addresses: Vec<SocketAddr>,
        max_clients: usize,
        challenge_key: Key,
    ) -> Self {
        let pending_capacity = (max_clients * 4).max(256);
        Self {
            protocol_id,
            private_key,
            public_addresses,
            challenge_key,
            challenge_sequence: 0,
            send_sequence: 0,
            // Grows with use up to `pending_capacity` (a flood may never come).
            pending: HashMap::new(),
            pending_capacity,
            history: TokenHistory::new((max_clients * 8).max(4096)),
            last_purge: Duration::ZERO,
        }
    }

    /// Addresses in the middle of a handshake.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    fn send(&mut self, to: SocketAddr, packet: &Packet<'_>, key: &Key, tx: &mut impl Transmit) {
        let mut buf = [0u8; packet::MAX_PACKET_BYTES];
        let seq = HANDSHAKE_SEQUENCE_BIT | self.send_sequence;
        self.send_sequence += 1;
        if let Some(n) = packet::write_packet(&mut buf, packet, seq, self.protocol_id, key) {
            tx.send(to, &buf[..n]);
        }
    }

    fn purge(&mut self, now: Duration) {
        if now.saturating_sub(self.last_purge) >= Duration::from_secs(1) || self.pending.len() >= self.pending_capacity
        {
            self.pending.retain(|_, p| p.expire_at > now);
            self.last_purge = now;
        }
    }

    /// Handles a connection request: sends a challenge (or, when full, a denied packet).
    ///
    /// # Errors
    /// The reason the request was dropped; [`DropReason::ServerFull`] after sending denied.
    pub fn on_request(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &[u8],
        slots: &impl Occupancy,
        tx: &mut impl Transmit,
    ) -> Result<(), DropReason> {
        let req = packet::read_request(buf, self.protocol_id)?;
        let now_secs = now.as_secs();
        if req.expire_timestamp <= now_secs {
            return Err(DropReason::TokenExpired);
        }
        let mut sealed = req.private_data;
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(&sealed[sealed.len() - MAC_BYTES..]);
        let token = PrivateConnectToken::open(
            &mut sealed,
            self.protocol_id,
            req.expire_timestamp,
            &req.nonce,
            &self.private_key,
        )
        .map_err(|_| DropReason::TokenInvalid)?;
        if !token.server_addresses.as_slice().iter().any(|a| self.public_addresses.contains(a)) {
            return Err(DropReason::NotForThisServer);
        }
        if slots.addr_connected(&from) {
            return Err(DropReason::AddressInUse);
        }
        if slots.id_connected(token.client_id) {
            return Err(DropReason::ClientIdInUse);
        }
        if !self.history.record(&mac, from, req.expire_timestamp, now_secs) {
            return Err(DropReason::TokenReused);
        }
        if slots.is_full() {
            self.send(from, &Packet::Denied, &token.server_to_client_key, tx);
            return Err(DropReason::ServerFull);
        }
        self.purge(now);
        let token_expiry = Duration::from_secs(req.expire_timestamp);
        let expire_at = match u64::try_from(token.timeout_seconds) {
            Ok(t) => (now + Duration::from_secs(t)).min(token_expiry),
            Err(_) => token_expiry,
        };
        if !self.pending.contains_key(&from) && self.pending.len() >= self.pending_capacity {
            return Err(DropReason::HandshakeTableFull);
        }
        self.pending.insert(
            from,
            Pending {
                send_key: token.server_to_client_key,
                recv_key: token.client_to_server_key,
                expire_at,
                timeout_seconds: token.timeout_seconds,
                mac,
            },
        );

        let mut challenge = [0u8; CHALLENGE_TOKEN_BYTES];
        let plain = CHALLENGE_TOKEN_BYTES - MAC_BYTES;
        let mut w = Writer::new(&mut challenge);
        w.u64(token.client_id)
            .and_then(|()| w.bytes(&token.user_data))
            .and_then(|()| w.pad_to(plain))
            .ok_or(DropReason::BadLength)?;
        let token_sequence = self.challenge_sequence;
        self.challenge_sequence += 1;
        crypto::seal(&mut challenge, plain, token_sequence, &self.challenge_key, &[]).ok_or(DropReason::BadLength)?;
        self.send(from, &Packet::Challenge { token_sequence, token: &challenge }, &token.server_to_client_key, tx);
        Ok(())
    }

    /// Handles a challenge response: on success the client may take a slot.
    ///
    /// # Errors
    /// The reason the response was dropped; [`DropReason::ServerFull`] after sending denied.
    pub fn on_response(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &mut [u8],
        slots: &impl Occupancy,
        tx: &mut impl Transmit,
    ) -> Result<Accepted, DropReason> {
        let pending = match self.pending.get(&from) {
            Some(p) if p.expire_at > now => p.clone(),
            Some(_) => {
                self.pending.remove(&from);
                return Err(DropReason::UnknownAddress);
            }
            None => return Err(DropReason::UnknownAddress),
        };
        let (_, packet) =
            packet::open_packet(buf, Allowed::of(&[PacketKind::Response]), self.protocol_id, &pending.recv_key, None)?;
        let Packet::Response { token_sequence, token } = packet else {
            return Err(DropReason::NotAllowed);
        };
        let mut challenge = *token;
        let len = crypto::open(&mut challenge, token_sequence, &self.challenge_key, &[])
            .ok_or(DropReason::ChallengeInvalid)?;
        let mut r = Reader::new(&challenge[..len]);
        let (client_id, user_data) =
            (|| Some((r.u64()?, r.array::<USER_DATA_BYTES>()?)))().ok_or(DropReason::ChallengeInvalid)?;
        if slots.addr_connected(&from) {
            return Err(DropReason::AddressInUse);
        }
        if slots.id_connected(client_id) {
            return Err(DropReason::ClientIdInUse);
        }
        if slots.is_full() {
            self.send(from, &Packet::Denied, &pending.send_key, tx);
            return Err(DropReason::ServerFull);
        }
        self.pending.remove(&from);
        self.history.establish(&pending.mac);
        Ok(Accepted {
            client_id,
            addr: from,
            user_data,
            send_key: pending.send_key,
            recv_key: pending.recv_key,
            timeout_seconds: pending.timeout_seconds,
        })
    }
}

/// One connected client, as the server sees it.
#[derive(Debug, Clone)]
pub struct Connection {
    client_id: u64,
    addr: SocketAddr,
    client_index: u32,
    max_clients: u32,
    protocol_id: u64,
    send_key: Key,
    recv_key: Key,
    user_data: [u8; USER_DATA_BYTES],
    sequence: u64,
    replay: ReplayWindow,
    last_send: Duration,
    last_recv: Duration,
    timeout: Option<Duration>,
    confirmed: bool,
    rate: Rate,
    bucket: TokenBucket,
}

impl Connection {
    /// A connection in slot `client_index`, as accepted at `now`; sends nothing yet.
    pub fn new(
        accepted: &Accepted,
        client_index: u32,
        max_clients: u32,
        protocol_id: u64,
        rate: Rate,
        now: Duration,
    ) -> Self {
        Self {
            client_id: accepted.client_id,
            addr: accepted.addr,
            client_index,
            max_clients,
            protocol_id,
            send_key: accepted.send_key,
            recv_key: accepted.recv_key,
            user_data: accepted.user_data,
            sequence: 0,
            replay: ReplayWindow::new(),
            last_send: now,
            last_recv: now,
            timeout: u64::try_from(accepted.timeout_seconds).ok().map(Duration::from_secs),
            confirmed: false,
            rate,
            bucket: TokenBucket::full(rate, now),
        }
    }

    /// The backend's id of this client.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The client's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client's slot.
    pub fn client_index(&self) -> u32 {
        self.client_index
    }

    /// The token's user data.
    pub fn user_data(&self) -> &[u8; USER_DATA_BYTES] {
        &self.user_data
    }

    /// Whether the client has shown it knows it is connected (sent a keep-alive or payload).
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// When the last authentic packet arrived.
    pub fn last_received(&self) -> Duration {
        self.last_recv
    }

    fn write(&mut self, now: Duration, packet: &Packet<'_>, tx: &mut impl Transmit) {
        let mut buf = [0u8; packet::MAX_PACKET_BYTES];
        if let Some(n) = packet::write_packet(&mut buf, packet, self.sequence, self.protocol_id, &self.send_key) {
            self.sequence += 1;
            self.last_send = now;
            tx.send(self.addr, &buf[..n]);
        }
    }

    /// Sends a keep-alive now (the first one tells the client it is connected).
    pub fn keep_alive(&mut self, now: Duration, tx: &mut impl Transmit) {
        let ka = Packet::KeepAlive { client_index: self.client_index, max_clients: self.max_clients };
        self.write(now, &ka, tx);
    }

    /// Authenticates and reads a packet from this client (keep-alive, payload or disconnect).
    ///
    /// # Errors
    /// The reason to drop it, including [`DropReason::RateLimited`].
    pub fn receive<'a>(&mut self, now: Duration, buf: &'a mut [u8]) -> Result<Packet<'a>, DropReason> {
        if !self.bucket.take(self.rate, now) {
            return Err(DropReason::RateLimited);
        }
        let allowed = Allowed::of(&[PacketKind::KeepAlive, PacketKind::Payload, PacketKind::Disconnect]);
        let (_, packet) = packet::open_packet(buf, allowed, self.protocol_id, &self.recv_key, Some(&mut self.replay))?;
        self.last_recv = now;
        self.confirmed = true;
        Ok(packet)
    }

    /// Sends a payload of 1 to 1200 bytes. Until the client has confirmed the connection each
    /// payload is preceded by a keep-alive, so the client learns its slot first.
    ///
    /// # Errors
    /// [`SendError::PayloadSize`] for an empty or oversized payload.
    pub fn send_payload(&mut self, now: Duration, data: &[u8], tx: &mut impl Transmit) -> Result<(), SendError> {
        if data.is_empty() || data.len() > MAX_PAYLOAD_BYTES {
            return Err(SendError::PayloadSize(data.len()));
        }
        if !self.confirmed {
            self.keep_alive(now, tx);
        }
        self.write(now, &Packet::Payload(data), tx);
        Ok(())
    }

    /// Sends a keep-alive when nothing was sent for 100 ms; reports a timeout.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit) -> Option<DisconnectReason> {
        if self.timeout.is_some_and(|t| now.saturating_sub(self.last_recv) >= t) {
            return Some(DisconnectReason::TimedOut);
        }
        if now.saturating_sub(self.last_send) >= KEEP_ALIVE_INTERVAL {
            self.keep_alive(now, tx);
        }
        None
    }

    /// A copy that can still say goodbye if this connection's owner dies: its packet
    /// sequence starts at 2^62, far above anything the live connection will use, so the
    /// two never share a nonce.
    pub fn farewell_copy(&self) -> Self {
        Self { sequence: self.sequence.max(1 << 62), ..self.clone() }
    }

    /// Sends the redundant disconnect packets.
    pub fn disconnect(&mut self, now: Duration, tx: &mut impl Transmit) {
        for _ in 0..REDUNDANT_DISCONNECT_PACKETS {
            self.write(now, &Packet::Disconnect, tx);
        }
    }
}

/// What [`Server::process`] made of a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<'a> {
    /// A payload from a connected client.
    Payload {
        /// The client's slot.
        client_index: usize,
        /// The payload, decrypted in the receive buffer.
        data: &'a [u8],
    },
    /// A client completed the handshake and took a slot.
    Connected {
        /// Its slot.
        client_index: usize,
        /// Its id.
        client_id: u64,
    },
    /// A client said it is leaving.
    Disconnected(Disconnected),
    /// A valid packet that needs nothing from the caller (a request, a keep-alive).
    Handled,
    /// The packet was dropped; the reason is also counted in [`Server::drops`].
    Dropped(DropReason),
}

/// A client left a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnected {
    /// The slot it had.
    pub client_index: usize,
    /// Its id.
    pub client_id: u64,
    /// Why.
    pub reason: DisconnectReason,
}

/// A complete netcode server: handshake, slots, rate limits and drop counts.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    handshake: Handshake,
    slots: SlotTable<Connection>,
    limiter: RateLimiter,
    total: TokenBucket,
    drops: DropCounts,
}

impl Server {
    /// A server whose challenge key comes from the operating system.
    ///
    /// # Errors
    /// When the OS has no randomness.
    pub fn new(config: ServerConfig, now: Duration) -> Result<Self, getrandom::Error> {
        Ok(Self::with_challenge_key(config, crypto::generate_key()?, now))
    }

    /// A server with a given challenge key (deterministic tests).
    pub fn with_challenge_key(config: ServerConfig, challenge_key: Key, now: Duration) -> Self {
        let handshake = Handshake::new(
            config.protocol_id,
            config.private_key,
            config.public_addresses.clone(),
            config.max_clients,
            challenge_key,
        );
        let n = config.max_clients;
        Self {
            handshake,
            slots: SlotTable::new(n),
            limiter: RateLimiter::new(config.handshake_rate_per_address, config.rate_table_capacity),
            total: TokenBucket::full(config.handshake_rate_total, now),
            drops: DropCounts::default(),
            config,
        }
    }

    /// Handles one datagram from `from`.
    pub fn process<'a>(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &'a mut [u8],
        tx: &mut impl Transmit,
    ) -> Received<'a> {
        match self.process_inner(now, from, buf, tx) {
            Ok(r) => r,
            Err(reason) => {
                self.drops.record(reason);
                Received::Dropped(reason)
            }
        }
    }

    fn process_inner<'a>(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &'a mut [u8],
        tx: &mut impl Transmit,
    ) -> Result<Received<'a>, DropReason> {
        if let Some(index) = self.slots.slot_of(&from) {
            let conn = &mut self.slots.get_mut(index).ok_or(DropReason::UnknownAddress)?.value;
            return match conn.receive(now, buf)? {
                Packet::Payload(data) => Ok(Received::Payload { client_index: index, data }),
                Packet::Disconnect => {
                    let client_id = conn.client_id;
                    self.slots.remove(index);
                    Ok(Received::Disconnected(Disconnected {
                        client_index: index,
                        client_id,
                        reason: DisconnectReason::ByPeer,
                    }))
                }
                _ => Ok(Received::Handled),
            };
        }
        let kind = packet::read_header(buf)?.kind;
        if !matches!(kind, PacketKind::Request | PacketKind::Response) {
            return Err(DropReason::UnknownAddress);
        }
        if !self.limiter.allow(from, now) || !self.total.take(self.config.handshake_rate_total, now) {
            return Err(DropReason::RateLimited);
        }
        if kind == PacketKind::Request {
            self.handshake.on_request(now, from, buf, &self.slots, tx)?;
            return Ok(Received::Handled);
        }
        let accepted = self.handshake.on_response(now, from, buf, &self.slots, tx)?;
        let index = self.slots.reserve().ok_or(DropReason::ServerFull)?;
        let mut conn = Connection::new(
            &accepted,
            index as u32,
            self.config.max_clients as u32,
            self.config.protocol_id,
            self.config.connection_rate,
            now,
        );
        conn.keep_alive(now, tx);
        self.slots.fill(index, accepted.addr, accepted.client_id, conn);
        Ok(Received::Connected { client_index: index, client_id: accepted.client_id })
    }

    /// Sends keep-alives that are due and disconnects clients that timed out.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit, out: &mut Vec<Disconnected>) {
        for index in 0..self.slots.capacity() {
            let Some(conn) = self.slots.get_mut(index).map(|o| &mut o.value) else { continue };
            if let Some(reason) = conn.update(now, tx) {
                let client_id = conn.client_id;
                self.slots.remove(index);
                out.push(Disconnected { client_index: index, client_id, reason });
            }
        }
    }

    /// Sends a payload to the client in slot `client_index`.
    ///
    /// # Errors
    /// No such client, or a bad payload size.
    pub fn send_payload(
        &mut self,
        now: Duration,
        client_index: usize,
        data: &[u8],
        tx: &mut impl Transmit,
    ) -> Result<(), SendError> {
        let conn = &mut self.slots.get_mut(client_index).ok_or(SendError::NotConnected)?.value;
        conn.send_payload(now, data, tx)
    }

    /// Disconnects one client, sending it the redundant disconnect packets.
    pub fn disconnect(&mut self, now: Duration, client_index: usize, tx: &mut impl Transmit) -> Option<Disconnected> {
        let mut conn = self.slots.remove(client_index)?.value;
        conn.disconnect(now, tx);
        Some(Disconnected { client_index, client_id: conn.client_id, reason: DisconnectReason::Local })
    }

    /// Disconnects every client.
    pub fn disconnect_all(&mut self, now: Duration, tx: &mut impl Transmit) -> Vec<Disconnected> {
        (0..self.slots.capacity()).filter_map(|i| self.disconnect(now, i, tx)).collect()
    }

    /// The connection in a slot.
    pub fn connection(&self, client_index: usize) -> Option<&Connection> {
        self.slots.get(client_index).map(|o| &o.value)
    }

    /// The slot of a connected client id.
    pub fn client_index(&self, client_id: u64) -> Option<usize> {
        self.slots.slot_of_id(client_id)
    }

    /// Connected clients.
    pub fn connected_clients(&self) -> usize {
        self.slots.len()
    }

    /// Slot count.
    pub fn max_clients(&self) -> usize {
        self.config.max_clients
    }

    /// Addresses in the middle of a handshake.
    pub fn pending_handshakes(&self) -> usize {
        self.handshake.pending_len()
    }

    /// Dropped packets by reason.
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }
}
