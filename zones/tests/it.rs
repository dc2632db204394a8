//! The volley-zones crate's integration tests, one module a file, in one test binary (a binary a
//! file linked the crate and its dependencies over again each time: the slowest part of
//! CI's build). Run one file's tests with `cargo nextest run -p volley-zones --test it <file>::`.
#![allow(clippy::unwrap_used, missing_docs)]

// What several files share.
#[path = "support/dots.rs"]
mod dots;
#[path = "support/nats.rs"]
mod nats_support;
#[path = "../../tests/support/tools.rs"]
mod tools;

#[path = "crossing.rs"]
mod crossing;
#[path = "nats.rs"]
mod nats;
#[path = "stepper.rs"]
mod stepper;
