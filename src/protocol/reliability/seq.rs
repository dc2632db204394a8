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
}

impl<T> SequenceBuffer<T> {
    /// A ring of `size` entries.
    pub fn new(size: usize) -> Self {
        Self { entries: (0..size.max(1)).map(|_| None).collect() }
    }

    fn slot(&self, seq: u16) -> usize {
        seq as usize % self.entries.len()
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
