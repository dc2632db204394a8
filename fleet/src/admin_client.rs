//! A small HTTP client for a server's admin listener (`GET /metrics`, `/healthz`, `/readyz`,
//! `/players`; `POST` and `DELETE /players/{id}/link`): the backend's readiness polls use
//! it, and so do the program's `health` and `link` subcommands (the first is the Docker
//! HEALTHCHECK), its zones launcher and its bot swarm's scrapes. It is
//! the fleet's, not the framework's (whose own tests include this file by path: it needs
//! nothing but tokio).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most of an answer read (an admin listener's `/metrics` is a few hundred KiB).
const MAX_ANSWER: u64 = 16 * 1024 * 1024;

/// Fetches `path` from an admin listener: the status code and the body.
///
/// # Errors
/// When the listener cannot be reached within `timeout`, or the answer is not HTTP.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    get_with(addr, path, None, timeout).await
}

/// [`get`] with a bearer token (for a listener that requires one).
///
/// # Errors
/// When the listener cannot be reached within `timeout`, or the answer is not HTTP.
pub async fn get_with(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    request(addr, "GET", path, token, timeout).await
}

/// Sends one request without a body (`method` is `GET`, `POST` or `DELETE`; the settings of
/// a `POST` go in `path`'s query), with a bearer token if given: the status code and body.
///
/// # Errors
/// When the listener cannot be reached within `timeout`, or the answer is not HTTP.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let fetch = async {
        let mut s = TcpStream::connect(addr).await?;
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        s.take(MAX_ANSWER).read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(timeout, fetch).await.map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer from {addr} in {timeout:?}"))
    })??;
    let text = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok((status, body.to_string()))
}
