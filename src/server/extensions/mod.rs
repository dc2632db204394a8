//! Layer 3, extensions: features built on the game API's extension points (a
//! [`World`](crate::server::World), a [`Tap`](crate::server::Tap), the
//! [`Worlds`](crate::server::Worlds) handle) rather than inside the cores.
//!
//! [`spectate`] (spectators a delay behind, replays), `record` (the recording thread that
//! writes recorded worlds' taps), [`zone`] (one map split among several servers).

pub(crate) mod record;
pub mod spectate;
pub mod zone;
