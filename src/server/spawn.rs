//! Starting, stopping and talking to worlds while the server runs: [`Worlds`], the handle a
//! game keeps (from [`World::started`] or [`ServerHandle::worlds`](super::ServerHandle::worlds)),
//! and [`WorldRef`], a world that takes the game's own typed messages ([`Handles`]).
//!
//! The same handle works on the actor server and in the
//! [`Stepper`](crate::testing::Stepper): on the server each world is an actor of its own
//! (spawned here, watched by a task that hands its players to its fallback when it ends); in
//! the stepper the worlds are stepped in turn, deterministically.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorRef};

use super::broadcaster::{BroadcastMsg, NewWorld};
use super::metrics::ServerMetrics;
use super::world::{JoinInfo, Outbox, PlayerId, Relevancy, World};
use super::world_actor::{InputQueue, TickClock, WorldActor, WorldArgs, WorldMsg};
use super::worlds::{Numbers, WorldId, WorldOptions};
use crate::protocol::input::ViewTime;
use crate::protocol::snapshot::{EntityId, Schema, SnapshotBuilder};
use crate::protocol::zone::ZoneId;

/// Why a world could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// Its kind is not one the server declared
    /// ([`ServerConfig::world_kinds`](super::ServerConfig::world_kinds)).
    #[error("world kind {0:?} is not declared in the server's world kinds")]
    UnknownKind(String),
    /// Its tick rate does not divide the server's.
    #[error("a world's tick rate ({0} Hz) must divide the server's ({1} Hz)")]
    TickRate(u16, u16),
    /// Its schema is not the server's: every world of a server replicates the same kinds (the
    /// clients decode them all with one schema).
    #[error("the world's schema differs from the server's")]
    Schema,
    /// Every world number is in use.
    #[error("too many worlds")]
    TooMany,
    /// The server is shutting down.
    #[error("the server is not running")]
    NotRunning,
    /// A zone's options do not fit its layout.
    #[error("{0}")]
    Zone(String),
}

/// A world that takes the game's own messages of type `M` (from its matchmaker, its
/// stats service, another world), through a [`WorldRef<M>`]: they are handed to
/// [`Handles::handle`] at the start of the world's next tick, in the order sent.
///
/// ```
/// use volley::prelude::*;
/// use volley::server::Handles;
///
/// /// What a matchmaker may ask the lobby.
/// enum LobbyMsg {
///     QueueLength(tokio::sync::oneshot::Sender<usize>),
/// }
///
/// # struct Lobby { queue: Vec<PlayerId> }
/// impl Handles<LobbyMsg> for Lobby {
///     fn handle(&mut self, msg: LobbyMsg) {
///         match msg {
///             LobbyMsg::QueueLength(reply) => drop(reply.send(self.queue.len())),
///         }
///     }
/// }
/// # impl World for Lobby {
/// #     fn schema(&self) -> Schema { Schema::default() }
/// #     fn leave(&mut self, _: PlayerId) {}
/// #     fn input(&mut self, _: PlayerId, _: &[u8]) {}
/// #     fn tick(&mut self, _: u32, _: std::time::Duration) {}
/// #     fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
/// # }
/// ```
pub trait Handles<M>: World {
    /// One message (a panic here is caught and counted like one in [`World::tick`]).
    fn handle(&mut self, msg: M);
}

/// Messages a [`WorldRef`] holds for its world before [`WorldRef::send`] refuses more.
pub const WORLD_MESSAGE_QUEUE: usize = 1024;

/// A world that takes messages of type `M` ([`Handles<M>`]), as [`Worlds::spawn_handling`]
/// returns it. Cheap to clone; send from any thread or actor.
#[derive(Debug)]
pub struct WorldRef<M> {
    id: WorldId,
    tx: tokio::sync::mpsc::Sender<M>,
}

impl<M> Clone for WorldRef<M> {
    fn clone(&self) -> Self {
        Self { id: self.id, tx: self.tx.clone() }
    }
}

/// A message a [`WorldRef`] could not hand over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// [`WORLD_MESSAGE_QUEUE`] messages wait already: the world is behind.
    #[error("the world's message queue is full")]
    Full,
    /// The world stopped.
    #[error("the world stopped")]
    Stopped,
}

impl<M> WorldRef<M> {
    /// The world.
    pub fn id(&self) -> WorldId {
        self.id
    }

    /// Hands `msg` to the world for its next tick.
    ///
    /// # Errors
    /// When its queue is full, or it stopped.
    pub fn send(&self, msg: M) -> Result<(), SendError> {
        self.tx.try_send(msg).map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => SendError::Full,
            tokio::sync::mpsc::error::TrySendError::Closed(_) => SendError::Stopped,
        })
    }
}

/// A world that takes the game's messages of type `M` ([`Handles<M>`]): they are handed to
/// it at the start of each tick, before [`World::tick`]. [`Worlds::spawn_handling`] wraps
/// the worlds it starts in one; wrap the world you give [`start`](super::start) (or the
/// [`Stepper`](crate::testing::Stepper)) yourself, so that the worlds it starts can reach
/// it with [`Worlds::world_ref`].
///
/// ```no_run
/// use volley::prelude::*;
/// use volley::server::{Handles, WithMessages};
///
/// enum LobbyMsg {
///     MatchOver { winner: PlayerId },
/// }
/// # struct Lobby;
/// impl Handles<LobbyMsg> for Lobby {
///     fn handle(&mut self, msg: LobbyMsg) {
///         let LobbyMsg::MatchOver { winner } = msg;
///         println!("player {winner} won");
///     }
/// }
/// # impl World for Lobby {
/// #     fn schema(&self) -> Schema { Schema::default() }
/// #     fn leave(&mut self, _: PlayerId) {}
/// #     fn input(&mut self, _: PlayerId, _: &[u8]) {}
/// #     fn tick(&mut self, _: u32, _: std::time::Duration) {}
/// #     fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
/// # }
/// # async fn run(config: ServerConfig) -> Result<(), volley::server::StartError> {
/// // A match reaches the lobby with `worlds.world_ref::<LobbyMsg>(WorldId::ENTRY)`.
/// let server = volley::server::start(config, WithMessages::<_, LobbyMsg>::new(Lobby)).await?;
/// # Ok(()) }
/// ```
pub struct WithMessages<W, M> {
    world: W,
    rx: tokio::sync::mpsc::Receiver<M>,
    tx: tokio::sync::mpsc::Sender<M>,
}

impl<M: Send + 'static, W: Handles<M>> WithMessages<W, M> {
    /// `world`, taking messages of type `M` (at most [`WORLD_MESSAGE_QUEUE`] waiting).
    pub fn new(world: W) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(WORLD_MESSAGE_QUEUE);
        Self { world, rx, tx }
    }

    /// The game's world.
    pub fn world(&self) -> &W {
        &self.world
    }

    /// The game's world.
    pub fn world_mut(&mut self) -> &mut W {
        &mut self.world
    }
}

impl<W, M> std::fmt::Debug for WithMessages<W, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithMessages").field("waiting", &self.rx.len()).finish_non_exhaustive()
    }
}

impl<M: Send + 'static, W: Handles<M>> World for WithMessages<W, M> {
    fn schema(&self) -> Schema {
        self.world.schema()
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.world.join_with(player, who);
    }
    fn leave(&mut self, player: PlayerId) {
        self.world.leave(player);
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        self.world.input(player, input);
    }
    fn input_viewed(&mut self, player: PlayerId, input: &[u8], view: Option<ViewTime>) {
        self.world.input_viewed(player, input, view);
    }
    fn message(&mut self, player: PlayerId, message: &[u8], reliable: bool) {
        self.world.message(player, message, reliable);
    }
    fn handoff_refused(&mut self, player: PlayerId, to: ZoneId, why: &str) {
        self.world.handoff_refused(player, to, why);
    }
    fn world_stopped(&mut self, world: WorldId, why: &str) {
        self.world.world_stopped(world, why);
    }
    fn tick(&mut self, tick: u32, dt: Duration) {
        while let Ok(m) = self.rx.try_recv() {
            self.world.handle(m);
        }
        self.world.tick(tick, dt);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        self.world.snapshot(out);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        self.world.relevancy()
    }
    fn avatar(&self, player: PlayerId) -> Option<EntityId> {
        self.world.avatar(player)
    }
    fn messages(&mut self, out: &mut Outbox) {
        self.world.messages(out);
    }
    fn shutdown(&mut self) {
        self.world.shutdown();
    }
    fn scoreboard_columns(&self) -> Vec<String> {
        self.world.scoreboard_columns()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        worlds.take_messages(me, self.tx.clone());
        self.world.started(me, worlds);
    }
}

impl World for Box<dyn World> {
    fn schema(&self) -> Schema {
        (**self).schema()
    }
    fn join(&mut self, player: PlayerId) {
        (**self).join(player);
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        (**self).join_with(player, who);
    }
    fn leave(&mut self, player: PlayerId) {
        (**self).leave(player);
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        (**self).input(player, input);
    }
    fn input_viewed(&mut self, player: PlayerId, input: &[u8], view: Option<ViewTime>) {
        (**self).input_viewed(player, input, view);
    }
    fn message(&mut self, player: PlayerId, message: &[u8], reliable: bool) {
        (**self).message(player, message, reliable);
    }
    fn handoff_refused(&mut self, player: PlayerId, to: ZoneId, why: &str) {
        (**self).handoff_refused(player, to, why);
    }
    fn world_stopped(&mut self, world: WorldId, why: &str) {
        (**self).world_stopped(world, why);
    }
    fn tick(&mut self, tick: u32, dt: Duration) {
        (**self).tick(tick, dt);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        (**self).snapshot(out);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        (**self).relevancy()
    }
    fn avatar(&self, player: PlayerId) -> Option<EntityId> {
        (**self).avatar(player)
    }
    fn messages(&mut self, out: &mut Outbox) {
        (**self).messages(out);
    }
    fn shutdown(&mut self) {
        (**self).shutdown();
    }
    fn scoreboard_columns(&self) -> Vec<String> {
        (**self).scoreboard_columns()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        (**self).started(me, worlds);
    }
}

/// The worlds of one server: start, stop, move players, watch (see the module docs). Cheap
/// to clone; every call returns at once (what it asks happens in order, on the server's
/// actors or at the stepper's next step).
#[derive(Clone)]
pub struct Worlds {
    inner: Arc<Inner>,
    /// The world this handle was given to ([`World::started`]), if one: the worlds it
    /// starts are its.
    me: Option<WorldId>,
}

impl std::fmt::Debug for Worlds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worlds").finish_non_exhaustive()
    }
}

/// What a world needs from its server, whichever shell runs it.
struct Inner {
    numbers: Arc<Mutex<Numbers>>,
    kinds: Vec<String>,
    server_hz: u16,
    schema: Arc<Schema>,
    /// What mints a connect token for another server of the same game (a zone's handoffs).
    keys: TokenKeys,
    backend: Backend,
    /// Who started each world, and where the worlds that take messages take them.
    links: Mutex<BTreeMap<WorldId, Link>>,
}

/// What the worlds know of one world.
#[derive(Default)]
struct Link {
    /// The world that started it.
    parent: Option<WorldId>,
    /// Its messages' queue (a `tokio::sync::mpsc::Sender<M>`), if it takes messages.
    mail: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// The server's protocol id and private key: a zone mints the connect token for the zone a
/// player is handed to with them (every zone of a map shares the key).
#[derive(Clone, Copy)]
pub(crate) struct TokenKeys {
    pub protocol_id: u64,
    pub private_key: crate::protocol::netcode::Key,
}

enum Backend {
    Actors(ActorBackend),
    /// What the stepper is asked at its next step, and the worlds it runs.
    Stepper(Mutex<Vec<Request>>, Mutex<Vec<WorldId>>),
}

/// The actor server's side.
pub(crate) struct ActorBackend {
    pub broadcaster: ActorRef<BroadcastMsg>,
    pub metrics: Arc<ServerMetrics>,
    pub clock: TickClock,
    /// Inputs one world may hold between two ticks.
    pub input_limit: usize,
    /// The running worlds' actors (for shutdown).
    pub actors: Arc<Mutex<BTreeMap<WorldId, ActorRef<WorldMsg>>>>,
    /// Record every world into this folder.
    pub record: Option<std::path::PathBuf>,
}

/// What the stepper is asked to do at its next step.
pub(crate) enum Request {
    /// Start this world (started by that one, if one did).
    Spawn(WorldId, WorldOptions, Box<dyn World>, Option<WorldId>),
    /// Stop a world.
    Stop(WorldId),
    /// Move a player.
    Move(PlayerId, WorldId),
    /// Watch (or stop watching) a world.
    Watch(PlayerId, WorldId, bool),
    /// Hand a world's frames to a tap.
    Tap(WorldId, Box<dyn super::record::Tap>),
}

impl Worlds {
    /// The actor server's handle.
    pub(crate) fn actors(
        numbers: Arc<Mutex<Numbers>>,
        kinds: Vec<String>,
        server_hz: u16,
        schema: Arc<Schema>,
        keys: TokenKeys,
        backend: ActorBackend,
    ) -> Self {
        let backend = Backend::Actors(backend);
        let links = Mutex::default();
        Self { inner: Arc::new(Inner { numbers, kinds, server_hz, schema, keys, backend, links }), me: None }
    }

    /// The stepper's handle.
    pub(crate) fn stepper(
        numbers: Arc<Mutex<Numbers>>,
        kinds: Vec<String>,
        server_hz: u16,
        schema: Arc<Schema>,
        keys: TokenKeys,
    ) -> Self {
        let backend = Backend::Stepper(Mutex::new(Vec::new()), Mutex::new(vec![WorldId::ENTRY]));
        let links = Mutex::default();
        Self { inner: Arc::new(Inner { numbers, kinds, server_hz, schema, keys, backend, links }), me: None }
    }

    /// The handle world `me` gets: the worlds it starts are its own.
    pub(crate) fn of(&self, me: WorldId) -> Self {
        Self { inner: self.inner.clone(), me: Some(me) }
    }

    /// World `id` takes its messages through `tx`.
    fn take_messages<M: Send + 'static>(&self, id: WorldId, tx: tokio::sync::mpsc::Sender<M>) {
        if let Ok(mut l) = self.inner.links.lock() {
            l.entry(id).or_default().mail = Some(Box::new(tx));
        }
    }

    /// A new world `id`, started by this handle's world: nothing of an earlier world of
    /// the same number is kept.
    fn new_link(&self, id: WorldId) {
        if let Ok(mut l) = self.inner.links.lock() {
            l.insert(id, Link { parent: self.me, mail: None });
        }
    }

    /// The world that started world `world` ([`Worlds::spawn`] on the handle
    /// [`World::started`] gave it); `None` for the entry world, and for a world started
    /// from outside every world ([`ServerHandle::worlds`](super::ServerHandle::worlds)).
    /// It hears when `world` stops ([`World::world_stopped`]).
    pub fn started_by(&self, world: WorldId) -> Option<WorldId> {
        self.inner.links.lock().ok()?.get(&world)?.parent
    }

    /// World `world`, to send it messages of type `M`: `None` unless it takes them (it was
    /// started with [`Worlds::spawn_handling`], or is wrapped in [`WithMessages`]) and
    /// still runs. A match tells the lobby that started it how it ended:
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # use volley::server::WorldRef;
    /// enum LobbyMsg {
    ///     Result { winner: Option<PlayerId> },
    /// }
    ///
    /// struct Match {
    ///     lobby: Option<WorldRef<LobbyMsg>>,
    /// }
    ///
    /// impl World for Match {
    ///     fn started(&mut self, me: WorldId, worlds: &Worlds) {
    ///         self.lobby = worlds.started_by(me).and_then(|lobby| worlds.world_ref(lobby));
    ///     }
    ///     // ... and when it is over:
    ///     fn messages(&mut self, out: &mut Outbox) {
    ///         # let over = true;
    ///         if over {
    ///             if let Some(lobby) = &self.lobby {
    ///                 let _ = lobby.send(LobbyMsg::Result { winner: None });
    ///             }
    ///             out.stop_world();
    ///         }
    ///     }
    ///     # fn schema(&self) -> Schema { Schema::default() }
    ///     # fn leave(&mut self, _: PlayerId) {}
    ///     # fn input(&mut self, _: PlayerId, _: &[u8]) {}
    ///     # fn tick(&mut self, _: u32, _: std::time::Duration) {}
    ///     # fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    /// }
    /// ```
    pub fn world_ref<M: Send + 'static>(&self, world: WorldId) -> Option<WorldRef<M>> {
        let links = self.inner.links.lock().ok()?;
        let tx = links.get(&world)?.mail.as_ref()?.downcast_ref::<tokio::sync::mpsc::Sender<M>>()?;
        (!tx.is_closed()).then(|| WorldRef { id: world, tx: tx.clone() })
    }

    /// What the stepper was asked since it last looked.
    pub(crate) fn take_requests(&self) -> Vec<Request> {
        match &self.inner.backend {
            Backend::Stepper(r, _) => r.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default(),
            Backend::Actors(_) => Vec::new(),
        }
    }

    /// The stepper's worlds changed: these run now.
    pub(crate) fn set_running(&self, ids: impl Iterator<Item = WorldId>) {
        if let Backend::Stepper(_, running) = &self.inner.backend
            && let Ok(mut r) = running.lock()
        {
            r.clear();
            r.extend(ids);
        }
    }

    /// The server's declared world kinds.
    pub fn kinds(&self) -> &[String] {
        &self.inner.kinds
    }

    fn check(&self, options: &WorldOptions, schema: &Schema) -> Result<u32, SpawnError> {
        if !self.inner.kinds.contains(&options.kind) {
            return Err(SpawnError::UnknownKind(options.kind.clone()));
        }
        let server = self.inner.server_hz;
        let hz = options.tick_rate_hz.unwrap_or(server);
        if hz == 0 || hz > server || !server.is_multiple_of(hz) {
            return Err(SpawnError::TickRate(hz, server));
        }
        if *schema != *self.inner.schema {
            return Err(SpawnError::Schema);
        }
        Ok(u32::from(server / hz))
    }

    /// Starts `world` as a new world of the server, with `options`; it starts ticking at the
    /// server's next tick that its rate runs, empty: move players into it
    /// ([`Outbox::move_to`], [`Worlds::move_player`]).
    ///
    /// # Errors
    /// When its kind is not declared, its tick rate does not divide the server's, its schema
    /// is not the server's, or every world number is taken.
    pub fn spawn<W: World>(&self, options: WorldOptions, world: W) -> Result<WorldId, SpawnError> {
        let stride = self.check(&options, &world.schema())?;
        let id = self.inner.numbers.lock().ok().and_then(|mut n| n.take()).ok_or(SpawnError::TooMany)?;
        self.new_link(id);
        match &self.inner.backend {
            Backend::Stepper(r, _) => {
                if let Ok(mut r) = r.lock() {
                    r.push(Request::Spawn(id, options, Box::new(world), self.me));
                }
            }
            Backend::Actors(b) => {
                spawn_actor(b, self.clone(), id, options, world, stride, false)?;
            }
        }
        Ok(id)
    }

    /// [`Worlds::spawn`], for a world that takes the game's messages of type `M`: the
    /// [`WorldRef`] sends them.
    ///
    /// # Errors
    /// As [`Worlds::spawn`].
    pub fn spawn_handling<M: Send + 'static, W: Handles<M>>(
        &self,
        options: WorldOptions,
        world: W,
    ) -> Result<WorldRef<M>, SpawnError> {
        let world = WithMessages::new(world);
        let tx = world.tx.clone();
        let id = self.spawn(options, world)?;
        self.take_messages(id, tx.clone());
        Ok(WorldRef { id, tx })
    }

    /// Stops world `id` (as [`Outbox::stop_world`] does from inside it). The entry world
    /// does not stop this way.
    pub fn stop(&self, id: WorldId) {
        match &self.inner.backend {
            Backend::Stepper(r, _) => r.lock().map(|mut r| r.push(Request::Stop(id))).unwrap_or(()),
            Backend::Actors(b) => {
                if let Some(a) = b.actors.lock().ok().and_then(|a| a.get(&id).cloned()) {
                    let _ = a.cast(WorldMsg::Stop);
                }
            }
        }
    }

    /// Moves `player` to world `to`, from whatever world it is in (see [`Outbox::move_to`]).
    pub fn move_player(&self, player: PlayerId, to: WorldId) {
        match &self.inner.backend {
            Backend::Stepper(r, _) => r.lock().map(|mut r| r.push(Request::Move(player, to))).unwrap_or(()),
            Backend::Actors(b) => drop(b.broadcaster.cast(BroadcastMsg::Move { by: None, player, to })),
        }
    }

    /// `player` starts (`on`) or stops watching world `world` (see [`Outbox::watch`]).
    pub fn watch(&self, player: PlayerId, world: WorldId, on: bool) {
        match &self.inner.backend {
            Backend::Stepper(r, _) => r.lock().map(|mut r| r.push(Request::Watch(player, world, on))).unwrap_or(()),
            Backend::Actors(b) => drop(b.broadcaster.cast(BroadcastMsg::Watch { by: None, player, world, on })),
        }
    }

    /// Starts a spectators' world of world `source`: it shows `source` as it was
    /// [`Spectators::delay`](super::spectate::Spectators) ago (at most
    /// [`MAX_DELAY`](super::spectate::MAX_DELAY)), so spectators cannot tell its players what
    /// they cannot see yet. Move spectators into it like into any world
    /// ([`Outbox::move_to`]); each may follow one of `source`'s players (seeing what the game's
    /// relevancy given in `how` shows that player) or see everything (see
    /// [`SpectatorWorld`](super::spectate::SpectatorWorld)). They hear what `source` sent to
    /// everyone and to its watchers; team and player messages only as
    /// [`Hearing`](super::spectate::Hearing) allows. It stops when `source` does (give it a
    /// fallback in `options`).
    ///
    /// ```no_run
    /// # use volley::prelude::*;
    /// # use volley::server::spectate::{Hearing, Spectators};
    /// # use volley::server::{Everything, Worlds, WorldId, WorldOptions};
    /// # fn f(worlds: &Worlds, duel: WorldId) -> Result<(), volley::server::SpawnError> {
    /// let delay = std::time::Duration::from_secs(3);
    /// let stands = worlds.spectate(
    ///     duel,
    ///     Spectators::new(delay, std::sync::Arc::new(Everything)),
    ///     WorldOptions::new("spectators").fallback(WorldId::ENTRY),
    /// )?;
    /// // The casters hear both teams.
    /// let booth = worlds.spectate(
    ///     duel,
    ///     Spectators::new(delay, std::sync::Arc::new(Everything)).hearing(Hearing::Everything),
    ///     WorldOptions::new("spectators").fallback(WorldId::ENTRY),
    /// )?;
    /// # let _ = (stands, booth); Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Worlds::spawn`]. When `source` is not running, the spectators' world starts and
    /// ends at once (its players, if any, go to its fallback).
    pub fn spectate(
        &self,
        source: WorldId,
        how: super::spectate::Spectators,
        options: WorldOptions,
    ) -> Result<WorldId, SpawnError> {
        let ticks = (how.delay().as_secs_f64() * f64::from(self.inner.server_hz)).round() as u32;
        let (tx, rx) = std::sync::mpsc::sync_channel(super::spectate::FEED_QUEUE);
        self.tap(source, Box::new(super::spectate::Feed(tx)))?;
        let world = super::spectate::SpectatorWorld::live((*self.inner.schema).clone(), rx, ticks, how);
        self.spawn(options, world)
    }

    /// Makes world `source` zone `zone.me` of a map split among several servers (see
    /// [`zone`](super::zone)): its snapshots are tapped for the neighbours, and a border world
    /// of kind `border.kind` (declared in the server's world kinds, like any world's) starts,
    /// watched by every player, showing what the neighbours share. The returned
    /// [`ZoneLink`](super::zone::ZoneLink) is the bus's side: hand it to a bus shell (the
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
    pub fn zone(
        &self,
        source: WorldId,
        zone: super::zone::ZoneOptions,
        border: WorldOptions,
    ) -> Result<super::zone::ZoneLink, SpawnError> {
        if usize::from(zone.me) >= zone.layout.len() {
            return Err(SpawnError::Zone(format!("zone {} is not in a layout of {}", zone.me, zone.layout.len())));
        }
        let neighbours = zone.layout.neighbours(zone.me).len();
        if neighbours > crate::protocol::zone::MAX_NEIGHBOURS {
            let most = crate::protocol::zone::MAX_NEIGHBOURS;
            return Err(SpawnError::Zone(format!("zone {} has {neighbours} neighbours; at most {most}", zone.me)));
        }
        let border = border.watched_by_everyone();
        let stride = self.check(&border, &self.inner.schema)?;
        let hz = f64::from(self.inner.server_hz) / f64::from(stride);
        let fade_ticks = (zone.fade_after.as_secs_f64() * hz).ceil() as u64;
        let (world, build) = super::zone::parts(self.inner.schema.clone(), &zone, fade_ticks, self.inner.keys);
        let border = self.spawn_handling(border, world)?;
        let (link, tap) = build(border);
        self.tap(source, Box::new(tap))?;
        if let Backend::Actors(b) = &self.inner.backend {
            b.metrics.add_zone(link.counters().clone());
        }
        Ok(link)
    }

    /// Hands world `source`'s frames to `tap` from its next tick.
    fn tap(&self, source: WorldId, tap: Box<dyn super::record::Tap>) -> Result<(), SpawnError> {
        match &self.inner.backend {
            Backend::Stepper(r, _) => r.lock().map(|mut r| r.push(Request::Tap(source, tap))).unwrap_or(()),
            Backend::Actors(b) => {
                // Through the broadcaster, which holds it for a world whose actor is starting.
                let tap = BroadcastMsg::Tap(source, super::record::TapBox(tap));
                b.broadcaster.cast(tap).map_err(|_| SpawnError::NotRunning)?;
            }
        }
        Ok(())
    }

    /// The worlds running, the entry world among them.
    pub fn running(&self) -> Vec<WorldId> {
        match &self.inner.backend {
            Backend::Actors(b) => b.actors.lock().map(|a| a.keys().copied().collect()).unwrap_or_default(),
            Backend::Stepper(_, running) => running.lock().map(|r| r.clone()).unwrap_or_default(),
        }
    }

    /// Starts the entry world (by [`start`](super::start)); returns its actor and the task
    /// to watch.
    pub(crate) fn spawn_entry<W: World>(&self, options: WorldOptions, world: W) -> Result<ActorStarted, SpawnError> {
        let stride = self.check(&options, &world.schema())?;
        let id = self.inner.numbers.lock().ok().and_then(|mut n| n.take()).ok_or(SpawnError::TooMany)?;
        debug_assert_eq!(id, WorldId::ENTRY);
        self.new_link(id);
        let Backend::Actors(b) = &self.inner.backend else { return Err(SpawnError::NotRunning) };
        spawn_actor(b, self.clone(), id, options, world, stride, true)?.ok_or(SpawnError::NotRunning)
    }
}

/// The entry world's actor, once started.
pub(crate) type ActorStarted =
    tokio::sync::oneshot::Receiver<Result<(ActorRef<WorldMsg>, tokio::task::JoinHandle<()>), String>>;

/// Registers the world with the broadcaster, then starts its actor on a task. For the
/// essential (entry) world, returns where its actor and join handle arrive (the root
/// watcher watches it); any other world's end is watched here and handed to the broadcaster.
fn spawn_actor<W: World>(
    b: &ActorBackend,
    worlds: Worlds,
    id: WorldId,
    options: WorldOptions,
    world: W,
    stride: u32,
    essential: bool,
) -> Result<Option<ActorStarted>, SpawnError> {
    let inputs = InputQueue::new(b.input_limit);
    let kind = b.metrics.kind_index(&options.kind).unwrap_or(0);
    let record = options.record.clone().or_else(|| b.record.clone()).map(|dir| (dir, options.kind.clone()));
    let options_stop = options.stop_when_empty;
    let new = NewWorld {
        id,
        parent: worlds.me,
        options,
        relevancy: world.relevancy(),
        inputs: inputs.clone(),
        board_columns: world.scoreboard_columns(),
    };
    b.broadcaster.cast(BroadcastMsg::AddWorld(Box::new(new))).map_err(|_| SpawnError::NotRunning)?;
    let why = Arc::new(Mutex::new(String::from("the world stopped")));
    let args = WorldArgs {
        world,
        id,
        clock: b.clock,
        stride,
        essential,
        kind,
        broadcaster: b.broadcaster.clone(),
        metrics: b.metrics.clone(),
        inputs,
        worlds,
        why: why.clone(),
        record,
        stop_when_empty: options_stop,
    };
    let (broadcaster, actors) = (b.broadcaster.clone(), b.actors.clone());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        match Actor::spawn(None, WorldActor::<W>::default(), args).await {
            Ok((actor, task)) => {
                if let Ok(mut a) = actors.lock() {
                    a.insert(id, actor.clone());
                }
                let _ = broadcaster.cast(BroadcastMsg::WorldReady(id, actor.clone()));
                if essential {
                    let _ = started_tx.send(Ok((actor, task)));
                    return;
                }
                let _ = task.await;
                if let Ok(mut a) = actors.lock() {
                    a.remove(&id);
                }
                let why = why.lock().map(|w| w.clone()).unwrap_or_default();
                let _ = broadcaster.cast(BroadcastMsg::WorldEnded(id, why));
            }
            Err(e) => {
                tracing::error!(world = %id, error = %e, "a world's actor did not start");
                let _ = broadcaster.cast(BroadcastMsg::WorldEnded(id, "the world did not start".into()));
                let _ = started_tx.send(Err(e.to_string()));
            }
        }
    });
    Ok(essential.then_some(started_rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the calls that have a default body (a wrapper that forgot to forward one
    /// would call the default instead).
    #[derive(Default, Clone)]
    struct Calls(Arc<Mutex<Vec<String>>>);

    impl Calls {
        fn log(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl World for Calls {
        fn schema(&self) -> Schema {
            Schema::new()
        }
        fn leave(&mut self, _: PlayerId) {}
        fn input(&mut self, _: PlayerId, _: &[u8]) {}
        fn tick(&mut self, _: u32, _: Duration) {}
        fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
        fn handoff_refused(&mut self, player: PlayerId, to: ZoneId, why: &str) {
            self.log(format!("refused {player} {to} {why}"));
        }
        fn world_stopped(&mut self, world: WorldId, why: &str) {
            self.log(format!("stopped {world} {why}"));
        }
        fn message(&mut self, player: PlayerId, _: &[u8], reliable: bool) {
            self.log(format!("message {player} {reliable}"));
        }
        fn input_viewed(&mut self, player: PlayerId, _: &[u8], _: Option<ViewTime>) {
            self.log(format!("input {player}"));
        }
        fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
            self.log(format!("join {player} {}", who.client_id));
        }
        fn shutdown(&mut self) {
            self.log("shutdown".into());
        }
        fn avatar(&self, player: PlayerId) -> Option<EntityId> {
            Some(player)
        }
        fn scoreboard_columns(&self) -> Vec<String> {
            vec!["points".into()]
        }
    }

    impl Handles<()> for Calls {
        fn handle(&mut self, (): ()) {
            self.log("handled".into());
        }
    }

    fn exercise(w: &mut dyn World, calls: &Calls) {
        let who = JoinInfo::new(7, [0; crate::protocol::netcode::USER_DATA_BYTES]);
        w.join_with(6, &who);
        w.input_viewed(6, b"x", None);
        w.handoff_refused(1, 2, "full");
        w.world_stopped(WorldId(3), "over");
        w.message(4, b"hi", true);
        w.shutdown();
        assert_eq!(w.avatar(5), Some(5));
        assert_eq!(w.scoreboard_columns(), ["points"]);
        let want = ["join 6 7", "input 6", "refused 1 2 full", "stopped world 3 over", "message 4 true", "shutdown"];
        assert_eq!(calls.take(), want);
    }

    #[test]
    fn the_wrappers_forward_every_call() {
        let calls = Calls::default();
        exercise(&mut (Box::new(calls.clone()) as Box<dyn World>), &calls);
        let mut wrapped = WithMessages::<_, ()>::new(calls.clone());
        exercise(&mut wrapped, &calls);
        wrapped.tx.try_send(()).unwrap();
        wrapped.tick(1, Duration::from_millis(16));
        assert_eq!(calls.take(), ["handled"]);
        exercise(&mut (Box::new(WithMessages::<_, ()>::new(calls.clone())) as Box<dyn World>), &calls);
    }
}
