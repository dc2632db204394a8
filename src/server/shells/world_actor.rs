//! The world actor: the thin shell that runs a [`World`] at its fixed timestep. It queues
//! the players' inputs ([`InputQueue`]), steps the shared [`Simulation`] each tick and hands
//! each of the tick's commands to the broadcaster. What a game writes lives in
//! [`world`](crate::server::game::world); this module is machinery.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::mailbox::{BroadcastMsg, WorldMsg};
use crate::protocol::input::ViewTime;
use crate::server::cores::directory::ToWorld;
use crate::server::cores::inputs::{AppliedInputs, ClientInput, InputQueue, TickInputs};
use crate::server::cores::simulation::{Command, Simulation, TickInput};
use crate::server::game::world::{PlayerId, World, WorldFault, WorldId};
use crate::server::ops::metrics::ServerMetrics;

/// The world actor (`fn() -> W` keeps it `Sync` whatever `W` is; the world lives in the state).
pub(crate) struct WorldActor<W: World>(std::marker::PhantomData<fn() -> W>);

impl<W: World> Default for WorldActor<W> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
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
    pub(crate) fn tick_at(&self, t: Instant) -> u32 {
        let d = t.saturating_duration_since(self.epoch).as_nanos() / self.dt.as_nanos().max(1);
        u32::try_from(d).unwrap_or(u32::MAX)
    }

    /// When tick `n` is due.
    pub(crate) fn at(&self, n: u32) -> Instant {
        self.epoch + self.dt * n
    }

    /// The first tick after `t` that a world stepping every `stride` ticks runs.
    pub(crate) fn next_after(&self, t: Instant, stride: u32) -> u32 {
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
    pub worlds: crate::server::game::world::Worlds,
    /// Why it ended, for whoever watches it end.
    pub why: Arc<std::sync::Mutex<String>>,
    /// Record it into this folder (with its kind's name), telling this handle how it goes.
    pub record: Option<(std::path::PathBuf, String, crate::server::game::world::RecordingHandle)>,
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
        let tick_rate_hz = (1.0 / clock.dt.as_secs_f64()).round() as u16;
        let record = record.as_ref().map(|(dir, kind, handle)| {
            let to = crate::server::extensions::record::RecordTo {
                dir: dir.as_path(),
                handle: handle.clone(),
                inline: false,
            };
            (kind.as_str(), to)
        });
        let start = Start { id, dt, stride, tick_rate_hz, stop_when_empty, record, metrics: Some(metrics.clone()) };
        let sim = start_world(&mut world, &worlds, start);
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
            WorldMsg::Told(told) => {
                if let ToWorld::Leave(p) = told {
                    // Its inputs still queued go with it (its slot may soon be someone else's).
                    s.inputs.drain_into(&mut s.pending);
                    s.pending.retain(|(i, _)| i.player != p);
                }
                s.sim.handle(&mut s.world, told);
            }
            WorldMsg::Shutdown(reply) => {
                s.sim.shutdown(&mut s.world);
                s.metrics.add_world_faults(s.sim.new_faults());
                let _ = reply.send(());
            }
            WorldMsg::Tap(tap) => s.sim.add_tap(tap.0),
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

/// How a world starts ([`start_world`]).
pub(crate) struct Start<'a> {
    /// Its number.
    pub id: WorldId,
    /// Its tick period.
    pub dt: Duration,
    /// Server ticks per tick of this world.
    pub stride: u32,
    /// The server's tick rate.
    pub tick_rate_hz: u16,
    /// Stop once its last player has left.
    pub stop_when_empty: bool,
    /// Record it (its kind's name, where, how).
    pub record: Option<(&'a str, crate::server::extensions::record::RecordTo<'a>)>,
    /// Figures (none in the stepper).
    pub metrics: Option<Arc<ServerMetrics>>,
}

/// Starts a world, on the server and in the stepper alike: its tick step (with a scoreboard
/// when it declares columns, stopping when empty if asked), its recording if asked, then
/// [`World::started`] (a panic there is counted, and the world runs on).
pub(crate) fn start_world<W: World + ?Sized>(
    world: &mut W,
    worlds: &crate::server::game::world::Worlds,
    how: Start<'_>,
) -> Simulation {
    let columns = world.scoreboard_columns();
    let mut sim = Simulation::new(Arc::new(world.schema()), how.dt)
        .with_scoreboard(!columns.is_empty())
        .with_stop_when_empty(how.stop_when_empty);
    if let Some((kind, to)) = how.record {
        let of = crate::server::extensions::record::RecordingOf {
            schema: sim.schema().clone(),
            kind,
            columns,
            tick_rate_hz: how.tick_rate_hz,
            stride: how.stride,
        };
        crate::server::extensions::record::record_into(&mut |tap| sim.add_tap(tap), to, how.id, of, how.metrics);
    }
    let worlds = worlds.of(how.id);
    sim.guard(WorldFault::PanicInJoin, || world.started(how.id, &worlds));
    sim
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
    // The tick's commands go to the broadcaster in one message, carried out there by the
    // executor the stepper runs too; a stop is this actor's own, last of all.
    let commands = stepped.commands();
    let stop = !s.essential && commands.iter().any(|c| matches!(c, Command::Stop));
    if s.essential
        && let Some(Command::Snapshot(snapshot)) = commands.iter().find(|c| matches!(c, Command::Snapshot(_)))
    {
        s.metrics.entities.store(snapshot.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let fresh: Vec<(PlayerId, Duration)> = fresh.into_iter().collect();
    let newest = s.sim.applied_inputs().collect();
    let applied: AppliedInputs = Arc::new(TickInputs { newest, fresh, started });
    s.broadcaster.cast(BroadcastMsg::Tick(id, commands, applied))?;
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
