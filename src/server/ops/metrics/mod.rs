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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{Histogram, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::protocol::netcode::DropReason;
use crate::protocol::zone::ZoneCounters;
use crate::server::game::world::WorldFault;

mod hot;
mod players;
mod render;
#[cfg(test)]
mod tests;
mod ticks;
mod traffic;
mod worlds;
pub(crate) use hot::{Count, HotHistogram, Tally};
use hot::{Histograms, HotHistograms, Ring};
pub use players::PlayerStats;
use render::{META, key};
pub use traffic::{DatagramDrop, ReceivedKind, SentKind, TABLES};
#[cfg(feature = "test-hooks")]
pub use traffic::{DeliveryPath, Wakeup};
#[cfg(not(feature = "test-hooks"))]
pub(crate) use traffic::{DeliveryPath, Wakeup};
use traffic::{END_REASONS, PLAYER_DROPS, SENT_KINDS};
pub(crate) use traffic::{EndReason, count_control};

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
/// Buckets for the time from a drop to its resumption, in seconds (a quick NAT rebind, a
/// second, to a long grace).
pub const RESUME_GAP_BUCKETS: &[f64] = &[0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0];
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
    /// Times a client's send rate fell to its least because it acknowledged nothing it was
    /// sent for [`ACK_SILENCE`](crate::protocol::reliability::rate::ACK_SILENCE).
    pub send_rate_silences: u64,
    /// Sessions resumed on a new connection with a resume ticket (a new address, a silence).
    pub sessions_resumed: u64,
    /// Resume tickets refused because their session was over.
    pub resume_refusals: u64,
    /// Players whose client is silent now, kept for the resume grace.
    pub players_away: u64,
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
    pub(crate) send_rate_silences: AtomicU64,
    /// Sessions resumed with a resume ticket.
    pub(crate) resumed: AtomicU64,
    /// Players whose client is silent, kept for it to resume.
    pub(crate) away: AtomicU64,
    /// Resume tickets refused: their session was over.
    pub(crate) resume_refusals: AtomicU64,
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
        b = buckets(b, "volley_resume_gap_seconds", RESUME_GAP_BUCKETS);
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
            resume_gap: h("volley_resume_gap_seconds", &[]),
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
            send_rate_silences: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            away: AtomicU64::new(0),
            resume_refusals: AtomicU64::new(0),
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

    /// Recordings so far: world ticks written and bytes written (both 0 when nothing is
    /// recorded).
    pub fn recorded(&self) -> (u64, u64) {
        (self.recording[0].load(Ordering::Relaxed), self.recording[2].load(Ordering::Relaxed))
    }

    /// Records that a part of the server failed: `/healthz` fails from now on, saying what.
    /// The first failure is kept.
    pub(crate) fn set_failed(&self, what: String) {
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
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the server accepts players: started, not draining.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
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
            send_rate_silences: get(&self.send_rate_silences),
            sessions_resumed: get(&self.resumed),
            resume_refusals: get(&self.resume_refusals),
            players_away: get(&self.away),
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
    pub(crate) fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}
