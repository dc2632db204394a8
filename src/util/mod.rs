//! Small helpers shared by the binary, the configuration and tests.

pub mod cpu;
pub mod file;
pub mod hex;
pub mod secret;
