//! Layer 4, the shells: the ractor actors and threads that move bytes and time into the
//! cores. Nothing here decides what a game sees; each difference from the
//! [`Stepper`](crate::testing::Stepper)'s shell is listed in docs/architecture.md.
//!
//! | module | what it is |
//! | --- | --- |
//! | `socket` | the socket actor: the UDP socket, the netcode endpoint, each player's inlet |
//! | `player` | a player actor: one player's session, woken once a tick |
//! | `mailbox` | what the socket actor and the broadcaster leave for a player actor, and the actors' messages |
//! | `broadcaster` | the broadcaster: the directory's owner, a tick's fan-out |
//! | `batcher` | snapshots gathered into `sendmmsg` batches |
//! | `world_actor` | a world actor: one world's fixed timestep |
//! | `spawn` | starting worlds as actors ([`Worlds`](crate::server::Worlds)' actor backend) |

pub(crate) mod batcher;
pub(crate) mod broadcaster;
pub(crate) mod mailbox;
pub(crate) mod player;
pub(crate) mod socket;
pub(crate) mod spawn;
pub(crate) mod world_actor;
