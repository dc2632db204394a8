//! The volley-cli crate's integration tests, one module a file, in one test binary (a binary a
//! file linked the crate and its dependencies over again each time: the slowest part of
//! CI's build). Run one file's tests with `cargo nextest run -p volley-cli --test it <file>::`.
#![allow(clippy::unwrap_used, missing_docs)]

// What several files share.
#[path = "support/prom.rs"]
mod prom;
#[path = "support/promql.rs"]
mod promql;
#[path = "../../tests/support/tools.rs"]
mod tools;

#[path = "cli.rs"]
mod cli;
#[path = "dashboards.rs"]
mod dashboards;
#[path = "deploy.rs"]
mod deploy;
#[path = "e2e_udp.rs"]
mod e2e_udp;
#[path = "fleet.rs"]
mod fleet;
#[path = "observability.rs"]
mod observability;
#[path = "prometheus_e2e.rs"]
mod prometheus_e2e;
#[path = "zones.rs"]
mod zones;
