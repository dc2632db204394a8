// volley's client for the browser (and node): an ES module with no dependencies.
//
// Written from docs/wire.md: the session (hello, welcome, goodbye), both channels (acks,
// reliable messages with their fragments, events, lz4), the input packet, the snapshot in
// both its forms (plain and range-coded) against the schema (`volley schema`), the
// quantizers, the framework's messages (world notices, the scoreboard, spectator status,
// pace, resume tickets), the playback clock (interpolation, capped extrapolation), and two
// transports: WebTransport datagrams and, where that fails, a WebSocket. Both reach a
// volley server's browser side (the `volley-web` crate), which relays to the server's
// netcode socket: the connect token still says who the player is.
//
//   import { connect } from "/volley.js";
//   const client = await connect({ token, schema, webtransport, hashes, websocket });
//   client.onMessage = (bytes, reliable) => { ... };
//   setInterval(() => client.sendInput(new Uint8Array([0, 0, 0, 0, 0])), 1000 / 60);
//   const entities = client.entities(performance.now());  // [{id, kind, numbers}]
//
// `test/vectors.mjs` runs the decoders over docs/vectors under node.

/** A packet that does not parse. */
export class BadPacket extends Error {}

const P32 = 4294967296;
const pow2 = (w) => 2 ** w;
const mod = (x, w) => { const m = pow2(w); return ((x % m) + m) % m; };
const signed = (v, w) => { v = mod(v, w); return v >= pow2(w - 1) ? v - pow2(w) : v; };
const bitLength = (v) => (v <= 0 ? 0 : Math.floor(Math.log2(v)) + 1);
const unzigzag = (z) => (z % 2 === 0 ? z / 2 : -(z + 1) / 2);

// ---- bit coding ("Bit coding") ----

class Bits {
  constructor(data, endBits) {
    this.data = data;
    this.pos = 0;
    this.end = endBits === undefined ? data.length * 8 : endBits;
  }
  bits(n) {
    if (this.pos + n > this.end) throw new BadPacket("bit stream ends");
    let v = 0;
    for (let i = 0; i < n; i++) {
      const p = this.pos + i;
      if ((this.data[p >> 3] >> (p & 7)) & 1) v += pow2(i);
    }
    this.pos += n;
    return v;
  }
  bit() { return this.bits(1) === 1; }
  eg(k) {
    let zeros = 0;
    while (!this.bit()) { if (++zeros > 32) throw new BadPacket("Exp-Golomb prefix too long"); }
    const length = zeros + k + 1;
    const m = pow2(length - 1) + this.bits(length - 1);
    return m - pow2(k);
  }
}

// ---- the range coder ("The coder") ----

const prob = () => ({ p0: 1024, c: 0 });
const probs = (n) => Array.from({ length: n }, prob);

class RangeDecoder {
  constructor(data) {
    this.data = data; this.at = 0; this.range = 0xFFFFFFFF; this.code = 0;
    for (let i = 0; i < 4; i++) this.code = this.code * 256 + this.byte();
  }
  byte() { const b = this.at < this.data.length ? this.data[this.at] : 0; this.at++; return b; }
  normalise() {
    while (this.range < 16777216) {
      this.range = (this.range * 256) % P32;
      this.code = (this.code * 256 + this.byte()) % P32;
    }
  }
  bit(p) {
    const bound = Math.floor(this.range / 2048) * p.p0;
    let b;
    if (this.code >= bound) { b = 1; this.code -= bound; this.range -= bound; } else { b = 0; this.range = bound; }
    const s = Math.min(Math.max(bitLength(p.c + 2) - 1, 1), 5);
    p.c = Math.min(p.c + 1, 1000);
    if (b) p.p0 -= p.p0 >> s; else p.p0 += (2048 - p.p0) >> s;
    p.p0 = Math.min(Math.max(p.p0, 31), 2017);
    this.normalise();
    return b;
  }
  direct(n) {
    let v = 0;
    while (n > 0) {
      const k = Math.min(n, 8);
      n -= k;
      this.range = Math.floor(this.range / pow2(k));
      const chunk = Math.min(Math.floor(this.code / this.range), pow2(k) - 1);
      this.code -= chunk * this.range;
      v = v * pow2(k) + chunk;
      this.normalise();
    }
    return v;
  }
  tree(ps, n) {
    let node = 1;
    for (let i = 0; i < n; i++) node = 2 * node + this.bit(ps[node]);
    return node - pow2(n);
  }
}

const componentModel = () => ({ cls: probs(64), top: prob(), zero: probs(3), negative: probs(5) });

function number(d, m) {
  const cls = d.tree(m.cls, 6);
  if (cls === 0) return 0;
  if (cls > 32) throw new BadPacket("gap class");
  let v = pow2(cls - 1);
  if (cls > 1) v += d.bit(m.top) * pow2(cls - 2);
  if (cls > 2) v += d.direct(cls - 2);
  return v;
}

// ---- the schema ("The schema", "Quantizers") ----

/** One replicated kind of a schema document (`volley schema`, `Schema::to_json`). */
export class Kind {
  constructor(doc) {
    this.name = doc.name;
    this.fields = [];
    this.widths = [];
    for (const f of doc.fields) {
      const start = this.widths.length;
      this.widths.push(...f.widths);
      this.fields.push({ name: f.name, start, end: this.widths.length, atRest: !!f.at_rest, rotation: !!f.rotation, quant: f.quant });
    }
  }
  /** The numbers of each field, by name, from an entity's words. */
  decode(words) {
    const out = {};
    for (const f of this.fields) out[f.name] = quantize(f.quant, words.slice(f.start, f.end), this.widths.slice(f.start, f.end));
    return out;
  }
}

/** FNV-1a fingerprint of a schema document, as 16 hex digits ("The schema"). */
export function fingerprint(doc) {
  let h = 0xcbf29ce484222325n;
  const prime = 0x100000001b3n;
  const eat = (b) => { h ^= BigInt(b); h = (h * prime) & 0xFFFFFFFFFFFFFFFFn; };
  const u32 = (v) => { for (let i = 0; i < 4; i++) eat((v >>> (8 * i)) & 255); };
  for (const k of doc.kinds) {
    const name = new TextEncoder().encode(k.name);
    u32(name.length); name.forEach(eat);
    u32(k.fields.length);
    for (const f of k.fields) {
      eat(f.widths.length); eat(f.at_rest ? 1 : 0); eat(f.rotation ? 1 : 0);
      for (let i = 0; i < 4; i++) eat(f.widths[i] || 0);
    }
  }
  return h.toString(16).padStart(16, "0");
}

function scalar(q, word) {
  if (!q.steps) return q.min;
  return q.min + (Math.min(word, q.steps) / q.steps) * (q.max - q.min);
}

/** A field's numbers from its words, as its quantizer says ("Quantizers"). */
export function quantize(q, words, widths) {
  switch (q.type) {
    case "bits": case "flag": return [words[0]];
    case "scalar": return [scalar(q, words[0])];
    case "vec2": return [scalar(q.x, words[0]), scalar(q.y, words[1])];
    case "vec3": return [scalar(q.x, words[0]), scalar(q.y, words[1]), scalar(q.z, words[2])];
    case "velocity": return ["x", "y", "z"].map((a, i) => {
      const z = zeroWord(q[a]);
      return scalar(q[a], (words[i] + z) % pow2(q[a].bits));
    });
    case "quat": {
      const j = words[0] & 3;
      const max = 1 / Math.SQRT2;
      const s = pow2(q.bits) - 1;
      const out = [0, 0, 0, 0];
      let k = 1, sum = 0;
      for (let i = 0; i < 4; i++) {
        if (i === j) continue;
        out[i] = -max + (Math.min(words[k++], s) / s) * 2 * max;
        sum += out[i] * out[i];
      }
      out[j] = Math.sqrt(Math.max(0, 1 - sum));
      const len = Math.hypot(...out) || 1;
      return out.map((c) => c / len);
    }
    case "angle": {
      const t = (words[0] / pow2(q.bits)) * 2 * Math.PI;
      return [t >= Math.PI ? t - 2 * Math.PI : t];
    }
    case "float": {
      const w = words[0];
      const mb = q.mantissa_bits, eb = q.exponent_bits;
      const m = w % pow2(mb);
      const e = Math.floor(w / pow2(mb)) % pow2(eb);
      const sign = q.signed && Math.floor(w / pow2(mb + eb)) % 2 === 1 ? -1 : 1;
      return [e === 0 ? 0 : sign * (1 + m / pow2(mb)) * pow2(e - q.bias)];
    }
    default: return words.slice(0, widths.length);
  }
}

// The word a velocity axis's 0 quantizes to (so that at rest is all zero on the wire).
function zeroWord(q) {
  if (!q.steps) return 0;
  const t = (0 - q.min) / (q.max - q.min);
  return Math.min(Math.max(Math.round(t * q.steps), 0), q.steps);
}

/** Blends two fields' numbers as their quantizer does ("Quantizers", last paragraph). */
export function blend(q, a, b, t) {
  switch (q.type) {
    case "bits": case "flag": case "raw": return t < 0.5 ? a : b;
    case "angle": {
      let d = b[0] - a[0];
      while (d > Math.PI) d -= 2 * Math.PI;
      while (d < -Math.PI) d += 2 * Math.PI;
      return [a[0] + d * t];
    }
    case "quat": {
      const dot = a.reduce((s, c, i) => s + c * b[i], 0);
      const bb = dot < 0 ? b.map((c) => -c) : b;
      const out = a.map((c, i) => c + (bb[i] - c) * t);
      const len = Math.hypot(...out) || 1;
      return out.map((c) => c / len);
    }
    default: return a.map((c, i) => c + (b[i] - c) * t);
  }
}

// ---- the plain form ("Records", "Fields") ----

function readFull(kind, r) {
  const out = new Array(kind.widths.length).fill(0);
  for (const f of kind.fields) {
    if (f.atRest && r.bit()) continue;
    for (let i = f.start; i < f.end; i++) out[i] = r.bits(kind.widths[i]);
  }
  return out;
}

function readDelta(kind, base, r) {
  const out = base.slice();
  const nf = kind.fields.length;
  const changed = nf > 1 ? r.bits(nf) : 1;
  kind.fields.forEach((f, fi) => {
    if (nf > 1 && Math.floor(changed / pow2(fi)) % 2 === 0) return;
    if (f.atRest && r.bit()) { for (let i = f.start; i < f.end; i++) out[i] = 0; return; }
    for (let i = f.start; i < f.end; i++) {
      const w = kind.widths[i];
      if (!r.bit()) continue;
      if (r.bit()) out[i] = r.bits(w);
      else {
        const k = Math.max(Math.floor(w / 3) - 1, 0);
        out[i] = mod(out[i] + unzigzag(r.eg(k) + 1), w);
      }
    }
  });
  return out;
}

// ---- rotations in integers ("Rotations in integers"), in BigInt ----

const ONE = 1n << 30n;
const R = 759250125n;
const babs = (v) => (v < 0n ? -v : v);
function isqrt(v) {
  if (v < 2n) return v;
  let x = BigInt(Math.floor(Math.sqrt(Number(v))));
  while (x * x > v) x -= 1n;
  while ((x + 1n) * (x + 1n) <= v) x += 1n;
  return x;
}
function normaliseQ(q) {
  const len = isqrt(q.reduce((s, c) => s + (c >> 8n) * (c >> 8n), 0n));
  if (len === 0n) return null;
  return q.map((c) => (c << 22n) / len);
}
function wordsToQ(w, b) {
  const S = (1n << BigInt(b)) - 1n;
  const j = w[0] & 3;
  const q = [0n, 0n, 0n, 0n];
  let k = 1, total = 0n;
  for (let i = 0; i < 4; i++) {
    if (i === j) continue;
    let v = BigInt(w[k]) & S;
    if (v > S) v = S;
    q[i] = ((2n * v - S) * R) / S;
    total += q[i] * q[i];
    k++;
  }
  if (total > ONE * ONE) return normaliseQ(q) || [0n, 0n, 0n, ONE];
  q[j] = isqrt(ONE * ONE - total);
  return q;
}
function qToWords(p, j, b) {
  const S = (1n << BigInt(b)) - 1n;
  const s = p[j] < 0n ? -1n : 1n;
  const out = [j, 0, 0, 0];
  let k = 1;
  for (let i = 0; i < 4; i++) {
    if (i === j) continue;
    const t = ((p[i] * s * R) >> 30n) + ONE / 2n;
    let v = (t * S + ONE / 2n) >> 30n;
    if (v < 0n) v = 0n;
    if (v > S) v = S;
    out[k++] = Number(v);
  }
  return out;
}
function qmul(a, b) {
  const [ax, ay, az, aw] = a, [bx, by, bz, bw] = b;
  return [
    (aw * bx + ax * bw + ay * bz - az * by) >> 30n,
    (aw * by - ax * bz + ay * bw + az * bx) >> 30n,
    (aw * bz + ax * by - ay * bx + az * bw) >> 30n,
    (aw * bw - ax * bx - ay * by - az * bz) >> 30n,
  ];
}
function predictRotation(base, older, b, t, d) {
  if (!(b >= 2 && b <= 24) || t > 64) return null;
  const qb = wordsToQ(base, b), qo = wordsToQ(older, b);
  let step = qmul(qb, [-qo[0], -qo[1], -qo[2], qo[3]]);
  if (step[3] < 0n) step = step.map((c) => -c);
  if (d > 1) {
    const bd = BigInt(d);
    step = normaliseQ([step[0] / bd, step[1] / bd, step[2] / bd, step[3]]);
    if (!step) return null;
  }
  let p = qb;
  for (let i = 0; i < t; i++) p = qmul(step, p);
  p = normaliseQ(p);
  if (!p) return null;
  let j = 0;
  for (let i = 1; i < 4; i++) if (babs(p[i]) > babs(p[j])) j = i;
  return qToWords(p, j, b);
}

function extrapolate(kind, base, older, t, d) {
  const out = base.slice();
  for (const f of kind.fields) {
    if (f.rotation && f.end - f.start === 4) {
      const rot = predictRotation(base.slice(f.start, f.end), older.slice(f.start, f.end), kind.widths[f.start + 1], t, d);
      if (rot) { for (let i = 0; i < 4; i++) out[f.start + i] = rot[i]; continue; }
    }
    for (let i = f.start; i < f.end; i++) {
      const w = kind.widths[i];
      if (w <= 2) continue;
      const q = t * signed(base[i] - older[i], w);
      out[i] = mod(base[i] + Math.floor((2 * q + d) / (2 * d)), w);
    }
  }
  return out;
}

// ---- the range-coded form ("A changed entity") ----

function component(d, ref, w, moved, direction, m) {
  if (w <= 2) return d.bit(m.cls[1]) ? d.direct(w) : ref;
  if (d.bit(m.zero[moved])) return ref;
  const length = 1 + d.tree(m.cls, bitLength(w - 1));
  if (length > w) throw new BadPacket("residual longer than its component");
  const negative = d.bit(m.negative[direction]);
  let a = pow2(length - 1);
  if (length > 1) a += d.bit(m.top) * pow2(length - 2);
  if (length > 2) a += d.direct(length - 2);
  return mod(negative ? ref - a : ref + a, w);
}

const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

function readDeltaRc(kind, ref, base, older, predicted, m, d) {
  const motion = (i) => {
    if (!older) return [0, 0];
    if (older[i] === base[i]) return [1, 0];
    const down = signed(base[i] - older[i], 32) > 0 ? 0 : 1;
    return [2, 1 + down + 2 * (predicted ? 0 : 1)];
  };
  const out = ref.slice();
  const many = kind.fields.length > 1;
  kind.fields.forEach((f, fi) => {
    const { start: a, end: b } = f;
    const moved = !!older && !same(older.slice(a, b), base.slice(a, b));
    if (many && !d.bit(m.field[fi][moved ? 2 : 0])) return;
    if (f.atRest && d.bit(m.field[fi][1])) { for (let i = a; i < b; i++) out[i] = 0; return; }
    let start = a;
    let reference = ref.slice(a, b);
    if (f.rotation && b - a === 4) {
      out[a] = component(d, ref[a], kind.widths[a], ...motion(a), m.comp[a]);
      const bw = kind.widths[a + 1];
      if ((ref[a] & 3) !== (out[a] & 3) && bw >= 2 && bw <= 24) reference = qToWords(wordsToQ(ref.slice(a, b), bw), out[a] & 3, bw);
      start = a + 1;
    }
    for (let i = start; i < b; i++) out[i] = component(d, reference[i - a], kind.widths[i], ...motion(i), m.comp[i]);
  });
  return out;
}

// ---- a snapshot ("Server → client: the snapshot") ----

/** Decodes snapshots against the baselines it holds (its last 64). */
export class SnapshotReceiver {
  constructor(schema) {
    this.kinds = schema.kinds.map((k) => new Kind(k));
    this.held = new Map(); // tick -> [[id, kind, words]] in id order
    this.newest = null;
  }

  /** Decodes one snapshot; returns its tick. Throws BadPacket. */
  decode(data) {
    let r = new Bits(data);
    const tick = r.bits(32);
    let baseline = null, second = null, rc = false;
    if (r.bit()) {
      baseline = tick - r.eg(2) - 1;
      if (r.bit()) second = baseline - (r.eg(2) + 1);
      rc = r.bit();
      if (rc && second !== null && r.bit()) throw new BadPacket("predicted by the game's own predictor");
    }
    let d = null;
    if (rc) {
      if (data.length < 2) throw new BadPacket("short");
      const m = data[data.length - 2] | (data[data.length - 1] << 8);
      const n = data.length - 2 - m;
      if (n < 0) throw new BadPacket("range-coded stream longer than the packet");
      d = new RangeDecoder(data.subarray(n, data.length - 2));
      const at = r.pos;
      r = new Bits(data, n * 8);
      r.pos = at;
    }
    const count = r.eg(4);
    const gapOrder = r.bits(2);
    let base = [];
    if (baseline !== null) {
      base = this.held.get(baseline);
      if (!base) throw new BadPacket(`baseline ${baseline} not held`);
    }
    const olderOf = new Map();
    if (second !== null) {
      const s = this.held.get(second);
      if (!s) throw new BadPacket(`second reference ${second} not held`);
      for (const e of s) olderOf.set(e[0], e);
    }
    const older = (e) => { const o = olderOf.get(e[0]); return o && o[1] === e[1] ? o[2] : null; };
    const kindBits = bitLength(this.kinds.length - 1);
    const out = [];
    let bi = 0, nxt = 0;
    let flag, op, gap, models, lastFlag = 0;
    if (rc) { flag = probs(6); op = probs(2); gap = componentModel(); models = new Map(); }
    if (count > 1 << 20) throw new BadPacket("too many records");
    for (let c = 0; c < count; c++) {
      let eid, operation;
      if (rc) {
        while (bi < base.length) {
          const e = base[bi];
          const o = older(e);
          const motion = o === null ? 0 : same(o, e[2]) ? 1 : 2;
          lastFlag = d.bit(flag[3 * lastFlag + motion]);
          if (lastFlag) break;
          out.push(e); nxt = e[0] + 1; bi++;
        }
        operation = !d.bit(op[0]) ? "changed" : d.bit(op[1]) ? "destroyed" : "created";
        const at = bi < base.length ? base[bi][0] : null;
        if (operation === "created") {
          eid = nxt + number(d, gap);
          if (at !== null && eid > at) throw new BadPacket("creation past the walk");
        } else if (at === null) throw new BadPacket("no baseline entity to change");
        else eid = at;
      } else {
        eid = nxt + r.eg(gapOrder);
        while (bi < base.length && base[bi][0] < eid) out.push(base[bi++]);
        if (baseline === null || !r.bit()) operation = baseline !== null ? "changed" : "created";
        else operation = r.bit() ? "destroyed" : "created";
      }
      nxt = eid + 1;
      const inBase = bi < base.length && base[bi][0] === eid;
      if (operation === "created") {
        const kind = r.bits(kindBits);
        if (kind >= this.kinds.length) throw new BadPacket("unknown kind");
        out.push([eid, kind, readFull(this.kinds[kind], r)]);
        if (inBase) bi++;
      } else if (operation === "destroyed") {
        if (!inBase) throw new BadPacket("destroying what the baseline lacks");
        bi++;
      } else {
        if (!inBase) throw new BadPacket("changing what the baseline lacks");
        const e = base[bi];
        const k = this.kinds[e[1]];
        let words;
        if (rc) {
          if (!models.has(e[1])) models.set(e[1], { predicted: prob(), field: k.fields.map(() => probs(3)), comp: k.widths.map(componentModel) });
          const mk = models.get(e[1]);
          const o = k.widths.length <= 64 ? older(e) : null;
          let ref = e[2], predicted = false;
          if (o !== null) {
            const pred = extrapolate(k, e[2], o, tick - baseline, baseline - second);
            if (!same(pred, e[2]) && d.bit(mk.predicted)) { ref = pred; predicted = true; }
          }
          words = readDeltaRc(k, ref, e[2], o, predicted, mk, d);
        } else words = readDelta(k, e[2], r);
        out.push([eid, e[1], words]);
        bi++;
      }
    }
    for (; bi < base.length; bi++) out.push(base[bi]);
    this.held.set(tick, out);
    if (this.newest === null || tick > this.newest) this.newest = tick;
    for (const t of this.held.keys()) if (t + 64 <= this.newest) this.held.delete(t);
    return tick;
  }
}

// ---- postcard ("Postcard in brief") ----

/** Reads postcard values from bytes. */
export class Postcard {
  constructor(bytes) { this.b = bytes; this.at = 0; }
  u8() { if (this.at >= this.b.length) throw new BadPacket("postcard ends"); return this.b[this.at++]; }
  varint() {
    let v = 0, scale = 1;
    for (let i = 0; i < 10; i++) {
      const byte = this.u8();
      v += (byte & 0x7f) * scale;
      if (!(byte & 0x80)) return v;
      scale *= 128;
    }
    throw new BadPacket("varint too long");
  }
  zigzag() { return unzigzag(this.varint()); }
  bool() { return this.u8() !== 0; }
  bytes() {
    const n = this.varint();
    if (this.at + n > this.b.length) throw new BadPacket("postcard ends");
    const out = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  string() { return new TextDecoder().decode(this.bytes()); }
  option(read) { return this.u8() ? read() : null; }
  seq(read) { const n = this.varint(); if (n > this.b.length) throw new BadPacket("sequence too long"); return Array.from({ length: n }, read); }
}

function writeVarint(out, v) {
  do { let b = v % 128; v = Math.floor(v / 128); if (v) b |= 0x80; out.push(b); } while (v);
}

/** Postcard writers for a game's inputs and messages. */
export const postcard = {
  varint: writeVarint,
  i8: (out, v) => out.push(v & 255),
  bool: (out, v) => out.push(v ? 1 : 0),
  zigzag: (out, v) => writeVarint(out, v >= 0 ? 2 * v : -2 * v - 1),
};

// ---- the session ("Session") ----

export const PROTOCOL_VERSION = 8;
const CONTROL = 0xc5;
const MAGIC = [0x56, 0x4c, 0x4c, 0x59];

/** The reasons a session ends (docs/wire.md's table of goodbyes). */
export const END_REASONS = {
  1: "kicked by the world", 2: "the server is shutting down", 3: "the world stopped",
  4: "flooding the server with messages", 5: "too far behind on reliable messages",
  6: "moved to another server", 7: "only malformed packets", 8: "the server's part for this player failed",
  9: "replaced by a newer connection", 10: "the session was over",
};

/** A hello for `version`. */
export function encodeHello(version = PROTOCOL_VERSION) {
  return new Uint8Array([CONTROL, ...MAGIC, 0, version & 255, version >> 8]);
}

/** A control message: {type: "hello"|"welcome"|"reject"|"goodbye", ...}. Throws BadPacket. */
export function decodeControl(b) {
  if (b.length < 6 || b[0] !== CONTROL || MAGIC.some((m, i) => b[1 + i] !== m)) throw new BadPacket("not a control message");
  const u16 = (at) => { if (at + 2 > b.length) throw new BadPacket("control message ends"); return b[at] | (b[at + 1] << 8); };
  switch (b[5]) {
    case 0: return { type: "hello", protocolVersion: u16(6) };
    case 1: return { type: "welcome", protocolVersion: u16(6), tickRate: u16(8), snapshotRate: u16(10), maxPayload: u16(12) };
    case 2: return { type: "reject", server: u16(6), client: u16(8) };
    case 3: {
      if (b.length < 8 || b.length !== 8 + b[7] || b[7] > 200) throw new BadPacket("goodbye's text");
      const code = b[6];
      if (!END_REASONS[code]) throw new BadPacket("goodbye's reason");
      const text = new TextDecoder().decode(b.subarray(8));
      if (text && code !== 1) throw new BadPacket("text on a reason that carries none");
      return { type: "goodbye", code, reason: END_REASONS[code], text };
    }
    default: throw new BadPacket("control type");
  }
}

// ---- lz4 blocks ----

/** Decompresses one lz4 block, at most `limit` bytes. Throws BadPacket. */
export function lz4Decompress(src, limit = 65536) {
  const out = [];
  let i = 0;
  const len = () => { let n = 0, b; do { if (i >= src.length) throw new BadPacket("lz4 ends"); b = src[i++]; n += b; } while (b === 255); return n; };
  while (i < src.length) {
    const token = src[i++];
    let lit = token >> 4;
    if (lit === 15) lit += len();
    if (i + lit > src.length || out.length + lit > limit) throw new BadPacket("lz4 literals");
    for (let k = 0; k < lit; k++) out.push(src[i++]);
    if (i >= src.length) break;
    if (i + 2 > src.length) throw new BadPacket("lz4 offset");
    const offset = src[i] | (src[i + 1] << 8);
    i += 2;
    let ml = token & 15;
    if (ml === 15) ml += len();
    ml += 4;
    if (offset === 0 || offset > out.length || out.length + ml > limit) throw new BadPacket("lz4 match");
    const from = out.length - offset;
    for (let k = 0; k < ml; k++) out.push(out[from + k]);
  }
  return new Uint8Array(out);
}

// ---- channel packets ("Channel packets") ----

const SEQ = 65536;
const seqNewer = (a, b) => a !== b && ((a - b + SEQ) % SEQ) < SEQ / 2;

/** Parses a channel packet: its header and sections. Throws BadPacket. */
export function parseChannelPacket(raw) {
  if (raw.length < 1) throw new BadPacket("empty");
  const frame = raw[0];
  let b = raw;
  if ((frame & 0x0f) === 2) b = new Uint8Array([frame, ...lz4Decompress(raw.subarray(1))]);
  else if ((frame & 0x0f) !== 1) throw new BadPacket("frame");
  if (b.length < 11) throw new BadPacket("channel header");
  const u16 = (at) => b[at] | (b[at + 1] << 8);
  const p = {
    frame, sequence: u16(1), ack: u16(3), ackBits: (b[5] | (b[6] << 8) | (b[7] << 16) | (b[8] << 24)) >>> 0,
    ackDelay: u16(9), state: null, reliable: [], events: [], fragments: [],
  };
  let at = 11;
  const leb = () => { let v = 0, s = 1; for (let i = 0; i < 5; i++) { if (at >= b.length) throw new BadPacket("length"); const x = b[at++]; v += (x & 0x7f) * s; if (!(x & 0x80)) return v; s *= 128; } throw new BadPacket("length"); };
  let sections = 0;
  while (at < b.length) {
    if (++sections > 64) throw new BadPacket("too many sections");
    const tag = b[at++];
    let id = 0, index = 0, count = 0;
    if (tag === 2 || tag === 4) { if (at + 2 > b.length) throw new BadPacket("section"); id = u16(at); at += 2; }
    if (tag === 4) { if (at + 4 > b.length) throw new BadPacket("section"); index = u16(at); count = u16(at + 2); at += 4; }
    const n = leb();
    if (at + n > b.length) throw new BadPacket("section length");
    const body = b.subarray(at, at + n);
    at += n;
    if (tag === 1) p.state = body;
    else if (tag === 2) p.reliable.push([id, body]);
    else if (tag === 3) p.events.push(body);
    else if (tag === 4) p.fragments.push([id, index, count, body]);
    else throw new BadPacket("section tag");
  }
  return p;
}

/** One of the two channels, client side: acks both ways, reliable messages in order. */
export class Channel {
  constructor(frame) {
    this.frame = frame;
    this.sequence = 0;
    this.remoteNewest = null;
    this.remoteNewestAt = 0;
    this.remoteBits = 0;
    this.nextDeliver = 0;
    this.early = new Map();
    this.delivered = [];
    this.sentAt = new Map(); // sequence -> [time ms, reliable ids]
    this.outbox = []; // [id, bytes] not yet acknowledged
    this.nextId = 0;
    this.events = [];
    this.rtt = null;
    this.stateSeq = null;
  }
  /** Takes a packet; returns its state section when it is the newest, else null. */
  receive(nowMs, raw) {
    const p = parseChannelPacket(raw);
    if (this.remoteNewest === null || seqNewer(p.sequence, this.remoteNewest)) {
      if (this.remoteNewest !== null) {
        const shift = (p.sequence - this.remoteNewest + SEQ) % SEQ;
        this.remoteBits = shift >= 32 ? 0 : ((this.remoteBits * pow2(shift)) % P32 + pow2(shift - 1)) % P32;
      }
      this.remoteNewest = p.sequence;
      this.remoteNewestAt = nowMs;
    } else {
      const back = (this.remoteNewest - p.sequence + SEQ) % SEQ;
      if (back >= 1 && back <= 32) this.remoteBits = (this.remoteBits | (1 << (back - 1))) >>> 0;
    }
    if (p.ackDelay !== 0xffff) this.acknowledge(nowMs, p);
    for (const [id, body] of p.reliable) this.offer(id, body);
    // A fragmented message takes one id a fragment, consecutive, in fragment order.
    for (const [id, index, count, body] of p.fragments) {
      if (count === 0 || count > 256 || index >= count) continue;
      this.offer(id, { index, count, body });
    }
    this.events.push(...p.events);
    if (p.state && (this.stateSeq === null || seqNewer(p.sequence, this.stateSeq))) {
      this.stateSeq = p.sequence;
      return p.state;
    }
    return null;
  }
  offer(id, body) {
    const ahead = (id - this.nextDeliver + SEQ) % SEQ;
    if (ahead >= SEQ / 2 || ahead > 1024) return; // delivered before, or too far ahead
    this.early.set(id, body);
    for (;;) {
      const next = this.early.get(this.nextDeliver);
      if (next === undefined) return;
      if (next instanceof Uint8Array) {
        this.delivered.push(next);
        this.early.delete(this.nextDeliver);
        this.nextDeliver = (this.nextDeliver + 1) % SEQ;
        continue;
      }
      // The first fragment of a message: delivered whole once all its fragments are here.
      if (next.index !== 0) { this.early.delete(this.nextDeliver); return; }
      const parts = [];
      for (let k = 0; k < next.count; k++) {
        const f = this.early.get((this.nextDeliver + k) % SEQ);
        if (!f || f instanceof Uint8Array || f.index !== k || f.count !== next.count) return;
        parts.push(f.body);
      }
      const whole = new Uint8Array(parts.reduce((n, b) => n + b.length, 0));
      let at = 0;
      for (const b of parts) { whole.set(b, at); at += b.length; }
      for (let k = 0; k < next.count; k++) this.early.delete((this.nextDeliver + k) % SEQ);
      this.delivered.push(whole);
      this.nextDeliver = (this.nextDeliver + next.count) % SEQ;
    }
  }
  acknowledge(nowMs, p) {
    const acked = [p.ack];
    for (let i = 0; i < 32; i++) if ((p.ackBits >>> i) & 1) acked.push((p.ack - 1 - i + SEQ) % SEQ);
    for (const s of acked) {
      const sent = this.sentAt.get(s);
      if (!sent) continue;
      this.sentAt.delete(s);
      if (s === p.ack) {
        const sample = nowMs - sent[0] - p.ackDelay / 100;
        if (sample >= 0) this.rtt = this.rtt === null ? sample : this.rtt * 0.875 + sample * 0.125;
      }
      if (sent[1].length) this.outbox = this.outbox.filter(([id]) => !sent[1].includes(id));
    }
    if (this.sentAt.size > 1024) this.sentAt.clear();
  }
  /** Queues a reliable message (at most 1024 bytes here: fragments are the server's). */
  sendReliable(bytes) {
    if (bytes.length > 1024 || this.outbox.length >= 256) return false;
    this.outbox.push([this.nextId, bytes]);
    this.nextId = (this.nextId + 1) % SEQ;
    return true;
  }
  /** Builds the next packet, with `state` (or none), the reliable messages not yet acknowledged and `events`. */
  build(nowMs, state, events = []) {
    const out = [this.frame];
    const u16 = (v) => out.push(v & 255, (v >> 8) & 255);
    const seq = this.sequence;
    this.sequence = (this.sequence + 1) % SEQ;
    u16(seq);
    if (this.remoteNewest === null) { u16(0); out.push(0, 0, 0, 0); u16(0xffff); } else {
      u16(this.remoteNewest);
      const bits = this.remoteBits;
      out.push(bits & 255, (bits >>> 8) & 255, (bits >>> 16) & 255, (bits >>> 24) & 255);
      u16(Math.min(Math.round((nowMs - this.remoteNewestAt) * 100), 0xfffe));
    }
    const section = (tag, head, body) => { out.push(tag, ...head); writeVarint(out, body.length); for (const x of body) out.push(x); };
    if (state) section(1, [], state);
    const ids = [];
    for (const [id, body] of this.outbox) {
      if (ids.length >= 32 || out.length + body.length + 8 > 1200) break;
      section(2, [id & 255, id >> 8], body);
      ids.push(id);
    }
    for (const e of events) if (out.length + e.length + 4 <= 1200) section(3, [], e);
    this.sentAt.set(seq, [nowMs, ids]);
    return new Uint8Array(out);
  }
}

// ---- the input packet ("Client → server: the input packet") ----

/** The state section of an input packet. `inputs` newest first: [[bytes, view|null]]. */
export function encodeInputPacket(ackTick, newestSeq, inputs) {
  const out = [];
  const u32 = (v) => out.push(v & 255, (v >>> 8) & 255, (v >>> 16) & 255, (v >>> 24) & 255);
  u32(ackTick === null ? 0xffffffff : ackTick);
  u32(newestSeq >>> 0);
  const keep = [];
  let size = 9;
  for (const [bytes, view] of inputs.slice(0, 16)) {
    if (keep.length >= 4 && size + 1 + bytes.length + 3 > 480) break;
    keep.push([bytes, view]);
    size += 1 + bytes.length + 3;
  }
  out.push(keep.length);
  for (const [bytes, view] of keep) {
    out.push(bytes.length, ...bytes);
    out.push(...encodeView(ackTick, view));
  }
  return new Uint8Array(out);
}

// A view: {from, to, alpha} in ticks (alpha 0..1), relative to the ack tick.
function encodeView(ackTick, view) {
  if (!view || ackTick === null) return [0xff];
  const back = ackTick - view.from;
  if (back < 0 || back > 62) return [0xff];
  const blend = Math.min(Math.max(Math.round(view.alpha * 255), 0), 255);
  if (view.to === view.from || blend === 0) return [back];
  const span = view.to - view.from;
  if (span === 1) return [0x40 | back, blend];
  if (span >= 2 && span <= 255) return [0x80 | back, span, blend];
  return [back];
}

/** Decodes an input packet's state section (for tests and tools). */
export function decodeInputPacket(b) {
  const u32 = (at) => (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (b[at + 3] << 24)) >>> 0;
  if (b.length < 9) throw new BadPacket("input packet");
  const ack = u32(0);
  const out = { ackTick: ack === 0xffffffff ? null : ack, newestSeq: u32(4), inputs: [], views: [] };
  let at = 9;
  for (let i = 0; i < b[8]; i++) {
    const n = b[at++];
    if (n > 64 || at + n > b.length) throw new BadPacket("input");
    out.inputs.push(Array.from(b.subarray(at, at + n)));
    at += n;
    const v = b[at++];
    if (v === 0xff) { out.views.push(null); continue; }
    const back = v & 63, form = v >> 6;
    const from = out.ackTick - back;
    if (form === 0) out.views.push({ from, to: from, alpha_255ths: 0 });
    else if (form === 1) out.views.push({ from, to: from + 1, alpha_255ths: b[at++] });
    else { const span = b[at++]; out.views.push({ from, to: from + span, alpha_255ths: b[at++] }); }
  }
  return out;
}

// ---- the framework's messages ("The framework's channel") ----

/** Decodes one framework message: {type, ...}; null for a kind it does not know. */
export function decodeSystem(b) {
  if (!b.length) return null;
  const r = new Postcard(b.subarray(1));
  switch (b[0]) {
    case 0: {
      const variant = r.varint();
      if (variant === 0) {
        const columns = r.seq(() => r.string());
        const rows = r.seq(() => ({ player: r.varint(), name: r.string(), fields: r.seq(() => r.zigzag()), pingMs: r.varint() }));
        return { type: "scoreboard", full: true, columns, rows };
      }
      const changed = r.seq(() => ({
        player: r.varint(), name: r.option(() => r.string()), fields: r.option(() => r.seq(() => r.zigzag())), pingMs: r.option(() => r.varint()),
      }));
      return { type: "scoreboard", full: false, changed, removed: r.seq(() => r.varint()) };
    }
    case 1: {
      const world = r.varint(), kind = r.string();
      const reason = r.varint();
      const why = reason === 2 ? r.string() : null;
      return { type: "world", world, kind, reason: ["connected", "moved", "world stopped"][reason] || "unknown", why };
    }
    case 2: return {
      type: "spectator", since: r.varint(), atQuarters: r.varint(), quarters: r.u8(), first: r.varint(), last: r.varint(),
      following: r.option(() => r.varint()), live: r.bool(),
    };
    case 3: return { type: "redirect", token: r.bytes(), lastApplied: r.option(() => r.varint()) };
    case 4: return { type: "pace", interval: Math.min(Math.max(b[1] || 1, 1), 4), maxInputs: b.length > 2 ? Math.min(Math.max(b[2], 4), 16) : 4 };
    case 5: return { type: "ticket", token: r.bytes(), graceMs: r.varint() };
    default: return null;
  }
}

/** The scoreboard: columns and rows by player, as the server's updates leave it. */
export class Scoreboard {
  constructor() { this.columns = []; this.rows = new Map(); }
  apply(m) {
    if (m.full) { this.columns = m.columns; this.rows = new Map(m.rows.map((r) => [r.player, r])); return; }
    for (const c of m.changed) {
      const row = this.rows.get(c.player) || { player: c.player, name: "", fields: [], pingMs: 0 };
      if (c.name !== null) row.name = c.name;
      if (c.fields !== null) row.fields = c.fields;
      if (c.pingMs !== null) row.pingMs = c.pingMs;
      this.rows.set(c.player, row);
    }
    for (const p of m.removed) this.rows.delete(p);
  }
}

// ---- transports ----

const hexBytes = (h) => new Uint8Array(h.match(/../g).map((x) => parseInt(x, 16)));

/**
 * A transport to a volley server's browser side: `send(bytes)`, `close()`, and callbacks
 * `onPayload(bytes)`, `onStatus({connected}|{ended})`, `onClose()`.
 */
class Link {
  constructor(kind) { this.kind = kind; this.onPayload = () => {}; this.onStatus = () => {}; this.onClose = () => {}; this.closed = false; }
}

/** WebTransport: the token on the first bidirectional stream, payloads in datagrams. */
export async function openWebTransport(url, hashes, token) {
  const options = hashes && hashes.length ? { serverCertificateHashes: hashes.map((h) => ({ algorithm: "sha-256", value: hexBytes(h) })) } : {};
  const wt = new WebTransport(url, options);
  await wt.ready;
  const link = new Link("webtransport");
  const stream = await wt.createBidirectionalStream();
  const writer = stream.writable.getWriter();
  await writer.write(token);
  const dgWriter = wt.datagrams.writable.getWriter();
  link.send = (bytes) => { if (!link.closed) dgWriter.write(bytes).catch(() => {}); };
  link.close = () => { link.closed = true; try { wt.close(); } catch (_) { /* gone */ } };
  (async () => {
    const reader = stream.readable.getReader();
    let text = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
        let nl;
        while ((nl = text.indexOf("\n")) >= 0) { link.onStatus(JSON.parse(text.slice(0, nl))); text = text.slice(nl + 1); }
      }
    } catch (_) { /* closed */ }
  })();
  (async () => {
    const reader = wt.datagrams.readable.getReader();
    try { for (;;) { const { value, done } = await reader.read(); if (done) break; link.onPayload(value); } } catch (_) { /* closed */ }
  })();
  (async () => {
    // Payloads larger than the path's datagrams come on streams of their own.
    const reader = wt.incomingUnidirectionalStreams.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        new Response(value).arrayBuffer().then((b) => link.onPayload(new Uint8Array(b))).catch(() => {});
      }
    } catch (_) { /* closed */ }
  })();
  wt.closed.catch(() => {}).finally(() => { link.closed = true; link.onClose(); });
  return link;
}

/** WebSocket: the token as the first binary message, then one payload a message. */
export function openWebSocket(url, token) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    const link = new Link("websocket");
    link.send = (bytes) => { if (ws.readyState === 1) ws.send(bytes); };
    link.close = () => { link.closed = true; ws.close(); };
    ws.onopen = () => { ws.send(token); resolve(link); };
    ws.onerror = () => reject(new Error("WebSocket failed"));
    ws.onclose = () => { link.closed = true; link.onClose(); };
    ws.onmessage = (m) => {
      if (typeof m.data === "string") link.onStatus(JSON.parse(m.data));
      else link.onPayload(new Uint8Array(m.data));
    };
  });
}

// ---- the client ----

/**
 * A game client over a link: the session, both channels, inputs, snapshots and the playback
 * clock. Times are `performance.now()` milliseconds.
 */
export class Client {
  constructor(schema, options = {}) {
    this.schema = schema;
    this.kinds = schema.kinds.map((k) => new Kind(k));
    this.receiver = new SnapshotReceiver(schema);
    this.game = new Channel(0x01);
    this.system = new Channel(0x11);
    this.systemAckDue = false;
    this.params = null;
    this.connected = false;
    this.ended = null;
    this.inputSeq = 0;
    this.inputs = []; // newest first: [bytes, view]
    this.pace = 1; this.paceInputs = 4; this.unsent = 0;
    this.snapshots = new Map(); // tick -> {entities, at}
    this.applied = new Map(); // tick -> input seq the world had applied
    this.stats = { snapshots: 0, decodeErrors: 0, bytesReceived: 0, packetsReceived: 0, resumes: 0 };
    this.world = null;
    this.notices = [];
    this.spectator = null;
    this.scoreboard = new Scoreboard();
    this.ticket = null; this.graceMs = 0;
    this.offsetMs = null; // server time minus local time, in ms
    this.delayMs = options.interpolationMs ?? 50;
    this.maxExtrapolationMs = options.maxExtrapolationMs ?? 100;
    this.onMessage = () => {};
    this.onEnded = () => {};
    this.onNotice = () => {};
    this.link = null;
    this.helloAt = -1e9;
  }

  /** Puts the client on a (new) link: its first, or one that resumes the session. */
  attach(link) {
    this.link = link;
    link.onStatus = (s) => {
      if (s.connected) { this.connected = true; if (this.link.resumed) this.stats.resumes++; }
      if (s.ended && !this.ended) this.finish(s.ended);
    };
    link.onPayload = (b) => this.receive(performance.now(), b);
  }

  finish(reason) { this.ended = reason; this.onEnded(reason); }

  /** Whether the session is up (welcome received). */
  get ready() { return this.connected && this.params !== null && !this.ended; }

  /** The round trip, ms (the game channel's acks). */
  get rttMs() { return this.game.rtt; }

  /** The input sequence the world had applied by the newest snapshot. */
  get appliedInput() { const t = this.receiver.newest; return t === null ? null : this.applied.get(t) ?? null; }

  receive(now, b) {
    this.stats.packetsReceived++;
    this.stats.bytesReceived += b.length;
    try {
      if ((b[0] & 0xf0) === 0x10) {
        this.system.receive(now, b);
        this.systemAckDue = true;
        while (this.system.delivered.length) this.onSystem(this.system.delivered.shift());
        return;
      }
      if (b[0] === CONTROL) {
        const c = decodeControl(b);
        if (c.type === "welcome" && !this.params) this.params = c;
        else if (c.type === "reject") this.finish(`version mismatch: server ${c.server}, client ${c.client}`);
        else if (c.type === "goodbye" && c.code !== 6 && !this.ended) { this.finish(c.text ? `${c.reason}: ${c.text}` : c.reason); this.link.send(new Uint8Array([0])); }
        return;
      }
      const state = this.game.receive(now, b);
      while (this.game.delivered.length) this.onMessage(this.game.delivered.shift(), true);
      while (this.game.events.length) this.onMessage(this.game.events.shift(), false);
      if (!state || state.length < 4) return;
      const applied = (state[0] | (state[1] << 8) | (state[2] << 16) | (state[3] << 24)) >>> 0;
      const tick = this.receiver.decode(state.subarray(4));
      this.stats.snapshots++;
      this.applied.set(tick, applied === 0xffffffff ? null : applied);
      this.snapshots.set(tick, { entities: this.receiver.held.get(tick), at: now });
      for (const t of this.snapshots.keys()) if (t + 64 <= this.receiver.newest) { this.snapshots.delete(t); this.applied.delete(t); }
      if (this.params) {
        const offset = (tick * 1000) / this.params.tickRate - now;
        // The newest tick that arrived earliest relative to its time sets the clock (the least delayed).
        this.offsetMs = this.offsetMs === null ? offset : Math.max(offset, this.offsetMs - 0.05 * Math.max(0, this.offsetMs - offset) - 0.01);
      }
    } catch (e) {
      if (e instanceof BadPacket) this.stats.decodeErrors++;
      else throw e;
    }
  }

  onSystem(m) {
    const s = decodeSystem(m);
    if (!s) return;
    if (s.type === "scoreboard") this.scoreboard.apply(s);
    else if (s.type === "world") { this.world = s; this.spectator = null; this.scoreboard = new Scoreboard(); this.notices.push(s); this.onNotice(s); }
    else if (s.type === "spectator") this.spectator = s;
    else if (s.type === "pace") { this.pace = s.interval; this.paceInputs = s.maxInputs; }
    else if (s.type === "ticket") { this.ticket = s.token; this.graceMs = s.graceMs; }
  }

  /** Timers: the hello until welcomed, acknowledgements of the framework's channel. */
  update(now) {
    if (!this.link || this.link.closed || !this.connected) return;
    if (!this.params && now - this.helloAt >= 100) { this.helloAt = now; this.link.send(encodeHello()); }
    if (this.systemAckDue) { this.systemAckDue = false; this.link.send(this.system.build(now, null)); }
  }

  /** The view (for lag compensation) at `now`: what playback draws. */
  view(now) {
    const t = this.playbackTick(now);
    if (t === null) return null;
    const ticks = [...this.snapshots.keys()].sort((a, b) => a - b);
    let from = null, to = null;
    for (const k of ticks) { if (k <= t) from = k; else { to = k; break; } }
    if (from === null) return null;
    if (to === null) return { from, to: from, alpha: 0 };
    return { from, to, alpha: (t - from) / (to - from) };
  }

  /** Sends this frame's input (bytes in the game's encoding), with the acks. */
  sendInput(now, input) {
    this.update(now);
    if (!this.ready || this.link.closed) return;
    this.inputSeq = (this.inputSeq + 1) >>> 0;
    this.inputs.unshift([input, this.view(now)]);
    this.inputs.length = Math.min(this.inputs.length, Math.min(4 * this.pace, Math.max(this.paceInputs, 4), 16));
    if (++this.unsent < this.pace) return;
    this.unsent = 0;
    const state = encodeInputPacket(this.receiver.newest, this.inputSeq, this.inputs);
    this.link.send(this.game.build(now, state));
  }

  /** A packet with no input: the acks and whatever messages are due (a spectator's frame). */
  sendWithoutInput(now) {
    this.update(now);
    if (!this.ready || this.link.closed) return;
    if (++this.unsent < this.pace) return;
    this.unsent = 0;
    this.link.send(this.game.build(now, encodeInputPacket(this.receiver.newest, this.inputSeq, [])));
  }

  /** Queues a reliable message to the world (the game's encoding). */
  sendMessage(bytes) { return this.game.sendReliable(bytes); }

  /** The server tick being shown at `now` (fractional), or null before the first snapshot. */
  playbackTick(now) {
    if (this.offsetMs === null || !this.params) return null;
    const snapMs = 1000 / this.params.snapshotRate;
    const t = ((now + this.offsetMs - Math.max(this.delayMs, 2 * snapMs)) * this.params.tickRate) / 1000;
    const newest = this.receiver.newest;
    const cap = newest + (this.maxExtrapolationMs * this.params.tickRate) / 1000;
    return Math.min(t, cap);
  }

  /**
   * The entities as drawn at `now`: [{id, kind, kindName, fields: {name: numbers}}],
   * interpolated between the two snapshots around the playback tick, extrapolated from the
   * newest two when it is past them (at most `maxExtrapolationMs`).
   */
  entities(now) {
    const t = this.playbackTick(now);
    if (t === null) return [];
    const ticks = [...this.snapshots.keys()].sort((a, b) => a - b);
    let a = null, b = null;
    for (const k of ticks) { if (k <= t) a = k; else { b = k; break; } }
    if (a === null) a = ticks[0];
    if (b === null) {
      // Past the newest: extrapolate from the one before it.
      b = a;
      const i = ticks.indexOf(a);
      a = i > 0 ? ticks[i - 1] : a;
    }
    const sa = this.snapshots.get(a).entities, sb = this.snapshots.get(b).entities;
    const alpha = b === a ? 0 : (t - a) / (b - a);
    const byId = new Map(sa.map((e) => [e[0], e]));
    return sb.map(([id, kind, words]) => {
      const k = this.kinds[kind];
      const now = k.decode(words);
      const old = byId.get(id);
      if (!old || old[1] !== kind) return { id, kind, kindName: k.name, fields: now };
      const before = k.decode(old[2]);
      const fields = {};
      for (const f of k.fields) {
        // Extrapolation (alpha past 1) only moves what blends linearly.
        const lerp = alpha <= 1 || !["bits", "flag", "raw", "quat"].includes(f.quant.type);
        fields[f.name] = lerp ? blend(f.quant, before[f.name], now[f.name], alpha) : now[f.name];
      }
      return { id, kind, kindName: k.name, fields };
    });
  }

  /** Leaves: the relay tells the server (a netcode disconnect). */
  leave() { if (this.link && !this.link.closed) { this.link.send(new Uint8Array([0])); setTimeout(() => this.link.close(), 50); } }
}

/**
 * Connects: WebTransport first (unless `transport: "websocket"`), the WebSocket where it
 * fails. `token` is the 2048-byte connect token (Uint8Array); `hashes` the certificate
 * hashes to trust (hex SHA-256, from the server's `/web.json`), or an async function giving
 * them, asked before each connection. Resolves to a Client whose link, should it break, is
 * opened again with the session's resume ticket while the server keeps the session.
 */
export async function connect({ token, schema, webtransport, hashes, websocket, transport, onLink }) {
  const client = new Client(schema);
  const open = async (tok) => {
    if (transport !== "websocket" && webtransport && typeof WebTransport !== "undefined") {
      // Hashes may be a function: asked again for each connection, so that a page that
      // reconnects after the server renewed its certificate trusts the new one.
      const trusted = typeof hashes === "function" ? await hashes() : hashes;
      try { return await openWebTransport(webtransport, trusted, tok); } catch (e) { if (transport === "webtransport") throw e; }
    }
    return openWebSocket(websocket, tok);
  };
  const attach = (link, resumed) => {
    link.resumed = resumed;
    client.attach(link);
    if (onLink) onLink(link);
    link.onClose = () => {
      if (client.ended || !client.ticket) { if (!client.ended) client.finish("the connection closed"); return; }
      // The network broke: back in with the resume ticket, while the server keeps the seat.
      client.connected = false;
      const ticket = client.ticket;
      const deadline = performance.now() + Math.max(client.graceMs, 1000);
      const retry = async () => {
        if (performance.now() > deadline) { client.finish("the connection broke and did not come back"); return; }
        try { attach(await open(ticket), true); } catch (_) { setTimeout(retry, 500); }
      };
      setTimeout(retry, 100);
    };
  };
  attach(await open(token), false);
  return client;
}
