//! Encoding a snapshot allocates nothing once a player's history is warm.
#![allow(unsafe_code)] // the counting allocator below; nothing else in this test is unsafe
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "support/cubes.rs"]
mod cubes;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotSender};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_encode_allocates_nothing() {
    for moving in [0.25, 1.0] {
        let schema = cubes::schema();
        let mut scene = cubes::Scene::new(64, moving);
        let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
        let mut buf = [0u8; 1200];
        let mut interest = Vec::with_capacity(64);
        let mut during = 0;
        for tick in 1..=100u32 {
            scene.step();
            let world = scene.snapshot(&schema, tick);
            Interest::everything(&world, &mut interest);
            sender.ack(tick - 1);
            let before = ALLOCATIONS.with(Cell::get);
            let stats = sender.encode(&world, &interest, &mut buf).unwrap();
            let after = ALLOCATIONS.with(Cell::get);
            if tick > 40 {
                during += after - before;
                assert!(stats.baseline.is_some());
            }
        }
        assert_eq!(during, 0, "allocations in 60 warm encodes at {moving} moving");
    }
}
