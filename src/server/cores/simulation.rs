//! One world's tick, sans-IO: the step the world actor and the
//! [`Stepper`](crate::testing::Stepper) both run. Inputs in the order they arrived (each with
//! its view, never after the newest snapshot made), then [`World::tick`], then
//! [`World::messages`], then [`World::snapshot`] built against the previous tick's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::board::Board;
use super::directory::ToWorld;
use crate::protocol::input::ViewTime;
use crate::protocol::recording::Event;
use crate::protocol::scoreboard::ScoreRow;
use crate::protocol::snapshot::{Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::system::Redirect;
use crate::server::game::world::{
    Audience, JoinInfo, MAX_HELD_INPUTS, MAX_HOLD, MAX_PANICKING_TICKS, Outbox, PlayerId, Players, Tap, World,
    WorldChange, WorldFault, WorldId, message_event,
};
use crate::server::game::world::{HeldInput, HeldInputs, InputSpan};

/// One input on its way into a tick, however its shell holds it.
pub(crate) trait TickInput {
    /// Who sent it.
    fn player(&self) -> PlayerId;
    /// Its sequence number.
    fn seq(&self) -> u32;
    /// The input as the client encoded it.
    fn bytes(&self) -> &[u8];
    /// What the client was drawing when it made it.
    fn view(&self) -> Option<ViewTime>;
    /// Not an input but a message from the client for [`World::message`]: its bytes, and
    /// whether it came reliably.
    fn message(&self) -> Option<(&[u8], bool)> {
        None
    }
}

/// What one step made.
#[derive(Debug)]
pub(crate) struct Stepped {
    /// The tick's quantized world, shared by every player (`None`: the game's snapshot
    /// panicked, and players get no snapshot this tick).
    pub snapshot: Option<Arc<WorldSnapshot>>,
    /// The messages the world sent this tick.
    pub outbox: Outbox,
    /// The scoreboard's rows, when an update is due (pings 0: the shell knows them).
    pub board: Option<Vec<ScoreRow>>,
}

/// What a world's tick asks of the rest of the server, one command at a time, in the order
/// [`Stepped::commands`] gives: the world actor hands each to the broadcaster, the
/// [`Stepper`](crate::testing::Stepper) carries each out at once, so both keep one order.
#[derive(Debug)]
pub(crate) enum Command {
    /// One of its players' team (before the messages: it holds for them).
    Team(PlayerId, Option<u16>),
    /// A message on the framework's channel.
    System(Audience, bytes::Bytes),
    /// A message from the game: audience, bytes, reliable.
    Message(Audience, bytes::Bytes, bool),
    /// The scoreboard's rows (before the kicks: a kicked player gets its last board).
    Board(Vec<ScoreRow>),
    /// End a player's session (only if it is still in this world).
    Kick(PlayerId, crate::protocol::session::SessionEnd),
    /// The tick's snapshot (after the messages: they travel with it).
    Snapshot(Arc<WorldSnapshot>),
    /// Move one of its players (after the snapshot: a moved player's last snapshot of this
    /// world goes out before it leaves).
    Move(PlayerId, WorldId),
    /// One of its players starts (true) or stops watching a world.
    Watch(PlayerId, WorldId, bool),
    /// Stop this world, last of all.
    Stop,
}

impl Stepped {
    /// What the tick asks, in order (see [`Command`]).
    pub(crate) fn commands(self) -> Vec<Command> {
        let Stepped { snapshot, mut outbox, board } = self;
        let changes = outbox.take_changes();
        let mut out: Vec<Command> = outbox.take_teams().into_iter().map(|(p, t)| Command::Team(p, t)).collect();
        out.extend(outbox.take_system().into_iter().map(|(to, data)| Command::System(to, data)));
        let (messages, kicks) = outbox.into_parts();
        out.extend(messages.into_iter().map(|(to, data, reliable)| Command::Message(to, data, reliable)));
        out.extend(board.map(Command::Board));
        out.extend(kicks.into_iter().map(|(p, end)| Command::Kick(p, end)));
        out.extend(snapshot.map(Command::Snapshot));
        let mut stop = false;
        for c in changes {
            match c {
                WorldChange::Move(p, to) => out.push(Command::Move(p, to)),
                WorldChange::Watch(p, w, on) => out.push(Command::Watch(p, w, on)),
                WorldChange::Stop => stop = true,
            }
        }
        if stop {
            out.push(Command::Stop);
        }
        out
    }
}

/// What the taps asked before a tick's inputs that goes out with the tick's own output
/// ([`Players::kick`], [`Players::send`]).
#[derive(Debug, Default)]
struct TapAsks {
    kicks: Vec<(PlayerId, String)>,
    messages: Vec<crate::server::game::world::Outgoing>,
}

/// A world's tick count, players, the inputs it applied and its previous snapshot: what a
/// step needs besides the [`World`] itself (which its shell owns).
#[derive(Debug)]
pub(crate) struct Simulation {
    schema: Arc<Schema>,
    tick: u32,
    /// The next step's tick, when its shell set it ([`Simulation::set_next_tick`]).
    next: Option<u32>,
    /// Steps run (the scoreboard's updates are counted in steps, not tick numbers).
    steps: u64,
    dt: Duration,
    /// Per player, the sequences of the first and the newest input applied since it joined.
    applied: BTreeMap<PlayerId, InputSpan>,
    /// The players joined (a leave for one not here is not passed on).
    joined: std::collections::BTreeSet<PlayerId>,
    /// Stop once empty ([`WorldOptions::stop_when_empty`](crate::server::WorldOptions::stop_when_empty)),
    /// and whether anyone has joined yet.
    stop_when_empty: bool,
    had_players: bool,
    /// Shut down: no more joins, leaves or ticks reach the world.
    shut_down: bool,
    /// The scoreboard, when the world has one.
    board: Option<Board>,
    previous: Option<Arc<WorldSnapshot>>,
    /// Faults of the game's code survived, by [`WorldFault::ALL`] index.
    faults: [u64; WorldFault::ALL.len()],
    /// The part of `faults` already reported ([`Simulation::new_faults`]).
    reported: [u64; WorldFault::ALL.len()],
    /// Ticks in a row in which the world panicked.
    panicking: u32,
    /// What takes each tick's frame (a recording, a spectators' world), and the joins and
    /// leaves since the last frame (kept only while there is a tap).
    taps: Taps,
    events: Vec<Event>,
    /// Players whose inputs a tap holds ([`Players::hold`]).
    held: BTreeMap<PlayerId, HeldInputs>,
}

/// The taps of a simulation.
#[derive(Default)]
struct Taps(Vec<Box<dyn Tap>>);

impl std::fmt::Debug for Taps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} taps", self.0.len())
    }
}

/// The world panicked in [`MAX_PANICKING_TICKS`] ticks in a row: it is stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the world panicked in {0} ticks in a row; it is stopped")]
pub(crate) struct WorldStopped(pub u32);

impl Simulation {
    /// A simulation of `schema`'s kinds, `dt` a tick.
    pub(crate) fn new(schema: Arc<Schema>, dt: Duration) -> Self {
        Self {
            schema,
            tick: 0,
            next: None,
            steps: 0,
            dt,
            applied: BTreeMap::new(),
            joined: std::collections::BTreeSet::new(),
            stop_when_empty: false,
            had_players: false,
            shut_down: false,
            board: None,
            previous: None,
            faults: [0; WorldFault::ALL.len()],
            reported: [0; WorldFault::ALL.len()],
            panicking: 0,
            taps: Taps::default(),
            events: Vec::new(),
            held: BTreeMap::new(),
        }
    }

    /// Steps in `secs` seconds of ticks.
    fn steps_in(&self, secs: f64) -> u64 {
        (secs / self.dt.as_secs_f64().max(1e-6)).ceil() as u64
    }

    /// Lets the taps act on the players before this step's inputs ([`Tap::before_inputs`]),
    /// then carries out what they asked: held inputs let go are applied, in order; players
    /// sent elsewhere leave, their redirects into `redirects`. A hold older than
    /// [`MAX_HOLD`] is let go.
    fn before_inputs<W: World + ?Sized>(
        &mut self,
        world: &mut W,
        latest: u32,
        redirects: &mut Vec<(PlayerId, bytes::Bytes)>,
        asked: &mut TapAsks,
    ) {
        let mut released = Vec::new();
        let mut sent = Vec::new();
        if !self.taps.0.is_empty() {
            let mut taps = std::mem::take(&mut self.taps.0);
            let steps = self.steps;
            let mut panics = Vec::new();
            taps.retain_mut(|t| {
                let mut players = Players {
                    joined: &self.joined,
                    applied: &self.applied,
                    held: &mut self.held,
                    released: &mut released,
                    redirects: &mut sent,
                    kicks: &mut asked.kicks,
                    messages: &mut asked.messages,
                    step: steps,
                };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.before_inputs(&mut players))) {
                    Ok(()) => true,
                    Err(payload) => {
                        panics.push(format!("a tap panicked before a tick's inputs: {}", panic_text(&*payload)));
                        false
                    }
                }
            });
            self.taps.0 = taps;
            for why in panics {
                self.record(WorldFault::PanicInTap, &why);
            }
        }
        if !self.held.is_empty() {
            let give_up = self.steps_in(MAX_HOLD.as_secs_f64());
            let stale: Vec<PlayerId> =
                self.held.iter().filter(|(_, h)| self.steps - h.since > give_up).map(|(p, _)| *p).collect();
            for p in stale {
                if let Some(h) = self.held.remove(&p) {
                    tracing::warn!(player = p, "inputs held too long were let go");
                    released.push((p, h));
                }
            }
        }
        for (player, h) in released {
            for input in h.inputs {
                let view = input.view.map(|v| v.not_after(latest));
                self.guard(WorldFault::PanicInInput, || world.input_viewed(player, &input.bytes, view));
                self.note_applied(player, input.seq);
            }
        }
        for (player, token) in sent {
            let last_applied = self.applied.get(&player).map(|a| a.newest);
            redirects.push((player, Redirect { token, last_applied }.encode()));
            self.leave(world, player);
        }
    }

    /// Input `seq` of `player` was applied.
    fn note_applied(&mut self, player: PlayerId, seq: u32) {
        self.applied.entry(player).and_modify(|a| a.newest = seq).or_insert(InputSpan { first: seq, newest: seq });
    }

    /// Hands every tick's frame to `tap` from the next step on, until it says it is done.
    pub(crate) fn add_tap(&mut self, tap: Box<dyn Tap>) {
        self.taps.0.push(tap);
    }

    /// Keeps a scoreboard (the world has columns for one).
    pub(crate) fn with_scoreboard(mut self, on: bool) -> Self {
        self.board = on.then(|| Board::new(self.dt));
        self
    }

    /// The world stops by itself once its last player has left.
    pub(crate) fn with_stop_when_empty(mut self, on: bool) -> Self {
        self.stop_when_empty = on;
        self
    }

    /// Carries out what the directory told this world (every shell delivers it here: the
    /// world actor from its mailbox, the stepper by a call). Dropping a leaving player's
    /// queued inputs is the shell's, whose queue they are in.
    pub(crate) fn handle<W: World + ?Sized>(&mut self, world: &mut W, told: ToWorld) {
        match told {
            ToWorld::Join(player, who) => self.join(world, player, &who),
            ToWorld::Leave(player) => self.leave(world, player),
            ToWorld::Stopped(stopped, why) => self.world_stopped(world, stopped, &why),
            ToWorld::Presence(player, away) => self.presence(world, player, away),
        }
    }

    /// A player's client went away or came back (only a joined player's, not after the
    /// shutdown).
    fn presence<W: World + ?Sized>(&mut self, world: &mut W, player: PlayerId, away: bool) {
        if self.shut_down || !self.joined.contains(&player) {
            return;
        }
        if away {
            self.guard(WorldFault::PanicInPresence, || world.away(player));
        } else {
            self.guard(WorldFault::PanicInPresence, || world.back(player));
        }
    }

    /// A player joined.
    pub(crate) fn join<W: World + ?Sized>(&mut self, world: &mut W, player: PlayerId, who: &JoinInfo) {
        if self.shut_down || !self.joined.insert(player) {
            return;
        }
        self.had_players = true;
        if let Some(b) = &mut self.board {
            b.join(player, who);
        }
        if self.taps.0.is_empty() {
            self.guard(WorldFault::PanicInJoin, || world.join_with(player, who));
            return;
        }
        self.events.push(Event::Joined { player, client_id: who.client_id });
        let mut who = who.clone();
        let mut taps = std::mem::take(&mut self.taps.0);
        taps.retain_mut(|t| self.guard(WorldFault::PanicInTap, || t.joining(player, &mut who)).is_some());
        self.taps.0 = taps;
        self.guard(WorldFault::PanicInJoin, || world.join_with(player, &who));
    }

    /// World `stopped`, which this world started, stopped (`why`): the game hears it (not
    /// after the shutdown).
    pub(crate) fn world_stopped<W: World + ?Sized>(&mut self, world: &mut W, stopped: WorldId, why: &str) {
        if self.shut_down {
            return;
        }
        self.guard(WorldFault::PanicInWorldStopped, || world.world_stopped(stopped, why));
    }

    /// A player left (once for each join; a second leave, or one after the shutdown, is
    /// not passed on).
    pub(crate) fn leave<W: World + ?Sized>(&mut self, world: &mut W, player: PlayerId) {
        if !self.joined.remove(&player) {
            return;
        }
        self.applied.remove(&player);
        self.held.remove(&player);
        if let Some(b) = &mut self.board {
            b.leave(player);
        }
        if !self.taps.0.is_empty() {
            self.events.push(Event::Left { player });
        }
        self.guard(WorldFault::PanicInLeave, || world.leave(player));
    }

    /// The server is shutting down: every player still joined leaves, then
    /// [`World::shutdown`] runs, once.
    pub(crate) fn shutdown<W: World + ?Sized>(&mut self, world: &mut W) {
        if self.shut_down {
            return;
        }
        let still_joined: Vec<PlayerId> = self.joined.iter().copied().collect();
        for p in still_joined {
            self.leave(world, p);
        }
        self.shut_down = true;
        // The recordings close (their writers finish their files).
        self.taps.0.clear();
        self.guard(WorldFault::PanicInShutdown, || world.shutdown());
    }

    /// The next step runs tick `tick` (on the server's clock: every world of a server
    /// numbers its ticks the same way), if that is after the last; by default each step
    /// runs the tick after the last.
    pub(crate) fn set_next_tick(&mut self, tick: u32) {
        if tick > self.tick {
            self.next = Some(tick);
        }
    }

    /// Runs a call into the game's code, catching a panic: counted and logged as `fault`.
    /// `None` after a panic.
    pub(crate) fn guard<R>(&mut self, fault: WorldFault, f: impl FnOnce() -> R) -> Option<R> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(r) => Some(r),
            Err(payload) => {
                self.record(fault, &panic_text(&*payload));
                None
            }
        }
    }

    /// Counts a fault of the game's code, and logs it the first time and at each power of
    /// two (a fault every tick does not flood the log).
    pub(crate) fn record(&mut self, fault: WorldFault, why: &str) {
        let i = WorldFault::ALL.iter().position(|f| *f == fault).unwrap_or(0);
        self.faults[i] += 1;
        let n = self.faults[i];
        if n.is_power_of_two() {
            tracing::error!(
                kind = fault.label(),
                tick = self.tick,
                times = n,
                error = why,
                "the game's code failed; the server skipped it and goes on"
            );
        }
    }

    /// Faults survived since the last call, by kind (a server's worlds each add theirs to
    /// the server's figures).
    pub(crate) fn new_faults(&mut self) -> impl Iterator<Item = (WorldFault, u64)> + '_ {
        let now = self.faults;
        let before = std::mem::replace(&mut self.reported, now);
        WorldFault::ALL.iter().copied().zip(now.into_iter().zip(before).map(|(n, b)| n - b))
    }

    /// Faults of the game's code survived so far, by kind.
    pub(crate) fn faults(&self) -> impl Iterator<Item = (WorldFault, u64)> + '_ {
        WorldFault::ALL.iter().copied().zip(self.faults.iter().copied())
    }

    /// Runs one tick: `inputs` in order, client messages among them (`applied(input, view)` is told of each input as the world
    /// gets it, its view clamped to the newest snapshot made), then the world's tick,
    /// messages and snapshot. A panic in the game's code is caught, counted and skipped (see
    /// [`WorldFault`]); the step goes on.
    ///
    /// # Errors
    /// When the world has panicked in [`MAX_PANICKING_TICKS`] ticks in a row.
    pub(crate) fn step<W: World + ?Sized, I: TickInput>(
        &mut self,
        world: &mut W,
        inputs: impl IntoIterator<Item = I>,
        mut applied: impl FnMut(&I, Option<ViewTime>),
    ) -> Result<Stepped, WorldStopped> {
        if self.shut_down {
            return Ok(Stepped { snapshot: None, outbox: Outbox::default(), board: None });
        }
        // The newest snapshot made so far: no client can have drawn a later one.
        let latest = self.tick;
        self.tick = self.next.take().unwrap_or(self.tick + 1);
        self.steps += 1;
        let panics_before = self.panics();
        let mut redirects = Vec::new();
        let mut asked = TapAsks::default();
        self.before_inputs(world, latest, &mut redirects, &mut asked);
        // A player a tap kicked leaves at once: none of its inputs is applied from here on
        // (in every shell, however long its session takes to end).
        for (player, _) in &asked.kicks {
            self.leave(world, *player);
        }
        for input in inputs {
            if !self.joined.contains(&input.player()) {
                // Not (or no longer) in this world: it moved, or its join is on its way.
                continue;
            }
            if let Some((message, reliable)) = input.message() {
                let player = input.player();
                self.guard(WorldFault::PanicInMessage, || world.message(player, message, reliable));
                continue;
            }
            if let Some(h) = self.held.get_mut(&input.player()) {
                // Held for a tap (a zone asking a neighbour to take the player): applied here
                // when let go, sent again by the client to the new server if redirected.
                if h.inputs.len() < MAX_HELD_INPUTS {
                    h.inputs.push(HeldInput { seq: input.seq(), bytes: input.bytes().to_vec(), view: input.view() });
                }
                continue;
            }
            let view = input.view().map(|v| v.not_after(latest));
            self.guard(WorldFault::PanicInInput, || world.input_viewed(input.player(), input.bytes(), view));
            // Applied even if it panicked: the client must not send it again.
            self.note_applied(input.player(), input.seq());
            applied(&input, view);
        }
        let (tick, dt) = (self.tick, self.dt);
        self.guard(WorldFault::PanicInTick, || world.tick(tick, dt));
        let mut outbox = Outbox::default();
        if self.guard(WorldFault::PanicInMessages, || world.messages(&mut outbox)).is_none() {
            // What it had sent before the panic may be half of something: none of it goes.
            outbox = Outbox::default();
        }
        // What the taps asked goes out after the world's own.
        for (to, data, reliable) in asked.messages {
            if reliable { outbox.reliable(to, data) } else { outbox.event(to, data) }
        }
        for (player, reason) in asked.kicks {
            outbox.kick(player, reason);
        }
        if self.stop_when_empty && self.had_players && self.joined.is_empty() {
            outbox.stop_world();
        }
        // A player the game moves or kicks, or whose world it stops, gets the board as it
        // ends (a player redirected to another zone leaves the game's board behind).
        let final_board = outbox.sends_players_away();
        for (player, notice) in redirects {
            outbox.system(Audience::Player(player), notice);
            outbox.moved(player);
        }
        let schema = self.schema.clone();
        let mut b = SnapshotBuilder::new(&schema, tick);
        let snapshot = match self.guard(WorldFault::PanicInSnapshot, || world.snapshot(&mut b)) {
            Some(()) => {
                let (snapshot, repeated) = b.finish_keeping_first(self.previous.as_deref());
                if let Some(id) = repeated {
                    self.record(WorldFault::DuplicateEntity, &format!("entity id {id} inserted twice; the first kept"));
                }
                let snapshot = Arc::new(snapshot);
                self.previous = Some(snapshot.clone());
                Some(snapshot)
            }
            None => None,
        };
        self.panicking = if self.panics() > panics_before { self.panicking + 1 } else { 0 };
        if self.panicking >= MAX_PANICKING_TICKS {
            return Err(WorldStopped(self.panicking));
        }
        let mirror = outbox.take_mirror();
        let (changes, steps) = (outbox.take_board(), self.steps);
        let board = self.board.as_mut().and_then(|b| b.update(changes, final_board, mirror, steps));
        if !self.taps.0.is_empty() {
            let mut events = std::mem::take(&mut self.events);
            events.extend(outbox.messages().iter().map(message_event));
            // The board as it stood, whenever it was due (recordings and spectators mirror it).
            events.extend(board.iter().map(|rows| Event::Board(rows.clone())));
            // A tap that panics is dropped (a game's extension is game code: counted, and the
            // world goes on).
            let mut taps = std::mem::take(&mut self.taps.0);
            taps.retain_mut(|t| {
                self.guard(WorldFault::PanicInTap, || t.frame(tick, snapshot.as_ref(), &events)).unwrap_or(false)
            });
            self.taps.0 = taps;
            events.clear();
            self.events = events;
        }
        Ok(Stepped { snapshot, outbox, board })
    }

    /// Panics caught so far, of every kind.
    fn panics(&self) -> u64 {
        WorldFault::ALL
            .iter()
            .zip(&self.faults)
            .filter(|(f, _)| !matches!(f, WorldFault::DuplicateEntity | WorldFault::RelevancyOrder))
            .map(|(_, n)| n)
            .sum()
    }

    /// The world's replicated kinds.
    pub(crate) fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Ticks run.
    pub(crate) fn tick(&self) -> u32 {
        self.tick
    }

    /// The tick period.
    pub(crate) fn dt(&self) -> Duration {
        self.dt
    }

    /// The newest snapshot.
    pub(crate) fn latest(&self) -> Option<&Arc<WorldSnapshot>> {
        self.previous.as_ref()
    }

    /// Players joined.
    pub(crate) fn players(&self) -> u64 {
        self.joined.len() as u64
    }

    /// Per player, the sequence of the newest applied input (sorted by player).
    pub(crate) fn applied_inputs(&self) -> impl Iterator<Item = (PlayerId, u32)> + '_ {
        self.applied.iter().map(|(p, a)| (*p, a.newest))
    }
}

/// What a caught panic said (its message, if it had one).
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod hold_tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::protocol::session::SessionEnd;

    fn none() -> [In; 0] {
        []
    }

    /// An input as a test sends it.
    struct In(PlayerId, u32);
    impl TickInput for In {
        fn player(&self) -> PlayerId {
            self.0
        }
        fn seq(&self) -> u32 {
            self.1
        }
        fn bytes(&self) -> &[u8] {
            &[]
        }
        fn view(&self) -> Option<ViewTime> {
            None
        }
    }

    /// Applies inputs (their sequence numbers, in order).
    #[derive(Default)]
    struct Game {
        applied: Vec<u32>,
        left: Vec<PlayerId>,
        seq: u32,
    }
    impl World for Game {
        fn schema(&self) -> Schema {
            Schema::new()
        }
        fn leave(&mut self, p: PlayerId) {
            self.left.push(p);
        }
        fn input(&mut self, _: PlayerId, _: &[u8]) {
            self.seq += 1;
            self.applied.push(self.seq);
        }
        fn tick(&mut self, _: u32, _: Duration) {}
        fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    }

    /// What the test's tap does to player 1 before the next step's inputs.
    #[derive(Debug, Clone)]
    enum Order {
        Hold,
        Release,
        Redirect(Vec<u8>),
    }

    /// A tap that carries out the test's orders, and says what [`Players`] answered and
    /// showed (the answer, the first and newest applied input).
    #[derive(Default, Clone)]
    #[allow(clippy::type_complexity)]
    struct Orders(Arc<Mutex<(Vec<Order>, Vec<(bool, Option<u32>, Option<u32>)>)>>);
    impl Orders {
        fn give(&self, o: Order) {
            self.0.lock().unwrap().0.push(o);
        }
        fn answers(&self) -> Vec<(bool, Option<u32>, Option<u32>)> {
            std::mem::take(&mut self.0.lock().unwrap().1)
        }
    }
    impl Tap for Orders {
        fn frame(&mut self, _: u32, _: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
            true
        }
        fn before_inputs(&mut self, players: &mut Players<'_>) {
            let mut shared = self.0.lock().unwrap();
            for o in std::mem::take(&mut shared.0) {
                let ok = match o {
                    Order::Hold => players.hold(1),
                    Order::Release => players.release(1),
                    Order::Redirect(token) => players.redirect(1, token),
                };
                shared.1.push((ok, players.first_applied(1), players.last_applied(1)));
            }
        }
    }

    fn setup() -> (Simulation, Game, Orders) {
        let mut sim = Simulation::new(Arc::new(Schema::new()), Duration::from_millis(10));
        let tap = Orders::default();
        sim.add_tap(Box::new(tap.clone()));
        let mut game = Game::default();
        sim.join(&mut game, 1, &JoinInfo::new(9, [0; crate::protocol::netcode::USER_DATA_BYTES]));
        (sim, game, tap)
    }

    #[test]
    fn held_inputs_wait_and_are_applied_in_order_when_let_go() {
        let (mut sim, mut game, tap) = setup();
        sim.step(&mut game, [In(1, 1), In(1, 2)], |_, _| {}).unwrap();
        tap.give(Order::Hold);
        tap.give(Order::Hold);
        sim.step(&mut game, [In(1, 3), In(1, 4)], |_, _| {}).unwrap();
        assert_eq!(tap.answers(), [(true, Some(1), Some(2)), (false, Some(1), Some(2))], "one hold at a time");
        assert_eq!(game.applied, [1, 2], "held: not applied");
        tap.give(Order::Release);
        sim.step(&mut game, [In(1, 5)], |_, _| {}).unwrap();
        assert_eq!(game.applied, [1, 2, 3, 4, 5], "held inputs first, in order, then the step's");
        tap.give(Order::Release);
        sim.step(&mut game, none(), |_, _| {}).unwrap();
        assert_eq!(tap.answers(), [(true, Some(1), Some(2)), (false, Some(1), Some(5))]);
        assert_eq!(sim.applied_inputs().collect::<Vec<_>>(), [(1, 5)]);
    }

    #[test]
    fn a_redirected_player_leaves_with_its_token_and_its_session_ends_as_moved() {
        let (mut sim, mut game, tap) = setup();
        sim.step(&mut game, [In(1, 1)], |_, _| {}).unwrap();
        tap.give(Order::Hold);
        sim.step(&mut game, [In(1, 2)], |_, _| {}).unwrap();
        tap.give(Order::Redirect(vec![5; 2048]));
        let mut stepped = sim.step(&mut game, [In(1, 3)], |_, _| {}).unwrap();
        assert_eq!(game.applied, [1], "held and later inputs go to the new server, not here");
        assert_eq!(game.left, [1]);
        let system = stepped.outbox.take_system();
        assert_eq!(system.len(), 1);
        assert_eq!(system[0].0, Audience::Player(1));
        let r = Redirect::decode(&system[0].1).unwrap();
        assert_eq!((r.token.len(), r.last_applied), (2048, Some(1)));
        let (_, kicks) = stepped.outbox.into_parts();
        assert_eq!(kicks, [(1, SessionEnd::Moved)]);
        tap.give(Order::Redirect(vec![5]));
        tap.give(Order::Hold);
        sim.step(&mut game, none(), |_, _| {}).unwrap();
        assert_eq!(tap.answers().iter().map(|a| a.0).collect::<Vec<_>>(), [true, true, false, false], "gone");
    }

    #[test]
    fn a_hold_never_let_go_ends_after_max_hold_and_the_player_stays() {
        let (mut sim, mut game, tap) = setup();
        tap.give(Order::Hold);
        sim.step(&mut game, none(), |_, _| {}).unwrap();
        for seq in 1..=150 {
            sim.step(&mut game, [In(1, seq)], |_, _| {}).unwrap();
        }
        assert!(game.applied.is_empty(), "held for two seconds (200 steps of 10 ms)");
        for _ in 0..60 {
            sim.step(&mut game, none(), |_, _| {}).unwrap();
        }
        assert_eq!(game.applied.len(), 150);
        assert!(game.left.is_empty());
    }

    #[test]
    fn a_tap_that_panics_before_the_inputs_is_dropped_and_counted() {
        struct Bad;
        impl Tap for Bad {
            fn frame(&mut self, _: u32, _: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
                true
            }
            fn before_inputs(&mut self, _: &mut Players<'_>) {
                panic!("bad tap");
            }
        }
        let (mut sim, mut game, _tap) = setup();
        sim.add_tap(Box::new(Bad));
        sim.step(&mut game, [In(1, 1)], |_, _| {}).unwrap();
        sim.step(&mut game, [In(1, 2)], |_, _| {}).unwrap();
        assert_eq!(game.applied, [1, 2]);
        let taps: u64 = sim.faults().filter(|(f, _)| *f == WorldFault::PanicInTap).map(|(_, n)| n).sum();
        assert_eq!((taps, sim.taps.0.len()), (1, 1));
    }
}

#[cfg(test)]
mod panic_text_tests {
    use super::panic_text;

    #[test]
    fn a_caught_panic_says_what_it_said() {
        let said = |f: fn()| std::panic::catch_unwind(f).map_err(|p| panic_text(&*p)).err();
        assert_eq!(said(|| panic!("plain")).as_deref(), Some("plain"));
        assert_eq!(said(|| panic!("formatted {}", 7)).as_deref(), Some("formatted 7"));
        assert_eq!(said(|| std::panic::panic_any(5u8)).as_deref(), Some("a panic without a message"));
    }
}
