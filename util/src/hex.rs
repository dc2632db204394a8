//! Hex encoding for keys and tokens on the command line and in configuration.

/// Why a hex string could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// Hex strings have an even number of digits.
    #[error("odd number of hex digits ({0})")]
    OddLength(usize),
    /// A character that is not a hex digit.
    #[error("not a hex digit at position {0}")]
    BadDigit(usize),
    /// The decoded length is not the one required.
    #[error("expected {expected} bytes ({} hex digits), got {got} bytes", expected * 2)]
    WrongLength {
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
}

/// Lower-case hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Decodes hex (either case, surrounding whitespace ignored).
///
/// # Errors
/// On an odd length or a non-hex character.
pub fn decode(s: &str) -> Result<Vec<u8>, HexError> {
    let s = s.trim().as_bytes();
    if !s.len().is_multiple_of(2) {
        return Err(HexError::OddLength(s.len()));
    }
    let digit = |i: usize| -> Result<u8, HexError> {
        (s[i] as char).to_digit(16).map(|d| d as u8).ok_or(HexError::BadDigit(i))
    };
    (0..s.len() / 2).map(|i| Ok(digit(2 * i)? << 4 | digit(2 * i + 1)?)).collect()
}

/// Decodes exactly `N` bytes of hex.
///
/// # Errors
/// On bad hex or a different length.
pub fn decode_array<const N: usize>(s: &str) -> Result<[u8; N], HexError> {
    let v = decode(s)?;
    v.as_slice().try_into().map_err(|_| HexError::WrongLength { expected: N, got: v.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        assert_eq!(encode(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(decode(" 00AB10\n"), Ok(vec![0, 0xab, 0x10]));
        assert_eq!(decode("abc"), Err(HexError::OddLength(3)));
        assert_eq!(decode("zz"), Err(HexError::BadDigit(0)));
        assert_eq!(decode_array::<2>("0011"), Ok([0, 0x11]));
        assert_eq!(decode_array::<2>("00"), Err(HexError::WrongLength { expected: 2, got: 1 }));
        assert_eq!(decode(""), Ok(vec![]));
    }
}
