//! Per-packet cost of the connection layer: encrypt + decrypt, and rejecting garbage.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use volley::protocol::netcode::packet::{self, Allowed, Packet, PacketKind};
use volley::protocol::netcode::replay::ReplayWindow;
use volley::protocol::netcode::server::{Endpoint, EndpointConfig};
use volley::protocol::netcode::{DropReason, Transmit};

struct Discard;
impl Transmit for Discard {
    fn send(&mut self, _: SocketAddr, _: &[u8]) {}
}

fn encrypt_decrypt(c: &mut Criterion) {
    let key = [7u8; 32];
    let allowed = Allowed::of(&[PacketKind::Payload]);
    let mut g = c.benchmark_group("netcode/payload_encrypt_decrypt");
    for size in [100usize, 1200] {
        let payload = vec![0xabu8; size];
        let mut seq = 0u64;
        let mut window = ReplayWindow::new();
        let mut buf = [0u8; packet::MAX_PACKET_BYTES];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("{size}B"), |b| {
            b.iter(|| {
                seq += 1;
                let n = packet::write_packet(&mut buf, &Packet::Payload(&payload), seq, 1, &key).unwrap();
                let (_, p) = packet::open_packet(&mut buf[..n], allowed, 1, &key, Some(&mut window)).unwrap();
                black_box(p.kind());
            })
        });
    }
    g.finish();
}

fn reject_garbage(c: &mut Criterion) {
    let server_addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let now = Duration::from_secs(1_000_000);
    let mut config = EndpointConfig::new(9, [1; 32], vec![server_addr], 64);
    config.handshake_rate_per_address.burst = f32::MAX;
    config.handshake_rate_total.burst = f32::MAX;
    config.connection_rate.burst = f32::MAX;
    let mut server = Endpoint::with_challenge_key(config, [2; 32], now);
    let stranger: SocketAddr = "127.0.0.1:50001".parse().unwrap();
    let mut g = c.benchmark_group("netcode/reject");

    let forged_payload = [0x15u8; 60];
    let mut buf = [0u8; 1400];
    g.bench_function("payload_from_unknown_address", |b| {
        b.iter(|| {
            buf[..60].copy_from_slice(&forged_payload);
            assert!(matches!(
                server.process(now, stranger, &mut buf[..60], &mut Discard),
                volley::protocol::netcode::server::Received::Dropped(DropReason::UnknownAddress)
            ));
        })
    });

    let mut forged_request = [0u8; 1078];
    forged_request[1..14].copy_from_slice(b"NETCODE 1.02\0");
    forged_request[14..22].copy_from_slice(&9u64.to_le_bytes());
    forged_request[22..30].copy_from_slice(&(now.as_secs() + 10).to_le_bytes());
    g.bench_function("request_with_forged_token", |b| {
        b.iter(|| {
            buf[..1078].copy_from_slice(&forged_request);
            black_box(server.process(now, stranger, &mut buf[..1078], &mut Discard));
        })
    });
    // A forgery from the address of a connected client costs one failed AEAD over the packet.
    let client_addr = connect_one(&mut server, server_addr, now);
    g.bench_function("payload_forged_from_connected_address", |b| {
        b.iter(|| {
            buf[..60].copy_from_slice(&forged_payload);
            assert!(matches!(
                server.process(now, client_addr, &mut buf[..60], &mut Discard),
                volley::protocol::netcode::server::Received::Dropped(DropReason::Decrypt)
            ));
        })
    });

    let mut wrong_protocol = forged_request;
    wrong_protocol[14] = 8;
    g.bench_function("request_with_wrong_protocol", |b| {
        b.iter(|| {
            buf[..1078].copy_from_slice(&wrong_protocol);
            black_box(server.process(now, stranger, &mut buf[..1078], &mut Discard));
        })
    });
    g.finish();
}

fn connect_one(server: &mut Endpoint, server_addr: SocketAddr, now: Duration) -> SocketAddr {
    use volley::protocol::netcode::client::Client;
    use volley::protocol::netcode::token::{ConnectToken, TokenParams};
    let client_addr: SocketAddr = "127.0.0.1:50000".parse().unwrap();
    let params = TokenParams {
        protocol_id: 9,
        client_id: 1,
        now_unix_secs: now.as_secs(),
        expire_seconds: 30,
        timeout_seconds: 5,
        server_addresses: vec![server_addr],
        user_data: [0; 256],
    };
    let mut client = Client::new(ConnectToken::generate(&params, &[1; 32]).unwrap(), now);
    client.connect(now);
    for i in 1..10 {
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        client.update(now + Duration::from_millis(200 * i), &mut wire);
        for (_, mut b) in wire {
            let mut replies: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
            server.process(now, client_addr, &mut b, &mut replies);
            for (_, mut r) in replies {
                let _ = client.process(now, server_addr, &mut r);
            }
        }
    }
    assert_eq!(server.connected_clients(), 1);
    client_addr
}

criterion_group!(benches, encrypt_decrypt, reject_garbage);
criterion_main!(benches);
