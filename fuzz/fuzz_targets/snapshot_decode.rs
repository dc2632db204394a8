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

fuzz_target!(|data: &[u8]| {
    let mut schema = Schema::new();
    let _ = schema.register::<Body>();
    let _ = schema.register::<Tag>();
    let schema = Arc::new(schema);
    // A genuine baseline at tick 1 so that deltas against it are exercised too.
    let mut b = SnapshotBuilder::new(&schema, 1);
    for id in [0u32, 3, 9] {
        let body = Body { position: Vec3::splat(id as f32), velocity: Vec3::ZERO, rotation: Quat::IDENTITY };
        let _ = b.insert(id, &body);
    }
    let _ = b.insert(12, &Tag { value: 7 });
    let Ok(world) = b.finish() else { return };
    let world = Arc::new(world);
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut interest = Vec::new();
    Interest::everything(&world, &mut interest);
    let mut buf = [0u8; 1200];
    let Ok(stats) = sender.encode(&world, &interest, &mut buf) else { return };
    let mut receiver = SnapshotReceiver::new(schema, 64);
    if receiver.decode(&buf[..stats.bytes]).is_err() {
        return;
    }
    for chunk in data.split(|b| *b == 0xfe) {
        if let Ok(tick) = receiver.decode(chunk) {
            let snap = receiver.get(tick).expect("just decoded");
            assert!(snap.ids().windows(2).all(|w| w[0] < w[1]), "ids ascending and unique");
        }
    }
});
