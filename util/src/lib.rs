//! Small helpers that the framework, the `volley` program and the fleet share, kept out of
//! the framework's API (a game does not need them):
//!
//! - [`hex`]: hex for keys and tokens on the command line and in configuration;
//! - [`secret`]: comparing secrets without an early exit;
//! - [`file`](mod@file): reading a file someone else named, bounded;
//! - [`cpu`]: the calling thread's CPU time, for figures.

pub mod cpu;
pub mod file;
pub mod hex;
pub mod secret;
