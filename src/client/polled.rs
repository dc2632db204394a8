//! A [`GameClient`] over a non-blocking UDP socket that the game's own loop polls once a
//! frame, as most game clients do: no task, no timer and no wake-up per datagram.
//!
//! [`PolledClient::poll`] takes everything the socket holds, runs the client's timers and
//! sends this frame's input. Its socket is not registered with any event loop, so a datagram
//! arriving costs nothing until the next poll. The bot swarm drives hundreds of these from
//! one task per core.
//!
//! A datagram is dated when it arrived, not when the poll read it: the kernel stamps it
//! (`SO_TIMESTAMPNS`, the socket's arrival stamps), so the wait in the socket until the
//! next frame is not counted as network time in the round trip.
//!
//! The socket is connected to the server it talks to (re-connected if the client moves on
//! to the token's next server address): the kernel then keeps the route instead of looking
//! it up for every datagram sent, and drops datagrams from any other address before they
//! reach the client.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use super::GameClient;
use super::link::{Conditioned, Fate};
use crate::protocol::netcode::Transmit;
use crate::transport::conditioner::{Bottleneck, LinkProfile};
use crate::transport::stamp::{Stamps, arrival};

/// A client and its non-blocking socket.
#[derive(Debug)]
pub struct PolledClient {
    /// The protocol state.
    pub client: GameClient,
    socket: UdpSocket,
    clock: fn() -> Duration,
    link: Conditioned,
    buf: Box<[u8; 2048]>,
    /// The address the socket is connected to.
    peer: Option<SocketAddr>,
    /// The kernel's receive stamps.
    stamps: Stamps,
}

/// Sends `packet` to `to` through `socket`, connecting it to `to` first if it is not
/// already (a connected UDP socket skips the kernel's route lookup per datagram; `cargo run
/// --release --example udp_floor` prints both costs).
fn send(socket: &UdpSocket, peer: &mut Option<SocketAddr>, to: SocketAddr, packet: &[u8]) {
    if *peer != Some(to) {
        if socket.connect(to).is_err() {
            // Not connected (any more): send the plain way.
            *peer = None;
            let _ = socket.send_to(packet, to);
            return;
        }
        *peer = Some(to);
    }
    let _ = socket.send(packet);
}

/// Sends straight from the client's encoder, or through the link conditioner.
struct Tx<'a> {
    socket: &'a UdpSocket,
    peer: &'a mut Option<SocketAddr>,
    link: &'a mut Conditioned,
}

impl Transmit for Tx<'_> {
    fn send(&mut self, to: SocketAddr, packet: &[u8]) {
        if let Fate::Now = self.link.outbound(to, packet) {
            send(self.socket, self.peer, to, packet);
        }
    }
}

impl PolledClient {
    /// Binds an ephemeral port on `bind` (for example `127.0.0.1:0`), non-blocking.
    ///
    /// # Errors
    /// When the socket cannot be bound.
    pub fn bind(client: GameClient, bind: SocketAddr, clock: fn() -> Duration) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(bind)?;
        socket.set_nonblocking(true)?;
        let stamps = Stamps::enable(&socket);
        Ok(Self { client, socket, clock, link: Conditioned::default(), buf: Box::new([0; 2048]), peer: None, stamps })
    }

    /// Moves to a new socket on a new local port of the same address, as a NAT rebinding
    /// moves a client (see [`UdpClient::rebind`](super::udp::UdpClient::rebind)): untold, the
    /// client resumes its session after a second of silence; call [`GameClient::resume`]
    /// after this to resume at once. Returns the new local address.
    ///
    /// # Errors
    /// When no new socket can be bound (the old one is kept).
    pub fn rebind(&mut self) -> std::io::Result<SocketAddr> {
        let mut at = self.socket.local_addr()?;
        at.set_port(0);
        let socket = UdpSocket::bind(at)?;
        socket.set_nonblocking(true)?;
        self.stamps = Stamps::enable(&socket);
        self.socket = socket;
        self.peer = None;
        self.socket.local_addr()
    }

    /// Sends and receives through a conditioned link (each direction with `profile`); held
    /// datagrams move at the first poll after they are due.
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

    /// The local address.
    ///
    /// # Errors
    /// From the socket.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// One frame: takes every datagram waiting (and any held ones now due), runs the
    /// client's timers, and sends `input` (when connected). Returns how many new snapshots
    /// arrived. The time is the clock the client was bound with.
    pub fn poll(&mut self, input: &[u8]) -> usize {
        let now = (self.clock)();
        self.poll_at(now, input)
    }

    /// [`PolledClient::poll`] at `now`, a time the caller gives (a game engine's own clock,
    /// a test's). The client's times are relative, so any clock serves that never goes back
    /// and that every call gives the client, from [`GameClient::new`] on; a datagram is
    /// dated `now` less the time the kernel says it waited in the socket.
    pub fn poll_at(&mut self, now: Duration, input: &[u8]) -> usize {
        self.poll_sending(now, Some(input))
    }

    /// [`PolledClient::poll`] for a client that sends no input (a spectator): it still
    /// acknowledges what it receives.
    pub fn poll_watching(&mut self) -> usize {
        let now = (self.clock)();
        self.poll_sending(now, None)
    }

    /// [`PolledClient::poll_watching`] at `now` (see [`PolledClient::poll_at`]).
    pub fn poll_watching_at(&mut self, now: Duration) -> usize {
        self.poll_sending(now, None)
    }

    fn poll_sending(&mut self, now: Duration, input: Option<&[u8]>) -> usize {
        let Self { client, socket, clock: _, link, buf, peer, stamps } = self;
        let mut snapshots = 0;
        link.release(
            |to, bytes| send(socket, peer, to, bytes),
            |from, bytes| snapshots += usize::from(client.receive(now, from, bytes).is_some()),
        );
        // Bounded: a flood cannot hold the caller's loop.
        for _ in 0..256 {
            let Ok(got) = stamps.recv(socket, &mut buf[..]) else { break };
            let (n, from) = (got.len, got.from);
            if let Fate::Now = link.inbound(from, &buf[..n]) {
                let at = arrival(now, got.waited);
                snapshots += usize::from(client.receive(at, from, &mut buf[..n]).is_some());
            }
        }
        let mut tx = Tx { socket, peer, link };
        client.update(now, &mut tx);
        match input {
            Some(input) => client.send_input(now, input, &mut tx),
            None => client.send_without_input(now, &mut tx),
        }
        snapshots
    }

    /// Disconnects, telling the server (straight, not through the conditioner).
    pub fn disconnect(&mut self) {
        let now = (self.clock)();
        self.disconnect_at(now);
    }

    /// [`PolledClient::disconnect`] at `now` (see [`PolledClient::poll_at`]).
    pub fn disconnect_at(&mut self, now: Duration) {
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.disconnect(now, &mut wire);
        for (to, bytes) in wire {
            send(&self.socket, &mut self.peer, to, &bytes);
        }
    }
}
