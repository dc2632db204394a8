//! A zone's bus side: [`ZoneLink`] (the frames to publish, the frames received, the handoffs asked and answered) and [`ZoneInbox`], what the tap and the border world share with it.

use super::exit::ZoneExit;
use super::{DEPARTURE_QUEUE, Departing, ZoneGame};
use crate::protocol::snapshot::{Schema, WorldSnapshot};
use crate::protocol::zone::ZoneCounters;
use crate::protocol::zone::handoff::{AlreadyLeaving, Answer, Arrivals, Departures, Offer, Outcome};
use crate::protocol::zone::{BorderEncoder, BorderError, BorderFrame, CodedFrame, StateFrame, ZoneId, ZoneLayout};
use crate::server::game::world::{PlayerId, WorldId, WorldRef};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use volley_util::cpu::{cpu_since, thread_cpu_time};

/// Adds the thread's CPU time since `began` (a [`thread_cpu_time`] reading) to `counter`, in
/// nanoseconds.
pub(super) fn add_spent(counter: &AtomicU64, began: Duration) {
    counter.fetch_add(cpu_since(began).as_nanos() as u64, Ordering::Relaxed);
}

/// One call of the border relevancy in this many is timed ([`ZoneCounters::relevancy_ns`]).
pub const RELEVANCY_TIMED_EVERY: u64 = 8;

/// One frame to publish: to which neighbour, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFrame {
    /// The neighbour.
    pub to: ZoneId,
    /// The tick it is of.
    pub tick: u32,
    /// The encoded [`BorderFrame`].
    pub bytes: bytes::Bytes,
}

/// What a zone's bus shell publishes for one tick ([`ZoneLink::next_tick`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneTick {
    /// A frame for each neighbour.
    pub frames: Vec<OutFrame>,
    /// The zone's whole state, when it publishes it (the bytes of a [`StateFrame`]).
    pub state: Option<bytes::Bytes>,
}

/// One tick of the zone's world as its tap hands it to the link.
#[derive(Debug)]
pub(crate) struct Ticked {
    pub(super) snapshot: Arc<WorldSnapshot>,
    /// When it ticked, microseconds since the Unix epoch.
    pub(super) unix_micros: u64,
    /// Who each player is (player id, client id), when the zone publishes its state.
    pub(super) players: Option<Vec<(u32, u64)>>,
    /// The oldest and newest frame of each neighbour its players' views may merge at this
    /// tick, when the zone publishes its state ([`StateFrame::held`]).
    pub(super) held: Vec<(ZoneId, u32, u32)>,
}

/// Why a received frame was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameRefused {
    /// The bytes are not a usable frame.
    #[error(transparent)]
    Border(#[from] BorderError),
    /// It comes from a zone that is not this zone's neighbour (or from this zone).
    #[error("border frame from zone {0}, which is not a neighbour")]
    NotNeighbour(ZoneId),
    /// The border world is behind (its queue is full) or stopped.
    #[error("the border world did not take the frame")]
    Behind,
}

/// The bus's side of a zone (see the module docs): frames to publish out, frames received in.
#[derive(Debug)]
pub struct ZoneLink {
    pub(super) me: ZoneId,
    pub(super) layout: ZoneLayout,
    pub(super) game: Arc<dyn ZoneGame>,
    pub(super) schema: Arc<Schema>,
    pub(super) snapshots: tokio::sync::mpsc::Receiver<Ticked>,
    pub(super) departures: Option<tokio::sync::mpsc::Receiver<Departing>>,
    pub(super) inbox: ZoneInbox,
    pub(super) counters: Arc<ZoneCounters>,
    pub(super) handoff_timeout: Duration,
    pub(super) encoder: BorderEncoder,
    pub(super) exit: ZoneExit,
}

impl std::fmt::Debug for dyn ZoneGame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZoneGame")
    }
}

impl ZoneLink {
    /// This zone.
    pub fn me(&self) -> ZoneId {
        self.me
    }

    /// The layout.
    pub fn layout(&self) -> &ZoneLayout {
        &self.layout
    }

    /// The border world (every player watches it).
    pub fn border_world(&self) -> WorldId {
        self.inbox.border.id()
    }

    /// The zone's figures.
    pub fn counters(&self) -> &Arc<ZoneCounters> {
        &self.counters
    }

    /// How long a handoff waits for the new zone's answer.
    pub fn handoff_timeout(&self) -> Duration {
        self.handoff_timeout
    }

    /// The next tick's frames to publish, one per neighbour (an empty one too: it tells the
    /// neighbour this zone is alive), picked and encoded here, off the tick's path. `None`
    /// once the zone's world has stopped.
    pub async fn next_frames(&mut self) -> Option<Vec<OutFrame>> {
        Some(self.next_tick().await?.frames)
    }

    /// [`ZoneLink::next_frames`] without waiting: the frames of the oldest tick not yet
    /// taken, if there is one (for in-memory buses and the stepper).
    pub fn try_next_frames(&mut self) -> Option<Vec<OutFrame>> {
        Some(self.try_next_tick()?.frames)
    }

    /// The next tick's frames for the neighbours, and, when the zone publishes its state
    /// ([`ZoneOptions::publish_state`](crate::server::zone::ZoneOptions::publish_state)), its [`StateFrame`]. `None` once the zone's world has
    /// stopped.
    pub async fn next_tick(&mut self) -> Option<ZoneTick> {
        let t = self.snapshots.recv().await?;
        Some(self.tick_of(&t))
    }

    /// [`ZoneLink::next_tick`] without waiting.
    pub fn try_next_tick(&mut self) -> Option<ZoneTick> {
        let t = self.snapshots.try_recv().ok()?;
        Some(self.tick_of(&t))
    }

    fn tick_of(&mut self, t: &Ticked) -> ZoneTick {
        let frames = self.frames_of(&t.snapshot);
        let state = t.players.as_ref().and_then(|players| {
            StateFrame::encode(self.me, t.unix_micros, players, &t.held, &t.snapshot, &self.schema)
                .map_err(|e| tracing::warn!(zone = self.me, error = %e, "the zone's state could not be encoded"))
                .ok()
                .map(bytes::Bytes::from)
        });
        ZoneTick { frames, state }
    }

    /// The frames of one snapshot of the zone's world (its ticks in increasing order).
    pub fn frames_of(&mut self, snapshot: &Arc<WorldSnapshot>) -> Vec<OutFrame> {
        let began = thread_cpu_time();
        let game = &self.game;
        let coded = self.encoder.encode(snapshot, |e| game.position(e));
        let mut out = Vec::with_capacity(coded.len());
        for CodedFrame { to, entities, bytes } in coded {
            match bytes {
                Ok(bytes) => {
                    self.counters.frames_out.fetch_add(1, Ordering::Relaxed);
                    self.counters.entities_out.fetch_add(entities as u64, Ordering::Relaxed);
                    out.push(OutFrame { to, tick: snapshot.tick(), bytes });
                }
                Err(e) => {
                    self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(zone = self.me, to, error = %e, "a border frame could not be encoded");
                }
            }
        }
        add_spent(&self.counters.work_ns, began);
        out
    }

    /// A frame received from the bus ([`ZoneInbox::handle_frame`]).
    ///
    /// # Errors
    /// Why it was not used.
    pub fn handle_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        self.inbox.handle_frame(bytes)
    }

    /// The players the zone's world hands off ([`ZoneExit::hand_off`]),
    /// for the bus shell to offer (taken once: `None` the second time). Each offer's answer,
    /// or why there is none, goes to [`ZoneInbox::end_handoff`].
    pub fn take_departures(&mut self) -> Option<tokio::sync::mpsc::Receiver<Departing>> {
        self.departures.take()
    }

    /// The receiving side, to hand to the bus shell's subscriber task.
    pub fn inbox(&self) -> ZoneInbox {
        self.inbox.clone()
    }

    /// The game's side of the zone's handoffs: its world keeps it and hands players to the
    /// neighbouring zones through it ([`ZoneExit::hand_off`]).
    pub fn exit(&self) -> ZoneExit {
        self.exit.clone()
    }
}

/// The receiving side of a zone's link: cheap to clone, used from any task.
#[derive(Debug, Clone)]
pub struct ZoneInbox {
    pub(super) me: ZoneId,
    pub(super) neighbours: Arc<[ZoneId]>,
    pub(super) schema: Arc<Schema>,
    /// The schema's fingerprint, which every frame's must match.
    pub(super) fingerprint: u64,
    pub(super) border: WorldRef<BorderFrame>,
    pub(super) counters: Arc<ZoneCounters>,
    pub(super) public_addr: Arc<RwLock<Option<std::net::SocketAddr>>>,
    pub(super) arrivals: Arc<Mutex<Arrivals>>,
    pub(super) departures: Arc<Mutex<Departures>>,
    /// Handoffs ended by an answer, for the zone's world at its next tick.
    pub(super) ended: Arc<Mutex<Vec<Outcome>>>,
    /// The handoffs' clock: offers, arrivals and answers are timed on it.
    pub(super) clock: std::time::Instant,
}

impl ZoneInbox {
    /// The handoffs' clock now (time since the zone started): the `now` its methods take.
    pub fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// An offer from a neighbour (the bytes of an [`Offer`]) at `now`: the bytes of the
    /// [`Answer`] to send back. Accepted when it is well formed, comes from a neighbour, this
    /// zone has a public address and room for one more arrival.
    pub fn handle_offer(&self, bytes: &[u8], now: Duration) -> Vec<u8> {
        let public_addr = self.public_addr.read().ok().and_then(|a| *a);
        let answer = match (Offer::decode(bytes), public_addr) {
            (Err(e), _) => Answer::Refused { reason: e.to_string() },
            (Ok(o), _) if !self.neighbours.contains(&o.from) => {
                Answer::Refused { reason: format!("zone {} is not a neighbour of zone {}", o.from, self.me) }
            }
            (Ok(_), None) => Answer::Refused { reason: format!("zone {} takes no handoffs", self.me) },
            (Ok(o), Some(addr)) => match self.arrivals.lock() {
                Ok(mut a) => a.handle_offer(o, addr, now),
                Err(_) => Answer::Refused { reason: "internal error".into() },
            },
        };
        let i = usize::from(!matches!(answer, Answer::Accepted { .. }));
        self.counters.handoffs_in[i].fetch_add(1, Ordering::Relaxed);
        if let Answer::Refused { reason } = &answer {
            tracing::info!(zone = self.me, %reason, "a handoff to this zone was refused");
        }
        answer.encode()
    }

    /// Sets where this zone's players connect (when it was not known as the zone started:
    /// a server bound to port 0), so that it takes handoffs.
    pub fn set_public_addr(&self, addr: std::net::SocketAddr) {
        if let Ok(mut a) = self.public_addr.write() {
            *a = Some(addr);
        }
    }

    /// The accepted handoff of the player whose token carries `client_id`, if one waits
    /// (taken: it is given to the game with the player's join).
    pub fn take_arrival(&self, client_id: u64, now: Duration) -> Option<Offer> {
        self.arrivals.lock().ok()?.take(client_id, now)
    }

    /// Starts handing `player` to zone `to` at `now` (one handoff per player at a time).
    ///
    /// # Errors
    /// When it is already being handed off.
    pub fn begin_handoff(&self, player: PlayerId, to: ZoneId, now: Duration) -> Result<(), AlreadyLeaving> {
        match self.departures.lock() {
            Ok(mut d) => d.start(player, to, now),
            Err(_) => Err(AlreadyLeaving(player)),
        }
    }

    /// Whether `player` is being handed off.
    pub fn is_leaving(&self, player: PlayerId) -> bool {
        self.departures.lock().is_ok_and(|d| d.is_leaving(player))
    }

    /// How `player`'s handoff ended at `now`: the new zone's answer (its bytes), or why there
    /// was none (no zone listens, the bus is down: the player stays, as on a timeout).
    /// `None` when no handoff of it was in flight. Counted by outcome.
    pub fn end_handoff(&self, player: PlayerId, answer: Result<&[u8], String>, now: Duration) -> Option<Outcome> {
        let mut d = self.departures.lock().ok()?;
        let outcome = match answer.map(Answer::decode) {
            Ok(Ok(a)) => d.handle_answer(player, &a, now)?,
            Ok(Err(e)) => d.handle_answer(player, &Answer::Refused { reason: e.to_string() }, now)?,
            Err(_) => {
                let to = d.leaving_to(player)?;
                d.forget(player);
                Outcome::TimedOut { player, to }
            }
        };
        drop(d);
        let i = match &outcome {
            Outcome::Accepted { took, .. } => {
                self.counters.handoff_us.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                0
            }
            Outcome::Refused { .. } => 1,
            Outcome::TimedOut { .. } => 2,
        };
        self.counters.handoffs_out[i].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut e) = self.ended.lock()
            && e.len() < DEPARTURE_QUEUE * 4
        {
            e.push(outcome.clone());
        }
        Some(outcome)
    }

    /// The handoffs that waited past the timeout at `now`, ended (the players stay).
    pub fn poll_handoff_timeouts(&self, now: Duration) -> Vec<Outcome> {
        let out = self.departures.lock().map(|mut d| d.poll_timeouts(now)).unwrap_or_default();
        self.counters.handoffs_out[2].fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// A frame received from the bus: decoded and handed to the border world for its next
    /// tick.
    ///
    /// # Errors
    /// Why it was not used (counted in [`ZoneCounters::frames_refused`] or
    /// [`ZoneCounters::frames_dropped`]).
    pub fn handle_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        let began = thread_cpu_time();
        let r = self.take_frame(bytes);
        add_spent(&self.counters.work_ns, began);
        r
    }

    fn take_frame(&self, bytes: &[u8]) -> Result<(), FrameRefused> {
        let refused = |e: FrameRefused| {
            self.counters.frames_refused.fetch_add(1, Ordering::Relaxed);
            e
        };
        let frame = BorderFrame::decode_as(bytes, &self.schema, self.fingerprint).map_err(|e| refused(e.into()))?;
        if !self.neighbours.contains(&frame.zone) {
            return Err(refused(FrameRefused::NotNeighbour(frame.zone)));
        }
        self.border.send(frame).map_err(|_| {
            self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
            FrameRefused::Behind
        })?;
        self.counters.frames_in.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// This zone.
    pub fn me(&self) -> ZoneId {
        self.me
    }
}
