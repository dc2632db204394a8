//! One tick of replicated state: every entity's id, kind and quantized words, sorted by id.

use std::sync::atomic::{AtomicU64, Ordering};

use super::cache::{DeltaCache, Lookup, next_serial};
use super::schema::{EntityId, KindId, Replicate, Schema};

/// The quantized state of a set of entities at one tick. The server makes one per tick and
/// shares it (`Arc`) with every player; the client rebuilds one per snapshot it receives.
/// Two snapshots are equal when their tick and entities (ids, kinds, words) are.
#[derive(Debug, Default)]
pub struct WorldSnapshot {
    tick: u32,
    ids: Vec<EntityId>,
    kinds: Vec<KindId>,
    offsets: Vec<u32>,
    words: Vec<u32>,
    /// Per entity, the tick its words last changed (see [`SnapshotBuilder::finish_after`]).
    changed: Vec<u32>,
    /// `changed` was worked out against the previous snapshot (else it is just this tick).
    tracked: bool,
    /// This content's cache key as a baseline, assigned on first use (0: not yet); any change
    /// of content clears it.
    serial: AtomicU64,
    /// Delta bits of this snapshot's entities against baselines, shared by the players.
    cache: DeltaCache,
    /// Whole encoded snapshots of it, shared by the players who see all of it from the same
    /// baseline (spectators).
    packets: super::sender::PacketCache,
}

impl Clone for WorldSnapshot {
    fn clone(&self) -> Self {
        Self {
            tick: self.tick,
            ids: self.ids.clone(),
            kinds: self.kinds.clone(),
            offsets: self.offsets.clone(),
            words: self.words.clone(),
            changed: self.changed.clone(),
            tracked: self.tracked,
            serial: AtomicU64::new(0),
            cache: self.fresh_cache(),
            packets: super::sender::PacketCache::default(),
        }
    }
}

impl PartialEq for WorldSnapshot {
    fn eq(&self, other: &Self) -> bool {
        // `changed` is the server's bookkeeping, not state.
        self.tick == other.tick
            && self.ids == other.ids
            && self.kinds == other.kinds
            && self.offsets == other.offsets
            && self.words == other.words
    }
}

impl Eq for WorldSnapshot {}

/// A borrowed entity of a [`WorldSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityRef<'a> {
    /// Its id.
    pub id: EntityId,
    /// Its kind.
    pub kind: KindId,
    /// Its quantized fields.
    pub words: &'a [u32],
}

/// Building a snapshot went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    /// The type was not registered in the schema.
    #[error("kind {0} is not in the schema")]
    UnknownKind(&'static str),
    /// Two entities share an id.
    #[error("entity id {0} appears twice")]
    DuplicateId(EntityId),
}

impl WorldSnapshot {
    /// An empty snapshot for `tick`.
    pub fn new(tick: u32) -> Self {
        Self { tick, ..Self::default() }
    }

    /// The same state labelled with another tick (replays, benchmarks).
    pub fn retick(mut self, tick: u32) -> Self {
        self.tick = tick;
        self.touch();
        self
    }

    /// Content changed: a new cache key, and no cached deltas.
    fn touch(&mut self) {
        *self.serial.get_mut() = 0;
        // Called for every entity a decoder pushes: a cache with nothing in it stays.
        if !self.packets.is_empty() {
            self.packets = super::sender::PacketCache::default();
        }
        if self.cache.is_used() {
            self.cache = self.fresh_cache();
        }
    }

    /// An empty delta cache, allocated up front if this one was.
    fn fresh_cache(&self) -> DeltaCache {
        if self.cache.is_used() { DeltaCache::with_len(self.len()) } else { DeltaCache::default() }
    }

    /// This content's key as a baseline in other snapshots' delta caches.
    #[inline]
    pub(crate) fn serial(&self) -> u64 {
        let s = self.serial.load(Ordering::Relaxed);
        if s != 0 {
            return s;
        }
        let fresh = next_serial();
        match self.serial.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => fresh,
            Err(other) => other,
        }
    }

    /// Encoded snapshots of it shared between players.
    #[inline]
    pub(crate) fn packets(&self) -> &super::sender::PacketCache {
        &self.packets
    }

    /// The cached delta bits of entity `index` against the baseline snapshot `serial`.
    #[inline]
    pub(crate) fn cached_delta(&self, index: usize, serial: u64) -> Lookup {
        self.cache.get(self.len(), index, serial)
    }

    /// Shares entity `index`'s delta bits against the baseline snapshot `serial`.
    #[inline]
    pub(crate) fn cache_delta(&self, index: usize, serial: u64, bits: u128, len: u32) {
        self.cache.put(self.len(), index, serial, bits, len);
    }

    /// The tick.
    pub fn tick(&self) -> u32 {
        self.tick
    }

    /// Entities in it.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it has no entities.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Ids, ascending.
    pub fn ids(&self) -> &[EntityId] {
        &self.ids
    }

    /// The entity at `index` (ids ascending).
    pub fn get(&self, index: usize) -> Option<EntityRef<'_>> {
        let start = *self.offsets.get(index)? as usize;
        let end = self.offsets.get(index + 1).map_or(self.words.len(), |e| *e as usize);
        Some(EntityRef { id: self.ids[index], kind: self.kinds[index], words: &self.words[start..end] })
    }

    /// The words of the entity at `index`; empty if out of range.
    #[inline]
    pub(crate) fn words_at(&self, index: usize) -> &[u32] {
        let start = self.offsets.get(index).map_or(0, |s| *s as usize);
        let end = self.offsets.get(index + 1).map_or(self.words.len(), |e| *e as usize);
        self.words.get(start..end).unwrap_or(&[])
    }

    /// The kind of the entity at `index`.
    pub(crate) fn kind_at(&self, index: usize) -> KindId {
        self.kinds.get(index).copied().unwrap_or(0)
    }

    /// Whether [`Self::changed_at`] tells when each entity last changed (the snapshot was
    /// finished after the previous one); else it is just this tick.
    #[inline]
    pub(crate) fn tracks_changes(&self) -> bool {
        self.tracked
    }

    /// The tick at which the entity at `index` last changed (or this snapshot's tick, when
    /// built without a previous snapshot).
    pub(crate) fn changed_at(&self, index: usize) -> u32 {
        self.changed.get(index).copied().unwrap_or(self.tick)
    }

    /// The index of an id.
    pub fn find(&self, id: EntityId) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// Reads entity `id` as `T`, if it exists and is of `T`'s kind.
    pub fn read<T: Replicate + 'static>(&self, schema: &Schema, id: EntityId) -> Option<T> {
        let e = self.get(self.find(id)?)?;
        (schema.kind_of::<T>()? == e.kind).then(|| T::dequantize(e.words))
    }

    /// Every entity in id order.
    pub fn iter(&self) -> impl Iterator<Item = EntityRef<'_>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Clears for reuse, keeping the allocations.
    pub(crate) fn reset(&mut self, tick: u32) {
        self.touch();
        self.tick = tick;
        self.ids.clear();
        self.kinds.clear();
        self.offsets.clear();
        self.words.clear();
        self.changed.clear();
        self.tracked = false;
    }

    /// Appends an entity; ids must be pushed in ascending order (callers check).
    pub(crate) fn push_raw(&mut self, id: EntityId, kind: KindId, words: &[u32]) {
        self.touch();
        self.ids.push(id);
        self.kinds.push(kind);
        self.changed.push(self.tick);
        self.offsets.push(self.words.len() as u32);
        self.words.extend_from_slice(words);
    }

    /// Appends an entity with `n` zero words and returns them for the caller to fill.
    pub(crate) fn push_zeroed(&mut self, id: EntityId, kind: KindId, n: usize) -> &mut [u32] {
        self.touch();
        self.ids.push(id);
        self.kinds.push(kind);
        self.changed.push(self.tick);
        let start = self.words.len();
        self.offsets.push(start as u32);
        self.words.resize(start + n, 0);
        &mut self.words[start..]
    }

    /// The id of the last entity pushed.
    pub(crate) fn last_id(&self) -> Option<EntityId> {
        self.ids.last().copied()
    }
}

/// Collects a tick's entities in any order; [`SnapshotBuilder::finish`] sorts them.
#[derive(Debug)]
pub struct SnapshotBuilder<'s> {
    schema: &'s Schema,
    tick: u32,
    entries: Vec<(EntityId, KindId, u32)>,
    words: Vec<u32>,
}

impl<'s> SnapshotBuilder<'s> {
    /// A builder for `tick`.
    pub fn new(schema: &'s Schema, tick: u32) -> Self {
        Self { schema, tick, entries: Vec::new(), words: Vec::new() }
    }

    /// Adds an entity.
    ///
    /// # Errors
    /// When `T` is not in the schema.
    pub fn insert<T: Replicate + 'static>(&mut self, id: EntityId, value: &T) -> Result<(), WorldError> {
        let kind = self.schema.kind_of::<T>().ok_or(WorldError::UnknownKind(T::NAME))?;
        let n = self.schema.kind(kind).map_or(0, |k| k.words());
        let start = self.words.len();
        self.words.resize(start + n, 0);
        value.quantize(&mut self.words[start..]);
        self.entries.push((id, kind, start as u32));
        Ok(())
    }

    /// Adds every entity of `snapshot` as it is (quantized words, ids and kinds): for worlds
    /// that show recorded or delayed state (replays, spectators).
    ///
    /// # Errors
    /// When one of its kinds is not in this builder's schema, or has another word count (the
    /// entities before it were added).
    pub fn copy_from(&mut self, snapshot: &WorldSnapshot) -> Result<(), WorldError> {
        snapshot.iter().try_for_each(|e| self.copy_entity(e))
    }

    /// Adds one entity of another snapshot as it is (a zone's border entities, picked from
    /// its snapshot).
    ///
    /// # Errors
    /// When its kind is not in this builder's schema, or has another word count.
    pub fn copy_entity(&mut self, e: EntityRef<'_>) -> Result<(), WorldError> {
        self.copy_entity_as(e.id, e)
    }

    /// [`SnapshotBuilder::copy_entity`] under another id.
    ///
    /// # Errors
    /// As [`SnapshotBuilder::copy_entity`].
    pub fn copy_entity_as(&mut self, id: EntityId, e: EntityRef<'_>) -> Result<(), WorldError> {
        let fits = self.schema.kind(e.kind).is_some_and(|k| k.words() == e.words.len());
        if !fits {
            return Err(WorldError::UnknownKind("a copied entity's kind"));
        }
        let start = self.words.len();
        self.words.extend_from_slice(e.words);
        self.entries.push((id, e.kind, start as u32));
        Ok(())
    }

    /// The finished snapshot.
    ///
    /// # Errors
    /// When two entities share an id.
    pub fn finish(self) -> Result<WorldSnapshot, WorldError> {
        self.finish_after(None)
    }

    /// The finished snapshot, noting which entities are unchanged since `previous` (the
    /// last tick's snapshot). Done once per tick, this lets every player's encoder skip
    /// unchanged entities without comparing their words.
    ///
    /// # Errors
    /// When two entities share an id.
    pub fn finish_after(self, previous: Option<&WorldSnapshot>) -> Result<WorldSnapshot, WorldError> {
        match self.finish_keeping_first(previous) {
            (_, Some(id)) => Err(WorldError::DuplicateId(id)),
            (snapshot, None) => Ok(snapshot),
        }
    }

    /// Like [`SnapshotBuilder::finish_after`], but an entity whose id was already inserted
    /// is left out (the first one inserted stays) instead of failing the whole snapshot:
    /// the snapshot, and the first id that was repeated, if any. The server builds each
    /// tick's snapshot this way, so that a game's bug costs an entity, not the tick.
    pub fn finish_keeping_first(mut self, previous: Option<&WorldSnapshot>) -> (WorldSnapshot, Option<EntityId>) {
        // Stable: of entities sharing an id, the first inserted comes first and is kept.
        self.entries.sort_by_key(|e| e.0);
        let mut repeated = None;
        if self.entries.windows(2).any(|w| w[0].0 == w[1].0) {
            repeated = self.entries.windows(2).find(|w| w[0].0 == w[1].0).map(|w| w[0].0);
            self.entries.dedup_by_key(|e| e.0);
        }
        (self.build(previous), repeated)
    }

    fn build(self, previous: Option<&WorldSnapshot>) -> WorldSnapshot {
        let mut out = WorldSnapshot::new(self.tick);
        out.ids.reserve(self.entries.len());
        out.words.reserve(self.words.len());
        let mut p = 0usize;
        for (id, kind, start) in &self.entries {
            let n = self.schema.kind(*kind).map_or(0, |k| k.words());
            let start = *start as usize;
            let words = &self.words[start..start + n];
            out.push_raw(*id, *kind, words);
            if let Some(prev) = previous {
                let ids = prev.ids();
                while p < ids.len() && ids[p] < *id {
                    p += 1;
                }
                if let Some(e) = prev.get(p).filter(|e| e.id == *id && e.kind == *kind && e.words == words) {
                    let _ = e;
                    if let Some(c) = out.changed.last_mut() {
                        *c = prev.changed_at(p);
                    }
                }
            }
        }
        out.cache = DeltaCache::with_len(out.len());
        out.tracked = previous.is_some();
        out
    }
}

/// Bits of an entity id that are the world's own (its local id); the bits above them name
/// the world the entity comes from, so that ids from several worlds merged into one
/// player's snapshot never collide. A world's local ids must be below [`LOCAL_ID_LIMIT`].
pub const LOCAL_ID_BITS: u32 = 22;

/// The first local id a world may not use (4 194 304).
pub const LOCAL_ID_LIMIT: EntityId = 1 << LOCAL_ID_BITS;

/// Worlds whose ids can be told apart in one snapshot (1024).
pub const WORLD_NUMBERS: u32 = 1 << (32 - LOCAL_ID_BITS);

/// The id a player's snapshot carries for local id `local` of world number `world`
/// (world 0's ids are its local ids, unchanged).
///
/// ```
/// use volley::protocol::snapshot::world::{merged_id, split_id};
/// let id = merged_id(3, 17);
/// assert_eq!(split_id(id), (3, 17));
/// assert_eq!(merged_id(0, 17), 17);
/// ```
pub const fn merged_id(world: u32, local: EntityId) -> EntityId {
    ((world % WORLD_NUMBERS) << LOCAL_ID_BITS) | (local & (LOCAL_ID_LIMIT - 1))
}

/// The world number and local id of an id in a player's snapshot ([`merged_id`] undone).
pub const fn split_id(id: EntityId) -> (u32, EntityId) {
    (id >> LOCAL_ID_BITS, id & (LOCAL_ID_LIMIT - 1))
}

impl WorldSnapshot {
    /// One snapshot for `tick` of several worlds' snapshots: each `(world number,
    /// snapshot)` part's entities with their ids made [`merged_id`]s, in id order. Parts
    /// must come in ascending world number, each number once; an entity whose local id is
    /// not below [`LOCAL_ID_LIMIT`] is left out (the server never makes one). Each entity
    /// keeps the tick it last changed at, so encoders still skip unchanged ones; the parts
    /// may be of older ticks (a world that ticks less often: its newest snapshot is held).
    /// With the parts in order, the merged snapshot is their concatenation, and part `k`'s
    /// entities start at the sum of the lengths before it.
    pub fn merge(tick: u32, parts: &[(u32, &WorldSnapshot)]) -> WorldSnapshot {
        let mut out = WorldSnapshot::new(tick);
        let (n, words) = parts.iter().fold((0, 0), |(n, w), (_, p)| (n + p.len(), w + p.words.len()));
        out.ids.reserve(n);
        out.kinds.reserve(n);
        out.offsets.reserve(n);
        out.changed.reserve(n);
        out.words.reserve(words);
        out.tracked = !parts.is_empty() && parts.iter().all(|(_, p)| p.tracked);
        for (world, part) in parts {
            for i in 0..part.len() {
                let id = part.ids[i];
                if id >= LOCAL_ID_LIMIT {
                    continue;
                }
                out.ids.push(merged_id(*world, id));
                out.kinds.push(part.kinds[i]);
                out.changed.push(part.changed_at(i));
                out.offsets.push(out.words.len() as u32);
                out.words.extend_from_slice(part.words_at(i));
            }
        }
        out.cache = DeltaCache::with_len(out.len());
        out
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    fn snap(tick: u32, entities: &[(EntityId, u32)]) -> WorldSnapshot {
        let mut s = WorldSnapshot::new(tick);
        for (id, w) in entities {
            s.push_raw(*id, 0, &[*w, w + 1]);
        }
        s
    }

    #[test]
    fn parts_are_concatenated_with_their_world_in_the_ids() {
        let a = snap(7, &[(1, 10), (5, 50)]);
        let b = snap(6, &[(0, 1), (1, 2), (LOCAL_ID_LIMIT, 9)]);
        let m = WorldSnapshot::merge(7, &[(0, &a), (2, &b)]);
        assert_eq!(m.tick(), 7);
        assert_eq!(m.ids(), [1, 5, merged_id(2, 0), merged_id(2, 1)], "the out-of-range id is left out");
        assert!(m.ids().windows(2).all(|w| w[0] < w[1]), "ascending");
        assert_eq!(m.get(3).map(|e| e.words.to_vec()), Some(vec![2, 3]));
        assert_eq!(m.changed_at(2), 6, "a held part keeps its own change ticks");
        assert!(!m.tracks_changes(), "untracked parts make an untracked merge");
        assert_eq!(split_id(m.ids()[3]), (2, 1));
    }
}
