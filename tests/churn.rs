//! Churn over real UDP: bots leave and new ones join while the rest play. Every table that
//! grows with players comes back to one entry per player, nothing stays pending, and the bots
//! that stayed hear every reliable message to everyone exactly once and in order (what a soak
//! run checks for ten minutes; this is its short form).
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use volley::server::ServerConfig;
use volley::server::metrics::TABLES;
use volley_arena::Arena;
use volley_arena::bots::{Churn, SwarmConfig, SwarmProgress, run_swarm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_return_to_one_entry_per_player_through_churn_and_the_feed_stays_exact() {
    let key = [9u8; 32];
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Arena::new()).await.unwrap();
    let bots = 30;
    let cfg = SwarmConfig {
        churn: Some(Churn { every: Duration::from_secs(3), fraction: 0.3 }),
        ..SwarmConfig::new(server.addr(), bots, key)
    };
    let progress = Arc::new(SwarmProgress::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(cfg, progress.clone(), stop_rx));
    // Churns at 3 s and 6 s; two seconds after the second, everything has settled (the
    // socket actor refreshes its table gauges once a second).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let scrape = server.metrics().render();
    let totals = server.metrics().totals();
    stop_tx.send(true).unwrap();
    let report = swarm.await.unwrap();
    server.shutdown().await;

    let (out, into) = (progress.churned_out.load(Ordering::Relaxed), progress.churned_in.load(Ordering::Relaxed));
    // Two churns of about 30 % (each driver task rounds its own share).
    assert_eq!(out, into, "as many joined as left");
    assert!((14..=22).contains(&out), "{out} bots churned");
    let all = bots + out as usize;
    assert_eq!(report.bots.len(), all);
    assert_eq!(report.connected(), all, "every bot connected, the new ones too");
    assert_eq!(totals.players, bots as u64);
    assert_eq!(totals.connects, all as u64);
    let table = |t: &str| -> f64 {
        let series = format!("volley_table_entries{{table=\"{t}\"}} ");
        let line = scrape.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("{series} in {scrape}"));
        line[series.len()..].trim().parse().unwrap()
    };
    for t in &TABLES[2..] {
        assert_eq!(table(t), bots as f64, "{t}: one entry per player");
    }
    assert_eq!(table("pending_handshakes"), 0.0);
    assert_eq!(table("pending_ips"), 0.0);
    let feed = report.kill_feed();
    println!("{}", feed.line());
    assert_eq!(feed.stayed, bots);
    assert!(feed.faulty.is_empty(), "{}", feed.line());
}
