//! The client side of a conditioned link: datagrams held for their delay, or lost, in each
//! direction. Shared by the async [`super::udp::UdpClient`] and the polled
//! [`super::polled::PolledClient`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::transport::conditioner::{Bottleneck, LinkConditioner, LinkProfile};

type HeldDatagrams = Vec<(Instant, SocketAddr, Vec<u8>)>;

/// Both directions of one client's link; a perfect link holds nothing.
#[derive(Debug, Default)]
pub(crate) struct Conditioned {
    up: Option<LinkConditioner>,
    down: Option<LinkConditioner>,
    outgoing: HeldDatagrams,
    incoming: HeldDatagrams,
    /// The conditioners' clock starts here.
    epoch: Option<Instant>,
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
            epoch: Some(Instant::now()),
        }
    }

    /// Puts a bottleneck on the way in (what the client receives passes a narrow line
    /// first), or takes it off; a perfect link gets a conditioner for it.
    pub(crate) fn set_downlink(&mut self, bottleneck: Option<Bottleneck>) {
        let down = self.down.get_or_insert_with(|| LinkConditioner::new(LinkProfile::PERFECT, 0x2545_f491));
        down.set_bottleneck(bottleneck);
        self.epoch.get_or_insert_with(Instant::now);
    }

    fn decide(
        c: &mut Option<LinkConditioner>,
        epoch: Option<Instant>,
        held: &mut HeldDatagrams,
        at: SocketAddr,
        bytes: &[u8],
    ) -> Fate {
        let Some(c) = c.as_mut() else { return Fate::Now };
        let now = Instant::now();
        let since = epoch.map_or(Duration::ZERO, |e| now.saturating_duration_since(e));
        match c.pass(since, bytes.len()) {
            None => Fate::Later,
            Some(delay) => {
                held.push((now + delay, at, bytes.to_vec()));
                Fate::Later
            }
        }
    }

    /// A datagram to send to `to`.
    pub(crate) fn outbound(&mut self, to: SocketAddr, bytes: &[u8]) -> Fate {
        Self::decide(&mut self.up, self.epoch, &mut self.outgoing, to, bytes)
    }

    /// A datagram received from `from`.
    pub(crate) fn inbound(&mut self, from: SocketAddr, bytes: &[u8]) -> Fate {
        Self::decide(&mut self.down, self.epoch, &mut self.incoming, from, bytes)
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
        let (due, held): (HeldDatagrams, HeldDatagrams) =
            std::mem::take(&mut self.outgoing).into_iter().partition(|(t, _, _)| *t <= now);
        self.outgoing = held;
        for (_, to, bytes) in due {
            send(to, &bytes);
        }
        let (mut due, held): (HeldDatagrams, HeldDatagrams) =
            std::mem::take(&mut self.incoming).into_iter().partition(|(t, _, _)| *t <= now);
        self.incoming = held;
        due.sort_by_key(|(t, _, _)| *t);
        for (_, from, mut bytes) in due {
            deliver(from, &mut bytes);
        }
    }
}
