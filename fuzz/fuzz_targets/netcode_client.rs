//! Arbitrary datagrams into a netcode client that is connecting.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley::protocol::netcode::client::Client;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};

fuzz_target!(|data: &[u8]| {
    let server: SocketAddr = "127.0.0.1:40000".parse().expect("literal");
    let params = TokenParams {
        protocol_id: 1,
        client_id: 2,
        now_unix_secs: 1_000,
        expire_seconds: 30,
        timeout_seconds: 5,
        server_addresses: vec![server],
        user_data: [0; 256],
    };
    let Ok(token) = ConnectToken::generate_with(&params, &[1; 32], [3; 24], [4; 32], [5; 32]) else { return };
    let now = Duration::from_secs(1_000);
    let mut client = Client::new(token, now);
    client.connect(now);
    let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
    for chunk in data.split(|b| *b == 0xff) {
        let mut buf = chunk.to_vec();
        let _ = client.process(now, server, &mut buf);
        client.update(now, &mut out);
    }
});
