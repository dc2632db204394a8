//! volley: an authoritative real-time multiplayer game server framework.
//!
//! The crate is laid out by layer:
//!
//! - [`protocol`] — the sans-IO core: wire format, connection state machines, reliability,
//!   quantization and the delta snapshot codec. Deterministic, tested without sockets.
//!
//! See `README.md` for the guide and `BENCHMARKS.md` for measured figures.

pub mod protocol;
