//! Starting, stopping and talking to worlds while the server runs: [`Worlds`], the handle a
//! game keeps (from [`World::started`] or [`ServerHandle::worlds`](crate::server::ServerHandle::worlds)),
//! and [`WorldRef`], a world that takes the game's own typed messages ([`Handles`]).
//!
//! The same handle works on the actor server and in the
//! [`Stepper`](crate::testing::Stepper): it asks a [`Host`], the actor server's (each world
//! an actor of its own) or the stepper's queue of requests ([`StepperHost`]) (the worlds stepped in turn,
//! deterministically). Extensions start their worlds through this handle's public methods
//! ([`Worlds::spawn`], [`Worlds::tap`]) from their own types (`Spectators::start` in
//! `spectate`, `ZoneOptions::start` in `zone`), never by adding methods to it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::tap::Tap;
use super::{JoinInfo, Numbers, Outbox, PlayerId, Relevancy, World, WorldId, WorldOptions};
use crate::protocol::input::ViewTime;
use crate::protocol::snapshot::{Schema, SnapshotBuilder};
use crate::protocol::zone::ZoneCounters;

/// Why a world could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// Its kind is not one the server declared
    /// ([`ServerConfig::world_kinds`](crate::server::ServerConfig::world_kinds)).
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
    /// One message (a panic here is caught and counted like one in [`World::tick`]),
    /// handled at the start of the world's next tick, before its inputs. There is no
    /// [`Outbox`](crate::server::Outbox) here on purpose: what the world sends because of the
    /// message it keeps and sends in the same tick's [`World::messages`], in the one order a
    /// tick's output has (teams, messages, the scoreboard, kicks, the snapshot, moves), so a
    /// message handled here never overtakes the tick's own. A reply to the sender travels in
    /// `M` (a oneshot sender, as above).
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
    /// A reference to no running world, and what is sent through it (for tests).
    #[cfg(test)]
    pub(crate) fn detached(id: WorldId) -> (Self, tokio::sync::mpsc::Receiver<M>) {
        let (tx, rx) = tokio::sync::mpsc::channel(WORLD_MESSAGE_QUEUE);
        (Self { id, tx }, rx)
    }

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
/// the worlds it starts in one; wrap the world you give [`start`](crate::server::start) (or the
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
    host: Box<dyn Host>,
    /// Who started each world, and where the worlds that take messages take them.
    links: Mutex<BTreeMap<WorldId, WorldFacts>>,
}

/// What the worlds know of one world.
#[derive(Default)]
struct WorldFacts {
    /// The world that started it.
    parent: Option<WorldId>,
    /// Its messages' queue (a `tokio::sync::mpsc::Sender<M>`), if it takes messages.
    mail: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// Its scoreboard's columns.
    columns: Vec<String>,
}

/// The server's protocol id and private key: a zone mints the connect token for the zone a
/// player is handed to with them (every zone of a map shares the key).
#[derive(Clone, Copy)]
pub(crate) struct TokenKeys {
    pub protocol_id: u64,
    pub private_key: crate::protocol::netcode::Key,
}

/// Where a server's worlds run: the actor server's side, or the stepper's [`StepperHost`]
/// requests. [`Worlds`] asks it, whichever it is.
pub(crate) trait Host: Send + Sync {
    /// Starts `world` as world `id` (started by `worlds`' world, if one), ticking every
    /// `stride` server ticks.
    fn spawn(
        &self,
        worlds: &Worlds,
        id: WorldId,
        options: WorldOptions,
        world: Box<dyn World>,
        stride: u32,
    ) -> Result<(), SpawnError>;
    /// Stops world `id`.
    fn stop(&self, id: WorldId);
    /// Moves `player` to world `to`.
    fn move_player(&self, player: PlayerId, to: WorldId);
    /// `player` starts or stops watching `world`.
    fn watch(&self, player: PlayerId, world: WorldId, on: bool);
    /// Hands world `source`'s frames to `tap` from its next tick.
    fn tap(&self, source: WorldId, tap: Box<dyn Tap>) -> Result<(), SpawnError>;
    /// The worlds running.
    fn running(&self) -> Vec<WorldId>;
    /// A zone's figures, for the server's metrics (nothing by default).
    fn add_zone(&self, counters: Arc<ZoneCounters>) {
        let _ = counters;
    }
    /// What was asked since the last look (the stepper's; nothing by default).
    fn take_requests(&self) -> Vec<Request> {
        Vec::new()
    }
    /// The worlds that run now (the stepper's; nothing by default).
    fn set_running(&self, ids: &mut dyn Iterator<Item = WorldId>) {
        let _ = ids;
    }
}

/// The stepper's host: what it is asked waits here for its next step.
#[derive(Default)]
pub(crate) struct StepperHost {
    requests: Mutex<Vec<Request>>,
    running: Mutex<Vec<WorldId>>,
}

impl StepperHost {
    fn push(&self, r: Request) {
        if let Ok(mut q) = self.requests.lock() {
            q.push(r);
        }
    }
}

impl Host for StepperHost {
    fn spawn(
        &self,
        worlds: &Worlds,
        id: WorldId,
        options: WorldOptions,
        world: Box<dyn World>,
        stride: u32,
    ) -> Result<(), SpawnError> {
        self.push(Request::Spawn { id, options, world, parent: worlds.me(), stride });
        Ok(())
    }
    fn stop(&self, id: WorldId) {
        self.push(Request::Stop(id));
    }
    fn move_player(&self, player: PlayerId, to: WorldId) {
        self.push(Request::Move(player, to));
    }
    fn watch(&self, player: PlayerId, world: WorldId, on: bool) {
        self.push(Request::Watch(player, world, on));
    }
    fn tap(&self, source: WorldId, tap: Box<dyn Tap>) -> Result<(), SpawnError> {
        self.push(Request::Tap(source, tap));
        Ok(())
    }
    fn running(&self) -> Vec<WorldId> {
        let mut r = self.running.lock().map(|r| r.clone()).unwrap_or_default();
        if r.is_empty() {
            r.push(WorldId::ENTRY);
        }
        r
    }
    fn take_requests(&self) -> Vec<Request> {
        self.requests.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default()
    }
    fn set_running(&self, ids: &mut dyn Iterator<Item = WorldId>) {
        if let Ok(mut r) = self.running.lock() {
            r.clear();
            r.extend(ids);
        }
    }
}

/// What the stepper is asked to do at its next step.
pub(crate) enum Request {
    /// Start this world (started by `parent`, if one did), ticking every `stride` server
    /// ticks ([`Worlds::check`]'s reading of its options, as the actors get it).
    Spawn { id: WorldId, options: WorldOptions, world: Box<dyn World>, parent: Option<WorldId>, stride: u32 },
    /// Stop a world.
    Stop(WorldId),
    /// Move a player.
    Move(PlayerId, WorldId),
    /// Watch (or stop watching) a world.
    Watch(PlayerId, WorldId, bool),
    /// Hand a world's frames to a tap.
    Tap(WorldId, Box<dyn Tap>),
}

impl Worlds {
    /// A handle over `host` (the actor server's, or the stepper's [`StepperHost`]).
    pub(crate) fn new(
        numbers: Arc<Mutex<Numbers>>,
        kinds: Vec<String>,
        server_hz: u16,
        schema: Arc<Schema>,
        keys: TokenKeys,
        host: Box<dyn Host>,
    ) -> Self {
        let links = Mutex::default();
        Self { inner: Arc::new(Inner { numbers, kinds, server_hz, schema, keys, host, links }), me: None }
    }

    /// The stepper's handle: what it is asked waits in a [`StepperHost`].
    pub(crate) fn stepper(
        numbers: Arc<Mutex<Numbers>>,
        kinds: Vec<String>,
        server_hz: u16,
        schema: Arc<Schema>,
        keys: TokenKeys,
    ) -> Self {
        Self::new(numbers, kinds, server_hz, schema, keys, Box::new(StepperHost::default()))
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
            l.insert(id, WorldFacts { parent: self.me, mail: None, columns: Vec::new() });
        }
    }

    /// The world that started world `world` ([`Worlds::spawn`] on the handle
    /// [`World::started`] gave it); `None` for the entry world, and for a world started
    /// from outside every world ([`ServerHandle::worlds`](crate::server::ServerHandle::worlds)).
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
        self.inner.host.take_requests()
    }

    /// The stepper's worlds changed: these run now.
    pub(crate) fn set_running(&self, ids: &mut dyn Iterator<Item = WorldId>) {
        self.inner.host.set_running(ids);
    }

    /// The world this handle was given to, if one.
    pub(crate) fn me(&self) -> Option<WorldId> {
        self.me
    }

    /// The server's schema.
    pub(crate) fn schema(&self) -> &Arc<Schema> {
        &self.inner.schema
    }

    /// The server's tick rate.
    pub(crate) fn server_hz(&self) -> u16 {
        self.inner.server_hz
    }

    /// The keys a zone mints connect tokens with.
    pub(crate) fn keys(&self) -> TokenKeys {
        self.inner.keys
    }

    /// Where the worlds run.
    pub(crate) fn host(&self) -> &dyn Host {
        &*self.inner.host
    }

    /// The server's declared world kinds.
    pub fn kinds(&self) -> &[String] {
        &self.inner.kinds
    }

    /// The stride of a world with `options` and `schema` on this server (its tick rate must
    /// divide the server's), or why it cannot start.
    pub(crate) fn check(&self, options: &WorldOptions, schema: &Schema) -> Result<u32, SpawnError> {
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
        let id = self.take_number()?;
        self.set_columns(id, world.scoreboard_columns());
        self.inner.host.spawn(self, id, options, Box::new(world), stride)?;
        Ok(id)
    }

    /// World `id`'s scoreboard has these columns.
    pub(crate) fn set_columns(&self, id: WorldId, columns: Vec<String>) {
        if let Ok(mut l) = self.inner.links.lock() {
            l.entry(id).or_default().columns = columns;
        }
    }

    /// World `id`'s scoreboard columns (none: it has no board, or is not known).
    pub(crate) fn columns_of(&self, id: WorldId) -> Vec<String> {
        self.inner.links.lock().ok().and_then(|l| Some(l.get(&id)?.columns.clone())).unwrap_or_default()
    }

    /// A free world number, for a world this handle's world starts.
    pub(crate) fn take_number(&self) -> Result<WorldId, SpawnError> {
        let id = self.inner.numbers.lock().ok().and_then(|mut n| n.take()).ok_or(SpawnError::TooMany)?;
        self.new_link(id);
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
        self.inner.host.stop(id);
    }

    /// Moves `player` to world `to`, from whatever world it is in (see [`Outbox::move_to`]).
    pub fn move_player(&self, player: PlayerId, to: WorldId) {
        self.inner.host.move_player(player, to);
    }

    /// `player` starts (`on`) or stops watching world `world` (see [`Outbox::watch`]).
    pub fn watch(&self, player: PlayerId, world: WorldId, on: bool) {
        self.inner.host.watch(player, world, on);
    }

    /// Attaches an extension to world `source`: `tap` gets its frame at every tick from its
    /// next one (see [`Tap`]), until it says it is done or the world stops. How recording,
    /// spectators and zones attach; an anti-cheat check or an analytics exporter attaches
    /// the same way.
    ///
    /// # Errors
    /// [`SpawnError::NotRunning`] when the server is shutting down. A world that is not
    /// running drops the tap.
    pub fn tap(&self, source: WorldId, tap: Box<dyn Tap>) -> Result<(), SpawnError> {
        self.inner.host.tap(source, tap)
    }

    /// The worlds running, the entry world among them.
    pub fn running(&self) -> Vec<WorldId> {
        self.inner.host.running()
    }
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
        w.world_stopped(WorldId(3), "over");
        w.message(4, b"hi", true);
        w.shutdown();
        assert_eq!(w.scoreboard_columns(), ["points"]);
        let want = ["join 6 7", "input 6", "stopped world 3 over", "message 4 true", "shutdown"];
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
