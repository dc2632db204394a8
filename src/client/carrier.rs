//! What carries a [`GameClient`](super::GameClient)'s session payloads: netcode.io over UDP
//! (sealed with the token's keys, the client's own handshake), or a relay that made the
//! connection for it (the WebTransport relay of `volley-web`: the connect token went to the
//! relay, QUIC encrypts, and the relay is the server's netcode client), which takes the
//! payloads as they are.
//!
//! Both offer the few operations the session code needs, so the session, its channels, its
//! inputs and its snapshots are the same code whichever way a client is connected.

use std::net::SocketAddr;
use std::time::Duration;

use crate::protocol::netcode::client::{Client as NetcodeClient, ClientState};
use crate::protocol::netcode::{MAX_PAYLOAD_BYTES, Transmit};

/// The one-byte payload a relayed client sends to leave (no session payload starts with 0):
/// the relay then sends netcode's disconnect, and the server frees the seat at once instead of
/// keeping it for a resume.
pub const RELAY_LEAVE: u8 = 0;

/// A connection made by a relay, as its client sees it.
#[derive(Debug, Clone)]
pub(super) struct Relayed {
    /// Where payloads go (the relay's address, for the shell's [`Transmit`]).
    to: SocketAddr,
    state: ClientState,
    client_index: u32,
    last_received: Duration,
}

/// netcode's client, or a relay's connection.
// netcode's client inline: it is nearly every client's, and a relayed client's 2.6 KB unused
// is nothing beside its QUIC connection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Carrier {
    Netcode(NetcodeClient),
    Relayed(Relayed),
}

impl Carrier {
    /// A relayed connection to `to`, connecting (until the shell says it is connected).
    pub(super) fn relayed(to: SocketAddr, now: Duration) -> Self {
        Carrier::Relayed(Relayed {
            to,
            state: ClientState::SendingConnectionRequest,
            client_index: 0,
            last_received: now,
        })
    }

    pub(super) fn is_relayed(&self) -> bool {
        matches!(self, Carrier::Relayed(_))
    }

    /// The relay connected, and the server gave this slot.
    pub(super) fn relay_connected(&mut self, client_index: u32, now: Duration) {
        if let Carrier::Relayed(r) = self
            && !r.state.is_error()
            && r.state != ClientState::Disconnected
        {
            r.state = ClientState::Connected;
            r.client_index = client_index;
            r.last_received = now;
        }
    }

    /// The relay's connection ended, in this state.
    pub(super) fn relay_ended(&mut self, state: ClientState) {
        if let Carrier::Relayed(r) = self
            && !r.state.is_error()
        {
            r.state = state;
        }
    }

    pub(super) fn send_payload(&mut self, now: Duration, bytes: &[u8], tx: &mut impl Transmit) {
        match self {
            // Failures cannot happen for the sizes the session builds; not connected drops.
            Carrier::Netcode(n) => {
                let _ = n.send_payload(now, bytes, tx);
            }
            Carrier::Relayed(r) => {
                if r.state == ClientState::Connected && !bytes.is_empty() && bytes.len() <= MAX_PAYLOAD_BYTES {
                    tx.send(r.to, bytes);
                }
            }
        }
    }

    pub(super) fn disconnect(&mut self, now: Duration, tx: &mut impl Transmit) {
        match self {
            Carrier::Netcode(n) => n.disconnect(now, tx),
            Carrier::Relayed(r) => {
                if r.state == ClientState::Connected {
                    tx.send(r.to, &[RELAY_LEAVE]);
                }
                if !r.state.is_error() {
                    r.state = ClientState::Disconnected;
                }
            }
        }
    }

    pub(super) fn update(&mut self, now: Duration, tx: &mut impl Transmit) {
        // A relay keeps its connection alive itself.
        if let Carrier::Netcode(n) = self {
            n.update(now, tx);
        }
    }

    pub(super) fn process<'a>(&mut self, now: Duration, from: SocketAddr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
        match self {
            Carrier::Netcode(n) => n.process(now, from, buf).ok()?,
            Carrier::Relayed(r) => {
                if r.state != ClientState::Connected || buf.is_empty() {
                    return None;
                }
                r.last_received = now;
                Some(buf)
            }
        }
    }

    pub(super) fn state(&self) -> ClientState {
        match self {
            Carrier::Netcode(n) => n.state(),
            Carrier::Relayed(r) => r.state,
        }
    }

    pub(super) fn is_connected(&self) -> bool {
        self.state() == ClientState::Connected
    }

    pub(super) fn last_received(&self) -> Duration {
        match self {
            Carrier::Netcode(n) => n.last_received(),
            Carrier::Relayed(r) => r.last_received,
        }
    }

    pub(super) fn timeout(&self) -> Option<Duration> {
        match self {
            Carrier::Netcode(n) => n.timeout(),
            Carrier::Relayed(_) => None,
        }
    }

    pub(super) fn server_addr(&self) -> Option<SocketAddr> {
        match self {
            Carrier::Netcode(n) => n.server_addr(),
            Carrier::Relayed(r) => Some(r.to),
        }
    }

    pub(super) fn client_index(&self) -> u32 {
        match self {
            Carrier::Netcode(n) => n.client_index(),
            Carrier::Relayed(r) => r.client_index,
        }
    }
}
