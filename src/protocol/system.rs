//! What the framework itself tells a client on its own reliable channel (the "system"
//! channel, told apart from the game's by its frame byte, see
//! [`SYSTEM_FRAME_TAG`](crate::protocol::reliability::channel::SYSTEM_FRAME_TAG)). Each
//! message's first byte says what it is: [`BOARD`] (a scoreboard update, see
//! [`crate::protocol::scoreboard`]), [`WORLD`] (a [`WorldNotice`]) or [`SPECTATOR`] (a
//! [`SpectatorStatus`]); the rest is postcard. A client ignores a kind it does not know.

use serde::{Deserialize, Serialize};

use crate::protocol::cut;

/// First byte of a scoreboard update.
pub const BOARD: u8 = 0;
/// First byte of a [`WorldNotice`].
pub const WORLD: u8 = 1;
/// First byte of a [`SpectatorStatus`].
pub const SPECTATOR: u8 = 2;
/// First byte of a [`Redirect`].
pub const REDIRECT: u8 = 3;
/// First byte of a [`Pace`].
pub const PACE: u8 = 4;
/// First byte of a [`Ticket`].
pub const TICKET: u8 = 5;

/// The longest world kind or reason text a notice carries, in bytes.
pub const MAX_NOTICE_TEXT_BYTES: usize = 64;

/// Why a player is in the world a [`WorldNotice`] names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnterReason {
    /// It connected, and the server put it in its entry world.
    Connected,
    /// The game moved it here (from the world it was in).
    Moved,
    /// The world it was in stopped (the game stopped it, or its code kept failing: the
    /// text says which), and this is that world's fallback.
    WorldStopped(String),
}

/// "You are now in this world": sent when a player connects and each time it moves.
/// Entity ids in its snapshots carry the world number of the world each entity is from
/// ([`merged_id`](crate::protocol::snapshot::world::merged_id)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldNotice {
    /// The world's number on the server (also in its entities' ids).
    pub world: u16,
    /// The world's kind, as the game named it ("lobby", "match").
    pub kind: String,
    /// Why the player is there.
    pub reason: EnterReason,
}

impl WorldNotice {
    /// The notice as the system channel carries it.
    pub fn encode(&self) -> bytes::Bytes {
        let mut n = self.clone();
        n.kind = cut(&n.kind, MAX_NOTICE_TEXT_BYTES).to_owned();
        if let EnterReason::WorldStopped(t) = &mut n.reason {
            *t = cut(t, MAX_NOTICE_TEXT_BYTES).to_owned();
        }
        let mut out = vec![WORLD];
        out.extend(postcard::to_allocvec(&n).unwrap_or_default());
        out.into()
    }

    /// A notice from the system channel; `None` when the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        match bytes.split_first() {
            Some((&WORLD, rest)) => {
                let mut n: Self = postcard::from_bytes(rest).ok()?;
                n.kind = cut(&n.kind, MAX_NOTICE_TEXT_BYTES).to_owned();
                if let EnterReason::WorldStopped(t) = &mut n.reason {
                    *t = cut(t, MAX_NOTICE_TEXT_BYTES).to_owned();
                }
                Some(n)
            }
            _ => None,
        }
    }
}

/// Where a replay or a delayed spectators' world is in what it shows: sent to its viewers when
/// they arrive and whenever playback changes (a seek, a pause, a new speed), read with
/// [`GameClient::spectator`](crate::client::GameClient::spectator). From it the client knows
/// which recorded tick each snapshot shows ([`SpectatorStatus::shown_at`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpectatorStatus {
    /// The server tick from which this status holds.
    pub since: u32,
    /// The recorded tick shown at `since`, in quarters of a tick.
    pub at_quarters: u64,
    /// Speed in quarters (4: real time, 1: a quarter, 16: four times); 0 while paused.
    pub quarters: u8,
    /// The first and last recorded ticks (for a live world: the newest so far).
    pub first: u32,
    /// See `first`.
    pub last: u32,
    /// The recorded player whose view is shown (`None`: everything).
    pub following: Option<u32>,
    /// A live world shown with a delay (no seeking or pausing).
    pub live: bool,
}

impl SpectatorStatus {
    /// The recorded tick shown in the snapshot of server tick `tick` (at or after `since`):
    /// the newest recorded frame at or before it is what the snapshot holds (for a live
    /// world, once the delay has passed since it began).
    pub fn shown_at(&self, tick: u32) -> u32 {
        let k = u64::from(tick.wrapping_sub(self.since));
        let q = self.at_quarters + k * u64::from(self.quarters);
        let shown = u32::try_from(q / 4).unwrap_or(u32::MAX);
        // A recording ends at its last tick; a live world goes on.
        if self.live { shown } else { shown.min(self.last.max(self.first)) }
    }

    /// The status as the system channel carries it.
    pub fn encode(&self) -> bytes::Bytes {
        let mut out = vec![SPECTATOR];
        out.extend(postcard::to_allocvec(self).unwrap_or_default());
        out.into()
    }

    /// A status from the system channel; `None` when the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        match bytes.split_first() {
            Some((&SPECTATOR, rest)) => postcard::from_bytes(rest).ok(),
            _ => None,
        }
    }
}

/// "Go on at the zone next door": the player was handed to another zone server
/// ([`ZoneExit::hand_off`](crate::server::extensions::zone::ZoneExit::hand_off)). The client library connects there
/// with `token` and sends again, first, every input after `last_applied` (the old zone
/// applied none of them), so none is lost; the old server then ends the session
/// ([`SessionEnd::Moved`](crate::protocol::session::SessionEnd::Moved)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// The connect token for the new zone's server (its
    /// [`CONNECT_TOKEN_BYTES`](crate::protocol::netcode::CONNECT_TOKEN_BYTES) bytes).
    pub token: Vec<u8>,
    /// The newest of the client's inputs the old zone applied (`None`: none).
    pub last_applied: Option<u32>,
}

impl Redirect {
    /// The redirect as the system channel carries it.
    pub fn encode(&self) -> bytes::Bytes {
        let mut out = vec![REDIRECT];
        out.extend(postcard::to_allocvec(self).unwrap_or_default());
        out.into()
    }

    /// A redirect from the system channel; `None` when the bytes are not one, or its token
    /// is not a connect token's size.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        match bytes.split_first() {
            Some((&REDIRECT, rest)) => {
                let r: Self = postcard::from_bytes(rest).ok()?;
                (r.token.len() == crate::protocol::netcode::CONNECT_TOKEN_BYTES).then_some(r)
            }
            _ => None,
        }
    }
}

/// "Come back with this if the connection breaks": a resume ticket, a connect token for this
/// client's own client id minted by the server itself, short-lived and renewed before it
/// expires. A client whose network breaks (a new address, a silence) connects again with it
/// through the ordinary handshake, and the server recognises the session it resumes: the same
/// player, world, team and score, and the same channels and snapshot history. A ticket is good
/// for one handshake (a used one is spent), for its client id only, until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The connect token (its [`CONNECT_TOKEN_BYTES`](crate::protocol::netcode::CONNECT_TOKEN_BYTES)
    /// bytes).
    pub token: Vec<u8>,
    /// How long the server keeps the session of a client it no longer hears, counted from the
    /// client's last packet, in milliseconds: until then a client can resume. At most the
    /// token's own timeout: the session ends at the timeout.
    pub grace_ms: u32,
}

impl Ticket {
    /// The ticket as the system channel carries it.
    pub fn encode(&self) -> bytes::Bytes {
        let mut out = vec![TICKET];
        out.extend(postcard::to_allocvec(self).unwrap_or_default());
        out.into()
    }

    /// A ticket from the system channel; `None` when the bytes are not one, or its token is
    /// not a connect token's size.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        match bytes.split_first() {
            Some((&TICKET, rest)) => {
                let t: Self = postcard::from_bytes(rest).ok()?;
                (t.token.len() == crate::protocol::netcode::CONNECT_TOKEN_BYTES).then_some(t)
            }
            _ => None,
        }
    }
}

/// What a viewer asks of a replay or spectators' world: sent as an ordinary message
/// (`client.channel().send_message(&SpectatorControl::Pause)`), each viewer's `Follow` its own,
/// the rest shared by every viewer of the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpectatorControl {
    /// Go to this recorded tick (the nearest keyframe before it, then the changes up to it).
    Seek(u32),
    /// Stop where it is.
    Pause,
    /// Go on.
    Play,
    /// Play at this many quarters of real time (1 to 16: 0.25× to 4×).
    Speed(u8),
    /// Show what this recorded player saw (its relevancy), or everything (`None`).
    Follow(Option<u32>),
}

/// "One snapshot in `interval` ticks, and one input packet in `interval` inputs": a server
/// short of CPU lowers every player's snapshot rate evenly and asks its clients to send
/// their inputs at the same rate (each input packet then carries the last `interval ×`
/// [`REDUNDANT_INPUTS`](crate::protocol::input::REDUNDANT_INPUTS) inputs, so each input still
/// travels in as many packets).
/// Sent to every player when the interval changes, and to a player that connects while it
/// is above 1. A client that ignores it keeps working: it only sends more than it needs to.
///
/// Bytes: kind, interval, and the most inputs the server reads in one packet
/// ([`MAX_PACKET_INPUTS`](crate::protocol::input::MAX_PACKET_INPUTS)). A pace of two bytes
/// (a server of session 37, which read four) is read as four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pace {
    /// Ticks between two snapshots of this player, and inputs between two of its input
    /// packets (1: every one; at most `REDUNDANT_INPUTS`).
    pub interval: u8,
    /// The most inputs the server reads in one packet (4 to `MAX_PACKET_INPUTS`).
    pub max_inputs: u8,
}

impl Pace {
    /// The pace `interval` from this server (which reads up to
    /// [`MAX_PACKET_INPUTS`](crate::protocol::input::MAX_PACKET_INPUTS) inputs a packet).
    pub fn new(interval: u8) -> Self {
        Self { interval, max_inputs: crate::protocol::input::MAX_PACKET_INPUTS as u8 }
    }

    /// The pace as the system channel carries it.
    pub fn encode(&self) -> bytes::Bytes {
        bytes::Bytes::from(vec![PACE, self.interval, self.max_inputs])
    }

    /// A pace from the system channel; `None` when the bytes are not one, its interval is
    /// not 1 to `REDUNDANT_INPUTS`, or its inputs are not 4 to `MAX_PACKET_INPUTS`.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        use crate::protocol::input::{MAX_PACKET_INPUTS, REDUNDANT_INPUTS};
        let (interval, max_inputs) = match bytes {
            [PACE, interval] => (*interval, REDUNDANT_INPUTS as u8),
            [PACE, interval, max] => (*interval, *max),
            _ => return None,
        };
        let ok = (1..=REDUNDANT_INPUTS as u8).contains(&interval)
            && (REDUNDANT_INPUTS as u8..=MAX_PACKET_INPUTS as u8).contains(&max_inputs);
        ok.then_some(Self { interval, max_inputs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pace_survives_the_wire_and_an_interval_out_of_range_is_refused() {
        for interval in 1..=4 {
            assert_eq!(Pace::decode(&Pace::new(interval).encode()), Some(Pace::new(interval)));
        }
        // A server of session 37 said no more, and read four inputs a packet.
        assert_eq!(Pace::decode(&[PACE, 3]), Some(Pace { interval: 3, max_inputs: 4 }));
        assert_eq!(Pace::decode(&[PACE, 0]), None);
        assert_eq!(Pace::decode(&[PACE, 5]), None);
        assert_eq!(Pace::decode(&[PACE, 2, 0]), None);
        assert_eq!(Pace::decode(&[PACE, 2, 17]), None);
        assert_eq!(Pace::decode(&[PACE, 2, 16, 0]), None);
        assert_eq!(Pace::decode(&[BOARD, 2]), None);
    }

    #[test]
    fn a_notice_survives_the_wire_and_garbage_is_refused() {
        let n = WorldNotice { world: 7, kind: "match".into(), reason: EnterReason::WorldStopped("panicked".into()) };
        assert_eq!(WorldNotice::decode(&n.encode()), Some(n));
        assert_eq!(WorldNotice::decode(&[WORLD, 0xff, 0xff, 0xff]), None);
        assert_eq!(WorldNotice::decode(&[BOARD, 0]), None);
        assert_eq!(WorldNotice::decode(&[]), None);
        let r = Redirect { token: vec![7; crate::protocol::netcode::CONNECT_TOKEN_BYTES], last_applied: Some(41) };
        assert_eq!(Redirect::decode(&r.encode()), Some(r));
        let t = Ticket { token: vec![9; crate::protocol::netcode::CONNECT_TOKEN_BYTES], grace_ms: 15_000 };
        assert_eq!(Ticket::decode(&t.encode()), Some(t));
        assert_eq!(Ticket::decode(&Ticket { token: vec![9; 10], grace_ms: 0 }.encode()), None, "not a token's size");
        assert_eq!(Redirect::decode(&Ticket { token: vec![9; 2048], grace_ms: 0 }.encode()), None);
        let short = Redirect { token: vec![7; 10], last_applied: None };
        assert_eq!(Redirect::decode(&short.encode()), None, "not a token's size");
        assert_eq!(WorldNotice::decode(&short.encode()), None);
        let long = WorldNotice { world: 1, kind: "é".repeat(100), reason: EnterReason::Moved };
        assert!(WorldNotice::decode(&long.encode()).is_some_and(|n| n.kind.len() <= MAX_NOTICE_TEXT_BYTES));
    }
}
