//! Bad game code never takes the server down: a repeated entity id, a relevancy list out of
//! order, and a panic in the game's tick, input or snapshot are each counted and skipped,
//! and the tick goes on — in the stepper and over real UDP alike (they run the same step).
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use glam::Vec2;
use volley::client::GameClient;
use volley::client::udp::UdpClient;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::quant::Vec2Q;
use volley::protocol::snapshot::{Interest, Schema, SnapshotBuilder, WorldSnapshot};
use volley::server::{PlayerId, Relevancy, ServerConfig, World, WorldFault, unix_now};
use volley::testing::Stepper;
use volley::transport::conditioner::LinkProfile;

volley::replicated! {
    /// A dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-100.0), Vec2::splat(100.0), 0.01),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

/// Which mistake the game makes now.
const NONE: u8 = 0;
const DUPLICATE: u8 = 1;
const RELEVANCY: u8 = 2;
const PANIC_TICK: u8 = 3;
const PANIC_INPUT: u8 = 4;
const PANIC_SNAPSHOT: u8 = 5;

/// One dot per player and ten still ones; makes the mistake `fault` says.
struct Buggy {
    fault: Arc<AtomicU8>,
    players: BTreeMap<PlayerId, Vec2>,
    ticks: u32,
}

struct Backwards(Arc<AtomicU8>);

impl Relevancy for Backwards {
    fn interest(&self, world: &WorldSnapshot, _: PlayerId, out: &mut Vec<Interest>) {
        if self.0.load(Ordering::Relaxed) == RELEVANCY {
            // Descending, one repeated, one past the end: every mistake at once.
            out.extend((0..world.len() as u32).rev().map(|index| Interest::new(index, 1.0)));
            out.push(Interest::new(0, 1.0));
            out.push(Interest::new(world.len() as u32 + 7, 1.0));
        } else {
            Interest::everything(world, out);
        }
    }
}

impl World for Buggy {
    fn schema(&self) -> Schema {
        schema()
    }
    fn join(&mut self, p: PlayerId) {
        self.players.insert(p, Vec2::ZERO);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.remove(&p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {
        assert!(self.fault.load(Ordering::Relaxed) != PANIC_INPUT, "injected fault in input");
    }
    fn tick(&mut self, _: u32, _: Duration) {
        assert!(self.fault.load(Ordering::Relaxed) != PANIC_TICK, "injected fault in tick");
        self.ticks += 1;
        for p in self.players.values_mut() {
            p.x = (p.x + 0.1) % 50.0;
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let fault = self.fault.load(Ordering::Relaxed);
        assert!(fault != PANIC_SNAPSHOT, "injected fault in snapshot");
        for (p, at) in &self.players {
            out.insert(*p, &Dot { position: *at }).unwrap();
        }
        for i in 0..10 {
            out.insert(1000 + i, &Dot { position: Vec2::splat(i as f32) }).unwrap();
        }
        if fault == DUPLICATE {
            // A second entity with a player's id: the builder takes it, the tick must not fail.
            out.insert(0, &Dot { position: Vec2::splat(-9.0) }).unwrap();
        }
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(Backwards(self.fault.clone()))
    }
}

fn buggy() -> (Buggy, Arc<AtomicU8>) {
    let fault = Arc::new(AtomicU8::new(NONE));
    (Buggy { fault: fault.clone(), players: BTreeMap::new(), ticks: 0 }, fault)
}

/// What every client must still see after a mistake: the 10 still dots and one per player,
/// each player's own dot where the server has it (never the duplicate's -9).
fn check_sees_the_world(world: &WorldSnapshot, players: usize, who: &str) {
    let s = schema();
    assert_eq!(world.len(), 10 + players, "{who}: every entity once");
    let mine = world.read::<Dot>(&s, 0).expect("player 0's dot");
    assert!(mine.position.x >= 0.0, "{who}: the first entity with an id is kept, not the repeat");
}

const FAULTS: [(u8, WorldFault); 5] = [
    (DUPLICATE, WorldFault::DuplicateEntity),
    (RELEVANCY, WorldFault::RelevancyOrder),
    (PANIC_TICK, WorldFault::PanicInTick),
    (PANIC_INPUT, WorldFault::PanicInInput),
    (PANIC_SNAPSHOT, WorldFault::PanicInSnapshot),
];

#[test]
fn the_stepper_survives_each_mistake_counts_it_and_goes_on() {
    let (world, fault) = buggy();
    let mut stepper = Stepper::new(world, 60, 4);
    for _ in 0..2 {
        let c = stepper.add_client(LinkProfile::PERFECT);
        stepper.clients[c].input = Some(vec![1]);
    }
    stepper.run(60);
    for (mistake, kind) in FAULTS {
        fault.store(mistake, Ordering::Relaxed);
        stepper.run(30);
        fault.store(NONE, Ordering::Relaxed);
        let before: Vec<u64> = stepper.clients.iter().map(|c| c.client.stats().snapshots).collect();
        stepper.run(30);
        let faults = stepper.world_faults();
        assert!(faults.get(&kind).copied().unwrap_or(0) > 0, "{kind:?} counted: {faults:?}");
        for (i, c) in stepper.clients.iter().enumerate() {
            assert!(c.client.stats().snapshots >= before[i] + 25, "{kind:?}: client {i} still gets snapshots");
            assert_eq!(c.client.stats().snapshot_errors, 0, "{kind:?}: client {i} decodes every snapshot");
            check_sees_the_world(c.client.latest().unwrap(), 2, &format!("{kind:?}, client {i}"));
        }
    }
    assert!(stepper.world.ticks > 200, "the world kept ticking");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_survives_each_mistake_counts_it_and_goes_on_over_udp() {
    let key = [3u8; 32];
    let (world, fault) = buggy();
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world).await.unwrap();
    let mut clients = Vec::new();
    for id in 1..=2u64 {
        let p = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
        let c = GameClient::new(ConnectToken::generate(&p, &key).unwrap(), Arc::new(schema()), unix_now());
        clients.push(UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap());
    }
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 60).await;
    assert!(clients.iter().all(|c| c.client.is_ready()), "connected");
    let m = server.metrics().clone();
    for (mistake, kind) in FAULTS {
        fault.store(mistake, Ordering::Relaxed);
        run(&mut clients, &mut next, 30).await;
        fault.store(NONE, Ordering::Relaxed);
        let before: Vec<u64> = clients.iter().map(|c| c.client.stats().snapshots).collect();
        run(&mut clients, &mut next, 40).await;
        assert!(m.world_faults(kind) > 0, "{kind:?} counted in volley_world_errors_total");
        assert!(server.is_running(), "{kind:?}: the server still runs");
        for (i, c) in clients.iter().enumerate() {
            assert!(c.client.stats().snapshots >= before[i] + 20, "{kind:?}: client {i} still gets snapshots");
            assert_eq!(c.client.stats().snapshot_errors, 0, "{kind:?}: client {i} decodes every snapshot");
            check_sees_the_world(c.client.latest().unwrap(), 2, &format!("{kind:?}, client {i}"));
        }
    }
    let exposition = m.render();
    assert!(exposition.contains("volley_world_errors_total{kind=\"panic_in_tick\"}"), "exported");
    server.shutdown().await;
}

/// Steps every client `frames` frames of 16 ms, sending input 1.
async fn run(clients: &mut [UdpClient], next: &mut tokio::time::Instant, frames: usize) {
    for _ in 0..frames {
        *next += Duration::from_millis(16);
        for c in clients.iter_mut() {
            c.step(&[1], *next).await;
        }
    }
}
