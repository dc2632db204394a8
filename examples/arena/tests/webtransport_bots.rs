//! The bot swarm over WebTransport (as a browser connects, through the server's web front)
//! beside a swarm over UDP, against one real arena server: every bot plays, each sees the
//! other swarm's players, nothing fails to decode, and leaving frees the seats.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use volley::server::ServerConfig;
use volley_arena::Arena;
use volley_arena::bots::{SwarmConfig, SwarmProgress, WebTarget, run_swarm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webtransport_bots_and_udp_bots_play_in_one_world_and_leave() {
    let key = [7u8; 32];
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Arena::new()).await.unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut cfg = volley_arena::web::config(any, server.addr(), None);
    cfg.webtransport = Some(any);
    let web = volley_web::serve(cfg).await.unwrap();
    // What a page reads first: where the endpoint is and which certificate to trust.
    let found = volley_web::client::discover(web.http_addr()).await.expect("/web.json");
    assert_eq!(found.addr, web.webtransport_addr());
    assert_eq!(found.certificate_hashes, web.certificate_hashes());

    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let udp = SwarmConfig { first_client_id: 1, ..SwarmConfig::new(server.addr(), 3, key) };
    let wt = SwarmConfig {
        first_client_id: 100,
        webtransport: Some(WebTarget { addr: found.addr, certificate_hashes: found.certificate_hashes }),
        ..SwarmConfig::new(server.addr(), 3, key)
    };
    let (udp_progress, wt_progress) = (Arc::new(SwarmProgress::default()), Arc::new(SwarmProgress::default()));
    let udp = tokio::spawn(run_swarm(udp, udp_progress.clone(), stop.clone()));
    let wt = tokio::spawn(run_swarm(wt, wt_progress.clone(), stop));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(web.sessions(), (3, 0), "three WebTransport sessions, no WebSocket");
    assert_eq!(server.metrics().totals().players, 6);
    stop_tx.send(true).unwrap();
    let (udp, wt) = (udp.await.unwrap(), wt.await.unwrap());
    for (name, report) in [("udp", &udp), ("webtransport", &wt)] {
        assert_eq!(report.connected(), 3, "{name}: {}", report.summary());
        for b in &report.bots {
            // The arena's one world: each sees the five others (and itself is not counted).
            assert_eq!(b.max_others_seen, 5, "{name}: each bot saw both swarms' players: {}", report.summary());
            assert_eq!(b.snapshot_errors, 0, "{name}");
            assert!(b.snapshots > 100, "{name}: {} snapshots", b.snapshots);
        }
    }
    // The WebTransport bots left (the one-byte leave, the relay's netcode disconnect): no
    // seat kept for a resume.
    for _ in 0..50 {
        if server.metrics().totals().players == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.metrics().totals().players, 0, "every bot's seat was freed");
    server.shutdown().await;
}
