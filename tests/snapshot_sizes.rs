//! Bytes per entity of the snapshot codec, against naive full state (u16 id + f32 position +
//! f32 quaternion = 30 bytes). Sizes are deterministic, so they are asserted; the run prints
//! them for BENCHMARKS.md (`cargo test --test it snapshot_sizes:: -- --nocapture`).
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "support/cubes.rs"]
mod cubes;

use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotReceiver, SnapshotSender};

const NAIVE_BYTES: f32 = 2.0 + 12.0 + 16.0;

/// Average bytes per entity over `ticks` deltas with the baseline `lag` ticks behind.
fn measure(moving: f32, lag: u32, ticks: u32) -> (f32, f32) {
    let schema = cubes::schema();
    let mut scene = cubes::Scene::new(64, moving);
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut buf = [0u8; 1200];
    let mut interest = Vec::new();
    let (mut full, mut delta_total) = (0.0, 0usize);
    for tick in 1..=ticks + lag + 1 {
        scene.step();
        let world = scene.snapshot(&schema, tick);
        Interest::everything(&world, &mut interest);
        if tick > lag {
            sender.ack(tick - lag);
        }
        let stats = sender.encode(&world, &interest, &mut buf).unwrap();
        receiver.decode(&buf[..stats.bytes]).unwrap();
        assert_eq!(receiver.latest().unwrap(), &*world, "lossless up to quantization");
        if tick == 1 {
            assert_eq!(stats.baseline, None);
            full = stats.bytes as f32 / 64.0;
        } else if tick > lag + 1 {
            assert_eq!(stats.baseline, Some(tick - lag));
            delta_total += stats.bytes;
        }
    }
    (full, delta_total as f32 / ticks as f32 / 64.0)
}

#[test]
fn bytes_per_entity() {
    let (full, delta25) = measure(0.25, 1, 100);
    let (_, delta100) = measure(1.0, 1, 100);
    let (_, delta25_lag6) = measure(0.25, 6, 100);
    println!("naive full state: {NAIVE_BYTES} B/entity");
    println!("quantized full snapshot of 64 cubes: {full:.2} B/entity (header included)");
    println!("delta, 25 % moving, baseline 1 tick back: {delta25:.2} B/entity");
    println!("delta, 25 % moving, baseline 6 ticks back: {delta25_lag6:.2} B/entity");
    println!("delta, 100 % moving, baseline 1 tick back: {delta100:.2} B/entity");
    assert!(full <= 10.2, "full: {full}");
    assert!(delta25 <= 2.0, "25 % moving: {delta25}");
    assert!(delta100 < full, "a delta of everything moving still beats a full snapshot");
}
