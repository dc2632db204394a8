#!/usr/bin/env python3
"""A snapshot decoder written from docs/wire.md alone, in plain Python.

It is the document's check: tests/wire_vectors.rs runs it over the snapshot vectors (both
forms, plain and range-coded) and compares what it decodes with what the Rust library
decoded. A port of the client to another language can start from it.

    python3 docs/vectors/decode.py docs/vectors/snapshot_predicted.json

prints, per vector, the tick and each entity's id, kind and words as JSON.
"""

import json
import sys


class BadPacket(Exception):
    pass


# ---- the bit stream ("Bit coding") ----

class Bits:
    def __init__(self, data, end_bits=None):
        self.data = data
        self.pos = 0
        self.end = len(data) * 8 if end_bits is None else end_bits

    def bits(self, n):
        if self.pos + n > self.end:
            raise BadPacket("bit stream ends")
        v = 0
        for i in range(n):
            p = self.pos + i
            v |= ((self.data[p >> 3] >> (p & 7)) & 1) << i
        self.pos += n
        return v

    def bit(self):
        return self.bits(1) == 1

    def eg(self, k):
        zeros = 0
        while not self.bit():
            zeros += 1
            if zeros > 32:
                raise BadPacket("Exp-Golomb prefix too long")
        length = zeros + k + 1
        m = (1 << (length - 1)) | self.bits(length - 1)
        return m - (1 << k)


def unzigzag(z):
    return (z >> 1) if z & 1 == 0 else -((z + 1) >> 1)


def mask(w):
    return (1 << w) - 1


def signed(v, w):
    v &= mask(w)
    return v - (1 << w) if v >> (w - 1) else v


# ---- the range coder ("The coder") ----

class Prob:
    __slots__ = ("p0", "c")

    def __init__(self):
        self.p0 = 1024
        self.c = 0


def probs(n):
    return [Prob() for _ in range(n)]


class Range:
    def __init__(self, data):
        self.data = data
        self.at = 0
        self.range = 0xFFFFFFFF
        self.code = 0
        for _ in range(4):
            self.code = (self.code << 8) | self.byte()

    def byte(self):
        b = self.data[self.at] if self.at < len(self.data) else 0
        self.at += 1
        return b

    def normalise(self):
        while self.range < (1 << 24):
            self.range = (self.range << 8) & 0xFFFFFFFF
            self.code = ((self.code << 8) | self.byte()) & 0xFFFFFFFF

    def bit(self, p):
        bound = (self.range >> 11) * p.p0
        if self.code >= bound:
            b = 1
            self.code -= bound
            self.range -= bound
        else:
            b = 0
            self.range = bound
        s = min(max((p.c + 2).bit_length() - 1, 1), 5)
        p.c = min(p.c + 1, 1000)
        if b:
            p.p0 -= p.p0 >> s
        else:
            p.p0 += (2048 - p.p0) >> s
        p.p0 = min(max(p.p0, 31), 2017)
        self.normalise()
        return b

    def direct(self, n):
        v = 0
        while n > 0:
            k = min(n, 8)
            n -= k
            self.range >>= k
            chunk = min(self.code // self.range, (1 << k) - 1)
            self.code -= chunk * self.range
            v = (v << k) | chunk
            self.normalise()
        return v

    def tree(self, ps, n):
        node = 1
        for _ in range(n):
            node = 2 * node + self.bit(ps[node])
        return node - (1 << n)


class Component:
    def __init__(self):
        self.cls = probs(64)
        self.top = Prob()
        self.zero = probs(3)
        self.negative = probs(5)


def number(d, m):
    """A number with a component model (the `gap`)."""
    cls = d.tree(m.cls, 6)
    if cls == 0:
        return 0
    if cls > 32:
        raise BadPacket("gap class")
    v = 1 << (cls - 1)
    if cls > 1:
        v |= d.bit(m.top) << (cls - 2)
    if cls > 2:
        v |= d.direct(cls - 2)
    return v


# ---- the schema ----

class Kind:
    def __init__(self, doc):
        self.name = doc["name"]
        self.fields = []  # (start, end, at_rest, rotation)
        self.widths = []
        for f in doc["fields"]:
            start = len(self.widths)
            self.widths += f["widths"]
            self.fields.append((start, len(self.widths), f["at_rest"], f["rotation"]))


# ---- the plain form ("Records", "Fields") ----

def read_full(kind, r):
    out = [0] * len(kind.widths)
    for a, b, at_rest, _ in kind.fields:
        if at_rest and r.bit():
            continue
        for i in range(a, b):
            out[i] = r.bits(kind.widths[i])
    return out


def read_delta(kind, base, r):
    out = list(base)
    nf = len(kind.fields)
    changed = r.bits(nf) if nf > 1 else 1
    for f, (a, b, at_rest, _) in enumerate(kind.fields):
        if nf > 1 and not (changed >> f) & 1:
            continue
        if at_rest and r.bit():
            for i in range(a, b):
                out[i] = 0
            continue
        for i in range(a, b):
            w = kind.widths[i]
            if not r.bit():
                continue
            if r.bit():
                out[i] = r.bits(w)
            else:
                k = max(w // 3 - 1, 0)
                d = unzigzag(r.eg(k) + 1)
                out[i] = (out[i] + d) & mask(w)
    return out


# ---- rotations in integers ("Rotations in integers") ----

ONE = 1 << 30
R = 759250125


def tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def isqrt(v):
    import math
    return math.isqrt(v)


def normalise_q(q):
    length = isqrt(sum((c >> 8) * (c >> 8) for c in q))
    if length == 0:
        return None
    return [tdiv(c << 22, length) for c in q]


def words_to_q(w, b):
    S = (1 << b) - 1
    j = w[0] & 3
    q = [0, 0, 0, 0]
    k = 1
    total = 0
    for i in range(4):
        if i != j:
            v = min(w[k] & S, S)
            q[i] = tdiv((2 * v - S) * R, S)
            total += q[i] * q[i]
            k += 1
    if total > ONE * ONE:
        return normalise_q(q) or [0, 0, 0, ONE]
    q[j] = isqrt(ONE * ONE - total)
    return q


def q_to_words(p, j, b):
    S = (1 << b) - 1
    s = -1 if p[j] < 0 else 1
    out = [j, 0, 0, 0]
    k = 1
    for i in range(4):
        if i != j:
            t = ((p[i] * s * R) >> 30) + ONE // 2
            out[k] = min(max((t * S + ONE // 2) >> 30, 0), S)
            k += 1
    return out


def qmul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return [
        (aw * bx + ax * bw + ay * bz - az * by) >> 30,
        (aw * by - ax * bz + ay * bw + az * bx) >> 30,
        (aw * bz + ax * by - ay * bx + az * bw) >> 30,
        (aw * bw - ax * bx - ay * by - az * bz) >> 30,
    ]


def predict_rotation(base, older, b, t, d):
    if not (2 <= b <= 24) or t > 64:
        return None
    qb, qo = words_to_q(base, b), words_to_q(older, b)
    step = qmul(qb, [-qo[0], -qo[1], -qo[2], qo[3]])
    if step[3] < 0:
        step = [-c for c in step]
    if d > 1:
        step = normalise_q([tdiv(step[0], d), tdiv(step[1], d), tdiv(step[2], d), step[3]])
        if step is None:
            return None
    p = qb
    for _ in range(t):
        p = qmul(step, p)
    p = normalise_q(p)
    if p is None:
        return None
    j = 0
    for i in range(1, 4):
        if abs(p[i]) > abs(p[j]):
            j = i
    return q_to_words(p, j, b)


def extrapolate(kind, base, older, t, d):
    out = list(base)
    for a, b, _, rotation in kind.fields:
        if rotation and b - a == 4:
            rot = predict_rotation(base[a:b], older[a:b], kind.widths[a + 1], t, d)
            if rot is not None:
                out[a:b] = rot
                continue
        for i in range(a, b):
            w = kind.widths[i]
            if w <= 2:
                continue
            q = t * signed(base[i] - older[i], w)
            out[i] = (base[i] + (2 * q + d) // (2 * d)) & mask(w)
    return out


# ---- the range-coded form ("A changed entity") ----

class KindModels:
    def __init__(self, kind):
        self.predicted = Prob()
        self.field = [probs(3) for _ in kind.fields]
        self.comp = [Component() for _ in kind.widths]


def component(d, ref, w, moved, direction, m):
    if w <= 2:
        return d.direct(w) if d.bit(m.cls[1]) else ref
    if d.bit(m.zero[moved]):
        return ref
    length = 1 + d.tree(m.cls, (w - 1).bit_length())
    if length > w:
        raise BadPacket("residual longer than its component")
    negative = d.bit(m.negative[direction])
    a = 1 << (length - 1)
    if length > 1:
        a |= d.bit(m.top) << (length - 2)
    if length > 2:
        a |= d.direct(length - 2)
    return (ref - a if negative else ref + a) & mask(w)


def read_delta_rc(kind, ref, base, older, predicted, m, d):
    def motion(i):
        if older is None:
            return 0, 0
        if older[i] == base[i]:
            return 1, 0
        down = 0 if signed(base[i] - older[i], 32) > 0 else 1
        return 2, 1 + down + 2 * (0 if predicted else 1)

    out = list(ref)
    many = len(kind.fields) > 1
    for f, (a, b, at_rest, rotation) in enumerate(kind.fields):
        moved = older is not None and older[a:b] != base[a:b]
        if many and not d.bit(m.field[f][2 if moved else 0]):
            continue
        if at_rest and d.bit(m.field[f][1]):
            for i in range(a, b):
                out[i] = 0
            continue
        start = a
        reference = ref[a:b]
        if rotation and b - a == 4:
            out[a] = component(d, ref[a], kind.widths[a], *motion(a), m.comp[a])
            bw = kind.widths[a + 1]
            if (ref[a] & 3) != (out[a] & 3) and 2 <= bw <= 24:
                reference = q_to_words(words_to_q(ref[a:b], bw), out[a] & 3, bw)
            start = a + 1
        for i in range(start, b):
            out[i] = component(d, reference[i - a], kind.widths[i], *motion(i), m.comp[i])
    return out


# ---- a snapshot ("Header", "Records") ----

class Receiver:
    def __init__(self, schema):
        self.kinds = [Kind(k) for k in schema["kinds"]]
        self.held = {}  # tick -> [(id, kind, words)] in id order

    def decode(self, data):
        r = Bits(data)
        tick = r.bits(32)
        baseline = None
        second = None
        rc = False
        if r.bit():
            baseline = tick - r.eg(2) - 1
            if r.bit():
                second = baseline - (r.eg(2) + 1)
            rc = r.bit()
            if rc and second is not None and r.bit():
                raise BadPacket("predicted by the game's own predictor")
        d = None
        if rc:
            m = data[-2] | data[-1] << 8
            n = len(data) - 2 - m
            if n < 0:
                raise BadPacket("range-coded stream longer than the packet")
            d = Range(data[n:len(data) - 2])
            # The rest of the bit stream ends where the range-coded stream begins.
            at = r.pos
            r = Bits(data, end_bits=n * 8)
            r.pos = at
        count = r.eg(4)
        gap_order = r.bits(2)
        base = self.held[baseline] if baseline is not None else []
        older_of = {}
        if second is not None:
            older_of = {e[0]: e for e in self.held[second]}
        kind_bits = (len(self.kinds) - 1).bit_length()
        out = []
        bi = 0
        nxt = 0
        if rc:
            flag = probs(6)
            op = probs(2)
            gap = Component()
            models = {}
            last_flag = 0

        def older(e):
            o = older_of.get(e[0])
            return o[2] if o is not None and o[1] == e[1] else None

        for _ in range(count):
            if rc:
                while bi < len(base):
                    e = base[bi]
                    o = older(e)
                    motion = 0 if o is None else (1 if o == e[2] else 2)
                    last_flag = d.bit(flag[3 * last_flag + motion])
                    if last_flag:
                        break
                    out.append(e)
                    nxt = e[0] + 1
                    bi += 1
                operation = "changed" if not d.bit(op[0]) else ("destroyed" if d.bit(op[1]) else "created")
                at = base[bi][0] if bi < len(base) else None
                if operation == "created":
                    eid = nxt + number(d, gap)
                    if at is not None and eid > at:
                        raise BadPacket("creation past the walk")
                elif at is None:
                    raise BadPacket("no baseline entity to change")
                else:
                    eid = at
            else:
                eid = nxt + r.eg(gap_order)
                while bi < len(base) and base[bi][0] < eid:
                    out.append(base[bi])
                    bi += 1
                if baseline is None or not r.bit():
                    operation = "changed" if baseline is not None else "created"
                else:
                    operation = "destroyed" if r.bit() else "created"
            nxt = eid + 1
            in_base = bi < len(base) and base[bi][0] == eid
            if operation == "created":
                kind = r.bits(kind_bits)
                out.append((eid, kind, read_full(self.kinds[kind], r)))
                if in_base:
                    bi += 1
            elif operation == "destroyed":
                if not in_base:
                    raise BadPacket("destroying what the baseline lacks")
                bi += 1
            else:
                if not in_base:
                    raise BadPacket("changing what the baseline lacks")
                e = base[bi]
                k = self.kinds[e[1]]
                if rc:
                    mk = models.setdefault(e[1], KindModels(k))
                    o = older(e) if len(k.widths) <= 64 else None
                    ref = e[2]
                    predicted = False
                    if o is not None:
                        pred = extrapolate(k, e[2], o, tick - baseline, baseline - second)
                        if pred != e[2] and d.bit(mk.predicted):
                            ref = pred
                            predicted = True
                    words = read_delta_rc(k, ref, e[2], o, predicted, mk, d)
                else:
                    words = read_delta(k, e[2], r)
                out.append((eid, e[1], words))
                bi += 1
        out.extend(base[bi:])
        self.held[tick] = out
        return tick, out


def main():
    doc = json.load(open(sys.argv[1]))
    receiver = Receiver(doc["schema"])
    result = []
    for v in doc["vectors"]:
        tick, entities = receiver.decode(bytes.fromhex(v["hex"]))
        result.append({
            "tick": tick,
            "entities": [
                {"id": i, "kind": receiver.kinds[k].name, "words": w} for i, k, w in entities
            ],
        })
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
