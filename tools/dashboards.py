#!/usr/bin/env python3
"""Writes the Grafana dashboards under dashboards/ (run from anywhere: python3 tools/dashboards.py).

The JSON files are what users and Grafana's provisioning load; this script keeps their panels
consistent (datasource variable, job/instance filters, units). tests/dashboards.rs lints the
output and tests/prometheus_e2e.rs runs every query against a real Prometheus."""
import json
import os
import sys

SEL = 'job=~"$job",instance=~"$instance"'
RI = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}


def q(expr, legend):
    return {"expr": expr, "legendFormat": legend}


def quantiles(metric, qs, by=""):
    extra = f", {by}" if by else ""
    return [
        q(
            f"histogram_quantile({v}, sum by (le{extra}) (rate({metric}_bucket{{{SEL}}}[{RI}])))",
            f"p{int(v * 100)}" + (f" {{{{{by}}}}}" if by else ""),
        )
        for v in qs
    ]


class Board:
    def __init__(self, uid, title, description):
        self.uid, self.title, self.description = uid, title, description
        self.panels, self.next_id, self.y = [], 1, 0
        self.x = 0

    def row(self, title):
        if self.x:
            self.y += 8
            self.x = 0
        self.panels.append(
            {"id": self.next_id, "type": "row", "title": title, "collapsed": False, "panels": [],
             "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}}
        )
        self.next_id += 1
        self.y += 1

    def panel(self, title, unit, targets, description, kind="timeseries", w=12, h=8, thresholds=None):
        if self.x + w > 24:
            self.y += h
            self.x = 0
        refs = "ABCDEFGH"
        p = {
            "id": self.next_id,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
            if kind == "timeseries"
            else {"reduceOptions": {"calcs": ["lastNotNull"]}},
            "targets": [dict(t, refId=refs[i], datasource=DS) for i, t in enumerate(targets)],
        }
        if thresholds:
            p["fieldConfig"]["defaults"]["thresholds"] = {
                "mode": "absolute",
                "steps": [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in thresholds],
            }
        self.panels.append(p)
        self.next_id += 1
        self.x += w
        if self.x >= 24:
            self.x = 0
            self.y += h

    def json(self):
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["volley", "game-server"],
            "timezone": "browser",
            "schemaVersion": 39,
            "version": 1,
            "editable": True,
            "refresh": "10s",
            "time": {"from": "now-30m", "to": "now"},
            "annotations": {"list": []},
            "templating": {
                "list": [
                    {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                     "current": {}, "hide": 0, "refresh": 1},
                    {"name": "job", "label": "Job", "type": "query", "datasource": DS,
                     "query": {"query": "label_values(volley_build_info, job)", "refId": "job"},
                     "definition": "label_values(volley_build_info, job)",
                     "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "refresh": 2, "sort": 1},
                    {"name": "instance", "label": "Instance", "type": "query", "datasource": DS,
                     "query": {"query": 'label_values(volley_build_info{job=~"$job"}, instance)', "refId": "instance"},
                     "definition": 'label_values(volley_build_info{job=~"$job"}, instance)',
                     "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "refresh": 2, "sort": 1},
                ]
            },
            "panels": self.panels,
        }


def lag():
    b = Board("volley-lag", "volley — lag", "Tick loop health and what players feel: RTT, jitter, loss, "
              "how stale acknowledged baselines are, and how long inputs wait.")
    b.row("Tick loop")
    b.panel("Tick duration vs budget", "s",
            quantiles("volley_tick_duration_seconds", [0.5, 0.99])
            + [q(f"max(volley_tick_period_seconds{{{SEL}}})", "budget (tick period)")],
            "Time the world actor spends per tick. p99 above the budget line means ticks overrun.",
            thresholds=[(0.0167, "red")])
    b.panel("Tick start lateness", "s", quantiles("volley_tick_lateness_seconds", [0.5, 0.99]),
            "How late ticks start after their scheduled time (scheduler pressure).")
    b.panel("Tick overruns", "cps", [q(f"sum(rate(volley_tick_overruns_total{{{SEL}}}[{RI}]))", "overruns/s")],
            "Times per second the loop fell so far behind that it skipped ahead.", w=8)
    b.panel("Since last tick", "s", [q(f"max(time() - volley_last_tick_timestamp_seconds{{{SEL}}})", "seconds")],
            "Seconds since the newest tick finished; more than a second means a stalled tick loop.",
            kind="stat", w=8, thresholds=[(1, "red")])
    b.panel("Players", "none", [q(f"sum(volley_players{{{SEL}}})", "players")],
            "Players connected.", kind="stat", w=8)
    b.row("Players' links")
    b.panel("Round-trip time", "s", quantiles("volley_rtt_seconds", [0.5, 0.95, 0.99]),
            "Players' smoothed RTT (each player sampled once a second).")
    b.panel("Jitter", "s", quantiles("volley_jitter_seconds", [0.5, 0.95]),
            "Players' round-trip variation.")
    b.panel("Packet loss", "percentunit", quantiles("volley_packet_loss_ratio", [0.5, 0.95]),
            "Players' estimated packet loss.")
    b.panel("Snapshot baseline age", "s", quantiles("volley_snapshot_baseline_age_seconds", [0.5, 0.99]),
            "Age of the acknowledged snapshot each delta is encoded against: stale acks make deltas grow.")
    b.panel("Input delay (arrival to applied)", "s", quantiles("volley_input_delay_seconds", [0.5, 0.99]),
            "Time from an input's arrival to the tick that applies it (at most one tick period when healthy).")
    b.panel("Input to effect (without the tick wait)", "s", quantiles("volley_input_effect_seconds", [0.5, 0.99]),
            "Server latency from an input's arrival to the snapshot carrying its effect leaving, not counting "
            "the wait for the tick to begin.")
    b.panel("Lag compensation rewind (input view age)", "s", quantiles("volley_input_view_age_seconds", [0.5, 0.99]),
            "How far behind the newest snapshot the view each input was made with was: how far back a world "
            "that compensates lag judges shots. Near the RTT plus the clients' playback delay when healthy.")
    b.panel("Full snapshots and resends", "cps",
            [q(f"sum(rate(volley_snapshot_full_total{{{SEL}}}[{RI}]))", "full-snapshot fallbacks/s"),
             q(f"sum(rate(volley_reliable_resends_total{{{SEL}}}[{RI}]))", "reliable resends/s"),
             q(f"sum(rate(volley_snapshots_replaced_total{{{SEL}}}[{RI}]))", "snapshots skipped by lagging players/s")],
            "Snapshots sent in full (no usable baseline), reliable messages resent after a timeout, and "
            "snapshots a lagging player actor skipped for a newer tick.")
    b.panel("Sessions resumed and replaced", "cps",
            [q(f"sum(rate(volley_sessions_resumed_total{{{SEL}}}[{RI}]))", "resumed with a ticket/s"),
             q(f"sum(rate(volley_resume_refusals_total{{{SEL}}}[{RI}]))", "tickets refused (session over)/s"),
             q(f"sum(rate(volley_disconnects_total{{reason=\"replaced\",{SEL}}}[{RI}]))", "replaced by a fresh token/s")],
            "Players whose network broke (a NAT rebinding, a silence) and came back as the same player with "
            "their resume ticket; tickets refused because the session was over; sessions a fresh token of the "
            "same client replaced.")
    gap = f"sum by (le) (rate(volley_resume_gap_seconds_bucket{{{SEL}}}[{RI}]))"
    b.panel("Players away, time to resume", "s",
            [q(f"(histogram_quantile(0.5, {gap}) >= 0) or vector(0)", "drop to resumed p50"),
             q(f"(histogram_quantile(0.95, {gap}) >= 0) or vector(0)", "drop to resumed p95"),
             q(f"sum(volley_players_away{{{SEL}}})", "players away now (count)")],
            "From the last packet heard on a player's old connection to its resumed session (0 while none "
            "resumed), and the players whose client is silent past its timeout, kept for the resume grace "
            "(their world heard away).")
    applied = f"sum(rate(volley_inputs_applied_total{{{SEL}}}[{RI}]))"
    b.panel("Inputs applied in time", "percentunit",
            [q(f"sum(rate(volley_inputs_next_tick_total{{{SEL}}}[{RI}])) / {applied}", "by the next tick"),
             q(f"sum(rate(volley_inputs_on_time_total{{{SEL}}}[{RI}])) / {applied}", "within one tick period")],
            "Share of inputs applied by the first tick that started after their arrival, and (stricter: a late "
            "tick start counts against it) within one tick period of arrival.")
    b.row("Worlds")
    b.panel("Worlds by kind", "none", [q(f"sum by (kind) (volley_worlds{{{SEL}}})", "{{kind}}")],
            "World actors running, by the kinds the game declared (a lobby, its matches, a global world).", w=8)
    b.panel("Players by world kind", "none", [q(f"sum by (kind) (volley_world_players{{{SEL}}})", "{{kind}}")],
            "Players in worlds of each kind (a player is in one world; watching others does not count).", w=8)
    b.panel("World tick p99 by kind", "s",
            [q(f"histogram_quantile(0.99, sum by (le, kind) (rate(volley_world_tick_duration_seconds_bucket{{{SEL}}}[{RI}])))",
               "{{kind}} p99"),
             q(f"sum by (kind) (rate(volley_world_tick_overruns_total{{{SEL}}}[{RI}]))", "{{kind}} overruns/s")],
            "The 99th percentile of one world tick, by world kind: a slow match shows here apart from the lobby.",
            w=8, thresholds=[(0.0167, "red")])
    return b


def bandwidth():
    b = Board("volley-bandwidth", "volley — bandwidth", "What the server sends and receives, per kind and per player, "
              "snapshot sizes, and the load behind them.")
    b.row("Traffic")
    b.panel("Egress by kind", "Bps", [q(f"sum by (kind) (rate(volley_sent_bytes_total{{{SEL}}}[{RI}]))", "{{kind}}")],
            "Bytes per second sent: snapshot sections, the rest of payload packets (acks, messages, events), "
            "netcode control packets (keep-alives, handshakes, goodbyes, disconnects), and the per-datagram "
            "overhead of payload packets (netcode header and encryption tag).")
    b.panel("Ingress by kind", "Bps",
            [q(f"sum by (kind) (rate(volley_received_bytes_total{{{SEL}}}[{RI}]))", "{{kind}}")],
            "Bytes per second received: inputs and control packets.")
    b.panel("Per player", "Bps",
            [q(f"sum(rate(volley_sent_bytes_total{{{SEL}}}[{RI}])) / clamp_min(sum(volley_players{{{SEL}}}), 1)", "egress"),
             q(f"sum(rate(volley_received_bytes_total{{{SEL}}}[{RI}])) / clamp_min(sum(volley_players{{{SEL}}}), 1)",
               "ingress")],
            "Bytes per second per connected player (per-player detail: the admin endpoint /players).")
    b.panel("Packets", "pps",
            [q(f"sum by (kind) (rate(volley_sent_packets_total{{{SEL}}}[{RI}]))", "sent {{kind}}"),
             q(f"sum by (kind) (rate(volley_received_packets_total{{{SEL}}}[{RI}]))", "received {{kind}}")],
            "Datagrams per second.")
    b.row("Snapshots")
    b.panel("Snapshot size", "bytes", quantiles("volley_snapshot_size_bytes", [0.5, 0.99], by="stage"),
            "Encoded snapshot size, and the frame as sent (after lz4 where it helped, with acks and messages).")
    b.panel("Mean snapshot size and rate", "bytes",
            [q(f"sum(rate(volley_sent_bytes_total{{{SEL},kind=\"snapshot\"}}[{RI}])) / "
               f"clamp_min(sum(rate(volley_snapshots_total{{{SEL}}}[{RI}])), 1)", "bytes per snapshot")],
            "Snapshot bytes over snapshots sent.")
    b.row("Send rates")
    b.panel("Players' send rate budgets", "Bps", quantiles("volley_send_rate_bytes_per_second", [0.01, 0.1, 0.5]),
            "Each player's send rate budget (sampled once a second each): at the configured most on a quiet link, "
            "lower while its link queues. The low quantiles are the players on narrow or busy lines.", w=6)
    b.panel("Held back and left out", "ops",
            [q(f"sum(rate(volley_snapshots_held_total{{{SEL}}}[{RI}]))", "snapshots held (budget spent)"),
             q(f"sum(rate(volley_snapshot_entities_deferred_total{{{SEL}}}[{RI}]))", "entities left out by priority"),
             q(f"sum(rate(volley_snapshot_entities_skipped_total{{{SEL}}}[{RI}]))", "entities skipped by their rate")],
            "Snapshots not sent because a player's budget was spent, changed entities left for a later snapshot "
            "because the packet's budget was full (the priority accumulator picked what went), and changed entities "
            "whose own send rate (Interest::every: far ones less often) skipped the snapshot.", w=6)
    b.panel("Rate cuts", "cps", [q(f"sum(rate(volley_send_rate_cuts_total{{{SEL}}}[{RI}]))", "cuts"),
                                 q(f"sum(rate(volley_send_rate_path_changes_total{{{SEL}}}[{RI}]))", "path changes"),
                                 q(f"sum(rate(volley_send_rate_silences_total{{{SEL}}}[{RI}]))", "silent clients")],
            "Times a player's send rate was cut because its round trip grew (its link queued), times a rise "
            "that cutting did not drain was taken for a change of the path's own delay (the rate grew back), and "
            "times a player acknowledged nothing for a second (a broken downlink: its rate fell to the least).", w=6)
    b.panel("Snapshot pacing", "short",
            [q(f"min(volley_snapshot_rate_ratio{{{SEL}}})", "share of the snapshot rate"),
             q(f"sum(rate(volley_snapshots_paced_total{{{SEL}}}[{RI}]))", "snapshots paced out /s"),
             q(f"sum(rate(volley_snapshots_replaced_total{{{SEL}}}[{RI}]))", "snapshots replaced /s")],
            "The share of the configured snapshot rate every player gets (1; 1/2, 1/3, 1/4 when the server, short "
            "of CPU, lowers every player's rate evenly and asks the clients to send their inputs at that rate), and "
            "the snapshots a second that pacing leaves out, against those a lagging player's actor let a newer tick "
            "replace (the unevenness pacing is there to prevent).", w=6)
    b.row("Load and health")
    b.panel("Players and slots", "none",
            [q(f"sum(volley_players{{{SEL}}})", "players"), q(f"sum(volley_player_slots{{{SEL}}})", "slots")],
            "Players connected and the most the server accepts.", w=8)
    b.panel("Connects and disconnects", "cps",
            [q(f"sum(rate(volley_connects_total{{{SEL}}}[{RI}]))", "connects"),
             q(f"sum by (reason) (rate(volley_disconnects_total{{{SEL}}}[{RI}]))", "disconnects {{reason}}")],
            "Connections accepted and ended, by reason.", w=8)
    b.panel("Handshake rejections", "cps",
            [q(f"sum by (reason) (rate(volley_handshake_rejections_total{{{SEL}}}[{RI}]))", "{{reason}}")],
            "Handshake packets rejected, by reason (bad or expired tokens, full server, rate limits).", w=8)
    b.panel("Drops and queues", "none",
            [q(f"sum by (reason) (rate(volley_datagrams_dropped_total{{{SEL}}}[{RI}]))", "dropped/s {{reason}}"),
             q(f"sum(volley_reliable_queue_messages{{{SEL}}})", "reliable queue"),
             q(f"sum by (actor) (volley_mailbox_backlog_messages{{{SEL}}})", "mailbox backlog {{actor}}")],
            "Datagrams dropped per second, reliable messages awaiting acks, messages waiting in mailboxes.", w=8)
    b.panel("Actor failures", "cps",
            [q(f"sum by (actor) (rate(volley_actor_failures_total{{{SEL}}}[{RI}]))", "{{actor}}")],
            "Actors that failed and were cleaned up (the rest of the server carries on).", w=8)
    b.panel("Entities", "none", [q(f"sum(volley_entities{{{SEL}}})", "entities")],
            "Entities in the newest world snapshot.", w=8)
    b.panel("Process CPU (cores)", "short", [q(f"sum(rate(process_cpu_seconds_total{{{SEL}}}[{RI}]))", "cores")],
            "CPU used by the server process, in cores (1 = one core busy; 2 = two).", w=8)
    b.panel("Process memory", "bytes", [q(f"sum(process_resident_memory_bytes{{{SEL}}})", "resident")],
            "Resident memory of the server process.", w=8)
    b.panel("Build", "none", [q(f"max by (version) (volley_build_info{{{SEL}}})", "{{version}}")],
            "Server version.", kind="stat", w=8)
    b.row("Zones")
    b.panel("Border frames", "short",
            [q(f"sum by (instance, direction) (rate(volley_zone_border_frames_total{{{SEL}}}[{RI}]))",
               "{{instance}} {{direction}}"),
             q(f"sum by (instance) (rate(volley_zone_border_frames_dropped_total{{{SEL}}}[{RI}]))", "{{instance}} dropped"),
             q(f"sum by (instance) (rate(volley_zone_border_frames_refused_total{{{SEL}}}[{RI}]))", "{{instance}} refused")],
            "Border frames each zone published to its neighbours and took from them, and those left out (the bus "
            "down or behind) or refused, per second.", w=8)
    b.panel("Border entities", "short",
            [q(f"sum by (instance) (volley_zone_border_entities{{{SEL}}})", "{{instance}} shown"),
             q(f"sum by (instance) (rate(volley_zone_border_entities_sent_total{{{SEL}}}[{RI}]))", "{{instance}} sent/s"),
             q(f"sum by (instance) (increase(volley_zone_fades_total{{{SEL}}}[{RI}]))", "{{instance}} fades")],
            "Neighbours' border entities each zone shows now, and the entities it publishes per second; fades mark "
            "a neighbour gone quiet.", w=8)
    b.panel("Zone bus", "s",
            [q(f"max by (instance) (volley_zone_bus_rtt_seconds{{{SEL}}})", "{{instance}} rtt"),
             q(f"min by (instance) (volley_zone_bus_up{{{SEL}}})", "{{instance}} up")],
            "Round trip to the message bus (NATS) from each zone, and whether it is connected (1).", w=8)
    b.panel("Handoffs", "short",
            [q(f"sum by (instance, outcome) (rate(volley_zone_handoffs_total{{{SEL}}}[{RI}]))", "{{instance}} out {{outcome}}"),
             q(f"sum by (instance) (increase(volley_zone_handoff_inputs_lost_total{{{SEL}}}[{RI}]))",
               "{{instance}} inputs lost"),
             q(f"sum by (instance) (increase(volley_zone_handoff_inputs_repeated_total{{{SEL}}}[{RI}]))",
               "{{instance}} inputs repeated")],
            "Players handed to neighbours per second by outcome (refused and timed out: they stayed), and inputs of "
            "handed-in players that neither or both zones applied (0 when handoffs lose nothing).")
    work = " + ".join(
        f"sum by (instance) (rate(volley_zone_border_{m}_seconds_total{{{SEL}}}[{RI}]))"
        for m in ("work", "relevancy", "world")
    )
    b.panel("Border work share of CPU", "percentunit",
            [q(f"({work}) / sum by (instance) (rate(process_cpu_seconds_total{{{SEL}}}[{RI}]))", "{{instance}}")],
            "Picking, coding and decoding border frames, choosing each player's border entities, and the border "
            "world's ticks, as a share of the zone process's CPU (the issue allows 10 %).")
    return b


def main():
    """Writes the dashboards; with --check, writes nothing and fails if the files differ."""
    check = "--check" in sys.argv[1:]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dashboards")
    stale = []
    for board in (lag(), bandwidth()):
        path = os.path.join(here, f"{board.uid}.json")
        text = json.dumps(board.json(), indent=2, ensure_ascii=False) + "\n"
        if check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    stale.append(os.path.normpath(path))
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote", os.path.normpath(path))
    if stale:
        sys.exit(f"not what tools/dashboards.py writes: {stale}; run it and commit the result")


if __name__ == "__main__":
    main()
