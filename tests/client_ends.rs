//! Every way a session ends that the client itself sees, read through
//! [`GameClient::ended`]: it disconnected (`Local`), the server went silent (`TimedOut`),
//! nobody answered (`NoAnswer`), its token expired before it got in (`TokenExpired`), a token
//! it was given could not be read (`InvalidToken`), and the server closed without a word
//! (`Closed`). The reasons a server says in its goodbye are in `disconnect_reasons.rs`,
//! `ServerFault` in `supervision.rs`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::recording::Event;
use volley::server::{Players, Tap};

/// Nothing but players.
struct Empty;

impl World for Empty {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

fn connected() -> Stepper<Empty> {
    let mut s = Stepper::new(Empty, 60, 4);
    s.add_client(LinkProfile::PERFECT);
    s.run(30);
    assert!(s.clients[0].client.is_ready());
    assert_eq!(s.clients[0].client.ended(), None);
    s
}

#[test]
fn a_client_that_disconnects_reads_local() {
    let mut s = connected();
    s.disconnect(0);
    assert_eq!(s.clients[0].client.ended(), Some(SessionEnd::Local));
    s.run(10);
    assert_eq!(s.players(), 0, "the server heard it");
    assert_eq!(s.clients[0].client.ended(), Some(SessionEnd::Local));
}

#[test]
fn a_client_whose_server_goes_silent_reads_timed_out() {
    let s = connected();
    let mut c = s.clients.into_iter().next().unwrap().client;
    // Nothing more comes from the server: the client tries to resume until the server's
    // grace (its ticket says 15 s) is over, then the connection is over.
    let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    let now = s.now;
    c.update(now + Duration::from_secs(2), &mut wire);
    assert_eq!(c.ended(), None, "not yet");
    c.update(now + Duration::from_secs(6), &mut wire);
    assert_eq!(c.ended(), None, "past the timeout, within the grace: still resuming");
    assert!(c.is_resuming());
    c.update(now + Duration::from_secs(16), &mut wire);
    assert_eq!(c.ended(), Some(SessionEnd::TimedOut));
}

/// A client of nobody: its token names a port where no server answers; it waits for an
/// answer `timeout` seconds.
fn client_of_nobody(timeout: i32) -> (GameClient, Duration) {
    let now = unix_now();
    let nobody: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut p = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, nobody, now.as_secs());
    p.timeout_seconds = timeout;
    let token = ConnectToken::generate(&p, &[1; 32]).unwrap();
    (GameClient::new(token, Arc::new(Schema::new()), now), now)
}

#[test]
fn a_client_nobody_answers_reads_no_answer() {
    let (mut c, now) = client_of_nobody(5);
    let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    c.update(now, &mut wire);
    assert!(!wire.is_empty(), "it asked");
    assert_eq!(c.ended(), None);
    c.update(now + Duration::from_secs(6), &mut wire);
    assert_eq!(c.ended(), Some(SessionEnd::NoAnswer));
}

#[test]
fn a_client_whose_token_expired_reads_token_expired() {
    // It would wait a minute for an answer, but its token lives 30 seconds (the client
    // counts them on its own clock from when it began).
    let (mut c, now) = client_of_nobody(60);
    let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    c.update(now, &mut wire);
    c.update(now + Duration::from_secs(20), &mut wire);
    assert_eq!(c.ended(), None, "still trying");
    c.update(now + Duration::from_secs(31), &mut wire);
    assert_eq!(c.ended(), Some(SessionEnd::TokenExpired));
}

/// Redirects every player, at its first tick, with a token that is not one.
struct BadRedirect;

impl Tap for BadRedirect {
    fn frame(&mut self, _: u32, _: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
        true
    }
    fn before_inputs(&mut self, players: &mut Players<'_>) {
        for p in 0..4 {
            players.redirect(p, vec![0xAB; 2048]);
        }
    }
}

#[test]
fn a_client_redirected_with_a_token_it_cannot_read_reads_invalid_token() {
    let mut s = connected();
    s.worlds().tap(WorldId::ENTRY, Box::new(BadRedirect)).unwrap();
    s.run(30);
    assert_eq!(s.clients[0].client.ended(), Some(SessionEnd::InvalidToken));
}

#[test]
fn a_client_whose_server_closes_without_a_word_reads_closed() {
    use volley::protocol::netcode::server::{Endpoint, EndpointConfig, Received};
    // A server that speaks netcode.io and nothing of volley's session (another netcode.io
    // server, or one whose goodbye was lost): it lets the client in, then disconnects it.
    let key = [5u8; 32];
    let addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let mut now = unix_now();
    let config = EndpointConfig::new(DEFAULT_PROTOCOL_ID, key, vec![addr], 4);
    let mut server = Endpoint::with_challenge_key(config, [7; 32], now);
    let token = ConnectToken::generate(&TokenParams::new(DEFAULT_PROTOCOL_ID, 1, addr, now.as_secs()), &key).unwrap();
    let mut c = GameClient::new(token, Arc::new(Schema::new()), now);
    let me: SocketAddr = "127.0.0.1:50000".parse().unwrap();
    let mut index = None;
    for _ in 0..50 {
        now += Duration::from_millis(20);
        let mut up: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        c.update(now, &mut up);
        let mut down: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (_, mut b) in up {
            if let Received::Connected { client_index, .. } = server.process(now, me, &mut b, &mut down) {
                index = Some(client_index);
            }
        }
        server.update(now, &mut down, &mut Vec::new());
        for (_, mut b) in down {
            c.receive(now, addr, &mut b);
        }
    }
    assert!(index.is_some() && c.client_index().is_some(), "connected at the netcode level");
    assert_eq!(c.ended(), None);
    let mut down: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    server.disconnect(now, index.unwrap(), &mut down);
    for (_, mut b) in down {
        c.receive(now, addr, &mut b);
    }
    assert_eq!(c.ended(), Some(SessionEnd::Closed));
}
