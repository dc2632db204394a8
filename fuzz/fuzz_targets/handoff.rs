//! Handoff messages as a zone reads them off the bus: arbitrary bytes as offers and answers,
//! and valid offers built from the input, round-tripped exactly, then damaged and cut.
//! Decoding never panics, and an offer that decodes is within its limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley::protocol::zone::handoff::{Answer, CarriedInput, MAX_STATE_BYTES, Offer};

fuzz_target!(|data: &[u8]| {
    if let Ok(o) = Offer::decode(data) {
        assert!(o.check().is_ok());
        assert_eq!(Offer::decode(&o.encode()), Ok(o));
    }
    let _ = Answer::decode(data);
    // A valid offer from the input.
    let (head, rest) = data.split_at(data.len().min(8));
    let mut client = [0u8; 8];
    client[..head.len()].copy_from_slice(head);
    let mut offer = Offer::new(
        head.first().copied().unwrap_or(0).into(),
        u64::from_le_bytes(client),
        [3; 256],
        rest[..rest.len().min(MAX_STATE_BYTES)].to_vec(),
    );
    offer.inputs = rest
        .chunks(9)
        .take(8)
        .enumerate()
        .map(|(i, c)| CarriedInput { seq: i as u32 + 1, bytes: c.to_vec() })
        .collect();
    let bytes = offer.encode();
    assert_eq!(Offer::decode(&bytes).as_ref(), Ok(&offer));
    if !bytes.is_empty() {
        let i = usize::from(head.get(1).copied().unwrap_or(0)) % bytes.len();
        let mut damaged = bytes.clone();
        damaged[i] ^= head.get(2).copied().unwrap_or(1) | 1;
        let _ = Offer::decode(&damaged);
        let _ = Offer::decode(&bytes[..i]);
    }
});
