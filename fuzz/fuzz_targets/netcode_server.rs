//! Arbitrary datagrams from a few addresses into a netcode server.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley::protocol::netcode::server::{Endpoint, EndpointConfig};

fuzz_target!(|data: &[u8]| {
    let addr: SocketAddr = "127.0.0.1:40000".parse().expect("literal");
    let mut config = EndpointConfig::new(1, [1u8; 32], vec![addr], 4);
    config.rate_table_capacity = 64;
    let now = Duration::from_secs(1_000);
    let mut server = Endpoint::with_challenge_key(config, [2u8; 32], now);
    let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    // The first byte picks a source address; the rest is split into datagrams at 0xff bytes.
    let (who, rest) = data.split_first().map_or((0, data), |(w, r)| (*w, r));
    for (i, chunk) in rest.split(|b| *b == 0xff).enumerate() {
        let from = SocketAddr::from(([127, 0, 0, 2], 1 + u16::from(who % 4) + i as u16 % 2));
        let mut buf = chunk.to_vec();
        let size = buf.len();
        let before = out.len();
        server.process(now, from, &mut buf, &mut out);
        assert!(out[before..].iter().all(|(_, p)| p.len() <= size), "amplification");
    }
    server.update(now + Duration::from_secs(1), &mut out, &mut Vec::new());
    assert_eq!(server.connected_clients(), 0);
});
