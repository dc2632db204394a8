//! One browser connection's relay: the browser speaks volley's session layer (docs/wire.md,
//! "Payload demultiplexing" and below) over WebTransport datagrams or WebSocket messages;
//! the relay is its netcode.io client on the server's own UDP socket, over loopback.
//!
//! So a browser player is, to the server, a client like any other: the netcode `Endpoint`
//! checks its connect token (keys, client id, user data, expiry, single use), the socket
//! actor's inlet and the player's one actor own its session as for every UDP client, and
//! spectators, recordings, the scoreboard, kicks, moves and resumption treat it alike. The
//! relay holds only netcode's connection state (its keys, sequence and replay window) and
//! moves bytes: each payload the browser sends is sealed as one netcode payload packet, each
//! payload packet the server sends is opened and handed to the browser whole.
//!
//! When the browser goes, the relay goes silently (no netcode disconnect): the server keeps
//! the session for its grace, and the page, reconnecting with the resume ticket it was given,
//! resumes it (a new relay, a new loopback port: the server's resume path).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;
use volley::protocol::netcode::client::{Client, ClientState};
use volley::protocol::netcode::{MAX_PAYLOAD_BYTES, Transmit};

/// A connect token's size, the first thing a browser sends.
pub const TOKEN_BYTES: usize = 2048;

/// A payload of this one byte (no session payload starts with it) asks the relay to
/// disconnect: the page leaves.
pub const LEAVE: u8 = volley::client::RELAY_LEAVE;

/// How long a browser has to send its token once its connection is open.
pub const TOKEN_WAIT: Duration = Duration::from_secs(5);

/// What the relay tells the page, one JSON object a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// netcode connected: the session layer can start (the page sends its hello).
    Connected {
        /// The slot the server gave it.
        client_index: u32,
    },
    /// The connection is over, and why (netcode's state, or the relay's own reason).
    Ended(String),
}

impl Status {
    /// The line the page reads.
    pub fn to_json(&self) -> String {
        match self {
            Status::Connected { client_index } => format!("{{\"connected\":true,\"client_index\":{client_index}}}"),
            Status::Ended(why) => format!("{{\"ended\":\"{}\"}}", why.replace(['"', '\\'], "'")),
        }
    }
}

/// The browser's side of a relay, as each transport presents it.
pub trait BrowserSide {
    /// The next payload from the browser; `None` when it has gone. Must be cancel-safe.
    fn recv(&mut self) -> impl Future<Output = Option<Vec<u8>>> + Send;
    /// Hands one payload to the browser; false when it has gone.
    fn send(&mut self, payload: &[u8]) -> impl Future<Output = bool> + Send;
    /// Tells the page how the connection stands.
    fn status(&mut self, status: &Status) -> impl Future<Output = ()> + Send;
}

struct Out(Vec<Vec<u8>>);

impl Transmit for Out {
    fn send(&mut self, _to: SocketAddr, packet: &[u8]) {
        self.0.push(packet.to_vec());
    }
}

/// Where the relay sends: the server's socket, reached over loopback when it listens on every
/// address.
pub fn local_target(server: SocketAddr) -> SocketAddr {
    match server {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, a.port())),
        other => other,
    }
}

/// Relays one browser until either side ends. `token` is the 2048 bytes the browser sent;
/// `server` the server's netcode socket.
pub async fn run(mut side: impl BrowserSide, token: &[u8], server: SocketAddr) {
    let epoch = Instant::now();
    let now = || epoch.elapsed();
    let mut client = Client::from_token_bytes(token, now());
    if client.state() == ClientState::InvalidConnectToken {
        side.status(&Status::Ended("invalid connect token".into())).await;
        return;
    }
    let target = local_target(server);
    let bind: SocketAddr =
        if target.is_ipv4() { (Ipv4Addr::LOCALHOST, 0).into() } else { (Ipv6Addr::LOCALHOST, 0).into() };
    let socket = match UdpSocket::bind(bind).await {
        Ok(s) if s.connect(target).await.is_ok() => s,
        _ => {
            side.status(&Status::Ended("the relay could not open its socket".into())).await;
            return;
        }
    };
    client.connect(now());
    let mut out = Out(Vec::new());
    let mut buf = vec![0u8; 2048];
    let mut told_connected = false;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            from_browser = side.recv() => {
                let Some(payload) = from_browser else { return };
                if payload == [LEAVE] {
                    // The page leaves (or answers a goodbye): netcode's disconnect, so the
                    // server frees the seat now rather than keep it for a resume.
                    client.disconnect(now(), &mut out);
                    for packet in out.0.drain(..) {
                        let _ = socket.try_send(&packet);
                    }
                    side.status(&Status::Ended("left".into())).await;
                    return;
                }
                if payload.is_empty() || payload.len() > MAX_PAYLOAD_BYTES {
                    continue;
                }
                let _ = client.send_payload(now(), &payload, &mut out);
            }
            got = socket.recv(&mut buf) => {
                let Ok(n) = got else { continue };
                let Some(from) = client.server_addr() else { return };
                if let Ok(Some(payload)) = client.process(now(), from, &mut buf[..n]) {
                    let payload = payload.to_vec();
                    if !side.send(&payload).await {
                        return;
                    }
                }
            }
            _ = tick.tick() => client.update(now(), &mut out),
        }
        if !told_connected && client.is_connected() {
            told_connected = true;
            side.status(&Status::Connected { client_index: client.client_index() }).await;
        }
        for packet in out.0.drain(..) {
            let _ = socket.try_send(&packet);
        }
        let state = client.state();
        if state.is_error() || (told_connected && state == ClientState::Disconnected) {
            side.status(&Status::Ended(format!("{state:?}"))).await;
            return;
        }
    }
}
