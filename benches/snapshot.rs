//! Snapshot encode and decode cost: 64 visible cubes, 25 % and 100 % moving, baseline one
//! tick back (acknowledged), as the server does it per player per snapshot; and 1000 players
//! seeing 64 of 1600 moving cubes each, sharing the tick's delta bits or each coding its own.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../tests/support/cubes.rs"]
mod cubes;

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotReceiver, SnapshotSender, WorldSnapshot};

/// `n` ticks of `count` cubes, a `moving` share of them in motion.
fn scenes(count: usize, moving: f32, n: u32) -> Vec<Arc<WorldSnapshot>> {
    let schema = cubes::schema();
    let mut scene = cubes::Scene::new(count, moving);
    let mut prev: Option<Arc<WorldSnapshot>> = None;
    (1..=n)
        .map(|t| {
            scene.step();
            let w = scene.snapshot_after(&schema, t, prev.as_deref());
            prev = Some(w.clone());
            w
        })
        .collect()
}

/// Players per world snapshot in the benchmark: the server encodes one shared snapshot for
/// every player each tick, so per-player cost is the figure divided by this.
const PLAYERS: usize = 8;

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot/encode_64_for_8_players");
    g.throughput(criterion::Throughput::Elements(PLAYERS as u64));
    // The players' acknowledged baselines: all one tick back (players on similar links share
    // cached delta bits), or 1 to 8 ticks back, one each (the worst case: little to share).
    let cases = [
        ("0pct_moving", 0.0, false),
        ("25pct_moving", 0.25, false),
        ("100pct_moving", 1.0, false),
        ("100pct_moving_8_baselines", 1.0, true),
    ];
    for (label, moving, spread) in cases {
        // 64 ticks of motion, replayed with ever-increasing ticks. Each tick's snapshot is a
        // fresh copy, as the server's is, and is encoded for every player in turn.
        let worlds = scenes(64, moving, 64);
        let mut senders: Vec<_> =
            (0..PLAYERS).map(|_| SnapshotSender::new(cubes::schema(), SenderConfig::default())).collect();
        let mut interest = Vec::with_capacity(64);
        Interest::everything(&worlds[0], &mut interest);
        let mut buf = [0u8; 1200];
        let mut tick = 0u32;
        g.bench_function(label, |b| {
            b.iter_batched(
                || {
                    tick += 1;
                    Arc::new(WorldSnapshot::clone(&worlds[tick as usize % worlds.len()]).retick(tick))
                },
                |world| {
                    for (i, sender) in senders.iter_mut().enumerate() {
                        let behind = if spread { 1 + i as u32 } else { 1 };
                        sender.ack(world.tick().saturating_sub(behind));
                        black_box(sender.encode(&world, &interest, &mut buf).unwrap());
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot/decode_64");
    for (label, moving) in [("25pct_moving", 0.25), ("100pct_moving", 1.0)] {
        let worlds = scenes(64, moving, 2);
        let schema = cubes::schema();
        let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
        let mut interest = Vec::new();
        Interest::everything(&worlds[0], &mut interest);
        let mut first = [0u8; 1200];
        let n1 = sender.encode(&worlds[0], &interest, &mut first).unwrap().bytes;
        sender.ack(1);
        let mut second = [0u8; 1200];
        let n2 = sender.encode(&worlds[1], &interest, &mut second).unwrap().bytes;
        g.bench_function(label, |b| {
            b.iter_batched(
                || {
                    let mut r = SnapshotReceiver::new(schema.clone(), 64);
                    r.decode(&first[..n1]).unwrap();
                    r
                },
                |mut r| black_box(r.decode(&second[..n2]).unwrap()),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// Players and entities of the shared-encoding benchmark: an arena's worth.
const MANY: usize = 1000;
const ENTITIES: usize = 1600;
/// What each player sees: 64 entities, a window that overlaps its neighbours'.
const SEEN: usize = 64;

/// 1000 players each seeing 64 of 1600 moving entities, every one encoded each tick: with
/// the tick's world snapshot shared by all (each entity's delta bits against a baseline are
/// written once and copied by every other player with that baseline), against a copy per
/// player (every delta coded from scratch, as per-player encoding does). Baselines two ticks
/// back for everyone (similar links), or one to eight back (little to share).
fn encode_many(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot/encode_1000_players");
    g.sample_size(10);
    g.throughput(criterion::Throughput::Elements(MANY as u64));
    let worlds = scenes(ENTITIES, 1.0, 64);
    let interests: Vec<Vec<Interest>> = (0..MANY)
        .map(|p| {
            let start = (p * 7) % (ENTITIES - SEEN);
            (start..start + SEEN).map(|i| Interest::new(i as u32, 1.0)).collect()
        })
        .collect();
    for (label, shared, spread) in [
        ("shared_same_baseline", true, false),
        ("per_player_same_baseline", false, false),
        ("shared_8_baselines", true, true),
        ("per_player_8_baselines", false, true),
    ] {
        let mut senders: Vec<_> =
            (0..MANY).map(|_| SnapshotSender::new(cubes::schema(), SenderConfig::default())).collect();
        let mut buf = [0u8; 1200];
        let mut tick = 0u32;
        g.bench_function(label, |b| {
            b.iter_batched(
                || {
                    tick += 1;
                    let world = Arc::new(WorldSnapshot::clone(&worlds[tick as usize % worlds.len()]).retick(tick));
                    let copies: Vec<Arc<WorldSnapshot>> = if shared {
                        vec![world]
                    } else {
                        (0..MANY).map(|_| Arc::new(WorldSnapshot::clone(&world))).collect()
                    };
                    copies
                },
                |copies| {
                    for (i, sender) in senders.iter_mut().enumerate() {
                        let world = &copies[if shared { 0 } else { i }];
                        let behind = if spread { 1 + (i % 8) as u32 } else { 2 };
                        sender.ack(world.tick().saturating_sub(behind));
                        black_box(sender.encode(world, &interests[i], &mut buf).unwrap());
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, encode, encode_many, decode);
criterion_main!(benches);
