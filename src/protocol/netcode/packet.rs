//! The seven packet types of netcode.io 1.02 and their encryption.
//!
//! Every packet but the connection request is `prefix byte | sequence (1–8 bytes, LE) |
//! ChaCha20-Poly1305(body)`, where the prefix holds the packet type in its low four bits and
//! the sequence's byte count in its high four, and the associated data is
//! `version info | protocol id | prefix byte`.

use super::crypto::{self, Key};
use super::replay::ReplayWindow;
use super::wire::{Reader, Writer};
use super::{
    CHALLENGE_TOKEN_BYTES, CONNECT_TOKEN_PRIVATE_BYTES, DropReason, MAC_BYTES, MAX_PAYLOAD_BYTES, VERSION_INFO,
};

/// Size of a connection request packet: requests of any other size are dropped.
pub const REQUEST_PACKET_BYTES: usize = 1 + 13 + 8 + 8 + 24 + CONNECT_TOKEN_PRIVATE_BYTES;
/// The smallest encrypted packet: prefix and tag (sequence 0 may be sent in zero bytes).
pub const MIN_ENCRYPTED_PACKET_BYTES: usize = 1 + MAC_BYTES;
/// The largest packet either side sends.
pub const MAX_PACKET_BYTES: usize = 1 + 8 + MAX_PAYLOAD_BYTES + MAC_BYTES;

/// The packet type in a prefix byte's low four bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PacketKind {
    /// Client → server, unencrypted, carries the sealed private connect token.
    Request = 0,
    /// Server → client: no free slot.
    Denied = 1,
    /// Server → client: the challenge token.
    Challenge = 2,
    /// Client → server: the challenge token echoed back.
    Response = 3,
    /// Either way: proof of life; from the server it carries the client index.
    KeepAlive = 4,
    /// Either way: application data.
    Payload = 5,
    /// Either way: the connection ends.
    Disconnect = 6,
}

impl PacketKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Request,
            1 => Self::Denied,
            2 => Self::Challenge,
            3 => Self::Response,
            4 => Self::KeepAlive,
            5 => Self::Payload,
            6 => Self::Disconnect,
            _ => return None,
        })
    }

    /// The bit of this kind in an [`Allowed`] set.
    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of packet kinds that a receiver accepts in its current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed(u8);

impl Allowed {
    /// Builds a set from kinds.
    pub const fn of(kinds: &[PacketKind]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= kinds[i].bit();
            i += 1;
        }
        Self(bits)
    }

    /// Every kind that travels encrypted (all but the connection request).
    pub const ENCRYPTED: Self = Self::of(&[
        PacketKind::Denied,
        PacketKind::Challenge,
        PacketKind::Response,
        PacketKind::KeepAlive,
        PacketKind::Payload,
        PacketKind::Disconnect,
    ]);

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: PacketKind) -> bool {
        self.0 & kind.bit() != 0
    }
}

/// A decoded packet; variable parts borrow from the receive buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// See [`PacketKind::Denied`].
    Denied,
    /// See [`PacketKind::Challenge`].
    Challenge {
        /// Sequence the challenge token was sealed with.
        token_sequence: u64,
        /// The sealed challenge token.
        token: &'a [u8; CHALLENGE_TOKEN_BYTES],
    },
    /// See [`PacketKind::Response`].
    Response {
        /// Sequence the challenge token was sealed with.
        token_sequence: u64,
        /// The sealed challenge token.
        token: &'a [u8; CHALLENGE_TOKEN_BYTES],
    },
    /// See [`PacketKind::KeepAlive`].
    KeepAlive {
        /// The client's slot on the server.
        client_index: u32,
        /// The server's slot count.
        max_clients: u32,
    },
    /// See [`PacketKind::Payload`]: 1 to 1200 bytes.
    Payload(&'a [u8]),
    /// See [`PacketKind::Disconnect`].
    Disconnect,
}

impl Packet<'_> {
    /// This packet's kind.
    pub fn kind(&self) -> PacketKind {
        match self {
            Self::Denied => PacketKind::Denied,
            Self::Challenge { .. } => PacketKind::Challenge,
            Self::Response { .. } => PacketKind::Response,
            Self::KeepAlive { .. } => PacketKind::KeepAlive,
            Self::Payload(_) => PacketKind::Payload,
            Self::Disconnect => PacketKind::Disconnect,
        }
    }

    fn write_body(&self, w: &mut Writer<'_>) -> Option<()> {
        match self {
            Self::Denied | Self::Disconnect => Some(()),
            Self::Challenge { token_sequence, token } | Self::Response { token_sequence, token } => {
                w.u64(*token_sequence)?;
                w.bytes(token.as_slice())
            }
            Self::KeepAlive { client_index, max_clients } => {
                w.u32(*client_index)?;
                w.u32(*max_clients)
            }
            Self::Payload(data) if !data.is_empty() && data.len() <= MAX_PAYLOAD_BYTES => w.bytes(data),
            Self::Payload(_) => None,
        }
    }
}

/// The fields of a connection request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Protocol id the token was made for.
    pub protocol_id: u64,
    /// The token's expiry (Unix seconds).
    pub expire_timestamp: u64,
    /// The token's nonce.
    pub nonce: [u8; 24],
    /// The sealed private connect token.
    pub private_data: [u8; CONNECT_TOKEN_PRIVATE_BYTES],
}

/// Writes a connection request into `out`; returns its length.
pub fn write_request(out: &mut [u8], req: &Request) -> Option<usize> {
    let mut w = Writer::new(out);
    w.u8(PacketKind::Request as u8)?;
    w.bytes(VERSION_INFO)?;
    w.u64(req.protocol_id)?;
    w.u64(req.expire_timestamp)?;
    w.bytes(&req.nonce)?;
    w.bytes(&req.private_data)?;
    Some(w.position())
}

/// Reads a connection request (packet type 0), checking size, version and protocol id.
///
/// # Errors
/// The reason to drop it.
pub fn read_request(buf: &[u8], protocol_id: u64) -> Result<Request, DropReason> {
    if buf.len() != REQUEST_PACKET_BYTES {
        return Err(DropReason::BadLength);
    }
    let mut r = Reader::new(&buf[1..]);
    if r.bytes(VERSION_INFO.len()) != Some(VERSION_INFO.as_slice()) {
        return Err(DropReason::WrongVersion);
    }
    let read = (|| {
        Some(Request { protocol_id: r.u64()?, expire_timestamp: r.u64()?, nonce: r.array()?, private_data: r.array()? })
    })();
    let req = read.ok_or(DropReason::BadLength)?;
    if req.protocol_id != protocol_id {
        return Err(DropReason::WrongProtocol);
    }
    Ok(req)
}

/// How many bytes a sequence number needs (1 to 8).
fn sequence_bytes(sequence: u64) -> usize {
    (8 - sequence.leading_zeros() as usize / 8).max(1)
}

fn aad(protocol_id: u64, prefix: u8) -> [u8; 22] {
    let mut ad = [0u8; 22];
    ad[..13].copy_from_slice(VERSION_INFO);
    ad[13..21].copy_from_slice(&protocol_id.to_le_bytes());
    ad[21] = prefix;
    ad
}

/// Writes and encrypts `packet` into `out`; returns its length, or `None` if `out` is too
/// small or the packet is invalid (an empty or oversized payload).
pub fn write_packet(out: &mut [u8], packet: &Packet<'_>, sequence: u64, protocol_id: u64, key: &Key) -> Option<usize> {
    let seq_bytes = sequence_bytes(sequence);
    let prefix = packet.kind() as u8 | (seq_bytes as u8) << 4;
    let header = 1 + seq_bytes;
    let head = out.get_mut(..header)?;
    head[0] = prefix;
    head[1..].copy_from_slice(&sequence.to_le_bytes()[..seq_bytes]);
    let body = out.get_mut(header..)?;
    let mut w = Writer::new(body);
    packet.write_body(&mut w)?;
    let body_len = w.position();
    let sealed = crypto::seal(body, body_len, sequence, key, &aad(protocol_id, prefix))?;
    Some(header + sealed)
}

/// The clear part of an encrypted packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Packet type.
    pub kind: PacketKind,
    /// Packet sequence number (the nonce).
    pub sequence: u64,
    prefix: u8,
    len: usize,
}

/// Reads the prefix and sequence of a packet: the cheap checks before any decryption.
///
/// # Errors
/// The reason to drop it.
pub fn read_header(buf: &[u8]) -> Result<Header, DropReason> {
    let prefix = *buf.first().ok_or(DropReason::BadLength)?;
    let kind = PacketKind::from_u8(prefix & 0x0f).ok_or(DropReason::UnknownType)?;
    if kind == PacketKind::Request {
        return Ok(Header { kind, sequence: 0, prefix, len: 1 });
    }
    if buf.len() < MIN_ENCRYPTED_PACKET_BYTES || buf.len() > MAX_PACKET_BYTES {
        return Err(DropReason::BadLength);
    }
    // The standard writes 1 to 8 sequence bytes; renetcode writes sequence 0 in zero bytes,
    // which is unambiguous, so we accept it too (we always write at least one).
    let seq_bytes = (prefix >> 4) as usize;
    if seq_bytes > 8 {
        return Err(DropReason::BadSequence);
    }
    if buf.len() < 1 + seq_bytes + MAC_BYTES {
        return Err(DropReason::BadLength);
    }
    let mut seq = [0u8; 8];
    seq[..seq_bytes].copy_from_slice(&buf[1..1 + seq_bytes]);
    Ok(Header { kind, sequence: u64::from_le_bytes(seq), prefix, len: 1 + seq_bytes })
}

/// Checks an encrypted packet against the allowed kinds and the replay window, decrypts it in
/// place and parses its body. The window advances only for authentic packets of the kinds the
/// standard protects (keep-alive, payload, disconnect).
///
/// # Errors
/// The reason to drop it.
pub fn open_packet<'a>(
    buf: &'a mut [u8],
    allowed: Allowed,
    protocol_id: u64,
    key: &Key,
    replay: Option<&mut ReplayWindow>,
) -> Result<(u64, Packet<'a>), DropReason> {
    let header = read_header(buf)?;
    if header.kind == PacketKind::Request || !allowed.contains(header.kind) {
        return Err(DropReason::NotAllowed);
    }
    let protected = matches!(header.kind, PacketKind::KeepAlive | PacketKind::Payload | PacketKind::Disconnect);
    if protected && replay.as_ref().is_some_and(|w| w.already_received(header.sequence)) {
        return Err(DropReason::Replayed);
    }
    let body = &mut buf[header.len..];
    let len = crypto::open(body, header.sequence, key, &aad(protocol_id, header.prefix)).ok_or(DropReason::Decrypt)?;
    let body = &body[..len];
    let packet = parse_body(header.kind, body).ok_or(DropReason::BadLength)?;
    if let Some(window) = replay.filter(|_| protected) {
        window.advance(header.sequence);
    }
    Ok((header.sequence, packet))
}

fn parse_body(kind: PacketKind, body: &[u8]) -> Option<Packet<'_>> {
    let mut r = Reader::new(body);
    let packet = match kind {
        PacketKind::Denied if body.is_empty() => Packet::Denied,
        PacketKind::Disconnect if body.is_empty() => Packet::Disconnect,
        PacketKind::Challenge | PacketKind::Response if body.len() == 8 + CHALLENGE_TOKEN_BYTES => {
            let token_sequence = r.u64()?;
            let token = r.bytes(CHALLENGE_TOKEN_BYTES)?.try_into().ok()?;
            if kind == PacketKind::Challenge {
                Packet::Challenge { token_sequence, token }
            } else {
                Packet::Response { token_sequence, token }
            }
        }
        PacketKind::KeepAlive if body.len() == 8 => Packet::KeepAlive { client_index: r.u32()?, max_clients: r.u32()? },
        PacketKind::Payload if !body.is_empty() && body.len() <= MAX_PAYLOAD_BYTES => Packet::Payload(body),
        _ => return None,
    };
    Some(packet)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: Key = [4u8; 32];
    const PID: u64 = 99;
    const ALL: Allowed = Allowed::ENCRYPTED;

    fn round_trip(p: &Packet<'_>, seq: u64) -> Vec<u8> {
        let mut buf = [0u8; MAX_PACKET_BYTES];
        let n = write_packet(&mut buf, p, seq, PID, &KEY).unwrap();
        let wire = buf[..n].to_vec();
        let (s, back) = open_packet(&mut buf[..n], ALL, PID, &KEY, None).unwrap();
        assert_eq!(s, seq);
        assert_eq!(&back, p);
        wire
    }

    #[test]
    fn every_kind_round_trips_with_the_sizes_of_the_standard() {
        let token = [8u8; CHALLENGE_TOKEN_BYTES];
        assert_eq!(round_trip(&Packet::Denied, 0).len(), 1 + 1 + 16);
        assert_eq!(round_trip(&Packet::Disconnect, 1 << 40).len(), 1 + 6 + 16);
        assert_eq!(round_trip(&Packet::Challenge { token_sequence: 3, token: &token }, 300).len(), 1 + 2 + 308 + 16);
        assert_eq!(
            round_trip(&Packet::Response { token_sequence: 3, token: &token }, u64::MAX).len(),
            1 + 8 + 308 + 16
        );
        assert_eq!(round_trip(&Packet::KeepAlive { client_index: 3, max_clients: 64 }, 5).len(), 1 + 1 + 8 + 16);
        assert_eq!(round_trip(&Packet::Payload(&[1; 1200]), u64::MAX).len(), MAX_PACKET_BYTES);
        let wire = round_trip(&Packet::Payload(b"abc"), 0x0102);
        assert_eq!(wire[0], PacketKind::Payload as u8 | 2 << 4, "prefix: type and sequence bytes");
        assert_eq!(&wire[1..3], &[2, 1], "sequence in little endian");
    }

    #[test]
    fn invalid_payloads_are_not_written() {
        let mut buf = [0u8; 2000];
        assert_eq!(write_packet(&mut buf, &Packet::Payload(&[]), 0, PID, &KEY), None);
        assert_eq!(write_packet(&mut buf, &Packet::Payload(&[0; 1201]), 0, PID, &KEY), None);
        assert_eq!(write_packet(&mut buf[..20], &Packet::Payload(&[0; 10]), 0, PID, &KEY), None);
    }

    #[test]
    fn drops_have_reasons() {
        let mut buf = [0u8; MAX_PACKET_BYTES];
        let n = write_packet(&mut buf, &Packet::Payload(b"hi"), 7, PID, &KEY).unwrap();
        let pristine = buf;
        let open = |b: &mut [u8], allowed, pid, key: &Key, w: Option<&mut ReplayWindow>| {
            open_packet(b, allowed, pid, key, w).map(|(s, _)| s)
        };
        let mut b = pristine;
        assert_eq!(open(&mut b[..n], ALL, PID + 1, &KEY, None), Err(DropReason::Decrypt));
        let mut b = pristine;
        assert_eq!(open(&mut b[..n], ALL, PID, &[0; 32], None), Err(DropReason::Decrypt));
        let mut b = pristine;
        let only_keepalive = Allowed::of(&[PacketKind::KeepAlive]);
        assert_eq!(open(&mut b[..n], only_keepalive, PID, &KEY, None), Err(DropReason::NotAllowed));
        let mut b = pristine;
        assert_eq!(open(&mut b[..5], ALL, PID, &KEY, None), Err(DropReason::BadLength));
        let mut b = pristine;
        b[0] = 0x0f | 1 << 4;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, None), Err(DropReason::UnknownType));
        let mut b = pristine;
        b[0] = PacketKind::Payload as u8 | 9 << 4;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, None), Err(DropReason::BadSequence));
        let mut b = pristine;
        b[0] = PacketKind::Payload as u8;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, None), Err(DropReason::Decrypt), "0 sequence bytes: sequence 0");
        let mut b = pristine;
        b[0] = PacketKind::Disconnect as u8 | 1 << 4;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, None), Err(DropReason::Decrypt), "prefix is authenticated");

        let mut window = ReplayWindow::new();
        let mut b = pristine;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, Some(&mut window)), Ok(7));
        let mut b = pristine;
        assert_eq!(open(&mut b[..n], ALL, PID, &KEY, Some(&mut window)), Err(DropReason::Replayed));
    }

    #[test]
    fn a_forged_packet_does_not_move_the_replay_window() {
        let mut window = ReplayWindow::new();
        let mut buf = [0u8; MAX_PACKET_BYTES];
        let n = write_packet(&mut buf, &Packet::Payload(b"x"), 1 << 30, PID, &[1; 32]).unwrap();
        assert_eq!(open_packet(&mut buf[..n], ALL, PID, &KEY, Some(&mut window)).err(), Some(DropReason::Decrypt));
        assert!(!window.already_received(5), "window unchanged by a forgery");
    }

    #[test]
    fn requests_are_checked_for_size_version_and_protocol() {
        let req = Request { protocol_id: PID, expire_timestamp: 10, nonce: [1; 24], private_data: [2; 1024] };
        let mut buf = [0u8; 1200];
        let n = write_request(&mut buf, &req).unwrap();
        assert_eq!(n, REQUEST_PACKET_BYTES);
        let back = read_request(&buf[..n], PID).unwrap();
        assert_eq!((back.expire_timestamp, back.nonce, back.private_data), (10, [1; 24], [2; 1024]));
        assert_eq!(read_request(&buf[..n], PID + 1).err(), Some(DropReason::WrongProtocol));
        assert_eq!(read_request(&buf[..n - 1], PID).err(), Some(DropReason::BadLength));
        buf[5] = b'X';
        assert_eq!(read_request(&buf[..n], PID).err(), Some(DropReason::WrongVersion));
    }
}
