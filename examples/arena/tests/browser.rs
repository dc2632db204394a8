//! The arena's page in a real headless Chromium against a real server with UDP players:
//! over WebTransport, over the WebSocket fallback, and through a certificate's renewal.
//!
//! The browser is driven over the DevTools protocol (a WebSocket): the test loads the page
//! with `?bot=1` (it plays by itself), reads `#volley-status` and keeps a screenshot in
//! `target/tmp/browser/` (printed). The test command installs Debian's `chromium`
//! (`.ci/run`); `VOLLEY_CHROMIUM` names another binary.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use volley::client::GameClient;
use volley::client::udp::UdpClient;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::server::{ServerConfig, ServerHandle, unix_now};
use volley_arena::{Arena, ArenaInput, Avatar};

/// A headless Chromium, one page, driven over the DevTools protocol.
struct Chrome {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next: u64,
    dir: std::path::PathBuf,
}

impl Chrome {
    async fn launch(name: &str) -> Chrome {
        let bin = std::env::var("VOLLEY_CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let dir = std::env::temp_dir().join(format!("volley-chrome-{}-{name}", std::process::id()));
        let mut child = Command::new(&bin)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1000,640",
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows",
            ])
            .arg(format!("--user-data-dir={}", dir.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e} (the test command installs Debian's chromium; see .ci/run)"));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(30)).expect("chromium said where its DevTools listen");
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str()).await.expect("the DevTools WebSocket");
        let mut chrome = Chrome { child, ws, session: String::new(), next: 0, dir };
        let target = chrome.call("Target.createTarget", json!({ "url": "about:blank" })).await;
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = chrome.call("Target.attachToTarget", json!({ "targetId": target, "flatten": true })).await;
        chrome.session = attached["sessionId"].as_str().unwrap().to_string();
        chrome
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let mut m = json!({ "id": self.next, "method": method, "params": params });
        if !self.session.is_empty() {
            m["sessionId"] = json!(self.session);
        }
        self.ws.send(Message::text(m.to_string())).await.unwrap();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.ws.next()).await.expect("DevTools answer");
            let Some(Ok(Message::Text(t))) = msg else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == json!(self.next) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    async fn eval(&mut self, expression: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expression, "returnByValue": true })).await;
        r["result"]["value"].clone()
    }

    /// The page's `#volley-status`, as its JSON.
    async fn status(&mut self) -> Value {
        let s = self.eval("(document.getElementById('volley-status') || {dataset: {}}).dataset.json || '{}'").await;
        serde_json::from_str(s.as_str().unwrap_or("{}")).unwrap_or(Value::Null)
    }

    async fn screenshot(&mut self, name: &str) -> std::path::PathBuf {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" })).await;
        let png = base64_decode(shot["data"].as_str().unwrap());
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
        path
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').map(val).collect();
    bytes
        .chunks(4)
        .flat_map(|c| {
            let n = c.iter().enumerate().fold(0u32, |n, (i, v)| n | (u32::from(*v) << (18 - 6 * i)));
            let out = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            out.into_iter().take(c.len().saturating_sub(1))
        })
        .collect()
}

/// UDP players beside the page: each steps 60 times a second, running in a circle, and
/// remembers every avatar it was shown.
struct UdpPlayers {
    /// Their slots (an avatar's id is its player's slot).
    ids: Arc<Mutex<Vec<u32>>>,
    seen: Arc<Mutex<HashSet<u32>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

async fn udp_players(server: &ServerHandle, key: [u8; 32], n: u64) -> UdpPlayers {
    let mut clients = Vec::new();
    for id in 1..=n {
        let p = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
        let c =
            GameClient::new(ConnectToken::generate(&p, &key).unwrap(), Arc::new(volley_arena::schema()), unix_now());
        clients.push(UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap());
    }
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(Mutex::new(Vec::new()));
    let (seen2, stop2, ids2) = (seen.clone(), stop.clone(), ids.clone());
    let task = tokio::spawn(async move {
        let mut next = tokio::time::Instant::now();
        let mut frame = 0u32;
        while !stop2.load(Ordering::Relaxed) {
            next += Duration::from_millis(16);
            frame += 1;
            for c in &mut clients {
                let a = frame as f32 * 0.03;
                let input = ArenaInput {
                    move_x: (a.cos() * 100.0) as i8,
                    move_y: (a.sin() * 100.0) as i8,
                    aim: ArenaInput::aim_from_radians(a),
                    ..Default::default()
                };
                c.step(&input.to_bytes(), next).await;
                let mine = c.client.client_index();
                if let Some(me) = mine
                    && !ids2.lock().unwrap().contains(&me)
                {
                    ids2.lock().unwrap().push(me);
                }
                let mut s = seen2.lock().unwrap();
                for (id, _) in c.client.entities::<Avatar>(unix_now()) {
                    if Some(id) != mine {
                        s.insert(id);
                    }
                }
            }
        }
    });
    for _ in 0..200 {
        if ids.lock().unwrap().len() as u64 == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ids.lock().unwrap().len() as u64, n, "the UDP players connected");
    UdpPlayers { ids, seen, stop, task }
}

/// The server's clock offset for certificates (seconds), so a test can move it.
static CLOCK_OFFSET: AtomicI64 = AtomicI64::new(0);

fn moved_clock() -> SystemTime {
    let off = CLOCK_OFFSET.load(Ordering::Relaxed);
    if off >= 0 {
        SystemTime::now() + Duration::from_secs(off.unsigned_abs())
    } else {
        SystemTime::now() - Duration::from_secs(off.unsigned_abs())
    }
}

async fn arena_with_web(key: [u8; 32], moved: bool) -> (ServerHandle, volley_web::WebHandle) {
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Arena::new()).await.unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut cfg =
        volley_arena::web::config(any, server.addr(), Some((server.addr(), key, volley::DEFAULT_PROTOCOL_ID)));
    cfg.webtransport = Some(any);
    if moved {
        cfg.clock = moved_clock;
        cfg.check_certificates_every = Duration::from_millis(200);
    }
    let web = volley_web::serve(cfg).await.unwrap();
    (server, web)
}

/// Polls the page until `done` says so (or 45 s), returning the last status.
async fn until(chrome: &mut Chrome, what: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..90 {
        last = chrome.status().await;
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{what}: the page never got there; its status: {last}");
}

fn applied(s: &Value) -> u64 {
    s["inputs_applied"].as_u64().unwrap_or(0)
}

/// The page plays with two UDP players: it sees them, they see it, its inputs are applied,
/// nothing fails to decode; a screenshot is kept.
async fn a_page_plays_beside_udp_players(transport: &str, query: &str) {
    let key = [57u8; 32];
    let (server, web) = arena_with_web(key, false).await;
    let udp = udp_players(&server, key, 2).await;
    let mut chrome = Chrome::launch(transport).await;
    let url = format!("http://{}/?bot=1{query}", web.http_addr());
    chrome.call("Page.navigate", json!({ "url": url })).await;
    let s = until(&mut chrome, "playing", |s| s["state"] == "playing" && applied(s) > 120).await;
    let me = s["player"].as_u64().expect("the page knows its player") as u32;
    // Both ways: the page shows the UDP players, and they were shown the page's avatar.
    let ids = udp.ids.lock().unwrap().clone();
    let s = until(&mut chrome, "seeing the UDP players", |s| {
        let others: HashSet<u64> = s["others"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
        ids.iter().all(|id| others.contains(&u64::from(*id)))
    })
    .await;
    for _ in 0..50 {
        if udp.seen.lock().unwrap().contains(&me) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(udp.seen.lock().unwrap().contains(&me), "a UDP player was shown the page's avatar {me}");
    // It plays on: more inputs applied, and it moved.
    let later = until(&mut chrome, "applying more inputs", |l| applied(l) > applied(&s) + 60).await;
    assert_ne!(later["position"], s["position"], "the page's avatar moves");
    let shot = chrome.screenshot(transport).await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 5_000, "a screenshot with something in it");
    assert_eq!(later["transport"], transport);
    assert_eq!(later["decode_errors"], 0, "{later}");
    assert!(later["snapshots"].as_u64().unwrap() > 100);
    let (wt, ws) = web.sessions();
    assert_eq!(if transport == "webtransport" { (wt, ws) } else { (ws, wt) }, (1, 0), "one browser, on {transport}");
    eprintln!("{transport}: {later}");
    udp.stop.store(true, Ordering::Relaxed);
    let _ = udp.task.await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_page_plays_over_webtransport_beside_udp_players() {
    a_page_plays_beside_udp_players("webtransport", "&transport=webtransport").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_page_plays_over_the_websocket_fallback_beside_udp_players() {
    a_page_plays_beside_udp_players("websocket", "&transport=websocket").await;
}

/// A server whose clock is moved past its certificate's renewal presents a new one and
/// publishes its hash; a page whose connection then breaks reconnects under it (with the
/// hashes it fetches again) and resumes its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_page_reconnects_across_a_certificate_renewal() {
    // The first certificate was made eight days ago (still valid: it lasts thirteen).
    CLOCK_OFFSET.store(-8 * 86_400, Ordering::Relaxed);
    let key = [58u8; 32];
    let (server, web) = arena_with_web(key, true).await;
    let first = web.certificate_hashes();
    assert_eq!(first.len(), 1);
    let mut chrome = Chrome::launch("renewal").await;
    let url = format!("http://{}/?bot=1&transport=webtransport", web.http_addr());
    chrome.call("Page.navigate", json!({ "url": url })).await;
    let before = until(&mut chrome, "playing", |s| s["state"] == "playing" && applied(s) > 60).await;
    // Now: the certificate is past half its life and is renewed.
    CLOCK_OFFSET.store(0, Ordering::Relaxed);
    let mut renewed = Vec::new();
    for _ in 0..50 {
        renewed = web.certificate_hashes();
        if renewed.first() != first.first() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(renewed.first(), first.first(), "a new certificate");
    assert_eq!(renewed.get(1), first.first(), "the old one's hash still published while it is valid");
    // The page's connection breaks; it comes back under the new certificate.
    chrome.eval("window.volleyClient.link.close(); true").await;
    let after = until(&mut chrome, "resumed", |s| {
        s["resumes"].as_u64().unwrap_or(0) >= 1 && s["state"] == "playing" && applied(s) > applied(&before) + 60
    })
    .await;
    assert_eq!(after["player"], before["player"], "the same player, resumed");
    assert_eq!(after["transport"], "webtransport");
    assert_eq!(after["decode_errors"], 0);
    chrome.screenshot("renewal").await;
    eprintln!("renewed: {after}");
    server.shutdown().await;
}
