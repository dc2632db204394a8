#!/usr/bin/env bash
# The Docker proof, on the machine's real engine: build the image from docker/Dockerfile, run
# docker/compose.yaml's two servers, token backend, bots and Prometheus, and check that the
# servers and the backend turn healthy, the bots get their tokens from the backend and play
# across the compose network (the first server's 10 seats full, the rest on the second),
# Prometheus scrapes all three, and `docker compose stop` drains the servers (the bots hear
# the disconnect) with exit code 0.
#
# No image can be pulled here, so the base images the files name are built locally first
# under those same names: rust:1.95-slim-bookworm (a debootstrap Debian root with this
# machine's Rust toolchain) and prom/prometheus:v2.42.0 (Debian's prometheus package).
# Without a Docker engine it says why it skipped, and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! info=$(docker info 2>&1); then
  echo "SKIPPED docker e2e: no usable Docker engine: $(echo "$info" | tail -n 1)"
  exit 0
fi
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
compose() { docker-compose -p volleyci -f docker/compose.yaml "$@"; }
COMPOSE_BIN=$(command -v docker-compose || true)
if [ -z "$COMPOSE_BIN" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi
cleanup() {
  compose --profile bots --profile zones down -v --remove-orphans >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- Stand-in base images (tests/run.sh builds them in the background while it lints) ------
bash docker/ci/standins.sh

# --- The image users build --------------------------------------------------------------------
echo "building volley:latest from docker/Dockerfile"
start=$(date +%s)
docker build -q -t volley:latest -f docker/Dockerfile . >/dev/null
echo "built in $(( $(date +%s) - start )) s"
user=$(docker image inspect -f '{{.Config.User}}' volley:latest)
size=$(docker image inspect -f '{{.Size}}' volley:latest)
echo "image volley:latest: user $user, $((size / 1024)) KiB"
case "$user" in ""|0|root|0:*|root:*) echo "FAIL: the image runs as root"; exit 1 ;; esac

# --- The stack -----------------------------------------------------------------------------
compose --profile bots up -d --no-build server server2 backend prometheus
# Waits up to 60 s for a service's container to turn healthy; shows its logs if it does not.
wait_healthy() {
  local health=none
  for _ in $(seq 1 60); do
    health=$(docker inspect -f '{{.State.Health.Status}}' "volleyci_$1_1" 2>/dev/null || echo none)
    [ "$health" = healthy ] && break
    sleep 1
  done
  echo "$1 health: $health"
  [ "$health" = healthy ] || { compose logs "$1" | tail -n 30; exit 1; }
}
wait_healthy server
wait_healthy server2
wait_healthy backend
wait_healthy prometheus

compose --profile bots up -d --no-build bots
sleep 8
bots_line=$(compose logs --no-color bots | grep 'bots connected' | tail -n 1)
echo "bots: $bots_line"
connected=$(echo "$bots_line" | sed -E 's/.*bots connected ([0-9]+).*/\1/')
snapshots=$(echo "$bots_line" | sed -E 's/.*snapshots ([0-9]+).*/\1/')
[ "$connected" = 16 ] || { echo "FAIL: $connected of 16 bots connected"; compose logs bots | tail; exit 1; }
[ "$snapshots" -gt 1000 ] || { echo "FAIL: only $snapshots snapshots"; exit 1; }

python3 - <<'PY'
import json, sys, time, urllib.parse, urllib.request
def q(expr):
    url = "http://127.0.0.1:9090/api/v1/query?query=" + urllib.parse.quote(expr)
    return json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
def val(r):
    return float(r[0]["value"][1]) if r else None
deadline = time.time() + 60
while True:
    try:
        up = val(q('count(up == 1)'))
        players = q('volley_players{job="volley"}')
        split = sorted(float(p["value"][1]) for p in players)
        minted = val(q('volley_backend_requests_total{job="volley-backend",outcome="minted"}'))
        if up == 3 and split == [6.0, 10.0] and minted is not None and minted >= 16:
            break
    except Exception as e:  # Prometheus still starting
        up, split, minted = str(e), None, None
    if time.time() > deadline:
        sys.exit(f"FAIL: Prometheus: targets up={up} players per server={split} tokens minted={minted}")
    time.sleep(1)
targets = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5))
health = sorted((t["labels"]["job"], t["health"]) for t in targets["data"]["activeTargets"])
print("prometheus: targets", health, "- players per server", split, "- tokens minted", minted)
if [h for _, h in health] != ["up"] * 3:
    sys.exit("FAIL: a target is not up")
PY

# --- Drain on stop --------------------------------------------------------------------------
start=$(date +%s%N)
compose stop server server2
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
for s in server server2; do
  code=$(docker inspect -f '{{.State.ExitCode}}' "volleyci_${s}_1")
  echo "$s stopped with exit code $code (both in ${took_ms} ms)"
  [ "$code" = 0 ] || { compose logs "$s" | tail -n 30; exit 1; }
done
[ "$took_ms" -lt 10000 ] || { echo "FAIL: not within the 10 s stop_grace_period"; exit 1; }
for i in $(seq 1 20); do
  compose logs --no-color bots | grep -q 'were disconnected by the server' && break
  sleep 0.5
done
told=$(compose logs --no-color bots | grep 'were disconnected by the server' | sed -E 's/.*bots: ([0-9]+) were.*/\1/')
echo "bots told of the shutdown: ${told:-none}"
[ "${told:-0}" = 16 ] || { compose logs bots | tail -n 20; exit 1; }

# --- Zones (--profile zones): one map in two zone servers over the NATS image ----------------
compose --profile zones up -d --no-build nats zone0 zone1
wait_healthy zone0
wait_healthy zone1
compose --profile zones up -d --no-build zone-bots
python3 - <<'PY'
import sys, time, urllib.request
def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("volley_zone_") or line.startswith("volley_players "):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out
deadline = time.time() + 60
while True:
    z0, z1 = metrics(9110), metrics(9111)
    ok = all(
        z["volley_zone_bus_up"] == 1 and z['volley_zone_border_frames_total{direction="in"}'] > 100
        for z in (z0, z1)
    ) and z0.get("volley_players", 0) >= 1
    if ok:
        break
    if time.time() > deadline:
        sys.exit(f"FAIL: zones: {z0} {z1}")
    time.sleep(1)
handed = z0['volley_zone_handoffs_total{outcome="accepted"}'] + z1['volley_zone_handoffs_total{outcome="accepted"}']
print("zones: both on the bus, border frames in", z0['volley_zone_border_frames_total{direction="in"}'],
      z1['volley_zone_border_frames_total{direction="in"}'], "- players", z0.get("volley_players"), z1.get("volley_players"),
      "- handoffs accepted so far", handed)
PY
compose --profile zones stop zone-bots zone0 zone1 nats >/dev/null 2>&1
echo "docker e2e: OK"
