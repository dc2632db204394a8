//! volley: an authoritative real-time multiplayer game server framework.
//!
//! The crate is laid out by layer:
//!
//! - [`protocol`] — the sans-IO core: wire format, connection state machines, reliability,
//!   quantization and the delta snapshot codec. Deterministic, tested without sockets.
//! - [`server`] — the actor server (ractor on tokio): socket, player, world and broadcaster
//!   actors, the [`server::World`] trait a game implements, and lag compensation
//!   ([`server::lagcomp`]).
//! - [`client`] — the client library on the same core, and its UDP driver.
//! - [`testing`] — the deterministic stepper: server and clients one tick at a time in
//!   memory, on a virtual clock, through link conditioners.
//! - [`transport`] — real UDP sockets as a `Transmit` sink.
//! - [`prelude`] — what a game's server and client code usually needs, in one import.
//!
//! Games and programs built on it live in crates of their own in the workspace: the
//! reference game and its bot swarm (`examples/arena`, crate `volley-arena`), the 901-cube
//! scene (`examples/cubes`), and the `volley` command-line program (`cli`, crate
//! `volley-cli`).
//!
//! See `README.md` for the guide and `BENCHMARKS.md` for measured figures.
// Every `pub` item is reachable from outside the crate, or says `pub(crate)` (issue 38: a
// curated surface; tools/layers.py shows the layers).
#![cfg_attr(not(test), warn(unreachable_pub))]
#![warn(unnameable_types, unused_qualifications)]

pub mod client;
pub mod prelude;
pub mod protocol;
pub mod server;
pub mod testing;
pub mod transport;

/// The protocol id of volley's own examples and bots; a game picks its own.
pub const DEFAULT_PROTOCOL_ID: u64 = 0x766f_6c6c_6579_0001;
