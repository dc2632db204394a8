//! The whole server over real UDP on 127.0.0.1: bots connect, move, see each other, and are
//! told when the server shuts down.
#![allow(clippy::unwrap_used, missing_docs)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use volley::protocol::netcode::client::ClientState;
use volley::server::ServerConfig;
use volley_arena::Arena;
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_connect_see_each_other_and_are_told_of_shutdown() {
    let key = [5u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.shutdown_grace = Duration::from_secs(3);
    let server = volley::server::start(config, Arena::new()).await.unwrap();
    let bots = 100;
    let progress = Arc::new(SwarmProgress::default());
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(SwarmConfig::new(server.addr(), bots, key), progress.clone(), stop_rx));

    // Wait until everyone is in (bounded), then let them play a little.
    for _ in 0..200 {
        if progress.connected.load(std::sync::atomic::Ordering::Relaxed) == bots as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let m = server.metrics().clone();
    let players = m.totals().players;
    if players != bots as u64 {
        let _ = _stop_tx.send(true);
        let report = swarm.await.unwrap();
        for (i, b) in
            report.bots.iter().enumerate().filter(|(_, b)| !b.connected || b.state != Some(ClientState::Connected))
        {
            eprintln!("bot {i}: {:?}", b);
        }
        eprintln!(
            "connects {} disconnects {} handshake drops {} dropped {} failures {}",
            m.totals().connects,
            m.totals().disconnects,
            m.totals().handshake_drops,
            m.totals().dropped,
            m.totals().actor_failures
        );
        panic!("{players} players of {bots}");
    }

    // Shut the server down while the bots still play: each must hear the disconnect.
    let left = server.shutdown().await;
    assert_eq!(left, 0, "every player actor finished within the grace period");
    let report = tokio::time::timeout(Duration::from_secs(10), swarm).await.unwrap().unwrap();
    println!("{}", report.summary());
    assert_eq!(report.connected(), bots);
    for (i, b) in report.bots.iter().enumerate() {
        assert!(b.snapshots > 30, "bot {i} got {} snapshots", b.snapshots);
        assert_eq!(b.snapshot_errors, 0, "bot {i}");
        assert!(b.max_others_seen > 0, "bot {i} never saw another player");
        assert_eq!(b.state, Some(ClientState::Disconnected), "bot {i} was told of the shutdown");
    }
    assert!(m.totals().ticks > 100);
}

#[test]
fn sigterm_disconnects_everyone_and_exits_zero() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(["run", "--bots", "8", "--bind", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shutdown-grace", "3"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(code.success(), "exit status {code:?}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("bots: 8 connected of 8"), "{stdout}");
    assert!(stdout.contains("0 still connected at exit"), "{stdout}");
}
