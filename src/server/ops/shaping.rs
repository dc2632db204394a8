//! A conditioned downlink for one player of the real server, set and changed while it runs:
//! to try a game, its clients and the send rate ([`SendRate`]) under a slow, lossy or
//! queueing link without touching the client. What the server sends that player (its
//! snapshot datagrams, which carry the reliable messages) passes a [`LinkConditioner`]
//! first: latency, jitter, loss and a bottleneck with a drop-tail queue. Keep-alives and
//! handshakes pass untouched.
//!
//! Set through [`ServerHandle::condition_player`](crate::server::ServerHandle::condition_player)
//! or, where the server allows it ([`ServerConfig::admin_link_control`]), the admin
//! endpoint `POST /players/{id}/link?rate=32000&queue_ms=250&loss=0.02&latency_ms=20`.
//!
//! A player's link, its conditioner and its held datagrams live here, under one lock that
//! only conditioned players' datagrams take: an unconditioned server pays one atomic load a
//! datagram. Delayed datagrams wait in one queue, due first, sent by one task; the queue holds
//! at most [`MAX_HELD`] datagrams (what finds it full is dropped and counted).
//!
//! [`SendRate`]: crate::protocol::reliability::SendRate
//! [`ServerConfig::admin_link_control`]: crate::server::ServerConfig::admin_link_control

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::transport::conditioner::{Bottleneck, LinkConditioner, LinkCounts, LinkProfile};

/// Datagrams held at once for every conditioned player together.
pub(crate) const MAX_HELD: usize = 16_384;

/// How one player's downlink is conditioned: a profile (latency, jitter, loss) and,
/// optionally, a bottleneck (bandwidth and queue). A 256 kbit/s line with a quarter second
/// of buffer and 2 % loss:
///
/// ```
/// use volley::server::PlayerLink;
/// let link = PlayerLink::from_query("rate=32000&queue_ms=250&loss=0.02").unwrap();
/// assert_eq!(link.bottleneck.map(|b| b.bytes_per_second), Some(32_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlayerLink {
    /// Latency, jitter and loss.
    pub profile: LinkProfile,
    /// The narrowest part of the link, if any.
    pub bottleneck: Option<Bottleneck>,
}

impl PlayerLink {
    /// Reads a link from a query string: `rate` (bytes a second; none: no bottleneck),
    /// `queue_ms` (the bottleneck's buffer, 250 by default), `latency_ms`, `jitter_ms` and
    /// `loss` (0 to 1). Anything else, or a value out of range, is an error that says which.
    ///
    /// # Errors
    /// A key it does not know, or a value that is not a number in range.
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut link = Self { profile: LinkProfile::PERFECT, bottleneck: None };
        let mut queue = Duration::from_millis(250);
        let ms = |v: f64, key: &str| {
            if (0.0..=60_000.0).contains(&v) {
                Ok(Duration::from_secs_f64(v / 1e3))
            } else {
                Err(format!("{key} must be between 0 and 60000 (got {v})"))
            }
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let v: f64 = value.parse().map_err(|_| format!("{key}: not a number: {value:?}"))?;
            if !v.is_finite() {
                return Err(format!("{key}: not a number: {value:?}"));
            }
            match key {
                "rate" if (1.0..=1e9).contains(&v) => {
                    link.bottleneck = Some(Bottleneck { bytes_per_second: v as u32, queue });
                }
                "rate" => return Err(format!("rate must be between 1 and 1e9 bytes a second (got {v})")),
                "queue_ms" => queue = ms(v, key)?,
                "latency_ms" => link.profile.latency = ms(v, key)?,
                "jitter_ms" => link.profile.jitter = ms(v, key)?,
                "loss" if (0.0..=1.0).contains(&v) => link.profile.loss = v,
                "loss" => return Err(format!("loss must be between 0 and 1 (got {v})")),
                _ => return Err(format!("unknown setting {key:?} (rate, queue_ms, latency_ms, jitter_ms, loss)")),
            }
        }
        if let Some(b) = &mut link.bottleneck {
            b.queue = queue;
        }
        Ok(link)
    }
}

/// One conditioned player.
#[derive(Debug)]
struct Link {
    player: u32,
    setting: PlayerLink,
    conditioner: LinkConditioner,
    /// Datagrams dropped because the held queue was full.
    overflow: u64,
}

/// A datagram waiting for its time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Delayed {
    due: Instant,
    seq: u64,
    to: SocketAddr,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    links: HashMap<SocketAddr, Link>,
    held: BinaryHeap<Reverse<Delayed>>,
    seq: u64,
}

/// What a player's conditioned link did: its setting and the conditioner's counts.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LinkReport {
    /// The player.
    pub player: u32,
    /// The bottleneck's rate, bytes a second (none: no bottleneck).
    pub rate: Option<u32>,
    /// The bottleneck's buffer, in milliseconds.
    pub queue_ms: Option<f64>,
    /// One-way latency added, milliseconds.
    pub latency_ms: f64,
    /// Jitter, milliseconds.
    pub jitter_ms: f64,
    /// Random loss.
    pub loss: f64,
    /// Datagrams given to the link.
    pub datagrams: u64,
    /// Lost at random.
    pub lost: u64,
    /// Dropped by the bottleneck's full queue.
    pub queue_drops: u64,
    /// Dropped because the server's held queue was full.
    pub overflow: u64,
}

impl Link {
    fn report(&self) -> LinkReport {
        let LinkCounts { datagrams, lost, queue_drops } = self.conditioner.counts();
        let p = &self.setting.profile;
        LinkReport {
            player: self.player,
            rate: self.setting.bottleneck.map(|b| b.bytes_per_second),
            queue_ms: self.setting.bottleneck.map(|b| b.queue.as_secs_f64() * 1e3),
            latency_ms: p.latency.as_secs_f64() * 1e3,
            jitter_ms: p.jitter.as_secs_f64() * 1e3,
            loss: p.loss,
            datagrams,
            lost,
            queue_drops,
            overflow: self.overflow,
        }
    }
}

/// The server's conditioned links (none by default).
#[derive(Debug)]
pub(crate) struct Shaping {
    /// Some link is set: only then does a datagram take the lock.
    active: AtomicBool,
    /// The conditioners' clock starts here.
    epoch: Instant,
    state: Mutex<State>,
    /// A datagram became the first due (or a link changed).
    wake: tokio::sync::Notify,
}

impl Shaping {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            active: AtomicBool::new(false),
            epoch: Instant::now(),
            state: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// Conditions the link to `addr` (player `player`), or takes its conditioning off
    /// (`None`; what it holds still goes out when due). A new setting starts from a fresh
    /// conditioner, its counts at zero.
    pub(crate) fn set(&self, player: u32, addr: SocketAddr, link: Option<PlayerLink>) {
        let Ok(mut s) = self.state.lock() else { return };
        // One link per player: an older address of the same player goes.
        s.links.retain(|a, l| l.player != player || *a == addr);
        match link {
            Some(setting) => {
                let seed = 0x9e37_79b9_7f4a_7c15 ^ u64::from(player).wrapping_mul(0x2545_f491_4f6c_dd1d);
                let mut conditioner = LinkConditioner::new(setting.profile, seed);
                conditioner.set_bottleneck(setting.bottleneck);
                s.links.insert(addr, Link { player, setting, conditioner, overflow: 0 });
            }
            None => {
                s.links.remove(&addr);
            }
        }
        self.active.store(!s.links.is_empty(), Ordering::Release);
    }

    /// Forgets the links of players no longer connected (`connected` says which are).
    pub(crate) fn retain(&self, connected: impl Fn(u32) -> bool) {
        let Ok(mut s) = self.state.lock() else { return };
        s.links.retain(|_, l| connected(l.player));
        self.active.store(!s.links.is_empty(), Ordering::Release);
    }

    /// The conditioned links, by player.
    pub(crate) fn reports(&self) -> Vec<LinkReport> {
        let mut out: Vec<LinkReport> =
            self.state.lock().map(|s| s.links.values().map(Link::report).collect()).unwrap_or_default();
        out.sort_by_key(|r| r.player);
        out
    }

    /// Takes a datagram to `to` if its link is conditioned: true when it is held (or lost),
    /// false when it should go now.
    pub(crate) fn take(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        let first = {
            let Ok(mut guard) = self.state.lock() else { return false };
            let s = &mut *guard;
            let Some(link) = s.links.get_mut(&to) else { return false };
            let now = Instant::now();
            let Some(delay) = link.conditioner.pass(now.saturating_duration_since(self.epoch), bytes.len()) else {
                return true;
            };
            if s.held.len() >= MAX_HELD {
                link.overflow += 1;
                return true;
            }
            let due = now + delay;
            let first = s.held.peek().is_none_or(|Reverse(h)| due < h.due);
            s.seq += 1;
            s.held.push(Reverse(Delayed { due, seq: s.seq, to, bytes: bytes.to_vec() }));
            first
        };
        if first {
            self.wake.notify_one();
        }
        true
    }

    /// The held datagrams that are due, in order, and when the next one is.
    fn due(&self, now: Instant, out: &mut Vec<Delayed>) -> Option<Instant> {
        let Ok(mut s) = self.state.lock() else { return None };
        while s.held.peek().is_some_and(|Reverse(h)| h.due <= now) {
            if let Some(Reverse(h)) = s.held.pop() {
                out.push(h);
            }
        }
        s.held.peek().map(|Reverse(h)| h.due)
    }

    /// Sends held datagrams when they are due, on `socket`, until the task is aborted.
    pub(crate) async fn run(self: Arc<Self>, socket: Arc<UdpSocket>) {
        let mut due = Vec::new();
        loop {
            let next = self.due(Instant::now(), &mut due);
            for h in due.drain(..) {
                // A datagram the kernel will not take now is lost, as on the way.
                let _ = socket.try_send_to(&h.bytes, h.to);
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_every_setting_and_refuses_what_it_does_not_know() {
        let l = PlayerLink::from_query("latency_ms=20&jitter_ms=5&loss=0.02&rate=32000&queue_ms=100").unwrap();
        assert_eq!(l.profile.latency, Duration::from_millis(20));
        assert_eq!(l.profile.jitter, Duration::from_millis(5));
        assert_eq!(l.profile.loss, 0.02);
        assert_eq!(l.bottleneck, Some(Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(100) }));
        assert_eq!(PlayerLink::from_query("").unwrap(), PlayerLink { profile: LinkProfile::PERFECT, bottleneck: None });
        for bad in ["rate=0", "loss=2", "latency_ms=-1", "rate=abc", "speed=3", "loss=NaN", "rate"] {
            assert!(PlayerLink::from_query(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn held_datagrams_leave_when_due_and_a_bottleneck_drops_what_overflows_its_queue() {
        let shaping = Shaping::new();
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(!shaping.take(to, &[0; 10]), "nothing is conditioned: it goes now");
        let link = PlayerLink::from_query("latency_ms=30&rate=10000&queue_ms=50").unwrap();
        shaping.set(7, to, Some(link));
        let t0 = Instant::now();
        // 200 bytes take 20 ms on a 10 000 B/s line: the queue of 50 ms takes three.
        let taken: Vec<bool> = (0..5).map(|_| shaping.take(to, &[1; 200])).collect();
        assert_eq!(taken, [true; 5]);
        let r = shaping.reports();
        assert_eq!((r[0].player, r[0].datagrams, r[0].queue_drops), (7, 5, 2));
        // Due after the latency, 30 ms, plus 20, 40 and 60 ms on the line.
        let mut out = Vec::new();
        let ms = Duration::from_millis;
        let seen: Vec<(usize, bool)> = [40, 60, 85]
            .iter()
            .map(|t| {
                let next = shaping.due(t0 + ms(*t), &mut out);
                (out.len(), next.is_some())
            })
            .collect();
        assert_eq!(seen, [(0, true), (1, true), (2, true)]);
        assert_eq!(shaping.due(t0 + ms(200), &mut out), None);
        assert_eq!(out.len(), 3);
        assert!(out.windows(2).all(|w| w[0].due <= w[1].due), "in the order they are due");
        shaping.set(7, to, None);
        assert!(!shaping.take(to, &[0; 10]) && shaping.reports().is_empty());
    }
}
