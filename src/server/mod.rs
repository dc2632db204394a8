//! The server: what a game writes, and the actors that run it.
//!
//! # What a game writes
//!
//! | item | what it is |
//! | --- | --- |
//! | [`World`] | your simulation: `join_with`/`leave`, `input`/`input_viewed`, `message`, `tick`, `messages`, `snapshot`, `relevancy`, `shutdown` (called in that order, documented on the trait) |
//! | [`Outbox`] | what the world sends after a tick: reliable messages and events to [`Audience::All`] or one player, and kicks ([`Outbox::kick`], with the reason the client reads) |
//! | [`decode_message`] | a client's typed message, as [`World::message`] receives it |
//! | [`JoinInfo`], [`PlayerId`], [`Origin`] | who joined (the connect token's client id and user data), its id, and where it comes from (connected, moved, back from a stopped world, handed over) |
//! | [`Relevancy`], [`Everything`] | who sees what |
//! | [`ServerConfig`], [`start`], [`ServerHandle`] | running it: `start(config, world).await`, then `shutdown().await` |
//! | [`Worlds`], [`WorldOptions`], [`WorldId`] | more worlds while it runs (lobbies, matches, a global world): start and stop them, move players between them without reconnecting ([`Outbox::move_to`]), let players watch other worlds ([`Outbox::watch`]) |
//! | [`Handles`], [`WorldRef`], [`WithMessages`] | a world that takes the game's own typed messages (from a matchmaker, a stats actor, another world: [`Worlds::world_ref`], [`Worlds::started_by`]); [`World::world_stopped`] tells a world that one it started stopped |
//! | [`spectate::SpectatorWorld`], [`spectate::Spectators::start`], [`WorldOptions::recorded`], [`ServerConfig::record`] | recordings of worlds, replays of them, and live spectators a delay behind (see the README's "Replays and spectators") |
//! | [`Tap`], [`Worlds::tap`], [`Players`] | your own extension on a world (an anti-cheat check, an analytics exporter): each tick's snapshot, joins, leaves, messages and board, and the players before each tick's inputs (hold, let go, redirect to another server, kick, send messages), as recording, spectators and zones get them |
//! | [`WorldFault`], [`MAX_PANICKING_TICKS`] | the game's mistakes the server survives, and when it stops a world |
//! | [`lagcomp`] | a history to judge inputs against what the client saw |
//! | [`spatial::Grid`] | a spatial index: the nearest k and everything within a radius, for a [`Relevancy`] or the game's own rules |
//! | [`metrics`], [`ServerConfig::admin_addr`] | for operators: Prometheus figures, the admin listener (`/metrics`, `/healthz`, `/readyz`, `/players`) |
//!
//! `volley::prelude` re-exports the first rows; the guides are the README's "Writing your own
//! world" and "Lobbies, matches and shared worlds", `examples/tag` a complete game and
//! `volley_arena::rooms` a lobby with matches. Everything below is how it runs.
//!
//! # Many worlds
//!
//! A server runs any number of worlds, each its own world actor at its own fixed timestep:
//! the entry world [`start`] was given (where players arrive), and those the game starts
//! with [`Worlds::spawn`]. Each player is *in* one world (which gets its inputs and messages)
//! and may *watch* others. Each time its world ticks, the player's snapshot is merged from
//! the newest snapshot of every world it sees: entity ids carry their world's number in
//! their top bits ([`merged_id`](crate::protocol::snapshot::world::merged_id); world 0's ids
//! are unchanged), each world's [`Relevancy`] picks from its own part with its own ids, and
//! one encoder deltas the whole against what the client acknowledged, with one byte budget
//! and one priority order. A watched world that ticks less often (a 20 Hz global world under
//! 60 Hz matches) is held: its newest snapshot goes into every merged snapshot until its
//! next tick, and its unchanged entities cost nothing in between. Players with the same
//! world and the same watched worlds share one merged snapshot per tick. Every world
//! numbers its ticks on the server's clock (a world started later starts at the current
//! tick; a 20 Hz world on a 60 Hz server runs every third tick number), so a player that
//! moves never sees its snapshot ticks go backwards; its first snapshot in the new world is a
//! delta against what it had (the new world's entities arrive as creations, the old one's
//! as deletions). Clients learn where they are from a notice on the framework's channel
//! ([`GameClient::world`](crate::client::GameClient::world)).
//!
//! # The actors
//!
//! Thin ractor shells around the sans-IO protocol core:
//!
//! ```text
//!            UDP                                                  once a tick
//! clients ◄──────► socket actor ──payloads (mailbox)──► player actors ◄──snapshot── broadcaster ◄── world actor
//!                  (handshake, routing, limits,         (session: send half,                       (fixed timestep,
//!                   each player's inlet:                 acks, reliability,                         your World)
//!                   receive half, inputs) ──inputs──┐    deltas, messages) ──messages──┐                 ▲
//!                                                   └──────────────────────────────────┴─ input queue ───┘
//! ```
//!
//! # Runtime semantics
//!
//! | rule | what holds | how |
//! | --- | --- | --- |
//! | ordering | each actor handles one message at a time, in the order received; a player's datagrams are taken in arrival order; its inputs reach the world in the order the client sent them (sequence-numbered, repeats skipped) and are applied at the next tick, before [`World::tick`], each with the view the client made it with ([`World::input_viewed`]; never one after the newest snapshot made) | the socket actor reads each datagram through the player's inlet (`inlet::Inlet`: the receive half of its connection), pushes its new inputs into the world's input queue itself (which the world empties each tick, not its mailbox) and leaves the rest of the payload in the player's mailbox (`mailbox::Mailbox`), in arrival order, for the player actor to read first thing at its next wake-up; the client's messages reach the world from the player actor, so a message may land a tick after an input of the same datagram; a leaving or closing player's inputs are dropped |
//! | backpressure | memory per client is bounded whatever it sends | at most `player_queue` payloads wait in a player's mailbox (more are dropped and counted; half of them wake the actor); handshakes are rate-limited per address and in total, and nothing exists for an address until it answers the challenge; at most 1024 world messages wait for a player actor (then its events are dropped, and a reliable message that cannot be queued disconnects it rather than being lost) |
//! | one owner per player, woken once a tick | a player's session (send half, acks, RTT, reliability, snapshot history, merged delta) is touched by its player actor alone; inputs never wait for it | the player actors of a tick are woken a few at a time (`broadcaster::FanOut`: four per core, each that finishes its snapshot wakes the next), each at most once a tick (`volley_fanout_repeat_wakeups_total`); a woken actor first reads what its mailbox holds (acks before the snapshot), then encodes its snapshot for its player alone (the broadcaster clones an `Arc` per player); a payload wakes it at once only for a control message or the client's messages (`volley_player_datagrams_total{path}`, `volley_player_wakeups_total{reason}`) |
//! | world messages keep the world's order | every player sees the world's messages in the order sent, its own interleaved correctly | messages to one player are cast to its actor; messages to everyone are left in each player's inbox as one shared batch per tick, which the actor takes before whatever wakes it next |
//! | a world is announced before it speaks | a client reads the notice that its player is in a world ([`GameClient::next_notice`](crate::client::GameClient::next_notice)) after every reliable message the world before sent it, and before any message or event the new world sends it, at connect and at every move, however the link loses or reorders; an event of the old world (unreliable) may still be overtaken | the session keeps each notice at its place in the game's channel: it goes once everything queued before it is acknowledged, and what is queued after it is held back until the client acknowledges the notice (`Channel::hold_from`); a client more than 16 notices behind is disconnected (`TooFarBehind`). The stepper runs the same session code |
//! | snapshots are newest-wins | a player actor that falls behind skips to the newest tick | each tick's snapshot goes into a one-place slot per player (the actor is woken only if it was empty); replaced ones count in `volley_snapshots_replaced_total` |
//! | batched system calls | datagrams move 32 per system call | `recvmmsg` on the socket; snapshots leave through `batcher::SnapshotBatcher` (`sendmmsg`), the rest as soon as the last player actor woken for the tick is done; control packets at once |
//! | a fan-out short of CPU | every player's snapshot rate falls evenly, not whoever is last | over 1 % of a second's snapshots replaced: one snapshot in 2, 3, 4 ticks for every player, staggered by id, and each client asked to send inputs at that rate (`pace::Pacer`, [`Pace`](crate::protocol::system::Pace)); back up after calm seconds when the fan-out has room ([`ServerConfig::min_snapshot_rate_hz`], [`ServerHandle::pin_snapshot_interval`]) |
//! | overload | a late world catches up, then skips | the ticks due run (at most five at once), then an overrun is counted |
//! | client messages | a client's messages reach the world with its inputs, bounded | at most `session::MAX_CLIENT_MESSAGES_PER_TICK` a player and tick (the rest dropped and counted); [`World::message`] for each, in arrival order among that player's inputs, before the tick |
//! | game faults | a mistake in the game's code costs what it touched, never the tick | a panic in a [`World`] method or a [`Tap`] is caught (an input that panicked is dropped, a snapshot that panicked means none that tick, a tap that panicked is dropped); a repeated entity id keeps the first; a relevancy list out of order is sorted; each logged (first time, then each power of two) and counted in `volley_world_errors_total{kind}` ([`WorldFault`]); the [`Stepper`](crate::testing::Stepper) counts the same |
//! | failure | one player's failure costs that player; an essential part's, the server | a player actor that fails (a panic in it, or in the relevancy it runs) is cleaned up alone by the socket actor (disconnect packets, address, slot and world membership released); its client is told why ([`SessionEnd::ServerFault`](crate::protocol::session::SessionEnd::ServerFault)) by a copy of its send half the socket actor keeps; an essential part that ends outside a shutdown fails the server (`/healthz` 503 naming it, [`ServerHandle::wait`] returns, `volley` exits non-zero); see the supervision tree below |
//! | shutdown | clients are told, worlds hear the end | [`ServerHandle::shutdown`] has every player actor send the disconnect packets and waits for them (up to the grace period), runs every world's [`World::shutdown`] after its players' leaves, then stops the worlds, the broadcaster and the socket, in that order |
//!
//! # Where the logic lives
//!
//! Each piece exists once, in a sans-IO core that the actors, the deterministic
//! [`Stepper`](crate::testing::Stepper), the fuzz targets and the interop tests all drive:
//!
//! | core | what it owns | driven by |
//! | --- | --- | --- |
//! | [`Endpoint`](crate::protocol::netcode::server::Endpoint) | handshake, rate limits (per address, total, pending per IP), slots, routing of each address to its connection | socket actor, stepper, `endpoint` and `netcode_server` fuzz targets, interop and rules tests |
//! | [`Connection`](crate::protocol::netcode::server::Connection), split in a [`ReceiveHalf`](crate::protocol::netcode::server::ReceiveHalf) and a [`SendHalf`](crate::protocol::netcode::server::SendHalf) | one client's keys, replay window, packet budget (charged only for what authenticates); its sequence, keep-alives, timeout | the receive half: the player's inlet; the send half: its session |
//! | `inlet::Inlet` | the receive half of one player's connection, the de-duplication of its inputs and their bound per tick | socket actor, stepper |
//! | `session::PlayerSession` | one player's send half, reliability channels, snapshot history and merged delta, its client's messages, notices and goodbye | player actor (alone), stepper |
//! | `mailbox::Mailbox`, `mailbox::Frames` | what the socket actor and the broadcaster leave for a player actor (payloads, the newest snapshot, message batches, its world's input queue), when a payload wakes it, and the one way payloads are read (`Frames::read_into`) | socket actor, broadcaster, player actor; the stepper reads `Frames` the same way |
//! | `simulation::Simulation` | one tick: inputs in order, `World::tick`, messages, the snapshot against the previous; hands each tick's frame to its taps (a recorder, a spectators' feed) | world actors, stepper |
//! | `simulation::Command` (`Stepped::commands`) | what a tick asks of the rest of the server, in one order: teams, framework messages, the game's messages, the scoreboard, kicks, the snapshot, moves and watches, a stop | the world actor (one broadcaster message each), the stepper (carried out at once) |
//! | [`RecordWriter`](crate::protocol::recording::RecordWriter), [`Playhead`](crate::protocol::recording::Playhead) | the recording file: frames to chunks, chunks to the state at any tick | the recorder thread, replay worlds, the `recording` fuzz target, tests |
//! | `directory::Directory` | who is in which world and watches which, each world's newest snapshot, the merged view of each group of players, and the effects of a move, a join, a world's end (`join`/`leave` calls, the client's notice, its input queue) | broadcaster, stepper |
//! | [`Worlds`] over `world::Host` | starting, stopping, moving and watching, asked the same way whatever runs the worlds: `spawn::ActorBackend` (actors, the broadcaster) or the stepper's queued requests | the game, both shells |
//!
//! The modules live in one folder per layer, with no import circle and no import of a
//! higher layer, checked by `tools/layers.py`: the game API (`game/`: [`world`], [`lagcomp`],
//! [`spatial`]; it imports no other server module), the sans-IO cores (`cores/`: `inlet`,
//! `session`, `inputs`, `simulation`, `directory`, `executor`, `board`, `pace`), operations
//! (`ops/`: [`metrics`], the admin listener, the links' shaping), the extensions built on the game
//! API's extension points (`extensions/`: [`spectate`], the recorder, [`zone`]), and the
//! shells (`shells/`: the actors, their messages and mailboxes, the batcher, the world
//! spawner).
//!
//! # Supervision tree
//!
//! | part | started by | supervised by | when it fails |
//! | --- | --- | --- | --- |
//! | entry world actor (the [`World`] given to [`start`]) | [`start`] | the root watcher | a panic in your code is caught, counted and skipped ([`WorldFault`]); [`MAX_PANICKING_TICKS`] panicking ticks in a row stop it, its players are told [`SessionEnd::WorldStopped`](crate::protocol::session::SessionEnd::WorldStopped), and the server fails |
//! | other world actors ([`Worlds::spawn`]) | [`Worlds`] (a task) | that task, which tells the broadcaster when it ends | caught and counted the same; [`MAX_PANICKING_TICKS`] panicking ticks in a row stop that world alone: its players go to its fallback world, told why ([`EnterReason::WorldStopped`](crate::protocol::system::EnterReason::WorldStopped)), or are disconnected if it has none. No other world notices |
//! | broadcaster | [`start`] | the root watcher | the server fails |
//! | socket actor | [`start`] | the root watcher | the server fails |
//! | receive loop (a task) | socket actor | the socket actor (a watcher task) | the socket actor fails, so the server fails |
//! | player actors | socket actor (linked) | socket actor | that player is disconnected and cleaned up alone (`volley_actor_failures_total`) |
//! | the recording thread (one for the process, writing every recorded world; in the stepper each recording is written in the stepper's own thread instead) | the first recorded world's start | none: each recording is fed through a bounded queue and never waited for | a write error, or a panic while coding or writing, ends that recording alone (logged, `volley_recording_failures_total`, told to its [`RecordingHandle`]); the world and the other recordings never notice. A world's stop closes its recording whole: every frame queued, then the file's end, and its handle says `Closed` with the path |
//! | spectators' world actors ([`Spectators::start`](spectate::Spectators::start)) | [`Worlds`] (a task), like other worlds | that task | as other worlds; fed by a tap on the watched world (a bounded queue: frames are left out, never waited for), it ends after the watched world does |
//! | admin thread (`/metrics`, `/healthz`) | [`start`] | none: its own thread and runtime | the probes cannot connect, which is itself the failure signal |
//! | shaping task (sends conditioned players' held datagrams, [`ServerHandle::condition_player`]) | [`start`] | none: it cannot panic (a poisoned lock makes it idle), and is aborted with the [`ServerHandle`] | conditioned players get nothing more: their send rates fall to the least, as on a dead link; nobody else notices |
//!
//! The broadcaster owns the directory of worlds and players: every change of who is where
//! (a join, a leave, a move, a world's start or end) passes through its mailbox in order, and
//! it alone sets a player's input queue.
//!
//! The root watcher is a task [`start`] spawns over the three essential actors; "the
//! server fails" means `/healthz` answers 503 with what stopped, [`ServerHandle::failure`]
//! says the same, and [`ServerHandle::wait`] returns.

pub(crate) mod cores;
pub(crate) mod extensions;
pub(crate) mod game;
pub(crate) mod ops;
pub(crate) mod shells;

pub use extensions::{spectate, zone};
pub use game::{lagcomp, spatial, world};
use ops::admin;
pub use ops::metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ractor::{Actor, ActorRef};
use tokio::net::UdpSocket;

pub use cores::session::{
    FLOOD_MEMORY_TICKS, GAME_CHANNEL_RECEIVE_BYTES, GOODBYE_RESEND, GOODBYE_TIMEOUT, MAX_CLIENT_MESSAGE_BYTES,
    MAX_CLIENT_MESSAGES_PER_TICK, MAX_FLOODING_TICKS, MAX_INPUTS_PER_TICK, MAX_MALFORMED_RUN, MessageDrops, PacketDrop,
    PlayerBudget, SYSTEM_CHANNEL_RECEIVE_BYTES,
};
pub use game::world::{
    Audience, Everything, Handles, JoinInfo, MAX_HELD_INPUTS, MAX_HOLD, MAX_PANICKING_TICKS, MAX_TAP_MESSAGES, Origin,
    Outbox, PlayerId, Players, RecordingClosed, RecordingHandle, RecordingState, Relevancy, SendError, SpawnError, Tap,
    WORLD_MESSAGE_QUEUE, WithMessages, World, WorldFault, WorldId, WorldOptions, WorldRef, Worlds, decode_message,
};
pub use ops::metrics::ServerMetrics;
pub use ops::shaping::{LinkReport, PlayerLink};

use crate::protocol::netcode::Key;
use crate::protocol::netcode::server::EndpointConfig;
use crate::protocol::session::{PROTOCOL_VERSION, SessionParams};

/// What [`ServerHandle::failure`] says when essential part `which` ended (the
/// [`Stepper`](crate::testing::Stepper) says the same of its entry world).
pub(crate) fn failure_of(which: &str) -> String {
    format!("the {which} stopped")
}

/// The entry world's part in the supervision tree, as failures name it.
pub(crate) const ENTRY_WORLD_PART: &str = "world actor";

/// Unix time from the system clock (the netcode layer's time base).
pub fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Asks for `bytes` of kernel buffer each way on `socket` (best effort: the kernel may give
/// less) and logs what it got.
fn size_buffers(socket: &UdpSocket, bytes: usize) {
    let s = socket2::SockRef::from(socket);
    if let Err(e) = s.set_recv_buffer_size(bytes).and_then(|()| s.set_send_buffer_size(bytes)) {
        tracing::warn!(error = %e, bytes, "could not size the socket's buffers");
    }
    let got = (s.recv_buffer_size().unwrap_or(0), s.send_buffer_size().unwrap_or(0));
    if got.0 < bytes || got.1 < bytes {
        tracing::info!(
            asked = bytes,
            receive = got.0,
            send = got.1,
            "the kernel capped the socket's buffers (net.core.rmem_max, wmem_max)"
        );
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to bind the UDP socket.
    pub bind: SocketAddr,
    /// The address clients are told to connect to (in tokens); the bound address if `None`.
    pub public_addr: Option<SocketAddr>,
    /// The game's protocol id.
    pub protocol_id: u64,
    /// The key shared with the token backend.
    pub private_key: Key,
    /// Player slots.
    pub max_players: usize,
    /// Simulation ticks per second.
    pub tick_rate_hz: u16,
    /// Snapshots per second (a divisor of the tick rate).
    pub snapshot_rate_hz: u16,
    /// The lowest snapshot rate the server falls to when it is short of CPU: it then sends
    /// every player one snapshot in 2, 3 or 4, evenly (staggered by player), rather than
    /// leaving whoever is last in the fan-out behind, and asks the clients to send their
    /// inputs at that rate too ([`Pace`](crate::protocol::system::Pace)); it goes back up
    /// when there is room (`volley_snapshot_rate_ratio`). Default 15 (at most 4 snapshots
    /// apart); `snapshot_rate_hz` or more: never.
    pub min_snapshot_rate_hz: u16,
    /// Datagrams that may wait for one player actor (1 to [`MAX_PLAYER_QUEUE`]; part of
    /// [`ServerConfig::player_budget`]).
    pub player_queue: usize,
    /// Time allowed for clients to be told of a shutdown.
    pub shutdown_grace: Duration,
    /// Where to serve `/metrics`, `/healthz`, `/readyz` and `/players` (none if `None`, the
    /// default of [`ServerConfig::new`]; the `volley` program serves them on 127.0.0.1:9100).
    pub admin_addr: Option<SocketAddr>,
    /// A bearer token `/metrics` and `/players` require (`Authorization: Bearer <token>`);
    /// `/healthz` and `/readyz` stay open for probes. None by default.
    pub admin_token: Option<String>,
    /// `/players` shows each client's IP address and port (off by default: they are
    /// personal data).
    pub admin_show_addresses: bool,
    /// The admin listener takes `POST /players/{id}/link?rate=..&queue_ms=..&latency_ms=..
    /// &jitter_ms=..&loss=..` (and `DELETE`) to condition a player's downlink while the server
    /// runs ([`PlayerLink`]; `GET /links` lists them), behind the bearer token if one is set.
    /// For testing: off by default. [`ServerHandle::condition_player`] does the same in code.
    pub admin_link_control: bool,
    /// `/healthz` fails when no tick has finished for this long.
    pub stall_after: Duration,
    /// Snapshot datagrams sent per system call at most (`sendmmsg`; 1 sends each at once).
    pub send_batch: usize,
    /// The socket's kernel receive and send buffers, in bytes (the kernel caps them at
    /// `net.core.rmem_max` / `wmem_max`). Every client's inputs share the receive buffer: at
    /// 1000 players, 60 000 datagrams a second, the default 208 KiB overflows within a few
    /// milliseconds of the receive loop falling behind.
    pub socket_buffer_bytes: usize,
    /// Predicted, range-coded snapshots ([`SenderConfig::predict`]): fewer bytes where many
    /// things move (physics), several times the encode time of a changed entity. Off by
    /// default.
    ///
    /// [`SenderConfig::predict`]: crate::protocol::snapshot::SenderConfig::predict
    pub predict_snapshots: bool,
    /// The game's own predictor for snapshots ([`Predictor`]; implies `predict_snapshots`).
    /// Clients must decode with the same one ([`GameClient::set_predictor`]).
    ///
    /// [`Predictor`]: crate::protocol::snapshot::Predictor
    /// [`GameClient::set_predictor`]: crate::client::GameClient::set_predictor
    pub snapshot_predictor: Option<Arc<dyn crate::protocol::snapshot::Predictor>>,
    /// The kinds of world the game runs ("lobby", "match"): the values of the `kind` label
    /// of the world figures (`volley_worlds{kind}`), so a bounded set, declared up front.
    /// [`start`] runs its world as the first kind; [`Worlds::spawn`] refuses a kind not
    /// here. `["main"]` by default.
    pub world_kinds: Vec<String>,
    /// Record every world into a new file in this folder while it runs
    /// ([`WorldOptions::recorded`] records one); off by default.
    pub record: Option<std::path::PathBuf>,
    /// Each client's send rate ([`SendRate`]): snapshots are sent within a budget of bytes
    /// a second that drops when the client's link queues (its round trip grows) and grows
    /// back when it does not. By default at most 125 000 bytes a second (1 Mbit/s, more
    /// than a full packet every tick at 60 Hz: a quiet link is never held back), at least
    /// 4 000, 15 ms of queueing allowed.
    ///
    /// [`SendRate`]: crate::protocol::reliability::SendRate
    pub send_rate: crate::protocol::reliability::RateConfig,
    /// How long a player whose client went silent is kept for it to come back
    /// ([`GameClient::resume`], with the resume ticket the server sent it), counted from the
    /// last packet heard. Past the connection timeout (five seconds, the token's) its world
    /// hears [`World::away`]; a client back in time resumes as the same player
    /// ([`World::back`]), otherwise the player leaves. 15 s by default; at most
    /// [`MAX_RESUME_GRACE`]; at most the connection timeout turns it off (a silent player
    /// leaves at the timeout).
    ///
    /// [`GameClient::resume`]: crate::client::GameClient::resume
    pub resume_grace: Duration,
}

/// The longest [`ServerConfig::resume_grace`]: a client always holds a ticket good for a
/// minute more (tickets live two minutes and are renewed every minute).
pub const MAX_RESUME_GRACE: Duration = Duration::from_secs(60);

impl ServerConfig {
    /// Defaults: 60 Hz ticks and snapshots, 1024 players, on `bind`. The admin listener
    /// (`/metrics`, `/healthz`, `/readyz`, `/players`) is off: set
    /// [`ServerConfig::admin_addr`] to serve it (the `volley` program serves it on
    /// 127.0.0.1:9100 by default).
    pub fn new(bind: SocketAddr, private_key: Key) -> Self {
        Self {
            bind,
            public_addr: None,
            protocol_id: crate::DEFAULT_PROTOCOL_ID,
            private_key,
            max_players: 1024,
            tick_rate_hz: 60,
            snapshot_rate_hz: 60,
            min_snapshot_rate_hz: 15,
            player_queue: 16,
            shutdown_grace: Duration::from_secs(3),
            admin_addr: None,
            admin_token: None,
            admin_show_addresses: false,
            admin_link_control: false,
            stall_after: Duration::from_secs(1),
            send_batch: 32,
            predict_snapshots: false,
            snapshot_predictor: None,
            socket_buffer_bytes: 4 << 20,
            world_kinds: vec!["main".into()],
            record: None,
            send_rate: crate::protocol::reliability::RateConfig::default(),
            resume_grace: cores::resume::DEFAULT_GRACE,
        }
    }
}

impl ServerConfig {
    /// The most memory one client can make this server hold for it, whatever it sends
    /// ([`PlayerBudget`]; with the defaults about 230 KiB). Times [`ServerConfig::max_players`],
    /// with each player's fixed state, it is the worst case of a full server.
    pub fn player_budget(&self) -> PlayerBudget {
        PlayerBudget::new(self.player_queue)
    }
}

/// The most datagrams that may wait for one player actor ([`ServerConfig::player_queue`]).
pub const MAX_PLAYER_QUEUE: usize = 1024;

/// Starting the server failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket could not be bound.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// An actor did not start.
    #[error("starting the {0} actor: {1}")]
    Spawn(&'static str, String),
    /// A setting is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// The most player slots one server takes ([`ServerConfig::max_players`]): the slot tables
/// are allocated up front, about 0.7 KiB a slot, so this bounds them at ~45 MiB whatever
/// a config says.
pub const MAX_PLAYERS: usize = 65_536;

/// A part of the server a supervision test can make fail (with the `test-hooks` feature).
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The socket actor's receive loop panics.
    ReceiveLoop,
    /// The broadcaster fails.
    Broadcaster,
}

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    socket: ActorRef<shells::socket::SocketMsg>,
    worlds: Worlds,
    actors: Arc<std::sync::Mutex<std::collections::BTreeMap<WorldId, ActorRef<shells::mailbox::WorldMsg>>>>,
    /// True once the root watcher saw the world, broadcaster or socket actor end.
    ended: tokio::sync::watch::Receiver<bool>,
    /// Set by [`ServerHandle::shutdown`], so the actors' ends are not taken for failures.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    broadcaster: ActorRef<shells::mailbox::BroadcastMsg>,
    metrics: Arc<ServerMetrics>,
    grace: Duration,
    admin_addr: Option<SocketAddr>,
    admin: admin::AdminThread,
    shaping: Arc<ops::shaping::Shaping>,
    /// The task that sends conditioned players' held datagrams (aborted with the server).
    _shaping_task: AbortOnDrop,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ServerHandle {
    /// The bound UDP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the admin endpoints listen, if they do.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Live figures.
    pub fn metrics(&self) -> &Arc<ServerMetrics> {
        &self.metrics
    }

    /// The server's worlds: start and stop worlds, move players, from outside any world.
    pub fn worlds(&self) -> &Worlds {
        &self.worlds
    }

    /// Tells every client why ([`SessionEnd::ShuttingDown`]), waits up to the grace period
    /// for them to answer, runs the world's [`World::shutdown`] after every player's
    /// [`World::leave`] (waiting up to the grace period again for it), then stops every
    /// actor. Returns how many players were still connected when the grace ran out.
    ///
    /// [`SessionEnd::ShuttingDown`]: crate::protocol::session::SessionEnd::ShuttingDown
    pub async fn shutdown(self) -> u64 {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        self.metrics.set_ready(false);
        self.socket.cast(shells::socket::SocketMsg::DisconnectAll).ok();
        let deadline = tokio::time::Instant::now() + self.grace;
        while ServerMetrics::get(&self.metrics.players) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = ServerMetrics::get(&self.metrics.players);
        // After the leaves already in their mailboxes; the players still there leave first.
        let worlds: Vec<(WorldId, ActorRef<shells::mailbox::WorldMsg>)> =
            self.actors.lock().map(|a| a.iter().map(|(id, a)| (*id, a.clone())).collect()).unwrap_or_default();
        for (id, w) in &worlds {
            if let Err(e) = w.call(shells::mailbox::WorldMsg::Shutdown, Some(self.grace)).await {
                tracing::warn!(world = %id, error = %e, "a world's shutdown did not finish within the grace period");
            }
        }
        for (_, w) in &worlds {
            w.stop(None);
        }
        self.broadcaster.stop(None);
        self.socket.stop(None);
        let mut admin = self.admin;
        admin.stop();
        left
    }

    /// Waits until the world, broadcaster or socket actor ends: a part of the server failed
    /// ([`ServerHandle::failure`] says which), or it was shut down.
    pub async fn wait(&mut self) {
        let _ = self.ended.wait_for(|ended| *ended).await;
    }

    /// Whether every part of the server still runs.
    pub fn is_running(&self) -> bool {
        !*self.ended.borrow()
    }

    /// What failed, if a part of the server did (`/healthz` then fails, saying the same).
    pub fn failure(&self) -> Option<String> {
        self.metrics.failure()
    }

    /// Holds every player's snapshot interval at `interval` ticks (1 to 4: one snapshot in
    /// that many, staggered by player, and the clients asked to send their inputs at that
    /// rate), or (`None`) lets the server decide again: by default it lowers the rate
    /// evenly when it is short of CPU ([`ServerConfig::min_snapshot_rate_hz`]) and raises
    /// it when there is room. For tests and for an operator who wants a lower rate before
    /// the server needs one.
    pub fn pin_snapshot_interval(&self, interval: Option<u8>) {
        let _ = self.broadcaster.cast(shells::mailbox::BroadcastMsg::PinPace(interval));
    }

    /// Conditions what the server sends player `player` (a [`PlayerId`], as `/players`
    /// lists it): latency, jitter, loss and a bottleneck ([`PlayerLink`]), or takes the
    /// conditioning off (`None`). It can change at any time, to watch the player's send rate
    /// follow. False when no such player is connected (its figures appear in `/players`
    /// within a second of connecting).
    ///
    /// ```no_run
    /// # async fn f(server: &volley::server::ServerHandle) {
    /// use volley::server::PlayerLink;
    /// let line = PlayerLink::from_query("rate=32000&queue_ms=250&loss=0.02").unwrap();
    /// server.condition_player(0, Some(line));
    /// # }
    /// ```
    pub fn condition_player(&self, player: PlayerId, link: Option<PlayerLink>) -> bool {
        admin::condition(&self.metrics, &self.shaping, player, link)
    }

    /// Every conditioned player's link: its setting, and what it dropped and delayed.
    pub fn player_links(&self) -> Vec<LinkReport> {
        self.shaping.reports()
    }

    /// Makes a part of the server fail, for supervision tests (with the `test-hooks`
    /// feature).
    #[cfg(feature = "test-hooks")]
    pub fn inject_fault(&self, fault: Fault) {
        match fault {
            Fault::ReceiveLoop => drop(self.socket.cast(shells::socket::SocketMsg::InjectFault)),
            Fault::Broadcaster => drop(self.broadcaster.cast(shells::mailbox::BroadcastMsg::InjectFault)),
        }
    }
}

/// Starts a server running `world` as its entry world ([`WorldId::ENTRY`], of the first of
/// [`ServerConfig::world_kinds`]), where players arrive. More worlds can be started while it
/// runs ([`ServerHandle::worlds`], [`World::started`]).
///
/// # Errors
/// When the socket cannot be bound, a setting is invalid, or an actor fails to start.
pub async fn start<W: World>(config: ServerConfig, world: W) -> Result<ServerHandle, StartError> {
    let kind = config.world_kinds.first().cloned().unwrap_or_else(|| "main".into());
    start_with(config, WorldOptions::new(kind), world).await
}

/// [`start`], with the entry world's options (its kind and tick rate; it has no fallback
/// and is essential: if it fails, the server does).
///
/// # Errors
/// As [`start`], and when the options are invalid.
pub async fn start_with<W: World>(
    config: ServerConfig,
    entry: WorldOptions,
    world: W,
) -> Result<ServerHandle, StartError> {
    if config.tick_rate_hz == 0
        || config.snapshot_rate_hz == 0
        || !config.tick_rate_hz.is_multiple_of(config.snapshot_rate_hz)
    {
        return Err(StartError::Config(format!(
            "tick rate {} must be a non-zero multiple of snapshot rate {}",
            config.tick_rate_hz, config.snapshot_rate_hz
        )));
    }
    if config.max_players == 0 || config.max_players > MAX_PLAYERS {
        return Err(StartError::Config(format!(
            "max players must be between 1 and {MAX_PLAYERS} (got {})",
            config.max_players
        )));
    }
    if config.player_queue == 0 || config.player_queue > MAX_PLAYER_QUEUE {
        return Err(StartError::Config(format!(
            "player queue must be between 1 and {MAX_PLAYER_QUEUE} datagrams (got {})",
            config.player_queue
        )));
    }
    if config.resume_grace > MAX_RESUME_GRACE {
        return Err(StartError::Config(format!(
            "resume grace must be at most {} s (got {} s)",
            MAX_RESUME_GRACE.as_secs(),
            config.resume_grace.as_secs_f64()
        )));
    }
    if config.world_kinds.is_empty() || config.world_kinds.len() > 64 {
        return Err(StartError::Config("declare between 1 and 64 world kinds".into()));
    }
    let socket = Arc::new(UdpSocket::bind(config.bind).await.map_err(|e| StartError::Bind(config.bind, e))?);
    let addr = socket.local_addr().map_err(|e| StartError::Bind(config.bind, e))?;
    size_buffers(&socket, config.socket_buffer_bytes);
    let public = config.public_addr.unwrap_or(addr);
    let metrics = Arc::new(ServerMetrics::with_tick_rate(config.tick_rate_hz));
    metrics.slots.store(config.max_players as u64, std::sync::atomic::Ordering::Relaxed);
    let shaping = ops::shaping::Shaping::new();
    let mut admin_addr = None;
    let listener = match config.admin_addr {
        Some(a) => {
            let l = std::net::TcpListener::bind(a).map_err(|e| StartError::Bind(a, e))?;
            admin_addr = Some(l.local_addr().map_err(|e| StartError::Bind(a, e))?);
            Some(l)
        }
        None => None,
    };
    let admin = admin::AdminThread::start(
        listener,
        admin::Admin {
            metrics: metrics.clone(),
            stall_after: config.stall_after,
            token: config.admin_token.as_deref().map(Arc::from),
            show_addresses: config.admin_show_addresses,
            links: config.admin_link_control.then(|| shaping.clone()),
        },
    )
    .map_err(|e| StartError::Spawn("admin", e.to_string()))?;
    let schema = Arc::new(world.schema());
    metrics.declare_world_kinds(&config.world_kinds);

    let batcher = Arc::new(shells::batcher::SnapshotBatcher::with_shaping(
        socket.clone(),
        metrics.clone(),
        config.send_batch,
        shaping.clone(),
    ));
    let shaping_task = AbortOnDrop(tokio::spawn(shaping.clone().run(socket.clone())).abort_handle());
    let env = shells::mailbox::SnapshotEnv {
        batcher: batcher.clone(),
        metrics: metrics.clone(),
        clock: unix_now,
        tick_period: Duration::from_secs(1) / u32::from(config.tick_rate_hz.max(1)),
    };
    let fanout = Arc::new(shells::broadcaster::FanOut::per_core(Some(batcher.clone())).with_metrics(metrics.clone()));
    let numbers = Arc::new(std::sync::Mutex::new(world::Numbers::default()));
    let broadcast_args = shells::broadcaster::BroadcastArgs {
        pacer: cores::pace::Pacer::new(u32::from(config.snapshot_rate_hz), u32::from(config.min_snapshot_rate_hz)),
        metrics: metrics.clone(),
        batcher: Some(batcher.clone()),
        fanout: fanout.clone(),
        numbers: numbers.clone(),
    };
    let (broadcaster, broadcaster_task) = Actor::spawn(None, shells::broadcaster::Broadcaster, broadcast_args)
        .await
        .map_err(|e| StartError::Spawn("broadcaster", e.to_string()))?;
    // Sixteen inputs a player between two ticks (a client sends one a tick, repeated ones are
    // dropped before they get here), room for 256 at least.
    let actors = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let clock = shells::world_actor::TickClock {
        epoch: tokio::time::Instant::now(),
        dt: Duration::from_secs(1) / u32::from(config.tick_rate_hz),
    };
    let host = shells::spawn::ActorBackend {
        broadcaster: broadcaster.clone(),
        metrics: metrics.clone(),
        clock,
        input_limit: config.max_players.saturating_mul(16).max(256),
        actors: actors.clone(),
        record: config.record.clone(),
    };
    let worlds = Worlds::new(
        numbers,
        config.world_kinds.clone(),
        config.tick_rate_hz,
        schema.clone(),
        world::TokenKeys { protocol_id: config.protocol_id, private_key: config.private_key },
        Box::new(host.clone()),
    );
    let started =
        shells::spawn::spawn_entry(&host, &worlds, entry, world).map_err(|e| StartError::Config(e.to_string()))?;
    let (_entry, world_task) = started
        .await
        .map_err(|_| StartError::Spawn("world", "the world's actor did not start".into()))?
        .map_err(|e| StartError::Spawn("world", e))?;
    let session = SessionParams {
        protocol_version: PROTOCOL_VERSION,
        tick_rate_hz: config.tick_rate_hz,
        snapshot_rate_hz: config.snapshot_rate_hz,
        max_payload_bytes: crate::protocol::netcode::MAX_PAYLOAD_BYTES as u16,
    };
    let netcode = EndpointConfig::new(config.protocol_id, config.private_key, vec![public], config.max_players);
    let socket_args = shells::socket::SocketArgs {
        socket,
        env,
        fanout,
        netcode,
        player_queue: config.player_queue,
        sessions: cores::session::SessionSettings {
            schema,
            params: session,
            snapshot_every: u32::from(config.tick_rate_hz / config.snapshot_rate_hz),
            sender: crate::protocol::snapshot::SenderConfig { predict: config.predict_snapshots, ..Default::default() },
            predictor: config.snapshot_predictor.clone(),
            rate: config.send_rate,
            resume_grace: config.resume_grace,
        },
        broadcaster: broadcaster.clone(),
        metrics: metrics.clone(),
        clock: unix_now,
    };
    let (socket_ref, socket_task) = Actor::spawn(None, shells::socket::SocketActor, socket_args)
        .await
        .map_err(|e| StartError::Spawn("socket", e.to_string()))?;
    // The root of the supervision tree: the world, broadcaster and socket actors are each
    // essential. The first to end, unless the server is shutting down, is a failure.
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ended_tx, ended) = tokio::sync::watch::channel(false);
    tokio::spawn({
        let (stopping, metrics) = (stopping.clone(), metrics.clone());
        async move {
            let which = tokio::select! {
                _ = world_task => ENTRY_WORLD_PART,
                _ = broadcaster_task => "broadcaster",
                _ = socket_task => "socket actor",
            };
            if !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                tracing::error!(part = which, "a part of the server stopped; the server is failed");
                metrics.set_failed(failure_of(which));
            }
            let _ = ended_tx.send(true);
        }
    });
    metrics.set_ready(true);
    tracing::info!(
        %addr,
        public = %public,
        admin = ?admin_addr,
        tick_hz = config.tick_rate_hz,
        predict_snapshots = config.predict_snapshots,
        "server listening"
    );
    Ok(ServerHandle {
        addr,
        socket: socket_ref,
        worlds,
        actors,
        ended,
        stopping,
        broadcaster,
        metrics,
        grace: config.shutdown_grace,
        admin_addr,
        admin,
        shaping,
        _shaping_task: shaping_task,
    })
}
