//! The server's live figures, shared by its actors (atomics; a mutex only for the rings of
//! recent tick and input-delay samples). The Prometheus exporter reads these.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const RING: usize = 1024;

/// A ring of recent samples in microseconds.
#[derive(Debug, Default)]
struct Ring {
    samples: Vec<u32>,
    next: usize,
}

impl Ring {
    fn push(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u32::MAX)) as u32;
        if self.samples.len() < RING {
            self.samples.push(us);
        } else {
            self.samples[self.next] = us;
        }
        self.next = (self.next + 1) % RING;
    }

    fn quantile(&self, q: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.samples.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        Duration::from_micros(u64::from(v[i]))
    }
}

/// This process's CPU time (user + system) and resident memory, from `/proc` (Linux);
/// `None` elsewhere.
pub fn process_usage() -> Option<(Duration, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let rss_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // USER_HZ is 100 and pages are 4 KiB on the Linux targets we run on.
    Some((Duration::from_millis(ticks * 10), rss_pages * 4096))
}

/// Counters and recent samples.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    /// Players connected now.
    pub players: AtomicU64,
    /// Connections accepted.
    pub connects: AtomicU64,
    /// Connections ended.
    pub disconnects: AtomicU64,
    /// Ticks run.
    pub ticks: AtomicU64,
    /// Ticks that started so late that the world skipped ahead.
    pub tick_overruns: AtomicU64,
    /// Entities in the last snapshot.
    pub entities: AtomicU64,
    /// Datagrams received.
    pub packets_received: AtomicU64,
    /// Bytes received.
    pub bytes_received: AtomicU64,
    /// Datagrams sent.
    pub packets_sent: AtomicU64,
    /// Bytes sent.
    pub bytes_sent: AtomicU64,
    /// Snapshot bytes sent.
    pub snapshot_bytes: AtomicU64,
    /// Snapshots sent.
    pub snapshots: AtomicU64,
    /// Snapshots sent in full (no usable baseline).
    pub full_snapshots: AtomicU64,
    /// Datagrams dropped: a player's queue was full, or the kernel refused a send.
    pub dropped: AtomicU64,
    /// Handshake packets dropped (bad token, rate limit, …).
    pub handshake_drops: AtomicU64,
    /// Player actors that failed and were cleaned up.
    pub actor_failures: AtomicU64,
    /// Sum of players' smoothed RTT in microseconds (divide by players for the mean).
    pub rtt_sum_us: AtomicU64,
    /// Players summed over ticks (the denominator of per-player-tick costs).
    pub player_ticks: AtomicU64,
    /// Inputs applied at the first tick after they arrived.
    pub inputs_on_time: AtomicU64,
    /// Inputs applied.
    pub inputs_applied: AtomicU64,
    ticks_us: Mutex<Ring>,
    lateness_us: Mutex<Ring>,
    input_delay_us: Mutex<Ring>,
}

impl ServerMetrics {
    /// Records one tick's duration and how late it started.
    pub fn record_tick(&self, took: Duration, lateness: Duration) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.ticks_us.lock() {
            r.push(took);
        }
        if let Ok(mut r) = self.lateness_us.lock() {
            r.push(lateness);
        }
    }

    /// Quantile of how late recent ticks started after their scheduled time.
    pub fn tick_lateness_quantile(&self, q: f64) -> Duration {
        self.lateness_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Records how long an input waited from arrival to being applied, and whether that was
    /// within one tick period.
    pub fn record_input(&self, d: Duration, tick: Duration) {
        self.inputs_applied.fetch_add(1, Ordering::Relaxed);
        if d <= tick {
            self.inputs_on_time.fetch_add(1, Ordering::Relaxed);
        }
        self.record_input_delay(d);
    }

    /// Records how long an input waited from arrival to being applied.
    pub fn record_input_delay(&self, d: Duration) {
        if let Ok(mut r) = self.input_delay_us.lock() {
            r.push(d);
        }
    }

    /// Tick duration quantile over the recent ticks.
    pub fn tick_quantile(&self, q: f64) -> Duration {
        self.ticks_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Input delay quantile over recent inputs.
    pub fn input_delay_quantile(&self, q: f64) -> Duration {
        self.input_delay_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
