//! The volley-fleet crate's integration tests, one module a file, in one test binary (a binary a
//! file linked the crate and its dependencies over again each time: the slowest part of
//! CI's build). Run one file's tests with `cargo nextest run -p volley-fleet --test it <file>::`.
#![allow(clippy::unwrap_used, missing_docs)]

// What several files share.
#[path = "../../tests/support/tools.rs"]
mod tools;

#[path = "agones.rs"]
mod agones;
#[path = "agones_protos.rs"]
mod agones_protos;
#[path = "backend.rs"]
mod backend;
