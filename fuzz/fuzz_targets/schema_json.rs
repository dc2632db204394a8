//! A schema description from anywhere (what volley-ffi's `volley_client_new` reads): it is
//! refused with a reason or read, and a read one decodes any words, blended from any others
//! by any amount, into exactly its kinds' numbers, without panicking. The input is the JSON
//! text, a zero byte, then the words and the blend.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley::protocol::snapshot::Schema;

fuzz_target!(|data: &[u8]| {
    let (text, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let Ok(schema) = Schema::from_json(text) else { return };
    let words: Vec<u32> = rest.chunks(4).map(|c| c.iter().fold(0u32, |w, b| w << 8 | u32::from(*b))).collect();
    let t = words.first().map_or(0.5, |w| f32::from_bits(*w));
    let mut out = Vec::new();
    for k in 0..schema.len() {
        let Some(kind) = schema.kind(k as u16) else { continue };
        let (a, b) = words.split_at(words.len() / 2);
        kind.decode(a, Some(b), t, &mut out);
        assert_eq!(out.len(), kind.values());
        kind.decode(b, None, 1.0, &mut out);
        assert_eq!(out.len(), kind.values());
    }
    // What it reads back is what it read.
    assert_eq!(Schema::from_json(&schema.to_json()).map(|s| s.fingerprint()).ok(), Some(schema.fingerprint()));
});
