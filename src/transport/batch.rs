//! Many datagrams per system call: `recvmmsg` and `sendmmsg` on Linux (through `nix`, so no
//! `unsafe` here), one datagram per call elsewhere.
//!
//! Both work on a tokio [`UdpSocket`] without waiting: they take what the kernel has (or
//! will take) now. A send the kernel refuses because its buffer is full is dropped and
//! counted, as the network itself might drop it.

use std::io;
use std::net::SocketAddr;

use tokio::net::UdpSocket;

/// The most datagrams one call moves.
pub const BATCH: usize = 32;

/// The largest datagram received (netcode packets are at most 1200 bytes of payload plus
/// their header; anything longer is cut and then rejected by the protocol).
pub const DATAGRAM_ROOM: usize = 2048;

/// Room for up to [`BATCH`] received datagrams, reused call after call.
#[derive(Debug)]
pub struct RecvBatch {
    storage: Vec<u8>,
    /// (room, length, sender) of each datagram taken.
    got: Vec<(usize, usize, SocketAddr)>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self { storage: vec![0; BATCH * DATAGRAM_ROOM], got: Vec::with_capacity(BATCH) }
    }
}

impl RecvBatch {
    /// How many datagrams the last [`RecvBatch::recv`] took.
    pub fn len(&self) -> usize {
        self.got.len()
    }

    /// Whether the last receive took nothing.
    pub fn is_empty(&self) -> bool {
        self.got.is_empty()
    }

    /// Datagram `i` of the last receive (mutable: the protocol decrypts in place) and its
    /// sender.
    pub fn get_mut(&mut self, i: usize) -> Option<(&mut [u8], SocketAddr)> {
        let (room, len, from) = *self.got.get(i)?;
        let start = room * DATAGRAM_ROOM;
        Some((&mut self.storage[start..start + len.min(DATAGRAM_ROOM)], from))
    }

    /// Takes what the socket holds now, up to [`BATCH`] datagrams.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is waiting (then await `socket.readable()`), or the
    /// socket's error.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.got.clear();
        socket.try_io(tokio::io::Interest::READABLE, || sys::recv(socket, &mut self.storage, &mut self.got))?;
        Ok(self.got.len())
    }
}

/// What a batch send did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    /// Datagrams the kernel took.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Datagrams it refused (a full send buffer, an unreachable address).
    pub dropped: u64,
    /// System calls made.
    pub calls: u64,
}

/// Sends every datagram in `items` (destination, bytes), [`BATCH`] per system call where the
/// OS allows, without waiting.
pub fn send_batch(socket: &UdpSocket, items: &[(SocketAddr, &[u8])]) -> SendOutcome {
    let mut out = SendOutcome::default();
    let mut rest = items;
    while !rest.is_empty() {
        let chunk = &rest[..rest.len().min(BATCH)];
        out.calls += 1;
        match socket.try_io(tokio::io::Interest::WRITABLE, || sys::send(socket, chunk)) {
            Ok(n) => {
                let n = n.clamp(1, chunk.len());
                out.sent += n as u64;
                out.bytes += chunk[..n].iter().map(|(_, b)| b.len() as u64).sum::<u64>();
                rest = &rest[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The kernel's buffer is full: what is left would wait behind it anyway.
                out.dropped += rest.len() as u64;
                break;
            }
            Err(_) => {
                // The first datagram of the chunk was refused (its address, say): skip it.
                out.dropped += 1;
                rest = &rest[1..];
            }
        }
    }
    out
}

#[cfg(target_os = "linux")]
mod sys {
    use std::cell::RefCell;
    use std::io::{self, IoSlice, IoSliceMut};
    use std::net::SocketAddr;
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};
    use tokio::net::UdpSocket;

    use super::{BATCH, DATAGRAM_ROOM};

    type Headers = RefCell<Option<MultiHeaders<SockaddrStorage>>>;

    thread_local! {
        // The kernel's headers for one call, allocated once per thread (they hold raw
        // pointers, so they cannot move between threads with the caller). Receiving and
        // sending never share them: a send points their address fields at its own
        // destinations, where a receive needs the room `preallocate` set aside.
        static RECV_HEADERS: Headers = const { RefCell::new(None) };
        static SEND_HEADERS: Headers = const { RefCell::new(None) };
    }

    fn with_headers<R>(
        which: &'static std::thread::LocalKey<Headers>,
        f: impl FnOnce(&mut MultiHeaders<SockaddrStorage>) -> R,
    ) -> R {
        which.with(|h| {
            let mut h = h.borrow_mut();
            f(h.get_or_insert_with(|| MultiHeaders::preallocate(BATCH, None)))
        })
    }

    fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
        if let Some(v4) = a.as_sockaddr_in() {
            return Some(SocketAddr::from(*v4));
        }
        a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6))
    }

    pub(super) fn recv(
        socket: &UdpSocket,
        storage: &mut [u8],
        got: &mut Vec<(usize, usize, SocketAddr)>,
    ) -> io::Result<()> {
        with_headers(&RECV_HEADERS, |headers| {
            // On the stack: no allocation per call.
            let mut rooms = storage.chunks_mut(DATAGRAM_ROOM);
            let mut slices: [[IoSliceMut<'_>; 1]; BATCH] =
                std::array::from_fn(|_| [IoSliceMut::new(rooms.next().unwrap_or_default())]);
            let results = recvmmsg(socket.as_raw_fd(), headers, slices.iter_mut(), MsgFlags::MSG_DONTWAIT, None)?;
            for (room, r) in results.enumerate() {
                // A datagram from an address that is neither IPv4 nor IPv6 cannot be a
                // client: skipped.
                if let Some(from) = r.address.as_ref().and_then(to_std) {
                    got.push((room, r.bytes, from));
                }
            }
            Ok(())
        })
    }

    pub(super) fn send(socket: &UdpSocket, chunk: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        with_headers(&SEND_HEADERS, |headers| {
            let slices: Vec<[IoSlice<'_>; 1]> = chunk.iter().map(|(_, b)| [IoSlice::new(b)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> =
                chunk.iter().map(|(a, _)| Some(SockaddrStorage::from(*a))).collect();
            let results = sendmmsg(socket.as_raw_fd(), headers, &slices, &addrs, [], MsgFlags::MSG_DONTWAIT)?;
            Ok(results.count())
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::net::SocketAddr;

    use tokio::net::UdpSocket;

    use super::{BATCH, DATAGRAM_ROOM};

    pub(super) fn recv(
        socket: &UdpSocket,
        storage: &mut [u8],
        got: &mut Vec<(usize, usize, SocketAddr)>,
    ) -> io::Result<()> {
        for (i, room) in storage.chunks_mut(DATAGRAM_ROOM).take(BATCH).enumerate() {
            match socket.try_recv_from(room) {
                Ok((n, from)) => got.push((i, n, from)),
                Err(e) if got.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(())
    }

    pub(super) fn send(socket: &UdpSocket, chunk: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        let (to, bytes) = chunk[0];
        socket.try_send_to(bytes, to).map(|_| 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_goes_out_and_comes_back_whole_and_in_order() {
        let a = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let c = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let (to_b, to_c) = (b.local_addr().expect("addr"), c.local_addr().expect("addr"));
        let payloads: Vec<Vec<u8>> = (0..70u8).map(|i| vec![i; 1 + usize::from(i) * 17]).collect();
        let items: Vec<(SocketAddr, &[u8])> =
            payloads.iter().enumerate().map(|(i, p)| (if i % 2 == 0 { to_b } else { to_c }, p.as_slice())).collect();
        // A new socket is writable once the runtime's reactor has said so.
        a.writable().await.expect("writable");
        let out = send_batch(&a, &items);
        assert_eq!(out.sent, 70);
        assert_eq!(out.dropped, 0);
        assert_eq!(out.bytes, payloads.iter().map(|p| p.len() as u64).sum::<u64>());
        for (sock, parity) in [(&b, 0), (&c, 1)] {
            let mut batch = RecvBatch::default();
            let mut seen = Vec::new();
            while seen.len() < 35 {
                sock.readable().await.expect("readable");
                match batch.recv(sock) {
                    Ok(n) => {
                        assert!(n <= BATCH);
                        for i in 0..n {
                            let (bytes, from) = batch.get_mut(i).expect("datagram");
                            assert_eq!(from, a.local_addr().expect("addr"));
                            seen.push(bytes.to_vec());
                        }
                    }
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
                }
            }
            let expected: Vec<Vec<u8>> = payloads.iter().skip(parity).step_by(2).cloned().collect();
            assert_eq!(seen, expected);
        }
    }

    #[tokio::test]
    async fn an_empty_socket_says_would_block() {
        let a = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let mut batch = RecvBatch::default();
        let e = batch.recv(&a).expect_err("nothing to take");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(batch.is_empty());
        assert_eq!(send_batch(&a, &[]), SendOutcome::default());
    }
}
