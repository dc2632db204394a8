//! The client's newest-wins state: which snapshot it has, and its latest inputs.
//!
//! Every client packet carries the newest snapshot tick the client decoded (the server's
//! delta baseline) and its last few inputs, newest first, each with its sequence number and
//! the view the client had when it made it ([`ViewTime`], for the server's lag
//! compensation), so a lost packet loses no input: the next packet repeats it.
//!
//! Layout: ack tick (u32 LE, `u32::MAX` for none), newest sequence (u32 LE), input count
//! (u8, at most [`MAX_PACKET_INPUTS`]: [`REDUNDANT_INPUTS`], or that many times the interval a
//! pacing server asked for), then per input its length (u8, at most
//! [`MAX_INPUT_BYTES`]), its bytes, and its view in one to three bytes. The first holds how
//! many ticks before the ack tick the view's older snapshot is (six bits, at most
//! [`MAX_VIEW_BACK`]) and its form (two bits): one snapshot (nothing follows); a blend
//! towards the next tick (its blend follows, in 255ths); a blend towards a later tick (the
//! span in ticks follows, then the blend). `0xFF` alone is no view.

/// Inputs repeated in every packet: each input travels in this many packets.
pub const REDUNDANT_INPUTS: usize = 4;
/// The most inputs one packet carries. A client that sends one packet in `n` inputs (a
/// server short of CPU asked it to, [`Pace`](crate::protocol::system::Pace); `n` is at most
/// [`REDUNDANT_INPUTS`]) puts its last `n × REDUNDANT_INPUTS` inputs in each, so every input
/// still travels in [`REDUNDANT_INPUTS`] packets.
pub const MAX_PACKET_INPUTS: usize = REDUNDANT_INPUTS * REDUNDANT_INPUTS;
/// A packet's inputs stop before they would pass this many bytes (the first
/// [`REDUNDANT_INPUTS`] always go: at most 272 bytes).
pub const INPUT_BYTES_BUDGET: usize = 480;
/// Largest encoded input.
pub const MAX_INPUT_BYTES: usize = 64;
/// The most ticks before a packet's ack tick a view can start (a client's playback delay is
/// far less); an older view goes as none.
pub const MAX_VIEW_BACK: u32 = 62;
/// "No view".
const NO_VIEW: u8 = u8::MAX;
/// A view's forms, in its first byte's top two bits.
const FORM_ONE: u8 = 0;
const FORM_NEXT: u8 = 1;
const FORM_SPAN: u8 = 2;

/// A client packet's state blob could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed input packet")]
pub struct MalformedInput;

/// What a client was drawing when it made an input: the snapshot of tick [`ViewTime::from`]
/// blended towards the snapshot of tick [`ViewTime::to`] by [`ViewTime::alpha`] (in 255ths).
/// A server that rewinds its world to this view (`server::lagcomp`) judges a shot against
/// what the shooter saw, not against where its targets have moved since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewTime {
    from: u32,
    span: u8,
    alpha: u8,
}

impl ViewTime {
    /// Exactly the snapshot of `tick`.
    pub fn at(tick: u32) -> Self {
        Self { from: tick, span: 0, alpha: 0 }
    }

    /// `from` blended towards `to` by `alpha` (0 to 1; clamped, NaN is 0). A `to` that is not
    /// after `from` means `from` alone; one more than 255 ticks after it is brought to 255.
    pub fn between(from: u32, to: u32, alpha: f32) -> Self {
        let span = to.saturating_sub(from).min(u32::from(u8::MAX)) as u8;
        if span == 0 {
            return Self::at(from);
        }
        let alpha = if alpha.is_nan() { 0.0 } else { alpha.clamp(0.0, 1.0) };
        Self { from, span, alpha: (alpha * 255.0).round() as u8 }
    }

    /// The older snapshot's tick.
    pub fn from(self) -> u32 {
        self.from
    }

    /// The newer snapshot's tick (equal to [`ViewTime::from`] for a single snapshot).
    pub fn to(self) -> u32 {
        self.from.saturating_add(u32::from(self.span))
    }

    /// How far from [`ViewTime::from`] towards [`ViewTime::to`], 0 to 1.
    pub fn alpha(self) -> f32 {
        f32::from(self.alpha) / 255.0
    }

    /// The view as a fractional tick.
    pub fn ticks(self) -> f64 {
        f64::from(self.from) + f64::from(self.span) * f64::from(self.alpha) / 255.0
    }

    /// The view, or the snapshot of `latest` if it claims anything after `latest` (a client
    /// cannot have drawn a snapshot the server has not made yet).
    pub fn not_after(self, latest: u32) -> Self {
        if self.to() <= latest { self } else { Self::at(self.from.min(latest)) }
    }

    /// Appends this view's wire bytes for a packet whose ack tick is `ack` (no view when there
    /// is no ack, or the view does not start within [`MAX_VIEW_BACK`] ticks before it).
    fn encode(view: Option<Self>, ack: Option<u32>, out: &mut Vec<u8>) {
        let back = |(v, a): (Self, u32)| Some((v, a.checked_sub(v.from).filter(|b| *b <= MAX_VIEW_BACK)? as u8));
        let Some((v, back)) = view.zip(ack).and_then(back) else {
            out.push(NO_VIEW);
            return;
        };
        match v.span {
            0 => out.push(FORM_ONE << 6 | back),
            1 => out.extend_from_slice(&[FORM_NEXT << 6 | back, v.alpha]),
            span => out.extend_from_slice(&[FORM_SPAN << 6 | back, span, v.alpha]),
        }
    }

    /// Reads a view at the start of `b`; returns it and the bytes it took.
    fn decode(b: &[u8], ack: Option<u32>) -> Result<(Option<Self>, usize), MalformedInput> {
        let first = *b.first().ok_or(MalformedInput)?;
        if first == NO_VIEW {
            return Ok((None, 1));
        }
        // Back 63 is only ever "no view" (0xFF).
        let back = u32::from(first & 0x3F);
        if back > MAX_VIEW_BACK {
            return Err(MalformedInput);
        }
        let from = ack.ok_or(MalformedInput)?.checked_sub(back).ok_or(MalformedInput)?;
        let (span, alpha, len) = match first >> 6 {
            FORM_ONE => (0, 0, 1),
            FORM_NEXT => (1, *b.get(1).ok_or(MalformedInput)?, 2),
            // A span of 0 or 1 has its own form.
            FORM_SPAN => match b.get(1..3).ok_or(MalformedInput)? {
                [span, alpha] if *span >= 2 => (*span, *alpha, 3),
                _ => return Err(MalformedInput),
            },
            _ => return Err(MalformedInput),
        };
        Ok((Some(Self { from, span, alpha }), len))
    }
}

/// What a client's packet says (borrowed from it: reading one allocates nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPacket<'a> {
    /// The newest snapshot tick the client decoded.
    pub ack_tick: Option<u32>,
    /// Sequence number of the newest input; older ones count down from it.
    pub newest_seq: u32,
    inputs: [&'a [u8]; MAX_PACKET_INPUTS],
    views: [Option<ViewTime>; MAX_PACKET_INPUTS],
    count: usize,
}

impl<'a> InputPacket<'a> {
    /// Inputs, newest first.
    pub fn inputs(&self) -> &[&'a [u8]] {
        &self.inputs[..self.count.min(MAX_PACKET_INPUTS)]
    }

    /// The view each input was made with, in the order of [`InputPacket::inputs`].
    pub fn views(&self) -> &[Option<ViewTime>] {
        &self.views[..self.count.min(MAX_PACKET_INPUTS)]
    }
}

/// One input not seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreshInput<'a> {
    /// Its sequence number.
    pub seq: u32,
    /// The input as the client encoded it.
    pub bytes: &'a [u8],
    /// What the client was drawing when it made it.
    pub view: Option<ViewTime>,
}

/// The inputs of a packet not seen before, oldest first ([`InputDedup::fresh`]; at most
/// [`MAX_PACKET_INPUTS`], no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreshInputs<'a> {
    items: [FreshInput<'a>; MAX_PACKET_INPUTS],
    count: usize,
}

impl Default for FreshInputs<'_> {
    /// No input.
    fn default() -> Self {
        Self { items: [FreshInput { seq: 0, bytes: &[], view: None }; MAX_PACKET_INPUTS], count: 0 }
    }
}

impl<'a> FreshInputs<'a> {
    /// The fresh inputs, oldest first.
    pub fn as_slice(&self) -> &[FreshInput<'a>] {
        &self.items[..self.count.min(MAX_PACKET_INPUTS)]
    }

    /// True when every input was seen before.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Keeps the oldest `n` inputs; returns how many were dropped.
    pub fn truncate(&mut self, n: usize) -> usize {
        let dropped = self.count.saturating_sub(n);
        self.count = self.count.min(n);
        dropped
    }
}

/// Encodes `(ack, newest_seq, inputs newest first with their views)` into `out` (cleared
/// first); at most [`MAX_PACKET_INPUTS`] inputs of at most [`MAX_INPUT_BYTES`] each are kept,
/// and past the first [`REDUNDANT_INPUTS`] only while they fit in [`INPUT_BYTES_BUDGET`].
/// A view that cannot be said relative to `ack_tick` (no ack, or more than
/// [`MAX_VIEW_BACK`] ticks before it) goes as none.
pub fn write_input_packet(
    out: &mut Vec<u8>,
    ack_tick: Option<u32>,
    newest_seq: u32,
    inputs: &[(&[u8], Option<ViewTime>)],
) {
    out.clear();
    out.extend_from_slice(&ack_tick.map_or(u32::MAX, |t| t).to_le_bytes());
    out.extend_from_slice(&newest_seq.to_le_bytes());
    let inputs = &inputs[..inputs.len().min(MAX_PACKET_INPUTS)];
    let count_at = out.len();
    out.push(0);
    let mut count = 0u8;
    for (k, (i, view)) in inputs.iter().enumerate() {
        let i = &i[..i.len().min(MAX_INPUT_BYTES)];
        // A view takes at most three bytes.
        if k >= REDUNDANT_INPUTS && out.len() + 1 + i.len() + 3 > INPUT_BYTES_BUDGET {
            break;
        }
        out.push(i.len() as u8);
        out.extend_from_slice(i);
        ViewTime::encode(*view, ack_tick, out);
        count += 1;
    }
    out[count_at] = count;
}

/// Reads an input packet.
///
/// # Errors
/// When it is truncated, claims more inputs or bytes than allowed (over
/// [`MAX_PACKET_INPUTS`], an input over [`MAX_INPUT_BYTES`], or past the first
/// [`REDUNDANT_INPUTS`] an input [`write_input_packet`] leaves out for
/// [`INPUT_BYTES_BUDGET`]), or has a view that no
/// client writes (one without an ack tick to count from, before tick 0, or a form no
/// client uses).
pub fn read_input_packet(b: &[u8]) -> Result<InputPacket<'_>, MalformedInput> {
    let head = b.get(..9).ok_or(MalformedInput)?;
    let ack = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let ack_tick = (ack != u32::MAX).then_some(ack);
    let newest_seq = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let count = head[8] as usize;
    if count > MAX_PACKET_INPUTS {
        return Err(MalformedInput);
    }
    let mut inputs: [&[u8]; MAX_PACKET_INPUTS] = [&[]; MAX_PACKET_INPUTS];
    let mut views = [None; MAX_PACKET_INPUTS];
    let mut at = 9;
    for (k, (slot, view)) in inputs.iter_mut().zip(&mut views).take(count).enumerate() {
        let len = *b.get(at).ok_or(MalformedInput)? as usize;
        // The writer's own rule: past the first REDUNDANT_INPUTS, an input goes only while it
        // fits the budget with a view of the longest form.
        if len > MAX_INPUT_BYTES || (k >= REDUNDANT_INPUTS && at + 1 + len + 3 > INPUT_BYTES_BUDGET) {
            return Err(MalformedInput);
        }
        *slot = b.get(at + 1..at + 1 + len).ok_or(MalformedInput)?;
        at += 1 + len;
        let (v, len) = ViewTime::decode(b.get(at..).ok_or(MalformedInput)?, ack_tick)?;
        *view = v;
        at += len;
    }
    if at != b.len() {
        return Err(MalformedInput);
    }
    Ok(InputPacket { ack_tick, newest_seq, inputs, views, count })
}

/// Remembers which input sequences were applied, so repeats are skipped.
#[derive(Debug, Clone, Default)]
pub struct InputDedup {
    last: Option<u32>,
}

impl InputDedup {
    /// From a packet's inputs (newest first), the new ones, oldest first, with their sequence.
    pub fn fresh<'a>(&mut self, p: &InputPacket<'a>) -> FreshInputs<'a> {
        let none = FreshInput { seq: 0, bytes: &[], view: None };
        let mut out = FreshInputs { items: [none; MAX_PACKET_INPUTS], count: 0 };
        for (k, (input, view)) in p.inputs().iter().zip(p.views()).enumerate().rev() {
            let seq = p.newest_seq.wrapping_sub(k as u32);
            if self.last.is_none_or(|l| seq.wrapping_sub(l) as i32 > 0) {
                out.items[out.count] = FreshInput { seq, bytes: input, view: *view };
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

    fn seqs<'a>(f: &FreshInputs<'a>) -> Vec<(u32, &'a [u8])> {
        f.as_slice().iter().map(|i| (i.seq, i.bytes)).collect()
    }

    #[test]
    fn round_trip_and_dedup() {
        let mut buf = Vec::new();
        write_input_packet(&mut buf, Some(9), 12, &[(b"c", None), (b"b", None), (b"a", None)]);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.ack_tick, Some(9));
        let mut d = InputDedup::default();
        assert_eq!(seqs(&d.fresh(&p)), [(10, &b"a"[..]), (11, &b"b"[..]), (12, &b"c"[..])]);
        write_input_packet(&mut buf, None, 13, &[(b"d", None), (b"c", None), (b"b", None)]);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.ack_tick, None);
        assert_eq!(seqs(&d.fresh(&p)), [(13, &b"d"[..])], "repeats are skipped");
        assert!(read_input_packet(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn a_paced_packet_carries_up_to_sixteen_inputs_within_its_byte_budget() {
        let mut buf = Vec::new();
        let many: Vec<[u8; 2]> = (0..20u8).map(|i| [i, 0]).collect();
        let refs: Vec<(&[u8], Option<ViewTime>)> = many.iter().map(|i| (&i[..], None)).collect();
        write_input_packet(&mut buf, Some(3), 40, &refs);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.inputs().len(), MAX_PACKET_INPUTS, "sixteen of twenty");
        let mut d = InputDedup::default();
        let fresh = d.fresh(&p);
        assert_eq!((fresh.as_slice()[0].seq, fresh.as_slice()[15].seq), (25, 40), "oldest first");
        // More than sixteen is refused.
        let mut bad = buf.clone();
        bad[8] = 17;
        assert!(read_input_packet(&bad).is_err());
        // Large inputs: the first four always, then only while the packet stays in budget.
        let big = [7u8; MAX_INPUT_BYTES];
        let refs: Vec<(&[u8], Option<ViewTime>)> = (0..16).map(|_| (&big[..], None)).collect();
        write_input_packet(&mut buf, Some(3), 40, &refs);
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(p.inputs().len(), 7);
        assert!(buf.len() <= INPUT_BYTES_BUDGET, "{} bytes", buf.len());
        // A packet with an eighth that the writer would have left out is refused (what reads
        // writes back to the same bytes: a fuzzer's finding).
        let mut over = buf.clone();
        over[8] = 8;
        over.push(MAX_INPUT_BYTES as u8);
        over.extend_from_slice(&big);
        over.push(NO_VIEW);
        assert!(read_input_packet(&over).is_err(), "{} bytes", over.len());
    }

    #[test]
    fn views_travel_with_their_inputs_relative_to_the_ack() {
        let mut buf = Vec::new();
        let newest = ViewTime::between(395, 396, 0.5);
        let older = ViewTime::at(394);
        let far = ViewTime::at(100);
        write_input_packet(
            &mut buf,
            Some(400),
            7,
            &[(b"n", Some(newest)), (b"o", Some(older)), (b"f", Some(far)), (b"x", None)],
        );
        let p = read_input_packet(&buf).unwrap();
        assert_eq!(
            p.views(),
            [Some(newest), Some(older), None, None],
            "beyond MAX_VIEW_BACK ticks back a view is dropped"
        );
        let fresh = InputDedup::default().fresh(&p);
        let views: Vec<_> = fresh.as_slice().iter().map(|i| (i.seq, i.view)).collect();
        assert_eq!(views, [(4, None), (5, None), (6, Some(older)), (7, Some(newest))]);
        // Without an ack tick there is nothing to count a view from.
        write_input_packet(&mut buf, None, 7, &[(b"n", Some(newest))]);
        assert_eq!(read_input_packet(&buf).unwrap().views(), [None]);
        // A view after the ack cannot be said either.
        write_input_packet(&mut buf, Some(390), 7, &[(b"n", Some(newest))]);
        assert_eq!(read_input_packet(&buf).unwrap().views(), [None]);
    }

    #[test]
    fn views_no_client_writes_are_refused() {
        let mut buf = Vec::new();
        write_input_packet(&mut buf, Some(3), 1, &[(b"a", Some(ViewTime::at(2)))]);
        let view_at = buf.len() - 1;
        assert!(read_input_packet(&buf).is_ok());
        let with_view = |bytes: &[u8]| {
            let mut b = buf[..view_at].to_vec();
            b.extend_from_slice(bytes);
            read_input_packet(&b).map(|p| p.views().to_vec())
        };
        assert_eq!(with_view(&[NO_VIEW]), Ok(vec![None]));
        assert_eq!(with_view(&[4]), Err(MalformedInput), "a view before tick 0");
        assert_eq!(with_view(&[FORM_SPAN << 6 | 1, 1, 9]), Err(MalformedInput), "a span of one in the long form");
        assert_eq!(with_view(&[FORM_SPAN << 6 | 1, 0, 0]), Err(MalformedInput), "a span of none");
        assert_eq!(with_view(&[3 << 6 | 1]), Err(MalformedInput), "no such form");
        assert_eq!(with_view(&[0x3F]), Err(MalformedInput), "back 63 is only in \"no view\"");
        assert_eq!(with_view(&[FORM_NEXT << 6 | 1]), Err(MalformedInput), "a blend cut short");
        assert_eq!(with_view(&[FORM_NEXT << 6 | 1, 128]), Ok(vec![Some(ViewTime::between(2, 3, 0.5))]));
        let mut no_ack = buf.clone();
        no_ack[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(read_input_packet(&no_ack), Err(MalformedInput), "a view with no ack to count from");
    }

    #[test]
    fn a_view_of_one_snapshot_costs_a_byte_a_blend_of_the_next_two() {
        let size = |view| {
            let mut buf = Vec::new();
            write_input_packet(&mut buf, Some(100), 1, &[(b"", view)]);
            buf.len() - 10
        };
        assert_eq!(size(None), 1);
        assert_eq!(size(Some(ViewTime::at(97))), 1);
        assert_eq!(size(Some(ViewTime::between(97, 98, 0.3))), 2);
        assert_eq!(size(Some(ViewTime::between(97, 99, 0.3))), 3);
    }

    #[test]
    fn a_view_is_a_blend_of_two_ticks() {
        let v = ViewTime::between(10, 12, 0.25);
        assert_eq!((v.from(), v.to()), (10, 12));
        assert!((v.ticks() - 10.5).abs() < 0.01, "{}", v.ticks());
        assert_eq!(ViewTime::between(10, 10, 0.7), ViewTime::at(10), "one snapshot, no blend");
        assert_eq!(ViewTime::between(10, 9, 0.7), ViewTime::at(10));
        assert_eq!(ViewTime::between(10, 11, f32::NAN).alpha(), 0.0);
        assert_eq!(ViewTime::between(10, 11, 7.0).alpha(), 1.0);
        assert_eq!(ViewTime::between(0, u32::MAX, 0.5).to(), 255, "at most 255 ticks apart");
        // Nothing after the newest snapshot the server made.
        assert_eq!(v.not_after(12), v);
        assert_eq!(v.not_after(11), ViewTime::at(10));
        assert_eq!(v.not_after(3), ViewTime::at(3));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = read_input_packet(&b);
        }

        #[test]
        fn packets_round_trip(
            ack in proptest::option::of(0u32..1_000_000),
            seq in any::<u32>(),
            inputs in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT_BYTES), 0u32..300, 0u32..4, 0.0f32..=1.0), 0..=REDUNDANT_INPUTS),
        ) {
            let views: Vec<Option<ViewTime>> = inputs
                .iter()
                .map(|(_, back, span, alpha)| ack.and_then(|a| a.checked_sub(*back)).map(|f| ViewTime::between(f, f + span, *alpha)))
                .collect();
            let refs: Vec<(&[u8], Option<ViewTime>)> = inputs.iter().zip(&views).map(|((b, ..), v)| (&b[..], *v)).collect();
            let mut buf = Vec::new();
            write_input_packet(&mut buf, ack, seq, &refs);
            let p = read_input_packet(&buf).unwrap();
            prop_assert_eq!(p.ack_tick, ack);
            prop_assert_eq!(p.newest_seq, seq);
            prop_assert_eq!(p.inputs().len(), refs.len());
            for ((got, view), (want, sent)) in p.inputs().iter().zip(p.views()).zip(&refs) {
                prop_assert_eq!(got, want);
                // A view goes through unless it starts more than MAX_VIEW_BACK ticks before the ack.
                let expected = sent.filter(|v| ack.is_some_and(|a| a - v.from() <= MAX_VIEW_BACK));
                prop_assert_eq!(view, &expected);
            }
        }
    }
}
