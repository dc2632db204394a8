//! The token backend over real HTTP on loopback, in front of a real server's admin listener:
//! a good request gets a token that opens with the servers' key; bad input of every kind
//! gets a clear HTTP error and is counted; floods of requests, of player ids and of
//! connections stay bounded; `/metrics` passes `promtool check metrics`.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::tools;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use volley::prelude::*;
use volley::protocol::netcode::token::PrivateConnectToken;
use volley_fleet::backend::auth::{self, Auth};
use volley_fleet::backend::desk::{DeskConfig, TokenRequest};
use volley_fleet::backend::pool::ServerSpec;
use volley_fleet::backend::{self, BackendConfig, BackendHandle};
use volley_fleet::client::{FetchError, TokenClient, signed_request};

const KEY: [u8; 32] = [8; 32];
const SECRET: &[u8] = b"account-service-secret";

async fn setup(tune: impl FnOnce(&mut BackendConfig)) -> (ServerHandle, BackendHandle) {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    config.max_players = 1000;
    let server = volley::server::start(config, volley::testing::EmptyWorld).await.unwrap();
    let spec = ServerSpec { public: server.addr(), admin: server.admin_addr().unwrap(), web: None };
    let auth = Auth { secret: Some(SECRET.to_vec()), api_keys: vec!["trusted-key".into()] };
    let mut config = BackendConfig {
        desk: DeskConfig::new(auth, DEFAULT_PROTOCOL_ID),
        servers: vec![spec],
        private_key: KEY,
        max_connections: 64,
        cors_origins: Vec::new(),
    };
    tune(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = backend::start(listener, config).unwrap();
    // Until its first poll has seen the server.
    for _ in 0..100 {
        let (status, _) = raw(backend.addr(), "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (server, backend)
}

/// Sends `request` as it is; the status and the body of the answer (0 if the connection
/// closed without one).
async fn raw(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

fn post(body: &str) -> String {
    format!(
        "POST /v1/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn metric(backend: &BackendHandle, series: &str) -> f64 {
    let (_, text) = raw(backend.addr(), "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_request_gets_a_token_for_the_server_and_an_api_key_does_too() {
    let (server, backend) = setup(|_| {}).await;
    let mut client = TokenClient::new(&backend.url(), None, Duration::from_secs(5)).unwrap();
    let req = signed_request(SECRET, "alice", unix_now(), Duration::from_secs(60));
    let grant = client.fetch(&req).await.unwrap();
    assert_eq!(grant.servers, vec![server.addr()]);
    let token = ConnectToken::from_bytes(&volley_util::hex::decode(&grant.token).unwrap()).unwrap();
    let mut sealed = token.private_data;
    let private =
        PrivateConnectToken::open(&mut sealed, DEFAULT_PROTOCOL_ID, token.expire_timestamp, &token.nonce, &KEY)
            .unwrap();
    assert_eq!(private.client_id, auth::client_id("alice"));
    assert_eq!(&private.user_data[..6], b"alice\0");

    // The token connects.
    let c = GameClient::new(token, std::sync::Arc::new(Schema::new()), unix_now());
    let mut udp = UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut next = tokio::time::Instant::now();
    for _ in 0..200 {
        next += Duration::from_millis(16);
        udp.step(&[1], next).await;
        if server.metrics().totals().players == 1 {
            break;
        }
    }
    assert_eq!(server.metrics().totals().players, 1);

    let mut trusted = TokenClient::new(&backend.url(), Some("trusted-key".into()), Duration::from_secs(5)).unwrap();
    let plain = TokenRequest { player: "bob".into(), expires: None, signature: None };
    assert!(trusted.fetch(&plain).await.is_ok());
    let mut wrong = TokenClient::new(&backend.url(), Some("guess".into()), Duration::from_secs(5)).unwrap();
    assert!(matches!(wrong.fetch(&plain).await, Err(FetchError::Refused { status: 401, .. })));
    assert_eq!(metric(&backend, "volley_backend_requests_total{outcome=\"minted\"}").await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_is_counted() {
    let (_server, backend) = setup(|_| {}).await;
    let a = backend.addr();
    let now = unix_now().as_secs();
    let check = |(status, body): (u16, String), want: u16, says: &str| {
        assert_eq!(status, want, "{body}");
        assert!(body.contains(says), "{body:?} should say {says:?}");
    };
    check(raw(a, &post("{not json")).await, 400, "bad request");
    check(raw(a, &post(r#"{"player":"a","admin":true}"#)).await, 400, "unknown field");
    check(raw(a, &post(&" ".repeat(5000))).await, 400, "over 4096 bytes");
    check(raw(a, &post(r#"{"player":"a"}"#)).await, 401, "a signature or an API key is required");
    check(raw(a, &post(r#"{"player":"a b c","expires":1,"signature":"00"}"#)).await, 400, "bad player id");
    let forged = format!(r#"{{"player":"a","expires":{},"signature":"{}"}}"#, now + 60, "ab".repeat(32));
    check(raw(a, &post(&forged)).await, 401, "bad signature");
    let old =
        format!(r#"{{"player":"a","expires":{},"signature":"{}"}}"#, now - 100, auth::sign(SECRET, "a", now - 100));
    check(raw(a, &post(&old)).await, 401, "expired");
    let far = now + 86_400;
    let ahead = format!(r#"{{"player":"a","expires":{far},"signature":"{}"}}"#, auth::sign(SECRET, "a", far));
    check(raw(a, &post(&ahead)).await, 400, "expires more than");
    check(raw(a, "GET /v1/token HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await, 405, "");
    check(raw(a, "BREW /pot HTTP/9\r\n\r\n").await, 400, "");

    for (outcome, n) in
        [("bad_request", 3.0), ("unauthenticated", 1.0), ("bad_player", 1.0), ("bad_signature", 2.0), ("expired", 1.0)]
    {
        let series = format!("volley_backend_requests_total{{outcome=\"{outcome}\"}}");
        assert_eq!(metric(&backend, &series).await, n, "{outcome}");
    }

    let (_, text) = raw(a, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    tools::assert_promtool_clean(&text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_requests_player_ids_and_connections_stay_bounded() {
    let (_server, backend) = setup(|c| {
        c.desk.per_address = (20.0, 50.0);
        c.desk.limiter_entries = 64;
        c.max_connections = 8;
    })
    .await;
    // One address asking as fast as it can: the burst, then 429s.
    let mut client = TokenClient::new(&backend.url(), None, Duration::from_secs(5)).unwrap();
    let (mut ok, mut limited) = (0, 0);
    for i in 0..200 {
        let req = signed_request(SECRET, &format!("p{i}"), unix_now(), Duration::from_secs(60));
        match client.fetch(&req).await {
            Ok(_) => ok += 1,
            Err(FetchError::Refused { status: 429, .. }) => limited += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!((50..=60).contains(&ok), "{ok} minted of 200 from one address with a burst of 50");
    assert_eq!(ok + limited, 200);
    // The limiters remember at most 64 player ids and 64 addresses.
    assert!(metric(&backend, "volley_backend_rate_limiter_entries").await <= 128.0);

    // Held-open connections beyond the limit are closed at once; the backend still answers.
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(tokio::net::TcpStream::connect(backend.addr()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(metric_after_close(&mut held, &backend).await >= 12.0);
}

/// Closes the held connections, then reads how many connections were refused.
async fn metric_after_close(held: &mut Vec<tokio::net::TcpStream>, backend: &BackendHandle) -> f64 {
    held.clear();
    tokio::time::sleep(Duration::from_millis(200)).await;
    metric(backend, "volley_backend_connections_refused_total").await
}

/// Sends `request` as it is; the whole answer, head and body.
async fn raw_all(addr: SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_an_allowed_origin_gets_a_token_naming_the_server_s_web_front() {
    let (_server, backend) = setup(|c| {
        c.cors_origins = vec!["https://game.example".into()];
        c.servers[0].web = Some("https://play1.example:8080".into());
    })
    .await;
    let preflight = |origin: &str| {
        format!(
            "OPTIONS /v1/token HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\nConnection: close\r\n\r\n"
        )
    };
    let ok = raw_all(backend.addr(), &preflight("https://game.example")).await;
    assert!(ok.starts_with("http/1.1 204"), "{ok}");
    assert!(ok.contains("access-control-allow-origin: https://game.example"), "{ok}");
    assert!(ok.contains("access-control-allow-headers: authorization, content-type"), "{ok}");
    let other = raw_all(backend.addr(), &preflight("https://evil.example")).await;
    assert!(other.starts_with("http/1.1 403") && !other.contains("access-control-allow-origin"), "{other}");

    // The page's POST, with a bearer (an API key here; a page would carry a signed request).
    let body = r#"{"player":"carol"}"#;
    let with_origin = |origin: &str| {
        post(body)
            .replace("Host: x\r\n", &format!("Host: x\r\nOrigin: {origin}\r\nAuthorization: Bearer trusted-key\r\n"))
    };
    let answer = raw_all(backend.addr(), &with_origin("https://game.example")).await;
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("access-control-allow-origin: https://game.example"), "{answer}");
    let grant: volley_fleet::backend::desk::TokenGrant =
        serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(grant.web.as_deref(), Some("https://play1.example:8080"), "the grant names the web front");
    let other = raw_all(backend.addr(), &with_origin("https://evil.example")).await;
    assert!(!other.contains("access-control-allow-origin"), "no CORS for another page: {other}");
}
