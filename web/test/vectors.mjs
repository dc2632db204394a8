// The JavaScript client's decoders over docs/vectors, under node:
//   node web/test/vectors.mjs [docs/vectors]
// Exits 1 with what differs. tests/wire_vectors.rs runs it (the vectors are what the Rust
// code writes, so a change of the wire that this client does not follow fails there).
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as v from "../client/volley.js";

const dir = process.argv[2] || join(dirname(fileURLToPath(import.meta.url)), "../../docs/vectors");
const load = (f) => JSON.parse(readFileSync(join(dir, f + ".json"), "utf8"));
const hex = (h) => new Uint8Array((h.match(/../g) || []).map((x) => parseInt(x, 16)));
let failures = 0, checked = 0;
// JSON with the keys of every object in order, so that only values count.
const canon = (x) => JSON.stringify(x, (_, val) => (val && typeof val === "object" && !Array.isArray(val) ? Object.fromEntries(Object.entries(val).sort(([a], [b]) => (a < b ? -1 : 1))) : val));
const eq = (what, got, want) => {
  checked++;
  const g = canon(got), w = canon(want);
  if (g !== w) { failures++; console.error(`${what}:\n  got  ${g}\n  want ${w}`); }
};

for (const file of ["snapshot", "snapshot_predicted"]) {
  const doc = load(file);
  eq(`${file}: fingerprint`, v.fingerprint(doc.schema), doc.schema.fingerprint);
  const r = new v.SnapshotReceiver(doc.schema);
  for (const x of doc.vectors) {
    const tick = r.decode(hex(x.hex));
    eq(`${file}: ${x.name}: tick`, tick, x.decoded.tick);
    const got = r.held.get(tick).map(([id, kind, words]) => ({ id, kind: r.kinds[kind].name, words }));
    eq(`${file}: ${x.name}`, got, x.decoded.entities.map((e) => ({ id: e.id, kind: e.kind, words: e.words })));
  }
}

for (const x of load("session").vectors) {
  const c = v.decodeControl(hex(x.hex));
  const d = x.decoded;
  const want = d.startsWith("Hello") ? { type: "hello", protocolVersion: +d.match(/\d+/)[0] }
    : d.startsWith("Welcome") ? (([a, b, c2, e]) => ({ type: "welcome", protocolVersion: a, tickRate: b, snapshotRate: c2, maxPayload: e }))(d.match(/\d+/g).map(Number))
    : d.startsWith("Reject") ? (([a, b]) => ({ type: "reject", server: a, client: b }))(d.match(/\d+/g).map(Number))
    : null;
  if (want) eq(`session: ${x.name}`, c, want);
  else eq(`session: ${x.name}`, c.type, "goodbye");
  if (d.startsWith("Hello")) eq("session: hello encodes", Array.from(v.encodeHello(c.protocolVersion)), Array.from(hex(x.hex)));
  if (d.includes("Kicked")) eq(`session: ${x.name}: text`, c.text, d.match(/"(.*)"/)[1]);
}

for (const x of load("channel").vectors) {
  const p = v.parseChannelPacket(hex(x.hex));
  const d = x.decoded;
  eq(`channel: ${x.name}: sequence`, p.sequence, d.sequence);
  if ("ack" in d) eq(`channel: ${x.name}: acks`, [p.ack, p.ackBits, p.ackDelay], [d.ack, d.ack_bits, d.ack_delay_units]);
  if ("state" in d) eq(`channel: ${x.name}: state`, Array.from(p.state), d.state);
  if ("reliable" in d) eq(`channel: ${x.name}: reliable`, p.reliable.map(([, b]) => Array.from(b)), d.reliable);
  if ("events" in d) eq(`channel: ${x.name}: events`, p.events.map((b) => Array.from(b)), d.events);
}

for (const x of load("input").vectors) {
  const p = v.decodeInputPacket(hex(x.hex));
  const d = x.decoded;
  eq(`input: ${x.name}`, [p.ackTick, p.newestSeq, p.inputs, p.views], [d.ack_tick, d.newest_seq, d.inputs, d.views]);
  // And the writer writes the same bytes.
  const views = p.views.map((w) => (w === null ? null : { from: w.from, to: w.to, alpha: w.alpha_255ths / 255 }));
  const again = v.encodeInputPacket(p.ackTick, p.newestSeq, p.inputs.map((i, k) => [i, views[k]]));
  eq(`input: ${x.name}: encodes`, Array.from(again), Array.from(hex(x.hex)));
}

const board = new v.Scoreboard();
for (const x of load("system").vectors) {
  const s = v.decodeSystem(hex(x.hex));
  if (s && s.type === "scoreboard") board.apply(s);
  const d = x.decoded;
  if (typeof d === "string" && d.startsWith("WorldNotice")) {
    const [, world, kind] = d.match(/world: (\d+), kind: "([^"]*)"/);
    eq(`system: ${x.name}`, [s.type, s.world, s.kind], ["world", +world, kind]);
    if (d.includes("WorldStopped")) eq(`system: ${x.name}: why`, s.why, d.match(/WorldStopped\("([^"]*)"\)/)[1]);
  } else if (typeof d === "string" && d.startsWith("SpectatorStatus")) {
    const n = d.match(/\d+/g).map(Number);
    eq(`system: ${x.name}`, [s.since, s.atQuarters, s.quarters, s.first, s.last, s.following, s.live], [n[0], n[1], n[2], n[3], n[4], n[5], d.includes("live: true")]);
  } else if (d && typeof d === "object" && "last_applied" in d) {
    eq(`system: ${x.name}`, [s.type, s.token.length, s.lastApplied], ["redirect", 2048, d.last_applied]);
  } else if (d && typeof d === "object" && "rows_after_both" in d) {
    const rows = [...board.rows.values()].map((r) => ({ fields: r.fields, name: r.name, ping_ms: r.pingMs, player: r.player }));
    eq(`system: ${x.name}`, rows, d.rows_after_both);
  } else if (s && s.type === "scoreboard") {
    eq(`system: ${x.name}: columns`, s.columns, ["kills", "deaths"]);
  } else {
    checked++; failures++; console.error(`system: ${x.name}: not checked (${JSON.stringify(d)})`);
  }
}

for (const x of load("quantizers").vectors) {
  const got = v.quantize(x.quant, x.words, x.widths);
  const close = got.length === x.numbers.length && got.every((g, i) => Math.abs(g - x.numbers[i]) <= 1e-5 * Math.max(1, Math.abs(x.numbers[i])));
  checked++;
  if (!close) { failures++; console.error(`quantizers: ${x.name}: got ${JSON.stringify(got)}, want ${JSON.stringify(x.numbers)}`); }
}

if (failures) { console.error(`${failures} of ${checked} checks failed`); process.exit(1); }
console.log(`${checked} checks passed`);
