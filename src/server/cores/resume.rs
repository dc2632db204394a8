//! Resume tickets, sans-IO: the server mints each player a connect token for its own client
//! id ([`Ticket`]), renews it before it expires, and tells a handshake that resumes a session
//! from one that replaces it or starts afresh. The socket actor and the stepper keep one
//! [`Tickets`] beside their [`Endpoint`](crate::protocol::netcode::server::Endpoint) and ask it
//! about every completed handshake ([`Tickets::judge`]).
//!
//! A ticket is recognised by its keys: the server remembers the client-to-server key of the
//! last two tickets it minted for each client id (the one before may still be in flight when a
//! renewal goes out) until they expire. A ticket is spent by its handshake (the endpoint's
//! token history refuses it a second time), its keys are forgotten when it is used, and a
//! resumed connection runs under the ticket's fresh keys with sequences from zero: no nonce is
//! used twice under one key.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use crate::protocol::netcode::server::{Connection, EndpointConfig};
use crate::protocol::netcode::token::{ConnectToken, TokenParams};
use crate::protocol::netcode::{Key, Transmit, USER_DATA_BYTES};
use crate::protocol::system::Ticket;

/// How long a resume ticket can be used.
pub(crate) const TICKET_LIFE: Duration = Duration::from_secs(120);

/// A player's ticket is renewed once it is this old, so a client always holds one with a
/// minute left.
pub(crate) const TICKET_RENEW: Duration = Duration::from_secs(60);

/// How long a silent client's player is kept for it to resume, by default
/// ([`ServerConfig::resume_grace`](crate::server::ServerConfig::resume_grace)).
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(15);

/// Tickets remembered for a client id: the newest and the one before.
const KEPT: usize = 2;

/// What a completed handshake is, by its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judged {
    /// A ticket of the session in this slot: the connection takes that session over (same
    /// player, same channels), at the new address under the new keys.
    Resume(usize),
    /// A token that is not a ticket, for a client id whose session in this slot lingers: the
    /// new connection is a new session, and that one ends ([`SessionEnd::Replaced`]).
    ///
    /// [`SessionEnd::Replaced`]: crate::protocol::session::SessionEnd::Replaced
    Replace(usize),
    /// A new session.
    Fresh,
    /// A ticket of a session that is over (timed out, kicked): nothing to resume, and the
    /// client, which would go on with a session's state the server no longer has, is refused
    /// ([`SessionEnd::Gone`]).
    ///
    /// [`SessionEnd::Gone`]: crate::protocol::session::SessionEnd::Gone
    Gone,
}

/// The tickets a server minted and has not seen used.
#[derive(Debug)]
pub(crate) struct Tickets {
    protocol_id: u64,
    private_key: Key,
    addresses: Vec<SocketAddr>,
    /// Per client id: the client-to-server keys of its newest tickets, with when each expires.
    issued: HashMap<u64, Vec<(Key, Duration)>>,
    /// Bound on `issued` (twice the slots: the players, and those that left lately).
    capacity: usize,
    last_purge: Duration,
    /// Where keys come from: the OS (`None`), or a counter (the deterministic stepper).
    counter: Option<u64>,
    /// How long a session waits for its client to resume (told to the client in each ticket).
    grace: Duration,
    /// Tickets minted, and handshakes refused as [`Judged::Gone`].
    pub(crate) minted: u64,
    pub(crate) refused: u64,
}

impl Tickets {
    /// Tickets for the server that `config` sets up, whose sessions wait `grace` for a
    /// silent client; keys from the OS.
    pub(crate) fn new(config: &EndpointConfig, grace: Duration) -> Self {
        Self {
            protocol_id: config.protocol_id,
            private_key: config.private_key,
            addresses: config.public_addresses.clone(),
            issued: HashMap::new(),
            capacity: config.max_clients.saturating_mul(2).max(64),
            last_purge: Duration::ZERO,
            counter: None,
            grace,
            minted: 0,
            refused: 0,
        }
    }

    /// Tickets whose keys come from a counter (the same run, the same bytes).
    pub(crate) fn deterministic(config: &EndpointConfig, grace: Duration) -> Self {
        Self { counter: Some(0), ..Self::new(config, grace) }
    }

    /// Sessions wait `grace` for a silent client (the next tickets say so).
    pub(crate) fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    fn keys(&mut self) -> Option<([u8; 24], Key, Key)> {
        let Some(c) = &mut self.counter else {
            use crate::protocol::netcode::random_bytes;
            return Some((random_bytes().ok()?, random_bytes().ok()?, random_bytes().ok()?));
        };
        *c += 1;
        let fill = |tag: u64, n: u64| {
            let mut k = [0u8; 32];
            for (i, chunk) in k.chunks_mut(8).enumerate() {
                let x = splitmix(n ^ tag.rotate_left(17) ^ (i as u64).wrapping_mul(0x9e37_79b9));
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            k
        };
        let mut nonce = [0u8; 24];
        nonce.copy_from_slice(&fill(3, *c)[..24]);
        Some((nonce, fill(1, *c), fill(2, *c)))
    }

    /// A fresh ticket for the client of `connection` (who it is: its client id, user data and
    /// timeout), minted at `now` (Unix time): the system message to send it, or `None` when the
    /// OS has no randomness (the player goes on without one).
    pub(crate) fn mint(&mut self, connection: &TicketHolder, now: Duration) -> Option<Bytes> {
        self.purge(now);
        let (nonce, c2s, s2c) = self.keys()?;
        let params = TokenParams {
            protocol_id: self.protocol_id,
            client_id: connection.client_id,
            now_unix_secs: now.as_secs(),
            expire_seconds: TICKET_LIFE.as_secs(),
            timeout_seconds: connection.timeout_seconds,
            server_addresses: self.addresses.clone(),
            user_data: connection.user_data,
        };
        let token = ConnectToken::generate_with(&params, &self.private_key, nonce, c2s, s2c).ok()?;
        if !self.issued.contains_key(&connection.client_id) && self.issued.len() >= self.capacity {
            // Full of tickets nobody used: the one expiring soonest gives way.
            let soonest = self.issued.iter().min_by_key(|(_, v)| v.iter().map(|(_, e)| *e).max()).map(|(id, _)| *id);
            if let Some(id) = soonest {
                self.issued.remove(&id);
            }
        }
        let kept = self.issued.entry(connection.client_id).or_default();
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push((c2s, now + TICKET_LIFE));
        self.minted += 1;
        let grace_ms = u32::try_from(self.grace.as_millis()).unwrap_or(u32::MAX);
        Some(Ticket { token: token.to_bytes().to_vec(), grace_ms }.encode())
    }

    /// What a completed handshake is: `connection` its new connection, `replaces` the slot of
    /// the session its client id still has, if any. A ticket's keys are forgotten once used.
    pub(crate) fn judge(&mut self, connection: &Connection, replaces: Option<usize>, now: Duration) -> Judged {
        let id = connection.client_id();
        let ticket = self.issued.get_mut(&id).and_then(|kept| {
            let i = kept.iter().position(|(k, until)| *until > now && connection.uses_key(k))?;
            Some(kept.remove(i))
        });
        match (ticket.is_some(), replaces) {
            (true, Some(slot)) => Judged::Resume(slot),
            (false, Some(slot)) => Judged::Replace(slot),
            (false, None) => Judged::Fresh,
            (true, None) => {
                self.refused += 1;
                Judged::Gone
            }
        }
    }

    fn purge(&mut self, now: Duration) {
        if now.saturating_sub(self.last_purge) < Duration::from_secs(1) {
            return;
        }
        self.last_purge = now;
        self.issued.retain(|_, kept| {
            kept.retain(|(_, until)| *until > now);
            !kept.is_empty()
        });
    }
}

/// Who a ticket is for: what of a connection a ticket copies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TicketHolder {
    /// The client id.
    pub client_id: u64,
    /// The user data of the token it connected with.
    pub user_data: [u8; USER_DATA_BYTES],
    /// Its connection timeout (negative: none).
    pub timeout_seconds: i32,
}

impl TicketHolder {
    /// The holder of a connection.
    pub(crate) fn of(c: &Connection) -> Self {
        Self { client_id: c.client_id(), user_data: *c.user_data(), timeout_seconds: c.timeout_seconds() }
    }
}

/// Refuses a resume ticket whose session is over ([`Judged::Gone`]), on its new connection in
/// the reserved slot `slot`: the client is greeted, reads why ([`SessionEnd::Gone`], three
/// times over), then the disconnect. The caller gives the slot back.
///
/// [`SessionEnd::Gone`]: crate::protocol::session::SessionEnd::Gone
pub(crate) fn refuse_gone(connection: &mut Connection, slot: usize, now: Duration, tx: &mut impl Transmit) {
    use crate::protocol::session::{Control, MAX_CONTROL_BYTES, SessionEnd};
    connection.greet(slot as u32, now, tx);
    let mut b = [0u8; MAX_CONTROL_BYTES];
    let n = Control::Goodbye(SessionEnd::Gone).encode(&mut b);
    for _ in 0..3 {
        let _ = connection.send_payload(now, &b[..n], tx);
    }
    connection.disconnect(now, tx);
}

/// A ticket is due for renewal: it was minted at `minted` and it is `now`.
pub(crate) fn renewal_due(minted: Duration, now: Duration) -> bool {
    now.saturating_sub(minted) >= TICKET_RENEW
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::netcode::server::Accepted;

    fn config() -> EndpointConfig {
        EndpointConfig::new(7, [1; 32], vec!["127.0.0.1:4000".parse().unwrap()], 4)
    }

    fn connection_with(client_id: u64, recv_key: Key) -> Connection {
        let accepted = Accepted {
            client_id,
            addr: "127.0.0.1:5000".parse().unwrap(),
            user_data: [0; USER_DATA_BYTES],
            send_key: [9; 32],
            recv_key,
            timeout_seconds: 5,
        };
        Connection::new(&accepted, 0, 4, 7, config().connection_rate, Duration::ZERO)
    }

    #[test]
    fn a_ticket_resumes_its_own_clients_session_once_and_is_then_forgotten() {
        let mut t = Tickets::deterministic(&config(), DEFAULT_GRACE);
        let now = Duration::from_secs(1_000);
        let holder = TicketHolder { client_id: 5, user_data: [0; USER_DATA_BYTES], timeout_seconds: 5 };
        let bytes = t.mint(&holder, now).unwrap();
        let ticket = Ticket::decode(&bytes).unwrap();
        let token = ConnectToken::from_bytes(&ticket.token).unwrap();
        assert_eq!(token.expire_timestamp - token.create_timestamp, TICKET_LIFE.as_secs());
        let c = connection_with(5, token.client_to_server_key);
        assert_eq!(t.judge(&connection_with(6, token.client_to_server_key), Some(1), now), Judged::Replace(1));
        assert_eq!(t.judge(&c, Some(2), now), Judged::Resume(2));
        assert_eq!(t.judge(&c, Some(2), now), Judged::Replace(2), "spent");
        let other = connection_with(5, [3; 32]);
        assert_eq!(t.judge(&other, None, now), Judged::Fresh);
        // A ticket whose session is gone is refused; an expired one is not a ticket any more.
        let token = ConnectToken::from_bytes(&Ticket::decode(&t.mint(&holder, now).unwrap()).unwrap().token).unwrap();
        assert_eq!(t.judge(&connection_with(5, token.client_to_server_key), None, now), Judged::Gone);
        let token = ConnectToken::from_bytes(&Ticket::decode(&t.mint(&holder, now).unwrap()).unwrap().token).unwrap();
        let late = now + TICKET_LIFE;
        assert_eq!(t.judge(&connection_with(5, token.client_to_server_key), Some(0), late), Judged::Replace(0));
        assert_eq!(t.refused, 1);
    }

    #[test]
    fn the_table_of_tickets_is_bounded() {
        let mut t = Tickets::deterministic(&config(), DEFAULT_GRACE);
        for id in 0..1_000 {
            let holder = TicketHolder { client_id: id, user_data: [0; USER_DATA_BYTES], timeout_seconds: 5 };
            t.mint(&holder, Duration::from_secs(1_000)).unwrap();
        }
        assert!(t.issued.len() <= 64);
    }
}
