//! A server's per-player work for the arena without sockets, threads or crypto: each tick,
//! every player's relevancy (its 64 nearest) and merged delta snapshot, with the
//! acknowledgements two ticks behind, as on a fast link. Made to be counted by callgrind,
//! whose instruction and cache-miss figures do not vary from run to run the way CPU time
//! does on a shared machine:
//!
//!     cargo build --release -p volley-arena --example player_work
//!     valgrind --tool=callgrind --cache-sim=yes target/release/examples/player_work [PLAYERS] [TICKS]
//!
//! It prints the bytes encoded, so that a change that alters what is sent shows.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotBuilder, SnapshotSender, WorldSnapshot};
use volley::server::World;
use volley_arena::{Arena, ArenaInput};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>().unwrap());
    let players = args.next().unwrap_or(500);
    let ticks = args.next().unwrap_or(20);
    let mut arena = Arena::new();
    for p in 0..players {
        arena.join(p);
    }
    let schema = arena.schema();
    let relevancy = arena.relevancy();
    let dt = Duration::from_secs(1) / 60;
    let input = |p: u32, t: u32| {
        let a = (p * 7919 + t / 30) as f32;
        let i = ArenaInput {
            move_x: (a.sin() * 127.0) as i8,
            move_y: (a.cos() * 127.0) as i8,
            aim: ArenaInput::aim_from_radians(a),
            fire: t % 20 == p % 20,
            rail: false,
        };
        i.to_bytes()
    };
    let mut senders: Vec<SnapshotSender> =
        (0..players).map(|_| SnapshotSender::new(Arc::new(schema.clone()), SenderConfig::default())).collect();
    let mut previous: Option<Arc<WorldSnapshot>> = None;
    let mut interest: Vec<Interest> = Vec::with_capacity(64);
    let mut buf = [0u8; 1200];
    let (mut bytes, mut entities, mut created, mut destroyed) = (0u64, 0u64, 0u64, 0u64);
    // A second of play before the counted ticks, so that the players are spread out.
    for t in 0..60 + ticks {
        for p in 0..players {
            arena.input(p, &input(p, t));
        }
        arena.tick(t, dt);
        let mut b = SnapshotBuilder::new(&schema, t + 1);
        arena.snapshot(&mut b);
        let world = Arc::new(b.finish_after(previous.as_deref()).unwrap());
        if t >= 60 {
            for (p, sender) in senders.iter_mut().enumerate() {
                relevancy.interest(&world, p as u32, &mut interest);
                sender.ack(t.saturating_sub(1));
                let stats = sender.encode(&world, &interest, &mut buf).unwrap();
                bytes += stats.bytes as u64;
                entities += u64::from(stats.changed + stats.created);
                created += u64::from(stats.created);
                destroyed += u64::from(stats.destroyed);
            }
        }
        previous = Some(world);
    }
    println!(
        "{players} players, {ticks} ticks: {bytes} bytes encoded, {entities} entities sent ({:.1} a player-tick, {:.1} of them created), {:.1} destroyed a player-tick",
        entities as f64 / f64::from(players * ticks),
        created as f64 / f64::from(players * ticks),
        destroyed as f64 / f64::from(players * ticks)
    );
}
