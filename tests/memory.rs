//! Bytes a player's protocol state holds once warm: the snapshot sender's history of 64
//! visible entities (the target scenario) with acks 6 ticks behind, the reliability
//! endpoint, and the netcode connection. Deterministic (live bytes under a counting
//! allocator), printed, and bounded: the server's budget is 64 KiB a player in all, and the
//! rest (actor, mailbox, metrics) is measured by the load runs in BENCHMARKS.md.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "support/cubes.rs"]
mod cubes;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use volley::protocol::netcode::server::Connection;
use volley::protocol::reliability::{Channel, ChannelConfig};
use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotSender};

struct Live;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only sums sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn protocol_state_per_player() {
    let schema = cubes::schema();
    let mut scene = cubes::Scene::new(64, 1.0);
    let mut interest = Vec::with_capacity(64);
    let mut buf = [0u8; 1200];
    // The world snapshots are shared by every player: keep the newest 70 alive outside the
    // measurement, as the server's players do between them.
    let mut worlds = std::collections::VecDeque::new();
    // The encoder's working lists belong to the thread (shared by all the players it
    // serves): warm them before measuring one player.
    {
        let mut warm = SnapshotSender::new(schema.clone(), SenderConfig::default());
        let mut s = cubes::Scene::new(64, 1.0);
        s.step();
        let world = std::sync::Arc::new(s.snapshot(&schema, 1));
        Interest::everything(&world, &mut interest);
        warm.encode(&world, &interest, &mut buf).unwrap();
    }
    let before_sender = live();
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut outside = 0;
    for tick in 1..=200u32 {
        scene.step();
        let a = live();
        let world = std::sync::Arc::new(scene.snapshot(&schema, tick));
        Interest::everything(&world, &mut interest);
        outside += live() - a;
        if tick > 6 {
            sender.ack(tick - 6);
        }
        sender.encode(&world, &interest, &mut buf).unwrap();
        worlds.push_back(world);
        if worlds.len() > 70 {
            let a = live();
            worlds.pop_front();
            outside += live() - a;
        }
    }
    let sender_bytes = live() - before_sender - outside;
    let before_endpoint = live();
    let endpoint = Channel::new(ChannelConfig::default());
    let endpoint_bytes = live() - before_endpoint;
    let connection = std::mem::size_of::<Connection>();
    println!(
        "snapshot sender (64 visible, 6 ticks behind): {sender_bytes} B; endpoint: {endpoint_bytes} B; \
         connection: {connection} B"
    );
    // Views older than the acknowledged one are released: about 7 views of 64 entries of
    // 16 B here, where the whole ring of 32 held 57 KiB.
    assert!(sender_bytes < 16 * 1024, "snapshot sender holds {sender_bytes} B");
    // The sent-packet ring keeps no reliable ids inline; the receive window waits for the
    // first reliable message.
    assert!(endpoint_bytes < 4 * 1024, "endpoint holds {endpoint_bytes} B");
    // The replay window is a bitmap (the standard's array of sequences is 2 KiB).
    assert!(connection < 1024, "a connection is {connection} B");
    drop((sender, endpoint));
}
