//! A [`GameClient`] over a real UDP socket.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::GameClient;
use crate::transport::udp::UdpTx;

/// A client and its socket.
#[derive(Debug)]
pub struct UdpClient {
    /// The protocol state.
    pub client: GameClient,
    socket: UdpSocket,
    clock: fn() -> Duration,
}

impl UdpClient {
    /// Binds an ephemeral port on `bind` (for example `127.0.0.1:0`).
    ///
    /// # Errors
    /// When the socket cannot be bound.
    pub async fn bind(client: GameClient, bind: SocketAddr, clock: fn() -> Duration) -> std::io::Result<Self> {
        Ok(Self { client, socket: UdpSocket::bind(bind).await?, clock })
    }

    /// The local address.
    ///
    /// # Errors
    /// From the socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Runs timers and sends `input` (when connected), then takes datagrams until `until`.
    /// Returns how many new snapshots arrived.
    pub async fn step(&mut self, input: &[u8], until: Instant) -> usize {
        let now = (self.clock)();
        let mut tx = UdpTx::new(&self.socket);
        self.client.update(now, &mut tx);
        self.client.send_input(now, input, &mut tx);
        let mut snapshots = 0;
        let mut buf = [0u8; 1500];
        loop {
            let recv = tokio::time::timeout_at(until, self.socket.recv_from(&mut buf)).await;
            match recv {
                Ok(Ok((n, from))) => {
                    let now = (self.clock)();
                    if self.client.receive(now, from, &mut buf[..n]).is_some() {
                        snapshots += 1;
                    }
                }
                Ok(Err(_)) => continue,
                Err(_) => return snapshots,
            }
        }
    }

    /// Disconnects, telling the server.
    pub fn disconnect(&mut self) {
        let now = (self.clock)();
        let mut tx = UdpTx::new(&self.socket);
        self.client.disconnect(now, &mut tx);
    }
}
