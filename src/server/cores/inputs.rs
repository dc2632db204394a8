//! The players' inputs on their way to a world: each input inline ([`ClientInput`]), the
//! world's bounded queue that player actors push to and the world empties at each tick
//! ([`InputQueue`]), and what a tick did with them ([`TickInputs`]). Sans-IO: no actor here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::protocol::input::{MAX_INPUT_BYTES, ViewTime};
use crate::server::game::world::PlayerId;

/// What a tick did with the players' inputs.
#[derive(Debug, Clone)]
pub(crate) struct TickInputs {
    /// Per player, the sequence of the newest input applied by this tick (sorted by player).
    pub newest: Vec<(PlayerId, u32)>,
    /// Per player whose input this tick applied (sorted by player): how long the newest of
    /// them took from arriving at the socket to reaching the world, before the tick began.
    pub fresh: Vec<(PlayerId, Duration)>,
    /// When the tick began.
    pub started: Instant,
}

/// A tick's [`TickInputs`], shared by every player actor.
pub(crate) type AppliedInputs = Arc<TickInputs>;

/// One input on its way to the world. Its bytes are held inline (at most
/// [`MAX_INPUT_BYTES`], as on the wire), so queueing one allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct ClientInput {
    /// Who sent it.
    pub player: PlayerId,
    /// Its sequence number.
    pub seq: u32,
    /// What the client was drawing when it made it.
    pub view: Option<ViewTime>,
    /// When its datagram arrived at the socket.
    pub arrived: Instant,
    bytes: [u8; MAX_INPUT_BYTES],
    len: u8,
    /// Not an input but a message from the client (its bytes, reliable or an event).
    pub message: Option<(Bytes, bool)>,
}

impl ClientInput {
    /// An input of `bytes` (cut to [`MAX_INPUT_BYTES`]; the wire carries no more).
    pub(crate) fn new(player: PlayerId, seq: u32, bytes: &[u8], view: Option<ViewTime>, arrived: Instant) -> Self {
        let len = bytes.len().min(MAX_INPUT_BYTES);
        let mut inline = [0u8; MAX_INPUT_BYTES];
        inline[..len].copy_from_slice(&bytes[..len]);
        Self { player, seq, view, arrived, bytes: inline, len: len as u8, message: None }
    }

    /// A message from the client for the world, queued among its inputs.
    pub(crate) fn message(player: PlayerId, data: Bytes, reliable: bool, arrived: Instant) -> Self {
        Self {
            player,
            seq: 0,
            view: None,
            arrived,
            bytes: [0; MAX_INPUT_BYTES],
            len: 0,
            message: Some((data, reliable)),
        }
    }

    /// The input as the client encoded it.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(MAX_INPUT_BYTES)]
    }
}

/// Inputs the player actors hand to the world without going through its mailbox: the world
/// takes them all at the start of each tick. Under load the world's mailbox then carries only
/// ticks, joins and leaves, so inputs never wait behind thousands of messages (each player
/// actor pushes its own inputs in order, so per-player order holds).
///
/// Bounded: a world that stalls (a blocking tick) does not let inputs pile up without limit;
/// past the limit new inputs are refused, and the player actor counts them
/// (`volley_inputs_dropped_total`). Clients repeat their recent inputs, so once the world runs
/// again most refused ones arrive anyway.
#[derive(Debug, Clone)]
pub(crate) struct InputQueue {
    queue: Arc<std::sync::Mutex<Vec<Arrival>>>,
    limit: usize,
    /// Times the world has taken the queue: the tick round client messages are counted in.
    rounds: Arc<std::sync::atomic::AtomicU64>,
}

/// A queued input and when it was queued.
type Arrival = (ClientInput, Instant);

impl Default for InputQueue {
    /// Room for 64 Ki inputs.
    fn default() -> Self {
        Self::new(64 * 1024)
    }
}

impl InputQueue {
    /// A queue that holds at most `limit` inputs between two ticks.
    pub(crate) fn new(limit: usize) -> Self {
        Self { queue: Arc::default(), limit: limit.max(1), rounds: Arc::default() }
    }

    /// Times the world has taken the queue (a player's messages are counted per round).
    pub(crate) fn round(&self) -> u64 {
        self.rounds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues one input for the next tick, and says in which round ([`InputQueue::round`])
    /// it was queued: exactly, as the round changes only under the queue's lock (a player
    /// that read the round before a tick began learns here that its input went to the next).
    /// `None` (and nothing queued) when the queue is full.
    pub(crate) fn push(&self, input: ClientInput) -> Option<u64> {
        match self.queue.lock() {
            Ok(mut q) if q.len() < self.limit => {
                q.push((input, Instant::now()));
                Some(self.round())
            }
            _ => None,
        }
    }

    /// Moves every queued input into `out`, with how long it took from the socket to here.
    pub(crate) fn drain_into(&self, out: &mut Vec<(ClientInput, Duration)>) {
        if let Ok(mut q) = self.queue.lock() {
            // Under the lock: what was pushed in the round before is what is taken now.
            self.rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            out.extend(q.drain(..).map(|(i, queued)| {
                let waited = queued.saturating_duration_since(i.arrived);
                (i, waited)
            }));
        }
    }
}

#[cfg(test)]
mod input_queue_tests {
    use super::*;

    #[test]
    fn a_full_queue_refuses_inputs_until_the_world_drains_it() {
        let q = InputQueue::new(3);
        let at = Instant::now();
        let pushed: Vec<bool> =
            (0..5u32).map(|seq| q.push(ClientInput::new(1, seq, &[seq as u8], None, at)).is_some()).collect();
        assert_eq!(pushed, [true, true, true, false, false]);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out.iter().map(|(i, _)| i.seq).collect::<Vec<_>>(), [0, 1, 2], "the oldest kept, in order");
        assert_eq!(out[2].0.bytes(), [2], "the bytes travel with it");
        let mut again = Vec::new();
        q.drain_into(&mut again);
        assert!(again.is_empty(), "drained");
        assert!(q.push(ClientInput::new(1, 5, &[5], None, at)).is_some(), "room again after a tick");
        let long = ClientInput::new(2, 6, &[9; MAX_INPUT_BYTES + 10], None, at);
        assert_eq!(long.bytes().len(), MAX_INPUT_BYTES, "no more than the wire carries");
    }
}
