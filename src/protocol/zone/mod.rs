//! Zones: one map split among several server processes, each running the part of the map
//! given to it (the first piece of "one world over several servers"; see `docs/zones.md`).
//!
//! [`ZoneLayout`] is the geometry every zone server and the tools share: which zone owns a
//! position, which zones border which, and which neighbours must see an entity because it
//! stands within the border margin of their region. [`BorderFrame`] is what a zone sends a
//! neighbour each tick: the entities near their border, quantized and coded whole with the
//! snapshot codec (a recording's keyframe, with a header naming the zone, the tick and the
//! schema); [`BorderEncoder`] picks and codes a tick's frames for all neighbours. Sans-IO,
//! like the rest of `protocol`: bytes and numbers in, answers out.
//!
//! ```
//! use glam::Vec2;
//! use volley::protocol::zone::ZoneLayout;
//!
//! // A 2×2 grid over a 200 × 200 map, entities within 10 units of a border seen across it.
//! let zones = ZoneLayout::grid(Vec2::ZERO, Vec2::splat(200.0), 2, 2, 10.0).unwrap();
//! let p = Vec2::new(95.0, 50.0); // in zone 0, 5 units from zone 1
//! assert_eq!(zones.owner(p), Some(0));
//! assert_eq!(zones.near(0, p).collect::<Vec<_>>(), vec![1]);
//! ```

pub mod handoff;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use glam::Vec2;

use super::snapshot::{EntityRef, Interest, Schema, SenderConfig, SnapshotReceiver, SnapshotSender, WorldSnapshot};

/// A zone's number: its index in the layout.
pub type ZoneId = u16;

/// The most zones a layout may hold.
pub const MAX_ZONES: usize = 256;

/// Low bits of a border entity's id that are its id in its own zone: a zone shows each
/// neighbour's entities with the neighbour's place in its list in the bits above
/// ([`border_id`]), so that two zones' entities with the same id are two entities. A zone
/// game keeps its entity ids below `1 << BORDER_ID_BITS`.
pub const BORDER_ID_BITS: u32 = 17;

/// Neighbours a zone can show at most (the bits left above [`BORDER_ID_BITS`] in a merged
/// snapshot's 22 local bits).
pub const MAX_NEIGHBOURS: usize = 1 << (22 - BORDER_ID_BITS);

/// The id in a zone's border world of entity `id` of its neighbour number `slot` (its place
/// in [`ZoneLayout::neighbours`]).
pub fn border_id(slot: usize, id: u32) -> u32 {
    ((slot as u32) << BORDER_ID_BITS) | (id & ((1 << BORDER_ID_BITS) - 1))
}

/// A border entity's neighbour number and its id in that neighbour ([`border_id`] undone).
pub fn split_border_id(id: u32) -> (usize, u32) {
    ((id >> BORDER_ID_BITS) as usize, id & ((1 << BORDER_ID_BITS) - 1))
}

/// A zone's region: the half-open rectangle `min <= p < max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    /// The corner with the smallest coordinates (inside).
    pub min: Vec2,
    /// The corner with the largest coordinates (outside).
    pub max: Vec2,
}

impl Region {
    /// Whether `p` lies in the region.
    pub fn contains(&self, p: Vec2) -> bool {
        p.x >= self.min.x && p.y >= self.min.y && p.x < self.max.x && p.y < self.max.y
    }

    /// The distance from `p` to the region (0 inside).
    pub fn distance(&self, p: Vec2) -> f32 {
        let d = (self.min - p).max(p - self.max).max(Vec2::ZERO);
        d.length()
    }

    /// The distance between two regions (0 when they touch or overlap).
    fn gap(&self, other: &Region) -> f32 {
        let d = (self.min - other.max).max(other.min - self.max).max(Vec2::ZERO);
        d.length()
    }

    fn overlaps(&self, other: &Region) -> bool {
        self.min.x < other.max.x && other.min.x < self.max.x && self.min.y < other.max.y && other.min.y < self.max.y
    }
}

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZoneError {
    /// No zones, or more than [`MAX_ZONES`].
    #[error("a layout needs 1 to {MAX_ZONES} zones, not {0}")]
    Count(usize),
    /// A region with a corner that is not finite, or no area.
    #[error("zone {0}'s region is empty or not finite")]
    BadRegion(usize),
    /// Two regions overlap: a position would have two owners.
    #[error("zones {0} and {1} overlap")]
    Overlap(usize, usize),
    /// The margin is negative or not finite.
    #[error("the border margin must be a finite number ≥ 0, not {0}")]
    Margin(f32),
}

/// The zones of one map, and the border margin within which an entity is seen across a
/// border.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneLayout {
    regions: Vec<Region>,
    margin: f32,
    /// Per zone, the zones whose regions lie within the margin of its own.
    neighbours: Vec<Vec<ZoneId>>,
}

impl ZoneLayout {
    /// A layout of these regions (zone `i` is `regions[i]`).
    ///
    /// # Errors
    /// When there are none or too many, one is empty or not finite, two overlap, or the
    /// margin is negative.
    pub fn new(regions: Vec<Region>, margin: f32) -> Result<Self, ZoneError> {
        if regions.is_empty() || regions.len() > MAX_ZONES {
            return Err(ZoneError::Count(regions.len()));
        }
        if !(margin.is_finite() && margin >= 0.0) {
            return Err(ZoneError::Margin(margin));
        }
        for (i, r) in regions.iter().enumerate() {
            if !(r.min.is_finite() && r.max.is_finite() && r.min.x < r.max.x && r.min.y < r.max.y) {
                return Err(ZoneError::BadRegion(i));
            }
            if let Some(j) = regions[..i].iter().position(|o| o.overlaps(r)) {
                return Err(ZoneError::Overlap(j, i));
            }
        }
        let neighbours = (0..regions.len())
            .map(|i| {
                (0..regions.len())
                    .filter(|&j| j != i && regions[i].gap(&regions[j]) <= margin)
                    .map(|j| j as ZoneId)
                    .collect()
            })
            .collect();
        Ok(Self { regions, margin, neighbours })
    }

    /// `cols × rows` equal zones over the rectangle from `min` to `max`, numbered row by row
    /// from `min`.
    ///
    /// # Errors
    /// As [`ZoneLayout::new`] (a grid of 0 cells, or an empty rectangle).
    pub fn grid(min: Vec2, max: Vec2, cols: u16, rows: u16, margin: f32) -> Result<Self, ZoneError> {
        let (c, r) = (f32::from(cols.max(1)), f32::from(rows.max(1)));
        let cell = (max - min) / Vec2::new(c, r);
        let mut regions = Vec::with_capacity(usize::from(cols) * usize::from(rows));
        for y in 0..rows {
            for x in 0..cols {
                let lo = min + cell * Vec2::new(f32::from(x), f32::from(y));
                // The last row and column end exactly at `max` (no rounding gap).
                let hi = Vec2::new(
                    if x + 1 == cols { max.x } else { lo.x + cell.x },
                    if y + 1 == rows { max.y } else { lo.y + cell.y },
                );
                regions.push(Region { min: lo, max: hi });
            }
        }
        Self::new(regions, margin)
    }

    /// How many zones.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether it has no zones (never: a layout has at least one).
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The border margin.
    pub fn margin(&self) -> f32 {
        self.margin
    }

    /// Zone `zone`'s region.
    pub fn region(&self, zone: ZoneId) -> Option<&Region> {
        self.regions.get(usize::from(zone))
    }

    /// The zone that owns `p`, if any does (a position outside every region has no owner).
    pub fn owner(&self, p: Vec2) -> Option<ZoneId> {
        self.regions.iter().position(|r| r.contains(p)).map(|i| i as ZoneId)
    }

    /// The zones whose regions lie within the margin of `zone`'s (the ones it exchanges
    /// border entities with), in order.
    pub fn neighbours(&self, zone: ZoneId) -> &[ZoneId] {
        self.neighbours.get(usize::from(zone)).map_or(&[], Vec::as_slice)
    }

    /// The neighbours of `zone` that must see an entity at `p`: those whose region lies
    /// within the margin of `p`, in order.
    pub fn near(&self, zone: ZoneId, p: Vec2) -> impl Iterator<Item = ZoneId> + '_ {
        self.neighbours(zone).iter().copied().filter(move |&n| self.regions[usize::from(n)].distance(p) <= self.margin)
    }
}

/// The first bytes of a border frame.
pub const BORDER_MAGIC: [u8; 4] = *b"VZB1";

/// Bytes of a border frame's header: magic, zone, tick, schema fingerprint.
pub const BORDER_HEADER: usize = 4 + 2 + 4 + 8;

/// Why bytes are not a border frame this zone can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BorderError {
    /// Shorter than a header, or not starting with [`BORDER_MAGIC`].
    #[error("not a border frame")]
    NotAFrame,
    /// Made with another schema (a zone of another game, or another version of it).
    #[error("the border frame's schema is not this server's")]
    Schema,
    /// The snapshot does not decode, or names another tick than its header.
    #[error("the border frame's snapshot does not decode")]
    Snapshot,
    /// The snapshot could not be encoded (a snapshot the codec refuses).
    #[error("the border frame could not be encoded")]
    Encode,
}

/// What one zone sends a neighbour for one tick: the entities within the margin of the
/// neighbour's region, as the owning zone sees them (read-only for the neighbour).
#[derive(Debug, Clone, PartialEq)]
pub struct BorderFrame {
    /// The zone that owns the entities.
    pub zone: ZoneId,
    /// Its tick.
    pub tick: u32,
    /// The entities (ids as the owning zone numbers them).
    pub snapshot: WorldSnapshot,
}

/// The snapshot codec's settings for border frames: no history (each frame stands alone:
/// pub/sub may lose any of them), no prediction.
const BORDER_SENDER: SenderConfig = SenderConfig { history: 1, predict: false, max_baseline_age: 63 };

/// Codes the entities `interest` picks of zone `zone`'s `snapshot` as a border frame into
/// `out` (grown as needed, never shrunk): the frame's length. The sender is never
/// acknowledged, so the frame stands alone.
fn code_frame(
    sender: &mut SnapshotSender,
    fingerprint: u64,
    zone: ZoneId,
    snapshot: &Arc<WorldSnapshot>,
    interest: &[Interest],
    out: &mut Vec<u8>,
) -> Result<usize, BorderError> {
    let room = BORDER_HEADER + super::recording::whole_snapshot_room(sender.schema(), interest.len(), 0);
    if out.len() < room {
        out.resize(room, 0);
    }
    out[..4].copy_from_slice(&BORDER_MAGIC);
    out[4..6].copy_from_slice(&zone.to_le_bytes());
    out[6..10].copy_from_slice(&snapshot.tick().to_le_bytes());
    out[10..18].copy_from_slice(&fingerprint.to_le_bytes());
    match sender.encode(snapshot, interest, &mut out[BORDER_HEADER..room]) {
        Ok(stats) if stats.deferred == 0 => Ok(BORDER_HEADER + stats.bytes),
        _ => Err(BorderError::Encode),
    }
}

/// Codes a zone's border frames tick after tick: for each neighbour, the entities of the
/// zone's snapshot within the margin of the neighbour's region (as [`ZoneLayout::near`]
/// finds them), coded whole, so each frame stands alone (pub/sub may lose any of them); a
/// neighbour that sees nothing gets an empty frame, so it knows the zone is alive.
///
/// It keeps its working memory from tick to tick, picks the entities by their index in the
/// snapshot (no copy), and codes a set once for all the neighbours that get it: in a map
/// whose zones are narrow for the margin, that is every neighbour.
///
/// ```
/// use std::sync::Arc;
/// use glam::Vec2;
/// use volley::protocol::quant::Bits;
/// use volley::protocol::snapshot::{Replicate, Schema, SnapshotBuilder};
/// use volley::protocol::zone::{BorderEncoder, BorderFrame, ZoneLayout};
///
/// volley::replicated! {
///     /// A dot on the line y = 0.
///     #[derive(Debug, Clone, PartialEq)]
///     pub struct Dot {
///         /// Where, in whole units.
///         pub x: u32 = Bits(10),
///     }
/// }
/// let mut schema = Schema::new();
/// schema.register::<Dot>().unwrap();
/// let schema = Arc::new(schema);
/// // Two zones side by side, 100 units wide; entities within 10 of the border are shared.
/// let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 10.0).unwrap();
/// let mut b = SnapshotBuilder::new(&schema, 7);
/// b.insert(1, &Dot { x: 50 }).unwrap();
/// b.insert(2, &Dot { x: 95 }).unwrap();
/// let snapshot = Arc::new(b.finish().unwrap());
///
/// let mut encoder = BorderEncoder::new(layout, 0, schema.clone());
/// let frames = encoder.encode(&snapshot, |e| Some(Vec2::new(Dot::dequantize(e.words).x as f32, 0.0)));
/// assert_eq!((frames[0].to, frames[0].entities), (1, 1));
/// let frame = BorderFrame::decode(frames[0].bytes.as_ref().unwrap(), &schema).unwrap();
/// assert_eq!((frame.zone, frame.tick, frame.snapshot.ids()), (0, 7, &[2][..]));
/// ```
#[derive(Debug)]
pub struct BorderEncoder {
    me: ZoneId,
    layout: ZoneLayout,
    /// The schema's fingerprint, for the frames' headers.
    fingerprint: u64,
    /// Per neighbour (in [`ZoneLayout::neighbours`] order): the entities it gets this tick.
    picks: Vec<Vec<Interest>>,
    /// Per neighbour: the codec's sender (never acknowledged: every frame is whole).
    senders: Vec<SnapshotSender>,
    /// The frame being coded.
    scratch: Vec<u8>,
}

/// One neighbour's frame of a tick ([`BorderEncoder::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodedFrame {
    /// The neighbour.
    pub to: ZoneId,
    /// How many entities it holds.
    pub entities: usize,
    /// The bytes of the [`BorderFrame`] (shared by the neighbours that get the same
    /// entities), or why it could not be coded.
    pub bytes: Result<bytes::Bytes, BorderError>,
}

impl BorderEncoder {
    /// Zone `me`'s encoder, for entities of `schema`.
    pub fn new(layout: ZoneLayout, me: ZoneId, schema: Arc<Schema>) -> Self {
        let n = layout.neighbours(me).len();
        Self {
            me,
            fingerprint: schema.fingerprint(),
            picks: vec![Vec::new(); n],
            senders: (0..n).map(|_| SnapshotSender::new(schema.clone(), BORDER_SENDER)).collect(),
            layout,
            scratch: Vec::new(),
        }
    }

    /// The frames of the zone's `snapshot` for its neighbours, in neighbour order, where
    /// `position` is the game's reading of an entity's place (entities without one are not
    /// shared).
    pub fn encode(
        &mut self,
        snapshot: &Arc<WorldSnapshot>,
        position: impl Fn(EntityRef<'_>) -> Option<Vec2>,
    ) -> Vec<CodedFrame> {
        let Self { me, layout, fingerprint, picks, senders, scratch } = self;
        let neighbours = layout.neighbours(*me);
        picks.iter_mut().for_each(Vec::clear);
        let margin = layout.margin;
        for (index, e) in snapshot.iter().enumerate() {
            let Some(p) = position(e) else { continue };
            for (i, &n) in neighbours.iter().enumerate() {
                if layout.regions[usize::from(n)].distance(p) <= margin {
                    picks[i].push(Interest::new(index as u32, 1.0));
                }
            }
        }
        let mut out: Vec<CodedFrame> = Vec::with_capacity(neighbours.len());
        for (i, &to) in neighbours.iter().enumerate() {
            let entities = picks[i].len();
            // A neighbour that gets the same entities as one before it gets the same bytes.
            if let Some(j) = (0..i).find(|&j| picks[j] == picks[i]) {
                let bytes = out[j].bytes.clone();
                out.push(CodedFrame { to, entities, bytes });
                continue;
            }
            let mut coded = code_frame(&mut senders[i], *fingerprint, *me, snapshot, &picks[i], scratch);
            if coded.is_err() {
                // A sender past this tick (the zone's ticks went back) starts afresh.
                senders[i] = SnapshotSender::new(senders[i].schema().clone(), BORDER_SENDER);
                coded = code_frame(&mut senders[i], *fingerprint, *me, snapshot, &picks[i], scratch);
            }
            let bytes = coded.map(|n| bytes::Bytes::copy_from_slice(&scratch[..n]));
            out.push(CodedFrame { to, entities, bytes });
        }
        out
    }
}

impl BorderFrame {
    /// Encodes zone `zone`'s border entities (`snapshot`, its tick the frame's) for the bus.
    ///
    /// # Errors
    /// [`BorderError::Encode`] when the codec cannot take the snapshot whole.
    pub fn encode(zone: ZoneId, snapshot: &Arc<WorldSnapshot>, schema: &Arc<Schema>) -> Result<Vec<u8>, BorderError> {
        let mut interest = Vec::new();
        Interest::everything(snapshot, &mut interest);
        let mut sender = SnapshotSender::new(schema.clone(), BORDER_SENDER);
        let mut out = Vec::new();
        let n = code_frame(&mut sender, schema.fingerprint(), zone, snapshot, &interest, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Decodes a frame from the bus with this server's `schema`.
    ///
    /// # Errors
    /// Why the bytes are not a usable frame.
    pub fn decode(bytes: &[u8], schema: &Arc<Schema>) -> Result<Self, BorderError> {
        Self::decode_as(bytes, schema, schema.fingerprint())
    }

    /// [`BorderFrame::decode`] with the schema's fingerprint known (a receiver of many
    /// frames computes it once).
    ///
    /// # Errors
    /// Why the bytes are not a usable frame.
    pub fn decode_as(bytes: &[u8], schema: &Arc<Schema>, fingerprint: u64) -> Result<Self, BorderError> {
        let header = bytes.get(..BORDER_HEADER).ok_or(BorderError::NotAFrame)?;
        if header[..4] != BORDER_MAGIC {
            return Err(BorderError::NotAFrame);
        }
        let zone = u16::from_le_bytes([header[4], header[5]]);
        let tick = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&header[10..18]);
        if u64::from_le_bytes(fp) != fingerprint {
            return Err(BorderError::Schema);
        }
        let mut receiver = SnapshotReceiver::new(schema.clone(), 1);
        match receiver.decode(&bytes[BORDER_HEADER..]) {
            Ok(t) if t == tick => {}
            _ => return Err(BorderError::Snapshot),
        }
        let snapshot = receiver.into_latest().ok_or(BorderError::Snapshot)?;
        Ok(Self { zone, tick, snapshot })
    }
}

/// The first bytes of a state frame.
pub const STATE_MAGIC: [u8; 4] = *b"VZS2";

/// Bytes of a state frame's header: magic, wall-clock time, player count.
pub const STATE_HEADER: usize = 4 + 8 + 2;

/// Players a state frame names at most (a zone with more names the first this many).
pub const MAX_STATE_PLAYERS: usize = 8192;

/// A zone's whole state at one tick, for observers of the whole map: the global oracle of
/// `volley run --zones N --oracle` (which checks every bot's view against all zones' states),
/// a map viewer, an archive. Published only when the zone is asked to
/// ([`ZoneOptions::publish_state`](crate::server::extensions::zone::ZoneOptions::publish_state)): it
/// costs a whole snapshot's coding a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct StateFrame {
    /// When the zone ticked, microseconds since the Unix epoch (zones on one machine, or
    /// with synchronised clocks, are compared by it: their tick numbers are their own).
    pub unix_micros: u64,
    /// Who each player of the zone is: its id in the zone (its avatar's, in a game that
    /// numbers avatars by player) and the client id of its connect token, ascending by id.
    pub players: Vec<(u32, u64)>,
    /// For each neighbour, the ticks of the oldest and the newest of its frames that the
    /// views of the zone's players made at this tick may hold (a neighbour not every view
    /// holds a frame of is left out): an observer judges the border entities a view shows by
    /// these, whatever the bus's delay. At most [`MAX_STATE_NEIGHBOURS`].
    pub held: Vec<(ZoneId, u32, u32)>,
    /// Every entity of the zone at the tick.
    pub frame: BorderFrame,
}

/// Neighbours a state frame names in [`StateFrame::held`], at most.
pub const MAX_STATE_NEIGHBOURS: usize = 255;

impl StateFrame {
    /// Encodes zone `zone`'s `snapshot` with the time, players (at most
    /// [`MAX_STATE_PLAYERS`] of them) and the neighbours' frames held (at most
    /// [`MAX_STATE_NEIGHBOURS`]).
    ///
    /// # Errors
    /// [`BorderError::Encode`] when the codec cannot take the snapshot whole.
    pub fn encode(
        zone: ZoneId,
        unix_micros: u64,
        players: &[(u32, u64)],
        held: &[(ZoneId, u32, u32)],
        snapshot: &Arc<WorldSnapshot>,
        schema: &Arc<Schema>,
    ) -> Result<Vec<u8>, BorderError> {
        let players = &players[..players.len().min(MAX_STATE_PLAYERS)];
        let held = &held[..held.len().min(MAX_STATE_NEIGHBOURS)];
        let frame = BorderFrame::encode(zone, snapshot, schema)?;
        let mut out = Vec::with_capacity(STATE_HEADER + players.len() * 12 + 1 + held.len() * 10 + frame.len());
        out.extend_from_slice(&STATE_MAGIC);
        out.extend_from_slice(&unix_micros.to_le_bytes());
        out.extend_from_slice(&(players.len() as u16).to_le_bytes());
        for (id, client) in players {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&client.to_le_bytes());
        }
        out.push(held.len() as u8);
        for (z, oldest, newest) in held {
            out.extend_from_slice(&z.to_le_bytes());
            out.extend_from_slice(&oldest.to_le_bytes());
            out.extend_from_slice(&newest.to_le_bytes());
        }
        out.extend_from_slice(&frame);
        Ok(out)
    }

    /// Decodes a state frame with the observer's `schema`.
    ///
    /// # Errors
    /// Why the bytes are not a usable state frame.
    pub fn decode(bytes: &[u8], schema: &Arc<Schema>) -> Result<Self, BorderError> {
        let header = bytes.get(..STATE_HEADER).ok_or(BorderError::NotAFrame)?;
        if header[..4] != STATE_MAGIC {
            return Err(BorderError::NotAFrame);
        }
        let mut t = [0u8; 8];
        t.copy_from_slice(&header[4..12]);
        let n = usize::from(u16::from_le_bytes([header[12], header[13]]));
        if n > MAX_STATE_PLAYERS {
            return Err(BorderError::NotAFrame);
        }
        let list = bytes.get(STATE_HEADER..STATE_HEADER + n * 12).ok_or(BorderError::NotAFrame)?;
        let players = list
            .chunks_exact(12)
            .map(|c| {
                let mut id = [0u8; 4];
                let mut client = [0u8; 8];
                id.copy_from_slice(&c[..4]);
                client.copy_from_slice(&c[4..]);
                (u32::from_le_bytes(id), u64::from_le_bytes(client))
            })
            .collect();
        let rest = &bytes[STATE_HEADER + n * 12..];
        let (&count, rest) = rest.split_first().ok_or(BorderError::NotAFrame)?;
        let list = rest.get(..usize::from(count) * 10).ok_or(BorderError::NotAFrame)?;
        let held = list
            .chunks_exact(10)
            .map(|c| {
                let tick = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                (u16::from_le_bytes([c[0], c[1]]), tick(2), tick(6))
            })
            .collect();
        let frame = BorderFrame::decode(&rest[list.len()..], schema)?;
        Ok(Self { unix_micros: u64::from_le_bytes(t), players, held, frame })
    }
}

/// A zone's figures: plain counters, read by the server's metrics and by tests.
#[derive(Debug, Default)]
pub struct ZoneCounters {
    /// Frames published to neighbours.
    pub frames_out: AtomicU64,
    /// Border entities published (summed over frames).
    pub entities_out: AtomicU64,
    /// Frames from neighbours handed to the border world.
    pub frames_in: AtomicU64,
    /// Frames from neighbours refused (not a frame, another schema, broken, not a neighbour).
    pub frames_refused: AtomicU64,
    /// Ticks whose border entities were not published: the bus shell was behind, or the
    /// border world's queue was full.
    pub frames_dropped: AtomicU64,
    /// Times a neighbour's entities faded because it went quiet.
    pub fades: AtomicU64,
    /// Border entities shown now (all neighbours).
    pub entities_in: AtomicU64,
    /// Handoffs out, by outcome ([`Outcome::label`](handoff::Outcome::label): accepted, refused, timed out).
    pub handoffs_out: [AtomicU64; 3],
    /// Handoffs out that were accepted: their total time from offer to answer, microseconds.
    pub handoff_us: AtomicU64,
    /// Offers from neighbours accepted, and refused.
    pub handoffs_in: [AtomicU64; 2],
    /// Of players handed over to this zone, inputs that never came between the old zone's
    /// newest applied one and the first applied here (a handoff that loses nothing adds 0).
    pub inputs_lost: AtomicU64,
    /// Of players handed over to this zone, inputs applied by both zones.
    pub inputs_repeated: AtomicU64,
    /// CPU time spent picking, coding and decoding border frames (off the tick's path, in
    /// the bus shell's tasks: the threads' own time, not the wall clock's), nanoseconds.
    pub work_ns: AtomicU64,
    /// CPU time spent choosing each player's border entities (the border world's relevancy,
    /// on the players' send path), nanoseconds. A call takes a microsecond or two, so one
    /// call in [`RELEVANCY_TIMED_EVERY`](crate::server::extensions::zone::RELEVANCY_TIMED_EVERY) is timed (the thread's own time) and counted that
    /// many times: an estimate that the scheduler's turns do not inflate.
    pub relevancy_ns: AtomicU64,
    /// CPU time of the border world's own work (storing frames, its ticks, its snapshots'
    /// entities), nanoseconds.
    pub world_ns: AtomicU64,
    /// 1 while the bus shell is connected to the bus.
    pub bus_up: AtomicU64,
    /// The bus shell's newest round trip to the bus, microseconds.
    pub bus_rtt_us: AtomicU64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grid() -> ZoneLayout {
        ZoneLayout::grid(Vec2::ZERO, Vec2::splat(200.0), 2, 2, 10.0).unwrap()
    }

    #[test]
    fn every_position_on_the_map_has_exactly_one_owner() {
        let z = grid();
        let mut seen = [0u32; 4];
        for x in 0..200 {
            for y in 0..200 {
                let p = Vec2::new(x as f32 + 0.5, y as f32 + 0.5);
                seen[usize::from(z.owner(p).unwrap())] += 1;
            }
        }
        assert_eq!(seen, [10_000; 4]);
        assert_eq!(z.owner(Vec2::new(100.0, 0.0)), Some(1), "a shared edge belongs to the zone it starts");
        assert_eq!(z.owner(Vec2::new(200.0, 0.0)), None, "off the map");
        assert_eq!(z.owner(Vec2::new(-0.1, 5.0)), None);
    }

    #[test]
    fn neighbours_are_the_zones_within_the_margin_corners_included() {
        let z = grid();
        assert_eq!(z.neighbours(0), &[1, 2, 3]);
        let far = ZoneLayout::new(
            vec![
                Region { min: Vec2::ZERO, max: Vec2::splat(10.0) },
                Region { min: Vec2::new(15.0, 0.0), max: Vec2::new(25.0, 10.0) },
                Region { min: Vec2::new(40.0, 0.0), max: Vec2::new(50.0, 10.0) },
            ],
            5.0,
        )
        .unwrap();
        assert_eq!(far.neighbours(0), &[1]);
        assert_eq!(far.neighbours(1), &[0]);
        assert!(far.neighbours(2).is_empty());
        assert!(far.neighbours(9).is_empty());
    }

    #[test]
    fn an_entity_is_sent_to_the_neighbours_within_the_margin_of_it() {
        let z = grid();
        let near = |zone, x, y| z.near(zone, Vec2::new(x, y)).collect::<Vec<_>>();
        assert_eq!(near(0, 50.0, 50.0), Vec::<ZoneId>::new(), "deep inside");
        assert_eq!(near(0, 95.0, 50.0), vec![1]);
        assert_eq!(near(0, 50.0, 95.0), vec![2]);
        assert_eq!(near(0, 95.0, 95.0), vec![1, 2, 3], "at the corner all three");
        assert_eq!(near(0, 92.0, 92.0), vec![1, 2], "the diagonal zone is 11.3 away");
        assert_eq!(near(0, 90.0, 50.0), vec![1], "exactly the margin counts");
        assert_eq!(near(0, 89.9, 50.0), Vec::<ZoneId>::new());
    }

    #[test]
    fn bad_layouts_are_refused() {
        let r = |a: f32, b: f32| Region { min: Vec2::splat(a), max: Vec2::splat(b) };
        assert_eq!(ZoneLayout::new(vec![], 1.0), Err(ZoneError::Count(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, 1.0)], -1.0), Err(ZoneError::Margin(-1.0)));
        assert_eq!(ZoneLayout::new(vec![r(1.0, 1.0)], 1.0), Err(ZoneError::BadRegion(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, f32::NAN)], 1.0), Err(ZoneError::BadRegion(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, 2.0), r(1.0, 3.0)], 1.0), Err(ZoneError::Overlap(0, 1)));
        assert!(ZoneLayout::grid(Vec2::ZERO, Vec2::ZERO, 2, 2, 1.0).is_err());
        assert!(ZoneLayout::new(vec![r(0.0, 1.0), r(1.0, 2.0)], 0.0).is_ok(), "touching is not overlapping");
    }

    mod border {
        use super::super::*;
        use crate::protocol::quant::Bits;
        use crate::protocol::snapshot::SnapshotBuilder;

        crate::replicated! {
            /// A dot.
            #[derive(Debug, Clone, PartialEq)]
            pub struct Dot {
                /// Where.
                pub x: u32 = Bits(20),
                /// What.
                pub y: u8 = Bits(8),
            }
        }

        fn schema() -> Arc<Schema> {
            let mut s = Schema::new();
            s.register::<Dot>().unwrap();
            Arc::new(s)
        }

        fn snapshot(schema: &Schema, tick: u32, dots: &[(u32, u32)]) -> Arc<WorldSnapshot> {
            let mut b = SnapshotBuilder::new(schema, tick);
            for &(id, x) in dots {
                b.insert(id, &Dot { x, y: 3 }).unwrap();
            }
            Arc::new(b.finish().unwrap())
        }

        #[test]
        fn a_frame_round_trips_with_its_zone_tick_and_quantized_entities() {
            let schema = schema();
            let s = snapshot(&schema, 77, &[(5, 95), (9, 1 << 19), (1 << 20, 0)]);
            let bytes = BorderFrame::encode(3, &s, &schema).unwrap();
            let f = BorderFrame::decode(&bytes, &schema).unwrap();
            assert_eq!((f.zone, f.tick), (3, 77));
            assert_eq!(f.snapshot.ids(), s.ids());
            for id in s.ids() {
                assert_eq!(f.snapshot.read::<Dot>(&schema, *id), s.read::<Dot>(&schema, *id));
            }
            let empty = BorderFrame::encode(1, &snapshot(&schema, 78, &[]), &schema).unwrap();
            assert!(BorderFrame::decode(&empty, &schema).unwrap().snapshot.is_empty());
        }

        /// What each neighbour's frame holds: (neighbour, ids, entity count said).
        fn held(frames: &[CodedFrame], schema: &Arc<Schema>) -> Vec<(ZoneId, Vec<u32>, usize)> {
            frames
                .iter()
                .map(|f| {
                    let frame = BorderFrame::decode(f.bytes.as_ref().unwrap(), schema).unwrap();
                    (f.to, frame.snapshot.ids().to_vec(), f.entities)
                })
                .collect()
        }

        #[test]
        fn each_neighbour_gets_the_entities_within_the_margin_of_its_region() {
            let schema = schema();
            // A 2×2 grid of 100-unit zones, margin 10; a dot's x is its position on the
            // diagonal line y = x, and id 7 has no position.
            let z = ZoneLayout::grid(Vec2::ZERO, Vec2::splat(200.0), 2, 2, 10.0).unwrap();
            let mut encoder = BorderEncoder::new(z, 0, schema.clone());
            let position = |e: EntityRef<'_>| (e.id != 7).then(|| Vec2::splat(e.words[0] as f32));
            let s = snapshot(&schema, 9, &[(1, 50), (2, 91), (3, 95), (4, 89), (7, 95)]);
            let frames = encoder.encode(&s, position);
            // (95, 95) is 7.1 from zone 3's corner; (91, 91) is 12.7 from it but 9 from 1 and 2.
            assert_eq!(held(&frames, &schema), vec![(1, vec![2, 3], 2), (2, vec![2, 3], 2), (3, vec![3], 1)]);
            let f = BorderFrame::decode(frames[0].bytes.as_ref().unwrap(), &schema).unwrap();
            assert_eq!((f.zone, f.tick), (0, 9));
            assert_eq!(f.snapshot.read::<Dot>(&schema, 3), s.read::<Dot>(&schema, 3));
            // Neighbours 1 and 2 get the same entities: one coding, shared.
            let ptr = |i: usize| frames[i].bytes.as_ref().unwrap().as_ptr();
            assert_eq!(ptr(0), ptr(1));
            assert_ne!(ptr(0), ptr(2));

            // The next ticks reuse the encoder: each frame still stands alone.
            let frames = encoder.encode(&snapshot(&schema, 10, &[(1, 50)]), position);
            assert_eq!(
                held(&frames, &schema),
                vec![(1, vec![], 0), (2, vec![], 0), (3, vec![], 0)],
                "every neighbour hears from the zone, even with nothing to show"
            );
            let frames = encoder.encode(&snapshot(&schema, 11, &[(4, 96), (5, 50)]), position);
            assert_eq!(held(&frames, &schema), vec![(1, vec![4], 1), (2, vec![4], 1), (3, vec![4], 1)]);
            // A tick that goes back (the zone's world started again) is coded too.
            let frames = encoder.encode(&snapshot(&schema, 3, &[(2, 91)]), position);
            assert_eq!(held(&frames, &schema), vec![(1, vec![2], 1), (2, vec![2], 1), (3, vec![], 0)]);
        }

        #[test]
        fn a_state_frame_round_trips_and_broken_ones_are_refused() {
            let schema = schema();
            let s = snapshot(&schema, 12, &[(1, 10), (2, 20), (1 << 16, 5)]);
            let held = [(0, 11, 12), (3, 4_000_000_000, 4_000_000_002)];
            let bytes =
                StateFrame::encode(2, 1_700_000_000_123_456, &[(1, 1_000_001), (2, 7)], &held, &s, &schema).unwrap();
            let f = StateFrame::decode(&bytes, &schema).unwrap();
            assert_eq!((f.unix_micros, f.frame.zone, f.frame.tick), (1_700_000_000_123_456, 2, 12));
            assert_eq!(f.players, vec![(1, 1_000_001), (2, 7)]);
            assert_eq!(f.held, held);
            assert_eq!(f.frame.snapshot.ids(), s.ids());
            assert_eq!(StateFrame::decode(&bytes[..STATE_HEADER + 5], &schema), Err(BorderError::NotAFrame));
            let mut many = bytes.clone();
            many[12..14].copy_from_slice(&u16::MAX.to_le_bytes());
            assert_eq!(StateFrame::decode(&many, &schema), Err(BorderError::NotAFrame));
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x5a;
                let _ = StateFrame::decode(&b, &schema);
                let _ = StateFrame::decode(&bytes[..i], &schema);
            }
        }

        #[test]
        fn foreign_or_broken_bytes_are_refused() {
            let schema = schema();
            let bytes = BorderFrame::encode(0, &snapshot(&schema, 5, &[(1, 1), (2, 2)]), &schema).unwrap();
            assert_eq!(BorderFrame::decode(&bytes[..10], &schema), Err(BorderError::NotAFrame));
            assert_eq!(BorderFrame::decode(b"VOLLEYRPxxxxxxxxxxxxxx", &schema), Err(BorderError::NotAFrame));
            let other = Arc::new(Schema::new());
            assert_eq!(BorderFrame::decode(&bytes, &other), Err(BorderError::Schema));
            let mut wrong_tick = bytes.clone();
            wrong_tick[6] ^= 1;
            assert_eq!(BorderFrame::decode(&wrong_tick, &schema), Err(BorderError::Snapshot));
            assert_eq!(BorderFrame::decode(&bytes[..BORDER_HEADER + 1], &schema), Err(BorderError::Snapshot));
            // Every flipped byte and every cut: an error or a frame, never a panic.
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0x5a;
                let _ = BorderFrame::decode(&b, &schema);
                let _ = BorderFrame::decode(&bytes[..i], &schema);
            }
        }
    }
}
