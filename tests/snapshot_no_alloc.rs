//! Encoding a snapshot allocates nothing once a player's history is warm.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "support/cubes.rs"]
mod cubes;

use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotSender};

#[path = "support/alloc.rs"]
mod alloc;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

#[test]
fn steady_state_encode_allocates_nothing() {
    // With prediction, the range coder's models and stream live in the thread: warm too.
    for (moving, predict) in [(0.25, false), (1.0, false), (0.25, true), (1.0, true)] {
        let schema = cubes::schema();
        let mut scene = cubes::Scene::new(64, moving);
        let mut sender = SnapshotSender::new(schema.clone(), SenderConfig { predict, ..SenderConfig::default() });
        let mut buf = [0u8; 1200];
        let mut interest = Vec::with_capacity(64);
        let mut during = 0;
        for tick in 1..=100u32 {
            scene.step();
            let world = scene.snapshot(&schema, tick);
            Interest::everything(&world, &mut interest);
            // Acks two ticks late, so that a predicting sender has a second reference.
            if tick > 2 {
                sender.ack(tick - 2);
            }
            let before = alloc::allocations();
            let stats = sender.encode(&world, &interest, &mut buf).unwrap();
            let after = alloc::allocations();
            if tick > 40 {
                during += after - before;
                assert!(stats.baseline.is_some());
            }
        }
        assert_eq!(during, 0, "allocations in 60 warm encodes at {moving} moving (predict {predict})");
    }
}
