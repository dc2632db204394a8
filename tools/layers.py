#!/usr/bin/env python3
"""The server's module graph: which of `src/server/`'s modules import which.

Prints the strongly connected components (import circles) and checks them against
`tools/layers.allowed`, the circle as it stands (issue 38 is to break it up): the check fails
when a module joins a circle or a new import between two of the circle's modules appears, and
says which. `--write` records the current edges as allowed (after removing imports, to ratchet
down). Imports are read from `use super::x`, `super::x::` paths and `crate::server::x`.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SERVER = os.path.join(ROOT, "src", "server")
ALLOWED = os.path.join(ROOT, "tools", "layers.allowed")


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
    """The text of module `m`'s files, without comments (a doc link is not an import) and
    without its tests (tests may reach anywhere)."""
    path = os.path.join(SERVER, m)
    files = [path + ".rs"] if os.path.isfile(path + ".rs") else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")
    ]
    for name in files:
        text = open(name, encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod \w+", text)[0]
        yield name, re.sub(r"//[^\n]*", "", text)


def edges(mods):
    out = set()
    # From inside a folder module, `super::super::x` reaches the server's module x.
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
    comps = circles(mods, es)
    in_circle = {m for c in comps for m in c}
    circle_edges = sorted((f, t) for (f, t) in es if f in in_circle and t in in_circle)
    for c in comps:
        print(f"import circle of {len(c)} of {len(mods)} server modules: {' '.join(c)}")
    print(f"{len(circle_edges)} imports inside circles")
    if "--write" in sys.argv:
        with open(ALLOWED, "w", encoding="utf-8") as f:
            f.write("# Imports inside src/server's import circle, as they stand; tools/layers.py fails on any new one.\n")
            for a, b in circle_edges:
                f.write(f"{a} -> {b}\n")
        print(f"wrote {ALLOWED}")
        return 0
    allowed = set()
    for line in open(ALLOWED, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            a, b = (x.strip() for x in line.split("->"))
            allowed.add((a, b))
    new = [e for e in circle_edges if e not in allowed]
    gone = sorted(allowed - set(circle_edges))
    for a, b in new:
        print(f"error: {a} imports {b}, inside an import circle: a new circle edge (break it instead)")
    if gone:
        print(f"{len(gone)} allowed circle imports are gone: run tools/layers.py --write to ratchet down")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
