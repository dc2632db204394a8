//! A game's own extension through the public extension interface ([`Tap`]): an analytics
//! tap that counts what a world did (frames, joins, leaves, messages by audience, scoreboard
//! updates), attached with [`Worlds::tap`] in the stepper and on a real server over UDP; a
//! tap that panics, which is dropped and counted while the world goes on; and an anti-cheat
//! tap that judges each frame and kicks a cheat through [`volley::server::Players`], in both
//! shells.
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

volley::replicated! {
    /// A runner's place.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Place {
        /// Where it is.
        pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-100_000.0), glam::Vec2::splat(100_000.0), 0.01),
    }
}

/// What the runners' world saw: steps longer than the game allows that it applied, and who
/// left.
#[derive(Debug, Default)]
struct Seen {
    long_steps: u32,
    left: Vec<PlayerId>,
}

/// Each input moves its player's runner right by the step it holds (an `f32`): the world
/// trusts its clients, and an anti-cheat tap is what keeps them honest.
struct Runners {
    at: std::collections::BTreeMap<PlayerId, f32>,
    seen: Arc<Mutex<Seen>>,
}

/// Most a runner may move in a tick.
const MAX_STEP: f32 = 1.0;

impl World for Runners {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Place>().unwrap();
        s
    }
    fn join(&mut self, player: PlayerId) {
        self.at.insert(player, 0.0);
    }
    fn leave(&mut self, player: PlayerId) {
        self.at.remove(&player);
        self.seen.lock().unwrap().left.push(player);
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        let Ok(step) = <[u8; 4]>::try_from(input).map(f32::from_le_bytes) else { return };
        if step > MAX_STEP {
            self.seen.lock().unwrap().long_steps += 1;
        }
        if let Some(x) = self.at.get_mut(&player) {
            *x += step;
        }
    }
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (p, x) in &self.at {
            out.insert(*p, &Place { position: glam::Vec2::new(*x, 0.0) }).unwrap();
        }
    }
}

/// An anti-cheat extension written against the public interface alone: it compares each
/// runner's place in a frame with the frame before, and kicks (before the next tick's
/// inputs) whoever moved further than the game allows, telling everyone.
struct AntiCheat {
    schema: Schema,
    last: std::collections::BTreeMap<PlayerId, f32>,
    flagged: Vec<PlayerId>,
}

impl Tap for AntiCheat {
    fn frame(&mut self, _: u32, snapshot: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
        let Some(snapshot) = snapshot else { return true };
        let mut now = std::collections::BTreeMap::new();
        for &id in snapshot.ids() {
            let Some(place) = snapshot.read::<Place>(&self.schema, id) else { continue };
            let x = place.position.x;
            if self.last.get(&id).is_some_and(|before| x - before > MAX_STEP + 0.05) {
                self.flagged.push(id);
            }
            now.insert(id, x);
        }
        self.last = now;
        true
    }
    fn before_inputs(&mut self, players: &mut volley::server::Players<'_>) {
        for p in self.flagged.drain(..) {
            if players.kick(p, "moved faster than the game allows") {
                players.send(Audience::All, format!("runner {p} was removed").into_bytes(), true);
            }
        }
    }
}

fn runners() -> (Runners, AntiCheat, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let world = Runners { at: Default::default(), seen: seen.clone() };
    let tap = AntiCheat { schema: world.schema(), last: Default::default(), flagged: Vec::new() };
    (world, tap, seen)
}

/// Client 0 runs at a twentieth of the most a tick; client 1 too, then at five times the
/// most from its 60th frame on. The honest step is small because a real network delivers
/// inputs in bunches and the server applies a bunch in one tick: at half the most, three
/// inputs late together under a loaded machine made the honest runner look like a cheat
/// (CI saw it kicked); it takes twenty-two at once now.
fn runner_step(client: usize, frame: u32) -> Vec<u8> {
    let step: f32 = if client == 1 && frame >= 60 { 5.0 } else { 0.05 };
    step.to_le_bytes().to_vec()
}

/// What the anti-cheat tap did, in either shell: the cheat is kicked with the tap's reason
/// and leaves the world after at most `most_long` of its long steps were applied; the honest
/// client plays on and hears that the cheat was removed.
fn check_kicked(seen: &Seen, cheat: &GameClient, honest: &mut GameClient, most_long: u32) {
    assert_eq!(cheat.ended(), Some(SessionEnd::Kicked("moved faster than the game allows".into())));
    assert_eq!(seen.left.len(), 1, "the cheat left the world: {seen:?}");
    assert!((1..=most_long).contains(&seen.long_steps), "long steps applied before the kick: {seen:?}");
    assert!(honest.is_ready() && honest.ended().is_none(), "the honest client plays on");
    let heard: Vec<Vec<u8>> = std::iter::from_fn(|| honest.channel().recv_reliable()).map(|b| b.to_vec()).collect();
    assert_eq!(heard, [format!("runner {} was removed", seen.left[0]).into_bytes()]);
}

#[test]
fn in_the_stepper_an_anti_cheat_tap_kicks_a_cheat_and_tells_everyone() {
    let (world, tap, seen) = runners();
    let mut s = Stepper::new(world, 60, 4);
    s.worlds().tap(WorldId::ENTRY, Box::new(tap)).unwrap();
    s.add_client(LinkProfile::PERFECT);
    s.add_client(LinkProfile::PERFECT);
    for frame in 0..120 {
        s.step_with(|i, _, _| runner_step(i, frame));
    }
    let seen = seen.lock().unwrap();
    let (a, b) = s.clients.split_at_mut(1);
    // One tick's frame shows the long step; the kick comes before the next tick's inputs.
    check_kicked(&seen, &b[0].client, &mut a[0].client, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_server_an_anti_cheat_tap_kicks_a_cheat_and_tells_everyone() {
    let key = [6u8; 32];
    let (world, tap, seen) = runners();
    let schema = Arc::new(world.schema());
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world).await.unwrap();
    server.worlds().tap(WorldId::ENTRY, Box::new(tap)).unwrap();
    let mut clients = Vec::new();
    for id in [1, 2] {
        let params = TokenParams::new(DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
        let token = ConnectToken::generate(&params, &key).unwrap();
        let c = GameClient::new(token, schema.clone(), unix_now());
        clients.push(UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap());
    }
    let mut next = tokio::time::Instant::now();
    for frame in 0..180 {
        next += Duration::from_millis(16);
        for (i, c) in clients.iter_mut().enumerate() {
            c.step(&runner_step(i, frame), next).await;
        }
    }
    {
        let seen = seen.lock().unwrap();
        let (a, b) = clients.split_at_mut(1);
        // Inputs that arrive together are applied in one tick: a few long steps at most.
        check_kicked(&seen, &b[0].client, &mut a[0].client, 4);
    }
    server.shutdown().await;
}
