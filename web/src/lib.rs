//! Players in a browser.
//!
//! [`serve`] puts three things beside a running volley server:
//! - a **WebTransport** endpoint on its own UDP port (QUIC, via `wtransport`), where a page
//!   connects to `https://HOST:PORT/volley`, sends its connect token on the first
//!   bidirectional stream and then speaks volley's session layer in datagrams;
//! - a **WebSocket** fallback at `ws://HOST:PORT/ws` on the page's own HTTP port, for
//!   networks that do not pass UDP and browsers without WebTransport: the token as the first
//!   binary message, then one session payload a message;
//! - a small **HTTP** server for the page: the game's files, the JavaScript client
//!   (`/volley.js`, from `web/client/`), `/web.json` (where the WebTransport endpoint is and
//!   the hashes of its certificates) and, in development, `/token` (a connect token minted
//!   by the server itself).
//!
//! Each browser connection is relayed to the server's netcode socket ([`relay`]): to the
//! server a browser player is a client like any other, on the same worlds, session layer and
//! owner (its player actor), checked by the same connect token.
//!
//! ```no_run
//! # async fn f(server: std::net::SocketAddr) -> Result<(), volley_web::WebError> {
//! let web = volley_web::WebConfig::new("127.0.0.1:8080".parse().unwrap(), server);
//! let handle = volley_web::serve(web).await?;
//! println!("open http://{}/", handle.http_addr());
//! # Ok(()) }
//! ```

pub mod certs;
pub mod client;
pub mod relay;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use wtransport::endpoint::IncomingSession;
use wtransport::{Connection, Endpoint, ServerConfig};

pub use certs::Certificates;
use relay::{BrowserSide, Status, TOKEN_BYTES, TOKEN_WAIT};

/// The JavaScript client, served at `/volley.js`.
pub const CLIENT_JS: &str = include_str!("../client/volley.js");

const MAX_HEAD: usize = 8 * 1024;
const MAX_HTTP_CONNECTIONS: usize = 256;

/// What a page asks `/token` for.
#[derive(Debug, Clone, Default)]
pub struct TokenAsk {
    /// `?watch=1`: a spectator's token.
    pub watch: bool,
}

/// Mints a connect token (2048 bytes) for a page, or refuses (`None`).
pub type TokenMint = Arc<dyn Fn(&TokenAsk) -> Option<Vec<u8>> + Send + Sync>;

/// One file of the page.
#[derive(Debug, Clone)]
pub struct PageFile {
    /// Its path, from `/` (`/` itself is `/index.html`).
    pub path: String,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: Arc<[u8]>,
}

/// How the browser side is set up.
#[derive(Clone)]
pub struct WebConfig {
    /// The page's HTTP address (TCP), also the WebSocket fallback's.
    pub http: SocketAddr,
    /// The WebTransport endpoint's UDP address (default: the HTTP address's, on UDP).
    pub webtransport: Option<SocketAddr>,
    /// The server's netcode socket, that each browser is relayed to.
    pub server: SocketAddr,
    /// The WebTransport certificate.
    pub certificates: Certificates,
    /// How often the certificate is checked for renewal (self-signed) or change (files).
    pub check_certificates_every: Duration,
    /// Most browser connections at once (both transports).
    pub max_sessions: usize,
    /// The game's page (index.html and what it loads).
    pub page: Vec<PageFile>,
    /// The schema the page decodes with (`Schema::to_json`), served at `/schema.json`.
    pub schema_json: String,
    /// Development: tokens minted by the server for `/token`. `None` in a fleet (the page
    /// gets them from the backend).
    pub tokens: Option<TokenMint>,
    /// The clock certificates are made and renewed by (the wall clock; tests move it).
    pub clock: fn() -> SystemTime,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("http", &self.http)
            .field("webtransport", &self.webtransport)
            .field("server", &self.server)
            .field("certificates", &self.certificates)
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl WebConfig {
    /// HTTP and WebTransport on `http` (TCP and UDP), relaying to `server`, a self-signed
    /// certificate, no page and no tokens.
    pub fn new(http: SocketAddr, server: SocketAddr) -> Self {
        let names = if http.ip().is_unspecified() { vec![] } else { vec![http.ip().to_string()] };
        Self {
            http,
            webtransport: None,
            server,
            certificates: Certificates::self_signed(names),
            check_certificates_every: Duration::from_secs(60),
            max_sessions: 1024,
            page: Vec::new(),
            schema_json: String::new(),
            tokens: None,
            clock: SystemTime::now,
        }
    }
}

/// Why the browser side could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// A socket.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The certificate.
    #[error(transparent)]
    Certificate(#[from] certs::CertError),
}

/// The running browser side; dropping it leaves it running (it ends with the runtime).
#[derive(Debug, Clone)]
pub struct WebHandle {
    http: SocketAddr,
    webtransport: SocketAddr,
    shared: Arc<Shared>,
}

impl WebHandle {
    /// The HTTP (and WebSocket) address it listens on.
    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }
    /// The WebTransport endpoint's address.
    pub fn webtransport_addr(&self) -> SocketAddr {
        self.webtransport
    }
    /// The certificate hashes a page may trust now (hex SHA-256; empty with the operator's
    /// certificate).
    pub fn certificate_hashes(&self) -> Vec<String> {
        self.shared.hashes.lock().map(|h| h.clone()).unwrap_or_default()
    }
    /// Browser connections open now, WebTransport and WebSocket.
    pub fn sessions(&self) -> (usize, usize) {
        (self.shared.wt.load(Ordering::Relaxed), self.shared.ws.load(Ordering::Relaxed))
    }
}

#[derive(Debug)]
struct Shared {
    hashes: Mutex<Vec<String>>,
    wt: AtomicUsize,
    ws: AtomicUsize,
    max: usize,
}

impl Shared {
    fn open(&self) -> usize {
        self.wt.load(Ordering::Relaxed) + self.ws.load(Ordering::Relaxed)
    }
}

/// Counts one open connection of a transport while it lives.
struct Open<'a>(&'a AtomicUsize);
impl<'a> Open<'a> {
    fn new(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::Relaxed);
        Open(c)
    }
}
impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn quic_config(addr: SocketAddr, identity: &wtransport::Identity) -> ServerConfig {
    let builder = ServerConfig::builder().with_bind_address(addr).with_identity(identity.clone_identity());
    let builder = builder.keep_alive_interval(Some(Duration::from_secs(2)));
    match builder.max_idle_timeout(Some(Duration::from_secs(10))) {
        Ok(b) => b.build(),
        Err(_) => ServerConfig::builder().with_bind_address(addr).with_identity(identity.clone_identity()).build(),
    }
}

/// Starts the browser side on the current tokio runtime.
///
/// # Errors
/// A socket that cannot be bound, or a certificate that cannot be made or read.
pub async fn serve(cfg: WebConfig) -> Result<WebHandle, WebError> {
    let now = (cfg.clock)();
    let mut rotation = certs::Rotation::start(cfg.certificates.clone(), now).await?;
    let wt_addr = cfg.webtransport.unwrap_or(cfg.http);
    let endpoint =
        Endpoint::server(quic_config(wt_addr, &rotation.current.identity)).map_err(|e| WebError::Bind(wt_addr, e))?;
    let wt_bound = endpoint.local_addr().map_err(|e| WebError::Bind(wt_addr, e))?;
    let listener = TcpListener::bind(cfg.http).await.map_err(|e| WebError::Bind(cfg.http, e))?;
    let http_bound = listener.local_addr().map_err(|e| WebError::Bind(cfg.http, e))?;
    let shared = Arc::new(Shared {
        hashes: Mutex::new(rotation.hashes(now)),
        wt: AtomicUsize::new(0),
        ws: AtomicUsize::new(0),
        max: cfg.max_sessions,
    });
    tracing::info!(http = %http_bound, webtransport = %wt_bound, "browser side listening");
    let endpoint = Arc::new(endpoint);
    // The certificate's renewal (or the operator's files' reload).
    {
        let (endpoint, shared, cfg) = (endpoint.clone(), shared.clone(), cfg.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(cfg.check_certificates_every).await;
                let now = (cfg.clock)();
                match rotation.poll(now).await {
                    Ok(true) => {
                        if let Err(e) = endpoint.reload_config(quic_config(wt_bound, &rotation.current.identity), false)
                        {
                            tracing::warn!(error = %e, "could not present the new certificate");
                        } else {
                            tracing::info!(hash = %rotation.current.hash, "WebTransport certificate renewed");
                        }
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "certificate not renewed; the old one stays"),
                }
                if let Ok(mut h) = shared.hashes.lock() {
                    *h = rotation.hashes(now);
                }
            }
        });
    }
    // WebTransport.
    {
        let (endpoint, shared, server) = (endpoint.clone(), shared.clone(), cfg.server);
        tokio::spawn(async move {
            loop {
                let incoming = endpoint.accept().await;
                // Under a flood of handshakes, make unvalidated addresses prove themselves first
                // (a Retry round trip), so spoofed initials cost their sender.
                if endpoint.open_connections() > shared.max && !incoming.remote_address_validated() {
                    incoming.retry();
                    continue;
                }
                let shared = shared.clone();
                tokio::spawn(async move { webtransport_session(incoming, &shared, server).await });
            }
        });
    }
    // HTTP and WebSocket.
    {
        let (shared, cfg) = (shared.clone(), Arc::new(cfg));
        let wt_port = wt_bound.port();
        let open = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else { continue };
                if open.load(Ordering::Relaxed) >= MAX_HTTP_CONNECTIONS {
                    continue;
                }
                let (shared, cfg, open) = (shared.clone(), cfg.clone(), open.clone());
                tokio::spawn(async move {
                    let _open = Open::new(&open);
                    http_connection(stream, peer.ip(), &cfg, &shared, wt_port).await;
                });
            }
        });
    }
    Ok(WebHandle { http: http_bound, webtransport: wt_bound, shared })
}

// ---- WebTransport ----

struct WtSide {
    conn: Connection,
    status: wtransport::SendStream,
}

impl BrowserSide for WtSide {
    async fn recv(&mut self) -> Option<Vec<u8>> {
        self.conn.receive_datagram().await.ok().map(|d| d.payload().to_vec())
    }
    async fn send(&mut self, payload: &[u8]) -> bool {
        // A payload larger than the path's datagrams goes on a stream of its own.
        if self.conn.max_datagram_size().is_some_and(|m| payload.len() <= m) {
            return self.conn.send_datagram(payload).is_ok();
        }
        let (conn, payload) = (self.conn.clone(), payload.to_vec());
        tokio::spawn(async move {
            if let Ok(opening) = conn.open_uni().await
                && let Ok(mut s) = opening.await
            {
                let _ = s.write_all(&payload).await;
                let _ = s.finish().await;
            }
        });
        true
    }
    async fn status(&mut self, status: &Status) {
        let mut line = status.to_json();
        line.push('\n');
        let _ = self.status.write_all(line.as_bytes()).await;
    }
}

async fn webtransport_session(incoming: IncomingSession, shared: &Shared, server: SocketAddr) {
    let Ok(request) = incoming.await else { return };
    if request.path() != "/volley" {
        request.not_found().await;
        return;
    }
    if shared.open() >= shared.max {
        request.too_many_requests().await;
        return;
    }
    let Ok(conn) = request.accept().await else { return };
    let _open = Open::new(&shared.wt);
    let first = tokio::time::timeout(TOKEN_WAIT, async {
        let (send, mut recv) = conn.accept_bi().await.ok()?;
        let mut token = vec![0u8; TOKEN_BYTES];
        recv.read_exact(&mut token).await.ok()?;
        Some((send, token))
    })
    .await;
    let Ok(Some((status, token))) = first else {
        conn.close(0u32.into(), b"no connect token");
        return;
    };
    let side = WtSide { conn: conn.clone(), status };
    relay::run(side, &token, server).await;
    conn.close(0u32.into(), b"ended");
}

// ---- WebSocket ----

struct WsSide(WebSocketStream<TcpStream>);

impl BrowserSide for WsSide {
    async fn recv(&mut self) -> Option<Vec<u8>> {
        loop {
            match self.0.next().await? {
                Ok(Message::Binary(b)) => return Some(b.to_vec()),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }
    async fn send(&mut self, payload: &[u8]) -> bool {
        self.0.send(Message::binary(payload.to_vec())).await.is_ok()
    }
    async fn status(&mut self, status: &Status) {
        let _ = self.0.send(Message::text(status.to_json())).await;
    }
}

async fn websocket_session(stream: TcpStream, shared: &Shared, server: SocketAddr) {
    let _open = Open::new(&shared.ws);
    let config = WebSocketConfig::default().max_message_size(Some(4096)).max_frame_size(Some(4096));
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await;
    let token = tokio::time::timeout(TOKEN_WAIT, async {
        loop {
            match ws.next().await? {
                Ok(Message::Binary(b)) if b.len() == TOKEN_BYTES => return Some(b.to_vec()),
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                _ => return None,
            }
        }
    })
    .await;
    let Ok(Some(token)) = token else {
        let _ = ws.close(None).await;
        return;
    };
    let mut side = WsSide(ws);
    relay::run(&mut side, &token, server).await;
    let _ = side.0.close(None).await;
}

impl<T: BrowserSide + Send> BrowserSide for &mut T {
    fn recv(&mut self) -> impl Future<Output = Option<Vec<u8>>> + Send {
        (**self).recv()
    }
    fn send(&mut self, payload: &[u8]) -> impl Future<Output = bool> + Send {
        (**self).send(payload)
    }
    fn status(&mut self, status: &Status) -> impl Future<Output = ()> + Send {
        (**self).status(status)
    }
}

// ---- HTTP ----

struct Request {
    path: String,
    query: HashMap<String, String>,
    headers: HashMap<String, String>,
}

async fn read_head(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    };
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    if first.next()? != "GET" {
        return None;
    }
    let target = first.next()?;
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let query = q.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Request { path: path.to_string(), query, headers })
}

async fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nAccess-Control-Allow-Origin: *\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn http_connection(mut stream: TcpStream, _peer: IpAddr, cfg: &WebConfig, shared: &Shared, wt_port: u16) {
    let Ok(Some(req)) = tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream)).await else {
        respond(&mut stream, "400 Bad Request", "text/plain", b"bad request\n").await;
        return;
    };
    let upgrade = req.headers.get("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    if req.path == "/ws" && upgrade {
        let Some(key) = req.headers.get("sec-websocket-key") else {
            respond(&mut stream, "400 Bad Request", "text/plain", b"no Sec-WebSocket-Key\n").await;
            return;
        };
        if shared.open() >= shared.max {
            respond(&mut stream, "503 Service Unavailable", "text/plain", b"full\n").await;
            return;
        }
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let head = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
        );
        if stream.write_all(head.as_bytes()).await.is_ok() {
            websocket_session(stream, shared, cfg.server).await;
        }
        return;
    }
    let _ = stream.set_nodelay(true);
    match req.path.as_str() {
        "/volley.js" => respond(&mut stream, "200 OK", "text/javascript", CLIENT_JS.as_bytes()).await,
        "/schema.json" => respond(&mut stream, "200 OK", "application/json", cfg.schema_json.as_bytes()).await,
        "/web.json" => {
            let hashes: Vec<String> = shared.hashes.lock().map(|h| h.clone()).unwrap_or_default();
            let hashes = hashes.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(",");
            let body = format!(
                "{{\"webtransport_port\":{wt_port},\"webtransport_path\":\"/volley\",\"certificate_hashes\":[{hashes}],\"websocket_path\":\"/ws\",\"tokens\":{}}}",
                cfg.tokens.is_some()
            );
            respond(&mut stream, "200 OK", "application/json", body.as_bytes()).await;
        }
        "/token" => {
            let ask = TokenAsk { watch: req.query.get("watch").is_some_and(|v| v == "1" || v == "true") };
            match cfg.tokens.as_ref().and_then(|mint| mint(&ask)) {
                Some(token) => {
                    let body = format!("{{\"token\":\"{}\"}}", hex(&token));
                    respond(&mut stream, "200 OK", "application/json", body.as_bytes()).await;
                }
                None => respond(&mut stream, "403 Forbidden", "text/plain", b"this server mints no tokens\n").await,
            }
        }
        path => {
            let path = if path == "/" { "/index.html" } else { path };
            match cfg.page.iter().find(|f| f.path == path) {
                Some(f) => respond(&mut stream, "200 OK", f.content_type, &f.body).await,
                None => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n").await,
            }
        }
    }
}
