//! The client's side: rebuilding snapshots from merged deltas.

use std::sync::Arc;

use super::codec;
use super::schema::{KindId, KindSchema, Schema};
use super::world::WorldSnapshot;
use super::{SnapshotError, kind_bits};
use crate::protocol::bits::BitReader;

/// Rebuilds the server's snapshots on the client. Keeps the last `history` snapshots it
/// decoded, so any of them can serve as the baseline of a later delta.
#[derive(Debug)]
pub struct SnapshotReceiver {
    schema: Arc<Schema>,
    ring: Vec<Option<WorldSnapshot>>,
    spare: WorldSnapshot,
    newest: Option<u32>,
    /// Per kind: the current packet's Exp-Golomb orders, if it overrides the defaults.
    orders: Vec<([u8; codec::MAX_ORDER_WORDS], bool)>,
}

impl SnapshotReceiver {
    /// A receiver keeping `history` snapshots (at least twice the server's history is safe).
    pub fn new(schema: Arc<Schema>, history: usize) -> Self {
        Self {
            ring: (0..history.max(2)).map(|_| None).collect(),
            spare: WorldSnapshot::default(),
            newest: None,
            orders: vec![([0; codec::MAX_ORDER_WORDS], false); schema.len()],
            schema,
        }
    }

    /// The newest snapshot decoded: the tick to acknowledge.
    pub fn newest_tick(&self) -> Option<u32> {
        self.newest
    }

    /// A decoded snapshot by tick, if still kept.
    pub fn get(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.ring[tick as usize % self.ring.len()].as_ref().filter(|s| s.tick() == tick)
    }

    /// The newest snapshot decoded.
    pub fn latest(&self) -> Option<&WorldSnapshot> {
        self.get(self.newest?)
    }

    /// Decodes one snapshot; returns its tick. A snapshot already decoded is skipped.
    ///
    /// # Errors
    /// Malformed input, an unknown kind, or a baseline this receiver no longer has.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<u32, SnapshotError> {
        let mut r = BitReader::new(bytes);
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
        let count = r.read_golomb(4)? as usize;
        if count > r.bits_left() {
            return Err(SnapshotError::Malformed);
        }
        let mut out = std::mem::take(&mut self.spare);
        out.reset(tick);
        let mut orders = std::mem::take(&mut self.orders);
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
        let result = base.and_then(|base| {
            let reference = reference?;
            rebuild(&self.schema, &mut orders, base, reference, base_tick.is_some(), count, &mut r, &mut out)
        });
        self.orders = orders;
        match result {
            Ok(()) => {
                let slot = tick as usize % n;
                self.spare = self.ring[slot].take().unwrap_or_default();
                self.ring[slot] = Some(out);
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

/// The orders a delta of `kind` uses in this packet.
fn orders_of<'a>(orders: &'a [([u8; codec::MAX_ORDER_WORDS], bool)], kind: KindId, k: &'a KindSchema) -> &'a [u8] {
    match orders.get(usize::from(kind)) {
        Some((o, true)) => &o[..k.words()],
        _ => &k.orders,
    }
}

#[allow(clippy::too_many_arguments)]
fn rebuild(
    schema: &Schema,
    orders: &mut [([u8; codec::MAX_ORDER_WORDS], bool)],
    base: &WorldSnapshot,
    reference: Option<Ref<'_>>,
    has_base: bool,
    count: usize,
    r: &mut BitReader<'_>,
    out: &mut WorldSnapshot,
) -> Result<(), SnapshotError> {
    let kind_bits = kind_bits(schema);
    let gap_order = r.read(2)?;
    // The packet's Exp-Golomb orders, where they differ from the kinds' defaults.
    for o in orders.iter_mut() {
        o.1 = false;
    }
    if r.read_bool()? {
        for (kind, o) in orders.iter_mut().enumerate() {
            o.1 = r.read_bool()?;
            if o.1 {
                let words = schema.kind(kind as KindId).map_or(0, |k| k.words());
                if words > codec::MAX_ORDER_WORDS {
                    return Err(SnapshotError::Malformed);
                }
                for w in &mut o.0[..words] {
                    *w = r.read(codec::ORDER_BITS)? as u8;
                }
            }
        }
    }
    let mut bi = 0usize; // next baseline entity to copy
    let mut next_id = 0u64;
    let copy_until = |out: &mut WorldSnapshot, bi: &mut usize, id: u64| {
        while let Some(e) = base.get(*bi).filter(|e| u64::from(e.id) < id) {
            out.push_raw(e.id, e.kind, e.words);
            *bi += 1;
        }
    };
    for _ in 0..count {
        let id64 = next_id + u64::from(r.read_golomb(gap_order)?);
        let id = u32::try_from(id64).map_err(|_| SnapshotError::Malformed)?;
        next_id = id64 + 1;
        copy_until(out, &mut bi, id64);
        let in_base = base.get(bi).filter(|e| e.id == id);
        let op = if !has_base || !r.read_bool()? {
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
                match older {
                    Some((older, num, den)) if r.read_bool()? => {
                        let mut pred = [0u32; codec::MAX_PREDICTED_WORDS];
                        let pred = &mut pred[..k.words()];
                        codec::predict(k, e.words, older, num, den, pred);
                        let words = out.push_zeroed(id, e.kind, k.words());
                        codec::read_delta(k, pred, orders_of(orders, e.kind, k), r, words)?;
                    }
                    _ => {
                        let words = out.push_zeroed(id, e.kind, k.words());
                        codec::read_delta(k, e.words, orders_of(orders, e.kind, k), r, words)?;
                    }
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
