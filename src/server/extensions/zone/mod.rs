//! Zones: one map split among several server processes (see `docs/zones.md`). A zone server
//! runs the part of the map its [`ZoneLayout`] gives it in an ordinary world, and shares
//! what stands near its borders with the neighbouring zones over a message bus; what its
//! neighbours share with it is shown to its players, read-only, beside its own entities.
//!
//! [`ZoneOptions::start`] makes a running world a zone. It taps the world's
//! snapshots and starts a second world, the *border world*, which every player of the
//! server watches: it holds the newest border entities each neighbour sent, and the
//! ordinary merge puts them into each player's snapshot, with one budget and one priority
//! order across both. What comes back is a [`ZoneLink`], the bus's side of it: a bus shell
//! (the `volley-zones` crate runs one on NATS) takes the frames to publish from
//! [`ZoneLink::next_frames`] and hands what it receives to [`ZoneLink::handle_frame`]. The
//! link does the work (picking the border entities, encoding, decoding); the shell only
//! moves bytes, so the same code runs over NATS, in memory and in the stepper.
//!
//! A neighbour that goes quiet (its process gone, or the bus down) has its entities removed
//! after [`ZoneOptions::fade_after`], counted; they return with its next frame.
//!
//! The game gives the zone what only it knows ([`ZoneGame`]): where an entity stands, where
//! a player stands, and how far players see. It hands a player whose avatar crossed into a
//! neighbour's region over through the link's [`ZoneExit`] ([`ZoneLink::exit`], kept by the
//! world from [`World::started`](crate::server::World::started)): the zone is an extension on the world, a [`Tap`](crate::server::Tap), and
//! holds, lets go and redirects the player through the taps' [`Players`](crate::server::Players) hook, like any
//! extension may; nothing of it is on [`World`](crate::server::World) or the outbox.
//!
//! Entity ids: a zone game keeps its ids below `1 << `[`BORDER_ID_BITS`] (131 072). Zones
//! number their entities on their own, so two neighbours may both have an entity 7; the
//! border world tells them apart by showing each neighbour's entities with the neighbour's
//! place in the zone's list of neighbours above those bits ([`border_id`](crate::protocol::zone::border_id)).
//!
//! [`BORDER_ID_BITS`]: crate::protocol::zone::BORDER_ID_BITS

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use glam::Vec2;

use crate::server::game::spatial::Grid;

use crate::protocol::snapshot::{EntityRef, Interest, Schema, WorldSnapshot};
use crate::protocol::zone::handoff::{Arrivals, Departures};
use crate::protocol::zone::{BorderEncoder, BorderFrame, ZoneId, ZoneLayout};
use crate::server::game::world::{PlayerId, SpawnError, TokenKeys, WorldId, WorldOptions, WorldRef, Worlds};

pub use crate::protocol::zone::ZoneCounters;

mod border;
mod exit;
mod link;
mod tap;
#[cfg(test)]
mod tests;
pub(crate) use border::BorderWorld;
pub use exit::{Refused, ZoneExit};
pub use link::{FrameRefused, OutFrame, RELEVANCY_TIMED_EVERY, ZoneInbox, ZoneLink, ZoneTick};
pub(crate) use tap::{Hidden, Shown, ZoneTap};

/// Snapshots waiting for the bus shell to pick their border entities (a twentieth of a
/// second at 60 Hz): a shell further behind loses the oldest, counted.
pub const ZONE_QUEUE: usize = 4;

/// How a handoff ended, for the zone's tap: the connect token for the new zone
/// (accepted), or why the player stays.
#[derive(Debug, Clone)]
struct HandoffEnd {
    player: PlayerId,
    token: Result<Vec<u8>, String>,
}

/// What a zone needs to know of the game.
///
/// ```
/// use glam::Vec2;
/// use volley::protocol::snapshot::{EntityRef, WorldSnapshot};
/// use volley::server::PlayerId;
/// use volley::server::zone::ZoneGame;
///
/// /// Every entity's first two words are its position in whole units.
/// struct Dots;
/// impl ZoneGame for Dots {
///     fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
///         Some(Vec2::new(*e.words.first()? as f32, *e.words.get(1)? as f32))
///     }
///     fn view_radius(&self) -> f32 {
///         30.0
///     }
/// }
/// ```
pub trait ZoneGame: Send + Sync + 'static {
    /// Where an entity stands, read from its replicated state (`None`: it has no place, and
    /// is never shared with a neighbour).
    fn position(&self, entity: EntityRef<'_>) -> Option<Vec2>;

    /// How far a player sees: a border entity farther than this from the player is not
    /// shown to it. The layout's margin should be at least this, or players near a border
    /// miss what their neighbours did not send.
    fn view_radius(&self) -> f32;

    /// Where `player` stands, in its zone's newest snapshot `home`. By default the
    /// position of the entity whose id is the player's id (as the reference game numbers
    /// avatars); `None` shows the player no border entities.
    fn viewer(&self, home: &WorldSnapshot, player: PlayerId) -> Option<Vec2> {
        home.get(home.find(player)?).and_then(|e| self.position(e))
    }

    /// The border entities `player` sees, into `out` by ascending index of
    /// [`BorderView::snapshot`] (a [`Relevancy`](crate::server::Relevancy) for the border world, which knows where the
    /// player stands from `home`). By default those within [`ZoneGame::view_radius`] of
    /// [`ZoneGame::viewer`], nearer ones first in priority (2 at the player, 1 at the radius).
    ///
    /// Called for every player at every snapshot: the view gives each border entity's place,
    /// read with [`ZoneGame::position`] once per border snapshot for all players. Where the
    /// border entities spread over many view radii (a long border), it searches the cells
    /// around the player ([`BorderView::within`]), so a player far from the border costs a
    /// few empty cells; where they stand within a few (small zones, where most of a zone is
    /// border), one pass over them all costs less, and that is what it does.
    fn border_interest(
        &self,
        home: &WorldSnapshot,
        border: &BorderView<'_>,
        player: PlayerId,
        out: &mut Vec<Interest>,
    ) {
        out.clear();
        let Some(me) = self.viewer(home, player) else { return };
        let radius = self.view_radius();
        let r2 = radius * radius;
        let per = 1.0 / r2.max(f32::MIN_POSITIVE);
        if border.is_indexed() {
            out.extend(border.within(me, radius).map(|(p, d2)| Interest::new(p.index, 2.0 - d2 * per)));
            out.sort_unstable_by_key(|i| i.index);
            return;
        }
        // Without a branch: every entity is written, and the next overwrites it unless it
        // was within the radius (which side of the radius an entity falls is a coin toss
        // the processor would often guess wrong).
        let placed = border.placed();
        out.resize(placed.len(), Interest::new(0, 0.0));
        let mut kept = 0;
        for p in placed {
            let d2 = p.position.distance_squared(me);
            if let Some(slot) = out.get_mut(kept) {
                *slot = Interest::new(p.index, 2.0 - d2 * per);
            }
            kept += usize::from(d2 <= r2);
        }
        out.truncate(kept);
    }
}

/// A border entity with a place: its index in the border world's snapshot, and where it
/// stands ([`ZoneGame::position`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    /// Its index in [`BorderView::snapshot`].
    pub index: u32,
    /// Where it stands.
    pub position: Vec2,
}

/// The border entities a player may be shown ([`ZoneGame::border_interest`]): the border
/// world's snapshot, the place of each of its entities that has one, and a spatial index of
/// those places ([`Grid`], cells as wide as [`ZoneGame::view_radius`]), built once per border
/// snapshot for every player's query.
#[derive(Debug, Clone, Copy)]
pub struct BorderView<'a> {
    snapshot: &'a WorldSnapshot,
    places: &'a BorderPlaces,
}

impl<'a> BorderView<'a> {
    /// The border world's snapshot (every neighbour's border entities).
    pub fn snapshot(&self) -> &'a WorldSnapshot {
        self.snapshot
    }

    /// The entities that have a place, ascending by index.
    pub fn placed(&self) -> &'a [Placed] {
        &self.places.placed
    }

    /// The placed entities within `radius` of `at`, each with its squared distance, in no
    /// particular order: searched in the index's cells around `at` when the view has one
    /// ([`is_indexed`](Self::is_indexed)), else over every placed entity.
    pub fn within(&self, at: Vec2, radius: f32) -> impl Iterator<Item = (Placed, f32)> + 'a {
        let placed: &'a [Placed] = &self.places.placed;
        let r2 = radius * radius;
        let indexed = self
            .places
            .grid
            .as_ref()
            .map(|g| g.near(at, radius).filter_map(|n| Some((*placed.get(n.item as usize)?, n.distance_squared))));
        let scanned = indexed.is_none().then(|| {
            placed.iter().map(move |p| (*p, p.position.distance_squared(at))).filter(move |(_, d2)| *d2 <= r2)
        });
        indexed.into_iter().flatten().chain(scanned.into_iter().flatten())
    }

    /// Whether the places have a spatial index ([`Grid`], cells as wide as
    /// [`ZoneGame::view_radius`]): only when there are over 128 of them, spread so that a
    /// query around a player (the 3 × 3 cells around its own) reads at most a quarter of the
    /// cells they fill (a 1 km border 40 m deep: 3 of 25; a 50 m zone's: all 4 of them).
    pub fn is_indexed(&self) -> bool {
        self.places.grid.is_some()
    }
}

/// Border entities with a place above which a border view may be indexed
/// ([`BorderView::is_indexed`]).
const INDEXED_PLACES: usize = 128;

/// The places of one border snapshot's entities, and their grid when it pays (item `i` is
/// `placed[i]`).
#[derive(Debug)]
struct BorderPlaces {
    placed: Box<[Placed]>,
    grid: Option<Grid>,
}

impl BorderPlaces {
    /// The places of `world`'s entities that have one, as `game` reads them.
    fn of(game: &dyn ZoneGame, world: &WorldSnapshot) -> Self {
        let placed = world
            .iter()
            .enumerate()
            .filter_map(|(index, e)| Some(Placed { index: index as u32, position: game.position(e)? }))
            .collect();
        Self::new(placed, game.view_radius())
    }

    /// The places, in a grid over the rectangle they span in cells of side `cell` when they
    /// spread over enough of them (see [`BorderView::is_indexed`]).
    fn new(placed: Box<[Placed]>, cell: f32) -> Self {
        let finite = placed.iter().map(|p| p.position).filter(|p| p.is_finite());
        let (min, max) = finite
            .fold(None, |b: Option<(Vec2, Vec2)>, p| Some(b.map_or((p, p), |(lo, hi)| (lo.min(p), hi.max(p)))))
            .unwrap_or_default();
        // The cells the places fill, and those a query around a player reads of them.
        let cells = ((max - min) / cell).ceil().max(Vec2::ONE);
        let read = cells.min(Vec2::splat(3.0));
        let spread = cell.is_finite() && cell > 0.0 && read.x * read.y * 4.0 <= cells.x * cells.y;
        let grid = (placed.len() > INDEXED_PLACES && spread).then(|| {
            let mut grid = Grid::new(min, max, cell);
            for p in &placed {
                grid.push(p.position);
            }
            grid
        });
        Self { placed, grid }
    }
}

/// How a world runs as a zone.
#[derive(Clone)]
pub struct ZoneOptions {
    /// The map's zones (the same on every zone server).
    pub layout: ZoneLayout,
    /// This server's zone.
    pub me: ZoneId,
    /// What the game knows.
    pub game: Arc<dyn ZoneGame>,
    /// A neighbour silent this long has its entities removed until it speaks again.
    pub fade_after: Duration,
    /// Where this zone's players connect (its public game address): a zone without one
    /// refuses every handoff to it.
    pub public_addr: Option<std::net::SocketAddr>,
    /// How long a handoff waits for the new zone's answer before the player stays.
    pub handoff_timeout: Duration,
    /// How long an accepted handoff waits for its player to connect (a connect token's life).
    pub arrival_wait: Duration,
    /// Accepted handoffs waiting for their players, at most.
    pub max_arrivals: usize,
    /// Publish the zone's whole state every tick ([`StateFrame`](crate::protocol::zone::StateFrame), on the bus shell's state
    /// subject) for observers of the whole map, such as the global oracle of `volley run
    /// --zones N --oracle`. Off by default: it codes a whole snapshot a tick.
    pub publish_state: bool,
}

impl std::fmt::Debug for ZoneOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZoneOptions")
            .field("layout", &self.layout)
            .field("me", &self.me)
            .field("fade_after", &self.fade_after)
            .finish_non_exhaustive()
    }
}

impl ZoneOptions {
    /// Zone `me` of `layout`; neighbours fade after half a second of silence; handoffs wait
    /// 100 ms for an answer; no handoffs in until [`ZoneOptions::public_addr`] is set.
    pub fn new(layout: ZoneLayout, me: ZoneId, game: Arc<dyn ZoneGame>) -> Self {
        Self {
            layout,
            me,
            game,
            fade_after: Duration::from_millis(500),
            public_addr: None,
            handoff_timeout: Duration::from_millis(100),
            arrival_wait: Duration::from_secs(10),
            max_arrivals: 4096,
            publish_state: false,
        }
    }
}

/// Players being handed off that wait for the bus shell to offer them (a shell further
/// behind refuses the handoff at once: the player stays).
pub const DEPARTURE_QUEUE: usize = 256;

/// A player to offer to a neighbour: the bus shell sends `offer` to zone `to` and gives the
/// answer to [`ZoneInbox::end_handoff`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departing {
    /// The player.
    pub player: PlayerId,
    /// The zone it is offered to.
    pub to: ZoneId,
    /// The encoded [`Offer`](crate::protocol::zone::handoff::Offer).
    pub offer: bytes::Bytes,
}

/// Handoffs a zone's world may ask for in one tick, at most ([`ZoneExit::hand_off`]): more
/// are refused.
pub const MAX_ASKED_HANDOFFS: usize = 4096;

/// Refused handoffs kept for the game, at most ([`ZoneExit::take_refused`]): older ones
/// are dropped.
pub const MAX_REFUSED_KEPT: usize = 1024;

/// How long after a refused handoff another of the same player is ignored.
pub const HANDOFF_COOLDOWN: Duration = Duration::from_secs(1);

/// Builds a zone's border world, and then (given the border world's reference) its link and
/// the tap on its world; [`ZoneOptions::start`] starts them.
pub(crate) fn parts(
    schema: Arc<Schema>,
    options: &ZoneOptions,
    fade_ticks: u64,
    keys: TokenKeys,
) -> (BorderWorld, impl FnOnce(WorldRef<BorderFrame>) -> (ZoneLink, ZoneTap)) {
    let newest = Arc::new(RwLock::new(None));
    let counters = Arc::new(ZoneCounters::default());
    let hidden = Hidden::default();
    let mut world =
        BorderWorld::new((*schema).clone(), options, newest.clone(), fade_ticks, counters.clone(), hidden.clone());
    let shown = options.publish_state.then(Shown::default);
    world.shown = shown.clone();
    let (me, layout, game) = (options.me, options.layout.clone(), options.game.clone());
    let (public_addr, handoff_timeout) = (options.public_addr, options.handoff_timeout);
    let (arrival_wait, max_arrivals) = (options.arrival_wait, options.max_arrivals);
    let publish_state = options.publish_state;
    let build = move |border| {
        let (tx, rx) = tokio::sync::mpsc::channel(ZONE_QUEUE);
        let (departing, departures) = tokio::sync::mpsc::channel(DEPARTURE_QUEUE);
        let neighbours = layout.neighbours(me).into();
        let inbox = ZoneInbox {
            me,
            neighbours,
            fingerprint: schema.fingerprint(),
            schema: schema.clone(),
            border,
            counters: counters.clone(),
            public_addr: Arc::new(RwLock::new(public_addr)),
            arrivals: Arc::new(Mutex::new(Arrivals::new(arrival_wait, max_arrivals))),
            departures: Arc::new(Mutex::new(Departures::new(handoff_timeout))),
            ended: Arc::default(),
            clock: std::time::Instant::now(),
        };
        let tap = ZoneTap {
            inbox: inbox.clone(),
            newest,
            tx,
            publish_state,
            departing,
            counters: counters.clone(),
            keys,
            token_life: arrival_wait,
            who: BTreeMap::new(),
            exit: ZoneExit::default(),
            leaving: BTreeMap::new(),
            cooldown: BTreeMap::new(),
            arrived: BTreeMap::new(),
            hidden,
            shown,
        };
        let departures = Some(departures);
        let encoder = BorderEncoder::new(layout.clone(), me, schema.clone());
        let exit = tap.exit.clone();
        let link = ZoneLink {
            me,
            layout,
            game,
            schema,
            snapshots: rx,
            departures,
            inbox,
            counters,
            handoff_timeout,
            encoder,
            exit,
        };
        (link, tap)
    };
    (world, build)
}

impl ZoneOptions {
    /// Makes world `source` of `worlds` zone `self.me` of a map split among several servers (see
    /// [`zone`](super::zone)): its snapshots are tapped for the neighbours, and a border world
    /// of kind `border.kind` (declared in the server's world kinds, like any world's) starts,
    /// watched by every player, showing what the neighbours share. The returned
    /// [`ZoneLink`](ZoneLink) is the bus's side: hand it to a bus shell (the
    /// `volley-zones` crate's, on NATS).
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use volley::prelude::*;
    /// # use volley::protocol::zone::ZoneLayout;
    /// # use volley::server::zone::{ZoneGame, ZoneOptions};
    /// # use volley::server::{WorldId, WorldOptions, Worlds};
    /// # fn f(worlds: &Worlds, game: Arc<dyn ZoneGame>) -> Result<(), Box<dyn std::error::Error>> {
    /// let layout = ZoneLayout::grid(glam::Vec2::ZERO, glam::Vec2::splat(1000.0), 2, 2, 60.0)?;
    /// let link = ZoneOptions::new(layout, 0, game).start(worlds, WorldId::ENTRY, WorldOptions::new("border"))?;
    /// # let _ = link; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Worlds::spawn`] for the border world; [`SpawnError::Zone`] when `zone.me` is not
    /// in the layout.
    pub fn start(self, worlds: &Worlds, source: WorldId, border: WorldOptions) -> Result<ZoneLink, SpawnError> {
        if usize::from(self.me) >= self.layout.len() {
            return Err(SpawnError::Zone(format!("zone {} is not in a layout of {}", self.me, self.layout.len())));
        }
        let neighbours = self.layout.neighbours(self.me).len();
        if neighbours > crate::protocol::zone::MAX_NEIGHBOURS {
            let most = crate::protocol::zone::MAX_NEIGHBOURS;
            return Err(SpawnError::Zone(format!("zone {} has {neighbours} neighbours; at most {most}", self.me)));
        }
        let border = border.watched_by_everyone();
        let stride = worlds.check(&border, worlds.schema())?;
        let hz = f64::from(worlds.server_hz()) / f64::from(stride);
        let fade_ticks = (self.fade_after.as_secs_f64() * hz).ceil() as u64;
        let (world, build) = parts(worlds.schema().clone(), &self, fade_ticks, worlds.keys());
        let border = worlds.spawn_handling(border, world)?;
        let (link, tap) = build(border);
        worlds.tap(source, Box::new(tap))?;
        worlds.host().add_zone(link.counters().clone());
        Ok(link)
    }
}
