//! Asking a backend for a token: what a game client (or the bot swarm) does before it
//! connects. One HTTP/1.1 connection, kept alive between requests and opened again when
//! the backend closed it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;

use crate::backend::desk::{TokenGrant, TokenRequest};

/// The largest answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// Why no token came back.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL is not `http://HOST:PORT[/]`.
    #[error("bad backend URL {0:?}: give http://HOST:PORT")]
    Url(String),
    /// The backend could not be reached or broke off.
    #[error("backend unreachable: {0}")]
    Io(String),
    /// No answer within the timeout.
    #[error("the backend did not answer in time")]
    Timeout,
    /// The backend refused: its status and its `error` message.
    #[error("the backend refused ({status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What it said.
        message: String,
    },
    /// The answer was not a token grant.
    #[error("bad answer from the backend: {0}")]
    Answer(String),
}

impl FetchError {
    /// Whether asking again later may succeed (the backend was busy, had no room, or could
    /// not be reached), as opposed to a request it will never grant.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Refused { status, .. } => *status == 429 || *status >= 500,
            Self::Io(_) | Self::Timeout => true,
            Self::Url(_) | Self::Answer(_) => false,
        }
    }
}

/// A client of one backend.
pub struct TokenClient {
    host: String,
    api_key: Option<String>,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl std::fmt::Debug for TokenClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenClient").field("host", &self.host).finish_non_exhaustive()
    }
}

impl TokenClient {
    /// A client of the backend at `url` (`http://HOST:PORT`), sending `api_key` as a bearer
    /// token if given; each request times out after `timeout`.
    ///
    /// # Errors
    /// When the URL is not one it can use.
    pub fn new(url: &str, api_key: Option<String>, timeout: Duration) -> Result<Self, FetchError> {
        let host = url
            .strip_prefix("http://")
            .map(|h| h.trim_end_matches('/'))
            .filter(|h| !h.is_empty() && !h.contains('/'))
            .ok_or_else(|| FetchError::Url(url.into()))?;
        Ok(Self { host: host.into(), api_key, timeout, sender: None })
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, FetchError> {
        let addr: SocketAddr = tokio::net::lookup_host(&self.host)
            .await
            .map_err(|e| FetchError::Io(format!("{}: {e}", self.host)))?
            .next()
            .ok_or_else(|| FetchError::Io(format!("{}: no address", self.host)))?;
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| FetchError::Io(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| FetchError::Io(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Asks for a token.
    ///
    /// # Errors
    /// Why none came.
    pub async fn fetch(&mut self, request: &TokenRequest) -> Result<TokenGrant, FetchError> {
        let body = serde_json::to_vec(request).map_err(|e| FetchError::Answer(e.to_string()))?;
        match tokio::time::timeout(self.timeout, self.exchange(Bytes::from(body))).await {
            Ok(r) => r,
            Err(_) => {
                self.sender = None;
                Err(FetchError::Timeout)
            }
        }
    }

    async fn exchange(&mut self, body: Bytes) -> Result<TokenGrant, FetchError> {
        // A kept-alive connection the backend closed fails at once: then one fresh try.
        for attempt in 0..2 {
            let mut sender = match self.sender.take() {
                Some(s) if !s.is_closed() => s,
                _ => self.connect().await?,
            };
            if sender.ready().await.is_err() {
                continue;
            }
            let mut req = hyper::Request::post("/v1/token")
                .header(hyper::header::HOST, &self.host)
                .header(hyper::header::CONTENT_TYPE, "application/json");
            if let Some(k) = &self.api_key {
                req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {k}"));
            }
            let req = req.body(Full::new(body.clone())).map_err(|e| FetchError::Answer(e.to_string()))?;
            let answer = match sender.send_request(req).await {
                Ok(a) => a,
                Err(e) if attempt == 0 && !e.is_timeout() => continue,
                Err(e) => return Err(FetchError::Io(e.to_string())),
            };
            let status = answer.status().as_u16();
            let bytes = Limited::new(answer.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| FetchError::Io(e.to_string()))?
                .to_bytes();
            self.sender = Some(sender);
            if status != 200 {
                let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
                return Err(FetchError::Refused { status, message });
            }
            return serde_json::from_slice(&bytes).map_err(|e| FetchError::Answer(e.to_string()));
        }
        Err(FetchError::Io("the backend closed the connection".into()))
    }
}

/// A signed request for `player`, valid for `lifetime` from `now_unix` (what a game's
/// account service would hand its client; the bot swarm signs its own).
pub fn signed_request(secret: &[u8], player: &str, now_unix: Duration, lifetime: Duration) -> TokenRequest {
    let expires = (now_unix + lifetime).as_secs();
    TokenRequest {
        player: player.into(),
        expires: Some(expires),
        signature: Some(crate::backend::auth::sign(secret, player, expires)),
    }
}
