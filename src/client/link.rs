//! The client side of a conditioned link: datagrams held for their delay, or lost, in each
//! direction. Shared by the async [`super::udp::UdpClient`] and the polled
//! [`super::polled::PolledClient`].

use std::net::SocketAddr;

use tokio::time::Instant;

use crate::transport::conditioner::{LinkConditioner, LinkProfile};

type Held = Vec<(Instant, SocketAddr, Vec<u8>)>;

/// Both directions of one client's link; a perfect link holds nothing.
#[derive(Debug, Default)]
pub(crate) struct Conditioned {
    up: Option<LinkConditioner>,
    down: Option<LinkConditioner>,
    outgoing: Held,
    incoming: Held,
}

/// What the link does with a datagram.
pub(crate) enum Fate {
    /// Pass it on now.
    Now,
    /// Held or lost.
    Later,
}

impl Conditioned {
    /// Each direction with `profile`, from `seed`.
    pub(crate) fn new(profile: LinkProfile, seed: u64) -> Self {
        Self {
            up: Some(LinkConditioner::new(profile, seed)),
            down: Some(LinkConditioner::new(profile, seed.rotate_left(17) ^ 0x5bd1_e995)),
            outgoing: Vec::new(),
            incoming: Vec::new(),
        }
    }

    fn decide(c: &mut Option<LinkConditioner>, held: &mut Held, at: SocketAddr, bytes: &[u8]) -> Fate {
        match c.as_mut().map(LinkConditioner::decide) {
            None => Fate::Now,
            Some(None) => Fate::Later,
            Some(Some(delay)) => {
                held.push((Instant::now() + delay, at, bytes.to_vec()));
                Fate::Later
            }
        }
    }

    /// A datagram to send to `to`.
    pub(crate) fn outbound(&mut self, to: SocketAddr, bytes: &[u8]) -> Fate {
        Self::decide(&mut self.up, &mut self.outgoing, to, bytes)
    }

    /// A datagram received from `from`.
    pub(crate) fn inbound(&mut self, from: SocketAddr, bytes: &[u8]) -> Fate {
        Self::decide(&mut self.down, &mut self.incoming, from, bytes)
    }

    /// When the next held datagram is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.outgoing.iter().chain(&self.incoming).map(|(t, _, _)| *t).min()
    }

    /// Hands out every held datagram that is due: outgoing ones to `send`, then incoming ones
    /// (in the order they are due) to `deliver`.
    pub(crate) fn release(
        &mut self,
        mut send: impl FnMut(SocketAddr, &[u8]),
        mut deliver: impl FnMut(SocketAddr, &mut [u8]),
    ) {
        if self.outgoing.is_empty() && self.incoming.is_empty() {
            return;
        }
        let now = Instant::now();
        let (due, held): (Held, Held) = std::mem::take(&mut self.outgoing).into_iter().partition(|(t, _, _)| *t <= now);
        self.outgoing = held;
        for (_, to, bytes) in due {
            send(to, &bytes);
        }
        let (mut due, held): (Held, Held) =
            std::mem::take(&mut self.incoming).into_iter().partition(|(t, _, _)| *t <= now);
        self.incoming = held;
        due.sort_by_key(|(t, _, _)| *t);
        for (_, from, mut bytes) in due {
            deliver(from, &mut bytes);
        }
    }
}
