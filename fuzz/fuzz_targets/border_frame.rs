//! Zone border frames (and whole-state frames) as read off the bus: arbitrary bytes, and valid frames
//! (entities from the input) with bytes flipped and cut short. Decoding never panics; a frame
//! that decodes holds entities the schema can read, and a valid frame round-trips exactly.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use volley::protocol::snapshot::SnapshotBuilder;
use volley::protocol::zone::{BorderFrame, StateFrame};

#[path = "../common/thing.rs"]
mod thing;
use thing::{Thing, schema};

fuzz_target!(|data: &[u8]| {
    let schema = schema();
    // Arbitrary bytes.
    if let Ok(f) = BorderFrame::decode(data, &schema) {
        for id in f.snapshot.ids() {
            let _ = f.snapshot.read::<Thing>(&schema, *id);
        }
    }
    // The same bytes as a whole zone's state frame (what the oracle reads off the bus).
    if let Ok(f) = StateFrame::decode(data, &schema) {
        assert!(f.players.len() <= volley::protocol::zone::MAX_STATE_PLAYERS);
        assert!(f.held.len() <= volley::protocol::zone::MAX_STATE_NEIGHBOURS);
    }
    // A valid frame from the input's first bytes, then damaged by the rest.
    let Some((&n, rest)) = data.split_first() else { return };
    let mut b = SnapshotBuilder::new(&schema, u32::from(n) * 7);
    for (i, pair) in rest.chunks(2).take(usize::from(n % 64)).enumerate() {
        let x = u32::from(pair[0]) * 16 + i as u32 % 16;
        let y = pair.get(1).copied().unwrap_or(0) % 32;
        let id = (u32::from(pair[0]) << 8) | i as u32;
        let _ = b.insert(id, &Thing { x, y });
    }
    let Ok(snapshot) = b.finish() else { return };
    let snapshot = Arc::new(snapshot);
    let Ok(bytes) = BorderFrame::encode(u16::from(n), &snapshot, &schema) else { return };
    let f = BorderFrame::decode(&bytes, &schema).expect("a valid frame decodes");
    assert_eq!((f.zone, f.tick), (u16::from(n), snapshot.tick()));
    assert_eq!(f.snapshot.ids(), snapshot.ids());
    for id in snapshot.ids() {
        assert_eq!(f.snapshot.read::<Thing>(&schema, *id), snapshot.read::<Thing>(&schema, *id));
    }
    let skip = 1 + usize::from(n % 64) * 2;
    let mut damaged = bytes.clone();
    for (k, &v) in data.iter().skip(skip).take(8).enumerate() {
        let at = (usize::from(v) * 31 + k * 7) % damaged.len();
        damaged[at] ^= v | 1;
    }
    let _ = BorderFrame::decode(&damaged, &schema);
    let _ = BorderFrame::decode(&bytes[..usize::from(n) % bytes.len()], &schema);
});
