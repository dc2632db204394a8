//! The global oracle of `volley run --zones N --oracle`: every zone publishes its whole state
//! each tick ([`StateFrame`]); every snapshot every bot decodes is checked against all of
//! them. A bot must be shown every entity within its view radius, whatever zone owns it,
//! none twice, and nothing no zone has.
//!
//! What "must" means, exactly (the arena's rules, which one server running the whole map
//! would follow too):
//! - the bot's own zone's entities at the snapshot's tick (the snapshot is made of that very
//!   state): each within [`VIEW_RADIUS`] of the bot's avatar, unless [`MAX_VISIBLE`] − 1 of
//!   the zone's entities stand nearer (the arena shows at most that many);
//! - a neighbour's entities: shown from the newest border frame the zone holds, a tick or a
//!   few old. The oracle takes the neighbour's states over the window [`WINDOW`] before the
//!   snapshot's wall-clock time: an entity that the neighbour held at both ends of it, and
//!   that stood within the view radius less the distance it can move in that time at both,
//!   must be shown. When the bus is slower than that (a loaded machine), the window reaches
//!   back to the oldest frame the zone says its views held ([`StateFrame::held`]); such
//!   snapshots are counted ([`OracleReport::late`]). A neighbour none of whose frames the zone
//!   held has nothing required of it.
//!
//! Zones stamp their states with the wall clock (they run on one machine here); their tick
//! numbers are their own.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glam::Vec2;
use volley::protocol::snapshot::world::split_id;
use volley::protocol::snapshot::{Schema, WorldSnapshot};
use volley::protocol::zone::{StateFrame, ZoneId, ZoneLayout, split_border_id};
use volley::server::zone::ZoneGame;
use volley_arena::bots::SnapshotWatch;
use volley_arena::{ArenaPositions, MAX_VISIBLE, SHOT_SPEED, SPEED, VIEW_RADIUS};
use volley_util::cpu::{cpu_since, thread_cpu_time};

/// How old a neighbour's entities in a snapshot may be: the border frame's trip over the bus
/// and its wait for the border world's next tick, with room for a loaded machine.
pub const WINDOW: Duration = Duration::from_millis(250);

/// How long an entity must have been within the bot's view, and the bot in place, before a
/// snapshot must show it: the budget spreads a burst of new entities (a respawn's new
/// surroundings, a crowd of shots) over a few packets.
pub const STEADY: Duration = Duration::from_millis(100);

/// A connection's first snapshots (half a second at 60 Hz), judged apart: a new connection's
/// whole view, well over one packet's budget, comes over several snapshots.
pub const SETTLE: u32 = 30;

/// How long a snapshot waits for the states it is checked against before it is counted as
/// not checked.
const PATIENCE: Duration = Duration::from_secs(2);

/// States kept per zone (fifteen seconds at 60 Hz: the states are taken as they come, the
/// snapshots checked against them may be [`QUEUE`] behind).
const KEEP: usize = 900;

/// Snapshots waiting for the checker, at most (about five seconds of 200 bots'; a checker
/// further behind counts the rest as not checked).
const QUEUE: usize = 1 << 16;

/// Snapshots the checker takes at a time, at most; with fewer waiting it checks them and
/// sleeps [`NAP`] (a few hundred snapshots come in that time).
const BATCH: usize = 1024;
const NAP: Duration = Duration::from_millis(10);

/// [`Tracks`] kept (the snapshots of a tick come interleaved with those of the ticks and
/// zones around it).
const CACHE: usize = 64;

/// What the oracle found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OracleReport {
    /// Snapshots checked.
    pub checked: u64,
    /// Entities the checked snapshots had to show, in all; of them, owned by another zone
    /// than the bot's.
    pub required: u64,
    /// See [`OracleReport::required`].
    pub required_across: u64,
    /// Required entities a snapshot did not show; of them, another zone's.
    pub missing: u64,
    /// See [`OracleReport::missing`].
    pub missing_across: u64,
    /// Entities a snapshot showed twice (one player shown by two zones, say).
    pub twice: u64,
    /// Entities a snapshot showed that no zone held (a ghost).
    pub unknown: u64,
    /// Of the entities the first [`SETTLE`] snapshots of each connection had to show (when
    /// the budget spreads the new connection's whole snapshot over several), those required
    /// and those missing (not in the figures above).
    pub settling_required: u64,
    /// See [`OracleReport::settling_required`].
    pub settling_missing: u64,
    /// Snapshots not checked: their states never came (a zone or the bus gone), or the
    /// checker was behind.
    pub unchecked: u64,
    /// Of the snapshots not checked, those the checker was too far behind to take, and those
    /// whose states did not come within [`PATIENCE`] (the rest: the bot's avatar had left).
    pub unchecked_behind: u64,
    /// See [`OracleReport::unchecked_behind`].
    pub unchecked_late: u64,
    /// Of the snapshots checked (past each connection's first [`SETTLE`]), those judged by a
    /// neighbour's frame older than [`WINDOW`], or by none while the neighbour had states: the
    /// bus (or the zone) was behind.
    pub late: u64,
    /// The checker thread's CPU time (taking the states in and checking).
    pub busy: Duration,
    /// A few of the faults, for a person.
    pub examples: Vec<String>,
}

impl OracleReport {
    /// One line for a person (and for the tests, which read the figures off it).
    pub fn line(&self) -> String {
        let mut s = format!(
            "oracle: {} snapshots checked against every zone's state: {} entities within view required ({} owned by another zone); {} missing ({} across a border), {} shown twice, {} unknown to every zone; {} not checked ({} with the checker behind, {} with states late); in each connection's first {SETTLE} snapshots (judged apart): {} of {} required missing",
            self.checked,
            self.required,
            self.required_across,
            self.missing,
            self.missing_across,
            self.twice,
            self.unknown,
            self.unchecked,
            self.unchecked_behind,
            self.unchecked_late,
            self.settling_missing,
            self.settling_required,
        );
        s.push_str(&format!(
            "; {} judged by a neighbour's frame over {} ms old; checking took {:.1} µs of CPU a snapshot",
            self.late,
            WINDOW.as_millis(),
            self.busy.as_secs_f64() * 1e6 / self.checked.max(1) as f64
        ));
        for e in &self.examples {
            s.push_str("\n  oracle: ");
            s.push_str(e);
        }
        s
    }
}

/// One entity of a zone's state.
#[derive(Debug, Clone, Copy)]
struct Ent {
    id: u32,
    kind: u16,
    pos: Vec2,
    /// The client id of the player it is (an avatar), if any.
    client: Option<u64>,
}

/// One zone's state at one tick, decoded.
#[derive(Debug)]
struct ZoneState {
    tick: u32,
    unix_micros: u64,
    /// The oldest and newest frame of each neighbour its views held ([`StateFrame::held`]).
    held: Vec<(ZoneId, u32, u32)>,
    /// Ascending by id.
    entities: Vec<Ent>,
    /// [`Checker::limit`]s from each of the entities (NaN: not yet needed).
    limits: RefCell<Vec<f32>>,
}

impl ZoneState {
    fn get(&self, id: u32) -> Option<&Ent> {
        self.index(id).map(|i| &self.entities[i])
    }

    /// Where entity `id` is among the entities.
    fn index(&self, id: u32) -> Option<usize> {
        self.entities.binary_search_by_key(&id, |e| e.id).ok()
    }
}

/// One snapshot a bot decoded, as the checker needs it.
#[derive(Debug)]
struct Seen {
    zone: ZoneId,
    tick: u32,
    /// Its place among the snapshots of the bot's connection to this zone (0: the first).
    nth: u32,
    me: u32,
    /// (world, local id as the zone shows it, kind): world 0 is the zone's own world (a
    /// zone server's entry world), any other its border world.
    entities: Vec<(u32, u32, u16)>,
}

/// The bots' side: hands each decoded snapshot to the checker thread.
#[derive(Debug)]
pub struct Watch {
    /// The first zone's game address (zone K listens at its port + K).
    base: SocketAddr,
    zones: u16,
    tx: SyncSender<Seen>,
    dropped: Arc<AtomicU64>,
    /// Each bot's zone and snapshots shown from it so far.
    connections: Mutex<HashMap<usize, (ZoneId, u32)>>,
}

impl SnapshotWatch for Watch {
    fn snapshot(&self, bot: usize, server: SocketAddr, me: u32, snapshot: &WorldSnapshot) {
        let zone = server.port().wrapping_sub(self.base.port());
        if zone >= self.zones {
            return;
        }
        let nth = {
            let Ok(mut c) = self.connections.lock() else { return };
            let e = c.entry(bot).or_insert((zone, 0));
            if e.0 != zone {
                *e = (zone, 0);
            }
            e.1 += 1;
            e.1 - 1
        };
        let entities = snapshot
            .iter()
            .map(|e| {
                let (world, local) = split_id(e.id);
                (world, local, e.kind)
            })
            .collect();
        let seen = Seen { zone, tick: snapshot.tick(), nth, me, entities };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(seen) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The oracle: a checker thread, and what feeds it.
#[derive(Debug)]
pub struct Oracle {
    tx: SyncSender<Seen>,
    /// Zones' states: never dropped (a few hundred a second), unlike snapshots.
    states: Sender<bytes::Bytes>,
    dropped: Arc<AtomicU64>,
    checker: std::thread::JoinHandle<OracleReport>,
    base: SocketAddr,
    zones: u16,
}

impl Oracle {
    /// Starts the checker for the zones of `layout`, zone K at `base`'s port + K.
    pub fn start(layout: ZoneLayout, base: SocketAddr) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let (states, states_rx) = std::sync::mpsc::channel();
        let zones = layout.len() as u16;
        let checker = std::thread::Builder::new()
            .name("oracle".into())
            .spawn(move || Checker::new(layout).run(rx, states_rx))
            .unwrap_or_else(|e| panic!("the oracle's thread: {e}"));
        Self { tx, states, dropped: Arc::default(), checker, base, zones }
    }

    /// The watch to give a swarm.
    pub fn watch(&self) -> Arc<Watch> {
        Arc::new(Watch {
            base: self.base,
            zones: self.zones,
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
            connections: Mutex::default(),
        })
    }

    /// Where a zone's published state goes.
    pub fn states(&self) -> impl Fn(bytes::Bytes) + Send + 'static {
        let tx = self.states.clone();
        move |b| {
            let _ = tx.send(b);
        }
    }

    /// Checks what is still waiting and returns what was found (once every watch and state
    /// feed is dropped).
    pub fn finish(self) -> OracleReport {
        let Self { tx, states, dropped, checker, .. } = self;
        drop((tx, states));
        let mut report = checker.join().unwrap_or_default();
        let behind = dropped.load(Ordering::Relaxed);
        report.unchecked += behind;
        report.unchecked_behind += behind;
        report
    }
}

struct Checker {
    layout: ZoneLayout,
    schema: Arc<Schema>,
    /// The arena's avatars' kind.
    avatar: Option<u16>,
    states: Vec<VecDeque<Rc<ZoneState>>>,
    waiting: VecDeque<(Seen, Instant)>,
    report: OracleReport,
    /// Room for the distances `check` ranks.
    scratch: Vec<f32>,
    /// The newest [`Tracks`], by zone and tick.
    cache: VecDeque<((ZoneId, u32), Rc<Tracks>)>,
    /// What the snapshot being checked shows (see [`Checker::check`]), and its serial.
    marks: Vec<u64>,
    serial: u64,
}

impl Checker {
    fn new(layout: ZoneLayout) -> Self {
        let states = (0..layout.len()).map(|_| VecDeque::new()).collect();
        let schema = volley_arena::schema();
        let avatar = schema.kind_of::<volley_arena::Avatar>();
        Self {
            layout,
            schema: Arc::new(schema),
            avatar,
            states,
            waiting: VecDeque::new(),
            report: OracleReport::default(),
            scratch: Vec::new(),
            cache: VecDeque::new(),
            marks: Vec::new(),
            serial: 0,
        }
    }

    fn run(mut self, rx: Receiver<Seen>, states: Receiver<bytes::Bytes>) -> OracleReport {
        let began = thread_cpu_time();
        loop {
            while let Ok(b) = states.try_recv() {
                self.take_state(&b);
            }
            // What has come, a batch at a time: the states it needs were taken first. Woken
            // for each snapshot, the thread spent a quarter of its time in the channel's spin
            // and the scheduler.
            let mut took = 0;
            let done = loop {
                match rx.try_recv() {
                    Ok(s) => self.waiting.push_back((s, Instant::now())),
                    Err(TryRecvError::Empty) => break false,
                    Err(TryRecvError::Disconnected) => break true,
                }
                took += 1;
                if took == BATCH {
                    break false;
                }
            };
            if done {
                break;
            }
            self.check_ready(false);
            if took < BATCH {
                std::thread::sleep(NAP);
            }
        }
        while let Ok(b) = states.try_recv() {
            self.take_state(&b);
        }
        self.check_ready(true);
        self.report.busy = cpu_since(began);
        self.report
    }

    fn take_state(&mut self, bytes: &[u8]) {
        let Ok(f) = StateFrame::decode(bytes, &self.schema) else { return };
        let game = ArenaPositions;
        let mut players = f.players;
        players.sort_unstable();
        let client = |id: u32| players.binary_search_by_key(&id, |p| p.0).ok().map(|i| players[i].1);
        let entities: Vec<Ent> = f
            .frame
            .snapshot
            .iter()
            .filter_map(|e| game.position(e).map(|pos| Ent { id: e.id, kind: e.kind, pos, client: client(e.id) }))
            .collect();
        let limits = RefCell::new(vec![f32::NAN; entities.len()]);
        let state = ZoneState { tick: f.frame.tick, unix_micros: f.unix_micros, held: f.held, entities, limits };
        let Some(list) = self.states.get_mut(usize::from(f.frame.zone)) else { return };
        if list.back().is_some_and(|b| b.tick >= state.tick) {
            return;
        }
        list.push_back(Rc::new(state));
        if list.len() > KEEP {
            list.pop_front();
        }
    }

    /// Checks the waiting snapshots whose states are all in (in order; at the end, all).
    fn check_ready(&mut self, all: bool) {
        while let Some((seen, at)) = self.waiting.front() {
            let ready = self.ready(seen);
            if ready.is_none() && !all && at.elapsed() < PATIENCE {
                // Later snapshots wait on this one's states too (they are newer).
                break;
            }
            let Some((seen, _)) = self.waiting.pop_front() else { break };
            match ready {
                Some(own) => self.check(&seen, &own),
                None => {
                    self.report.unchecked += 1;
                    self.report.unchecked_late += 1;
                }
            }
        }
    }

    /// The own zone's state for `seen`, when it and every neighbour's states up to its time
    /// are in.
    fn ready(&self, seen: &Seen) -> Option<Rc<ZoneState>> {
        let list = self.states.get(usize::from(seen.zone))?;
        let i = list.binary_search_by_key(&seen.tick, |s| s.tick).ok()?;
        let own = list[i].clone();
        let done = self.layout.neighbours(seen.zone).iter().all(|n| {
            self.states.get(usize::from(*n)).and_then(|l| l.back()).is_some_and(|b| b.unix_micros >= own.unix_micros)
        });
        done.then_some(own)
    }

    /// The newest state of `zone` at or before `unix_micros` that holds entity `id`, looking
    /// back to `from` at most (a frame may be late, the entity gone since).
    fn held(&self, zone: ZoneId, id: u32, from: u64, unix_micros: u64) -> Option<Rc<ZoneState>> {
        let list = self.states.get(usize::from(zone))?;
        let n = list.partition_point(|s| s.unix_micros <= unix_micros);
        list.range(..n).rev().take_while(|s| s.unix_micros >= from).find(|s| s.get(id).is_some()).cloned()
    }

    /// Which of `zone`'s states around `unix_micros` held `client`'s avatar, and as which
    /// id (for a person reading a fault): `tick@ms from then:id`, `-` for none.
    fn presence(&self, zone: ZoneId, client: u64, unix_micros: u64) -> String {
        let list = &self.states[usize::from(zone)];
        let at = list.partition_point(|s| s.unix_micros <= unix_micros);
        let around = list.range(at.saturating_sub(6)..(at + 3).min(list.len()));
        around
            .map(|s| {
                let id =
                    s.entities.iter().find(|e| e.client == Some(client)).map_or("-".to_string(), |e| e.id.to_string());
                format!("{}@{:+.0}:{id}", s.tick, (s.unix_micros as f64 - unix_micros as f64) / 1e3)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn fault(&mut self, what: String) {
        if self.report.examples.len() < 8 {
            self.report.examples.push(what);
        }
    }

    fn check(&mut self, seen: &Seen, own: &Rc<ZoneState>) {
        let Some(me) = own.get(seen.me).map(|e| e.pos) else {
            // No avatar (it has left): nothing to judge by.
            self.report.unchecked += 1;
            return;
        };
        self.report.checked += 1;
        let tracks = self.tracks(seen.zone, own);
        self.report.late += u64::from(tracks.late && seen.nth >= SETTLE);
        // What the snapshot shows: each entity of the own state and of each neighbour's newest
        // state by then is marked by its place there (`marks`, stamped with this snapshot's
        // serial: a mark already stamped is an entity shown twice); the rest (held only by an
        // older state, or by none), by (owning zone, id there). Each player shown: (client id,
        // as which zone's entity, held in that zone's state of which tick).
        self.serial += 1;
        let serial = self.serial;
        let mut marks = std::mem::take(&mut self.marks);
        if marks.len() < tracks.marks {
            marks.resize(tracks.marks, 0);
        }
        let mut rest: Vec<(ZoneId, u32)> = Vec::new();
        let mut who: Vec<(u64, ZoneId, u32, u32)> = Vec::new();
        for &(world, local, kind) in &seen.entities {
            // The owning zone, the id there, and the group of marks (0: the own zone's, 1 + k
            // the k-th neighbour's).
            let (zone, id, group) = if world == 0 {
                (seen.zone, local, 0)
            } else {
                let (slot, id) = split_border_id(local);
                match tracks.across.get(slot) {
                    Some(a) => (a.zone, id, slot + 1),
                    None => {
                        self.report.unknown += 1;
                        self.fault(format!(
                            "zone {} tick {}: border id {local:#x} names no neighbour",
                            seen.zone, seen.tick
                        ));
                        continue;
                    }
                }
            };
            // Held by its zone: the own one at this very tick, a neighbour by its newest state
            // by then or, a frame late and the entity gone since, one within a second before.
            let newest = if group == 0 { Some(own) } else { tracks.across[group - 1].last.as_ref() };
            let found = newest.and_then(|s| s.index(id).map(|i| (s, i)));
            let held = match found {
                Some((s, i)) => {
                    let mark = &mut marks[tracks.offsets[group] + i];
                    if *mark == serial {
                        self.report.twice += 1;
                        self.fault(format!(
                            "zone {} tick {}: zone {zone}'s entity {id} shown twice",
                            seen.zone, seen.tick
                        ));
                    }
                    *mark = serial;
                    Some((s.tick, s.entities[i].client))
                }
                None => {
                    rest.push((zone, id));
                    let older = if group == 0 {
                        None
                    } else {
                        self.held(zone, id, tracks.across[group - 1].since, own.unix_micros)
                    };
                    older.and_then(|s| s.get(id).map(|e| (s.tick, e.client)))
                }
            };
            match held {
                None => {
                    self.report.unknown += 1;
                    self.fault(format!(
                        "zone {} tick {}: zone {zone}'s entity {id} is held by no zone",
                        seen.zone, seen.tick
                    ));
                }
                Some((tick, Some(client))) if Some(kind) == self.avatar => who.push((client, zone, id, tick)),
                Some(_) => {}
            }
        }
        rest.sort_unstable();
        for pair in rest.windows(2).filter(|p| p[0] == p[1]) {
            let (zone, id) = pair[0];
            self.report.twice += 1;
            self.fault(format!("zone {} tick {}: zone {zone}'s entity {id} shown twice", seen.zone, seen.tick));
        }
        // One player shown by two zones (its old and its new).
        who.sort_unstable();
        for pair in who.windows(2).filter(|p| p[0].0 == p[1].0) {
            let ((client, z0, id0, t0), (_, z1, id1, t1)) = (pair[0], pair[1]);
            self.report.twice += 1;
            if self.report.examples.len() < 8 {
                let what = format!(
                    "zone {} tick {}: client {client}'s avatar shown twice: as zone {z0}'s {id0} (its tick {t0}; {}) and zone {z1}'s {id1} (its tick {t1}; {})",
                    seen.zone,
                    seen.tick,
                    self.presence(z0, client, own.unix_micros),
                    self.presence(z1, client, own.unix_micros),
                );
                self.fault(what);
            }
        }
        let is_shown = |group: usize, t: &Track| marks[tracks.offsets[group] + t.index] == serial;
        let settling = seen.nth < SETTLE;
        let r2 = VIEW_RADIUS * VIEW_RADIUS;
        // Where the bot stood over the recent states and at the next tick (the border's
        // relevancy finds the bot in the zone's newest state, which may be a tick ahead; a
        // respawn jumps).
        let next = {
            let list = &self.states[usize::from(seen.zone)];
            list.get(list.partition_point(|s| s.tick <= seen.tick)).and_then(|s| s.get(seen.me)).map(|e| e.pos)
        };
        let viewers =
            Viewers::new(tracks.recent.iter().filter_map(|s| s.get(seen.me).map(|e| e.pos)).chain(next).collect());
        // Required: the own zone's within the radius, but for the arena's limit (in each recent
        // state: one that dropped out of the nearest MAX_VISIBLE comes back as new): in each
        // recent state the bot is in, an entity nearer than the limit is among the nearest.
        let ranks: Vec<(usize, Vec2, f32)> = tracks
            .recent
            .iter()
            .enumerate()
            .filter_map(|(j, s)| {
                let i = s.index(seen.me)?;
                let (v, limit) = (s.entities[i].pos, self.limit(s, i));
                // Beyond the radius: every entity the loop below judges is nearer.
                (limit <= r2).then_some((j, v, limit))
            })
            .collect();
        let near = |t: &Track| ranks.iter().all(|&(j, v, limit)| t.at[j].distance_squared(v) < limit);
        for t in &tracks.own {
            let e = t.ent;
            let d = e.pos.distance_squared(me);
            if e.id == seen.me || d > r2 || !t.within(&viewers, VIEW_RADIUS) || !near(t) {
                continue;
            }
            let shown = is_shown(0, t);
            if settling {
                self.report.settling_required += 1;
                self.report.settling_missing += u64::from(!shown);
                continue;
            }
            self.report.required += 1;
            if !shown {
                self.report.missing += 1;
                self.fault(format!(
                    "zone {} tick {} (snapshot {} of the connection): its own entity {} (kind {}) {:.1} m from player {} not shown",
                    seen.zone,
                    seen.tick,
                    seen.nth,
                    e.id,
                    e.kind,
                    d.sqrt(),
                    seen.me
                ));
            }
        }
        // Required: each neighbour's held over the window, within reach all along.
        let secs = WINDOW.as_secs_f32();
        for (k, across) in tracks.across.iter().enumerate() {
            if !across.reaches(&viewers) {
                continue;
            }
            for t in &across.tracks {
                let e = t.ent;
                let slack = secs * if Some(e.kind) == self.avatar { SPEED } else { SHOT_SPEED } + 0.25;
                let reach = (VIEW_RADIUS - slack).max(0.0);
                if !t.within(&viewers, reach) {
                    continue;
                }
                let shown = is_shown(k + 1, t);
                if settling {
                    self.report.settling_required += 1;
                    self.report.settling_missing += u64::from(!shown);
                    continue;
                }
                self.report.required += 1;
                self.report.required_across += 1;
                if !shown {
                    self.report.missing += 1;
                    self.report.missing_across += 1;
                    self.fault(format!(
                        "zone {} tick {} (snapshot {} of the connection): zone {}'s entity {} (kind {}) {:.1} m from player {} not shown",
                        seen.zone,
                        seen.tick,
                        seen.nth,
                        across.zone,
                        e.id,
                        e.kind,
                        e.pos.distance(me),
                        seen.me
                    ));
                }
            }
        }
        self.marks = marks;
    }

    /// The [`MAX_VISIBLE`]-th smallest squared distance from the `me`-th entity of `state`
    /// of the others (infinite when there are fewer): an entity nearer than that is among the
    /// nearest the arena shows. Kept in the state for the next snapshots whose recent states
    /// hold it too.
    fn limit(&mut self, state: &ZoneState, me: usize) -> f32 {
        let Ok(mut limits) = state.limits.try_borrow_mut() else { return f32::INFINITY };
        let Some(limit) = limits.get_mut(me) else { return f32::INFINITY };
        if limit.is_nan() {
            let v = state.entities[me].pos;
            let d2 = &mut self.scratch;
            d2.clear();
            d2.extend(
                state.entities.iter().enumerate().filter(|(i, _)| *i != me).map(|(_, e)| e.pos.distance_squared(v)),
            );
            *limit = match MAX_VISIBLE.checked_sub(1) {
                Some(k) if k < d2.len() => *d2.select_nth_unstable_by(k, f32::total_cmp).1,
                _ => f32::INFINITY,
            };
        }
        *limit
    }

    /// What every snapshot of `zone`'s state `own` is checked against (made once, for the
    /// first of them): the zone's states over the last [`STEADY`] to `own`, and the
    /// entities held all along in them; each neighbour's newest state by `own`'s time, and
    /// its entities held all along over the [`WINDOW`] before.
    fn tracks(&mut self, zone: ZoneId, own: &Rc<ZoneState>) -> Rc<Tracks> {
        if let Some((_, t)) = self.cache.iter().rev().find(|(k, _)| *k == (zone, own.tick)) {
            return t.clone();
        }
        let list = &self.states[usize::from(zone)];
        let i = list.partition_point(|s| s.tick < own.tick);
        let since = own.unix_micros.saturating_sub(STEADY.as_micros() as u64);
        let first = list.range(..i).rev().take_while(|s| s.unix_micros >= since).count();
        let recent: Vec<Rc<ZoneState>> = list.range(i - first..=i).cloned().collect();
        let window_start = own.unix_micros.saturating_sub(WINDOW.as_micros() as u64);
        let a_second_before = own.unix_micros.saturating_sub(1_000_000);
        let mut offsets = vec![0, own.entities.len()];
        let mut late = false;
        let across: Vec<Across> = self
            .layout
            .neighbours(zone)
            .iter()
            .map(|&n| {
                let list = &self.states[usize::from(n)];
                let (from, mut to) = (
                    list.partition_point(|s| s.unix_micros <= window_start),
                    list.partition_point(|s| s.unix_micros <= own.unix_micros),
                );
                // The oldest and newest frames of the neighbour the zone's views may hold: the
                // window starts at the oldest when that is older than the window (the bus
                // behind), and ends at the newest when that came after the snapshot's time (a
                // zone catching up runs several ticks in a moment); none held, nothing
                // required.
                let find = |tick: u32| list.binary_search_by_key(&tick, |s| s.tick).ok();
                let held = own.held.iter().find(|(z, _, _)| *z == n).and_then(|&(_, oldest, newest)| {
                    let i = find(oldest).filter(|&i| list[i].unix_micros <= own.unix_micros)?;
                    if let Some(j) = find(newest) {
                        to = to.max(j + 1);
                    }
                    Some(i)
                });
                // The newest: none when the neighbour has been quiet a second, unless the zone
                // says its views still held a frame of it (a frame late on the bus fades a
                // while after it came, not after it was made).
                let last = to
                    .checked_sub(1)
                    .map(|t| list[t].clone())
                    .filter(|s| held.is_some() || s.unix_micros >= a_second_before);
                // How far back an entity gone since may have been held: a second, or the
                // oldest frame held when that is older.
                let since = held.map_or(a_second_before, |h| list[h].unix_micros.min(a_second_before));
                let first = match (from.checked_sub(1), held) {
                    (Some(f), Some(h)) if h < f => {
                        late = true;
                        Some(h)
                    }
                    (Some(f), Some(_)) => Some(f),
                    (_, None) => {
                        late |= from < to;
                        None
                    }
                    // The neighbour's states begin inside the window (the run's start).
                    (None, Some(_)) => None,
                };
                // The window's states: the newest at its start, to the newest at its end.
                // Its newest, `last`, is the state the tracks' places (`Track::index`) are in:
                // none when the neighbour has been quiet a second (its entities have faded).
                let tracks = match (first, &last) {
                    (Some(first), Some(_)) => Track::all(&list.range(first..to).cloned().collect::<Vec<_>>()),
                    _ => Vec::new(),
                };
                let marks = last.as_ref().map_or(0, |s| s.entities.len());
                offsets.push(offsets[offsets.len() - 1] + marks);
                Across::new(n, last, tracks, since)
            })
            .collect();
        let marks = offsets.pop().unwrap_or(0);
        let tracks = Rc::new(Tracks { own: Track::all(&recent), recent, across, offsets, marks, late });
        if self.cache.len() >= CACHE {
            self.cache.pop_front();
        }
        self.cache.push_back(((zone, own.tick), tracks.clone()));
        tracks
    }
}

/// See [`Checker::tracks`].
struct Tracks {
    /// The zone's states over the last [`STEADY`], to the snapshot's.
    recent: Vec<Rc<ZoneState>>,
    /// The entities held all along in `recent`.
    own: Vec<Track>,
    /// Each neighbour's, in the order of the zone's neighbours (a border id's slot).
    across: Vec<Across>,
    /// Where each group of marks begins (0: the own state's entities; 1 + k: the k-th
    /// neighbour's newest state's), and how many there are in all.
    offsets: Vec<usize>,
    marks: usize,
    /// A neighbour's frame the zone held was older than [`WINDOW`] (or none was held while
    /// the neighbour had states in it).
    late: bool,
}

/// A neighbour's entities for the snapshots of one state.
struct Across {
    zone: ZoneId,
    /// Its newest state by the snapshot's time (none within a second before, unless the zone
    /// held one of its frames).
    last: Option<Rc<ZoneState>>,
    /// The wall-clock time back to which an entity of it may have been held (a second before
    /// the snapshot, or the oldest frame the zone held when older).
    since: u64,
    /// Its entities held all along over the window (the newest of whose states is `last`).
    tracks: Vec<Track>,
    /// A box around every place of `tracks` (empty: min above max).
    min: Vec2,
    max: Vec2,
}

impl Across {
    fn new(zone: ZoneId, last: Option<Rc<ZoneState>>, tracks: Vec<Track>, since: u64) -> Self {
        let (min, max) = tracks.iter().fold((Vec2::INFINITY, Vec2::NEG_INFINITY), |(min, max), t| {
            (min.min(t.center - t.spread), max.max(t.center + t.spread))
        });
        Self { zone, last, since, tracks, min, max }
    }

    /// Whether any of its tracks may stand within the view radius of a viewer (when not, none
    /// is judged).
    fn reaches(&self, viewers: &Viewers) -> bool {
        if self.tracks.is_empty() {
            return false;
        }
        let nearest = viewers.center.clamp(self.min, self.max);
        viewers.at.is_empty() || nearest.distance(viewers.center) - viewers.spread <= VIEW_RADIUS + 1e-3
    }
}

/// An entity held all along over some states (by the same player, for an avatar).
struct Track {
    /// As the newest of the states holds it.
    ent: Ent,
    /// Its place among the newest state's entities.
    index: usize,
    /// Where it stood in each state, in order.
    at: Vec<Vec2>,
    /// The middle of those places, and how far the farthest is from it.
    center: Vec2,
    spread: f32,
}

impl Track {
    /// The entities of the newest of `states` that every one of them holds, with the same
    /// player. (Each state's entities ascend by id: one cursor a state walks them once.)
    fn all(states: &[Rc<ZoneState>]) -> Vec<Track> {
        let Some(last) = states.last() else { return Vec::new() };
        let mut cursors = vec![0usize; states.len()];
        last.entities
            .iter()
            .enumerate()
            .filter_map(|(index, e)| {
                let mut at = Vec::with_capacity(states.len());
                for (s, c) in states.iter().zip(cursors.iter_mut()) {
                    let rest = &s.entities[*c..];
                    *c += rest.partition_point(|x| x.id < e.id);
                    let x = s.entities.get(*c).filter(|x| x.id == e.id && x.client == e.client)?;
                    at.push(x.pos);
                }
                let (center, spread) = circle(&at);
                Some(Track { ent: *e, index, at, center, spread })
            })
            .collect()
    }

    /// Whether every place it stood is within `reach` of every one of the viewers. (Most are
    /// told by the circles around its places and around the viewers; the rest, place by
    /// place.)
    fn within(&self, viewers: &Viewers, reach: f32) -> bool {
        const EPSILON: f32 = 1e-3;
        if viewers.at.is_empty() {
            return true;
        }
        let d = viewers.center.distance(self.center);
        if d + viewers.spread + self.spread <= reach - EPSILON {
            return true;
        }
        if d - viewers.spread - self.spread > reach + EPSILON {
            return false;
        }
        let r2 = reach * reach;
        viewers.at.iter().all(|v| {
            let d = v.distance(self.center);
            if d + self.spread <= reach - EPSILON {
                true
            } else if d - self.spread > reach + EPSILON {
                false
            } else {
                self.at.iter().all(|p| v.distance_squared(*p) <= r2)
            }
        })
    }
}

/// Where a bot stood over the states a snapshot is judged by: the places, their middle and
/// how far the farthest is from it.
struct Viewers {
    at: Vec<Vec2>,
    center: Vec2,
    spread: f32,
}

impl Viewers {
    fn new(at: Vec<Vec2>) -> Self {
        let (center, spread) = circle(&at);
        Self { at, center, spread }
    }
}

/// The middle of `points` and the distance of the farthest from it (a circle holding them
/// all); the origin and 0 for none.
fn circle(points: &[Vec2]) -> (Vec2, f32) {
    if points.is_empty() {
        return (Vec2::ZERO, 0.0);
    }
    let center = points.iter().copied().sum::<Vec2>() / points.len() as f32;
    (center, points.iter().map(|p| p.distance(center)).fold(0.0, f32::max))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use volley::protocol::snapshot::SnapshotBuilder;
    use volley::protocol::snapshot::world::merged_id;
    use volley::protocol::zone::border_id;
    use volley_arena::Avatar;

    fn avatar(x: f32, y: f32) -> Avatar {
        Avatar { position: Vec2::new(x, y), aim: 0.0, health: 100, score: 0, deaths: 0, alive: true }
    }

    fn state(
        schema: &Arc<Schema>,
        zone: ZoneId,
        tick: u32,
        unix: u64,
        avatars: &[(u32, f32, f32)],
        twin: bool,
        held: &[(ZoneId, u32, u32)],
    ) -> bytes::Bytes {
        let mut b = SnapshotBuilder::new(schema, tick);
        for &(id, x, y) in avatars {
            b.insert(id, &avatar(x, y)).unwrap();
        }
        let s = Arc::new(b.finish().unwrap());
        // Client ids: 1000 × zone + id; with `twin`, zone 0's player 2 is zone 1's 3 too.
        let client = |id: u32| if twin && zone == 0 && id == 2 { 1003 } else { u64::from(zone) * 1000 + u64::from(id) };
        let players: Vec<(u32, u64)> = avatars.iter().map(|a| (a.0, client(a.0))).collect();
        StateFrame::encode(zone, unix, &players, held, &s, schema).unwrap().into()
    }

    /// Two zones side by side (x < 0: zone 0, x >= 0: zone 1); a bot of zone 0 at (-5, 0),
    /// shown `shown` (world, id): world 0 the zone's own, world 1 its border world.
    fn run(shown: &[(u32, u32)]) -> OracleReport {
        run_with(shown, false)
    }

    fn run_with(shown: &[(u32, u32)], twin: bool) -> OracleReport {
        run_late(shown, twin, 1)
    }

    /// [`run_with`] with zone 0's views holding zone 1's frame `behind` ticks old; zone 1's
    /// player 3 there from its 20th tick on.
    fn run_late(shown: &[(u32, u32)], twin: bool, behind: u32) -> OracleReport {
        let layout = crate::zones::layout(2).unwrap();
        let schema = Arc::new(volley_arena::schema());
        let oracle = Oracle::start(layout, "127.0.0.1:1000".parse().unwrap());
        let feed = oracle.states();
        for k in 0..60u32 {
            let t = 1_000_000 + u64::from(k) * 16_667;
            // Zone 0: the bot (1) and another player (2) 10 m off; zone 1: a player (3) 10 m
            // across the border from the bot, and one (4) far beyond the view radius.
            let held = if k >= behind { vec![(1, 500 + k - behind, 500 + k - behind)] } else { Vec::new() };
            feed(state(&schema, 0, 100 + k, t, &[(1, -5.0, 0.0), (2, -5.0, 10.0)], twin, &held));
            let far = (4, 45.0, 40.0);
            let zone1: &[(u32, f32, f32)] = if k >= 20 || behind == 1 { &[(3, 5.0, 0.0), far] } else { &[far] };
            feed(state(&schema, 1, 500 + k, t - 10, zone1, twin, &[(0, 100 + k.max(1) - 1, 100 + k.max(1) - 1)]));
        }
        // The bot's snapshots of ticks 100 to 139: the first SETTLE judged apart.
        drop(feed);
        watch_from(oracle, &schema, 100, shown)
    }

    /// The bot (zone 0's player 1, client 1) decodes SETTLE + 10 snapshots from tick `first`
    /// on, each showing `shown` (world, id); the oracle's report on them.
    fn watch_from(oracle: Oracle, schema: &Arc<Schema>, first: u32, shown: &[(u32, u32)]) -> OracleReport {
        let w = oracle.watch();
        for tick in first..first + SETTLE + 10 {
            let mut b = SnapshotBuilder::new(schema, tick);
            for &(world, id) in shown {
                b.insert(merged_id(world, id), &avatar(0.0, 0.0)).unwrap();
            }
            w.snapshot(0, "127.0.0.1:1000".parse().unwrap(), 1, &b.finish().unwrap());
        }
        drop(w);
        oracle.finish()
    }

    /// The circles' shortcut answers as place-by-place would, but where a distance is within
    /// a hair of the reach.
    #[test]
    fn within_agrees_with_every_pair_of_places() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |scale: f32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * scale
        };
        let (mut agreed, mut close) = (0, 0);
        for _ in 0..20_000 {
            let around = |c: Vec2, spread: f32, n: usize, next: &mut dyn FnMut(f32) -> f32| -> Vec<Vec2> {
                (0..n).map(|_| c + Vec2::new(next(2.0 * spread) - spread, next(2.0 * spread) - spread)).collect()
            };
            let (tc, vc) = (Vec2::new(next(100.0), next(100.0)), Vec2::new(next(100.0), next(100.0)));
            let (ts, vs) = (next(4.0), next(2.0));
            let (tn, vn) = (1 + next(15.0) as usize, next(9.0) as usize);
            let at = around(tc, ts, tn, &mut next);
            let (center, spread) = circle(&at);
            let track =
                Track { ent: Ent { id: 1, kind: 0, pos: at[tn - 1], client: None }, index: 0, at, center, spread };
            let viewers = Viewers::new(around(vc, vs, vn, &mut next));
            let reach = next(60.0);
            let pairs: Vec<f32> =
                viewers.at.iter().flat_map(|v| track.at.iter().map(move |p| v.distance(*p))).collect();
            if pairs.iter().any(|d| (d - reach).abs() < 2e-3) {
                close += 1;
                continue;
            }
            let every = pairs.iter().all(|d| *d <= reach);
            assert_eq!(track.within(&viewers, reach), every, "{:?} {:?} reach {reach}", track.at, viewers.at);
            agreed += 1;
        }
        assert!(agreed > 19_000, "{agreed} agreed, {close} too close to judge");
    }

    #[test]
    fn a_snapshot_must_show_what_every_zone_holds_within_view_once() {
        // Zone 1 is zone 0's first neighbour: its entity 3 is 3 in the border world too.
        let (across, own) = ((1, border_id(0, 3)), [(0, 1), (0, 2)]);
        let good = run(&[own[0], own[1], across]);
        // Ten snapshots judged, each with two entities to show, one across the border.
        assert_eq!((good.checked, good.required, good.required_across), (40, 20, 10), "{}", good.line());
        assert_eq!((good.missing, good.twice, good.unknown, good.unchecked), (0, 0, 0, 0), "{}", good.line());
        assert_eq!(good.settling_missing, 0, "{}", good.line());
        let blind = run(&own);
        assert_eq!((blind.missing, blind.missing_across), (10, 10), "{}", blind.line());
        let ghost = run(&[own[0], own[1], across, (1, border_id(0, 9))]);
        assert_eq!((ghost.unknown, ghost.missing), (40, 0), "{}", ghost.line());
        let stranger = run(&[own[0], own[1], across, (1, border_id(3, 3))]);
        assert_eq!(stranger.unknown, 40, "{}", stranger.line());
        let own_missing = run(&[own[0], across]);
        assert_eq!((own_missing.missing, own_missing.missing_across), (10, 0), "{}", own_missing.line());
        // Zone 1's player 3 shown from the border world and as the zone's own 3: zone 0 has
        // no 3.
        let twice = run(&[own[0], own[1], across, (0, 3)]);
        assert_eq!((twice.unknown, twice.missing), (40, 0), "{}", twice.line());
        // One player in both zones (a handoff's two sides), shown by both: twice in every
        // snapshot.
        let both = run_with(&[own[0], own[1], across], true);
        assert_eq!((both.twice, both.unknown, both.missing), (40, 0, 0), "{}", both.line());
        assert!(both.examples[0].contains("client 1003's avatar shown twice"), "{}", both.line());
        assert_eq!(good.late, 0, "{}", good.line());
    }

    /// A bus half a second behind: zone 0's views hold zone 1's frames of 30 ticks before,
    /// which lack zone 1's player 3 until the snapshots judged last. A snapshot is judged by
    /// what its zone held, and counted late.
    #[test]
    fn a_late_bus_is_judged_by_the_frames_the_zone_held_and_counted() {
        let own = [(0, 1), (0, 2)];
        let blind = run_late(&own, false, 30);
        assert_eq!((blind.missing, blind.late), (0, 10), "{}", blind.line());
        assert!(blind.line().contains("10 judged by a neighbour's frame over 250 ms old"), "{}", blind.line());
        // Ten ticks behind, within the window: judged over the window as ever. Zone 1 held 3
        // all along the window of the last five snapshots, and the frames held had it.
        let near = run_late(&own, false, 10);
        assert_eq!((near.missing_across, near.late), (5, 0), "{}", near.line());
    }

    /// A bus stalled over a second: zone 0's views still hold zone 1's frame of its first
    /// tick (the zone fades a frame a while after it came, not after it was made), which alone
    /// had player 3. Shown from that frame, 3 is held, not unknown; a ghost still is.
    #[test]
    fn a_frame_held_past_a_second_is_judged_by_what_it_held() {
        let run = |shown: &[(u32, u32)]| {
            let layout = crate::zones::layout(2).unwrap();
            let schema = Arc::new(volley_arena::schema());
            let oracle = Oracle::start(layout, "127.0.0.1:1000".parse().unwrap());
            let feed = oracle.states();
            for k in 0..130u32 {
                let t = 1_000_000 + u64::from(k) * 16_667;
                feed(state(&schema, 0, 100 + k, t, &[(1, -5.0, 0.0), (2, -5.0, 10.0)], false, &[(1, 500, 500)]));
                let zone1: &[(u32, f32, f32)] =
                    if k < 10 { &[(3, 5.0, 0.0), (4, 45.0, 40.0)] } else { &[(4, 45.0, 40.0)] };
                feed(state(&schema, 1, 500 + k, t - 10, zone1, false, &[(0, 100, 100)]));
            }
            drop(feed);
            watch_from(oracle, &schema, 170, shown)
        };
        let stale = run(&[(0, 1), (0, 2), (1, border_id(0, 3))]);
        assert_eq!((stale.unknown, stale.twice), (0, 0), "{}", stale.line());
        assert!(stale.checked >= 40, "{}", stale.line());
        let ghost = run(&[(0, 1), (0, 2), (1, border_id(0, 9))]);
        assert_eq!(ghost.unknown, 40, "{}", ghost.line());
    }
}
