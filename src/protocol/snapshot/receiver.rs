//! The client's side: rebuilding snapshots from merged deltas.

use std::sync::Arc;

use super::codec;
use super::predictor::{PredictedWalk, Predictor};
use super::schema::Schema;
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
            rebuild(&self.schema, base, reference, predicted, base_tick.is_some(), count, &mut r, coder, &mut out)
        });
        self.models = models;
        match result {
            Ok(()) => {
                let slot = tick as usize % n;
                self.spare = self.ring[slot].take().unwrap_or_default();
                self.ring[slot] = Some(out);
                self.bases[slot] = base_tick;
                if self.newest.is_none_or(|t| tick > t) {
                    self.newest = Some(tick);
                }
                Ok(tick)
            }
            Err(e) => {
                self.spare = out;
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
                bi += 1;
            }
            1 => {
                let kind = r.read(kind_bits)? as u16;
                let k = schema.kind(kind).ok_or(SnapshotError::UnknownKind)?;
                let words = out.push_zeroed(id, kind, k.words());
                codec::read_full(k, r, words)?;
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

/// What a player should be shown of `decoded`, written into `out`: `decoded`, except that an
/// entity the server left out of it — over its budget the sender defers some changes, and a
/// merged delta leaves a deferred entity at its `baseline` state — keeps its state in
/// `shown_before` (what was shown of the newest snapshot between the baseline and this one)
/// instead of going back to the baseline's. Such an entity has the very words it had in the
/// baseline, while `shown_before` has it otherwise. Returns how many were held; `out` is
/// only written when some were.
///
/// An entity that truly went back to exactly its baseline state within a round trip (a flag
/// set and cleared) is held too, until a baseline newer than `shown_before` is acknowledged
/// (about a round trip); anything that moves never repeats its words exactly.
pub(crate) fn hold_left_out(
    decoded: &WorldSnapshot,
    baseline: &WorldSnapshot,
    shown_before: &WorldSnapshot,
    out: &mut WorldSnapshot,
) -> usize {
    if !(baseline.tick() < shown_before.tick() && shown_before.tick() < decoded.tick()) {
        return 0;
    }
    let mut walk = Held { baseline, shown_before, b: 0, p: 0 };
    let mut held = decoded.iter().enumerate().filter(|(_, e)| walk.words(e).is_some());
    let Some((first, _)) = held.next() else { return 0 };
    let count = 1 + held.count();
    // Copy the decoded snapshot, with the held entities' shown words.
    out.reset(decoded.tick());
    let mut walk = Held { baseline, shown_before, b: 0, p: 0 };
    for (i, e) in decoded.iter().enumerate() {
        let words = if i >= first { walk.words(&e).unwrap_or(e.words) } else { e.words };
        out.push_raw(e.id, e.kind, words);
    }
    count
}

/// A walk of the baseline and the snapshot shown before, in id order, alongside a decoded
/// snapshot's entities.
struct Held<'a> {
    baseline: &'a WorldSnapshot,
    shown_before: &'a WorldSnapshot,
    b: usize,
    p: usize,
}

impl<'a> Held<'a> {
    /// The words to show for `e` instead of its own, if it was left out: it has its baseline
    /// words exactly, and was shown otherwise since. Entities must come in ascending id.
    fn words(&mut self, e: &EntityRef<'_>) -> Option<&'a [u32]> {
        let (bids, pids) = (self.baseline.ids(), self.shown_before.ids());
        while bids.get(self.b).is_some_and(|id| *id < e.id) {
            self.b += 1;
        }
        while pids.get(self.p).is_some_and(|id| *id < e.id) {
            self.p += 1;
        }
        let (be, pe) = (self.baseline.get(self.b)?, self.shown_before.get(self.p)?);
        let left_out = be.id == e.id && pe.id == e.id && be.kind == e.kind && pe.kind == e.kind;
        (left_out && be.words == e.words && pe.words != e.words).then_some(pe.words)
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
    fn an_entity_left_out_keeps_what_was_shown_and_the_rest_is_as_decoded() {
        let baseline = snap(10, &[(1, 100), (2, 500), (4, 7)]);
        let before = snap(12, &[(1, 102), (2, 500), (4, 9)]);
        // 1 was left out (its baseline words again), 2 moved, 3 is new, 4 left out too.
        let decoded = snap(13, &[(1, 100), (2, 501), (3, 30), (4, 7)]);
        let mut out = WorldSnapshot::default();
        assert_eq!(hold_left_out(&decoded, &baseline, &before, &mut out), 2);
        let shown: Vec<(u32, u32)> = out.iter().map(|e| (e.id, e.words[0])).collect();
        assert_eq!(shown, [(1, 102), (2, 501), (3, 30), (4, 9)]);
        assert_eq!(out.tick(), 13);
        // Nothing to hold: unchanged since the baseline everywhere, or the snapshot shown
        // before is not between the baseline and this one.
        let mut untouched = WorldSnapshot::default();
        assert_eq!(hold_left_out(&decoded, &baseline, &baseline, &mut untouched), 0);
        assert_eq!(hold_left_out(&decoded, &before, &baseline, &mut untouched), 0);
        assert_eq!(hold_left_out(&snap(13, &[(2, 500)]), &baseline, &before, &mut untouched), 0);
        assert!(untouched.is_empty(), "written only when something is held");
    }
}
