//! The fleet, run as a user would: the `volley` binary's Agones lifecycle against the
//! stand-in SDK server (SIGTERM → players told → Shutdown), and `volley backend` handing two
//! `volley server`s' seats to `volley bots --backend` over real HTTP and UDP on loopback.
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agones_sdk_standin::{Call, StandIn};
use volley::prelude::*;
use volley::protocol::session::SessionEnd;

const KEY: &str = "5151515151515151515151515151515151515151515151515151515151515151";

/// A loopback port free for both UDP and TCP just now.
fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn volley(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("AGONES_SDK_GRPC_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "did not exit in {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn output(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_tells_the_players_then_sends_shutdown() {
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    // Agones gave the GameServer this address; the server binds all addresses and must
    // take the one in the record as the address tokens name.
    let sdk = StandIn::start_at("volley-xyz", &[("players", 0)], Some(bind.parse().unwrap()));
    let sdk_port = sdk.port().to_string();
    let any = format!("0.0.0.0:{port}");
    let mut server = volley(&[
        "server",
        "--bind",
        &any,
        "--admin",
        "off",
        "--private-key",
        KEY,
        "--match-size",
        "0",
        "--max-players",
        "16",
        "--shutdown-grace",
        "3",
        "--agones",
        "--agones-port",
        &sdk_port,
    ]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sdk.state() != "Ready" {
        assert!(Instant::now() < deadline, "no Ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let key = volley_util::hex::decode_array::<32>(KEY).unwrap();
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, 9, bind.parse().unwrap(), unix_now().as_secs());
    let token = ConnectToken::generate(&p, &key).unwrap();
    let c = GameClient::new(token, Arc::new(volley_arena::schema()), unix_now());
    let mut client = UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut next = tokio::time::Instant::now();
    while sdk.counter("players") != Some((1, 16)) {
        assert!(Instant::now() < deadline, "players counter {:?}", sdk.counter("players"));
        next += Duration::from_millis(16);
        client.step(&[0; 8], next).await;
    }

    assert!(Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap().success());
    while client.client.ended().is_none() {
        assert!(Instant::now() < deadline + Duration::from_secs(5), "the client was not told");
        next += Duration::from_millis(16);
        client.step(&[0; 8], next).await;
    }
    let told = Instant::now();
    assert_eq!(client.client.ended(), Some(SessionEnd::ShuttingDown));
    let code = wait_exit(&mut server, Duration::from_secs(15));
    let out = output(server);
    assert!(code.success(), "{code:?}\n{out}");
    let calls = sdk.calls();
    let at = |want: &Call| calls.iter().find(|(_, c)| c == want).map(|(t, _)| *t);
    let (ready, shutdown) = (at(&Call::Ready).unwrap(), at(&Call::Shutdown).expect("Shutdown sent"));
    assert!(calls.iter().any(|(_, c)| *c == Call::Health));
    assert!(ready < told && told <= shutdown, "Ready, then the players told, then Shutdown");
    assert_eq!(sdk.state(), "Shutdown");
    assert!(out.contains("agones: Shutdown sent"), "{out}");
}

/// Reads `ready: N/M players` or `not ready: full (N/M)` from a server's /readyz.
async fn players(admin: &str) -> u64 {
    let (_, body) = volley_fleet::admin_client::get(admin.parse().unwrap(), "/readyz", Duration::from_secs(1))
        .await
        .unwrap_or((0, String::new()));
    let before = body.split('/').next().unwrap_or("");
    let digits: String = before.chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_fills_two_servers_with_150_bots_and_refuses_none() {
    let (p1, p2, a1, a2, b) = (free_port(), free_port(), free_port(), free_port(), free_port());
    let server = |port: u16, admin: u16| {
        volley(&[
            "server",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--admin",
            &format!("127.0.0.1:{admin}"),
            "--private-key",
            KEY,
            "--match-size",
            "0",
            "--max-players",
            "100",
            "--duration",
            "40",
        ])
    };
    let (s1, s2) = (server(p1, a1), server(p2, a2));
    let url = format!("http://127.0.0.1:{b}");
    let backend = volley(&[
        "backend",
        "--bind",
        &format!("127.0.0.1:{b}"),
        "--private-key",
        KEY,
        "--secret",
        "s3cret",
        "--server",
        &format!("127.0.0.1:{p1}@127.0.0.1:{a1}"),
        "--server",
        &format!("127.0.0.1:{p2}@127.0.0.1:{a2}"),
        "--duration",
        "40",
    ]);
    // The backend is ready once both servers answer its polls.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = volley_fleet::admin_client::get(
            format!("127.0.0.1:{b}").parse().unwrap(),
            "/readyz",
            Duration::from_secs(1),
        )
        .await;
        if r.as_ref().is_ok_and(|(_, body)| body.contains("2 servers")) {
            break;
        }
        assert!(Instant::now() < deadline, "backend not ready: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut bots = volley(&[
        "bots",
        "--server",
        &format!("127.0.0.1:{p1}"),
        "--backend",
        &url,
        "--backend-secret",
        "s3cret",
        "--bots",
        "150",
        "--duration",
        "10",
    ]);
    let (a1, a2) = (format!("127.0.0.1:{a1}"), format!("127.0.0.1:{a2}"));
    let (mut most1, mut most2) = (0, 0);
    let until = Instant::now() + Duration::from_secs(9);
    while Instant::now() < until {
        most1 = most1.max(players(&a1).await);
        most2 = most2.max(players(&a2).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let code = wait_exit(&mut bots, Duration::from_secs(30));
    let out = output(bots);
    assert!(code.success(), "{out}");
    assert!(out.contains("bots: 150 connected of 150"), "{out}");
    assert!(out.contains("0 bots got none"), "{out}");
    // Fullest first: the first server fills, the rest go to the second.
    assert_eq!((most1, most2), (100, 50), "{out}");
    let (_, metrics) =
        volley_fleet::admin_client::get(format!("127.0.0.1:{b}").parse().unwrap(), "/metrics", Duration::from_secs(1))
            .await
            .unwrap();
    assert!(metrics.contains("volley_backend_requests_total{outcome=\"minted\"} 150"), "{metrics}");
    for mut c in [s1, s2, backend] {
        let _ = c.kill();
        let _ = c.wait();
    }
}
