//! 16-bit sequence numbers that wrap, and a ring buffer indexed by them.

/// Whether `a` is newer than `b`, treating the 16-bit space as a circle.
#[inline]
pub fn newer(a: u16, b: u16) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000
}

/// A fixed-size ring of entries keyed by sequence number; an entry is replaced by any newer
/// sequence that maps to its slot.
#[derive(Debug, Clone)]
pub struct SequenceBuffer<T> {
    entries: Vec<Option<(u16, T)>>,
    /// `entries.len() - 1`; the length is a power of two, so a slot is a mask, not a division
    /// (a division per lookup was half of building a packet: 32 lookups for the ack field).
    mask: usize,
}

impl<T> SequenceBuffer<T> {
    /// A ring of at least `size` entries (the next power of two, at most 2^16: sequence
    /// numbers then map to slots the same way on both sides of their wrap).
    pub fn new(size: usize) -> Self {
        let n = size.clamp(1, 1 << 16).next_power_of_two();
        Self { entries: (0..n).map(|_| None).collect(), mask: n - 1 }
    }

    #[inline]
    fn slot(&self, seq: u16) -> usize {
        seq as usize & self.mask
    }

    /// Stores `value` for `seq`.
    pub fn insert(&mut self, seq: u16, value: T) {
        let slot = self.slot(seq);
        self.entries[slot] = Some((seq, value));
    }

    /// The entry for exactly `seq`.
    pub fn get(&self, seq: u16) -> Option<&T> {
        match &self.entries[self.slot(seq)] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// The entry for exactly `seq`, mutably.
    pub fn get_mut(&mut self, seq: u16) -> Option<&mut T> {
        let slot = self.slot(seq);
        match &mut self.entries[slot] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }

    /// Empties the slots of the `count` sequences from `first` on (at most the whole ring):
    /// what a newer sequence skipped over must not be found there from an earlier lap.
    pub fn clear_from(&mut self, first: u16, count: usize) {
        for k in 0..count.min(self.entries.len()) {
            let slot = self.slot(first.wrapping_add(k as u16));
            self.entries[slot] = None;
        }
    }

    /// Removes and returns the entry for `seq`.
    pub fn remove(&mut self, seq: u16) -> Option<T> {
        let slot = self.slot(seq);
        match self.entries[slot].take() {
            Some((s, v)) if s == seq => Some(v),
            other => {
                self.entries[slot] = other;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_comparison() {
        assert!(newer(1, 0));
        assert!(newer(0, 65_535));
        assert!(!newer(65_535, 0));
        assert!(!newer(5, 5));
        assert!(newer(100, 65_000));
    }

    #[test]
    fn sequences_closer_than_the_ring_never_share_a_slot_across_the_wrap() {
        // Asked for 100, the ring holds 128: any 128 consecutive sequences, wrap or not, have
        // slots of their own (with 100 slots, 65 500 and 0 would share one).
        let mut b = SequenceBuffer::new(100);
        for i in 0..128u16 {
            b.insert(65_500u16.wrapping_add(i), i);
        }
        for i in 0..128u16 {
            assert_eq!(b.get(65_500u16.wrapping_add(i)), Some(&i));
        }
    }

    #[test]
    fn ring_keys_by_exact_sequence() {
        let mut b = SequenceBuffer::new(4);
        b.insert(1, "a");
        assert_eq!(b.get(1), Some(&"a"));
        assert_eq!(b.get(5), None, "same slot, other sequence");
        b.insert(5, "b");
        assert_eq!(b.get(1), None);
        assert_eq!(b.remove(1), None);
        assert_eq!(b.remove(5), Some("b"));
        assert_eq!(b.get(5), None);
    }
}
