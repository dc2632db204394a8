//! Interop with an independent netcode.io 1.02 implementation (renet's `renetcode`):
//! its client against our server, our client against its server, and tokens minted by
//! either side accepted by the other. Stepped in memory with a shared virtual clock.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use renetcode::{ClientAuthentication, NetcodeClient, NetcodeServer, ServerAuthentication, ServerResult};
use volley::protocol::netcode::client::{Client, ClientState};
use volley::protocol::netcode::server::{Endpoint, EndpointConfig, Received};
use volley::protocol::netcode::token::{ConnectToken, ServerAddresses, TokenParams};
use volley::protocol::netcode::{Key, USER_DATA_BYTES, VERSION_INFO};

const PROTOCOL: u64 = 0xfeed_beef;
const KEY: Key = [3u8; 32];
const T0: Duration = Duration::from_secs(1_750_000_000);
const STEP: Duration = Duration::from_millis(10);

fn server_addr() -> SocketAddr {
    "127.0.0.1:41000".parse().unwrap()
}

fn client_addr() -> SocketAddr {
    "127.0.0.1:52000".parse().unwrap()
}

fn our_token(client_id: u64) -> ConnectToken {
    let p = TokenParams {
        protocol_id: PROTOCOL,
        client_id,
        now_unix_secs: T0.as_secs(),
        expire_seconds: 60,
        timeout_seconds: 5,
        server_addresses: vec![server_addr()],
        user_data: [9u8; USER_DATA_BYTES],
    };
    ConnectToken::generate(&p, &KEY).unwrap()
}

fn their_token(client_id: u64) -> renetcode::ConnectToken {
    let user_data = [8u8; USER_DATA_BYTES];
    renetcode::ConnectToken::generate(T0, PROTOCOL, 60, client_id, 5, vec![server_addr()], Some(&user_data), &KEY)
        .unwrap()
}

/// The public token fields are the standard's; only the two libraries' containers differ.
fn to_theirs(t: &ConnectToken, client_id: u64) -> renetcode::ConnectToken {
    let mut server_addresses = [None; 32];
    for (slot, a) in server_addresses.iter_mut().zip(t.server_addresses.as_slice()) {
        *slot = Some(*a);
    }
    renetcode::ConnectToken {
        client_id,
        version_info: *VERSION_INFO,
        protocol_id: t.protocol_id,
        create_timestamp: t.create_timestamp,
        expire_timestamp: t.expire_timestamp,
        xnonce: t.nonce,
        server_addresses,
        client_to_server_key: t.client_to_server_key,
        server_to_client_key: t.server_to_client_key,
        private_data: t.private_data,
        timeout_seconds: t.timeout_seconds,
    }
}

fn to_ours(t: &renetcode::ConnectToken) -> ConnectToken {
    let addrs: Vec<SocketAddr> = t.server_addresses.iter().flatten().copied().collect();
    ConnectToken {
        protocol_id: t.protocol_id,
        create_timestamp: t.create_timestamp,
        expire_timestamp: t.expire_timestamp,
        nonce: t.xnonce,
        private_data: t.private_data,
        timeout_seconds: t.timeout_seconds,
        server_addresses: ServerAddresses::new(&addrs).unwrap(),
        client_to_server_key: t.client_to_server_key,
        server_to_client_key: t.server_to_client_key,
    }
}

/// Payloads received at the server, at the client, and the user data the server read.
type Outcome = (Vec<Vec<u8>>, Vec<Vec<u8>>, Option<[u8; 256]>);

/// renetcode's client against our server.
fn their_client_our_server(token: renetcode::ConnectToken) -> Outcome {
    let config = EndpointConfig::new(PROTOCOL, KEY, vec![server_addr()], 4);
    let mut server = Endpoint::new(config, T0).unwrap();
    let mut client = NetcodeClient::new(T0, ClientAuthentication::Secure { connect_token: token }).unwrap();
    let mut now = T0;
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    let mut user_data = None;
    for step in 0..100 {
        now += STEP;
        let mut replies: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let mut outgoing: Vec<Vec<u8>> = Vec::new();
        if let Some((bytes, _)) = client.update(STEP) {
            outgoing.push(bytes.to_vec());
        }
        if client.is_connected() && step % 10 == 0 {
            let (_, bytes) = client.generate_payload_packet(format!("to us {step}").as_bytes()).unwrap();
            outgoing.push(bytes.to_vec());
        }
        for mut bytes in outgoing {
            match server.process(now, client_addr(), &mut bytes, &mut replies) {
                Received::Payload { data, .. } => at_server.push(data.to_vec()),
                Received::Connected { client_index, .. } => {
                    user_data = Some(*server.connection(client_index).unwrap().user_data());
                }
                _ => {}
            }
        }
        if let Some(index) = server.client_index(client.client_id()).filter(|_| step % 10 == 5) {
            server.send_payload(now, index, format!("to them {step}").as_bytes(), &mut replies).unwrap();
        }
        server.update(now, &mut replies, &mut Vec::new());
        for (_, mut bytes) in replies {
            if let Some(p) = client.process_packet(&mut bytes) {
                at_client.push(p.to_vec());
            }
        }
    }
    assert!(client.is_connected(), "renetcode client connected to our server: {:?}", client.disconnect_reason());
    (at_server, at_client, user_data)
}

/// Our client against renetcode's server; returns (payloads at their server, at our client).
fn our_client_their_server(token: ConnectToken) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut server = NetcodeServer::new(renetcode::ServerConfig {
        current_time: T0,
        max_clients: 4,
        protocol_id: PROTOCOL,
        public_addresses: vec![server_addr()],
        authentication: ServerAuthentication::Secure { private_key: KEY },
    });
    let mut client = Client::new(token, T0);
    client.connect(T0);
    let mut now = T0;
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    let mut connected_id = None;
    for step in 0..100 {
        now += STEP;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        client.update(now, &mut wire);
        if client.is_connected() && step % 10 == 0 {
            client.send_payload(now, format!("to them {step}").as_bytes(), &mut wire).unwrap();
        }
        let mut replies: Vec<Vec<u8>> = Vec::new();
        for (_, mut bytes) in wire {
            match server.process_packet(client_addr(), &mut bytes) {
                ServerResult::PacketToSend { payload, .. } => replies.push(payload.to_vec()),
                ServerResult::ClientConnected { client_id, payload, .. } => {
                    connected_id = Some(client_id);
                    replies.push(payload.to_vec());
                }
                ServerResult::Payload { payload, .. } => at_server.push(payload.to_vec()),
                _ => {}
            }
        }
        server.update(STEP);
        if let Some(id) = connected_id {
            if let ServerResult::PacketToSend { payload, .. } = server.update_client(id) {
                replies.push(payload.to_vec());
            }
            if step % 10 == 5 {
                let (_, bytes) = server.generate_payload_packet(id, format!("to us {step}").as_bytes()).unwrap();
                replies.push(bytes.to_vec());
            }
        }
        for mut bytes in replies {
            if let Ok(Some(p)) = client.process(now, server_addr(), &mut bytes) {
                at_client.push(p.to_vec());
            }
        }
    }
    assert_eq!(client.state(), ClientState::Connected, "our client connected to renetcode's server");
    (at_server, at_client)
}

#[test]
fn renetcode_client_connects_to_our_server_with_our_token() {
    let (at_server, at_client, user_data) = their_client_our_server(to_theirs(&our_token(21), 21));
    assert!(at_server.len() >= 8, "payloads from renetcode client: {}", at_server.len());
    assert!(at_server.iter().any(|p| p.starts_with(b"to us")));
    assert!(at_client.len() >= 8, "payloads to renetcode client: {}", at_client.len());
    assert_eq!(user_data, Some([9u8; USER_DATA_BYTES]));
}

#[test]
fn renetcode_client_connects_to_our_server_with_its_own_token() {
    let (at_server, at_client, user_data) = their_client_our_server(their_token(22));
    assert!(at_server.len() >= 8 && at_client.len() >= 8);
    assert_eq!(user_data, Some([8u8; USER_DATA_BYTES]), "user data minted by renetcode read by our server");
}

#[test]
fn our_client_connects_to_renetcode_server_with_its_token() {
    let (at_server, at_client) = our_client_their_server(to_ours(&their_token(23)));
    assert!(at_server.len() >= 8, "payloads at renetcode server: {}", at_server.len());
    assert!(at_client.len() >= 8, "payloads at our client: {}", at_client.len());
    assert!(at_client.iter().any(|p| p.starts_with(b"to us")));
}

#[test]
fn our_client_connects_to_renetcode_server_with_our_token() {
    let (at_server, at_client) = our_client_their_server(our_token(24));
    assert!(at_server.len() >= 8 && at_client.len() >= 8);
}

/// The same interop over real UDP sockets on 127.0.0.1: renetcode's client and our server,
/// each driven by its own thread and the wall clock.
#[test]
fn renetcode_client_and_our_server_over_real_udp() {
    use std::net::UdpSocket;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    let unix_now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let server_socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let server_addr = server_socket.local_addr().unwrap();
    server_socket.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server_thread = std::thread::spawn(move || {
        let config = EndpointConfig::new(PROTOCOL, KEY, vec![server_addr], 4);
        let mut server = Endpoint::new(config, unix_now()).unwrap();
        let mut echoed = 0usize;
        let mut buf = [0u8; 1500];
        while !server_stop.load(Ordering::Relaxed) {
            let mut out: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
            if let Ok((n, from)) = server_socket.recv_from(&mut buf) {
                let now = unix_now();
                let echo = match server.process(now, from, &mut buf[..n], &mut out) {
                    Received::Payload { client_index, data } => Some((client_index, data.to_vec())),
                    _ => None,
                };
                if let Some((index, data)) = echo {
                    server.send_payload(now, index, &data, &mut out).unwrap();
                    echoed += 1;
                }
            }
            server.update(unix_now(), &mut out, &mut Vec::new());
            for (to, bytes) in out {
                server_socket.send_to(&bytes, to).unwrap();
            }
        }
        echoed
    });

    let token =
        renetcode::ConnectToken::generate(unix_now(), PROTOCOL, 30, 99, 5, vec![server_addr], None, &KEY).unwrap();
    let mut client = NetcodeClient::new(unix_now(), ClientAuthentication::Secure { connect_token: token }).unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let start = Instant::now();
    let mut last = Instant::now();
    let (mut sent, mut echoes) = (0usize, 0usize);
    let mut buf = [0u8; 1500];
    while echoes < 20 && start.elapsed() < Duration::from_secs(10) {
        let dt = last.elapsed();
        last = Instant::now();
        if let Some((bytes, to)) = client.update(dt) {
            socket.send_to(bytes, to).unwrap();
        }
        if client.is_connected() && sent < 40 {
            let (to, bytes) = client.generate_payload_packet(format!("ping {sent}").as_bytes()).unwrap();
            socket.send_to(bytes, to).unwrap();
            sent += 1;
        }
        let Ok((n, _)) = socket.recv_from(&mut buf) else { continue };
        if let Some(p) = client.process_packet(&mut buf[..n]) {
            assert!(p.starts_with(b"ping "), "echo intact");
            echoes += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let echoed = server_thread.join().unwrap();
    assert!(client.is_connected(), "{:?}", client.disconnect_reason());
    assert!(echoes >= 20, "echoes received over UDP: {echoes} (server echoed {echoed})");
}
