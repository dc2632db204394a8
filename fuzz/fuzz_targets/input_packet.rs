//! Arbitrary bytes as a client's input packet: reading never panics, and whatever reads
//! writes back to the same bytes (views included), so the server sees what the client said.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley::protocol::input::{InputDedup, read_input_packet, write_input_packet};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = read_input_packet(data) else { return };
    let items: Vec<(&[u8], _)> = p.inputs().iter().copied().zip(p.views().iter().copied()).collect();
    let mut again = Vec::new();
    write_input_packet(&mut again, p.ack_tick, p.newest_seq, &items);
    assert_eq!(again, data, "an input packet writes back to the bytes it was read from");
    let fresh = InputDedup::default().fresh(&p);
    for i in fresh.as_slice() {
        if let Some(v) = i.view {
            let latest = p.ack_tick.unwrap_or(0);
            let v = v.not_after(latest);
            assert!(v.from() <= v.to() && v.to() <= latest && (0.0..=1.0).contains(&v.alpha()));
        }
    }
});
