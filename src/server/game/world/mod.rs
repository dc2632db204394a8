//! The game's API: what a game writes — the [`World`] trait that plugs its own simulation
//! in, the [`Outbox`] its tick fills, who a joining player is ([`JoinInfo`]) and who sees
//! what ([`Relevancy`]) — and what it calls: [`Worlds`] to start, stop and connect worlds,
//! [`WorldOptions`], [`WorldRef`] for typed messages between worlds.
//!
//! This layer imports no actor and no other server module: the world actor that runs a
//! `World`, the stepper, and the extensions (recording, spectating, zones) all build on it.
//! `tools/layers.py` checks that in CI.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`World`], [`Outbox`], [`JoinInfo`], [`Relevancy`], [`WorldFault`] |
//! | `options.rs` | [`WorldId`], [`WorldOptions`], [`Origin`] |
//! | `handle.rs` | [`Worlds`] and the host it asks (the actor server's or the stepper's), [`WorldRef`], [`Handles`], [`WithMessages`] |
//! | `tap.rs` | [`Tap`], the extension interface: what takes a world's frames on the tick's path (recorder, spectators' feed, zone, your own), with hooks on joins and on the players before each tick's inputs ([`Players`]: hold, release, redirect) |

mod handle;
mod options;
mod tap;

use std::sync::Arc;
use std::time::Duration;

use crate::protocol::input::ViewTime;
use crate::protocol::netcode::USER_DATA_BYTES;
use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::{Interest, Schema, SnapshotBuilder, WorldSnapshot};
pub use handle::{Handles, SendError, SpawnError, WORLD_MESSAGE_QUEUE, WithMessages, WorldRef, Worlds};
pub(crate) use handle::{Host, Request, TokenKeys};
pub(crate) use options::Numbers;
pub use options::{Origin, RecordingClosed, RecordingHandle, RecordingState, WorldId, WorldOptions};
pub(crate) use tap::{HeldInput, HeldInputs, InputSpan};
pub use tap::{MAX_HELD_INPUTS, MAX_HOLD, MAX_TAP_MESSAGES, Players, Tap};
pub(crate) use tap::{TapBox, message_event};

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
    /// [`World::world_stopped`] panicked.
    PanicInWorldStopped,
    /// [`World::away`] or [`World::back`] panicked.
    PanicInPresence,
    /// A [`Tap`] panicked taking a frame or a join: it is dropped, the world goes on.
    PanicInTap,
    /// [`World::snapshot`] inserted two entities with the same id.
    DuplicateEntity,
    /// [`Relevancy::interest`] returned indices out of order, repeated or past the end.
    RelevancyOrder,
}

impl WorldFault {
    /// Every kind, in label order.
    pub const ALL: [WorldFault; 13] = [
        Self::PanicInJoin,
        Self::PanicInLeave,
        Self::PanicInInput,
        Self::PanicInMessage,
        Self::PanicInTick,
        Self::PanicInMessages,
        Self::PanicInShutdown,
        Self::PanicInSnapshot,
        Self::PanicInWorldStopped,
        Self::PanicInPresence,
        Self::PanicInTap,
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
            Self::PanicInWorldStopped => "panic_in_world_stopped",
            Self::PanicInPresence => "panic_in_presence",
            Self::PanicInTap => "panic_in_tap",
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
    /// [`zone`](crate::server::extensions::zone)): the old zone's offer, with the game's state for the
    /// player. `None` for an ordinary join.
    pub handoff: Option<Arc<crate::protocol::zone::handoff::Offer>>,
    /// Where it comes from: it just connected, was moved here from another world, or came
    /// back because the world it was in stopped.
    pub origin: Origin,
}

impl JoinInfo {
    /// Who a player with this token's `client_id` and `user_data` is, just connected.
    pub fn new(client_id: u64, user_data: [u8; USER_DATA_BYTES]) -> Self {
        Self { client_id, user_data, handoff: None, origin: Origin::Connected }
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
    /// Scoreboard changes: a player's fields, or its name.
    board: Vec<(PlayerId, BoardChange)>,
    /// Moves, watches and a stop, in the order asked.
    changes: Vec<WorldChange>,
    /// Teams, in the order asked (before the tick's messages).
    teams: Vec<(PlayerId, Option<u16>)>,
    /// Messages on the framework's own channel (playback status).
    system: Vec<(Audience, bytes::Bytes)>,
    /// Another world's scoreboard, shown as this world's (a spectators' world).
    mirror: Option<Vec<crate::protocol::scoreboard::ScoreRow>>,
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
    /// [`World::messages`] after [`World::join_with`] (the same tick's, before anything of
    /// that tick reaches anyone: no client sees the player without its team), and its team
    /// hears what it sends the team in the same call. `join_with` itself has no `Outbox`: a
    /// world notes the team there and sets it here, as below. A move takes the player out of
    /// its team.
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

    /// Shows `rows` (another world's scoreboard: a spectators' world mirrors its source's)
    /// as this world's board, from now on instead of its own players' rows.
    pub(crate) fn mirror_board(&mut self, rows: Vec<crate::protocol::scoreboard::ScoreRow>) {
        self.mirror = Some(rows);
    }

    /// Takes the board to mirror, if one came.
    pub(crate) fn take_mirror(&mut self) -> Option<Vec<crate::protocol::scoreboard::ScoreRow>> {
        self.mirror.take()
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
    /// A player left: its client disconnected, was kicked, or was not heard from for the
    /// resume grace ([`ServerConfig::resume_grace`](crate::server::ServerConfig::resume_grace)).
    fn leave(&mut self, player: PlayerId);
    /// A player's client has not been heard from for its connection timeout (five seconds by
    /// default): its network broke, its laptop slept, its program crashed. The player stays
    /// (its [`PlayerId`], world, team and score row) for the resume grace: if the client
    /// resumes its session within it, [`World::back`] follows, otherwise [`World::leave`].
    /// No input arrives meanwhile. Nothing by default (the avatar stands where it was); a
    /// game may freeze it, hand it to a bot, or [`Outbox::kick`] it at once.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # use std::collections::HashSet;
    /// # #[derive(Default)] struct Arena { frozen: HashSet<PlayerId> }
    /// # impl World for Arena {
    /// # fn schema(&self) -> Schema { Schema::default() }
    /// # fn leave(&mut self, _: PlayerId) {}
    /// # fn input(&mut self, _: PlayerId, _: &[u8]) {}
    /// # fn tick(&mut self, _: u32, _: std::time::Duration) {}
    /// # fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    /// fn away(&mut self, player: PlayerId) {
    ///     // Out of harm's way until its client is back.
    ///     self.frozen.insert(player);
    /// }
    /// fn back(&mut self, player: PlayerId) {
    ///     self.frozen.remove(&player);
    /// }
    /// # }
    /// ```
    fn away(&mut self, player: PlayerId) {
        let _ = player;
    }
    /// A player's client that was [`World::away`] is back: it resumed its session (from a new
    /// address, perhaps), and its inputs flow again, those it made meanwhile first. Nothing
    /// by default.
    fn back(&mut self, player: PlayerId) {
        let _ = player;
    }
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
    /// [`decode_message`] into the same type), in the order it arrived among the player's
    /// inputs, before the tick. Ignored by default. At most
    /// [`MAX_CLIENT_MESSAGES_PER_TICK`](crate::server::MAX_CLIENT_MESSAGES_PER_TICK)
    /// a player and tick, none over
    /// [`MAX_CLIENT_MESSAGE_BYTES`](crate::server::MAX_CLIENT_MESSAGE_BYTES): the rest
    /// is dropped and counted (`volley_client_messages_dropped_total`).
    fn message(&mut self, player: PlayerId, message: &[u8], reliable: bool) {
        let _ = (player, message, reliable);
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
    /// ([`Worlds`]: a lobby starts its matches with it). Nothing by
    /// default.
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        let _ = (me, worlds);
    }
}
