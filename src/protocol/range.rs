//! A binary adaptive range coder: each coded bit carries a probability that learns from the
//! bits before it, so skewed decisions cost a fraction of a bit.
//!
//! The coder is the classic carry-less-output design with 11-bit probabilities that move 1/32
//! of the way towards each coded bit (the scheme LZMA made familiar), written for this crate.
//! The snapshot codec uses it for the residuals of predicted snapshots, where the same few
//! decisions repeat for every changed entity in a packet. Models start from even odds in
//! every packet, so each packet decodes on its own.
//!
//! The decoder never fails and never reads past its input: bytes beyond the end read as zero.
//! A caller that decodes garbage gets garbage bits and must bound its own loops (the snapshot
//! decoder does: counts come from the bit stream and are checked against its length).

/// Bits of a probability.
const PROB_BITS: u32 = 11;
/// Even odds.
const HALF: u16 = 1 << (PROB_BITS - 1);
/// How fast a probability adapts: it moves 1/2^MOVE of the way per bit.
const MOVE: u32 = 5;
const FAST: u32 = 1;
/// Below this the range is renormalised by a byte.
const TOP: u32 = 1 << 24;

/// The adaptive probability that the next bit is 0, in units of 1/2048.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prob(u16, u16);
// .0: probability of a 0; .1: bits seen so far (saturating), which sets the adaptation rate

impl Default for Prob {
    fn default() -> Self {
        Self(HALF, 0)
    }
}

impl Prob {
    /// Even odds.
    pub const EVEN: Self = Self(HALF, 0);

    #[inline]
    fn p0(self) -> u32 {
        u32::from(self.0)
    }

    #[inline]
    fn update(&mut self, bit: bool) {
        let shift = (31 - (u32::from(self.1) + 2).leading_zeros()).clamp(FAST, MOVE);
        self.1 = self.1.saturating_add(1).min(1000);
        if bit {
            self.0 -= self.0 >> shift;
        } else {
            self.0 += ((1 << PROB_BITS) - self.0) >> shift;
        }
        self.0 = self.0.clamp(31, (1 << PROB_BITS) - 31);
    }
}

/// Writes range-coded bits into a growing buffer.
#[derive(Debug)]
pub struct RangeEncoder {
    low: u64,
    range: u32,
    cache: u8,
    pending: u32,
    first: bool,
    out: Vec<u8>,
}

impl Default for RangeEncoder {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl RangeEncoder {
    /// An encoder appending to `out` (cleared first; its capacity is reused).
    pub fn new(mut out: Vec<u8>) -> Self {
        out.clear();
        Self { low: 0, range: u32::MAX, cache: 0, pending: 1, first: true, out }
    }

    /// Codes `bit` with the adaptive probability `p`, then updates `p`.
    #[inline]
    pub fn bit(&mut self, p: &mut Prob, bit: bool) {
        let bound = (self.range >> PROB_BITS) * p.p0();
        if bit {
            self.low += u64::from(bound);
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        while self.range < TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    /// Codes the low `n` bits of `v` (most significant first) at even odds, unmodelled, up to
    /// eight at a time.
    #[inline]
    pub fn direct(&mut self, v: u32, n: u32) {
        let mut left = n.min(32);
        while left > 0 {
            let k = left.min(8);
            left -= k;
            let chunk = (v >> left) & ((1 << k) - 1);
            self.range >>= k;
            self.low += u64::from(chunk) * u64::from(self.range);
            while self.range < TOP {
                self.range <<= 8;
                self.shift_low();
            }
        }
    }

    /// Codes `v` (`n` ≤ 8 bits, most significant first) through a binary tree of `1 << n`
    /// probabilities (`tree[0]` unused): each bit is modelled in the context of the bits
    /// above it.
    #[inline]
    pub fn tree(&mut self, tree: &mut [Prob], v: u32, n: u32) {
        let mut node = 1usize;
        for i in (0..n).rev() {
            let b = v >> i & 1 == 1;
            if let Some(p) = tree.get_mut(node) {
                self.bit(p, b);
            } else {
                self.direct(u32::from(b), 1);
            }
            node = node * 2 + usize::from(b);
        }
    }

    fn shift_low(&mut self) {
        if self.low < 0xFF00_0000 || self.low >= 1 << 32 {
            let carry = (self.low >> 32) as u8;
            let mut byte = self.cache;
            loop {
                // The very first byte is always zero (the range starts below 2^32): not sent.
                if !self.first {
                    self.out.push(byte.wrapping_add(carry));
                }
                self.first = false;
                byte = 0xFF;
                self.pending -= 1;
                if self.pending == 0 {
                    break;
                }
            }
            self.cache = (self.low >> 24) as u8;
        }
        self.pending += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    /// Bytes written so far (the stream ends up at most five longer).
    pub fn bytes_so_far(&self) -> usize {
        self.out.len()
    }

    /// Ends the stream and returns its bytes (trailing zeros dropped: the decoder reads
    /// zeros past the end).
    pub fn finish(mut self) -> Vec<u8> {
        for _ in 0..5 {
            self.shift_low();
        }
        while self.out.last() == Some(&0) {
            self.out.pop();
        }
        self.out
    }
}

/// Reads range-coded bits from a slice.
#[derive(Debug, Clone)]
pub struct RangeDecoder<'a> {
    data: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> RangeDecoder<'a> {
    /// A decoder over `data` (a stream [`RangeEncoder::finish`] produced).
    pub fn new(data: &'a [u8]) -> Self {
        let mut d = Self { data, pos: 0, range: u32::MAX, code: 0 };
        for _ in 0..4 {
            d.code = d.code << 8 | u32::from(d.next_byte());
        }
        d
    }

    #[inline]
    fn next_byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    #[inline]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.code = self.code << 8 | u32::from(self.next_byte());
        }
    }

    /// Decodes a bit coded with the adaptive probability `p`, then updates `p`.
    #[inline]
    pub fn bit(&mut self, p: &mut Prob) -> bool {
        let bound = (self.range >> PROB_BITS) * p.p0();
        let bit = self.code >= bound;
        if bit {
            self.code -= bound;
            self.range -= bound;
        } else {
            self.range = bound;
        }
        p.update(bit);
        self.normalize();
        bit
    }

    /// Decodes `n` bits coded with [`RangeEncoder::direct`].
    #[inline]
    pub fn direct(&mut self, n: u32) -> u32 {
        let mut v = 0u32;
        let mut left = n.min(32);
        while left > 0 {
            let k = left.min(8);
            left -= k;
            self.range >>= k;
            // A valid stream gives a chunk below 2^k; garbage is clamped to it.
            let chunk = (self.code / self.range).min((1 << k) - 1);
            self.code -= chunk * self.range;
            v = v << k | chunk;
            self.normalize();
        }
        v
    }

    /// Decodes a value coded with [`RangeEncoder::tree`].
    #[inline]
    pub fn tree(&mut self, tree: &mut [Prob], n: u32) -> u32 {
        let mut node = 1usize;
        for _ in 0..n {
            let b = match tree.get_mut(node) {
                Some(p) => self.bit(p),
                None => self.direct(1) == 1,
            };
            node = node * 2 + usize::from(b);
        }
        (node - (1 << n)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Bit(u8, bool),
        Direct(u32, u32),
        Tree(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..4, any::<bool>()).prop_map(|(c, b)| Op::Bit(c, b)),
            (1u32..=32, any::<u32>()).prop_map(|(n, v)| Op::Direct(if n == 32 { v } else { v & ((1 << n) - 1) }, n)),
            (0u32..64).prop_map(Op::Tree),
        ]
    }

    proptest! {
        #[test]
        fn what_is_encoded_decodes(ops in proptest::collection::vec(op(), 0..400)) {
            let mut probs = [Prob::EVEN; 4];
            let mut tree = [Prob::EVEN; 64];
            let mut e = RangeEncoder::default();
            for o in &ops {
                match *o {
                    Op::Bit(c, b) => e.bit(&mut probs[c as usize], b),
                    Op::Direct(v, n) => e.direct(v, n),
                    Op::Tree(v) => e.tree(&mut tree, v, 6),
                }
            }
            let bytes = e.finish();
            let mut probs = [Prob::EVEN; 4];
            let mut tree = [Prob::EVEN; 64];
            let mut d = RangeDecoder::new(&bytes);
            for o in &ops {
                match *o {
                    Op::Bit(c, b) => prop_assert_eq!(d.bit(&mut probs[c as usize]), b),
                    Op::Direct(v, n) => prop_assert_eq!(d.direct(n), v),
                    Op::Tree(v) => prop_assert_eq!(d.tree(&mut tree, 6), v),
                }
            }
        }

        #[test]
        fn garbage_decodes_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut d = RangeDecoder::new(&bytes);
            let mut p = Prob::EVEN;
            let mut tree = [Prob::EVEN; 64];
            for _ in 0..200 {
                d.bit(&mut p);
                d.direct(13);
                d.tree(&mut tree, 6);
            }
        }
    }

    #[test]
    fn skewed_bits_cost_a_fraction_of_a_bit() {
        let mut p = Prob::EVEN;
        let mut e = RangeEncoder::default();
        for i in 0..8000 {
            e.bit(&mut p, i % 50 == 0);
        }
        let bytes = e.finish();
        // 8000 bits with p(1) = 2 %: entropy ≈ 0.14 bits each ≈ 141 bytes; allow the
        // adaptation's overhead, but far below the 1000 bytes of plain bits.
        assert!(bytes.len() < 260, "{} bytes", bytes.len());
    }

    #[test]
    fn even_bits_cost_about_a_bit() {
        let mut e = RangeEncoder::default();
        for i in 0..1000u32 {
            e.direct(i.wrapping_mul(2_654_435_761) >> 7, 17);
        }
        let bytes = e.finish();
        assert!((2120..=2130).contains(&bytes.len()), "{} bytes", bytes.len());
    }

    #[test]
    fn an_empty_stream_is_empty() {
        assert!(RangeEncoder::default().finish().is_empty());
    }
}
