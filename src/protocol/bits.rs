//! Bit-level writer and reader with bounds checks.
//!
//! The writer fills a caller's buffer and never allocates; writing past its end sets a sticky
//! overflow flag that [`BitWriter::finish`] reports, so hot loops need no `Result` per field.
//! The reader returns [`BitError`] past the end of its input and never panics.

/// Reading past the end of the input, or writing past the end of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bit stream ended early or overflowed its buffer")]
pub struct BitError;

/// Writes bits, least significant first, into a byte buffer.
#[derive(Debug)]
pub struct BitWriter<'a> {
    buf: &'a mut [u8],
    /// Bits not yet stored, fewer than 64 between calls (a whole 64 is stored at once).
    scratch: u64,
    scratch_bits: u32,
    pos: usize,
    overflow: bool,
}

impl<'a> BitWriter<'a> {
    /// A writer over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, scratch: 0, scratch_bits: 0, pos: 0, overflow: false }
    }

    /// Bits written so far.
    pub fn bits_written(&self) -> usize {
        self.pos * 8 + self.scratch_bits as usize
    }

    /// Bits that still fit.
    pub fn bits_left(&self) -> usize {
        (self.buf.len() * 8).saturating_sub(self.bits_written())
    }

    /// Whether everything written so far fits (checked eagerly, unlike [`Self::overflowed`],
    /// which notices only when a whole word is flushed).
    pub fn fits(&self) -> bool {
        !self.overflow && self.bits_written() <= self.buf.len() * 8
    }

    /// Writes the low `bits` bits of `value` (0 to 32 bits).
    #[inline]
    pub fn write(&mut self, value: u32, bits: u32) {
        debug_assert!(bits <= 32);
        self.write_long(u64::from(value), bits.min(32));
    }

    /// Writes the low `bits` bits of `value` (0 to 64 bits) at once: a record's id gap, op
    /// and cached field bits go out in one or two calls.
    #[inline]
    pub fn write_long(&mut self, value: u64, bits: u32) {
        debug_assert!(bits <= 64);
        if bits == 0 {
            return;
        }
        let masked = if bits >= 64 { value } else { value & ((1u64 << bits) - 1) };
        let have = self.scratch_bits; // below 64
        self.scratch |= masked << have;
        let total = have + bits;
        if total < 64 {
            self.scratch_bits = total;
            return;
        }
        match self.buf.get_mut(self.pos..self.pos + 8) {
            Some(b) => {
                b.copy_from_slice(&self.scratch.to_le_bytes());
                self.pos += 8;
            }
            None => self.overflow = true,
        }
        // The bits of `masked` that did not fit (none when `have` is 0: shifted in two
        // steps so that no shift reaches 64).
        self.scratch = (masked >> 1) >> (63 - have);
        self.scratch_bits = total - 64;
    }

    /// Writes one bit.
    #[inline]
    pub fn write_bool(&mut self, v: bool) {
        self.write(u32::from(v), 1);
    }

    /// Writes a 64-bit value in two halves.
    pub fn write_u64(&mut self, v: u64) {
        self.write_long(v, 64);
    }

    /// Writes whole bytes (after any bits already written).
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write(u32::from(*b), 8);
        }
    }

    /// Writes `v` in Exp-Golomb code of order `k`: small values take few bits, any `u32` fits.
    /// (Bit order: the zero prefix, the marker 1, then the remaining bits least significant
    /// first, to suit this writer.)
    #[inline]
    pub fn write_golomb(&mut self, v: u32, k: u32) {
        match golomb_code(v, k) {
            Some((code, len)) => self.write_long(code, len),
            None => {
                let n = u64::from(v) + (1u64 << k);
                let len = 64 - n.leading_zeros(); // at least k + 1
                let prefix = len - 1 - k;
                self.write_long(1 << prefix, prefix + 1);
                let rest = len - 1;
                self.write_long(n & ((1u64 << rest) - 1), rest);
            }
        }
    }

    /// Flushes the last partial byte; returns the bytes written.
    ///
    /// # Errors
    /// If anything was written past the end of the buffer.
    pub fn finish(mut self) -> Result<usize, BitError> {
        let bytes = self.scratch_bits.div_ceil(8) as usize;
        if !self.overflow {
            match self.buf.get_mut(self.pos..self.pos + bytes) {
                Some(b) => b.copy_from_slice(&self.scratch.to_le_bytes()[..bytes]),
                None => self.overflow = true,
            }
        }
        if self.overflow { Err(BitError) } else { Ok(self.pos + bytes) }
    }

    /// Whether a write went past the end so far.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }
}

/// The Exp-Golomb code of `v` with order `k` (`k` below 32) as the bits
/// [`BitWriter::write_golomb`] writes, least significant first, and their count, when it
/// fits in 64 bits (every `v` below 2^31 does).
#[inline]
pub(crate) fn golomb_code(v: u32, k: u32) -> Option<(u64, u32)> {
    let n = u64::from(v) + (1u64 << k);
    let len = 64 - n.leading_zeros(); // at least k + 1
    let prefix = len - 1 - k;
    let total = 2 * len - 1 - k;
    // The zero prefix, the marker 1, then the low `len - 1` bits of n.
    let low = n & ((1u64 << (len - 1)) - 1);
    (total <= 64).then(|| (1u64 << prefix | low << (prefix + 1), total))
}

/// Reads bits written by [`BitWriter`].
#[derive(Debug, Clone)]
pub struct BitReader<'a> {
    buf: &'a [u8],
    pos: usize,
    scratch: u64,
    scratch_bits: u32,
}

impl<'a> BitReader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0, scratch: 0, scratch_bits: 0 }
    }

    /// Bits not yet read (including padding of the last byte).
    pub fn bits_left(&self) -> usize {
        (self.buf.len() - self.pos) * 8 + self.scratch_bits as usize
    }

    /// Moves input bytes into the scratch word until it holds more than 56 bits or the input
    /// ends: four at a time while there is room for them, then one at a time.
    #[inline]
    fn refill(&mut self) {
        if self.scratch_bits <= 32
            && let Some(chunk) = self.buf.get(self.pos..self.pos + 4)
        {
            let w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            self.scratch |= u64::from(w) << self.scratch_bits;
            self.scratch_bits += 32;
            self.pos += 4;
        }
        while self.scratch_bits <= 56 {
            let Some(&b) = self.buf.get(self.pos) else { break };
            self.scratch |= u64::from(b) << self.scratch_bits;
            self.scratch_bits += 8;
            self.pos += 1;
        }
    }

    /// Reads `bits` bits (0 to 32).
    ///
    /// # Errors
    /// Past the end of the input.
    #[inline]
    pub fn read(&mut self, bits: u32) -> Result<u32, BitError> {
        debug_assert!(bits <= 32);
        if self.scratch_bits < bits {
            self.refill();
            if self.scratch_bits < bits {
                return Err(BitError);
            }
        }
        let v = (self.scratch & ((1u64 << bits) - 1)) as u32;
        self.scratch >>= bits;
        self.scratch_bits -= bits;
        Ok(v)
    }

    /// Reads one bit.
    ///
    /// # Errors
    /// Past the end of the input.
    #[inline]
    pub fn read_bool(&mut self) -> Result<bool, BitError> {
        Ok(self.read(1)? == 1)
    }

    /// Reads a 64-bit value.
    ///
    /// # Errors
    /// Past the end of the input.
    pub fn read_u64(&mut self) -> Result<u64, BitError> {
        let lo = self.read(32)?;
        let hi = self.read(32)?;
        Ok(u64::from(lo) | u64::from(hi) << 32)
    }

    /// Reads `out.len()` whole bytes.
    ///
    /// # Errors
    /// Past the end of the input.
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<(), BitError> {
        for b in out {
            *b = self.read(8)? as u8;
        }
        Ok(())
    }

    /// Reads an Exp-Golomb code of order `k`.
    ///
    /// # Errors
    /// Past the end of the input, or a code for a value beyond `u32`.
    #[inline]
    pub fn read_golomb(&mut self, k: u32) -> Result<u32, BitError> {
        if self.scratch_bits <= 32 {
            self.refill();
        }
        // The zeros of the prefix, all at once when the terminating one is in the scratch
        // word (bits above `scratch_bits` are always zero).
        let zeros = self.scratch.trailing_zeros();
        let prefix = if zeros < self.scratch_bits {
            if zeros + k > 32 {
                return Err(BitError);
            }
            self.scratch >>= zeros + 1;
            self.scratch_bits -= zeros + 1;
            zeros
        } else {
            let mut prefix = 0u32;
            while !self.read_bool()? {
                prefix += 1;
                if prefix + k > 32 {
                    return Err(BitError);
                }
            }
            prefix
        };
        let rest = prefix + k;
        let low = u64::from(self.read(rest)?);
        let v = (1u64 << rest | low) - (1u64 << k);
        u32::try_from(v).map_err(|_| BitError)
    }
}

/// Maps signed to unsigned so that small magnitudes get small codes: 0, -1, 1, -2, …
#[inline]
pub fn zigzag(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// The inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u32) -> i32 {
    (v >> 1) as i32 ^ -((v & 1) as i32)
}

/// Bits needed to hold values `0..=max`.
pub const fn bits_for(max: u32) -> u32 {
    32 - max.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Bits(u32, u32),
        Golomb(u32, u32),
        U64(u64),
        Long(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..=32)
                .prop_flat_map(|n| (
                    any::<u32>().prop_map(move |v| if n == 32 { v } else { v & ((1 << n) - 1) }),
                    Just(n)
                ))
                .prop_map(|(v, n)| Op::Bits(v, n)),
            (any::<u32>(), 0u32..8).prop_map(|(v, k)| Op::Golomb(v >> (k % 4 * 8), k)),
            any::<u64>().prop_map(Op::U64),
            (any::<u64>(), 0u32..=64).prop_map(|(v, n)| Op::Long(if n == 64 { v } else { v & ((1 << n) - 1) }, n)),
        ]
    }

    proptest! {
        #[test]
        fn everything_written_reads_back(ops in proptest::collection::vec(op(), 0..64)) {
            let mut buf = [0u8; 1024];
            let mut w = BitWriter::new(&mut buf);
            for o in &ops {
                match *o {
                    Op::Bits(v, n) => w.write(v, n),
                    Op::Golomb(v, k) => w.write_golomb(v, k),
                    Op::U64(v) => w.write_u64(v),
                    Op::Long(v, n) => w.write_long(v, n),
                }
            }
            let n = w.finish().unwrap();
            let mut r = BitReader::new(&buf[..n]);
            for o in &ops {
                match *o {
                    Op::Bits(v, n) => prop_assert_eq!(r.read(n).unwrap(), v),
                    Op::Golomb(v, k) => prop_assert_eq!(r.read_golomb(k).unwrap(), v),
                    Op::U64(v) => prop_assert_eq!(r.read_u64().unwrap(), v),
                    Op::Long(v, n) => {
                        let lo = r.read(n.min(32)).unwrap();
                        let hi = r.read(n.saturating_sub(32)).unwrap();
                        prop_assert_eq!(u64::from(lo) | u64::from(hi) << 32, v);
                    }
                }
            }
            prop_assert!(r.bits_left() < 8);
        }

        #[test]
        fn reading_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), k in 0u32..8) {
            let mut r = BitReader::new(&bytes);
            while r.read_golomb(k).is_ok() {}
            let mut r = BitReader::new(&bytes);
            while r.read(13).is_ok() {}
        }

        #[test]
        fn reads_of_arbitrary_bytes_match_a_bit_at_a_time_model(
            // Half the bytes zero: long Exp-Golomb prefixes, and their limit, come up often.
            bytes in proptest::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..48),
            steps in proptest::collection::vec((any::<bool>(), 0u32..=32), 1..40),
        ) {
            let mut r = BitReader::new(&bytes);
            let mut m = Model { bytes: &bytes, bit: 0 };
            for (golomb, n) in steps {
                let (got, want) = if golomb {
                    (r.read_golomb(n % 9), m.golomb(n % 9))
                } else {
                    (r.read(n), m.read(n))
                };
                prop_assert_eq!(got, want);
                if want.is_err() {
                    break;
                }
                prop_assert_eq!(r.bits_left(), bytes.len() * 8 - m.bit);
            }
        }

        #[test]
        fn zigzag_round_trips(v in any::<i32>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    /// The plainest reader: one bit at a time, least significant first.
    struct Model<'a> {
        bytes: &'a [u8],
        bit: usize,
    }

    impl Model<'_> {
        fn bit(&mut self) -> Result<u32, BitError> {
            let b = self.bytes.get(self.bit / 8).ok_or(BitError)?;
            let v = u32::from(b >> (self.bit % 8) & 1);
            self.bit += 1;
            Ok(v)
        }

        fn read(&mut self, n: u32) -> Result<u32, BitError> {
            if self.bit + n as usize > self.bytes.len() * 8 {
                return Err(BitError);
            }
            (0..n).try_fold(0u32, |acc, i| Ok(acc | self.bit()? << i))
        }

        fn golomb(&mut self, k: u32) -> Result<u32, BitError> {
            let mut prefix = 0;
            while self.bit()? == 0 {
                prefix += 1;
                if prefix + k > 32 {
                    return Err(BitError);
                }
            }
            let low = u64::from(self.read(prefix + k)?);
            u32::try_from((1u64 << (prefix + k) | low) - (1u64 << k)).map_err(|_| BitError)
        }
    }

    #[test]
    fn overflow_is_reported_not_panicked() {
        let mut buf = [0u8; 2];
        let mut w = BitWriter::new(&mut buf);
        w.write(0xffff, 16);
        assert!(!w.overflowed());
        w.write(1, 1);
        assert_eq!(w.finish(), Err(BitError));
        let mut r = BitReader::new(&[0xff]);
        assert_eq!(r.read(8), Ok(0xff));
        assert_eq!(r.read(1), Err(BitError));
    }

    /// A whole 64 bits is stored at once: it overflows a buffer exactly when the bits do not
    /// fit, whatever the buffer's length.
    #[test]
    fn long_writes_overflow_exactly_at_the_end() {
        for len in 0..20usize {
            for bits in [1u32, 7, 56, 63, 64, 65, 100, 127, 128, 129, 160] {
                let mut buf = vec![0u8; len];
                let mut w = BitWriter::new(&mut buf);
                let mut left = bits;
                while left > 0 {
                    let n = left.min(64);
                    w.write_long(u64::MAX, n);
                    left -= n;
                }
                let fits = bits as usize <= len * 8;
                assert_eq!(w.fits(), fits, "{bits} bits into {len} bytes");
                assert_eq!(w.finish().is_ok(), fits, "{bits} bits into {len} bytes");
                if fits {
                    let ones = buf.iter().map(|b| b.count_ones()).sum::<u32>();
                    assert_eq!(ones, bits, "every bit written, none past them");
                }
            }
        }
    }

    #[test]
    fn the_golomb_code_is_what_the_writer_writes() {
        for k in 0..8 {
            for v in [0u32, 1, 2, 5, 100, 4095, 65_535, (1 << 30) - 1, (1 << 31) - 1, u32::MAX] {
                let mut a = [0u8; 16];
                let mut w = BitWriter::new(&mut a);
                w.write_golomb(v, k);
                let len = w.bits_written() as u32;
                w.finish().unwrap();
                match golomb_code(v, k) {
                    Some((code, n)) => {
                        assert_eq!(n, len);
                        let mut b = [0u8; 16];
                        let mut w = BitWriter::new(&mut b);
                        w.write_long(code, n);
                        w.finish().unwrap();
                        assert_eq!(a, b, "{v} at order {k}");
                    }
                    None => assert!(len > 64, "{v} at order {k}: {len} bits"),
                }
            }
        }
    }

    #[test]
    fn golomb_code_lengths() {
        let len = |v, k| {
            let mut buf = [0u8; 16];
            let mut w = BitWriter::new(&mut buf);
            w.write_golomb(v, k);
            w.bits_written()
        };
        assert_eq!(len(0, 0), 1);
        assert_eq!(len(1, 0), 3);
        assert_eq!(len(0, 2), 3);
        assert_eq!(len(3, 2), 3);
        assert_eq!(len(4, 2), 5);
        assert_eq!(len(u32::MAX, 0), 65);
        assert_eq!(bits_for(0), 0);
        assert_eq!(bits_for(1), 1);
        assert_eq!(bits_for(511), 9);
    }

    #[test]
    fn an_all_zero_prefix_is_an_error_not_a_loop() {
        let mut r = BitReader::new(&[0u8; 16]);
        assert_eq!(r.read_golomb(0), Err(BitError));
    }
}
