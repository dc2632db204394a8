//! The figures on hot paths: a counter with a slot per thread ([`Tally`]), histograms recorded for every snapshot and input without a lock ([`HotHistogram`]), and the ring of recent samples behind the quantiles.

use metrics::Histogram;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub(super) const RING: usize = 1024;

/// A ring of recent samples in microseconds (for the CLI's quantiles).
#[derive(Debug, Default)]
pub(super) struct Ring {
    samples: Vec<u32>,
    next: usize,
}

impl Ring {
    pub(super) fn push(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u32::MAX)) as u32;
        if self.samples.len() < RING {
            self.samples.push(us);
        } else {
            self.samples[self.next] = us;
        }
        self.next = (self.next + 1) % RING;
    }

    pub(super) fn quantile(&self, q: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.samples.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        Duration::from_micros(u64::from(v[i]))
    }
}

/// Slots a [`Tally`] spreads its additions over: as many as the threads that add on hot
/// paths at once (the runtime's workers), so that each mostly has one to itself.
pub(super) const TALLY_SLOTS: usize = 4;

/// A counter that several threads add to on hot paths (every datagram, every snapshot):
/// each thread adds to a slot of its own, on a cache line of its own, and a read sums the
/// slots. One shared atomic would send its cache line from core to core on every addition
/// (about 15 times a player-tick).
#[derive(Debug, Default)]
pub(crate) struct Tally([Padded; TALLY_SLOTS]);

/// One slot of a [`Tally`], alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded(AtomicU64);

pub(super) static NEXT_TALLY_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot in every [`Tally`] (threads take them in turn).
    static TALLY_SLOT: usize = NEXT_TALLY_SLOT.fetch_add(1, Ordering::Relaxed) % TALLY_SLOTS;
}

impl Tally {
    /// Adds `n` (the same signature as an atomic's, so either reads alike at a call site).
    #[inline]
    pub(crate) fn fetch_add(&self, n: u64, order: Ordering) {
        let i = TALLY_SLOT.try_with(|s| *s).unwrap_or(0);
        self.0[i].0.fetch_add(n, order);
    }

    /// The sum of every slot.
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        self.0.iter().fold(0u64, |sum, p| sum.wrapping_add(p.0.load(order)))
    }
}

/// A counter that can be read: an atomic, or a [`Tally`].
pub(crate) trait Count {
    /// Its value now.
    fn value(&self) -> u64;
}

impl Count for AtomicU64 {
    fn value(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Count for Tally {
    fn value(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

/// Most bucket edges a [`HotHistogram`] has.
pub(super) const HOT_EDGES: usize = 24;

/// A histogram recorded on hot paths (every snapshot, every input): bucket counts and a
/// sum in a slot per thread, as a [`Tally`] keeps its counts, rendered in Prometheus' text
/// format after the exporter's own. A sample costs a scan of the edges and two additions
/// no other thread contends for; the exporter's histograms read a clock and push every
/// sample onto a shared list until the next upkeep (about 2.5 % of a 500-player server's
/// CPU for these six).
#[derive(Debug)]
pub(crate) struct HotHistogram {
    name: &'static str,
    /// Its one label (`stage="encoded"`), or empty.
    label: &'static str,
    /// Upper bucket edges, ascending (at most [`HOT_EDGES`]).
    edges: Vec<f64>,
    slots: [HotSlot; TALLY_SLOTS],
}

/// One thread slot of a [`HotHistogram`], on cache lines of its own.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct HotSlot {
    /// Samples in each bucket, not cumulative: `counts[i]` those up to `edges[i]` (and above
    /// the edge before), the one after the last edge those above every edge.
    counts: [AtomicU64; HOT_EDGES + 1],
    /// The samples' sum (an `f64`'s bits).
    sum: AtomicU64,
}

impl HotHistogram {
    pub(super) fn new(name: &'static str, label: &'static str, edges: &[f64]) -> Self {
        debug_assert!(edges.len() <= HOT_EDGES && edges.windows(2).all(|w| w[0] < w[1]));
        let slot = || HotSlot { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum: AtomicU64::new(0) };
        Self {
            name,
            label,
            edges: edges.iter().copied().take(HOT_EDGES).collect(),
            slots: std::array::from_fn(|_| slot()),
        }
    }

    /// Counts one sample (a NaN is not counted).
    #[inline]
    pub(crate) fn record(&self, v: f64) {
        if v.is_nan() {
            return;
        }
        let bucket = self.edges.iter().position(|e| v <= *e).unwrap_or(self.edges.len());
        let slot = &self.slots[TALLY_SLOT.try_with(|s| *s).unwrap_or(0)];
        slot.counts[bucket].fetch_add(1, Ordering::Relaxed);
        // Another thread shares this slot only when there are more threads than slots.
        let _ =
            slot.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some((f64::from_bits(b) + v).to_bits()));
    }

    /// Its series (cumulative buckets, sum and count) in Prometheus' text format.
    pub(super) fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let mut counts = [0u64; HOT_EDGES + 1];
        let mut sum = 0.0f64;
        for s in &self.slots {
            for (c, n) in counts.iter_mut().zip(&s.counts) {
                *c += n.load(Ordering::Relaxed);
            }
            sum += f64::from_bits(s.sum.load(Ordering::Relaxed));
        }
        let (name, label) = (self.name, self.label);
        let sep = if label.is_empty() { "" } else { "," };
        let mut total = 0u64;
        for (edge, n) in self.edges.iter().zip(counts) {
            total += n;
            let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"{edge}\"}} {total}");
        }
        total += counts[self.edges.len()];
        let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"+Inf\"}} {total}");
        let braced = if label.is_empty() { String::new() } else { format!("{{{label}}}") };
        let _ = writeln!(out, "{name}_sum{braced} {sum}");
        let _ = writeln!(out, "{name}_count{braced} {total}");
    }
}

/// The histograms recorded for every snapshot and every input ([`HotHistogram`]).
#[derive(Debug)]
pub(super) struct HotHistograms {
    pub(super) baseline_age: HotHistogram,
    pub(super) input_delay: HotHistogram,
    pub(super) input_effect: HotHistogram,
    pub(super) view_age: HotHistogram,
    pub(super) snapshot_encoded: HotHistogram,
    pub(super) snapshot_sent: HotHistogram,
}

impl HotHistograms {
    /// Every family: its help and its series (the family's name is theirs).
    fn families(&self) -> [(&'static str, Vec<&HotHistogram>); 5] {
        [
            ("Age of the acknowledged baseline each delta snapshot was encoded against.", vec![&self.baseline_age]),
            (
                "Server latency from an input's arrival to the snapshot carrying its effect leaving, without the wait for the tick.",
                vec![&self.input_effect],
            ),
            ("Time from an input's arrival to the tick that applied it.", vec![&self.input_delay]),
            (
                "How far behind the newest snapshot the view reported with each input was: how far lag compensation rewinds.",
                vec![&self.view_age],
            ),
            (
                "Snapshot size as encoded, and as sent (after lz4 where it helped, with acks and messages).",
                vec![&self.snapshot_encoded, &self.snapshot_sent],
            ),
        ]
    }

    /// Every family in Prometheus' text format, appended to `out`.
    pub(super) fn render(&self, out: &mut String) {
        for (help, series) in self.families() {
            let Some(name) = series.first().map(|h| h.name) else { continue };
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
            for h in series {
                h.render(out);
            }
            out.push('\n');
        }
    }
}

/// Histogram handles, cached at construction.
pub(super) struct Histograms {
    pub(super) tick_duration: Histogram,
    pub(super) tick_lateness: Histogram,
    pub(super) rtt: Histogram,
    pub(super) jitter: Histogram,
    pub(super) loss: Histogram,
    pub(super) send_rate: Histogram,
    pub(super) resume_gap: Histogram,
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Histograms")
    }
}
