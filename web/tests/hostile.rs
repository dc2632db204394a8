//! The browser side against bad input and over both transports, from Rust: a real server, a
//! real WebSocket and a real WebTransport client that trusts the server's certificate by its
//! published hash, as a page does (the page's own test runs in Chromium:
//! examples/arena/tests/browser.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use volley::prelude::*;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::server::{ServerConfig, ServerHandle, unix_now};
use volley_web::{WebConfig, WebHandle};

volley::replicated! {
    /// A player's dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-10.0), glam::Vec2::splat(10.0), 0.01),
    }
}

#[derive(Default)]
struct Dots(Vec<PlayerId>);

impl World for Dots {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Dot>().unwrap();
        s
    }
    fn join(&mut self, player: PlayerId) {
        self.0.push(player);
    }
    fn leave(&mut self, player: PlayerId) {
        self.0.retain(|p| *p != player);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for p in &self.0 {
            let _ = out.insert(*p, &Dot { position: glam::Vec2::ZERO });
        }
    }
}

const KEY: [u8; 32] = [61; 32];

async fn start(max_sessions: usize) -> (ServerHandle, WebHandle) {
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), Dots::default()).await.unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut cfg = WebConfig::new(any, server.addr());
    cfg.webtransport = Some(any);
    cfg.max_sessions = max_sessions;
    let web = volley_web::serve(cfg).await.unwrap();
    (server, web)
}

fn token(server: &ServerHandle, id: u64) -> Vec<u8> {
    let p = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
    ConnectToken::generate(&p, &KEY).unwrap().to_bytes().to_vec()
}

const HELLO: [u8; 8] = [0xc5, b'V', b'L', b'L', b'Y', 0, 8, 0];

async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(6), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn closed(m: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) -> bool {
    matches!(m, Some(Ok(Message::Close(_)) | Err(_)) | None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_answers_and_a_token_still_connects_over_the_websocket() {
    let (server, web) = start(8).await;
    let at = web.http_addr();
    assert!(http(at, b"NONSENSE\r\n\r\n").await.starts_with("HTTP/1.1 400"));
    assert!(http(at, b"GET /nothing HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
    assert!(http(at, b"GET /token HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 403"), "no tokens without a mint");
    assert!(http(at, &[b'a'; 20_000]).await.starts_with("HTTP/1.1 400"), "a head over 8 KiB");
    let json = http(at, b"GET /web.json HTTP/1.1\r\n\r\n").await;
    assert!(json.contains(&format!("\"webtransport_port\":{}", web.webtransport_addr().port())), "{json}");
    assert_eq!(web.certificate_hashes().len(), 1);
    assert!(json.contains(&web.certificate_hashes()[0]));

    let url = format!("ws://{at}/ws");
    // Not a token: closed.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.send(Message::binary(vec![1u8; 10])).await.unwrap();
    assert!(closed(ws.next().await));
    // A token's size, but garbage: told so.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.send(Message::binary(vec![7u8; 2048])).await.unwrap();
    match ws.next().await {
        Some(Ok(Message::Text(t))) => assert!(t.contains("invalid connect token"), "{t}"),
        other => panic!("{other:?}"),
    }
    // A message over 4 KiB: closed.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let _ = ws.send(Message::binary(vec![0u8; 8192])).await;
    assert!(closed(ws.next().await));
    // Silence: closed at the token's deadline.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let t0 = std::time::Instant::now();
    assert!(closed(ws.next().await));
    assert!(t0.elapsed() >= Duration::from_secs(4), "closed at the token's deadline, not before");
    assert_eq!(server.metrics().totals().players, 0, "none of that became a player");
    // After all that, a real token connects and is welcomed.
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    ws.send(Message::binary(token(&server, 1))).await.unwrap();
    let welcome = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) if t.contains("connected") => {
                    ws.send(Message::binary(HELLO.to_vec())).await.unwrap();
                }
                Some(Ok(Message::Binary(b))) if b.len() == 14 && b[5] == 1 => return b,
                Some(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    })
    .await
    .expect("welcomed over the WebSocket");
    assert_eq!(&welcome[..5], &HELLO[..5]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.metrics().totals().players, 1, "one player, from the browser side");
    assert_eq!(web.sessions(), (0, 1));
    server.shutdown().await;
}

fn hex32(h: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn wt_client(web: &WebHandle) -> wtransport::Endpoint<wtransport::endpoint::endpoint_side::Client> {
    let hashes =
        web.certificate_hashes().iter().map(|h| wtransport::tls::Sha256Digest::new(hex32(h))).collect::<Vec<_>>();
    let cfg = wtransport::ClientConfig::builder().with_bind_default().with_server_certificate_hashes(hashes).build();
    wtransport::Endpoint::client(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_webtransport_a_token_connects_the_cap_holds_and_leaving_disconnects() {
    let (server, web) = start(1).await;
    let port = web.webtransport_addr().port();
    let url = format!("https://127.0.0.1:{port}/volley");
    let client = wt_client(&web);
    assert!(client.connect(format!("https://127.0.0.1:{port}/other")).await.is_err(), "only /volley");
    let conn = client.connect(&url).await.expect("a WebTransport session, trusting the published hash");
    let (mut send, mut recv) = conn.open_bi().await.unwrap().await.unwrap();
    send.write_all(&token(&server, 2)).await.unwrap();
    let mut status = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), recv.read(&mut status)).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&status[..n]).contains("\"connected\":true"));
    // A second browser while the cap (1) is taken: refused.
    assert!(wt_client(&web).connect(&url).await.is_err(), "over the cap");
    conn.send_datagram(HELLO).unwrap();
    let welcome = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let d = conn.receive_datagram().await.unwrap();
            if d.payload().len() == 14 && d.payload()[5] == 1 {
                return d.payload();
            }
        }
    })
    .await
    .expect("welcomed over WebTransport");
    assert_eq!(&welcome[..5], &HELLO[..5]);
    assert_eq!(web.sessions(), (1, 0));
    assert_eq!(server.metrics().totals().players, 1);
    // The page leaves (one 0 byte): the relay disconnects it, no seat kept for a resume.
    conn.send_datagram([0u8]).unwrap();
    for _ in 0..50 {
        if server.metrics().totals().players == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.metrics().totals().players, 0, "left, not lingering for a resume");
    server.shutdown().await;
}
