//! A [`GameClient`] over a real UDP socket, optionally through a link conditioner.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::GameClient;
use crate::transport::conditioner::{LinkConditioner, LinkProfile};

type Held = Vec<(Instant, SocketAddr, Vec<u8>)>;

/// A client and its socket.
#[derive(Debug)]
pub struct UdpClient {
    /// The protocol state.
    pub client: GameClient,
    socket: UdpSocket,
    clock: fn() -> Duration,
    up: Option<LinkConditioner>,
    down: Option<LinkConditioner>,
    outgoing: Held,
    incoming: Held,
    snapshots: usize,
}

impl UdpClient {
    /// Binds an ephemeral port on `bind` (for example `127.0.0.1:0`).
    ///
    /// # Errors
    /// When the socket cannot be bound.
    pub async fn bind(client: GameClient, bind: SocketAddr, clock: fn() -> Duration) -> std::io::Result<Self> {
        Ok(Self {
            client,
            socket: UdpSocket::bind(bind).await?,
            clock,
            up: None,
            down: None,
            outgoing: Vec::new(),
            incoming: Vec::new(),
            snapshots: 0,
        })
    }

    /// Sends and receives through a conditioned link (each direction with `profile`).
    pub fn with_conditioner(mut self, profile: LinkProfile, seed: u64) -> Self {
        self.up = Some(LinkConditioner::new(profile, seed));
        self.down = Some(LinkConditioner::new(profile, seed.rotate_left(17) ^ 0x5bd1_e995));
        self
    }

    /// The local address.
    ///
    /// # Errors
    /// From the socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    fn transmit(&mut self, wire: Vec<(SocketAddr, Vec<u8>)>) {
        let now = Instant::now();
        for (to, bytes) in wire {
            match self.up.as_mut().map(LinkConditioner::decide) {
                None => {
                    let _ = self.socket.try_send_to(&bytes, to);
                }
                Some(None) => {}
                Some(Some(delay)) => self.outgoing.push((now + delay, to, bytes)),
            }
        }
    }

    fn deliver(&mut self, from: SocketAddr, mut bytes: Vec<u8>) {
        let now = (self.clock)();
        if self.client.receive(now, from, &mut bytes).is_some() {
            self.snapshots += 1;
        }
    }

    fn flush_due(&mut self) {
        let now = Instant::now();
        let (due, held): (Held, Held) = std::mem::take(&mut self.outgoing).into_iter().partition(|(t, _, _)| *t <= now);
        self.outgoing = held;
        for (_, to, bytes) in due {
            let _ = self.socket.try_send_to(&bytes, to);
        }
        let (mut due, held): (Held, Held) =
            std::mem::take(&mut self.incoming).into_iter().partition(|(t, _, _)| *t <= now);
        self.incoming = held;
        due.sort_by_key(|(t, _, _)| *t);
        for (_, from, bytes) in due {
            self.deliver(from, bytes);
        }
    }

    /// Runs timers and sends `input` (when connected), then takes datagrams until `until`.
    /// Returns how many new snapshots arrived.
    pub async fn step(&mut self, input: &[u8], until: Instant) -> usize {
        self.snapshots = 0;
        let now = (self.clock)();
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.update(now, &mut wire);
        self.client.send_input(now, input, &mut wire);
        self.transmit(wire);
        let mut buf = [0u8; 1500];
        loop {
            self.flush_due();
            let next_held = self.outgoing.iter().chain(&self.incoming).map(|(t, _, _)| *t).min();
            let deadline = next_held.map_or(until, |t| t.min(until));
            match tokio::time::timeout_at(deadline, self.socket.recv_from(&mut buf)).await {
                Ok(Ok((n, from))) => match self.down.as_mut().map(LinkConditioner::decide) {
                    None => self.deliver(from, buf[..n].to_vec()),
                    Some(None) => {}
                    Some(Some(delay)) => self.incoming.push((Instant::now() + delay, from, buf[..n].to_vec())),
                },
                Ok(Err(_)) => {}
                Err(_) if Instant::now() >= until => {
                    self.flush_due();
                    return self.snapshots;
                }
                Err(_) => {}
            }
        }
    }

    /// Disconnects, telling the server (straight, not through the conditioner).
    pub fn disconnect(&mut self) {
        let now = (self.clock)();
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.disconnect(now, &mut wire);
        for (to, bytes) in wire {
            let _ = self.socket.try_send_to(&bytes, to);
        }
    }
}
