//! The reference game on volley: a top-down arena shooter written only against volley's
//! public API ([`Arena`] is its [`World`](volley::server::World)), and [`bots`], the headless
//! swarm that plays it over real UDP for load runs, soak runs and end-to-end tests;
//! [`rooms`] runs it as a lobby, matches and a global world.
//!
//! The `volley` program (the `volley-cli` crate) serves this game; `cargo run -p
//! volley-arena --example arena` draws it as one client sees it.

pub mod bots;
mod game;
pub mod rooms;

pub use game::*;

pub mod web;
