//! Recordings as a replay server reads them: arbitrary bytes, and valid recordings with bytes
//! flipped and cut short. Reading and playing never panics and never allocates beyond the
//! file's own bounds; a file that parses plays from any tick to its end.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use volley::protocol::Audience;
use volley::protocol::recording::{Event, FrameIn, Playhead, RecordWriter, Recording, RecordingHeader};
use volley::protocol::session::PROTOCOL_VERSION;
use volley::protocol::snapshot::SnapshotBuilder;

#[path = "../common/thing.rs"]
mod thing;
use thing::{Thing, schema};

/// A valid recording of a few dozen ticks whose content comes from `seed`.
fn recording(seed: &[u8]) -> Vec<u8> {
    let schema = schema();
    let header = RecordingHeader {
        protocol: PROTOCOL_VERSION,
        schema: schema.fingerprint(),
        tick_rate_hz: 60,
        stride: 1,
        started_unix_ms: 0,
        keyframe_every: 8,
        kind: "fuzz".into(),
        columns: vec!["points".into()],
    };
    let (mut w, mut file) = RecordWriter::new(schema.clone(), &header);
    for t in 1..40u32 {
        let mut b = SnapshotBuilder::new(&schema, t);
        let n = seed.get(t as usize % seed.len().max(1)).copied().unwrap_or(3) % 9;
        for i in 0..u32::from(n) {
            let _ = b.insert(i * 2 + t % 3, &Thing { x: t * 31 + i, y: (i % 32) as u8 });
        }
        let snap = Arc::new(b.finish().expect("distinct ids"));
        let events = [Event::Message { to: Audience::All, reliable: t % 2 == 0, data: vec![t as u8; 3].into() }];
        let gap = seed.first().is_some_and(|s| u32::from(*s) == t);
        file.extend(
            w.push(FrameIn { tick: t, snapshot: Some(&snap), events: &events, after_gap: gap }).unwrap_or_default(),
        );
    }
    file.extend(w.finish().unwrap_or_default());
    file
}

fn play(bytes: Vec<u8>) {
    let schema = schema();
    let Ok(rec) = Recording::parse(bytes.into(), Some(&schema)) else { return };
    let Some((first, last)) = rec.ticks() else { return };
    let Ok(mut head) = Playhead::new(rec, schema) else { return };
    for t in [first, first + (last - first) / 2, last] {
        if head.seek(t).is_err() {
            continue;
        }
        let _ = head.advance_to(last, |f| assert!(f.tick <= last));
        assert!(head.frame().tick <= last);
    }
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode % 2 == 1 && rest.len() >= 4 => {
            // A valid recording, then: bytes flipped (position, mask) and a cut.
            let (seed, edits) = rest.split_at(4);
            let mut file = recording(seed);
            for e in edits.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([e[0], e[1]])) % file.len();
                file[at] ^= e[2];
            }
            if mode % 4 == 3 {
                let keep = usize::from(seed[0]) * file.len() / 255;
                file.truncate(keep);
            }
            play(file);
        }
        _ => play(data.to_vec()),
    }
});
