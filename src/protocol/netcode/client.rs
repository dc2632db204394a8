//! The client state machine of netcode.io 1.02.

use std::net::SocketAddr;
use std::time::Duration;

use super::packet::{self, Allowed, Packet, PacketKind, Request};
use super::replay::ReplayWindow;
use super::token::ConnectToken;
use super::{
    CHALLENGE_TOKEN_BYTES, DropReason, MAX_PAYLOAD_BYTES, PACKET_SEND_RATE_HZ, PayloadError,
    REDUNDANT_DISCONNECT_PACKETS, Transmit,
};

const SEND_INTERVAL: Duration = Duration::from_millis(1000 / PACKET_SEND_RATE_HZ as u64);

/// Every state of the standard's client; the negative ones are final errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientState {
    /// The token expired before a connection was made.
    ConnectTokenExpired,
    /// The token could not be read.
    InvalidConnectToken,
    /// The connected server stopped answering.
    ConnectionTimedOut,
    /// No server answered the challenge response.
    ConnectionResponseTimedOut,
    /// No server answered the connection request.
    ConnectionRequestTimedOut,
    /// Every server said it was full.
    ConnectionDenied,
    /// Not connected (the initial state, and the state after a disconnect).
    Disconnected,
    /// Sending connection requests.
    SendingConnectionRequest,
    /// Sending challenge responses.
    SendingConnectionResponse,
    /// Connected.
    Connected,
}

impl ClientState {
    /// The standard's numeric code (-6 to 3).
    pub const fn code(self) -> i8 {
        match self {
            Self::ConnectTokenExpired => -6,
            Self::InvalidConnectToken => -5,
            Self::ConnectionTimedOut => -4,
            Self::ConnectionResponseTimedOut => -3,
            Self::ConnectionRequestTimedOut => -2,
            Self::ConnectionDenied => -1,
            Self::Disconnected => 0,
            Self::SendingConnectionRequest => 1,
            Self::SendingConnectionResponse => 2,
            Self::Connected => 3,
        }
    }

    /// Whether this state is an error.
    pub const fn is_error(self) -> bool {
        self.code() < 0
    }
}

/// A netcode client.
#[derive(Debug)]
pub struct Client {
    token: Option<ConnectToken>,
    state: ClientState,
    server_index: usize,
    sequence: u64,
    replay: ReplayWindow,
    start_time: Duration,
    expire_at: Duration,
    attempt_start: Duration,
    last_send: Duration,
    last_recv: Duration,
    challenge: Option<(u64, [u8; CHALLENGE_TOKEN_BYTES])>,
    client_index: u32,
    max_clients: u32,
}

impl Client {
    /// A client holding `token`, not yet connecting.
    pub fn new(token: ConnectToken, now: Duration) -> Self {
        Self { token: Some(token), state: ClientState::Disconnected, ..Self::new_invalid(now) }
    }

    /// A client from the 2048 serialized token bytes; a bad token gives a client in
    /// [`ClientState::InvalidConnectToken`].
    pub fn from_token_bytes(bytes: &[u8], now: Duration) -> Self {
        match ConnectToken::from_bytes(bytes) {
            Ok(t) => Self::new(t, now),
            Err(_) => Self::new_invalid(now),
        }
    }

    fn new_invalid(now: Duration) -> Self {
        Self {
            token: None,
            state: ClientState::InvalidConnectToken,
            server_index: 0,
            sequence: 0,
            replay: ReplayWindow::new(),
            start_time: now,
            expire_at: now,
            attempt_start: now,
            last_send: Duration::ZERO,
            last_recv: now,
            challenge: None,
            client_index: 0,
            max_clients: 0,
        }
    }

    /// Starts connecting to the token's first server.
    pub fn connect(&mut self, now: Duration) {
        let Some(token) = &self.token else { return };
        self.start_time = now;
        // The client trusts its own clock only for the token's lifetime, not its timestamps.
        let lifetime = token.expire_timestamp.saturating_sub(token.create_timestamp);
        self.expire_at = now + Duration::from_secs(lifetime);
        self.server_index = 0;
        self.begin_attempt(now);
    }

    fn begin_attempt(&mut self, now: Duration) {
        self.state = ClientState::SendingConnectionRequest;
        self.attempt_start = now;
        self.last_recv = now;
        self.last_send = Duration::ZERO;
        self.challenge = None;
        self.replay = ReplayWindow::new();
    }

    /// Moves on to the next server after `failure`, or ends in `failure`.
    fn next_server_or(&mut self, now: Duration, failure: ClientState) {
        let count = self.token.as_ref().map_or(0, |t| t.server_addresses.as_slice().len());
        if self.server_index + 1 < count {
            self.server_index += 1;
            self.begin_attempt(now);
        } else {
            self.state = failure;
        }
    }

    /// When the last authentic packet from the server arrived (or the attempt began).
    pub fn last_received(&self) -> Duration {
        self.last_recv
    }

    /// The current state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// Connected.
    pub fn is_connected(&self) -> bool {
        self.state == ClientState::Connected
    }

    /// The server being tried or connected to.
    pub fn server_addr(&self) -> Option<SocketAddr> {
        self.token.as_ref()?.server_addresses.as_slice().get(self.server_index).copied()
    }

    /// The slot the server gave this client (meaningful once connected).
    pub fn client_index(&self) -> u32 {
        self.client_index
    }

    /// The server's slot count (meaningful once connected).
    pub fn max_clients(&self) -> u32 {
        self.max_clients
    }

    /// The token's connection timeout (`None`: none).
    pub fn timeout(&self) -> Option<Duration> {
        u64::try_from(self.token.as_ref()?.timeout_seconds).ok().map(Duration::from_secs)
    }

    fn write(&mut self, now: Duration, packet: &Packet<'_>, tx: &mut impl Transmit) {
        let (Some(token), Some(to)) = (&self.token, self.server_addr()) else { return };
        let mut buf = [0u8; packet::MAX_PACKET_BYTES];
        if let Some(n) =
            packet::write_packet(&mut buf, packet, self.sequence, token.protocol_id, &token.client_to_server_key)
        {
            self.sequence += 1;
            self.last_send = now;
            tx.send(to, &buf[..n]);
        }
    }

    /// Advances timers: sends requests, responses and keep-alives at 10 Hz and detects
    /// timeouts and token expiry.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit) {
        let connecting =
            matches!(self.state, ClientState::SendingConnectionRequest | ClientState::SendingConnectionResponse);
        if connecting && now >= self.expire_at {
            self.state = ClientState::ConnectTokenExpired;
            return;
        }
        if let Some(timeout) = self.timeout() {
            let silent = now.saturating_sub(self.last_recv) >= timeout;
            match self.state {
                ClientState::SendingConnectionRequest if silent => {
                    self.next_server_or(now, ClientState::ConnectionRequestTimedOut)
                }
                ClientState::SendingConnectionResponse if silent => {
                    self.next_server_or(now, ClientState::ConnectionResponseTimedOut)
                }
                ClientState::Connected if silent => self.state = ClientState::ConnectionTimedOut,
                _ => {}
            }
        }
        if now.saturating_sub(self.last_send) < SEND_INTERVAL {
            return;
        }
        match self.state {
            ClientState::SendingConnectionRequest => {
                let (Some(token), Some(to)) = (&self.token, self.server_addr()) else { return };
                let req = Request {
                    protocol_id: token.protocol_id,
                    expire_timestamp: token.expire_timestamp,
                    nonce: token.nonce,
                    private_data: token.private_data,
                };
                let mut buf = [0u8; packet::REQUEST_PACKET_BYTES];
                if let Some(n) = packet::write_request(&mut buf, &req) {
                    self.last_send = now;
                    tx.send(to, &buf[..n]);
                }
            }
            ClientState::SendingConnectionResponse => {
                if let Some((token_sequence, token)) = self.challenge {
                    self.write(now, &Packet::Response { token_sequence, token: &token }, tx);
                }
            }
            ClientState::Connected => {
                let ka = Packet::KeepAlive { client_index: self.client_index, max_clients: self.max_clients };
                self.write(now, &ka, tx);
            }
            _ => {}
        }
    }

    /// Handles one datagram; returns a payload when it carried one.
    ///
    /// # Errors
    /// The reason it was dropped.
    pub fn process<'a>(
        &mut self,
        now: Duration,
        from: SocketAddr,
        buf: &'a mut [u8],
    ) -> Result<Option<&'a [u8]>, DropReason> {
        if Some(from) != self.server_addr() {
            return Err(DropReason::UnknownAddress);
        }
        let Some(token) = &self.token else { return Err(DropReason::NotAllowed) };
        let allowed = match self.state {
            ClientState::SendingConnectionRequest => Allowed::of(&[PacketKind::Denied, PacketKind::Challenge]),
            ClientState::SendingConnectionResponse => Allowed::of(&[PacketKind::Denied, PacketKind::KeepAlive]),
            ClientState::Connected => {
                Allowed::of(&[PacketKind::KeepAlive, PacketKind::Payload, PacketKind::Disconnect])
            }
            _ => return Err(DropReason::NotAllowed),
        };
        let (protocol_id, key) = (token.protocol_id, token.server_to_client_key);
        let (_, packet) = packet::open_packet(buf, allowed, protocol_id, &key, Some(&mut self.replay))?;
        self.last_recv = now;
        match packet {
            Packet::Denied => self.next_server_or(now, ClientState::ConnectionDenied),
            Packet::Challenge { token_sequence, token } => {
                self.challenge = Some((token_sequence, *token));
                self.state = ClientState::SendingConnectionResponse;
                self.last_send = Duration::ZERO;
            }
            Packet::KeepAlive { client_index, max_clients } => {
                if self.state == ClientState::SendingConnectionResponse {
                    self.client_index = client_index;
                    self.max_clients = max_clients;
                    self.state = ClientState::Connected;
                    self.challenge = None;
                }
            }
            Packet::Payload(data) => return Ok(Some(data)),
            Packet::Disconnect => self.state = ClientState::Disconnected,
            Packet::Response { .. } => return Err(DropReason::NotAllowed),
        }
        Ok(None)
    }

    /// Sends a payload of 1 to 1200 bytes.
    ///
    /// # Errors
    /// Not connected, or a bad payload size.
    pub fn send_payload(&mut self, now: Duration, data: &[u8], tx: &mut impl Transmit) -> Result<(), PayloadError> {
        if self.state != ClientState::Connected {
            return Err(PayloadError::NotConnected);
        }
        if data.is_empty() || data.len() > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::PayloadSize(data.len()));
        }
        self.write(now, &Packet::Payload(data), tx);
        Ok(())
    }

    /// Disconnects, sending the redundant disconnect packets if connected.
    pub fn disconnect(&mut self, now: Duration, tx: &mut impl Transmit) {
        if self.state == ClientState::Connected {
            for _ in 0..REDUNDANT_DISCONNECT_PACKETS {
                self.write(now, &Packet::Disconnect, tx);
            }
        }
        if !self.state.is_error() {
            self.state = ClientState::Disconnected;
        }
    }
}
