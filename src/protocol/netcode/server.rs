//! The server side: one sans-IO [`Endpoint`] and the [`Connection`]s it makes.
//!
//! [`Endpoint::handle`] takes `(now, from, datagram)` and says what it was: a datagram for the
//! connection in a slot ([`Handled::Route`]), a client that completed the handshake
//! ([`Handled::Connected`]), a handshake packet answered, or a drop with its reason. It owns
//! everything between the socket and the connections: the stateless challenge, the per-address
//! and total handshake rate limits, the pending table (capped per IP), the token history and
//! the slot table that routes each address to its connection. It is the only composition of
//! these in volley: the actor server's socket actor, the deterministic stepper, the fuzz
//! targets and the interop tests all drive it.
//!
//! What the endpoint keeps per slot is the caller's choice (`C`). The socket actor keeps a
//! route to the player actor that owns the [`Connection`]; the stepper keeps the player's whole
//! session; single-threaded users keep the `Connection` itself and get
//! [`Endpoint::process`], which also authenticates routed packets.
//!
//! Before an address has answered a challenge the endpoint keeps only what the standard
//! requires and only for holders of an authentic connect token: an entry in a fixed-capacity
//! table of pending encryption mappings and one in the fixed-size [`TokenHistory`]. The
//! challenge token itself is sealed with a key made at start-up, so nothing else is stored.
//!
//! # Tokens are good for one session
//! A connect token whose handshake completed is spent: a client that disconnects (or is
//! disconnected) and tries the same token again is dropped with
//! [`DropReason::TokenReused`], even from the same address. The netcode.io reference accepts
//! it again from the same address; volley does not, because the token's keys would then
//! encrypt a second session whose packet sequences start at zero again, reusing nonces under
//! the same key. A client reconnects with a fresh token from its backend.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::crypto::{self, Key};
use super::limits::{Rate, RateLimiter, TokenBucket, TokenHistory};
use super::packet::{self, Allowed, Packet, PacketKind};
use super::replay::ReplayWindow;
use super::slots::{Occupant, SlotTable};
use super::token::PrivateConnectToken;
use super::wire::{Reader, Writer};
use super::{
    CHALLENGE_TOKEN_BYTES, DisconnectReason, DropCounts, DropReason, MAC_BYTES, MAX_PAYLOAD_BYTES, PACKET_SEND_RATE_HZ,
    PayloadError, REDUNDANT_DISCONNECT_PACKETS, Transmit, USER_DATA_BYTES,
};

/// Sequences of handshake packets (challenge, denied) have the top bit set, so they can never
/// equal the sequence of a packet of the connection that later uses the same key.
const HANDSHAKE_SEQUENCE_BIT: u64 = 1 << 63;
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(1000 / PACKET_SEND_RATE_HZ as u64);

/// The endpoint's settings.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
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
    /// Pending handshakes (authentic tokens that have not answered their challenge) one IP
    /// address may hold at once, over all its ports, so one address cannot fill the table
    /// and lock everyone else out. Players behind one NAT share it; a handshake that
    /// completes frees its entry at once. When an IP holds its limit, a new request from it
    /// takes the place of that IP's oldest entry if that one has waited [`PENDING_GIVE_WAY`]
    /// (a handshake completes within a round trip: one pending that long is not answering);
    /// otherwise the request is refused (`TooManyPending`) and the client asks again. So a
    /// burst of players behind one NAT connects in rounds, and tokens that never answer
    /// cannot lock that IP's players out for longer than a second. Default: a sixteenth of
    /// the table (which holds four per slot, 256 at least), 16 at least.
    pub pending_per_ip: usize,
}

impl EndpointConfig {
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
            pending_per_ip: (pending_capacity(max_clients) / 16).max(16),
        }
    }
}

/// How long an IP's oldest pending handshake is kept from a new request of the same IP once
/// the IP holds [`EndpointConfig::pending_per_ip`] of them.
pub const PENDING_GIVE_WAY: Duration = Duration::from_secs(1);

/// The pending-handshake table's size for `max_clients` slots.
fn pending_capacity(max_clients: usize) -> usize {
    max_clients.saturating_mul(4).max(256)
}

/// What the rest of the server knows about its slots, as the handshake needs it.
pub trait Occupancy {
    /// A client is connected from `addr`.
    fn addr_connected(&self, addr: &SocketAddr) -> bool;
    /// The client id connected from `addr`, if any.
    fn client_at(&self, addr: &SocketAddr) -> Option<u64>;
    /// A client with `client_id` is connected (a new handshake of it replaces it).
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
/// Private: the [`Endpoint`] is its one user.
#[derive(Debug)]
struct Handshake {
    protocol_id: u64,
    private_key: Key,
    public_addresses: Vec<SocketAddr>,
    challenge_key: Key,
    challenge_sequence: u64,
    send_sequence: u64,
    pending: HashMap<SocketAddr, Pending>,
    pending_capacity: usize,
    /// Pending entries per IP address, oldest first with when each was made, and how many
    /// one may hold.
    per_ip: HashMap<IpAddr, VecDeque<(SocketAddr, Duration)>>,
    per_ip_limit: usize,
    /// Pending entries that gave way to a newer request of their IP.
    given_way: u64,
    history: TokenHistory,
    last_purge: Duration,
}

impl Handshake {
    /// A handshake for `config`, sealing challenges with `challenge_key`.
    fn new(config: &EndpointConfig, challenge_key: Key) -> Self {
        let max_clients = config.max_clients;
        let pending_capacity = pending_capacity(max_clients);
        Self {
            protocol_id: config.protocol_id,
            private_key: config.private_key,
            public_addresses: config.public_addresses.clone(),
            challenge_key,
            challenge_sequence: 0,
            send_sequence: 0,
            // Grows with use up to `pending_capacity` (a flood may never come).
            pending: HashMap::new(),
            pending_capacity,
            per_ip: HashMap::new(),
            per_ip_limit: config.pending_per_ip.max(1),
            given_way: 0,
            history: TokenHistory::new((max_clients * 8).max(4096)),
            last_purge: Duration::ZERO,
        }
    }

    /// Addresses in the middle of a handshake.
    fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Forgets the pending entry of `addr`, if any.
    fn forget(&mut self, addr: &SocketAddr) -> Option<Pending> {
        let p = self.pending.remove(addr)?;
        Self::uncount(&mut self.per_ip, addr);
        Some(p)
    }

    fn uncount(per_ip: &mut HashMap<IpAddr, VecDeque<(SocketAddr, Duration)>>, addr: &SocketAddr) {
        if let Some(q) = per_ip.get_mut(&addr.ip()) {
            if let Some(i) = q.iter().position(|(a, _)| a == addr) {
                q.remove(i);
            }
            if q.is_empty() {
                per_ip.remove(&addr.ip());
            }
        }
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
            let per_ip = &mut self.per_ip;
            self.pending.retain(|addr, p| {
                let keep = p.expire_at > now;
                if !keep {
                    Self::uncount(per_ip, addr);
                }
                keep
            });
            self.last_purge = now;
        }
    }

    /// Handles a connection request: sends a challenge (or, when full, a denied packet).
    ///
    /// # Errors
    /// The reason the request was dropped; [`DropReason::ServerFull`] after sending denied.
    fn on_request(
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
        // A client connected from this address may connect again from it (it resumes or
        // restarts); another may not.
        if slots.client_at(&from).is_some_and(|id| id != token.client_id) {
            return Err(DropReason::AddressInUse);
        }
        // A client id that is connected already goes on: a fresh token proves who the client
        // is (an address does not), and its completed handshake replaces the session that
        // lingers ([`NewConnection::replaces`]).
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
        let fresh = !self.pending.contains_key(&from);
        if fresh && self.pending.len() >= self.pending_capacity {
            return Err(DropReason::HandshakeTableFull);
        }
        if fresh {
            let q = self.per_ip.entry(from.ip()).or_default();
            if q.len() >= self.per_ip_limit {
                // The IP's oldest entry gives way if it has waited long enough (see
                // `EndpointConfig::pending_per_ip`).
                match q.front() {
                    Some(&(oldest, since)) if now.saturating_sub(since) >= PENDING_GIVE_WAY => {
                        q.pop_front();
                        self.pending.remove(&oldest);
                        self.given_way += 1;
                    }
                    _ => return Err(DropReason::TooManyPending),
                }
            }
            q.push_back((from, now));
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
    fn on_response(
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
                self.forget(&from);
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
        if slots.client_at(&from).is_some_and(|id| id != client_id) {
            return Err(DropReason::AddressInUse);
        }
        if slots.is_full() {
            self.send(from, &Packet::Denied, &pending.send_key, tx);
            return Err(DropReason::ServerFull);
        }
        self.forget(&from);
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

/// One connected client, as the server sees it: its [`ReceiveHalf`] (the client-to-server
/// key, replay window and packet budget) and its [`SendHalf`] (the server-to-client key and
/// sequence). A single-threaded owner keeps both here; the actor server keeps the receive half
/// beside the [`Endpoint`] in its socket actor and the send half in the player actor
/// ([`Connection::split`]), so an input is read without waiting for the player actor.
#[derive(Debug, Clone)]
pub struct Connection {
    rx: ReceiveHalf,
    tx: SendHalf,
}

/// The half of a [`Connection`] that reads what the client sends: authentication, the replay
/// window and the client's packet budget.
#[derive(Debug, Clone)]
pub struct ReceiveHalf {
    client_id: u64,
    addr: SocketAddr,
    client_index: u32,
    protocol_id: u64,
    recv_key: Key,
    replay: ReplayWindow,
    last_recv: Duration,
    confirmed: bool,
    rate: Rate,
    bucket: TokenBucket,
}

/// The half of a [`Connection`] that writes to the client: encryption, the packet sequence,
/// keep-alives and the timeout (which it judges from when the receive half last heard the
/// client, passed in).
#[derive(Debug, Clone)]
pub struct SendHalf {
    client_id: u64,
    addr: SocketAddr,
    client_index: u32,
    max_clients: u32,
    protocol_id: u64,
    send_key: Key,
    user_data: [u8; USER_DATA_BYTES],
    sequence: u64,
    last_send: Duration,
    timeout: Option<Duration>,
    /// The client has shown it knows it is connected (as its receive half last said).
    confirmed: bool,
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
        let rx = ReceiveHalf {
            client_id: accepted.client_id,
            addr: accepted.addr,
            client_index,
            protocol_id,
            recv_key: accepted.recv_key,
            replay: ReplayWindow::new(),
            last_recv: now,
            confirmed: false,
            rate,
            bucket: TokenBucket::full(rate, now),
        };
        let tx = SendHalf {
            client_id: accepted.client_id,
            addr: accepted.addr,
            client_index,
            max_clients,
            protocol_id,
            send_key: accepted.send_key,
            user_data: accepted.user_data,
            sequence: 0,
            last_send: now,
            timeout: u64::try_from(accepted.timeout_seconds).ok().map(Duration::from_secs),
            confirmed: false,
        };
        Self { rx, tx }
    }

    /// The two halves, for owners on two tasks (see [`Connection`]).
    pub fn split(self) -> (ReceiveHalf, SendHalf) {
        (self.rx, self.tx)
    }

    /// The backend's id of this client.
    pub fn client_id(&self) -> u64 {
        self.tx.client_id
    }

    /// The client's address.
    pub fn addr(&self) -> SocketAddr {
        self.tx.addr
    }

    /// The client's slot.
    pub fn client_index(&self) -> u32 {
        self.tx.client_index
    }

    /// The token's user data.
    pub fn user_data(&self) -> &[u8; USER_DATA_BYTES] {
        &self.tx.user_data
    }

    /// The token's connection timeout in seconds (negative: none).
    pub fn timeout_seconds(&self) -> i32 {
        self.tx.timeout.map_or(-1, |t| i32::try_from(t.as_secs()).unwrap_or(i32::MAX))
    }

    /// Whether the client's packets are sealed with `key`: the token it connected with
    /// carried it (how a server recognises a resume ticket it minted).
    pub fn uses_key(&self, key: &Key) -> bool {
        self.rx.recv_key == *key
    }

    /// Whether the client has shown it knows it is connected (sent a keep-alive or payload).
    pub fn is_confirmed(&self) -> bool {
        self.rx.confirmed
    }

    /// When the last authentic packet arrived.
    pub fn last_received(&self) -> Duration {
        self.rx.last_recv
    }

    /// Sends a keep-alive now (the first one tells the client it is connected).
    pub fn keep_alive(&mut self, now: Duration, tx: &mut impl Transmit) {
        self.tx.keep_alive(now, tx);
    }

    /// Tells the client it is connected, in slot `client_index`: the first keep-alive, which
    /// the caller of [`Endpoint::handle`] sends once it knows the slot (the reserved one, or
    /// the slot of the session a resume ticket resumes).
    pub fn greet(&mut self, client_index: u32, now: Duration, tx: &mut impl Transmit) {
        self.rx.client_index = client_index;
        self.tx.client_index = client_index;
        self.tx.keep_alive(now, tx);
    }

    /// Authenticates and reads a packet from this client ([`ReceiveHalf::receive`]).
    ///
    /// # Errors
    /// The reason to drop it.
    pub fn receive<'a>(&mut self, now: Duration, buf: &'a mut [u8]) -> Result<Packet<'a>, DropReason> {
        let packet = self.rx.receive(now, buf)?;
        self.tx.confirm(true);
        Ok(packet)
    }

    /// Sends a payload of 1 to 1200 bytes ([`SendHalf::send_payload`]).
    ///
    /// # Errors
    /// [`PayloadError::PayloadSize`] for an empty or oversized payload.
    pub fn send_payload(&mut self, now: Duration, data: &[u8], tx: &mut impl Transmit) -> Result<(), PayloadError> {
        self.tx.send_payload(now, data, tx)
    }

    /// Sends a keep-alive when nothing was sent for 100 ms; reports a timeout.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit) -> Option<DisconnectReason> {
        self.tx.update(now, self.rx.last_recv, tx)
    }

    /// A copy of the send half that can still say goodbye if this connection's owner dies
    /// ([`SendHalf::farewell_copy`]).
    pub fn farewell_copy(&self) -> SendHalf {
        self.tx.farewell_copy()
    }

    /// Sends the redundant disconnect packets.
    pub fn disconnect(&mut self, now: Duration, tx: &mut impl Transmit) {
        self.tx.disconnect(now, tx);
    }
}

impl ReceiveHalf {
    /// The client's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The backend's id of this client.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The client's slot.
    pub fn client_index(&self) -> u32 {
        self.client_index
    }

    /// Whether the client has shown it knows it is connected (sent a keep-alive or payload).
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// When the last authentic packet arrived.
    pub fn last_received(&self) -> Duration {
        self.last_recv
    }

    /// Authenticates and reads a packet from this client (keep-alive, payload or disconnect).
    ///
    /// Only a packet that authenticates is charged to the client's packet budget: anyone can
    /// send datagrams from a client's address, and garbage must cost the sender, not the
    /// client (it is dropped as [`DropReason::Decrypt`] or the like, its budget untouched).
    ///
    /// # Errors
    /// The reason to drop it, including [`DropReason::RateLimited`] when the client's own
    /// authentic packets exceed its budget.
    pub fn receive<'a>(&mut self, now: Duration, buf: &'a mut [u8]) -> Result<Packet<'a>, DropReason> {
        let allowed = Allowed::of(&[PacketKind::KeepAlive, PacketKind::Payload, PacketKind::Disconnect]);
        let (_, packet) = packet::open_packet(buf, allowed, self.protocol_id, &self.recv_key, Some(&mut self.replay))?;
        if !self.bucket.take(self.rate, now) {
            return Err(DropReason::RateLimited);
        }
        self.last_recv = now;
        self.confirmed = true;
        Ok(packet)
    }
}

impl SendHalf {
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

    /// The receive half has heard from the client (`true`): from now on a payload goes
    /// without a keep-alive before it.
    pub fn confirm(&mut self, confirmed: bool) {
        self.confirmed |= confirmed;
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

    /// Sends a payload of 1 to 1200 bytes. Until the client has confirmed the connection each
    /// payload is preceded by a keep-alive, so the client learns its slot first.
    ///
    /// # Errors
    /// [`PayloadError::PayloadSize`] for an empty or oversized payload.
    pub fn send_payload(&mut self, now: Duration, data: &[u8], tx: &mut impl Transmit) -> Result<(), PayloadError> {
        if data.is_empty() || data.len() > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::PayloadSize(data.len()));
        }
        if !self.confirmed {
            self.keep_alive(now, tx);
        }
        self.write(now, &Packet::Payload(data), tx);
        Ok(())
    }

    /// Whether a client last heard at `last_received` has timed out by `now` (never, for a
    /// token without a timeout).
    pub fn timed_out(&self, now: Duration, last_received: Duration) -> bool {
        self.timeout.is_some_and(|t| now.saturating_sub(last_received) >= t)
    }

    /// Sends a keep-alive when nothing was sent for 100 ms; reports a timeout, judged from
    /// `last_received`, when the client was last heard.
    pub fn update(
        &mut self,
        now: Duration,
        last_received: Duration,
        tx: &mut impl Transmit,
    ) -> Option<DisconnectReason> {
        if self.timed_out(now, last_received) {
            return Some(DisconnectReason::TimedOut);
        }
        if now.saturating_sub(self.last_send) >= KEEP_ALIVE_INTERVAL {
            self.keep_alive(now, tx);
        }
        None
    }

    /// A copy that can still say goodbye if this half's owner dies: its packet sequence
    /// starts at 2^62, far above anything the live half will use, so the two never share a
    /// nonce.
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

/// What [`Endpoint::handle`] made of a datagram.
#[derive(Debug)]
#[must_use = "a routed datagram must be handed to its connection, a new connection attached or abandoned"]
pub enum Handled {
    /// From the address of the connection in this slot: the caller hands the datagram to it
    /// (its [`Connection::receive`] authenticates it; the endpoint has not looked inside).
    Route(usize),
    /// A client answered its challenge: here is its connection, its slot reserved. Greet the
    /// client ([`Connection::greet`], its first keep-alive), and attach what you keep for it
    /// with [`Endpoint::attach`] (or move it into the session it resumes with
    /// [`Endpoint::rebind`]), or give the slot back with [`Endpoint::abandon`].
    Connected(Box<NewConnection>),
    /// A valid handshake packet, answered; nothing for the caller.
    Handled,
    /// Dropped; the reason is also counted in [`Endpoint::drops`].
    Dropped(DropReason),
}

/// A connection that completed the handshake, its slot reserved until it is attached or
/// abandoned.
#[derive(Debug)]
pub struct NewConnection {
    /// The new connection (not yet greeted: [`Connection::greet`]).
    pub connection: Connection,
    /// The reserved slot.
    pub reservation: Reservation,
    /// The slot of a session of the same client id that was still connected (its client came
    /// back with a fresh token from a new address, or restarted): this connection replaces it.
    /// The caller ends that session ([`SessionEnd::Replaced`] tells its client why) and
    /// releases its slot; until then datagrams from its address still reach it, while the
    /// client id is this connection's. `None`: the client id was not connected.
    ///
    /// [`SessionEnd::Replaced`]: crate::protocol::session::SessionEnd::Replaced
    pub replaces: Option<usize>,
}

/// A reserved slot: pass it to [`Endpoint::attach`] or [`Endpoint::abandon`]. Not `Clone`, so
/// a slot is filled or given back exactly once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reserved slot must be attached or abandoned"]
pub struct Reservation {
    slot: usize,
    addr: SocketAddr,
    client_id: u64,
}

impl Reservation {
    /// The reserved slot.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

/// What [`Endpoint::process`] made of a datagram (single-threaded use: the endpoint keeps the
/// connections).
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
        /// The connection of the same client id it replaced (sent its disconnect packets and
        /// removed; [`DisconnectReason::Replaced`]), if one was still connected.
        replaced: Option<Disconnected>,
    },
    /// A client said it is leaving.
    Disconnected(Disconnected),
    /// A valid packet that needs nothing from the caller (a request, a keep-alive).
    Handled,
    /// The packet was dropped; the reason is also counted in [`Endpoint::drops`].
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

/// The server's sans-IO endpoint: handshake, rate limits, slots and routing; see the module
/// docs. `C` is what the caller keeps for each connected slot.
#[derive(Debug)]
pub struct Endpoint<C = Connection> {
    config: EndpointConfig,
    handshake: Handshake,
    slots: SlotTable<C>,
    limiter: RateLimiter,
    total: TokenBucket,
    drops: DropCounts,
}

impl<C> Endpoint<C> {
    /// An endpoint whose challenge key comes from the operating system.
    ///
    /// # Errors
    /// When the OS has no randomness.
    pub fn new(config: EndpointConfig, now: Duration) -> Result<Self, getrandom::Error> {
        Ok(Self::with_challenge_key(config, crypto::generate_key()?, now))
    }

    /// An endpoint with a given challenge key (deterministic tests).
    pub fn with_challenge_key(config: EndpointConfig, challenge_key: Key, now: Duration) -> Self {
        Self {
            handshake: Handshake::new(&config, challenge_key),
            slots: SlotTable::new(config.max_clients),
            limiter: RateLimiter::new(config.handshake_rate_per_address, config.rate_table_capacity),
            total: TokenBucket::full(config.handshake_rate_total, now),
            drops: DropCounts::default(),
            config,
        }
    }

    /// Handles one datagram from `from`: routes it to a connected slot, or runs it through the
    /// rate limits and the handshake (answers go out through `tx`; none is larger than the
    /// datagram that caused it).
    pub fn handle(&mut self, now: Duration, from: SocketAddr, buf: &mut [u8], tx: &mut impl Transmit) -> Handled {
        match self.handle_inner(now, from, buf, tx) {
            Ok(h) => h,
            Err(reason) => {
                self.drops.record(reason);
                Handled::Dropped(reason)
            }
        }
    }

    fn handle_inner(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &mut [u8],
        tx: &mut impl Transmit,
    ) -> Result<Handled, DropReason> {
        if let Some(slot) = self.slots.slot_of(&from) {
            // A connected client sends keep-alives, payloads and disconnects; a request or a
            // response from its address is a new handshake of it (it resumes or restarts
            // behind the same address), which goes through the handshake as any other.
            let prefix = buf.first().map_or(0xff, |b| b & 0x0f);
            if prefix != PacketKind::Request as u8 && prefix != PacketKind::Response as u8 {
                return Ok(Handled::Route(slot));
            }
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
            return Ok(Handled::Handled);
        }
        let accepted = self.handshake.on_response(now, from, buf, &self.slots, tx)?;
        let replaces = self.slots.slot_of_id(accepted.client_id);
        let slot = self.slots.reserve().ok_or(DropReason::ServerFull)?;
        let c = &self.config;
        let connection =
            Connection::new(&accepted, slot as u32, c.max_clients as u32, c.protocol_id, c.connection_rate, now);
        let reservation = Reservation { slot, addr: accepted.addr, client_id: accepted.client_id };
        Ok(Handled::Connected(Box::new(NewConnection { connection, reservation, replaces })))
    }

    /// Fills a reserved slot: from now on datagrams from its address are routed to it.
    pub fn attach(&mut self, reservation: Reservation, value: C) {
        self.slots.fill(reservation.slot, reservation.addr, reservation.client_id, value);
    }

    /// Resumes the session in `slot` with a new connection of its client (a resume ticket's
    /// handshake, [`NewConnection::replaces`]): the reserved slot goes back unfilled, and the
    /// session's slot is routed from the new connection's address from now on (the old address
    /// routes nowhere). The caller moves the new connection's halves into what it keeps there.
    pub fn rebind(&mut self, reservation: Reservation, slot: usize) -> Option<&mut Occupant<C>> {
        self.slots.unreserve(reservation.slot);
        let held = self.slots.get(slot).is_some_and(|o| o.client_id == reservation.client_id);
        if held { self.slots.readdress(slot, reservation.addr) } else { None }
    }

    /// Gives a reserved slot back unfilled (the caller could not start its connection).
    pub fn abandon(&mut self, reservation: Reservation) {
        self.slots.unreserve(reservation.slot);
    }

    /// Empties a slot (its connection ended); what the caller kept for it.
    pub fn remove(&mut self, slot: usize) -> Option<Occupant<C>> {
        self.slots.remove(slot)
    }

    /// Empties `slot` if `addr` and `client_id` still hold it (a late release of a slot that
    /// was since given to someone else does nothing).
    pub fn release(&mut self, slot: usize, addr: SocketAddr, client_id: u64) -> Option<Occupant<C>> {
        let held = self.slots.get(slot).is_some_and(|o| o.addr == addr && o.client_id == client_id);
        if held { self.slots.remove(slot) } else { None }
    }

    /// What the caller keeps for a connected slot.
    pub fn get(&self, slot: usize) -> Option<&Occupant<C>> {
        self.slots.get(slot)
    }

    /// What the caller keeps for a connected slot, mutably.
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut Occupant<C>> {
        self.slots.get_mut(slot)
    }

    /// Connected slots.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Occupant<C>)> {
        self.slots.iter()
    }

    /// Connected slots, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Occupant<C>)> {
        self.slots.iter_mut()
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

    /// The settings.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Addresses in the middle of a handshake.
    pub fn pending_handshakes(&self) -> usize {
        self.handshake.pending_len()
    }

    /// Pending handshakes that gave way to a newer request of their IP (see
    /// [`EndpointConfig::pending_per_ip`]).
    pub fn pending_given_way(&self) -> u64 {
        self.handshake.given_way
    }

    /// Dropped packets by reason (those the endpoint dropped; a routed datagram's owner counts
    /// its own).
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// How full each of its growing tables is (its other tables have a fixed size): what a
    /// soak run watches for leaks.
    pub fn tables(&self) -> EndpointTables {
        EndpointTables {
            pending_handshakes: self.handshake.pending.len(),
            pending_ips: self.handshake.per_ip.len(),
            connected: self.slots.len(),
            connected_addresses: self.slots.addresses(),
            pending_given_way: self.handshake.given_way,
        }
    }
}

/// Entries in an [`Endpoint`]'s growing tables ([`Endpoint::tables`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointTables {
    /// Handshakes answered with a challenge and not yet completed or expired.
    pub pending_handshakes: usize,
    /// IP addresses with a pending handshake (the per-IP cap's table).
    pub pending_ips: usize,
    /// Connected clients (slots filled, by client id).
    pub connected: usize,
    /// Connected clients' addresses (the routing table).
    pub connected_addresses: usize,
    /// Pending handshakes that gave way to a newer request of their IP so far (a running
    /// count, [`Endpoint::pending_given_way`]).
    pub pending_given_way: u64,
}

/// Single-threaded use: the endpoint keeps each client's [`Connection`] and authenticates its
/// packets too.
impl Endpoint<Connection> {
    /// Handles one datagram from `from`: [`Endpoint::handle`], then the routed connection's
    /// [`Connection::receive`].
    pub fn process<'a>(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &'a mut [u8],
        tx: &mut impl Transmit,
    ) -> Received<'a> {
        let slot = match self.handle(now, from, buf, tx) {
            Handled::Route(slot) => slot,
            Handled::Connected(new) => {
                let NewConnection { mut connection, reservation, replaces } = *new;
                let (client_index, client_id) = (reservation.slot, reservation.client_id);
                connection.greet(client_index as u32, now, tx);
                let replaced = replaces.and_then(|old| {
                    let mut conn = self.slots.remove(old)?.value;
                    conn.disconnect(now, tx);
                    Some(Disconnected { client_index: old, client_id, reason: DisconnectReason::Replaced })
                });
                self.attach(reservation, connection);
                return Received::Connected { client_index, client_id, replaced };
            }
            Handled::Handled => return Received::Handled,
            Handled::Dropped(reason) => return Received::Dropped(reason),
        };
        let Some(conn) = self.slots.get_mut(slot).map(|o| &mut o.value) else {
            return Received::Dropped(DropReason::UnknownAddress);
        };
        match conn.receive(now, buf) {
            Ok(Packet::Payload(data)) => Received::Payload { client_index: slot, data },
            Ok(Packet::Disconnect) => {
                let client_id = conn.client_id();
                self.slots.remove(slot);
                Received::Disconnected(Disconnected { client_index: slot, client_id, reason: DisconnectReason::ByPeer })
            }
            Ok(_) => Received::Handled,
            Err(reason) => {
                self.drops.record(reason);
                Received::Dropped(reason)
            }
        }
    }

    /// Sends keep-alives that are due and disconnects clients that timed out.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit, out: &mut Vec<Disconnected>) {
        for index in 0..self.slots.capacity() {
            let Some(conn) = self.slots.get_mut(index).map(|o| &mut o.value) else { continue };
            if let Some(reason) = conn.update(now, tx) {
                let client_id = conn.client_id();
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
    ) -> Result<(), PayloadError> {
        let conn = &mut self.slots.get_mut(client_index).ok_or(PayloadError::NotConnected)?.value;
        conn.send_payload(now, data, tx)
    }

    /// Disconnects one client, sending it the redundant disconnect packets.
    pub fn disconnect(&mut self, now: Duration, client_index: usize, tx: &mut impl Transmit) -> Option<Disconnected> {
        let mut conn = self.slots.remove(client_index)?.value;
        conn.disconnect(now, tx);
        Some(Disconnected { client_index, client_id: conn.client_id(), reason: DisconnectReason::Local })
    }

    /// Disconnects every client.
    pub fn disconnect_all(&mut self, now: Duration, tx: &mut impl Transmit) -> Vec<Disconnected> {
        (0..self.slots.capacity()).filter_map(|i| self.disconnect(now, i, tx)).collect()
    }

    /// The connection in a slot.
    pub fn connection(&self, client_index: usize) -> Option<&Connection> {
        self.slots.get(client_index).map(|o| &o.value)
    }
}
