//! Client-side prediction with server reconciliation (opt-in).
//!
//! The client applies its own inputs at once to a local copy of its state; when a snapshot
//! says which of its inputs the server has applied, the prediction restarts from the server's
//! state and replays only the inputs the server has not seen yet.

use std::collections::VecDeque;

/// The inputs sent but not yet known to be applied.
#[derive(Debug, Clone)]
pub struct Reconciler<I> {
    history: VecDeque<(u32, I)>,
    capacity: usize,
}

impl<I: Clone> Reconciler<I> {
    /// Remembers at most `capacity` unacknowledged inputs (a second's worth is plenty).
    pub fn new(capacity: usize) -> Self {
        Self { history: VecDeque::with_capacity(capacity), capacity: capacity.max(1) }
    }

    /// Records an input just sent with sequence `seq` ([`super::GameClient::input_seq`]).
    pub fn record(&mut self, seq: u32, input: I) {
        if self.history.len() == self.capacity {
            self.history.pop_front();
        }
        self.history.push_back((seq, input));
    }

    /// Inputs not yet applied by the server, as far as the client knows.
    pub fn pending(&self) -> usize {
        self.history.len()
    }

    /// The predicted state: `authoritative` (the server's state in a snapshot whose applied
    /// input was `applied`) with every later input replayed through `step`.
    pub fn reconcile<S: Clone>(
        &mut self,
        authoritative: &S,
        applied: Option<u32>,
        mut step: impl FnMut(&mut S, &I),
    ) -> S {
        if let Some(a) = applied {
            while self.history.front().is_some_and(|(s, _)| s.wrapping_sub(a) as i32 <= 0) {
                self.history.pop_front();
            }
        }
        let mut state = authoritative.clone();
        for (_, input) in &self.history {
            step(&mut state, input);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_only_what_the_server_has_not_applied() {
        let mut p = Reconciler::new(8);
        for seq in 1..=5u32 {
            p.record(seq, 10 * seq as i32);
        }
        // The server applied up to 3: its state includes 10 + 20 + 30.
        let s = p.reconcile(&60, Some(3), |s, i| *s += i);
        assert_eq!(s, 60 + 40 + 50);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.reconcile(&150, Some(5), |s, i| *s += i), 150);
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn capacity_bounds_memory() {
        let mut p = Reconciler::new(3);
        for seq in 0..100u32 {
            p.record(seq, ());
        }
        assert_eq!(p.pending(), 3);
    }
}
