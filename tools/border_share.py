#!/usr/bin/env python3
"""The share of a zone process's CPU that border sharing costs, from a profile: reads the
output of `perf script` (a `perf record -g` of one zone server, built with frame pointers) on
standard input and sorts each sample by the first of these it finds on its stack:

  relevancy     choosing each player's border entities (BorderRelevancy)
  border world  the border world's own work (BorderWorld)
  NATS client   async-nats: its connection task, sockets and wakeups
  bus shell     the zone's bus tasks (volley_zones), the link's coding and decoding of frames
  merge         merging the border world's snapshot into the players' views (View::merge)

Everything else is the zone's own game and players. The counters (`volley_zone_border_*`)
leave out the NATS client and the merge; this counts them. Reproduce (docs in BENCHMARKS.md):

  RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=/tmp/fp cargo build --release -p volley-cli
  /tmp/fp/release/volley run --zones 4 --bots 200 --duration 40 &
  sleep 12; perf record -F 2000 -g -p $(pgrep -f "volley server --zone 1 ") -o z1.data -- sleep 20
  perf script -i z1.data | python3 tools/border_share.py
"""
import collections
import re
import sys

PARTS = [
    ("relevancy", re.compile(r"BorderRelevancy")),
    ("border world", re.compile(r"BorderWorld")),
    ("NATS client", re.compile(r"async_nats")),
    ("bus shell", re.compile(r"volley_zones::|ZoneLink|ZoneInbox|protocol::zone::")),
    ("merge", re.compile(r"directory::View::merge")),
]


def samples(lines):
    """Each sample's stack: its frames' lines, innermost first."""
    stack = []
    for line in lines:
        if not line.strip():
            if stack:
                yield stack
            stack = []
        elif line[0] in " \t":
            stack.append(line.strip())
        elif stack:
            yield stack
            stack = []
    if stack:
        yield stack


def main():
    counts = collections.Counter()
    total = 0
    for stack in samples(sys.stdin):
        total += 1
        text = "\n".join(stack)
        part = next((name for name, rx in PARTS if rx.search(text)), "rest")
        counts[part] += 1
    if total == 0:
        sys.exit("no samples on standard input (perf script's output expected)")
    border = 0
    for name, _ in PARTS:
        border += counts[name]
        print(f"{name:13s} {counts[name]:7d} samples  {100 * counts[name] / total:5.2f} %")
    print(f"{'rest':13s} {counts['rest']:7d} samples  {100 * counts['rest'] / total:5.2f} %")
    print(f"border sharing, all parts: {100 * border / total:.2f} % of {total} samples")


if __name__ == "__main__":
    main()
