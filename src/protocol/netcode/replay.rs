//! Replay protection: a 256-entry window of received sequence numbers (netcode.io 1.02).

/// How many recent sequence numbers the window remembers.
pub const REPLAY_WINDOW: usize = 256;

/// Rejects packets whose sequence was already received or is too old to tell.
///
/// Check with [`ReplayWindow::already_received`] before decrypting (cheap rejection), and call
/// [`ReplayWindow::advance`] only after the packet authenticated, so a forged packet can never
/// move the window.
///
/// The standard describes an array of the last 256 sequence numbers (2 KiB); this keeps one
/// bit per sequence inside the window instead (32 bytes), with the same answers.
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    most_recent: u64,
    /// Bit `s % 256` set: sequence `s` in `most_recent - 255 ..= most_recent` was received.
    received: [u64; REPLAY_WINDOW / 64],
}

fn bit(sequence: u64) -> (usize, u64) {
    let i = sequence as usize % REPLAY_WINDOW;
    (i / 64, 1 << (i % 64))
}

impl ReplayWindow {
    /// An empty window.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when `sequence` was seen already or is older than the window reaches.
    pub fn already_received(&self, sequence: u64) -> bool {
        if sequence.saturating_add(REPLAY_WINDOW as u64) <= self.most_recent {
            return true;
        }
        if sequence > self.most_recent {
            return false;
        }
        let (w, m) = bit(sequence);
        self.received[w] & m != 0
    }

    /// Records an authenticated `sequence`.
    pub fn advance(&mut self, sequence: u64) {
        if sequence > self.most_recent {
            let gap = sequence - self.most_recent;
            if gap >= REPLAY_WINDOW as u64 {
                self.received = [0; REPLAY_WINDOW / 64];
            } else {
                // The slots the window slides over held sequences that are now too old.
                for s in self.most_recent + 1..sequence {
                    let (w, m) = bit(s);
                    self.received[w] &= !m;
                }
            }
            self.most_recent = sequence;
            let (w, m) = bit(sequence);
            self.received[w] &= !m;
        }
        let (w, m) = bit(sequence);
        self.received[w] |= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn rules_of_the_standard() {
        let mut w = ReplayWindow::new();
        assert!(!w.already_received(0));
        w.advance(0);
        assert!(w.already_received(0), "duplicate");
        w.advance(1000);
        assert!(w.already_received(744), "1000 - 256 is too old");
        assert!(!w.already_received(745), "inside the window and never seen");
        w.advance(745);
        assert!(w.already_received(745));
        assert!(!w.already_received(u64::MAX - 1));
    }

    proptest! {
        /// Against a model that remembers everything: a sequence is accepted at most once,
        /// and every sequence inside the window that was never received is accepted.
        #[test]
        fn accepts_each_sequence_at_most_once(seqs in proptest::collection::vec(0u64..2000, 1..600)) {
            let mut w = ReplayWindow::new();
            let mut accepted = BTreeSet::new();
            let mut most_recent = 0u64;
            for s in seqs {
                let rejected = w.already_received(s);
                if accepted.contains(&s) {
                    prop_assert!(rejected, "replayed {s} accepted");
                } else if s + REPLAY_WINDOW as u64 > most_recent {
                    // Inside the window and fresh: an entry can only be shadowed by a newer
                    // sequence with the same index, which would put `s` outside the window.
                    prop_assert!(!rejected, "fresh {s} rejected (most recent {most_recent})");
                }
                if !rejected {
                    w.advance(s);
                    accepted.insert(s);
                    most_recent = most_recent.max(s);
                }
            }
        }
    }
}
