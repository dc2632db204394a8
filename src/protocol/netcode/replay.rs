//! Replay protection: a 256-entry window of received sequence numbers (netcode.io 1.02).

/// How many recent sequence numbers the window remembers.
pub const REPLAY_WINDOW: usize = 256;

/// Rejects packets whose sequence was already received or is too old to tell.
///
/// Check with [`ReplayWindow::already_received`] before decrypting (cheap rejection), and call
/// [`ReplayWindow::advance`] only after the packet authenticated, so a forged packet can never
/// move the window.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    most_recent: u64,
    received: [u64; REPLAY_WINDOW],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayWindow {
    /// An empty window.
    pub fn new() -> Self {
        Self { most_recent: 0, received: [u64::MAX; REPLAY_WINDOW] }
    }

    /// True when `sequence` was seen already or is older than the window reaches.
    pub fn already_received(&self, sequence: u64) -> bool {
        if sequence.saturating_add(REPLAY_WINDOW as u64) <= self.most_recent {
            return true;
        }
        let seen = self.received[sequence as usize % REPLAY_WINDOW];
        seen != u64::MAX && seen >= sequence
    }

    /// Records an authenticated `sequence`.
    pub fn advance(&mut self, sequence: u64) {
        if sequence > self.most_recent {
            self.most_recent = sequence;
        }
        self.received[sequence as usize % REPLAY_WINDOW] = sequence;
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
