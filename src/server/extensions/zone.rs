//! Zones: one map split among several server processes (see `docs/zones.md`). A zone server
//! runs the part of the map its [`ZoneLayout`] gives it in an ordinary world, and shares
//! what stands near its borders with the neighbouring zones over a message bus; what its
//! neighbours share with it is shown to its players, read-only, beside its own entities.
//!
//! [`Worlds::zone`](crate::server::Worlds::zone) makes a running world a zone. It taps the world's
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
//! world from [`World::started`]): the zone is an extension on the world, a [`Tap`], and
//! holds, lets go and redirects the player through the taps' [`Players`] hook, like any
//! extension may; nothing of it is on [`World`] or the outbox.
//!
//! Entity ids: a zone game keeps its ids below `1 << `[`BORDER_ID_BITS`] (131 072). Zones
//! number their entities on their own, so two neighbours may both have an entity 7; the
//! border world tells them apart by showing each neighbour's entities with the neighbour's
//! place in the zone's list of neighbours above those bits ([`border_id`]).
//!
//! [`BORDER_ID_BITS`]: crate::protocol::zone::BORDER_ID_BITS

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use glam::Vec2;

use crate::server::game::spatial::Grid;

use crate::protocol::recording::Event;
use crate::protocol::snapshot::{EntityRef, Interest, Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::zone::handoff::{AlreadyLeaving, Answer, Arrivals, Departures, Offer, Outcome};
use crate::protocol::zone::{
    BorderEncoder, BorderError, BorderFrame, CodedFrame, StateFrame, ZoneId, ZoneLayout, border_id, split_border_id,
};
use crate::server::game::world::{
    Handles, JoinInfo, PlayerId, Players, Relevancy, SpawnError, Tap, TokenKeys, World, WorldId, WorldOptions,
    WorldRef, Worlds,
};
use volley_util::cpu::{cpu_since, thread_cpu_time};

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
    /// [`BorderView::snapshot`] (a [`Relevancy`] for the border world, which knows where the
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
    /// Publish the zone's whole state every tick ([`StateFrame`], on the bus shell's state
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
    /// The encoded [`Offer`].
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

/// The game's side of a zone's handoffs ([`ZoneLink::exit`]): a world that runs as a zone
/// keeps it and hands its players to neighbouring zones through it. Cheap to clone.
///
/// ```
/// # use volley::prelude::*;
/// # use volley::protocol::zone::ZoneLayout;
/// # use volley::server::zone::ZoneExit;
/// # struct Game { layout: ZoneLayout, me: u16, exit: Option<ZoneExit>, avatars: Vec<(PlayerId, glam::Vec2)> }
/// # impl Game {
/// fn tick(&mut self, _tick: u32, _dt: std::time::Duration) {
///     let Some(exit) = &self.exit else { return };
///     for refused in exit.take_refused() {
///         tracing::debug!(player = refused.player, why = %refused.why, "stays here");
///     }
///     for (player, at) in &self.avatars {
///         match self.layout.owner(*at) {
///             Some(zone) if zone != self.me => exit.hand_off(*player, zone, at.x.to_le_bytes().to_vec()),
///             _ => {}
///         }
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ZoneExit {
    shared: Arc<Mutex<ExitQueue>>,
}

/// What a [`ZoneExit`] holds between the game and the zone's tap.
#[derive(Debug, Default)]
struct ExitQueue {
    asked: Vec<(PlayerId, ZoneId, Vec<u8>)>,
    refused: std::collections::VecDeque<Refused>,
}

/// A handoff that did not happen ([`ZoneExit::take_refused`]): the player stays, its held
/// inputs applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The player.
    pub player: PlayerId,
    /// The zone it was to go to.
    pub to: ZoneId,
    /// Why not: the new zone refused it, did not answer in time, or the bus is behind.
    pub why: String,
}

impl ZoneExit {
    /// Hands `player` (one of this zone's) to the neighbouring zone `to`, with `state`: what
    /// the game there needs to go on with it (its avatar's place, health, inventory: at most
    /// [`MAX_STATE_BYTES`](crate::protocol::zone::handoff::MAX_STATE_BYTES)). Call it when
    /// the player's avatar crosses into `to`'s region (every tick it stays there is fine).
    ///
    /// From the next tick on the player's inputs are held, not applied, while the new zone
    /// is asked (at most the zone's handoff timeout, 100 ms by default). If it accepts, the
    /// player leaves this world ([`World::leave`]), its client is given a connect token for
    /// the new zone's server and goes on there by itself, re-sending the inputs held here,
    /// and the new zone's [`World::join_with`] gets `state` in [`JoinInfo::handoff`]. If it
    /// refuses or does not answer, the player stays: the held inputs are applied, in order,
    /// and [`ZoneExit::take_refused`] says why. A second handoff of the same player while
    /// one is under way, or within [`HANDOFF_COOLDOWN`] of a refusal, is ignored.
    pub fn hand_off(&self, player: PlayerId, to: ZoneId, state: impl Into<Vec<u8>>) {
        let Ok(mut q) = self.shared.lock() else { return };
        if q.asked.len() < MAX_ASKED_HANDOFFS {
            q.asked.push((player, to, state.into()));
        } else {
            q.refuse(Refused { player, to, why: "too many handoffs asked in one tick".into() });
        }
    }

    /// The handoffs refused since the last call (the newest [`MAX_REFUSED_KEPT`]).
    pub fn take_refused(&self) -> Vec<Refused> {
        self.shared.lock().map(|mut q| q.refused.drain(..).collect()).unwrap_or_default()
    }

    fn take_asked(&self) -> Vec<(PlayerId, ZoneId, Vec<u8>)> {
        self.shared.lock().map(|mut q| std::mem::take(&mut q.asked)).unwrap_or_default()
    }

    fn refuse(&self, r: Refused) {
        if let Ok(mut q) = self.shared.lock() {
            q.refuse(r);
        }
    }
}

impl ExitQueue {
    fn refuse(&mut self, r: Refused) {
        if self.refused.len() >= MAX_REFUSED_KEPT {
            self.refused.pop_front();
        }
        self.refused.push_back(r);
    }
}

pub use crate::protocol::zone::ZoneCounters;

/// Adds the thread's CPU time since `began` (a [`thread_cpu_time`] reading) to `counter`, in
/// nanoseconds.
fn add_spent(counter: &AtomicU64, began: Duration) {
    counter.fetch_add(cpu_since(began).as_nanos() as u64, Ordering::Relaxed);
}

/// One call of the border relevancy in this many is timed ([`ZoneCounters::relevancy_ns`]).
pub const RELEVANCY_TIMED_EVERY: u64 = 8;

/// One frame to publish: to which neighbour, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFrame {
    /// The neighbour.
    pub to: ZoneId,
    /// The tick it is of.
    pub tick: u32,
    /// The encoded [`BorderFrame`].
    pub bytes: bytes::Bytes,
}

/// What a zone's bus shell publishes for one tick ([`ZoneLink::next_tick`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneTick {
    /// A frame for each neighbour.
    pub frames: Vec<OutFrame>,
    /// The zone's whole state, when it publishes it (the bytes of a [`StateFrame`]).
    pub state: Option<bytes::Bytes>,
}

/// One tick of the zone's world as its tap hands it to the link.
#[derive(Debug)]
pub(crate) struct Ticked {
    snapshot: Arc<WorldSnapshot>,
    /// When it ticked, microseconds since the Unix epoch.
    unix_micros: u64,
    /// Who each player is (player id, client id), when the zone publishes its state.
    players: Option<Vec<(u32, u64)>>,
    /// The oldest and newest frame of each neighbour its players' views may merge at this
    /// tick, when the zone publishes its state ([`StateFrame::held`]).
    held: Vec<(ZoneId, u32, u32)>,
}

/// Why a received frame was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameRefused {
    /// The bytes are not a usable frame.
    #[error(transparent)]
    Border(#[from] BorderError),
    /// It comes from a zone that is not this zone's neighbour (or from this zone).
    #[error("border frame from zone {0}, which is not a neighbour")]
    NotNeighbour(ZoneId),
    /// The border world is behind (its queue is full) or stopped.
    #[error("the border world did not take the frame")]
    Behind,
}

/// The bus's side of a zone (see the module docs): frames to publish out, frames received in.
#[derive(Debug)]
pub struct ZoneLink {
    me: ZoneId,
    layout: ZoneLayout,
    game: Arc<dyn ZoneGame>,
    schema: Arc<Schema>,
    snapshots: tokio::sync::mpsc::Receiver<Ticked>,
    departures: Option<tokio::sync::mpsc::Receiver<Departing>>,
    inbox: ZoneInbox,
    counters: Arc<ZoneCounters>,
    handoff_timeout: Duration,
    encoder: BorderEncoder,
    exit: ZoneExit,
}

impl std::fmt::Debug for dyn ZoneGame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZoneGame")
    }
}

impl ZoneLink {
    /// This zone.
    pub fn me(&self) -> ZoneId {
        self.me
    }

    /// The layout.
    pub fn layout(&self) -> &ZoneLayout {
        &self.layout
    }

    /// The border world (every player watches it).
    pub fn border_world(&self) -> WorldId {
        self.inbox.border.id()
    }

    /// The zone's figures.
    pub fn counters(&self) -> &Arc<ZoneCounters> {
        &self.counters
    }

    /// How long a handoff waits for the new zone's answer.
    pub fn handoff_timeout(&self) -> Duration {
        self.handoff_timeout
    }

    /// The next tick's frames to publish, one per neighbour (an empty one too: it tells the
    /// neighbour this zone is alive), picked and encoded here, off the tick's path. `None`
    /// once the zone's world has stopped.
    pub async fn next_frames(&mut self) -> Option<Vec<OutFrame>> {
        Some(self.next_tick().await?.frames)
    }

    /// [`ZoneLink::next_frames`] without waiting: the frames of the oldest tick not yet
    /// taken, if there is one (for in-memory buses and the stepper).
    pub fn try_next_frames(&mut self) -> Option<Vec<OutFrame>> {
        Some(self.try_next_tick()?.frames)
    }

    /// The next tick's frames for the neighbours, and, when the zone publishes its state
    /// ([`ZoneOptions::publish_state`]), its [`StateFrame`]. `None` once the zone's world has
    /// stopped.
    pub async fn next_tick(&mut self) -> Option<ZoneTick> {
        let t = self.snapshots.recv().await?;
        Some(self.tick_of(&t))
    }

    /// [`ZoneLink::next_tick`] without waiting.
    pub fn try_next_tick(&mut self) -> Option<ZoneTick> {
        let t = self.snapshots.try_recv().ok()?;
        Some(self.tick_of(&t))
    }

    fn tick_of(&mut self, t: &Ticked) -> ZoneTick {
        let frames = self.frames_of(&t.snapshot);
        let state = t.players.as_ref().and_then(|players| {
            StateFrame::encode(self.me, t.unix_micros, players, &t.held, &t.snapshot, &self.schema)
                .map_err(|e| tracing::warn!(zone = self.me, error = %e, "the zone's state could not be encoded"))
                .ok()
                .map(bytes::Bytes::from)
        });
        ZoneTick { frames, state }
    }

    /// The frames of one snapshot of the zone's world (its ticks in increasing order).
    pub fn frames_of(&mut self, snapshot: &Arc<WorldSnapshot>) -> Vec<OutFrame> {
        let began = thread_cpu_time();
        let game = &self.game;
        let coded = self.encoder.encode(snapshot, |e| game.position(e));
        let mut out = Vec::with_capacity(coded.len());
        for CodedFrame { to, entities, bytes } in coded {
            match bytes {
                Ok(bytes) => {
                    self.counters.frames_out.fetch_add(1, Ordering::Relaxed);
                    self.counters.entities_out.fetch_add(entities as u64, Ordering::Relaxed);
                    out.push(OutFrame { to, tick: snapshot.tick(), bytes });
                }
                Err(e) => {
                    self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(zone = self.me, to, error = %e, "a border frame could not be encoded");
                }
            }
        }
        add_spent(&self.counters.work_ns, began);
        out
    }

    /// A frame received from the bus ([`ZoneInbox::handle_frame`]).
    ///
    /// # Errors
    /// Why it was not used.
    pub fn handle_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        self.inbox.handle_frame(bytes)
    }

    /// The players the zone's world hands off ([`ZoneExit::hand_off`]),
    /// for the bus shell to offer (taken once: `None` the second time). Each offer's answer,
    /// or why there is none, goes to [`ZoneInbox::end_handoff`].
    pub fn take_departures(&mut self) -> Option<tokio::sync::mpsc::Receiver<Departing>> {
        self.departures.take()
    }

    /// The receiving side, to hand to the bus shell's subscriber task.
    pub fn inbox(&self) -> ZoneInbox {
        self.inbox.clone()
    }

    /// The game's side of the zone's handoffs: its world keeps it and hands players to the
    /// neighbouring zones through it ([`ZoneExit::hand_off`]).
    pub fn exit(&self) -> ZoneExit {
        self.exit.clone()
    }
}

/// The receiving side of a zone's link: cheap to clone, used from any task.
#[derive(Debug, Clone)]
pub struct ZoneInbox {
    me: ZoneId,
    neighbours: Arc<[ZoneId]>,
    schema: Arc<Schema>,
    /// The schema's fingerprint, which every frame's must match.
    fingerprint: u64,
    border: WorldRef<BorderFrame>,
    counters: Arc<ZoneCounters>,
    public_addr: Arc<RwLock<Option<std::net::SocketAddr>>>,
    arrivals: Arc<Mutex<Arrivals>>,
    departures: Arc<Mutex<Departures>>,
    /// Handoffs ended by an answer, for the zone's world at its next tick.
    ended: Arc<Mutex<Vec<Outcome>>>,
    /// The handoffs' clock: offers, arrivals and answers are timed on it.
    clock: std::time::Instant,
}

impl ZoneInbox {
    /// The handoffs' clock now (time since the zone started): the `now` its methods take.
    pub fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// An offer from a neighbour (the bytes of an [`Offer`]) at `now`: the bytes of the
    /// [`Answer`] to send back. Accepted when it is well formed, comes from a neighbour, this
    /// zone has a public address and room for one more arrival.
    pub fn handle_offer(&self, bytes: &[u8], now: Duration) -> Vec<u8> {
        let public_addr = self.public_addr.read().ok().and_then(|a| *a);
        let answer = match (Offer::decode(bytes), public_addr) {
            (Err(e), _) => Answer::Refused { reason: e.to_string() },
            (Ok(o), _) if !self.neighbours.contains(&o.from) => {
                Answer::Refused { reason: format!("zone {} is not a neighbour of zone {}", o.from, self.me) }
            }
            (Ok(_), None) => Answer::Refused { reason: format!("zone {} takes no handoffs", self.me) },
            (Ok(o), Some(addr)) => match self.arrivals.lock() {
                Ok(mut a) => a.handle_offer(o, addr, now),
                Err(_) => Answer::Refused { reason: "internal error".into() },
            },
        };
        let i = usize::from(!matches!(answer, Answer::Accepted { .. }));
        self.counters.handoffs_in[i].fetch_add(1, Ordering::Relaxed);
        if let Answer::Refused { reason } = &answer {
            tracing::info!(zone = self.me, %reason, "a handoff to this zone was refused");
        }
        answer.encode()
    }

    /// Sets where this zone's players connect (when it was not known as the zone started:
    /// a server bound to port 0), so that it takes handoffs.
    pub fn set_public_addr(&self, addr: std::net::SocketAddr) {
        if let Ok(mut a) = self.public_addr.write() {
            *a = Some(addr);
        }
    }

    /// The accepted handoff of the player whose token carries `client_id`, if one waits
    /// (taken: it is given to the game with the player's join).
    pub fn take_arrival(&self, client_id: u64, now: Duration) -> Option<Offer> {
        self.arrivals.lock().ok()?.take(client_id, now)
    }

    /// Starts handing `player` to zone `to` at `now` (one handoff per player at a time).
    ///
    /// # Errors
    /// When it is already being handed off.
    pub fn begin_handoff(&self, player: PlayerId, to: ZoneId, now: Duration) -> Result<(), AlreadyLeaving> {
        match self.departures.lock() {
            Ok(mut d) => d.start(player, to, now),
            Err(_) => Err(AlreadyLeaving(player)),
        }
    }

    /// Whether `player` is being handed off.
    pub fn is_leaving(&self, player: PlayerId) -> bool {
        self.departures.lock().is_ok_and(|d| d.is_leaving(player))
    }

    /// How `player`'s handoff ended at `now`: the new zone's answer (its bytes), or why there
    /// was none (no zone listens, the bus is down: the player stays, as on a timeout).
    /// `None` when no handoff of it was in flight. Counted by outcome.
    pub fn end_handoff(&self, player: PlayerId, answer: Result<&[u8], String>, now: Duration) -> Option<Outcome> {
        let mut d = self.departures.lock().ok()?;
        let outcome = match answer.map(Answer::decode) {
            Ok(Ok(a)) => d.handle_answer(player, &a, now)?,
            Ok(Err(e)) => d.handle_answer(player, &Answer::Refused { reason: e.to_string() }, now)?,
            Err(_) => {
                let to = d.leaving_to(player)?;
                d.forget(player);
                Outcome::TimedOut { player, to }
            }
        };
        drop(d);
        let i = match &outcome {
            Outcome::Accepted { took, .. } => {
                self.counters.handoff_us.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                0
            }
            Outcome::Refused { .. } => 1,
            Outcome::TimedOut { .. } => 2,
        };
        self.counters.handoffs_out[i].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut e) = self.ended.lock()
            && e.len() < DEPARTURE_QUEUE * 4
        {
            e.push(outcome.clone());
        }
        Some(outcome)
    }

    /// The handoffs that waited past the timeout at `now`, ended (the players stay).
    pub fn poll_handoff_timeouts(&self, now: Duration) -> Vec<Outcome> {
        let out = self.departures.lock().map(|mut d| d.poll_timeouts(now)).unwrap_or_default();
        self.counters.handoffs_out[2].fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// A frame received from the bus: decoded and handed to the border world for its next
    /// tick.
    ///
    /// # Errors
    /// Why it was not used (counted in [`ZoneCounters::frames_refused`] or
    /// [`ZoneCounters::frames_dropped`]).
    pub fn handle_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        let began = thread_cpu_time();
        let r = self.take_frame(bytes);
        add_spent(&self.counters.work_ns, began);
        r
    }

    fn take_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        let refused = |e: FrameRefused| {
            self.counters.frames_refused.fetch_add(1, Ordering::Relaxed);
            e
        };
        let frame = BorderFrame::decode_as(bytes, &self.schema, self.fingerprint).map_err(|e| refused(e.into()))?;
        if !self.neighbours.contains(&frame.zone) {
            return Err(refused(FrameRefused::NotNeighbour(frame.zone)));
        }
        self.border.send(frame).map_err(|_| {
            self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
            FrameRefused::Behind
        })?;
        self.counters.frames_in.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// This zone.
    pub fn me(&self) -> ZoneId {
        self.me
    }
}

/// The tap on a zone's world: its newest snapshot for the border relevancy, and every
/// snapshot for the bus shell (bounded: a shell behind loses ticks, counted).
pub(crate) struct ZoneTap {
    pub inbox: ZoneInbox,
    pub newest: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    pub tx: tokio::sync::mpsc::Sender<Ticked>,
    /// Whether each tick's players go with it (for the zone's [`StateFrame`]).
    pub publish_state: bool,
    pub departing: tokio::sync::mpsc::Sender<Departing>,
    pub counters: Arc<ZoneCounters>,
    pub keys: TokenKeys,
    /// How long the token for the new zone may be used to start connecting.
    pub token_life: Duration,
    /// Who each player of the zone's world is (its token's client id and user data): what
    /// an offer for it carries, and what its token for the new zone says.
    pub who: BTreeMap<PlayerId, (u64, [u8; crate::protocol::netcode::USER_DATA_BYTES])>,
    /// The game's side of the handoffs.
    pub exit: ZoneExit,
    /// Players being handed off, and where to.
    pub leaving: BTreeMap<PlayerId, ZoneId>,
    /// Players whose handoff was refused, and until when another is ignored (on the inbox's
    /// clock).
    pub cooldown: BTreeMap<PlayerId, Duration>,
    /// Players handed over to this zone whose first input here has not been applied yet,
    /// with the newest input their old zone applied.
    pub arrived: BTreeMap<PlayerId, u32>,
    /// Border entities not to show (shared with the border world).
    pub hidden: Hidden,
    /// The neighbours' frames the border world's two newest snapshots were made of, when the
    /// zone publishes its state (shared with the border world).
    pub shown: Option<Shown>,
}

/// What the border world's views are made of, for [`StateFrame::held`] (kept only when the
/// zone publishes its state; shared with the border world).
pub(crate) type Shown = Arc<Mutex<ShownFrames>>;

/// See [`Shown`].
#[derive(Debug, Default)]
pub(crate) struct ShownFrames {
    /// The tick of each neighbour's frame in the border world's newest snapshot, and in the
    /// one before (the players' views merge the newest the broadcaster has: it may be the
    /// one before).
    snapshots: [Vec<(ZoneId, u32)>; 2],
    /// The newest frame heard from each neighbour (the border world's next snapshot, which
    /// a view may merge before the zone's next tick, is made of it).
    heard: BTreeMap<ZoneId, u32>,
}

impl ShownFrames {
    /// Each neighbour both of the border world's newest snapshots hold: the older frame of
    /// the two, and the newest heard (a view merged now holds one in between).
    fn held(&self) -> Vec<(ZoneId, u32, u32)> {
        let [newest, before] = &self.snapshots;
        newest
            .iter()
            .filter_map(|(z, t)| {
                let old = before.iter().find(|(b, _)| b == z)?.1.min(*t);
                Some((*z, old, self.heard.get(z).copied().unwrap_or(*t).max(*t)))
            })
            .collect()
    }
}

/// Border entities (border ids) not shown to the zone's players: players handed over to
/// this zone, as their old zone's frames still held them when they joined here. Each goes
/// [`LINGER`] border-world snapshots after the first made from a frame of that zone without
/// it, or [`HIDE_TICKS`] of that zone's ticks past the newest frame it had when it first hid
/// it (the id may have been given to another player there since). At most [`MAX_HIDDEN`].
pub(crate) type Hidden = Arc<RwLock<BTreeMap<u32, Hide>>>;

/// One entry of [`Hidden`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hide {
    /// The old zone's tick it stays hidden until at most (set at the first snapshot).
    until: Option<u32>,
    /// Border-world snapshots made since the old zone's frames lacked it.
    lacking: u8,
}

/// How many border-world snapshots a hidden player stays hidden after the first made without
/// it: the players' views merge the border world's newest snapshot the broadcaster has, which
/// may still be the one before (with the player) when the hide would end at once.
const LINGER: u8 = 2;

/// How many of the old zone's ticks a handed-in player stays hidden at most: its frames in
/// flight when the player joined here (the old zone let go before that) are older.
const HIDE_TICKS: u32 = 4;

/// Handed-in players hidden from the old zone's frames at once, at most.
const MAX_HIDDEN: usize = 1024;

impl ZoneTap {
    /// The connect token, for the player whose token said `who`, to the zone at `server`.
    fn mint(
        &self,
        who: (u64, [u8; crate::protocol::netcode::USER_DATA_BYTES]),
        server: std::net::SocketAddr,
    ) -> Result<Vec<u8>, String> {
        use crate::protocol::netcode::token::{ConnectToken, TokenParams};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
        let mut params = TokenParams::new(self.keys.protocol_id, who.0, server, now.as_secs());
        params.user_data = who.1;
        params.expire_seconds = self.token_life.as_secs().max(1);
        let token = ConnectToken::generate(&params, &self.keys.private_key).map_err(|e| e.to_string())?;
        Ok(token.to_bytes().to_vec())
    }

    /// Offers `player` to zone `to` through the bus shell, with the game's `state` for it.
    fn offer(
        &mut self,
        player: PlayerId,
        to: ZoneId,
        state: Vec<u8>,
        last_applied: Option<u32>,
        now: Duration,
    ) -> Result<(), String> {
        let Some(&(client_id, user_data)) = self.who.get(&player) else {
            return Err("the player is not known to the zone".into());
        };
        let offer = Offer {
            from: self.inbox.me,
            client_id,
            user_data: user_data.to_vec(),
            state,
            last_applied: last_applied.unwrap_or(0),
            inputs: Vec::new(),
            old_id: Some(player),
        };
        offer.check().map_err(|e| e.to_string())?;
        if self.inbox.begin_handoff(player, to, now).is_err() {
            return Err("a handoff of the player is under way".into());
        }
        let departing = Departing { player, to, offer: offer.encode().into() };
        if self.departing.try_send(departing).is_err() {
            if let Ok(mut dep) = self.inbox.departures.lock() {
                dep.forget(player);
            }
            return Err("the zone's bus is behind".into());
        }
        Ok(())
    }

    /// How a handoff's outcome reaches the world: the token for the new zone, or why not.
    fn end_of(&self, outcome: Outcome) -> HandoffEnd {
        match outcome {
            Outcome::Accepted { player, server, .. } => {
                let token = match self.who.get(&player) {
                    Some(who) => self.mint(*who, server),
                    None => Err("the player is not known to the zone".into()),
                };
                if let Err(e) = &token {
                    tracing::error!(zone = self.inbox.me, player, error = %e, "no token for an accepted handoff; the player stays");
                }
                HandoffEnd { player, token }
            }
            Outcome::Refused { player, to, reason } => {
                HandoffEnd { player, token: Err(format!("zone {to} refused: {reason}")) }
            }
            Outcome::TimedOut { player, to } => {
                HandoffEnd { player, token: Err(format!("zone {to} did not answer in time")) }
            }
        }
    }
}

impl Tap for ZoneTap {
    fn joining(&mut self, player: PlayerId, who: &mut JoinInfo) {
        let inbox = &self.inbox;
        self.who.insert(player, (who.client_id, who.user_data));
        if let Some(offer) = inbox.take_arrival(who.client_id, inbox.now()) {
            tracing::debug!(zone = inbox.me, player, from = offer.from, "a player handed over arrived");
            // Its old zone's frames may still hold it for a tick or two: not shown twice.
            let slot = inbox.neighbours.iter().position(|n| *n == offer.from);
            if let (Some(slot), Some(old), Ok(mut h)) = (slot, offer.old_id, self.hidden.write())
                && h.len() < MAX_HIDDEN
            {
                h.insert(border_id(slot, old), Hide::default());
            }
            self.arrived.insert(player, offer.last_applied);
            who.handoff = Some(Arc::new(offer));
            who.origin = crate::server::game::world::Origin::HandedOver;
        }
    }

    fn before_inputs(&mut self, players: &mut Players<'_>) {
        let now = self.inbox.now();
        // The handoffs that ended: an accepted one sends the player on, a failed one lets
        // its held inputs go and tells the game.
        let mut ended = self.inbox.ended.lock().map(|mut e| std::mem::take(&mut *e)).unwrap_or_default();
        ended.extend(self.inbox.poll_handoff_timeouts(now));
        for o in ended {
            let HandoffEnd { player, token } = self.end_of(o);
            let Some(to) = self.leaving.remove(&player) else { continue };
            match token {
                Ok(token) => {
                    players.redirect(player, token);
                }
                Err(why) => {
                    players.release(player);
                    self.cooldown.insert(player, now + HANDOFF_COOLDOWN);
                    self.exit.refuse(Refused { player, to, why });
                }
            }
        }
        // The handoffs the game asked for since.
        for (player, to, state) in self.exit.take_asked() {
            let cooling = self.cooldown.get(&player).is_some_and(|until| now < *until);
            if !players.is_joined(player) || players.is_held(player) || self.leaving.contains_key(&player) || cooling {
                continue;
            }
            self.cooldown.remove(&player);
            match self.offer(player, to, state, players.last_applied(player), now) {
                Ok(()) => {
                    players.hold(player);
                    self.leaving.insert(player, to);
                }
                Err(why) => {
                    self.counters.handoffs_out[1].fetch_add(1, Ordering::Relaxed);
                    self.cooldown.insert(player, now + HANDOFF_COOLDOWN);
                    self.exit.refuse(Refused { player, to, why });
                }
            }
        }
        // Players handed over: did their first input here follow the old zone's newest?
        if !self.arrived.is_empty() {
            let counters = &self.counters;
            self.arrived.retain(|player, last| {
                let Some(seq) = players.first_applied(*player) else { return players.is_joined(*player) };
                let d = seq.wrapping_sub(*last);
                let (lost, repeated) =
                    if d == 0 || d >= 1 << 31 { (0, last.wrapping_sub(seq) + 1) } else { (d - 1, 0) };
                if lost + repeated > 0 {
                    tracing::warn!(player, lost, repeated, "a handed-over player's inputs did not follow on");
                }
                counters.inputs_lost.fetch_add(u64::from(lost), Ordering::Relaxed);
                counters.inputs_repeated.fetch_add(u64::from(repeated), Ordering::Relaxed);
                false
            });
        }
    }

    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        for e in events {
            match e {
                Event::Left { player } => {
                    self.leaving.remove(player);
                    self.cooldown.remove(player);
                    self.arrived.remove(player);
                    let client = self.who.remove(player).map(|w| w.0);
                    tracing::debug!(zone = self.inbox.me, tick, player, client, "a player left the zone's world");
                }
                Event::Joined { player, client_id } => {
                    tracing::debug!(zone = self.inbox.me, tick, player, client_id, "a player joined the zone's world");
                }
                _ => {}
            }
        }
        let Some(snapshot) = snapshot else { return true };
        if let Ok(mut n) = self.newest.write() {
            *n = Some(snapshot.clone());
        }
        // The time and the players only go with a tick whose state is published.
        let (unix_micros, players) = if self.publish_state {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            (now.map_or(0, |d| d.as_micros() as u64), Some(self.who.iter().map(|(p, w)| (*p, w.0)).collect()))
        } else {
            (0, None)
        };
        let held = self.shown.as_ref().and_then(|s| s.lock().ok().map(|s| s.held())).unwrap_or_default();
        match self.tx.try_send(Ticked { snapshot: snapshot.clone(), unix_micros, players, held }) {
            Ok(()) => true,
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            // The link is gone: stop sharing, keep the relevancy's view fresh.
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => true,
        }
    }
}

/// A neighbour's newest frame, and when (in border-world ticks) it came.
struct Heard {
    frame: BorderFrame,
    at: u64,
}

/// The border world: the newest border entities of each neighbour, read-only (see the
/// module docs).
pub(crate) struct BorderWorld {
    pub schema: Schema,
    pub me: ZoneId,
    pub game: Arc<dyn ZoneGame>,
    pub home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    pub fade_ticks: u64,
    pub counters: Arc<ZoneCounters>,
    /// The zone's neighbours: a border entity's id carries its zone's place here.
    neighbours: Vec<ZoneId>,
    heard: BTreeMap<ZoneId, Heard>,
    ticks: u64,
    /// Handed-in players not to show from their old zone's frames.
    hidden: Hidden,
    /// The frames its snapshots were made of, when the zone publishes its state.
    shown: Option<Shown>,
}

impl BorderWorld {
    pub(crate) fn new(
        schema: Schema,
        options: &ZoneOptions,
        home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
        fade_ticks: u64,
        counters: Arc<ZoneCounters>,
        hidden: Hidden,
    ) -> Self {
        Self {
            schema,
            me: options.me,
            game: options.game.clone(),
            home,
            fade_ticks: fade_ticks.max(1),
            counters,
            neighbours: options.layout.neighbours(options.me).to_vec(),
            heard: BTreeMap::new(),
            ticks: 0,
            hidden,
            shown: None,
        }
    }
}

impl Handles<BorderFrame> for BorderWorld {
    fn handle(&mut self, frame: BorderFrame) {
        let began = thread_cpu_time();
        self.keep(frame);
        add_spent(&self.counters.world_ns, began);
    }
}

impl World for BorderWorld {
    fn schema(&self) -> Schema {
        self.schema.clone()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        let began = thread_cpu_time();
        self.age();
        add_spent(&self.counters.world_ns, began);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let began = thread_cpu_time();
        self.show(out);
        add_spent(&self.counters.world_ns, began);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(BorderRelevancy {
            game: self.game.clone(),
            home: self.home.clone(),
            hidden: self.hidden.clone(),
            places: Mutex::default(),
            counters: self.counters.clone(),
        })
    }
}

impl BorderWorld {
    /// Keeps a neighbour's frame, unless an older one than what is shown.
    fn keep(&mut self, frame: BorderFrame) {
        let zone = frame.zone;
        // A frame older than the one shown (reordered on the bus) is left out.
        if self.heard.get(&zone).is_some_and(|h| h.frame.tick >= frame.tick && self.ticks - h.at < self.fade_ticks) {
            return;
        }
        if !self.heard.contains_key(&zone) {
            tracing::info!(zone = self.me, neighbour = zone, "border entities from a neighbour");
        }
        if let Some(shown) = &self.shown
            && let Ok(mut shown) = shown.lock()
        {
            shown.heard.insert(zone, frame.tick);
        }
        self.heard.insert(zone, Heard { frame, at: self.ticks });
    }

    /// One tick on: neighbours quiet too long fade.
    fn age(&mut self) {
        self.ticks += 1;
        let (now, fade) = (self.ticks, self.fade_ticks);
        let (me, counters) = (self.me, &self.counters);
        self.heard.retain(|zone, h| {
            let alive = now - h.at <= fade;
            if !alive {
                counters.fades.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(zone = me, neighbour = zone, "a neighbour went quiet: its border entities fade");
            }
            alive
        });
        let n: usize = self.heard.values().map(|h| h.frame.snapshot.len()).sum();
        counters.entities_in.store(n as u64, Ordering::Relaxed);
    }

    /// Every neighbour's newest entities, under border ids, less the hidden players.
    fn show(&self, out: &mut SnapshotBuilder<'_>) {
        // A hidden player goes LINGER snapshots after the first made from its old zone's
        // frame without it (the relevancy reads the set when a player's view is sent; the
        // view may merge the border world's snapshot before this one).
        if let Ok(mut hidden) = self.hidden.write()
            && !hidden.is_empty()
        {
            hidden.retain(|b, hide| {
                let (slot, id) = split_border_id(*b);
                let Some(h) = self.neighbours.get(slot).and_then(|z| self.heard.get(z)) else { return false };
                let until = *hide.until.get_or_insert(h.frame.tick.wrapping_add(HIDE_TICKS));
                if hide.lacking > 0 || h.frame.snapshot.find(id).is_none() {
                    hide.lacking = hide.lacking.saturating_add(1);
                    return hide.lacking < LINGER;
                }
                h.frame.tick.wrapping_sub(until) >= 1 << 31
            });
        }
        if let Some(shown) = &self.shown
            && let Ok(mut shown) = shown.lock()
        {
            let now = self.heard.iter().map(|(z, h)| (*z, h.frame.tick)).collect();
            shown.snapshots[1] = std::mem::replace(&mut shown.snapshots[0], now);
        }
        for (zone, h) in &self.heard {
            // Frames come from neighbours only (the inbox checks).
            let Some(slot) = self.neighbours.iter().position(|n| n == zone) else { continue };
            for e in h.frame.snapshot.iter() {
                // The frame decoded with this schema: its kinds fit.
                let _ = out.copy_entity_as(border_id(slot, e.id), e);
            }
        }
    }
}

/// Who sees which border entity: the game's [`ZoneGame::border_interest`], with the zone's
/// newest snapshot to find the player in.
struct BorderRelevancy {
    game: Arc<dyn ZoneGame>,
    home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    hidden: Hidden,
    places: Mutex<Places>,
    counters: Arc<ZoneCounters>,
}

thread_local! {
    /// Calls of border relevancies on this thread (one in [`RELEVANCY_TIMED_EVERY`] is
    /// timed): a count of the thread's own, as a shared one would bounce between cores.
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The places of the entities of the border world's recent snapshots, by snapshot: read
/// once per snapshot, for every player's view (a view may merge one before the newest).
#[derive(Default)]
struct Places {
    recent: std::collections::VecDeque<(u64, Arc<BorderPlaces>)>,
}

/// Border snapshots whose places are kept.
const PLACES_KEPT: usize = 4;

impl BorderRelevancy {
    fn places_of(&self, world: &WorldSnapshot) -> Arc<BorderPlaces> {
        let serial = world.serial();
        let place = || Arc::new(BorderPlaces::of(&*self.game, world));
        let Ok(mut places) = self.places.lock() else { return place() };
        if let Some((_, p)) = places.recent.iter().find(|(s, _)| *s == serial) {
            return p.clone();
        }
        let p = place();
        if places.recent.len() == PLACES_KEPT {
            places.recent.pop_front();
        }
        places.recent.push_back((serial, p.clone()));
        p
    }
}

impl Relevancy for BorderRelevancy {
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>) {
        let timed = CALLS.with(|c| {
            c.set(c.get().wrapping_add(1));
            c.get().is_multiple_of(RELEVANCY_TIMED_EVERY)
        });
        let began = timed.then(thread_cpu_time);
        out.clear();
        let home = self.home.read().ok().and_then(|h| h.clone());
        if let Some(home) = home {
            let placed = self.places_of(world);
            self.game.border_interest(&home, &BorderView { snapshot: world, places: &placed }, player, out);
        }
        if let Ok(hidden) = self.hidden.read()
            && !hidden.is_empty()
        {
            let ids = world.ids();
            out.retain(|i| ids.get(i.index as usize).is_none_or(|id| !hidden.contains_key(id)));
        }
        if let Some(began) = began {
            let spent = cpu_since(began).as_nanos() as u64;
            self.counters.relevancy_ns.fetch_add(spent * RELEVANCY_TIMED_EVERY, Ordering::Relaxed);
        }
    }
}

/// Builds a zone's border world, and then (given the border world's reference) its link and
/// the tap on its world; [`Worlds::zone`](crate::server::Worlds::zone) starts them.
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

impl Worlds {
    /// Makes world `source` zone `zone.me` of a map split among several servers (see
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
    /// let link = worlds.zone(WorldId::ENTRY, ZoneOptions::new(layout, 0, game), WorldOptions::new("border"))?;
    /// # let _ = link; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Worlds::spawn`] for the border world; [`SpawnError::Zone`] when `zone.me` is not
    /// in the layout.
    pub fn zone(&self, source: WorldId, zone: ZoneOptions, border: WorldOptions) -> Result<ZoneLink, SpawnError> {
        if usize::from(zone.me) >= zone.layout.len() {
            return Err(SpawnError::Zone(format!("zone {} is not in a layout of {}", zone.me, zone.layout.len())));
        }
        let neighbours = zone.layout.neighbours(zone.me).len();
        if neighbours > crate::protocol::zone::MAX_NEIGHBOURS {
            let most = crate::protocol::zone::MAX_NEIGHBOURS;
            return Err(SpawnError::Zone(format!("zone {} has {neighbours} neighbours; at most {most}", zone.me)));
        }
        let border = border.watched_by_everyone();
        let stride = self.check(&border, self.schema())?;
        let hz = f64::from(self.server_hz()) / f64::from(stride);
        let fade_ticks = (zone.fade_after.as_secs_f64() * hz).ceil() as u64;
        let (world, build) = parts(self.schema().clone(), &zone, fade_ticks, self.keys());
        let border = self.spawn_handling(border, world)?;
        let (link, tap) = build(border);
        self.tap(source, Box::new(tap))?;
        self.host().add_zone(link.counters().clone());
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::protocol::quant::Bits;

    crate::replicated! {
        /// A dot on a line.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Dot {
            /// Where, in whole units.
            pub x: u32 = Bits(10),
        }
    }

    struct Line;
    impl ZoneGame for Line {
        fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
            Some(Vec2::new(*e.words.first()? as f32, 0.0))
        }
        fn view_radius(&self) -> f32 {
            1000.0
        }
    }

    fn snapshot(schema: &Schema, tick: u32, dots: &[(u32, u32)]) -> WorldSnapshot {
        let mut b = SnapshotBuilder::new(schema, tick);
        for &(id, x) in dots {
            b.insert(id, &Dot { x }).unwrap();
        }
        b.finish().unwrap()
    }

    /// Zone 0 of two side by side (its player 1 at x = 90); zone 1's frames hold `dots`.
    struct Border {
        schema: Schema,
        world: BorderWorld,
        hidden: Hidden,
    }

    impl Border {
        fn new() -> Self {
            let mut schema = Schema::new();
            schema.register::<Dot>().unwrap();
            let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
            let options = ZoneOptions::new(layout, 0, Arc::new(Line));
            let home = Arc::new(RwLock::new(Some(Arc::new(snapshot(&schema, 1, &[(1, 90)])))));
            let hidden = Hidden::default();
            let world = BorderWorld::new(schema.clone(), &options, home, 30, Arc::default(), hidden.clone());
            Self { schema, world, hidden }
        }

        /// Zone 1's frame of `tick` arrives; what player 1 is shown of the border world then
        /// (zone 1's ids).
        fn shown(&mut self, tick: u32, dots: &[(u32, u32)]) -> Vec<u32> {
            let frame = snapshot(&self.schema, tick, dots);
            self.world.handle(BorderFrame { zone: 1, tick, snapshot: frame });
            let mut b = SnapshotBuilder::new(&self.schema, tick);
            self.world.snapshot(&mut b);
            let border = b.finish().unwrap();
            let mut out = Vec::new();
            self.world.relevancy().interest(&border, 1, &mut out);
            out.iter().map(|i| split_border_id(border.ids()[i.index as usize]).1).collect()
        }
    }

    /// A game that sees 15 units around a player.
    struct Near;
    impl ZoneGame for Near {
        fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
            Line.position(e)
        }
        fn view_radius(&self) -> f32 {
            15.0
        }
    }

    /// A game on a plane (x, y in whole units), seeing its `.0` units around.
    struct Plane(f32);
    impl ZoneGame for Plane {
        fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
            let (x, y) = (*e.words.first()?, *e.words.get(1)?);
            // Some entities have no place.
            (x % 7 != 3).then(|| Vec2::new(x as f32, y as f32))
        }
        fn view_radius(&self) -> f32 {
            self.0
        }
    }

    crate::replicated! {
        /// A dot on a plane.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Spot {
            /// Where, in whole units.
            pub x: u32 = Bits(10),
            /// Where, in whole units.
            pub y: u32 = Bits(10),
        }
    }

    #[test]
    fn the_default_border_interest_searches_its_grid_and_finds_what_a_full_scan_finds() {
        let mut schema = Schema::new();
        schema.register::<Spot>().unwrap();
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        let (mut compared, mut indexed) = (0, Vec::new());
        for (radius, count) in [(15.0, 400), (60.0, 200), (0.0, 50), (5000.0, 300), (f32::NAN, 20)] {
            let game = Plane(radius);
            let border = spots(&schema, count, (1000, 300), &mut next);
            let places = BorderPlaces::of(&game, &border);
            let view = BorderView { snapshot: &border, places: &places };
            for _ in 0..50 {
                let me = (next(1200), next(400));
                let home = snapshot_of(&schema, me);
                let mut got = Vec::new();
                game.border_interest(&home, &view, 1, &mut got);
                // The full scan: every placed entity within the radius, by index (nothing for a
                // player with no place).
                let Some(at) = game.viewer(&home, 1) else {
                    assert_eq!(got, []);
                    continue;
                };
                let per = 1.0 / (radius * radius).max(f32::MIN_POSITIVE);
                let want: Vec<Interest> = view
                    .placed()
                    .iter()
                    .map(|p| (p, p.position.distance_squared(at)))
                    .filter(|(_, d2)| *d2 <= radius * radius)
                    .map(|(p, d2)| Interest::new(p.index, 2.0 - d2 * per))
                    .collect();
                assert_eq!(got, want, "radius {radius}, player at {me:?}");
                // What a game's own relevancy asks of the view: the same entities.
                let mut within: Vec<u32> = view.within(at, radius).map(|(p, _)| p.index).collect();
                within.sort_unstable();
                assert_eq!(within, want.iter().map(|i| i.index).collect::<Vec<_>>());
                compared += want.len();
            }
            indexed.push(view.is_indexed());
        }
        assert!(compared > 1000, "the answers held entities: {compared}");
        assert_eq!(indexed, [true, true, false, false, false], "spread over many cells, and not");
    }

    /// What the default border relevancy costs a player, indexed and by one pass over every
    /// border entity, on a long border and on a small zone's (printed, not asserted; run with
    /// `cargo test --release -p volley --lib border_interest_cost -- --ignored --nocapture`).
    #[test]
    #[ignore = "a figure to read, in release"]
    fn border_interest_cost() {
        let mut schema = Schema::new();
        schema.register::<Spot>().unwrap();
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        // (what, radius, entities, width, height): a 1 km border 40 m deep; a 50 m zone's.
        for (what, radius, count, w, h) in [("long border", 40.0, 1000, 1000, 40), ("small zone", 40.0, 150, 50, 50)] {
            let game = Plane(radius);
            let border = spots(&schema, count, (w, h), &mut next);
            let placed = BorderPlaces::of(&game, &border).placed;
            let homes: Vec<WorldSnapshot> = (0..1000).map(|_| snapshot_of(&schema, (next(w), next(h + 100)))).collect();
            let mut indexed = BorderPlaces::new(placed.clone(), radius);
            let mut scanned = BorderPlaces::new(placed, radius);
            println!("{what}: indexed by the rule: {}", indexed.grid.is_some());
            scanned.grid = None;
            if indexed.grid.is_none() {
                let mut grid = Grid::new(Vec2::ZERO, Vec2::new(w as f32, h as f32), radius);
                for p in indexed.placed.iter() {
                    grid.push(p.position);
                }
                indexed.grid = Some(grid);
            }
            for (how, places) in [("indexed", &indexed), ("one pass", &scanned)] {
                let view = BorderView { snapshot: &border, places };
                let mut out = Vec::new();
                let began = std::time::Instant::now();
                let mut shown = 0;
                for _ in 0..20 {
                    for home in &homes {
                        game.border_interest(home, &view, 1, &mut out);
                        shown += out.len();
                    }
                }
                let each = began.elapsed() / 20_000;
                println!("{what} ({count} entities): {how}: {each:?} a player, {} shown on average", shown / 20_000);
            }
        }
    }

    /// Numbers below `n`, the same each run from `seed` (xorshift).
    fn numbers(mut seed: u64) -> impl FnMut(u32) -> u32 {
        move |n| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n)) as u32
        }
    }

    /// A border snapshot of `count` spots placed at random within `(width, height)`.
    fn spots(schema: &Schema, count: u32, (w, h): (u32, u32), next: &mut impl FnMut(u32) -> u32) -> WorldSnapshot {
        let mut b = SnapshotBuilder::new(schema, 1);
        for id in 0..count {
            b.insert(id, &Spot { x: next(w), y: next(h) }).unwrap();
        }
        b.finish().unwrap()
    }

    /// Player 1's zone, with it at `at`.
    fn snapshot_of(schema: &Schema, at: (u32, u32)) -> WorldSnapshot {
        let mut b = SnapshotBuilder::new(schema, 1);
        b.insert(1, &Spot { x: at.0, y: at.1 }).unwrap();
        b.finish().unwrap()
    }

    #[test]
    fn each_player_is_judged_where_it_stands_as_the_border_snapshots_come() {
        let mut schema = Schema::new();
        schema.register::<Dot>().unwrap();
        let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
        let options = ZoneOptions::new(layout, 0, Arc::new(Near));
        let home = Arc::new(RwLock::new(Some(Arc::new(snapshot(&schema, 1, &[(1, 90), (2, 130)])))));
        let mut world = BorderWorld::new(schema.clone(), &options, home.clone(), 30, Arc::default(), Hidden::default());
        let relevancy = world.relevancy();
        let mut border = |tick: u32| {
            world.handle(BorderFrame { zone: 1, tick, snapshot: snapshot(&schema, tick, &[(7, 100), (8, 140)]) });
            let mut b = SnapshotBuilder::new(&schema, tick);
            world.snapshot(&mut b);
            b.finish().unwrap()
        };
        let shown = |border: &WorldSnapshot, player: PlayerId| {
            let mut out = Vec::new();
            relevancy.interest(border, player, &mut out);
            out.iter().map(|i| split_border_id(border.ids()[i.index as usize]).1).collect::<Vec<_>>()
        };
        // One border snapshot, two players: each its own.
        let first = border(10);
        assert_eq!((shown(&first, 1), shown(&first, 2), shown(&first, 1)), (vec![7], vec![8], vec![7]));
        // Player 1 walks to 135: the next border snapshot judges it there.
        *home.write().unwrap() = Some(Arc::new(snapshot(&schema, 2, &[(1, 135), (2, 130)])));
        let second = border(11);
        assert_eq!((shown(&second, 1), shown(&second, 2)), (vec![8], vec![8]));
        // A player the zone does not hold sees nothing.
        assert_eq!(shown(&second, 3), Vec::<u32>::new());
    }

    #[test]
    fn a_handed_in_player_is_hidden_from_its_old_zones_frames_until_they_lack_it() {
        let mut z = Border::new();
        assert_eq!(z.shown(10, &[(7, 110), (8, 120)]), vec![7, 8]);
        // Player 7 of zone 1 joins zone 0 (the tap hides it); zone 1's frames from before it
        // let go still hold it.
        z.hidden.write().unwrap().insert(border_id(0, 7), Hide::default());
        assert_eq!(z.shown(11, &[(7, 110), (8, 120)]), vec![8]);
        assert_eq!(z.shown(12, &[(7, 110), (8, 120)]), vec![8]);
        // Zone 1's frames lack it: one snapshot more (the players' views may still merge
        // the border world's one before), then it is no longer hidden, and id 7 given to a
        // new player there is shown.
        assert_eq!(z.shown(13, &[(8, 120)]), vec![8]);
        assert!(!z.hidden.read().unwrap().is_empty());
        assert_eq!(z.shown(14, &[(7, 105), (8, 120)]), vec![7, 8]);
        assert!(z.hidden.read().unwrap().is_empty());

        // Given to another player before the frames lacked it: hidden four of zone 1's ticks
        // past the newest frame the border world had when it hid it, then shown.
        z.hidden.write().unwrap().insert(border_id(0, 7), Hide::default());
        assert_eq!(z.shown(15, &[(7, 105), (8, 120)]), vec![8]);
        assert_eq!(z.shown(18, &[(7, 105), (8, 120)]), vec![8]);
        assert_eq!(z.shown(19, &[(7, 105), (8, 120)]), vec![7, 8]);
        assert!(z.hidden.read().unwrap().is_empty());
    }

    /// A zone's world as its handoffs need it: applies inputs (their sequence numbers).
    #[derive(Default)]
    struct Walkers {
        applied: Vec<(PlayerId, u32)>,
        left: Vec<PlayerId>,
    }
    impl World for Walkers {
        fn schema(&self) -> Schema {
            Schema::new()
        }
        fn leave(&mut self, p: PlayerId) {
            self.left.push(p);
        }
        fn input(&mut self, p: PlayerId, input: &[u8]) {
            self.applied.push((p, u32::from(input[0])));
        }
        fn tick(&mut self, _: u32, _: Duration) {}
        fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    }

    struct In(PlayerId, u32);
    impl crate::server::cores::simulation::TickInput for In {
        fn player(&self) -> PlayerId {
            self.0
        }
        fn seq(&self) -> u32 {
            self.1
        }
        fn bytes(&self) -> &[u8] {
            std::slice::from_ref(&[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9][self.1 as usize % 10])
        }
        fn view(&self) -> Option<crate::protocol::input::ViewTime> {
            None
        }
    }

    #[test]
    fn the_zones_tap_holds_offers_and_ends_each_handoff_through_the_players_hooks() {
        use crate::server::cores::simulation::Simulation;
        let schema = Arc::new(Schema::new());
        let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
        let options = ZoneOptions::new(layout, 0, Arc::new(Line));
        let keys = TokenKeys { protocol_id: 7, private_key: [3; 32] };
        let (_border, build) = parts(schema.clone(), &options, 30, keys);
        let (border, _frames) = WorldRef::detached(WorldId(1));
        let (mut link, tap) = build(border);
        let mut departures = link.take_departures().unwrap();
        let (exit, inbox) = (link.exit(), link.inbox());
        let mut sim = Simulation::new(schema, Duration::from_millis(10));
        sim.add_tap(Box::new(tap));
        let mut game = Walkers::default();
        for p in [1, 2] {
            sim.join(&mut game, p, &JoinInfo::new(u64::from(p) + 100, [0; crate::protocol::netcode::USER_DATA_BYTES]));
        }
        let step =
            |sim: &mut Simulation, game: &mut Walkers, inputs: Vec<In>| sim.step(game, inputs, |_, _| {}).unwrap();
        step(&mut sim, &mut game, vec![In(1, 1)]);

        // Asked: offered to zone 1 through the bus shell, its inputs held from the next tick.
        exit.hand_off(1, 1, b"east".to_vec());
        exit.hand_off(1, 1, b"east".to_vec());
        step(&mut sim, &mut game, vec![In(1, 2), In(1, 3)]);
        let d = departures.try_recv().unwrap();
        let offer = Offer::decode(&d.offer).unwrap();
        assert_eq!((d.player, d.to, offer.state.as_slice(), offer.last_applied), (1, 1, &b"east"[..], 1));
        assert!(departures.try_recv().is_err(), "one offer for two asks");
        assert_eq!(game.applied, [(1, 1)], "held while the neighbour is asked");

        // Refused: the held inputs are applied in order, the game hears why, and another
        // ask within the cooldown is ignored.
        let refused = Answer::Refused { reason: "full".into() }.encode();
        inbox.end_handoff(1, Ok(&refused), inbox.now()).unwrap();
        exit.hand_off(1, 1, b"east".to_vec());
        step(&mut sim, &mut game, vec![In(1, 4)]);
        assert_eq!(game.applied, [(1, 1), (1, 2), (1, 3), (1, 4)]);
        let r = exit.take_refused();
        assert_eq!((r.len(), r[0].player, r[0].to, r[0].why.as_str()), (1, 1, 1, "zone 1 refused: full"));
        assert!(departures.try_recv().is_err(), "cooling down");

        // Accepted: player 2 leaves with a connect token for the new zone's server.
        exit.hand_off(2, 1, Vec::new());
        step(&mut sim, &mut game, vec![In(2, 1)]);
        assert_eq!(departures.try_recv().unwrap().player, 2);
        let accepted = Answer::Accepted { server: "127.0.0.1:4000".parse().unwrap() }.encode();
        inbox.end_handoff(2, Ok(&accepted), inbox.now()).unwrap();
        let mut stepped = step(&mut sim, &mut game, vec![In(2, 2)]);
        assert_eq!(game.left, [2]);
        let system = stepped.outbox.take_system();
        let redirect = crate::protocol::system::Redirect::decode(&system[0].1).unwrap();
        assert_eq!(redirect.last_applied, None, "its one input was held");
        let token = crate::protocol::netcode::token::ConnectToken::from_bytes(&redirect.token).unwrap();
        assert_eq!(token.server_addresses.as_slice(), ["127.0.0.1:4000".parse().unwrap()]);
        assert!(!game.applied.contains(&(2, 1)), "its held input goes to the new zone");
    }
}
