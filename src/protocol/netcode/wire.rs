//! Little-endian byte cursors with bounds checks, and the standard's address encoding.
//!
//! Every read returns `None` past the end of its input instead of panicking, and nothing here
//! allocates: decoders built on these cursors cannot be made to read out of bounds or to
//! allocate by whoever sent the bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Address type byte: no address.
const ADDRESS_NONE: u8 = 0;
/// Address type byte: IPv4 (4 bytes, then a port).
const ADDRESS_IPV4: u8 = 1;
/// Address type byte: IPv6 (8 × u16, then a port).
const ADDRESS_IPV6: u8 = 2;

/// A read cursor over a byte slice.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// Reads one address in the standard's encoding; `Some(None)` is the "no address" type.
    pub(crate) fn address(&mut self) -> Option<Option<SocketAddr>> {
        match self.u8()? {
            ADDRESS_NONE => Some(None),
            ADDRESS_IPV4 => {
                let ip: [u8; 4] = self.array()?;
                let port = self.u16()?;
                Some(Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)))
            }
            ADDRESS_IPV6 => {
                let mut segments = [0u16; 8];
                for s in &mut segments {
                    *s = self.u16()?;
                }
                let port = self.u16()?;
                Some(Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(segments)), port)))
            }
            _ => None,
        }
    }
}

/// A write cursor over a mutable byte slice; writes past the end fail instead of panicking.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(data.len())?;
        self.buf.get_mut(self.pos..end)?.copy_from_slice(data);
        self.pos = end;
        Some(())
    }

    pub(crate) fn u8(&mut self, v: u8) -> Option<()> {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> Option<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> Option<()> {
        self.bytes(&v.to_le_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Option<()> {
        self.bytes(&v.to_le_bytes())
    }

    /// Writes zeros up to `len` bytes from the start of the buffer.
    pub(crate) fn pad_to(&mut self, len: usize) -> Option<()> {
        let pad = self.buf.get_mut(self.pos..len)?;
        pad.fill(0);
        self.pos = len;
        Some(())
    }

    pub(crate) fn address(&mut self, addr: &SocketAddr) -> Option<()> {
        match addr.ip() {
            IpAddr::V4(ip) => {
                self.u8(ADDRESS_IPV4)?;
                self.bytes(&ip.octets())?;
            }
            IpAddr::V6(ip) => {
                self.u8(ADDRESS_IPV6)?;
                for s in ip.segments() {
                    self.u16(s)?;
                }
            }
        }
        self.u16(addr.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_fail_without_panicking() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Some(0x0201));
        assert_eq!(r.u16(), None);
        assert_eq!(r.u8(), Some(3));
        assert_eq!(r.u8(), None);
        assert_eq!(r.bytes(usize::MAX), None);
    }

    #[test]
    fn addresses_round_trip() {
        let addrs: [SocketAddr; 2] = ["127.0.0.1:40000".parse().unwrap(), "[::1]:5".parse().unwrap()];
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        for a in &addrs {
            w.address(a).unwrap();
        }
        assert_eq!(w.position(), 7 + 19);
        let mut r = Reader::new(&buf);
        assert_eq!(r.address(), Some(Some(addrs[0])));
        assert_eq!(r.address(), Some(Some(addrs[1])));
        assert_eq!(Reader::new(&[9]).address(), None, "unknown address type is an error");
    }

    #[test]
    fn writes_past_the_end_fail() {
        let mut buf = [0u8; 3];
        let mut w = Writer::new(&mut buf);
        assert!(w.u16(1).is_some());
        assert!(w.u16(1).is_none());
        assert!(w.pad_to(4).is_none());
        assert!(w.pad_to(3).is_some());
    }
}
