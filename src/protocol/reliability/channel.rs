//! One side of a connection above netcode: packet sequence numbers and acks, a newest-wins
//! state channel, a reliable ordered channel (with fragmentation) and unreliable events.
//!
//! Packet layout (inside a netcode payload):
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | frame: [`FRAME_PLAIN`] or [`FRAME_LZ4`] (the rest is an lz4 block) |
//! | 2 | packet sequence |
//! | 2 | newest sequence received from the peer (ack) |
//! | 4 | ack bits: bit *i* acknowledges `ack - 1 - i` |
//! | 2 | ack delay: how long the acked packet waited here before this one left, in units of [`ACK_DELAY_UNIT_US`] (the peer's RTT sample leaves it out); [`NOTHING_RECEIVED`] when nothing has been: the ack fields then acknowledge nothing |
//! | … | sections: `0x01` state, `0x02` reliable message, `0x03` event, `0x04` fragment |
//!
//! Sections carry LEB128 lengths. A reliable message or fragment carries its 16-bit message
//! id; fragments also carry their index and count. The sender resends a reliable message
//! until a packet carrying it is acknowledged; the receiver delivers each message once, in
//! order, and reassembles fragments with bounded memory.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::rtt::LinkEstimate;
use super::seq::{SequenceBuffer, newer};

/// First byte of an uncompressed game packet.
pub const FRAME_PLAIN: u8 = 0x01;
/// First byte of an lz4-compressed game packet.
pub const FRAME_LZ4: u8 = 0x02;
/// Header bytes before the sections: frame, sequence, ack, ack bits, ack delay.
pub const HEADER_BYTES: usize = 1 + 2 + 2 + 4 + 2;
/// The ack delay's unit on the wire, in microseconds (two bytes: up to 655 ms).
pub const ACK_DELAY_UNIT_US: u32 = 10;
/// The ack delay of a packet from a peer that has received nothing yet: its ack and ack bits
/// then acknowledge nothing (a real delay is at most one less).
pub const NOTHING_RECEIVED: u16 = u16::MAX;

const TAG_STATE: u8 = 0x01;
const TAG_RELIABLE: u8 = 0x02;
const TAG_EVENT: u8 = 0x03;
const TAG_FRAGMENT: u8 = 0x04;
/// Not on the wire: a received reliable section that did not fit ([`ChannelConfig::receive_bytes`]).
const TAG_REFUSED: u8 = 0xFF;
const FRAGMENT_BYTES: usize = 1024;
const MAX_RELIABLE_PER_PACKET: usize = 32;
/// Reliable messages and events in one packet, at most (the receiver parses into a fixed array).
const MAX_SECTIONS: usize = 64;
/// Packets remembered in each direction: two seconds of 60 Hz traffic, far past any ack
/// that still matters (a packet whose entry is gone counts as lost; its messages are resent).
const SENT_PACKETS: usize = 128;
/// Reliable message ids of packets in flight live in one ring shared by all of them, of 8
/// ids per message of the reliable window (a message is rarely sent more than twice a round
/// trip), at most enough for every packet of the sent ring full of messages. A packet whose
/// ids were overwritten before its ack came just has its messages resent.
const RELIABLE_IDS_PER_WINDOW_SLOT: usize = 8;
const ACK_BITS: u16 = 32;

/// Limits of an [`Channel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Largest packet built (the netcode payload limit is 1200).
    pub max_packet_bytes: usize,
    /// Largest reliable message; larger ones are refused with an error.
    pub max_message_bytes: usize,
    /// Reliable messages (or fragments) waiting for acknowledgement, at most.
    pub send_queue_messages: usize,
    /// Bytes of reliable messages waiting for acknowledgement, at most.
    pub send_queue_bytes: usize,
    /// Reliable message ids in flight at once (also the receiver's reorder window); rounded
    /// up to a power of two (1 to 4096), so that the window's slots map ids the same way on
    /// both sides of the u16 wrap.
    pub reliable_window: u16,
    /// Unreliable events waiting to be sent, and received events waiting to be read.
    pub event_queue: usize,
    /// Received reliable messages waiting to be read.
    pub inbox_messages: usize,
    /// Bytes of received messages held at most: reliable ones waiting in the reorder window,
    /// fragments waiting for the rest of their message, whole messages and events waiting to
    /// be read, each counted as its length plus [`HELD_MESSAGE_OVERHEAD`]. What a peer can
    /// make this side hold is bounded by this, whatever it sends. A reliable message that
    /// would not fit is not stored, and its packet is not acknowledged, so the peer sends it
    /// again later (as if it were lost; counted in [`ChannelStats::refused_packets`]); events
    /// make room by dropping the oldest. Messages waiting behind a gap in the order may use
    /// all but room for one whole message of [`ChannelConfig::max_message_bytes`] (so a
    /// reader that keeps reading is never stuck): keep this well above that.
    pub receive_bytes: usize,
    /// Compress packets with lz4 when that makes them smaller.
    pub compress: bool,
    /// Added to the frame byte ([`FRAME_PLAIN`], [`FRAME_LZ4`]) of every packet built, and
    /// expected on every packet received: a second channel in the same connection (the
    /// framework's own, [`SYSTEM_FRAME_TAG`]) is told apart by it. 0 for the game's.
    pub frame_tag: u8,
}

/// What one held received message counts for besides its bytes
/// ([`ChannelConfig::receive_bytes`]): its allocation and its place in a queue.
pub const HELD_MESSAGE_OVERHEAD: usize = 64;

/// The frame tag of the framework's own channel beside the game's (the scoreboard).
pub const SYSTEM_FRAME_TAG: u8 = 0x10;

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            max_packet_bytes: 1200,
            max_message_bytes: 64 * 1024,
            send_queue_messages: 1024,
            send_queue_bytes: 256 * 1024,
            reliable_window: 128,
            event_queue: 256,
            inbox_messages: 1024,
            receive_bytes: 1 << 20,
            compress: true,
            frame_tag: 0,
        }
    }
}

impl ChannelConfig {
    /// The framework's own channel beside the game's (the scoreboard): the defaults, tagged
    /// with [`SYSTEM_FRAME_TAG`].
    pub fn system() -> Self {
        Self { frame_tag: SYSTEM_FRAME_TAG, ..Self::default() }
    }
}

/// A message could not be queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The send queue is full: the peer is not acknowledging fast enough.
    #[error("send queue full ({0} waiting)")]
    QueueFull(usize),
    /// Larger than the channel allows.
    #[error("message of {size} bytes exceeds the {limit}-byte limit of this channel")]
    MessageTooLarge {
        /// Its size.
        size: usize,
        /// The channel's limit.
        limit: usize,
    },
    /// The message could not be serialized.
    #[error("serialization failed: {0}")]
    Serialize(String),
}

/// A received packet was unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    /// Truncated, unknown section, or inconsistent.
    #[error("malformed packet")]
    Malformed,
    /// An lz4 block that does not decompress within bounds.
    #[error("bad compressed packet")]
    Decompress,
    /// Fragments out of order or a reassembled message over the limit.
    #[error("fragment sequence violated")]
    Fragment,
    /// The application is not reading messages: the inbox is full.
    #[error("inbox full")]
    InboxFull,
}

/// Counters and estimates for a lagometer and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChannelStats {
    /// Packets built.
    pub packets_sent: u64,
    /// Packets accepted.
    pub packets_received: u64,
    /// Bytes of packets built.
    pub bytes_sent: u64,
    /// Bytes of packets accepted.
    pub bytes_received: u64,
    /// Bytes of sent packets the peer acknowledged (what the link delivered).
    pub bytes_acked: u64,
    /// Reliable messages sent again after a timeout.
    pub resends: u64,
    /// Packets sent compressed.
    pub compressed_packets: u64,
    /// Bytes lz4 saved.
    pub compression_saved_bytes: u64,
    /// Received events dropped because the application did not read them.
    pub events_dropped: u64,
    /// Duplicate or too-old packets ignored.
    pub duplicates: u64,
    /// Packets left unacknowledged because a reliable message in them did not fit in
    /// [`ChannelConfig::receive_bytes`] (what did fit was kept).
    pub refused_packets: u64,
}

thread_local! {
    /// lz4's hash table on this thread (shared by its channels).
    static LZ4_TABLE: std::cell::RefCell<lz4_flex::block::CompressTable> =
        std::cell::RefCell::new(lz4_flex::block::CompressTable::small());
    /// Packet bodies being built on this thread (shared by its channels).
    static BODY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `now` in microseconds, modulo 2^32.
fn micros(now: Duration) -> u32 {
    now.as_micros() as u32
}

#[derive(Debug, Clone, Copy)]
struct SentPacket {
    /// When it was sent, in microseconds modulo 2^32 (an RTT sample is a wrapping
    /// difference; a packet unacknowledged for 71 minutes is long gone from the ring).
    time_us: u32,
    acked: bool,
    /// Where its reliable message ids start in `reliable_ids` (a running count).
    reliable_first: u32,
    reliable_len: u8,
    /// Its length on the wire (above the connection layer), for the bytes acknowledged.
    bytes: u16,
}

#[derive(Debug, Clone)]
struct OutMessage {
    id: u16,
    data: Bytes,
    /// `Some((index, count))` for a fragment.
    fragment: Option<(u16, u16)>,
    last_sent: Option<Duration>,
    acked: bool,
}

#[derive(Debug, Clone)]
struct InMessage {
    data: Bytes,
    fragment: Option<(u16, u16)>,
}

/// One side of a connection.
#[derive(Debug)]
pub struct Channel {
    config: ChannelConfig,
    link: LinkEstimate,
    stats: ChannelStats,
    // Packets.
    local_seq: u16,
    sent: SequenceBuffer<SentPacket>,
    received: SequenceBuffer<()>,
    remote_newest: Option<u16>,
    /// When `remote_newest` arrived (microseconds, wrapping): a packet's ack delay is the
    /// time since.
    remote_newest_at: u32,
    /// The ack field for `remote_newest`, kept as packets arrive (bit i: packet
    /// `remote_newest - 1 - i` was received), so building a packet reads one word instead
    /// of 32 ring slots that are cold by then.
    received_bits: u32,
    loss_cursor: Option<u16>,
    /// The last ack processed and the packets it covered (bit i: `ack - i`), so a packet
    /// repeating acks already seen costs nothing.
    acks_seen: Option<(u16, u64)>,
    last_state: Option<u16>,
    // Reliable, sending.
    next_message_id: u16,
    reliable_ids: Vec<u16>,
    reliable_written: u32,
    send_queue: VecDeque<OutMessage>,
    send_queue_bytes: usize,
    // Reliable, receiving.
    next_expected: u16,
    window: Vec<Option<(u16, InMessage)>>,
    /// The fragments of the message being reassembled, joined when the last arrives (so a
    /// partial message costs its fragments' bytes, never a grown buffer's spare room).
    reassembly: Vec<Bytes>,
    reassembly_len: usize,
    reassembly_next: Option<(u16, u16)>,
    inbox: VecDeque<Bytes>,
    /// Bytes held in the window, the reassembly and the inbox, and in `events_in`, each
    /// message counted as [`held`] ([`ChannelConfig::receive_bytes`]).
    held_reliable: usize,
    held_events: usize,
    // Events.
    events_out: VecDeque<Bytes>,
    events_in: VecDeque<Bytes>,
    scratch: Vec<u8>,
    /// Packets to send before trying lz4 again, and the next such pause: after each packet
    /// lz4 could not shrink the pause doubles (up to [`LZ4_MAX_PAUSE`]); one it shrinks
    /// resets it. A stream of bit-packed snapshots then costs a compression attempt in 32
    /// packets, not every one.
    lz4_pause: (u8, u8),
    /// Events ever queued, and ever sent (or dropped unsent): an event's place in the stream.
    events_queued: u64,
    events_sent: u64,
    /// What was queued from this point on waits for [`Channel::release_held`].
    hold: Option<Mark>,
}

/// A point in the stream a channel sends ([`Channel::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The id of the first reliable message after it.
    id: u16,
    /// Events queued before it.
    events: u64,
}

/// The longest pause between lz4 attempts, in packets.
const LZ4_MAX_PAUSE: u8 = 32;

/// What a held received message of `len` bytes counts for.
fn held(len: usize) -> usize {
    len + HELD_MESSAGE_OVERHEAD
}

fn put_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: usize) -> usize {
    (usize::BITS - (v | 1).leading_zeros()).div_ceil(7) as usize
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Result<u8, ReceiveError> {
        let b = *self.buf.get(self.pos).ok_or(ReceiveError::Malformed)?;
        self.pos += 1;
        Ok(b)
    }
    fn u16(&mut self) -> Result<u16, ReceiveError> {
        Ok(u16::from(self.u8()?) | u16::from(self.u8()?) << 8)
    }
    fn u32(&mut self) -> Result<u32, ReceiveError> {
        Ok(u32::from(self.u16()?) | u32::from(self.u16()?) << 16)
    }
    fn varint(&mut self) -> Result<usize, ReceiveError> {
        let mut v = 0usize;
        for shift in (0..35).step_by(7) {
            let b = self.u8()?;
            v |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ReceiveError::Malformed)
    }
    fn bytes(&mut self, n: usize) -> Result<(usize, usize), ReceiveError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or(ReceiveError::Malformed)?;
        let range = (self.pos, end);
        self.pos = end;
        Ok(range)
    }
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

/// A packet's sections past its header: the state blob's range, and the others (tag, id,
/// fragment index and count, range), at most [`MAX_SECTIONS`].
struct Sections {
    state: Option<(usize, usize)>,
    list: [(u8, u16, u16, u16, usize, usize); MAX_SECTIONS],
    n: usize,
}

fn read_sections(c: &mut Cursor<'_>) -> Result<Sections, ReceiveError> {
    let mut out = Sections { state: None, list: [(0u8, 0u16, 0u16, 0u16, 0usize, 0usize); MAX_SECTIONS], n: 0 };
    while !c.done() {
        let tag = c.u8()?;
        let (id, index, count) = match tag {
            TAG_RELIABLE => (c.u16()?, 0, 0),
            TAG_FRAGMENT => (c.u16()?, c.u16()?, c.u16()?),
            TAG_STATE | TAG_EVENT => (0, 0, 0),
            _ => return Err(ReceiveError::Malformed),
        };
        let len = c.varint()?;
        let (s, e) = c.bytes(len)?;
        if tag == TAG_STATE {
            out.state = Some((s, e));
            continue;
        }
        if out.n == out.list.len() {
            return Err(ReceiveError::Malformed);
        }
        out.list[out.n] = (tag, id, index, count, s, e);
        out.n += 1;
    }
    Ok(out)
}

/// What [`peek`] read of a packet without a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked<'a> {
    /// Its state blob, if it carries one.
    pub state: Option<&'a [u8]>,
    /// Whether it carries messages or events (anything besides the state and the acks).
    pub messages: bool,
}

/// Reads a packet of a channel whose frames carry `frame_tag` as [`Channel::receive`] would,
/// without the channel: its state blob and whether it carries messages. Nothing is
/// acknowledged or kept; a compressed packet is decompressed into `scratch`. For a reader
/// that acts on the state at once (the socket actor, which hands inputs to the world) and
/// leaves the packet to the channel's owner for the rest. A packet the channel would refuse
/// as malformed is refused here too.
///
/// # Errors
/// [`ReceiveError::Malformed`] or [`ReceiveError::Decompress`].
pub fn peek<'a>(packet: &'a [u8], frame_tag: u8, scratch: &'a mut Vec<u8>) -> Result<Peeked<'a>, ReceiveError> {
    let (&frame, rest) = packet.split_first().ok_or(ReceiveError::Malformed)?;
    let body: &[u8] = match frame.wrapping_sub(frame_tag) {
        FRAME_PLAIN => rest,
        FRAME_LZ4 => {
            scratch.clear();
            scratch.resize(MAX_PEEK_BYTES, 0);
            let n = lz4_flex::block::decompress_into(rest, scratch).map_err(|_| ReceiveError::Decompress)?;
            scratch.truncate(n);
            scratch
        }
        _ => return Err(ReceiveError::Malformed),
    };
    let mut c = Cursor { buf: body, pos: 0 };
    for _ in 0..HEADER_BYTES - 1 {
        c.u8()?;
    }
    let sections = read_sections(&mut c)?;
    Ok(Peeked { state: sections.state.map(|(s, e)| &body[s..e]), messages: sections.n > 0 })
}

/// The most a compressed packet [`peek`] reads may hold, decompressed: twice the largest
/// packet, as [`Channel::receive`] allows.
const MAX_PEEK_BYTES: usize = 2 * 1200;

impl Channel {
    /// A fresh channel.
    pub fn new(config: ChannelConfig) -> Self {
        // A power of two: with another size, two ids less than a window apart across the
        // wrap (65 500 and 500 in a window of 1000) shared a slot, and one was lost.
        let window = config.reliable_window.clamp(1, 4096).next_power_of_two();
        Self {
            config: ChannelConfig { reliable_window: window, ..config },
            link: LinkEstimate::default(),
            stats: ChannelStats::default(),
            local_seq: 0,
            sent: SequenceBuffer::new(SENT_PACKETS),
            received: SequenceBuffer::new(SENT_PACKETS),
            remote_newest: None,
            remote_newest_at: 0,
            received_bits: 0,
            loss_cursor: None,
            acks_seen: None,
            last_state: None,
            next_message_id: 0,
            reliable_ids: Vec::new(),
            reliable_written: 0,
            send_queue: VecDeque::new(),
            send_queue_bytes: 0,
            next_expected: 0,
            window: Vec::new(),
            reassembly: Vec::new(),
            reassembly_len: 0,
            reassembly_next: None,
            inbox: VecDeque::new(),
            held_reliable: 0,
            held_events: 0,
            events_out: VecDeque::new(),
            events_in: VecDeque::new(),
            scratch: Vec::new(),
            lz4_pause: (0, 0),
            events_queued: 0,
            events_sent: 0,
            hold: None,
        }
    }

    /// A point in what this channel sends: the reliable messages and events queued so far
    /// are before it, everything queued from now on after it.
    pub fn mark(&self) -> Mark {
        Mark { id: self.next_message_id, events: self.events_queued }
    }

    /// Keeps back what was queued after `mark` (queued and counted as ever, but put in no
    /// packet) until [`Channel::release_held`] or another line; what came before goes on as
    /// usual. The server draws one when it tells a player it is in a new world, so that
    /// nothing the new world sends reaches the client before that notice.
    pub fn hold_from(&mut self, mark: Mark) {
        self.hold = Some(mark);
    }

    /// Lets go what [`Channel::hold_from`] kept back: it goes in the next packets, in order.
    pub fn release_held(&mut self) {
        self.hold = None;
    }

    /// Whether everything before `mark` is through: every reliable message acknowledged
    /// (the peer has had them all, and delivers them in order) and every event sent.
    pub fn through(&self, mark: Mark) -> bool {
        // The queue holds consecutive ids from its oldest unacknowledged one.
        let acked = self.send_queue.front().is_none_or(|m| {
            let ahead = mark.id.wrapping_sub(m.id);
            // The mark at or before the front (within half the id space): all before it is gone.
            ahead == 0 || ahead > u16::MAX / 2
        });
        acked && self.events_sent >= mark.events
    }

    /// How many of the queue's messages, from its front, may go out now (all but the held).
    fn sendable(&self) -> usize {
        match (self.hold, self.send_queue.front()) {
            (Some(h), Some(front)) => usize::from(h.id.wrapping_sub(front.id)).min(self.send_queue.len()),
            _ => self.send_queue.len(),
        }
    }

    /// The link estimates (RTT, jitter, loss).
    pub fn link(&self) -> &LinkEstimate {
        &self.link
    }

    /// Counters.
    pub fn stats(&self) -> &ChannelStats {
        &self.stats
    }

    /// Reliable messages (or fragments) not yet acknowledged.
    pub fn unacked_messages(&self) -> usize {
        self.send_queue.len()
    }

    /// Whether a reliable message (or fragment) is due to go out at `now`: never sent, or
    /// unacknowledged past the resend timeout, and within the window.
    pub fn has_due(&self, now: Duration) -> bool {
        let timeout = self.link.resend_timeout();
        let oldest = self.send_queue.front().map(|m| m.id);
        self.send_queue
            .iter()
            .take(self.sendable())
            .take_while(|m| oldest.is_none_or(|o| m.id.wrapping_sub(o) < self.config.reliable_window))
            .any(|m| !m.acked && m.last_sent.is_none_or(|t| now.saturating_sub(t) >= timeout))
    }

    /// Whether events wait to be sent.
    pub fn has_events(&self) -> bool {
        !self.events_out.is_empty() && self.hold.is_none_or(|h| self.events_sent < h.events)
    }

    /// Queues a reliable message: delivered once and in order, resent until acknowledged.
    /// Messages larger than about 1 KiB travel as fragments.
    ///
    /// # Errors
    /// When it exceeds the message limit or the send queue is full (nothing is queued then).
    pub fn send_reliable(&mut self, data: Bytes) -> Result<(), QueueError> {
        let limit = self.config.max_message_bytes;
        if data.len() > limit {
            return Err(QueueError::MessageTooLarge { size: data.len(), limit });
        }
        let parts = data.len().div_ceil(FRAGMENT_BYTES).max(1);
        if self.send_queue.len() + parts > self.config.send_queue_messages
            || self.send_queue_bytes + data.len() > self.config.send_queue_bytes
        {
            return Err(QueueError::QueueFull(self.send_queue.len()));
        }
        self.send_queue_bytes += data.len();
        if parts == 1 {
            let id = self.next_message_id;
            self.next_message_id = id.wrapping_add(1);
            self.send_queue.push_back(OutMessage { id, data, fragment: None, last_sent: None, acked: false });
            return Ok(());
        }
        for i in 0..parts {
            let id = self.next_message_id;
            self.next_message_id = id.wrapping_add(1);
            let chunk = data.slice(i * FRAGMENT_BYTES..((i + 1) * FRAGMENT_BYTES).min(data.len()));
            let fragment = Some((i as u16, parts as u16));
            self.send_queue.push_back(OutMessage { id, data: chunk, fragment, last_sent: None, acked: false });
        }
        Ok(())
    }

    /// Serializes `msg` (postcard) and queues it reliably.
    ///
    /// # Errors
    /// As [`Channel::send_reliable`], or when serialization fails.
    pub fn send_message<T: Serialize>(&mut self, msg: &T) -> Result<(), QueueError> {
        let v = postcard::to_allocvec(msg).map_err(|e| QueueError::Serialize(e.to_string()))?;
        self.send_reliable(Bytes::from(v))
    }

    /// Queues an unreliable event for the next packet with room.
    ///
    /// # Errors
    /// When it cannot fit in any packet (use the reliable channel), or the queue is full.
    pub fn send_event(&mut self, data: Bytes) -> Result<(), QueueError> {
        let limit = self.config.max_packet_bytes - HEADER_BYTES - 1 - varint_len(data.len());
        if data.len() > limit {
            return Err(QueueError::MessageTooLarge { size: data.len(), limit });
        }
        if self.events_out.len() >= self.config.event_queue {
            return Err(QueueError::QueueFull(self.events_out.len()));
        }
        self.events_out.push_back(data);
        self.events_queued += 1;
        Ok(())
    }

    /// Serializes `msg` (postcard) and queues it as an unreliable event.
    ///
    /// # Errors
    /// As [`Channel::send_event`], or when serialization fails.
    pub fn send_event_message<T: Serialize>(&mut self, msg: &T) -> Result<(), QueueError> {
        let v = postcard::to_allocvec(msg).map_err(|e| QueueError::Serialize(e.to_string()))?;
        self.send_event(Bytes::from(v))
    }

    /// The next reliable message received, in order.
    pub fn recv_reliable(&mut self) -> Option<Bytes> {
        let m = self.inbox.pop_front()?;
        self.held_reliable -= held(m.len());
        Some(m)
    }

    /// The next reliable message, deserialized (postcard).
    pub fn recv_message<T: DeserializeOwned>(&mut self) -> Option<Result<T, postcard::Error>> {
        self.recv_reliable().map(|b| postcard::from_bytes(&b))
    }

    /// The next event received.
    pub fn recv_event(&mut self) -> Option<Bytes> {
        let e = self.events_in.pop_front()?;
        self.held_events -= held(e.len());
        Some(e)
    }

    /// The next event, deserialized (postcard).
    pub fn recv_event_message<T: DeserializeOwned>(&mut self) -> Option<Result<T, postcard::Error>> {
        self.recv_event().map(|b| postcard::from_bytes(&b))
    }

    /// Bytes of received messages held now (see [`ChannelConfig::receive_bytes`], which
    /// this never exceeds).
    pub fn received_bytes_held(&self) -> usize {
        self.held_reliable + self.held_events
    }

    fn ack_bits(&self) -> (u16, u32) {
        self.remote_newest.map_or((0, 0), |ack| (ack, self.received_bits))
    }

    /// Room left for a state blob of `len` bytes plus everything else that is due.
    pub fn state_room(&self) -> usize {
        self.config.max_packet_bytes - HEADER_BYTES - 1 - varint_len(self.config.max_packet_bytes)
    }

    /// Builds the next packet into `out` (at least `max_packet_bytes` long): the state blob
    /// (newest-wins, for example a snapshot or the latest inputs), then reliable messages that
    /// are due, then events, as room allows. Returns its length.
    ///
    /// # Panics
    /// Never; a state blob that does not fit is left out and the packet still goes.
    pub fn build_packet(&mut self, now: Duration, state: Option<&[u8]>, out: &mut [u8]) -> usize {
        let limit = self.config.max_packet_bytes.min(out.len());
        // The body is assembled in the thread's buffer (the channel's own is only for
        // decompressed packets received, which may be handed back borrowed).
        let mut body = BODY.with_borrow_mut(std::mem::take);
        body.clear();
        let seq = self.local_seq;
        self.local_seq = seq.wrapping_add(1);
        let (ack, bits) = self.ack_bits();
        // How long the packet acknowledged waited here: the peer takes it off its round trip.
        let delay =
            self.remote_newest.map_or(0, |_| micros(now).wrapping_sub(self.remote_newest_at) / ACK_DELAY_UNIT_US);
        body.push(FRAME_PLAIN + self.config.frame_tag);
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&ack.to_le_bytes());
        body.extend_from_slice(&bits.to_le_bytes());
        // Before anything has come, the ack fields mean nothing, and the delay says so (an ack
        // of 0 would read as "your packet 0 arrived").
        let delay = match self.remote_newest {
            Some(_) => delay.min(u32::from(NOTHING_RECEIVED) - 1) as u16,
            None => NOTHING_RECEIVED,
        };
        body.extend_from_slice(&delay.to_le_bytes());
        if let Some(s) = state.filter(|s| HEADER_BYTES + 1 + varint_len(s.len()) + s.len() <= limit) {
            body.push(TAG_STATE);
            put_varint(&mut body, s.len());
            body.extend_from_slice(s);
        }
        let mut sent = SentPacket {
            time_us: micros(now),
            acked: false,
            reliable_first: self.reliable_written,
            reliable_len: 0,
            bytes: 0,
        };
        let timeout = self.link.resend_timeout();
        let oldest = self.send_queue.front().map(|m| m.id);
        let sendable = self.sendable();
        for m in self.send_queue.iter_mut().take(sendable) {
            if usize::from(sent.reliable_len) == MAX_RELIABLE_PER_PACKET {
                break;
            }
            if oldest.is_some_and(|o| m.id.wrapping_sub(o) >= self.config.reliable_window) {
                break;
            }
            if m.acked || m.last_sent.is_some_and(|t| now.saturating_sub(t) < timeout) {
                continue;
            }
            let extra = if m.fragment.is_some() { 4 } else { 0 };
            let need = 1 + 2 + extra + varint_len(m.data.len()) + m.data.len();
            if body.len() + need > limit {
                continue;
            }
            match m.fragment {
                None => {
                    body.push(TAG_RELIABLE);
                    body.extend_from_slice(&m.id.to_le_bytes());
                }
                Some((index, count)) => {
                    body.push(TAG_FRAGMENT);
                    body.extend_from_slice(&m.id.to_le_bytes());
                    body.extend_from_slice(&index.to_le_bytes());
                    body.extend_from_slice(&count.to_le_bytes());
                }
            }
            put_varint(&mut body, m.data.len());
            body.extend_from_slice(&m.data);
            if m.last_sent.is_some() {
                self.stats.resends += 1;
            }
            m.last_sent = Some(now);
            if self.reliable_ids.is_empty() {
                let n = usize::from(self.config.reliable_window) * RELIABLE_IDS_PER_WINDOW_SLOT;
                self.reliable_ids = vec![0; n.min(SENT_PACKETS * MAX_RELIABLE_PER_PACKET)];
            }
            let ring = self.reliable_ids.len();
            self.reliable_ids[self.reliable_written as usize % ring] = m.id;
            self.reliable_written = self.reliable_written.wrapping_add(1);
            sent.reliable_len += 1;
        }
        let mut sections = usize::from(sent.reliable_len);
        while let Some(e) = self.events_out.front() {
            if self.hold.is_some_and(|h| self.events_sent >= h.events) {
                break;
            }
            let need = 1 + varint_len(e.len()) + e.len();
            if body.len() + need > limit || sections >= MAX_SECTIONS {
                break;
            }
            sections += 1;
            body.push(TAG_EVENT);
            put_varint(&mut body, e.len());
            body.extend_from_slice(e);
            self.events_out.pop_front();
            self.events_sent += 1;
        }
        let mut len = body.len();
        out[..len].copy_from_slice(&body);
        if self.config.compress && len > 64 && self.lz4_pause.0 > 0 {
            self.lz4_pause.0 -= 1;
        } else if self.config.compress && len > 64 {
            // lz4 only when it wins; bit-packed snapshots rarely shrink, text-like messages do.
            // The hash table is the thread's (lz4_flex would allocate 16 KiB a call).
            out[0] = FRAME_LZ4 + self.config.frame_tag;
            let compressed = LZ4_TABLE
                .with_borrow_mut(|t| lz4_flex::block::compress_into_with_table(&body[1..], &mut out[1..limit], t));
            match compressed {
                Ok(n) if n + 1 < len => {
                    self.stats.compressed_packets += 1;
                    self.stats.compression_saved_bytes += (len - n - 1) as u64;
                    len = n + 1;
                    self.lz4_pause = (0, 0);
                }
                _ => {
                    out[..len].copy_from_slice(&body);
                    let next = (self.lz4_pause.1.max(1) * 2).min(LZ4_MAX_PAUSE);
                    self.lz4_pause = (self.lz4_pause.1, next);
                }
            }
        }
        BODY.with_borrow_mut(|b| *b = body);
        sent.bytes = len.min(usize::from(u16::MAX)) as u16;
        self.sent.insert(seq, sent);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        len
    }

    /// Takes one packet from the peer: processes its acks, delivers its reliable messages and
    /// events to the queues, and returns its state blob if it is the newest seen.
    ///
    /// # Errors
    /// When the packet is malformed; nothing of it is applied then, except acks read before the
    /// fault.
    pub fn receive<'a>(&'a mut self, now: Duration, packet: &'a [u8]) -> Result<Option<&'a [u8]>, ReceiveError> {
        let (&frame, rest) = packet.split_first().ok_or(ReceiveError::Malformed)?;
        let compressed = match frame.wrapping_sub(self.config.frame_tag) {
            FRAME_PLAIN => false,
            FRAME_LZ4 => true,
            _ => return Err(ReceiveError::Malformed),
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        if compressed {
            scratch.clear();
            scratch.resize(self.config.max_packet_bytes * 2, 0);
            match lz4_flex::block::decompress_into(rest, &mut scratch) {
                Ok(n) => scratch.truncate(n),
                Err(_) => {
                    self.scratch = scratch;
                    return Err(ReceiveError::Decompress);
                }
            }
        }
        let body: &[u8] = if compressed { &scratch } else { rest };
        let result = self.receive_body(now, body);
        // Keep the decompressed body: a returned state may live in it.
        self.scratch = scratch;
        self.stats.bytes_received += packet.len() as u64;
        Ok(result?.map(|(s, e)| if compressed { &self.scratch[s..e] } else { &rest[s..e] }))
    }

    fn receive_body(&mut self, now: Duration, body: &[u8]) -> Result<Option<(usize, usize)>, ReceiveError> {
        let mut c = Cursor { buf: body, pos: 0 };
        let seq = c.u16()?;
        let ack = c.u16()?;
        let bits = c.u32()?;
        let delay = c.u16()?;
        let ack_delay = Duration::from_micros(u64::from(delay) * u64::from(ACK_DELAY_UNIT_US));
        // Not newer, and older than the ring remembers: it cannot be told from a duplicate
        // (this includes a sequence exactly half the space away, which is neither newer nor
        // older and would otherwise take the newest packet's slot in the ring).
        let too_old =
            self.remote_newest.is_some_and(|n| !newer(seq, n) && usize::from(n.wrapping_sub(seq)) >= SENT_PACKETS);
        if self.received.get(seq).is_some() || too_old {
            self.stats.duplicates += 1;
            return Ok(None);
        }
        // Parse every section before applying anything, so a malformed packet changes nothing.
        let Sections { state, list: mut sections, n } = read_sections(&mut c)?;
        // What it adds must fit in what may be held (`receive_bytes`). A reliable message
        // that does not is not stored, and then the packet is not acknowledged either: the
        // peer sends it again later, as if it had been lost. The next message in order may
        // use all the room; one further ahead (waiting in the reorder window behind a gap)
        // leaves room for a whole message to be reassembled in order, so a peer whose
        // messages are read always gets the gap filled.
        let mut taken_whole = true;
        let mut holding = self.held_reliable;
        let ahead_limit = self.config.receive_bytes.saturating_sub(self.progress_reserve());
        for section in &mut sections[..n] {
            let (tag, id, .., s, e) = *section;
            if tag == TAG_EVENT || !self.storable(id) {
                continue;
            }
            let limit = if id == self.next_expected { self.config.receive_bytes } else { ahead_limit };
            if holding + held(e - s) <= limit {
                holding += held(e - s);
            } else {
                section.0 = TAG_REFUSED;
                taken_whole = false;
            }
        }
        if !taken_whole {
            self.stats.refused_packets += 1;
        }
        match self.remote_newest {
            // Not acknowledged: it looks lost to the peer.
            _ if !taken_whole => {}
            Some(r) if !newer(seq, r) => {
                // An older packet: its bit, if it is within the field.
                let d = u32::from(r.wrapping_sub(seq));
                if (1..=u32::from(ACK_BITS)).contains(&d) {
                    self.received_bits |= 1 << (d - 1);
                }
            }
            newest => {
                // The new newest. The field slides by the distance (the old newest becomes
                // bit d - 1), and the sequences skipped, not received in this lap of the
                // space, are emptied in the ring.
                self.received_bits = match newest {
                    None => 0,
                    Some(r) => {
                        let d = u32::from(seq.wrapping_sub(r));
                        self.received.clear_from(r.wrapping_add(1), d as usize - 1);
                        if d > ACK_BITS.into() {
                            0
                        } else {
                            ((u64::from(self.received_bits) << d) | (1u64 << (d - 1))) as u32
                        }
                    }
                };
                self.remote_newest = Some(seq);
                self.remote_newest_at = micros(now);
            }
        }
        // After the emptying above, which may cover this sequence's slot.
        if taken_whole {
            self.received.insert(seq, ());
            self.stats.packets_received += 1;
        }
        if delay != NOTHING_RECEIVED {
            self.process_acks(now, ack, bits, ack_delay);
        }
        for &(tag, id, index, count, s, e) in &sections[..n] {
            let data = &body[s..e];
            match tag {
                TAG_EVENT => {
                    let cost = held(data.len());
                    while self.events_in.len() >= self.config.event_queue || !self.fits(cost) {
                        if !self.drop_oldest_event() {
                            break;
                        }
                    }
                    if self.events_in.len() < self.config.event_queue && self.fits(cost) {
                        self.events_in.push_back(Bytes::copy_from_slice(data));
                        self.held_events += cost;
                    } else {
                        self.stats.events_dropped += 1;
                    }
                }
                TAG_REFUSED => {}
                _ => {
                    let fragment = (tag == TAG_FRAGMENT).then_some((index, count));
                    self.accept_reliable(id, data, fragment)?;
                }
            }
        }
        // Reliable messages after the events may have taken their room.
        while !self.fits(0) && self.drop_oldest_event() {}
        self.deliver()?;
        let fresh_state = state.filter(|_| self.last_state.is_none_or(|l| newer(seq, l)));
        if fresh_state.is_some() {
            self.last_state = Some(seq);
        }
        Ok(fresh_state)
    }

    /// Marks what `ack` and `bits` acknowledge. The round trip is sampled from `ack` alone
    /// (the newest packet the peer had, when it is newly acknowledged), less `ack_delay`, the
    /// time it waited at the peer before this packet left (RFC 9002 §5.3): the wait for the
    /// peer's next tick or frame is not network time. A peer that overstates its delay only
    /// shrinks its own estimate (never below zero; resends keep their 20 ms floor).
    fn process_acks(&mut self, now: Duration, ack: u16, bits: u32, ack_delay: Duration) {
        if self.sent.get(ack).is_none() {
            return;
        }
        // Bit i: packet `ack - i`. Only the packets this ack covers that the last one did
        // not are looked at (most packets repeat what the one before acknowledged).
        let covered = 1 | u64::from(bits) << 1;
        let mut fresh = covered;
        if let Some((prev, prev_covered)) = self.acks_seen {
            let d = ack.wrapping_sub(prev);
            let before = if d <= ACK_BITS { prev_covered << d } else { 0 };
            fresh &= !before;
            if !newer(prev, ack) {
                self.acks_seen = Some((ack, covered | before));
            }
        } else {
            self.acks_seen = Some((ack, covered));
        }
        while fresh != 0 {
            let i = fresh.trailing_zeros();
            fresh &= fresh - 1;
            let s = ack.wrapping_sub(i as u16);
            let Some(p) = self.sent.get_mut(s) else { continue };
            if p.acked {
                continue;
            }
            p.acked = true;
            let p = *p;
            self.stats.bytes_acked += u64::from(p.bytes);
            if i == 0 {
                let round_trip = Duration::from_micros(u64::from(micros(now).wrapping_sub(p.time_us)));
                self.link.rtt_sample(round_trip.saturating_sub(ack_delay));
            }
            self.link.delivery(true);
            let len = u32::from(p.reliable_len);
            let ring = self.reliable_ids.len();
            if len == 0 || self.reliable_written.wrapping_sub(p.reliable_first) > ring as u32 {
                continue; // nothing reliable, or its ids were overwritten: those will be resent
            }
            // The queue holds consecutive ids from its front: a message's place is its id's
            // distance from the front's (a linear search here cost O(queue) an id, which
            // under overload, with hundreds queued, was most of a packet's handling).
            let front = self.send_queue.front().map_or(0, |m| m.id);
            for k in 0..len {
                let id = self.reliable_ids[p.reliable_first.wrapping_add(k) as usize % ring];
                if let Some(m) = self.send_queue.get_mut(usize::from(id.wrapping_sub(front))).filter(|m| m.id == id) {
                    m.acked = true;
                }
            }
        }
        while self.send_queue.front().is_some_and(|m| m.acked) {
            if let Some(m) = self.send_queue.pop_front() {
                self.send_queue_bytes = self.send_queue_bytes.saturating_sub(m.data.len());
            }
        }
        // Packets that fell out of the ack window unacknowledged were lost.
        let horizon = ack.wrapping_sub(ACK_BITS + 1);
        let mut cursor = self.loss_cursor.unwrap_or(horizon);
        while newer(horizon, cursor) || cursor == horizon {
            if self.sent.get(cursor).is_some_and(|p| !p.acked) {
                self.link.delivery(false);
            }
            cursor = cursor.wrapping_add(1);
            if cursor == horizon.wrapping_add(1) {
                break;
            }
        }
        self.loss_cursor = Some(cursor);
    }

    /// Room kept for messages in order ([`ChannelConfig::receive_bytes`]): one whole
    /// message of the largest size, in fragments as a sender makes them, and one packet more.
    fn progress_reserve(&self) -> usize {
        let max = self.config.max_message_bytes;
        max + max.div_ceil(FRAGMENT_BYTES) * HELD_MESSAGE_OVERHEAD + held(self.config.max_packet_bytes)
    }

    /// Whether `cost` more bytes fit beside what is held.
    fn fits(&self, cost: usize) -> bool {
        self.held_reliable + self.held_events + cost <= self.config.receive_bytes
    }

    /// Drops the oldest received event; false when there was none.
    fn drop_oldest_event(&mut self) -> bool {
        let Some(old) = self.events_in.pop_front() else { return false };
        self.held_events -= held(old.len());
        self.stats.events_dropped += 1;
        true
    }

    /// Whether a reliable message (or fragment) with this id would be stored: within the
    /// window and not held already.
    fn storable(&self, id: u16) -> bool {
        if id.wrapping_sub(self.next_expected) >= self.config.reliable_window {
            return false;
        }
        let w = self.window.len();
        w == 0 || self.window[id as usize % w].as_ref().is_none_or(|(sid, _)| *sid != id)
    }

    fn accept_reliable(&mut self, id: u16, data: &[u8], fragment: Option<(u16, u16)>) -> Result<(), ReceiveError> {
        let ahead = id.wrapping_sub(self.next_expected);
        if ahead >= self.config.reliable_window {
            return Ok(()); // already delivered (a resend), or beyond what the sender may send
        }
        if self.window.is_empty() {
            // Allocated with the first reliable message: most peers' clients never send one.
            self.window = (0..self.config.reliable_window).map(|_| None).collect();
        }
        let w = self.window.len();
        let slot = &mut self.window[id as usize % w];
        if slot.as_ref().is_none_or(|(sid, _)| *sid != id) {
            let replaced = slot.replace((id, InMessage { data: Bytes::copy_from_slice(data), fragment }));
            self.held_reliable += held(data.len());
            if let Some((_, old)) = replaced {
                self.held_reliable -= held(old.data.len());
            }
        }
        Ok(())
    }

    /// Forgets a partly reassembled message.
    fn drop_reassembly(&mut self) {
        self.held_reliable -= self.reassembly_len + self.reassembly.len() * HELD_MESSAGE_OVERHEAD;
        self.reassembly.clear();
        self.reassembly_len = 0;
        self.reassembly_next = None;
    }

    fn deliver(&mut self) -> Result<(), ReceiveError> {
        let w = self.window.len();
        if w == 0 {
            return Ok(());
        }
        loop {
            let slot = &mut self.window[self.next_expected as usize % w];
            let Some((_, msg)) = slot.take_if(|(sid, _)| *sid == self.next_expected) else { break };
            if self.inbox.len() >= self.config.inbox_messages {
                *slot = Some((self.next_expected, msg));
                return Err(ReceiveError::InboxFull);
            }
            self.next_expected = self.next_expected.wrapping_add(1);
            match msg.fragment {
                None => {
                    if self.reassembly_next.is_some() {
                        self.held_reliable -= held(msg.data.len());
                        self.drop_reassembly();
                        return Err(ReceiveError::Fragment);
                    }
                    self.inbox.push_back(msg.data);
                }
                Some((index, count)) => {
                    let expected = self.reassembly_next.map_or(0, |(i, _)| i);
                    if index != expected
                        || count < 2
                        || index >= count
                        || self.reassembly_next.is_some_and(|(_, c)| c != count)
                        || self.reassembly_len + msg.data.len() > self.config.max_message_bytes
                    {
                        // The fragment itself goes too (it was held in the window).
                        self.held_reliable -= held(msg.data.len());
                        self.drop_reassembly();
                        return Err(ReceiveError::Fragment);
                    }
                    self.reassembly_len += msg.data.len();
                    self.reassembly.push(msg.data);
                    if index + 1 == count {
                        let mut whole = Vec::with_capacity(self.reassembly_len);
                        for part in &self.reassembly {
                            whole.extend_from_slice(part);
                        }
                        // One message held where its fragments were: never more.
                        self.drop_reassembly();
                        self.held_reliable += held(whole.len());
                        self.inbox.push_back(Bytes::from(whole));
                    } else {
                        self.reassembly_next = Some((index + 1, count));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A hand-made packet: header (no acks), then the sections, as a hostile peer may send
    /// them (any id, any index and count, any length that fits).
    fn raw_packet(seq: u16, sections: &[(u8, u16, u16, u16, usize)]) -> Vec<u8> {
        let mut p = vec![FRAME_PLAIN];
        p.extend_from_slice(&seq.to_le_bytes());
        p.extend_from_slice(&[0; 8]);
        for &(tag, id, index, count, len) in sections {
            p.push(tag);
            if tag != TAG_EVENT {
                p.extend_from_slice(&id.to_le_bytes());
            }
            if tag == TAG_FRAGMENT {
                p.extend_from_slice(&index.to_le_bytes());
                p.extend_from_slice(&count.to_le_bytes());
            }
            put_varint(&mut p, len);
            p.extend(std::iter::repeat_n(0xAB, len));
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Whatever a peer sends (reliable messages and fragments in and out of order, any
        /// sizes, events), and whether or not the application reads, the bytes held never
        /// pass `receive_bytes`, and the count is exact: what is held is what can be read.
        #[test]
        fn a_peer_cannot_make_a_channel_hold_more_than_its_receive_bytes(
            packets in prop::collection::vec(
                (
                    prop::collection::vec(
                        (0u8..4, 0u16..200, 0u16..70, 0u16..70, 0usize..1100),
                        1..6,
                    ),
                    any::<bool>(),
                ),
                1..400,
            ),
            budget in 4usize..200_000,
        ) {
            let mut c = Channel::new(ChannelConfig { receive_bytes: budget, ..ChannelConfig::default() });
            for (seq, (sections, read)) in packets.iter().enumerate() {
                let sections: Vec<_> = sections
                    .iter()
                    .map(|&(k, id, index, count, len)| {
                        let tag = [TAG_RELIABLE, TAG_FRAGMENT, TAG_FRAGMENT, TAG_EVENT][usize::from(k)];
                        // Fragments mostly follow on from the next id, so that messages complete.
                        let id = if tag == TAG_FRAGMENT { c.next_expected.wrapping_add(id % 8) } else { id };
                        (tag, id, index, count.max(index + 1), len.min(1000))
                    })
                    .collect();
                let packet = raw_packet(seq as u16, &sections);
                if packet.len() <= 1200 {
                    let _ = c.receive(Duration::from_millis(seq as u64), &packet);
                }
                prop_assert!(c.received_bytes_held() <= budget, "held {} of {}", c.received_bytes_held(), budget);
                if *read {
                    while c.recv_reliable().is_some() {}
                    while c.recv_event().is_some() {}
                }
            }
            // Emptied, only the window and a partial message remain counted.
            while c.recv_reliable().is_some() {}
            while c.recv_event().is_some() {}
            let window: usize = c.window.iter().flatten().map(|(_, m)| held(m.data.len())).sum();
            let partial: usize = c.reassembly.iter().map(|f| held(f.len())).sum();
            prop_assert_eq!(c.received_bytes_held(), window + partial);
        }
    }

    /// Reliable messages whose ids wrap round u16 arrive once and in order, whatever the
    /// configured window and however the packets are reordered (a window of 1000 used to
    /// put ids 65 500 and 500 in one slot: one message lost, the rest stalled behind it).
    #[test]
    fn reliable_ids_wrap_cleanly_for_any_window() {
        for window in [128u16, 1000, 300] {
            let config = ChannelConfig { reliable_window: window, ..ChannelConfig::default() };
            let (mut a, mut b) = (Channel::new(config), Channel::new(config));
            a.next_message_id = 65_400;
            b.next_expected = 65_400;
            let n = usize::from(a.config.reliable_window).min(a.config.send_queue_messages);
            for i in 0..n {
                a.send_reliable(Bytes::from((i as u32).to_le_bytes().to_vec())).unwrap();
            }
            let now = Duration::from_millis(1);
            let mut packets = Vec::new();
            let mut out = vec![0u8; 1500];
            // Enough packets for every message (32 a packet), fewer than the 128 a receiver
            // keeps track of.
            for _ in 0..64 {
                let len = a.build_packet(now, None, &mut out);
                packets.push(out[..len].to_vec());
            }
            // Newest first: the window fills out of order across the wrap.
            for p in packets.iter().rev() {
                b.receive(now, p).unwrap();
            }
            let got: Vec<u32> = std::iter::from_fn(|| b.recv_reliable())
                .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
                .collect();
            assert_eq!(got, (0..n as u32).collect::<Vec<_>>(), "window {window}");
        }
    }

    /// A packet exactly half the sequence space from the newest is neither newer nor older:
    /// it is dropped (it used to take the newest packet's ring slot, so a repeat of the
    /// newest then passed as new). Found by the `reliability_receive` fuzz target.
    #[test]
    fn a_packet_half_the_sequence_space_away_is_dropped() {
        let mut a = Channel::new(ChannelConfig::default());
        let mut b = Channel::new(ChannelConfig::default());
        let now = Duration::from_millis(1);
        let mut out = vec![0u8; 1500];
        let mut packet = |seq: u16| {
            a.local_seq = seq;
            let n = a.build_packet(now, Some(b"x"), &mut out);
            out[..n].to_vec()
        };
        let (first, half) = (packet(38), packet(38 + 0x8000));
        assert_eq!(b.receive(now, &first), Ok(Some(&b"x"[..])));
        assert_eq!(b.receive(now, &half), Ok(None), "half the space away: dropped");
        assert_eq!(b.receive(now, &first), Ok(None), "a repeat of the newest is a duplicate");
        assert_eq!(b.stats().duplicates, 2);
        assert_eq!(b.ack_bits(), (38, 0));
    }

    proptest! {
        /// The ack field kept as packets arrive says exactly what the received ring says
        /// (the way it was computed before: 32 lookups), whatever the loss, order and repeats.
        #[test]
        fn the_kept_ack_field_matches_the_received_packets(
            order in proptest::collection::vec((0u16..300, any::<bool>()), 1..400),
            start in any::<u16>(),
        ) {
            let mut a = Channel::new(ChannelConfig::default());
            let mut b = Channel::new(ChannelConfig::default());
            let now = Duration::from_millis(1);
            // Packets a sent, by sequence.
            let mut packets = std::collections::HashMap::new();
            a.local_seq = start;
            let mut out = vec![0u8; 1500];
            for _ in 0..300 {
                let seq = a.local_seq;
                let n = a.build_packet(now, Some(b"x"), &mut out);
                packets.insert(seq, out[..n].to_vec());
            }
            for (k, repeat) in order {
                let seq = start.wrapping_add(k);
                let p = &packets[&seq];
                let _ = b.receive(now, p);
                if repeat {
                    let _ = b.receive(now, p);
                }
                let Some(ack) = b.remote_newest else { continue };
                let mut expected = 0u32;
                for i in 0..ACK_BITS {
                    if b.received.get(ack.wrapping_sub(1 + i)).is_some() {
                        expected |= 1 << i;
                    }
                }
                prop_assert_eq!(b.ack_bits(), (ack, expected));
            }
        }

        /// Against a model over unwrapped sequence numbers, with jumps anywhere in the
        /// sequence space (half of it included): a packet is taken once, never when it is
        /// exactly half the space away or 128 or more behind the newest, and the ack field
        /// names exactly the packets taken among the 32 before the newest.
        #[test]
        fn acceptance_and_the_ack_field_follow_a_model_over_any_jumps(
            steps in proptest::collection::vec(prop_oneof![
                (-40i32..40).boxed(),
                (-32768i32..32768).boxed(),
                Just(-32768i32).boxed(),
            ], 1..200),
            start in any::<u16>(),
        ) {
            let mut a = Channel::new(ChannelConfig::default());
            let mut b = Channel::new(ChannelConfig::default());
            let now = Duration::from_millis(1);
            let mut out = vec![0u8; 1500];
            // The model: packets taken, by unwrapped sequence, and the newest taken.
            let mut taken = std::collections::BTreeSet::new();
            let mut newest: Option<i64> = None;
            // The sender's sequence, unwrapped; the receiver only sees it modulo 2^16.
            let mut at = i64::from(start) + (1 << 20);
            for step in steps {
                at += i64::from(step);
                let seq = at as u16;
                a.local_seq = seq;
                let n = a.build_packet(now, Some(b"x"), &mut out);
                let before = b.stats().packets_received;
                let _ = b.receive(now, &out[..n]);
                let got = b.stats().packets_received > before;
                // The model unwraps it next to its newest (exactly half the space away
                // counting as behind) and takes it if newer, or less than 128 behind and new.
                let u = newest.map_or(at, |nw: i64| nw + i64::from(seq.wrapping_sub(nw as u16) as i16));
                let d = newest.map_or(1, |nw| u - nw);
                let want = d > 0 || (d > -128 && !taken.contains(&u));
                prop_assert_eq!(got, want, "seq {}", seq);
                if want {
                    taken.insert(u);
                    newest = Some(newest.map_or(u, |nw| nw.max(u)));
                }
                if let Some(nw) = newest {
                    let mut bits = 0u32;
                    for i in 0..32 {
                        if taken.contains(&(nw - 1 - i64::from(i))) {
                            bits |= 1 << i;
                        }
                    }
                    prop_assert_eq!(b.ack_bits(), (nw as u16, bits));
                }
            }
        }
    }
}
