//! What moves: datagrams and bytes by kind, drops and rejections, a session's end, how payloads reached a player actor and why it woke.

use super::ServerMetrics;
use crate::protocol::netcode::{DisconnectReason, DropReason};
use crate::protocol::session::SessionEnd;
use crate::transport::udp::UdpTx;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What a sent datagram carried, for the `kind` label of the traffic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentKind {
    /// Snapshot sections of payload packets.
    Snapshot = 0,
    /// The rest of payload packets: reliable messages, events, acks and framing.
    Reliable = 1,
    /// Netcode control packets: keep-alives, disconnects, handshake replies, goodbyes.
    Control = 2,
    /// What each payload datagram costs beyond its payload: the netcode header and the
    /// encryption tag.
    Overhead = 3,
}

/// What a received datagram carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceivedKind {
    /// Payload packets from connected clients (inputs and acks).
    Input = 0,
    /// Keep-alives, disconnects and handshake packets.
    Control = 1,
    /// Datagrams from a connected player's address that did not authenticate (forged,
    /// replayed, corrupted): whoever sent them, not the player.
    Rejected = 2,
}

pub(super) const SENT_KINDS: [&str; 4] = ["snapshot", "reliable", "control", "overhead"];
pub(super) const RECEIVED_KINDS: [&str; 3] = ["input", "control", "rejected"];

/// Labels of `volley_player_packets_dropped_total`: every netcode drop reason, then
/// `malformed_payload` and `unexpected_system_message`.
pub(super) const PLAYER_DROPS: usize = DropReason::ALL.len() + 2;

/// Why a connection ended, as `volley_disconnects_total{reason}` labels it: the server's own
/// reason ([`SessionEnd`], what the client reads) when it gave one, else the netcode layer's
/// ([`DisconnectReason`]), or a failed player actor. Internal: the public names are those two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// The client went silent.
    TimedOut = 0,
    /// The client said goodbye.
    ByPeer = 1,
    /// The server ended it without a reason of its own (the client's answer to the
    /// goodbye never came, or it was disconnected at once).
    Local = 2,
    /// Its player actor failed and was cleaned up.
    Failed = 3,
    /// The world kicked it.
    Kicked = 4,
    /// The server shut down.
    ShuttingDown = 5,
    /// Its world stopped.
    WorldStopped = 6,
    /// It flooded the world with messages.
    Flooding = 7,
    /// It fell too far behind on reliable messages.
    TooFarBehind = 8,
    /// It was handed to another zone.
    Moved = 9,
    /// It sent only malformed payloads.
    Malformed = 10,
    /// A newer connection of the same client took its place.
    Replaced = 11,
}

impl EndReason {
    /// Why a player's connection ended: the reason the server gave in its goodbye, if it
    /// said one, else what the netcode layer saw.
    pub(crate) fn of(netcode: DisconnectReason, said: Option<&SessionEnd>) -> Self {
        match said {
            Some(SessionEnd::Kicked(_)) => Self::Kicked,
            Some(SessionEnd::ShuttingDown) => Self::ShuttingDown,
            Some(SessionEnd::WorldStopped) => Self::WorldStopped,
            Some(SessionEnd::Flooding) => Self::Flooding,
            Some(SessionEnd::TooFarBehind) => Self::TooFarBehind,
            Some(SessionEnd::Moved) => Self::Moved,
            Some(SessionEnd::Malformed) => Self::Malformed,
            Some(SessionEnd::Replaced) => Self::Replaced,
            _ => netcode.into(),
        }
    }

    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        END_REASONS[self as usize]
    }
}

impl From<DisconnectReason> for EndReason {
    fn from(r: DisconnectReason) -> Self {
        match r {
            DisconnectReason::TimedOut => Self::TimedOut,
            DisconnectReason::ByPeer => Self::ByPeer,
            DisconnectReason::Local => Self::Local,
            DisconnectReason::Replaced => Self::Replaced,
        }
    }
}

pub(super) const END_REASONS: [&str; 12] = [
    "timed_out",
    "by_peer",
    "local",
    "failed",
    "kicked",
    "shutting_down",
    "world_stopped",
    "flooding",
    "too_far_behind",
    "moved",
    "malformed",
    "replaced",
];

/// Why a datagram was dropped by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramDrop {
    /// The player's queue was full (a flooding or stalled client).
    QueueFull = 0,
    /// The kernel refused the send (a full socket buffer).
    SendFailed = 1,
}

pub(super) const DATAGRAM_DROPS: [&str; 2] = ["queue_full", "send_failed"];

/// Labels of `volley_client_messages_dropped_total{reason}`.
pub(super) const CLIENT_MESSAGE_DROPS: [&str; 3] = ["flood", "too_large", "queue_full"];

/// Labels of `volley_table_entries{table}`: the server's tables that grow and shrink with
/// players and handshakes (a soak run checks they return to their occupancy).
pub const TABLES: [&str; 6] =
    ["pending_handshakes", "pending_ips", "connected_clients", "connected_addresses", "player_actors", "player_rows"];

/// How the socket actor left a connected player's payload for its player actor (see
/// [`crate::server`]'s runtime semantics; its inputs went to the world either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-hooks"), allow(unreachable_pub))]
pub enum DeliveryPath {
    /// Left in the mailbox without waking the actor: read at its next tick.
    Left = 0,
    /// Left, and the actor woken for it (a control message, the client's messages, or half
    /// its room used).
    Woke = 1,
}

/// What woke a player actor (`volley_player_wakeups_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-hooks"), allow(unreachable_pub))]
pub enum Wakeup {
    /// Its tick's snapshot (the fan-out: at most once a tick).
    Snapshot = 0,
    /// Payloads the socket left that should be read now.
    Datagram = 1,
    /// Its heartbeat (keep-alives, timeouts), every 100 ms.
    Heartbeat = 2,
    /// The world or the directory: a message to it alone, a notice, the scoreboard, a move,
    /// a close, the client's goodbye.
    World = 3,
}

/// Labels of `volley_player_wakeups_total{reason}`, by [`Wakeup`].
pub(super) const WAKEUPS: [&str; 4] = ["snapshot", "datagram", "heartbeat", "world"];

/// Counts what `tx` sent as control traffic, and what it failed to send.
pub(crate) fn count_control(metrics: &ServerMetrics, tx: &UdpTx<'_>) {
    if tx.sent > 0 {
        metrics.record_sent(SentKind::Control, tx.sent, tx.bytes);
    }
    metrics.record_drop(DatagramDrop::SendFailed, tx.dropped);
}

impl ServerMetrics {
    /// Counts a payload by how it was left for its player actor.
    pub(crate) fn record_delivery(&self, path: DeliveryPath) {
        self.deliveries[path as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many payloads were left by `path` (with the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    pub fn deliveries(&self, path: DeliveryPath) -> u64 {
        self.deliveries[path as usize].load(Ordering::Relaxed)
    }

    /// Counts a player actor's wake-up.
    pub(crate) fn record_wakeup(&self, why: Wakeup) {
        self.wakeups[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many times player actors were woken for `why` (with the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    pub fn wakeups(&self, why: Wakeup) -> u64 {
        self.wakeups[why as usize].load(Ordering::Relaxed)
    }

    /// Snapshot wake-ups of a player actor already woken for one in the same server tick
    /// (none, by design: the fan-out wakes each player actor at most once a tick; with the
    /// `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    pub fn repeat_wakeups(&self) -> u64 {
        self.repeat_wakeups.load(Ordering::Relaxed)
    }

    /// The socket actor's tables: the endpoint's, and its player actors by id.
    pub(crate) fn set_socket_tables(&self, endpoint: crate::protocol::netcode::server::EndpointTables, actors: usize) {
        let t = &self.tables;
        t[0].store(endpoint.pending_handshakes as u64, Ordering::Relaxed);
        t[1].store(endpoint.pending_ips as u64, Ordering::Relaxed);
        t[2].store(endpoint.connected as u64, Ordering::Relaxed);
        t[3].store(endpoint.connected_addresses as u64, Ordering::Relaxed);
        t[4].store(actors as u64, Ordering::Relaxed);
        self.handshakes_given_way.store(endpoint.pending_given_way, Ordering::Relaxed);
    }

    /// Inputs refused: the world's input queue was full, or past the player's
    /// per-tick limit.
    pub(crate) fn record_inputs_dropped(&self, n: u64) {
        if n > 0 {
            self.inputs_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The bytes of its client's messages a player's session holds went from `before` to
    /// `now`.
    pub(crate) fn replace_received_held(&self, before: u64, now: u64) {
        if now != before {
            self.received_held.fetch_add(now, Ordering::Relaxed);
            self.received_held.fetch_sub(before, Ordering::Relaxed);
        }
    }

    /// A player's smoothed RTT went from `before` to `now` microseconds (the sum behind the
    /// mean RTT).
    pub(crate) fn replace_rtt(&self, before: u64, now: u64) {
        if now != before {
            self.rtt_sum_us.fetch_add(now, Ordering::Relaxed);
            self.rtt_sum_us.fetch_sub(before, Ordering::Relaxed);
        }
    }

    /// Records one datagram sent.
    pub(crate) fn record_sent(&self, kind: SentKind, packets: u64, bytes: u64) {
        let c = &self.sent[kind as usize];
        c[0].fetch_add(packets, Ordering::Relaxed);
        c[1].fetch_add(bytes, Ordering::Relaxed);
        self.packets_sent.fetch_add(packets, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records bytes sent inside datagrams already counted (a payload packet's sections).
    pub(crate) fn record_sent_bytes(&self, kind: SentKind, bytes: u64) {
        self.sent[kind as usize][1].fetch_add(bytes, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records one datagram received.
    pub(crate) fn record_received(&self, kind: ReceivedKind, bytes: u64) {
        let c = &self.received[kind as usize];
        c[0].fetch_add(1, Ordering::Relaxed);
        c[1].fetch_add(bytes, Ordering::Relaxed);
        self.packets_received.fetch_add(1, Ordering::Relaxed);
        self.bytes_received.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records a snapshot sent: its encoded and sent sizes, the age of its baseline (`None`
    /// for a full snapshot) and the changed entities it left for later (over its budget).
    pub(crate) fn record_snapshot(&self, encoded: usize, sent: usize, baseline_age: Option<Duration>, deferred: u32) {
        self.snapshots.fetch_add(1, Ordering::Relaxed);
        if deferred > 0 {
            self.entities_deferred.fetch_add(u64::from(deferred), Ordering::Relaxed);
        }
        self.snapshot_bytes.fetch_add(encoded as u64, Ordering::Relaxed);
        self.hot.snapshot_encoded.record(encoded as f64);
        self.hot.snapshot_sent.record(sent as f64);
        match baseline_age {
            Some(age) => self.hot.baseline_age.record(age.as_secs_f64()),
            None => {
                self.full_snapshots.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records a connection's end.
    pub(crate) fn record_end(&self, reason: EndReason) {
        self.players.fetch_sub(1, Ordering::Relaxed);
        self.disconnects.fetch_add(1, Ordering::Relaxed);
        self.ends[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a dropped datagram.
    pub(crate) fn record_drop(&self, why: DatagramDrop, n: u64) {
        if n > 0 {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            self.drops[why as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records one receive call that took `n` datagrams.
    pub(crate) fn record_receive_batch(&self, n: usize) {
        if n > 0 {
            self.receive_calls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a rejected handshake packet.
    pub(crate) fn record_rejection(&self, why: DropReason) {
        self.handshake_drops.fetch_add(1, Ordering::Relaxed);
        self.rejections[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a datagram from a connected player's address that was dropped.
    pub(crate) fn record_player_drop(&self, why: crate::server::cores::session::PacketDrop) {
        let i = match why {
            crate::server::cores::session::PacketDrop::Netcode(r) => r as usize,
            crate::server::cores::session::PacketDrop::Malformed => DropReason::ALL.len(),
            crate::server::cores::session::PacketDrop::UnexpectedSystemMessage => DropReason::ALL.len() + 1,
        };
        self.player_drops[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Datagrams from connected players dropped so far for `why`.
    pub fn player_drops(&self, why: crate::server::cores::session::PacketDrop) -> u64 {
        let i = match why {
            crate::server::cores::session::PacketDrop::Netcode(r) => r as usize,
            crate::server::cores::session::PacketDrop::Malformed => DropReason::ALL.len(),
            crate::server::cores::session::PacketDrop::UnexpectedSystemMessage => DropReason::ALL.len() + 1,
        };
        self.player_drops[i].load(Ordering::Relaxed)
    }

    /// Bytes received so far of `kind`.
    pub fn received_bytes(&self, kind: ReceivedKind) -> u64 {
        self.received[kind as usize][1].load(Ordering::Relaxed)
    }

    /// Handshake rejections so far for `why`.
    pub fn rejections(&self, why: DropReason) -> u64 {
        self.rejections[why as usize].load(Ordering::Relaxed)
    }
}
