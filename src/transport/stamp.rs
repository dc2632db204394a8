//! When a datagram arrived, not when it was read: the kernel's receive timestamp
//! (`SO_TIMESTAMPNS`, Linux) for client sockets.
//!
//! A game's frame loop reads its socket once a frame, so a datagram can wait in the socket
//! for up to a frame before the client sees it. Stamping it at the read counted that wait as
//! network time: on loopback, bots polled at 60 frames a second reported a 6–8 ms round trip
//! where a socket ping takes 0.05 ms. With the kernel's stamp the client is told how long
//! the datagram waited ([`Stamped::waited`]) and dates its arrival that much earlier
//! ([`arrival`]), in whatever clock it runs on.
//!
//! Elsewhere than Linux, or when the socket option is refused, datagrams are read as
//! before and stamped at the read (`waited` is `None`).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// The longest wait believed: a kernel stamp older than this (a clock step, a stalled
/// process) is taken as this.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(1);

/// One datagram read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamped {
    /// Its length in the buffer.
    pub len: usize,
    /// Who sent it.
    pub from: SocketAddr,
    /// How long it waited in the socket before this read, by the kernel's stamp (`None`:
    /// no stamp).
    pub waited: Option<Duration>,
}

/// A datagram's arrival in the caller's clock: `now` (the clock read at the read) less the
/// time it waited in the socket, at most [`MAX_WAIT`].
pub(crate) fn arrival(now: Duration, waited: Option<Duration>) -> Duration {
    now.saturating_sub(waited.unwrap_or_default().min(MAX_WAIT))
}

/// A socket's receive stamping and its reusable control-message room.
#[derive(Debug, Default)]
pub(crate) struct Stamps {
    /// Whether the kernel stamps this socket's datagrams.
    on: bool,
    cmsg: Vec<u8>,
}

impl Stamps {
    /// Asks the kernel to stamp `socket`'s datagrams as they arrive; without that (another
    /// OS, or refused) reads are stamped at the read.
    pub(crate) fn enable(socket: &impl std::os::fd::AsFd) -> Self {
        sys::enable(socket)
    }

    /// Whether datagrams carry the kernel's stamp (the tests ask).
    #[cfg(test)]
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// Reads one datagram from the non-blocking `socket` into `buf`, with how long it waited.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is waiting, or the socket's error.
    pub(crate) fn recv(&mut self, socket: &std::net::UdpSocket, buf: &mut [u8]) -> io::Result<Stamped> {
        if !self.on {
            let (len, from) = socket.recv_from(buf)?;
            return Ok(Stamped { len, from, waited: None });
        }
        sys::recv(self, socket, buf)
    }

    /// [`Stamps::recv`] on a tokio socket, without waiting (`WouldBlock` when nothing is
    /// there: await `socket.readable()`).
    ///
    /// # Errors
    /// As [`Stamps::recv`].
    pub(crate) fn try_recv(&mut self, socket: &tokio::net::UdpSocket, buf: &mut [u8]) -> io::Result<Stamped> {
        if !self.on {
            let (len, from) = socket.try_recv_from(buf)?;
            return Ok(Stamped { len, from, waited: None });
        }
        socket.try_io(tokio::io::Interest::READABLE, || sys::recv(self, socket, buf))
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io::{self, IoSliceMut};
    use std::os::fd::{AsFd, AsRawFd};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt};

    use super::{Stamped, Stamps};

    pub(super) fn enable(socket: &impl AsFd) -> Stamps {
        let on = setsockopt(socket, sockopt::ReceiveTimestampns, &true).is_ok();
        Stamps { on, cmsg: if on { nix::cmsg_space!(nix::sys::time::TimeSpec) } else { Vec::new() } }
    }

    pub(super) fn recv(stamps: &mut Stamps, socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Stamped> {
        let mut iov = [IoSliceMut::new(buf)];
        let msg =
            recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(&mut stamps.cmsg), MsgFlags::MSG_DONTWAIT)
                .map_err(io::Error::from)?;
        let from = msg
            .address
            .and_then(|a| {
                a.as_sockaddr_in()
                    .map(|v4| std::net::SocketAddr::from(*v4))
                    .or_else(|| a.as_sockaddr_in6().map(|v6| std::net::SocketAddr::from(*v6)))
            })
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a datagram without an IP sender"))?;
        let mut stamped = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmTimestampns(ts) = c {
                    stamped = Some(Duration::from(ts));
                }
            }
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(Stamped { len: msg.bytes, from, waited: stamped.map(|t| now.saturating_sub(t)) })
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;

    use super::{Stamped, Stamps};

    pub(super) fn enable(_: &impl std::os::fd::AsFd) -> Stamps {
        Stamps::default()
    }

    pub(super) fn recv(_: &mut Stamps, _: &impl std::os::fd::AsRawFd, _: &mut [u8]) -> io::Result<Stamped> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no receive stamps here"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_that_waited_a_frame_is_stamped_when_it_arrived() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
        rx.set_nonblocking(true).expect("non-blocking");
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
        let mut stamps = Stamps::enable(&rx);
        assert!(stamps.is_on(), "Linux stamps datagrams");
        tx.send_to(b"hello", rx.local_addr().expect("an address")).expect("sent");
        // Once it is in the socket (a busy machine may deliver it late even on loopback)...
        rx.set_nonblocking(false).expect("blocking");
        let mut peek = [0u8; 8];
        rx.peek_from(&mut peek).expect("the datagram arrives");
        rx.set_nonblocking(true).expect("non-blocking");
        // ... a frame at 60 Hz, and then some: the datagram waits in the socket meanwhile.
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0u8; 64];
        let got = stamps.recv(&rx, &mut buf).expect("the datagram");
        assert_eq!((&buf[..got.len], got.from), (&b"hello"[..], tx.local_addr().expect("an address")));
        let waited = got.waited.expect("a kernel stamp");
        assert!(waited >= Duration::from_millis(19), "it waited {waited:?} in the socket");
        let now = Duration::from_secs(100);
        assert_eq!(arrival(now, got.waited), now - waited, "dated that much earlier");
        assert_eq!(arrival(now, Some(Duration::from_secs(5))), now - MAX_WAIT, "a stale stamp is capped");
        assert_eq!(arrival(now, None), now);
        assert!(stamps.recv(&rx, &mut buf).is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock));
    }
}
