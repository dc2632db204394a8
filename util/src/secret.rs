//! Comparing secrets (bearer tokens, API keys, signatures) without an early exit.

/// Whether `a` and `b` are equal, in time that depends only on their lengths, not on where
/// they first differ, so a remote caller cannot find a secret a byte at a time by timing.
///
/// ```
/// use volley_util::secret::same;
/// assert!(same(b"s3cret", b"s3cret"));
/// assert!(!same(b"s3cret", b"s3creT"));
/// assert!(!same(b"s3cret", b"s3cre"));
/// ```
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}
