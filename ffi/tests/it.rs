//! The volley-ffi crate's integration tests, one module a file, in one test binary (a binary a
//! file linked the crate and its dependencies over again each time: the slowest part of
//! CI's build). Run one file's tests with `cargo nextest run -p volley-ffi --test it <file>::`.
#![allow(clippy::unwrap_used, missing_docs, unsafe_code)]

#[path = "bad_input.rs"]
mod bad_input;
#[path = "board_and_notices.rs"]
mod board_and_notices;
#[path = "header.rs"]
mod header;
#[path = "languages.rs"]
mod languages;
