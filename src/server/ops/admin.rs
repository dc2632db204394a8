//! The admin HTTP listener: `/metrics` (Prometheus text format), `/healthz`, `/readyz` and
//! `/players` (per-player figures as JSON, which never become metric labels).
//!
//! A deliberately small HTTP/1.1 responder: `GET` only (but for the link control below), one
//! request per connection, the request head capped at 8 KiB and 2 seconds, the whole
//! exchange at 5 seconds. At most 64 connections at once and 16 from one IP address; when
//! either limit is reached, a new connection closes the oldest one still sending its request
//! head, so idle or slow connections held open cannot lock out `/healthz` (the Docker
//! HEALTHCHECK) or the scraper.
//!
//! With a bearer token set, `/metrics`, `/players` and the link control answer only requests
//! that carry it (`Authorization: Bearer TOKEN`); `/healthz` and `/readyz` stay open for
//! probes. `/players` shows clients' addresses only when asked to (`show_addresses`). It runs
//! on a thread of its own with its own single-threaded runtime: a world that blocks a worker
//! of the server's runtime (and with it that runtime's I/O driver) cannot silence
//! `/healthz`, which then reports the stall. The same thread folds histogram samples every
//! few seconds.
//!
//! Where the server allows it ([`ServerConfig::admin_link_control`], off by default), a
//! player's downlink can be conditioned while it runs (see [`PlayerLink`]):
//! `POST /players/{id}/link?rate=32000&queue_ms=250&loss=0.02&latency_ms=20&jitter_ms=5` sets
//! it, `DELETE /players/{id}/link` takes it off (answering what it did), `GET /links` lists
//! the conditioned links with what they dropped. These are the only requests that are not `GET`.
//!
//! [`ServerConfig::admin_link_control`]: crate::server::ServerConfig::admin_link_control

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use super::metrics::ServerMetrics;
use super::shaping::Shaping;
use crate::server::PlayerLink;

const MAX_HEAD: usize = 8 * 1024;
const MAX_CONNECTIONS: usize = 64;
const MAX_PER_PEER: usize = 16;
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the admin endpoints need.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    /// The server's figures.
    pub metrics: Arc<ServerMetrics>,
    /// `/healthz` fails when no tick has finished for this long.
    pub stall_after: Duration,
    /// When set, `/metrics` and `/players` require `Authorization: Bearer <token>`.
    pub token: Option<Arc<str>>,
    /// `/players` shows each client's IP address and port.
    pub show_addresses: bool,
    /// The players' conditioned links, when the link control is on
    /// ([`ServerConfig::admin_link_control`](crate::server::ServerConfig::admin_link_control)).
    pub(crate) links: Option<Arc<Shaping>>,
}

/// Conditions player `player`'s downlink (or takes it off): false when it is not connected.
/// Links of players who left are forgotten first.
pub(crate) fn condition(metrics: &ServerMetrics, shaping: &Shaping, player: u32, link: Option<PlayerLink>) -> bool {
    shaping.retain(|p| metrics.has_player(p));
    let Some(addr) = metrics.player_addr(player) else { return false };
    shaping.set(player, addr, link);
    true
}

/// A response: status, content type, body.
type Response = (u16, &'static str, String);

impl Admin {
    /// Answers one request (`method`, `path` with its query); `authorization` is the
    /// request's `Authorization` header.
    pub(crate) fn respond(&self, method: &str, path: &str, authorization: Option<&str>) -> Response {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let link_of = path.strip_prefix("/players/").and_then(|p| p.strip_suffix("/link"));
        let guarded = matches!(path, "/metrics" | "/players" | "/links") || link_of.is_some();
        if let (true, Some(token)) = (guarded, &self.token) {
            let given = authorization.and_then(|a| a.strip_prefix("Bearer ")).map(str::trim);
            if !given.is_some_and(|g| volley_util::secret::same(g.as_bytes(), token.as_bytes())) {
                return (401, "text/plain", "a bearer token is required\n".into());
            }
        }
        if let Some(player) = link_of {
            return self.link(method, player, query);
        }
        if method != "GET" {
            return (405, "text/plain", "only GET\n".into());
        }
        match path {
            "/links" => match &self.links {
                Some(l) => (200, "application/json", serde_json::to_string(&l.reports()).unwrap_or_default()),
                None => (404, "text/plain", LINK_CONTROL_OFF.into()),
            },
            "/metrics" => (200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.render()),
            "/healthz" => {
                let since = self.metrics.since_last_tick();
                if let Some(what) = self.metrics.failure() {
                    (503, "text/plain", format!("failed: {what}\n"))
                } else if since <= self.stall_after {
                    (200, "text/plain", format!("ok: last tick {:.0} ms ago\n", since.as_secs_f64() * 1e3))
                } else {
                    (503, "text/plain", format!("stalled: no tick for {:.1} s\n", since.as_secs_f64()))
                }
            }
            "/readyz" => {
                let m = &self.metrics;
                let (players, slots) = (ServerMetrics::get(&m.players), ServerMetrics::get(&m.slots));
                if !m.is_ready() {
                    (503, "text/plain", "not ready: starting or draining\n".into())
                } else if players >= slots {
                    (503, "text/plain", format!("not ready: full ({players}/{slots})\n"))
                } else {
                    (200, "text/plain", format!("ready: {players}/{slots} players\n"))
                }
            }
            "/players" => (200, "application/json", self.metrics.players_json(self.show_addresses)),
            "/" => (200, "text/plain", "volley admin: /metrics /healthz /readyz /players\n".into()),
            _ => (404, "text/plain", "not found\n".into()),
        }
    }
}

/// What a link request gets when the server does not allow it.
const LINK_CONTROL_OFF: &str = "link control is off (ServerConfig::admin_link_control, --admin-link-control)\n";

impl Admin {
    /// `POST` or `DELETE /players/{id}/link`.
    fn link(&self, method: &str, player: &str, query: &str) -> Response {
        let Some(links) = &self.links else { return (404, "text/plain", LINK_CONTROL_OFF.into()) };
        let Ok(player) = player.parse::<u32>() else {
            return (400, "text/plain", format!("not a player id: {player:?}\n"));
        };
        let link = match method {
            "POST" => match PlayerLink::from_query(query) {
                Ok(l) => Some(l),
                Err(e) => return (400, "text/plain", format!("{e}\n")),
            },
            "DELETE" => None,
            _ => return (405, "text/plain", "POST or DELETE\n".into()),
        };
        // What the link did until now, for a DELETE: its last report.
        let last = links.reports().into_iter().find(|r| r.player == player);
        if !condition(&self.metrics, links, player, link) {
            return (404, "text/plain", format!("no player {player} is connected\n"));
        }
        tracing::info!(player, link = %query, on = link.is_some(), "a player's downlink is conditioned");
        let report = if link.is_some() { links.reports().into_iter().find(|r| r.player == player) } else { last };
        match report {
            Some(r) => (200, "application/json", serde_json::to_string(&r).unwrap_or_default()),
            None => (200, "application/json", format!("{{\"player\":{player}}}")),
        }
    }
}

/// The admin thread: serves the endpoints (if a listener was given) and runs the metrics
/// upkeep until dropped or stopped.
#[derive(Debug)]
pub(crate) struct AdminThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl AdminThread {
    /// Starts the thread. `listener` is bound already (so that a bad address is an error at
    /// start-up, not in the thread).
    ///
    /// # Errors
    /// When the thread or its runtime cannot be created.
    pub(crate) fn start(listener: Option<std::net::TcpListener>, admin: Admin) -> std::io::Result<Self> {
        if let Some(l) = &listener {
            l.set_nonblocking(true)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let join = std::thread::Builder::new().name("volley-admin".into()).spawn(move || {
            runtime.block_on(async move {
                let upkeep = {
                    let metrics = admin.metrics.clone();
                    async move {
                        // The exporter's histogram samples (ticks, and each player's link
                        // once a second) wait in memory until drained, so drain five times a
                        // second. (Those of every snapshot and input are `HotHistogram`s.)
                        let mut every = tokio::time::interval(Duration::from_millis(200));
                        loop {
                            every.tick().await;
                            metrics.upkeep();
                        }
                    }
                };
                let serving = async move {
                    match listener.map(TcpListener::from_std) {
                        Some(Ok(l)) => serve(l, admin).await,
                        Some(Err(e)) => tracing::error!(error = %e, "admin listener unusable"),
                        None => {}
                    }
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    _ = stopped => {}
                    _ = upkeep => {}
                    _ = serving => {}
                }
            });
        })?;
        Ok(Self { stop: Some(stop), join: Some(join) })
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

impl Drop for AdminThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// One open admin connection.
struct Open {
    peer: IpAddr,
    /// Its request head has arrived (it is being answered, not idling).
    head_done: Arc<AtomicBool>,
    task: AbortHandle,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Pool(Vec<Open>);

impl Pool {
    /// Makes room for a connection from `peer`: drops finished ones, then closes the oldest
    /// one still sending its head (of `peer`'s if it is at its limit). False when there is no
    /// room (every connection is being answered).
    fn make_room(&mut self, peer: IpAddr) -> bool {
        self.0.retain(|o| !o.task.is_finished());
        let of_peer = self.0.iter().filter(|o| o.peer == peer).count();
        let evict = if of_peer >= MAX_PER_PEER {
            self.0.iter().position(|o| o.peer == peer && !o.head_done.load(Ordering::Relaxed))
        } else if self.0.len() >= MAX_CONNECTIONS {
            self.0.iter().position(|o| !o.head_done.load(Ordering::Relaxed))
        } else {
            return true;
        };
        match evict {
            Some(i) => {
                self.0.remove(i).task.abort();
                true
            }
            None => false,
        }
    }
}

/// Serves the admin endpoints until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, admin: Admin) {
    let pool = Arc::new(Mutex::new(Pool::default()));
    loop {
        let Ok((stream, from)) = listener.accept().await else { continue };
        let Ok(mut open) = pool.lock() else { return };
        if !open.make_room(from.ip()) {
            continue; // every connection is being answered: this one is closed unanswered
        }
        let admin = admin.clone();
        let head_done = Arc::new(AtomicBool::new(false));
        let done = head_done.clone();
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(IO_TIMEOUT, handle(stream, &admin, &done)).await;
        });
        open.0.push(Open { peer: from.ip(), head_done, task: task.abort_handle() });
    }
}

/// Reads the request head, within [`HEAD_TIMEOUT`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            write(stream, (431, "text/plain", "request head too large\n".into())).await?;
            return Ok(None);
        }
    }
    Ok(Some(head))
}

async fn handle(mut stream: TcpStream, admin: &Admin, head_done: &AtomicBool) -> std::io::Result<()> {
    let Ok(head) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await else { return Ok(()) };
    let Some(head) = head? else { return Ok(()) };
    head_done.store(true, Ordering::Relaxed);
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim());
    let mut parts = line.split(' ');
    let response = match (parts.next(), parts.next()) {
        (Some(method), Some(path)) => admin.respond(method, path, authorization),
        _ => (400, "text/plain", "bad request\n".into()),
    };
    write(&mut stream, response).await
}

async fn write(stream: &mut TcpStream, (status, content_type, body): Response) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
