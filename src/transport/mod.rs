//! Moving datagrams: real UDP sockets for the server, clients and bots.
//!
//! Public: [`batch`] (`recvmmsg`/`sendmmsg` batches, which `udp_floor` measures) and
//! [`conditioner`] (the link profiles the stepper, the bots and `ServerHandle::condition_player`
//! take). The socket helpers under them (`udp`, the kernel's arrival stamps) are the
//! shells' own.

pub mod batch;
pub mod conditioner;
pub(crate) mod stamp;
pub(crate) mod udp;
