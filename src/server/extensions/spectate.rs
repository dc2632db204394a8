//! Worlds that show another world's state instead of simulating their own: a recording played
//! back ([`SpectatorWorld::replay`], what `volley replay FILE` serves) and a running world
//! shown with a delay to spectators ([`Spectators::start`]). Viewers
//! are ordinary connected players of such a world: they get ordinary snapshots (an unmodified
//! game client can watch), send no inputs that matter, and steer it with
//! [`SpectatorControl`] messages; the client library reads where it stands
//! ([`SpectatorStatus`], [`GameClient::spectator`](crate::client::GameClient::spectator)).
//!
//! Both kinds run the same world: frames in (from a [`Playhead`], or from the watched world's
//! tap), the frame due at each tick copied into its snapshot. Viewers who see all of it from
//! the same baseline share one encode of it (the sender's shared packets). The watched
//! world's scoreboard comes with its frames (every half second, and as players are sent
//! away): such a world shows it as its own, with the watched world's columns, as late as
//! the frames.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::protocol::recording::{Event, Frame, Playhead, Recording, RecordingError};
use crate::protocol::snapshot::{Interest, Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::system::{SpectatorControl, SpectatorStatus};
use crate::server::game::world::{
    Audience, Outbox, PlayerId, Relevancy, SpawnError, Tap, World, WorldId, WorldOptions, Worlds,
};

/// Frames in flight from a watched world to its spectators' world (a second at 60 Hz): more
/// means the spectators' world is stalled, and its frames are left out until it drains.
pub const FEED_QUEUE: usize = 64;

/// The longest spectator delay.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// Which of the watched (or recorded) world's messages its spectators hear. What the world
/// sent to everyone ([`Audience::All`]) or to its watchers ([`Audience::Watchers`]) reaches
/// every spectator; what it sent to a team or to one player is private unless the spectators'
/// world is told otherwise.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use volley::server::Everything;
/// use volley::server::spectate::{Hearing, Spectators};
///
/// // The public stands hear what everyone heard; the casters' booth hears both teams. Both
/// // see every entity (`Everything`, the framework's relevancy that picks them all).
/// let stands = Spectators::new(Duration::from_secs(2), Arc::new(Everything));
/// let booth = Spectators::new(Duration::from_secs(2), Arc::new(Everything)).hearing(Hearing::Everything);
/// assert_eq!(stands.hearing_of(), Hearing::Public);
/// assert_eq!(booth.hearing_of(), Hearing::Everything);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hearing {
    /// Only what everyone, or every watcher, was told (the default): team chat and messages
    /// to one player stay with those they were sent to.
    #[default]
    Public,
    /// Also what was sent to the player a spectator follows
    /// ([`SpectatorControl::Follow`]), to that spectator.
    Followed,
    /// Everything the world sent: every team's messages and every player's, to every
    /// spectator (a casters' or referees' world).
    Everything,
}

/// How a running world is shown to spectators ([`Spectators::start`]):
/// how late, what a spectator following a player sees, and what they hear.
#[derive(Clone)]
pub struct Spectators {
    delay: Duration,
    follow: Arc<dyn Relevancy>,
    hearing: Hearing,
}

impl std::fmt::Debug for Spectators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spectators").field("delay", &self.delay).field("hearing", &self.hearing).finish_non_exhaustive()
    }
}

impl Spectators {
    /// Spectators `delay` behind the world (at most [`MAX_DELAY`]); one who follows a player
    /// sees what `follow` (the game's relevancy) shows that player. They hear
    /// [`Hearing::Public`].
    pub fn new(delay: Duration, follow: Arc<dyn Relevancy>) -> Self {
        Self { delay: delay.min(MAX_DELAY), follow, hearing: Hearing::Public }
    }

    /// What they hear.
    pub fn hearing(mut self, hearing: Hearing) -> Self {
        self.hearing = hearing;
        self
    }

    /// What they hear, as set.
    pub fn hearing_of(&self) -> Hearing {
        self.hearing
    }

    /// How late they are.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

/// A world showing recorded or delayed state (see the module docs).
pub struct SpectatorWorld {
    schema: Schema,
    /// The watched world's scoreboard columns (its board is shown as this world's).
    columns: Vec<String>,
    /// Which messages viewers hear.
    hearing: Hearing,
    source: Source,
    /// The game's relevancy, applied as the followed player.
    relevancy: Arc<dyn Relevancy>,
    /// Each viewer's followed recorded player.
    following: Arc<RwLock<BTreeMap<PlayerId, PlayerId>>>,
    viewers: BTreeSet<PlayerId>,
    /// The recorded tick shown, in quarters of a tick.
    at_quarters: u64,
    /// Speed in quarters of real time.
    quarters: u8,
    paused: bool,
    last_tick: Option<u32>,
    /// Viewers who get a status after this tick.
    status_due: BTreeSet<PlayerId>,
    /// Recorded messages passed this tick, for the viewers.
    passed: Vec<Event>,
    shown: Option<Arc<WorldSnapshot>>,
    /// Seeks that failed (a chunk that does not decode): counted, playback stays put.
    errors: u64,
    /// The watched world ended and everything it sent was shown: this world stops.
    ended: bool,
}

enum Source {
    File(Box<Playhead>),
    Live(Live),
}

struct Live {
    feed: Receiver<Frame>,
    buffer: VecDeque<Frame>,
    /// Server ticks behind the watched world.
    delay: u32,
    first: Option<u32>,
}

impl std::fmt::Debug for SpectatorWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpectatorWorld").field("viewers", &self.viewers.len()).finish_non_exhaustive()
    }
}

/// Why a recording cannot be played.
#[derive(Debug, thiserror::Error)]
pub enum ReplayOpenError {
    /// The file cannot be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a recording this game can play.
    #[error("{0}")]
    Recording(#[from] RecordingError),
    /// It is larger than the limit given.
    #[error("the recording holds more than the {0} bytes allowed")]
    TooLarge(u64),
    /// It is not a regular file (a FIFO, a device): refused before it is read.
    #[error("not a regular file")]
    NotAFile,
}

impl SpectatorWorld {
    /// Plays the recording at `path` (made with this game's `schema`), from its first tick,
    /// at real speed, showing everything; `relevancy` (the game's) is used for viewers who
    /// follow a recorded player. Only a regular file is read, and never more than
    /// `max_bytes` of it (the recording is read into memory).
    ///
    /// # Errors
    /// The file cannot be read, is too large, or is not a recording of this game (see
    /// [`RecordingError`]).
    pub fn open(
        path: &std::path::Path,
        schema: Schema,
        relevancy: Arc<dyn Relevancy>,
        max_bytes: u64,
    ) -> Result<Self, ReplayOpenError> {
        let data = match volley_util::file::read_bounded(path, max_bytes) {
            Ok(d) => bytes::Bytes::from(d),
            Err(volley_util::file::ReadError::Io(e)) => return Err(ReplayOpenError::Io(e)),
            Err(volley_util::file::ReadError::NotAFile) => return Err(ReplayOpenError::NotAFile),
            Err(volley_util::file::ReadError::TooLarge(max)) => return Err(ReplayOpenError::TooLarge(max)),
        };
        let recording = Recording::parse(data, Some(&schema))?;
        Ok(Self::replay(recording, schema, relevancy)?)
    }

    /// Plays `recording` (see [`SpectatorWorld::open`]).
    ///
    /// # Errors
    /// When it holds no frame, or its first chunk does not decode.
    pub fn replay(recording: Recording, schema: Schema, relevancy: Arc<dyn Relevancy>) -> Result<Self, RecordingError> {
        let head = Playhead::new(recording, Arc::new(schema.clone()))?;
        let at = u64::from(head.frame().tick) * 4;
        let shown = Some(head.frame().snapshot.clone());
        let columns = head.recording().header().columns.clone();
        let mut world = Self::with_source(schema, Source::File(Box::new(head)), relevancy, at, shown);
        world.columns = columns;
        Ok(world)
    }

    /// Shows the frames `feed` brings, `delay` server ticks late; `columns` are the watched
    /// world's scoreboard columns.
    pub(crate) fn live(
        schema: Schema,
        feed: Receiver<Frame>,
        delay: u32,
        how: Spectators,
        columns: Vec<String>,
    ) -> Self {
        let live = Live { feed, buffer: VecDeque::new(), delay, first: None };
        let mut world = Self::with_source(schema, Source::Live(live), how.follow, 0, None).hearing(how.hearing);
        world.columns = columns;
        world
    }

    /// What its viewers hear of the recorded messages ([`Hearing::Public`] unless set).
    pub fn hearing(mut self, hearing: Hearing) -> Self {
        self.hearing = hearing;
        self
    }

    fn with_source(
        schema: Schema,
        source: Source,
        relevancy: Arc<dyn Relevancy>,
        at_quarters: u64,
        shown: Option<Arc<WorldSnapshot>>,
    ) -> Self {
        Self {
            schema,
            columns: Vec::new(),
            hearing: Hearing::Public,
            source,
            relevancy,
            following: Arc::default(),
            viewers: BTreeSet::new(),
            at_quarters,
            quarters: 4,
            paused: false,
            last_tick: None,
            status_due: BTreeSet::new(),
            passed: Vec::new(),
            shown,
            errors: 0,
            ended: false,
        }
    }

    /// The server tick rate the recording was made at (`None` for a live world).
    pub fn recording_tick_rate(&self) -> Option<u16> {
        match &self.source {
            Source::File(h) => Some(h.recording().header().tick_rate_hz),
            Source::Live(_) => None,
        }
    }

    /// The recorded tick shown now.
    pub fn shown_tick(&self) -> u32 {
        (self.at_quarters / 4) as u32
    }

    /// Seeks or reads that failed on a corrupt chunk so far.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    fn status(&self, viewer: PlayerId, since: u32) -> SpectatorStatus {
        let (first, last, live) = match &self.source {
            Source::File(h) => {
                let (a, b) = h.recording().ticks().unwrap_or((0, 0));
                (a, b, false)
            }
            Source::Live(l) => {
                let newest = l.buffer.back().map(|f| f.tick).or(self.shown.as_ref().map(|s| s.tick()));
                (l.first.unwrap_or(0), newest.unwrap_or(0), true)
            }
        };
        SpectatorStatus {
            since,
            at_quarters: self.at_quarters,
            quarters: if self.paused { 0 } else { self.quarters },
            first,
            last,
            following: self.following.read().ok().and_then(|f| f.get(&viewer).copied()),
            live,
        }
    }

    fn everyone_due(&mut self) {
        self.status_due.extend(self.viewers.iter().copied());
    }
}

impl World for SpectatorWorld {
    fn schema(&self) -> Schema {
        self.schema.clone()
    }

    fn join(&mut self, player: PlayerId) {
        self.viewers.insert(player);
        self.status_due.insert(player);
    }

    fn leave(&mut self, player: PlayerId) {
        self.viewers.remove(&player);
        self.status_due.remove(&player);
        if let Ok(mut f) = self.following.write() {
            f.remove(&player);
        }
    }

    fn input(&mut self, _: PlayerId, _: &[u8]) {}

    fn message(&mut self, player: PlayerId, message: &[u8], _reliable: bool) {
        let Ok(control) = postcard::from_bytes::<SpectatorControl>(message) else { return };
        let live = matches!(self.source, Source::Live(_));
        match control {
            SpectatorControl::Follow(p) => {
                if let Ok(mut f) = self.following.write() {
                    match p {
                        Some(p) => f.insert(player, p),
                        None => f.remove(&player),
                    };
                }
                self.status_due.insert(player);
                return;
            }
            _ if live => return,
            SpectatorControl::Seek(t) => {
                if let Source::File(h) = &mut self.source {
                    let (first, last) = h.recording().ticks().unwrap_or((0, 0));
                    let t = t.clamp(first, last);
                    match h.seek(t) {
                        Ok(()) => {
                            self.at_quarters = u64::from(t) * 4;
                            self.shown = Some(h.frame().snapshot.clone());
                        }
                        Err(e) => {
                            self.errors += 1;
                            tracing::warn!(error = %e, "a replay could not seek");
                        }
                    }
                }
            }
            SpectatorControl::Pause => self.paused = true,
            SpectatorControl::Play => self.paused = false,
            SpectatorControl::Speed(q) => self.quarters = q.clamp(1, 16),
        }
        // Everyone shares the playback: everyone hears of the change.
        self.everyone_due();
    }

    fn tick(&mut self, tick: u32, _dt: Duration) {
        let elapsed = self.last_tick.map_or(0, |t| tick.wrapping_sub(t));
        self.last_tick = Some(tick);
        // Whether playback changed, and every viewer must hear of it.
        let mut tell = false;
        match &mut self.source {
            Source::File(h) => {
                if self.paused {
                    return;
                }
                let last = h.recording().ticks().map_or(0, |t| t.1);
                self.at_quarters =
                    (self.at_quarters + u64::from(elapsed) * u64::from(self.quarters)).min(u64::from(last) * 4);
                let target = (self.at_quarters / 4) as u32;
                let passed = &mut self.passed;
                match h.advance_to(target, |f| passed.extend(f.events.iter().cloned())) {
                    Ok(end) => {
                        self.shown = Some(h.frame().snapshot.clone());
                        if end && target >= last {
                            // The end: it waits there (a seek plays again).
                            self.paused = true;
                            tell = true;
                        }
                    }
                    Err(e) => {
                        self.errors += 1;
                        self.paused = true;
                        tracing::warn!(error = %e, "a replay stopped at a chunk that does not decode");
                        tell = true;
                    }
                }
            }
            Source::Live(l) => {
                let gone = loop {
                    match l.feed.try_recv() {
                        Ok(f) => {
                            l.first.get_or_insert(f.tick);
                            l.buffer.push_back(f);
                        }
                        Err(std::sync::mpsc::TryRecvError::Empty) => break false,
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => break true,
                    }
                };
                // A stalled world's backlog: only the delay's worth is kept.
                let keep = l.delay as usize + FEED_QUEUE;
                while l.buffer.len() > keep {
                    l.buffer.pop_front();
                }
                let target = tick.saturating_sub(l.delay);
                let mut changed = false;
                while l.buffer.front().is_some_and(|f| f.tick <= target) {
                    if let Some(f) = l.buffer.pop_front() {
                        self.passed.extend(f.events.iter().cloned());
                        if self.shown.is_none() {
                            changed = true;
                        }
                        self.shown = Some(f.snapshot);
                    }
                }
                self.at_quarters = u64::from(target) * 4;
                if changed {
                    tell = true;
                }
                // Its world ended: once the delay has shown its last frame, so does this one.
                self.ended = gone && l.buffer.is_empty();
            }
        }
        if tell {
            self.everyone_due();
        }
    }

    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        if let Some(s) = &self.shown {
            // The recording's kinds are this world's (checked when it was opened).
            let _ = out.copy_from(s);
        }
    }

    fn scoreboard_columns(&self) -> Vec<String> {
        self.columns.clone()
    }

    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(Follow { following: self.following.clone(), inner: self.relevancy.clone() })
    }

    fn messages(&mut self, out: &mut Outbox) {
        let following: BTreeMap<PlayerId, PlayerId> = self.following.read().map(|f| f.clone()).unwrap_or_default();
        for e in self.passed.drain(..) {
            let (to, reliable, data) = match e {
                Event::Message { to, reliable, data } => (to, reliable, data),
                // The watched world's board, as late as its frames.
                Event::Board(rows) => {
                    out.mirror_board(rows);
                    continue;
                }
                _ => continue,
            };
            let everything = self.hearing == Hearing::Everything;
            match to {
                Audience::All | Audience::Watchers => {}
                Audience::Team(_) | Audience::Player(_) if everything => {}
                Audience::Player(p) if self.hearing == Hearing::Followed => {
                    for (v, _) in following.iter().filter(|(_, f)| **f == p) {
                        let to = Audience::Player(*v);
                        if reliable { out.reliable(to, data.clone()) } else { out.event(to, data.clone()) }
                    }
                    continue;
                }
                // Private to those it was sent to.
                Audience::Team(_) | Audience::Player(_) => continue,
            }
            if reliable { out.reliable(Audience::All, data) } else { out.event(Audience::All, data) }
        }
        let since = self.last_tick.unwrap_or(0);
        for v in std::mem::take(&mut self.status_due) {
            if self.viewers.contains(&v) {
                out.system(Audience::Player(v), self.status(v, since).encode());
            }
        }
        if self.ended {
            out.stop_world();
        }
    }
}

/// Everything, or what the followed recorded player saw (the game's relevancy as that
/// player).
struct Follow {
    following: Arc<RwLock<BTreeMap<PlayerId, PlayerId>>>,
    inner: Arc<dyn Relevancy>,
}

impl Relevancy for Follow {
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>) {
        let followed = self.following.read().ok().and_then(|f| f.get(&player).copied());
        match followed {
            Some(p) => self.inner.interest(world, p, out),
            None => Interest::everything(world, out),
        }
    }
}

/// The tap on a watched world that feeds its spectators' world.
pub(crate) struct Feed(pub SyncSender<Frame>);

impl Tap for Feed {
    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        let Some(snapshot) = snapshot else { return true };
        let frame = Frame { tick, snapshot: snapshot.clone(), events: events.to_vec() };
        match self.0.try_send(frame) {
            Ok(()) | Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}
impl Spectators {
    /// Starts a spectators' world of world `source` on `worlds`: it shows `source` as it was
    /// [`Spectators::delay`](Spectators) ago (at most
    /// [`MAX_DELAY`](MAX_DELAY)), so spectators cannot tell its players what
    /// they cannot see yet. Move spectators into it like into any world
    /// ([`Outbox::move_to`]); each may follow one of `source`'s players (seeing what the game's
    /// relevancy given in `how` shows that player) or see everything (see
    /// [`SpectatorWorld`](SpectatorWorld)). They hear what `source` sent to
    /// everyone and to its watchers, and see its scoreboard; team and player messages only as
    /// [`Hearing`](Hearing) allows. It stops when `source` does (give it a
    /// fallback in `options`).
    ///
    /// ```no_run
    /// # use volley::prelude::*;
    /// # use volley::server::spectate::{Hearing, Spectators};
    /// # use volley::server::{Everything, Worlds, WorldId, WorldOptions};
    /// # fn f(worlds: &Worlds, duel: WorldId) -> Result<(), volley::server::SpawnError> {
    /// let delay = std::time::Duration::from_secs(3);
    /// let stands = Spectators::new(delay, std::sync::Arc::new(Everything))
    ///     .start(worlds, duel, WorldOptions::new("spectators").fallback(WorldId::ENTRY))?;
    /// // The casters hear both teams.
    /// let booth = Spectators::new(delay, std::sync::Arc::new(Everything))
    ///     .hearing(Hearing::Everything)
    ///     .start(worlds, duel, WorldOptions::new("spectators").fallback(WorldId::ENTRY))?;
    /// # let _ = (stands, booth); Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Worlds::spawn`]. When `source` is not running, the spectators' world starts and
    /// ends at once (its players, if any, go to its fallback).
    pub fn start(self, worlds: &Worlds, source: WorldId, options: WorldOptions) -> Result<WorldId, SpawnError> {
        let ticks = (self.delay().as_secs_f64() * f64::from(worlds.server_hz())).round() as u32;
        let (tx, rx) = std::sync::mpsc::sync_channel(FEED_QUEUE);
        worlds.tap(source, Box::new(Feed(tx)))?;
        let columns = worlds.columns_of(source);
        let world = SpectatorWorld::live((**worlds.schema()).clone(), rx, ticks, self, columns);
        worlds.spawn(options, world)
    }
}
