//! The arena's relevancy (each player's 64 nearest entities), as the server runs it for
//! every player every tick: 1000 players moving and firing (about 5000 shots in flight).
//!
//!     cargo bench --bench arena
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use volley::protocol::input::ViewTime;
use volley::protocol::snapshot::{Interest, SnapshotBuilder};
use volley::server::World;
use volley_arena::{Arena, ArenaInput};

/// Player `p`'s input at tick `t`: walk and fire in its own direction (and the rail).
fn play(p: u32, t: u32, rail: bool) -> Vec<u8> {
    let a = (p * 7919 + t) as f32;
    let input = ArenaInput {
        move_x: (a.sin() * 127.0) as i8,
        move_y: (a.cos() * 127.0) as i8,
        aim: ArenaInput::aim_from_radians(a),
        fire: true,
        rail,
    };
    input.to_bytes()
}

fn relevancy(c: &mut Criterion) {
    const PLAYERS: u32 = 1000;
    let mut arena = Arena::new();
    for p in 0..PLAYERS {
        arena.join(p);
    }
    let schema = arena.schema();
    // Two seconds of play: everyone walks and fires in its own direction.
    let dt = Duration::from_secs(1) / 60;
    for t in 0..120u32 {
        for p in 0..PLAYERS {
            arena.input(p, &play(p, t, false));
        }
        arena.tick(t, dt);
    }
    let mut b = SnapshotBuilder::new(&schema, 120);
    arena.snapshot(&mut b);
    let world = b.finish().unwrap();
    let relevancy = arena.relevancy();
    let mut out: Vec<Interest> = Vec::with_capacity(64);
    let mut g = c.benchmark_group("arena");
    g.throughput(criterion::Throughput::Elements(u64::from(PLAYERS)));
    let label = format!("relevancy_{PLAYERS}_players_{}_entities", world.len());
    g.bench_function(label, |bench| {
        bench.iter(|| {
            for p in 0..PLAYERS {
                relevancy.interest(&world, p, &mut out);
                black_box(&out);
            }
        })
    });
    g.finish();
}

/// One tick of the world itself with 1000 players moving, firing, and firing the rail (each
/// rail shot judged in a view four ticks back, through the lag-compensation history).
fn tick(c: &mut Criterion) {
    const PLAYERS: u32 = 1000;
    let mut arena = Arena::new();
    for p in 0..PLAYERS {
        arena.join(p);
    }
    let dt = Duration::from_secs(1) / 60;
    let mut t = 0u32;
    let mut g = c.benchmark_group("arena");
    g.throughput(criterion::Throughput::Elements(u64::from(PLAYERS)));
    g.bench_function(format!("tick_{PLAYERS}_players_with_rails"), |bench| {
        bench.iter(|| {
            t += 1;
            for p in 0..PLAYERS {
                let view = ViewTime::between(t.saturating_sub(4), t.saturating_sub(3), 0.5);
                arena.input_viewed(p, &play(p, t, true), Some(view));
            }
            arena.tick(t, dt);
        })
    });
    g.finish();
}

criterion_group!(benches, relevancy, tick);
criterion_main!(benches);
