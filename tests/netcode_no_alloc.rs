//! Rejecting forged or garbage packets allocates nothing: counted by a global allocator.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use volley::protocol::netcode::client::Client;
use volley::protocol::netcode::server::{Endpoint, EndpointConfig, Received};
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::netcode::{DropReason, Transmit};

#[path = "support/alloc.rs"]
mod alloc;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

use alloc::allocations;

/// A sink that counts sends and keeps nothing.
#[derive(Default)]
struct Count(usize);
impl Transmit for Count {
    fn send(&mut self, _: SocketAddr, _: &[u8]) {
        self.0 += 1;
    }
}

#[test]
fn rejecting_forged_packets_allocates_nothing() {
    let server_addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let client_addr: SocketAddr = "127.0.0.1:50000".parse().unwrap();
    let now = Duration::from_secs(1_000_000);
    let key = [1u8; 32];
    let mut server = Endpoint::with_challenge_key(EndpointConfig::new(9, key, vec![server_addr], 8), [2; 32], now);
    let params = TokenParams {
        protocol_id: 9,
        client_id: 1,
        now_unix_secs: now.as_secs(),
        expire_seconds: 30,
        timeout_seconds: 5,
        server_addresses: vec![server_addr],
        user_data: [0; 256],
    };
    // Connect one client so that the connected path is exercised too.
    let mut client = Client::new(ConnectToken::generate(&params, &key).unwrap(), now);
    client.connect(now);
    for _ in 0..5 {
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        client.update(now + Duration::from_secs(1), &mut wire);
        for (_, mut b) in wire {
            let mut replies: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
            server.process(now, client_addr, &mut b, &mut replies);
            for (_, mut r) in replies {
                let _ = client.process(now, server_addr, &mut r);
            }
        }
    }
    assert_eq!(server.connected_clients(), 1);

    let mut forged_payload = vec![0x15u8; 60]; // payload type, 1 sequence byte, junk
    let mut forged_request = vec![0u8; 1078];
    forged_request[1..14].copy_from_slice(b"NETCODE 1.02\0");
    forged_request[14..22].copy_from_slice(&9u64.to_le_bytes());
    forged_request[22..30].copy_from_slice(&(now.as_secs() + 10).to_le_bytes());
    let stranger: SocketAddr = "127.0.0.1:50001".parse().unwrap();
    let mut sink = Count::default();

    let mut reasons = Vec::with_capacity(4);
    let mut buf = [0u8; 1400];
    let before = allocations();
    for (from, packet) in [(stranger, &forged_payload), (client_addr, &forged_payload), (stranger, &forged_request)] {
        buf[..packet.len()].copy_from_slice(packet);
        match server.process(now, from, &mut buf[..packet.len()], &mut sink) {
            Received::Dropped(r) => reasons.push(r),
            other => panic!("forged packet accepted: {other:?}"),
        }
    }
    let after = allocations();
    assert_eq!(reasons, vec![DropReason::UnknownAddress, DropReason::Decrypt, DropReason::TokenInvalid]);
    assert_eq!(after - before, 0, "allocations while rejecting forged packets");
    assert_eq!(sink.0, 0, "nothing is sent in reply to a forgery");
    forged_payload.clear();
    forged_request.clear();
}
