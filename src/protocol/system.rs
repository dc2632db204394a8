//! What the framework itself tells a client on its own reliable channel (the "system"
//! channel, told apart from the game's by its frame byte, see
//! [`SYSTEM_FRAME_TAG`](crate::protocol::reliability::channel::SYSTEM_FRAME_TAG)). Each
//! message's first byte says what it is: [`BOARD`] (a scoreboard update, see
//! [`crate::protocol::scoreboard`]) or [`WORLD`] (a [`WorldNotice`]); the rest is postcard.

use serde::{Deserialize, Serialize};

use crate::protocol::cut;

/// First byte of a scoreboard update.
pub const BOARD: u8 = 0;
/// First byte of a [`WorldNotice`].
pub const WORLD: u8 = 1;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_survives_the_wire_and_garbage_is_refused() {
        let n = WorldNotice { world: 7, kind: "match".into(), reason: EnterReason::WorldStopped("panicked".into()) };
        assert_eq!(WorldNotice::decode(&n.encode()), Some(n));
        assert_eq!(WorldNotice::decode(&[WORLD, 0xff, 0xff, 0xff]), None);
        assert_eq!(WorldNotice::decode(&[BOARD, 0]), None);
        assert_eq!(WorldNotice::decode(&[]), None);
        let long = WorldNotice { world: 1, kind: "é".repeat(100), reason: EnterReason::Moved };
        assert!(WorldNotice::decode(&long.encode()).is_some_and(|n| n.kind.len() <= MAX_NOTICE_TEXT_BYTES));
    }
}
