//! Arena: a top-down shooter. Players move, aim and fire projectiles (a hit costs 25 health)
//! or a rail, a hitscan beam judged with lag compensation (40 health): against where its
//! targets were in the view the shooter's input carried, rewound through a
//! [`History`] of the last half second. At zero health a player dies, the shooter scores,
//! and the victim respawns two seconds later. It is a real [`World`] written only against
//! volley's public API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use glam::Vec2;
use serde::{Deserialize, Serialize};

use volley::protocol::input::ViewTime;
use volley::protocol::quant::{AngleQ, Bits, Flag, Vec2Q};
use volley::protocol::snapshot::EntityRef;
use volley::protocol::snapshot::{EntityId, Interest, Schema, SnapshotBuilder, WorldSnapshot};
use volley::protocol::zone::{ZoneId, ZoneLayout};
use volley::server::lagcomp::History;
use volley::server::spatial::{Grid, Near};
use volley::server::zone::{ZoneExit, ZoneGame, ZoneLink, ZoneOptions};
use volley::server::{Audience, JoinInfo, Outbox, PlayerId, Relevancy, World};

/// Half the arena's side, in metres.
pub const HALF_SIZE: f32 = 50.0;
/// Player speed, m/s.
pub const SPEED: f32 = 8.0;
/// Projectile speed, m/s.
pub const SHOT_SPEED: f32 = 30.0;
/// Seconds between shots.
pub const FIRE_COOLDOWN: f32 = 0.25;
/// How far a player sees, in metres.
pub const VIEW_RADIUS: f32 = 40.0;
/// Most entities one player is sent (the nearest win).
pub const MAX_VISIBLE: usize = 64;
/// The rail's reach, metres.
pub const RAIL_RANGE: f32 = 30.0;
/// Seconds between rail shots.
pub const RAIL_COOLDOWN: f32 = 2.0;
/// Health a rail hit costs.
pub const RAIL_DAMAGE: u8 = 40;
/// Seconds a player who left keeps its score for, should it come back.
pub const RETURN_WINDOW: f32 = 60.0;
/// Most departed players remembered at once.
const MAX_DEPARTED: usize = 4096;
/// Ticks of avatar positions kept for the rail's lag compensation (half a second at 60 Hz):
/// no rail shot is judged further back than that.
pub const HISTORY_TICKS: usize = 32;
const HIT_RADIUS: f32 = 0.7;
const SHOT_LIFETIME: f32 = 1.2;
const RESPAWN: f32 = 2.0;
/// Projectile ids start here (players use their slot as id).
pub const SHOT_ID_BASE: EntityId = 1 << 20;
/// In a zone ([`Arena::zoned`]), projectile ids start here instead (a zone game's ids stay
/// below `1 << 17`, see [`volley::server::zone`]); players then take at most this many slots.
pub const ZONE_SHOT_ID_BASE: EntityId = 1 << 16;

volley::replicated! {
    /// A player's avatar.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Avatar {
        /// Position, 1 cm in the arena.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-HALF_SIZE), Vec2::splat(HALF_SIZE), 0.01),
        /// Facing, radians.
        pub aim: f32 = AngleQ(10),
        /// 0 to 100.
        pub health: u8 = Bits(7),
        /// Kills.
        pub score: u16 = Bits(12),
        /// Deaths.
        pub deaths: u16 = Bits(12),
        /// Whether it is alive (dead avatars wait to respawn).
        pub alive: bool = Flag,
    }
}

volley::replicated! {
    /// A projectile in flight.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Shot {
        /// Position, 2 cm in the arena.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-HALF_SIZE), Vec2::splat(HALF_SIZE), 0.02),
        /// Direction of flight, radians.
        pub heading: f32 = AngleQ(8),
    }
}

volley::replicated! {
    /// A beacon of the global world every player watches (the demo's shared state).
    #[derive(Debug, Clone, PartialEq)]
    pub struct Beacon {
        /// Position, 5 cm in the arena.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-HALF_SIZE), Vec2::splat(HALF_SIZE), 0.05),
    }
}

/// What a player sends every tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ArenaInput {
    /// Movement, −127 to 127 on each axis.
    pub move_x: i8,
    /// Movement, −127 to 127 on each axis.
    pub move_y: i8,
    /// Aim angle in 1/65536 of a turn.
    pub aim: u16,
    /// Fire this tick.
    pub fire: bool,
    /// Fire the rail (hitscan, judged where the targets were in the view this input was made
    /// with) when it is ready.
    pub rail: bool,
}

impl ArenaInput {
    /// Encodes for [`volley::client::GameClient::send_input`].
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// The aim in radians.
    pub fn aim_radians(&self) -> f32 {
        f32::from(self.aim) / 65536.0 * std::f32::consts::TAU
    }

    /// An aim in radians as the input's fixed-point turn.
    pub fn aim_from_radians(a: f32) -> u16 {
        ((a / std::f32::consts::TAU).rem_euclid(1.0) * 65536.0) as u32 as u16
    }
}

/// What the arena tells players reliably: the kill feed to everyone, numbered from 0 so a
/// client can check it got every one, once, in order; and to each player as it arrives, who
/// it is.
///
/// On the wire (postcard): the variant's number as a varint (0 kill, 1 welcome), then each
/// field as a varint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArenaEvent {
    /// `killer` shot `victim`.
    Kill {
        /// Running number of kills in this arena.
        seq: u32,
        /// Who scored.
        killer: PlayerId,
        /// Who died.
        victim: PlayerId,
    },
    /// To a player that arrives in this arena: its player id here, which is also its
    /// avatar's id in the arena's snapshots (in the entry world; in another world the id
    /// carries the world's number, `volley::protocol::snapshot::world::merged_id`).
    Welcome {
        /// The player.
        player: PlayerId,
    },
}

#[derive(Debug, Clone)]
struct Player {
    avatar: Avatar,
    input: ArenaInput,
    cooldown: f32,
    respawn_in: f32,
    rail_cooldown: f32,
    /// The view of the newest input that asked for the rail, until it fires.
    rail: Option<Option<ViewTime>>,
    /// Its connect token's client id, when the server said who it is.
    client_id: Option<u64>,
}

#[derive(Debug, Clone)]
struct Projectile {
    owner: PlayerId,
    position: Vec2,
    velocity: Vec2,
    life: f32,
}

/// The arena world.
#[derive(Debug)]
pub struct Arena {
    players: BTreeMap<PlayerId, Player>,
    shots: BTreeMap<EntityId, Projectile>,
    next_shot: u32,
    rng: u64,
    kills: u32,
    feed: Vec<ArenaEvent>,
    /// Players arrived since the last messages, to be welcomed.
    arrived: Vec<PlayerId>,
    /// Living players' positions, rebuilt each tick (and who each is): a shot is tested
    /// against the players in its cell and the eight around it, not against everyone.
    hit_grid: Grid,
    hit_players: Vec<PlayerId>,
    /// Living avatars' positions, by player, at each of the last ticks (the rail's lag
    /// compensation), and the entry that fell out of it last (its buffer is reused).
    history: History<Vec<(PlayerId, Vec2)>>,
    spare: Vec<(PlayerId, Vec2)>,
    /// Seconds of play.
    clock: f32,
    /// Players who left in the last [`RETURN_WINDOW`] seconds, by client id: their kills,
    /// deaths, and when they left. A returning player gets its score back.
    departed: BTreeMap<u64, (u16, u16, f32)>,
    /// The zone this arena runs, when the map is split among several servers.
    zone: Option<ArenaZone>,
}

/// The part of a map split among zone servers that one arena runs ([`Arena::zoned`]).
#[derive(Debug)]
struct ArenaZone {
    layout: ZoneLayout,
    me: ZoneId,
    /// Where the zone's link goes once the world has started (the program starts the bus
    /// shell with it).
    link: Arc<std::sync::Mutex<Option<ZoneLink>>>,
    /// Where it hands players to its neighbours, once the world has started.
    exit: Option<ZoneExit>,
    /// Whether it publishes its whole state each tick.
    publish_state: bool,
}

/// How far past its zone's border a player walks before it is handed to the neighbour, metres.
pub const HANDOFF_PAST: f32 = 1.0;

/// What a zone sends the next with a player it hands over.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// Where it stands.
    pub position: (f32, f32),
    /// Facing, radians.
    pub aim: f32,
    /// 0 to 100.
    pub health: u8,
    /// Kills.
    pub score: u16,
    /// Deaths.
    pub deaths: u16,
}

/// Where an arena entity stands, for the zones: every kind the arena replicates has a
/// position first.
#[derive(Debug, Clone, Copy)]
pub struct ArenaPositions;

impl ZoneGame for ArenaPositions {
    fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
        use volley::protocol::snapshot::Replicate;
        match e.kind {
            0 => Some(Avatar::dequantize(e.words).position),
            1 => Some(Shot::dequantize(e.words).position),
            2 => Some(Beacon::dequantize(e.words).position),
            _ => None,
        }
    }
    fn view_radius(&self) -> f32 {
        VIEW_RADIUS
    }
}

/// The arena's schema (clients register the same).
pub fn schema() -> Schema {
    let mut s = Schema::new();
    // Registering fresh types in a fresh schema cannot fail.
    let _ = s.register::<Avatar>();
    let _ = s.register::<Shot>();
    let _ = s.register::<Beacon>();
    s
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a player was in a rewound view: blended between the view's two ticks when it was
/// alive in both, else where it was in the one that has it.
fn position_in(view: &volley::server::lagcomp::Rewound<'_, Vec<(PlayerId, Vec2)>>, player: PlayerId) -> Option<Vec2> {
    let find = |e: &Vec<(PlayerId, Vec2)>| e.binary_search_by_key(&player, |(p, _)| *p).ok().map(|i| e[i].1);
    match (find(view.from), find(view.to)) {
        (Some(a), Some(b)) => Some(a.lerp(b, view.alpha)),
        (a, b) => a.or(b),
    }
}

/// Takes `amount` of `victim`'s health; at zero it dies, the kill goes into the feed, and
/// `killer` will score.
fn damage(arena: Damage<'_>, victim: PlayerId, killer: PlayerId, amount: u8, kills: &mut Vec<PlayerId>) {
    let Some(p) = arena.players.get_mut(&victim).filter(|p| p.avatar.alive) else { return };
    p.avatar.health = p.avatar.health.saturating_sub(amount);
    if p.avatar.health == 0 {
        p.avatar.alive = false;
        p.avatar.deaths = (p.avatar.deaths + 1).min(4095);
        p.respawn_in = RESPAWN;
        kills.push(killer);
        arena.feed.push(ArenaEvent::Kill { seq: *arena.kills, killer, victim });
        *arena.kills += 1;
    }
}

/// The parts of the arena a hit changes (borrowed apart from its shots).
struct Damage<'a> {
    players: &'a mut BTreeMap<PlayerId, Player>,
    feed: &'a mut Vec<ArenaEvent>,
    kills: &'a mut u32,
}

impl Arena {
    fn damage_parts(&mut self) -> Damage<'_> {
        Damage { players: &mut self.players, feed: &mut self.feed, kills: &mut self.kills }
    }

    /// An empty arena.
    pub fn new() -> Self {
        Self {
            players: BTreeMap::new(),
            shots: BTreeMap::new(),
            next_shot: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
            kills: 0,
            feed: Vec::new(),
            arrived: Vec::new(),
            hit_grid: arena_grid(),
            hit_players: Vec::new(),
            history: History::new(HISTORY_TICKS),
            spare: Vec::new(),
            clock: 0.0,
            departed: BTreeMap::new(),
            zone: None,
        }
    }

    /// The arena as zone `me` of `layout`: one part of a map run by several servers (see
    /// `volley_zones`). Players spawn in its region; one that walks into a neighbour's
    /// region is handed to it with its place, health and score ([`Carried`]); shots end at
    /// the region's edge. The world must be the server's entry world and "border" one of
    /// its kinds; the zone's link is in the returned slot once the world has started.
    pub fn zoned(layout: ZoneLayout, me: ZoneId) -> (Self, Arc<std::sync::Mutex<Option<ZoneLink>>>) {
        let link = Arc::new(std::sync::Mutex::new(None));
        let zone = ArenaZone { layout, me, link: link.clone(), exit: None, publish_state: false };
        (Self { zone: Some(zone), ..Self::new() }, link)
    }

    /// A zoned arena that also publishes its whole state every tick
    /// ([`ZoneOptions::publish_state`]), for an observer of the whole map such as the global
    /// oracle of `volley run --zones N --oracle`. No effect on an arena that is not a zone.
    pub fn publishing_state(mut self) -> Self {
        if let Some(z) = &mut self.zone {
            z.publish_state = true;
        }
        self
    }

    /// The zone's region, if the arena is a zone.
    fn region(&self) -> Option<(Vec2, Vec2)> {
        let z = self.zone.as_ref()?;
        z.layout.region(z.me).map(|r| (r.min, r.max))
    }

    /// Who a rail fired by `shooter` along `aim` (radians) hits, judged in `view`: the
    /// nearest other avatar, alive then and now, within [`HIT_RADIUS`] of the beam and
    /// [`RAIL_RANGE`] of the shooter. The arena has no client-side prediction, so the shooter
    /// saw itself in the past too: the beam starts where it was in that view.
    fn rail_victim(&self, shooter: PlayerId, aim: f32, view: Option<ViewTime>) -> Option<PlayerId> {
        let seen = self.history.rewind(view)?;
        let origin = position_in(&seen, shooter).or_else(|| Some(self.players.get(&shooter)?.avatar.position))?;
        let dir = Vec2::from_angle(aim);
        let mut best: Option<(f32, PlayerId)> = None;
        // One pass over both ticks' lists (sorted by player): each player where it was in
        // the view, blended where it was alive in both.
        let (from, to) = (seen.from, seen.to);
        let (mut i, mut j) = (0, 0);
        loop {
            let (id, at) = match (from.get(i), to.get(j)) {
                (Some(a), Some(b)) if a.0 == b.0 => {
                    (i, j) = (i + 1, j + 1);
                    (a.0, a.1.lerp(b.1, seen.alpha))
                }
                (Some(a), b) if b.is_none_or(|b| a.0 < b.0) => {
                    i += 1;
                    *a
                }
                (_, Some(b)) => {
                    j += 1;
                    *b
                }
                _ => break,
            };
            let rel = at - origin;
            let along = rel.dot(dir);
            if id == shooter
                || along <= 0.0
                || along > RAIL_RANGE
                || best.is_some_and(|(d, _)| along >= d)
                || rel.perp_dot(dir).abs() > HIT_RADIUS
                || !self.players.get(&id).is_some_and(|p| p.avatar.alive)
            {
                continue;
            }
            best = Some((along, id));
        }
        best.map(|(_, id)| id)
    }

    fn random_spot(&mut self) -> Vec2 {
        let region = self.region();
        let mut r = || {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (self.rng >> 11) as f32 / (1u64 << 53) as f32
        };
        let (a, b) = (r(), r());
        match region {
            // Within the zone's region, 2 m in from its edges.
            Some((min, max)) => {
                let (lo, hi) = (min + Vec2::splat(2.0), max - Vec2::splat(2.0));
                (lo + Vec2::new(a, b) * (hi - lo)).clamp(Vec2::splat(-HALF_SIZE + 1.0), Vec2::splat(HALF_SIZE - 1.0))
            }
            None => Vec2::new(a * 2.0 - 1.0, b * 2.0 - 1.0) * (HALF_SIZE - 5.0),
        }
    }

    /// A player enters at a random spot; one that left less than [`RETURN_WINDOW`] seconds ago
    /// (the same client id) gets its kills and deaths back.
    fn spawn(&mut self, player: PlayerId, client_id: Option<u64>) {
        let position = self.random_spot();
        let (score, deaths) = client_id.and_then(|c| self.departed.remove(&c)).map_or((0, 0), |d| (d.0, d.1));
        let avatar = Avatar { position, aim: 0.0, health: 100, score, deaths, alive: true };
        let input = ArenaInput::default();
        let p = Player { avatar, input, cooldown: 0.0, respawn_in: 0.0, rail_cooldown: 0.0, rail: None, client_id };
        self.arrived.push(player);
        self.players.insert(player, p);
    }

    /// Players and their scores, best first: the scoreboard.
    pub fn scoreboard(&self) -> Vec<(PlayerId, u16, u16)> {
        let mut v: Vec<_> = self.players.iter().map(|(id, p)| (*id, p.avatar.score, p.avatar.deaths)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        v
    }
}

impl World for Arena {
    fn schema(&self) -> Schema {
        schema()
    }

    fn join(&mut self, player: PlayerId) {
        self.spawn(player, None);
    }

    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.spawn(player, Some(who.client_id));
        // Handed over from a neighbouring zone: where it was, as it was.
        let carried = who.handoff.as_ref().and_then(|h| postcard::from_bytes::<Carried>(&h.state).ok());
        if let (Some(c), Some(p)) = (carried, self.players.get_mut(&player)) {
            let at = Vec2::new(c.position.0, c.position.1);
            if at.is_finite() {
                p.avatar.position = at.clamp(Vec2::splat(-HALF_SIZE + 0.5), Vec2::splat(HALF_SIZE - 0.5));
            }
            p.avatar.aim = if c.aim.is_finite() { c.aim } else { 0.0 };
            p.avatar.health = c.health.clamp(1, 100);
            p.avatar.score = c.score.min(4095);
            p.avatar.deaths = c.deaths.min(4095);
        }
    }

    fn started(&mut self, me: volley::server::WorldId, worlds: &volley::server::Worlds) {
        let Some(z) = &mut self.zone else { return };
        let mut options = ZoneOptions::new(z.layout.clone(), z.me, Arc::new(ArenaPositions));
        options.publish_state = z.publish_state;
        match options.start(worlds, me, volley::server::WorldOptions::new("border")) {
            Ok(link) => {
                z.exit = Some(link.exit());
                if let Ok(mut slot) = z.link.lock() {
                    *slot = Some(link);
                }
            }
            Err(e) => tracing::error!(zone = z.me, error = %e, "the arena could not run as a zone"),
        }
    }

    fn leave(&mut self, player: PlayerId) {
        let Some(p) = self.players.remove(&player) else { return };
        if let Some(client) = p.client_id.filter(|_| self.departed.len() < MAX_DEPARTED) {
            self.departed.insert(client, (p.avatar.score, p.avatar.deaths, self.clock));
        }
    }

    fn input(&mut self, player: PlayerId, input: &[u8]) {
        self.input_viewed(player, input, None);
    }

    fn input_viewed(&mut self, player: PlayerId, input: &[u8], view: Option<ViewTime>) {
        // Bad input from a client is ignored, never trusted or fatal.
        if let (Some(p), Ok(i)) = (self.players.get_mut(&player), postcard::from_bytes::<ArenaInput>(input)) {
            if i.rail {
                p.rail = Some(view);
            }
            p.input = i;
        }
    }

    fn tick(&mut self, tick: u32, dt: Duration) {
        let dt = dt.as_secs_f32();
        self.clock += dt;
        if !self.departed.is_empty() && tick.is_multiple_of(60) {
            let now = self.clock;
            self.departed.retain(|_, (.., left)| now - *left < RETURN_WINDOW);
        }
        let mut fired = Vec::new();
        let mut rails = Vec::new();
        let mut respawns = Vec::new();
        for (id, p) in &mut self.players {
            if !p.avatar.alive {
                // The dead do not fire, nor keep a request for when they are back.
                p.rail = None;
                p.respawn_in -= dt;
                if p.respawn_in <= 0.0 {
                    respawns.push(*id);
                }
                continue;
            }
            let dir = Vec2::new(f32::from(p.input.move_x), f32::from(p.input.move_y)) / 127.0;
            let dir = if dir.length_squared() > 1.0 { dir.normalize() } else { dir };
            p.avatar.position = (p.avatar.position + dir * SPEED * dt)
                .clamp(Vec2::splat(-HALF_SIZE + 0.5), Vec2::splat(HALF_SIZE - 0.5));
            p.avatar.aim = p.input.aim_radians();
            p.rail_cooldown -= dt;
            if let Some(view) = p.rail.take().filter(|_| p.rail_cooldown <= 0.0) {
                p.rail_cooldown = RAIL_COOLDOWN;
                rails.push((*id, p.avatar.aim, view));
            }
            p.cooldown -= dt;
            if p.input.fire && p.cooldown <= 0.0 {
                p.cooldown = FIRE_COOLDOWN;
                let facing = Vec2::from_angle(p.avatar.aim);
                fired.push(Projectile {
                    owner: *id,
                    position: p.avatar.position + facing,
                    velocity: facing * SHOT_SPEED,
                    life: SHOT_LIFETIME,
                });
            }
        }
        let mut kills = Vec::new();
        for (shooter, aim, view) in rails {
            if let Some(victim) = self.rail_victim(shooter, aim, view) {
                damage(self.damage_parts(), victim, shooter, RAIL_DAMAGE, &mut kills);
            }
        }
        for id in respawns {
            let spot = self.random_spot();
            if let Some(p) = self.players.get_mut(&id) {
                p.avatar.alive = true;
                p.avatar.health = 100;
                p.avatar.position = spot;
            }
        }
        let (base, span) = if self.zone.is_some() { (ZONE_SHOT_ID_BASE, 1 << 16) } else { (SHOT_ID_BASE, 1 << 20) };
        let region = self.region();
        for shot in fired {
            let id = base + self.next_shot % span;
            self.next_shot = self.next_shot.wrapping_add(1);
            self.shots.insert(id, shot);
        }
        let mut gone = Vec::new();
        self.hit_grid.clear();
        self.hit_players.clear();
        for (id, p) in self.players.iter().filter(|(_, p)| p.avatar.alive) {
            self.hit_grid.push(p.avatar.position);
            self.hit_players.push(*id);
        }
        for (sid, s) in &mut self.shots {
            s.position += s.velocity * dt;
            s.life -= dt;
            let out_of_zone = region.is_some_and(|(min, max)| {
                s.position.x < min.x || s.position.y < min.y || s.position.x >= max.x || s.position.y >= max.y
            });
            if s.life <= 0.0 || s.position.abs().max_element() > HALF_SIZE || out_of_zone {
                gone.push(*sid);
                continue;
            }
            // The lowest id within reach is hit (cells are wider than the hit radius, so
            // the 3 × 3 cells around the shot hold everyone within reach).
            let mut victim: Option<PlayerId> = None;
            for item in self.hit_grid.around(s.position, 1) {
                let pid = self.hit_players[item as usize];
                let Some(p) = self.players.get(&pid) else { continue };
                if pid == s.owner
                    || !p.avatar.alive
                    || p.avatar.position.distance(s.position) > HIT_RADIUS
                    || victim.is_some_and(|v| v < pid)
                {
                    continue;
                }
                victim = Some(pid);
            }
            if let Some(pid) = victim {
                gone.push(*sid);
                let parts = Damage { players: &mut self.players, feed: &mut self.feed, kills: &mut self.kills };
                damage(parts, pid, s.owner, 25, &mut kills);
            }
        }
        for sid in gone {
            self.shots.remove(&sid);
        }
        for k in kills {
            if let Some(p) = self.players.get_mut(&k) {
                p.avatar.score = (p.avatar.score + 1).min(4095);
            }
        }
        let mut seen = std::mem::take(&mut self.spare);
        seen.clear();
        seen.extend(self.players.iter().filter(|(_, p)| p.avatar.alive).map(|(id, p)| (*id, p.avatar.position)));
        self.spare = self.history.record(tick, seen).unwrap_or_default();
    }

    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (id, p) in &self.players {
            let _ = out.insert(*id, &p.avatar);
        }
        for (id, s) in &self.shots {
            let _ = out.insert(*id, &Shot { position: s.position, heading: s.velocity.to_angle() });
        }
    }

    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(Nearby { schema: schema(), positions: std::sync::Mutex::new(None) })
    }

    fn messages(&mut self, out: &mut Outbox) {
        if let Some((z, exit)) = self.zone.as_ref().and_then(|z| Some((z, z.exit.as_ref()?))) {
            // A refused one stays, and is offered again (the zone lets a second pass first).
            for r in exit.take_refused() {
                tracing::debug!(player = r.player, to = r.to, why = %r.why, "a handoff did not happen; the player stays");
            }
            // A living player in a neighbour's region goes there, as it is (asked every tick
            // it is there: the zone ignores a second ask while one is under way).
            let mine = z.layout.region(z.me);
            for (id, p) in self.players.iter().filter(|(_, p)| p.avatar.alive) {
                // A metre past the border, so that one walking along it is not handed to and
                // fro.
                if mine.is_none_or(|r| r.distance(p.avatar.position) < HANDOFF_PAST) {
                    continue;
                }
                let Some(to) = z.layout.owner(p.avatar.position).filter(|to| *to != z.me) else { continue };
                let a = &p.avatar;
                let carried = Carried {
                    position: (a.position.x, a.position.y),
                    aim: a.aim,
                    health: a.health,
                    score: a.score,
                    deaths: a.deaths,
                };
                exit.hand_off(*id, to, postcard::to_allocvec(&carried).unwrap_or_default());
            }
        }
        for player in self.arrived.drain(..) {
            if self.players.contains_key(&player) {
                // Serializing this enum into a Vec cannot fail.
                let _ = out.reliable_message(Audience::Player(player), &ArenaEvent::Welcome { player });
            }
        }
        for e in self.feed.drain(..) {
            let _ = out.reliable_message(Audience::All, &e);
        }
    }
}

/// Sees its own avatar, then the nearest entities: avatars anywhere and shots within
/// [`VIEW_RADIUS`], at most [`MAX_VISIBLE`] in all, nearer ones at higher priority.
#[derive(Debug)]
pub struct Nearby {
    schema: Schema,
    /// Every entity's position, decoded once per tick and shared by every player actor
    /// (decoding per player would cost players × entities), with a grid over them.
    positions: std::sync::Mutex<Option<(u32, Arc<Positions>)>>,
}

/// Side of a grid cell, metres: small enough that, in a crowd, the rings that hold the 64
/// nearest hold few more (the candidates are what the search costs).
const CELL: f32 = 5.0;

/// A grid over the arena, in [`CELL`]s (anything outside falls in its border cells).
fn arena_grid() -> Grid {
    Grid::new(Vec2::splat(-HALF_SIZE), Vec2::splat(HALF_SIZE), CELL)
}

/// One tick's entity positions, by snapshot index, and which are avatars.
#[derive(Debug)]
struct Positions {
    grid: Grid,
    avatar: Vec<bool>,
}

impl Nearby {
    fn positions(&self, world: &WorldSnapshot) -> Arc<Positions> {
        let mut cache = self.positions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, p)) = cache.as_ref().filter(|(t, _)| *t == world.tick()) {
            return p.clone();
        }
        let avatar_kind = self.schema.kind_of::<Avatar>();
        let mut grid = arena_grid();
        let mut avatar = Vec::with_capacity(world.len());
        for e in world.iter() {
            let position = if Some(e.kind) == avatar_kind {
                <Avatar as volley::protocol::snapshot::Replicate>::dequantize(e.words).position
            } else {
                <Shot as volley::protocol::snapshot::Replicate>::dequantize(e.words).position
            };
            grid.push(position);
            avatar.push(Some(e.kind) == avatar_kind);
        }
        let p = Arc::new(Positions { grid, avatar });
        *cache = Some((world.tick(), p.clone()));
        p
    }
}

/// The priority of an entity at squared distance `d2` (the player's own avatar: 0): 11 at
/// the player, falling to 1 at the view radius, a little more for nearer ones beyond it.
/// (From the squared distance: no square root per visible entity.)
fn priority(d2: f32) -> f32 {
    const R2: f32 = VIEW_RADIUS * VIEW_RADIUS;
    1.0 + 10.0 * (1.0 - d2 / R2).max(0.0) + 1e-3 * R2 / (R2 + d2)
}

impl Relevancy for Nearby {
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>) {
        out.clear();
        let p = self.positions(world);
        let mine = world.find(player);
        let Some(me) = mine.and_then(|i| p.grid.position(i as u32)) else {
            // A player without an avatar: any MAX_VISIBLE entities.
            out.extend((0..p.grid.len().min(MAX_VISIBLE) as u32).map(|index| Interest::new(index, 1.0)));
            return;
        };
        // Its own avatar (at distance 0), then the nearest: avatars anywhere, shots within
        // the view radius.
        let keep = |item: u32, d2: f32| p.avatar[item as usize] || d2 <= VIEW_RADIUS * VIEW_RADIUS;
        NEAR.with_borrow_mut(|near| {
            p.grid.nearest(me, MAX_VISIBLE, keep, near);
            out.extend(near.iter().map(|n| Interest::new(n.item, priority(n.distance_squared))));
        });
    }
}

thread_local! {
    /// The relevancy's answer on this thread, before it becomes the player's interest.
    static NEAR: std::cell::RefCell<Vec<Near>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod relevancy_tests {
    use super::*;
    use volley::protocol::snapshot::SnapshotBuilder;

    /// Shots hit across grid cells, the lowest id within reach first, and score a kill.
    #[test]
    fn shots_hit_the_lowest_id_within_reach_across_cells() {
        let mut arena = Arena::new();
        for id in [1, 2, 3] {
            arena.join(id);
        }
        // 1 fires along +x; its shots' first step ends at x = -0.5, in the grid cell left of
        // x = 0, within reach of 2 and 3, which stand right of it.
        for (id, at) in [(1, Vec2::new(-2.0, 0.0)), (2, Vec2::new(0.15, 0.0)), (3, Vec2::new(0.1, 0.3))] {
            arena.players.get_mut(&id).unwrap().avatar.position = at;
        }
        let grid = arena_grid();
        assert_ne!(grid.cell_of(Vec2::new(-0.5, 0.0)), grid.cell_of(Vec2::new(0.15, 0.0)));
        arena.players.get_mut(&1).unwrap().input = ArenaInput { fire: true, ..ArenaInput::default() };
        arena.tick(0, Duration::from_secs_f64(1.0 / 60.0));
        assert_eq!(arena.players[&2].avatar.health, 75, "hit on the shot's first step, from the next cell");
        let mut ticks = 1;
        while arena.players[&2].avatar.alive && ticks < 240 {
            arena.tick(ticks, Duration::from_secs_f64(1.0 / 60.0));
            ticks += 1;
        }
        assert!(!arena.players[&2].avatar.alive, "four hits kill");
        assert_eq!(arena.players[&3].avatar.health, 100, "the lower id is hit first");
        assert_eq!(arena.players[&1].avatar.score, 1);
        assert!(matches!(arena.feed[..], [ArenaEvent::Kill { killer: 1, victim: 2, .. }]));
    }

    /// The rail is judged where the shooter saw its target (the input's view), not where the
    /// target has run to since; and it waits for its cooldown.
    #[test]
    fn the_rail_hits_where_the_shooter_saw_its_target() {
        let dt = Duration::from_secs_f64(1.0 / 60.0);
        let run = |view: Option<ViewTime>| {
            let mut arena = Arena::new();
            arena.join(1);
            arena.join(2);
            arena.players.get_mut(&1).unwrap().avatar.position = Vec2::new(-10.0, 0.0);
            arena.players.get_mut(&2).unwrap().avatar.position = Vec2::ZERO;
            // 2 runs up at 8 m/s; 1 stands still.
            let up = ArenaInput { move_y: 127, ..ArenaInput::default() }.to_bytes();
            for t in 1..=20 {
                arena.input(2, &up);
                arena.tick(t, dt);
            }
            // 1 aims at where 2 was at tick 5 (2 is 2 m further on by now).
            let seen = arena.history.get(5).unwrap().iter().find(|(id, _)| *id == 2).unwrap().1;
            let aim = ArenaInput::aim_from_radians((seen - Vec2::new(-10.0, 0.0)).to_angle());
            let rail = ArenaInput { aim, rail: true, ..ArenaInput::default() }.to_bytes();
            let mut health = Vec::new();
            for t in 21..=22 {
                arena.input_viewed(1, &rail, view);
                arena.input(2, &up);
                arena.tick(t, dt);
                health.push(arena.players[&2].avatar.health);
            }
            health
        };
        assert_eq!(run(Some(ViewTime::at(5))), [100 - RAIL_DAMAGE; 2], "hit where 2 was at tick 5, once: cooldown");
        assert_eq!(run(Some(ViewTime::between(4, 6, 0.5))), [100 - RAIL_DAMAGE; 2], "and in a blend of 4 and 6");
        assert_eq!(run(None), [100, 100], "judged in the present, the same beam misses");
        assert_eq!(run(Some(ViewTime::at(15))), [100, 100], "and in a later view");
    }

    /// A player who comes back (the same client id) within the window gets its score back;
    /// someone else in its slot, or it after the window, starts from zero.
    #[test]
    fn a_returning_player_keeps_its_score() {
        let dt = Duration::from_secs_f64(1.0 / 60.0);
        let who = |client_id| JoinInfo::new(client_id, [0; volley::protocol::netcode::USER_DATA_BYTES]);
        let mut arena = Arena::new();
        arena.join_with(1, &who(77));
        arena.players.get_mut(&1).unwrap().avatar.score = 5;
        arena.players.get_mut(&1).unwrap().avatar.deaths = 2;
        arena.leave(1);
        arena.join_with(1, &who(78));
        assert_eq!(arena.scoreboard(), [(1, 0, 0)], "another client in the same slot starts afresh");
        arena.join_with(2, &who(77));
        assert_eq!(arena.players[&2].avatar.score, 5, "the same client, in another slot, has its score back");
        assert_eq!(arena.players[&2].avatar.deaths, 2);
        arena.leave(2);
        for t in 1..=(RETURN_WINDOW as u32 + 2) * 60 {
            arena.tick(t, dt);
        }
        arena.join_with(3, &who(77));
        assert_eq!(arena.players[&3].avatar.score, 0, "after the window it is forgotten");
        assert!(arena.departed.is_empty());
    }

    /// A rail asked for while dead is not fired on respawn.
    #[test]
    fn the_dead_keep_no_rail_request() {
        let mut arena = Arena::new();
        arena.join(1);
        arena.players.get_mut(&1).unwrap().avatar.alive = false;
        arena.players.get_mut(&1).unwrap().respawn_in = 0.05;
        let rail = ArenaInput { rail: true, ..ArenaInput::default() }.to_bytes();
        arena.input_viewed(1, &rail, None);
        arena.tick(1, Duration::from_secs_f64(1.0 / 60.0));
        assert!(arena.players[&1].rail.is_none());
    }

    /// The grid search picks the same entities as scoring every entity would.
    #[test]
    fn nearby_matches_brute_force() {
        let schema = schema();
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32
        };
        for round in 0..20 {
            let avatars = [5, 40, 64, 65, 300][round % 5];
            let mut b = SnapshotBuilder::new(&schema, round as u32 + 1);
            let mut all = Vec::new();
            for id in 0..avatars {
                let p = Vec2::new(rand() * 100.0 - 50.0, rand() * 100.0 - 50.0);
                b.insert(id, &Avatar { position: p, aim: 0.0, health: 100, score: 0, deaths: 0, alive: true }).unwrap();
            }
            for k in 0..avatars {
                let p = Vec2::new(rand() * 100.0 - 50.0, rand() * 100.0 - 50.0);
                b.insert(SHOT_ID_BASE + k, &Shot { position: p, heading: 0.0 }).unwrap();
            }
            let world = b.finish().unwrap();
            for e in world.iter() {
                all.push(e.id);
            }
            let nearby = Nearby { schema: schema.clone(), positions: std::sync::Mutex::new(None) };
            let grid = nearby.positions(&world);
            for player in [0, avatars / 2, avatars - 1] {
                let mut got = Vec::new();
                nearby.interest(&world, player, &mut got);
                assert!(got.windows(2).all(|w| w[0].index < w[1].index), "ascending by index, no repeats");
                // Brute force: every entity scored, the best MAX_VISIBLE kept.
                let me = grid.grid.position(world.find(player).unwrap() as u32).unwrap();
                let mut want: Vec<(u32, f32)> = (0..grid.grid.len())
                    .filter_map(|i| {
                        let p = grid.grid.position(i as u32).unwrap();
                        let d2 = if all[i] == player { 0.0 } else { me.distance_squared(p) };
                        (grid.avatar[i] || d2 <= VIEW_RADIUS * VIEW_RADIUS).then_some((i as u32, priority(d2)))
                    })
                    .collect();
                want.sort_by(|a, b| b.1.total_cmp(&a.1));
                want.truncate(MAX_VISIBLE);
                // Far avatars' priorities can tie in f32: compare the priorities chosen, which
                // is what the choice depends on.
                let mut want: Vec<f32> = want.into_iter().map(|(_, p)| p).collect();
                let mut got: Vec<f32> = got.iter().map(|x| x.priority).collect();
                want.sort_by(f32::total_cmp);
                got.sort_by(f32::total_cmp);
                assert_eq!(got, want, "round {round}, player {player}");
            }
        }
    }
}
