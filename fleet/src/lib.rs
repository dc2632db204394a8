//! Running volley servers as a fleet.
//!
//! - [`backend`]: the connect-token backend (`volley backend`): authenticates a player,
//!   picks a game server with room and mints a netcode connect token for it.
//! - [`client`]: asking a backend for a token (the bot swarm's `--backend`).
//! - [`admin_client`]: asking a server's admin listener (`/readyz`, `/metrics`).
//! - [`agones`]: the Agones lifecycle of one game server: `Ready` once it serves, `Health`
//!   while it ticks, the allocation handed to the game, player counts, `Shutdown` at the end.
//!
//! The README's "Running a fleet" shows how they fit together, and `deploy/` holds the
//! Kubernetes manifests.

pub mod admin_client;
#[cfg(feature = "agones")]
pub mod agones;
pub mod backend;
pub mod client;
