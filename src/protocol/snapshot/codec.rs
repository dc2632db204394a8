//! Bit coding of entity records: full state, and field deltas against a baseline.
//!
//! A changed entity carries a bit per field (when its kind has more than one) saying which
//! fields changed. Each component of a changed field is coded against the baseline's: one bit
//! when it is unchanged, else a selector and either the zigzagged difference in Exp-Golomb
//! code (small moves are cheap) or the raw value (whichever is shorter). Fields declared "at rest" (velocities) spend one bit saying
//! whether they are all zero, and nothing more when they are.

use super::schema::KindId;
use super::schema::KindSchema;
use crate::protocol::bits::{BitError, BitReader, BitWriter, unzigzag, zigzag};
use crate::protocol::range::{Prob, RangeDecoder, RangeEncoder};

/// Something bits go into: the writer, or a counter for sizing.
pub(crate) trait Sink {
    /// The low `n` bits of `v` (`n` at most 64).
    fn bits(&mut self, v: u64, n: u32);
    fn golomb(&mut self, v: u32, k: u32);
}

impl Sink for BitWriter<'_> {
    #[inline]
    fn bits(&mut self, v: u64, n: u32) {
        self.write_long(v, n);
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
    fn bits(&mut self, _: u64, n: u32) {
        self.0 += n;
    }
    #[inline]
    fn golomb(&mut self, v: u32, k: u32) {
        self.0 += golomb_len(v, k);
    }
}

/// Collects an entity's bits in a local word so that the hot loop keeps them in registers,
/// handing whole 64-bit words to the sink.
struct Acc<'s, S: Sink> {
    /// Fewer than 64 bits between calls.
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
        let have = self.n; // below 64
        self.acc |= u64::from(v) << have;
        let total = have + bits;
        if total < 64 {
            self.n = total;
            return;
        }
        self.sink.bits(self.acc, 64);
        // What of `v` did not fit (none when `have` is 0; no shift reaches 64).
        self.acc = (u64::from(v) >> 1) >> (63 - have);
        self.n = total - 64;
    }

    #[inline]
    fn finish(self) {
        if self.n > 0 {
            self.sink.bits(self.acc, self.n);
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
        a.sink.bits(acc, n_bits);
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
/// one or two bits are selectors (flags) and keep the base value. Rotations (smallest three)
/// are extrapolated as rotations ([`predict_rotation`]). Sender and receiver run exactly this
/// integer arithmetic.
pub(crate) fn predict(kind: &KindSchema, base: &[u32], older: &[u32], num: u32, den: u32, out: &mut [u32]) {
    let n = kind.widths.len();
    if base.len() != n || older.len() != n || out.len() != n {
        return;
    }
    let den_i = i64::from(den.max(1));
    for r in &kind.ranges {
        let (a, b) = (r.start as usize, r.end as usize);
        if r.rotation
            && predict_rotation(&base[a..b], &older[a..b], u32::from(kind.widths[a + 1]), num, den, &mut out[a..b])
        {
            continue;
        }
        for i in a..b {
            let width = u32::from(kind.widths[i]);
            out[i] = if width <= 2 {
                base[i]
            } else {
                let q = i64::from(signed_diff(older[i], base[i], width)) * i64::from(num);
                let off = (2 * q + den_i).div_euclid(2 * den_i);
                base[i].wrapping_add(off as u64 as u32) & mask(width)
            };
        }
    }
}

/// Fixed-point one (2^30).
const ONE: i64 = 1 << 30;
/// 1/√2 in fixed point.
const FRAC_1_SQRT_2: i64 = 759_250_125;

/// A smallest-three rotation's words as a unit quaternion `[x, y, z, w]` in fixed point (the
/// inverse of [`QuatQ`](crate::protocol::quant::QuatQ)'s quantization, in integers).
fn rotation_words(w: &[u32], bits: u32) -> [i64; 4] {
    let steps = i64::from(mask(bits));
    let largest = (w[0] & 3) as usize;
    let mut q = [0i64; 4];
    let mut k = 1;
    let mut sum = 0i64;
    for (i, c) in q.iter_mut().enumerate() {
        if i != largest {
            let v = i64::from(w[k] & mask(bits)).min(steps);
            *c = (2 * v - steps) * FRAC_1_SQRT_2 / steps;
            sum += *c * *c;
            k += 1;
        }
    }
    if sum > ONE * ONE {
        // Words no unit quaternion quantizes to: scaled to unit length, so that products
        // stay in range.
        return normalized(q).unwrap_or([0, 0, 0, ONE]);
    }
    q[largest] = ((ONE * ONE - sum) as u64).isqrt() as i64;
    q
}

/// The Hamilton product `a · b` of fixed-point quaternions `[x, y, z, w]`.
fn quat_mul(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
    let [ax, ay, az, aw] = a;
    let [bx, by, bz, bw] = b;
    [
        (aw * bx + ax * bw + ay * bz - az * by) >> 30,
        (aw * by - ax * bz + ay * bw + az * bx) >> 30,
        (aw * bz + ax * by - ay * bx + az * bw) >> 30,
        (aw * bw - ax * bx - ay * by - az * bz) >> 30,
    ]
}

/// Scales a fixed-point quaternion back to unit length; `None` when it is (nearly) zero.
fn normalized(q: [i64; 4]) -> Option<[i64; 4]> {
    // The length in units of 2^22 (components lose their low 8 bits to keep the squares
    // in range), then each component times 2^30 / length.
    let len = (q.iter().map(|c| (c >> 8) * (c >> 8)).sum::<i64>() as u64).isqrt() as i64;
    (len > 0).then(|| q.map(|c| (c << 22) / len))
}

/// Extrapolates the rotation `base` by the rotation from `older` to it, `num / den` times
/// over, in fixed-point integers (so sender and receiver agree bit for bit on any machine),
/// into `out` in smallest-three words. False (nothing written) when the field's components
/// are too narrow or too wide for this arithmetic.
fn predict_rotation(base: &[u32], older: &[u32], bits: u32, num: u32, den: u32, out: &mut [u32]) -> bool {
    if !(2..=24).contains(&bits) || base.len() != 4 || older.len() != 4 || out.len() != 4 || num > 64 {
        return false;
    }
    let qb = rotation_words(base, bits);
    let qo = rotation_words(older, bits);
    // The step: base · older⁻¹, the shorter way round.
    let [x, y, z, w] = quat_mul(qb, [-qo[0], -qo[1], -qo[2], qo[3]]);
    let mut step = if w < 0 { [-x, -y, -z, -w] } else { [x, y, z, w] };
    if den > 1 {
        // A den-th of it: the vector part scaled down, renormalised (exact enough for the
        // small steps between snapshots).
        let d = i64::from(den);
        step = match normalized([step[0] / d, step[1] / d, step[2] / d, step[3]]) {
            Some(s) => s,
            None => return false,
        };
    }
    let mut p = qb;
    for _ in 0..num {
        p = quat_mul(step, p);
    }
    let Some(p) = normalized(p) else { return false };
    // Back to smallest three, as the quantizer does: the first largest magnitude is dropped.
    let mut largest = 0;
    for i in 1..4 {
        if p[i].abs() > p[largest].abs() {
            largest = i;
        }
    }
    rotation_to_words(p, largest, bits, out);
    true
}

/// A fixed-point unit quaternion as smallest-three words that drop component `largest`
/// (its sign made positive; the other three clamped to ±1/√2, which only a component that is
/// not the largest can exceed).
fn rotation_to_words(p: [i64; 4], largest: usize, bits: u32, out: &mut [u32]) {
    let sign = if p[largest] < 0 { -1 } else { 1 };
    let steps = i64::from(mask(bits));
    out[0] = largest as u32;
    let mut k = 1;
    for (i, c) in p.iter().enumerate() {
        if i != largest {
            // (v + 1/√2) / √2 · steps, rounded: v / √2 + 1/2 in fixed point.
            let t = ((c * sign * FRAC_1_SQRT_2) >> 30) + ONE / 2;
            out[k] = ((t * steps + ONE / 2) >> 30).clamp(0, steps) as u32;
            k += 1;
        }
    }
}

/// The reference for a rotation's three components once the dropped component's index is
/// known: the reference itself when its index is the same, else the reference's rotation
/// re-expressed without component `largest` (so a change of the largest component costs the
/// index and small residuals, not three unrelated numbers).
fn rotation_reference(reference: &[u32], largest: u32, bits: u32) -> [u32; 4] {
    let mut out = [0u32; 4];
    if reference.len() == 4 {
        out.copy_from_slice(reference);
    }
    if out[0] & 3 != largest & 3 && (2..=24).contains(&bits) {
        rotation_to_words(rotation_words(&out, bits), (largest & 3) as usize, bits, &mut out);
    }
    out
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
    // Slices of one known length, indexed by ranges clamped to it: no bounds checks in the
    // loops below.
    let (base, cur, widths, orders) = (&base[..n], &cur[..n], &kind.widths[..n], &orders[..n]);
    let many = kind.ranges.len() > 1;
    // One bit a field: which changed (fields ≤ 64 words, so a u64 mask holds them).
    let mut changed = u64::MAX;
    if many {
        changed = 0;
        for (f, r) in kind.ranges.iter().enumerate() {
            let mut diff = 0u32;
            for i in r.start as usize..(r.end as usize).min(n) {
                diff |= base[i] ^ cur[i];
            }
            changed |= u64::from(diff != 0) << f;
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
        let (a, b) = (r.start as usize, (r.end as usize).min(n));
        if r.at_rest {
            let rest = cur[a.min(b)..b].iter().all(|x| *x == 0);
            acc.put(u32::from(rest), 1);
            if rest {
                continue;
            }
        }
        for i in a..b {
            write_component(base[i], cur[i], u32::from(widths[i]), u32::from(orders[i]), &mut acc);
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

/// One component's models: the residual's bit length (a tree over 0 to 63; 0 is "same as
/// the reference"; for selectors of one or two bits, node 1 is "differs") and the first bit
/// below the leading one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ComponentModel {
    class: [Prob; 64],
    top: Prob,
    /// The residual is zero, by whether the component moved between the prediction's
    /// references: unknown, no, yes.
    zero: [Prob; 3],
    /// The residual is negative, by the direction the component moved between the
    /// references: not at all or unknown, up, down.
    negative: [Prob; 5],
}

impl Default for ComponentModel {
    fn default() -> Self {
        Self { class: [Prob::EVEN; 64], top: Prob::EVEN, zero: [Prob::EVEN; 3], negative: [Prob::EVEN; 5] }
    }
}

/// The models of one kind's deltas in the current packet.
#[derive(Debug, Clone, Default)]
pub(crate) struct KindModels {
    epoch: u32,
    /// Whether an entity is coded against the prediction.
    pub predicted: Prob,
    /// Per field: changed (for a field that did not move between the prediction's
    /// references), all zero ("at rest"), and changed (for one that did).
    fields: Vec<[Prob; 3]>,
    components: Vec<ComponentModel>,
}

/// Adaptive models for a range-coded packet, per kind, reset at the start of every packet
/// (lazily: a kind's models are reset when the packet first uses them).
#[derive(Debug, Default)]
pub(crate) struct Models {
    epoch: u32,
    kinds: Vec<KindModels>,
    /// The records' id gaps.
    pub gap: ComponentModel,
    /// The records' operations: not "changed", then "destroyed" (else created).
    pub op: [Prob; 2],
    /// Per baseline entity passed: whether the next record is at (or, a creation, before)
    /// it. Context: [`flag_context`].
    pub flag: [Prob; 6],
}

/// The context of a baseline entity's record flag: whether the flag before it was set
/// (neighbours change together), and whether the entity moved between the prediction's
/// second reference and the baseline (moving entities keep moving): no reference, still,
/// moved.
pub(crate) fn flag_context(previous: bool, base: &[u32], older: Option<&[u32]>) -> usize {
    let motion = match older {
        None => 0,
        Some(o) if words_eq(o, base) => 1,
        Some(_) => 2,
    };
    usize::from(previous) * 3 + motion
}

impl Models {
    /// Forgets what the previous packet taught.
    pub(super) fn start_packet(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.gap = ComponentModel::default();
        self.op = [Prob::EVEN; 2];
        self.flag = [Prob::EVEN; 6];
        if self.epoch == 0 {
            for k in &mut self.kinds {
                k.epoch = 0;
            }
            self.epoch = 1;
        }
    }

    /// The models of kind `id` (laid out for `kind`) in this packet.
    pub(super) fn kind(&mut self, id: KindId, kind: &KindSchema) -> &mut KindModels {
        let i = usize::from(id);
        if self.kinds.len() <= i {
            self.kinds.resize_with(i + 1, KindModels::default);
        }
        let m = &mut self.kinds[i];
        if m.epoch != self.epoch {
            m.epoch = self.epoch;
            m.predicted = Prob::EVEN;
            m.fields.clear();
            m.fields.resize(kind.ranges.len(), [Prob::EVEN; 3]);
            m.components.clear();
            m.components.resize(kind.widths.len(), ComponentModel::default());
        }
        m
    }
}

/// What the receiver knows of an entity's recent motion: its baseline and, with a second
/// reference for prediction, its state there. Which fields and components moved between the
/// two is context for coding whether they changed again.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Motion<'a> {
    /// The baseline's words.
    pub baseline: &'a [u32],
    /// The second reference's words, if the client has the entity there.
    pub older: Option<&'a [u32]>,
    /// The delta is against the prediction (else against the baseline).
    pub predicted: bool,
}

impl Motion<'_> {
    /// A bit per field (up to 64) that moved; none without a second reference.
    fn fields(&self, kind: &KindSchema) -> u64 {
        let Some(older) = self.older.filter(|o| o.len() == self.baseline.len()) else { return 0 };
        let base = self.baseline;
        let mut moving = 0;
        for (f, r) in kind.ranges.iter().enumerate().take(64) {
            let (a, b) = (r.start as usize, (r.end as usize).min(base.len()));
            moving |= u64::from(!words_eq(&base[a.min(b)..b], &older[a.min(b)..b])) << f;
        }
        moving
    }

    /// Component `i`: whether it moved (0 unknown, 1 still, 2 moved) and which way (0 not
    /// at all or unknown, 1 up, 2 down; a difference of the words as a 32-bit number).
    fn component(&self, i: usize) -> (usize, usize) {
        match (self.older.and_then(|o| o.get(i)), self.baseline.get(i)) {
            (Some(o), Some(b)) if o == b => (1, 0),
            (Some(o), Some(b)) => {
                let up = (b.wrapping_sub(*o) as i32) > 0;
                (2, 1 + usize::from(!up) + 2 * usize::from(!self.predicted))
            }
            _ => (0, 0),
        }
    }
}

/// Bits of a non-zero residual's length in a component `width` bits wide (3 to 32).
#[inline]
fn length_bits(width: u32) -> u32 {
    32 - width.saturating_sub(1).leading_zeros()
}

/// Bits of a residual's length class (0 to 32 fit in six).
const CLASS_BITS: u32 = 6;

#[inline]
fn write_component_rc(
    base: u32,
    cur: u32,
    width: u32,
    (moved, direction): (usize, usize),
    m: &mut ComponentModel,
    e: &mut RangeEncoder,
) {
    if width <= 2 {
        let differs = base != cur;
        e.bit(&mut m.class[1], differs);
        if differs {
            e.direct(cur & mask(width), width);
        }
        return;
    }
    let r = signed_diff(base, cur, width);
    let a = r.unsigned_abs();
    let class = 32 - a.leading_zeros();
    e.bit(&mut m.zero[moved.min(2)], class == 0);
    if class == 0 {
        return;
    }
    // Lengths 1 to `width` (zero has its flag): as many bits as `width - 1` needs.
    e.tree(&mut m.class, class - 1, length_bits(width));
    if class > 0 {
        e.bit(&mut m.negative[direction], r < 0);
        if class > 1 {
            let low = a - (1 << (class - 1));
            e.bit(&mut m.top, low >> (class - 2) & 1 == 1);
            if class > 2 {
                e.direct(low & mask(class - 2), class - 2);
            }
        }
    }
}

#[inline]
fn read_component_rc(
    base: u32,
    width: u32,
    (moved, direction): (usize, usize),
    m: &mut ComponentModel,
    d: &mut RangeDecoder<'_>,
) -> Result<u32, BitError> {
    if width <= 2 {
        return Ok(if d.bit(&mut m.class[1]) { d.direct(width) & mask(width) } else { base });
    }
    if d.bit(&mut m.zero[moved.min(2)]) {
        return Ok(base);
    }
    let class = d.tree(&mut m.class, length_bits(width)) + 1;
    if class > width {
        return Err(BitError);
    }
    let negative = d.bit(&mut m.negative[direction]);
    let mut a = 1u32 << (class - 1);
    if class > 1 {
        a |= u32::from(d.bit(&mut m.top)) << (class - 2);
        if class > 2 {
            a |= d.direct(class - 2);
        }
    }
    let r = if negative { a.wrapping_neg() } else { a };
    Ok(base.wrapping_add(r) & mask(width))
}

/// A quick size of the residuals of `cur` against `base` (the sum of their bit lengths, a
/// selector that differs counts 2): which of two references a range-coded delta prefers.
pub(crate) fn residual_size(kind: &KindSchema, base: &[u32], cur: &[u32]) -> u32 {
    let mut size = 0;
    for ((b, c), width) in base.iter().zip(cur).zip(&kind.widths) {
        let width = u32::from(*width);
        size += if width <= 2 {
            2 * u32::from(b != c)
        } else {
            32 - signed_diff(*b, *c, width).unsigned_abs().leading_zeros()
        };
    }
    size
}

/// Codes an unsigned number (an id gap): its bit length through the model's tree, the bit
/// below the leading one modelled, the rest plain.
pub(crate) fn write_uint_rc(v: u32, m: &mut ComponentModel, e: &mut RangeEncoder) {
    let class = 32 - v.leading_zeros();
    e.tree(&mut m.class, class, CLASS_BITS);
    if class > 1 {
        let low = v - (1 << (class - 1));
        e.bit(&mut m.top, low >> (class - 2) & 1 == 1);
        if class > 2 {
            e.direct(low & mask(class - 2), class - 2);
        }
    }
}

/// Reads a number [`write_uint_rc`] wrote.
pub(crate) fn read_uint_rc(m: &mut ComponentModel, d: &mut RangeDecoder<'_>) -> Result<u32, BitError> {
    let class = d.tree(&mut m.class, CLASS_BITS);
    if class == 0 {
        return Ok(0);
    }
    if class > 32 {
        return Err(BitError);
    }
    let mut v = 1u32 << (class - 1);
    if class > 1 {
        v |= u32::from(d.bit(&mut m.top)) << (class - 2);
        if class > 2 {
            v |= d.direct(class - 2);
        }
    }
    Ok(v)
}

/// [`write_delta`] through the range coder with the kind's adaptive models.
pub(crate) fn write_delta_rc(
    kind: &KindSchema,
    base: &[u32],
    cur: &[u32],
    motion: Motion<'_>,
    m: &mut KindModels,
    e: &mut RangeEncoder,
) {
    let moving = motion.fields(kind);
    let n = kind.widths.len();
    if base.len() != n || cur.len() != n || m.components.len() != n || m.fields.len() != kind.ranges.len() {
        return;
    }
    let many = kind.ranges.len() > 1;
    for (f, r) in kind.ranges.iter().enumerate() {
        let (a, b) = (r.start as usize, r.end as usize);
        if many {
            let changed = !words_eq(&base[a..b], &cur[a..b]);
            e.bit(&mut m.fields[f][if moving >> f & 1 == 1 { 2 } else { 0 }], changed);
            if !changed {
                continue;
            }
        }
        if r.at_rest {
            let rest = cur[a..b].iter().all(|x| *x == 0);
            e.bit(&mut m.fields[f][1], rest);
            if rest {
                continue;
            }
        }
        let rotation: [u32; 4];
        let reference = if r.rotation && b - a == 4 {
            // The dropped component's index first, then the rest against the reference as
            // seen with that index.
            write_component_rc(
                base[a],
                cur[a],
                u32::from(kind.widths[a]),
                motion.component(a),
                &mut m.components[a],
                e,
            );
            rotation = rotation_reference(&base[a..b], cur[a], u32::from(kind.widths[a + 1]));
            &rotation[..]
        } else {
            &base[a..b]
        };
        let skip = usize::from(r.rotation && b - a == 4);
        let comps = reference.iter().zip(&cur[a..b]).zip(&kind.widths[a..b]).zip(&mut m.components[a..b]).enumerate();
        for (i, (((bw, cw), width), c)) in comps.skip(skip) {
            write_component_rc(*bw, *cw, u32::from(*width), motion.component(a + i), c, e);
        }
    }
}

/// Reads a delta [`write_delta_rc`] wrote against `base` into `out`.
pub(crate) fn read_delta_rc(
    kind: &KindSchema,
    base: &[u32],
    motion: Motion<'_>,
    m: &mut KindModels,
    d: &mut RangeDecoder<'_>,
    out: &mut [u32],
) -> Result<(), BitError> {
    let moving = motion.fields(kind);
    let n = kind.widths.len();
    if base.len() != n || out.len() != n || m.components.len() != n || m.fields.len() != kind.ranges.len() {
        return Err(BitError);
    }
    out.copy_from_slice(base);
    let many = kind.ranges.len() > 1;
    for (f, r) in kind.ranges.iter().enumerate() {
        let (a, b) = (r.start as usize, r.end as usize);
        if many && !d.bit(&mut m.fields[f][if moving >> f & 1 == 1 { 2 } else { 0 }]) {
            continue;
        }
        if r.at_rest && d.bit(&mut m.fields[f][1]) {
            out[a..b].fill(0);
            continue;
        }
        let mut reference = [0u32; 4];
        let skip = usize::from(r.rotation && b - a == 4);
        if skip == 1 {
            out[a] =
                read_component_rc(base[a], u32::from(kind.widths[a]), motion.component(a), &mut m.components[a], d)?;
            reference = rotation_reference(&base[a..b], out[a], u32::from(kind.widths[a + 1]));
        }
        let comps = out[a..b].iter_mut().zip(&kind.widths[a..b]).zip(&mut m.components[a..b]).enumerate().skip(skip);
        for (i, ((w, width), c)) in comps {
            let from = if skip == 1 { reference[i] } else { *w };
            *w = read_component_rc(from, u32::from(*width), motion.component(a + i), c, d)?;
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
                FieldSpec { components: 3, widths: [18, 18, 14, 0], at_rest: false, rotation: false },
                FieldSpec { components: 4, widths: [2, 9, 9, 9], at_rest: false, rotation: true },
                FieldSpec { components: 3, widths: [11, 11, 11, 0], at_rest: true, rotation: false },
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

            // The range-coded form, twice in one packet (the models learn in between).
            let mut models = Models::default();
            models.start_packet();
            let mut e = RangeEncoder::default();
            write_delta_rc(&k, &base, &cur, Motion::default(), models.kind(0, &k), &mut e);
            write_delta_rc(&k, &cur, &base, Motion::default(), models.kind(0, &k), &mut e);
            let bytes = e.finish();
            models.start_packet();
            let mut d = RangeDecoder::new(&bytes);
            read_delta_rc(&k, &base, Motion::default(), models.kind(0, &k), &mut d, &mut out).unwrap();
            prop_assert_eq!(&out, &cur);
            read_delta_rc(&k, &cur, Motion::default(), models.kind(0, &k), &mut d, &mut out).unwrap();
            prop_assert_eq!(&out, &base);
        }

        #[test]
        fn numbers_round_trip_through_the_range_coder(vs in proptest::collection::vec(any::<u32>().prop_map(|v| v >> (v % 32)), 0..50)) {
            let mut m = ComponentModel::default();
            let mut e = RangeEncoder::default();
            for v in &vs {
                write_uint_rc(*v, &mut m, &mut e);
            }
            let bytes = e.finish();
            let mut m = ComponentModel::default();
            let mut d = RangeDecoder::new(&bytes);
            for v in &vs {
                prop_assert_eq!(read_uint_rc(&mut m, &mut d).unwrap(), *v);
            }
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
            let mut models = Models::default();
            models.start_packet();
            let mut d = RangeDecoder::new(&bytes);
            for _ in 0..8 {
                let _ = read_delta_rc(&k, &base, Motion::default(), models.kind(0, &k), &mut d, &mut out);
            }
        }
    }

    proptest! {
        #[test]
        fn a_steady_spin_is_predicted_within_a_step_or_two(
            axis in (-1.0f32..1.0, -1.0f32..1.0, -1.0f32..1.0),
            start in (-1.0f32..1.0, -1.0f32..1.0, -1.0f32..1.0, 0.1f32..1.0),
            rate in 0.0f32..0.08,
            ahead in 1u32..8,
            behind in 1u32..4,
        ) {
            use crate::protocol::quant::{QuatQ, Quantizer};
            use glam::{Quat, Vec3};
            let axis = Vec3::new(axis.0, axis.1, axis.2);
            prop_assume!(axis.length() > 0.1);
            let q0 = Quat::from_xyzw(start.0, start.1, start.2, start.3).normalize();
            let at = |t: u32| Quat::from_axis_angle(axis.normalize(), rate * t as f32) * q0;
            let quant = QuatQ::new(9);
            let words = |q: Quat| {
                let mut w = [0u32; 4];
                quant.quantize(&q, &mut w);
                w
            };
            let (older, base, truth) = (words(at(0)), words(at(behind)), words(at(behind + ahead)));
            let mut out = [0u32; 4];
            prop_assert!(predict_rotation(&base, &older, 9, ahead, behind, &mut out));
            // Compare as rotations: the angle between prediction and truth, against the
            // quantizer's error (up to ~0.007 rad a rotation at 9 bits) in the truth, the
            // base, and the step amplified by the extrapolation. Not predicting at all would
            // be off by `rate * ahead` (up to 0.56 rad).
            let (p, t) = (quant.dequantize(&out), quant.dequantize(&truth));
            let angle = 2.0 * p.dot(t).abs().min(1.0).acos();
            let allowed = 0.007 * (2.0 + 2.0 * ahead as f32 / behind as f32) + 0.02 * rate * ahead as f32;
            prop_assert!(angle <= allowed, "off by {angle} rad (allowed {allowed})");
        }

        #[test]
        fn rotation_prediction_takes_any_words(base in any::<[u32; 4]>(), older in any::<[u32; 4]>(), num in 0u32..70, den in 0u32..70, bits in 0u32..33) {
            let mut out = [0u32; 4];
            if predict_rotation(&base, &older, bits, num, den, &mut out) {
                prop_assert!(out[0] < 4 && out[1..].iter().all(|c| *c <= mask(bits)));
            }
        }
    }

    #[test]
    fn a_rotation_whose_largest_component_changes_is_coded_against_itself_re_expressed() {
        use crate::protocol::quant::{Quantizer, QuatQ};
        use glam::Quat;
        let quant = QuatQ::new(9);
        let words = |q: Quat| {
            let mut w = [0u32; 4];
            quant.quantize(&q, &mut w);
            w
        };
        // y is largest before, x after a small turn.
        let before = words(Quat::from_xyzw(0.69, 0.70, 0.1, 0.12).normalize());
        let after = words(Quat::from_xyzw(0.71, 0.68, 0.1, 0.12).normalize());
        assert_eq!((before[0], after[0]), (1, 0));
        let re = rotation_reference(&before, after[0], 9);
        assert_eq!(re[0], 0);
        for i in 1..4 {
            let d = (i64::from(re[i]) - i64::from(after[i])).abs();
            assert!(d <= 12, "component {i}: {} against {} (before: {:?})", re[i], after[i], before);
        }
        // Same index: the reference is left as it is.
        assert_eq!(rotation_reference(&before, 1, 9), before);
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
