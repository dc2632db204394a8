//! Over real UDP through a link conditioner on every bot (20 % loss and 60 ± 50 ms delay each
//! way, so datagrams also overtake each other): every reliable kill-feed message reaches every
//! client exactly once and in order, and once the world settles every client holds the same
//! state for every player.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use volley::server::ServerConfig;
use volley::transport::conditioner::LinkProfile;
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};
use volley_arena::{self as arena, Arena, Avatar};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliable_events_exactly_once_in_order_and_worlds_agree_under_loss_and_jitter() {
    let key = [6u8; 32];
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Arena::new()).await.unwrap();
    let bots = 24;
    let mut cfg = SwarmConfig::new(server.addr(), bots, key);
    cfg.link = Some(LinkProfile {
        latency: Duration::from_millis(60),
        jitter: Duration::from_millis(50),
        loss: 0.2,
        burst: None,
    });
    cfg.idle_after = Some(Duration::from_secs(9));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(cfg, Arc::new(SwarmProgress::default()), stop_rx));
    tokio::time::sleep(Duration::from_secs(14)).await;
    stop_tx.send(true).unwrap();
    let report = swarm.await.unwrap();
    server.shutdown().await;
    println!("{}", report.summary());

    assert_eq!(report.connected(), bots, "everyone connected through the lossy link");
    let last = report.bots.iter().filter_map(|b| b.kill_feed.last().map(|h| h.seq)).max().expect("some kills happened");
    assert!(last >= 3, "enough kills to test with: {}", last + 1);
    for (i, b) in report.bots.iter().enumerate() {
        // One world: one numbering.
        let feed: Vec<u32> = b.kill_feed.iter().map(|h| h.seq).collect();
        assert!(!feed.is_empty(), "bot {i} heard no kill");
        assert!(
            feed.windows(2).all(|w| w[1] == w[0] + 1),
            "bot {i}: kill feed not exactly once and in order: {feed:?}"
        );
        assert_eq!(*feed.last().unwrap(), last, "bot {i} missed the last kills");
    }

    // The world has been still for five seconds: every client must see every avatar the same.
    let schema = arena::schema();
    let avatar = schema.kind_of::<Avatar>().unwrap();
    let mut seen: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (i, b) in report.bots.iter().enumerate() {
        let world = b.latest.as_ref().unwrap_or_else(|| panic!("bot {i} has no snapshot"));
        let avatars: Vec<_> = world.iter().filter(|e| e.kind == avatar).collect();
        assert_eq!(avatars.len(), bots, "bot {i} sees every avatar");
        for e in avatars {
            let first = seen.entry(e.id).or_insert_with(|| e.words.to_vec());
            assert_eq!(first.as_slice(), e.words, "bot {i} disagrees about avatar {}", e.id);
        }
    }
}
