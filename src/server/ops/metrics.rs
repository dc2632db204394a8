//! The server's live figures and their Prometheus exposition.
//!
//! Hot paths touch plain atomics (one relaxed add), a per-thread slot of a counter or of a
//! histogram recorded for every snapshot and input (`Tally`, `HotHistogram`), or, for the
//! rarer samples (a tick, a player's link once a second), a cached histogram handle; counters
//! and gauges are copied into the Prometheus recorder only when it renders a scrape. Every
//! [`ServerMetrics`] owns its own recorder, so several servers in one process (tests) never
//! share series, and no global recorder is installed.
//!
//! Names follow Prometheus conventions (base units, `_total`, `_seconds`, `_bytes`); no label
//! carries a player or an address. Per-player figures are in [`ServerMetrics::players_json`]
//! (the admin endpoint `/players`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use serde::Serialize;

use crate::protocol::netcode::{DisconnectReason, DropReason};
use crate::protocol::session::SessionEnd;
use crate::protocol::zone::ZoneCounters;
use crate::server::game::world::WorldFault;
use crate::transport::udp::UdpTx;

const RING: usize = 1024;

/// A ring of recent samples in microseconds (for the CLI's quantiles).
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

/// What a sent datagram carried, for the `kind` label of the traffic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentKind {
    /// Snapshot sections of payload packets.
    Snapshot = 0,
    /// The rest of payload packets: reliable messages, events, acks and framing.
    Reliable = 1,
    /// Netcode control packets: keep-alives, disconnects, handshake replies, goodbyes.
    Control = 2,
    /// What each payload datagram costs beyond its payload: the netcode header and the
    /// encryption tag.
    Overhead = 3,
}

/// What a received datagram carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceivedKind {
    /// Payload packets from connected clients (inputs and acks).
    Input = 0,
    /// Keep-alives, disconnects and handshake packets.
    Control = 1,
    /// Datagrams from a connected player's address that did not authenticate (forged,
    /// replayed, corrupted): whoever sent them, not the player.
    Rejected = 2,
}

const SENT_KINDS: [&str; 4] = ["snapshot", "reliable", "control", "overhead"];
const RECEIVED_KINDS: [&str; 3] = ["input", "control", "rejected"];

/// Labels of `volley_player_packets_dropped_total`: every netcode drop reason, then
/// `malformed_payload` and `unexpected_system_message`.
const PLAYER_DROPS: usize = DropReason::ALL.len() + 2;

/// Why a connection ended, as `volley_disconnects_total{reason}` labels it: the server's own
/// reason ([`SessionEnd`], what the client reads) when it gave one, else the netcode layer's
/// ([`DisconnectReason`]), or a failed player actor. Internal: the public names are those two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// The client went silent.
    TimedOut = 0,
    /// The client said goodbye.
    ByPeer = 1,
    /// The server ended it without a reason of its own (the client's answer to the
    /// goodbye never came, or it was disconnected at once).
    Local = 2,
    /// Its player actor failed and was cleaned up.
    Failed = 3,
    /// The world kicked it.
    Kicked = 4,
    /// The server shut down.
    ShuttingDown = 5,
    /// Its world stopped.
    WorldStopped = 6,
    /// It flooded the world with messages.
    Flooding = 7,
    /// It fell too far behind on reliable messages.
    TooFarBehind = 8,
    /// It was handed to another zone.
    Moved = 9,
    /// It sent only malformed payloads.
    Malformed = 10,
}

impl EndReason {
    /// Why a player's connection ended: the reason the server gave in its goodbye, if it
    /// said one, else what the netcode layer saw.
    pub(crate) fn of(netcode: DisconnectReason, said: Option<&SessionEnd>) -> Self {
        match said {
            Some(SessionEnd::Kicked(_)) => Self::Kicked,
            Some(SessionEnd::ShuttingDown) => Self::ShuttingDown,
            Some(SessionEnd::WorldStopped) => Self::WorldStopped,
            Some(SessionEnd::Flooding) => Self::Flooding,
            Some(SessionEnd::TooFarBehind) => Self::TooFarBehind,
            Some(SessionEnd::Moved) => Self::Moved,
            Some(SessionEnd::Malformed) => Self::Malformed,
            _ => netcode.into(),
        }
    }

    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        END_REASONS[self as usize]
    }
}

impl From<DisconnectReason> for EndReason {
    fn from(r: DisconnectReason) -> Self {
        match r {
            DisconnectReason::TimedOut => Self::TimedOut,
            DisconnectReason::ByPeer => Self::ByPeer,
            DisconnectReason::Local => Self::Local,
        }
    }
}

const END_REASONS: [&str; 11] = [
    "timed_out",
    "by_peer",
    "local",
    "failed",
    "kicked",
    "shutting_down",
    "world_stopped",
    "flooding",
    "too_far_behind",
    "moved",
    "malformed",
];

/// Why a datagram was dropped by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramDrop {
    /// The player's queue was full (a flooding or stalled client).
    QueueFull = 0,
    /// The kernel refused the send (a full socket buffer).
    SendFailed = 1,
}

const DATAGRAM_DROPS: [&str; 2] = ["queue_full", "send_failed"];

/// Labels of `volley_client_messages_dropped_total{reason}`.
const CLIENT_MESSAGE_DROPS: [&str; 3] = ["flood", "too_large", "queue_full"];

/// Labels of `volley_table_entries{table}`: the server's tables that grow and shrink with
/// players and handshakes (a soak run checks they return to their occupancy).
pub const TABLES: [&str; 6] =
    ["pending_handshakes", "pending_ips", "connected_clients", "connected_addresses", "player_actors", "player_rows"];

/// How the socket actor left a connected player's payload for its player actor (see
/// [`crate::server`]'s runtime semantics; its inputs went to the world either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryPath {
    /// Left in the mailbox without waking the actor: read at its next tick.
    Left = 0,
    /// Left, and the actor woken for it (a control message, the client's messages, or half
    /// its room used).
    Woke = 1,
}

/// What woke a player actor (`volley_player_wakeups_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// Its tick's snapshot (the fan-out: at most once a tick).
    Snapshot = 0,
    /// Payloads the socket left that should be read now.
    Datagram = 1,
    /// Its heartbeat (keep-alives, timeouts), every 100 ms.
    Heartbeat = 2,
    /// The world or the directory: a message to it alone, a notice, the scoreboard, a move,
    /// a close, the client's goodbye.
    World = 3,
}

/// Labels of `volley_player_wakeups_total{reason}`, by [`Wakeup`].
const WAKEUPS: [&str; 4] = ["snapshot", "datagram", "heartbeat", "world"];

/// One player's figures for the admin endpoint (never a label).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PlayerStats {
    /// The player's id (slot).
    pub id: u32,
    /// The client's address (shown only with `show_addresses`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Seconds since the connection was accepted.
    pub connected_seconds: f64,
    /// Smoothed round-trip time.
    pub rtt_seconds: f64,
    /// Round-trip variation.
    pub jitter_seconds: f64,
    /// Estimated packet loss.
    pub loss_ratio: f64,
    /// Ticks between the newest snapshot and the baseline it was encoded against (`None`:
    /// the last one was full).
    pub baseline_age_ticks: Option<u32>,
    /// Bytes sent to this player.
    pub sent_bytes: u64,
    /// Bytes received from this player.
    pub received_bytes: u64,
    /// Snapshots sent.
    pub snapshots: u64,
    /// Snapshots sent in full.
    pub full_snapshots: u64,
    /// Reliable messages resent.
    pub reliable_resends: u64,
    /// Reliable messages waiting for an ack.
    pub reliable_queue: u64,
    /// Its send rate budget, in bytes a second.
    pub send_rate_bytes_per_second: u32,
}

/// Slots a [`Tally`] spreads its additions over: as many as the threads that add on hot
/// paths at once (the runtime's workers), so that each mostly has one to itself.
const TALLY_SLOTS: usize = 4;

/// A counter that several threads add to on hot paths (every datagram, every snapshot):
/// each thread adds to a slot of its own, on a cache line of its own, and a read sums the
/// slots. One shared atomic would send its cache line from core to core on every addition
/// (about 15 times a player-tick).
#[derive(Debug, Default)]
pub(crate) struct Tally([Padded; TALLY_SLOTS]);

/// One slot of a [`Tally`], alone on its cache line (two lines: adjacent-line prefetch).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

static NEXT_TALLY_SLOT: AtomicUsize = AtomicUsize::new(0);

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
const HOT_EDGES: usize = 24;

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
struct HotSlot {
    /// Samples in each bucket, not cumulative: `counts[i]` those up to `edges[i]` (and above
    /// the edge before), the one after the last edge those above every edge.
    counts: [AtomicU64; HOT_EDGES + 1],
    /// The samples' sum (an `f64`'s bits).
    sum: AtomicU64,
}

impl HotHistogram {
    fn new(name: &'static str, label: &'static str, edges: &[f64]) -> Self {
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
    fn render(&self, out: &mut String) {
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
struct HotHistograms {
    baseline_age: HotHistogram,
    input_delay: HotHistogram,
    input_effect: HotHistogram,
    view_age: HotHistogram,
    snapshot_encoded: HotHistogram,
    snapshot_sent: HotHistogram,
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
    fn render(&self, out: &mut String) {
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
struct Histograms {
    tick_duration: Histogram,
    tick_lateness: Histogram,
    rtt: Histogram,
    jitter: Histogram,
    loss: Histogram,
    send_rate: Histogram,
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Histograms")
    }
}

/// Buckets around the 16.7 ms tick budget (60 Hz), in seconds, down to 10 µs (a light
/// tick's median is not in the first bucket); [`ServerMetrics::with_tick_rate`] puts one
/// at the tick period itself.
pub const TICK_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.0125, 0.0167, 0.025, 0.05, 0.1,
    0.25,
];
/// Buckets for round-trip times and input delays, in seconds.
pub const RTT_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0];
/// Buckets for jitter, in seconds.
pub const JITTER_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.1, 0.2];
/// Buckets for loss ratios.
pub const LOSS_BUCKETS: &[f64] = &[0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0];
/// Buckets for send rates, in bytes a second (32 kbit/s to 1 Mbit/s and beyond).
pub const RATE_BUCKETS: &[f64] =
    &[4_000.0, 8_000.0, 16_000.0, 24_000.0, 32_000.0, 48_000.0, 64_000.0, 96_000.0, 124_999.0, 250_000.0];
/// Baseline ages, in ticks, that get a narrow bucket of their own (a baseline age is a whole
/// number of ticks; a bucket edge on it would put its quantiles half a tick low).
const BASELINE_TICKS: [f64; 10] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0];

/// Bucket edges for the tick period `p` (seconds): `base` plus `extra` multiples of `p`,
/// sorted, repeats dropped.
fn with_period(base: &[f64], p: f64, extra: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = base.iter().copied().chain(extra.iter().map(|k| k * p)).collect();
    v.sort_by(f64::total_cmp);
    v.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    v
}
/// Buckets for snapshot sizes, in bytes.
pub const SIZE_BUCKETS: &[f64] = &[8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1200.0];

/// The server's running totals at one moment ([`ServerMetrics::totals`]): what the `volley`
/// program prints and tests check. Prometheus gets the same figures from [`ServerMetrics::render`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Players connected now.
    pub players: u64,
    /// Player slots.
    pub slots: u64,
    /// Connections accepted.
    pub connects: u64,
    /// Connections ended.
    pub disconnects: u64,
    /// Ticks run.
    pub ticks: u64,
    /// Ticks that started so late that the world skipped ahead.
    pub tick_overruns: u64,
    /// Entities in the last snapshot.
    pub entities: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Snapshot bytes sent (the encoded snapshot sections).
    pub snapshot_bytes: u64,
    /// Snapshots sent.
    pub snapshots: u64,
    /// Snapshots sent in full (no usable baseline).
    pub full_snapshots: u64,
    /// Datagrams dropped: a player's queue was full, or the kernel refused a send.
    pub dropped: u64,
    /// Handshake packets dropped (bad token, rate limit, …).
    pub handshake_drops: u64,
    /// Player actors that failed and were cleaned up.
    pub actor_failures: u64,
    /// Sum of players' smoothed RTT in microseconds (divide by players for the mean).
    pub rtt_sum_us: u64,
    /// Players summed over ticks (the denominator of per-player-tick costs).
    pub player_ticks: u64,
    /// Inputs applied within one tick period of their arrival.
    pub inputs_on_time: u64,
    /// Inputs applied by the first tick that started after they arrived (none waited past a
    /// tick that could have applied it, however late that tick started).
    pub inputs_next_tick: u64,
    /// Inputs applied.
    pub inputs_applied: u64,
    /// Reliable messages resent.
    pub reliable_resends: u64,
    /// Reliable messages waiting for acks, over all players.
    pub reliable_queue: u64,
    /// Bytes of clients' messages held (reorder windows, reassembly, messages not yet
    /// handed to a world), over all players.
    pub received_held: u64,
    /// Datagrams waiting in player actors' mailboxes, over all players.
    pub player_backlog: u64,
    /// Snapshots replaced in a player's slot before its actor took them (it fell behind).
    pub snapshots_replaced: u64,
    /// Snapshots not sent because the client's send rate budget was spent.
    pub snapshots_held: u64,
    /// Entities that changed but were left for a later snapshot (the packet's budget was
    /// full; the priority accumulator chose what went).
    pub entities_deferred: u64,
    /// Changed entities not sent in a snapshot because their own send rate skipped it
    /// ([`Interest::every`](crate::protocol::snapshot::Interest::every)).
    pub entities_skipped: u64,
    /// Times a client's send rate was cut for a queueing link.
    pub send_rate_cuts: u64,
    /// Times a client's round trip rose without draining and was taken for a change of its
    /// path's own delay ([`SendRate::rebased`](crate::protocol::reliability::SendRate::rebased)).
    pub send_rate_path_changes: u64,
    /// Snapshots not sent because the server lowered every player's snapshot rate (short
    /// of CPU).
    pub snapshots_paced: u64,
    /// What the snapshot rate is divided by now (1: the configured rate).
    pub snapshot_interval: u64,
    /// Inputs refused because the world's input queue was full (a stalled world).
    pub inputs_dropped: u64,
    /// System calls that received datagrams (each takes up to a batch).
    pub receive_calls: u64,
    /// System calls that sent snapshot datagrams (each sends up to a batch).
    pub send_calls: u64,
}

/// Counters, gauges and recent samples, shared by the server's actors.
#[derive(Debug)]
pub struct ServerMetrics {
    /// Players connected now.
    pub(crate) players: AtomicU64,
    /// Player slots.
    pub(crate) slots: AtomicU64,
    /// Connections accepted.
    pub(crate) connects: AtomicU64,
    /// Connections ended.
    pub(crate) disconnects: AtomicU64,
    /// Ticks run.
    pub(crate) ticks: AtomicU64,
    /// Ticks that started so late that the world skipped ahead.
    pub(crate) tick_overruns: AtomicU64,
    /// Entities in the last snapshot.
    pub(crate) entities: AtomicU64,
    /// Datagrams received.
    pub(crate) packets_received: Tally,
    /// Bytes received.
    pub(crate) bytes_received: Tally,
    /// Datagrams sent.
    pub(crate) packets_sent: Tally,
    /// Bytes sent.
    pub(crate) bytes_sent: Tally,
    /// Snapshot bytes sent (the encoded snapshot sections).
    pub(crate) snapshot_bytes: Tally,
    /// Snapshots sent.
    pub(crate) snapshots: Tally,
    /// Snapshots sent in full (no usable baseline).
    pub(crate) full_snapshots: Tally,
    /// Datagrams dropped: a player's queue was full, or the kernel refused a send.
    pub(crate) dropped: AtomicU64,
    /// Handshake packets dropped (bad token, rate limit, …).
    pub(crate) handshake_drops: AtomicU64,
    /// Player actors that failed and were cleaned up.
    pub(crate) actor_failures: AtomicU64,
    /// Sum of players' smoothed RTT in microseconds (divide by players for the mean).
    pub(crate) rtt_sum_us: AtomicU64,
    /// Players summed over ticks (the denominator of per-player-tick costs).
    pub(crate) player_ticks: AtomicU64,
    /// Inputs applied within one tick period of their arrival.
    pub(crate) inputs_on_time: Tally,
    /// Inputs applied by the first tick that started after they arrived (none waited past a
    /// tick that could have applied it, however late that tick started).
    pub(crate) inputs_next_tick: Tally,
    /// Inputs applied.
    pub(crate) inputs_applied: Tally,
    /// Reliable messages resent.
    pub(crate) reliable_resends: AtomicU64,
    /// Reliable messages waiting for acks, over all players.
    pub(crate) reliable_queue: AtomicU64,
    /// Bytes of clients' messages held, over all players.
    pub(crate) received_held: AtomicU64,
    /// Pending handshakes that gave way to a newer one from their IP.
    handshakes_given_way: AtomicU64,
    /// Datagrams waiting in player actors' mailboxes, over all players.
    pub(crate) player_backlog: AtomicU64,
    /// Snapshots replaced in a player's slot before its actor took them (it fell behind).
    pub(crate) snapshots_replaced: AtomicU64,
    /// Snapshots the send rate held back, entities deferred by priority, rate cuts.
    pub(crate) snapshots_held: AtomicU64,
    pub(crate) entities_deferred: Tally,
    pub(crate) send_rate_cuts: AtomicU64,
    pub(crate) entities_skipped: AtomicU64,
    pub(crate) send_rate_path_changes: AtomicU64,
    /// Snapshots not sent because the server lowered every player's snapshot rate.
    pub(crate) snapshots_paced: AtomicU64,
    /// What the snapshot rate is divided by now.
    pub(crate) snapshot_interval: AtomicU64,
    /// Inputs refused because the world's input queue was full (a stalled world).
    pub(crate) inputs_dropped: AtomicU64,
    /// Datagrams and snapshots by the path that took them ([`DeliveryPath`]).
    deliveries: [Tally; 2],
    /// Player actors' wake-ups, by [`Wakeup`].
    wakeups: [Tally; 4],
    /// Snapshot wake-ups of a player actor already woken for one in that server tick.
    pub(crate) repeat_wakeups: AtomicU64,
    /// Entries in the server's growing tables, by [`TABLES`] label.
    tables: [AtomicU64; TABLES.len()],
    /// Faults of the game's code survived, by [`WorldFault::ALL`] index.
    world_faults: [AtomicU64; WorldFault::ALL.len()],
    /// Recordings: frames written, frames dropped (the disk fell behind), bytes written,
    /// and recordings that failed (a file that could not be opened or written).
    pub(crate) recording: [AtomicU64; 4],
    /// Client messages handed to the world, and dropped by [`CLIENT_MESSAGE_DROPS`] reason.
    client_messages: AtomicU64,
    client_message_drops: [AtomicU64; 3],
    /// System calls that received datagrams (each takes up to a batch).
    pub(crate) receive_calls: AtomicU64,
    /// System calls that sent snapshot datagrams (each sends up to a batch).
    pub(crate) send_calls: AtomicU64,
    sent: [[Tally; 2]; SENT_KINDS.len()],
    received: [[Tally; 2]; 3],
    player_drops: [AtomicU64; PLAYER_DROPS],
    ends: [AtomicU64; END_REASONS.len()],
    drops: [AtomicU64; 2],
    rejections: [AtomicU64; DropReason::ALL.len()],
    last_tick_unix_us: AtomicU64,
    last_tick_at_us: AtomicU64,
    ready: AtomicBool,
    /// What failed, once a part of the server failed (then `/healthz` fails).
    failure: Mutex<Option<String>>,
    started: Instant,
    tick_period: Mutex<Duration>,
    ticks_us: Mutex<Ring>,
    lateness_us: Mutex<Ring>,
    input_delay_us: Mutex<Ring>,
    input_effect_us: Mutex<Ring>,
    per_player: Mutex<BTreeMap<u32, PlayerStats>>,
    /// Figures by world kind, once the server has declared its kinds.
    kinds: std::sync::OnceLock<Vec<KindFigures>>,
    /// The figures of the zones this server runs ([`ServerMetrics::add_zone`]).
    zones: Mutex<Vec<Arc<ZoneCounters>>>,
    hist: Histograms,
    hot: HotHistograms,
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

/// One world kind's figures (`kind` label).
#[derive(Debug)]
struct KindFigures {
    label: &'static str,
    worlds: AtomicU64,
    players: AtomicU64,
    overruns: AtomicU64,
    ticks: AtomicU64,
    tick: Histogram,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn buckets(b: PrometheusBuilder, name: &str, values: &[f64]) -> PrometheusBuilder {
    // Every bucket list here is non-empty, which is all the builder checks.
    match b.set_buckets_for_metric(Matcher::Full(name.to_string()), values) {
        Ok(b) => b,
        Err(_) => unreachable!("bucket lists are non-empty constants"),
    }
}

static META: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

fn key(name: &'static str, labels: &[(&'static str, &'static str)]) -> Key {
    let labels: Vec<Label> = labels.iter().map(|(k, v)| Label::new(*k, *v)).collect();
    Key::from_parts(name, labels)
}

impl ServerMetrics {
    /// Empty figures with their own Prometheus recorder, for a 60 Hz server.
    pub fn new() -> Self {
        Self::with_tick_rate(60)
    }

    /// Empty figures for a server ticking `tick_rate_hz` times a second: the histograms
    /// whose values sit on or near whole ticks get bucket edges at the tick period (a tick's
    /// duration against its budget; an input's delay, at most one period when healthy) or
    /// narrow buckets around whole ticks (a snapshot's baseline age), so their quantiles
    /// read true rather than at a bucket's interpolated middle.
    pub fn with_tick_rate(tick_rate_hz: u16) -> Self {
        let p = 1.0 / f64::from(tick_rate_hz.max(1));
        let tick = with_period(TICK_BUCKETS, p, &[1.0]);
        let input_delay = with_period(
            &[0.0005, 0.001, 0.002, 0.004, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0],
            p,
            &[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0],
        );
        let around: Vec<f64> = BASELINE_TICKS.iter().flat_map(|k| [k - 0.05, k + 0.05]).collect();
        let baseline = with_period(&[], p, &around);
        let mut b = PrometheusBuilder::new();
        b = buckets(b, "volley_tick_duration_seconds", &tick);
        b = buckets(b, "volley_tick_lateness_seconds", &tick);
        b = buckets(b, "volley_world_tick_duration_seconds", &tick);
        b = buckets(b, "volley_rtt_seconds", RTT_BUCKETS);
        b = buckets(b, "volley_jitter_seconds", JITTER_BUCKETS);
        b = buckets(b, "volley_packet_loss_ratio", LOSS_BUCKETS);
        b = buckets(b, "volley_send_rate_bytes_per_second", RATE_BUCKETS);
        let recorder = b.build_recorder();
        let handle = recorder.handle();
        let h = |name: &'static str, labels: &[(&'static str, &'static str)]| {
            recorder.register_histogram(&key(name, labels), &META)
        };
        let hist = Histograms {
            tick_duration: h("volley_tick_duration_seconds", &[]),
            tick_lateness: h("volley_tick_lateness_seconds", &[]),
            rtt: h("volley_rtt_seconds", &[]),
            jitter: h("volley_jitter_seconds", &[]),
            loss: h("volley_packet_loss_ratio", &[]),
            send_rate: h("volley_send_rate_bytes_per_second", &[]),
        };
        let hot = HotHistograms {
            baseline_age: HotHistogram::new("volley_snapshot_baseline_age_seconds", "", &baseline),
            input_delay: HotHistogram::new("volley_input_delay_seconds", "", &input_delay),
            input_effect: HotHistogram::new("volley_input_effect_seconds", "", &tick),
            view_age: HotHistogram::new("volley_input_view_age_seconds", "", RTT_BUCKETS),
            snapshot_encoded: HotHistogram::new("volley_snapshot_size_bytes", "stage=\"encoded\"", SIZE_BUCKETS),
            snapshot_sent: HotHistogram::new("volley_snapshot_size_bytes", "stage=\"sent\"", SIZE_BUCKETS),
        };
        let m = Self {
            players: AtomicU64::new(0),
            slots: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            tick_overruns: AtomicU64::new(0),
            entities: AtomicU64::new(0),
            packets_received: Tally::default(),
            bytes_received: Tally::default(),
            packets_sent: Tally::default(),
            bytes_sent: Tally::default(),
            snapshot_bytes: Tally::default(),
            snapshots: Tally::default(),
            full_snapshots: Tally::default(),
            dropped: AtomicU64::new(0),
            handshake_drops: AtomicU64::new(0),
            actor_failures: AtomicU64::new(0),
            rtt_sum_us: AtomicU64::new(0),
            player_ticks: AtomicU64::new(0),
            inputs_on_time: Tally::default(),
            inputs_next_tick: Tally::default(),
            inputs_applied: Tally::default(),
            reliable_resends: AtomicU64::new(0),
            reliable_queue: AtomicU64::new(0),
            received_held: AtomicU64::new(0),
            handshakes_given_way: AtomicU64::new(0),
            player_backlog: AtomicU64::new(0),
            snapshots_replaced: AtomicU64::new(0),
            snapshots_held: AtomicU64::new(0),
            entities_deferred: Tally::default(),
            send_rate_cuts: AtomicU64::new(0),
            entities_skipped: AtomicU64::new(0),
            send_rate_path_changes: AtomicU64::new(0),
            snapshots_paced: AtomicU64::new(0),
            snapshot_interval: AtomicU64::new(1),
            inputs_dropped: AtomicU64::new(0),
            deliveries: Default::default(),
            wakeups: Default::default(),
            repeat_wakeups: AtomicU64::new(0),
            tables: Default::default(),
            world_faults: Default::default(),
            recording: Default::default(),
            client_messages: AtomicU64::new(0),
            client_message_drops: Default::default(),
            receive_calls: AtomicU64::new(0),
            send_calls: AtomicU64::new(0),
            sent: Default::default(),
            received: Default::default(),
            ends: Default::default(),
            drops: Default::default(),
            rejections: std::array::from_fn(|_| AtomicU64::new(0)),
            player_drops: std::array::from_fn(|_| AtomicU64::new(0)),
            last_tick_unix_us: AtomicU64::new(0),
            last_tick_at_us: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            failure: Mutex::new(None),
            started: Instant::now(),
            tick_period: Mutex::new(Duration::from_secs(1) / 60),
            ticks_us: Mutex::default(),
            lateness_us: Mutex::default(),
            input_delay_us: Mutex::default(),
            input_effect_us: Mutex::default(),
            per_player: Mutex::default(),
            kinds: std::sync::OnceLock::new(),
            zones: Mutex::new(Vec::new()),
            hist,
            hot,
            recorder,
            handle,
        };
        m.describe();
        m
    }

    fn describe(&self) {
        let d = |name: &'static str, unit: Option<Unit>, help: &'static str| {
            self.recorder.describe_gauge(name.into(), unit, SharedString::const_str(help));
        };
        d("volley_tick_duration_seconds", Some(Unit::Seconds), "Time the world actor spent on one tick.");
        d("volley_tick_lateness_seconds", Some(Unit::Seconds), "How late a tick started after its scheduled time.");
        d("volley_ticks_total", None, "Simulation ticks run.");
        d("volley_worlds", None, "World actors running, by kind.");
        d("volley_world_players", None, "Players in worlds of each kind.");
        d(
            "volley_world_tick_overruns_total",
            None,
            "Times a world of each kind fell so far behind that it skipped ahead.",
        );
        d("volley_world_tick_duration_seconds", Some(Unit::Seconds), "Time a world of each kind spent on one tick.");
        d("volley_tick_overruns_total", None, "Times the tick loop fell so far behind that it skipped ahead.");
        d("volley_last_tick_timestamp_seconds", Some(Unit::Seconds), "Unix time the newest tick finished.");
        d("volley_tick_period_seconds", Some(Unit::Seconds), "The fixed tick period (the tick budget).");
        d("volley_rtt_seconds", Some(Unit::Seconds), "Players' smoothed round-trip times, sampled once a second each.");
        d("volley_jitter_seconds", Some(Unit::Seconds), "Players' round-trip variation, sampled once a second each.");
        d("volley_packet_loss_ratio", None, "Players' estimated packet loss, sampled once a second each.");
        d("volley_snapshot_full_total", None, "Snapshots sent in full because no acknowledged baseline was usable.");
        d("volley_snapshots_total", None, "Snapshots sent.");
        d("volley_snapshots_held_total", None, "Snapshots not sent because the client's send rate budget was spent.");
        d(
            "volley_snapshot_entities_deferred_total",
            None,
            "Entities that changed but were left for a later snapshot: the packet's budget was full, priority chose.",
        );
        d(
            "volley_snapshot_entities_skipped_total",
            None,
            "Entities that changed but were not sent in a snapshot because their own send rate skipped it (Interest::every).",
        );
        d("volley_send_rate_cuts_total", None, "Times a client's send rate was cut because its link queued.");
        d(
            "volley_send_rate_path_changes_total",
            None,
            "Times a client's round trip rose without draining: taken for its path's own delay, the rate grew back.",
        );
        d(
            "volley_send_rate_bytes_per_second",
            None,
            "Players' send rate budgets in bytes a second, sampled once a second each.",
        );
        d(
            "volley_snapshots_replaced_total",
            None,
            "Snapshots a newer tick replaced before a lagging player actor took them.",
        );
        d(
            "volley_snapshots_paced_total",
            None,
            "Snapshots not sent because the server, short of CPU, lowered every player's snapshot rate.",
        );
        d(
            "volley_snapshot_rate_ratio",
            None,
            "The share of the configured snapshot rate every player gets now: 1, or 1/2, 1/3, 1/4 when the server is short of CPU.",
        );
        d("volley_reliable_resends_total", None, "Reliable messages resent after an ack timeout.");
        d("volley_inputs_applied_total", None, "Player inputs applied by the world.");
        d(
            "volley_inputs_dropped_total",
            None,
            "Player inputs refused: the world's input queue was full, or the player sent more than 32 in one tick.",
        );
        d(
            "volley_player_datagrams_total",
            None,
            "Payloads from connected players left for their player actors (inputs went to the world already): without waking the actor (left), or with a wake-up (woke).",
        );
        d(
            "volley_player_wakeups_total",
            None,
            "Player actor wake-ups, by reason: its tick's snapshot, payloads to read now, its heartbeat, the world or directory.",
        );
        d(
            "volley_fanout_repeat_wakeups_total",
            None,
            "Snapshot wake-ups of a player actor already woken for one in that server tick (0 by design).",
        );
        d(
            "volley_socket_receive_calls_total",
            None,
            "System calls that took datagrams off the socket (recvmmsg takes several at once).",
        );
        d(
            "volley_socket_send_calls_total",
            None,
            "System calls that sent snapshot datagrams (sendmmsg sends several at once).",
        );
        d("volley_inputs_on_time_total", None, "Player inputs applied within one tick period of their arrival.");
        d(
            "volley_inputs_next_tick_total",
            None,
            "Player inputs applied by the first tick that started after their arrival.",
        );
        d(
            "volley_player_ticks_total",
            None,
            "Ticks times the players connected at each: the count behind per-player-tick costs.",
        );
        d("volley_sent_bytes_total", None, "Bytes sent, by what they carried.");
        d("volley_sent_packets_total", None, "Datagrams sent, by what they carried.");
        d("volley_received_bytes_total", None, "Bytes received, by what they carried.");
        d("volley_received_packets_total", None, "Datagrams received, by what they carried.");
        d("volley_players", None, "Players connected.");
        d("volley_client_messages_total", None, "Messages from clients handed to the world.");
        d("volley_recorded_frames_total", None, "World ticks written to recordings.");
        d(
            "volley_zone_border_frames_total",
            None,
            "Border frames this zone published to its neighbours (out) and took from them (in).",
        );
        d(
            "volley_zone_border_frames_dropped_total",
            None,
            "Border frames left out: the bus down or behind, or the border world's queue full.",
        );
        d(
            "volley_zone_border_frames_refused_total",
            None,
            "Border frames received that were not used: not a frame, another schema, broken, or not from a neighbour.",
        );
        d(
            "volley_zone_border_entities_sent_total",
            None,
            "Border entities published to neighbours (summed over frames).",
        );
        d("volley_zone_border_entities", None, "Border entities of the neighbours shown now.");
        d("volley_zone_fades_total", None, "Times a neighbour went quiet and its border entities faded.");
        d(
            "volley_zone_handoffs_total",
            None,
            "Players this zone handed to a neighbour, by outcome (refused and timed out: the player stayed).",
        );
        d("volley_zone_handoffs_received_total", None, "Handoffs offered to this zone by its neighbours, by outcome.");
        d(
            "volley_zone_handoff_inputs_lost_total",
            None,
            "Inputs of players handed to this zone that neither zone applied (0 when handoffs lose nothing).",
        );
        d(
            "volley_zone_handoff_inputs_repeated_total",
            None,
            "Inputs of players handed to this zone that both zones applied (0 when handoffs lose nothing).",
        );
        d(
            "volley_zone_handoff_wait_seconds_total",
            Some(Unit::Seconds),
            "Time accepted handoffs waited for the new zone's answer, summed (divide by the accepted ones for the mean).",
        );
        d(
            "volley_zone_bus_up",
            None,
            "0 while a zone of this server has lost its message bus; 1 otherwise (every zone's bus connected, or no zone: nothing to alert on).",
        );
        d("volley_zone_bus_rtt_seconds", Some(Unit::Seconds), "The newest round trip to the message bus.");
        d(
            "volley_zone_border_work_seconds_total",
            Some(Unit::Seconds),
            "CPU time spent picking, coding and decoding border frames.",
        );
        d(
            "volley_zone_border_relevancy_seconds_total",
            Some(Unit::Seconds),
            "CPU time spent choosing the border entities each player sees (the border world's relevancy, on the players' send path; one call in eight timed).",
        );
        d(
            "volley_zone_border_world_seconds_total",
            Some(Unit::Seconds),
            "CPU time of the border world's own work: storing neighbours' frames, its ticks and its snapshots' entities.",
        );
        d(
            "volley_recording_dropped_frames_total",
            None,
            "World ticks a recording left out because its disk fell behind (it keeps keyframes only until it catches up).",
        );
        d("volley_recorded_bytes_total", Some(Unit::Bytes), "Bytes written to recordings.");
        d(
            "volley_recording_failures_total",
            None,
            "Recordings that stopped because their file could not be opened or written.",
        );
        d(
            "volley_client_messages_dropped_total",
            None,
            "Messages from clients dropped, by reason: past the per-tick limit (flood), too large, or the world's queue full.",
        );
        d(
            "volley_world_errors_total",
            None,
            "Mistakes in the game's code the server survived (a panic in a World method, a repeated entity id, a relevancy list out of order), by kind.",
        );
        d(
            "volley_table_entries",
            None,
            "Entries in the server's growing tables (pending handshakes and their IPs, connected clients by id and by address, player actors, /players rows): each returns to its occupancy.",
        );
        d("volley_player_slots", None, "Player slots (the most players the server accepts).");
        d("volley_connects_total", None, "Connections accepted.");
        d("volley_disconnects_total", None, "Connections ended, by reason.");
        d("volley_handshake_rejections_total", None, "Handshake packets rejected, by reason.");
        d(
            "volley_player_packets_dropped_total",
            None,
            "Datagrams from connected players' addresses dropped, by reason (forged, replayed, over budget, malformed).",
        );
        d("volley_datagrams_dropped_total", None, "Datagrams the server dropped, by reason.");
        d("volley_reliable_queue_messages", None, "Reliable messages waiting for an ack, over all players.");
        d(
            "volley_pending_handshakes_given_way_total",
            None,
            "Pending handshakes dropped to make room for a newer request from the same IP (its share of the pending table was full).",
        );
        d(
            "volley_player_received_bytes",
            None,
            "Bytes of clients' messages the server holds (reorder windows, reassembly, not yet handed to a world), over all players.",
        );
        d("volley_mailbox_backlog_messages", None, "Messages waiting in actor mailboxes, by actor kind.");
        d("volley_actor_failures_total", None, "Actors that failed and were cleaned up, by actor kind.");
        d("volley_entities", None, "Entities in the newest world snapshot.");
        d("volley_build_info", None, "Build information; always 1.");
        d("process_cpu_seconds_total", Some(Unit::Seconds), "CPU time used by this process.");
        d("process_resident_memory_bytes", Some(Unit::Bytes), "Resident memory of this process.");
    }

    /// Declares the server's world kinds (the `kind` label's values: a bounded set, fixed
    /// at start; later calls change nothing). Labels are kept for the process's lifetime.
    pub fn declare_world_kinds(&self, kinds: &[String]) {
        let figures = kinds
            .iter()
            .map(|k| {
                let label: &'static str = Box::leak(k.clone().into_boxed_str());
                KindFigures {
                    label,
                    worlds: AtomicU64::new(0),
                    players: AtomicU64::new(0),
                    overruns: AtomicU64::new(0),
                    ticks: AtomicU64::new(0),
                    tick: self
                        .recorder
                        .register_histogram(&key("volley_world_tick_duration_seconds", &[("kind", label)]), &META),
                }
            })
            .collect();
        let _ = self.kinds.set(figures);
    }

    /// The index of a declared world kind.
    pub(crate) fn kind_index(&self, kind: &str) -> Option<usize> {
        self.kinds.get()?.iter().position(|k| k.label == kind)
    }

    /// Records one tick of a world of kind `kind` (an index from [`Self::kind_index`]).
    pub(crate) fn record_world_tick(&self, kind: usize, took: Duration) {
        if let Some(k) = self.kinds.get().and_then(|k| k.get(kind)) {
            k.ticks.fetch_add(1, Ordering::Relaxed);
            k.tick.record(took.as_secs_f64());
        }
    }

    /// Counts an overrun of a world of kind `kind`.
    pub(crate) fn record_world_overrun(&self, kind: usize) {
        if let Some(k) = self.kinds.get().and_then(|k| k.get(kind)) {
            k.overruns.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets the worlds and players per kind from the directory's list (id, kind, players).
    pub(crate) fn set_worlds<'a>(&self, worlds: impl Iterator<Item = (crate::server::WorldId, &'a str, usize)>) {
        let Some(kinds) = self.kinds.get() else { return };
        let mut counts = vec![(0u64, 0u64); kinds.len()];
        for (_, kind, players) in worlds {
            if let Some(i) = kinds.iter().position(|k| k.label == kind) {
                counts[i].0 += 1;
                counts[i].1 += players as u64;
            }
        }
        for (k, (w, p)) in kinds.iter().zip(counts) {
            k.worlds.store(w, Ordering::Relaxed);
            k.players.store(p, Ordering::Relaxed);
        }
    }

    /// Recordings so far: world ticks written and bytes written (both 0 when nothing is
    /// recorded).
    pub fn recorded(&self) -> (u64, u64) {
        (self.recording[0].load(Ordering::Relaxed), self.recording[2].load(Ordering::Relaxed))
    }

    /// Worlds running and players in them, by kind: (kind, worlds, players, ticks).
    pub fn worlds_by_kind(&self) -> Vec<(&'static str, u64, u64, u64)> {
        let get = |a: &dyn Count| a.value();
        self.kinds
            .get()
            .map(|k| k.iter().map(|k| (k.label, get(&k.worlds), get(&k.players), get(&k.ticks))).collect())
            .unwrap_or_default()
    }

    /// Records one tick's duration and how late it started.
    pub fn record_tick(&self, took: Duration, lateness: Duration) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.hist.tick_duration.record(took.as_secs_f64());
        self.hist.tick_lateness.record(lateness.as_secs_f64());
        let unix = crate::server::unix_now().as_micros() as u64;
        self.last_tick_unix_us.store(unix, Ordering::Relaxed);
        self.last_tick_at_us.store(self.started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if let Ok(mut r) = self.ticks_us.lock() {
            r.push(took);
        }
        if let Ok(mut r) = self.lateness_us.lock() {
            r.push(lateness);
        }
    }

    /// Counts a payload by how it was left for its player actor.
    pub fn record_delivery(&self, path: DeliveryPath) {
        self.deliveries[path as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many payloads were left by `path`.
    pub fn deliveries(&self, path: DeliveryPath) -> u64 {
        self.deliveries[path as usize].load(Ordering::Relaxed)
    }

    /// Counts a player actor's wake-up.
    pub(crate) fn record_wakeup(&self, why: Wakeup) {
        self.wakeups[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many times player actors were woken for `why`.
    pub fn wakeups(&self, why: Wakeup) -> u64 {
        self.wakeups[why as usize].load(Ordering::Relaxed)
    }

    /// Snapshot wake-ups of a player actor already woken for one in the same server tick
    /// (none, by design: the fan-out wakes each player actor at most once a tick).
    pub fn repeat_wakeups(&self) -> u64 {
        self.repeat_wakeups.load(Ordering::Relaxed)
    }

    /// The socket actor's tables: the endpoint's, and its player actors by id.
    pub(crate) fn set_socket_tables(&self, endpoint: crate::protocol::netcode::server::EndpointTables, actors: usize) {
        let t = &self.tables;
        t[0].store(endpoint.pending_handshakes as u64, Ordering::Relaxed);
        t[1].store(endpoint.pending_ips as u64, Ordering::Relaxed);
        t[2].store(endpoint.connected as u64, Ordering::Relaxed);
        t[3].store(endpoint.connected_addresses as u64, Ordering::Relaxed);
        t[4].store(actors as u64, Ordering::Relaxed);
        self.handshakes_given_way.store(endpoint.pending_given_way, Ordering::Relaxed);
    }

    /// The world's counts of its game's faults (all kinds but the relevancy's, which the
    /// player paths count with [`ServerMetrics::record_world_fault`]).
    pub(crate) fn add_world_faults(&self, faults: impl Iterator<Item = (WorldFault, u64)>) {
        for ((fault, n), slot) in faults.zip(&self.world_faults) {
            if fault != WorldFault::RelevancyOrder && n > 0 {
                slot.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Counts client messages: `queued` handed to the world, the ones the session dropped,
    /// and `full` refused by a full input queue.
    pub(crate) fn record_client_messages(
        &self,
        queued: u64,
        drops: crate::server::cores::session::MessageDrops,
        full: u64,
    ) {
        if queued > 0 {
            self.client_messages.fetch_add(queued, Ordering::Relaxed);
        }
        for (i, n) in [drops.flood, drops.too_large, full].into_iter().enumerate() {
            if n > 0 {
                self.client_message_drops[i].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Client messages handed to the world so far, and dropped (flood, too large, queue full).
    pub fn client_messages(&self) -> (u64, [u64; 3]) {
        let get = |a: &dyn Count| a.value();
        (get(&self.client_messages), std::array::from_fn(|i| get(&self.client_message_drops[i])))
    }

    /// Counts one fault of the game's code; how many of its kind so far.
    pub(crate) fn record_world_fault(&self, fault: WorldFault) -> u64 {
        WorldFault::ALL
            .iter()
            .position(|f| *f == fault)
            .map_or(0, |i| self.world_faults[i].fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Faults of the game's code survived so far, of `fault`'s kind.
    pub fn world_faults(&self, fault: WorldFault) -> u64 {
        WorldFault::ALL.iter().position(|f| *f == fault).map_or(0, |i| self.world_faults[i].load(Ordering::Relaxed))
    }

    /// Inputs refused: the world's input queue was full, or past the player's
    /// per-tick limit.
    pub(crate) fn record_inputs_dropped(&self, n: u64) {
        if n > 0 {
            self.inputs_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The bytes of its client's messages a player's session holds went from `before` to
    /// `now`.
    pub(crate) fn replace_received_held(&self, before: u64, now: u64) {
        if now != before {
            self.received_held.fetch_add(now, Ordering::Relaxed);
            self.received_held.fetch_sub(before, Ordering::Relaxed);
        }
    }

    /// A player's smoothed RTT went from `before` to `now` microseconds (the sum behind the
    /// mean RTT).
    pub(crate) fn replace_rtt(&self, before: u64, now: u64) {
        if now != before {
            self.rtt_sum_us.fetch_add(now, Ordering::Relaxed);
            self.rtt_sum_us.fetch_sub(before, Ordering::Relaxed);
        }
    }

    /// Sets the tick period (the budget a tick must fit in).
    pub fn set_tick_period(&self, period: Duration) {
        if let Ok(mut p) = self.tick_period.lock() {
            *p = period;
        }
    }

    /// The tick period.
    pub fn tick_period(&self) -> Duration {
        self.tick_period.lock().map(|p| *p).unwrap_or(Duration::from_secs(1) / 60)
    }

    /// Quantile of how late recent ticks started after their scheduled time.
    pub fn tick_lateness_quantile(&self, q: f64) -> Duration {
        self.lateness_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Records how long an input waited from arrival to being applied, whether that was
    /// within one tick period, and whether it was applied by the first tick after its arrival
    /// (`next_tick`: it arrived after the previous tick took its inputs).
    pub fn record_input(&self, d: Duration, tick: Duration, next_tick: bool) {
        self.inputs_applied.fetch_add(1, Ordering::Relaxed);
        if d <= tick {
            self.inputs_on_time.fetch_add(1, Ordering::Relaxed);
        }
        if next_tick {
            self.inputs_next_tick.fetch_add(1, Ordering::Relaxed);
        }
        self.record_input_delay(d);
    }

    /// Records how long an input waited from arrival to being applied.
    pub fn record_input_delay(&self, d: Duration) {
        self.hot.input_delay.record(d.as_secs_f64());
        if let Ok(mut r) = self.input_delay_us.lock() {
            r.push(d);
        }
    }

    /// Records the server's added latency for one input: from its arrival to the snapshot
    /// with its effect leaving, without the wait for the tick to begin.
    pub fn record_input_effect(&self, d: Duration) {
        self.hot.input_effect.record(d.as_secs_f64());
        if let Ok(mut r) = self.input_effect_us.lock() {
            r.push(d);
        }
    }

    /// Records how far (seconds) behind the newest snapshot an input's reported view was.
    pub fn record_view_age(&self, seconds: f64) {
        self.hot.view_age.record(seconds);
    }

    /// Quantile of the added input-to-effect latency over recent inputs.
    pub fn input_effect_quantile(&self, q: f64) -> Duration {
        self.input_effect_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Records one datagram sent.
    pub fn record_sent(&self, kind: SentKind, packets: u64, bytes: u64) {
        let c = &self.sent[kind as usize];
        c[0].fetch_add(packets, Ordering::Relaxed);
        c[1].fetch_add(bytes, Ordering::Relaxed);
        self.packets_sent.fetch_add(packets, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records bytes sent inside datagrams already counted (a payload packet's sections).
    pub fn record_sent_bytes(&self, kind: SentKind, bytes: u64) {
        self.sent[kind as usize][1].fetch_add(bytes, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records one datagram received.
    pub fn record_received(&self, kind: ReceivedKind, bytes: u64) {
        let c = &self.received[kind as usize];
        c[0].fetch_add(1, Ordering::Relaxed);
        c[1].fetch_add(bytes, Ordering::Relaxed);
        self.packets_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records a snapshot sent: its encoded and sent sizes, the age of its baseline (`None`
    /// for a full snapshot) and the changed entities it left for later (over its budget).
    pub fn record_snapshot(&self, encoded: usize, sent: usize, baseline_age: Option<Duration>, deferred: u32) {
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        if deferred > 0 {
            self.entities_deferred.fetch_add(u64::from(deferred), Ordering::Relaxed);
        }
        self.snapshot_bytes.fetch_add(encoded as u64, Ordering::Relaxed);
        self.hot.snapshot_encoded.record(encoded as f64);
        self.hot.snapshot_sent.record(sent as f64);
        match baseline_age {
            Some(age) => self.hot.baseline_age.record(age.as_secs_f64()),
            None => {
                self.full_snapshots.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records one player's link figures and send rate in bytes a second (sampled about
    /// once a second per player).
    pub fn record_link(&self, rtt: Duration, jitter: Duration, loss: f64, send_rate: u32) {
        self.hist.send_rate.record(f64::from(send_rate));
        self.hist.rtt.record(rtt.as_secs_f64());
        self.hist.jitter.record(jitter.as_secs_f64());
        self.hist.loss.record(loss.clamp(0.0, 1.0));
    }

    /// Records a connection's end.
    pub(crate) fn record_end(&self, reason: EndReason) {
        self.players.fetch_sub(1, Ordering::Relaxed);
        self.disconnects.fetch_add(1, Ordering::Relaxed);
        self.ends[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a dropped datagram.
    pub fn record_drop(&self, why: DatagramDrop, n: u64) {
        if n > 0 {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            self.drops[why as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records one receive call that took `n` datagrams.
    pub fn record_receive_batch(&self, n: usize) {
        if n > 0 {
            self.receive_calls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a rejected handshake packet.
    pub fn record_rejection(&self, why: DropReason) {
        self.handshake_drops.fetch_add(1, Ordering::Relaxed);
        self.rejections[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a datagram from a connected player's address that was dropped.
    pub fn record_player_drop(&self, why: crate::server::cores::session::PacketDrop) {
        let i = match why {
            crate::server::cores::session::PacketDrop::Netcode(r) => r as usize,
            crate::server::cores::session::PacketDrop::Malformed => DropReason::ALL.len(),
            crate::server::cores::session::PacketDrop::UnexpectedSystemMessage => DropReason::ALL.len() + 1,
        };
        self.player_drops[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Datagrams from connected players dropped so far for `why`.
    pub fn player_drops(&self, why: crate::server::cores::session::PacketDrop) -> u64 {
        let i = match why {
            crate::server::cores::session::PacketDrop::Netcode(r) => r as usize,
            crate::server::cores::session::PacketDrop::Malformed => DropReason::ALL.len(),
            crate::server::cores::session::PacketDrop::UnexpectedSystemMessage => DropReason::ALL.len() + 1,
        };
        self.player_drops[i].load(Ordering::Relaxed)
    }

    /// Bytes received so far of `kind`.
    pub fn received_bytes(&self, kind: ReceivedKind) -> u64 {
        self.received[kind as usize][1].load(Ordering::Relaxed)
    }

    /// Handshake rejections so far for `why`.
    pub fn rejections(&self, why: DropReason) -> u64 {
        self.rejections[why as usize].load(Ordering::Relaxed)
    }

    /// Replaces one player's figures (the player actor calls this about once a second).
    pub fn set_player(&self, stats: PlayerStats) {
        if let Ok(mut m) = self.per_player.lock() {
            m.insert(stats.id, stats);
        }
    }

    /// A connected player's address, from its figures.
    pub(crate) fn player_addr(&self, id: u32) -> Option<std::net::SocketAddr> {
        self.per_player.lock().ok()?.get(&id)?.addr.parse().ok()
    }

    /// Whether a player's figures are held (it is connected).
    pub(crate) fn has_player(&self, id: u32) -> bool {
        self.per_player.lock().is_ok_and(|m| m.contains_key(&id))
    }

    /// The `q` quantile (0 to 1) of the connected players' round-trip times, from their
    /// newest figures (each refreshed about once a second): a median (`0.5`) that one hostile
    /// client's seconds-long RTT cannot move, unlike a mean. Zero with no player.
    pub fn rtt_quantile(&self, q: f64) -> Duration {
        let mut rtts: Vec<f64> =
            self.per_player.lock().map(|m| m.values().map(|p| p.rtt_seconds).collect()).unwrap_or_default();
        if rtts.is_empty() {
            return Duration::ZERO;
        }
        rtts.sort_unstable_by(f64::total_cmp);
        let i = ((rtts.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        Duration::from_secs_f64(rtts[i].max(0.0))
    }

    /// Forgets a player's figures.
    pub fn remove_player(&self, id: u32) {
        if let Ok(mut m) = self.per_player.lock() {
            m.remove(&id);
        }
    }

    /// Every connected player's figures, as a JSON array; with their addresses only if
    /// `with_addresses`.
    pub fn players_json(&self, with_addresses: bool) -> String {
        let mut list: Vec<PlayerStats> =
            self.per_player.lock().map(|m| m.values().cloned().collect()).unwrap_or_default();
        if !with_addresses {
            list.iter_mut().for_each(|p| p.addr.clear());
        }
        serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
    }

    /// Records that a part of the server failed: `/healthz` fails from now on, saying what.
    /// The first failure is kept.
    pub fn set_failed(&self, what: String) {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert(what);
        }
        self.set_ready(false);
    }

    /// What failed, if a part of the server did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Marks the server ready (or not: it is draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the server accepts players: started, not draining.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Time since the newest tick finished (since start, before the first tick).
    pub fn since_last_tick(&self) -> Duration {
        let at = Duration::from_micros(self.last_tick_at_us.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(at)
    }

    /// Tick duration quantile over the recent ticks.
    pub fn tick_quantile(&self, q: f64) -> Duration {
        self.ticks_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Input delay quantile over recent inputs.
    pub fn input_delay_quantile(&self, q: f64) -> Duration {
        self.input_delay_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// The running totals now (each read on its own, relaxed: a moment's figures, not one
    /// atomic snapshot).
    pub fn totals(&self) -> Totals {
        let get = |a: &dyn Count| a.value();
        Totals {
            players: get(&self.players),
            slots: get(&self.slots),
            connects: get(&self.connects),
            disconnects: get(&self.disconnects),
            ticks: get(&self.ticks),
            tick_overruns: get(&self.tick_overruns),
            entities: get(&self.entities),
            packets_received: get(&self.packets_received),
            bytes_received: get(&self.bytes_received),
            packets_sent: get(&self.packets_sent),
            bytes_sent: get(&self.bytes_sent),
            snapshot_bytes: get(&self.snapshot_bytes),
            snapshots: get(&self.snapshots),
            full_snapshots: get(&self.full_snapshots),
            dropped: get(&self.dropped),
            handshake_drops: get(&self.handshake_drops),
            actor_failures: get(&self.actor_failures),
            rtt_sum_us: get(&self.rtt_sum_us),
            player_ticks: get(&self.player_ticks),
            inputs_on_time: get(&self.inputs_on_time),
            inputs_next_tick: get(&self.inputs_next_tick),
            inputs_applied: get(&self.inputs_applied),
            reliable_resends: get(&self.reliable_resends),
            reliable_queue: get(&self.reliable_queue),
            received_held: get(&self.received_held),
            player_backlog: get(&self.player_backlog),
            snapshots_replaced: get(&self.snapshots_replaced),
            snapshots_held: get(&self.snapshots_held),
            entities_deferred: get(&self.entities_deferred),
            send_rate_cuts: get(&self.send_rate_cuts),
            entities_skipped: get(&self.entities_skipped),
            send_rate_path_changes: get(&self.send_rate_path_changes),
            snapshots_paced: get(&self.snapshots_paced),
            snapshot_interval: get(&self.snapshot_interval),
            inputs_dropped: get(&self.inputs_dropped),
            receive_calls: get(&self.receive_calls),
            send_calls: get(&self.send_calls),
        }
    }

    /// Reads a counter.
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.value()
    }

    /// Folds recorded histogram samples into their buckets, so that memory stays bounded
    /// between scrapes (the server calls this every few seconds).
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    fn counter(&self, name: &'static str, labels: &[(&'static str, &'static str)], value: u64) {
        let c: Counter = self.recorder.register_counter(&key(name, labels), &META);
        c.absolute(value);
    }

    fn gauge(&self, name: &'static str, labels: &[(&'static str, &'static str)], value: f64) {
        let g: Gauge = self.recorder.register_gauge(&key(name, labels), &META);
        g.set(value);
    }

    /// Reports a zone's figures (`volley_zone_*`) from now on.
    pub fn add_zone(&self, counters: Arc<ZoneCounters>) {
        if let Ok(mut z) = self.zones.lock() {
            z.push(counters);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let get = |a: &dyn Count| a.value();
        self.counter("volley_ticks_total", &[], get(&self.ticks));
        self.counter("volley_tick_overruns_total", &[], get(&self.tick_overruns));
        for k in self.kinds.get().into_iter().flatten() {
            let l = [("kind", k.label)];
            self.gauge("volley_worlds", &l, get(&k.worlds) as f64);
            self.gauge("volley_world_players", &l, get(&k.players) as f64);
            self.counter("volley_world_tick_overruns_total", &l, get(&k.overruns));
        }
        self.gauge("volley_last_tick_timestamp_seconds", &[], get(&self.last_tick_unix_us) as f64 / 1e6);
        self.gauge("volley_tick_period_seconds", &[], self.tick_period().as_secs_f64());
        self.counter("volley_snapshots_total", &[], get(&self.snapshots));
        self.counter("volley_snapshots_replaced_total", &[], get(&self.snapshots_replaced));
        self.counter("volley_snapshots_held_total", &[], get(&self.snapshots_held));
        self.counter("volley_snapshot_entities_deferred_total", &[], get(&self.entities_deferred));
        self.counter("volley_send_rate_cuts_total", &[], get(&self.send_rate_cuts));
        self.counter("volley_snapshot_entities_skipped_total", &[], get(&self.entities_skipped));
        self.counter("volley_send_rate_path_changes_total", &[], get(&self.send_rate_path_changes));
        self.counter("volley_snapshots_paced_total", &[], get(&self.snapshots_paced));
        self.gauge("volley_snapshot_rate_ratio", &[], 1.0 / get(&self.snapshot_interval).max(1) as f64);
        self.counter("volley_snapshot_full_total", &[], get(&self.full_snapshots));
        self.counter("volley_reliable_resends_total", &[], get(&self.reliable_resends));
        self.counter("volley_inputs_applied_total", &[], get(&self.inputs_applied));
        self.counter("volley_inputs_dropped_total", &[], get(&self.inputs_dropped));
        for (path, n) in ["left", "woke"].iter().zip(&self.deliveries) {
            self.counter("volley_player_datagrams_total", &[("path", path)], get(n));
        }
        for (reason, n) in WAKEUPS.iter().zip(&self.wakeups) {
            self.counter("volley_player_wakeups_total", &[("reason", reason)], get(n));
        }
        self.counter("volley_fanout_repeat_wakeups_total", &[], get(&self.repeat_wakeups));
        self.counter("volley_inputs_on_time_total", &[], get(&self.inputs_on_time));
        self.counter("volley_inputs_next_tick_total", &[], get(&self.inputs_next_tick));
        self.counter("volley_player_ticks_total", &[], get(&self.player_ticks));
        self.counter("volley_socket_receive_calls_total", &[], get(&self.receive_calls));
        self.counter("volley_socket_send_calls_total", &[], get(&self.send_calls));
        for (i, kind) in SENT_KINDS.iter().enumerate() {
            self.counter("volley_sent_packets_total", &[("kind", kind)], get(&self.sent[i][0]));
            self.counter("volley_sent_bytes_total", &[("kind", kind)], get(&self.sent[i][1]));
        }
        for (i, kind) in RECEIVED_KINDS.iter().enumerate() {
            self.counter("volley_received_packets_total", &[("kind", kind)], get(&self.received[i][0]));
            self.counter("volley_received_bytes_total", &[("kind", kind)], get(&self.received[i][1]));
        }
        self.gauge("volley_players", &[], get(&self.players) as f64);
        let rows = self.per_player.lock().map_or(0, |p| p.len());
        self.tables[5].store(rows as u64, Ordering::Relaxed);
        self.counter("volley_client_messages_total", &[], get(&self.client_messages));
        self.counter("volley_recorded_frames_total", &[], get(&self.recording[0]));
        // Every server exports the zone series (zeros when it runs no zone), so dashboards
        // and alerts see one set of names everywhere.
        if let Ok(zones) = self.zones.lock() {
            let sum = |f: fn(&ZoneCounters) -> &AtomicU64| zones.iter().map(|z| get(f(z))).sum::<u64>();
            self.counter("volley_zone_border_frames_total", &[("direction", "out")], sum(|z| &z.frames_out));
            self.counter("volley_zone_border_frames_total", &[("direction", "in")], sum(|z| &z.frames_in));
            self.counter("volley_zone_border_frames_dropped_total", &[], sum(|z| &z.frames_dropped));
            self.counter("volley_zone_border_frames_refused_total", &[], sum(|z| &z.frames_refused));
            self.counter("volley_zone_border_entities_sent_total", &[], sum(|z| &z.entities_out));
            self.gauge("volley_zone_border_entities", &[], sum(|z| &z.entities_in) as f64);
            self.counter("volley_zone_fades_total", &[], sum(|z| &z.fades));
            self.counter("volley_zone_handoff_inputs_lost_total", &[], sum(|z| &z.inputs_lost));
            self.counter("volley_zone_handoff_inputs_repeated_total", &[], sum(|z| &z.inputs_repeated));
            for (i, outcome) in ["accepted", "refused", "timed_out"].iter().enumerate() {
                let n = zones.iter().map(|z| get(&z.handoffs_out[i])).sum::<u64>();
                self.counter("volley_zone_handoffs_total", &[("outcome", outcome)], n);
            }
            for (i, outcome) in ["accepted", "refused"].iter().enumerate() {
                let n = zones.iter().map(|z| get(&z.handoffs_in[i])).sum::<u64>();
                self.counter("volley_zone_handoffs_received_total", &[("outcome", outcome)], n);
            }
            // Kept in microseconds (the wait) and nanoseconds (the work), printed in seconds
            // (fix_seconds).
            let waited = self.recorder.register_counter(&key("volley_zone_handoff_wait_seconds_total", &[]), &META);
            waited.absolute(sum(|z| &z.handoff_us));
            let worked = self.recorder.register_counter(&key("volley_zone_border_work_seconds_total", &[]), &META);
            worked.absolute(sum(|z| &z.work_ns));
            let chosen = self.recorder.register_counter(&key("volley_zone_border_relevancy_seconds_total", &[]), &META);
            chosen.absolute(sum(|z| &z.relevancy_ns));
            let world = self.recorder.register_counter(&key("volley_zone_border_world_seconds_total", &[]), &META);
            world.absolute(sum(|z| &z.world_ns));
            // Of no zone, none is down.
            self.gauge("volley_zone_bus_up", &[], zones.iter().map(|z| get(&z.bus_up)).min().unwrap_or(1) as f64);
            let rtt = zones.iter().map(|z| get(&z.bus_rtt_us)).max().unwrap_or(0);
            self.gauge("volley_zone_bus_rtt_seconds", &[], rtt as f64 / 1e6);
        }
        self.counter("volley_recording_dropped_frames_total", &[], get(&self.recording[1]));
        self.counter("volley_recorded_bytes_total", &[], get(&self.recording[2]));
        self.counter("volley_recording_failures_total", &[], get(&self.recording[3]));
        for (reason, n) in CLIENT_MESSAGE_DROPS.iter().zip(&self.client_message_drops) {
            self.counter("volley_client_messages_dropped_total", &[("reason", reason)], get(n));
        }
        for (fault, n) in WorldFault::ALL.iter().zip(&self.world_faults) {
            self.counter("volley_world_errors_total", &[("kind", fault.label())], get(n));
        }
        for (table, n) in TABLES.iter().zip(&self.tables) {
            self.gauge("volley_table_entries", &[("table", table)], get(n) as f64);
        }
        self.gauge("volley_player_slots", &[], get(&self.slots) as f64);
        self.counter("volley_connects_total", &[], get(&self.connects));
        for (i, reason) in END_REASONS.iter().enumerate() {
            self.counter("volley_disconnects_total", &[("reason", reason)], get(&self.ends[i]));
        }
        for r in DropReason::ALL {
            self.counter("volley_handshake_rejections_total", &[("reason", r.label())], self.rejections(*r));
        }
        for (i, r) in DropReason::ALL.iter().enumerate() {
            self.counter("volley_player_packets_dropped_total", &[("reason", r.label())], get(&self.player_drops[i]));
        }
        self.counter(
            "volley_player_packets_dropped_total",
            &[("reason", "malformed_payload")],
            get(&self.player_drops[DropReason::ALL.len()]),
        );
        self.counter(
            "volley_player_packets_dropped_total",
            &[("reason", "unexpected_system_message")],
            get(&self.player_drops[DropReason::ALL.len() + 1]),
        );
        for (i, reason) in DATAGRAM_DROPS.iter().enumerate() {
            self.counter("volley_datagrams_dropped_total", &[("reason", reason)], get(&self.drops[i]));
        }
        self.gauge("volley_reliable_queue_messages", &[], get(&self.reliable_queue) as f64);
        self.gauge("volley_player_received_bytes", &[], get(&self.received_held) as f64);
        self.counter("volley_pending_handshakes_given_way_total", &[], get(&self.handshakes_given_way));
        self.gauge("volley_mailbox_backlog_messages", &[("actor", "player")], get(&self.player_backlog) as f64);
        self.counter("volley_actor_failures_total", &[("actor", "player")], get(&self.actor_failures));
        self.gauge("volley_entities", &[], get(&self.entities) as f64);
        self.gauge("volley_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
        if let Some((cpu, rss)) = process_usage() {
            self.gauge("process_resident_memory_bytes", &[], rss as f64);
            // CPU time is a counter in whole ticks of 10 ms; expose it in seconds.
            let c = self.recorder.register_counter(&key("process_cpu_seconds_total", &[]), &META);
            c.absolute(cpu.as_millis() as u64);
        }
        let mut text = self.handle.render();
        self.hot.render(&mut text);
        fix_seconds(text)
    }
}

/// Counters in seconds kept in smaller integer units (`metrics` counters are integers), and
/// the unit each is kept in, per second.
const SECONDS_IN_UNITS: [(&str, f64); 5] = [
    ("process_cpu_seconds_total", 1e3),
    ("volley_zone_handoff_wait_seconds_total", 1e6),
    ("volley_zone_border_work_seconds_total", 1e9),
    ("volley_zone_border_relevancy_seconds_total", 1e9),
    ("volley_zone_border_world_seconds_total", 1e9),
];

/// Prints the counters of [`SECONDS_IN_UNITS`] in seconds.
fn fix_seconds(text: String) -> String {
    let mut out = String::with_capacity(text.len());
    'lines: for line in text.lines() {
        for (name, per_second) in SECONDS_IN_UNITS {
            if let Some(v) = line.strip_prefix(name).and_then(|r| r.strip_prefix(' '))
                && let Ok(n) = v.trim().parse::<u64>()
            {
                out.push_str(&format!("{name} {:.6}\n", n as f64 / per_second));
                continue 'lines;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Counts what `tx` sent as control traffic, and what it failed to send.
pub(crate) fn count_control(metrics: &ServerMetrics, tx: &UdpTx<'_>) {
    if tx.sent > 0 {
        metrics.record_sent(SentKind::Control, tx.sent, tx.bytes);
    }
    metrics.record_drop(DatagramDrop::SendFailed, tx.dropped);
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    /// `histogram_quantile`'s reading of `name`: the bucket `(lo, hi]` its `q` quantile
    /// falls in, from the rendered text.
    fn quantile_bucket(text: &str, name: &str, q: f64) -> (f64, f64) {
        let prefix = format!("{name}_bucket{{le=\"");
        let buckets: Vec<(f64, f64)> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (le, n) = rest.split_once("\"} ")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, n.trim().parse().ok()?))
            })
            .collect();
        let total = buckets.last().map_or(0.0, |b| b.1);
        let i = buckets.iter().position(|(_, n)| *n >= q * total).unwrap_or(0);
        (if i == 0 { 0.0 } else { buckets[i - 1].0 }, buckets[i].0)
    }

    /// A hot histogram renders as the exporter's do: cumulative buckets whose edge is
    /// inclusive, `+Inf`, sum and count, with samples from several threads all counted.
    #[test]
    fn hot_histograms_count_every_thread_and_render_as_prometheus_reads_them() {
        let h = HotHistogram::new("x_bytes", "stage=\"sent\"", &[1.0, 10.0]);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for v in [0.5, 1.0, 7.0, 10.0, 11.0, f64::NAN] {
                        h.record(v);
                    }
                });
            }
        });
        let mut text = String::new();
        h.render(&mut text);
        assert_eq!(
            text,
            "x_bytes_bucket{stage=\"sent\",le=\"1\"} 6\nx_bytes_bucket{stage=\"sent\",le=\"10\"} 12\n\
             x_bytes_bucket{stage=\"sent\",le=\"+Inf\"} 15\nx_bytes_sum{stage=\"sent\"} 88.5\nx_bytes_count{stage=\"sent\"} 15\n"
        );
        let h = HotHistogram::new("y_seconds", "", &[0.5]);
        h.record(0.25);
        let mut text = String::new();
        h.render(&mut text);
        assert_eq!(
            text,
            "y_seconds_bucket{le=\"0.5\"} 1\ny_seconds_bucket{le=\"+Inf\"} 1\ny_seconds_sum 0.25\ny_seconds_count 1\n"
        );
        // Each family once, with its help and type, in the server's exposition.
        let m = ServerMetrics::new();
        m.record_snapshot(100, 120, None, 0);
        let text = m.render();
        for family in
            ["volley_snapshot_size_bytes", "volley_input_delay_seconds", "volley_snapshot_baseline_age_seconds"]
        {
            assert_eq!(text.matches(&format!("# TYPE {family} histogram")).count(), 1, "{family}");
            assert_eq!(text.matches(&format!("# HELP {family} ")).count(), 1, "{family}");
        }
        assert!(text.contains("volley_snapshot_size_bytes_bucket{stage=\"encoded\",le=\"128\"} 1\n"));
        assert!(text.contains("volley_snapshot_size_bytes_count{stage=\"sent\"} 1\n"));
    }

    #[test]
    fn whole_tick_values_fall_in_narrow_buckets_at_any_tick_rate() {
        for hz in [60u16, 30, 20] {
            let m = ServerMetrics::with_tick_rate(hz);
            let p = Duration::from_secs(1) / u32::from(hz);
            for _ in 0..100 {
                m.record_snapshot(10, 20, Some(p), 0);
                m.record_tick(Duration::from_micros(30), Duration::ZERO);
                m.record_input_delay(p / 2);
            }
            m.upkeep();
            let text = m.render();
            let (lo, hi) = quantile_bucket(&text, "volley_snapshot_baseline_age_seconds", 0.5);
            let tick = p.as_secs_f64();
            assert!(lo < tick && tick <= hi && hi - lo <= 0.1 * tick + 1e-9, "{hz} Hz: a one-tick age in ({lo}, {hi}]");
            let (lo, hi) = quantile_bucket(&text, "volley_tick_duration_seconds", 0.5);
            assert!(lo > 0.0 && hi <= 0.00005, "a 30 us tick's median is not in the first bucket: ({lo}, {hi}]");
            let edge = text
                .lines()
                .filter_map(|l| l.strip_prefix("volley_input_delay_seconds_bucket{le=\""))
                .filter_map(|r| r.split_once('"')?.0.parse::<f64>().ok())
                .any(|le| (le - tick).abs() < 1e-9);
            assert!(edge, "{hz} Hz: an input-delay bucket edge at the tick period");
        }
    }
}

#[cfg(test)]
mod rtt_tests {
    use super::*;

    #[test]
    fn one_hostile_clients_rtt_does_not_move_the_players_median() {
        let m = ServerMetrics::new();
        assert_eq!(m.rtt_quantile(0.5), Duration::ZERO, "no player");
        for id in 0..9 {
            m.set_player(PlayerStats { id, rtt_seconds: 0.020 + f64::from(id) * 0.001, ..PlayerStats::default() });
        }
        // A client that never acknowledges reads a ten-second RTT: a mean of all ten would be
        // over a second; the median is still the others'.
        m.set_player(PlayerStats { id: 9, rtt_seconds: 10.1, ..PlayerStats::default() });
        let median = m.rtt_quantile(0.5);
        assert!(median >= Duration::from_millis(24) && median <= Duration::from_millis(26), "{median:?}");
        assert_eq!(m.rtt_quantile(1.0), Duration::from_secs_f64(10.1));
        m.remove_player(9);
        assert!(m.rtt_quantile(1.0) < Duration::from_millis(30));
    }
}
