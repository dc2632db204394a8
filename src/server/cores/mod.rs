//! Layer 1, the sans-IO cores: each piece of the server's logic, once, driven by the actors
//! and by the [`Stepper`](crate::testing::Stepper) alike. No task, socket or clock read in
//! here; they import only the game API.
//!
//! | module | what it owns |
//! | --- | --- |
//! | `inlet` | the receive half of one player's connection, the de-duplication of its inputs |
//! | `session` | one player's send half, reliability, snapshot history and merged delta |
//! | `inputs` | a world's input queue (the one way an input reaches a world) |
//! | `simulation` | one tick of one world, and the commands it hands the rest of the server |
//! | `directory` | who is in which world and watches which, each world's newest snapshot |
//! | `executor` | a tick's commands and the directory's effects, behind one seam for both shells |
//! | `board` | the scoreboard's rows and pings |
//! | `pace` | the fan-out's snapshot interval under load |
//! | `resume` | resume tickets: minting, renewing, and what a completed handshake resumes |

pub(crate) mod board;
pub(crate) mod directory;
pub(crate) mod executor;
pub(crate) mod inlet;
pub(crate) mod inputs;
pub(crate) mod pace;
pub(crate) mod resume;
pub(crate) mod session;
pub(crate) mod simulation;
