// The arena in a page: joins the server's lobby and matches as a player (or, with ?watch=1,
// watches a match as a spectator; with ?bot=1 plays by itself), draws the arena top-down with
// the others interpolated, the scoreboard and the kill feed, and keeps #volley-status up to
// date (snapshots, decode errors, RTT, the inputs the server applied) for people and tests.
// ?transport=websocket skips WebTransport.
import { connect, postcard, Postcard } from "/volley.js";

const params = new URLSearchParams(location.search);
const bot = params.get("bot") === "1";
const watch = params.get("watch") === "1";
const HALF = 50; // the arena's half size (volley_arena::HALF_SIZE)
const WORLD_SHIFT = 2 ** 22; // merged ids: the world's number above 22 bits of local id

const canvas = document.getElementById("arena");
const ctx = canvas.getContext("2d");
const statusEl = document.getElementById("volley-status");
const feed = document.getElementById("feed");
const keys = new Set();
let mouse = { x: 0, y: 0 }, firing = false, rail = false;
let me = null; // our player id (the Welcome event)
let kills = 0, lastKillSeq = -1, feedGaps = 0;
let sentInputs = 0;
let status = { state: "starting" };

addEventListener("keydown", (e) => { keys.add(e.key.toLowerCase()); if (e.key === " ") { rail = true; e.preventDefault(); } });
addEventListener("keyup", (e) => keys.delete(e.key.toLowerCase()));
canvas.addEventListener("mousemove", (e) => { const r = canvas.getBoundingClientRect(); mouse = { x: e.clientX - r.left, y: e.clientY - r.top }; });
canvas.addEventListener("mousedown", (e) => { if (e.button === 2) rail = true; else firing = true; });
canvas.addEventListener("mouseup", () => { firing = false; });
canvas.addEventListener("contextmenu", (e) => e.preventDefault());

const toScreen = ([x, y]) => [((x + HALF) / (2 * HALF)) * canvas.width, ((HALF - y) / (2 * HALF)) * canvas.height];
const toWorld = ({ x, y }) => [(x / canvas.width) * 2 * HALF - HALF, HALF - (y / canvas.height) * 2 * HALF];

function showStatus(extra) {
  status = { ...status, ...extra };
  statusEl.dataset.state = status.state;
  statusEl.dataset.json = JSON.stringify(status);
  statusEl.textContent = Object.entries(status).map(([k, v]) => `${k}: ${v}`).join("\n");
}

async function json(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

function arenaInput(moveX, moveY, aim, fire, railNow) {
  const out = [];
  postcard.i8(out, moveX); postcard.i8(out, moveY);
  postcard.varint(out, Math.round((((aim / (2 * Math.PI)) % 1) + 1) % 1 * 65536) % 65536);
  postcard.bool(out, fire); postcard.bool(out, railNow);
  return new Uint8Array(out);
}

function own(client, entities) {
  if (me === null) return null;
  const world = client.world ? client.world.world : 0;
  return entities.find((e) => e.kindName === "Avatar" && e.id % WORLD_SHIFT === me && Math.floor(e.id / WORLD_SHIFT) === world)
    || entities.find((e) => e.kindName === "Avatar" && e.id % WORLD_SHIFT === me) || null;
}

let wander = [0, 0], wanderUntil = 0;
function botInput(now, self, entities) {
  if (now > wanderUntil) { wander = [Math.round(Math.random() * 254 - 127), Math.round(Math.random() * 254 - 127)]; wanderUntil = now + 800 + Math.random() * 1200; }
  let aim = 0, target = null, best = Infinity;
  if (self) {
    const [sx, sy] = self.fields.position;
    for (const e of entities) {
      if (e.kindName !== "Avatar" || e === self || !e.fields.alive[0]) continue;
      const d = Math.hypot(e.fields.position[0] - sx, e.fields.position[1] - sy);
      if (d < best) { best = d; target = e; }
    }
    if (target) aim = Math.atan2(target.fields.position[1] - sy, target.fields.position[0] - sx);
    // Stay off the walls.
    if (Math.abs(sx) > HALF - 5) wander[0] = -Math.sign(sx) * 100;
    if (Math.abs(sy) > HALF - 5) wander[1] = -Math.sign(sy) * 100;
  }
  return arenaInput(wander[0], wander[1], aim, !!target && best < 25, !!target && Math.random() < 0.02);
}

function humanInput(self) {
  let mx = 0, my = 0;
  if (keys.has("a") || keys.has("arrowleft")) mx -= 127;
  if (keys.has("d") || keys.has("arrowright")) mx += 127;
  if (keys.has("w") || keys.has("arrowup")) my += 127;
  if (keys.has("s") || keys.has("arrowdown")) my -= 127;
  let aim = 0;
  if (self) { const [wx, wy] = toWorld(mouse); aim = Math.atan2(wy - self.fields.position[1], wx - self.fields.position[0]); }
  const r = rail; rail = false;
  return arenaInput(mx, my, aim, firing, r);
}

function draw(client, entities, self) {
  ctx.fillStyle = "#1b1f24";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.strokeStyle = "#2a3038";
  for (let g = -HALF; g <= HALF; g += 10) {
    const [x] = toScreen([g, 0]), [, y] = toScreen([0, g]);
    ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, canvas.height); ctx.stroke();
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(canvas.width, y); ctx.stroke();
  }
  for (const e of entities) {
    const [x, y] = toScreen(e.fields.position);
    if (e.kindName === "Beacon") { ctx.fillStyle = "#a7f"; ctx.fillRect(x - 4, y - 4, 8, 8); }
    else if (e.kindName === "Shot") { ctx.fillStyle = "#fd5"; ctx.beginPath(); ctx.arc(x, y, 2.5, 0, 7); ctx.fill(); }
    else if (e.kindName === "Avatar") {
      const alive = !!e.fields.alive[0];
      const mine = e === self;
      ctx.fillStyle = !alive ? "#555" : mine ? "#4df" : "#e55";
      ctx.beginPath(); ctx.arc(x, y, mine ? 9 : 7, 0, 7); ctx.fill();
      const a = e.fields.aim[0];
      ctx.strokeStyle = "#fff"; ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x + Math.cos(a) * 14, y - Math.sin(a) * 14); ctx.stroke();
      ctx.fillStyle = "#ccc"; ctx.font = "10px sans-serif"; ctx.fillText(`${e.id % WORLD_SHIFT} ${e.fields.health[0]}`, x + 10, y - 8);
    }
  }
  ctx.fillStyle = "#888"; ctx.font = "12px sans-serif";
  ctx.fillText(`${client.world ? client.world.kind + " " + client.world.world : "…"} · ${client.link.kind}`, 8, 16);
}

// The framework's scoreboard when the world keeps one; the arena's avatars carry their
// kills and deaths, so without one the board is read off the snapshot.
function drawBoard(client, entities) {
  const b = client.scoreboard;
  let columns = b.columns, rows = [...b.rows.values()];
  if (!columns.length) {
    columns = ["kills", "deaths"];
    rows = entities.filter((e) => e.kindName === "Avatar")
      .map((e) => ({ player: e.id % WORLD_SHIFT, name: `player ${e.id % WORLD_SHIFT}`, fields: [e.fields.score[0], e.fields.deaths[0]], pingMs: "" }));
  }
  document.querySelector("#board thead").innerHTML = `<tr><th>player</th>${columns.map((c) => `<th>${c}</th>`).join("")}<th>ms</th></tr>`;
  rows.sort((x, y) => (y.fields[0] || 0) - (x.fields[0] || 0));
  document.querySelector("#board tbody").innerHTML = rows.slice(0, 12)
    .map((r) => `<tr${r.player === me ? ' style="color:#4df"' : ""}><td>${r.name || r.player}</td>${r.fields.map((f) => `<td>${f}</td>`).join("")}<td>${r.pingMs}</td></tr>`)
    .join("");
}

async function main() {
  showStatus({ state: "fetching", bot, watch });
  const [web, schema] = await Promise.all([json("/web.json"), json("/schema.json")]);
  const tokenOf = async () => {
    const { token } = await json(`/token${watch ? "?watch=1" : ""}`);
    return new Uint8Array(token.match(/../g).map((x) => parseInt(x, 16)));
  };
  const token = await tokenOf();
  showStatus({ state: "connecting" });
  const client = await connect({
    token, schema,
    webtransport: `https://${location.hostname}:${web.webtransport_port}${web.webtransport_path}`,
    // Asked again before each reconnection: the server renews its certificate every week.
    hashes: async () => (await json("/web.json")).certificate_hashes,
    websocket: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${web.websocket_path}`,
    transport: params.get("transport") || undefined,
    onLink: (link) => showStatus({ transport: link.kind, state: "connected" }),
  });
  client.onMessage = (bytes) => {
    try {
      const r = new Postcard(bytes);
      const variant = r.varint();
      if (variant === 0) {
        const seq = r.varint(), killer = r.varint(), victim = r.varint();
        if (lastKillSeq >= 0 && seq !== lastKillSeq + 1) feedGaps++;
        lastKillSeq = seq; kills++;
        const li = document.createElement("li");
        li.textContent = `${killer} ✕ ${victim}`;
        feed.prepend(li);
        while (feed.children.length > 12) feed.lastChild.remove();
      } else if (variant === 1) {
        me = r.varint();
        lastKillSeq = -1; // a new arena numbers its kills afresh
      }
    } catch (_) { /* not the arena's */ }
  };
  window.volleyClient = client; // for the console and tests
  client.onEnded = (why) => showStatus({ state: "ended", ended: why });
  const tickMs = () => 1000 / (client.params ? client.params.tickRate : 60);
  let next = performance.now();
  const step = () => {
    const now = performance.now();
    const entities = client.entities(now);
    const self = own(client, entities);
    if (watch) client.sendWithoutInput(now);
    else { client.sendInput(now, bot ? botInput(now, self, entities) : humanInput(self)); if (client.ready) sentInputs++; }
    next += tickMs();
    setTimeout(step, Math.max(0, next - performance.now()));
  };
  step();
  const frame = () => {
    const now = performance.now();
    const entities = client.entities(now);
    const self = own(client, entities);
    draw(client, entities, self);
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  setInterval(() => {
    const entities = client.entities(performance.now());
    const self = own(client, entities);
    const others = entities.filter((e) => e.kindName === "Avatar" && e !== self).map((e) => e.id % WORLD_SHIFT);
    drawBoard(client, entities);
    // The status a test reads: "playing" once we have our avatar and the server applies our inputs.
    const playing = !client.ended && (watch ? client.stats.snapshots > 0 : self !== null && client.appliedInput !== null);
    showStatus({
      state: client.ended ? "ended" : playing ? (watch ? "watching" : "playing") : client.ready ? "joining" : "connecting",
      transport: client.link.kind,
      player: me,
      world: client.world ? `${client.world.kind} ${client.world.world}` : null,
      snapshots: client.stats.snapshots,
      decode_errors: client.stats.decodeErrors,
      rtt_ms: client.rttMs === null ? null : Math.round(client.rttMs * 10) / 10,
      inputs_sent: sentInputs,
      inputs_applied: client.appliedInput,
      others: others.slice(0, 64),
      kills_seen: kills,
      kill_feed_gaps: feedGaps,
      resumes: client.stats.resumes,
      position: self ? self.fields.position.map((v) => Math.round(v * 10) / 10) : null,
    });
  }, 250);
}

main().catch((e) => showStatus({ state: "failed", error: String(e && e.message ? e.message : e) }));
