//! The sans-IO protocol core: no sockets, no tasks, no clock reads. Time is passed in.
//!
//! - [`netcode`]: the secure connection layer (netcode.io 1.02 on the wire).
//! - [`session`]: protocol version and session parameters agreed after connecting.
//! - [`reliability`]: acks, RTT/loss estimates, reliable and unreliable channels.
//! - [`snapshot`]: the merged delta snapshot (schema, world, sender, receiver).
//! - [`quant`] and [`bits`]: quantized fields and the bit writer/reader under them.
//! - [`range`]: the adaptive range coder of predicted snapshots.
//! - [`input`]: the client's newest-wins state: the snapshot it has, its latest inputs.
//! - [`zone`]: one map split among several servers: which zone owns a position, which see it.
//!
//! The types a driver of the protocol names most (a shell, an interop test, a client of its
//! own) are re-exported here, as quinn-proto does at its root; the modules hold the rest.
//!
//! | to | use |
//! | --- | --- |
//! | accept connections and move their datagrams | [`Endpoint`], [`EndpointConfig`], [`Received`], [`Connection`] (its [`ReceiveHalf`] and [`SendHalf`]), [`Transmit`] |
//! | connect as a client | [`Client`], [`ClientState`], [`ConnectToken`], [`TokenParams`], [`Key`] |
//! | know why a packet or a session ended | [`DropReason`], [`DisconnectReason`], [`PayloadError`], [`SessionEnd`] |
//! | carry messages | [`Channel`], [`ChannelConfig`] |
//! | describe, send and read a world | [`Schema`], [`Replicate`], [`SnapshotBuilder`], [`WorldSnapshot`], [`EntityId`], [`EntityRef`], [`Interest`], [`SnapshotSender`], [`SenderConfig`], [`SnapshotReceiver`] |
//! | agree on a session | [`SessionParams`], [`PROTOCOL_VERSION`] |
//! | write and read recordings | [`RecordWriter`], [`Recording`], [`Playhead`] |

pub mod bits;
pub mod input;
pub mod netcode;
pub mod quant;
pub mod range;
pub mod recording;
pub mod reliability;
pub mod scoreboard;
pub mod session;
pub mod snapshot;
pub mod system;
pub mod zone;

pub use netcode::client::{Client, ClientState};
pub use netcode::server::{Connection, Endpoint, EndpointConfig, ReceiveHalf, Received, SendHalf};
pub use netcode::token::{ConnectToken, TokenParams};
pub use netcode::{DisconnectReason, DropReason, Key, PayloadError, Transmit};
pub use recording::{Playhead, RecordWriter, Recording};
pub use reliability::{Channel, ChannelConfig};
pub use session::{PROTOCOL_VERSION, SessionEnd, SessionParams};
pub use snapshot::{
    EntityId, EntityRef, Interest, Replicate, Schema, SenderConfig, SnapshotBuilder, SnapshotReceiver, SnapshotSender,
    WorldSnapshot,
};

/// A connected player's id on its server: its netcode slot, stable while it is connected
/// (one type for the server, the recordings and the zones).
pub type PlayerId = u32;

/// Who a message from a world goes to (what [`World::messages`](crate::server::World::messages)
/// sends to, and what a recording keeps of each message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Every player in this world (on a server with one world: every connected player).
    All,
    /// The players in this world whose team is this
    /// ([`Outbox::set_team`](crate::server::Outbox::set_team)).
    Team(u16),
    /// Every player in this world and every player watching it (a global world's chat).
    Watchers,
    /// One player, in this world or watching it.
    Player(PlayerId),
}

/// `text` cut to at most `max` bytes, at a character boundary (kick texts, scoreboard names).
pub(crate) fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
