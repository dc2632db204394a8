//! Who may have a token: a player id signed by the game's account service (HMAC-SHA256
//! over the id and an expiry time), or a request carrying one of the backend's API keys (a
//! trusted service asking on a player's behalf).
//!
//! The signed form lets a game client ask the backend itself, with a signature its login
//! service issued: the backend needs no account database, only the shared secret.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The longest player id, in bytes.
pub const MAX_PLAYER_ID: usize = 64;

/// How far ahead of now a signed request may say it expires (a signature that lives
/// longer is refused: a leaked one must not work for days).
pub const MAX_SIGNATURE_LIFETIME: Duration = Duration::from_secs(3600);

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Neither a signature nor an accepted API key.
    #[error("a signature or an API key is required")]
    Missing,
    /// The signature does not match the player id and expiry.
    #[error("bad signature")]
    BadSignature,
    /// The API key is not one of the backend's.
    #[error("unknown API key")]
    BadKey,
    /// The signed request's expiry has passed.
    #[error("the request expired {0} s ago")]
    Expired(u64),
    /// The signed request expires further ahead than [`MAX_SIGNATURE_LIFETIME`].
    #[error("the request expires more than {} s ahead", MAX_SIGNATURE_LIFETIME.as_secs())]
    TooFarAhead,
}

/// The secrets the backend accepts.
#[derive(Clone, Default)]
pub struct Auth {
    /// The HMAC secret shared with the game's account service, if signed requests are accepted.
    pub secret: Option<Vec<u8>>,
    /// API keys of trusted services, if any.
    pub api_keys: Vec<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .field("api_keys", &self.api_keys.len())
            .finish()
    }
}

fn mac(secret: &[u8], player: &str, expires_unix: u64) -> [u8; 32] {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    m.update(b"volley-token-request-v1\n");
    m.update(player.as_bytes());
    m.update(b"\n");
    m.update(expires_unix.to_string().as_bytes());
    m.finalize().into_bytes().into()
}

/// The signature for `player`'s request valid until `expires_unix` (what the game's account
/// service computes and hands to its client): lower-case hex of HMAC-SHA256 over
/// `"volley-token-request-v1\n{player}\n{expires_unix}"`.
pub fn sign(secret: &[u8], player: &str, expires_unix: u64) -> String {
    volley_util::hex::encode(&mac(secret, player, expires_unix))
}

impl Auth {
    /// Checks a request: an accepted API key (`bearer`) admits it whatever else it says;
    /// otherwise its signature must match `player` and `expires_unix`, which must lie
    /// between `now` and [`MAX_SIGNATURE_LIFETIME`] ahead.
    ///
    /// # Errors
    /// Why it is refused.
    pub fn check(
        &self,
        bearer: Option<&str>,
        player: &str,
        expires_unix: Option<u64>,
        signature: Option<&str>,
        now: Duration,
    ) -> Result<(), AuthError> {
        if let Some(given) = bearer {
            return if self.api_keys.iter().any(|k| volley_util::secret::same(k.as_bytes(), given.as_bytes())) {
                Ok(())
            } else {
                Err(AuthError::BadKey)
            };
        }
        let (Some(secret), Some(expires), Some(signature)) = (&self.secret, expires_unix, signature) else {
            return Err(AuthError::Missing);
        };
        let given = volley_util::hex::decode_array::<32>(signature).map_err(|_| AuthError::BadSignature)?;
        if !volley_util::secret::same(&given, &mac(secret, player, expires)) {
            return Err(AuthError::BadSignature);
        }
        let now = now.as_secs();
        if expires < now {
            return Err(AuthError::Expired(now - expires));
        }
        if expires - now > MAX_SIGNATURE_LIFETIME.as_secs() {
            return Err(AuthError::TooFarAhead);
        }
        Ok(())
    }
}

/// Whether `player` is a usable player id: 1 to [`MAX_PLAYER_ID`] bytes of ASCII letters,
/// digits and `-_.:@`.
pub fn valid_player_id(player: &str) -> bool {
    (1..=MAX_PLAYER_ID).contains(&player.len())
        && player.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b))
}

/// The netcode client id for a player id: the first 8 bytes of SHA-256 over it (never 0),
/// so the same player gets the same id from every backend replica.
pub fn client_id(player: &str) -> u64 {
    let d = Sha256::new().chain_update(b"volley-client-id\n").chain_update(player.as_bytes()).finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b).max(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn auth() -> Auth {
        Auth { secret: Some(b"s3cret".to_vec()), api_keys: vec!["key-1".into()] }
    }

    #[test]
    fn a_signature_admits_its_player_until_it_expires_and_no_one_else() {
        let now = Duration::from_secs(1_000_000);
        let sig = sign(b"s3cret", "alice", 1_000_060);
        let a = auth();
        assert_eq!(a.check(None, "alice", Some(1_000_060), Some(&sig), now), Ok(()));
        assert_eq!(a.check(None, "bob", Some(1_000_060), Some(&sig), now), Err(AuthError::BadSignature));
        assert_eq!(a.check(None, "alice", Some(1_000_061), Some(&sig), now), Err(AuthError::BadSignature));
        let late = Duration::from_secs(1_000_100);
        assert_eq!(a.check(None, "alice", Some(1_000_060), Some(&sig), late), Err(AuthError::Expired(40)));
        let far = sign(b"s3cret", "alice", 1_000_000 + 7200);
        assert_eq!(a.check(None, "alice", Some(1_007_200), Some(&far), now), Err(AuthError::TooFarAhead));
        assert_eq!(a.check(None, "alice", Some(1_000_060), Some("zz"), now), Err(AuthError::BadSignature));
        assert_eq!(a.check(None, "alice", None, None, now), Err(AuthError::Missing));
        let other = sign(b"other", "alice", 1_000_060);
        assert_eq!(a.check(None, "alice", Some(1_000_060), Some(&other), now), Err(AuthError::BadSignature));
    }

    #[test]
    fn an_api_key_admits_any_player_and_a_wrong_one_none() {
        let a = auth();
        let now = Duration::from_secs(5);
        assert_eq!(a.check(Some("key-1"), "anyone", None, None, now), Ok(()));
        assert_eq!(a.check(Some("key-2"), "anyone", None, None, now), Err(AuthError::BadKey));
        let none = Auth::default();
        assert_eq!(none.check(None, "x", Some(6), Some(&sign(b"", "x", 6)), now), Err(AuthError::Missing));
    }

    #[test]
    fn player_ids_are_checked_and_map_to_stable_client_ids() {
        assert!(valid_player_id("bot-17@arena"));
        assert!(!valid_player_id(""));
        assert!(!valid_player_id("a b"));
        assert!(!valid_player_id(&"x".repeat(65)));
        assert_eq!(client_id("alice"), client_id("alice"));
        assert_ne!(client_id("alice"), client_id("bob"));
    }
}
