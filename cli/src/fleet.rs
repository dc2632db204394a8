//! The fleet's subcommands and flags: `volley backend` (the connect-token backend),
//! `volley backend-bench` (a load tool against one), the bot swarm's `--backend` (tokens
//! from a backend) and the server's Agones lifecycle (`--agones`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use volley::protocol::netcode::token::ConnectToken;
use volley_arena::bots::{TokenPoll, TokenSource};
use volley_fleet::backend::auth::Auth;
use volley_fleet::backend::desk::DeskConfig;
use volley_fleet::backend::pool::ServerSpec;
use volley_fleet::backend::{self, BackendConfig};
use volley_fleet::client::{FetchError, TokenClient, signed_request};
use volley_util::hex;

#[derive(Debug, clap::Args)]
pub struct BackendArgs {
    /// TCP address to serve HTTP on.
    #[arg(long, env = "VOLLEY_BACKEND_BIND", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// The servers' private key (tokens are sealed with it), 64 hex digits.
    #[arg(long, env = "VOLLEY_PRIVATE_KEY", hide_env_values = true)]
    private_key: String,
    /// The game's protocol id.
    #[arg(long, env = "VOLLEY_PROTOCOL_ID", default_value_t = volley::DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
    /// A game server, as PUBLIC_ADDR@ADMIN_ADDR[@WEB_URL] (the UDP address clients use, the
    /// admin listener polled for /readyz, and the server's web front as a browser reaches it,
    /// named in its token grants); repeat, or comma-separate in the environment. Names are
    /// resolved at start.
    #[arg(long = "server", env = "VOLLEY_BACKEND_SERVERS", value_delimiter = ',', required = true)]
    servers: Vec<String>,
    /// The HMAC secret shared with the game's account service: requests signed with it are
    /// accepted (see the README's "Running a fleet").
    #[arg(long, env = "VOLLEY_BACKEND_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// API keys of trusted services (Authorization: Bearer KEY), comma-separated.
    #[arg(long = "api-key", env = "VOLLEY_BACKEND_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    api_keys: Vec<String>,
    /// Token requests a second one player id may make (0: unlimited); bursts of 5.
    #[arg(long, env = "VOLLEY_BACKEND_PLAYER_RATE", default_value_t = 1.0)]
    per_player_rate: f64,
    /// Token requests a second one IP address may make (0: unlimited); bursts of 5 seconds'
    /// worth. Behind a proxy every request comes from its address: raise this or set 0.
    #[arg(long, env = "VOLLEY_BACKEND_ADDRESS_RATE", default_value_t = 20.0)]
    per_address_rate: f64,
    /// Seconds a token may be used to start connecting.
    #[arg(long, default_value_t = 30)]
    token_expire: u64,
    /// HTTP connections served at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Origins of pages that may ask for tokens from a browser (CORS), comma-separated, as
    /// the browser sends them (https://game.example.com); `*` for any page.
    #[arg(long = "cors-origin", env = "VOLLEY_BACKEND_CORS_ORIGINS", value_delimiter = ',')]
    cors_origins: Vec<String>,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
}

async fn resolve_spec(s: &str) -> Result<ServerSpec, String> {
    let (public, rest) =
        s.split_once('@').ok_or_else(|| format!("--server {s:?}: give PUBLIC_ADDR@ADMIN_ADDR[@WEB_URL]"))?;
    let (admin, web) = match rest.split_once('@') {
        Some((admin, web)) => {
            (admin, Some(volley_fleet::backend::pool::check_web(web).map_err(|e| format!("--server: {e}"))?))
        }
        None => (rest, None),
    };
    let public = crate::resolve("--server", public).await?;
    let admin = crate::resolve("--server", admin).await?;
    Ok(ServerSpec { public, admin, web })
}

/// `volley backend`.
pub async fn run_backend(a: BackendArgs) -> Result<(), String> {
    let key = hex::decode_array::<32>(&a.private_key).map_err(|e| format!("--private-key: {e}"))?;
    let auth = Auth {
        secret: a.secret.map(String::into_bytes),
        api_keys: a.api_keys.into_iter().filter(|k| !k.is_empty()).collect(),
    };
    if auth.secret.is_none() && auth.api_keys.is_empty() {
        return Err("give --secret (signed player ids) or --api-key (trusted services), or both".into());
    }
    let mut servers = Vec::new();
    for s in &a.servers {
        servers.push(resolve_spec(s).await?);
    }
    let mut desk = DeskConfig::new(auth, a.protocol_id);
    desk.per_player = (a.per_player_rate, 5.0);
    desk.per_address = (a.per_address_rate, (a.per_address_rate * 5.0).max(1.0));
    desk.token_expire_secs = a.token_expire;
    let listener = tokio::net::TcpListener::bind(a.bind).await.map_err(|e| format!("--bind {}: {e}", a.bind))?;
    let config = BackendConfig {
        desk,
        servers: servers.clone(),
        private_key: key,
        max_connections: a.max_connections,
        cors_origins: a.cors_origins.into_iter().filter(|o| !o.is_empty()).collect(),
    };
    let handle = backend::start(listener, config).map_err(|e| e.to_string())?;
    println!("backend: {} (POST /v1/token, GET /metrics /healthz /readyz) for {} servers", handle.url(), servers.len());
    for s in &servers {
        println!("  server {} (admin {})", s.public, s.admin);
    }
    crate::until_stopped(a.duration).await;
    handle.stop();
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The backend's URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    backend: String,
    /// The backend's HMAC secret (the load signs its own requests).
    #[arg(long, env = "VOLLEY_BACKEND_SECRET", hide_env_values = true)]
    secret: String,
    /// Connections, each asking again as soon as it has its answer.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// A new TCP connection for every request (as a game client asking once would), instead
    /// of keeping each connection alive.
    #[arg(long)]
    new_connections: bool,
}

/// `volley backend-bench`: a closed-loop load against a backend, each request for a new
/// player id; prints tokens a second and the response time's quantiles.
pub async fn run_bench(a: BenchArgs) -> Result<(), String> {
    let secret = Arc::new(a.secret.into_bytes());
    let until = Instant::now() + Duration::from_secs_f64(a.seconds.max(0.1));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..a.connections.max(1) {
        let mut client = TokenClient::new(&a.backend, None, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let (secret, next, fresh, url) = (secret.clone(), next.clone(), a.new_connections, a.backend.clone());
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            let mut refused: HashMap<String, u64> = HashMap::new();
            while Instant::now() < until {
                let player = format!("bench-{c}-{}", next.fetch_add(1, Ordering::Relaxed));
                let req = signed_request(&secret, &player, volley::server::unix_now(), Duration::from_secs(60));
                let t = Instant::now();
                if fresh {
                    client = TokenClient::new(&url, None, Duration::from_secs(5)).unwrap_or(client);
                }
                let r = client.fetch(&req).await;
                times.push(t.elapsed());
                if let Err(e) = r {
                    *refused.entry(e.to_string()).or_default() += 1;
                }
            }
            (times, refused)
        }));
    }
    let began = Instant::now();
    let mut times = Vec::new();
    let mut refused: HashMap<String, u64> = HashMap::new();
    for t in tasks {
        let (ts, r) = t.await.map_err(|e| e.to_string())?;
        times.extend(ts);
        for (k, v) in r {
            *refused.entry(k).or_default() += v;
        }
    }
    let elapsed = began.elapsed().as_secs_f64().min(a.seconds.max(0.1));
    times.sort_unstable();
    let q = |p: f64| {
        times.get(((times.len() as f64 * p) as usize).min(times.len().saturating_sub(1))).copied().unwrap_or_default()
    };
    let failed: u64 = refused.values().sum();
    let ok = times.len() as u64 - failed;
    println!(
        "backend-bench: {} requests in {:.1} s over {} {}connections: {:.0} tokens/s, {} refused; response p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        times.len(),
        elapsed,
        a.connections,
        if a.new_connections { "new " } else { "kept-alive " },
        ok as f64 / elapsed,
        failed,
        q(0.5).as_secs_f64() * 1e3,
        q(0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    for (why, n) in refused {
        println!("  refused {n}: {why}");
    }
    Ok(())
}

/// Tokens for the bot swarm from a backend: bot `i` is player `bot-{first + i}`, its request
/// signed with the backend's secret (or sent with an API key). Each bot's request runs as a
/// task; a refusal that may pass (429, 503, unreachable) is asked again after a pause, up to
/// 20 s.
#[derive(Debug)]
pub struct BackendTokens {
    url: String,
    secret: Option<Vec<u8>>,
    api_key: Option<String>,
    first: u64,
    slots: Mutex<HashMap<usize, Slot>>,
    /// Requests the backend refused (each retry counts).
    pub refusals: AtomicU64,
    /// Bots that got no token in the end.
    pub failed: AtomicU64,
}

#[derive(Debug)]
enum Slot {
    Asking,
    Ready(Box<ConnectToken>),
    Failed,
}

impl BackendTokens {
    /// A source asking `url`.
    pub fn new(url: &str, secret: Option<String>, api_key: Option<String>, first: u64) -> Result<Arc<Self>, String> {
        TokenClient::new(url, None, Duration::from_secs(1)).map_err(|e| e.to_string())?;
        if secret.is_none() && api_key.is_none() {
            return Err("--backend needs --backend-secret or --backend-api-key".into());
        }
        Ok(Arc::new(Self {
            url: url.into(),
            secret: secret.map(String::into_bytes),
            api_key,
            first,
            slots: Mutex::new(HashMap::new()),
            refusals: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }))
    }

    async fn fetch(self: Arc<Self>, index: usize) -> Slot {
        let player = format!("bot-{}", self.first + index as u64);
        let Ok(mut client) = TokenClient::new(&self.url, self.api_key.clone(), Duration::from_secs(5)) else {
            return Slot::Failed;
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut pause = Duration::from_millis(100);
        loop {
            let req = match &self.secret {
                Some(s) => signed_request(s, &player, volley::server::unix_now(), Duration::from_secs(60)),
                None => {
                    volley_fleet::backend::desk::TokenRequest { player: player.clone(), expires: None, signature: None }
                }
            };
            let e = match client.fetch(&req).await {
                Ok(grant) => match hex::decode(&grant.token).ok().and_then(|b| ConnectToken::from_bytes(&b).ok()) {
                    Some(t) => return Slot::Ready(Box::new(t)),
                    None => FetchError::Answer("not a connect token".into()),
                },
                Err(e) => e,
            };
            self.refusals.fetch_add(1, Ordering::Relaxed);
            if !e.is_transient() || Instant::now() + pause > deadline {
                tracing::warn!(%player, error = %e, "no token from the backend");
                self.failed.fetch_add(1, Ordering::Relaxed);
                return Slot::Failed;
            }
            tracing::debug!(%player, error = %e, "the backend refused; asking again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// The source, shared with the tasks that fill it.
#[derive(Debug, Clone)]
pub struct SharedTokens(pub Arc<BackendTokens>);

impl TokenSource for SharedTokens {
    fn token(&self, index: usize) -> TokenPoll {
        let Ok(mut slots) = self.0.slots.lock() else {
            return TokenPoll::Failed;
        };
        match slots.remove(&index) {
            Some(Slot::Ready(t)) => TokenPoll::Ready(t),
            Some(Slot::Failed) => TokenPoll::Failed,
            Some(Slot::Asking) => {
                slots.insert(index, Slot::Asking);
                TokenPoll::Pending
            }
            None => {
                slots.insert(index, Slot::Asking);
                let me = self.0.clone();
                tokio::spawn(async move {
                    let slot = me.clone().fetch(index).await;
                    if let Ok(mut s) = me.slots.lock() {
                        s.insert(index, slot);
                    }
                });
                TokenPoll::Pending
            }
        }
    }
}
