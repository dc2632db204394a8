//! Many worlds in one server: a lobby, matches started and stopped while it runs, and a
//! global world every player watches, in the deterministic stepper (exact checks against
//! the server's merged view of each player) and over real UDP.

#![allow(clippy::unwrap_used, missing_docs)]

use crate::rooms;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rooms::{Lobby, Record, Rules};
use volley::prelude::*;

/// A stepper running the rooms with `clients` players on perfect links.
fn stepper(rules: Rules, clients: usize) -> (Stepper<Lobby>, Arc<Record>) {
    let record = Arc::new(Record::default());
    let mut s = Stepper::new(Lobby::new(rules, record.clone()), 60, 128).with_world_kinds(&rooms::KINDS);
    for _ in 0..clients {
        s.add_client(LinkProfile::PERFECT);
    }
    (s, record)
}

/// Whether `w` was where the client last said `p` was (it moves after its view was made).
fn moved_this_tick(last: &BTreeMap<u32, u16>, p: u32, w: u16) -> bool {
    last.get(&p) == Some(&w)
}

#[test]
fn players_pass_through_matches_and_back_seeing_exactly_what_the_server_merged() {
    let (mut s, record) = stepper(Rules::default(), 64);
    let global = || record.global.lock().unwrap().expect("the global world started").number();
    // What the server encoded for each player at each tick, to compare with what its client
    // decoded once it arrives.
    let mut sent: BTreeMap<(u32, u32), Arc<WorldSnapshot>> = BTreeMap::new();
    let mut compared = 0u64;
    let mut in_matches = std::collections::BTreeSet::new();
    let mut last_home: BTreeMap<u32, u16> = BTreeMap::new();
    for _ in 0..3000 {
        s.step();
        let tick = s.tick();
        for c in &s.clients {
            let Some(p) = c.client.client_index() else { continue };
            if let Some(view) = s.view_of(p)
                && view.tick() == tick
            {
                // The server's view holds one world besides the global one: the player's.
                let shown = rooms::check_snapshot(view, s.schema(), global()).unwrap();
                let home = s.home(p).expect("every player is somewhere").number();
                // (It may have moved since, in this tick's changes.)
                assert!(shown.is_none_or(|w| w == home || moved_this_tick(&last_home, p, w)), "player {p} at {tick}");
                sent.insert((p, tick), view.clone());
            }
            // Everything the client decoded equals what the server merged for it.
            if let Some(got) = c.client.latest() {
                let want = sent.get(&(p, got.tick())).expect("a snapshot the server sent");
                assert_eq!(got, &**want, "player {p} at tick {}", got.tick());
                rooms::check_snapshot(got, s.schema(), global()).unwrap();
                rooms::check_content(got, s.schema(), global(), 3).unwrap();
                compared += 1;
            }
            if let Some(n) = c.client.world() {
                last_home.insert(p, n.world);
                if n.kind == "match" {
                    in_matches.insert((p, n.world));
                }
            }
        }
        sent.retain(|(_, t), _| *t + 120 > tick);
        let done = record.rounds.lock().unwrap().values().filter(|r| **r == 2).count();
        if done == 64 && s.world_list().iter().all(|(_, kind, _)| kind != "match") {
            break;
        }
    }
    s.run(30); // the last notices arrive
    let rounds = record.rounds.lock().unwrap().clone();
    assert_eq!(rounds.len(), 64, "every player played");
    assert!(rounds.values().all(|r| *r == 2), "twice each: {rounds:?}");
    assert_eq!(record.matches.load(Ordering::Relaxed), 16, "8 matches of 8, twice");
    assert_eq!(record.ended.load(Ordering::Relaxed), 16);
    assert_eq!(s.players(), 64, "nobody reconnected or dropped");
    for c in &s.clients {
        assert_eq!(c.client.ended(), None);
        assert_eq!(c.client.world().map(|n| n.world), Some(0), "back in the lobby");
    }
    assert_eq!(in_matches.len(), 64 * 2, "each client was told of two matches");
    assert!(compared > 64 * 200, "snapshots compared: {compared}");
    let kinds: Vec<String> = s.world_list().into_iter().map(|(_, k, _)| k).collect();
    assert_eq!(kinds, ["lobby", "global"], "the matches stopped");
}

#[test]
fn a_panicking_match_sends_its_players_to_the_lobby_and_no_other_match_notices() {
    let rules = Rules { panicking: [1].into(), rounds: 1, match_ticks: 600, ..Rules::default() };
    let (mut s, record) = stepper(rules, 24);
    let mut told = BTreeMap::new();
    for _ in 0..420 {
        s.step();
        for c in &s.clients {
            if let Some(n) = c.client.world()
                && let EnterReason::WorldStopped(why) = &n.reason
            {
                told.insert(c.client.client_index(), why.clone());
            }
        }
    }
    let worlds = record.match_worlds.lock().unwrap().clone();
    assert_eq!(worlds.len(), 3);
    // MAX_PANICKING_TICKS (300) ticks after its 10th, the second match stopped.
    assert_eq!(told.len(), 8, "its eight players were told: {told:?}");
    assert!(told.values().all(|w| w.contains("kept failing")), "{told:?}");
    let homes: BTreeMap<u16, usize> = s.clients.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.client.world().map_or(99, |n| n.world)).or_default() += 1;
        m
    });
    assert_eq!(homes.get(&0), Some(&8), "the failed match's players are in the lobby: {homes:?}");
    assert_eq!(homes.get(&worlds[0].number()), Some(&8), "the first match plays on");
    assert_eq!(homes.get(&worlds[2].number()), Some(&8), "the third match plays on");
    assert_eq!(s.players(), 24, "nobody was disconnected");
    assert!(s.world_faults().get(&WorldFault::PanicInTick).is_some_and(|n| *n >= 300));
}

/// A real UDP client of `server` with the rooms' schema.
async fn udp_client(server: &ServerHandle, key: &Key, id: u64) -> UdpClient {
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&p, key).expect("a token for one server");
    let c = GameClient::new(token, Arc::new(rooms::schema()), unix_now());
    UdpClient::bind(c, "127.0.0.1:0".parse().expect("an address"), unix_now).await.expect("a loopback socket")
}

fn config(key: Key) -> ServerConfig {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.world_kinds = rooms::KINDS.iter().map(|k| (*k).to_owned()).collect();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_64_players_pass_through_8_matches_twice_without_reconnecting() {
    let key = [21u8; 32];
    let record = Arc::new(Record::default());
    let server = start(config(key), Lobby::new(Rules::default(), record.clone())).await.unwrap();
    let mut clients = Vec::new();
    for i in 0..64 {
        clients.push(udp_client(&server, &key, 100 + i).await);
    }
    let schema = rooms::schema();
    let mut in_matches = std::collections::BTreeSet::new();
    let mut checked = 0u64;
    let mut next = tokio::time::Instant::now();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        next += std::time::Duration::from_millis(16);
        for (i, c) in clients.iter_mut().enumerate() {
            c.step(&[1], next).await;
            if let Some(snapshot) = c.client.latest() {
                let global = record.global.lock().unwrap().map_or(1, |g| g.number());
                rooms::check_snapshot(snapshot, &schema, global).unwrap_or_else(|e| panic!("client {i}: {e}"));
                // Its content is what the worlds made at its tick.
                rooms::check_content(snapshot, &schema, global, 3).unwrap_or_else(|e| panic!("client {i}: {e}"));
                checked += 1;
            }
            if let Some(n) = c.client.world().filter(|n| n.kind == "match") {
                in_matches.insert((i, n.world));
            }
        }
        let done = record.rounds.lock().unwrap().values().filter(|r| **r == 2).count();
        let home = clients.iter().filter(|c| c.client.world().is_some_and(|n| n.world == 0)).count();
        if done == 64 && home == 64 {
            break;
        }
    }
    let rounds = record.rounds.lock().unwrap().clone();
    assert!(rounds.len() == 64 && rounds.values().all(|r| *r == 2), "every player played twice: {rounds:?}");
    assert_eq!(record.matches.load(Ordering::Relaxed), 16, "8 matches of 8, twice");
    assert_eq!(in_matches.len(), 128, "each client was told of two matches");
    for c in &clients {
        assert_eq!(c.client.ended(), None, "nobody was disconnected");
        assert_eq!(c.client.world().map(|n| n.world), Some(0), "everyone is back in the lobby");
    }
    let totals = server.metrics().totals();
    assert_eq!(totals.connects, 64, "no reconnects: one netcode connection each");
    assert!(checked > 64 * 200, "snapshots checked: {checked}");
    let text = server.metrics().render();
    assert!(text.contains("volley_worlds{kind=\"match\"} 0"), "the matches stopped");
    assert!(text.contains("volley_world_players{kind=\"lobby\"} 64"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_panicking_match_sends_its_players_to_the_lobby_with_the_reason() {
    let key = [22u8; 32];
    let record = Arc::new(Record::default());
    let rules = Rules { panicking: [1].into(), rounds: 1, match_ticks: 100_000, ..Rules::default() };
    let server = start(config(key), Lobby::new(rules, record.clone())).await.unwrap();
    let mut clients = Vec::new();
    for i in 0..24 {
        clients.push(udp_client(&server, &key, 200 + i).await);
    }
    let mut next = tokio::time::Instant::now();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let stopped = |c: &UdpClient| c.client.world().is_some_and(|n| matches!(n.reason, EnterReason::WorldStopped(_)));
    while std::time::Instant::now() < deadline && clients.iter().filter(|c| stopped(c)).count() < 8 {
        next += std::time::Duration::from_millis(16);
        for c in clients.iter_mut() {
            c.step(&[1], next).await;
        }
    }
    let worlds = record.match_worlds.lock().unwrap().clone();
    assert_eq!(worlds.len(), 3);
    let told: Vec<&WorldNotice> = clients.iter().filter(|c| stopped(c)).filter_map(|c| c.client.world()).collect();
    assert_eq!(told.len(), 8, "the failed match's players were told");
    assert!(
        told.iter()
            .all(|n| n.world == 0 && n.reason == EnterReason::WorldStopped("the world's code kept failing".into()))
    );
    for w in [worlds[0], worlds[2]] {
        let n = clients.iter().filter(|c| c.client.world().is_some_and(|n| n.world == w.number())).count();
        assert_eq!(n, 8, "{w} plays on");
    }
    assert!(clients.iter().all(|c| c.client.ended().is_none()), "nobody was disconnected");
    assert!(server.is_running(), "the server did not fail");
    assert!(server.metrics().world_faults(WorldFault::PanicInTick) >= 300);
    server.shutdown().await;
}
