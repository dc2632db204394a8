//! The WebTransport endpoint's certificate: self-signed and rotated for development, or the
//! operator's files, reloaded when they change.
//!
//! A page may trust a self-signed certificate without a certificate authority by its SHA-256
//! hash (`serverCertificateHashes`), but only an ECDSA P-256 certificate valid for at most 14
//! days. So a development server makes one valid for [`SELF_SIGNED_DAYS`] days from an hour
//! ago, makes the next one when half of that has passed, and publishes the hashes of both
//! (the one in use and the one before it, which connections made under it may still need when
//! they reconnect) where the page fetches them (`/web.json`). The clock is passed in, so the
//! rotation is tested with a clock moved past a certificate's end.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use wtransport::Identity;

/// Days a self-signed certificate is valid (browsers accept at most 14 for a hash).
pub const SELF_SIGNED_DAYS: u64 = 13;

/// Where the endpoint's certificate comes from.
#[derive(Debug, Clone)]
pub enum Certificates {
    /// A self-signed ECDSA P-256 certificate for these names (and 127.0.0.1, ::1,
    /// localhost), valid `lifetime` from an hour before it is made (at most 14 days less an
    /// hour), replaced when `renew_after` has passed.
    SelfSigned {
        /// The host names and addresses the page connects with.
        names: Vec<String>,
        /// How long each certificate is valid.
        lifetime: Duration,
        /// When to make the next.
        renew_after: Duration,
    },
    /// The operator's PEM files (a chain, its key), reloaded when either file changes.
    Files {
        /// The certificate chain, PEM.
        cert: PathBuf,
        /// Its private key, PEM.
        key: PathBuf,
    },
}

impl Certificates {
    /// Self-signed for `names`, 13 days each, renewed after 6½.
    pub fn self_signed(names: Vec<String>) -> Self {
        let lifetime = Duration::from_secs(SELF_SIGNED_DAYS * 86_400);
        Certificates::SelfSigned { names, lifetime, renew_after: lifetime / 2 }
    }
}

/// A certificate in use.
pub struct Current {
    /// The identity the endpoint presents.
    pub identity: Identity,
    /// When it was made (self-signed) or its files last changed.
    pub made: SystemTime,
    /// Its SHA-256, hex.
    pub hash: String,
}

impl std::fmt::Debug for Current {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current").field("made", &self.made).field("hash", &self.hash).finish()
    }
}

/// What went wrong making or loading a certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A name the certificate cannot carry.
    #[error("a self-signed certificate cannot name {0:?}")]
    Name(String),
    /// The operator's files.
    #[error("reading the certificate files: {0}")]
    Files(String),
}

/// Hex of a certificate's SHA-256, as the page passes it on.
fn hex_hash(identity: &Identity) -> String {
    let Some(c) = identity.certificate_chain().as_slice().first() else { return String::new() };
    c.hash().as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a self-signed certificate valid from an hour before `now` for `lifetime`.
///
/// # Errors
/// A name a certificate cannot carry.
pub fn self_signed(names: &[String], now: SystemTime, lifetime: Duration) -> Result<Current, CertError> {
    let mut all: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for n in names {
        if !all.contains(n) {
            all.push(n.clone());
        }
    }
    let from = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
    let to = from + lifetime.min(Duration::from_secs(14 * 86_400));
    let identity = Identity::self_signed_builder()
        .subject_alt_names(&all)
        .validity_period(from.into(), to.into())
        .build()
        .map_err(|_| CertError::Name(all.join(", ")))?;
    let hash = hex_hash(&identity);
    Ok(Current { identity, made: now, hash })
}

fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Loads the operator's files.
///
/// # Errors
/// A file missing or not PEM.
pub async fn load(cert: &PathBuf, key: &PathBuf) -> Result<Current, CertError> {
    let identity = Identity::load_pemfiles(cert, key).await.map_err(|e| CertError::Files(e.to_string()))?;
    let made = modified(cert).max(modified(key)).unwrap_or(SystemTime::UNIX_EPOCH);
    let hash = hex_hash(&identity);
    Ok(Current { identity, made, hash })
}

/// The certificates in play: the one in use, and the one before it.
#[derive(Debug)]
pub struct Rotation {
    source: Certificates,
    /// The certificate the endpoint presents.
    pub current: Current,
    /// The hash of the one it replaced, while that one is still valid.
    pub previous: Option<(String, SystemTime)>,
}

impl Rotation {
    /// The first certificate.
    ///
    /// # Errors
    /// As [`self_signed`] or [`load`].
    pub async fn start(source: Certificates, now: SystemTime) -> Result<Self, CertError> {
        let current = match &source {
            Certificates::SelfSigned { names, lifetime, .. } => self_signed(names, now, *lifetime)?,
            Certificates::Files { cert, key } => load(cert, key).await?,
        };
        Ok(Self { source, current, previous: None })
    }

    /// The hashes a page may trust now, newest first (only self-signed certificates need them).
    pub fn hashes(&self, now: SystemTime) -> Vec<String> {
        if !matches!(self.source, Certificates::SelfSigned { .. }) {
            return Vec::new();
        }
        let mut out = vec![self.current.hash.clone()];
        if let Some((h, until)) = &self.previous
            && now < *until
        {
            out.push(h.clone());
        }
        out
    }

    /// Makes or loads the next certificate when it is due: true when the endpoint must
    /// present a new one.
    ///
    /// # Errors
    /// The operator's files could not be read (the old certificate stays).
    pub async fn poll(&mut self, now: SystemTime) -> Result<bool, CertError> {
        match &self.source {
            Certificates::SelfSigned { names, lifetime, renew_after } => {
                let age = now.duration_since(self.current.made).unwrap_or_default();
                // A clock moved back before the certificate's birth also renews it.
                if age < *renew_after && now >= self.current.made {
                    return Ok(false);
                }
                let next = self_signed(names, now, *lifetime)?;
                let until =
                    self.current.made.checked_sub(Duration::from_secs(3600)).unwrap_or(self.current.made) + *lifetime;
                self.previous = Some((std::mem::replace(&mut self.current, next).hash, until));
                Ok(true)
            }
            Certificates::Files { cert, key } => {
                let changed = modified(cert).max(modified(key)).unwrap_or(SystemTime::UNIX_EPOCH);
                if changed <= self.current.made {
                    return Ok(false);
                }
                self.current = load(cert, key).await?;
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_self_signed_certificate_is_renewed_before_it_ends_and_the_old_hash_kept_while_valid() {
        let day = Duration::from_secs(86_400);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let mut r = Rotation::start(Certificates::self_signed(vec![]), t0).await.unwrap();
        let first = r.current.hash.clone();
        assert_eq!(first.len(), 64);
        assert!(!r.poll(t0 + 6 * day).await.unwrap(), "not yet due");
        assert_eq!(r.hashes(t0 + 6 * day), vec![first.clone()]);
        assert!(r.poll(t0 + 7 * day).await.unwrap(), "due at half its life");
        assert_ne!(r.current.hash, first);
        assert_eq!(r.hashes(t0 + 7 * day), vec![r.current.hash.clone(), first.clone()]);
        // Past the first's end only the new one is offered.
        assert_eq!(r.hashes(t0 + 13 * day), vec![r.current.hash.clone()]);
    }
}
