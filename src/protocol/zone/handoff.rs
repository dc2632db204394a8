//! Handing a player from one zone to its neighbour, sans-IO: what the zones say to each other,
//! and each side's bookkeeping, with the time passed in.
//!
//! The old zone makes an [`Offer`] (who the player is, the game's state for it, and the inputs
//! it received but did not apply) and asks the new zone, over the bus's request-reply, which
//! answers with an [`Answer`]: accepted (with the address its players connect to) or refused.
//! The old zone keeps the player until the answer is an acceptance ([`Departures`]): a zone
//! that refuses or does not answer in time leaves the player where it is. The new zone keeps
//! accepted offers until the player connects or the offer expires ([`Arrivals`]), and gives the
//! game the carried state with the player's join.
//!
//! ```
//! use std::time::Duration;
//! use volley::protocol::zone::handoff::{Answer, Arrivals, Departures, Offer, Outcome};
//!
//! let t = Duration::from_secs(10);
//! let mut leaving = Departures::new(Duration::from_millis(100));
//! let mut arriving = Arrivals::new(Duration::from_secs(5), 1024);
//!
//! let offer = Offer::new(0, 42, [0; 256], b"hp=80".to_vec());
//! leaving.start(7, 1, t).unwrap(); // player 7 of zone 0, to zone 1
//! let answer = arriving.handle_offer(Offer::decode(&offer.encode()).unwrap(), "10.0.0.2:40000".parse().unwrap(), t);
//! let outcome = leaving.handle_answer(7, &Answer::decode(&answer.encode()).unwrap(), t).unwrap();
//! assert!(matches!(outcome, Outcome::Accepted { to: 1, .. }));
//! assert_eq!(arriving.take(42, t).unwrap().state, b"hp=80");
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ZoneId;
use crate::protocol::netcode::USER_DATA_BYTES;

pub use crate::protocol::PlayerId;

/// The first bytes of an offer.
pub const OFFER_MAGIC: [u8; 4] = *b"VZO1";
/// The first bytes of an answer.
pub const ANSWER_MAGIC: [u8; 4] = *b"VZA1";
/// The most state a game may carry with a player.
pub const MAX_STATE_BYTES: usize = 16 * 1024;
/// The most inputs carried with a player (two seconds at 60 Hz would be 120: a player whose
/// handoff takes that long has waited too long anyway; the oldest are left out).
pub const MAX_CARRIED_INPUTS: usize = 64;
/// The longest carried input (as on the wire).
pub const MAX_CARRIED_INPUT_BYTES: usize = crate::protocol::input::MAX_INPUT_BYTES;
/// The longest refusal reason.
const MAX_REASON_BYTES: usize = 200;

/// An input the old zone received and did not apply, carried to the new zone to apply in
/// order before the player's next ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedInput {
    /// Its sequence number (the client's).
    pub seq: u32,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// What the old zone sends the new one about a player crossing to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The zone the player leaves.
    pub from: ZoneId,
    /// Its connect token's client id (the new zone knows it by this when it connects).
    pub client_id: u64,
    /// Its connect token's user data.
    pub user_data: Vec<u8>,
    /// The game's state for it ([`MAX_STATE_BYTES`] at most).
    pub state: Vec<u8>,
    /// The newest input sequence the old zone applied (0: none).
    pub last_applied: u32,
    /// Inputs received after that, in order ([`MAX_CARRIED_INPUTS`] at most).
    pub inputs: Vec<CarriedInput>,
    /// The player's id in the old zone, which is its avatar's id there in a game that numbers
    /// avatars by player (as [`ZoneGame::viewer`](crate::server::extensions::zone::ZoneGame::viewer)
    /// assumes). The new zone hides that entity of the old zone's border frames from the
    /// moment the player joins until the frames no longer hold it, so that the player is not
    /// shown twice while the old zone's last frames are still in use.
    pub old_id: Option<u32>,
}

/// Why bytes are not a usable offer or answer, or an offer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    /// Not an offer or answer at all.
    #[error("not a handoff message")]
    NotAMessage,
    /// An offer beyond the limits (state, inputs, user data).
    #[error("the offer is over its limits: {0}")]
    TooBig(&'static str),
}

impl Offer {
    /// An offer of player `client_id` (with its token's `user_data`) from zone `from`,
    /// carrying `state`, no inputs.
    pub fn new(from: ZoneId, client_id: u64, user_data: [u8; USER_DATA_BYTES], state: Vec<u8>) -> Self {
        Self {
            from,
            client_id,
            user_data: user_data.to_vec(),
            state,
            last_applied: 0,
            inputs: Vec::new(),
            old_id: None,
        }
    }

    /// Whether it is within the limits.
    ///
    /// # Errors
    /// Which limit it is over.
    pub fn check(&self) -> Result<(), HandoffError> {
        if self.user_data.len() != USER_DATA_BYTES {
            return Err(HandoffError::TooBig("user data"));
        }
        if self.state.len() > MAX_STATE_BYTES {
            return Err(HandoffError::TooBig("state"));
        }
        if self.inputs.len() > MAX_CARRIED_INPUTS || self.inputs.iter().any(|i| i.bytes.len() > MAX_CARRIED_INPUT_BYTES)
        {
            return Err(HandoffError::TooBig("inputs"));
        }
        Ok(())
    }

    /// The offer's bytes for the bus.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = OFFER_MAGIC.to_vec();
        // Serializing plain data into a Vec cannot fail.
        out.extend(postcard::to_allocvec(self).unwrap_or_default());
        out
    }

    /// An offer from the bus, checked against the limits.
    ///
    /// # Errors
    /// When the bytes are not an offer, or it is over the limits.
    pub fn decode(bytes: &[u8]) -> Result<Self, HandoffError> {
        let rest = bytes.strip_prefix(&OFFER_MAGIC[..]).ok_or(HandoffError::NotAMessage)?;
        // postcard reads lengths against the bytes present: a message cannot make it allocate
        // more than its own size.
        let offer: Self = postcard::from_bytes(rest).map_err(|_| HandoffError::NotAMessage)?;
        offer.check()?;
        Ok(offer)
    }

    /// The user data as the token holds it.
    pub fn user_data(&self) -> [u8; USER_DATA_BYTES] {
        let mut u = [0; USER_DATA_BYTES];
        let n = self.user_data.len().min(USER_DATA_BYTES);
        u[..n].copy_from_slice(&self.user_data[..n]);
        u
    }
}

/// The new zone's answer to an [`Offer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The player may come: connect to this address (the old zone mints the token).
    Accepted {
        /// The new zone's public game address.
        server: SocketAddr,
    },
    /// It may not.
    Refused {
        /// Why (for the log and the count).
        reason: String,
    },
}

impl Answer {
    /// The answer's bytes for the bus.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = ANSWER_MAGIC.to_vec();
        out.extend(postcard::to_allocvec(self).unwrap_or_default());
        out
    }

    /// An answer from the bus.
    ///
    /// # Errors
    /// When the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Result<Self, HandoffError> {
        let rest = bytes.strip_prefix(&ANSWER_MAGIC[..]).ok_or(HandoffError::NotAMessage)?;
        let mut a: Self = postcard::from_bytes(rest).map_err(|_| HandoffError::NotAMessage)?;
        if let Self::Refused { reason } = &mut a
            && reason.len() > MAX_REASON_BYTES
        {
            let mut end = MAX_REASON_BYTES;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Ok(a)
    }
}

/// How a handoff ended, for the old zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The new zone takes the player: give it a token for `server` and let it go.
    Accepted {
        /// The player.
        player: PlayerId,
        /// The new zone.
        to: ZoneId,
        /// Its address.
        server: SocketAddr,
        /// From the start of the handoff to the answer.
        took: Duration,
    },
    /// The new zone refused: the player stays.
    Refused {
        /// The player.
        player: PlayerId,
        /// The zone that refused.
        to: ZoneId,
        /// Why.
        reason: String,
    },
    /// No answer in time: the player stays.
    TimedOut {
        /// The player.
        player: PlayerId,
        /// The zone that did not answer.
        to: ZoneId,
    },
}

impl Outcome {
    /// Its label on `volley_zone_handoffs_total{outcome}`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Accepted { .. } => "accepted",
            Self::Refused { .. } => "refused",
            Self::TimedOut { .. } => "timed_out",
        }
    }
}

/// A player leaving, as the old zone tracks it.
#[derive(Debug, Clone, Copy)]
struct Leaving {
    to: ZoneId,
    started: Duration,
}

/// The old zone's handoffs in flight (see the module docs).
#[derive(Debug)]
pub struct Departures {
    timeout: Duration,
    leaving: BTreeMap<PlayerId, Leaving>,
}

/// A handoff was asked for a player already being handed off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("player {0} is already being handed off")]
pub struct AlreadyLeaving(pub PlayerId);

impl Departures {
    /// Handoffs that give up after `timeout` without an answer.
    pub fn new(timeout: Duration) -> Self {
        Self { timeout, leaving: BTreeMap::new() }
    }

    /// Starts handing `player` to zone `to` at `now`: its inputs are held from now on.
    ///
    /// # Errors
    /// When it is already being handed off (one at a time).
    pub fn start(&mut self, player: PlayerId, to: ZoneId, now: Duration) -> Result<(), AlreadyLeaving> {
        if self.leaving.contains_key(&player) {
            return Err(AlreadyLeaving(player));
        }
        self.leaving.insert(player, Leaving { to, started: now });
        Ok(())
    }

    /// Whether `player` is being handed off (its inputs are held, not applied).
    pub fn is_leaving(&self, player: PlayerId) -> bool {
        self.leaving.contains_key(&player)
    }

    /// Handoffs in flight.
    pub fn len(&self) -> usize {
        self.leaving.len()
    }

    /// Whether none is in flight.
    pub fn is_empty(&self) -> bool {
        self.leaving.is_empty()
    }

    /// The new zone answered for `player` at `now`; `None` when no handoff of it is in flight
    /// (it timed out already, or the answer is a stray).
    pub fn handle_answer(&mut self, player: PlayerId, answer: &Answer, now: Duration) -> Option<Outcome> {
        let l = self.leaving.remove(&player)?;
        Some(match answer {
            Answer::Accepted { server } => {
                Outcome::Accepted { player, to: l.to, server: *server, took: now.saturating_sub(l.started) }
            }
            Answer::Refused { reason } => Outcome::Refused { player, to: l.to, reason: reason.clone() },
        })
    }

    /// The zone `player` is being handed to, if it is.
    pub fn leaving_to(&self, player: PlayerId) -> Option<ZoneId> {
        self.leaving.get(&player).map(|l| l.to)
    }

    /// The player left another way (disconnected) while being handed off: forget it.
    pub fn forget(&mut self, player: PlayerId) {
        self.leaving.remove(&player);
    }

    /// The handoffs that have waited past their timeout at `now`, ended.
    pub fn poll_timeouts(&mut self, now: Duration) -> Vec<Outcome> {
        let timeout = self.timeout;
        let expired: Vec<PlayerId> =
            self.leaving.iter().filter(|(_, l)| now.saturating_sub(l.started) >= timeout).map(|(p, _)| *p).collect();
        expired
            .into_iter()
            .filter_map(|player| self.leaving.remove(&player).map(|l| Outcome::TimedOut { player, to: l.to }))
            .collect()
    }
}

/// The new zone's accepted offers, waiting for their players to connect (see the module docs).
#[derive(Debug)]
pub struct Arrivals {
    wait: Duration,
    limit: usize,
    waiting: BTreeMap<u64, (Offer, Duration)>,
}

impl Arrivals {
    /// Offers kept `wait` (the connect token's life is enough), at most `limit` at a time.
    pub fn new(wait: Duration, limit: usize) -> Self {
        Self { wait, limit, waiting: BTreeMap::new() }
    }

    /// An offer arrived at `now`; this zone's players connect to `server`. Accepted unless
    /// the table is full (after dropping expired offers); a newer offer for the same client
    /// replaces an older one.
    pub fn handle_offer(&mut self, offer: Offer, server: SocketAddr, now: Duration) -> Answer {
        if let Err(e) = offer.check() {
            return Answer::Refused { reason: e.to_string() };
        }
        if self.waiting.len() >= self.limit && !self.waiting.contains_key(&offer.client_id) {
            self.expire(now);
            if self.waiting.len() >= self.limit {
                return Answer::Refused { reason: "too many players on their way in".into() };
            }
        }
        self.waiting.insert(offer.client_id, (offer, now + self.wait));
        Answer::Accepted { server }
    }

    /// The offer of `client_id`, if one waits (taken: a player arrives once).
    pub fn take(&mut self, client_id: u64, now: Duration) -> Option<Offer> {
        let (offer, until) = self.waiting.remove(&client_id)?;
        (now <= until).then_some(offer)
    }

    /// Drops the offers whose players never came; how many.
    pub fn expire(&mut self, now: Duration) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|_, (_, until)| now <= *until);
        before - self.waiting.len()
    }

    /// Offers waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const ADDR: &str = "10.0.0.2:40000";

    fn offer(client: u64) -> Offer {
        let mut o = Offer::new(2, client, [7; USER_DATA_BYTES], vec![1, 2, 3]);
        o.last_applied = 41;
        o.inputs = vec![CarriedInput { seq: 42, bytes: vec![9; 5] }, CarriedInput { seq: 43, bytes: vec![8] }];
        o.old_id = Some(17);
        o
    }

    #[test]
    fn offers_and_answers_round_trip_and_garbage_is_refused() {
        let o = offer(5);
        assert_eq!(Offer::decode(&o.encode()).unwrap(), o);
        assert_eq!(o.user_data(), [7; USER_DATA_BYTES]);
        for a in [Answer::Accepted { server: ADDR.parse().unwrap() }, Answer::Refused { reason: "full".into() }] {
            assert_eq!(Answer::decode(&a.encode()).unwrap(), a);
        }
        assert_eq!(Offer::decode(b"VZO1"), Err(HandoffError::NotAMessage));
        assert_eq!(Offer::decode(&Answer::Refused { reason: "x".into() }.encode()), Err(HandoffError::NotAMessage));
        let long = Answer::Refused { reason: "é".repeat(300) }.encode();
        let Answer::Refused { reason } = Answer::decode(&long).unwrap() else { panic!() };
        assert!(reason.len() <= MAX_REASON_BYTES);
        let bytes = o.encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x55;
            let _ = Offer::decode(&b);
            let _ = Offer::decode(&bytes[..i]);
        }
    }

    #[test]
    fn offers_over_their_limits_are_refused() {
        let mut big = offer(1);
        big.state = vec![0; MAX_STATE_BYTES + 1];
        assert_eq!(Offer::decode(&big.encode()), Err(HandoffError::TooBig("state")));
        let mut many = offer(1);
        many.inputs = vec![CarriedInput { seq: 1, bytes: vec![] }; MAX_CARRIED_INPUTS + 1];
        assert_eq!(Offer::decode(&many.encode()), Err(HandoffError::TooBig("inputs")));
        let mut fat = offer(1);
        fat.inputs[0].bytes = vec![0; MAX_CARRIED_INPUT_BYTES + 1];
        assert_eq!(Offer::decode(&fat.encode()), Err(HandoffError::TooBig("inputs")));
        let mut short = offer(1);
        short.user_data.pop();
        assert_eq!(Offer::decode(&short.encode()), Err(HandoffError::TooBig("user data")));
    }

    #[test]
    fn a_player_stays_until_the_new_zone_accepts() {
        let ms = Duration::from_millis;
        let mut d = Departures::new(ms(100));
        d.start(1, 3, ms(0)).unwrap();
        d.start(2, 3, ms(10)).unwrap();
        d.start(3, 4, ms(20)).unwrap();
        assert_eq!(d.start(1, 3, ms(30)), Err(AlreadyLeaving(1)));
        assert!(d.is_leaving(1));
        let accepted = d.handle_answer(1, &Answer::Accepted { server: ADDR.parse().unwrap() }, ms(40)).unwrap();
        assert_eq!(accepted, Outcome::Accepted { player: 1, to: 3, server: ADDR.parse().unwrap(), took: ms(40) });
        let refused = d.handle_answer(2, &Answer::Refused { reason: "full".into() }, ms(50)).unwrap();
        assert_eq!(refused.label(), "refused");
        assert!(d.poll_timeouts(ms(119)).is_empty(), "player 3 has 100 ms from 20");
        assert_eq!(d.poll_timeouts(ms(120)), vec![Outcome::TimedOut { player: 3, to: 4 }]);
        assert!(d.handle_answer(3, &Answer::Accepted { server: ADDR.parse().unwrap() }, ms(130)).is_none(), "too late");
        assert!(d.is_empty() && !d.is_leaving(3));
    }

    #[test]
    fn arrivals_wait_for_their_players_bounded_and_expiring() {
        let s = Duration::from_secs;
        let server: SocketAddr = ADDR.parse().unwrap();
        let mut a = Arrivals::new(s(5), 2);
        assert_eq!(a.handle_offer(offer(1), server, s(0)), Answer::Accepted { server });
        assert_eq!(a.handle_offer(offer(2), server, s(1)), Answer::Accepted { server });
        assert!(matches!(a.handle_offer(offer(3), server, s(2)), Answer::Refused { .. }), "full");
        assert_eq!(a.handle_offer(offer(2), server, s(2)), Answer::Accepted { server }, "a newer offer replaces");
        assert_eq!(a.take(1, s(3)).unwrap(), offer(1));
        assert!(a.take(1, s(3)).is_none(), "a player arrives once");
        assert!(a.take(2, s(8)).is_none(), "expired at 7");
        assert_eq!(a.handle_offer(offer(3), server, s(9)), Answer::Accepted { server });
        assert_eq!(a.expire(s(15)), 1);
        assert!(a.is_empty());
    }
}
