//! The client's newest-wins state: which snapshot it has, and its latest inputs.
//!
//! Every client packet carries the newest snapshot tick the client decoded (the server's
//! delta baseline) and its last few inputs, newest first, each with its sequence number, so a
//! lost packet loses no input: the next packet repeats it.

/// Inputs repeated in every packet.
pub const REDUNDANT_INPUTS: usize = 4;
/// Largest encoded input.
pub const MAX_INPUT_BYTES: usize = 64;

/// A client packet's state blob could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed input packet")]
pub struct MalformedInput;

/// What a client's packet says (borrowed from it: reading one allocates nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPacket<'a> {
    /// The newest snapshot tick the client decoded.
    pub ack_tick: Option<u32>,
    /// Sequence number of the newest input; older ones count down from it.
    pub newest_seq: u32,
    inputs: [&'a [u8]; REDUNDANT_INPUTS],
    count: usize,
}

impl<'a> InputPacket<'a> {
    /// Inputs, newest first.
    pub fn inputs(&self) -> &[&'a [u8]] {
        &self.inputs[..self.count.min(REDUNDANT_INPUTS)]
    }
}

/// The inputs of a packet not seen before, oldest first, with their sequence numbers
/// ([`InputDedup::fresh`]; at most [`REDUNDANT_INPUTS`], no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreshInputs<'a> {
    items: [(u32, &'a [u8]); REDUNDANT_INPUTS],
    count: usize,
}

impl<'a> FreshInputs<'a> {
    /// The fresh inputs, oldest first.
    pub fn as_slice(&self) -> &[(u32, &'a [u8])] {
        &self.items[..self.count.min(REDUNDANT_INPUTS)]
    }

    /// True when every input was seen before.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Encodes `(ack, newest_seq, inputs newest first)` into `out` (cleared first); at most
/// [`REDUNDANT_INPUTS`] inputs of at most [`MAX_INPUT_BYTES`] each are kept.
pub fn write_input_packet(out: &mut Vec<u8>, ack_tick: Option<u32>, newest_seq: u32, inputs: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(&ack_tick.map_or(u32::MAX, |t| t).to_le_bytes());
    out.extend_from_slice(&newest_seq.to_le_bytes());
    let inputs = &inputs[..inputs.len().min(REDUNDANT_INPUTS)];
    out.push(inputs.len() as u8);
    for i in inputs {
        let i = &i[..i.len().min(MAX_INPUT_BYTES)];
        out.push(i.len() as u8);
        out.extend_from_slice(i);
    }
}

/// Reads an input packet.
///
/// # Errors
/// When it is truncated or claims more inputs or bytes than allowed.
pub fn read_input_packet(b: &[u8]) -> Result<InputPacket<'_>, MalformedInput> {
    let head = b.get(..9).ok_or(MalformedInput)?;
    let ack = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let newest_seq = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let count = head[8] as usize;
    if count > REDUNDANT_INPUTS {
        return Err(MalformedInput);
    }
    let mut inputs: [&[u8]; REDUNDANT_INPUTS] = [&[]; REDUNDANT_INPUTS];
    let mut at = 9;
    for slot in inputs.iter_mut().take(count) {
        let len = *b.get(at).ok_or(MalformedInput)? as usize;
        if len > MAX_INPUT_BYTES {
            return Err(MalformedInput);
        }
        *slot = b.get(at + 1..at + 1 + len).ok_or(MalformedInput)?;
        at += 1 + len;
    }
    if at != b.len() {
        return Err(MalformedInput);
    }
    Ok(InputPacket { ack_tick: (ack != u32::MAX).then_some(ack), newest_seq, inputs, count })
}

/// Remembers which input sequences were applied, so repeats are skipped.
#[derive(Debug, Clone, Default)]
pub struct InputDedup {
    last: Option<u32>,
}

impl InputDedup {
    /// From a packet's inputs (newest first), the new ones, oldest first, with their sequence.
    pub fn fresh<'a>(&mut self, p: &InputPacket<'a>) -> FreshInputs<'a> {
        let mut out = FreshInputs { items: [(0, &[]); REDUNDANT_INPUTS], count: 0 };
        for (k, input) in p.inputs().iter().enumerate().rev() {
            let seq = p.newest_seq.wrapping_sub(k as u32);
            if self.last.is_none_or(|l| seq.wrapping_sub(l) as i32 > 0) {
                out.items[out.count] = (seq, *input);
                out.count += 1;
                self.last = Some(seq);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_dedup() {
        let mut buf = Vec::new();
        write_input_packet(&mut buf, Some(9), 12, &[b"c", b"b", b"a"]);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.ack_tick, Some(9));
        let mut d = InputDedup::default();
        assert_eq!(d.fresh(&p).as_slice(), [(10, &b"a"[..]), (11, &b"b"[..]), (12, &b"c"[..])]);
        write_input_packet(&mut buf, None, 13, &[b"d", b"c", b"b"]);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.ack_tick, None);
        assert_eq!(d.fresh(&p).as_slice(), [(13, &b"d"[..])], "repeats are skipped");
        assert!(read_input_packet(&buf[..buf.len() - 1]).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = read_input_packet(&b);
        }
    }
}
