//! A [`Transmit`] sink over a tokio UDP socket.

use std::net::SocketAddr;

use tokio::net::UdpSocket;

use crate::protocol::netcode::Transmit;

/// Sends without waiting: a datagram the kernel will not take now (a full send buffer) is
/// dropped and counted, as the network itself might drop it.
#[derive(Debug)]
pub(crate) struct UdpTx<'a> {
    socket: &'a UdpSocket,
    /// Datagrams sent.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Datagrams the kernel refused.
    pub dropped: u64,
}

impl<'a> UdpTx<'a> {
    /// A sink over `socket`.
    pub(crate) fn new(socket: &'a UdpSocket) -> Self {
        Self { socket, sent: 0, bytes: 0, dropped: 0 }
    }
}

impl Transmit for UdpTx<'_> {
    fn send(&mut self, to: SocketAddr, packet: &[u8]) {
        match self.socket.try_send_to(packet, to) {
            Ok(_) => {
                self.sent += 1;
                self.bytes += packet.len() as u64;
            }
            Err(_) => self.dropped += 1,
        }
    }
}
