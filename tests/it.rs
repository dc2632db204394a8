//! volley's integration tests, one module a file, in one test binary: each file used to be a
//! binary of its own, and thirty-odd links of the library, each with its own copies of the
//! generic code it uses, were the slowest part of CI's build. (The three files that count
//! allocations install a global allocator, so they stay binaries of their own: `memory`,
//! `netcode_no_alloc`, `snapshot_no_alloc`.) Run one file's tests with
//! `cargo test --test it <file>::`.
#![allow(clippy::unwrap_used, missing_docs)]

// What several files share.
/// The fleet's admin-listener client, included by path (the framework does not depend on
/// the fleet crate).
#[path = "../fleet/src/admin_client.rs"]
#[allow(dead_code, unreachable_pub)]
mod admin_client;
#[path = "support/rooms.rs"]
mod rooms;
#[path = "support/udp.rs"]
mod udp;

#[path = "churn.rs"]
mod churn;
#[path = "client_ends.rs"]
mod client_ends;
#[path = "client_entities.rs"]
mod client_entities;
#[path = "client_messages.rs"]
mod client_messages;
#[path = "disconnect_reasons.rs"]
mod disconnect_reasons;
#[path = "e2e_lossy.rs"]
mod e2e_lossy;
#[path = "hostile.rs"]
mod hostile;
#[path = "join_info.rs"]
mod join_info;
#[path = "lag_compensation.rs"]
mod lag_compensation;
#[path = "lifecycle.rs"]
mod lifecycle;
#[path = "netcode_interop.rs"]
mod netcode_interop;
#[path = "netcode_rules.rs"]
mod netcode_rules;
#[path = "ordering.rs"]
mod ordering;
#[path = "pacing.rs"]
mod pacing;
#[path = "recording_whole.rs"]
mod recording_whole;
#[path = "reliability.rs"]
mod reliability;
#[path = "replay.rs"]
mod replay;
#[path = "resume.rs"]
mod resume;
#[path = "rtt.rs"]
mod rtt;
#[path = "schema_doc.rs"]
mod schema_doc;
#[path = "scoreboard.rs"]
mod scoreboard;
#[path = "send_rate.rs"]
mod send_rate;
#[path = "snapshot_props.rs"]
mod snapshot_props;
#[path = "snapshot_sizes.rs"]
mod snapshot_sizes;
#[path = "spectate.rs"]
mod spectate;
#[path = "stepper.rs"]
mod stepper;
#[path = "supervision.rs"]
mod supervision;
#[path = "tap.rs"]
mod tap;
#[path = "wire_census.rs"]
mod wire_census;
#[path = "wire_vectors.rs"]
mod wire_vectors;
#[path = "world_faults.rs"]
mod world_faults;
#[path = "worlds.rs"]
mod worlds;
#[path = "worlds_props.rs"]
mod worlds_props;
#[path = "worlds_talk.rs"]
mod worlds_talk;
