//! Layer 2, operations: the figures and tools an operator uses. They import the game API
//! and the cores.
//!
//! [`metrics`] (the Prometheus figures and the names they are exported under), `admin`
//! (the `/metrics` and `/healthz` listener), and `shaping` (conditioning one player's link,
//! [`ServerHandle::condition_player`](crate::server::ServerHandle::condition_player)).

pub(crate) mod admin;
pub mod metrics;
pub(crate) mod shaping;
