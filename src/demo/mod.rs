//! The reference game that the `volley run` command, the bots and the examples use.

pub mod arena;
