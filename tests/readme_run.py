#!/usr/bin/env python3
"""Runs the README's run command as a new user would, for 15 seconds, and checks its summary.

The command is read from the README itself (the first indented line that runs `cargo run`
with the `run` subcommand), so the two cannot drift apart; `--duration 15` is added. The
run must build without protoc (PROTOC points at nothing), and its summary must show: every
bot connected, every bot saw other players, no decode error, at least one match started,
the RTT p50 on loopback at most 2 ms, and no false alarm in the reliable kill feed.

    python3 tests/readme_run.py            (from the repository root; tests/run.sh runs it)
"""
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_command(text):
    for line in text.splitlines():
        m = re.match(r"^    (cargo run .*-- run)\s*$", line)
        if m:
            return m.group(1)
    raise SystemExit("README.md: no indented `cargo run ... -- run` line")


def check(output):
    """The summary's findings: a list of (what, ok, detail)."""
    found = []

    def need(what, pattern, judge):
        m = re.search(pattern, output, re.M)
        if not m:
            found.append((what, False, f"no line matching {pattern!r}"))
            return
        ok, detail = judge(m)
        found.append((what, ok, detail))

    need("every bot connected and saw other players",
         r"^bots: (\d+) connected of (\d+); (\d+) saw other players",
         lambda m: (m[1] == m[2] == m[3] and int(m[2]) > 0, m[0]))
    need("no snapshot decode error", r"^snapshots: .*, (\d+) decode errors", lambda m: (m[1] == "0", m[0]))
    need("a match played", r"^matches: (\d+) started", lambda m: (int(m[1]) >= 1, m[0]))
    need("loopback RTT p50 at most 2 ms", r"RTT p50 ([\d.]+) ms", lambda m: (float(m[1]) <= 2.0, m[0]))
    need("no false alarm in the kill feed",
         r"^reliable kill feed over the \d+ bots that stayed: (\d+) with a kill skipped",
         lambda m: (m[1] == "0", m[0]))
    return found


def main():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        command = readme_command(f.read())
    argv = shlex.split(command) + ["--duration", "15"]
    env = dict(os.environ)
    # A build that needed protoc would fail here: no protoc is given.
    env["PROTOC"] = "/nonexistent/protoc"
    print("running:", " ".join(argv), "(PROTOC=/nonexistent/protoc)", flush=True)
    began = time.monotonic()
    p = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    out = p.stdout
    # The build's lines, then the run's: print the run (its live lines and summary).
    run_lines = [l for l in out.splitlines() if not l.lstrip().startswith(("Compiling", "Downloaded", "Downloading", "Updating", "Locking", "Adding"))]
    print("\n".join(run_lines[-60:]))
    print(f"(build and run: {time.monotonic() - began:.0f} s, exit {p.returncode})")
    if p.returncode != 0:
        print("the README's run command failed")
        return 1
    failed = 0
    for what, ok, detail in check(out):
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
