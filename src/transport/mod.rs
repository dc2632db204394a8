//! Moving datagrams: real UDP sockets for the server, clients and bots.

pub mod batch;
pub mod conditioner;
pub mod stamp;
pub mod udp;
