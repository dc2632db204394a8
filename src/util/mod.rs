//! Small helpers shared by the binary, the configuration and tests.

pub mod hex;
pub mod secret;
