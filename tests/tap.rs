//! A game's own extension through the public extension interface ([`Tap`]): an analytics
//! tap that counts what a world did (frames, joins, leaves, messages by audience, scoreboard
//! updates), attached with [`Worlds::tap`] in the stepper and on a real server over UDP; and
//! a tap that panics, which is dropped and counted while the world goes on.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::recording::Event;
use volley::protocol::snapshot::WorldSnapshot;
use volley::server::{Tap, WorldFault};

use crate::udp;

/// Says hello to all each tick, to player 1 alone every tenth, and keeps a board.
#[derive(Default)]
struct Chatty {
    ticks: u32,
}

impl World for Chatty {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        out.reliable(Audience::All, &b"hello"[..]);
        if self.ticks.is_multiple_of(10) {
            out.reliable(Audience::Player(1), &b"psst"[..]);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    fn scoreboard_columns(&self) -> Vec<String> {
        vec!["ticks".into()]
    }
}

/// What the analytics tap counted.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    frames: u32,
    joins: u32,
    leaves: u32,
    to_all: u32,
    to_one: u32,
    boards: u32,
}

struct Analytics(Arc<Mutex<Counts>>);

impl Tap for Analytics {
    fn frame(&mut self, _: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        let mut c = self.0.lock().unwrap();
        c.frames += u32::from(snapshot.is_some());
        for e in events {
            match e {
                Event::Joined { .. } => c.joins += 1,
                Event::Left { .. } => c.leaves += 1,
                Event::Message { to: Audience::All, .. } => c.to_all += 1,
                Event::Message { .. } => c.to_one += 1,
                Event::Board(_) => c.boards += 1,
                _ => {}
            }
        }
        true
    }
}

/// Panics at its third frame.
struct Faulty(Arc<AtomicU32>);

impl Tap for Faulty {
    fn frame(&mut self, _: u32, _: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
        assert!(self.0.fetch_add(1, Ordering::Relaxed) < 2, "an extension's bug");
        true
    }
}

#[test]
fn in_the_stepper_a_games_tap_sees_what_the_world_did_and_a_panicking_one_is_dropped() {
    let mut s = Stepper::new(Chatty::default(), 60, 8);
    let counts = Arc::new(Mutex::new(Counts::default()));
    let faulty = Arc::new(AtomicU32::new(0));
    s.worlds().tap(WorldId::ENTRY, Box::new(Analytics(counts.clone()))).unwrap();
    s.worlds().tap(WorldId::ENTRY, Box::new(Faulty(faulty.clone()))).unwrap();
    s.add_client(LinkProfile::PERFECT);
    s.add_client(LinkProfile::PERFECT);
    for _ in 0..60 {
        s.step();
    }
    s.disconnect(1);
    for _ in 0..30 {
        s.step();
    }
    let c = counts.lock().unwrap().clone();
    assert_eq!((c.joins, c.leaves), (2, 1), "{c:?}");
    assert!(c.frames >= 89, "a frame a tick: {c:?}");
    assert_eq!(c.to_all, c.frames, "one message to all a tick: {c:?}");
    assert!((c.frames / 10..=c.frames / 10 + 1).contains(&c.to_one), "one to player 1 every tenth tick: {c:?}");
    assert!(c.boards >= 2, "the board every half second: {c:?}");
    // The faulty tap ran three times, panicked, was dropped; the world went on.
    assert_eq!(faulty.load(Ordering::Relaxed), 3);
    assert_eq!(s.world_faults().get(&WorldFault::PanicInTap), Some(&1));
    assert!(s.clients.iter().take(1).all(|c| c.client.is_ready()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_server_a_games_tap_sees_what_the_world_did_and_a_panicking_one_is_dropped() {
    let key = [5u8; 32];
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Chatty::default()).await.unwrap();
    let counts = Arc::new(Mutex::new(Counts::default()));
    let faulty = Arc::new(AtomicU32::new(0));
    server.worlds().tap(WorldId::ENTRY, Box::new(Analytics(counts.clone()))).unwrap();
    server.worlds().tap(WorldId::ENTRY, Box::new(Faulty(faulty.clone()))).unwrap();
    let mut clients = vec![udp::client(&server, &key, 1, "").await, udp::client(&server, &key, 2, "").await];
    let mut next = tokio::time::Instant::now();
    udp::run(&mut clients, &mut next, 60).await;
    clients.pop();
    udp::run(&mut clients, &mut next, 90).await;
    let c = counts.lock().unwrap().clone();
    // The second client's leave: by its timeout (5 s) or not yet; joins are certain.
    assert_eq!(c.joins, 2, "{c:?}");
    assert!(c.frames >= 100, "a frame a tick: {c:?}");
    assert_eq!(c.to_all, c.frames, "one message to all a tick: {c:?}");
    assert!(c.boards >= 2, "the board every half second: {c:?}");
    assert_eq!(faulty.load(Ordering::Relaxed), 3);
    assert_eq!(server.metrics().world_faults(WorldFault::PanicInTap), 1);
    assert!(clients[0].client.is_ready(), "the world went on");
    server.shutdown().await;
}
