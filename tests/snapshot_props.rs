//! The merged delta snapshot under random worlds, changes, loss, reordering and acks.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use glam::{Quat, Vec3};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};
use volley::protocol::quant::{Bits, Flag, QuatQ, Vec3Q, VelocityQ};

use volley::protocol::snapshot::{
    Interest, Predictor, Schema, SenderConfig, SnapshotBuilder, SnapshotError, SnapshotReceiver, SnapshotSender,
    WorldSnapshot,
};

volley::replicated! {
    #[derive(Debug, Clone, PartialEq)]
    pub struct Ball {
        pub position: Vec3 = Vec3Q::bounded(Vec3::splat(-64.0), Vec3::splat(64.0), 1.0 / 256.0),
        pub velocity: Vec3 = VelocityQ::new(16.0, 1.0 / 64.0),
        pub rotation: Quat = QuatQ::new(9),
    }
}

volley::replicated! {
    #[derive(Debug, Clone, PartialEq)]
    pub struct Score {
        pub points: u32 = Bits(16),
        pub alive: bool = Flag,
    }
}

#[derive(Debug, Clone)]
enum Thing {
    Ball(Ball),
    Score(Score),
}

fn schema() -> Arc<Schema> {
    let mut s = Schema::new();
    s.register::<Ball>().unwrap();
    s.register::<Score>().unwrap();
    Arc::new(s)
}

#[derive(Debug, Clone)]
enum Change {
    Create(u32, bool),
    Destroy(u32),
    Move(u32, f32, f32, f32),
    Rest(u32),
    Spin(u32, f32),
    Score(u32, u32),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0u32..150, any::<bool>()).prop_map(|(id, b)| Change::Create(id, b)),
        (0u32..150).prop_map(Change::Destroy),
        (0u32..150, -3.0f32..3.0, -3.0f32..3.0, -1.0f32..1.0).prop_map(|(id, x, y, z)| Change::Move(id, x, y, z)),
        (0u32..150).prop_map(Change::Rest),
        (0u32..150, -3.0f32..3.0).prop_map(|(id, a)| Change::Spin(id, a)),
        (0u32..150, any::<u32>()).prop_map(|(id, p)| Change::Score(id, p)),
    ]
}

fn apply(world: &mut BTreeMap<u32, Thing>, c: &Change) {
    match *c {
        Change::Create(id, ball) => {
            let t = if ball {
                Thing::Ball(Ball {
                    position: Vec3::new(id as f32 * 0.3, 0.0, 1.0),
                    velocity: Vec3::ZERO,
                    rotation: Quat::IDENTITY,
                })
            } else {
                Thing::Score(Score { points: id, alive: true })
            };
            world.entry(id).or_insert(t);
        }
        Change::Destroy(id) => {
            world.remove(&id);
        }
        Change::Move(id, x, y, z) => {
            if let Some(Thing::Ball(b)) = world.get_mut(&id) {
                b.velocity = Vec3::new(x, y, z);
                b.position = (b.position + b.velocity / 60.0).clamp(Vec3::splat(-64.0), Vec3::splat(64.0));
            }
        }
        Change::Rest(id) => {
            if let Some(Thing::Ball(b)) = world.get_mut(&id) {
                b.velocity = Vec3::ZERO;
            }
        }
        Change::Spin(id, a) => {
            if let Some(Thing::Ball(b)) = world.get_mut(&id) {
                b.rotation = (b.rotation * Quat::from_rotation_z(a)).normalize();
            }
        }
        Change::Score(id, p) => {
            if let Some(Thing::Score(s)) = world.get_mut(&id) {
                s.points = p % 60_000;
                s.alive = p % 3 != 0;
            }
        }
    }
}

fn snapshot(
    schema: &Schema,
    tick: u32,
    world: &BTreeMap<u32, Thing>,
    prev: Option<&WorldSnapshot>,
) -> Arc<WorldSnapshot> {
    let mut b = SnapshotBuilder::new(schema, tick);
    for (id, t) in world {
        match t {
            Thing::Ball(x) => b.insert(*id, x).unwrap(),
            Thing::Score(x) => b.insert(*id, x).unwrap(),
        }
    }
    Arc::new(b.finish_after(prev).unwrap())
}

/// Entities whose id is not a multiple of `hide` are visible (a changing relevancy filter);
/// those with ids 2 and 3 modulo 4 have their changes sent in one snapshot of 2 and 3.
fn interest(world: &WorldSnapshot, hide: u32, out: &mut Vec<Interest>) {
    out.clear();
    for (i, id) in world.ids().iter().enumerate() {
        if hide == 0 || id % hide != 0 {
            out.push(Interest::new(i as u32, 1.0 + (id % 7) as f32).every((id % 4) as u16));
        }
    }
}

/// A game's predictor for the tests: balls carry on at their replicated velocity (a rule the
/// built-in extrapolation does not know); some entities are left out, and some are given the
/// wrong kind, which must fall back to the built-in extrapolation on both sides.
struct BallRules {
    schema: Arc<Schema>,
    calls: AtomicU32,
}

impl Predictor for BallRules {
    fn predict(
        &self,
        baseline: &WorldSnapshot,
        _older: &WorldSnapshot,
        ahead: u32,
        _behind: u32,
    ) -> Option<WorldSnapshot> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut b = SnapshotBuilder::new(&self.schema, baseline.tick() + ahead);
        for e in baseline.iter() {
            if e.id % 5 == 0 {
                continue;
            }
            if e.id % 7 == 0 {
                b.insert(e.id, &Score { points: 1, alive: true }).unwrap();
            } else if let Some(mut ball) = baseline.read::<Ball>(&self.schema, e.id) {
                ball.position =
                    (ball.position + ball.velocity * ahead as f32 / 60.0).clamp(Vec3::splat(-64.0), Vec3::splat(64.0));
                b.insert(e.id, &ball).unwrap();
            }
        }
        b.finish().ok()
    }
}

struct Run {
    /// The most ticks any visible entity went without the client holding its current state,
    /// during the changing period.
    max_staleness: u32,
    decoded: usize,
    deferred: u32,
    full: usize,
}

/// Drives one client for `ticks` changes, then `quiet` ticks with no changes and no loss.
fn run(
    changes: &[Vec<Change>],
    loss: &[bool],
    delays: &[u8],
    budget: usize,
    hide: &[u32],
    quiet: u32,
    predict: bool,
) -> Result<Run, TestCaseError> {
    run_with(changes, loss, delays, budget, hide, quiet, predict, None)
}

/// [`run`], the sender and the receiver predicting with `rules` if given.
#[allow(clippy::too_many_arguments)]
fn run_with(
    changes: &[Vec<Change>],
    loss: &[bool],
    delays: &[u8],
    budget: usize,
    hide: &[u32],
    quiet: u32,
    predict: bool,
    rules: Option<Arc<BallRules>>,
) -> Result<Run, TestCaseError> {
    let schema = schema();
    let mut sender =
        SnapshotSender::new(schema.clone(), SenderConfig { history: 32, predict, ..SenderConfig::default() });
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    if let Some(rules) = rules {
        sender.set_predictor(rules.clone());
        receiver.set_predictor(rules);
    }
    // Another player on a perfect link encodes each snapshot first: where the two players'
    // baselines hold an entity in the same snapshot, this client gets the delta bits the
    // other one cached in the world snapshot.
    let mut neighbour = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut neighbour_buf = vec![0u8; 1200];
    let mut world = BTreeMap::new();
    let mut in_flight: Vec<(u32, Vec<u8>)> = Vec::new(); // (deliver at tick, bytes)
    let mut acks: Vec<(u32, u32)> = Vec::new(); // (deliver at tick, acked tick)
    let mut buf = vec![0u8; budget];
    let mut vis = Vec::new();
    let mut result = Run { max_staleness: 0, decoded: 0, deferred: 0, full: 0 };
    let mut worlds: BTreeMap<u32, Arc<WorldSnapshot>> = BTreeMap::new();
    let mut stale_since: BTreeMap<u32, u32> = BTreeMap::new();
    let total = changes.len() as u32 + quiet;
    let mut last_world = None;
    let mut last_interest = Vec::new();
    for tick in 1..=total {
        let i = (tick - 1) as usize;
        let noisy = tick <= changes.len() as u32;
        if let Some(cs) = changes.get(i) {
            for c in cs {
                apply(&mut world, c);
            }
        }
        // Odd runs build each tick's snapshot against the previous one (unchanged entities
        // are then known without comparing words); even runs do not.
        let prev = if changes.len() % 2 == 1 { last_world.as_deref() } else { None };
        let snap = snapshot(&schema, tick, &world, prev);
        let h = if noisy { hide[i % hide.len()] } else { hide[0] };
        interest(&snap, h, &mut vis);
        // Acks that arrive now.
        for (_, t) in acks.iter().filter(|(at, _)| *at <= tick) {
            sender.ack(*t);
        }
        acks.retain(|(at, _)| *at > tick);
        worlds.insert(tick, snap.clone());
        neighbour.encode(&snap, &vis, &mut neighbour_buf).unwrap();
        neighbour.ack(tick);
        let stats = sender.encode(&snap, &vis, &mut buf).unwrap();
        result.deferred += stats.deferred;
        result.full += usize::from(stats.baseline.is_none());
        let lost = noisy && loss[i % loss.len()];
        let delay = if noisy { u32::from(delays[i % delays.len()]) } else { 0 };
        if !lost {
            in_flight.push((tick + delay, buf[..stats.bytes].to_vec()));
        }
        // Deliver, in arrival order (reordered by delay).
        in_flight.sort_by_key(|(at, _)| *at);
        let arrived: Vec<_> = in_flight.iter().filter(|(at, _)| *at <= tick).cloned().collect();
        in_flight.retain(|(at, _)| *at > tick);
        for (_, bytes) in arrived {
            match receiver.decode(&bytes) {
                Ok(t) => {
                    result.decoded += 1;
                    // The client's reconstruction equals the server's model of it, exactly.
                    let client = receiver.get(t).unwrap();
                    let model = sender.client_view(t);
                    if let Some(model) = model {
                        prop_assert_eq!(client, &model, "tick {}", t);
                    }
                    if let Some(w) = worlds.get(&t).filter(|_| noisy) {
                        for e in w.iter() {
                            let fresh = client.find(e.id).and_then(|i| client.get(i)) == Some(e);
                            let since = *stale_since.entry(e.id).or_insert(t);
                            if fresh {
                                stale_since.insert(e.id, t);
                            } else {
                                result.max_staleness = result.max_staleness.max(t.saturating_sub(since));
                            }
                        }
                    }
                }
                Err(SnapshotError::BaselineMissing) => {
                    return Err(TestCaseError::fail("baseline missing: the client dropped one the server still uses"));
                }
                Err(e) => return Err(TestCaseError::fail(format!("decode error {e}"))),
            }
        }
        if let Some(t) = receiver.newest_tick() {
            let ack_lost = noisy && loss[(i + 1) % loss.len()];
            if !ack_lost {
                acks.push((tick + delay, t));
            }
        }
        last_world = Some(snap);
        last_interest = vis.clone();
    }
    // After the quiet period the client holds exactly the visible world: every deletion and
    // every deferred change arrived.
    let world = last_world.unwrap();
    let latest = receiver.latest().unwrap();
    let want: Vec<_> = last_interest.iter().map(|x| world.get(x.index as usize).unwrap()).collect();
    let got: Vec<_> = latest.iter().collect();
    prop_assert_eq!(got, want);
    Ok(result)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn client_matches_server_under_loss_reordering_and_tight_budgets(
        changes in proptest::collection::vec(proptest::collection::vec(change(), 0..30), 20..90),
        loss in proptest::collection::vec(proptest::bool::weighted(0.25), 1..16),
        delays in proptest::collection::vec(0u8..4, 1..16),
        budget in prop_oneof![Just(1200usize), 60usize..400],
        hide in proptest::collection::vec(0u32..5, 1..8),
        predict in 0u8..3,
    ) {
        let rules = (predict == 2).then(|| Arc::new(BallRules { schema: schema(), calls: AtomicU32::new(0) }));
        run_with(&changes, &loss, &delays, budget, &hide, 200, predict > 0, rules)?;
    }
}

#[test]
fn a_games_predictor_runs_on_both_sides_and_a_receiver_without_it_refuses_clearly() {
    // Balls moving at changing velocities, acks three ticks late: predicted packets with a
    // second reference, so the game's predictor is asked on both sides (the counts match:
    // one call each per such packet) and the client stays exact (checked inside `run_with`).
    let mut changes = vec![(0..40).map(|id| Change::Create(id, id % 4 != 0)).collect::<Vec<_>>()];
    for t in 0..60 {
        changes.push((0..40).map(|id| Change::Move(id, (t % 7) as f32 - 3.0, 1.5, (id % 3) as f32 * 0.3)).collect());
    }
    let rules = Arc::new(BallRules { schema: schema(), calls: AtomicU32::new(0) });
    let r = run_with(&changes, &[false], &[3], 1200, &[0], 20, true, Some(rules.clone())).unwrap();
    let calls = rules.calls.load(Ordering::Relaxed);
    assert!(calls >= 2 * 50, "{calls} predictor calls for {} decoded packets", r.decoded);
    assert_eq!(calls % 2, 0, "sender and receiver call it equally often");

    // The same packets to a receiver that lacks the predictor: a clear error, not garbage.
    let schema = schema();
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    sender.set_predictor(Arc::new(BallRules { schema: schema.clone(), calls: AtomicU32::new(0) }));
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let (mut world, mut buf, mut vis) = (BTreeMap::new(), vec![0u8; 1200], Vec::new());
    let mut refused = 0;
    for (i, cs) in changes.iter().enumerate().take(20) {
        let tick = i as u32 + 1;
        for c in cs {
            apply(&mut world, c);
        }
        let snap = snapshot(&schema, tick, &world, None);
        Interest::everything(&snap, &mut vis);
        let stats = sender.encode(&snap, &vis, &mut buf).unwrap();
        match receiver.decode(&buf[..stats.bytes]) {
            Ok(t) => sender.ack(t),
            Err(e) => {
                assert_eq!(e, SnapshotError::PredictorMissing);
                refused += 1;
            }
        }
    }
    assert!(refused > 10, "{refused} packets refused");
}

#[test]
fn a_tight_budget_defers_but_never_starves() {
    // 120 balls all moving every tick, 80 bytes a packet: most changes wait, yet every ball
    // keeps being sent (the priority accumulator), and the client converges when they stop.
    let mut changes = vec![(0..120).map(|id| Change::Create(id, true)).collect::<Vec<_>>()];
    for t in 0..150 {
        changes.push((0..120).map(|id| Change::Move(id, (t % 5) as f32 - 2.0, 1.0, 0.5)).collect());
    }
    for predict in [false, true] {
        let r = run(&changes, &[false], &[0], 80, &[0], 400, predict).unwrap();
        assert!(r.deferred > 1000, "the budget binds: {} deferred", r.deferred);
        assert!(r.max_staleness <= 80, "an entity waited {} ticks", r.max_staleness);
        eprintln!("tight budget: max staleness {} ticks, {} deferred (predict {predict})", r.max_staleness, r.deferred);
    }
}

#[test]
fn an_entity_sent_one_snapshot_in_three_changes_at_the_client_only_on_its_turns() {
    // Ball 1 moves every tick and is sent one snapshot in three; ball 4 every snapshot. Acks
    // come at once; the client's view equals the server's model (checked as in `run_with`).
    let schema = schema();
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut buf = vec![0u8; 1200];
    let (mut changed_at, mut skipped) = (Vec::new(), 0);
    let mut last = None;
    for tick in 1..=12u32 {
        let ball = |x: f32| Ball { position: Vec3::new(x, 0.0, 1.0), velocity: Vec3::ZERO, rotation: Quat::IDENTITY };
        let mut b = SnapshotBuilder::new(&schema, tick);
        b.insert(1, &ball(tick as f32)).unwrap();
        b.insert(4, &ball(-(tick as f32))).unwrap();
        let snap = Arc::new(b.finish().unwrap());
        let vis = [Interest::new(0, 1.0).every(3), Interest::new(1, 1.0)];
        let stats = sender.encode(&snap, &vis, &mut buf).unwrap();
        skipped += stats.skipped;
        let t = receiver.decode(&buf[..stats.bytes]).unwrap();
        sender.ack(t);
        let got = receiver.get(t).unwrap();
        assert_same(got, &sender.client_view(t).unwrap());
        let x = got.read::<Ball>(&schema, 1).unwrap().position.x;
        if last != Some(x) {
            changed_at.push(tick);
        }
        last = Some(x);
        assert_eq!(got.read::<Ball>(&schema, 4), snap.read::<Ball>(&schema, 4), "ball 4 every tick");
    }
    // New at tick 1, then at the ticks where tick + id is a multiple of 3.
    assert_eq!(changed_at, [1, 2, 5, 8, 11]);
    assert_eq!(skipped, 7);
}

#[test]
fn full_snapshot_when_no_ack_arrives_and_deltas_once_it_does() {
    let changes: Vec<Vec<Change>> = (0..10)
        .map(|t| (0..10).map(|id| if t == 0 { Change::Create(id, true) } else { Change::Spin(id, 0.1) }).collect())
        .collect();
    let r = run(&changes, &[false], &[0], 1200, &[0], 5, false).unwrap();
    assert_eq!(r.decoded, 15);
    assert!(r.full >= 1 && r.full <= 2, "full snapshots: {}", r.full);
}

#[test]
fn an_ack_older_than_the_clients_ring_means_a_full_snapshot_not_an_error() {
    // A client that decodes everything but whose acks arrive 70 ticks late (a stalled
    // player actor on the server skips ticks): deltas against a baseline older than 63 ticks
    // could name one the client's 64-tick ring has overwritten; the sender sends full instead.
    let changes: Vec<Vec<Change>> = (0..200)
        .map(|t| (0..10).map(|id| if t == 0 { Change::Create(id, true) } else { Change::Spin(id, 0.1) }).collect())
        .collect();
    let schema = schema();
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut world = BTreeMap::new();
    let mut prev: Option<Arc<WorldSnapshot>> = None;
    let mut buf = vec![0u8; 1200];
    let mut vis = Vec::new();
    let mut full = 0;
    for (i, tick_changes) in changes.iter().enumerate() {
        let tick = i as u32 + 1;
        for c in tick_changes {
            apply(&mut world, c);
        }
        let snap = snapshot(&schema, tick, &world, prev.as_deref());
        // Only every third tick is sent, as for a player actor that keeps falling behind.
        if tick.is_multiple_of(3) {
            if tick > 70 {
                sender.ack(tick - 70);
            }
            Interest::everything(&snap, &mut vis);
            let stats = sender.encode(&snap, &vis, &mut buf).unwrap();
            if let Some(b) = stats.baseline {
                assert!(tick - b <= 63, "baseline {b} for tick {tick}");
            } else {
                full += 1;
            }
            receiver.decode(&buf[..stats.bytes]).expect("always decodable");
            assert_eq!(receiver.latest().unwrap(), &*snap);
        }
        prev = Some(snap);
    }
    assert!(full > 20, "{full} full snapshots");
}

#[test]
fn a_predicted_packet_that_destroys_thousands_at_once_decodes() {
    // Range-coded records can cost well under a bit each (a destruction is three skewed
    // decisions): the receiver's sanity bound on the record count must allow for that.
    let schema = schema();
    let config = SenderConfig { history: 32, predict: true, max_baseline_age: 63 };
    let mut sender = SnapshotSender::new(schema.clone(), config);
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut world = BTreeMap::new();
    for id in 0..20_000 {
        world.insert(id, Thing::Score(Score { points: id % 100, alive: true }));
    }
    let mut buf = vec![0u8; 256 * 1024];
    let mut vis = Vec::new();
    for tick in 1..=4u32 {
        if tick == 4 {
            world.retain(|id, _| *id < 10);
        }
        let snap = snapshot(&schema, tick, &world, None);
        interest(&snap, 0, &mut vis);
        let stats = sender.encode(&snap, &vis, &mut buf).unwrap();
        receiver.decode(&buf[..stats.bytes]).unwrap();
        assert_same(receiver.latest().unwrap(), &snap);
        sender.ack(tick);
        if tick == 4 {
            assert_eq!(stats.destroyed, 19_990);
            assert!(stats.bytes < 2_000, "{} bytes for the destructions", stats.bytes);
        }
    }
}

fn assert_same(a: &WorldSnapshot, b: &WorldSnapshot) {
    assert_eq!(a, b, "client == server");
}
