//! Recordings of a world, sans-IO: the file format, its writer ([`RecordWriter`]: frames in,
//! chunks of bytes out) and its reader ([`Recording`], [`Playhead`]: bytes in, the world's
//! quantized state at any recorded tick out). The server's recorder and replay worlds drive
//! these; so do the fuzz target and the tests.
//!
//! # The file
//! | part | bytes | what |
//! | --- | --- | --- |
//! | magic | 8 | `VOLLEYRP` |
//! | format | 2 | [`FORMAT_VERSION`] (little-endian, as every number here); format 1 (no scoreboard) is read too |
//! | header length | 4 | at most [`MAX_HEADER_BYTES`] |
//! | header | n | protocol version (u16), schema fingerprint (u64, [`Schema::fingerprint`]), server tick rate (u16), stride (u16: server ticks per world tick), start time (u64, ms since the Unix epoch), keyframe interval (u32, ticks), kind (u8 length, UTF-8), scoreboard columns (u8 count, then each: u8 length, UTF-8; format 2 only) |
//! | header checksum | 4 | CRC-32 of the header |
//! | chunks | … | until the end of the file |
//!
//! Each chunk: `CK` (2), payload length (u32), raw length (u32), flags (u8: 1 = lz4), first
//! and last tick (u32 each), CRC-32 of the payload (u32), payload. The raw payload is a run
//! of frames; the first snapshot of a chunk is a keyframe (the full world), so every chunk
//! decodes on its own. A frame: tick (u32), snapshot kind (u8: 0 none, 1 keyframe, 2 delta
//! against the frame before), snapshot length (varint) and bytes (the snapshot codec's, as
//! a client that sees everything receives them), event count (varint), events ([`Event`]).
//!
//! An event: kind (u8), then for a join (0) the player and its client id (varints), a leave
//! (1) the player, a message (2) the audience (u8: 0 all, 1 team, 2 watchers, 3 player; bit 7
//! set when reliable), its argument (varint), length (varint) and bytes, a note (3) length
//! and UTF-8, and the scoreboard (4, format 2) the length (varint) of its rows, each a
//! [`ScoreRow`] in postcard (player, name, fields; ping 0), as the board's full update has them.
//!
//! A file cut off (a crash) plays up to its last complete chunk; a chunk whose checksum
//! fails, a wrong magic, format, protocol or schema is an error ([`RecordingError`]).

use std::sync::Arc;

use bytes::Bytes;

use super::Audience;
use super::scoreboard::{MAX_ROWS, ScoreRow};
use super::session::PROTOCOL_VERSION;
use super::snapshot::{Interest, Schema, SenderConfig, SnapshotReceiver, SnapshotSender, WorldSnapshot};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"VOLLEYRP";
/// The version of the file layout this build writes and reads.
pub const FORMAT_VERSION: u16 = 2;
/// The oldest file layout this build reads (format 1: no scoreboard).
pub const OLDEST_FORMAT: u16 = 1;
/// The longest header read.
pub const MAX_HEADER_BYTES: usize = 1024;
/// The largest chunk (raw or compressed) read or written; a writer closes a chunk before
/// its frames pass a quarter of this.
pub const MAX_CHUNK_BYTES: usize = 64 << 20;
/// How a recording codes its snapshots: each against the frame before, predicted from the
/// two before that (moving things cost their residual, not their motion), range-coded; a
/// history of four views is all that needs (the next, the baseline, the reference, one spare).
const RECORD_SENDER: SenderConfig = SenderConfig { history: 4, predict: true, max_baseline_age: 63 };

/// Bytes enough to encode a snapshot of `entities` entities in full (each with its id and
/// kind) and `deleted` deletions: a recording's frames and a zone's border frames.
pub(crate) fn whole_snapshot_room(schema: &Schema, entities: usize, deleted: usize) -> usize {
    let widest =
        (0..schema.len() as u16).filter_map(|k| schema.kind(k)).map(|k| k.max_full_bits() as usize).max().unwrap_or(0);
    64 + (entities + deleted + 8) * (widest + 96).div_ceil(8)
}
/// Bytes of a chunk's header.
const CHUNK_HEADER: usize = 2 + 4 + 4 + 1 + 4 + 4 + 4;
/// The longest event text (a note) kept.
const MAX_NOTE_BYTES: usize = 256;

/// What a recording says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingHeader {
    /// The protocol version of the server that wrote it.
    pub protocol: u16,
    /// Its schema's [`Schema::fingerprint`].
    pub schema: u64,
    /// The server's ticks per second.
    pub tick_rate_hz: u16,
    /// Server ticks per tick of the recorded world.
    pub stride: u16,
    /// When the recording started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Ticks between keyframes.
    pub keyframe_every: u32,
    /// The recorded world's kind.
    pub kind: String,
    /// The recorded world's scoreboard columns (none: it has no scoreboard).
    pub columns: Vec<String>,
}

/// Something that happened in the recorded world during a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A player joined, with its connect token's client id.
    Joined {
        /// Its id.
        player: u32,
        /// Its client id.
        client_id: u64,
    },
    /// A player left.
    Left {
        /// Its id.
        player: u32,
    },
    /// The world sent a message.
    Message {
        /// To whom.
        to: Audience,
        /// Reliably (else as an event).
        reliable: bool,
        /// The bytes.
        data: Bytes,
    },
    /// The recorder's own remark (it fell behind and kept keyframes only, say).
    Note(String),
    /// The scoreboard as it stood (every row; sent every half second, and when players are
    /// sent away). Pings are not recorded.
    Board(Vec<ScoreRow>),
}

/// Why a recording cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordingError {
    /// It does not start with [`MAGIC`].
    #[error("not a volley recording (no VOLLEYRP magic)")]
    NotARecording,
    /// Another layout version.
    #[error("recording format {found} is not supported (this build reads format {FORMAT_VERSION})")]
    Format {
        /// The file's.
        found: u16,
    },
    /// Recorded by a server of another protocol version.
    #[error("recorded with protocol {found}, this build speaks protocol {PROTOCOL_VERSION}")]
    Protocol {
        /// The file's.
        found: u16,
    },
    /// Recorded with other replicated kinds than the game's.
    #[error("recorded with schema {found:016x}, the game's schema is {expected:016x}")]
    Schema {
        /// The file's.
        found: u64,
        /// The game's.
        expected: u64,
    },
    /// The file ends inside its header.
    #[error("the recording ends inside its header")]
    Truncated,
    /// Bytes that are not what they should be.
    #[error("corrupt recording at byte {offset}: {what}")]
    Corrupt {
        /// Where in the file.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
    /// No frame at or after the tick asked for.
    #[error("tick {0} is not in the recording")]
    NoSuchTick(u32),
    /// Not one complete chunk (a file cut off within its first two seconds).
    #[error("the recording holds no complete chunk: nothing to play")]
    Empty,
}

/// One recorded tick, as [`RecordWriter::push`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct FrameIn<'a> {
    /// The tick (on the server's clock).
    pub tick: u32,
    /// The world's state, `None` when it made none this tick.
    pub snapshot: Option<&'a Arc<WorldSnapshot>>,
    /// What happened.
    pub events: &'a [Event],
    /// Frames were dropped just before this one: it starts with a keyframe.
    pub after_gap: bool,
}

/// One recorded tick, as a [`Playhead`] gives it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The tick.
    pub tick: u32,
    /// The world's state (the newest recorded at or before this tick).
    pub snapshot: Arc<WorldSnapshot>,
    /// What happened in this tick.
    pub events: Vec<Event>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the file's bytes from a position, bounds-checked.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    /// Added to positions in errors (where `data` starts in the file).
    base: usize,
}

impl<'a> Cursor<'a> {
    fn corrupt(&self, what: &'static str) -> RecordingError {
        RecordingError::Corrupt { offset: self.base + self.at, what }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordingError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.data.len()).ok_or_else(|| self.corrupt(what))?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RecordingError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, RecordingError> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, RecordingError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, RecordingError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, RecordingError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, RecordingError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.corrupt(what))
    }

    /// A length, at most what is left.
    fn len(&mut self, what: &'static str) -> Result<usize, RecordingError> {
        let n = self.varint(what)?;
        usize::try_from(n).ok().filter(|n| *n <= self.data.len() - self.at).ok_or_else(|| self.corrupt(what))
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

impl RecordingHeader {
    /// The file's first bytes: magic, format, this header.
    pub fn encode(&self) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&self.protocol.to_le_bytes());
        h.extend_from_slice(&self.schema.to_le_bytes());
        h.extend_from_slice(&self.tick_rate_hz.to_le_bytes());
        h.extend_from_slice(&self.stride.to_le_bytes());
        h.extend_from_slice(&self.started_unix_ms.to_le_bytes());
        h.extend_from_slice(&self.keyframe_every.to_le_bytes());
        let kind = super::cut(&self.kind, 64);
        h.push(kind.len() as u8);
        h.extend_from_slice(kind.as_bytes());
        let columns = &self.columns[..self.columns.len().min(super::scoreboard::MAX_FIELDS)];
        h.push(columns.len() as u8);
        for c in columns {
            let c = super::cut(c, super::scoreboard::MAX_NAME_BYTES);
            h.push(c.len() as u8);
            h.extend_from_slice(c.as_bytes());
        }
        let mut out = Vec::with_capacity(h.len() + 18);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(&crc32fast::hash(&h).to_le_bytes());
        out
    }

    /// The header at the start of `data`, and where the chunks start.
    ///
    /// # Errors
    /// Not a recording, another format, a checksum that fails, or a file that ends first.
    pub fn decode(data: &[u8]) -> Result<(RecordingHeader, usize), RecordingError> {
        if data.len() < MAGIC.len() {
            return Err(if MAGIC.starts_with(data) {
                RecordingError::Truncated
            } else {
                RecordingError::NotARecording
            });
        }
        if &data[..MAGIC.len()] != MAGIC {
            return Err(RecordingError::NotARecording);
        }
        let mut c = Cursor { data, at: MAGIC.len(), base: 0 };
        let format = c.u16("format").map_err(|_| RecordingError::Truncated)?;
        if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&format) {
            return Err(RecordingError::Format { found: format });
        }
        let n = c.u32("header length").map_err(|_| RecordingError::Truncated)? as usize;
        if n > MAX_HEADER_BYTES {
            return Err(c.corrupt("header length"));
        }
        let h = c.take(n, "header").map_err(|_| RecordingError::Truncated)?;
        let crc = c.u32("header checksum").map_err(|_| RecordingError::Truncated)?;
        if crc32fast::hash(h) != crc {
            return Err(RecordingError::Corrupt { offset: 14, what: "header checksum" });
        }
        let end = c.at;
        let mut c = Cursor { data: h, at: 0, base: 14 };
        let header = RecordingHeader {
            protocol: c.u16("protocol")?,
            schema: c.u64("schema")?,
            tick_rate_hz: c.u16("tick rate")?,
            stride: c.u16("stride")?,
            started_unix_ms: c.u64("start time")?,
            keyframe_every: c.u32("keyframe interval")?,
            kind: {
                let n = c.u8("kind")? as usize;
                String::from_utf8_lossy(c.take(n, "kind")?).into_owned()
            },
            columns: Vec::new(),
        };
        let mut header = header;
        if format >= 2 {
            let n = c.u8("columns")? as usize;
            if n > super::scoreboard::MAX_FIELDS {
                return Err(c.corrupt("columns"));
            }
            for _ in 0..n {
                let len = c.u8("column")? as usize;
                header.columns.push(String::from_utf8_lossy(c.take(len, "column")?).into_owned());
            }
        }
        if header.tick_rate_hz == 0 || header.stride == 0 {
            return Err(RecordingError::Corrupt { offset: 14, what: "tick rate" });
        }
        Ok((header, end))
    }
}

/// Turns a world's frames into a recording's bytes: the header first ([`RecordWriter::new`]),
/// then a chunk each time one closes ([`RecordWriter::push`]), then the last
/// ([`RecordWriter::finish`]). Snapshots are coded with the snapshot codec, each against the
/// frame before, with a keyframe (the full world) every `keyframe_every` ticks and after
/// every gap; a chunk is lz4-compressed where that shrinks it.
#[derive(Debug)]
pub struct RecordWriter {
    schema: Arc<Schema>,
    sender: SnapshotSender,
    keyframe_every: u32,
    last_key: Option<u32>,
    last_tick: Option<u32>,
    chunk: Vec<u8>,
    range: Option<(u32, u32)>,
    interest: Vec<Interest>,
    buf: Vec<u8>,
    /// Ticks recorded and keyframes written (figures).
    frames: u64,
    keyframes: u64,
}

impl RecordWriter {
    /// A writer, and the file's first bytes (its header).
    pub fn new(schema: Arc<Schema>, header: &RecordingHeader) -> (Self, Vec<u8>) {
        let w = Self {
            sender: SnapshotSender::new(schema.clone(), RECORD_SENDER),
            schema,
            keyframe_every: header.keyframe_every.max(1),
            last_key: None,
            last_tick: None,
            chunk: Vec::new(),
            range: None,
            interest: Vec::new(),
            buf: Vec::new(),
            frames: 0,
            keyframes: 0,
        };
        (w, header.encode())
    }

    /// Frames recorded so far, and of them keyframes.
    pub fn counts(&self) -> (u64, u64) {
        (self.frames, self.keyframes)
    }

    /// Whether the next frame with a snapshot will be a keyframe.
    pub fn keyframe_due(&self, tick: u32) -> bool {
        self.last_key.is_none_or(|k| tick.wrapping_sub(k) >= self.keyframe_every)
    }

    /// Adds a frame; returns a finished chunk when this frame closed one. A frame whose
    /// tick is not after the last one's is skipped.
    pub fn push(&mut self, frame: FrameIn<'_>) -> Option<Vec<u8>> {
        if self.last_tick.is_some_and(|t| frame.tick <= t) {
            return None;
        }
        let mut done = None;
        let key = frame.snapshot.is_some()
            && (frame.after_gap || self.keyframe_due(frame.tick) || self.chunk.len() > MAX_CHUNK_BYTES / 4);
        if key {
            done = self.finish();
            self.sender = SnapshotSender::new(self.schema.clone(), RECORD_SENDER);
            self.last_key = Some(frame.tick);
            self.keyframes += 1;
        }
        self.last_tick = Some(frame.tick);
        self.frames += 1;
        let mut kind = 0u8;
        self.buf.clear();
        if let Some(snapshot) = frame.snapshot {
            Interest::everything(snapshot, &mut self.interest);
            let before = self.sender.acked().map_or(0, |_| self.interest.len());
            self.buf.resize(whole_snapshot_room(&self.schema, snapshot.len(), before), 0);
            match self.sender.encode(snapshot, &self.interest, &mut self.buf) {
                Ok(stats) if stats.deferred == 0 => {
                    self.buf.truncate(stats.bytes);
                    self.sender.ack(frame.tick);
                    kind = if stats.baseline.is_some() { 2 } else { 1 };
                }
                _ => self.buf.clear(),
            }
        }
        let tick_bytes = frame.tick.to_le_bytes();
        self.chunk.extend_from_slice(&tick_bytes);
        self.chunk.push(kind);
        put_varint(&mut self.chunk, self.buf.len() as u64);
        self.chunk.extend_from_slice(&self.buf);
        let mut events: Vec<Event> = frame.events.to_vec();
        if frame.after_gap {
            events.push(Event::Note("the recorder fell behind: frames before this one were dropped".into()));
        }
        put_varint(&mut self.chunk, events.len() as u64);
        for e in &events {
            encode_event(&mut self.chunk, e);
        }
        self.range = Some(self.range.map_or((frame.tick, frame.tick), |(a, _)| (a, frame.tick)));
        done
    }

    /// Closes the open chunk, if it has frames, and returns its bytes.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let (first, last) = self.range.take()?;
        let raw = std::mem::take(&mut self.chunk);
        let packed = lz4_flex::block::compress(&raw);
        let (flags, payload) = if packed.len() < raw.len() { (1u8, packed) } else { (0u8, raw.clone()) };
        let mut out = Vec::with_capacity(CHUNK_HEADER + payload.len());
        out.extend_from_slice(b"CK");
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.push(flags);
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&last.to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        self.chunk = raw;
        self.chunk.clear();
        Some(out)
    }
}

fn encode_event(out: &mut Vec<u8>, e: &Event) {
    match e {
        Event::Joined { player, client_id } => {
            out.push(0);
            put_varint(out, u64::from(*player));
            put_varint(out, *client_id);
        }
        Event::Left { player } => {
            out.push(1);
            put_varint(out, u64::from(*player));
        }
        Event::Message { to, reliable, data } => {
            out.push(2);
            let (tag, arg) = match to {
                Audience::All => (0u8, 0u64),
                Audience::Team(t) => (1, u64::from(*t)),
                Audience::Watchers => (2, 0),
                Audience::Player(p) => (3, u64::from(*p)),
            };
            out.push(tag | if *reliable { 0x80 } else { 0 });
            put_varint(out, arg);
            put_varint(out, data.len() as u64);
            out.extend_from_slice(data);
        }
        Event::Note(text) => {
            out.push(3);
            let t = super::cut(text, MAX_NOTE_BYTES);
            put_varint(out, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        Event::Board(rows) => {
            out.push(4);
            let rows = postcard::to_allocvec(&rows[..rows.len().min(MAX_ROWS)]).unwrap_or_default();
            put_varint(out, rows.len() as u64);
            out.extend_from_slice(&rows);
        }
    }
}

fn decode_event(c: &mut Cursor<'_>, payload: &Bytes) -> Result<Event, RecordingError> {
    Ok(match c.u8("event")? {
        0 => Event::Joined {
            player: u32::try_from(c.varint("player")?).map_err(|_| c.corrupt("player"))?,
            client_id: c.varint("client id")?,
        },
        1 => Event::Left { player: u32::try_from(c.varint("player")?).map_err(|_| c.corrupt("player"))? },
        2 => {
            let tag = c.u8("recipient")?;
            let arg = c.varint("recipient")?;
            let to = match tag & 0x7f {
                0 => Audience::All,
                1 => Audience::Team(u16::try_from(arg).map_err(|_| c.corrupt("team"))?),
                2 => Audience::Watchers,
                3 => Audience::Player(u32::try_from(arg).map_err(|_| c.corrupt("player"))?),
                _ => return Err(c.corrupt("recipient")),
            };
            let n = c.len("message length")?;
            let start = c.at;
            c.take(n, "message")?;
            Event::Message { to, reliable: tag & 0x80 != 0, data: payload.slice(start..start + n) }
        }
        3 => {
            let n = c.len("note length")?;
            let t = c.take(n, "note")?;
            Event::Note(super::cut(&String::from_utf8_lossy(t), MAX_NOTE_BYTES).to_owned())
        }
        4 => {
            let n = c.len("board length")?;
            let b = c.take(n, "board")?;
            let mut rows: Vec<ScoreRow> = postcard::from_bytes(b).map_err(|_| c.corrupt("board"))?;
            if rows.len() > MAX_ROWS {
                return Err(c.corrupt("board rows"));
            }
            for r in &mut rows {
                r.ping_ms = 0;
            }
            Event::Board(rows)
        }
        _ => return Err(c.corrupt("event kind")),
    })
}

/// What a recording's frames are made of ([`Recording::sizes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Frames (recorded ticks).
    pub frames: u64,
    /// Of them, keyframes (the whole world).
    pub keyframes: u64,
    /// Snapshot bytes of the keyframes, and of the other frames (changes), before lz4.
    pub keyframe_bytes: u64,
    /// See `keyframe_bytes`.
    pub delta_bytes: u64,
    /// Events recorded.
    pub events: u64,
    /// Chunk payloads before lz4.
    pub raw_bytes: u64,
}

/// Where a chunk is and which ticks it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its first byte in the file.
    pub offset: usize,
    /// Its first tick.
    pub first: u32,
    /// Its last tick.
    pub last: u32,
}

/// A recording read from its bytes: its header and where its chunks are (the chunks
/// themselves are decoded when played).
#[derive(Debug, Clone)]
pub struct Recording {
    header: RecordingHeader,
    data: Bytes,
    chunks: Vec<ChunkInfo>,
    /// Bytes after the last complete chunk (a file cut off while being written).
    cut_off: usize,
}

impl Recording {
    /// Reads a recording's header and finds its chunks, checking each one's checksum. A
    /// chunk cut off at the end of the file is left out ([`Recording::cut_off`] says how
    /// many bytes were).
    ///
    /// # Errors
    /// Not a recording, another format or protocol, a schema other than `schema` (when given),
    /// or a corrupt chunk.
    pub fn parse(data: Bytes, schema: Option<&Schema>) -> Result<Recording, RecordingError> {
        let (header, mut at) = RecordingHeader::decode(&data)?;
        // Protocol 8 changed only the channel's header, not what a recording holds: a
        // recording of protocol 7 plays as it is.
        if header.protocol != PROTOCOL_VERSION && header.protocol != 7 {
            return Err(RecordingError::Protocol { found: header.protocol });
        }
        if let Some(s) = schema
            && s.fingerprint() != header.schema
        {
            return Err(RecordingError::Schema { found: header.schema, expected: s.fingerprint() });
        }
        let mut chunks = Vec::new();
        let mut cut_off = 0;
        while at < data.len() {
            let rest = &data[at..];
            if rest.len() < CHUNK_HEADER {
                cut_off = rest.len();
                break;
            }
            let mut c = Cursor { data: rest, at: 0, base: at };
            if c.take(2, "chunk magic")? != b"CK" {
                return Err(c.corrupt("chunk magic"));
            }
            let len = c.u32("chunk length")? as usize;
            let raw = c.u32("chunk length")? as usize;
            let _flags = c.u8("chunk flags")?;
            let first = c.u32("chunk tick")?;
            let last = c.u32("chunk tick")?;
            let crc = c.u32("chunk checksum")?;
            if len > MAX_CHUNK_BYTES || raw > MAX_CHUNK_BYTES || last < first {
                return Err(RecordingError::Corrupt { offset: at, what: "chunk header" });
            }
            if rest.len() < CHUNK_HEADER + len {
                cut_off = rest.len();
                break;
            }
            if crc32fast::hash(&rest[CHUNK_HEADER..CHUNK_HEADER + len]) != crc {
                return Err(RecordingError::Corrupt { offset: at, what: "chunk checksum" });
            }
            if chunks.last().is_some_and(|p: &ChunkInfo| first <= p.last) {
                return Err(RecordingError::Corrupt { offset: at, what: "chunk ticks go backwards" });
            }
            chunks.push(ChunkInfo { offset: at, first, last });
            at += CHUNK_HEADER + len;
        }
        Ok(Recording { header, data, chunks, cut_off })
    }

    /// What it says about itself.
    pub fn header(&self) -> &RecordingHeader {
        &self.header
    }

    /// Its complete chunks, in order.
    pub fn chunks(&self) -> &[ChunkInfo] {
        &self.chunks
    }

    /// Bytes at its end that were not a complete chunk (0 for a file closed properly).
    pub fn cut_off(&self) -> usize {
        self.cut_off
    }

    /// The first and last recorded ticks (`None`: no complete chunk).
    pub fn ticks(&self) -> Option<(u32, u32)> {
        Some((self.chunks.first()?.first, self.chunks.last()?.last))
    }

    /// What the recording's frames are made of, read without decoding any snapshot.
    ///
    /// # Errors
    /// When a chunk's bytes are not what the writer makes.
    pub fn sizes(&self) -> Result<Sizes, RecordingError> {
        let mut out = Sizes::default();
        for i in 0..self.chunks.len() {
            let (payload, base) = self.payload(i)?;
            raw_frames(&payload, base, |f| {
                out.frames += 1;
                match f.kind {
                    1 => {
                        out.keyframes += 1;
                        out.keyframe_bytes += f.snapshot.len() as u64;
                    }
                    2 => out.delta_bytes += f.snapshot.len() as u64,
                    _ => {}
                }
                out.events += f.events.len() as u64;
                Ok(())
            })?;
            out.raw_bytes += payload.len() as u64;
        }
        Ok(out)
    }

    /// Chunk `i`'s raw payload (decompressed), and where it starts in the file.
    fn payload(&self, i: usize) -> Result<(Bytes, usize), RecordingError> {
        let info = *self.chunks.get(i).ok_or(RecordingError::NoSuchTick(0))?;
        let at = info.offset;
        let head = &self.data[at..at + CHUNK_HEADER];
        let len = u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as usize;
        let raw_len = u32::from_le_bytes([head[6], head[7], head[8], head[9]]) as usize;
        let flags = head[10];
        let body = self.data.slice(at + CHUNK_HEADER..at + CHUNK_HEADER + len);
        let payload = if flags & 1 != 0 {
            Bytes::from(
                lz4_flex::block::decompress(&body, raw_len)
                    .map_err(|_| RecordingError::Corrupt { offset: at, what: "chunk does not decompress" })?,
            )
        } else {
            body
        };
        if payload.len() != raw_len {
            return Err(RecordingError::Corrupt { offset: at, what: "chunk length" });
        }
        Ok((payload, at + CHUNK_HEADER))
    }

    /// Chunk `i`'s frames, decoded with `schema`.
    ///
    /// # Errors
    /// When its bytes are not what the writer makes.
    pub fn frames(&self, i: usize, schema: &Arc<Schema>) -> Result<Vec<Frame>, RecordingError> {
        let info = *self.chunks.get(i).ok_or(RecordingError::NoSuchTick(0))?;
        let (payload, base) = self.payload(i)?;
        let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
        let mut frames: Vec<Frame> = Vec::new();
        let mut current: Option<Arc<WorldSnapshot>> = None;
        raw_frames(&payload, base, |f| {
            let corrupt = |what| RecordingError::Corrupt { offset: f.offset, what };
            if f.tick < info.first || f.tick > info.last || frames.last().is_some_and(|p| f.tick <= p.tick) {
                return Err(corrupt("frame tick"));
            }
            match f.kind {
                0 => {}
                1 | 2 => {
                    if f.kind == 2 && current.is_none() {
                        return Err(corrupt("a delta before any keyframe"));
                    }
                    if f.kind == 1 {
                        receiver = SnapshotReceiver::new(schema.clone(), 64);
                    }
                    let t = receiver.decode(f.snapshot).map_err(|_| corrupt("snapshot does not decode"))?;
                    if t != f.tick {
                        return Err(corrupt("snapshot tick"));
                    }
                    current = receiver.latest().map(|s| Arc::new(s.clone()));
                }
                _ => return Err(corrupt("snapshot kind")),
            }
            // Frames before the chunk's first snapshot have no state to show.
            if let Some(s) = &current {
                frames.push(Frame { tick: f.tick, snapshot: s.clone(), events: f.events });
            }
            Ok(())
        })?;
        Ok(frames)
    }
}

/// One frame of a chunk's payload as written, its snapshot still coded.
struct RawFrame<'a> {
    tick: u32,
    /// 0: no snapshot, 1: keyframe, 2: changes since the frame before.
    kind: u8,
    snapshot: &'a [u8],
    events: Vec<Event>,
    /// Where the frame starts in the file (for errors).
    offset: usize,
}

/// Hands each frame of a chunk's raw `payload` (starting at byte `base` of the file) to
/// `each`, in order.
fn raw_frames(
    payload: &Bytes,
    base: usize,
    mut each: impl FnMut(RawFrame<'_>) -> Result<(), RecordingError>,
) -> Result<(), RecordingError> {
    let mut c = Cursor { data: payload, at: 0, base };
    while !c.done() {
        let offset = c.base + c.at;
        let tick = c.u32("frame tick")?;
        let kind = c.u8("snapshot kind")?;
        let n = c.len("snapshot length")?;
        let snapshot = c.take(n, "snapshot")?;
        let count = c.len("event count")?;
        let mut events = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            events.push(decode_event(&mut c, payload)?);
        }
        each(RawFrame { tick, kind, snapshot, events, offset })?;
    }
    Ok(())
}

/// Plays a [`Recording`]: seeks to any tick (its chunk's keyframe, then the changes up to
/// it) and steps forward, holding one decoded chunk at a time.
#[derive(Debug)]
pub struct Playhead {
    recording: Recording,
    schema: Arc<Schema>,
    /// The next chunk to decode.
    next_chunk: usize,
    /// The frames after the current one in the decoded chunk.
    ahead: std::collections::VecDeque<Frame>,
    current: Frame,
}

impl Playhead {
    /// A playhead on the recording's first frame.
    ///
    /// # Errors
    /// When the recording has no frame with a snapshot, or a chunk does not decode.
    pub fn new(recording: Recording, schema: Arc<Schema>) -> Result<Self, RecordingError> {
        let first = recording.ticks().ok_or(RecordingError::Empty)?.0;
        for i in 0..recording.chunks().len() {
            let mut ahead: std::collections::VecDeque<Frame> = recording.frames(i, &schema)?.into();
            if let Some(current) = ahead.pop_front() {
                return Ok(Self { recording, schema, next_chunk: i + 1, ahead, current });
            }
        }
        Err(RecordingError::NoSuchTick(first))
    }

    /// The recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// The frame shown.
    pub fn frame(&self) -> &Frame {
        &self.current
    }

    /// Moves to the newest frame at or before `tick` (the first frame of the recording, for
    /// a tick before it): decodes that frame's chunk from its keyframe.
    ///
    /// # Errors
    /// When the chunk does not decode.
    pub fn seek(&mut self, tick: u32) -> Result<(), RecordingError> {
        let chunks = self.recording.chunks();
        let mut i = chunks.partition_point(|c| c.first <= tick).saturating_sub(1);
        loop {
            let mut frames: std::collections::VecDeque<Frame> = self.recording.frames(i, &self.schema)?.into();
            let at = frames.iter().take_while(|f| f.tick <= tick).count();
            if at > 0 || (i == 0 && !frames.is_empty()) {
                let mut rest = frames.split_off(at.max(1));
                if let Some(current) = frames.pop_back() {
                    self.current = current;
                }
                std::mem::swap(&mut self.ahead, &mut rest);
                self.next_chunk = i + 1;
                return Ok(());
            }
            // No frame of this chunk is at or before `tick`: the one before holds it.
            if i == 0 {
                return Err(RecordingError::NoSuchTick(tick));
            }
            i -= 1;
        }
    }

    /// Moves forward to the newest frame at or before `tick`, handing every frame passed on
    /// the way (after the current one, up to and with the new one) to `passed`. Returns
    /// whether the recording has no frame after the current one.
    ///
    /// # Errors
    /// When a chunk does not decode.
    pub fn advance_to(&mut self, tick: u32, mut passed: impl FnMut(&Frame)) -> Result<bool, RecordingError> {
        loop {
            if let Some(next) = self.ahead.front() {
                if next.tick > tick {
                    return Ok(false);
                }
                if let Some(f) = self.ahead.pop_front() {
                    self.current = f;
                    passed(&self.current);
                }
                continue;
            }
            let Some(info) = self.recording.chunks().get(self.next_chunk).copied() else {
                return Ok(true);
            };
            if info.first > tick {
                return Ok(false);
            }
            self.ahead = self.recording.frames(self.next_chunk, &self.schema)?.into();
            self.next_chunk += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::protocol::quant::Bits;
    use crate::protocol::snapshot::EntityId;

    crate::replicated! {
        /// A dot.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Dot {
            /// Where.
            pub x: u32 = Bits(16),
            /// What.
            pub y: u8 = Bits(8),
        }
    }

    crate::replicated! {
        /// A wider dot.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Wide {
            /// Where.
            pub x: u32 = Bits(17),
            /// What.
            pub y: u8 = Bits(8),
        }
    }

    fn schema() -> Arc<Schema> {
        let mut s = Schema::new();
        s.register::<Dot>().unwrap();
        Arc::new(s)
    }

    fn world(tick: u32, n: u32) -> Arc<WorldSnapshot> {
        let mut w = WorldSnapshot::new(tick);
        for id in 0..n {
            w.push_raw(id as EntityId * 3, 0, &[(tick * 7 + id) & 0xffff, id & 0xff]);
        }
        Arc::new(w)
    }

    fn header() -> RecordingHeader {
        RecordingHeader {
            protocol: PROTOCOL_VERSION,
            schema: schema().fingerprint(),
            tick_rate_hz: 60,
            stride: 1,
            started_unix_ms: 1,
            keyframe_every: 10,
            kind: "match".into(),
            columns: vec!["kills".into(), "deaths".into()],
        }
    }

    /// A recording of ticks 100..100+n, entities coming and going, a message each tick.
    fn record(n: u32) -> (Vec<u8>, Vec<Arc<WorldSnapshot>>, Vec<usize>) {
        let (mut w, mut file) = RecordWriter::new(schema(), &header());
        let mut worlds = Vec::new();
        let mut ends = Vec::new();
        for t in 100..100 + n {
            let s = world(t, 5 + t % 7);
            let ev = [Event::Message { to: Audience::All, reliable: true, data: Bytes::from(vec![t as u8]) }];
            if let Some(c) = w.push(FrameIn { tick: t, snapshot: Some(&s), events: &ev, after_gap: false }) {
                file.extend(c);
                ends.push(file.len());
            }
            worlds.push(s);
        }
        file.extend(w.finish().unwrap());
        ends.push(file.len());
        (file, worlds, ends)
    }

    #[test]
    fn every_tick_plays_back_as_recorded_from_the_start_and_after_a_seek() {
        let (file, worlds, _) = record(45);
        let rec = Recording::parse(Bytes::from(file), Some(&schema())).unwrap();
        assert_eq!(rec.chunks().len(), 5);
        assert_eq!(rec.ticks(), Some((100, 144)));
        let mut p = Playhead::new(rec.clone(), schema()).unwrap();
        assert_eq!(*p.frame().snapshot, *worlds[0]);
        for t in 101..145 {
            let mut seen = Vec::new();
            p.advance_to(t, |f| seen.push(f.tick)).unwrap();
            assert_eq!(seen, vec![t]);
            assert_eq!(*p.frame().snapshot, *worlds[(t - 100) as usize], "tick {t}");
            assert_eq!(p.frame().events.len(), 1);
        }
        assert!(p.advance_to(500, |_| {}).unwrap());
        let mut q = Playhead::new(rec, schema()).unwrap();
        q.seek(127).unwrap();
        assert_eq!(*q.frame().snapshot, *worlds[27]);
        q.advance_to(133, |_| {}).unwrap();
        assert_eq!(*q.frame().snapshot, *worlds[33]);
        q.seek(105).unwrap();
        assert_eq!(*q.frame().snapshot, *worlds[5]);
    }

    #[test]
    fn the_scoreboard_and_its_columns_play_back_and_format_1_still_reads() {
        let (mut w, mut file) = RecordWriter::new(schema(), &header());
        let rows = vec![
            ScoreRow { player: 3, name: "ann".into(), fields: vec![5, -2], ping_ms: 40 },
            ScoreRow { player: 9, name: "bo".into(), fields: vec![1, 0], ping_ms: 7 },
        ];
        let s = world(100, 3);
        let ev = [Event::Board(rows.clone()), Event::Left { player: 9 }];
        if let Some(c) = w.push(FrameIn { tick: 100, snapshot: Some(&s), events: &ev, after_gap: false }) {
            file.extend(c);
        }
        file.extend(w.finish().unwrap());
        let rec = Recording::parse(Bytes::from(file), Some(&schema())).unwrap();
        assert_eq!(rec.header().columns, ["kills", "deaths"]);
        let p = Playhead::new(rec, schema()).unwrap();
        // Pings are not recorded.
        let want: Vec<ScoreRow> = rows.into_iter().map(|r| ScoreRow { ping_ms: 0, ..r }).collect();
        assert_eq!(p.frame().events, [Event::Board(want), Event::Left { player: 9 }]);

        // A format-1 header (no columns) still reads, with no columns.
        let v2 = header().encode();
        let len = u32::from_le_bytes(v2[10..14].try_into().unwrap()) as usize;
        let columns = 1 + "kills".len() + 1 + "deaths".len() + 1;
        let h = &v2[14..14 + len - columns];
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&1u16.to_le_bytes());
        v1.extend_from_slice(&(h.len() as u32).to_le_bytes());
        v1.extend_from_slice(h);
        v1.extend_from_slice(&crc32fast::hash(h).to_le_bytes());
        let (old, _) = RecordingHeader::decode(&v1).unwrap();
        assert_eq!(old, RecordingHeader { columns: Vec::new(), ..header() });
        // Format 3 is not this build's.
        let mut v3 = v2.clone();
        v3[8..10].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(RecordingHeader::decode(&v3), Err(RecordingError::Format { found: 3 }));
    }

    #[test]
    fn a_file_cut_off_plays_to_its_last_complete_chunk() {
        let (file, worlds, ends) = record(45);
        for cut in [ends[2] + 1, ends[3] - 1] {
            let rec = Recording::parse(Bytes::from(file[..cut].to_vec()), Some(&schema())).unwrap();
            assert_eq!(rec.chunks().len(), 3);
            assert!(rec.cut_off() > 0);
            let mut p = Playhead::new(rec, schema()).unwrap();
            assert!(p.advance_to(1000, |_| {}).unwrap());
            assert_eq!(*p.frame().snapshot, *worlds[29]);
        }
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let (file, _, _) = record(25);
        let parse = |b: &[u8]| Recording::parse(Bytes::from(b.to_vec()), Some(&schema())).map(|_| ());
        assert_eq!(parse(b"hello world, not a recording"), Err(RecordingError::NotARecording));
        assert_eq!(parse(&file[..5]), Err(RecordingError::Truncated));
        let mut f = file.clone();
        f[8] = 9;
        assert_eq!(parse(&f), Err(RecordingError::Format { found: 9 }));
        let mut other = header();
        other.protocol = 1;
        assert_eq!(parse(&other.encode()), Err(RecordingError::Protocol { found: 1 }));
        // Protocol 7 recorded what protocol 8 records: it plays.
        other.protocol = 7;
        assert_eq!(parse(&other.encode()), Ok(()));
        let mut s = Schema::new();
        s.register::<Wide>().unwrap();
        let err = Recording::parse(Bytes::from(file.clone()), Some(&s)).unwrap_err();
        assert!(matches!(err, RecordingError::Schema { .. }), "{err}");
        let mut f = file.clone();
        let n = f.len();
        f[n - 3] ^= 0x40;
        assert!(matches!(parse(&f), Err(RecordingError::Corrupt { what: "chunk checksum", .. })));
        let only_header = Recording::parse(Bytes::from(header().encode()), Some(&schema())).unwrap();
        assert_eq!(Playhead::new(only_header, schema()).unwrap_err(), RecordingError::Empty);
    }

    #[test]
    fn a_gap_starts_a_keyframe_and_says_so() {
        let (mut w, mut file) = RecordWriter::new(schema(), &header());
        let a = world(10, 4);
        let b = world(14, 6);
        file.extend(
            w.push(FrameIn { tick: 10, snapshot: Some(&a), events: &[], after_gap: false }).unwrap_or_default(),
        );
        file.extend(w.push(FrameIn { tick: 14, snapshot: Some(&b), events: &[], after_gap: true }).unwrap());
        file.extend(w.finish().unwrap());
        assert_eq!(w.counts(), (2, 2));
        let rec = Recording::parse(Bytes::from(file), None).unwrap();
        let frames = rec.frames(1, &schema()).unwrap();
        assert!(matches!(frames[0].events[0], Event::Note(_)));
        assert_eq!(*frames[0].snapshot, *b);
    }
}
