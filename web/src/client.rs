//! A Rust client over WebTransport, as a browser connects: the same [`GameClient`] as a UDP
//! client's (its session, channels, inputs and snapshots), carried by a WebTransport session
//! to a [`serve`](crate::serve)d endpoint instead of netcode over UDP. The bot swarm uses it
//! (`volley bots --transport webtransport`) so that load runs measure what a browser player
//! costs the server.
//!
//! Like [`PolledClient`](volley::client::polled::PolledClient), the game's loop polls it once
//! a frame ([`WebTransportClient::poll`]); a task of its own owns the QUIC connection and
//! hands over what arrives (datagrams, payloads too large for one, the relay's status lines)
//! through a bounded queue, dropping what does not fit as a full socket buffer would.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! # async fn f(token: volley::protocol::netcode::token::ConnectToken, schema: Arc<volley::protocol::snapshot::Schema>, hashes: Vec<String>) {
//! use volley_web::client::WebTransportClient;
//! let to = "127.0.0.1:8443".parse().unwrap();
//! let mut client = WebTransportClient::connect(to, &hashes, &token, schema, volley::server::unix_now);
//! loop {
//!     let _snapshots = client.poll(&[0u8; 4]);
//!     if client.client.ended().is_some() {
//!         break;
//!     }
//!     tokio::time::sleep(Duration::from_millis(16)).await;
//! }
//! # }
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use volley::client::GameClient;
use volley::protocol::netcode::client::ClientState;
use volley::protocol::netcode::token::ConnectToken;
use volley::protocol::netcode::{MAX_PAYLOAD_BYTES, Transmit};
use volley::protocol::snapshot::Schema;
use wtransport::Connection;

/// What the connection's task hands to the polled side, at most this many waiting.
const QUEUE: usize = 512;

/// What the connection's task saw.
enum Event {
    /// The session is open: sends go straight to it.
    Open(Connection),
    /// The relay connected to the server, which gave this slot.
    Connected(u32),
    /// A payload from the server.
    Payload(Vec<u8>),
    /// The connection is over (refused, lost, or the relay ended it).
    Ended(ClientState),
}

/// A [`GameClient`] over a WebTransport session, polled by the game's loop.
#[derive(Debug)]
pub struct WebTransportClient {
    /// The protocol state.
    pub client: GameClient,
    clock: fn() -> Duration,
    events: mpsc::Receiver<Event>,
    conn: Option<Connection>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Open(_) => f.write_str("Open"),
            Event::Connected(i) => write!(f, "Connected({i})"),
            Event::Payload(p) => write!(f, "Payload({} bytes)", p.len()),
            Event::Ended(s) => write!(f, "Ended({s:?})"),
        }
    }
}

struct Datagrams<'a>(&'a Option<Connection>);

impl Transmit for Datagrams<'_> {
    fn send(&mut self, _to: SocketAddr, packet: &[u8]) {
        // The client's payloads fit one datagram (the session keeps them to
        // MAX_PAYLOAD_BYTES, and QUIC's datagrams on any path take 1 200 bytes).
        if let Some(conn) = self.0 {
            let _ = conn.send_datagram(packet);
        }
    }
}

/// Reads the hex SHA-256 hashes `/web.json` publishes (`certificate_hashes`).
fn digests(hashes: &[String]) -> Vec<wtransport::tls::Sha256Digest> {
    hashes
        .iter()
        .filter_map(|h| {
            let h = h.trim();
            if h.len() != 64 || !h.is_ascii() {
                return None;
            }
            let mut out = [0u8; 32];
            for (i, b) in out.iter_mut().enumerate() {
                *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
            }
            Some(wtransport::tls::Sha256Digest::new(out))
        })
        .collect()
}

impl WebTransportClient {
    /// Starts connecting to the WebTransport endpoint at `to` (its `/volley` path), trusting
    /// a certificate with one of `hashes` (hex SHA-256, as `/web.json` lists them; none: the
    /// system's roots, for an operator's certificate), with `token`. Must be called within a
    /// tokio runtime: the connection gets a task of its own. Failures show as
    /// [`GameClient::ended`].
    pub fn connect(
        to: SocketAddr,
        hashes: &[String],
        token: &ConnectToken,
        schema: std::sync::Arc<Schema>,
        clock: fn() -> Duration,
    ) -> Self {
        let client = GameClient::relayed(to, schema, clock());
        let (tx, events) = mpsc::channel(QUEUE);
        let digests = digests(hashes);
        let token = token.to_bytes().to_vec();
        let task = tokio::spawn(async move {
            let ended = run(to, digests, token, &tx).await;
            let _ = tx.send(Event::Ended(ended)).await;
        });
        Self { client, clock, events, conn: None, task }
    }

    /// Takes what arrived, runs the client's timers and sends `input` (when connected).
    /// Returns how many new snapshots arrived.
    pub fn poll(&mut self, input: &[u8]) -> usize {
        self.poll_sending(Some(input))
    }

    /// [`WebTransportClient::poll`] for a client that sends no input (a spectator).
    pub fn poll_watching(&mut self) -> usize {
        self.poll_sending(None)
    }

    fn poll_sending(&mut self, input: Option<&[u8]>) -> usize {
        let now = (self.clock)();
        let mut snapshots = 0;
        let from = self.client.server_addr().unwrap_or(([127, 0, 0, 1], 0).into());
        // Bounded: what came since the last poll, no more than the queue holds.
        for _ in 0..QUEUE {
            let Ok(event) = self.events.try_recv() else { break };
            match event {
                Event::Open(conn) => self.conn = Some(conn),
                Event::Connected(index) => self.client.relay_connected(index, now),
                Event::Payload(mut p) => snapshots += usize::from(self.client.receive(now, from, &mut p).is_some()),
                Event::Ended(state) => {
                    self.client.relay_ended(state);
                    self.conn = None;
                }
            }
        }
        let mut tx = Datagrams(&self.conn);
        self.client.update(now, &mut tx);
        match input {
            Some(input) => self.client.send_input(now, input, &mut tx),
            None => self.client.send_without_input(now, &mut tx),
        }
        snapshots
    }

    /// Leaves: the one-byte leave, so the relay disconnects from the server at once (the seat
    /// is freed, not kept for a resume), then closes the session.
    pub fn disconnect(&mut self) {
        let now = (self.clock)();
        self.client.disconnect(now, &mut Datagrams(&self.conn));
        if let Some(conn) = self.conn.take() {
            // The leave is a datagram: give it a moment on its way before the close.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                conn.close(0u32.into(), b"left");
            });
        }
    }
}

impl Drop for WebTransportClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a server's web front has its WebTransport endpoint, and the certificates to trust:
/// what `/web.json` on its HTTP address says (as a page asks before it connects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The WebTransport endpoint (the HTTP host, `webtransport_port`).
    pub addr: SocketAddr,
    /// `certificate_hashes`: hex SHA-256 (empty: the operator's certificate, trusted by roots).
    pub certificate_hashes: Vec<String>,
}

/// Asks the web front at `http` (its HTTP address) for `/web.json`.
///
/// # Errors
/// When it cannot be reached in five seconds or its answer is not a `/web.json`.
pub async fn discover(http: SocketAddr) -> std::io::Result<Endpoint> {
    use tokio::io::AsyncWriteExt;
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{http}/web.json: {why}"));
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(http).await?;
        s.write_all(format!("GET /web.json HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut body = Vec::new();
        s.take(64 * 1024).read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{http}/web.json: no answer")))??;
    let text = String::from_utf8_lossy(&answer);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).ok_or_else(|| bad("not HTTP"))?;
    let json: serde_json::Value = serde_json::from_str(body.trim()).map_err(|_| bad("not JSON"))?;
    let port = json["webtransport_port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| bad("no webtransport_port"))?;
    let certificate_hashes = json["certificate_hashes"]
        .as_array()
        .map(|a| a.iter().filter_map(|h| h.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    Ok(Endpoint { addr: SocketAddr::new(http.ip(), port), certificate_hashes })
}

/// The connection's task: connect, send the token, then hand over what comes until it ends.
async fn run(
    to: SocketAddr,
    digests: Vec<wtransport::tls::Sha256Digest>,
    token: Vec<u8>,
    tx: &mpsc::Sender<Event>,
) -> ClientState {
    let builder = wtransport::ClientConfig::builder().with_bind_default();
    let cfg = if digests.is_empty() {
        builder.with_native_certs().build()
    } else {
        builder.with_server_certificate_hashes(digests).build()
    };
    let Ok(endpoint) = wtransport::Endpoint::client(cfg) else { return ClientState::ConnectionRequestTimedOut };
    let Ok(conn) = endpoint.connect(format!("https://{to}/volley")).await else {
        return ClientState::ConnectionRequestTimedOut;
    };
    let Ok(opening) = conn.open_bi().await else { return ClientState::ConnectionRequestTimedOut };
    let Ok((mut send, mut status)) = opening.await else { return ClientState::ConnectionRequestTimedOut };
    if send.write_all(&token).await.is_err() {
        return ClientState::ConnectionRequestTimedOut;
    }
    if tx.send(Event::Open(conn.clone())).await.is_err() {
        return ClientState::Disconnected;
    }
    let mut line = Vec::new();
    let mut chunk = [0u8; 256];
    let mut connected = false;
    loop {
        tokio::select! {
            got = conn.receive_datagram() => {
                let Ok(d) = got else { break };
                // Full: dropped, as a full socket buffer drops.
                let _ = tx.try_send(Event::Payload(d.payload().to_vec()));
            }
            got = conn.accept_uni() => {
                let Ok(mut stream) = got else { break };
                let tx = tx.clone();
                // A payload larger than a datagram, on a stream of its own (bounded).
                tokio::spawn(async move {
                    let mut payload = Vec::new();
                    let mut limited = (&mut stream).take(MAX_PAYLOAD_BYTES as u64 * 2);
                    if limited.read_to_end(&mut payload).await.is_ok() && !payload.is_empty() {
                        let _ = tx.try_send(Event::Payload(payload));
                    }
                });
            }
            got = status.read(&mut chunk) => {
                let Ok(Some(n)) = got else { break };
                line.extend_from_slice(&chunk[..n]);
                while let Some(end) = line.iter().position(|&b| b == b'\n') {
                    let text = String::from_utf8_lossy(&line[..end]).into_owned();
                    line.drain(..=end);
                    if let Some(index) = client_index(&text) {
                        connected = true;
                        if tx.send(Event::Connected(index)).await.is_err() {
                            return ClientState::Disconnected;
                        }
                    } else if text.contains("\"ended\"") {
                        return if connected { ClientState::Disconnected } else { ClientState::ConnectionDenied };
                    }
                }
                if line.len() > 4096 {
                    break;
                }
            }
        }
    }
    if connected { ClientState::ConnectionTimedOut } else { ClientState::ConnectionRequestTimedOut }
}

/// The slot in a `{"connected":true,"client_index":N}` status line.
fn client_index(line: &str) -> Option<u32> {
    if !line.contains("\"connected\":true") {
        return None;
    }
    let rest = &line[line.find("\"client_index\":")? + "\"client_index\":".len()..];
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_and_hashes_are_read_and_garbage_is_not() {
        assert_eq!(client_index("{\"connected\":true,\"client_index\":17}"), Some(17));
        assert_eq!(client_index("{\"ended\":\"left\"}"), None);
        assert_eq!(client_index("{\"connected\":true,\"client_index\":99999999999}"), None);
        let good = "ab".repeat(32);
        assert_eq!(digests(&[good, "zz".repeat(32), "ab".into(), "é".repeat(32)]).len(), 1);
    }
}
