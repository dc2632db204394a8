#!/usr/bin/env python3
"""The server's layers, checked: `src/server/` is one folder per layer, and a layer's modules
import only modules of their own layer or of a layer below.

| layer | folder | what |
| --- | --- | --- |
| 0 game API | `server/game/` | what a game writes and calls: `world`, `lagcomp`, `spatial` |
| 1 cores | `server/cores/` | sans-IO: a player's inlet and session, one tick, the directory, the executor |
| 2 operations | `server/ops/` | the figures and the operator's tools: `metrics`, `admin`, `shaping` |
| 3 extensions | `server/extensions/` | built on the game API's extension points: `spectate`, `record`, `zone` |
| 4 shells | `server/shells/` | the actors and threads that move bytes and time into the cores |

A module is a file of a layer's folder or a folder in it (a folder is one module). The check
fails on a file or folder of `src/server/` outside the layer folders (other than `mod.rs`),
on a layer folder not in `LAYERS`, on any import circle among the modules (whatever the
layers), and on an import of a higher layer (a game-API module importing an actor, a core
importing a shell). Imports are read from `crate::server::LAYER::MODULE` paths and, between
modules of one layer, `super::MODULE`, outside comments (a doc link is not an import) and
outside `#[cfg(test)] mod` blocks (tests may reach anywhere). `--graph` prints every module's
imports.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SERVER = os.path.join(ROOT, "src", "server")

# Lowest first.
LAYERS = ["game", "cores", "ops", "extensions", "shells"]


def modules():
    """Every module as (layer, name), and the misplaced files and folders."""
    out, stray = [], []
    for entry in sorted(os.listdir(SERVER)):
        path = os.path.join(SERVER, entry)
        if entry == "mod.rs":
            continue
        if not os.path.isdir(path) or entry not in LAYERS:
            stray.append(entry)
            continue
        for f in sorted(os.listdir(path)):
            if f == "mod.rs":
                continue
            if f.endswith(".rs"):
                out.append((entry, f[:-3]))
            elif os.path.isdir(os.path.join(path, f)):
                out.append((entry, f))
    return out, stray


def sources(layer, m):
    """The text of module `m`'s files, without comments and without its tests."""
    path = os.path.join(SERVER, layer, m)
    if os.path.isfile(path + ".rs"):
        files = [(path + ".rs", False)]
    else:
        files = [(os.path.join(d, f), True) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
    for name, nested in files:
        text = open(name, encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod \w+", text)[0]
        yield nested, re.sub(r"//[^\n]*", "", text)


def edges(mods):
    names = set(mods)
    out = set()
    absolute = re.compile(r"\bcrate::server::(\w+)::(\w+)")
    sibling = re.compile(r"(?<![\w:])super::(\w+)")
    sibling_nested = re.compile(r"(?<![\w:])super::super::(\w+)")
    for layer, m in mods:
        for nested, text in sources(layer, m):
            found = [(l, t) for l, t in absolute.findall(text)]
            if nested:
                found += [(layer, t) for t in sibling_nested.findall(text)]
            else:
                found += [(layer, t) for t in sibling.findall(text)]
            for target in found:
                if target in names and target != (layer, m):
                    out.add(((layer, m), target))
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


def name(m):
    return f"{m[0]}/{m[1]}"


def main():
    mods, stray = modules()
    es = edges(mods)
    rank = {l: i for i, l in enumerate(LAYERS)}
    errors = []
    for s in stray:
        errors.append(f"src/server/{s} is outside the layer folders ({', '.join(LAYERS)}): move it into one")
    for c in circles(mods, es):
        errors.append(f"import circle among {len(c)} server modules: {' '.join(name(m) for m in c)}")
    for a, b in sorted(es):
        if rank[b[0]] > rank[a[0]]:
            errors.append(f"{name(a)} imports {name(b)}: a layer may import only its own and those below")
    for l in LAYERS:
        if not os.path.isdir(os.path.join(SERVER, l)):
            errors.append(f"LAYERS names {l}, which is not a folder of src/server")
    if "--graph" in sys.argv:
        for m in mods:
            print(f"{name(m)} -> {' '.join(sorted(name(t) for f, t in es if f == m))}")
    for e in errors:
        print(f"error: {e}")
    print(f"{len(mods)} server modules in {len(LAYERS)} layers, {len(es)} imports between them: {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
