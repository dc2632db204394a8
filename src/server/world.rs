//! The world actor: the fixed-timestep authoritative simulation, and the [`World`] trait
//! that a game implements to plug its own simulation in.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::broadcaster::BroadcastMsg;
use super::metrics::ServerMetrics;
use super::simulation::{Command, Simulation, TickInput};
use super::worlds::WorldId;
use crate::protocol::input::{MAX_INPUT_BYTES, ViewTime};
use crate::protocol::netcode::USER_DATA_BYTES;
use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::{EntityId, Interest, Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::zone::ZoneId;

pub use crate::protocol::{Audience, PlayerId};

/// A mistake in a game's code that the server survived: counted in
/// `volley_world_errors_total{kind}` and logged (the first time, then at each power of two).
/// The server skips what was at fault and goes on: an input that panicked is dropped, a tick
/// or message step that panicked leaves the world as the panic left it, a snapshot that
/// panicked means no snapshot that tick, a repeated entity id keeps the first entity
/// inserted, and a relevancy list out of order is sorted (repeats and indices past the end
/// dropped). A world whose every tick panics for [`MAX_PANICKING_TICKS`] ticks in a row is
/// stopped, and the server with it (see the supervision tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorldFault {
    /// [`World::join_with`] (or `join`) panicked.
    PanicInJoin,
    /// [`World::leave`] panicked.
    PanicInLeave,
    /// [`World::input_viewed`] (or `input`) panicked.
    PanicInInput,
    /// [`World::message`] panicked.
    PanicInMessage,
    /// [`World::tick`] panicked.
    PanicInTick,
    /// [`World::messages`] panicked.
    PanicInMessages,
    /// [`World::shutdown`] panicked.
    PanicInShutdown,
    /// [`World::snapshot`] panicked.
    PanicInSnapshot,
    /// [`World::handoff_refused`] panicked.
    PanicInHandoff,
    /// [`World::world_stopped`] panicked.
    PanicInWorldStopped,
    /// [`World::snapshot`] inserted two entities with the same id.
    DuplicateEntity,
    /// [`Relevancy::interest`] returned indices out of order, repeated or past the end.
    RelevancyOrder,
}

impl WorldFault {
    /// Every kind, in label order.
    pub const ALL: [WorldFault; 12] = [
        Self::PanicInJoin,
        Self::PanicInLeave,
        Self::PanicInInput,
        Self::PanicInMessage,
        Self::PanicInTick,
        Self::PanicInMessages,
        Self::PanicInShutdown,
        Self::PanicInSnapshot,
        Self::PanicInHandoff,
        Self::PanicInWorldStopped,
        Self::DuplicateEntity,
        Self::RelevancyOrder,
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::PanicInJoin => "panic_in_join",
            Self::PanicInLeave => "panic_in_leave",
            Self::PanicInInput => "panic_in_input",
            Self::PanicInMessage => "panic_in_message",
            Self::PanicInTick => "panic_in_tick",
            Self::PanicInMessages => "panic_in_messages",
            Self::PanicInShutdown => "panic_in_shutdown",
            Self::PanicInSnapshot => "panic_in_snapshot",
            Self::PanicInHandoff => "panic_in_handoff",
            Self::PanicInWorldStopped => "panic_in_world_stopped",
            Self::DuplicateEntity => "duplicate_entity",
            Self::RelevancyOrder => "relevancy_order",
        }
    }
}

/// Ticks in a row in which the world panicked before it is stopped (five seconds at 60 Hz).
pub const MAX_PANICKING_TICKS: u32 = 300;

/// Decides which entities a player sees and how much each matters.
pub trait Relevancy: Send + Sync + 'static {
    /// Fills `out` with the visible entities of `world` for `player`, by ascending index.
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>);
}

/// Every entity, priority 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct Everything;

impl Relevancy for Everything {
    fn interest(&self, world: &WorldSnapshot, _: PlayerId, out: &mut Vec<Interest>) {
        Interest::everything(world, out);
    }
}

/// Who a joining player is, from the connect token its client presented (minted by your
/// backend, sealed under the key it shares with the servers: the client cannot forge it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinInfo {
    /// The client id the backend put in the token: one per client at a time on a server
    /// (an account id, say), so a returning player is known by it.
    pub client_id: u64,
    /// The token's user data, whatever the backend put there (a name, a team, a ticket).
    pub user_data: [u8; USER_DATA_BYTES],
    /// When the player was handed over from a neighbouring zone (see
    /// [`zone`](crate::server::zone)): the old zone's offer, with the game's state for the
    /// player. `None` for an ordinary join.
    pub handoff: Option<Arc<crate::protocol::zone::handoff::Offer>>,
    /// Where it comes from: it just connected, was moved here from another world, or came
    /// back because the world it was in stopped.
    pub origin: super::worlds::Origin,
}

impl JoinInfo {
    /// Who a player with this token's `client_id` and `user_data` is, just connected.
    pub fn new(client_id: u64, user_data: [u8; USER_DATA_BYTES]) -> Self {
        Self { client_id, user_data, handoff: None, origin: super::worlds::Origin::Connected }
    }
}

/// Decodes a message a client sent with `channel().send_message(&value)` (or
/// `send_event_message`), as [`World::message`] receives it, into the same type.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
/// struct Chat(String);
/// # let bytes = postcard::to_allocvec(&Chat("gg".into())).unwrap();
/// let chat: Chat = volley::server::decode_message(&bytes).expect("a chat line");
/// assert_eq!(chat, Chat("gg".into()));
/// ```
///
/// # Errors
/// When the bytes are not a `T` (a client of another version, or a hostile one): skip the
/// message.
pub fn decode_message<T: serde::de::DeserializeOwned>(message: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(message)
}

/// A message the world sends: audience, bytes, reliable.
pub(crate) type Outgoing = (Audience, bytes::Bytes, bool);

/// What the world sends this tick ([`World::messages`]): messages (reliable ones arrive once
/// and in order, resent until acknowledged; events may be lost), which travel with the
/// tick's snapshot, and kicks.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Queued messages.
    items: Vec<Outgoing>,
    /// Players to disconnect, with why (the words their clients read).
    kicks: Vec<(PlayerId, SessionEnd)>,
    /// Players to hand to a neighbouring zone, with the game's state for each.
    handoffs: Vec<(PlayerId, ZoneId, Vec<u8>)>,
    /// Scoreboard changes: a player's fields, or its name.
    board: Vec<(PlayerId, BoardChange)>,
    /// Moves, watches and a stop, in the order asked.
    changes: Vec<WorldChange>,
    /// Teams, in the order asked (before the tick's messages).
    teams: Vec<(PlayerId, Option<u16>)>,
    /// Messages on the framework's own channel (playback status).
    system: Vec<(Audience, bytes::Bytes)>,
}

/// Something a world asked of the server's directory of worlds ([`Outbox::move_to`] and
/// the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorldChange {
    /// Move one of its players to another world.
    Move(PlayerId, WorldId),
    /// One of its players starts (true) or stops watching a world.
    Watch(PlayerId, WorldId, bool),
    /// Stop this world.
    Stop,
}

/// A change the world made to the scoreboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BoardChange {
    /// Its score fields.
    Fields(Vec<i32>),
    /// Its name.
    Name(String),
}

impl Outbox {
    /// Disconnects `player`, telling its client why: its
    /// [`GameClient::ended`](crate::client::GameClient::ended) reads
    /// [`SessionEnd::Kicked`] with `reason` (at
    /// most [`MAX_KICK_TEXT_BYTES`](crate::protocol::session::MAX_KICK_TEXT_BYTES), cut at a
    /// character boundary). The messages queued for it before the kick go first; it gets no
    /// snapshot after this tick, nothing it sends reaches the world any more, and
    /// [`World::leave`] follows once its client has answered (or after a second).
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # struct Game { cheaters: Vec<PlayerId> }
    /// # impl Game {
    /// fn messages(&mut self, out: &mut Outbox) {
    ///     for p in self.cheaters.drain(..) {
    ///         out.kick(p, "speed hack detected");
    ///     }
    /// }
    /// # }
    /// ```
    pub fn kick(&mut self, player: PlayerId, reason: impl Into<String>) {
        self.kicks.push((player, SessionEnd::Kicked(reason.into())));
    }

    /// Hands `player` (one of this zone's) to the neighbouring zone `to`, with `state`: what
    /// the game there needs to go on with it (its avatar's place, health, inventory: at most
    /// [`MAX_STATE_BYTES`](crate::protocol::zone::handoff::MAX_STATE_BYTES)). For a world
    /// that runs as a zone ([`Worlds::zone`](crate::server::Worlds::zone)); call it when the
    /// player's avatar crosses into `to`'s region.
    ///
    /// From this tick on the player's inputs are held, not applied, while the new zone is
    /// asked (at most the zone's handoff timeout, 100 ms by default). If it accepts, the
    /// player leaves this world ([`World::leave`]), its client is given a connect token for
    /// the new zone's server and goes on there by itself, re-sending the inputs held here,
    /// and the new zone's [`World::join_with`] gets `state` in
    /// [`JoinInfo::handoff`]. If it refuses or does not answer, the player stays: the held
    /// inputs are applied, in order, and [`World::handoff_refused`] says why. A second
    /// handoff of the same player while one is under way, or within a second of a refusal,
    /// is ignored.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # use volley::protocol::zone::ZoneLayout;
    /// # struct Game { layout: ZoneLayout, me: u16, avatars: Vec<(PlayerId, glam::Vec2)> }
    /// # impl Game {
    /// fn messages(&mut self, out: &mut Outbox) {
    ///     for (player, at) in &self.avatars {
    ///         match self.layout.owner(*at) {
    ///             Some(zone) if zone != self.me => out.hand_off(*player, zone, at.x.to_le_bytes().to_vec()),
    ///             _ => {}
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    pub fn hand_off(&mut self, player: PlayerId, to: ZoneId, state: impl Into<Vec<u8>>) {
        self.handoffs.push((player, to, state.into()));
    }

    /// Sets `player`'s score fields on the scoreboard, one per column the world named in
    /// [`World::scoreboard_columns`] (missing ones are 0, extra ones dropped). They reach
    /// every client with the board's next update (twice a second), and only if they changed.
    pub fn set_score(&mut self, player: PlayerId, fields: &[i32]) {
        self.board.push((player, BoardChange::Fields(fields.to_vec())));
    }

    /// Sets `player`'s name on the scoreboard (by default the text of its connect token's
    /// user data up to the first zero byte, or "player N"; at most
    /// [`MAX_NAME_BYTES`](crate::protocol::scoreboard::MAX_NAME_BYTES)).
    pub fn set_name(&mut self, player: PlayerId, name: impl Into<String>) {
        self.board.push((player, BoardChange::Name(name.into())));
    }

    /// Moves `player` (one of this world's) to `world`, without reconnecting: it leaves this
    /// world ([`World::leave`]) and joins that one ([`World::join_with`], with the same
    /// [`JoinInfo`]), its inputs and messages go there from the next tick, its client is told
    /// ([`GameClient::world`](crate::client::GameClient::world)) and its snapshots go on
    /// with that world's entities. Nothing happens if `world` does not run.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # struct Lobby { queue: Vec<PlayerId>, next_match: Option<WorldId> }
    /// # impl Lobby {
    /// fn messages(&mut self, out: &mut Outbox) {
    ///     if let Some(m) = self.next_match.take() {
    ///         for p in self.queue.drain(..) {
    ///             out.move_to(p, m);
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    pub fn move_to(&mut self, player: PlayerId, world: WorldId) {
        self.changes.push(WorldChange::Move(player, world));
    }

    /// `player` (one of this world's) watches `world` too: its snapshots carry that world's
    /// entities as well (by that world's relevancy), until [`Outbox::unwatch`] or until it
    /// moves (a move keeps what it watches).
    pub fn watch(&mut self, player: PlayerId, world: WorldId) {
        self.changes.push(WorldChange::Watch(player, world, true));
    }

    /// `player` no longer watches `world`.
    pub fn unwatch(&mut self, player: PlayerId, world: WorldId) {
        self.changes.push(WorldChange::Watch(player, world, false));
    }

    /// Puts `player` (one of this world's) in `team` (`None`: in none), for
    /// [`Audience::Team`]. It holds for this tick's messages already, whichever order they
    /// were queued in: a world gives a player that joined its team here, in the first
    /// [`World::messages`] after [`World::join_with`], and its team hears what it sends the
    /// team in the same call. A move takes the player out of its team.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # struct Game { joined: Vec<(PlayerId, u16)> }
    /// # impl Game {
    /// fn messages(&mut self, out: &mut Outbox) {
    ///     for (player, team) in self.joined.drain(..) {
    ///         out.set_team(player, Some(team));
    ///         out.reliable(Audience::Team(team), format!("player {player} joins your team"));
    ///     }
    /// }
    /// # }
    /// ```
    pub fn set_team(&mut self, player: PlayerId, team: Option<u16>) {
        self.teams.push((player, team));
    }

    /// Stops this world after this tick: every player still in it leaves
    /// ([`World::leave`]), [`World::shutdown`] runs, and its players go to the world's
    /// fallback ([`WorldOptions::fallback`], told why) or are disconnected. The entry world
    /// cannot be stopped this way (players arrive there); it ignores this.
    ///
    /// [`WorldOptions::fallback`]: crate::server::WorldOptions::fallback
    pub fn stop_world(&mut self) {
        self.changes.push(WorldChange::Stop);
    }

    /// Takes the directory changes, in the order asked.
    pub(crate) fn messages(&self) -> &[Outgoing] {
        &self.items
    }

    /// Sends `data` reliably on the framework's channel (the client library reads it).
    pub(crate) fn system(&mut self, to: Audience, data: bytes::Bytes) {
        self.system.push((to, data));
    }

    pub(crate) fn take_system(&mut self) -> Vec<(Audience, bytes::Bytes)> {
        std::mem::take(&mut self.system)
    }

    pub(crate) fn take_handoffs(&mut self) -> Vec<(PlayerId, ZoneId, Vec<u8>)> {
        std::mem::take(&mut self.handoffs)
    }

    /// Ends `player`'s session as moved to another zone.
    pub(crate) fn moved(&mut self, player: PlayerId) {
        self.kicks.push((player, SessionEnd::Moved));
    }

    /// Whether it moves or kicks a player, or stops the world (its players' last
    /// scoreboard is then due at once).
    pub(crate) fn sends_players_away(&self) -> bool {
        !self.kicks.is_empty() || self.changes.iter().any(|c| matches!(c, WorldChange::Move(..) | WorldChange::Stop))
    }

    /// Its players' new teams, in order (the shells apply them before its messages).
    pub(crate) fn take_teams(&mut self) -> Vec<(PlayerId, Option<u16>)> {
        std::mem::take(&mut self.teams)
    }

    pub(crate) fn take_changes(&mut self) -> Vec<WorldChange> {
        std::mem::take(&mut self.changes)
    }

    /// The queued messages (audience, bytes, reliable) and kicks, in the order queued.
    pub(crate) fn into_parts(self) -> (Vec<Outgoing>, Vec<(PlayerId, SessionEnd)>) {
        (self.items, self.kicks)
    }

    /// Takes the scoreboard changes.
    pub(crate) fn take_board(&mut self) -> Vec<(PlayerId, BoardChange)> {
        std::mem::take(&mut self.board)
    }

    /// Queues a reliable message.
    pub fn reliable(&mut self, to: Audience, data: impl Into<bytes::Bytes>) {
        self.items.push((to, data.into(), true));
    }

    /// Queues an unreliable event.
    pub fn event(&mut self, to: Audience, data: impl Into<bytes::Bytes>) {
        self.items.push((to, data.into(), false));
    }

    /// Serializes `msg` (postcard) and queues it reliably.
    ///
    /// # Errors
    /// When serialization fails.
    pub fn reliable_message<T: serde::Serialize>(&mut self, to: Audience, msg: &T) -> Result<(), postcard::Error> {
        self.reliable(to, postcard::to_allocvec(msg)?);
        Ok(())
    }
}

/// What a game implements: the world actor calls it, one tick at a time, in this order:
/// joins and leaves as they happen, each player's inputs in the order sent, then
/// [`World::tick`], then [`World::messages`], then [`World::snapshot`]. A panic in any of
/// these is caught, counted and skipped ([`WorldFault`]): it costs what it touched, not the
/// server.
pub trait World: Send + 'static {
    /// The replicated kinds (the client must register the same, in the same order).
    fn schema(&self) -> Schema;
    /// A player connected (nothing by default: a game that needs to know who joins
    /// overrides this or [`World::join_with`]).
    fn join(&mut self, player: PlayerId) {
        let _ = player;
    }
    /// A player connected, with who it is ([`JoinInfo`]: the client id and user data of its
    /// connect token). The world actor calls this, and by default it calls [`World::join`];
    /// a game that knows its players by account (to give a returning player its state back,
    /// or to read a team from the user data) overrides it.
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        let _ = who;
        self.join(player);
    }
    /// A player left (disconnected or timed out).
    fn leave(&mut self, player: PlayerId);
    /// One input from a player, as the client sent it (decode it with your own type).
    fn input(&mut self, player: PlayerId, input: &[u8]);
    /// One input with the view the client reported making it with: which snapshots it was
    /// drawing (never one after the newest the server has made; `None` when it reported
    /// none). The world actor calls this, and by default it calls [`World::input`]. A game
    /// with lag compensation overrides it and judges the input's shots against its world
    /// rewound to `view` ([`super::lagcomp::History`]); its [`World::input`] then passes
    /// `None`.
    fn input_viewed(&mut self, player: PlayerId, input: &[u8], view: Option<ViewTime>) {
        let _ = view;
        self.input(player, input);
    }
    /// A message the client sent ([`GameClient::channel`](crate::client::GameClient::channel):
    /// `send_message` reliably, `send_event_message` as an event; decode it with
    /// `postcard::from_bytes` into the same type), in the order it arrived among the player's
    /// inputs, before the tick. Ignored by default. At most
    /// [`MAX_CLIENT_MESSAGES_PER_TICK`](crate::server::MAX_CLIENT_MESSAGES_PER_TICK)
    /// a player and tick, none over
    /// [`MAX_CLIENT_MESSAGE_BYTES`](crate::server::MAX_CLIENT_MESSAGE_BYTES): the rest
    /// is dropped and counted (`volley_client_messages_dropped_total`).
    fn message(&mut self, player: PlayerId, message: &[u8], reliable: bool) {
        let _ = (player, message, reliable);
    }
    /// The handoff of `player` to zone `to` ([`Outbox::hand_off`]) did not happen: the new
    /// zone refused it or did not answer in time (`why` says which), or this world is not a
    /// zone. The player stays here, its held inputs applied; the game may try again (after a
    /// second). Nothing by default.
    fn handoff_refused(&mut self, player: PlayerId, to: ZoneId, why: &str) {
        let _ = (player, to, why);
    }
    /// World `world`, which this world started ([`Worlds::spawn`](crate::server::Worlds::spawn)
    /// on the handle [`World::started`] gave it), stopped: it called
    /// [`Outbox::stop_world`], was stopped, emptied ([`WorldOptions::stop_when_empty`]) or
    /// failed; `why` is what its players were told. Called before its players arrive in
    /// its fallback (their [`JoinInfo::origin`] is [`Origin::Returned`]), and before this
    /// world's next tick. Nothing by default.
    ///
    /// [`WorldOptions::stop_when_empty`]: crate::server::WorldOptions::stop_when_empty
    /// [`Origin::Returned`]: crate::server::Origin::Returned
    fn world_stopped(&mut self, world: WorldId, why: &str) {
        let _ = (world, why);
    }
    /// Advances the simulation by `dt`.
    fn tick(&mut self, tick: u32, dt: Duration);
    /// Writes the replicated state.
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>);
    /// Who sees what; everything by default.
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(Everything)
    }
    /// The entity a player controls, if any (for games that want it in their relevancy).
    fn avatar(&self, _player: PlayerId) -> Option<EntityId> {
        None
    }
    /// Messages for players, and kicks ([`Outbox::kick`]), collected after each tick (none
    /// by default).
    fn messages(&mut self, _out: &mut Outbox) {}
    /// The server is shutting down: called once, last of all, after every player's
    /// [`World::leave`] (each client was told [`SessionEnd::ShuttingDown`] and had the
    /// grace period to answer). Save what must outlive the process here;
    /// [`ServerHandle::shutdown`] returns once this has. Nothing by default.
    ///
    /// [`SessionEnd::ShuttingDown`]: crate::protocol::session::SessionEnd::ShuttingDown
    /// [`ServerHandle::shutdown`]: crate::server::ServerHandle::shutdown
    fn shutdown(&mut self) {}
    /// The scoreboard's columns, if the game wants the built-in scoreboard (none by
    /// default): every player's name, these score fields ([`Outbox::set_score`]) and its
    /// ping go to every client twice a second as a delta
    /// ([`GameClient::scoreboard`](crate::client::GameClient::scoreboard)). Asked once, at
    /// start; at most [`MAX_FIELDS`](crate::protocol::scoreboard::MAX_FIELDS).
    fn scoreboard_columns(&self) -> Vec<String> {
        Vec::new()
    }
    /// The world starts, as world `me` of its server: called once, before anything else.
    /// Keep `worlds` to start, stop and talk to other worlds and to move players
    /// ([`Worlds`](crate::server::Worlds): a lobby starts its matches with it). Nothing by
    /// default.
    fn started(&mut self, me: WorldId, worlds: &super::spawn::Worlds) {
        let _ = (me, worlds);
    }
}

/// What a tick did with the players' inputs.
#[derive(Debug, Clone)]
pub(crate) struct Applied {
    /// Per player, the sequence of the newest input applied by this tick (sorted by player).
    pub newest: Vec<(PlayerId, u32)>,
    /// Per player whose input this tick applied (sorted by player): how long the newest of
    /// them took from arriving at the socket to reaching the world, before the tick began.
    pub fresh: Vec<(PlayerId, Duration)>,
    /// When the tick began.
    pub started: Instant,
}

/// A tick's [`Applied`], shared by every player actor.
pub(crate) type AppliedInputs = Arc<Applied>;

/// Messages to the world actor.
#[derive(Debug)]
pub(crate) enum WorldMsg {
    /// A player joined, and who it is.
    Join(PlayerId, Box<JoinInfo>),
    /// A player left.
    Leave(PlayerId),
    /// Time to step (sent by the actor's timer).
    Tick,
    /// The server is shutting down: every player still joined leaves, then
    /// [`World::shutdown`] runs; the reply says it has.
    Shutdown(ractor::RpcReplyPort<()>),
    /// Stop this world: every player still joined leaves, [`World::shutdown`] runs, and the
    /// actor stops (its players go to its fallback).
    Stop,
    /// Hand every tick's frame to this tap from now on (a spectators' world's feed).
    Tap(super::record::TapBox),
    /// A world this one started stopped, and why.
    Stopped(WorldId, String),
}

/// The world actor (`fn() -> W` keeps it `Sync` whatever `W` is; the world lives in the state).
pub(crate) struct WorldActor<W: World>(std::marker::PhantomData<fn() -> W>);

impl<W: World> Default for WorldActor<W> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// One input on its way to the world. Its bytes are held inline (at most
/// [`MAX_INPUT_BYTES`], as on the wire), so queueing one allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct ClientInput {
    /// Who sent it.
    pub player: PlayerId,
    /// Its sequence number.
    pub seq: u32,
    /// What the client was drawing when it made it.
    pub view: Option<ViewTime>,
    /// When its datagram arrived at the socket.
    pub arrived: Instant,
    bytes: [u8; MAX_INPUT_BYTES],
    len: u8,
    /// Not an input but a message from the client (its bytes, reliable or an event).
    pub message: Option<(Bytes, bool)>,
}

impl ClientInput {
    /// An input of `bytes` (cut to [`MAX_INPUT_BYTES`]; the wire carries no more).
    pub fn new(player: PlayerId, seq: u32, bytes: &[u8], view: Option<ViewTime>, arrived: Instant) -> Self {
        let len = bytes.len().min(MAX_INPUT_BYTES);
        let mut inline = [0u8; MAX_INPUT_BYTES];
        inline[..len].copy_from_slice(&bytes[..len]);
        Self { player, seq, view, arrived, bytes: inline, len: len as u8, message: None }
    }

    /// A message from the client for the world, queued among its inputs.
    pub fn message(player: PlayerId, data: Bytes, reliable: bool, arrived: Instant) -> Self {
        Self {
            player,
            seq: 0,
            view: None,
            arrived,
            bytes: [0; MAX_INPUT_BYTES],
            len: 0,
            message: Some((data, reliable)),
        }
    }

    /// The input as the client encoded it.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(MAX_INPUT_BYTES)]
    }
}

/// Inputs the player actors hand to the world without going through its mailbox: the world
/// takes them all at the start of each tick. Under load the world's mailbox then carries only
/// ticks, joins and leaves, so inputs never wait behind thousands of messages (each player
/// actor pushes its own inputs in order, so per-player order holds).
///
/// Bounded: a world that stalls (a blocking tick) does not let inputs pile up without limit;
/// past the limit new inputs are refused, and the player actor counts them
/// (`volley_inputs_dropped_total`). Clients repeat their recent inputs, so once the world runs
/// again most refused ones arrive anyway.
#[derive(Debug, Clone)]
pub(crate) struct InputQueue {
    queue: Arc<std::sync::Mutex<Vec<Queued>>>,
    limit: usize,
    /// Times the world has taken the queue: the tick round client messages are counted in.
    rounds: Arc<std::sync::atomic::AtomicU64>,
}

/// A queued input and when it was queued.
type Queued = (ClientInput, Instant);

impl Default for InputQueue {
    /// Room for 64 Ki inputs.
    fn default() -> Self {
        Self::new(64 * 1024)
    }
}

impl InputQueue {
    /// A queue that holds at most `limit` inputs between two ticks.
    pub fn new(limit: usize) -> Self {
        Self { queue: Arc::default(), limit: limit.max(1), rounds: Arc::default() }
    }

    /// Times the world has taken the queue (a player's messages are counted per round).
    pub fn round(&self) -> u64 {
        self.rounds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues one input for the next tick, and says in which round ([`InputQueue::round`])
    /// it was queued: exactly, as the round changes only under the queue's lock (a player
    /// that read the round before a tick began learns here that its input went to the next).
    /// `None` (and nothing queued) when the queue is full.
    pub fn push(&self, input: ClientInput) -> Option<u64> {
        match self.queue.lock() {
            Ok(mut q) if q.len() < self.limit => {
                q.push((input, Instant::now()));
                Some(self.round())
            }
            _ => None,
        }
    }

    /// Moves every queued input into `out`, with how long it took from the socket to here.
    fn drain_into(&self, out: &mut Vec<(ClientInput, Duration)>) {
        if let Ok(mut q) = self.queue.lock() {
            // Under the lock: what was pushed in the round before is what is taken now.
            self.rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            out.extend(q.drain(..).map(|(i, queued)| {
                let waited = queued.saturating_duration_since(i.arrived);
                (i, waited)
            }));
        }
    }
}

/// The server's tick clock: every world numbers its ticks on it, so that a player's
/// snapshots never go backwards when it moves between worlds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TickClock {
    /// When tick 0 was.
    pub epoch: Instant,
    /// The server's tick period.
    pub dt: Duration,
}

impl TickClock {
    /// The tick that was due at `t` (the newest not after it).
    pub fn tick_at(&self, t: Instant) -> u32 {
        let d = t.saturating_duration_since(self.epoch).as_nanos() / self.dt.as_nanos().max(1);
        u32::try_from(d).unwrap_or(u32::MAX)
    }

    /// When tick `n` is due.
    pub fn at(&self, n: u32) -> Instant {
        self.epoch + self.dt * n
    }

    /// The first tick after `t` that a world stepping every `stride` ticks runs.
    pub fn next_after(&self, t: Instant, stride: u32) -> u32 {
        let stride = stride.max(1);
        (self.tick_at(t) / stride + 1) * stride
    }
}

/// Starting arguments.
pub(crate) struct WorldArgs<W: World> {
    /// The game.
    pub world: W,
    /// Its number.
    pub id: WorldId,
    /// The server's clock.
    pub clock: TickClock,
    /// Server ticks per tick of this world.
    pub stride: u32,
    /// The essential world (the entry world): its failure fails the server.
    pub essential: bool,
    /// Its kind's index among the declared kinds (figures).
    pub kind: usize,
    /// Where snapshots go.
    pub broadcaster: ActorRef<BroadcastMsg>,
    /// Figures.
    pub metrics: Arc<ServerMetrics>,
    /// Where player actors leave inputs.
    pub inputs: InputQueue,
    /// The server's worlds, for [`World::started`].
    pub worlds: super::spawn::Worlds,
    /// Why it ended, for whoever watches it end.
    pub why: Arc<std::sync::Mutex<String>>,
    /// Record it into this folder (with its kind's name).
    pub record: Option<(std::path::PathBuf, String)>,
    /// Stop once its last player has left.
    pub stop_when_empty: bool,
}

/// The world actor's state.
pub(crate) struct WorldState<W: World> {
    world: W,
    id: WorldId,
    /// The tick step (shared with the stepper).
    sim: Simulation,
    clock: TickClock,
    stride: u32,
    essential: bool,
    kind: usize,
    /// The next tick to run (on the server's clock).
    next: u32,
    /// When the previous tick took its inputs: an input that arrived before then waited past a
    /// tick that could have applied it.
    last_drain: Option<Instant>,
    /// Inputs for the next tick, and how long they took from the socket to the world.
    pending: Vec<(ClientInput, Duration)>,
    broadcaster: ActorRef<BroadcastMsg>,
    metrics: Arc<ServerMetrics>,
    inputs: InputQueue,
    why: Arc<std::sync::Mutex<String>>,
    timer: Option<tokio::task::JoinHandle<()>>,
}

impl TickInput for (ClientInput, Duration) {
    fn player(&self) -> PlayerId {
        self.0.player
    }
    fn seq(&self) -> u32 {
        self.0.seq
    }
    fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }
    fn view(&self) -> Option<ViewTime> {
        self.0.view
    }
    fn message(&self) -> Option<(&[u8], bool)> {
        self.0.message.as_ref().map(|(m, r)| (&m[..], *r))
    }
}

impl<W: World> Actor for WorldActor<W> {
    type Msg = WorldMsg;
    type State = WorldState<W>;
    type Arguments = WorldArgs<W>;

    async fn pre_start(
        &self,
        myself: ActorRef<WorldMsg>,
        args: WorldArgs<W>,
    ) -> Result<WorldState<W>, ActorProcessingErr> {
        let WorldArgs {
            mut world,
            id,
            clock,
            stride,
            essential,
            kind,
            broadcaster,
            metrics,
            inputs,
            worlds,
            why,
            record,
            stop_when_empty,
        } = args;
        let stride = stride.max(1);
        let dt = clock.dt * stride;
        let next = clock.next_after(Instant::now(), stride);
        // The timer fires on the server's clock, so worlds tick in step with each other.
        let timer = tokio::spawn({
            let me = myself.clone();
            async move {
                let mut every = tokio::time::interval_at(clock.at(next), dt);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    every.tick().await;
                    if me.cast(WorldMsg::Tick).is_err() {
                        break;
                    }
                }
            }
        });
        if essential {
            metrics.set_tick_period(clock.dt);
        }
        let mut sim = Simulation::new(Arc::new(world.schema()), dt)
            .with_scoreboard(!world.scoreboard_columns().is_empty())
            .with_stop_when_empty(stop_when_empty);
        if let Some((dir, kind_name)) = record {
            let of = super::record::RecordingOf {
                schema: sim.schema().clone(),
                kind: &kind_name,
                tick_rate_hz: (1.0 / clock.dt.as_secs_f64()).round() as u16,
                stride,
            };
            super::record::record_into(&mut |tap| sim.add_tap(tap), &dir, id, of, Some(metrics.clone()));
        }
        let worlds = worlds.of(id);
        sim.guard(WorldFault::PanicInJoin, || world.started(id, &worlds));
        Ok(WorldState {
            sim,
            world,
            id,
            clock,
            stride,
            essential,
            kind,
            next,
            last_drain: None,
            pending: Vec::new(),
            broadcaster,
            metrics,
            inputs,
            why,
            timer: Some(timer),
        })
    }

    async fn post_stop(&self, _: ActorRef<WorldMsg>, s: &mut WorldState<W>) -> Result<(), ActorProcessingErr> {
        if let Some(t) = s.timer.take() {
            t.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<WorldMsg>,
        msg: WorldMsg,
        s: &mut WorldState<W>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorldMsg::Join(p, who) => s.sim.join(&mut s.world, p, &who),
            WorldMsg::Leave(p) => {
                // Its inputs still queued go with it (its slot may soon be someone else's).
                s.inputs.drain_into(&mut s.pending);
                s.pending.retain(|(i, _)| i.player != p);
                s.sim.leave(&mut s.world, p);
            }
            WorldMsg::Shutdown(reply) => {
                s.sim.shutdown(&mut s.world);
                s.metrics.add_world_faults(s.sim.new_faults());
                let _ = reply.send(());
            }
            WorldMsg::Tap(tap) => s.sim.add_tap(tap.0),
            WorldMsg::Stopped(world, why) => s.sim.world_stopped(&mut s.world, world, &why),
            WorldMsg::Stop => {
                if !s.essential {
                    s.sim.shutdown(&mut s.world);
                    s.metrics.add_world_faults(s.sim.new_faults());
                    set_why(&s.why, "the world was stopped");
                    myself.stop(None);
                }
            }
            WorldMsg::Tick => {
                // Fixed timestep: run every tick that is due (at most 5, then resynchronize).
                let now = Instant::now();
                let mut ran = 0;
                while s.clock.at(s.next) <= now && ran < 5 {
                    let lateness = now.saturating_duration_since(s.clock.at(s.next));
                    let tick = s.next;
                    if !step(s, &myself, tick, lateness)? {
                        return Ok(());
                    }
                    s.next += s.stride;
                    ran += 1;
                }
                if s.clock.at(s.next) <= now {
                    s.metrics.tick_overruns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    s.metrics.record_world_overrun(s.kind);
                    s.next = s.clock.next_after(now, s.stride);
                }
            }
        }
        Ok(())
    }
}

fn set_why(why: &std::sync::Mutex<String>, text: &str) {
    if let Ok(mut w) = why.lock() {
        *w = text.to_owned();
    }
}

/// Runs tick `tick`; false when the world stopped (it failed, or the game stopped it).
fn step<W: World>(
    s: &mut WorldState<W>,
    myself: &ActorRef<WorldMsg>,
    tick: u32,
    lateness: Duration,
) -> Result<bool, ActorProcessingErr> {
    let started = Instant::now();
    let previous_drain = s.last_drain.replace(started);
    s.inputs.drain_into(&mut s.pending);
    let mut fresh = std::collections::BTreeMap::new();
    let dt = s.clock.dt;
    let latest = s.sim.tick();
    let world_dt = s.sim.dt();
    let metrics = &s.metrics;
    s.sim.set_next_tick(tick);
    let stepped = s.sim.step(&mut s.world, s.pending.drain(..), |(input, handling), view| {
        if let Some(v) = view {
            metrics.record_view_age((f64::from(latest) - v.ticks()).max(0.0) * dt.as_secs_f64());
        }
        let next_tick = previous_drain.is_none_or(|d| input.arrived >= d);
        metrics.record_input(started.saturating_duration_since(input.arrived), world_dt, next_tick);
        fresh.insert(input.player, *handling); // the newest input of each player wins
    });
    s.metrics.player_ticks.fetch_add(s.sim.players(), std::sync::atomic::Ordering::Relaxed);
    s.metrics.add_world_faults(s.sim.new_faults());
    let id = s.id;
    let stepped = match stepped {
        Ok(stepped) => stepped,
        Err(stopped) => {
            // Its players go to its fallback, or are told why, before anything else.
            set_why(&s.why, "the world's code kept failing");
            if s.essential {
                let _ = s.broadcaster.cast(BroadcastMsg::WorldEnded(id, "the world's code kept failing".into()));
                return Err(stopped.into());
            }
            tracing::error!(world = %id, "a world's code kept failing; it is stopped, and its players moved");
            myself.stop(None);
            return Ok(false);
        }
    };
    // Each command to the broadcaster, in the one order the stepper keeps too.
    let mut stop = false;
    for c in stepped.commands() {
        let msg = match c {
            Command::Team(player, team) => BroadcastMsg::Team(id, player, team),
            Command::System(to, data) => BroadcastMsg::System { world: id, to, data },
            Command::Message(to, data, reliable) => BroadcastMsg::Message { world: id, to, data, reliable },
            Command::Board(rows) => BroadcastMsg::Board(id, rows),
            Command::Kick(player, end) => BroadcastMsg::Kick(id, player, end),
            Command::Snapshot(snapshot) => {
                if s.essential {
                    s.metrics.entities.store(snapshot.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                let fresh: Vec<(PlayerId, Duration)> = std::mem::take(&mut fresh).into_iter().collect();
                let newest = s.sim.applied_inputs().collect();
                let applied: AppliedInputs = Arc::new(Applied { newest, fresh, started });
                BroadcastMsg::Snapshot(id, snapshot, applied)
            }
            Command::Move(player, to) => BroadcastMsg::Move { by: Some(id), player, to },
            Command::Watch(player, world, on) => BroadcastMsg::Watch { by: Some(id), player, world, on },
            Command::Stop => {
                stop = !s.essential;
                continue;
            }
        };
        s.broadcaster.cast(msg)?;
    }
    let took = started.elapsed();
    s.metrics.record_tick(took, lateness);
    s.metrics.record_world_tick(s.kind, took);
    if stop {
        s.sim.shutdown(&mut s.world);
        set_why(&s.why, "the world stopped");
        myself.stop(None);
        return Ok(false);
    }
    Ok(true)
}

#[cfg(test)]
mod input_queue_tests {
    use super::*;

    #[test]
    fn a_full_queue_refuses_inputs_until_the_world_drains_it() {
        let q = InputQueue::new(3);
        let at = Instant::now();
        let pushed: Vec<bool> =
            (0..5u32).map(|seq| q.push(ClientInput::new(1, seq, &[seq as u8], None, at)).is_some()).collect();
        assert_eq!(pushed, [true, true, true, false, false]);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out.iter().map(|(i, _)| i.seq).collect::<Vec<_>>(), [0, 1, 2], "the oldest kept, in order");
        assert_eq!(out[2].0.bytes(), [2], "the bytes travel with it");
        let mut again = Vec::new();
        q.drain_into(&mut again);
        assert!(again.is_empty(), "drained");
        assert!(q.push(ClientInput::new(1, 5, &[5], None, at)).is_some(), "room again after a tick");
        let long = ClientInput::new(2, 6, &[9; MAX_INPUT_BYTES + 10], None, at);
        assert_eq!(long.bytes().len(), MAX_INPUT_BYTES, "no more than the wire carries");
    }
}
