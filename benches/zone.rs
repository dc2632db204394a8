//! A zone's border work per tick, as its link does it off the tick's path: pick the entities
//! within the margin of each neighbour and code them whole (one frame per neighbour), and, on
//! the receiving side, decode a neighbour's frame. 1000 avatars spread over a 100 × 100 map
//! split 2 × 2, margin 10 (about a third of a zone's entities are near some border).
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use glam::Vec2;
use volley::protocol::quant::{AngleQ, Bits, Vec2Q};
use volley::protocol::snapshot::{Replicate, Schema, SnapshotBuilder, WorldSnapshot};
use volley::protocol::zone::{BorderEncoder, BorderFrame, ZoneLayout};

volley::replicated! {
    /// An avatar, quantized as the arena's.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Walker {
        /// Position, 1 cm.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-50.0), Vec2::splat(50.0), 0.01),
        /// Facing.
        pub aim: f32 = AngleQ(10),
        /// Health.
        pub health: u8 = Bits(7),
    }
}

fn setup() -> (Arc<Schema>, ZoneLayout, WorldSnapshot) {
    let mut schema = Schema::new();
    schema.register::<Walker>().unwrap();
    let layout = ZoneLayout::grid(Vec2::splat(-50.0), Vec2::splat(50.0), 2, 2, 10.0).unwrap();
    // Zone 0 is the quarter x < 0, y < 0; its 1000 avatars, spread over it on a lattice.
    let snapshot = {
        let mut b = SnapshotBuilder::new(&schema, 7);
        for i in 0..1000u32 {
            let p = Vec2::new(-49.0 + (i % 40) as f32 * 1.22, -49.0 + (i / 40) as f32 * 1.95);
            b.insert(i, &Walker { position: p, aim: i as f32 * 0.1, health: 100 }).unwrap();
        }
        b.finish().unwrap()
    };
    (Arc::new(schema), layout, snapshot)
}

fn border(c: &mut Criterion) {
    let (schema, layout, snapshot) = setup();
    let snapshot = Arc::new(snapshot);
    let position = |e: volley::protocol::snapshot::EntityRef<'_>| Some(Walker::dequantize(e.words).position);
    let mut encoder = BorderEncoder::new(layout.clone(), 0, schema.clone());
    let coded = encoder.encode(&snapshot, position);
    let shared: usize = coded.iter().map(|f| f.entities).sum();
    let frames: Vec<Vec<u8>> = coded.iter().map(|f| f.bytes.clone().unwrap().to_vec()).collect();
    eprintln!(
        "zone/border: {shared} entity copies to 3 neighbours, frames of {:?} bytes",
        frames.iter().map(Vec::len).collect::<Vec<_>>()
    );
    // Each tick a new snapshot (the encoder's ticks increase), made outside the timing.
    let mut tick = 7;
    c.bench_function("zone/border_out_1000_entities", |bench| {
        bench.iter_batched(
            || {
                tick += 1;
                Arc::new((*snapshot).clone().retick(tick))
            },
            |s| encoder.encode(&s, position).iter().map(|f| f.entities).sum::<usize>(),
            criterion::BatchSize::SmallInput,
        );
    });
    c.bench_function("zone/border_in_one_frame", |bench| {
        bench.iter(|| BorderFrame::decode(black_box(&frames[0]), &schema).unwrap().snapshot.len());
    });
}

criterion_group!(benches, border);
criterion_main!(benches);
