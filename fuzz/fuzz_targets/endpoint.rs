//! The server endpoint (handshake, limits, slots, routing) with arbitrary datagrams from
//! arbitrary addresses — strangers, and the very addresses of two real clients — interleaved
//! with those clients connecting and talking. Checks: no panic; no reply to an
//! unauthenticated packet is larger than the packet; the tables stay within their bounds; and
//! a client that connected stays connected on both sides whatever else arrives.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley::protocol::netcode::client::{Client, ClientState};
use volley::protocol::netcode::server::{Endpoint, EndpointConfig, Received};
use volley::protocol::netcode::token::{ConnectToken, TokenParams};

const PROTOCOL: u64 = 7;
const KEY: [u8; 32] = [1; 32];
const T0: Duration = Duration::from_secs(1_700_000_000);

type Wire = Vec<(SocketAddr, Vec<u8>)>;

fn client(server: SocketAddr, id: u64) -> Client {
    let params = TokenParams::new(PROTOCOL, id, server, T0.as_secs());
    let token = ConnectToken::generate_with(&params, &KEY, [id as u8; 24], [3; 32], [4; 32]).expect("one address");
    let mut c = Client::new(token, T0);
    c.connect(T0);
    c
}

fuzz_target!(|data: &[u8]| {
    let server_addr: SocketAddr = "127.0.0.1:40000".parse().expect("literal");
    let mut config = EndpointConfig::new(PROTOCOL, KEY, vec![server_addr], 2);
    config.rate_table_capacity = 64;
    let mut server = Endpoint::with_challenge_key(config, [2u8; 32], T0);
    let addrs = [SocketAddr::from(([127, 0, 0, 2], 5000)), SocketAddr::from(([127, 0, 0, 3], 5000))];
    let mut clients = [client(server_addr, 1), client(server_addr, 2)];
    let mut connected = [false; 2];
    let mut now = T0;
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        if op < 0x80 {
            // The real clients take a 10 ms step: their datagrams reach the server, its
            // replies reach them.
            now += Duration::from_millis(10);
            let mut to_clients: Wire = Vec::new();
            for (i, c) in clients.iter_mut().enumerate() {
                let mut wire: Wire = Vec::new();
                c.update(now, &mut wire);
                for (_, mut bytes) in wire {
                    let _ = server.process(now, addrs[i], &mut bytes, &mut to_clients);
                }
            }
            server.update(now, &mut to_clients, &mut Vec::new());
            for (to, mut bytes) in to_clients {
                if let Some(i) = addrs.iter().position(|a| *a == to) {
                    let _ = clients[i].process(now, server_addr, &mut bytes);
                }
            }
            for i in 0..2 {
                let both = clients[i].state() == ClientState::Connected && server.client_index(i as u64 + 1).is_some();
                assert!(!connected[i] || both, "client {i} lost its connection to forged datagrams");
                connected[i] |= both;
            }
            continue;
        }
        // A datagram: one length byte, one byte picking the source, then the bytes.
        let Some((&len, tail)) = rest.split_first() else { break };
        let Some((&who, tail)) = tail.split_first() else { break };
        let n = usize::from(len).min(tail.len());
        let (bytes, tail) = tail.split_at(n);
        rest = tail;
        let from = match who % 4 {
            0 | 1 => addrs[usize::from(who % 2)],
            _ => SocketAddr::from(([10, 0, who >> 4, who], 1000 + u16::from(op))),
        };
        let mut buf = bytes.to_vec();
        let mut out: Wire = Vec::new();
        let was_connected = server.get(0).map(|o| o.addr) == Some(from) || server.get(1).map(|o| o.addr) == Some(from);
        let r = server.process(now, from, &mut buf, &mut out);
        if !was_connected {
            assert!(out.iter().all(|(_, p)| p.len() <= n), "amplification");
        }
        assert!(!matches!(r, Received::Disconnected(_)), "a forged datagram disconnected a client");
        assert!(server.connected_clients() <= 2);
        assert!(server.pending_handshakes() <= 256);
    }
});
