//! The Prometheus exposition: every figure's name, unit and help, and the text a scrape reads.

use super::hot::Count;
use super::traffic::{CLIENT_MESSAGE_DROPS, DATAGRAM_DROPS, END_REASONS, RECEIVED_KINDS, SENT_KINDS, TABLES, WAKEUPS};
use super::{ServerMetrics, process_usage};
use crate::protocol::netcode::DropReason;
use crate::protocol::zone::ZoneCounters;
use crate::server::game::world::WorldFault;
use metrics::{Counter, Gauge, Key, Label, Metadata, Recorder, SharedString, Unit};
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) static META: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

pub(super) fn key(name: &'static str, labels: &[(&'static str, &'static str)]) -> Key {
    let labels: Vec<Label> = labels.iter().map(|(k, v)| Label::new(*k, *v)).collect();
    Key::from_parts(name, labels)
}

/// Counters in seconds kept in smaller integer units (`metrics` counters are integers), and
/// the unit each is kept in, per second.
pub(super) const SECONDS_IN_UNITS: [(&str, f64); 5] = [
    ("process_cpu_seconds_total", 1e3),
    ("volley_zone_handoff_wait_seconds_total", 1e6),
    ("volley_zone_border_work_seconds_total", 1e9),
    ("volley_zone_border_relevancy_seconds_total", 1e9),
    ("volley_zone_border_world_seconds_total", 1e9),
];

/// Prints the counters of [`SECONDS_IN_UNITS`] in seconds.
pub(super) fn fix_seconds(text: String) -> String {
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

impl ServerMetrics {
    pub(super) fn describe(&self) {
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
            "volley_send_rate_silences_total",
            None,
            "Times a client acknowledged nothing it was sent for a second: its send rate fell to the least.",
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
        d(
            "volley_players_away",
            None,
            "Players whose client has not been heard for its connection timeout, kept for the resume grace.",
        );
        d(
            "volley_resume_gap_seconds",
            Some(Unit::Seconds),
            "Time from the last packet heard on a session's old connection to its resumption on a new one.",
        );
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
        d("volley_sessions_resumed_total", None, "Sessions resumed on a new connection with a resume ticket.");
        d(
            "volley_resume_refusals_total",
            None,
            "Resume tickets refused, by reason (gone: the session was over; forged, stale and replayed tickets are handshake rejections).",
        );
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

    fn counter(&self, name: &'static str, labels: &[(&'static str, &'static str)], value: u64) {
        let c: Counter = self.recorder.register_counter(&key(name, labels), &META);
        c.absolute(value);
    }

    fn gauge(&self, name: &'static str, labels: &[(&'static str, &'static str)], value: f64) {
        let g: Gauge = self.recorder.register_gauge(&key(name, labels), &META);
        g.set(value);
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
        self.counter("volley_send_rate_silences_total", &[], get(&self.send_rate_silences));
        self.counter("volley_sessions_resumed_total", &[], get(&self.resumed));
        self.counter("volley_resume_refusals_total", &[("reason", "gone")], get(&self.resume_refusals));
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
        self.gauge("volley_players_away", &[], get(&self.away) as f64);
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
