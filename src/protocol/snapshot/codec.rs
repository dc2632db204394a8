//! Bit coding of entity records: full state, and field deltas against a baseline.
//!
//! A changed entity carries a bit per field (when its kind has more than one) saying which
//! fields changed. Each component of a changed field is coded against the baseline's: one bit
//! when it is unchanged, else a selector and either the zigzagged difference in Exp-Golomb
//! code (small moves are cheap) or the raw value (whichever is shorter). Fields declared "at rest" (velocities) spend one bit saying
//! whether they are all zero, and nothing more when they are.

use super::schema::KindSchema;
use crate::protocol::bits::{BitError, BitReader, BitWriter, unzigzag, zigzag};

/// Something bits go into: the writer, or a counter for sizing.
pub(crate) trait Sink {
    fn bits(&mut self, v: u32, n: u32);
    fn golomb(&mut self, v: u32, k: u32);
}

impl Sink for BitWriter<'_> {
    #[inline]
    fn bits(&mut self, v: u32, n: u32) {
        self.write(v, n);
    }
    #[inline]
    fn golomb(&mut self, v: u32, k: u32) {
        self.write_golomb(v, k);
    }
}

/// Counts bits without writing them.
#[derive(Debug, Default)]
pub(crate) struct Counter(pub u32);

impl Sink for Counter {
    #[inline]
    fn bits(&mut self, _: u32, n: u32) {
        self.0 += n;
    }
    #[inline]
    fn golomb(&mut self, v: u32, k: u32) {
        self.0 += golomb_len(v, k);
    }
}

/// Collects an entity's bits in a local word so that the hot loop keeps them in registers,
/// handing whole 32-bit words to the sink.
struct Acc<'s, S: Sink> {
    acc: u64,
    n: u32,
    sink: &'s mut S,
}

impl<'s, S: Sink> Acc<'s, S> {
    #[inline]
    fn new(sink: &'s mut S) -> Self {
        Self { acc: 0, n: 0, sink }
    }

    /// Appends the low `bits` (at most 32) of `v`; `v` must have no higher bits set.
    #[inline]
    fn put(&mut self, v: u32, bits: u32) {
        self.acc |= u64::from(v) << self.n;
        self.n += bits;
        if self.n >= 32 {
            self.sink.bits(self.acc as u32, 32);
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    #[inline]
    fn finish(self) {
        if self.n > 0 {
            self.sink.bits(self.acc as u32, self.n);
        }
    }
}

/// Length of the Exp-Golomb code of `v` with order `k`.
#[inline]
pub(crate) fn golomb_len(v: u32, k: u32) -> u32 {
    let n = u64::from(v) + (1u64 << k);
    2 * (64 - n.leading_zeros()) - 1 - k
}

#[inline]
fn mask(bits: u32) -> u32 {
    if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 }
}

/// The default Exp-Golomb order for deltas of a component `width` bits wide.
#[inline]
pub(crate) fn default_order(width: u32) -> u32 {
    (width / 3).saturating_sub(1)
}

/// The most words a kind may have for per-packet orders.
pub(crate) const MAX_ORDER_WORDS: usize = 64;
/// Bits that carry one per-packet order.
pub(crate) const ORDER_BITS: u32 = 5;
/// Buckets of a residual histogram: the bit length of the residual, 0 to 32.
pub(crate) const BUCKETS: usize = 33;

/// Counts, per component, the bit lengths of the residuals a delta of `cur` against `base`
/// would code (components that move, in fields that changed).
pub(crate) fn residual_histogram(kind: &KindSchema, base: &[u32], cur: &[u32], hist: &mut [[u32; BUCKETS]]) {
    if base.len() != cur.len() || cur.len() != kind.widths.len() || hist.len() < cur.len() {
        return;
    }
    for r in &kind.ranges {
        let (a, b) = (r.start as usize, r.end as usize);
        if words_eq(&base[a..b], &cur[a..b]) || (r.at_rest && cur[a..b].iter().all(|x| *x == 0)) {
            continue;
        }
        for i in a..b {
            if base[i] != cur[i] {
                let z = zigzag(signed_diff(base[i], cur[i], u32::from(kind.widths[i]))) - 1;
                hist[i][(32 - z.leading_zeros()) as usize] += 1;
            }
        }
    }
}

/// The order per component that codes a histogram's residuals shortest, into `out`; returns
/// the bits saved against the kind's default orders (an estimate: each bucket is costed at its
/// middle value).
pub(crate) fn best_orders(kind: &KindSchema, hist: &[[u32; BUCKETS]], out: &mut [u8]) -> u32 {
    let mut saved = 0u32;
    for (i, (h, width)) in hist.iter().zip(&kind.widths).enumerate().take(out.len()) {
        let width = u32::from(*width);
        // The buckets in use, each costed at its middle value.
        let mut used = [(0u32, 0u32); BUCKETS];
        let mut n = 0;
        for (b, count) in h.iter().enumerate().filter(|(_, c)| **c > 0) {
            let z = if b == 0 { 0 } else { (1u32 << (b - 1)) | ((1u32 << (b - 1)) >> 1) };
            used[n] = (z, *count);
            n += 1;
        }
        let used = &used[..n];
        let cost =
            |k: u32| -> u64 { used.iter().map(|(z, c)| u64::from(*c) * u64::from(golomb_len(*z, k).min(width))).sum() };
        let default = default_order(width);
        let base_cost = cost(default);
        let (best, best_cost) = (0..width.min(1 << ORDER_BITS))
            .map(|k| (k, cost(k)))
            .min_by_key(|(_, c)| *c)
            .unwrap_or((default, base_cost));
        out[i] = best as u8;
        saved += u32::try_from(base_cost - best_cost).unwrap_or(u32::MAX);
    }
    saved
}

/// `cur - base` as a signed number of `width` bits (1 to 32).
#[inline]
fn signed_diff(base: u32, cur: u32, width: u32) -> i32 {
    let shift = 32 - width;
    ((cur.wrapping_sub(base) << shift) as i32) >> shift
}

/// `0`: unchanged; `10` + Exp-Golomb(zigzag(delta) - 1): a move; `11` + raw: a jump.
/// A move is assembled into one word and appended at once when it fits in 32 bits.
#[inline]
fn write_component<S: Sink>(base: u32, cur: u32, width: u32, k: u32, a: &mut Acc<'_, S>) {
    if base == cur {
        a.put(0, 1);
        return;
    }
    let z = zigzag(signed_diff(base, cur, width)) - 1;
    let n = u64::from(z) + (1u64 << k);
    let len = 64 - n.leading_zeros(); // Exp-Golomb: prefix zeros, marker, len - 1 low bits
    let golomb = 2 * len - 1 - k;
    if golomb >= width {
        a.put(0b11, 2);
        a.put(cur & mask(width), width);
        return;
    }
    let prefix = len - 1 - k;
    let total = 2 + golomb;
    if total <= 32 {
        // Selector 0b01, `prefix` zeros, the marker 1, then the low `len - 1` bits of n.
        let low = n & ((1u64 << (len - 1)) - 1);
        let code = 0b01 | 1u64 << (2 + prefix) | low << (3 + prefix);
        a.put(code as u32, total);
    } else {
        // Long codes (huge jumps in wide fields) go through the sink's own coder.
        a.put(0b01, 2);
        let n_bits = a.n;
        let acc = a.acc;
        a.sink.bits(acc as u32, n_bits);
        a.acc = 0;
        a.n = 0;
        a.sink.golomb(z, k);
    }
}

#[inline]
fn read_component(base: u32, width: u32, k: u32, r: &mut BitReader<'_>) -> Result<u32, BitError> {
    if !r.read_bool()? {
        return Ok(base);
    }
    if r.read_bool()? {
        return Ok(r.read(width)? & mask(width));
    }
    let z = r.read_golomb(k)?.checked_add(1).ok_or(BitError)?;
    Ok(base.wrapping_add(unzigzag(z) as u32) & mask(width))
}

/// The most words a kind may have for prediction (longer kinds are coded against the
/// baseline alone).
pub(crate) const MAX_PREDICTED_WORDS: usize = 64;

/// Extrapolates each component of `base` linearly from `older` (the client's state
/// `den` ticks before the baseline) to `num` ticks after the baseline:
/// `base + (base - older) · num / den`, rounded, modulo the component's width. Components of
/// one or two bits are selectors (a quaternion's largest index, flags) and keep the base
/// value. Sender and receiver run exactly this integer arithmetic.
pub(crate) fn predict(kind: &KindSchema, base: &[u32], older: &[u32], num: u32, den: u32, out: &mut [u32]) {
    let den = i64::from(den.max(1));
    for (((o, b), old), width) in out.iter_mut().zip(base).zip(older).zip(&kind.widths) {
        let width = u32::from(*width);
        *o = if width <= 2 {
            *b
        } else {
            let q = i64::from(signed_diff(*old, *b, width)) * i64::from(num);
            let off = (2 * q + den).div_euclid(2 * den);
            b.wrapping_add(off as u64 as u32) & mask(width)
        };
    }
}

/// Slice equality without a call into `memcmp` (entities are a few words; the call costs
/// more than the comparison).
#[inline]
pub(crate) fn words_eq(a: &[u32], b: &[u32]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u32;
    for i in 0..a.len() {
        diff |= a[i] ^ b[i];
    }
    diff == 0
}

/// Writes every field in full.
pub(crate) fn write_full<S: Sink>(kind: &KindSchema, words: &[u32], s: &mut S) {
    if words.len() != kind.widths.len() {
        return;
    }
    let mut acc = Acc::new(s);
    for f in &kind.ranges {
        let (a, b) = (f.start as usize, f.end as usize);
        if f.at_rest {
            let rest = words[a..b].iter().all(|c| *c == 0);
            acc.put(u32::from(rest), 1);
            if rest {
                continue;
            }
        }
        for (w, width) in words[a..b].iter().zip(&kind.widths[a..b]) {
            acc.put(*w & mask(u32::from(*width)), u32::from(*width));
        }
    }
    acc.finish();
}

/// Reads a full entity into `out` (the kind's word count).
pub(crate) fn read_full(kind: &KindSchema, r: &mut BitReader<'_>, out: &mut [u32]) -> Result<(), BitError> {
    if out.len() != kind.widths.len() {
        return Err(BitError);
    }
    for f in &kind.ranges {
        let (a, b) = (f.start as usize, f.end as usize);
        if f.at_rest && r.read_bool()? {
            out[a..b].fill(0);
            continue;
        }
        for (w, width) in out[a..b].iter_mut().zip(&kind.widths[a..b]) {
            *w = r.read(u32::from(*width))?;
        }
    }
    Ok(())
}

/// Writes the fields of `cur` that differ from `base`, each component's residual in
/// Exp-Golomb code of the order `orders` gives it (the kind's defaults, or the packet's).
pub(crate) fn write_delta<S: Sink>(kind: &KindSchema, base: &[u32], cur: &[u32], orders: &[u8], s: &mut S) {
    let n = kind.widths.len();
    if base.len() != n || cur.len() != n || orders.len() != n {
        return;
    }
    let many = kind.ranges.len() > 1;
    // One bit a field: which changed (fields ≤ 64 words, so a u64 mask holds them).
    let mut changed = u64::MAX;
    if many {
        changed = 0;
        for (f, r) in kind.ranges.iter().enumerate() {
            let (a, b) = (r.start as usize, r.end as usize);
            changed |= u64::from(!words_eq(&base[a..b], &cur[a..b])) << f;
        }
    }
    let mut acc = Acc::new(s);
    if many {
        let nf = kind.ranges.len() as u32;
        acc.put(changed as u32 & mask(nf.min(32)), nf.min(32));
        if nf > 32 {
            acc.put((changed >> 32) as u32 & mask(nf - 32), nf - 32);
        }
    }
    for (f, r) in kind.ranges.iter().enumerate() {
        if changed >> f & 1 == 0 {
            continue;
        }
        let (a, b) = (r.start as usize, r.end as usize);
        if r.at_rest {
            let rest = cur[a..b].iter().all(|x| *x == 0);
            acc.put(u32::from(rest), 1);
            if rest {
                continue;
            }
        }
        for (((bw, cw), width), k) in base[a..b].iter().zip(&cur[a..b]).zip(&kind.widths[a..b]).zip(&orders[a..b]) {
            write_component(*bw, *cw, u32::from(*width), u32::from(*k), &mut acc);
        }
    }
    acc.finish();
}

/// Reads a delta against `base` into `out` (both the kind's word count).
pub(crate) fn read_delta(
    kind: &KindSchema,
    base: &[u32],
    orders: &[u8],
    r: &mut BitReader<'_>,
    out: &mut [u32],
) -> Result<(), BitError> {
    let n = kind.widths.len();
    if base.len() != n || out.len() != n || orders.len() != n {
        return Err(BitError);
    }
    out.copy_from_slice(base);
    let nf = kind.ranges.len() as u32;
    let mut changed = u64::MAX;
    if nf > 1 {
        changed = u64::from(r.read(nf.min(32))?);
        if nf > 32 {
            changed |= u64::from(r.read(nf - 32)?) << 32;
        }
    }
    for (f, fr) in kind.ranges.iter().enumerate() {
        if changed >> f & 1 == 0 {
            continue;
        }
        let (a, b) = (fr.start as usize, fr.end as usize);
        if fr.at_rest && r.read_bool()? {
            out[a..b].fill(0);
            continue;
        }
        for ((w, width), k) in out[a..b].iter_mut().zip(&kind.widths[a..b]).zip(&orders[a..b]) {
            *w = read_component(*w, u32::from(*width), u32::from(*k), r)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::quant::FieldSpec;
    use proptest::prelude::*;

    fn kind() -> KindSchema {
        KindSchema::new(
            "test",
            vec![
                FieldSpec { components: 3, widths: [18, 18, 14, 0], at_rest: false },
                FieldSpec { components: 4, widths: [2, 9, 9, 9], at_rest: false },
                FieldSpec { components: 3, widths: [11, 11, 11, 0], at_rest: true },
                FieldSpec::single(32),
                FieldSpec::single(1),
            ],
        )
    }

    fn words() -> impl Strategy<Value = Vec<u32>> {
        let k = kind();
        let widths: Vec<u32> = k.fields().iter().flat_map(|f| f.widths().iter().map(|w| u32::from(*w))).collect();
        widths.into_iter().map(|w| any::<u32>().prop_map(move |v| v & mask(w))).collect::<Vec<_>>()
    }

    proptest! {
        #[test]
        fn full_and_delta_round_trip_and_the_counter_agrees(base in words(), cur in words(), rest in any::<bool>()) {
            let k = kind();
            let mut cur = cur;
            if rest {
                cur[9..12].fill(0);
            }
            let mut buf = [0u8; 256];
            let mut w = BitWriter::new(&mut buf);
            write_full(&k, &cur, &mut w);
            let full_bits = w.bits_written() as u32;
            write_delta(&k, &base, &cur, &k.orders, &mut w);
            let delta_bits = w.bits_written() as u32 - full_bits;
            let n = w.finish().unwrap();

            let mut c = Counter::default();
            write_full(&k, &cur, &mut c);
            prop_assert_eq!(c.0, full_bits);
            let mut c = Counter::default();
            write_delta(&k, &base, &cur, &k.orders, &mut c);
            prop_assert_eq!(c.0, delta_bits);

            let mut r = BitReader::new(&buf[..n]);
            let mut out = vec![0u32; k.words()];
            read_full(&k, &mut r, &mut out).unwrap();
            prop_assert_eq!(&out, &cur);
            read_delta(&k, &base, &k.orders, &mut r, &mut out).unwrap();
            prop_assert_eq!(&out, &cur);
        }

        #[test]
        fn small_moves_are_cheap(base in words(), dx in -40i32..40) {
            let k = kind();
            let mut cur = base.clone();
            cur[0] = (cur[0] as i64 + i64::from(dx)).rem_euclid(1 << 18) as u32;
            prop_assume!(cur != base);
            let mut c = Counter::default();
            write_delta(&k, &base, &cur, &k.orders, &mut c);
            // Mask (5 fields), then x: 2 + Exp-Golomb, y and z: 1 bit each.
            prop_assert!(c.0 <= 5 + 2 + 8 + 2, "{} bits for a move of {dx}", c.0);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let k = kind();
            let mut out = vec![0u32; k.words()];
            let base = vec![7u32; k.words()];
            let _ = read_full(&k, &mut BitReader::new(&bytes), &mut out);
            let _ = read_delta(&k, &base, &k.orders, &mut BitReader::new(&bytes), &mut out);
        }
    }

    #[test]
    fn golomb_len_matches_the_writer() {
        for k in 0..6 {
            for v in [0u32, 1, 2, 7, 100, 65_535, u32::MAX] {
                let mut c = Counter::default();
                c.golomb(v, k);
                let mut buf = [0u8; 16];
                let mut w = BitWriter::new(&mut buf);
                w.write_golomb(v, k);
                assert_eq!(c.0 as usize, w.bits_written(), "v={v} k={k}");
            }
        }
    }
}
