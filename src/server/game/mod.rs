//! Layer 0, the game API: what a game writes and calls. It imports no other server module.
//!
//! The [`World`](world::World) trait and everything it is handed ([`world`]), lag
//! compensation ([`lagcomp`]) and a spatial index ([`spatial`]). `volley::server` re-exports
//! them; this folder exists to show the layer.

pub mod lagcomp;
pub mod spatial;
pub mod world;
