//! Connect tokens: what a backend (matchmaker) hands a client so that it may connect.
//!
//! The public part (2048 bytes) travels to the client over a secure channel of the backend's
//! choosing (HTTPS). Inside it, the private part (1024 bytes) is sealed with
//! XChaCha20-Poly1305 under a key that only the backend and the game servers know; the client
//! forwards it untouched in its connection request.

use std::fmt;
use std::net::SocketAddr;

use super::crypto::{self, Key};
use super::wire::{Reader, Writer};
use super::{
    CONNECT_TOKEN_BYTES, CONNECT_TOKEN_PRIVATE_BYTES, MAC_BYTES, MAX_SERVER_ADDRESSES, USER_DATA_BYTES, VERSION_INFO,
};

/// Why a connect token could not be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// A token must name at least one server address.
    #[error("a connect token needs at least one server address")]
    NoServerAddresses,
    /// A token can name at most 32 server addresses.
    #[error("a connect token holds at most {MAX_SERVER_ADDRESSES} server addresses, got {0}")]
    TooManyServerAddresses(usize),
    /// The bytes are not a connect token (wrong length or layout).
    #[error("malformed connect token")]
    Malformed,
    /// The token was made for another protocol version.
    #[error("connect token is not for netcode 1.02")]
    WrongVersion,
    /// The private part failed authentication: wrong key, protocol id, expiry or tampering.
    #[error("connect token private data did not authenticate")]
    Crypto,
    /// The operating system gave no randomness.
    #[error("no randomness available from the operating system")]
    Random,
}

/// Up to 32 server addresses, stored inline (no allocation when decoding).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ServerAddresses {
    len: u8,
    addrs: [SocketAddr; MAX_SERVER_ADDRESSES],
}

impl fmt::Debug for ServerAddresses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl ServerAddresses {
    /// Collects 1 to 32 addresses.
    ///
    /// # Errors
    /// When there are none or more than 32.
    pub fn new(list: &[SocketAddr]) -> Result<Self, TokenError> {
        if list.is_empty() {
            return Err(TokenError::NoServerAddresses);
        }
        if list.len() > MAX_SERVER_ADDRESSES {
            return Err(TokenError::TooManyServerAddresses(list.len()));
        }
        let mut addrs = [SocketAddr::from(([0, 0, 0, 0], 0)); MAX_SERVER_ADDRESSES];
        addrs[..list.len()].copy_from_slice(list);
        Ok(Self { len: list.len() as u8, addrs })
    }

    /// The addresses, in the order the client tries them.
    pub fn as_slice(&self) -> &[SocketAddr] {
        &self.addrs[..self.len as usize]
    }

    fn write(&self, w: &mut Writer<'_>) -> Option<()> {
        w.u32(self.len as u32)?;
        self.as_slice().iter().try_for_each(|a| w.address(a))
    }

    fn read(r: &mut Reader<'_>) -> Option<Self> {
        let n = r.u32()? as usize;
        if n == 0 || n > MAX_SERVER_ADDRESSES {
            return None;
        }
        let mut addrs = [SocketAddr::from(([0, 0, 0, 0], 0)); MAX_SERVER_ADDRESSES];
        for a in &mut addrs[..n] {
            *a = r.address()??;
        }
        Some(Self { len: n as u8, addrs })
    }
}

/// What the server learns from a connect token's private part.
#[derive(Clone, PartialEq, Eq)]
pub struct PrivateConnectToken {
    /// The backend's globally unique id of this client.
    pub client_id: u64,
    /// Seconds without a packet after which either side drops the connection; negative
    /// disables the timeout (development only).
    pub timeout_seconds: i32,
    /// Servers this token is valid for.
    pub server_addresses: ServerAddresses,
    /// Key for packets from client to server.
    pub client_to_server_key: Key,
    /// Key for packets from server to client.
    pub server_to_client_key: Key,
    /// Opaque data from the backend to the server (for example a session or account id).
    pub user_data: [u8; USER_DATA_BYTES],
}

impl fmt::Debug for PrivateConnectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateConnectToken")
            .field("client_id", &self.client_id)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("server_addresses", &self.server_addresses)
            .finish_non_exhaustive()
    }
}

/// Associated data that binds the private part to version, protocol and expiry.
fn private_aad(protocol_id: u64, expire_timestamp: u64) -> [u8; 29] {
    let mut ad = [0u8; 29];
    ad[..13].copy_from_slice(VERSION_INFO);
    ad[13..21].copy_from_slice(&protocol_id.to_le_bytes());
    ad[21..].copy_from_slice(&expire_timestamp.to_le_bytes());
    ad
}

impl PrivateConnectToken {
    /// Seals this private part into the 1024 bytes that travel in the connection request.
    ///
    /// # Errors
    /// Only if encryption fails, which the fixed sizes rule out in practice.
    pub fn seal(
        &self,
        protocol_id: u64,
        expire_timestamp: u64,
        nonce: &[u8; 24],
        key: &Key,
    ) -> Result<[u8; CONNECT_TOKEN_PRIVATE_BYTES], TokenError> {
        let mut out = [0u8; CONNECT_TOKEN_PRIVATE_BYTES];
        let plain = CONNECT_TOKEN_PRIVATE_BYTES - MAC_BYTES;
        let mut w = Writer::new(&mut out);
        w.u64(self.client_id)
            .and_then(|()| w.u32(self.timeout_seconds as u32))
            .and_then(|()| self.server_addresses.write(&mut w))
            .and_then(|()| w.bytes(&self.client_to_server_key))
            .and_then(|()| w.bytes(&self.server_to_client_key))
            .and_then(|()| w.bytes(&self.user_data))
            .and_then(|()| w.pad_to(plain))
            .ok_or(TokenError::Malformed)?;
        let aad = private_aad(protocol_id, expire_timestamp);
        crypto::xseal(&mut out, plain, nonce, key, &aad).ok_or(TokenError::Crypto)?;
        Ok(out)
    }

    /// Authenticates and reads a sealed private part. `sealed` is decrypted in place.
    ///
    /// # Errors
    /// [`TokenError::Crypto`] when it does not authenticate under this key, protocol id and
    /// expiry; [`TokenError::Malformed`] when the authenticated contents are not a token.
    pub fn open(
        sealed: &mut [u8; CONNECT_TOKEN_PRIVATE_BYTES],
        protocol_id: u64,
        expire_timestamp: u64,
        nonce: &[u8; 24],
        key: &Key,
    ) -> Result<Self, TokenError> {
        let aad = private_aad(protocol_id, expire_timestamp);
        let len = crypto::xopen(sealed, nonce, key, &aad).ok_or(TokenError::Crypto)?;
        let mut r = Reader::new(&sealed[..len]);
        (|| {
            Some(Self {
                client_id: r.u64()?,
                timeout_seconds: r.u32()? as i32,
                server_addresses: ServerAddresses::read(&mut r)?,
                client_to_server_key: r.array()?,
                server_to_client_key: r.array()?,
                user_data: r.array()?,
            })
        })()
        .ok_or(TokenError::Malformed)
    }
}

/// What a backend chooses when it mints a token.
#[derive(Debug, Clone)]
pub struct TokenParams {
    /// The game's protocol id: servers accept only tokens for their own.
    pub protocol_id: u64,
    /// The client's globally unique id.
    pub client_id: u64,
    /// The backend's current Unix time in seconds.
    pub now_unix_secs: u64,
    /// How long the token may be used to start connecting.
    pub expire_seconds: u64,
    /// Connection timeout in seconds (negative: none, for development).
    pub timeout_seconds: i32,
    /// The servers the client may connect to, tried in order.
    pub server_addresses: Vec<SocketAddr>,
    /// Opaque data for the server.
    pub user_data: [u8; USER_DATA_BYTES],
}

impl TokenParams {
    /// A token for `client_id` to connect to `server` now (`now_unix_secs`): usable for 30
    /// seconds, a 5-second connection timeout, no user data. Change any field after.
    pub fn new(protocol_id: u64, client_id: u64, server: SocketAddr, now_unix_secs: u64) -> Self {
        Self {
            protocol_id,
            client_id,
            now_unix_secs,
            expire_seconds: 30,
            timeout_seconds: 5,
            server_addresses: vec![server],
            user_data: [0; USER_DATA_BYTES],
        }
    }
}

/// The public connect token, as the client receives it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectToken {
    /// The game's protocol id.
    pub protocol_id: u64,
    /// When the backend made it (Unix seconds).
    pub create_timestamp: u64,
    /// When it stops being accepted (Unix seconds).
    pub expire_timestamp: u64,
    /// The nonce the private part was sealed with.
    pub nonce: [u8; 24],
    /// The sealed private part (opaque to the client).
    pub private_data: [u8; CONNECT_TOKEN_PRIVATE_BYTES],
    /// Connection timeout in seconds (negative: none).
    pub timeout_seconds: i32,
    /// The servers to try, in order.
    pub server_addresses: ServerAddresses,
    /// Key for packets from client to server.
    pub client_to_server_key: Key,
    /// Key for packets from server to client.
    pub server_to_client_key: Key,
}

impl fmt::Debug for ConnectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectToken")
            .field("protocol_id", &self.protocol_id)
            .field("create_timestamp", &self.create_timestamp)
            .field("expire_timestamp", &self.expire_timestamp)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("server_addresses", &self.server_addresses)
            .finish_non_exhaustive()
    }
}

impl ConnectToken {
    /// Mints a token with fresh keys and nonce from the operating system's randomness.
    ///
    /// # Errors
    /// On a bad address list or when no randomness is available.
    pub fn generate(params: &TokenParams, private_key: &Key) -> Result<Self, TokenError> {
        let nonce = crypto::random_bytes().map_err(|_| TokenError::Random)?;
        let c2s = crypto::random_bytes().map_err(|_| TokenError::Random)?;
        let s2c = crypto::random_bytes().map_err(|_| TokenError::Random)?;
        Self::generate_with(params, private_key, nonce, c2s, s2c)
    }

    /// Mints a token from given nonce and keys (deterministic; for tests and custom RNGs).
    ///
    /// # Errors
    /// On a bad address list.
    pub fn generate_with(
        params: &TokenParams,
        private_key: &Key,
        nonce: [u8; 24],
        client_to_server_key: Key,
        server_to_client_key: Key,
    ) -> Result<Self, TokenError> {
        let server_addresses = ServerAddresses::new(&params.server_addresses)?;
        let expire_timestamp = params.now_unix_secs.saturating_add(params.expire_seconds);
        let private = PrivateConnectToken {
            client_id: params.client_id,
            timeout_seconds: params.timeout_seconds,
            server_addresses,
            client_to_server_key,
            server_to_client_key,
            user_data: params.user_data,
        };
        let private_data = private.seal(params.protocol_id, expire_timestamp, &nonce, private_key)?;
        Ok(Self {
            protocol_id: params.protocol_id,
            create_timestamp: params.now_unix_secs,
            expire_timestamp,
            nonce,
            private_data,
            timeout_seconds: params.timeout_seconds,
            server_addresses,
            client_to_server_key,
            server_to_client_key,
        })
    }

    /// The standard's 2048-byte serialization.
    pub fn to_bytes(&self) -> [u8; CONNECT_TOKEN_BYTES] {
        let mut out = [0u8; CONNECT_TOKEN_BYTES];
        let mut w = Writer::new(&mut out);
        // Cannot fail: the largest token (32 IPv6 addresses) is well under 2048 bytes.
        let written = w
            .bytes(VERSION_INFO)
            .and_then(|()| w.u64(self.protocol_id))
            .and_then(|()| w.u64(self.create_timestamp))
            .and_then(|()| w.u64(self.expire_timestamp))
            .and_then(|()| w.bytes(&self.nonce))
            .and_then(|()| w.bytes(&self.private_data))
            .and_then(|()| w.u32(self.timeout_seconds as u32))
            .and_then(|()| self.server_addresses.write(&mut w))
            .and_then(|()| w.bytes(&self.client_to_server_key))
            .and_then(|()| w.bytes(&self.server_to_client_key));
        debug_assert!(written.is_some());
        out
    }

    /// Reads the standard's 2048-byte serialization.
    ///
    /// # Errors
    /// When the bytes are not a 1.02 connect token.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TokenError> {
        if bytes.len() != CONNECT_TOKEN_BYTES {
            return Err(TokenError::Malformed);
        }
        let mut r = Reader::new(bytes);
        if r.bytes(VERSION_INFO.len()) != Some(VERSION_INFO.as_slice()) {
            return Err(TokenError::WrongVersion);
        }
        (|| {
            Some(Self {
                protocol_id: r.u64()?,
                create_timestamp: r.u64()?,
                expire_timestamp: r.u64()?,
                nonce: r.array()?,
                private_data: r.array()?,
                timeout_seconds: r.u32()? as i32,
                server_addresses: ServerAddresses::read(&mut r)?,
                client_to_server_key: r.array()?,
                server_to_client_key: r.array()?,
            })
        })()
        .ok_or(TokenError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn params() -> TokenParams {
        TokenParams {
            protocol_id: 0x1122_3344_5566_7788,
            client_id: 77,
            now_unix_secs: 1_000,
            expire_seconds: 30,
            timeout_seconds: 5,
            server_addresses: vec!["127.0.0.1:40000".parse().unwrap(), "[::1]:40001".parse().unwrap()],
            user_data: [5u8; USER_DATA_BYTES],
        }
    }

    #[test]
    fn public_token_round_trips_and_private_part_opens_with_the_right_key_only() {
        let key = [1u8; 32];
        let token = ConnectToken::generate(&params(), &key).unwrap();
        let bytes = token.to_bytes();
        let back = ConnectToken::from_bytes(&bytes).unwrap();
        assert_eq!(back, token);
        assert_eq!(back.expire_timestamp, 1_030);

        let mut sealed = token.private_data;
        let private = PrivateConnectToken::open(&mut sealed, token.protocol_id, 1_030, &token.nonce, &key).unwrap();
        assert_eq!(private.client_id, 77);
        assert_eq!(private.user_data, [5u8; USER_DATA_BYTES]);
        assert_eq!(private.client_to_server_key, token.client_to_server_key);
        assert_eq!(private.server_addresses.as_slice(), params().server_addresses.as_slice());

        for (pid, exp, k) in [(token.protocol_id, 1_030, [2u8; 32]), (1, 1_030, key), (token.protocol_id, 1_031, key)] {
            let mut sealed = token.private_data;
            assert_eq!(PrivateConnectToken::open(&mut sealed, pid, exp, &token.nonce, &k), Err(TokenError::Crypto));
        }
    }

    #[test]
    fn bad_tokens_are_clear_errors() {
        let token = ConnectToken::generate(&params(), &[1u8; 32]).unwrap();
        let bytes = token.to_bytes();
        assert_eq!(ConnectToken::from_bytes(&bytes[..100]), Err(TokenError::Malformed));
        let mut wrong = bytes;
        wrong[8] = b'3';
        assert_eq!(ConnectToken::from_bytes(&wrong), Err(TokenError::WrongVersion));
        let mut no_addrs = bytes;
        let at = 13 + 8 * 3 + 24 + 1024 + 4;
        no_addrs[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(ConnectToken::from_bytes(&no_addrs), Err(TokenError::Malformed));
        let mut p = params();
        p.server_addresses.clear();
        assert_eq!(ConnectToken::generate(&p, &[0; 32]), Err(TokenError::NoServerAddresses));
        p.server_addresses = vec!["1.2.3.4:5".parse().unwrap(); 33];
        assert_eq!(ConnectToken::generate(&p, &[0; 32]), Err(TokenError::TooManyServerAddresses(33)));
    }

    #[test]
    fn the_largest_token_fits() {
        let mut p = params();
        p.server_addresses = vec!["[1:2:3:4:5:6:7:8]:9".parse().unwrap(); 32];
        let token = ConnectToken::generate(&p, &[1u8; 32]).unwrap();
        assert_eq!(ConnectToken::from_bytes(&token.to_bytes()).unwrap(), token);
    }
}
