//! Delta bits shared between players.
//!
//! Two players whose acknowledged baselines hold an entity in the same world snapshot get
//! the same delta bits for it this tick (with the default Exp-Golomb orders). Each tick's
//! [`WorldSnapshot`](super::WorldSnapshot) therefore keeps, per entity, a few slots of
//! `(baseline snapshot, bits)`: the first player to encode an entity against a baseline
//! fills one, the others copy it. On a server most players' baselines are one or two ticks
//! behind, so most changed entities are coded once a tick instead of once per player.
//!
//! Lock-free and without `unsafe`: a slot is claimed with a compare-and-swap on its tag,
//! filled, then published with a release store; a reader that sees the published tag
//! (acquire) sees the bits. A slot is written once per world snapshot.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots per entity: baselines cached at once for one entity.
const SLOTS: usize = 2;
/// The longest delta cached, in bits.
pub(crate) const MAX_BITS: u32 = 128;
const EMPTY: u64 = 0;
const BUSY: u64 = 1;

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A number no other world snapshot of this process has (or had): the cache key of a
/// baseline. Changes whenever the snapshot's content does.
pub(crate) fn next_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, Ordering::Relaxed)
}

/// What the cache holds for one entity and baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The delta's bits and their length.
    Hit(u128, u32),
    /// Not there; a slot is free for it.
    Miss,
    /// Not there, and every slot holds another baseline (or the cache is not allocated):
    /// code it directly.
    Full,
}

#[derive(Debug, Default)]
struct Slot {
    /// `EMPTY`, `BUSY`, or `(baseline serial << 8) | bit length`.
    tag: AtomicU64,
    bits: [AtomicU64; 2],
}

/// One world snapshot's shared delta bits, allocated on first use.
#[derive(Debug, Default)]
pub(crate) struct DeltaCache {
    slots: OnceLock<Box<[Slot]>>,
}

impl DeltaCache {
    /// A cache with its slots for `entities` allocated now (the server's snapshots: so that
    /// no player's encode allocates them).
    pub(crate) fn with_len(entities: usize) -> Self {
        let c = Self::default();
        c.slots(entities);
        c
    }

    /// Whether any slot was ever allocated.
    pub(crate) fn is_used(&self) -> bool {
        self.slots.get().is_some()
    }

    fn slots(&self, entities: usize) -> &[Slot] {
        self.slots.get_or_init(|| (0..entities * SLOTS).map(|_| Slot::default()).collect())
    }

    /// The bits of entity `index`'s delta against the baseline snapshot `serial`, if some
    /// player stored them; else whether a slot is still free to store them in.
    #[inline]
    pub(crate) fn get(&self, entities: usize, index: usize, serial: u64) -> Lookup {
        if index >= entities {
            return Lookup::Full;
        }
        let Some(slots) = self.slots.get().and_then(|s| s.get(index * SLOTS..(index + 1) * SLOTS)) else {
            return Lookup::Full;
        };
        let mut room = false;
        for s in slots {
            let tag = s.tag.load(Ordering::Acquire);
            if tag > BUSY && tag >> 8 == serial {
                let lo = u128::from(s.bits[0].load(Ordering::Relaxed));
                let hi = u128::from(s.bits[1].load(Ordering::Relaxed));
                return Lookup::Hit(lo | hi << 64, (tag & 0xFF) as u32);
            }
            room |= tag == EMPTY;
        }
        if room { Lookup::Miss } else { Lookup::Full }
    }

    /// Stores entity `index`'s delta bits against the baseline snapshot `serial` in a free
    /// slot, if there is one (else the next player just codes it again).
    pub(crate) fn put(&self, entities: usize, index: usize, serial: u64, bits: u128, len: u32) {
        if index >= entities || len > MAX_BITS || serial >= 1 << 56 {
            return;
        }
        let Some(slots) = self.slots(entities).get(index * SLOTS..(index + 1) * SLOTS) else { return };
        for s in slots {
            if s.tag.compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                s.bits[0].store(bits as u64, Ordering::Relaxed);
                s.bits[1].store((bits >> 64) as u64, Ordering::Relaxed);
                s.tag.store(serial << 8 | u64::from(len), Ordering::Release);
                return;
            }
        }
    }
}

/// A bit sink that keeps up to [`MAX_BITS`] bits, least significant first (the order the
/// bit writer uses), for the cache.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    pub(crate) bits: u128,
    pub(crate) len: u32,
    /// More than `MAX_BITS`, or a code only the writer's own coder produces.
    pub(crate) overflow: bool,
}

impl super::codec::Sink for Capture {
    #[inline]
    fn bits(&mut self, v: u64, n: u32) {
        if self.len + n > MAX_BITS {
            self.overflow = true;
            return;
        }
        let v = if n >= 64 { v } else { v & ((1u64 << n) - 1) };
        self.bits |= u128::from(v) << self.len;
        self.len += n;
    }
    #[inline]
    fn golomb(&mut self, _: u32, _: u32) {
        self.overflow = true;
    }
}

/// Writes captured bits.
#[inline]
pub(crate) fn write_bits(w: &mut crate::protocol::bits::BitWriter<'_>, bits: u128, len: u32) {
    if len <= 64 {
        w.write_long(bits as u64, len);
    } else {
        w.write_long(bits as u64, 64);
        w.write_long((bits >> 64) as u64, len.min(MAX_BITS) - 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_answers_only_for_its_baseline_and_two_baselines_fit() {
        let c = DeltaCache::default();
        assert_eq!(c.get(4, 1, 7), Lookup::Full, "not allocated");
        let c = DeltaCache::with_len(4);
        assert_eq!(c.get(4, 1, 7), Lookup::Miss);
        c.put(4, 1, 7, 0b1011, 4);
        assert_eq!(c.get(4, 1, 9), Lookup::Miss, "one slot left");
        c.put(4, 1, 9, 0xFFFF_FFFF_FFFF_FFFF_FFFF, 80);
        c.put(4, 1, 11, 1, 1); // no slot left: not cached
        assert_eq!(c.get(4, 1, 7), Lookup::Hit(0b1011, 4));
        assert_eq!(c.get(4, 1, 9), Lookup::Hit(0xFFFF_FFFF_FFFF_FFFF_FFFF, 80));
        assert_eq!(c.get(4, 1, 11), Lookup::Full);
        assert_eq!(c.get(4, 2, 7), Lookup::Miss, "another entity");
        assert_eq!(c.get(4, 9, 7), Lookup::Full, "out of range");
        c.put(4, 9, 7, 1, 1); // out of range: ignored
    }

    #[test]
    fn captured_bits_are_what_the_writer_writes() {
        use super::super::codec::Sink;
        let mut cap = Capture::default();
        let mut buf = [0u8; 32];
        let mut direct = crate::protocol::bits::BitWriter::new(&mut buf);
        for (v, n) in [(5u32, 3u32), (0xABCD_EF01, 32), (1, 1), (0x3FF, 10), (0xFFFF_FFFF, 32), (3, 2)] {
            cap.bits(u64::from(v), n);
            direct.write(v, n);
        }
        let n = direct.finish().unwrap();
        let mut buf2 = [0u8; 32];
        let mut copied = crate::protocol::bits::BitWriter::new(&mut buf2);
        write_bits(&mut copied, cap.bits, cap.len);
        let m = copied.finish().unwrap();
        assert!(!cap.overflow);
        assert_eq!(buf[..n], buf2[..m]);
        cap.bits(0, 60);
        assert!(cap.overflow, "past 128 bits");
    }
}
