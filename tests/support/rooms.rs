//! A lobby, matches and a global world: the worlds the many-worlds tests run, on the actor
//! server and in the stepper alike. Every entity is a [`Token`] that names the world it
//! comes from and its own local id, so a client can check that merged ids never mix worlds.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::quant::Bits;

volley::replicated! {
    /// One entity of any world.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Token {
        /// The number of the world that made it.
        pub world: u16 = Bits(10),
        /// Its local id in that world.
        pub local: u32 = Bits(22),
        /// The tick of the world's snapshot.
        pub tick: u32 = Bits(32),
    }
}

/// The schema every world here uses.
pub fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Token>().expect("a fresh schema");
    s
}

/// The world kinds declared.
pub const KINDS: [&str; 3] = ["lobby", "match", "global"];

/// Entities of the global world.
pub const GLOBAL_ENTITIES: u32 = 10;

/// How the rooms play.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Players a match takes.
    pub match_size: usize,
    /// Ticks a match lasts.
    pub match_ticks: u32,
    /// Matches each player is queued for before it stays in the lobby.
    pub rounds: u32,
    /// Matches whose code panics every tick from its 10th (by the order they start).
    pub panicking: BTreeSet<usize>,
    /// The global world's tick rate (the server's is 60).
    pub global_hz: u16,
}

impl Default for Rules {
    fn default() -> Self {
        Self { match_size: 8, match_ticks: 120, rounds: 2, panicking: BTreeSet::new(), global_hz: 20 }
    }
}

/// What the rooms tell the test.
#[derive(Debug, Default)]
pub struct Record {
    /// Matches played to the end, by client id.
    pub rounds: Mutex<BTreeMap<u64, u32>>,
    /// Times queued for a match, by client id.
    pub queued: Mutex<BTreeMap<u64, u32>>,
    /// Matches started.
    pub matches: AtomicUsize,
    /// Matches that ended by themselves.
    pub ended: AtomicUsize,
    /// The global world's number.
    pub global: Mutex<Option<WorldId>>,
    /// Each match's world, in the order started.
    pub match_worlds: Mutex<Vec<WorldId>>,
}

/// The entry world: players wait here; every `match_size` queued start a match.
pub struct Lobby {
    rules: Rules,
    record: Arc<Record>,
    worlds: Option<Worlds>,
    me: u16,
    tick: u32,
    present: BTreeMap<PlayerId, u64>,
    queue: Vec<PlayerId>,
}

impl Lobby {
    /// A lobby playing by `rules`, telling `record`.
    pub fn new(rules: Rules, record: Arc<Record>) -> Self {
        Self { rules, record, worlds: None, me: 0, tick: 0, present: BTreeMap::new(), queue: Vec::new() }
    }
}

impl World for Lobby {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        self.me = me.number();
        let global = Global { me: 0, tick: 0 };
        let id = worlds
            .spawn(WorldOptions::new("global").watched_by_everyone().tick_rate(self.rules.global_hz), global)
            .expect("the global world starts");
        *self.record.global.lock().unwrap() = Some(id);
        self.worlds = Some(worlds.clone());
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.present.insert(player, who.client_id);
        let mut queued = self.record.queued.lock().unwrap();
        let n = queued.entry(who.client_id).or_default();
        if *n < self.rules.rounds {
            *n += 1;
            self.queue.push(player);
        }
    }
    fn leave(&mut self, player: PlayerId) {
        self.present.remove(&player);
        self.queue.retain(|p| *p != player);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn messages(&mut self, out: &mut Outbox) {
        let Some(worlds) = &self.worlds else { return };
        while self.queue.len() >= self.rules.match_size {
            let n = self.record.matches.fetch_add(1, Ordering::Relaxed);
            let game = Match {
                rules: self.rules.clone(),
                record: self.record.clone(),
                me: 0,
                tick: 0,
                age: 0,
                players: BTreeMap::new(),
                panics: self.rules.panicking.contains(&n),
                over: false,
            };
            let id = worlds.spawn(WorldOptions::new("match").fallback(WorldId::ENTRY), game).expect("a match starts");
            self.record.match_worlds.lock().unwrap().push(id);
            for p in self.queue.drain(..self.rules.match_size) {
                out.move_to(p, id);
            }
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for p in self.present.keys() {
            let _ = out.insert(*p, &Token { world: self.me, local: *p, tick: self.tick });
        }
    }
}

/// A match: one token per player and two balls; after `match_ticks` it sends its players
/// back to the lobby and stops.
pub struct Match {
    rules: Rules,
    record: Arc<Record>,
    me: u16,
    tick: u32,
    age: u32,
    players: BTreeMap<PlayerId, u64>,
    panics: bool,
    over: bool,
}

impl World for Match {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, me: WorldId, _: &Worlds) {
        self.me = me.number();
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.players.insert(player, who.client_id);
    }
    fn leave(&mut self, player: PlayerId) {
        self.players.remove(&player);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
        self.age += 1;
        assert!(!(self.panics && self.age >= 10), "a bug in this match");
    }
    fn messages(&mut self, out: &mut Outbox) {
        if self.over || self.age < self.rules.match_ticks {
            return;
        }
        self.over = true;
        self.record.ended.fetch_add(1, Ordering::Relaxed);
        let mut rounds = self.record.rounds.lock().unwrap();
        for (p, client) in &self.players {
            *rounds.entry(*client).or_default() += 1;
            out.move_to(*p, WorldId::ENTRY);
        }
        out.stop_world();
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for p in self.players.keys() {
            let _ = out.insert(*p, &Token { world: self.me, local: *p, tick: self.tick });
        }
        for ball in [5000, 5001] {
            let _ = out.insert(ball, &Token { world: self.me, local: ball, tick: self.tick });
        }
    }
}

/// The world everyone watches: a few tokens that change every tick it runs.
pub struct Global {
    me: u16,
    tick: u32,
}

impl World for Global {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, me: WorldId, _: &Worlds) {
        self.me = me.number();
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for k in 0..GLOBAL_ENTITIES {
            let _ = out.insert(k, &Token { world: self.me, local: k, tick: self.tick });
        }
    }
}

/// Checks one decoded snapshot a client drew: every entity's id names the world and local id
/// its token says (merged ids never mix worlds), and besides the global world's it holds
/// one world's entities at most (a player sees its own match, not another). Returns the
/// world it shows besides the global one, or what is wrong.
pub fn check_snapshot(snapshot: &WorldSnapshot, schema: &Schema, global: u16) -> Result<Option<u16>, String> {
    let mut home = None;
    for e in snapshot.iter() {
        let t: Token = snapshot.read(schema, e.id).ok_or_else(|| format!("entity {} is not a token", e.id))?;
        let (world, local) = volley::protocol::snapshot::world::split_id(e.id);
        if (world, local) != (u32::from(t.world), t.local) {
            return Err(format!("id {} is ({world}, {local}) but its token says ({}, {})", e.id, t.world, t.local));
        }
        if t.world != global && *home.get_or_insert(t.world) != t.world {
            return Err(format!("tick {}: entities of worlds {home:?} and {} together", snapshot.tick(), t.world));
        }
    }
    Ok(home)
}

/// Checks a decoded snapshot's content against what the worlds make at its tick: the
/// entities of its home world are that world's snapshot of this very tick (every token's
/// tick is the snapshot's), the global world's are all ten, of one tick at most two of its
/// periods old (a watched world is held between its ticks), and a match's two balls are
/// there (in its first second a server may not have a global snapshot yet). Returns what is
/// wrong.
pub fn check_content(snapshot: &WorldSnapshot, schema: &Schema, global: u16, global_stride: u32) -> Result<(), String> {
    let tick = snapshot.tick();
    let tokens: Vec<Token> = snapshot.iter().filter_map(|e| snapshot.read::<Token>(schema, e.id)).collect();
    let (globals, home): (Vec<&Token>, Vec<&Token>) = tokens.iter().partition(|t| t.world == global);
    if let Some(t) = home.iter().find(|t| t.tick != tick) {
        return Err(format!("a token of tick {} in the snapshot of tick {tick}", t.tick));
    }
    if globals.is_empty() && tick < 60 {
        return Ok(()); // the global world's first tick is on its way (it starts with the lobby)
    }
    if globals.len() != GLOBAL_ENTITIES as usize {
        return Err(format!("{} global tokens at tick {tick}", globals.len()));
    }
    let g = globals[0].tick;
    if globals.iter().any(|t| t.tick != g) || g > tick || tick - g > 2 * global_stride {
        return Err(format!(
            "the global world's tokens at tick {tick} are of ticks {:?}",
            globals.iter().map(|t| t.tick).collect::<Vec<_>>()
        ));
    }
    let balls = home.iter().filter(|t| t.local >= 5000).count();
    if home.first().is_some_and(|t| t.world != 0) && balls != 2 {
        return Err(format!("{balls} balls in a match at tick {tick}"));
    }
    Ok(())
}
