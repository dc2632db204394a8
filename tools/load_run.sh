#!/usr/bin/env bash
# The N-player load run BENCHMARKS.md records: a release `volley server` and a `volley bots`
# swarm of N in another process, on loopback; prints the server's exit figures (CPU per
# player-tick, memory per player) and the swarm's summary. Compare binaries by alternating
# runs in the same hour (the machine's system calls vary from day to day):
#
#     bash tools/load_run.sh OLD_BIN 1000; bash tools/load_run.sh NEW_BIN 1000; ...
#
# The server runs the arena's rooms (a lobby and matches, the default); SERVER_ARGS adds
# flags to it, e.g. SERVER_ARGS="--match-size 0" for one arena world. BOTS_BIN runs the
# swarm from another binary (the same bots against an older server); KEEP_LOG=1 keeps the
# logs and says where. On a machine where the server is short of CPU, its pacer lowers the
# snapshot rate for part of a run and the CPU per player-tick follows that, not the binary:
# to compare binaries' CPU, hold the rate with SERVER_ARGS="... --min-snapshot-rate 60".
# TRANSPORT=webtransport connects the bots as browsers do: the server also runs its web
# front (--web 127.0.0.1:8080, its relays in the server's process, so counted in its CPU)
# and the bots go over WebTransport to it (`volley bots --transport webtransport`).
set -euo pipefail
BIN=${1:?usage: tools/load_run.sh BIN [PLAYERS]}
N=${2:-1000}
KEY=0101010101010101010101010101010101010101010101010101010101010101
LOG=$(mktemp -d)
WEB_SERVER=() WEB_BOTS=()
if [ "${TRANSPORT:-udp}" = webtransport ]; then
    WEB_SERVER=(--web 127.0.0.1:8080)
    WEB_BOTS=(--transport webtransport --web 127.0.0.1:8080)
fi
"$BIN" server --private-key "$KEY" --max-players $((N * 2)) --duration 46 "${WEB_SERVER[@]}" ${SERVER_ARGS:-} >"$LOG/server.log" 2>&1 &
SERVER=$!
sleep 2
"${BOTS_BIN:-$BIN}" bots --private-key "$KEY" --bots "$N" --duration 40 --admin 127.0.0.1:9100 "${WEB_BOTS[@]}" >"$LOG/bots.log" 2>&1 || true
wait "$SERVER" || true
grep -E '^(bots:|snapshots:|RTT|server figures|server \(its|process:|server:|inputs applied)' "$LOG/bots.log" "$LOG/server.log" | sed "s|$LOG/||"
[ -n "${KEEP_LOG:-}" ] && echo "logs in $LOG" || rm -rf "$LOG"
