//! The client's side: rebuilding snapshots from merged deltas.

use std::sync::Arc;

use super::codec;
use super::predictor::{PredictedWalk, Predictor};
use super::schema::{EntityId, Schema};
use super::world::{EntityRef, WorldSnapshot};
use super::{SnapshotError, kind_bits};
use crate::protocol::bits::BitReader;
use crate::protocol::range::RangeDecoder;

/// Rebuilds the server's snapshots on the client. Keeps the last `history` snapshots it
/// decoded, so any of them can serve as the baseline of a later delta.
#[derive(Debug)]
pub struct SnapshotReceiver {
    schema: Arc<Schema>,
    ring: Vec<Option<WorldSnapshot>>,
    /// Each kept snapshot's baseline (`None`: sent in full), by the same slot.
    bases: Vec<Option<u32>>,
    /// For each kept snapshot, by the same slot, each entity's origin: the tick of the
    /// packet that last carried its state (this one, or its baseline's origin).
    origins: Vec<Vec<u32>>,
    /// The ids the packet being decoded carried (reused).
    carried: Vec<EntityId>,
    spare: WorldSnapshot,
    newest: Option<u32>,
    /// The range coder's models for predicted packets.
    models: codec::Models,
    /// The game's own predictor, if set.
    predictor: Option<Arc<dyn Predictor>>,
}

impl SnapshotReceiver {
    /// A receiver keeping `history` snapshots (at least twice the server's history is safe).
    pub fn new(schema: Arc<Schema>, history: usize) -> Self {
        Self {
            ring: (0..history.max(2)).map(|_| None).collect(),
            bases: vec![None; history.max(2)],
            origins: vec![Vec::new(); history.max(2)],
            carried: Vec::new(),
            spare: WorldSnapshot::default(),
            newest: None,
            models: codec::Models::default(),
            predictor: None,
            schema,
        }
    }

    /// Forgets every snapshot it has (the client moved to another server, whose ticks and
    /// baselines are its own), keeping the schema and the predictor.
    pub fn forget(&mut self) {
        self.ring.iter_mut().for_each(|s| *s = None);
        self.newest = None;
        self.models = codec::Models::default();
    }

    /// The replicated kinds it decodes.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Decodes snapshots that the server's sender coded against `predictor` (the same
    /// predictor as the server's: see [`Predictor`]). Without it such a snapshot fails with
    /// [`SnapshotError::PredictorMissing`].
    pub fn set_predictor(&mut self, predictor: Arc<dyn Predictor>) {
        self.predictor = Some(predictor);
    }

    /// The newest snapshot decoded: the tick to acknowledge.
    pub fn newest_tick(&self) -> Option<u32> {
        self.newest
    }

    /// A decoded snapshot by tick, if still kept.
    pub fn get(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.ring[tick as usize % self.ring.len()].as_ref().filter(|s| s.tick() == tick)
    }

    /// The baseline the kept snapshot of `tick` was decoded against (`None`: it came in
    /// full, or is not kept).
    pub fn baseline_of(&self, tick: u32) -> Option<u32> {
        self.get(tick)?;
        self.bases[tick as usize % self.ring.len()]
    }

    /// Each entity's origin in the kept snapshot of `tick` (by index): the tick of the packet
    /// that last carried its state, this one or an older one whose state the delta kept.
    pub(crate) fn origins(&self, tick: u32) -> Option<&[u32]> {
        let w = self.get(tick)?;
        let o = &self.origins[tick as usize % self.ring.len()];
        (o.len() == w.len()).then_some(o.as_slice())
    }

    /// Works out the origins of the snapshot of `tick` just decoded: `carried` came in it,
    /// the rest kept their state in `base_tick`'s.
    fn note_origins(&mut self, tick: u32, base_tick: Option<u32>, carried: &[EntityId]) {
        let n = self.ring.len();
        let mut origins = std::mem::take(&mut self.origins[tick as usize % n]);
        origins.clear();
        if let Some(w) = self.get(tick) {
            let base = base_tick.and_then(|b| Some((self.get(b)?, self.origins(b)?)));
            let (mut c, mut b) = (0usize, 0usize);
            for id in w.ids() {
                while carried.get(c).is_some_and(|x| x < id) {
                    c += 1;
                }
                let origin = match base {
                    Some((bw, bo)) if carried.get(c) != Some(id) => {
                        while bw.ids().get(b).is_some_and(|x| x < id) {
                            b += 1;
                        }
                        if bw.ids().get(b) == Some(id) { bo[b] } else { tick }
                    }
                    _ => tick,
                };
                origins.push(origin);
            }
        }
        self.origins[tick as usize % n] = origins;
    }

    /// The newest snapshot decoded.
    pub fn latest(&self) -> Option<&WorldSnapshot> {
        self.get(self.newest?)
    }

    /// The newest snapshot decoded, taken out of a receiver that is done (no copy).
    pub(crate) fn into_latest(mut self) -> Option<WorldSnapshot> {
        let tick = self.newest?;
        let n = self.ring.len();
        self.ring[tick as usize % n].take()
    }

    /// Decodes one snapshot; returns its tick. A snapshot already decoded is skipped.
    ///
    /// # Errors
    /// Malformed input, an unknown kind, or a baseline this receiver no longer has.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<u32, SnapshotError> {
        let mut r = BitReader::new(bytes);
        let mut rc_stream = None;
        let tick = r.read(32)?;
        if self.get(tick).is_some() {
            return Ok(tick);
        }
        let n = self.ring.len();
        let base_tick = if r.read_bool()? {
            let back = r.read_golomb(2)?;
            Some(tick.checked_sub(back).and_then(|t| t.checked_sub(1)).ok_or(SnapshotError::Malformed)?)
        } else {
            None
        };
        if base_tick.is_some_and(|b| b as usize % n == tick as usize % n) {
            return Err(SnapshotError::BaselineMissing);
        }
        // A second reference for prediction: the client's state `behind` ticks before the
        // baseline.
        let reference = match base_tick {
            Some(b) if r.read_bool()? => {
                let behind = r.read_golomb(2)?.checked_add(1).ok_or(SnapshotError::Malformed)?;
                let t2 = b.checked_sub(behind).ok_or(SnapshotError::Malformed)?;
                if t2 as usize % n == tick as usize % n {
                    return Err(SnapshotError::BaselineMissing);
                }
                let ahead = tick.checked_sub(b).ok_or(SnapshotError::Malformed)?;
                Some((t2, ahead, behind))
            }
            _ => None,
        };
        // A range-coded second stream follows the bit stream, its length in the last two
        // bytes: the bit stream is read again from a slice that ends where it does.
        let range_coded = base_tick.is_some() && r.read_bool()?;
        let by_game = range_coded && reference.is_some() && r.read_bool()?;
        if by_game && self.predictor.is_none() {
            return Err(SnapshotError::PredictorMissing);
        }
        let mut r = if range_coded {
            let consumed = bytes.len() * 8 - r.bits_left();
            let split = bytes.len().checked_sub(2).ok_or(SnapshotError::Malformed)?;
            let m = usize::from(u16::from_le_bytes([bytes[split], bytes[split + 1]]));
            let bits_end = split.checked_sub(m).ok_or(SnapshotError::Malformed)?;
            let mut r = BitReader::new(&bytes[..bits_end]);
            skip(&mut r, consumed)?;
            rc_stream = Some(&bytes[bits_end..split]);
            r
        } else {
            r
        };
        let count = r.read_golomb(4)? as usize;
        // Every record costs a bit of the bit stream, or (range-coded) at least three modelled
        // decisions (its flag and operation) of at least 0.022 bits each (probabilities stay
        // within 31/2048 of certain): at most 15.2 records a coded bit.
        let rc_bits = rc_stream.map_or(0, |s: &[u8]| s.len() * 8 + 64);
        if count > r.bits_left() + 16 * rc_bits {
            return Err(SnapshotError::Malformed);
        }
        let mut out = std::mem::take(&mut self.spare);
        out.reset(tick);
        let mut models = std::mem::take(&mut self.models);
        models.start_packet();
        let mut rc = rc_stream.map(RangeDecoder::new);
        let empty = WorldSnapshot::default();
        let mut carried = std::mem::take(&mut self.carried);
        carried.clear();
        let base = match base_tick {
            Some(b) => self.get(b).ok_or(SnapshotError::BaselineMissing),
            None => Ok(&empty),
        };
        let reference = match reference {
            Some((t2, num, den)) => {
                self.get(t2).map(|world| Some(Ref { world, num, den })).ok_or(SnapshotError::BaselineMissing)
            }
            None => Ok(None),
        };
        let predictor = self.predictor.as_ref().filter(|_| by_game);
        let result = base.and_then(|base| {
            let reference = reference?;
            // The game's prediction, from the same snapshots the server's sender gave it.
            let predicted = match (predictor, &reference) {
                (Some(p), Some(rf)) => p.predict(base, rf.world, rf.num, rf.den),
                _ => None,
            };
            let coder = rc.as_mut().map(|d| (d, &mut models));
            let predicted = predicted.as_ref().map(PredictedWalk::new);
            rebuild(
                &self.schema,
                base,
                reference,
                predicted,
                base_tick.is_some(),
                count,
                &mut r,
                coder,
                &mut out,
                &mut carried,
            )
        });
        self.models = models;
        match result {
            Ok(()) => {
                let slot = tick as usize % n;
                self.spare = self.ring[slot].take().unwrap_or_default();
                self.ring[slot] = Some(out);
                self.bases[slot] = base_tick;
                self.note_origins(tick, base_tick, &carried);
                self.carried = carried;
                if self.newest.is_none_or(|t| tick > t) {
                    self.newest = Some(tick);
                }
                Ok(tick)
            }
            Err(e) => {
                self.spare = out;
                self.carried = carried;
                Err(e)
            }
        }
    }
}

/// The second reference of a predicted snapshot.
struct Ref<'a> {
    world: &'a WorldSnapshot,
    num: u32,
    den: u32,
}

/// Skips `bits` bits.
fn skip(r: &mut BitReader<'_>, mut bits: usize) -> Result<(), SnapshotError> {
    while bits > 0 {
        let n = bits.min(32);
        r.read(n as u32)?;
        bits -= n;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn rebuild(
    schema: &Schema,
    base: &WorldSnapshot,
    reference: Option<Ref<'_>>,
    mut predicted: Option<PredictedWalk<'_>>,
    has_base: bool,
    count: usize,
    r: &mut BitReader<'_>,
    mut rc: Option<(&mut RangeDecoder<'_>, &mut codec::Models)>,
    out: &mut WorldSnapshot,
    carried: &mut Vec<EntityId>,
) -> Result<(), SnapshotError> {
    let kind_bits = kind_bits(schema);
    let gap_order = r.read(2)?;
    let mut bi = 0usize; // next baseline entity to copy
    let mut next_id = 0u64;
    let copy_until = |out: &mut WorldSnapshot, bi: &mut usize, id: u64| {
        while let Some(e) = base.get(*bi).filter(|e| u64::from(e.id) < id) {
            out.push_raw(e.id, e.kind, e.words);
            *bi += 1;
        }
    };
    let mut flagged = false; // the last record flag (range-coded packets)
    for _ in 0..count {
        let (id64, rc_op) = match rc.as_mut() {
            Some((d, models)) => {
                // One flag per baseline entity passed, until the one the record is at (or,
                // for a creation, before).
                while let Some(e) = base.get(bi) {
                    let older = reference
                        .as_ref()
                        .and_then(|rf| rf.world.get(rf.world.find(e.id)?))
                        .filter(|x| x.kind == e.kind)
                        .map(|x| x.words);
                    flagged = d.bit(&mut models.flag[codec::flag_context(flagged, e.words, older)]);
                    if flagged {
                        break;
                    }
                    out.push_raw(e.id, e.kind, e.words);
                    next_id = u64::from(e.id) + 1;
                    bi += 1;
                }
                let op = if !d.bit(&mut models.op[0]) {
                    0
                } else if d.bit(&mut models.op[1]) {
                    2
                } else {
                    1
                };
                let at = base.get(bi).map(|e| u64::from(e.id));
                let id = if op == 1 {
                    let id = next_id + u64::from(codec::read_uint_rc(&mut models.gap, d)?);
                    if at.is_some_and(|at| id > at) {
                        return Err(SnapshotError::Malformed);
                    }
                    id
                } else {
                    at.ok_or(SnapshotError::Malformed)?
                };
                (id, Some(op))
            }
            None => (next_id + u64::from(r.read_golomb(gap_order)?), None),
        };
        let id = u32::try_from(id64).map_err(|_| SnapshotError::Malformed)?;
        next_id = id64 + 1;
        copy_until(out, &mut bi, id64);
        let in_base = base.get(bi).filter(|e| e.id == id);
        let op = if let Some(op) = rc_op {
            op
        } else if !has_base || !r.read_bool()? {
            if has_base { 0 } else { 1 }
        } else if r.read_bool()? {
            2
        } else {
            1
        };
        match op {
            0 => {
                let e = in_base.ok_or(SnapshotError::Malformed)?;
                let k = schema.kind(e.kind).ok_or(SnapshotError::UnknownKind)?;
                let older = reference.as_ref().and_then(|rf| {
                    let x = rf.world.get(rf.world.find(id)?)?;
                    (x.kind == e.kind && k.words() <= codec::MAX_PREDICTED_WORDS).then_some((x.words, rf.num, rf.den))
                });
                let words = out.push_zeroed(id, e.kind, k.words());
                match rc.as_mut() {
                    Some((d, models)) => {
                        let m = models.kind(e.kind, k);
                        let mut pred = [0u32; codec::MAX_PREDICTED_WORDS];
                        let mut motion =
                            codec::Motion { baseline: e.words, older: older.map(|o| o.0), predicted: false };
                        let from = match older {
                            Some((older, num, den)) => {
                                let pred = &mut pred[..k.words()];
                                match predicted.as_mut().and_then(|g| g.words(id, e.kind, k.words())) {
                                    Some(p) => pred.copy_from_slice(p),
                                    None => codec::predict(k, e.words, older, num, den, pred),
                                }
                                motion.predicted = !codec::words_eq(pred, e.words) && d.bit(&mut m.predicted);
                                if motion.predicted { &*pred } else { e.words }
                            }
                            None => e.words,
                        };
                        codec::read_delta_rc(k, from, motion, m, d, words)?;
                    }
                    None => codec::read_delta(k, e.words, &k.orders, r, words)?,
                }
                carried.push(id);
                bi += 1;
            }
            1 => {
                let kind = r.read(kind_bits)? as u16;
                let k = schema.kind(kind).ok_or(SnapshotError::UnknownKind)?;
                let words = out.push_zeroed(id, kind, k.words());
                codec::read_full(k, r, words)?;
                carried.push(id);
                if in_base.is_some() {
                    bi += 1;
                }
            }
            _ => {
                in_base.ok_or(SnapshotError::Malformed)?;
                bi += 1;
            }
        }
    }
    copy_until(out, &mut bi, u64::MAX);
    debug_assert!(out.last_id().is_none() || out.ids().windows(2).all(|w| w[0] < w[1]));
    Ok(())
}

/// What is shown of a snapshot where it differs from the decoded one: the snapshot, and for
/// each entity held (ascending id) the tick of the packet its state came in.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    pub(crate) snapshot: WorldSnapshot,
    pub(crate) origins: Vec<(EntityId, u32)>,
}

/// A snapshot as shown: its entities, the origins of the ones held (ascending id), and the
/// origins of the decoded snapshot's entities (by index).
pub(crate) type ShownRef<'a> = (&'a WorldSnapshot, &'a [(EntityId, u32)], &'a [u32]);

/// What a player should be shown of `decoded` (with its entities' `origins`: the tick of
/// the packet that last carried each one's state), written into `out`: `decoded`, except
/// that an entity whose state in `before` (what was shown of the newest snapshot kept before
/// it) came in a newer packet keeps that state. Over its budget the server defers some
/// changes, and a merged delta leaves a deferred entity at its state in the baseline: older
/// than what a newer packet may have brought. Returns how many were held; `out` is only
/// written when some were.
pub(crate) fn hold_left_out(decoded: &WorldSnapshot, origins: &[u32], before: ShownRef<'_>, out: &mut Shown) -> usize {
    let (shown, held_before, before_origins) = before;
    if shown.tick() >= decoded.tick() || origins.len() != decoded.len() || before_origins.len() != shown.len() {
        return 0;
    }
    let mut walk = ShownBefore { before: shown, held: held_before, origins: before_origins, p: 0, h: 0 };
    let mut held = decoded.iter().zip(origins).filter(|(e, o)| walk.words(e, **o).is_some());
    let Some((first, _)) = held.next() else { return 0 };
    let first = first.id;
    let count = 1 + held.count();
    // Copy the decoded snapshot, with the held entities' shown words.
    out.snapshot.reset(decoded.tick());
    out.origins.clear();
    let mut walk = ShownBefore { before: shown, held: held_before, origins: before_origins, p: 0, h: 0 };
    for (e, o) in decoded.iter().zip(origins) {
        let words = match walk.words(&e, *o).filter(|_| e.id >= first) {
            Some((words, origin)) => {
                out.origins.push((e.id, origin));
                words
            }
            None => e.words,
        };
        out.snapshot.push_raw(e.id, e.kind, words);
    }
    count
}

/// A walk of the snapshot shown before (with its origins), in id order, alongside a decoded
/// snapshot's entities.
struct ShownBefore<'a> {
    before: &'a WorldSnapshot,
    held: &'a [(EntityId, u32)],
    origins: &'a [u32],
    p: usize,
    h: usize,
}

impl<'a> ShownBefore<'a> {
    /// The words to show for `e` (whose state came in the packet of tick `origin`) instead
    /// of its own, and their origin, if what was shown before came in a newer packet.
    /// Entities must come in ascending id.
    fn words(&mut self, e: &EntityRef<'_>, origin: u32) -> Option<(&'a [u32], u32)> {
        let pids = self.before.ids();
        while pids.get(self.p).is_some_and(|id| *id < e.id) {
            self.p += 1;
        }
        while self.held.get(self.h).is_some_and(|(id, _)| *id < e.id) {
            self.h += 1;
        }
        let pe = self.before.get(self.p).filter(|pe| pe.id == e.id && pe.kind == e.kind)?;
        let shown_origin = match self.held.get(self.h) {
            Some((id, t)) if *id == e.id => *t,
            _ => *self.origins.get(self.p)?,
        };
        (shown_origin > origin && pe.words != e.words).then_some((pe.words, shown_origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(tick: u32, entities: &[(u32, u32)]) -> WorldSnapshot {
        let mut w = WorldSnapshot::new(tick);
        for (id, x) in entities {
            w.push_raw(*id, 0, &[*x]);
        }
        w
    }

    #[test]
    fn an_entity_left_out_keeps_the_newest_state_shown_and_the_rest_is_as_decoded() {
        // At 12 every entity came in its packet. At 13, 1 and 4 were left out (their state
        // is the baseline's, from 10), 2 came again, 3 is new.
        let before = snap(12, &[(1, 102), (2, 500), (4, 9)]);
        let decoded = snap(13, &[(1, 100), (2, 501), (3, 30), (4, 7)]);
        let mut out = Shown::default();
        assert_eq!(hold_left_out(&decoded, &[10, 13, 13, 10], (&before, &[], &[12, 12, 12]), &mut out), 2);
        let shown: Vec<(u32, u32)> = out.snapshot.iter().map(|e| (e.id, e.words[0])).collect();
        assert_eq!(shown, [(1, 102), (2, 501), (3, 30), (4, 9)]);
        assert_eq!((out.snapshot.tick(), out.origins.as_slice()), (13, &[(1, 12), (4, 12)][..]));
        // Left out again at 14: still held from 12.
        let again = snap(14, &[(1, 100), (2, 502), (3, 30), (4, 7)]);
        let mut next = Shown::default();
        let shown_13 = (&out.snapshot, out.origins.as_slice(), &[10, 13, 13, 10][..]);
        assert_eq!(hold_left_out(&again, &[10, 14, 13, 10], shown_13, &mut next), 2);
        // At 15, 4 came back to 7 in the packet itself (a body settling back by one step):
        // that is news, and it shows.
        let settled = snap(15, &[(1, 100), (2, 503), (3, 30), (4, 7)]);
        let mut last = Shown::default();
        let shown_14 = (&next.snapshot, next.origins.as_slice(), &[10, 14, 13, 10][..]);
        assert_eq!(hold_left_out(&settled, &[10, 15, 13, 15], shown_14, &mut last), 1);
        assert_eq!(last.snapshot.iter().map(|e| e.words[0]).collect::<Vec<_>>(), [102, 503, 30, 7]);
        // Nothing newer shown before: untouched.
        let mut untouched = Shown::default();
        assert_eq!(hold_left_out(&decoded, &[13, 13, 13, 13], (&before, &[], &[12, 12, 12]), &mut untouched), 0);
        assert_eq!(hold_left_out(&decoded, &[10, 13, 13, 10], (&before, &[], &[]), &mut untouched), 0);
        assert!(untouched.snapshot.is_empty(), "written only when something is held");
    }
}
