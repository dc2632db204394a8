#!/usr/bin/env python3
"""Plots a `volley run --csv FILE` recording as an SVG: tick time against the budget, bandwidth,
and players over the run. Standard library only.

    cargo run --release -- run --bots 200 --duration 40 --csv run.csv
    python3 tools/plot.py run.csv docs/run.svg
"""
import csv
import math
import sys

W, H, PAD_L, PAD_R, PAD_T, PAD_B, GAP = 900, 620, 70, 150, 40, 40, 40
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]


def nice_max(v):
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * mag:
            return step * mag
    return 10 * mag


def chart(out, top, height, xs, series, ylabel, xmax, dashed=()):
    ymax = nice_max(max((max(s) for _, s in series if s), default=1) * 1.05)
    left, width = PAD_L, W - PAD_L - PAD_R
    out.append(f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>')
    for i in range(5):
        v = ymax * i / 4
        y = top + height - height * i / 4
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    out.append(f'<text x="16" y="{top + height / 2}" font-size="12" transform="rotate(-90 16 {top + height / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    for i in range(6):
        x = left + width * i / 5
        out.append(f'<text x="{x:.1f}" y="{top + height + 14}" text-anchor="middle" font-size="10">'
                   f'{xmax * i / 5:.0f}</text>')
    for k, (name, ys) in enumerate(series):
        pts = " ".join(f"{left + width * x / xmax:.1f},{top + height - height * min(y, ymax) / ymax:.1f}"
                       for x, y in zip(xs, ys))
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        color = COLORS[k % len(COLORS)]
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>')
        ly = top + 14 + 16 * k
        out.append(f'<line x1="{left + width + 10}" x2="{left + width + 30}" y1="{ly - 4}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + width + 34}" y="{ly}" font-size="11">{name}</text>')


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit("no rows")
    col = lambda k: [float(r[k]) for r in rows]
    xs = col("seconds")
    xmax = max(xs) or 1
    h = (H - PAD_T - PAD_B - 2 * GAP) / 3
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{PAD_L}" y="24" font-size="15">volley run: tick time, bandwidth and players '
           f'(peak {int(max(col("players")))} players)</text>']
    chart(out, PAD_T, h, xs, [("tick p50", col("tick_p50_ms")), ("tick p99", col("tick_p99_ms")),
                              ("budget", col("tick_budget_ms"))], "tick (ms)", xmax, dashed=("budget",))
    chart(out, PAD_T + h + GAP, h, xs, [("egress", [v / 1000 for v in col("egress_kbit_s")]),
                                        ("ingress", [v / 1000 for v in col("ingress_kbit_s")])],
          "Mbit/s", xmax)
    chart(out, PAD_T + 2 * (h + GAP), h, xs, [("players", col("players")),
                                              ("kbit/s per player", col("egress_per_player_kbit_s"))],
          "players, kbit/s", xmax)
    y = H - 12
    out.append(f'<text x="{PAD_L + (W - PAD_L - PAD_R) / 2}" y="{y}" text-anchor="middle" font-size="12">'
               f'seconds since start</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")
    print("wrote", sys.argv[2])


if __name__ == "__main__":
    main()
