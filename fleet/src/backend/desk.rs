//! The token desk: the backend's logic without its HTTP shell. A request's bytes, who sent
//! it and the time go in; a connect token or a refusal (with its HTTP status and the label
//! it is counted under) comes out. The HTTP server ([`super::start`]), the tests, the fuzz target and the
//! load tool all drive this same code.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::netcode::{Key, MAX_SERVER_ADDRESSES, USER_DATA_BYTES};

use super::auth::{self, Auth, AuthError};
use super::limit::{Limited, RateLimiter};
use super::pool::Pool;

/// The largest request body accepted.
pub const MAX_BODY: usize = 4 * 1024;

/// A token request, as JSON: `{"player": "alice", "expires": 1764133000, "signature":
/// "<hex>"}` (signed), or `{"player": "alice"}` with an API key in the `Authorization`
/// header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The player's id (see [`auth::valid_player_id`]).
    pub player: String,
    /// When the signature stops being valid, Unix seconds (signed requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    /// [`auth::sign`] over `player` and `expires` (signed requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// A minted token, as the JSON answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct TokenGrant {
    /// The 2048-byte connect token, hex.
    pub token: String,
    /// The netcode client id in it ([`auth::client_id`] of the player id).
    pub client_id: u64,
    /// The servers it names, in the order the client tries them.
    pub servers: Vec<SocketAddr>,
    /// When it can no longer be used to start connecting, Unix seconds.
    pub expires_unix: u64,
    /// The first server's web front, for a page (`http://…` or `https://…`: it reads
    /// `/web.json` there and connects over WebTransport or WebSocket with this token), when
    /// the backend knows one ([`ServerSpec::web`](super::pool::ServerSpec::web)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<String>,
}

/// Why a request got no token. Each has its HTTP status and a metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The body is not a token request (malformed JSON, unknown fields, too big).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Not authenticated.
    #[error("{0}")]
    Auth(#[from] AuthError),
    /// The player id is not a valid one.
    #[error("bad player id (1 to 64 of A-Z a-z 0-9 - _ . : @)")]
    BadPlayer,
    /// This player asks too often.
    #[error("too many requests for this player")]
    PlayerRate,
    /// This address asks too often (or the limiter's table is full).
    #[error("too many requests from this address")]
    AddressRate,
    /// No server has room.
    #[error("no server has room")]
    NoRoom,
    /// The backend failed (a token could not be minted, or a lock was poisoned by a panic).
    #[error("internal error: {0}")]
    Internal(String),
}

impl Refusal {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::BadRequest(_) | Self::BadPlayer => 400,
            Self::Auth(AuthError::Missing | AuthError::BadKey | AuthError::BadSignature | AuthError::Expired(_)) => 401,
            Self::Auth(AuthError::TooFarAhead) => 400,
            Self::PlayerRate | Self::AddressRate => 429,
            Self::NoRoom => 503,
            Self::Internal(_) => 500,
        }
    }

    /// Its label on `volley_backend_requests_total{outcome}`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::Auth(AuthError::Expired(_)) => "expired",
            Self::Auth(AuthError::Missing | AuthError::BadKey) => "unauthenticated",
            Self::Auth(AuthError::BadSignature | AuthError::TooFarAhead) => "bad_signature",
            Self::BadPlayer => "bad_player",
            Self::PlayerRate | Self::AddressRate => "rate_limited",
            Self::NoRoom => "no_room",
            Self::Internal(_) => "internal",
        }
    }
}

/// Every outcome label, for describing the metric up front.
pub const OUTCOMES: [&str; 9] = [
    "minted",
    "bad_request",
    "expired",
    "unauthenticated",
    "bad_signature",
    "bad_player",
    "rate_limited",
    "no_room",
    "internal",
];

/// The desk's settings.
#[derive(Debug, Clone)]
pub struct DeskConfig {
    /// Who may have a token.
    pub auth: Auth,
    /// The game's protocol id.
    pub protocol_id: u64,
    /// How long a token may be used to start connecting, seconds.
    pub token_expire_secs: u64,
    /// The connection timeout written in tokens, seconds.
    pub timeout_secs: i32,
    /// Requests a second one player id may make (0: unlimited), and its burst.
    pub per_player: (f64, f64),
    /// Requests a second one IP address may make (0: unlimited), and its burst.
    pub per_address: (f64, f64),
    /// Player ids and addresses the rate limiters remember, each.
    pub limiter_entries: usize,
    /// Servers listed in one token, at most.
    pub servers_per_token: usize,
}

impl DeskConfig {
    /// Defaults: 30 s tokens with a 10 s timeout, 1 request a second per player (burst 5),
    /// 20 per address (burst 100), 100 000 remembered of each, up to 8 servers a token.
    pub fn new(auth: Auth, protocol_id: u64) -> Self {
        Self {
            auth,
            protocol_id,
            token_expire_secs: 30,
            timeout_secs: 10,
            per_player: (1.0, 5.0),
            per_address: (20.0, 100.0),
            limiter_entries: 100_000,
            servers_per_token: 8,
        }
    }
}

/// The desk: checks requests and picks servers (under a lock in the HTTP shell; minting
/// itself, the encryption, happens outside it: [`mint`]).
#[derive(Debug)]
pub struct Desk {
    config: DeskConfig,
    players: RateLimiter<String>,
    addresses: RateLimiter<IpAddr>,
    /// The servers.
    pub pool: Pool,
}

impl Desk {
    /// A desk over `pool`.
    pub fn new(config: DeskConfig, pool: Pool) -> Self {
        let n = config.limiter_entries;
        Self {
            players: RateLimiter::new(config.per_player.0, config.per_player.1, n),
            addresses: RateLimiter::new(config.per_address.0, config.per_address.1, n),
            config,
            pool,
        }
    }

    /// The settings.
    pub fn config(&self) -> &DeskConfig {
        &self.config
    }

    /// Entries in the two rate limiters' tables.
    pub fn limiter_entries(&self) -> usize {
        self.players.len() + self.addresses.len()
    }

    /// Handles a request whose body could not be read (over [`MAX_BODY`], or the connection
    /// broke): the address is charged like any request's, so such requests are limited too.
    pub fn handle_unreadable(&mut self, peer: IpAddr, now: Duration) -> Refusal {
        match self.addresses.take(&peer, now) {
            Err(_) => Refusal::AddressRate,
            Ok(()) => Refusal::BadRequest(format!("the body is over {MAX_BODY} bytes or broken")),
        }
    }

    /// Handles one request: `body` as received, the `Authorization: Bearer` value if any,
    /// the peer's address, the Unix time `now_unix` and a monotonic `now` (the pool's
    /// clock). Gives the token's parameters (for [`mint`]), or why not.
    ///
    /// # Errors
    /// The [`Refusal`].
    pub fn handle(
        &mut self,
        body: &[u8],
        bearer: Option<&str>,
        peer: IpAddr,
        now_unix: Duration,
        now: Duration,
    ) -> Result<TokenParams, Refusal> {
        // The address first: a flood of garbage costs a hash lookup, not a JSON parse.
        self.addresses.take(&peer, now).map_err(|_: Limited| Refusal::AddressRate)?;
        if body.len() > MAX_BODY {
            return Err(Refusal::BadRequest(format!("the body is over {MAX_BODY} bytes")));
        }
        let req: TokenRequest = serde_json::from_slice(body).map_err(|e| Refusal::BadRequest(e.to_string()))?;
        if !auth::valid_player_id(&req.player) {
            return Err(Refusal::BadPlayer);
        }
        self.config.auth.check(bearer, &req.player, req.expires, req.signature.as_deref(), now_unix)?;
        self.players.take(&req.player, now).map_err(|_| Refusal::PlayerRate)?;
        let servers =
            self.pool.pick(now, self.config.servers_per_token.clamp(1, MAX_SERVER_ADDRESSES)).ok_or(Refusal::NoRoom)?;
        let mut user_data = [0u8; USER_DATA_BYTES];
        user_data[..req.player.len()].copy_from_slice(req.player.as_bytes());
        Ok(TokenParams {
            protocol_id: self.config.protocol_id,
            client_id: auth::client_id(&req.player),
            now_unix_secs: now_unix.as_secs(),
            expire_seconds: self.config.token_expire_secs,
            timeout_seconds: self.config.timeout_secs,
            server_addresses: servers,
            user_data,
        })
    }
}

/// Mints the token for `params` (the expensive part: encrypting its private half).
///
/// # Errors
/// When the parameters cannot make a token (an address list netcode cannot carry).
pub fn mint(params: &TokenParams, key: &Key) -> Result<TokenGrant, String> {
    let token = ConnectToken::generate(params, key).map_err(|e| e.to_string())?;
    Ok(TokenGrant {
        token: volley_util::hex::encode(&token.to_bytes()),
        client_id: params.client_id,
        servers: params.server_addresses.clone(),
        expires_unix: params.now_unix_secs + params.expire_seconds,
        web: None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::pool::{Readiness, ServerSpec};
    use super::*;

    fn desk() -> Desk {
        let auth = Auth { secret: Some(b"k".to_vec()), api_keys: vec!["api".into()] };
        let spec: ServerSpec = "127.0.0.1:40000@127.0.0.1:9100".parse().unwrap();
        let mut pool = Pool::new(vec![spec]);
        pool.polled(0, Readiness::Ready { players: 0, slots: 2 }, Duration::ZERO);
        Desk::new(DeskConfig::new(auth, 7), pool)
    }

    fn signed(player: &str, expires: u64) -> Vec<u8> {
        let r = TokenRequest {
            player: player.into(),
            expires: Some(expires),
            signature: Some(auth::sign(b"k", player, expires)),
        };
        serde_json::to_vec(&r).unwrap()
    }

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_signed_request_gets_a_token_that_opens_with_the_servers_key() {
        let mut d = desk();
        let now = Duration::from_secs(1000);
        let params = d.handle(&signed("alice", 1030), None, PEER, now, Duration::ZERO).unwrap();
        let grant = mint(&params, &[9; 32]).unwrap();
        let bytes = volley_util::hex::decode(&grant.token).unwrap();
        let token = ConnectToken::from_bytes(&bytes).unwrap();
        assert_eq!(token.protocol_id, 7);
        assert_eq!(grant.client_id, auth::client_id("alice"));
        assert_eq!(grant.servers, vec!["127.0.0.1:40000".parse().unwrap()]);
        assert_eq!(grant.expires_unix, 1030);
    }

    #[test]
    fn each_refusal_has_its_status() {
        let mut d = desk();
        let now = Duration::from_secs(1000);
        let t = Duration::ZERO;
        let r = |d: &mut Desk, body: &[u8], bearer| {
            d.handle(body, bearer, PEER, now, t).map(|_| ()).map_err(|e| e.status())
        };
        assert_eq!(r(&mut d, b"{not json", None), Err(400));
        assert_eq!(r(&mut d, br#"{"player":"a","extra":1}"#, None), Err(400));
        assert_eq!(r(&mut d, &[b' '; MAX_BODY + 1], None), Err(400));
        assert_eq!(r(&mut d, br#"{"player":"a"}"#, None), Err(401));
        assert_eq!(r(&mut d, br#"{"player":"a"}"#, Some("nope")), Err(401));
        assert_eq!(r(&mut d, br#"{"player":"a b"}"#, Some("api")), Err(400));
        assert_eq!(r(&mut d, &signed("a", 999), None), Err(401), "expired");
        assert_eq!(r(&mut d, br#"{"player":"a"}"#, Some("api")), Ok(()));
        assert_eq!(r(&mut d, br#"{"player":"b"}"#, Some("api")), Ok(()));
        assert_eq!(r(&mut d, br#"{"player":"c"}"#, Some("api")), Err(503), "two seats, both reserved");
    }

    #[test]
    fn a_player_that_asks_too_often_is_limited() {
        let mut d = desk();
        d.pool.polled(0, Readiness::Ready { players: 0, slots: 1000 }, Duration::ZERO);
        let now = Duration::from_secs(1000);
        for _ in 0..5 {
            d.handle(&signed("alice", 1030), None, PEER, now, Duration::ZERO).unwrap();
        }
        let e = d.handle(&signed("alice", 1030), None, PEER, now, Duration::ZERO).unwrap_err();
        assert_eq!((e.status(), e.label()), (429, "rate_limited"));
        assert!(d.handle(&signed("bob", 1030), None, PEER, now, Duration::ZERO).is_ok());
    }

    #[test]
    fn unreadable_bodies_count_against_the_address() {
        let mut d = desk();
        let t = Duration::ZERO;
        for _ in 0..100 {
            assert_eq!(d.handle_unreadable(PEER, t).label(), "bad_request");
        }
        // The burst is spent by unreadable bodies alone: the next request of any kind waits.
        assert_eq!(d.handle_unreadable(PEER, t).label(), "rate_limited");
        let e = d.handle(br#"{"player":"a"}"#, Some("api"), PEER, Duration::from_secs(1000), t).unwrap_err();
        assert_eq!(e.label(), "rate_limited");
    }
}
