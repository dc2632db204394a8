//! The arena as a session-based game: a lobby where players wait, arena matches of a few
//! players each that start when enough are queued (or, after a short wait, with whoever is
//! queued: at least [`Rooms::match_min`]), play for a while and send their players back,
//! and a global world of beacons every player watches whatever world it is in. This
//! is what `volley run` serves, and the README's "Lobbies, matches and shared worlds" walks
//! through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use glam::Vec2;
use volley::prelude::*;
use volley::protocol::input::ViewTime;

use crate::{Arena, Beacon, HALF_SIZE};

/// The world kinds the rooms run (the server declares them: they label its figures).
pub const KINDS: [&str; 4] = ["lobby", "match", "global", "spectators"];

/// How the rooms play.
#[derive(Debug, Clone)]
pub struct Rooms {
    /// Players a match takes (it starts at once when this many are queued).
    pub match_size: usize,
    /// Fewer players than `match_size` still start a match once the longest-queued of them
    /// has waited [`Rooms::match_wait`], if at least this many are queued (as matchmakers
    /// fill a match or start it on a timeout). At least 1.
    pub match_min: usize,
    /// How long the first player in the queue waits for a full match before one starts
    /// with whoever is queued.
    pub match_wait: Duration,
    /// How long a match lasts.
    pub match_length: Duration,
    /// Beacons in the global world.
    pub beacons: u32,
    /// The global world's tick rate (a divisor of the server's).
    pub global_hz: u16,
    /// Fault injection for supervision runs: the match started this many matches in (0 is
    /// the first) panics in every tick from its tenth second, as a game bug would. It runs
    /// as kind "faulty" (declare it), so that the other matches' figures stay apart.
    pub faulty_match: Option<u64>,
    /// How far behind its match a spectators' world shows it. Each match has one; players
    /// whose connect token's user data starts with [`SPECTATOR`](crate::bots::SPECTATOR)
    /// go there instead of queueing.
    pub spectator_delay: Duration,
}

impl Default for Rooms {
    fn default() -> Self {
        Self {
            match_size: 20,
            match_min: 2,
            match_wait: Duration::from_secs(3),
            match_length: Duration::from_secs(60),
            beacons: 100,
            global_hz: 20,
            faulty_match: None,
            spectator_delay: Duration::from_secs(2),
        }
    }
}

/// What the rooms count, for the live figures.
#[derive(Debug, Default)]
pub struct RoomFigures {
    /// Matches started.
    pub started: AtomicU64,
    /// Matches played to their end.
    pub finished: AtomicU64,
}

/// The entry world: players wait here; every `match_size` of them start a match, and so do
/// at least `match_min` once the first has waited `match_wait`.
pub struct Lobby {
    rooms: Rooms,
    figures: Arc<RoomFigures>,
    worlds: Option<Worlds>,
    /// Players waiting for a match, with when they joined the queue (the lobby's clock).
    queue: Vec<(PlayerId, Duration)>,
    /// The lobby's clock: its ticks' time added up.
    clock: Duration,
    /// Spectators waiting for a match to watch.
    watchers: Vec<PlayerId>,
    /// The newest match, and how many players the lobby has sent it.
    newest: Option<WorldId>,
    newest_players: usize,
    /// A match's spectators' world, once a spectator came.
    stands: Option<(WorldId, WorldId)>,
}

impl Lobby {
    /// A lobby for `rooms`, counting in `figures`.
    pub fn new(rooms: Rooms, figures: Arc<RoomFigures>) -> Self {
        Self {
            rooms,
            figures,
            worlds: None,
            queue: Vec::new(),
            clock: Duration::ZERO,
            watchers: Vec::new(),
            newest: None,
            newest_players: 0,
            stands: None,
        }
    }
}

impl Lobby {
    /// Whether a match starts short of full: at least `match_min` queued, and the first of
    /// them has waited `match_wait`.
    fn waited_enough(&self) -> bool {
        self.queue.len() >= self.rooms.match_min.max(1)
            && self.queue.first().is_some_and(|(_, since)| self.clock.saturating_sub(*since) >= self.rooms.match_wait)
    }
}

impl World for Lobby {
    fn schema(&self) -> Schema {
        crate::schema()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        let global = Global { beacons: self.rooms.beacons, tick: 0 };
        let options = WorldOptions::new("global").watched_by_everyone().tick_rate(self.rooms.global_hz);
        if let Err(e) = worlds.spawn(options, global) {
            tracing::error!(error = %e, "the global world did not start");
        }
        self.worlds = Some(worlds.clone());
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        if who.user_data.starts_with(crate::bots::SPECTATOR) {
            self.watchers.push(player);
            return;
        }
        match &who.origin {
            // Its match failed under it: first in the queue for the next one.
            Origin::Returned { why, .. } => {
                tracing::info!(player, why = %why, "back from a match that stopped early");
                self.queue.insert(0, (player, Duration::ZERO));
            }
            // A newcomer, or back from a match played to its end: at the back.
            _ => self.queue.push((player, self.clock)),
        }
    }
    fn world_stopped(&mut self, world: WorldId, why: &str) {
        // Its players arrive after this: no spectator is sent to a match that is gone.
        if self.newest == Some(world) {
            self.newest = None;
        }
        tracing::debug!(%world, why, "a match stopped");
    }
    fn leave(&mut self, player: PlayerId) {
        self.queue.retain(|(p, _)| *p != player);
        self.watchers.retain(|p| *p != player);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, dt: Duration) {
        self.clock += dt;
    }
    fn messages(&mut self, out: &mut Outbox) {
        let Some(worlds) = &self.worlds else { return };
        let size = self.rooms.match_size.max(1);
        // Full, or short of full once the first in the queue has waited long enough.
        while self.queue.len() >= size || self.waited_enough() {
            let take = self.queue.len().min(size);
            let mut game = Match::new(self.rooms.match_length, self.figures.clone());
            let n = self.figures.started.load(Ordering::Relaxed);
            game.faulty = self.rooms.faulty_match == Some(n);
            let kind = if game.faulty { "faulty" } else { "match" };
            // A match everyone quit stops by itself (its players gone, nobody to play for).
            match worlds.spawn(WorldOptions::new(kind).fallback(WorldId::ENTRY).stop_when_empty(), game) {
                Ok(id) => {
                    self.figures.started.fetch_add(1, Ordering::Relaxed);
                    for (p, _) in self.queue.drain(..take) {
                        out.move_to(p, id);
                    }
                    self.newest = Some(id);
                    self.newest_players = take;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no match started");
                    return;
                }
            }
        }
        // Joining in progress: a player who has waited `match_wait` with too few others for a
        // match of their own joins the newest match while it has seats (a player arriving
        // after everyone else does not wait for that match to end).
        let waited = |q: &[(PlayerId, Duration)]| {
            q.first().is_some_and(|(_, since)| self.clock.saturating_sub(*since) >= self.rooms.match_wait)
        };
        if self.newest_players < size && waited(&self.queue) {
            let running = worlds.running();
            if let Some(m) = self.newest.filter(|m| running.contains(m)) {
                while self.newest_players < size && waited(&self.queue) {
                    let (p, _) = self.queue.remove(0);
                    out.move_to(p, m);
                    self.newest_players += 1;
                }
            }
        }
        if self.watchers.is_empty() {
            return;
        }
        // Spectators watch the newest match from its stands (the match as it was a moment
        // ago), started when the first spectator comes; back here when it ends, then the next.
        let running = worlds.running();
        if self.stands.is_none_or(|(m, _)| !running.contains(&m)) {
            self.stands = None;
            if let Some(m) = self.newest.filter(|m| running.contains(m)) {
                let stands = WorldOptions::new("spectators").fallback(WorldId::ENTRY);
                match Spectators::new(self.rooms.spectator_delay, Arena::new().relevancy()).start(worlds, m, stands) {
                    Ok(s) => self.stands = Some((m, s)),
                    Err(e) => tracing::warn!(error = %e, "no spectators' world started"),
                }
            }
        }
        if let Some((_, stands)) = self.stands {
            for p in self.watchers.drain(..) {
                out.move_to(p, stands);
            }
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// An arena match: the arena game, for a while; then its players go back to the lobby
/// and it stops.
pub struct Match {
    arena: Arena,
    ticks_left: u32,
    length: Duration,
    players: Vec<PlayerId>,
    figures: Arc<RoomFigures>,
    over: bool,
    /// Panics from its tenth second ([`Rooms::faulty_match`]).
    faulty: bool,
    ticks: u32,
}

impl Match {
    /// A match lasting `length`.
    pub fn new(length: Duration, figures: Arc<RoomFigures>) -> Self {
        Self {
            arena: Arena::new(),
            ticks_left: 0,
            length,
            players: Vec::new(),
            figures,
            over: false,
            faulty: false,
            ticks: 0,
        }
    }
}

impl World for Match {
    fn schema(&self) -> Schema {
        self.arena.schema()
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.players.push(player);
        self.arena.join_with(player, who);
    }
    fn leave(&mut self, player: PlayerId) {
        self.players.retain(|p| *p != player);
        self.arena.leave(player);
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        self.arena.input(player, input);
    }
    fn input_viewed(&mut self, player: PlayerId, input: &[u8], view: Option<ViewTime>) {
        self.arena.input_viewed(player, input, view);
    }
    fn tick(&mut self, tick: u32, dt: Duration) {
        if self.ticks_left == 0 && !self.over {
            self.ticks_left = (self.length.as_secs_f64() / dt.as_secs_f64().max(1e-6)).ceil() as u32;
        }
        self.ticks_left = self.ticks_left.saturating_sub(1);
        self.ticks += 1;
        if self.faulty && f64::from(self.ticks) * dt.as_secs_f64() >= 10.0 {
            panic!("injected fault: this match's code fails every tick");
        }
        self.arena.tick(tick, dt);
    }
    fn messages(&mut self, out: &mut Outbox) {
        self.arena.messages(out);
        if self.ticks_left == 0 && !self.over {
            self.over = true;
            self.figures.finished.fetch_add(1, Ordering::Relaxed);
            for p in &self.players {
                out.move_to(*p, WorldId::ENTRY);
            }
            out.stop_world();
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        self.arena.snapshot(out);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        self.arena.relevancy()
    }
}

/// The global world: beacons circling the arena, seen by every player.
pub struct Global {
    beacons: u32,
    tick: u32,
}

impl World for Global {
    fn schema(&self) -> Schema {
        crate::schema()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for k in 0..self.beacons {
            // Each beacon circles at its own radius; a tenth of them move at any time.
            let moving = (self.tick / 60 + k).is_multiple_of(10);
            let t = if moving { self.tick as f32 / 600.0 } else { 0.0 };
            let angle = k as f32 * 0.618 * std::f32::consts::TAU + t;
            let radius = HALF_SIZE * (0.2 + 0.7 * (k as f32 / self.beacons.max(1) as f32));
            let _ = out.insert(k, &Beacon { position: Vec2::from_angle(angle) * radius });
        }
    }
}
