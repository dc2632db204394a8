//! The connect-token backend: `POST /v1/token` authenticates a player, picks a server with
//! room and answers with a netcode connect token for it, as JSON.
//!
//! ```text
//!   game client ──HTTPS via your proxy──► backend ──GET /readyz every 500 ms──► game servers
//!        │  {"player","expires","signature"}   │ token: servers with room, fullest first
//!        └──────────── UDP, the token ─────────┴─────────────────────────────► game server
//! ```
//!
//! The logic is the sans-IO [`desk::Desk`]; this module is its HTTP shell (axum's router on
//! hyper's HTTP/1.1 connections) and the poller that keeps the desk's [`pool::Pool`]
//! current. Endpoints:
//!
//! | path | what |
//! | --- | --- |
//! | `POST /v1/token` | a [`desk::TokenRequest`] in, a [`desk::TokenGrant`] out (200), or `{"error": "..."}` with 400, 401, 429 or 503; from a page of an allowed origin ([`BackendConfig::cors_origins`]) with CORS headers, and its preflight `OPTIONS` answered |
//! | `GET /metrics` | Prometheus text: `volley_backend_requests_total{outcome}`, `volley_backend_request_duration_seconds`, `volley_backend_servers_with_room`, `volley_backend_free_seats`, `volley_backend_rate_limiter_entries`, `volley_backend_connections_refused_total` |
//! | `GET /healthz` | 200 while it runs |
//! | `GET /readyz` | 200 when some server has room, else 503 |
//!
//! Bounded: request bodies at [`desk::MAX_BODY`], request heads at 5 s, [`BackendConfig::max_connections`]
//! connections at once (more are closed at once and counted), rate limiters of bounded
//! size, a Prometheus table without per-player labels.

pub mod auth;
pub mod desk;
pub mod limit;
pub mod pool;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use volley::protocol::netcode::Key as PrivateKey;

use desk::{Desk, DeskConfig, OUTCOMES, Refusal};
use pool::{Pool, ServerSpec};

/// How often each server's `/readyz` is polled.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// The backend's settings.
#[derive(Clone)]
pub struct BackendConfig {
    /// The desk's settings (who may have a token, limits, token lifetime).
    pub desk: DeskConfig,
    /// The game servers, in order.
    pub servers: Vec<ServerSpec>,
    /// The servers' private key (tokens are sealed with it).
    pub private_key: PrivateKey,
    /// Connections served at once; more are closed at once.
    pub max_connections: usize,
    /// The origins of pages that may ask for tokens from a browser (CORS: `POST /v1/token`
    /// answers them with `Access-Control-Allow-Origin`, and its preflight `OPTIONS` is
    /// answered), exactly as the browser sends them (`https://game.example.com`); `*` lets
    /// any page. Empty: no page (a browser refuses to show it the answer).
    pub cors_origins: Vec<String>,
}

impl std::fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendConfig")
            .field("desk", &self.desk)
            .field("servers", &self.servers)
            .field("max_connections", &self.max_connections)
            .field("cors_origins", &self.cors_origins)
            .finish_non_exhaustive()
    }
}

static META: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The backend's figures, in a Prometheus recorder of its own (not the process's global one,
/// so a test can run several backends).
struct Figures {
    handle: PrometheusHandle,
    outcomes: Vec<(&'static str, Counter)>,
    duration: Histogram,
    with_room: Gauge,
    free_seats: Gauge,
    limiter_entries: Gauge,
    refused_connections: Counter,
}

impl Figures {
    fn new() -> Self {
        let name = "volley_backend_request_duration_seconds";
        let b = PrometheusBuilder::new();
        let buckets = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5];
        let b =
            b.set_buckets_for_metric(Matcher::Full(name.into()), &buckets).unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = b.build_recorder();
        let handle = recorder.handle();
        let describe = |n: &'static str, unit: Option<Unit>, help: &'static str| {
            recorder.describe_counter(n.into(), unit, SharedString::const_str(help));
        };
        describe("volley_backend_requests_total", None, "Token requests answered, by outcome.");
        describe("volley_backend_connections_refused_total", None, "Connections closed at once: too many open.");
        recorder.describe_histogram(
            name.into(),
            Some(Unit::Seconds),
            SharedString::const_str("Time from a token request's arrival to its answer."),
        );
        recorder.describe_gauge(
            "volley_backend_servers_with_room".into(),
            None,
            SharedString::const_str("Game servers ready with free seats, as last polled."),
        );
        recorder.describe_gauge(
            "volley_backend_free_seats".into(),
            None,
            SharedString::const_str("Free seats on all servers, less the tokens minted since the last poll."),
        );
        recorder.describe_gauge(
            "volley_backend_rate_limiter_entries".into(),
            None,
            SharedString::const_str("Player ids and addresses the rate limiters remember."),
        );
        let outcomes = OUTCOMES
            .iter()
            .map(|&o| {
                let key = Key::from_parts("volley_backend_requests_total", vec![Label::new("outcome", o)]);
                (o, recorder.register_counter(&key, &META))
            })
            .collect();
        let plain = |n: &'static str| Key::from_name(n);
        Self {
            duration: recorder.register_histogram(&plain(name), &META),
            with_room: recorder.register_gauge(&plain("volley_backend_servers_with_room"), &META),
            free_seats: recorder.register_gauge(&plain("volley_backend_free_seats"), &META),
            limiter_entries: recorder.register_gauge(&plain("volley_backend_rate_limiter_entries"), &META),
            refused_connections: recorder.register_counter(&plain("volley_backend_connections_refused_total"), &META),
            outcomes,
            handle,
        }
    }

    fn count(&self, outcome: &str) {
        if let Some((_, c)) = self.outcomes.iter().find(|(o, _)| *o == outcome) {
            c.increment(1);
        }
    }
}

struct Shared {
    desk: Mutex<Desk>,
    key: PrivateKey,
    /// Each server's web front, by its public address.
    web: std::collections::HashMap<SocketAddr, String>,
    cors_origins: Vec<String>,
    figures: Figures,
    started: Instant,
}

impl Shared {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn refresh_gauges(&self) {
        let now = self.now();
        if let Ok(mut d) = self.desk.lock() {
            let (servers, seats) = d.pool.room(now);
            self.figures.with_room.set(servers as f64);
            self.figures.free_seats.set(seats as f64);
            self.figures.limiter_entries.set(d.limiter_entries() as f64);
        }
    }
}

fn json_error(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// The `Access-Control-Allow-Origin` a request's `Origin` gets, if it may have one.
fn allowed_origin(headers: &HeaderMap, origins: &[String]) -> Option<header::HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    origins.iter().any(|o| o == "*" || o == text).then(|| origin.clone())
}

/// Adds the CORS headers for a request from an allowed page.
fn with_cors(mut response: Response, origin: Option<header::HeaderValue>) -> Response {
    if let Some(origin) = origin {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, header::HeaderValue::from_static("Origin"));
    }
    response
}

/// The preflight a browser sends before a page's `POST /v1/token` with JSON or a bearer.
async fn preflight(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(origin) = allowed_origin(&headers, &shared.cors_origins) else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, header::HeaderValue::from_static("POST"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, header::HeaderValue::from_static("authorization, content-type"));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, header::HeaderValue::from_static("600"));
    with_cors(response, Some(origin))
}

async fn token(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let began = Instant::now();
    let body = axum::body::to_bytes(request.into_body(), desk::MAX_BODY).await;
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let now = shared.now();
    let decided = match shared.desk.lock() {
        Err(_) => Err(Refusal::Internal("the desk's lock is poisoned".into())),
        Ok(mut d) => match body {
            Err(_) => Err(d.handle_unreadable(peer.ip(), now)),
            Ok(body) => d.handle(&body, bearer, peer.ip(), volley::server::unix_now(), now),
        },
    };
    let minted = decided.and_then(|params| {
        desk::mint(&params, &shared.key).map_err(|e| {
            tracing::warn!(error = %e, "a token could not be minted");
            Refusal::Internal(e)
        })
    });
    let origin = allowed_origin(&headers, &shared.cors_origins);
    let response = match minted {
        Ok(mut grant) => {
            grant.web = grant.servers.first().and_then(|first| shared.web.get(first).cloned());
            shared.figures.count("minted");
            (StatusCode::OK, axum::Json(grant)).into_response()
        }
        Err(refusal) => {
            shared.figures.count(refusal.label());
            tracing::debug!(%peer, %refusal, "token request refused");
            json_error(refusal.status(), &refusal.to_string())
        }
    };
    shared.figures.duration.record(began.elapsed().as_secs_f64());
    with_cors(response, origin)
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    shared.refresh_gauges();
    let text = shared.figures.handle.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let (servers, seats) = shared.desk.lock().map(|mut d| d.pool.room(shared.now())).unwrap_or((0, 0));
    if servers > 0 {
        (StatusCode::OK, format!("ready: {servers} servers with {seats} free seats\n")).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no server has room\n").into_response()
    }
}

/// A running backend.
#[derive(Debug)]
pub struct BackendHandle {
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl BackendHandle {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL (`http://ADDR`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and polling (requests in progress are dropped).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the backend on `listener` (bound already): its HTTP server and its poller, as tasks
/// of the current runtime.
///
/// # Errors
/// When the listener's address cannot be read.
pub fn start(listener: TcpListener, config: BackendConfig) -> std::io::Result<BackendHandle> {
    let addr = listener.local_addr()?;
    let specs = config.servers.clone();
    let shared = Arc::new(Shared {
        desk: Mutex::new(Desk::new(config.desk, Pool::new(config.servers))),
        key: config.private_key,
        web: specs.iter().filter_map(|s| Some((s.public, s.web.clone()?))).collect(),
        cors_origins: config.cors_origins,
        figures: Figures::new(),
        started: Instant::now(),
    });
    let app = Router::new()
        .route("/v1/token", post(token).options(preflight))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(shared.clone());
    let serve = tokio::spawn(accept_loop(listener, app, shared.clone(), config.max_connections.max(1)));
    let poll = tokio::spawn(poll_servers(specs, shared));
    Ok(BackendHandle { addr, tasks: vec![serve, poll] })
}

async fn accept_loop(listener: TcpListener, app: Router, shared: Arc<Shared>, max: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            shared.figures.refused_connections.increment(1);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let mut app = app.clone();
                async move { tower_service::Service::call(&mut app, req.map(axum::body::Body::new)).await }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .max_buf_size(16 * 1024)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            // A connection lives at most a minute (keep-alive included).
            let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
            drop(permit);
        });
    }
}

async fn poll_servers(specs: Vec<ServerSpec>, shared: Arc<Shared>) {
    let mut every = tokio::time::interval(POLL_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        // Each poll its own task, so a slow server delays none of the others.
        let polls: Vec<_> = specs
            .iter()
            .map(|s| {
                let admin = s.admin;
                tokio::spawn(async move {
                    match crate::admin_client::get(admin, "/readyz", Duration::from_secs(1)).await {
                        Ok((status, body)) => pool::parse_readyz(status, &body),
                        Err(_) => pool::Readiness::NotReady,
                    }
                })
            })
            .collect();
        let mut results = Vec::with_capacity(polls.len());
        for p in polls {
            results.push(p.await.unwrap_or(pool::Readiness::NotReady));
        }
        let now = shared.now();
        if let Ok(mut d) = shared.desk.lock() {
            for (i, r) in results.into_iter().enumerate() {
                d.pool.polled(i, r, now);
            }
        }
    }
}
