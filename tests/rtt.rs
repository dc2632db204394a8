//! The round trip both ends report is the network's: each packet's ack says how long the
//! acknowledged packet waited before it (for the peer's next tick or frame), and the sample
//! leaves that out. On loopback the client's and the server's estimates agree with a ping
//! measured on a plain UDP socket, within a millisecond.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use volley::prelude::*;

/// The median of `n` echoes between two plain UDP sockets on loopback, in milliseconds.
async fn socket_ping(n: usize) -> f64 {
    let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let echo = tokio::spawn(async move {
        let mut buf = [0u8; 64];
        for _ in 0..n {
            let (len, _) = b.recv_from(&mut buf).await.unwrap();
            b.send_to(&buf[..len], a_addr).await.unwrap();
        }
    });
    let mut samples = Vec::new();
    let mut buf = [0u8; 64];
    for _ in 0..n {
        let t = std::time::Instant::now();
        a.send_to(&[7; 32], b_addr).await.unwrap();
        a.recv_from(&mut buf).await.unwrap();
        samples.push(t.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    echo.await.unwrap();
    samples.sort_by(f64::total_cmp);
    samples[n / 2]
}

/// The server's RTT for its one player, from `/players`' row, in milliseconds.
fn server_rtt_ms(server: &ServerHandle) -> Option<f64> {
    let rows: serde_json::Value = serde_json::from_str(&server.metrics().players_json(false)).ok()?;
    Some(rows.as_array()?.first()?.get("rtt_seconds")?.as_f64()? * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_server_rtt_on_loopback_agree_with_a_socket_ping() {
    let key = [3u8; 32];
    let server =
        start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), volley::testing::EmptyWorld).await.unwrap();
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let c = GameClient::new(ConnectToken::generate(&p, &key).unwrap(), Arc::new(Schema::new()), unix_now());
    let mut client = UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut next = tokio::time::Instant::now();
    // Three seconds of play at 60 frames a second (the server samples RTT once a second).
    for _ in 0..180 {
        next += Duration::from_millis(16);
        client.step(&[1], next).await;
    }
    assert!(client.client.is_ready());
    let ping = socket_ping(51).await;
    let client_rtt = client.client.stats().rtt.as_secs_f64() * 1000.0;
    let server_rtt = server_rtt_ms(&server).expect("a row for the player");
    println!("socket ping {ping:.3} ms, client RTT {client_rtt:.3} ms, server RTT {server_rtt:.3} ms");
    assert!((client_rtt - ping).abs() < 1.0, "client {client_rtt:.3} ms against the socket's {ping:.3} ms");
    assert!((server_rtt - ping).abs() < 1.0, "server {server_rtt:.3} ms against the socket's {ping:.3} ms");
    server.shutdown().await;
}

/// A frame loop's client (`PolledClient`, read once a frame): a snapshot that waited in the
/// socket until the next frame is dated when it arrived, so the client's RTT is still the
/// network's. Stamped at the read, it was a frame's wait on average (6–8 ms at 60 frames a
/// second on loopback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_client_reads_the_network_round_trip_not_its_frame_wait() {
    let key = [4u8; 32];
    let server =
        start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), volley::testing::EmptyWorld).await.unwrap();
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let c = GameClient::new(ConnectToken::generate(&p, &key).unwrap(), Arc::new(Schema::new()), unix_now());
    let mut client = volley::client::polled::PolledClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).unwrap();
    let mut next = tokio::time::Instant::now();
    // Three seconds of frames at 60 a second; between them the socket is not read.
    for _ in 0..180 {
        client.poll(&[1]);
        next += Duration::from_micros(16_667);
        tokio::time::sleep_until(next).await;
    }
    assert!(client.client.is_ready());
    let ping = socket_ping(51).await;
    let client_rtt = client.client.stats().rtt.as_secs_f64() * 1000.0;
    println!("socket ping {ping:.3} ms, polled client RTT {client_rtt:.3} ms");
    assert!((client_rtt - ping).abs() < 1.0, "polled client {client_rtt:.3} ms against the socket's {ping:.3} ms");
    server.shutdown().await;
}
