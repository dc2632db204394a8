//! The broadcaster actor: hands each tick's shared snapshot to every player actor.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::batcher::SnapshotBatcher;
use super::mailbox::{BroadcastMsg, MAX_PENDING_MESSAGES, MessageBatch, NewWorld, PlayerMsg, PlayerRef, WorldMsg};
use crate::protocol::scoreboard::BoardUpdates;
use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::WorldSnapshot;
use crate::protocol::system::Pace;
use crate::server::cores::directory::{Directory, ToPlayer, ToWorld};
use crate::server::cores::executor::{Executor, Outlet};
use crate::server::cores::inputs::{AppliedInputs, InputQueue};
use crate::server::cores::pace::{Pacer, Round};
use crate::server::game::world::{Audience, Numbers, PlayerId, WorldId};
use crate::server::ops::metrics::ServerMetrics;
use bytes::Bytes;

/// Wakes a tick's player actors a few at a time: each one that finishes its snapshot wakes
/// the next. The runtime's queues then never hold more than about `window` snapshot
/// wake-ups, so the socket's receive loop and the worlds run between them, not after every
/// player's snapshot of the tick. The work is the same and the cores stay busy (the window
/// is a few per core). Each player actor is woken at most once a tick for its snapshot
/// (`volley_fanout_repeat_wakeups_total` counts any second one).
///
/// Each tick starts a new generation of `window` chains; a chain of an older generation
/// ends with the player that holds it. So a player actor that dies holding a wake-up costs
/// its chain only until the next tick, and chains never pile up when ticks overlap.
#[derive(Debug)]
pub(crate) struct FanOut {
    pending: Mutex<VecDeque<Arc<PlayerRef>>>,
    window: usize,
    generation: AtomicU32,
    /// The server tick of the current generation.
    tick: AtomicU32,
    batcher: Option<Arc<SnapshotBatcher>>,
    /// Where a second wake-up in one tick is counted.
    metrics: Option<Arc<ServerMetrics>>,
    /// When the current generation started, in microseconds after `epoch`.
    started_us: AtomicU64,
    /// When its queue of wake-ups emptied, in microseconds after it started, plus one; 0
    /// while wake-ups wait ([`FanOut::drain_time`]).
    drained_us: AtomicU64,
    epoch: Instant,
}

/// Wake-ups in flight per core of the runtime.
pub(crate) const FAN_OUT_PER_CORE: usize = 4;

impl FanOut {
    /// A relay that keeps `window` player actors woken at once (at least one); the batcher,
    /// if any, is told of a player actor that could not be woken.
    pub(crate) fn new(window: usize, batcher: Option<Arc<SnapshotBatcher>>) -> Self {
        Self {
            pending: Mutex::new(VecDeque::new()),
            window: window.max(1),
            generation: AtomicU32::new(0),
            tick: AtomicU32::new(u32::MAX),
            batcher,
            metrics: None,
            started_us: AtomicU64::new(0),
            drained_us: AtomicU64::new(1),
            epoch: Instant::now(),
        }
    }

    /// Counts a player actor woken twice in one tick in `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Arc<ServerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// A window of [`FAN_OUT_PER_CORE`] for each core this machine has.
    pub(crate) fn per_core(batcher: Option<Arc<SnapshotBatcher>>) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Self::new(FAN_OUT_PER_CORE * cores, batcher)
    }

    /// Queues this tick's wake-ups behind any the last tick left, and starts the window.
    /// Several worlds' snapshots of one server tick (`tick`), or of an older one (a late
    /// world), share a generation: the second world's players queue behind the first's, for
    /// the chains already running (and the window is started again only if they had run out
    /// of players).
    fn start(&self, players: &mut Vec<Arc<PlayerRef>>, tick: u32) {
        // Only a newer tick starts a new generation: a late world's snapshot of an older
        // tick queues behind the running chains, as one of the same tick does.
        let mut before = self.tick.load(Ordering::Acquire);
        let newer = loop {
            if before != u32::MAX && tick.wrapping_sub(before) as i32 <= 0 {
                break false;
            }
            match self.tick.compare_exchange_weak(before, tick, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break true,
                Err(now) => before = now,
            }
        };
        let same_tick = !newer;
        let mut was_empty = true;
        if let Ok(mut q) = self.pending.lock() {
            was_empty = q.is_empty();
            q.extend(players.drain(..));
            // Nothing to hand out: drained at once.
            self.drained_us.store(u64::from(q.is_empty()), Ordering::Relaxed);
        }
        if same_tick && !was_empty {
            return; // the running chains take them
        }
        let generation = if same_tick {
            self.generation.load(Ordering::Acquire)
        } else {
            // The last tick's chains end first, so that none of them takes this tick's players.
            self.started_us.store(self.micros(), Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
        };
        // The chains start on the player actors (spread over the runtime's cores), not here.
        for _ in 0..self.window {
            if !self.wake_next(generation) {
                break;
            }
        }
    }

    /// A player actor woken with `generation` has sent its snapshot: it passes the wake-up
    /// on, if its chain is still current.
    pub(crate) fn finished(&self, generation: u32) {
        self.wake_next(generation);
    }

    /// How long the current generation took to hand out its last wake-up, from its start;
    /// `None` while some wait.
    pub(crate) fn drain_time(&self) -> Option<std::time::Duration> {
        match self.drained_us.load(Ordering::Relaxed) {
            0 => None,
            n => Some(std::time::Duration::from_micros(n - 1)),
        }
    }

    fn micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Wakes the next queued player actor; false when none is left.
    fn wake_next(&self, generation: u32) -> bool {
        loop {
            // A chain ends when a newer tick's chains have started.
            if generation != self.generation.load(Ordering::Acquire) {
                return false;
            }
            let next = self.pending.lock().ok().and_then(|mut q| {
                let p = q.pop_front();
                if p.is_some() && q.is_empty() {
                    let took = self.micros().saturating_sub(self.started_us.load(Ordering::Relaxed));
                    self.drained_us.store(took + 1, Ordering::Relaxed);
                }
                p
            });
            let Some(p) = next else { return false };
            let tick = self.tick.load(Ordering::Relaxed);
            if p.mailbox.figures.woken_tick.swap(tick, Ordering::Relaxed) == tick
                && let Some(m) = &self.metrics
            {
                m.repeat_wakeups.fetch_add(1, Ordering::Relaxed);
            }
            if p.actor.cast(PlayerMsg::SnapshotReady(generation)).is_ok() {
                return true;
            }
            // A player actor that stopped is removed by its own post_stop; it will not
            // answer, so the batcher stops waiting for it.
            if let Some(b) = &self.batcher {
                b.done();
            }
        }
    }
}

/// The broadcaster actor. Each player actor encodes its own delta, so the encoding spreads
/// over every core of the runtime. It owns the [`Directory`] of who is in which world: every
/// world's output reaches players through it.
#[derive(Debug, Default)]
pub(crate) struct Broadcaster;

/// What the broadcaster starts with.
#[derive(Debug)]
pub(crate) struct BroadcastArgs {
    /// The server's figures.
    pub metrics: Arc<ServerMetrics>,
    /// Where the player actors leave their snapshot datagrams (told how many were woken
    /// each tick); `None` in tests without a socket.
    pub batcher: Option<Arc<SnapshotBatcher>>,
    /// Wakes the player actors (shared with them: each wakes the next).
    pub fanout: Arc<FanOut>,
    /// World numbers, given back when a world ends.
    pub numbers: Arc<Mutex<Numbers>>,
    /// Decides every player's snapshot interval (1 unless the server is short of CPU).
    pub pacer: Pacer,
}

/// How the broadcaster reaches a world.
struct WorldLink {
    inputs: InputQueue,
    /// Its actor, or what waits for it while it starts.
    actor: Result<ActorRef<WorldMsg>, Vec<WorldMsg>>,
}

impl WorldLink {
    fn tell(&mut self, msg: WorldMsg) {
        match &mut self.actor {
            Ok(a) => drop(a.cast(msg)),
            Err(waiting) => waiting.push(msg),
        }
    }
}

/// The broadcaster's state: the executor (the directory and the scoreboards) and the links
/// it delivers through.
pub(crate) struct BroadcastState {
    /// Who is where, and each player's handle (shared with the fan-out: one reference count
    /// a player and tick, not one per part).
    exec: Executor<Arc<PlayerRef>>,
    links: Links,
}

/// What the broadcaster delivers through: the worlds' actors and queues, the players'
/// mailboxes and the fan-out ([`Outlet`]).
struct Links {
    worlds: BTreeMap<WorldId, WorldLink>,
    metrics: Arc<ServerMetrics>,
    batcher: Option<Arc<SnapshotBatcher>>,
    fanout: Arc<FanOut>,
    numbers: Arc<Mutex<Numbers>>,
    /// This tick's player actors to wake (reused tick after tick).
    to_wake: Vec<Arc<PlayerRef>>,
    /// Messages to every player of a world not yet handed out: they go to each player actor
    /// as one shared batch (one cast per player, not one per message and player) when the
    /// tick's snapshot goes out, or earlier when anything else must keep its place after
    /// them.
    to_all: Vec<(WorldId, Bytes, bool)>,
    /// The inputs the tick being carried out applied (for its snapshot).
    applied: Option<AppliedInputs>,
    pacer: Pacer,
    /// Snapshot rounds so far (a round: the server tick's snapshots of every world).
    round: u32,
    /// The server tick of the current round, and its snapshots handed out and replaced.
    round_tick: Option<u32>,
    handed: usize,
    replaced: usize,
    /// When the current round began, and how long after the one before.
    round_began: Instant,
    round_after: std::time::Duration,
}

impl std::fmt::Debug for BroadcastState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastState").field("players", &self.exec.dir().player_count()).finish_non_exhaustive()
    }
}

/// Leaves `to_all` in the inbox of every player actor it is for, one shared batch per world,
/// without waking it: what comes next from the broadcaster (the tick's snapshot, or a
/// message to that player) wakes it, and it takes the batch first.
fn flush_to_all(dir: &Directory<Arc<PlayerRef>>, to_all: &mut Vec<(WorldId, Bytes, bool)>) {
    while let Some(&(world, _, _)) = to_all.first() {
        // This world's run of messages, in order (the next world's wait their turn).
        let n = to_all.iter().take_while(|(w, _, _)| *w == world).count();
        let batch: MessageBatch = to_all.drain(..n).map(|(_, b, r)| (b, r)).collect();
        leave_batch(dir.audience(world, Audience::All).map(|(_, p)| p), &batch);
    }
}

fn leave_batch<'a>(players: impl Iterator<Item = &'a Arc<PlayerRef>>, batch: &MessageBatch) {
    let n = batch.len();
    let reliable = batch.iter().any(|(_, r)| *r);
    for p in players {
        let (r, inbox) = (&p.actor, p.mailbox.inbox());
        let pending = inbox.messages.fetch_add(n, Ordering::Relaxed);
        if pending < MAX_PENDING_MESSAGES {
            if !inbox.leave(batch.clone()) {
                // Its actor panicked holding the lock; it is being cleaned up.
                inbox.messages.fetch_sub(n, Ordering::Relaxed);
            }
            continue;
        }
        inbox.messages.fetch_sub(n, Ordering::Relaxed);
        if reliable {
            tracing::warn!(actor = %r.get_id(), "player too far behind on reliable messages; disconnecting");
            let _ = r.cast(PlayerMsg::close(SessionEnd::TooFarBehind));
        }
    }
}

impl Links {
    /// A world's snapshot of server tick `tick` arrived: the first of a newer tick begins a
    /// round, and tells the pacer how the last one went (and every player the interval if
    /// it changed).
    fn next_round(&mut self, dir: &Directory<Arc<PlayerRef>>, tick: u32) {
        // A world's snapshot of a tick whose round began already (worlds tick on their own
        // and one may come late) counts in the current round.
        if self.round_tick.is_some_and(|t| tick.wrapping_sub(t) as i32 <= 0) {
            return;
        }
        let now = Instant::now();
        if self.round_tick.is_some()
            && let Some(interval) = self.pacer.on_round(Round {
                handed: self.handed,
                replaced: self.replaced,
                after: self.round_after,
                drained: self.fanout.drain_time(),
                lasted: now.saturating_duration_since(self.round_began),
            })
        {
            self.tell_pace(dir, interval);
        }
        self.round_tick = Some(tick);
        self.round_after = now.saturating_duration_since(self.round_began);
        self.round_began = now;
        self.round = self.round.wrapping_add(1);
        (self.handed, self.replaced) = (0, 0);
    }

    /// Every player's snapshot interval is now `interval`: tells each of them.
    fn tell_pace(&mut self, dir: &Directory<Arc<PlayerRef>>, interval: u8) {
        tracing::info!(interval, "snapshot pacing: every player gets one snapshot in {interval}");
        self.metrics.snapshot_interval.store(u64::from(interval), Ordering::Relaxed);
        let pace = Pace::new(interval).encode();
        for (_, p) in dir.players() {
            p.tell(PlayerMsg::System(pace.clone()));
        }
    }
}

impl Outlet<Arc<PlayerRef>> for Links {
    fn to_world(&mut self, world: WorldId, told: ToWorld) {
        if let Some(l) = self.worlds.get_mut(&world) {
            l.tell(WorldMsg::Told(told));
        }
    }

    fn to_player(&mut self, _: PlayerId, p: &Arc<PlayerRef>, told: ToPlayer) {
        if let ToPlayer::Enter(world, _) = &told {
            // Its inputs go to that world's queue from now on.
            let Some(l) = self.worlds.get(world) else { return };
            p.mailbox.route_to(l.inputs.clone());
        }
        p.tell(PlayerMsg::Told(told));
    }

    fn to_all(&mut self, _: &Directory<Arc<PlayerRef>>, world: WorldId, data: Bytes, reliable: bool) {
        self.to_all.push((world, data, reliable));
    }

    fn flush(&mut self, dir: &Directory<Arc<PlayerRef>>) {
        flush_to_all(dir, &mut self.to_all);
    }

    fn message(&mut self, _: PlayerId, p: &Arc<PlayerRef>, data: &Bytes, reliable: bool) {
        let (r, inbox) = (&p.actor, p.mailbox.inbox());
        let pending = inbox.messages.fetch_add(1, Ordering::Relaxed);
        if pending < MAX_PENDING_MESSAGES {
            let _ = r.cast(PlayerMsg::Message(data.clone(), reliable, inbox.left()));
            return;
        }
        inbox.messages.fetch_sub(1, Ordering::Relaxed);
        if reliable && pending == MAX_PENDING_MESSAGES {
            tracing::warn!(actor = %r.get_id(), "player too far behind on reliable messages; disconnecting");
            let _ = r.cast(PlayerMsg::close(SessionEnd::TooFarBehind));
        }
    }

    fn notice(&mut self, _: PlayerId, p: &Arc<PlayerRef>, data: &Bytes) {
        p.tell(PlayerMsg::System(data.clone()));
    }

    fn board(&mut self, _: PlayerId, p: &Arc<PlayerRef>, updates: &Arc<BoardUpdates>) {
        p.tell(PlayerMsg::Board(updates.clone()));
    }

    fn kick(&mut self, _: PlayerId, p: &Arc<PlayerRef>, end: SessionEnd) {
        // After every message the world sent it before (those to it alone are in its
        // mailbox ahead of this; those to everyone were flushed).
        p.tell(PlayerMsg::close(end));
    }

    fn ping(&self, _: PlayerId, p: &Arc<PlayerRef>) -> u16 {
        (p.mailbox.figures.rtt_us.load(Ordering::Relaxed) / 1000).min(65_535) as u16
    }

    fn snapshot(&mut self, dir: &mut Directory<Arc<PlayerRef>>, world: WorldId, snap: Arc<WorldSnapshot>) {
        let Some(applied) = self.applied.clone() else { return };
        let tick = snap.tick();
        self.next_round(dir, tick);
        let (mut replaced, mut paced) = (0, 0);
        let to_wake = &mut self.to_wake;
        to_wake.clear();
        let (pacer, round) = (&self.pacer, self.round);
        dir.publish(world, snap, |view, id, p| {
            if !pacer.due(round, id) {
                paced += 1;
                return;
            }
            let Some(was_empty) = p.mailbox.inbox().deliver(view.clone(), applied.clone()) else {
                return; // its actor panicked holding it; it is being cleaned up
            };
            if was_empty {
                to_wake.push(p.clone());
            } else {
                replaced += 1;
            }
        });
        self.handed += to_wake.len() + replaced as usize;
        self.replaced += replaced as usize;
        self.metrics.snapshots_paced.fetch_add(paced, Ordering::Relaxed);
        // The batcher learns how many will answer before the first can (the worlds
        // of one server tick add up).
        if let Some(b) = &self.batcher {
            b.begin_tick(tick, to_wake.len());
        }
        self.fanout.start(to_wake, tick);
        self.metrics.snapshots_replaced.fetch_add(replaced, Ordering::Relaxed);
    }
}

impl Actor for Broadcaster {
    type Msg = BroadcastMsg;
    type State = BroadcastState;
    type Arguments = BroadcastArgs;

    async fn pre_start(
        &self,
        _: ActorRef<BroadcastMsg>,
        args: BroadcastArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let links = Links {
            worlds: BTreeMap::new(),
            metrics: args.metrics,
            batcher: args.batcher,
            fanout: args.fanout,
            numbers: args.numbers,
            to_wake: Vec::new(),
            to_all: Vec::new(),
            applied: None,
            pacer: args.pacer,
            round: 0,
            round_tick: None,
            handed: 0,
            replaced: 0,
            round_began: Instant::now(),
            round_after: std::time::Duration::ZERO,
        };
        Ok(BroadcastState { exec: Executor::default(), links })
    }

    async fn handle(
        &self,
        _: ActorRef<BroadcastMsg>,
        msg: BroadcastMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let BroadcastState { exec, links } = state;
        match msg {
            #[cfg(feature = "test-hooks")]
            BroadcastMsg::InjectFault => return Err("injected fault".into()),
            BroadcastMsg::Add(p, handle, who) => {
                if links.pacer.interval() > 1 {
                    handle.tell(PlayerMsg::System(Pace::new(links.pacer.interval()).encode()));
                }
                exec.add_player(p, handle, *who, links);
            }
            BroadcastMsg::PinPace(interval) => {
                if let Some(interval) = links.pacer.pin(interval) {
                    links.tell_pace(exec.dir(), interval);
                }
            }
            BroadcastMsg::Remove(p) => exec.remove_player(p, links),
            BroadcastMsg::Presence(p, away) => exec.presence(p, away, links),
            BroadcastMsg::AddWorld(w) => {
                let NewWorld { id, parent, options, relevancy, inputs, board_columns } = *w;
                links.worlds.insert(id, WorldLink { inputs, actor: Err(Vec::new()) });
                exec.add_world(id, options, relevancy, parent, board_columns);
            }
            BroadcastMsg::WorldReady(id, actor) => {
                if let Some(l) = links.worlds.get_mut(&id)
                    && let Err(waiting) = std::mem::replace(&mut l.actor, Ok(actor.clone()))
                {
                    for m in waiting {
                        let _ = actor.cast(m);
                    }
                }
            }
            BroadcastMsg::WorldEnded(id, why) => {
                if links.worlds.remove(&id).is_some() {
                    tracing::info!(world = %id, why, "a world ended; its players go to its fallback");
                    exec.remove_world(id, &why, links);
                    if let Ok(mut n) = links.numbers.lock() {
                        n.free(id);
                    }
                }
            }
            BroadcastMsg::Move { by, player, to } => exec.move_player(by, player, to, links),
            BroadcastMsg::Watch { by, player, world, on } => exec.watch(by, player, world, on),
            BroadcastMsg::Tap(world, tap) => {
                // A world gone: the tap is dropped, and its spectators' world ends.
                if let Some(l) = links.worlds.get_mut(&world) {
                    l.tell(WorldMsg::Tap(tap));
                }
            }
            BroadcastMsg::Tick(world, commands, applied) => {
                links.applied = Some(applied);
                // A stop is the world actor's own: it stops itself after this tick.
                let _ = exec.run(world, commands, links);
                links.applied = None;
            }
        }
        links.metrics.set_worlds(exec.dir().worlds());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::snapshot::WorldSnapshot;
    use crate::server::cores::simulation::Command;
    use crate::server::game::world::{JoinInfo, WorldOptions};
    use crate::server::shells::mailbox::Mailbox;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use tokio::sync::Notify;

    /// A player the fan-out can only wake (no link to send through).
    fn handle(actor: ActorRef<PlayerMsg>, shared: Arc<Mailbox>) -> Arc<PlayerRef> {
        Arc::new(PlayerRef { actor, mailbox: shared })
    }

    /// Stands in for a player actor held back (its first message blocks until released) and
    /// counts what reaches it, as the real one does with the inbox counter.
    struct Stuck {
        release: Arc<Notify>,
        inbox: Arc<Mailbox>,
        events: Arc<AtomicUsize>,
        reliable: Arc<AtomicUsize>,
        disconnected: Arc<AtomicBool>,
    }

    impl Actor for Stuck {
        type Msg = PlayerMsg;
        type State = bool;
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<PlayerMsg>, _: ()) -> Result<bool, ActorProcessingErr> {
            Ok(false)
        }

        async fn handle(
            &self,
            _: ActorRef<PlayerMsg>,
            msg: PlayerMsg,
            waited: &mut bool,
        ) -> Result<(), ActorProcessingErr> {
            if !*waited {
                *waited = true;
                self.release.notified().await;
            }
            match msg {
                PlayerMsg::Message(_, reliable, _) => {
                    self.inbox.inbox().messages.fetch_sub(1, Ordering::Relaxed);
                    let n = if reliable { &self.reliable } else { &self.events };
                    n.fetch_add(1, Ordering::Relaxed);
                }
                PlayerMsg::Told(ToPlayer::Close(_)) => self.disconnected.store(true, Ordering::Relaxed),
                _ => {}
            }
            Ok(())
        }
    }

    /// Counts its snapshot wake-ups and remembers their generation; passes nothing on
    /// (the test does, to step the relay by hand).
    struct Counted(Arc<AtomicUsize>, Arc<AtomicU32>);

    impl Actor for Counted {
        type Msg = PlayerMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<PlayerMsg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(&self, _: ActorRef<PlayerMsg>, msg: PlayerMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
            if let PlayerMsg::SnapshotReady(g) = msg {
                self.1.store(g, Ordering::Relaxed);
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_fan_out_keeps_its_window_and_a_new_tick_ends_old_chains() {
        let woken = Arc::new(AtomicUsize::new(0));
        let generation = Arc::new(AtomicU32::new(0));
        let mut players = Vec::new();
        for _ in 0..10 {
            let (r, _) = Actor::spawn(None, Counted(woken.clone(), generation.clone()), ()).await.unwrap();
            players.push(handle(r, Mailbox::stand_in()));
        }
        let fanout = FanOut::new(2, None);
        let mut tick = players.clone();
        fanout.start(&mut tick, 1);
        settle(|| woken.load(Ordering::Relaxed) >= 2).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 2, "only the window is woken at first");
        let g1 = generation.load(Ordering::Relaxed);
        fanout.finished(g1);
        settle(|| woken.load(Ordering::Relaxed) >= 3).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 3, "each finished player wakes one more");
        // A new tick (nobody new to wake): a fresh window of chains, and the old ones end.
        fanout.start(&mut Vec::new(), 2);
        settle(|| woken.load(Ordering::Relaxed) >= 5).await;
        fanout.finished(g1);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 5, "an old generation's chain ended");
        let g2 = generation.load(Ordering::Relaxed);
        assert_ne!(g1, g2);
        for _ in 0..10 {
            fanout.finished(g2);
        }
        settle(|| woken.load(Ordering::Relaxed) >= 10).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 10, "everyone once, nobody twice");
        for p in players {
            p.actor.stop(None);
        }
    }

    #[tokio::test]
    async fn another_worlds_players_of_the_same_tick_queue_behind_the_running_chains() {
        let woken = Arc::new(AtomicUsize::new(0));
        let generation = Arc::new(AtomicU32::new(0));
        let mut players = Vec::new();
        for _ in 0..8 {
            let (r, _) = Actor::spawn(None, Counted(woken.clone(), generation.clone()), ()).await.unwrap();
            players.push(handle(r, Mailbox::stand_in()));
        }
        let fanout = FanOut::new(2, None);
        let (mut first, mut second, mut late) = (players[..4].to_vec(), players[4..6].to_vec(), players[6..].to_vec());
        fanout.start(&mut first, 7);
        settle(|| woken.load(Ordering::Relaxed) >= 2).await;
        let g = generation.load(Ordering::Relaxed);
        // A second world's snapshot of tick 7, and a late world's of tick 6: no new window,
        // the chains stay current.
        fanout.start(&mut second, 7);
        fanout.start(&mut late, 6);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 2, "still the window");
        for _ in 0..6 {
            fanout.finished(g);
        }
        settle(|| woken.load(Ordering::Relaxed) >= 8).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        assert_eq!(woken.load(Ordering::Relaxed), 8, "the first chains carried the three worlds' players, each once");
        for p in players {
            p.actor.stop(None);
        }
    }

    /// Records the world messages that reach it, in order, and how many casts woke it.
    struct Recorder(Arc<Mutex<(Vec<Bytes>, usize)>>, Arc<Mailbox>);

    impl Actor for Recorder {
        type Msg = PlayerMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<PlayerMsg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(&self, _: ActorRef<PlayerMsg>, msg: PlayerMsg, _: &mut ()) -> Result<(), ActorProcessingErr> {
            let Ok(mut log) = self.0.lock() else { return Ok(()) };
            // As the player actor does: the batches left before what woke it come first.
            let upto = match &msg {
                PlayerMsg::Message(_, _, upto) => *upto,
                PlayerMsg::SnapshotReady(_) => self.1.inbox().take_snapshot().map_or(0, |s| s.2),
                _ => 0,
            };
            if matches!(msg, PlayerMsg::Told(ToPlayer::Enter(..))) {
                return Ok(()); // the world notice, not a wake-up of the fan-out's
            }
            let mut batches = Vec::new();
            self.1.inbox().take_batches(upto, &mut batches);
            log.0.extend(batches.iter().flat_map(|b| b.iter().map(|(d, _)| d.clone())));
            if let PlayerMsg::Message(data, _, _) = msg {
                self.1.inbox().messages.fetch_sub(1, Ordering::Relaxed);
                log.0.push(data);
            }
            log.1 += 1;
            Ok(())
        }
    }

    #[tokio::test]
    async fn messages_to_everyone_go_out_as_one_batch_per_player_in_the_worlds_order() {
        let broadcaster = spawn_broadcaster().await;
        let mut logs = Vec::new();
        let mut slots = Vec::new();
        for p in 0..3u32 {
            let log = Arc::new(Mutex::new((Vec::new(), 0usize)));
            let slot = Mailbox::stand_in();
            let (r, _) = Actor::spawn(None, Recorder(log.clone(), slot.clone()), ()).await.unwrap();
            broadcaster.cast(BroadcastMsg::Add(p, handle(r, slot.clone()), who(p))).unwrap();
            logs.push(log);
            slots.push(slot);
        }
        let msg = |to: Audience, s: &'static str| Command::Message(to, Bytes::from_static(s.as_bytes()), true);
        // A tick's messages: three to all, one to player 1 in between, two more to all; then
        // the tick's snapshot, which hands out what is batched.
        let mut commands: Vec<Command> = [
            (Audience::All, "a"),
            (Audience::All, "b"),
            (Audience::Player(1), "p"),
            (Audience::All, "c"),
            (Audience::All, "d"),
            (Audience::All, "e"),
        ]
        .into_iter()
        .map(|(to, s)| msg(to, s))
        .collect();
        commands.push(Command::Snapshot(Arc::new(WorldSnapshot::new(1))));
        broadcaster.cast(BroadcastMsg::Tick(WorldId::ENTRY, commands, applied())).unwrap();
        let got = |i: usize| logs[i].lock().map(|l| (l.0.concat(), l.1)).unwrap_or_default();
        settle(|| (0..3).all(|i| got(i).0.len() >= if i == 1 { 6 } else { 5 })).await;
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // Messages to all cost no cast: the snapshot's wake-up delivers them.
        assert_eq!(got(0), (b"abcde".to_vec(), 1), "both batches with the snapshot's wake-up");
        assert_eq!(got(1), (b"abpcde".to_vec(), 2), "the targeted message keeps its place");
        assert_eq!(got(2), (b"abcde".to_vec(), 1));
        assert!(slots.iter().all(|s| s.inbox().messages.load(Ordering::Relaxed) == 0), "the inbox counts are settled");
    }

    /// What a tick applied: nothing.
    fn applied() -> AppliedInputs {
        Arc::new(crate::server::cores::inputs::TickInputs {
            newest: Vec::new(),
            fresh: Vec::new(),
            started: tokio::time::Instant::now(),
        })
    }

    /// A broadcaster without a socket (no batcher), four wake-ups in flight.
    async fn spawn_broadcaster() -> ActorRef<BroadcastMsg> {
        let args = BroadcastArgs {
            metrics: Arc::new(ServerMetrics::new()),
            batcher: None,
            fanout: Arc::new(FanOut::new(4, None)),
            numbers: Arc::default(),
            pacer: Pacer::new(60, 60),
        };
        let b = Actor::spawn(None, Broadcaster, args).await.unwrap().0;
        let entry = NewWorld {
            parent: None,
            id: WorldId::ENTRY,
            options: WorldOptions::new("main"),
            relevancy: Arc::new(crate::server::Everything),
            inputs: InputQueue::default(),
            board_columns: Vec::new(),
        };
        b.cast(BroadcastMsg::AddWorld(Box::new(entry))).unwrap();
        b
    }

    fn who(p: PlayerId) -> Box<JoinInfo> {
        Box::new(JoinInfo::new(u64::from(p), [0; crate::protocol::netcode::USER_DATA_BYTES]))
    }

    /// Waits until `done`, ten seconds at most.
    async fn settle(done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() && start.elapsed() < std::time::Duration::from_secs(10) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_player_actor_that_falls_behind_holds_at_most_the_bound_then_is_disconnected() {
        let broadcaster = spawn_broadcaster().await;
        let release = Arc::new(Notify::new());
        let inbox = Mailbox::stand_in();
        let (events, reliable) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let disconnected = Arc::new(AtomicBool::new(false));
        let stuck = Stuck {
            release: release.clone(),
            inbox: inbox.clone(),
            events: events.clone(),
            reliable: reliable.clone(),
            disconnected: disconnected.clone(),
        };
        let (player, _) = Actor::spawn(None, stuck, ()).await.unwrap();
        broadcaster.cast(BroadcastMsg::Add(7, handle(player.clone(), inbox.clone()), who(7))).unwrap();
        // The first message blocks the player actor; then the world floods it with events,
        // and then sends two reliable messages.
        let send = |reliable: bool| {
            let message = Command::Message(Audience::Player(7), Bytes::from_static(b"x"), reliable);
            broadcaster.cast(BroadcastMsg::Tick(WorldId::ENTRY, vec![message], applied()))
        };
        for _ in 0..3000 {
            send(false).unwrap();
        }
        send(true).unwrap();
        send(true).unwrap();
        // Let the broadcaster work through its mailbox (the bound fills), then check it holds
        // before releasing the player actor.
        settle(|| {
            disconnected.load(Ordering::Relaxed)
                || inbox.inbox().messages.load(Ordering::Relaxed) >= MAX_PENDING_MESSAGES
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let pending = inbox.inbox().messages.load(Ordering::Relaxed);
        assert_eq!(pending, MAX_PENDING_MESSAGES, "messages waiting for the stuck player actor");
        release.notify_one();
        settle(|| disconnected.load(Ordering::Relaxed) && events.load(Ordering::Relaxed) >= MAX_PENDING_MESSAGES).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        // What was queued arrived (the first message was one of them); the rest of the events
        // were dropped, and the reliable messages, which found no room, disconnected it.
        assert_eq!(events.load(Ordering::Relaxed), MAX_PENDING_MESSAGES);
        assert_eq!(reliable.load(Ordering::Relaxed), 0);
        assert!(disconnected.load(Ordering::Relaxed), "a reliable message with no room disconnects");
        assert_eq!(inbox.inbox().messages.load(Ordering::Relaxed), 0);
        player.stop(None);
        broadcaster.stop(None);
    }
}
