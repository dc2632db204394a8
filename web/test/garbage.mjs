// The JavaScript client's decoders against garbage, under node: random bytes and vectors
// with bytes changed go through every decoder, which may only throw BadPacket (anything else
// would stop a page). A fixed seed, so a failure repeats:
//   node web/test/garbage.mjs [docs/vectors] [rounds]
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as v from "../client/volley.js";

const dir = process.argv[2] || join(dirname(fileURLToPath(import.meta.url)), "../../docs/vectors");
const rounds = Number(process.argv[3] || 20000);
let seed = 0x9e3779b9;
const rand = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed; };
const hex = (h) => new Uint8Array((h.match(/../g) || []).map((x) => parseInt(x, 16)));
const load = (f) => JSON.parse(readFileSync(join(dir, f + ".json"), "utf8"));
const seeds = [];
for (const f of ["session", "channel", "input", "system", "snapshot", "snapshot_predicted"]) for (const x of load(f).vectors) seeds.push(hex(x.hex));
const plain = load("snapshot");
const predicted = load("snapshot_predicted");
const schema = plain.schema;

function mutate() {
  if (rand() % 4 === 0) return Uint8Array.from({ length: rand() % 300 }, () => rand() & 255);
  const b = Uint8Array.from(seeds[rand() % seeds.length]);
  const n = 1 + (rand() % 4);
  for (let i = 0; i < n && b.length; i++) b[rand() % b.length] = rand() & 255;
  return rand() % 5 === 0 ? b.subarray(0, rand() % (b.length + 1)) : b;
}

let bad = 0;
const guard = (what, f, input) => {
  try { f(input); } catch (e) {
    if (!(e instanceof v.BadPacket)) { bad++; if (bad < 10) console.error(`${what}: ${e && e.stack}\n  input ${Buffer.from(input).toString("hex")}`); }
  }
};
const started = Date.now();
for (let i = 0; i < rounds; i++) {
  const b = mutate();
  guard("decodeControl", v.decodeControl, b);
  guard("parseChannelPacket", v.parseChannelPacket, b);
  guard("decodeInputPacket", v.decodeInputPacket, b);
  guard("decodeSystem", v.decodeSystem, b);
  guard("lz4Decompress", (x) => v.lz4Decompress(x, 4096), b);
  // A receiver that holds the vectors' baselines, then a changed packet.
  const r = new v.SnapshotReceiver(i % 2 ? schema : predicted.schema);
  for (const x of (i % 2 ? plain : predicted).vectors.slice(0, 2)) r.decode(hex(x.hex));
  guard("SnapshotReceiver.decode", (x) => r.decode(x), b);
  const c = new v.Client(schema);
  c.link = { send() {}, closed: false };
  guard("Client.receive", (x) => c.receive(0, x), b);
}
if (bad) { console.error(`${bad} inputs threw something other than BadPacket`); process.exit(1); }
console.log(`${rounds} garbage inputs, each through every decoder, in ${Date.now() - started} ms: only BadPacket`);
