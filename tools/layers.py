#!/usr/bin/env python3
"""The server's layers, checked: which of `src/server/`'s modules import which.

Each module of `src/server/` (a file, or a folder: one module) belongs to one layer, and may
import only modules of its own layer or of a layer below it:

| layer | modules | what |
| --- | --- | --- |
| 0 game API | world, lagcomp | what a game writes and calls; imports no other server module |
| 1 cores and extensions | board, executor, inlet, inputs, pace, session, simulation, worlds; spectate, zone | sans-IO: one tick, one player's session, the directory of worlds; the extensions built on the game API |
| 2 shells | admin, batcher, broadcaster, metrics, player, record, shaping, shared, socket, spawn, world_actor | the actors, the threads and their figures |

The check fails on any import circle among the modules (whatever the layers), on an import
of a higher layer (a game-API module importing an actor, a core importing a shell), and on a
module that is in no layer (place a new module in `LAYERS` below). Imports are read from
`super::x` paths (`super::super::x` from inside a folder) and `crate::server::x`, outside
comments (a doc link is not an import) and outside `#[cfg(test)] mod` blocks (tests may
reach anywhere). `--graph` prints every module's imports.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SERVER = os.path.join(ROOT, "src", "server")

LAYERS = [
    ("game API", ["world", "lagcomp", "spatial"]),
    ("cores and extensions", ["board", "executor", "inlet", "inputs", "pace", "session", "simulation", "worlds", "spectate", "zone"]),
    (
        "shells",
        [
            "admin",
            "batcher",
            "broadcaster",
            "metrics",
            "player",
            "record",
            "shaping",
            "shared",
            "socket",
            "spawn",
            "world_actor",
        ],
    ),
]


def modules():
    """The server's modules: its files and its folders (a folder is one module)."""
    out = []
    for f in os.listdir(SERVER):
        if f.endswith(".rs") and f != "mod.rs":
            out.append(f[:-3])
        elif os.path.isdir(os.path.join(SERVER, f)):
            out.append(f)
    return sorted(out)


def sources(m):
    """The text of module `m`'s files, without comments and without its tests."""
    path = os.path.join(SERVER, m)
    if os.path.isfile(path + ".rs"):
        files = [path + ".rs"]
    else:
        files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
    for name in files:
        text = open(name, encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod \w+", text)[0]
        yield name, re.sub(r"//[^\n]*", "", text)


def edges(mods):
    out = set()
    pat = re.compile(r"\b(?:super(?:::super)?|crate::server)::(\w+)")
    for m in mods:
        for _, text in sources(m):
            for target in pat.findall(text):
                if target in mods and target != m:
                    out.add((m, target))
    return out


def circles(mods, es):
    """Tarjan's strongly connected components of more than one module."""
    graph = {m: sorted(t for (f, t) in es if f == m) for m in mods}
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for m in mods:
        if m not in index:
            visit(m)
    return comps


def main():
    mods = modules()
    es = edges(mods)
    layer = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}
    errors = []
    for m in mods:
        if m not in layer:
            errors.append(f"src/server/{m} is in no layer: add it to LAYERS in tools/layers.py")
    for c in circles(mods, es):
        errors.append(f"import circle among {len(c)} server modules: {' '.join(c)}")
    for a, b in sorted(es):
        if a in layer and b in layer and layer[b] > layer[a]:
            errors.append(
                f"{a} ({LAYERS[layer[a]][0]}) imports {b} ({LAYERS[layer[b]][0]}): a layer may import only its own and those below"
            )
    for name in sorted(set(layer) - set(mods)):
        errors.append(f"LAYERS names {name}, which is not a module of src/server")
    if "--graph" in sys.argv:
        for m in mods:
            print(f"{m} -> {' '.join(sorted(t for f, t in es if f == m))}")
    for e in errors:
        print(f"error: {e}")
    print(f"{len(mods)} server modules in {len(LAYERS)} layers, {len(es)} imports between them: {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
