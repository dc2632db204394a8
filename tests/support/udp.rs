//! Real UDP clients for tests that run a server: one minted a token and bound on loopback,
//! and a frame loop that steps them all.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use volley::prelude::*;

/// A client of `server` with client id `id`, its token's user data starting with `name`
/// (empty: none), for a world without replicated kinds.
pub async fn client(server: &ServerHandle, key: &Key, id: u64, name: &str) -> UdpClient {
    let mut p = TokenParams::new(DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
    p.user_data[..name.len()].copy_from_slice(name.as_bytes());
    let token = ConnectToken::generate(&p, key).expect("a token for one server");
    let c = GameClient::new(token, Arc::new(Schema::new()), unix_now());
    UdpClient::bind(c, "127.0.0.1:0".parse().expect("an address"), unix_now).await.expect("a loopback socket")
}

/// Steps every client `frames` frames of 16 ms, each sending input 1.
pub async fn run(clients: &mut [UdpClient], next: &mut tokio::time::Instant, frames: usize) {
    for _ in 0..frames {
        *next += Duration::from_millis(16);
        for c in clients.iter_mut() {
            c.step(&[1], *next).await;
        }
    }
}
