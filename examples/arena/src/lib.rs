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

/// The arena in a browser: the page `volley run --web ADDR` serves (it loads the framework's
/// JavaScript client from `/volley.js`).
pub mod page {
    /// `/index.html`: the canvas, the scoreboard, the kill feed and `#volley-status`.
    pub const INDEX_HTML: &str = include_str!("../web/index.html");
    /// `/arena.js`: joins as a player (`?bot=1` plays by itself, `?watch=1` watches a match),
    /// draws, and reports in `#volley-status`.
    pub const ARENA_JS: &str = include_str!("../web/arena.js");
}
