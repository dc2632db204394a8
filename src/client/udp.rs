//! A [`GameClient`] over a real UDP socket, optionally through a link conditioner, driven by
//! `async` steps (one task per client). Datagrams are dated when they arrived (the kernel's
//! stamp, the socket's arrival stamps), not when the task got round to reading them.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::GameClient;
use super::link::{Conditioned, Fate};
use crate::transport::conditioner::{Bottleneck, LinkProfile};
use crate::transport::stamp::{Stamps, arrival};

/// A client and its socket.
#[derive(Debug)]
pub struct UdpClient {
    /// The protocol state.
    pub client: GameClient,
    socket: UdpSocket,
    clock: fn() -> Duration,
    link: Conditioned,
    snapshots: usize,
    stamps: Stamps,
}

impl UdpClient {
    /// Binds an ephemeral port on `bind` (for example `127.0.0.1:0`).
    ///
    /// # Errors
    /// When the socket cannot be bound.
    pub async fn bind(client: GameClient, bind: SocketAddr, clock: fn() -> Duration) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(bind).await?;
        let stamps = Stamps::enable(&socket);
        Ok(Self { client, socket, clock, link: Conditioned::default(), snapshots: 0, stamps })
    }

    /// Sends and receives through a conditioned link (each direction with `profile`).
    pub fn with_conditioner(mut self, profile: LinkProfile, seed: u64) -> Self {
        self.link = Conditioned::new(profile, seed);
        self
    }

    /// What the client receives passes a narrow line first (a home line with its router's
    /// queue: see [`Bottleneck`]), or not (`None`); it may change while running. Set it
    /// after [`with_conditioner`](Self::with_conditioner), which starts a new link.
    pub fn set_downlink(&mut self, bottleneck: Option<Bottleneck>) {
        self.link.set_downlink(bottleneck);
    }

    /// Moves to a new socket on a new local port of the same address, as a NAT rebinding
    /// moves a client: the server's packets to the old port are lost, and its own come from
    /// the new one. The client is not told (as behind a NAT it would not be): it hears
    /// nothing for [`RESUME_AFTER_SILENCE`](super::RESUME_AFTER_SILENCE) and resumes its
    /// session with its ticket. A game that knows its network changed calls
    /// [`GameClient::resume`] after this to resume at once. Returns the new local address.
    ///
    /// # Errors
    /// When no new socket can be bound (the old one is kept).
    pub async fn rebind(&mut self) -> std::io::Result<SocketAddr> {
        let mut at = self.socket.local_addr()?;
        at.set_port(0);
        let socket = UdpSocket::bind(at).await?;
        self.stamps = Stamps::enable(&socket);
        self.socket = socket;
        self.socket.local_addr()
    }

    /// The local address.
    ///
    /// # Errors
    /// From the socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    fn transmit(&mut self, wire: Vec<(SocketAddr, Vec<u8>)>) {
        for (to, bytes) in wire {
            if let Fate::Now = self.link.outbound(to, &bytes) {
                let _ = self.socket.try_send_to(&bytes, to);
            }
        }
    }

    fn deliver(&mut self, at: Duration, from: SocketAddr, bytes: &mut [u8]) {
        if self.client.receive(at, from, bytes).is_some() {
            self.snapshots += 1;
        }
    }

    fn flush_due(&mut self) {
        let Self { client, socket, clock, link, snapshots, .. } = self;
        link.release(
            |to, bytes| {
                let _ = socket.try_send_to(bytes, to);
            },
            |from, bytes| {
                if client.receive(clock(), from, bytes).is_some() {
                    *snapshots += 1;
                }
            },
        );
    }

    /// Runs timers and sends `input` (when connected), then takes datagrams until `until`.
    /// Returns how many new snapshots arrived.
    pub async fn step(&mut self, input: &[u8], until: Instant) -> usize {
        self.step_sending(Some(input), until).await
    }

    /// [`UdpClient::step`] for a client that sends no input (a spectator, or a player
    /// between rounds): it still acknowledges what it receives, so its snapshots stay
    /// deltas and its reliable messages arrive.
    pub async fn step_watching(&mut self, until: Instant) -> usize {
        self.step_sending(None, until).await
    }

    async fn step_sending(&mut self, input: Option<&[u8]>, until: Instant) -> usize {
        self.snapshots = 0;
        let now = (self.clock)();
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.update(now, &mut wire);
        match input {
            Some(input) => self.client.send_input(now, input, &mut wire),
            None => self.client.send_without_input(now, &mut wire),
        }
        self.transmit(wire);
        let mut buf = [0u8; 1500];
        loop {
            self.flush_due();
            let deadline = self.link.next_due().map_or(until, |t| t.min(until));
            match tokio::time::timeout_at(deadline, self.socket.readable()).await {
                Ok(Ok(())) => {
                    // What is waiting now, bounded (a flood cannot hold the task).
                    for _ in 0..256 {
                        let Ok(got) = self.stamps.try_recv(&self.socket, &mut buf) else { break };
                        let (n, from) = (got.len, got.from);
                        if let Fate::Now = self.link.inbound(from, &buf[..n]) {
                            let at = arrival((self.clock)(), got.waited);
                            self.deliver(at, from, &mut buf[..n]);
                        }
                    }
                }
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
