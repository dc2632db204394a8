//! The server and client processing rules of netcode.io 1.02, one rule a test, stepped
//! deterministically in memory (virtual clock, no sockets).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use volley::protocol::netcode::client::{Client, ClientState};
use volley::protocol::netcode::server::{Disconnected, Endpoint, EndpointConfig, Received};
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::netcode::{DisconnectReason, DropReason, Key, USER_DATA_BYTES};

const PROTOCOL: u64 = 0x766f_6c6c_6579;
const KEY: Key = [42u8; 32];
const T0: Duration = Duration::from_secs(1_700_000_000);
const STEP: Duration = Duration::from_millis(10);

fn server_addr() -> SocketAddr {
    "127.0.0.1:40000".parse().unwrap()
}

fn client_addr(i: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 2], 50_000 + i))
}

fn params(client_id: u64) -> TokenParams {
    TokenParams {
        protocol_id: PROTOCOL,
        client_id,
        now_unix_secs: T0.as_secs(),
        expire_seconds: 30,
        timeout_seconds: 5,
        server_addresses: vec![server_addr()],
        user_data: [client_id as u8; USER_DATA_BYTES],
    }
}

fn token(client_id: u64) -> ConnectToken {
    ConnectToken::generate(&params(client_id), &KEY).unwrap()
}

type Wire = Vec<(SocketAddr, Vec<u8>)>;

/// One server and its clients, with every datagram delivered after one step.
struct Net {
    now: Duration,
    server: Endpoint,
    clients: Vec<(SocketAddr, Client)>,
    /// Server events seen so far (connects, payloads, disconnects).
    connected: Vec<u64>,
    payloads_at_server: Vec<(usize, Vec<u8>)>,
    payloads_at_clients: Vec<(usize, Vec<u8>)>,
    disconnected: Vec<Disconnected>,
    /// When false, datagrams from the server are lost.
    server_reachable: bool,
    /// When false, response packets from clients are lost.
    deliver_responses: bool,
}

impl Net {
    fn new(max_clients: usize) -> Self {
        let config = EndpointConfig::new(PROTOCOL, KEY, vec![server_addr()], max_clients);
        Self {
            now: T0,
            server: Endpoint::with_challenge_key(config, [7u8; 32], T0),
            clients: Vec::new(),
            connected: Vec::new(),
            payloads_at_server: Vec::new(),
            payloads_at_clients: Vec::new(),
            disconnected: Vec::new(),
            server_reachable: true,
            deliver_responses: true,
        }
    }

    fn add_client(&mut self, token: ConnectToken) -> usize {
        let i = self.clients.len();
        let mut c = Client::new(token, self.now);
        c.connect(self.now);
        self.clients.push((client_addr(i as u16), c));
        i
    }

    fn step(&mut self) {
        self.now += STEP;
        for i in 0..self.clients.len() {
            let mut wire: Wire = Vec::new();
            self.clients[i].1.update(self.now, &mut wire);
            let from = self.clients[i].0;
            for (_, bytes) in wire {
                self.deliver_to_server(from, bytes);
            }
        }
        let mut to_clients: Wire = Vec::new();
        let mut gone = Vec::new();
        self.server.update(self.now, &mut to_clients, &mut gone);
        self.disconnected.extend(gone);
        self.deliver_to_clients(to_clients);
    }

    /// Delivers one datagram to the server, checks the no-amplification rule on the replies
    /// and delivers them. Returns what the server made of it.
    fn deliver_to_server(&mut self, from: SocketAddr, mut bytes: Vec<u8>) -> Option<DropReason> {
        if !self.deliver_responses && bytes.first().is_some_and(|b| b & 0x0f == 3) {
            return None;
        }
        let mut replies: Wire = Vec::new();
        let size = bytes.len();
        let unauthenticated = !matches!(bytes.first().map(|b| b & 0x0f), Some(4..=6));
        let mut dropped = None;
        match self.server.process(self.now, from, &mut bytes, &mut replies) {
            Received::Connected { client_id, replaced, .. } => {
                self.connected.push(client_id);
                self.disconnected.extend(replaced);
            }
            Received::Payload { client_index, data } => self.payloads_at_server.push((client_index, data.to_vec())),
            Received::Disconnected(d) => self.disconnected.push(d),
            Received::Dropped(r) => dropped = Some(r),
            Received::Handled => {}
        }
        if unauthenticated {
            for (_, reply) in &replies {
                assert!(reply.len() <= size, "reply of {} bytes to a packet of {size}", reply.len());
            }
        }
        self.deliver_to_clients(replies);
        dropped
    }

    fn deliver_to_clients(&mut self, wire: Wire) {
        if !self.server_reachable {
            return;
        }
        for (to, mut bytes) in wire {
            let Some(i) = self.clients.iter().position(|(a, _)| *a == to) else { continue };
            if let Ok(Some(data)) = self.clients[i].1.process(self.now, server_addr(), &mut bytes) {
                self.payloads_at_clients.push((i, data.to_vec()));
            }
        }
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step();
        }
    }

    fn state(&self, i: usize) -> ClientState {
        self.clients[i].1.state()
    }
}

#[test]
fn a_client_connects_and_payloads_flow_both_ways() {
    let mut net = Net::new(8);
    net.add_client(token(11));
    net.run(Duration::from_millis(300));
    assert_eq!(net.state(0), ClientState::Connected);
    assert_eq!(net.connected, vec![11]);
    let index = net.server.client_index(11).unwrap();
    assert_eq!(net.clients[0].1.client_index() as usize, index);
    assert_eq!(net.clients[0].1.max_clients(), 8);
    assert_eq!(net.server.connection(index).unwrap().user_data(), &[11u8; USER_DATA_BYTES]);

    let mut wire: Wire = Vec::new();
    net.clients[0].1.send_payload(net.now, b"input", &mut wire).unwrap();
    let from = net.clients[0].0;
    for (_, b) in wire {
        net.deliver_to_server(from, b);
    }
    assert_eq!(net.payloads_at_server, vec![(index, b"input".to_vec())]);

    let mut wire: Wire = Vec::new();
    net.server.send_payload(net.now, index, b"snapshot", &mut wire).unwrap();
    net.deliver_to_clients(wire);
    assert_eq!(net.payloads_at_clients, vec![(0, b"snapshot".to_vec())]);
    assert_eq!(net.server.pending_handshakes(), 0, "handshake state is gone once connected");
}

#[test]
fn keep_alives_hold_an_idle_connection_open() {
    let mut net = Net::new(2);
    net.add_client(token(1));
    net.run(Duration::from_secs(20));
    assert_eq!(net.state(0), ClientState::Connected);
    assert_eq!(net.server.connected_clients(), 1);
    assert!(net.disconnected.is_empty());
}

#[test]
fn an_expired_token_is_refused_by_server_and_client() {
    let mut net = Net::new(2);
    let mut p = params(1);
    p.now_unix_secs -= 60; // expired 30 s ago
    let t = ConnectToken::generate(&p, &KEY).unwrap();
    let mut c = Client::new(t.clone(), net.now);
    c.connect(net.now);
    let mut wire: Wire = Vec::new();
    c.update(net.now, &mut wire);
    let (_, req) = wire.pop().unwrap();
    assert_eq!(net.deliver_to_server(client_addr(0), req), Some(DropReason::TokenExpired));

    // The client measures the token's lifetime (30 s) on its own clock.
    let mut net = Net::new(2);
    net.server_reachable = false;
    let mut p = params(1);
    p.timeout_seconds = -1;
    net.add_client(ConnectToken::generate(&p, &KEY).unwrap());
    net.run(Duration::from_secs(29));
    assert_eq!(net.state(0), ClientState::SendingConnectionRequest);
    net.run(Duration::from_secs(2));
    assert_eq!(net.state(0), ClientState::ConnectTokenExpired);
}

fn request_for(t: &ConnectToken) -> Vec<u8> {
    let mut c = Client::new(t.clone(), T0);
    c.connect(T0);
    let mut wire: Wire = Vec::new();
    c.update(T0 + STEP, &mut wire);
    wire.pop().unwrap().1
}

#[test]
fn requests_with_bad_tokens_are_dropped_by_reason() {
    let mut net = Net::new(2);
    let mut p = params(1);
    p.protocol_id += 1;
    let wrong_protocol = ConnectToken::generate(&p, &KEY).unwrap();
    assert_eq!(net.deliver_to_server(client_addr(0), request_for(&wrong_protocol)), Some(DropReason::WrongProtocol));

    let wrong_key = ConnectToken::generate(&params(1), &[1u8; 32]).unwrap();
    assert_eq!(net.deliver_to_server(client_addr(0), request_for(&wrong_key)), Some(DropReason::TokenInvalid));

    let mut p = params(1);
    p.server_addresses = vec!["127.0.0.1:40001".parse().unwrap()];
    let other_server = ConnectToken::generate(&p, &KEY).unwrap();
    assert_eq!(net.deliver_to_server(client_addr(0), request_for(&other_server)), Some(DropReason::NotForThisServer));

    let mut req = request_for(&token(1));
    req[1] = b'X';
    assert_eq!(net.deliver_to_server(client_addr(0), req.clone()), Some(DropReason::WrongVersion));
    req.truncate(100);
    assert_eq!(net.deliver_to_server(client_addr(0), req), Some(DropReason::BadLength));
    assert_eq!(net.server.drops().get(DropReason::TokenInvalid), 1);
    assert_eq!(net.server.pending_handshakes(), 0, "nothing is kept for bad requests");
}

#[test]
fn a_token_is_accepted_from_one_address_only_and_once() {
    let mut net = Net::new(4);
    let t = token(5);
    let req = request_for(&t);
    assert_eq!(net.deliver_to_server(client_addr(0), req.clone()), None);
    assert_eq!(net.deliver_to_server(client_addr(0), req.clone()), None, "same address may repeat its request");
    assert_eq!(net.deliver_to_server(client_addr(1), req.clone()), Some(DropReason::TokenReused));

    // Once the handshake completes, the token is spent even for its own address.
    let mut net = Net::new(4);
    net.add_client(t.clone());
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
    // A request from a connected address is a new handshake of its client (it resumes or
    // restarts behind the same address): the spent token is refused there too.
    assert_eq!(net.deliver_to_server(client_addr(0), req.clone()), Some(DropReason::TokenReused));
    assert_eq!(net.state(0), ClientState::Connected, "and the connection is untouched");
    let mut wire: Wire = Vec::new();
    net.clients[0].1.disconnect(net.now, &mut wire);
    for (_, b) in wire {
        net.deliver_to_server(client_addr(0), b);
    }
    assert_eq!(net.server.connected_clients(), 0);
    assert_eq!(net.deliver_to_server(client_addr(0), req), Some(DropReason::TokenReused));

    // Reconnecting is done with a fresh token (the same client id, from the same address).
    net.clients[0].1 = Client::new(token(5), net.now);
    net.clients[0].1.connect(net.now);
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected, "a fresh token reconnects");
    assert_eq!(net.server.connected_clients(), 1);
}

/// Anyone can send datagrams from a connected client's address; what does not authenticate
/// must not spend that client's packet budget (it used to be charged first: 2000 forged
/// datagrams cut the client off).
#[test]
fn forged_datagrams_from_a_connected_address_do_not_spend_its_budget() {
    let mut net = Net::new(2);
    net.add_client(token(3));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
    let from = net.clients[0].0;
    // A payload packet's prefix, then garbage: it fails to decrypt.
    let forged: Vec<u8> = std::iter::once(0x15).chain((0..60).map(|i| i as u8)).collect();
    for _ in 0..5_000 {
        assert_eq!(net.deliver_to_server(from, forged.clone()), Some(DropReason::Decrypt));
    }
    let mut wire: Wire = Vec::new();
    net.clients[0].1.send_payload(net.now, b"input", &mut wire).unwrap();
    for (_, b) in wire {
        assert_eq!(net.deliver_to_server(from, b), None, "the client's own packet is taken");
    }
    assert_eq!(net.payloads_at_server.len(), 1);
    assert_eq!(net.server.drops().get(DropReason::RateLimited), 0);
}

/// One IP, many ports, each with an authentic token that never answers its challenge: it
/// gets `pending_per_ip` entries of the table, and others still connect.
#[test]
fn one_ip_cannot_fill_the_pending_handshake_table() {
    let mut net = Net::new(4); // a table of 256 pending entries, 16 of them per IP
    let mut refused = 0;
    for i in 0..400u16 {
        let from = SocketAddr::from(([127, 0, 0, 9], 1000 + i));
        match net.deliver_to_server(from, request_for(&token(100 + u64::from(i)))) {
            None => {}
            Some(DropReason::TooManyPending) => refused += 1,
            Some(other) => panic!("request {i} dropped as {other:?}"),
        }
    }
    assert_eq!(net.server.pending_handshakes(), 16);
    assert_eq!(refused, 400 - 16);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected, "another IP is not locked out");
}

/// The same IP's own players are not locked out by tokens that never answer: once the IP
/// holds its `pending_per_ip` entries, a new request from it is refused while the oldest entry
/// is younger than `PENDING_GIVE_WAY` (a burst behind one NAT connects in rounds), and takes
/// that entry's place once it is older (one pending that long is not answering).
#[test]
fn an_ips_oldest_silent_handshake_gives_way_to_a_new_player_of_that_ip() {
    use volley::protocol::netcode::server::PENDING_GIVE_WAY;
    let mut net = Net::new(4); // 16 pending entries per IP
    for i in 0..16u16 {
        let from = SocketAddr::from(([127, 0, 0, 9], 1000 + i));
        assert_eq!(net.deliver_to_server(from, request_for(&token(100 + u64::from(i)))), None);
    }
    let player = SocketAddr::from(([127, 0, 0, 9], 2000));
    assert_eq!(
        net.deliver_to_server(player, request_for(&token(7))),
        Some(DropReason::TooManyPending),
        "at once: refused, the client asks again"
    );
    assert_eq!(net.server.pending_given_way(), 0);
    net.now += PENDING_GIVE_WAY;
    assert_eq!(net.deliver_to_server(player, request_for(&token(8))), None, "a second later: taken");
    assert_eq!(net.server.pending_given_way(), 1);
    assert_eq!(net.server.pending_handshakes(), 16, "in the oldest one's place");
    // The oldest silent token's own answer now finds no entry.
    assert_eq!(net.server.tables().pending_ips, 1);
}

/// A fresh token proves who a client is; an address does not. A client that comes back with
/// one (from a new address, or restarted) while its old session lingers is in at once, in a
/// slot of its own, and the old connection is told to go (its disconnect packets).
#[test]
fn a_fresh_token_for_a_connected_client_id_replaces_the_old_connection() {
    let mut net = Net::new(4);
    net.add_client(token(5));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
    net.add_client(token(5));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(1), ClientState::Connected, "the new connection is in");
    assert_eq!(net.state(0), ClientState::Disconnected, "the old one was told to go");
    assert_eq!(net.connected, vec![5, 5]);
    assert_eq!(
        net.disconnected,
        vec![Disconnected { client_index: 0, client_id: 5, reason: DisconnectReason::Replaced }]
    );
    assert_eq!(net.server.connected_clients(), 1);
    assert_eq!(net.server.client_index(5), Some(1));
}

#[test]
fn a_full_server_denies_and_the_client_reports_it() {
    let mut net = Net::new(1);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    net.add_client(token(2));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
    assert_eq!(net.state(1), ClientState::ConnectionDenied);
    assert!(net.server.drops().get(DropReason::ServerFull) >= 1);
}

#[test]
fn a_denied_client_tries_the_next_server_in_its_token() {
    let mut net = Net::new(1);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    let mut p = params(2);
    p.server_addresses = vec![server_addr(), "127.0.0.1:40009".parse().unwrap()];
    net.add_client(ConnectToken::generate(&p, &KEY).unwrap());
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(1), ClientState::SendingConnectionRequest);
    assert_eq!(net.clients[1].1.server_addr(), Some("127.0.0.1:40009".parse().unwrap()));
}

#[test]
fn silent_server_times_out_each_phase_on_the_client() {
    let mut net = Net::new(2);
    net.server_reachable = false;
    net.add_client(token(1));
    net.run(Duration::from_millis(4_900));
    assert_eq!(net.state(0), ClientState::SendingConnectionRequest);
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::ConnectionRequestTimedOut);

    let mut net = Net::new(2);
    net.deliver_responses = false;
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::SendingConnectionResponse);
    net.run(Duration::from_secs(5));
    assert_eq!(net.state(0), ClientState::ConnectionResponseTimedOut);

    let mut net = Net::new(2);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
    net.server_reachable = false;
    net.run(Duration::from_secs(6));
    assert_eq!(net.state(0), ClientState::ConnectionTimedOut);
}

#[test]
fn a_silent_client_times_out_on_the_server() {
    let mut net = Net::new(2);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    assert_eq!(net.server.connected_clients(), 1);
    net.clients.clear(); // the client vanishes without a word
    net.run(Duration::from_secs(6));
    assert_eq!(net.server.connected_clients(), 0);
    assert_eq!(net.disconnected.len(), 1);
    assert_eq!(net.disconnected[0].reason, DisconnectReason::TimedOut);
}

#[test]
fn replayed_packets_are_dropped() {
    let mut net = Net::new(2);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    let mut wire: Wire = Vec::new();
    net.clients[0].1.send_payload(net.now, b"fire", &mut wire).unwrap();
    let (_, packet) = wire.pop().unwrap();
    assert_eq!(net.deliver_to_server(client_addr(0), packet.clone()), None);
    assert_eq!(net.deliver_to_server(client_addr(0), packet), Some(DropReason::Replayed));
    assert_eq!(net.payloads_at_server.len(), 1);
}

#[test]
fn disconnects_reach_the_other_side() {
    let mut net = Net::new(2);
    net.add_client(token(1));
    net.add_client(token(2));
    net.run(Duration::from_millis(200));
    let mut wire: Wire = Vec::new();
    net.clients[0].1.disconnect(net.now, &mut wire);
    assert_eq!(wire.len(), 10, "redundant disconnect packets");
    assert_eq!(net.state(0), ClientState::Disconnected);
    for (_, b) in wire {
        net.deliver_to_server(client_addr(0), b);
    }
    assert_eq!(net.disconnected.len(), 1);
    assert_eq!(net.disconnected[0].reason, DisconnectReason::ByPeer);

    let index = net.server.client_index(2).unwrap();
    let mut wire: Wire = Vec::new();
    let d = net.server.disconnect(net.now, index, &mut wire).unwrap();
    assert_eq!(d.reason, DisconnectReason::Local);
    net.deliver_to_clients(wire);
    assert_eq!(net.state(1), ClientState::Disconnected);
    assert_eq!(net.server.connected_clients(), 0);
}

#[test]
fn more_than_256_clients_connect() {
    let mut net = Net::new(300);
    for id in 0..300 {
        net.add_client(token(id));
    }
    // All 300 from one IP (a NAT, say): at most `pending_per_ip` (75 here) hold a pending
    // handshake at once, so they connect in rounds, each client repeating its request.
    net.run(Duration::from_millis(600));
    assert_eq!(net.server.connected_clients(), 300);
    assert!((0..300).all(|i| net.state(i) == ClientState::Connected));
}

#[test]
fn a_flooding_address_is_rate_limited_without_affecting_others() {
    let mut net = Net::new(4);
    let flood = request_for(&token(9));
    let drops: usize = (0..1_000)
        .filter(|_| net.deliver_to_server(client_addr(99), flood.clone()) == Some(DropReason::RateLimited))
        .count();
    assert!(drops >= 900, "only the burst gets through: {drops} of 1000 dropped");
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    assert_eq!(net.state(0), ClientState::Connected);
}

#[test]
fn keep_alive_and_payload_from_an_unknown_address_are_dropped() {
    let mut net = Net::new(2);
    net.add_client(token(1));
    net.run(Duration::from_millis(200));
    let mut wire: Wire = Vec::new();
    net.clients[0].1.send_payload(net.now, b"x", &mut wire).unwrap();
    let (_, packet) = wire.pop().unwrap();
    assert_eq!(net.deliver_to_server(client_addr(7), packet), Some(DropReason::UnknownAddress));
}

#[test]
fn a_bad_token_blob_gives_a_client_in_the_invalid_state() {
    let c = Client::from_token_bytes(&[0u8; 100], T0);
    assert_eq!(c.state(), ClientState::InvalidConnectToken);
    let c = Client::from_token_bytes(&token(1).to_bytes(), T0);
    assert_eq!(c.state(), ClientState::Disconnected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    /// Arbitrary datagrams from arbitrary addresses never panic the server or client, never
    /// connect anyone and never get a reply larger than themselves.
    #[test]
    fn garbage_is_dropped_quietly(packets in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..1400)), 1..20)) {
        let mut net = Net::new(2);
        net.add_client(token(1));
        for (who, mut bytes) in packets {
            if let Some(b) = bytes.first_mut() {
                *b = (*b & 0xf0) | (who % 8); // exercise every packet type
            }
            let from = client_addr(who as u16);
            net.deliver_to_server(from, bytes.clone());
            let _ = net.clients[0].1.process(net.now, server_addr(), &mut bytes);
        }
        prop_assert_eq!(net.server.connected_clients(), 0);
    }
}
