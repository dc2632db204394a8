//! The rooms as `volley run` serves them, over real UDP: a lobby that starts matches with
//! whoever is queued after a short wait (fewer players than a full match), matches that end
//! and send their players back, and the swarm's summary telling the truth about it: each
//! match numbers its own kill feed from 0, so the reliable-feed check follows the worlds a bot
//! moved through and flags no false alarm, while a message taken out of a bot's feed is
//! caught.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use volley::server::ServerConfig;
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};
use volley_arena::rooms::{KINDS, Lobby, RoomFigures, Rooms};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_start_short_of_full_and_the_feed_check_follows_each_world() {
    let key = [12u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.world_kinds = KINDS.iter().map(|k| (*k).to_owned()).collect();
    let figures = Arc::new(RoomFigures::default());
    // Matches of 8 that 6 bots never fill: they start on the wait, with whoever is queued.
    let rooms = Rooms {
        match_size: 8,
        match_min: 2,
        match_wait: Duration::from_secs(1),
        match_length: Duration::from_secs(6),
        beacons: 10,
        ..Rooms::default()
    };
    let server = volley::server::start(config, Lobby::new(rooms, figures.clone())).await.unwrap();
    let bots = 6;
    let cfg = SwarmConfig::new(server.addr(), bots, key);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(cfg, Arc::new(SwarmProgress::default()), stop_rx));
    // A match from about 1 s to 7 s, the lobby's wait, a second match from about 8 s.
    tokio::time::sleep(Duration::from_secs(14)).await;
    stop_tx.send(true).unwrap();
    let mut report = swarm.await.unwrap();
    server.shutdown().await;
    println!("{}", report.summary());
    let feed = report.kill_feed();
    println!("{}", feed.line());
    let (started, finished) = (figures.started.load(Ordering::Relaxed), figures.finished.load(Ordering::Relaxed));
    println!("matches: {started} started, {finished} played to the end");

    assert_eq!(report.connected(), bots);
    assert!(started >= 2 && finished >= 1, "matches played although never full: {started} started, {finished} ended");
    assert!(report.bots.iter().all(|b| b.max_others_seen > 0), "every bot saw other players");
    let worlds: std::collections::BTreeSet<u32> =
        report.bots.iter().flat_map(|b| b.kill_feed.iter().map(|h| h.stay)).collect();
    assert!(worlds.len() >= 2, "kills heard in two matches at least (stays {worlds:?})");
    assert!(
        report.bots.iter().any(|b| b.kill_feed.windows(2).any(|w| w[1].stay != w[0].stay && w[1].seq <= w[0].seq)),
        "some bot's numbering started again in its next match (or the test shows nothing)"
    );
    assert!(feed.faulty.is_empty(), "no false alarm: {}", feed.line());

    // A message lost on the way is still caught: take one out of a run of three.
    let (bot, at) = report
        .bots
        .iter()
        .enumerate()
        .find_map(|(i, b)| b.kill_feed.windows(3).position(|w| w[0].stay == w[2].stay).map(|k| (i, k + 1)))
        .expect("a bot heard three kills in one match");
    report.bots[bot].kill_feed.remove(at);
    assert_eq!(report.kill_feed().faulty, vec![bot], "the skip is flagged, on that bot alone");
}
