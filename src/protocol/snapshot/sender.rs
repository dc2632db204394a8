//! The server's side of one player's snapshots: history, merged deltas, budget and priority.

use std::sync::Arc;

use super::cache;
use super::codec::{self, Counter};
use super::predictor::{PredictedWalk, Predictor};
use super::schema::{EntityId, KindId, Schema};
use super::world::WorldSnapshot;
use super::{SnapshotError, kind_bits};
use crate::protocol::bits::{BitWriter, golomb_code};
use crate::protocol::range::RangeEncoder;

/// Settings of a [`SnapshotSender`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderConfig {
    /// Sent snapshots kept as possible baselines (Quake 3 keeps 32).
    pub history: usize,
    /// Spend encode time to save bandwidth: predict changed entities by extrapolating from
    /// a second acknowledged snapshot older than the baseline (one bit per changed entity
    /// says whether the prediction or the baseline is the reference, whichever codes
    /// shorter), and code changed entities with the adaptive range coder, whose models learn
    /// each packet's residuals. Pays off where many things move (physics scenes); costs a
    /// few times the encode time of changed entities.
    pub predict: bool,
    /// The oldest baseline (or prediction reference) used, in ticks before the snapshot: the
    /// client keeps the snapshots of its last 64 ticks (a ring indexed by tick), so anything
    /// older may be gone there. Beyond it a full snapshot is sent.
    pub max_baseline_age: u32,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self { history: 32, predict: false, max_baseline_age: 63 }
    }
}

/// One visible entity for this player: its index in the world snapshot, how much it matters
/// this tick (added to its accumulator each tick it waits), and how often its changes are
/// sent.
///
/// ```
/// use volley::protocol::snapshot::Interest;
/// // Near: every snapshot, first. Far: a third of the snapshots (20 Hz at 60), later.
/// let near = Interest::new(4, 8.0);
/// let far = Interest::new(9, 1.0).every(3);
/// assert_eq!((near.every, far.every), (1, 3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interest {
    /// Index into the [`WorldSnapshot`] (ascending).
    pub index: u32,
    /// Priority this tick (greater first); 1.0 is a good default.
    pub priority: f32,
    /// Its changes go in one snapshot of this many (0 and 1: every one), at ticks staggered
    /// by its id, so that far entities of a crowd do not all come in the same snapshot. A
    /// new entity, a deletion, and a change the budget deferred (until it is sent) go at
    /// once. In between, the client keeps (and shows) the state it has: fewer bytes, and
    /// coarser motion, for what matters less.
    pub every: u16,
}

impl Interest {
    /// An entity with `priority`, sent in every snapshot it changes.
    pub const fn new(index: u32, priority: f32) -> Self {
        Self { index, priority, every: 1 }
    }

    /// The same, its changes sent in one snapshot of `n`.
    #[must_use]
    pub const fn every(self, n: u16) -> Self {
        Self { every: n, ..self }
    }

    /// Makes `list` what an encoder needs, indices ascending, unique and below `len`: true
    /// when it was not (then it is sorted, a repeated index keeps its first entry, and
    /// indices past the end are dropped). One pass when it already is.
    pub fn tidy(list: &mut Vec<Interest>, len: usize) -> bool {
        let ordered = list.windows(2).all(|w| w[0].index < w[1].index);
        if ordered && list.last().is_none_or(|i| (i.index as usize) < len) {
            return false;
        }
        list.sort_by_key(|i| i.index);
        list.dedup_by_key(|i| i.index);
        list.retain(|i| (i.index as usize) < len);
        true
    }

    /// Every entity of `world` with priority 1.
    pub fn everything(world: &WorldSnapshot, out: &mut Vec<Interest>) {
        out.clear();
        out.extend((0..world.len() as u32).map(|index| Interest::new(index, 1.0)));
    }
}

/// What one encode did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EncodeStats {
    /// Bytes written.
    pub bytes: usize,
    /// The baseline tick, or `None` for a full snapshot.
    pub baseline: Option<u32>,
    /// Entities sent in full (new to this client).
    pub created: u32,
    /// Entities sent as deltas.
    pub changed: u32,
    /// Deletions sent.
    pub destroyed: u32,
    /// Entities that changed but wait for a later packet (over budget).
    pub deferred: u32,
    /// Entities that changed but whose send rate ([`Interest::every`]) skips this snapshot.
    pub skipped: u32,
    /// The bytes were another player's encode of the same snapshot from the same baseline,
    /// copied (players who see all of a world: spectators).
    pub shared: bool,
}

/// One entity as this client knows it after a given snapshot: 16 bytes, since a player's
/// history holds one per visible entity per snapshot in flight.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: EntityId,
    /// Index into `sources[src]`.
    index: u32,
    /// The tick its state last changed, as of its source snapshot.
    changed: u32,
    src: u16,
    /// The kind, with [`ABSENT`] set for an entity that is visible but not yet sent (a
    /// deferred creation). Kinds are below 2^15 (see [`super::schema::MAX_KINDS`]).
    kind_flags: u16,
}

/// Flag of [`Entry::kind_flags`]: the client does not have this entity yet.
const ABSENT: u16 = 0x8000;

impl Entry {
    #[inline]
    fn kind(&self) -> KindId {
        self.kind_flags & !ABSENT
    }

    #[inline]
    fn present(&self) -> bool {
        self.kind_flags & ABSENT == 0
    }
}

/// The client's view after a snapshot: shared world snapshots plus, per entity, which one
/// holds its state. Entities sent this tick point at this tick's world; deferred ones keep
/// pointing at whatever the client still has.
#[derive(Debug, Default)]
struct SentView {
    /// The client acknowledged this snapshot (it can serve as a second reference).
    acked: bool,
    sources: Vec<Arc<WorldSnapshot>>,
    entries: Vec<Entry>,
    /// Entities that changed but were not sent, with the priority they accumulated, by id
    /// (usually none).
    waiting: Vec<(EntityId, f32)>,
    /// The view is the whole of its world snapshot (everything was of interest and sent):
    /// that snapshot's serial. Such views are the same for every player who has them, so
    /// encodes against them can be shared ([`PacketCache`]).
    whole: Option<u64>,
}

/// Encoded snapshots of one world snapshot, shared between the players who see all of it
/// and hold the same baseline (a whole view of one snapshot, or none): the first of them
/// encodes and notes the baseline, the second encodes and keeps its bytes and view, the
/// others copy them (spectators of one world, who see everything). So a world seen whole by
/// one player alone costs no copy and no allocation. At most [`SHARED_PACKETS`] baselines.
#[derive(Debug, Default)]
pub(crate) struct PacketCache(std::sync::Mutex<Shared>);

#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Baselines encoded once (`0`: none; a full snapshot is `u64::MAX`).
    seen: [u64; SHARED_PACKETS],
    packets: Vec<Arc<SharedPacket>>,
}

/// Baselines whose encodes one world snapshot keeps.
const SHARED_PACKETS: usize = 4;

#[derive(Debug)]
pub(crate) struct SharedPacket {
    /// The baseline's serial (`None`: a full snapshot).
    base: Option<u64>,
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    stats: EncodeStats,
}

impl PacketCache {
    /// Nothing encoded kept (checked without locking: the owner has it alone).
    pub(crate) fn is_empty(&mut self) -> bool {
        self.0.get_mut().is_ok_and(|s| s.packets.is_empty() && s.seen.iter().all(|&b| b == 0))
    }

    fn get(&self, base: Option<u64>) -> Option<Arc<SharedPacket>> {
        self.0.lock().ok()?.packets.iter().find(|p| p.base == base).cloned()
    }

    /// Whether an encode against `base` is worth keeping: true the second time it is asked
    /// (a first player's encode is only noted).
    fn second(&self, base: Option<u64>) -> bool {
        let key = base.unwrap_or(u64::MAX);
        let Ok(mut c) = self.0.lock() else { return false };
        if c.seen.contains(&key) {
            return c.packets.len() < SHARED_PACKETS && c.packets.iter().all(|p| p.base != base);
        }
        if let Some(slot) = c.seen.iter_mut().find(|s| **s == 0) {
            *slot = key;
        }
        false
    }

    fn put(&self, packet: SharedPacket) {
        if let Ok(mut c) = self.0.lock()
            && c.packets.len() < SHARED_PACKETS
            && c.packets.iter().all(|p| p.base != packet.base)
        {
            c.packets.push(Arc::new(packet));
        }
    }
}

impl SentView {
    fn words(&self, e: &Entry) -> &[u32] {
        self.sources.get(e.src as usize).map_or(&[], |w| w.words_at(e.index as usize))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Changed,
    Created,
    Destroyed,
}

/// An entity that needs bits this tick (changed, created or destroyed).
#[derive(Debug, Clone, Copy)]
struct Record {
    id: EntityId,
    op: Op,
    world_index: u32,
    /// Its entry in the view being built (written as if the record is sent).
    pos: u32,
    /// The baseline's entry, if the baseline has this id.
    base: Option<Entry>,
    priority: f32,
    /// Body bits (op and fields; not the gap), filled in on the slow path.
    bits: u32,
    selected: bool,
}

/// Builds one player's snapshots as merged deltas against the newest snapshot the player
/// acknowledged, within a byte budget, with a priority accumulator so nothing starves.
#[derive(Debug)]
pub struct SnapshotSender {
    schema: Arc<Schema>,
    ring: Vec<SentView>,
    /// The tick of each ring slot's view (`None`: empty or released), side by side: the
    /// searches for a tick (every ack, every baseline) read these few lines instead of a
    /// line or two of every view they pass, most of them released.
    ticks: Vec<Option<u32>>,
    cursor: usize,
    acked: Option<u32>,
    last_tick: Option<u32>,
    predict: bool,
    max_age: u32,
    /// The game's own predictor, if set, with the buffers it is given the client's baseline
    /// and second reference in.
    game: Option<Box<GamePredictor>>,
    /// Entry buffers of released views, reused by the next encodes (at most [`SPARE_VIEWS`]).
    spare: Vec<Vec<Entry>>,
}

/// Released views' buffers kept for reuse: enough for acks that arrive in bursts, few enough
/// that a burst of loss leaves no lasting memory behind.
const SPARE_VIEWS: usize = 2;

thread_local! {
    /// The range coder's models and output buffer of the predicted encode running on this
    /// thread (per thread, not per player: they only live for one packet).
    static RC: std::cell::RefCell<(codec::Models, Vec<u8>)> = std::cell::RefCell::default();
}

impl SnapshotSender {
    /// A sender with nothing sent yet.
    pub fn new(schema: Arc<Schema>, config: SenderConfig) -> Self {
        let history = config.history.max(2);
        Self {
            schema,
            ring: (0..history).map(|_| SentView::default()).collect(),
            ticks: vec![None; history],
            cursor: 0,
            acked: None,
            last_tick: None,
            predict: config.predict,
            max_age: config.max_baseline_age,
            game: None,
            spare: Vec::new(),
        }
    }

    /// The replicated kinds it codes.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Predicts with the game's own rules: changed entities are coded against what
    /// `predictor` makes of the client's snapshots (see [`Predictor`]) instead of the built-in
    /// extrapolation. Implies [`SenderConfig::predict`]; the client's receiver needs the same
    /// predictor ([`SnapshotReceiver::set_predictor`](super::SnapshotReceiver::set_predictor)).
    pub fn set_predictor(&mut self, predictor: Arc<dyn Predictor>) {
        self.predict = true;
        self.game = Some(Box::new(GamePredictor {
            predictor,
            baseline: WorldSnapshot::default(),
            reference: WorldSnapshot::default(),
        }));
    }

    /// Records the client's acknowledgement of the snapshot of `tick`.
    pub fn ack(&mut self, tick: u32) {
        if self.last_tick.is_none_or(|last| tick > last) || self.acked == Some(tick) {
            return;
        }
        if let Some(i) = self.slot_of(tick) {
            self.ring[i].acked = true;
        }
        if self.acked.is_none_or(|a| tick > a) {
            self.acked = Some(tick);
            self.release_before(tick);
        }
    }

    /// The client has lost every snapshot it had (a restarted program on the same session):
    /// nothing it acknowledged before serves as a baseline, so the next snapshot is whole,
    /// and deltas follow from the first one it acknowledges again.
    pub fn forget_acks(&mut self) {
        self.acked = None;
        for v in &mut self.ring {
            v.acked = false;
        }
    }

    /// The ring slot `k` places after the oldest (the cursor's), for `k` below the ring's
    /// length.
    fn slot_at(&self, k: usize) -> usize {
        let i = self.cursor + k;
        if i >= self.ring.len() { i - self.ring.len() } else { i }
    }

    /// The ring slot holding the view of `tick`. The ring holds ticks in increasing order
    /// from the cursor (oldest) round to the slot before it (newest), and the ticks looked
    /// for (acks, baselines) are recent: the search starts at the newest and stops once past
    /// the tick. (A scan of the whole ring touched 32 views each time: 1.7 % of a 500-player
    /// server for acks, 0.8 % for baselines.)
    fn slot_of(&self, tick: u32) -> Option<usize> {
        for k in (0..self.ring.len()).rev() {
            let i = self.slot_at(k);
            match self.ticks[i] {
                Some(t) if t == tick => return Some(i),
                Some(t) if t < tick => return None,
                _ => {}
            }
        }
        None
    }

    /// Frees the views older than the acknowledged `tick`: no later snapshot uses them as a
    /// baseline (baselines only move forward). With prediction, acknowledged ones stay as
    /// possible second references. So a player's history holds about one round trip of
    /// views, not the whole ring, and the world snapshots they point at are let go early.
    fn release_before(&mut self, tick: u32) {
        let predict = self.predict;
        // Oldest first, stopping at the first view the ack keeps.
        for k in 0..self.ring.len() {
            let i = self.slot_at(k);
            match self.ticks[i] {
                None => continue,
                Some(t) if t >= tick => break,
                Some(_) => {}
            }
            let v = &mut self.ring[i];
            if predict && v.acked {
                continue;
            }
            self.ticks[i] = None;
            v.sources.clear();
            v.entries.clear();
            v.waiting = Vec::new();
            if self.spare.len() < SPARE_VIEWS {
                self.spare.push(std::mem::take(&mut v.entries));
            } else {
                v.entries = Vec::new();
            }
        }
    }

    /// The acknowledged snapshot before the baseline that best serves as a second reference:
    /// as far before the baseline as `tick` is after it (a ratio of 1 amplifies quantization
    /// noise least), at most 8 times closer.
    fn reference_slot(&self, base_slot: usize, tick: u32) -> Option<(usize, u32, u32)> {
        let tb = self.ticks[base_slot]?;
        let ahead = tick.checked_sub(tb)?;
        self.ring
            .iter()
            .zip(&self.ticks)
            .enumerate()
            .filter(|(s, (v, _))| *s != self.cursor && *s != base_slot && v.acked)
            .filter_map(|(s, (_, t))| {
                let behind = tb.checked_sub((*t)?).filter(|b| *b > 0 && ahead + *b <= self.max_age)?;
                (ahead <= behind * 8).then_some((s, ahead, behind))
            })
            .min_by_key(|(_, _, behind)| *behind)
    }

    /// The newest acknowledged tick.
    pub fn acked(&self) -> Option<u32> {
        self.acked
    }

    fn baseline_slot(&self) -> Option<usize> {
        let slot = self.slot_of(self.acked?)?;
        // The slot about to be overwritten cannot serve as a baseline.
        (slot != self.cursor).then_some(slot)
    }

    /// Encodes this player's snapshot of `world` (restricted to `interest`, ascending by
    /// index) into `out`, whose length is the byte budget.
    ///
    /// # Errors
    /// When ticks go backwards, or not even the header fits in `out`.
    pub fn encode(
        &mut self,
        world: &Arc<WorldSnapshot>,
        interest: &[Interest],
        out: &mut [u8],
    ) -> Result<EncodeStats, SnapshotError> {
        let tick = world.tick();
        if self.last_tick.is_some_and(|t| tick <= t) {
            return Err(SnapshotError::TickNotIncreasing);
        }
        let base_slot =
            self.baseline_slot().filter(|s| self.ticks[*s].is_some_and(|b| tick.wrapping_sub(b) <= self.max_age));
        let mut view = std::mem::take(&mut self.ring[self.cursor]);
        self.ticks[self.cursor] = None;
        if view.entries.capacity() == 0 {
            view.entries = self.spare.pop().unwrap_or_default();
        }
        // Room for the visible set and a few deletions the budget defers; a buffer that
        // once grew far past that is given back rather than kept for the player's lifetime.
        let want = interest.len() + 4;
        if view.entries.capacity() > want + want / 2 {
            view.entries = Vec::new();
        }
        view.entries.clear();
        view.entries.reserve_exact(want);
        view.acked = false;
        view.waiting.clear();
        view.whole = None;
        view.sources.clear();
        view.sources.push(world.clone());
        let base = base_slot.map(|s| &self.ring[s]);
        // Everything of interest, no prediction, and a whole baseline (or none): the same
        // bytes as any other player's with that baseline, encoded once.
        let shareable = !self.predict && interest.len() == world.len() && interest.iter().all(|i| i.every <= 1);
        let share_key = match base {
            _ if !shareable => None,
            None => Some(None),
            Some(b) => b.whole.map(Some),
        };
        if let Some(key) = share_key
            && let Some(hit) = world.packets().get(key)
            && hit.bytes.len() <= out.len()
        {
            out[..hit.bytes.len()].copy_from_slice(&hit.bytes);
            view.entries.extend_from_slice(&hit.entries);
            view.whole = Some(world.serial());
            self.ring[self.cursor] = view;
            self.ticks[self.cursor] = Some(tick);
            self.cursor = (self.cursor + 1) % self.ring.len();
            self.last_tick = Some(tick);
            return Ok(EncodeStats { shared: true, ..hit.stats });
        }
        let reference = if self.predict { base_slot.and_then(|b| self.reference_slot(b, tick)) } else { None };
        let reference = reference.map(|(s, num, den)| Reference { view: &self.ring[s], num, den });
        // The game's prediction, from the client's snapshots as the client holds them.
        let base_tick = base_slot.and_then(|s| self.ticks[s]);
        let predicted = match (&mut self.game, base.zip(base_tick), reference) {
            (Some(g), Some((b, tb)), Some(rf)) => {
                // The reference is `den` ticks before the baseline (`reference_slot`).
                client_view(b, tb, &mut g.baseline);
                client_view(rf.view, tb.wrapping_sub(rf.den), &mut g.reference);
                g.predictor.predict(&g.baseline, &g.reference, rf.num, rf.den)
            }
            _ => None,
        };
        let predicted = predicted.as_ref();

        // The per-encode working lists live in the thread, not in every player's sender.
        let (mut records, mut order) = WORK.with_borrow_mut(|w| (std::mem::take(&mut w.0), std::mem::take(&mut w.1)));
        records.clear();
        let skipped = merge(&mut records, &mut view, base, world, interest);

        let kind_bits = kind_bits(&self.schema);
        let has_base = base.is_some();
        // Everything but the records and the working memory is fixed for this packet.
        let (schema, predict) = (&self.schema, self.predict);
        let write_records = |records: &[Record], out: &mut [u8]| {
            write(schema, records, base, reference, predicted, world, tick, base_tick, kind_bits, predict, out)
        };
        let mut written = write_records(&records, out);
        if written.is_err() {
            // Over budget: size every record, pick by priority, and retry until it fits.
            // Gap cost is estimated against the previous record, sent or not; the write pass
            // corrects any miss.
            let mut prev_id = 0u32;
            for r in &mut records {
                r.bits = body_bits(&self.schema, r, base, world, has_base, kind_bits)
                    + codec::golomb_len(r.id.saturating_sub(prev_id), 1);
                prev_id = r.id.saturating_add(1);
            }
            select(&mut records, &mut order, out.len() as u32 * 8);
            loop {
                written = write_records(&records, out);
                if written.is_ok() || !drop_lowest(&mut records) {
                    break;
                }
            }
        }
        let stats = match written {
            Ok(bytes) => Some(settle(
                &records,
                &mut view,
                base,
                EncodeStats { bytes, baseline: base_tick, skipped, ..Default::default() },
            )),
            Err(_) => None,
        };
        WORK.with_borrow_mut(|w| {
            w.0 = records;
            w.1 = order;
        });
        let Some(stats) = stats else { return Err(SnapshotError::OverBudget) };
        view.whole = None;
        if let Some(key) = share_key
            && stats.deferred == 0
            && stats.skipped == 0
            && stats.bytes <= out.len()
        {
            view.whole = Some(world.serial());
            if world.packets().second(key) {
                let bytes = out[..stats.bytes].to_vec();
                world.packets().put(SharedPacket { base: key, bytes, entries: view.entries.clone(), stats });
            }
        }

        self.ring[self.cursor] = view;
        self.ticks[self.cursor] = Some(tick);
        self.cursor = (self.cursor + 1) % self.ring.len();
        self.last_tick = Some(tick);
        Ok(stats)
    }

    /// What the client holds after the snapshot of `tick`, as a world snapshot (tests, and
    /// the admin endpoint's drill-down).
    pub fn client_view(&self, tick: u32) -> Option<WorldSnapshot> {
        let v = &self.ring[self.ticks.iter().position(|t| *t == Some(tick))?];
        let mut out = WorldSnapshot::new(tick);
        for e in v.entries.iter().filter(|e| e.present()) {
            out.push_raw(e.id, e.kind(), v.words(e));
        }
        Some(out)
    }
}

/// The view was built as if every record went out: undoes that for the records that wait
/// (the client keeps what it had, and their priority accumulates), and counts what was sent.
fn settle(records: &[Record], view: &mut SentView, base: Option<&SentView>, mut stats: EncodeStats) -> EncodeStats {
    // Deletions were left out of the view; one that waits goes back in, shifting the rest.
    let mut shift = 0usize;
    for r in records {
        let at = r.pos as usize + shift;
        match (r.op, r.selected) {
            (Op::Changed, true) => stats.changed += 1,
            (Op::Created, true) => stats.created += 1,
            (Op::Destroyed, true) => stats.destroyed += 1,
            (Op::Destroyed, false) => {
                stats.deferred += 1;
                if let Some((e, b)) = r.base.zip(base) {
                    let src = source_of(&mut view.sources, &b.sources[usize::from(e.src)]);
                    view.entries.insert(at.min(view.entries.len()), Entry { src, ..e });
                    shift += 1;
                }
            }
            (Op::Changed | Op::Created, false) => {
                stats.deferred += 1;
                view.waiting.push((r.id, r.priority));
                let Some(slot) = view.entries.get(at).copied() else { continue };
                view.entries[at] = match r.base.filter(Entry::present).zip(base) {
                    // The client keeps what it had (for a replacement: the old entity).
                    Some((e, b)) => Entry { src: source_of(&mut view.sources, &b.sources[usize::from(e.src)]), ..e },
                    None => Entry { kind_flags: slot.kind_flags | ABSENT, ..slot },
                };
            }
        }
    }
    stats
}

thread_local! {
    /// The records and the priority order of the encode running on this thread.
    static WORK: std::cell::RefCell<(Vec<Record>, Vec<u32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

fn source_of(sources: &mut Vec<Arc<WorldSnapshot>>, s: &Arc<WorldSnapshot>) -> u16 {
    if let Some(i) = sources.iter().position(|x| Arc::ptr_eq(x, s)) {
        return i as u16;
    }
    sources.push(s.clone());
    (sources.len() - 1) as u16
}

/// Walks the baseline view and this tick's visible entities in id order, writing the new
/// view's entries (as if everything is sent: deletions leave no entry) and a record for each
/// entity that needs bits. Returns how many changed entities its send rate skipped this
/// tick ([`Interest::every`]): they keep the baseline's entry and need no bits.
fn merge(
    records: &mut Vec<Record>,
    view: &mut SentView,
    base: Option<&SentView>,
    world: &WorldSnapshot,
    interest: &[Interest],
) -> u32 {
    let tick = world.tick();
    let mut skipped = 0u32;
    let (entries, waiting): (&[Entry], &[(EntityId, f32)]) = match base {
        Some(b) => (&b.entries, &b.waiting),
        None => (&[], &[]),
    };
    let ids = world.ids();
    let tracked = world.tracks_changes();
    let (mut i, mut j, mut w) = (0, 0, 0);
    loop {
        let e = entries.get(i);
        let v = interest.get(j).and_then(|x| Some((*ids.get(x.index as usize)?, x)));
        let take_base = match (e, v) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(e), Some((id, _))) => e.id <= id,
        };
        let same = matches!((e, v), (Some(e), Some((id, _))) if e.id == id);
        let pos = view.entries.len() as u32;
        if take_base && !same {
            // Gone from view: the client must delete it (unless it never had it).
            let e = entries[i];
            i += 1;
            if e.present() {
                records.push(Record {
                    id: e.id,
                    op: Op::Destroyed,
                    world_index: 0,
                    pos,
                    base: Some(e),
                    priority: f32::INFINITY,
                    bits: 0,
                    selected: true,
                });
            }
            continue;
        }
        let Some((id, x)) = v else { break };
        j += 1;
        let index = x.index as usize;
        let kind = world.kind_at(index);
        let changed = world.changed_at(index);
        view.entries.push(Entry { id, index: x.index, changed, src: 0, kind_flags: kind });
        if !same {
            records.push(Record {
                id,
                op: Op::Created,
                world_index: x.index,
                pos,
                base: None,
                priority: x.priority,
                bits: 0,
                selected: true,
            });
            continue;
        }
        let e = entries[i];
        i += 1;
        let op = if e.kind_flags != kind {
            // Never sent (absent), or replaced by an entity of another kind.
            Op::Created
        } else if e.changed == changed
            || (!tracked && base.is_some_and(|b| codec::words_eq(b.words(&e), world.words_at(index))))
        {
            // Same last-change tick: unchanged, without looking at the words. Where the world
            // tracks changes, a different tick means it changed since (should it have come
            // back to the very same state, its delta costs the field mask and no more); where
            // it does not, the words decide.
            continue;
        } else {
            Op::Changed
        };
        // Priority it accumulated while waiting, if it did.
        while waiting.get(w).is_some_and(|(wid, _)| *wid < id) {
            w += 1;
        }
        let accum = waiting.get(w).filter(|(wid, _)| *wid == id).map_or(0.0, |(_, a)| *a);
        // Not its turn (and not owed a send it was deferred from): the client keeps what
        // it has.
        if op == Op::Changed && x.every > 1 && accum == 0.0 && tick.wrapping_add(id) % u32::from(x.every) != 0 {
            if let Some(src) = base.and_then(|b| b.sources.get(usize::from(e.src))) {
                let src = source_of(&mut view.sources, src);
                if let Some(last) = view.entries.last_mut() {
                    *last = Entry { src, ..e };
                }
            }
            skipped += 1;
            continue;
        }
        let priority = accum + x.priority;
        records.push(Record { id, op, world_index: x.index, pos, base: Some(e), priority, bits: 0, selected: true });
    }
    skipped
}

fn body_bits(
    schema: &Schema,
    r: &Record,
    base: Option<&SentView>,
    world: &WorldSnapshot,
    has_base: bool,
    kind_bits: u32,
) -> u32 {
    let mut c = Counter::default();
    let op_bits = if has_base { 1 + u32::from(r.op != Op::Changed) } else { 0 };
    match r.op {
        Op::Destroyed => return op_bits,
        Op::Created => {
            let kind = world.kind_at(r.world_index as usize);
            if let Some(k) = schema.kind(kind) {
                codec::write_full(k, world.words_at(r.world_index as usize), &mut c);
            }
            c.0 += kind_bits;
        }
        Op::Changed => {
            if let Some((e, b, k)) = r.base.zip(base).and_then(|(e, b)| Some((e, b, schema.kind(e.kind())?))) {
                codec::write_delta(k, b.words(&e), world.words_at(r.world_index as usize), &k.orders, &mut c);
            }
        }
    }
    c.0 + op_bits
}

/// Greedy selection by priority within `budget_bits`.
fn select(records: &mut [Record], order: &mut Vec<u32>, budget_bits: u32) {
    const HEADER_BITS: u32 = 32 + 1 + 12 + 20 + 2;
    order.clear();
    order.extend(0..records.len() as u32);
    order.sort_unstable_by(|a, b| records[*b as usize].priority.total_cmp(&records[*a as usize].priority));
    let mut used = HEADER_BITS;
    for r in records.iter_mut() {
        r.selected = false;
    }
    for &i in order.iter() {
        let i = i as usize;
        let cost = records[i].bits;
        if used + cost <= budget_bits {
            used += cost;
            records[i].selected = true;
        }
    }
}

/// Deselects the lowest-priority selected record; false when none is left to drop.
fn drop_lowest(records: &mut [Record]) -> bool {
    let lowest = records.iter_mut().filter(|r| r.selected).min_by(|a, b| a.priority.total_cmp(&b.priority));
    match lowest {
        Some(r) => {
            r.selected = false;
            true
        }
        None => false,
    }
}

/// The reference view's state of entity `id` (walking `pos` forward in id order), if the
/// client has it with the same kind and it is short enough to predict, and the prediction's
/// ratio.
fn older_of<'a>(
    reference: Option<Reference<'a>>,
    pos: &mut usize,
    id: EntityId,
    kind: KindId,
    words: usize,
) -> Option<(&'a [u32], u32, u32)> {
    let rf = reference?;
    let older = older_words(reference, pos, id, kind)?;
    (words <= codec::MAX_PREDICTED_WORDS).then_some((older, rf.num, rf.den))
}

/// The walk over the baseline's entities the client has, for the record flags of a
/// range-coded packet.
#[derive(Default)]
struct BaseWalk {
    /// Index into the baseline's entries.
    pos: usize,
    /// Index into the reference's entries.
    ref_pos: usize,
    /// The last flag coded.
    flagged: bool,
}

impl BaseWalk {
    /// The baseline entity the walk stands at (skipping those the client lacks).
    fn current(&mut self, entries: &[Entry]) -> Option<Entry> {
        while let Some(e) = entries.get(self.pos) {
            if e.present() {
                return Some(*e);
            }
            self.pos += 1;
        }
        None
    }
}

/// The reference's words for entity `id` of `kind` (walking `pos` forward in id order), if
/// the client has it there (`kind` has no ABSENT flag, so a match is an entity it has).
fn older_words<'a>(reference: Option<Reference<'a>>, pos: &mut usize, id: EntityId, kind: KindId) -> Option<&'a [u32]> {
    let rf = reference?;
    let entries = &rf.view.entries;
    while entries.get(*pos).is_some_and(|x| x.id < id) {
        *pos += 1;
    }
    let x = entries.get(*pos).filter(|x| x.id == id && x.kind_flags == kind)?;
    Some(rf.view.words(x))
}

/// A sender's game predictor and the snapshots it reads.
#[derive(Debug)]
struct GamePredictor {
    predictor: Arc<dyn Predictor>,
    baseline: WorldSnapshot,
    reference: WorldSnapshot,
}

/// The entities the client has in `view`, as a snapshot (for the game's predictor).
fn client_view(view: &SentView, tick: u32, out: &mut WorldSnapshot) {
    out.reset(tick);
    for e in view.entries.iter().filter(|e| e.present()) {
        out.push_raw(e.id, e.kind(), view.words(e));
    }
}

/// A second reference for prediction: the client's view `den` ticks before the baseline,
/// extrapolated `num` ticks past it.
#[derive(Clone, Copy)]
struct Reference<'a> {
    view: &'a SentView,
    num: u32,
    den: u32,
}

/// Writes `head` (bits and their count) then the low `len` bits of `bits` (at most
/// [`cache::MAX_BITS`]), in one call when they fit in 64 bits.
#[inline]
fn write_after(w: &mut BitWriter<'_>, head: (u64, u32), bits: u128, len: u32) {
    let (h, n) = head;
    if n + len <= 64 {
        w.write_long(h | (bits as u64).checked_shl(n).unwrap_or(0), n + len);
    } else {
        w.write_long(h, n);
        cache::write_bits(w, bits, len);
    }
}

#[allow(clippy::too_many_arguments)]
fn write(
    schema: &Schema,
    records: &[Record],
    base: Option<&SentView>,
    reference: Option<Reference<'_>>,
    predicted: Option<&WorldSnapshot>,
    world: &WorldSnapshot,
    tick: u32,
    base_tick: Option<u32>,
    kind_bits: u32,
    adaptive: bool,
    out: &mut [u8],
) -> Result<usize, SnapshotError> {
    let out_len = out.len();
    let rc = adaptive && base_tick.is_some();
    let mut w = BitWriter::new(&mut *out);
    w.write(tick, 32);
    w.write_bool(base_tick.is_some());
    if let Some(bt) = base_tick {
        w.write_golomb(tick.wrapping_sub(bt).wrapping_sub(1), 2);
        w.write_bool(reference.is_some());
        if let Some(r) = reference {
            w.write_golomb(r.den - 1, 2);
        }
        // A sender that predicts range-codes its changed entities into a second stream that
        // follows the bit stream (its length in the last two bytes); one bit says so.
        w.write_bool(rc);
        if rc && reference.is_some() {
            // Whether the game's predictor made the predictions.
            w.write_bool(predicted.is_some());
        }
    }
    let sent = || records.iter().filter(|r| r.selected);
    // The id gaps' Exp-Golomb order is chosen per packet (2 bits): dense runs of ids (a full
    // snapshot) want 0, sparse changes want more. One pass counts the records and costs the
    // orders.
    let (mut count, mut next_id) = (0u32, 0u32);
    let mut cost = [0u32; 4];
    for r in sent() {
        count += 1;
        let gap = r.id.saturating_sub(next_id);
        for (k, c) in cost.iter_mut().enumerate() {
            *c += codec::golomb_len(gap, k as u32);
        }
        next_id = r.id.saturating_add(1);
    }
    w.write_golomb(count, 4);
    let gap_order = (0..4).min_by_key(|k| cost[*k as usize]).unwrap_or(1);
    w.write(gap_order, 2);

    let mut pred = [0u32; codec::MAX_PREDICTED_WORDS];
    // Only a range-coded packet takes the thread's models (and resets them).
    let (mut models, rc_buf) = if rc {
        RC.with_borrow_mut(|x| (std::mem::take(&mut x.0), std::mem::take(&mut x.1)))
    } else {
        (codec::Models::default(), Vec::new())
    };
    if rc {
        models.start_packet();
    }
    let mut enc = RangeEncoder::new(rc_buf);
    let mut game = predicted.map(PredictedWalk::new);
    let mut ref_pos = 0usize; // walks the reference view's entries in id order
    let mut next_id = 0u32; // the smallest id the next record may have
    let base_entries: &[Entry] = base.map_or(&[], |b| &b.entries);
    let mut walk = BaseWalk::default();
    for r in sent() {
        // The record's first bits not yet written (its id gap and op; none when range-coded).
        let mut head = (0u64, 0u32);
        if rc {
            // Where the record is: one flag per baseline entity passed, in the context of
            // whether that entity was moving (a record is far likelier on a moving one).
            let b = base.ok_or(SnapshotError::Malformed)?;
            while let Some(e) = walk.current(base_entries) {
                let here = e.id >= r.id;
                let older = older_words(reference, &mut walk.ref_pos, e.id, e.kind());
                let ctx = codec::flag_context(walk.flagged, b.words(&e), older);
                enc.bit(&mut models.flag[ctx], here);
                walk.flagged = here;
                if here {
                    break;
                }
                next_id = e.id.saturating_add(1);
                walk.pos += 1;
            }
            let at_base = walk.current(base_entries).is_some_and(|e| e.id == r.id);
            if r.op != Op::Created && !at_base {
                return Err(SnapshotError::Malformed);
            }
            enc.bit(&mut models.op[0], r.op != Op::Changed);
            if r.op != Op::Changed {
                enc.bit(&mut models.op[1], r.op == Op::Destroyed);
            }
            if r.op == Op::Created {
                // A creation's id: its distance from the smallest id it may have.
                codec::write_uint_rc(r.id.saturating_sub(next_id), &mut models.gap, &mut enc);
            }
            if at_base {
                walk.pos += 1;
            }
            next_id = r.id.saturating_add(1);
        } else {
            let gap = r.id.saturating_sub(next_id);
            next_id = r.id.saturating_add(1);
            // The id gap, then (against a baseline) the op: `0` changed, `01` created, `11`
            // destroyed; held in `head` to go out with the record's next bits when they fit
            // in 64 bits, as they almost always do.
            let (op, op_len) = match (base_tick.is_some(), r.op) {
                (false, _) => (0, 0),
                (true, Op::Changed) => (0, 1),
                (true, Op::Created) => (0b01, 2),
                (true, Op::Destroyed) => (0b11, 2),
            };
            match golomb_code(gap, gap_order) {
                Some((code, len)) if len + op_len <= 64 => head = (code | op << len, len + op_len),
                _ => {
                    w.write_golomb(gap, gap_order);
                    w.write_long(op, op_len);
                }
            }
        }
        match r.op {
            Op::Created => {
                let kind = world.kind_at(r.world_index as usize);
                write_after(&mut w, head, u128::from(kind), kind_bits);
                let k = schema.kind(kind).ok_or(SnapshotError::UnknownKind)?;
                codec::write_full(k, world.words_at(r.world_index as usize), &mut w);
            }
            Op::Changed => {
                let (e, b) = r.base.zip(base).ok_or(SnapshotError::Malformed)?;
                if let Some(src) = b.sources.get(e.src as usize).filter(|_| !rc) {
                    // The default orders against a baseline: the same bits for every player
                    // whose baseline holds this entity in the same snapshot, shared through
                    // this tick's world snapshot.
                    let (serial, index) = (src.serial(), r.world_index as usize);
                    let lookup = world.cached_delta(index, serial);
                    if let cache::Lookup::Hit(bits, len) = lookup {
                        write_after(&mut w, head, bits, len);
                    } else {
                        w.write_long(head.0, head.1);
                        let k = schema.kind(e.kind()).ok_or(SnapshotError::UnknownKind)?;
                        let (from, to) = (src.words_at(e.index as usize), world.words_at(index));
                        let mut cap = cache::Capture::default();
                        if lookup == cache::Lookup::Miss {
                            codec::write_delta(k, from, to, &k.orders, &mut cap);
                        }
                        if lookup == cache::Lookup::Full || cap.overflow {
                            codec::write_delta(k, from, to, &k.orders, &mut w);
                        } else {
                            world.cache_delta(index, serial, cap.bits, cap.len);
                            cache::write_bits(&mut w, cap.bits, cap.len);
                        }
                    }
                    if w.overflowed() {
                        break;
                    }
                    continue;
                }
                w.write_long(head.0, head.1); // nothing: range-coded records have no head
                let k = schema.kind(e.kind()).ok_or(SnapshotError::UnknownKind)?;
                let cur = world.words_at(r.world_index as usize);
                let m = models.kind(e.kind(), k);
                let mut reference_words = b.words(&e);
                let mut motion = codec::Motion { baseline: b.words(&e), older: None, predicted: false };
                if let Some((older, num, den)) = older_of(reference, &mut ref_pos, r.id, e.kind(), k.words()) {
                    motion.older = Some(older);
                    let pred = &mut pred[..k.words()];
                    match game.as_mut().and_then(|g| g.words(r.id, e.kind(), k.words())) {
                        Some(p) => pred.copy_from_slice(p),
                        None => codec::predict(k, b.words(&e), older, num, den, pred),
                    }
                    // A prediction that is the baseline (the entity stood still between the
                    // two references) needs no bit.
                    if !codec::words_eq(pred, b.words(&e)) {
                        // The receiver can predict this entity too: one bit says whether it
                        // does, whichever reference leaves the smaller residuals.
                        let use_pred = codec::residual_size(k, pred, cur) < codec::residual_size(k, b.words(&e), cur);
                        enc.bit(&mut m.predicted, use_pred);
                        if use_pred {
                            reference_words = pred;
                            motion.predicted = true;
                        }
                    }
                }
                codec::write_delta_rc(k, reference_words, cur, motion, m, &mut enc);
            }
            Op::Destroyed => w.write_long(head.0, head.1),
        }
        if w.overflowed() || (rc && enc.bytes_so_far() > out_len) {
            break;
        }
    }
    let bits = w.finish();
    let stream = if rc { enc.finish() } else { Vec::new() };
    let result = bits.ok().and_then(|n| {
        if !rc {
            return Some(n);
        }
        let m = u16::try_from(stream.len()).ok()?;
        let end = n.checked_add(stream.len())?.checked_add(2).filter(|end| *end <= out.len())?;
        out[n..end - 2].copy_from_slice(&stream);
        out[end - 2..end].copy_from_slice(&m.to_le_bytes());
        Some(end)
    });
    if rc {
        RC.with_borrow_mut(|x| *x = (models, stream));
    }
    result.ok_or(SnapshotError::OverBudget)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::protocol::snapshot::SnapshotReceiver;

    crate::replicated! {
        /// A dot.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Dot {
            /// Where.
            pub x: u32 = crate::protocol::quant::Bits(16),
        }
    }

    #[test]
    fn viewers_who_see_everything_from_the_same_baseline_share_one_encode_and_decode_it_alike() {
        let mut schema = Schema::new();
        schema.register::<Dot>().unwrap();
        let schema = Arc::new(schema);
        let mut senders: Vec<SnapshotSender> =
            (0..3).map(|_| SnapshotSender::new(schema.clone(), SenderConfig::default())).collect();
        let mut receivers: Vec<SnapshotReceiver> = (0..3).map(|_| SnapshotReceiver::new(schema.clone(), 64)).collect();
        let (mut shared, mut own) = (0, 0);
        let mut interest = Vec::new();
        for t in 1..40u32 {
            let mut w = WorldSnapshot::new(t);
            for id in 0..(10 + t % 4) {
                w.push_raw(id * 2, 0, &[(t * 3 + id) & 0xffff]);
            }
            let w = Arc::new(w);
            Interest::everything(&w, &mut interest);
            for (i, (s, r)) in senders.iter_mut().zip(&mut receivers).enumerate() {
                // The third viewer acknowledges one tick in two: its baselines differ.
                let mut out = [0u8; 1200];
                let stats = s.encode(&w, &interest, &mut out).unwrap();
                if stats.shared {
                    shared += 1
                } else {
                    own += 1
                }
                assert_eq!(r.decode(&out[..stats.bytes]).unwrap(), t);
                assert_eq!(r.latest().unwrap(), &*w, "viewer {i} at tick {t}");
                if i < 2 || t % 2 == 0 {
                    s.ack(t);
                }
            }
        }
        // The first two encode each tick (the second keeps its encode); the third copies it
        // whenever its baseline is theirs.
        assert!(shared >= 15, "{shared} shared, {own} encoded");
        assert!(own < 39 * 3, "{shared} shared, {own} encoded");
    }
}
