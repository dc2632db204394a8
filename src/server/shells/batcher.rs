//! Snapshot datagrams leave in batches: `sendmmsg` through [`crate::transport::batch`].
//!
//! Each tick the player actors encode their snapshots in parallel and leave the encrypted
//! datagrams here instead of sending each with a system call of its own. A batch goes out
//! when it is full, or when the last player actor woken for this tick has left its datagram
//! (the broadcaster says how many it woke), so the tail of a tick's fan-out never waits for
//! the next tick. A datagram can wait at most for a batch's worth of other players' encoding;
//! the input-to-effect latency is measured when the datagram actually leaves.
//!
//! Control traffic (keep-alives, handshakes, disconnects) does not come through here: it is
//! rare and must not wait.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::protocol::netcode::Transmit;
use crate::server::ops::metrics::{DatagramDrop, ServerMetrics};
use crate::server::ops::shaping::Shaping;
use crate::transport::batch;

/// One queued datagram.
#[derive(Debug)]
struct Waiting {
    to: SocketAddr,
    bytes: Vec<u8>,
    /// For the input-to-effect latency: the input's way to the world, and when the tick that
    /// applied it started.
    effect: Option<(Duration, Instant)>,
}

/// A batch being filled; its buffers are reused batch after batch.
#[derive(Debug, Default)]
struct Pending {
    items: Vec<Waiting>,
    used: usize,
}

/// The server's batch of outgoing snapshot datagrams.
#[derive(Debug)]
pub(crate) struct SnapshotBatcher {
    socket: Arc<UdpSocket>,
    metrics: Arc<ServerMetrics>,
    batch: usize,
    pending: Mutex<Pending>,
    spare: Mutex<Vec<Pending>>,
    /// Player actors woken for this tick that have not yet left their datagram.
    expected: AtomicI64,
    /// The server tick whose wake-ups `expected` counts.
    tick: std::sync::atomic::AtomicU32,
    /// Players whose downlink is conditioned: their datagrams go there instead.
    shaping: Arc<Shaping>,
}

impl SnapshotBatcher {
    /// A batcher sending on `socket`, `batch` datagrams per system call at most (1: every
    /// datagram is sent as soon as it is left here).
    #[cfg(test)]
    pub(crate) fn new(socket: Arc<UdpSocket>, metrics: Arc<ServerMetrics>, batch: usize) -> Self {
        Self::with_shaping(socket, metrics, batch, Shaping::new())
    }

    /// [`Self::new`], with the players' conditioned links in `shaping`.
    pub(crate) fn with_shaping(
        socket: Arc<UdpSocket>,
        metrics: Arc<ServerMetrics>,
        batch: usize,
        shaping: Arc<Shaping>,
    ) -> Self {
        Self {
            socket,
            metrics,
            batch: batch.clamp(1, batch::BATCH),
            pending: Mutex::new(Pending::default()),
            spare: Mutex::new(Vec::new()),
            expected: AtomicI64::new(0),
            tick: std::sync::atomic::AtomicU32::new(u32::MAX),
            shaping,
        }
    }

    /// Server tick `tick`'s fan-out woke `woken` more player actors. At a new tick, anything
    /// still queued from the last one (an actor that stopped before its turn) goes now and
    /// the count starts again; another world's snapshot of the same tick adds to it.
    pub(crate) fn begin_tick(&self, tick: u32, woken: usize) {
        if self.tick.swap(tick, Ordering::AcqRel) == tick {
            self.expected.fetch_add(woken as i64, Ordering::AcqRel);
            return;
        }
        self.flush();
        self.expected.store(woken as i64, Ordering::Relaxed);
    }

    /// A player actor has handled its wake-up (whether or not it sent anything); the last of
    /// the tick sends what is queued.
    pub(crate) fn done(&self) {
        if self.expected.fetch_sub(1, Ordering::AcqRel) <= 1 {
            self.flush();
        }
    }

    /// Queues one datagram; sends the batch if this filled it.
    fn push(&self, to: SocketAddr, packet: &[u8], effect: Option<(Duration, Instant)>) {
        if self.shaping.take(to, packet) {
            return;
        }
        let full = {
            let Ok(mut p) = self.pending.lock() else { return };
            let i = p.used;
            match p.items.get_mut(i) {
                Some(q) => {
                    q.to = to;
                    q.bytes.clear();
                    q.bytes.extend_from_slice(packet);
                    q.effect = effect;
                }
                None => p.items.push(Waiting { to, bytes: packet.to_vec(), effect }),
            }
            p.used += 1;
            if p.used >= self.batch { Some(self.take(&mut p)) } else { None }
        };
        if let Some(full) = full {
            self.send(full);
        }
    }

    /// Sends whatever is queued.
    pub(crate) fn flush(&self) {
        let taken = match self.pending.lock() {
            Ok(mut p) if p.used > 0 => self.take(&mut p),
            _ => return,
        };
        self.send(taken);
    }

    /// Swaps the filled batch for an empty one (the lock is held by the caller).
    fn take(&self, p: &mut Pending) -> Pending {
        let empty = self.spare.lock().ok().and_then(|mut s| s.pop()).unwrap_or_default();
        std::mem::replace(p, empty)
    }

    fn send(&self, mut full: Pending) {
        let items: Vec<(SocketAddr, &[u8])> =
            full.items[..full.used].iter().map(|q| (q.to, q.bytes.as_slice())).collect();
        let out = batch::send_batch(&self.socket, &items);
        self.metrics.send_calls.fetch_add(out.calls, Ordering::Relaxed);
        self.metrics.record_drop(DatagramDrop::SendFailed, out.dropped);
        let left = Instant::now();
        for q in &full.items[..full.used] {
            if let Some((handling, started)) = q.effect {
                self.metrics.record_input_effect(handling + left.saturating_duration_since(started));
            }
        }
        full.used = 0;
        if let Ok(mut s) = self.spare.lock() {
            // A few spare batches are plenty: at most one is being filled while others send.
            if s.len() < 4 {
                s.push(full);
            }
        }
    }
}

/// A [`Transmit`] that leaves datagrams with the batcher.
#[derive(Debug)]
pub(crate) struct BatchTx<'a> {
    batcher: &'a SnapshotBatcher,
    effect: Option<(Duration, Instant)>,
    /// Datagrams queued.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl<'a> BatchTx<'a> {
    /// Queues on `batcher`; `effect` marks the datagrams as carrying an input's effect.
    pub(crate) fn new(batcher: &'a SnapshotBatcher, effect: Option<(Duration, Instant)>) -> Self {
        Self { batcher, effect, sent: 0, bytes: 0 }
    }
}

impl Transmit for BatchTx<'_> {
    fn send(&mut self, to: SocketAddr, packet: &[u8]) {
        self.batcher.push(to, packet, self.effect);
        self.sent += 1;
        self.bytes += packet.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::batch::RecvBatch;

    async fn drain(sock: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut batch = RecvBatch::default();
        while got.len() < want {
            let ready = tokio::time::timeout(Duration::from_secs(5), sock.readable()).await;
            assert!(ready.is_ok(), "only {} of {want} datagrams arrived", got.len());
            if let Ok(n) = batch.recv(sock) {
                for i in 0..n {
                    got.push(batch.get_mut(i).map(|(b, _)| b.to_vec()).unwrap_or_default());
                }
            }
        }
        got
    }

    #[tokio::test]
    async fn a_tick_goes_out_when_its_last_player_is_done_and_full_batches_go_at_once() {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
        socket.writable().await.expect("writable");
        let client = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let to = client.local_addr().expect("addr");
        let metrics = Arc::new(ServerMetrics::default());
        let b = SnapshotBatcher::new(socket, metrics.clone(), 4);

        // Three players woken: nothing leaves until the third is done.
        b.begin_tick(1, 3);
        for i in 0..2u8 {
            BatchTx::new(&b, None).send(to, &[i; 10]);
            b.done();
        }
        assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 0, "two of three done: still queued");
        BatchTx::new(&b, Some((Duration::from_micros(50), Instant::now()))).send(to, &[2; 10]);
        b.done();
        assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 1);
        assert_eq!(drain(&client, 3).await, vec![vec![0; 10], vec![1; 10], vec![2; 10]]);

        // Nine woken, batch of four: two full batches leave on their own, the last one at the end.
        b.begin_tick(2, 9);
        for i in 0..9u8 {
            BatchTx::new(&b, None).send(to, &[i; 3]);
            assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 1 + u64::from(i + 1) / 4);
            b.done();
        }
        assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 4);
        assert_eq!(drain(&client, 9).await, (0..9u8).map(|i| vec![i; 3]).collect::<Vec<_>>());

        // A player that never got its turn: what the others left goes with the next tick.
        b.begin_tick(3, 2);
        BatchTx::new(&b, None).send(to, &[7; 5]);
        b.done();
        assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 4);
        b.begin_tick(4, 1);
        assert_eq!(metrics.send_calls.load(Ordering::Relaxed), 5);
        assert_eq!(drain(&client, 1).await, vec![vec![7; 5]]);
    }
}
