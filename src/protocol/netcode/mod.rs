//! A secure connection layer, wire-compatible with netcode.io 1.02 (sans-IO).
//!
//! - [`token`]: connect tokens, minted by a backend that shares a private key with servers.
//! - [`packet`]: the seven packet types, their prefix and sequence encoding, and encryption.
//! - [`server`]: the sans-IO [`server::Endpoint`] (stateless challenge, rate limits, slots and
//!   routing: the one composition every server in volley drives) and the per-client
//!   [`server::Connection`] it makes.
//! - [`client`]: the client state machine with every state of the standard.
//!
//! Nothing here reads a clock, touches a socket or spawns a task: callers pass the time
//! (a [`Duration`](std::time::Duration) since the Unix epoch) and receive the datagrams to
//! send through a [`Transmit`] sink. Every dropped packet has a [`DropReason`].

pub mod client;
mod crypto;
pub mod limits;
pub mod packet;
pub mod replay;
pub mod server;
pub mod slots;
pub mod token;
mod wire;

use std::net::SocketAddr;

pub use crypto::{Key, generate_key, random_bytes};

/// The version string at the start of tokens and requests.
pub const VERSION_INFO: &[u8; 13] = b"NETCODE 1.02\0";
/// Bytes in a key.
pub const KEY_BYTES: usize = 32;
/// Bytes in an AEAD tag.
pub const MAC_BYTES: usize = 16;
/// Bytes of opaque user data in a connect token.
pub const USER_DATA_BYTES: usize = 256;
/// Bytes in a serialized public connect token.
pub const CONNECT_TOKEN_BYTES: usize = 2048;
/// Bytes in the sealed private part of a connect token.
pub const CONNECT_TOKEN_PRIVATE_BYTES: usize = 1024;
/// Bytes in a sealed challenge token.
pub const CHALLENGE_TOKEN_BYTES: usize = 300;
/// Largest payload in one packet.
pub const MAX_PAYLOAD_BYTES: usize = 1200;
/// Most server addresses a token can name.
pub const MAX_SERVER_ADDRESSES: usize = 32;
/// Packets per second of keep-alive (and of requests/responses while connecting).
pub const PACKET_SEND_RATE_HZ: u32 = 10;
/// Disconnect packets sent, redundantly, when a connection ends.
pub const REDUNDANT_DISCONNECT_PACKETS: usize = 10;

/// Where outgoing datagrams go. The socket layer implements it; tests collect into a `Vec`.
pub trait Transmit {
    /// Sends one datagram.
    fn send(&mut self, to: SocketAddr, packet: &[u8]);
}

impl Transmit for Vec<(SocketAddr, Vec<u8>)> {
    fn send(&mut self, to: SocketAddr, packet: &[u8]) {
        self.push((to, packet.to_vec()));
    }
}

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $name:ident => $label:literal,)*) => {
        /// Why a received packet was dropped. Labels are stable metric label values.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum DropReason {
            $($(#[$doc])* $name,)*
        }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];

            /// A short snake_case label for metrics and logs.
            pub const fn label(self) -> &'static str {
                match self {
                    $(DropReason::$name => $label,)*
                }
            }
        }
    };
}

drop_reasons! {
    /// Wrong size for its type, or truncated.
    BadLength => "bad_length",
    /// The packet type is not one of the seven.
    UnknownType => "unknown_type",
    /// The prefix names a sequence of 0 or more than 8 bytes.
    BadSequence => "bad_sequence",
    /// The receiver does not accept this type in its current state.
    NotAllowed => "not_allowed",
    /// The sequence was received already, or is older than the replay window.
    Replayed => "replayed",
    /// The packet did not authenticate (wrong key, tampered, wrong protocol id).
    Decrypt => "decrypt",
    /// The version info is not netcode 1.02.
    WrongVersion => "wrong_version",
    /// The protocol id is not this game's.
    WrongProtocol => "wrong_protocol",
    /// The connect token has expired.
    TokenExpired => "token_expired",
    /// The connect token's private part did not authenticate or parse.
    TokenInvalid => "token_invalid",
    /// The connect token does not name this server.
    NotForThisServer => "not_for_this_server",
    /// The connect token was used already from another address, or for a finished session.
    TokenReused => "token_reused",
    /// A client is connected from this address already.
    AddressInUse => "address_in_use",
    /// Every slot is taken (a denied packet was sent).
    ServerFull => "server_full",
    /// The challenge token did not authenticate.
    ChallengeInvalid => "challenge_invalid",
    /// No connection or handshake exists for the source address.
    UnknownAddress => "unknown_address",
    /// The table of addresses in the middle of a handshake is full.
    HandshakeTableFull => "handshake_table_full",
    /// This IP address holds as many pending handshakes as one may.
    TooManyPending => "too_many_pending",
    /// The source address, or all handshakes together, exceeded their rate.
    RateLimited => "rate_limited",
}

/// Counts of dropped packets by reason.
#[derive(Debug, Clone, Default)]
pub struct DropCounts {
    counts: [u64; DropReason::ALL.len()],
}

impl DropCounts {
    /// Counts one drop.
    pub fn record(&mut self, reason: DropReason) {
        self.counts[reason as usize] += 1;
    }

    /// Drops so far for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason as usize]
    }

    /// Every reason with its count.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (*r, self.counts[*r as usize]))
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectReason {
    /// No packet arrived within the token's timeout.
    TimedOut,
    /// The peer sent a disconnect packet.
    ByPeer,
    /// This side ended it.
    Local,
    /// A newer connection of the same client id took its place (the server's side).
    Replaced,
}

impl DisconnectReason {
    /// A short snake_case label for metrics and logs.
    pub const fn label(self) -> &'static str {
        match self {
            Self::TimedOut => "timed_out",
            Self::ByPeer => "by_peer",
            Self::Local => "local",
            Self::Replaced => "replaced",
        }
    }
}

/// Why a payload could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Payloads are 1 to 1200 bytes.
    #[error("payload of {0} bytes; netcode payloads are 1 to {MAX_PAYLOAD_BYTES} bytes")]
    PayloadSize(usize),
    /// There is no such connected client, or the client is not connected.
    #[error("not connected")]
    NotConnected,
}
