//! The two AEADs of the standard, in place and without allocation (RustCrypto).

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Tag, XChaCha20Poly1305, XNonce};

use super::{KEY_BYTES, MAC_BYTES};

/// A 32-byte symmetric key.
pub type Key = [u8; KEY_BYTES];

/// The 12-byte IETF nonce for a 64-bit sequence: four zero bytes, then the sequence in LE.
fn nonce(sequence: u64) -> chacha20poly1305::Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&sequence.to_le_bytes());
    n.into()
}

/// Encrypts `buf[..len]` in place and writes the tag at `buf[len..len + 16]`; returns
/// `len + 16`, or `None` if the buffer has no room for the tag.
pub(crate) fn seal(buf: &mut [u8], len: usize, sequence: u64, key: &Key, aad: &[u8]) -> Option<usize> {
    let end = len.checked_add(MAC_BYTES)?;
    if end > buf.len() {
        return None;
    }
    let (data, rest) = buf.split_at_mut(len);
    let tag = ChaCha20Poly1305::new(key.into()).encrypt_in_place_detached(&nonce(sequence), aad, data).ok()?;
    rest[..MAC_BYTES].copy_from_slice(&tag);
    Some(end)
}

/// Decrypts `buf` (ciphertext followed by its tag) in place; returns the plaintext length.
pub(crate) fn open(buf: &mut [u8], sequence: u64, key: &Key, aad: &[u8]) -> Option<usize> {
    let len = buf.len().checked_sub(MAC_BYTES)?;
    let (data, tag) = buf.split_at_mut(len);
    let tag = Tag::clone_from_slice(tag);
    ChaCha20Poly1305::new(key.into()).decrypt_in_place_detached(&nonce(sequence), aad, data, &tag).ok()?;
    Some(len)
}

/// XChaCha20-Poly1305 variant of [`seal`] with a 24-byte nonce (connect tokens).
pub(crate) fn xseal(buf: &mut [u8], len: usize, nonce: &[u8; 24], key: &Key, aad: &[u8]) -> Option<usize> {
    let end = len.checked_add(MAC_BYTES)?;
    if end > buf.len() {
        return None;
    }
    let (data, rest) = buf.split_at_mut(len);
    let tag =
        XChaCha20Poly1305::new(key.into()).encrypt_in_place_detached(XNonce::from_slice(nonce), aad, data).ok()?;
    rest[..MAC_BYTES].copy_from_slice(&tag);
    Some(end)
}

/// XChaCha20-Poly1305 variant of [`open`].
pub(crate) fn xopen(buf: &mut [u8], nonce: &[u8; 24], key: &Key, aad: &[u8]) -> Option<usize> {
    let len = buf.len().checked_sub(MAC_BYTES)?;
    let (data, tag) = buf.split_at_mut(len);
    let tag = Tag::clone_from_slice(tag);
    XChaCha20Poly1305::new(key.into()).decrypt_in_place_detached(XNonce::from_slice(nonce), aad, data, &tag).ok()?;
    Some(len)
}

/// Fills `N` bytes from the operating system's randomness.
///
/// # Errors
/// When the OS has no randomness to give (practically never on Linux).
pub fn random_bytes<const N: usize>() -> Result<[u8; N], getrandom::Error> {
    let mut out = [0u8; N];
    getrandom::getrandom(&mut out)?;
    Ok(out)
}

/// A fresh random key from the operating system.
///
/// # Errors
/// See [`random_bytes`].
pub fn generate_key() -> Result<Key, getrandom::Error> {
    random_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_tamper_detection() {
        let key = [7u8; 32];
        let mut buf = [0u8; 32];
        buf[..5].copy_from_slice(b"hello");
        let n = seal(&mut buf, 5, 42, &key, b"ad").unwrap();
        assert_eq!(n, 21);
        assert_ne!(&buf[..5], b"hello");
        let mut copy = buf;
        assert_eq!(open(&mut copy[..n], 42, &key, b"ad"), Some(5));
        assert_eq!(&copy[..5], b"hello");
        let mut copy = buf;
        assert_eq!(open(&mut copy[..n], 43, &key, b"ad"), None, "wrong nonce");
        let mut copy = buf;
        assert_eq!(open(&mut copy[..n], 42, &key, b"xx"), None, "wrong associated data");
        let mut copy = buf;
        copy[0] ^= 1;
        assert_eq!(open(&mut copy[..n], 42, &key, b"ad"), None, "flipped bit");
        assert_eq!(open(&mut buf[..3], 42, &key, b"ad"), None, "shorter than a tag");
        assert_eq!(seal(&mut [0u8; 20], 5, 1, &key, b""), None, "no room for the tag");
    }

    #[test]
    fn xseal_xopen_round_trip() {
        let key = [9u8; 32];
        let nonce = [3u8; 24];
        let mut buf = [1u8; 40];
        let n = xseal(&mut buf, 24, &nonce, &key, b"x").unwrap();
        assert_eq!(xopen(&mut buf[..n], &nonce, &key, b"x"), Some(24));
        assert_eq!(buf[..24], [1u8; 24]);
    }
}
