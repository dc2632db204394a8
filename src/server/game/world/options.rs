//! A world's number, options and origin: what a game names and configures a world with.

use std::collections::BTreeSet;

use crate::protocol::snapshot::world::WORLD_NUMBERS;

/// A world on a server: its number, which also names it to clients and sits in the top
/// bits of its entities' ids in every snapshot
/// ([`merged_id`](crate::protocol::snapshot::world::merged_id)). The world a server starts
/// with is [`WorldId::ENTRY`], number 0, whose entity ids reach clients unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorldId(pub(crate) u16);

impl WorldId {
    /// The world [`start`](crate::server::start) was given: where players arrive.
    pub const ENTRY: WorldId = WorldId(0);

    /// Its number.
    pub fn number(self) -> u16 {
        self.0
    }
}

impl std::fmt::Display for WorldId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "world {}", self.0)
    }
}

/// Where a joining player comes from ([`JoinInfo::origin`](super::JoinInfo::origin)): a lobby re-queues a new
/// arrival, but gives a player back from a match its results.
///
/// ```
/// use volley::server::{JoinInfo, Origin, PlayerId};
/// fn greet(player: PlayerId, who: &JoinInfo) -> String {
///     match &who.origin {
///         Origin::Connected => format!("welcome, player {player}"),
///         Origin::Returned { from, why } => format!("back from {from} ({why})"),
///         Origin::Moved { from } => format!("here from {from}"),
///         Origin::HandedOver => "arrived from the next zone".to_owned(),
///     }
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// It has just connected to the server: this is its first world.
    #[default]
    Connected,
    /// It has just connected, handed over by a neighbouring zone
    /// ([`JoinInfo::handoff`](super::JoinInfo::handoff) holds the old zone's offer).
    HandedOver,
    /// It was moved here from world `from` ([`Outbox::move_to`](crate::server::Outbox::move_to),
    /// [`Worlds::move_player`](crate::server::Worlds::move_player)).
    Moved {
        /// The world it left.
        from: WorldId,
    },
    /// World `from` stopped, and this is its fallback ([`WorldOptions::fallback`]).
    Returned {
        /// The world that stopped.
        from: WorldId,
        /// Why, as its players' clients are told.
        why: String,
    },
}

/// How a world runs: its kind (the label its figures carry), its tick rate, where its
/// players go if it stops, and whether every player watches it.
///
/// ```
/// use volley::server::{WorldId, WorldOptions};
/// let global = WorldOptions::new("global").watched_by_everyone().tick_rate(20);
/// let duel = WorldOptions::new("match").fallback(WorldId::ENTRY);
/// # let _ = (global, duel);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldOptions {
    /// The world's kind: one of the server's
    /// [`ServerConfig::world_kinds`](crate::server::ServerConfig::world_kinds), the label of
    /// its figures (`volley_worlds{kind}`) and what clients are told.
    pub kind: String,
    /// Ticks per second: the server's (`None`) or a divisor of it.
    pub tick_rate_hz: Option<u16>,
    /// Where its players go when it stops or fails (told why); with none they are
    /// disconnected ([`SessionEnd::WorldStopped`](crate::protocol::session::SessionEnd::WorldStopped)).
    pub fallback: Option<WorldId>,
    /// Every player watches it, whatever world it is in (a global world: chat, events).
    pub watched_by_everyone: bool,
    /// Record it into a new file in this folder (see [`crate::protocol::recording`]);
    /// [`ServerConfig::record`](crate::server::ServerConfig::record) records every world.
    pub record: Option<std::path::PathBuf>,
    /// It stops by itself once its last player has left ([`WorldOptions::stop_when_empty`]).
    pub stop_when_empty: bool,
    /// Where its recording stands, if it is recorded ([`WorldOptions::recording`]).
    pub recording: RecordingHandle,
}

impl WorldOptions {
    /// A world of `kind`, at the server's tick rate, no fallback, watched by its players.
    pub fn new(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            tick_rate_hz: None,
            fallback: None,
            watched_by_everyone: false,
            record: None,
            stop_when_empty: false,
            recording: RecordingHandle::default(),
        }
    }

    /// Its players go to `world` if it stops or fails.
    pub fn fallback(mut self, world: WorldId) -> Self {
        self.fallback = Some(world);
        self
    }

    /// It ticks `hz` times a second (a divisor of the server's tick rate).
    pub fn tick_rate(mut self, hz: u16) -> Self {
        self.tick_rate_hz = Some(hz);
        self
    }

    /// Every player watches it.
    pub fn watched_by_everyone(mut self) -> Self {
        self.watched_by_everyone = true;
        self
    }

    /// It is recorded, into a new file in `dir` (`{kind}-{number}-{unix ms}.vrec`), from its
    /// first tick until it stops; `volley replay FILE` plays it back. When the world stops,
    /// its recording is closed whole (every frame written, then the file's end), and
    /// [`WorldOptions::recording`] says so and where.
    pub fn recorded(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.record = Some(dir.into());
        self
    }

    /// Where this world's recording stands: take it before spawning, keep it, and ask it
    /// later ([`RecordingHandle::closed`], or [`RecordingHandle::wait_closed`] outside a
    /// world). A world that is not recorded stays [`RecordingState::NotRecorded`].
    ///
    /// ```no_run
    /// # use volley::server::{World, WorldId, WorldOptions, Worlds, RecordingState};
    /// # fn f(worlds: &Worlds, a_match: impl World) {
    /// let options = WorldOptions::new("match").fallback(WorldId::ENTRY).recorded("recordings");
    /// let recording = options.recording();
    /// worlds.spawn(options, a_match).unwrap();
    /// // ... later, at any tick of the lobby:
    /// if let Some(done) = recording.closed() {
    ///     println!("the match's replay: {} ({} frames)", done.path.display(), done.frames);
    /// }
    /// # }
    /// ```
    pub fn recording(&self) -> RecordingHandle {
        self.recording.clone()
    }

    /// It stops by itself at the end of the first tick after its last player has left (a
    /// match everyone quit), as if it had called [`Outbox::stop_world`]: its
    /// [`World::shutdown`] runs and whoever started it hears it stopped. A world no player
    /// has joined yet does not stop; the entry world never does.
    ///
    /// [`Outbox::stop_world`]: crate::server::Outbox::stop_world
    /// [`World::shutdown`]: crate::server::World::shutdown
    pub fn stop_when_empty(mut self) -> Self {
        self.stop_when_empty = true;
        self
    }
}

/// The world numbers in use, and the next to try: numbers go round all [`WORLD_NUMBERS`]
/// before one is used again, so a stopped world's entity ids are long gone from every
/// client's history before a new world's could be mistaken for them.
#[derive(Debug, Default)]
pub(crate) struct Numbers {
    in_use: BTreeSet<u16>,
    next: u16,
}

impl Numbers {
    /// A free number (`None`: every number is in use).
    pub(crate) fn take(&mut self) -> Option<WorldId> {
        for _ in 0..WORLD_NUMBERS {
            let n = self.next;
            self.next = ((u32::from(n) + 1) % WORLD_NUMBERS) as u16;
            if self.in_use.insert(n) {
                return Some(WorldId(n));
            }
        }
        None
    }

    /// Gives a number back.
    pub(crate) fn free(&mut self, id: WorldId) {
        self.in_use.remove(&id.0);
    }
}

/// Where one world's recording stands: shared between whoever asked for it
/// ([`WorldOptions::recording`]) and the framework that writes it. Cloning it shares it.
#[derive(Clone, Default)]
pub struct RecordingHandle(std::sync::Arc<(std::sync::Mutex<RecordingState>, std::sync::Condvar)>);

/// What a [`RecordingHandle`] says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RecordingState {
    /// No recording has begun (the world is not recorded, or has not started yet).
    #[default]
    NotRecorded,
    /// Frames are being written into this file.
    Writing(std::path::PathBuf),
    /// The world stopped and its recording is whole: every frame it queued written, then the
    /// file's end (a replay reads it to its last tick).
    Closed(RecordingClosed),
    /// It could not be recorded, or writing failed (the folder, the disk, the writer's own
    /// fault): what was written before stays readable up to its last whole chunk.
    Failed {
        /// The file, if one was made.
        path: Option<std::path::PathBuf>,
        /// What went wrong.
        error: String,
    },
}

/// A recording closed whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingClosed {
    /// The file (in the stepper's memory recordings, `Stepper::record`, an empty path).
    pub path: std::path::PathBuf,
    /// Frames written.
    pub frames: u64,
    /// Frames left out while the disk was behind (only keyframes then; 0 in the stepper,
    /// which writes every frame as it ticks).
    pub left_out: u64,
    /// Bytes of the file.
    pub bytes: u64,
}

impl RecordingHandle {
    /// What it says now.
    pub fn state(&self) -> RecordingState {
        self.0.0.lock().map(|s| s.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The recording's file, once one was made.
    pub fn path(&self) -> Option<std::path::PathBuf> {
        match self.state() {
            RecordingState::Writing(p) => Some(p),
            RecordingState::Closed(c) => Some(c.path),
            RecordingState::Failed { path, .. } => path,
            RecordingState::NotRecorded => None,
        }
    }

    /// The closed recording, once the world stopped and it is whole.
    pub fn closed(&self) -> Option<RecordingClosed> {
        match self.state() {
            RecordingState::Closed(c) => Some(c),
            _ => None,
        }
    }

    /// Waits up to `timeout` for the recording to close or fail (for a program or a test,
    /// not a world's tick, which should ask [`RecordingHandle::closed`] instead); the state
    /// then, whatever it is.
    pub fn wait_closed(&self, timeout: std::time::Duration) -> RecordingState {
        let (lock, ready) = &*self.0;
        let Ok(guard) = lock.lock() else { return self.state() };
        let done = |s: &mut RecordingState| matches!(s, RecordingState::Closed(_) | RecordingState::Failed { .. });
        match ready.wait_timeout_while(guard, timeout, |s| !done(s)) {
            Ok((s, _)) => s.clone(),
            Err(_) => self.state(),
        }
    }

    /// The framework's side: the recording moves on.
    pub(crate) fn set(&self, state: RecordingState) {
        let (lock, ready) = &*self.0;
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        // A closed or failed recording stays so.
        if !matches!(*s, RecordingState::Closed(_) | RecordingState::Failed { .. }) {
            *s = state;
        }
        ready.notify_all();
    }
}

impl std::fmt::Debug for RecordingHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RecordingHandle").field(&self.state()).finish()
    }
}

/// Two handles are equal when they are the same recording's.
impl PartialEq for RecordingHandle {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RecordingHandle {}
