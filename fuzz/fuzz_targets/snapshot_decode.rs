//! Arbitrary bytes as snapshots, decoded against a real baseline.
#![no_main]

use std::sync::Arc;

use glam::{Quat, Vec3};
use libfuzzer_sys::fuzz_target;
use volley::protocol::quant::{Bits, QuatQ, Vec3Q, VelocityQ};
use volley::protocol::snapshot::{Interest, Schema, SenderConfig, SnapshotBuilder, SnapshotReceiver, SnapshotSender};

volley::replicated! {
    struct Body {
        position: Vec3 = Vec3Q::bounded(Vec3::splat(-64.0), Vec3::splat(64.0), 1.0 / 256.0),
        velocity: Vec3 = VelocityQ::new(16.0, 1.0 / 64.0),
        rotation: Quat = QuatQ::new(9),
    }
}

volley::replicated! {
    struct Tag {
        value: u32 = Bits(32),
    }
}

/// A world at `tick` whose bodies have moved and turned `tick` steps.
fn world(schema: &Schema, tick: u32) -> Option<Arc<volley::protocol::snapshot::WorldSnapshot>> {
    let mut b = SnapshotBuilder::new(schema, tick);
    for id in [0u32, 3, 9] {
        let t = tick as f32;
        let body = Body {
            position: Vec3::splat(id as f32) + Vec3::new(0.3 * t, -0.1 * t, 0.05 * t),
            velocity: Vec3::ZERO,
            rotation: Quat::from_rotation_y(0.2 * t) * Quat::from_rotation_x(id as f32),
        };
        b.insert(id, &body).ok()?;
    }
    b.insert(12, &Tag { value: 7 }).ok()?;
    b.finish().ok().map(Arc::new)
}

fuzz_target!(|data: &[u8]| {
    let mut schema = Schema::new();
    let _ = schema.register::<Body>();
    let _ = schema.register::<Tag>();
    let schema = Arc::new(schema);
    // Genuine snapshots at ticks 1 (full) and 2 (a range-coded delta), so that deltas and
    // predictions against them (tick 2 the baseline, tick 1 the second reference) are
    // exercised too. The sender predicts; a genuine predicted tick 3 is in the corpus.
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig { predict: true, ..SenderConfig::default() });
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut interest = Vec::new();
    let mut buf = [0u8; 1200];
    for tick in 1..=2 {
        let Some(w) = world(&schema, tick) else { return };
        Interest::everything(&w, &mut interest);
        let Ok(stats) = sender.encode(&w, &interest, &mut buf) else { return };
        if receiver.decode(&buf[..stats.bytes]).is_err() {
            return;
        }
        sender.ack(tick);
    }
    for chunk in data.split(|b| *b == 0xfe) {
        if let Ok(tick) = receiver.decode(chunk) {
            let snap = receiver.get(tick).expect("just decoded");
            assert!(snap.ids().windows(2).all(|w| w[0] < w[1]), "ids ascending and unique");
        }
    }
});
