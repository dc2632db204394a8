//! Session negotiation: after netcode connects, client and server agree on volley's protocol
//! version and the server announces its session parameters (tick and snapshot rates).
//!
//! It travels in netcode payloads whose first byte is [`CONTROL_FRAME`]; every other first
//! byte belongs to the game channel. The client repeats its hello at 10 Hz until answered, so
//! a lost packet only delays it.

use std::time::Duration;

/// The first byte of a payload that carries a session control message.
pub const CONTROL_FRAME: u8 = 0xC5;
/// volley's protocol version; both sides must speak the same (2: predicted snapshots are
/// range-coded; 3: their records are placed by flags, and their decisions are modelled in
/// the context of the client's own history; 4: each input carries the view it was made
/// with, for lag compensation; 5: a predicted snapshot says whether the game's own
/// predictor made its predictions; 6: the server says goodbye, with why, before it
/// disconnects a client, and every packet's ack says how long the acknowledged packet
/// waited before it; 7: the framework's channel carries typed messages, among them the
/// world a player is in, and entity ids carry their world's number; 8: a packet from a peer
/// that has received nothing yet says so, instead of acknowledging packet 0).
pub const PROTOCOL_VERSION: u16 = 8;
/// The longest control message, in bytes (a goodbye with the longest kick text).
pub const MAX_CONTROL_BYTES: usize = 8 + MAX_KICK_TEXT_BYTES;
/// The longest text a kick carries to the client, in bytes (longer text is cut at a
/// character boundary).
pub const MAX_KICK_TEXT_BYTES: usize = 200;
const MAGIC: [u8; 4] = *b"VLLY";
const HELLO_INTERVAL: Duration = Duration::from_millis(100);

/// What the server tells a client about the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionParams {
    /// The server's protocol version.
    pub protocol_version: u16,
    /// Simulation ticks per second.
    pub tick_rate_hz: u16,
    /// Snapshots sent per second.
    pub snapshot_rate_hz: u16,
    /// Largest payload the server sends or accepts, in bytes.
    pub max_payload_bytes: u16,
}

/// Why the server refused a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    /// The versions differ.
    #[error("protocol version mismatch: server speaks {server}, client {client}")]
    VersionMismatch {
        /// Server's version.
        server: u16,
        /// Client's version.
        client: u16,
    },
}

/// Why a session ended, as the client reads it ([`GameClient::ended`]): what the server said
/// in its goodbye, or what the client saw for itself.
///
/// [`GameClient::ended`]: crate::client::GameClient::ended
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionEnd {
    /// The world removed this player ([`Outbox::kick`]), with its words.
    ///
    /// [`Outbox::kick`]: crate::server::Outbox::kick
    #[error("kicked: {0}")]
    Kicked(String),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The world this player was in stopped (its code kept failing).
    #[error("the world stopped")]
    WorldStopped,
    /// The client sent the world more messages than it takes, tick after tick.
    #[error("disconnected for flooding the server with messages")]
    Flooding,
    /// The client sent nothing but payloads the server could not read, packet after packet
    /// (a broken or hostile client; see `server::MAX_MALFORMED_RUN`).
    #[error("disconnected for sending only malformed packets")]
    Malformed,
    /// The client fell so far behind on the server's reliable messages that they could not
    /// be queued.
    #[error("too far behind on reliable messages")]
    TooFarBehind,
    /// The player was handed to the zone next door (see
    /// [`ZoneExit::hand_off`](crate::server::extensions::zone::ZoneExit::hand_off)): the client library goes on
    /// there with the token the server sent it ([`Redirect`](crate::protocol::system::Redirect)).
    #[error("moved to another server")]
    Moved,
    /// The server's part for this player failed (a fault in the server, not the game's nor
    /// the client's: its player actor stopped); the other players play on, and this one may
    /// connect again with a fresh token.
    #[error("the server failed this player's session")]
    ServerFault,
    /// The same client connected again (a fresh connect token for its client id, from a new
    /// address or a restarted program) while this session lingered: the new connection took
    /// its place, and this one ends.
    #[error("replaced by a newer connection of the same client")]
    Replaced,
    /// The client came back with its resume ticket, but the session it resumes is over (it
    /// timed out, or the player was removed meanwhile): it connects again with a fresh token.
    #[error("the session to resume is over")]
    Gone,
    /// Every slot on the server was taken.
    #[error("the server is full")]
    ServerFull,
    /// The server speaks another protocol version.
    #[error("protocol version mismatch: server speaks {server}, client {client}")]
    VersionMismatch {
        /// Server's version.
        server: u16,
        /// Client's version.
        client: u16,
    },
    /// Nothing came from the connected server within the token's timeout.
    #[error("the server stopped answering")]
    TimedOut,
    /// No server answered the connection request or the challenge response.
    #[error("no server answered")]
    NoAnswer,
    /// The connect token expired before a connection was made.
    #[error("the connect token expired")]
    TokenExpired,
    /// The connect token could not be read.
    #[error("the connect token is invalid")]
    InvalidToken,
    /// The server disconnected without saying why (its goodbye lost, or an older server).
    #[error("the server closed the connection")]
    Closed,
    /// This client disconnected.
    #[error("disconnected by this client")]
    Local,
}

impl SessionEnd {
    /// The code a goodbye carries on the wire (0: none that a server sends).
    fn code(&self) -> u8 {
        match self {
            Self::Kicked(_) => 1,
            Self::ShuttingDown => 2,
            Self::WorldStopped => 3,
            Self::Flooding => 4,
            Self::TooFarBehind => 5,
            Self::Moved => 6,
            Self::Malformed => 7,
            Self::ServerFault => 8,
            Self::Replaced => 9,
            Self::Gone => 10,
            _ => 0,
        }
    }

    /// A snake_case label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Kicked(_) => "kicked",
            Self::ShuttingDown => "shutting_down",
            Self::WorldStopped => "world_stopped",
            Self::Flooding => "flooding",
            Self::Malformed => "malformed",
            Self::TooFarBehind => "too_far_behind",
            Self::Moved => "moved",
            Self::ServerFault => "server_fault",
            Self::Replaced => "replaced",
            Self::Gone => "gone",
            Self::ServerFull => "server_full",
            Self::VersionMismatch { .. } => "version_mismatch",
            Self::TimedOut => "timed_out",
            Self::NoAnswer => "no_answer",
            Self::TokenExpired => "token_expired",
            Self::InvalidToken => "invalid_token",
            Self::Closed => "closed",
            Self::Local => "local",
        }
    }
}

/// A session control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Client → server: the version it speaks.
    Hello {
        /// Client's protocol version.
        protocol_version: u16,
    },
    /// Server → client: accepted, with the session's parameters.
    Welcome(SessionParams),
    /// Server → client: refused.
    Reject(RejectReason),
    /// Server → client: the session is over, and why (repeated until the client answers
    /// with its netcode disconnect, or a second has passed). Only the reasons a server
    /// gives travel ([`SessionEnd::Kicked`], `ShuttingDown`, `WorldStopped`, `Flooding`, `Malformed`,
    /// `TooFarBehind`, `Moved`, `ServerFault`, `Replaced`, `Gone`); any other is sent as `ShuttingDown`.
    Goodbye(SessionEnd),
}

/// A control message that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed session control message")]
pub struct Malformed;

impl Control {
    /// Encodes into `out`; returns the length.
    pub fn encode(&self, out: &mut [u8; MAX_CONTROL_BYTES]) -> usize {
        out[0] = CONTROL_FRAME;
        out[1..5].copy_from_slice(&MAGIC);
        let put = |out: &mut [u8; MAX_CONTROL_BYTES], at: usize, v: u16| {
            out[at..at + 2].copy_from_slice(&v.to_le_bytes());
        };
        match self {
            Self::Hello { protocol_version } => {
                out[5] = 0;
                put(out, 6, *protocol_version);
                8
            }
            Self::Welcome(p) => {
                out[5] = 1;
                put(out, 6, p.protocol_version);
                put(out, 8, p.tick_rate_hz);
                put(out, 10, p.snapshot_rate_hz);
                put(out, 12, p.max_payload_bytes);
                14
            }
            Self::Reject(RejectReason::VersionMismatch { server, client }) => {
                out[5] = 2;
                put(out, 6, *server);
                put(out, 8, *client);
                10
            }
            Self::Goodbye(end) => {
                out[5] = 3;
                out[6] = match end.code() {
                    0 => SessionEnd::ShuttingDown.code(),
                    c => c,
                };
                let text = match end {
                    SessionEnd::Kicked(t) => super::cut(t, MAX_KICK_TEXT_BYTES),
                    _ => "",
                };
                out[7] = text.len() as u8;
                out[8..8 + text.len()].copy_from_slice(text.as_bytes());
                8 + text.len()
            }
        }
    }

    /// Decodes a payload that starts with [`CONTROL_FRAME`].
    ///
    /// # Errors
    /// When it is not a control message of this protocol.
    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        if bytes.len() < 8 || bytes[0] != CONTROL_FRAME || bytes[1..5] != MAGIC {
            return Err(Malformed);
        }
        let get = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]])).ok_or(Malformed);
        match (bytes[5], bytes.len()) {
            (0, 8) => Ok(Self::Hello { protocol_version: get(6)? }),
            (1, 14) => Ok(Self::Welcome(SessionParams {
                protocol_version: get(6)?,
                tick_rate_hz: get(8)?,
                snapshot_rate_hz: get(10)?,
                max_payload_bytes: get(12)?,
            })),
            (2, 10) => Ok(Self::Reject(RejectReason::VersionMismatch { server: get(6)?, client: get(8)? })),
            (3, n) if n == 8 + usize::from(bytes[7]) && n <= MAX_CONTROL_BYTES => {
                let text = std::str::from_utf8(&bytes[8..]).map_err(|_| Malformed)?;
                Ok(Self::Goodbye(match (bytes[6], text) {
                    (1, t) => SessionEnd::Kicked(t.to_owned()),
                    (2, "") => SessionEnd::ShuttingDown,
                    (3, "") => SessionEnd::WorldStopped,
                    (4, "") => SessionEnd::Flooding,
                    (5, "") => SessionEnd::TooFarBehind,
                    (6, "") => SessionEnd::Moved,
                    (7, "") => SessionEnd::Malformed,
                    (8, "") => SessionEnd::ServerFault,
                    (9, "") => SessionEnd::Replaced,
                    (10, "") => SessionEnd::Gone,
                    _ => return Err(Malformed),
                }))
            }
            _ => Err(Malformed),
        }
    }
}

/// The server's answer to a hello.
pub fn answer_hello(client_version: u16, params: SessionParams) -> Control {
    if client_version == params.protocol_version {
        Control::Welcome(params)
    } else {
        Control::Reject(RejectReason::VersionMismatch { server: params.protocol_version, client: client_version })
    }
}

/// The client's side of the negotiation.
#[derive(Debug, Clone)]
pub enum ClientSession {
    /// Waiting for the server's answer.
    Negotiating {
        /// When the last hello went out.
        last_hello: Option<Duration>,
    },
    /// Agreed.
    Established(SessionParams),
    /// Refused.
    Rejected(RejectReason),
}

impl Default for ClientSession {
    fn default() -> Self {
        Self::Negotiating { last_hello: None }
    }
}

impl ClientSession {
    /// A hello to send now, if one is due.
    pub fn poll_hello(&mut self, now: Duration) -> Option<Control> {
        let Self::Negotiating { last_hello } = self else { return None };
        if last_hello.is_some_and(|t| now.saturating_sub(t) < HELLO_INTERVAL) {
            return None;
        }
        *last_hello = Some(now);
        Some(Control::Hello { protocol_version: PROTOCOL_VERSION })
    }

    /// Takes the server's answer; repeated answers are harmless.
    pub fn on_control(&mut self, control: Control) {
        if let Self::Negotiating { .. } = self {
            match control {
                Control::Welcome(p) => *self = Self::Established(p),
                Control::Reject(r) => *self = Self::Rejected(r),
                Control::Hello { .. } | Control::Goodbye(_) => {}
            }
        }
    }

    /// Why the server refused, if it did.
    pub fn rejected(&self) -> Option<RejectReason> {
        match self {
            Self::Rejected(r) => Some(*r),
            _ => None,
        }
    }

    /// The agreed parameters, once established.
    pub fn params(&self) -> Option<SessionParams> {
        match self {
            Self::Established(p) => Some(*p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: SessionParams = SessionParams {
        protocol_version: PROTOCOL_VERSION,
        tick_rate_hz: 60,
        snapshot_rate_hz: 30,
        max_payload_bytes: 1200,
    };

    #[test]
    fn messages_round_trip_and_garbage_is_rejected() {
        let mut buf = [0u8; MAX_CONTROL_BYTES];
        for c in [
            Control::Hello { protocol_version: 7 },
            Control::Welcome(PARAMS),
            Control::Reject(RejectReason::VersionMismatch { server: 1, client: 2 }),
            Control::Goodbye(SessionEnd::Kicked("camping the spawn ✓".into())),
            Control::Goodbye(SessionEnd::Kicked(String::new())),
            Control::Goodbye(SessionEnd::ShuttingDown),
            Control::Goodbye(SessionEnd::WorldStopped),
            Control::Goodbye(SessionEnd::Flooding),
            Control::Goodbye(SessionEnd::TooFarBehind),
            Control::Goodbye(SessionEnd::Moved),
            Control::Goodbye(SessionEnd::Malformed),
            Control::Goodbye(SessionEnd::ServerFault),
            Control::Goodbye(SessionEnd::Replaced),
            Control::Goodbye(SessionEnd::Gone),
        ] {
            let n = c.encode(&mut buf);
            assert_eq!(Control::decode(&buf[..n]), Ok(c.clone()));
            assert_eq!(Control::decode(&buf[..n - 1]), Err(Malformed));
        }
        // A long kick text is cut at a character boundary; a reason no server sends goes as
        // a shutdown.
        let n = Control::Goodbye(SessionEnd::Kicked("é".repeat(150))).encode(&mut buf);
        assert_eq!(Control::decode(&buf[..n]), Ok(Control::Goodbye(SessionEnd::Kicked("é".repeat(100)))));
        let n = Control::Goodbye(SessionEnd::TimedOut).encode(&mut buf);
        assert_eq!(Control::decode(&buf[..n]), Ok(Control::Goodbye(SessionEnd::ShuttingDown)));
        // Text that is not UTF-8, text on a reason without it, an unknown code: refused.
        let n = Control::Goodbye(SessionEnd::Kicked("ab".into())).encode(&mut buf);
        buf[8] = 0xff;
        assert_eq!(Control::decode(&buf[..n]), Err(Malformed));
        buf[8] = b'a';
        buf[6] = 2;
        assert_eq!(Control::decode(&buf[..n]), Err(Malformed));
        buf[6] = 9;
        assert_eq!(Control::decode(&buf[..n]), Err(Malformed));
        assert_eq!(Control::decode(&[CONTROL_FRAME, b'V', b'L', b'L', b'Y', 9, 0, 0]), Err(Malformed));
        assert_eq!(Control::decode(&[0; 8]), Err(Malformed));
    }

    #[test]
    fn negotiation_resends_until_answered_and_checks_versions() {
        let mut s = ClientSession::default();
        let t = Duration::from_secs(5);
        assert!(s.poll_hello(t).is_some());
        assert!(s.poll_hello(t + Duration::from_millis(50)).is_none());
        let Some(Control::Hello { protocol_version }) = s.poll_hello(t + HELLO_INTERVAL) else { panic!("resend") };
        s.on_control(answer_hello(protocol_version, PARAMS));
        assert_eq!(s.params(), Some(PARAMS));
        assert!(s.poll_hello(t + Duration::from_secs(1)).is_none());

        let mut s = ClientSession::default();
        s.on_control(answer_hello(PROTOCOL_VERSION + 1, PARAMS));
        assert!(matches!(s, ClientSession::Rejected(RejectReason::VersionMismatch { .. })));
    }
}
