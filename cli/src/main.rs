//! The `volley` command: the main job (`run`: a server with built-in bots), the server and the
//! bot swarm alone, connect tokens and keys.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;
use std::time::Duration;

use crate::scrape::{Scrape, ServerFigures};
use clap::{Parser, Subcommand};
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::netcode::{self, USER_DATA_BYTES};
use volley::server::metrics::TABLES;
use volley::server::{ServerConfig, ServerMetrics};
use volley::transport::conditioner::{Bottleneck, LinkProfile};
use volley_arena::Arena;
use volley_arena::bots::{Churn, SwarmConfig, SwarmProgress, run_swarm};
use volley_arena::rooms::{Lobby, RoomFigures, Rooms};
use volley_util::hex;

mod fleet;
mod oracle;
mod scrape;
mod zones;

/// volley: an authoritative real-time multiplayer game server framework.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The main job: an arena server with built-in bots on this machine, printing live figures.
    Run(RunArgs),
    /// An arena server alone.
    Server(ServerArgs),
    /// A bot swarm against a running server.
    Bots(BotsArgs),
    /// Serve a recording (made with --record) as an arena server: clients connect with
    /// ordinary connect tokens and watch it; they steer it with SpectatorControl messages.
    Replay(ReplayArgs),
    /// The connect-token backend: authenticates players (signed player ids or API keys),
    /// picks a server with room and answers with a connect token for it (HTTP, JSON).
    Backend(fleet::BackendArgs),
    /// Load a backend with token requests and print tokens a second and response times.
    BackendBench(fleet::BenchArgs),
    /// Print a new random 32-byte private key (hex), to share between backend and servers.
    Keygen,
    /// Mint a netcode.io 1.02 connect token, as a matchmaker or backend would.
    Token(TokenArgs),
    /// Print the arena's replicated kinds as JSON (each field's name, quantizer and wire
    /// layout, and the fingerprint): what a client in another language (volley-ffi) decodes
    /// snapshots with.
    Schema,
    /// Ask a running server's admin listener whether it is healthy (exit 0) or not (exit 1):
    /// the Docker HEALTHCHECK.
    Health(HealthArgs),
}

#[derive(Debug, clap::Args)]
struct HealthArgs {
    /// The server's admin address.
    #[arg(long, env = "VOLLEY_ADMIN", default_value = "127.0.0.1:9100")]
    admin: SocketAddr,
    /// Which endpoint to ask: /healthz (the tick loop runs) or /readyz (accepting players).
    #[arg(long, default_value = "/healthz")]
    path: String,
    /// Seconds to wait for an answer.
    #[arg(long, default_value_t = 2.0)]
    timeout: f64,
}

#[derive(Debug, clap::Args)]
struct TokenArgs {
    /// The private key shared with the servers, 64 hex digits.
    #[arg(long, env = "VOLLEY_PRIVATE_KEY", hide_env_values = true)]
    private_key: String,
    /// The game's protocol id.
    #[arg(long, env = "VOLLEY_PROTOCOL_ID", default_value_t = volley::DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
    /// The client's globally unique id.
    #[arg(long)]
    client_id: u64,
    /// A server the client may connect to (repeat for several, tried in order).
    #[arg(long = "server", required = true)]
    servers: Vec<SocketAddr>,
    /// Seconds the token may be used to start connecting.
    #[arg(long, default_value_t = 30)]
    expire_seconds: u64,
    /// Connection timeout in seconds (negative: none, for development only).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    timeout_seconds: i32,
    /// Up to 256 bytes of user data for the server, in hex.
    #[arg(long, default_value = "")]
    user_data: String,
    /// Write the 2048 raw bytes here instead of printing hex.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
struct ServerArgs {
    /// A TOML file with any of these settings (flags and environment take precedence).
    #[arg(long, env = "VOLLEY_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// UDP address to listen on.
    #[arg(long, env = "VOLLEY_BIND", default_value = "127.0.0.1:40000")]
    bind: SocketAddr,
    /// The address clients reach the server at, which connect tokens must name (host:port;
    /// a name is resolved at start). Default: the bound address.
    #[arg(long, env = "VOLLEY_PUBLIC_ADDR")]
    public_addr: Option<String>,
    /// The private key shared with the token backend, 64 hex digits (random if unset: then
    /// only the built-in bots can connect).
    #[arg(long, env = "VOLLEY_PRIVATE_KEY", hide_env_values = true)]
    private_key: Option<String>,
    /// The game's protocol id.
    #[arg(long, env = "VOLLEY_PROTOCOL_ID", default_value_t = volley::DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
    /// Player slots.
    #[arg(long, env = "VOLLEY_MAX_PLAYERS", default_value_t = 1024)]
    max_players: usize,
    /// Simulation ticks per second.
    #[arg(long, env = "VOLLEY_TICK_RATE", default_value_t = 60)]
    tick_rate: u16,
    /// Snapshots per second (divides the tick rate).
    #[arg(long, env = "VOLLEY_SNAPSHOT_RATE", default_value_t = 60)]
    snapshot_rate: u16,
    /// The lowest snapshot rate the server falls to, evenly for every player, when it is
    /// short of CPU (the snapshot rate or more: never lowers it).
    #[arg(long, env = "VOLLEY_MIN_SNAPSHOT_RATE", default_value_t = 15)]
    min_snapshot_rate: u16,
    /// Stop after this many seconds (default: run until Ctrl-C or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds clients get to be told of a shutdown.
    #[arg(long, env = "VOLLEY_SHUTDOWN_GRACE", default_value_t = 3.0)]
    shutdown_grace: f64,
    /// Seconds a player whose client went silent is kept for it to resume (from its last
    /// packet; past the 5 s connection timeout its world hears it is away); 0 to 60, at most
    /// 5 turns it off.
    #[arg(long, env = "VOLLEY_RESUME_GRACE", default_value_t = 15.0)]
    resume_grace: f64,
    /// TCP address of the admin listener (/metrics, /healthz, /readyz, /players); "off"
    /// disables it.
    #[arg(long, env = "VOLLEY_ADMIN", default_value = "127.0.0.1:9100")]
    admin: String,
    /// A bearer token that /metrics and /players require (Authorization: Bearer TOKEN);
    /// /healthz and /readyz stay open for probes.
    #[arg(long, env = "VOLLEY_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A file holding the admin bearer token (a mounted secret), instead of --admin-token.
    #[arg(long, env = "VOLLEY_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<std::path::PathBuf>,
    /// Show each client's IP address and port in /players (off: they are personal data).
    #[arg(long, env = "VOLLEY_ADMIN_SHOW_ADDRESSES")]
    admin_show_addresses: bool,
    /// Let the admin listener condition a player's downlink while the server runs, for
    /// testing: POST /players/ID/link?rate=32000&queue_ms=250&loss=0.02&latency_ms=20 (and
    /// DELETE; GET /links lists them), behind the admin token if one is set.
    #[arg(long, env = "VOLLEY_ADMIN_LINK_CONTROL")]
    admin_link_control: bool,
    /// /healthz fails when no tick has finished for this many seconds.
    #[arg(long, env = "VOLLEY_STALL_AFTER", default_value_t = 1.0)]
    stall_after: f64,
    /// Snapshot datagrams sent per system call at most (sendmmsg, 1 to 32; 1 sends each as
    /// soon as it is encoded).
    #[arg(long, env = "VOLLEY_SEND_BATCH", default_value_t = 32)]
    send_batch: usize,
    /// Kernel receive and send buffer of the server's socket, bytes (capped by the kernel's
    /// net.core.rmem_max / wmem_max).
    #[arg(long, env = "VOLLEY_SOCKET_BUFFER", default_value_t = 4 << 20)]
    socket_buffer: usize,
    /// The most each client is sent, bytes a second: its send rate's budget on a quiet link
    /// (the rate drops below it while the client's link queues, and grows back).
    #[arg(long, env = "VOLLEY_MAX_SEND_RATE", default_value_t = 125_000)]
    max_send_rate: u32,
    /// The least each client's send rate drops to, bytes a second.
    #[arg(long, env = "VOLLEY_MIN_SEND_RATE", default_value_t = 4_000)]
    min_send_rate: u32,
    /// Predicted, range-coded snapshots: fewer bytes where much moves (physics scenes), more
    /// encode time per changed entity.
    #[arg(long, env = "VOLLEY_PREDICT_SNAPSHOTS")]
    predict_snapshots: bool,
    /// Write one line of figures per second to this CSV file (for `volley plot`).
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Players in a browser: serve the arena's page at http://ADDR/ (TCP), WebTransport on
    /// ADDR's port (UDP) and the WebSocket fallback at ws://ADDR/ws, each browser relayed to
    /// this server as a client like any other (see the README, "Players in a browser").
    #[arg(long, env = "VOLLEY_WEB")]
    web: Option<SocketAddr>,
    /// With --web: the WebTransport certificate chain (PEM) for production, with --web-key;
    /// reloaded when it changes. Default: a self-signed certificate, renewed every 6½ days,
    /// whose hash the page fetches.
    #[arg(long, env = "VOLLEY_WEB_CERT", requires = "web_key")]
    web_cert: Option<std::path::PathBuf>,
    /// With --web-cert: its private key (PEM).
    #[arg(long, env = "VOLLEY_WEB_KEY", requires = "web_cert")]
    web_key: Option<std::path::PathBuf>,
    /// With --web: mint connect tokens for pages at /token (default: only without
    /// --private-key, that is in development; in a fleet pages get tokens from the backend).
    #[arg(long, env = "VOLLEY_WEB_TOKENS")]
    web_tokens: Option<bool>,
    /// Players per arena match: the server runs a lobby, a global world every player
    /// watches, and a match for every this many queued players (0: one arena world for
    /// everyone, no lobby).
    #[arg(long, env = "VOLLEY_MATCH_SIZE", default_value_t = 20)]
    match_size: usize,
    /// Fewer than --match-size queued players still start a match once the first of them has
    /// waited --match-wait seconds, if at least this many are queued.
    #[arg(long, env = "VOLLEY_MATCH_MIN", default_value_t = 2)]
    match_min: usize,
    /// Seconds the first queued player waits for a full match before one starts with whoever
    /// is queued (at least --match-min).
    #[arg(long, env = "VOLLEY_MATCH_WAIT", default_value_t = 3.0)]
    match_wait: f64,
    /// Seconds a match lasts before its players go back to the lobby.
    #[arg(long, env = "VOLLEY_MATCH_SECONDS", default_value_t = 60.0)]
    match_seconds: f64,
    /// Beacons in the global world.
    #[arg(long, env = "VOLLEY_BEACONS", default_value_t = 100)]
    beacons: u32,
    /// Seconds a match's spectators' world runs behind the match.
    #[arg(long, env = "VOLLEY_SPECTATOR_DELAY", default_value_t = 2.0)]
    spectator_delay: f64,
    /// Record every world into a new file in this folder while it runs (`volley replay FILE`
    /// plays one back).
    #[arg(long, env = "VOLLEY_RECORD")]
    record: Option<std::path::PathBuf>,
    /// Run the Agones lifecycle (Ready, Health, the players counter, Shutdown) against the
    /// SDK server at localhost:AGONES_SDK_GRPC_PORT; on by itself when that variable is set,
    /// as it is in a GameServer pod.
    #[arg(long, env = "VOLLEY_AGONES")]
    agones: bool,
    /// The Agones SDK server's gRPC port (default: AGONES_SDK_GRPC_PORT, else 9357).
    #[arg(long)]
    agones_port: Option<u16>,
    /// Run zone K (0-based) of the arena's map split among --zones servers: it shares what
    /// stands near its borders with its neighbours and hands players who walk over to them,
    /// through NATS at --nats (one arena world, no rooms; "border" is a world kind).
    #[arg(long, env = "VOLLEY_ZONE")]
    zone: Option<u16>,
    /// Zones the map is split into: a grid (4: 2 × 2, 6: 3 × 2, 9: 3 × 3; otherwise N side by
    /// side). With `volley run`, more than 1 starts NATS (if `nats-server` is installed) and
    /// this many zone servers, and the bots play across them.
    #[arg(long, env = "VOLLEY_ZONES", default_value_t = 1)]
    zones: u16,
    /// The NATS server the zones talk through.
    #[arg(long, env = "VOLLEY_NATS", default_value = "nats://127.0.0.1:4222")]
    nats: String,
    /// With --zone: also publish the zone's whole state every tick on NATS (subject
    /// volley.zone.K.state), for observers of the whole map such as `volley run --oracle`.
    #[arg(long, env = "VOLLEY_PUBLISH_STATE")]
    publish_state: bool,
    /// Fault injection for supervision runs: the Nth match (0: the first) panics in every
    /// tick from its tenth second; its figures carry kind="faulty".
    #[arg(long, hide = true)]
    faulty_match: Option<u64>,
}

/// A link conditioner for every bot (both directions).
#[derive(Debug, Clone, Copy, clap::Args)]
struct LinkArgs {
    /// One-way latency added to each bot's link, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    latency_ms: f64,
    /// Jitter (uniform, either way) on each bot's link, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    jitter_ms: f64,
    /// Random loss on each bot's link, 0 to 1.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Burst loss: chance per datagram of entering a loss burst (0 disables bursts).
    #[arg(long, default_value_t = 0.0)]
    burst_enter: f64,
    /// Burst loss: chance per datagram of leaving a burst.
    #[arg(long, default_value_t = 0.3)]
    burst_leave: f64,
    /// A narrow line on what each bot receives, bytes a second (32000 is 256 kbit/s; 0: none):
    /// the server's send rate for it should follow (see volley_send_rate_bytes_per_second).
    #[arg(long, default_value_t = 0)]
    line_rate: u32,
    /// The line's router buffer, milliseconds of sending.
    #[arg(long, default_value_t = 250.0)]
    line_queue_ms: f64,
    /// Every this many seconds each bot's socket moves to a new local port, as a NAT
    /// rebinding moves a player (untold: the bot hears a second of silence and resumes its
    /// session with its resume ticket); the bots' moves are spread over the period.
    #[arg(long)]
    rebind_every: Option<f64>,
}

/// What the bots' links do: a conditioner both ways, and a narrow line on the way in.
#[derive(Debug, Clone, Copy, Default)]
struct BotLink {
    profile: Option<LinkProfile>,
    line: Option<Bottleneck>,
    rebind_every: Option<Duration>,
}

impl LinkArgs {
    fn bot_link(&self) -> Result<BotLink, String> {
        if !(self.line_queue_ms.is_finite() && (0.0..=10_000.0).contains(&self.line_queue_ms)) {
            return Err("link: --line-queue-ms must be between 0 and 10000".into());
        }
        let line = (self.line_rate > 0).then(|| Bottleneck {
            bytes_per_second: self.line_rate,
            queue: Duration::from_secs_f64(self.line_queue_ms / 1e3),
        });
        let rebind_every = match self.rebind_every {
            None => None,
            Some(s) if s.is_finite() && (0.5..=86_400.0).contains(&s) => Some(Duration::from_secs_f64(s)),
            Some(_) => return Err("link: --rebind-every must be between 0.5 and 86400 seconds".into()),
        };
        Ok(BotLink { profile: self.profile()?, line, rebind_every })
    }

    fn profile(&self) -> Result<Option<LinkProfile>, String> {
        let ok = |v: f64| v.is_finite() && (0.0..=10_000.0).contains(&v);
        let chance = |v: f64| (0.0..=1.0).contains(&v);
        let valid = ok(self.latency_ms)
            && ok(self.jitter_ms)
            && chance(self.loss)
            && chance(self.burst_enter)
            && chance(self.burst_leave);
        if !valid {
            return Err("link: --latency-ms and --jitter-ms must be between 0 and 10000, --loss, --burst-enter and --burst-leave between 0 and 1".into());
        }
        if self.latency_ms == 0.0 && self.jitter_ms == 0.0 && self.loss == 0.0 && self.burst_enter == 0.0 {
            return Ok(None);
        }
        Ok(Some(LinkProfile {
            latency: Duration::from_secs_f64(self.latency_ms / 1e3),
            jitter: Duration::from_secs_f64(self.jitter_ms / 1e3),
            loss: self.loss,
            burst: (self.burst_enter > 0.0).then_some((self.burst_enter, self.burst_leave)),
        }))
    }
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The recording (a .vrec file).
    file: std::path::PathBuf,
    /// Print what the recording holds and exit.
    #[arg(long)]
    info: bool,
    /// Bots to run as viewers (as `volley run` does).
    #[arg(long, default_value_t = 0)]
    bots: usize,
    /// Refuse recordings larger than this many bytes (a recording is read into memory).
    #[arg(long, default_value_t = 1 << 30)]
    max_bytes: u64,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Bots to run.
    #[arg(long, default_value_t = 16)]
    bots: usize,
    /// Of the bots, this many are spectators: each watches a match (with --match-size > 0)
    /// from its spectators' world, two seconds behind, sending no inputs (default: 2 when the
    /// server runs matches, else 0).
    #[arg(long)]
    spectators: Option<usize>,
    /// With --zones: check every snapshot of every bot against a global oracle built from all
    /// zones' states (each zone publishes its state every tick), and print what it found:
    /// entities within the view radius missing, shown twice, or unknown to every zone.
    #[arg(long)]
    oracle: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// How bots connect ([`BotsArgs::transport`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Transport {
    /// netcode.io over UDP.
    Udp,
    /// WebTransport through the server's web front, as a browser.
    Webtransport,
}

#[derive(Debug, clap::Args)]
struct BotsArgs {
    /// The server's address (host:port; a name is resolved).
    #[arg(long, env = "VOLLEY_SERVER", default_value = "127.0.0.1:40000")]
    server: String,
    /// The server's private key (the swarm mints its own tokens), 64 hex digits; not needed
    /// with --backend.
    #[arg(long, env = "VOLLEY_PRIVATE_KEY", hide_env_values = true)]
    private_key: Option<String>,
    /// Get the bots' tokens from this connect-token backend (http://HOST:PORT) instead of
    /// minting them: bot N asks as player "bot-N".
    #[arg(long, env = "VOLLEY_BACKEND")]
    backend: Option<String>,
    /// The backend's HMAC secret (the bots sign their own requests, as a game's account
    /// service would).
    #[arg(long, env = "VOLLEY_BACKEND_SECRET", hide_env_values = true)]
    backend_secret: Option<String>,
    /// An API key the backend accepts, instead of --backend-secret.
    #[arg(long, env = "VOLLEY_BACKEND_API_KEY", hide_env_values = true)]
    backend_api_key: Option<String>,
    /// The game's protocol id.
    #[arg(long, env = "VOLLEY_PROTOCOL_ID", default_value_t = volley::DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
    /// Bots to run.
    #[arg(long, default_value_t = 16)]
    bots: usize,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
    /// Client id of the first bot.
    #[arg(long, default_value_t = 1)]
    first_client_id: u64,
    /// Of the bots, this many (the last) are spectators: they watch a match from its
    /// spectators' world, sending no inputs.
    #[arg(long, default_value_t = 0)]
    spectators: usize,
    /// The server's admin address (host:port). With it the swarm scrapes the server's
    /// /metrics once every bot is connected and again at the end, and prints the server's own
    /// figures over that span: tick p99, inputs applied at the next tick, CPU and memory per player,
    /// input to effect.
    #[arg(long)]
    admin: Option<String>,
    /// The bearer token the server's /metrics requires, if any.
    #[arg(long, env = "VOLLEY_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// How the bots connect: `udp` (netcode, the default) or `webtransport` (as a browser
    /// does, through the server's web front given by --web: load runs then measure what a
    /// browser player costs the server).
    #[arg(long, value_enum, default_value_t = Transport::Udp)]
    transport: Transport,
    /// The server's web front (its --web HTTP address), for --transport webtransport: the
    /// bots read /web.json there for the WebTransport port and the certificates to trust.
    #[arg(long, env = "VOLLEY_WEB", default_value = "127.0.0.1:8080")]
    web: String,
    /// Churn: this percentage of the live bots leave every --churn-every seconds, and as
    /// many new bots join.
    #[arg(long, default_value_t = 0.0)]
    churn_percent: f64,
    /// Seconds between churns.
    #[arg(long, default_value_t = 60.0)]
    churn_every: f64,
    /// With --admin: every this many seconds (the first half a period in, so that reports
    /// fall between churns), print the server's resident memory, players and table occupancy
    /// (pending handshakes, routing tables, player actors).
    #[arg(long)]
    figures_every: Option<f64>,
    /// A soak run: --churn-percent 10 --churn-every 60 --figures-every 60 unless given, and
    /// at the end a verdict: resident memory at the last report against the second, tables
    /// back to their occupancy, every bot that stayed heard every reliable message once.
    #[arg(long)]
    soak: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// Server settings from a TOML file; every key is optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
struct FileConfig {
    bind: Option<SocketAddr>,
    public_addr: Option<String>,
    private_key: Option<String>,
    protocol_id: Option<u64>,
    max_players: Option<usize>,
    tick_rate: Option<u16>,
    snapshot_rate: Option<u16>,
    min_snapshot_rate: Option<u16>,
    duration: Option<f64>,
    shutdown_grace: Option<f64>,
    resume_grace: Option<f64>,
    admin: Option<String>,
    admin_token: Option<String>,
    admin_token_file: Option<std::path::PathBuf>,
    admin_show_addresses: Option<bool>,
    admin_link_control: Option<bool>,
    stall_after: Option<f64>,
    send_batch: Option<usize>,
    socket_buffer: Option<usize>,
    max_send_rate: Option<u32>,
    min_send_rate: Option<u32>,
    predict_snapshots: Option<bool>,
    match_size: Option<usize>,
    match_min: Option<usize>,
    match_wait: Option<f64>,
    match_seconds: Option<f64>,
    beacons: Option<u32>,
    record: Option<std::path::PathBuf>,
    spectator_delay: Option<f64>,
    zone: Option<u16>,
    zones: Option<u16>,
    nats: Option<String>,
    web: Option<SocketAddr>,
    web_cert: Option<std::path::PathBuf>,
    web_key: Option<std::path::PathBuf>,
    web_tokens: Option<bool>,
}

/// A small text file a setting names (a config file, a token file): a regular file of at
/// most 1 MiB, in UTF-8, or a clear error naming `what`.
fn read_text(path: &std::path::Path, what: &str) -> Result<String, String> {
    let bytes =
        volley_util::file::read_bounded(path, 1 << 20).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{what} {}: not UTF-8 text", path.display()))
}

/// Fills every setting that neither a flag nor the environment gave from the config file.
fn apply_config_file(a: &mut ServerArgs, m: &clap::ArgMatches) -> Result<(), String> {
    let Some(path) = a.config.clone() else { return Ok(()) };
    let text = read_text(&path, "the config file")?;
    let unset = |id: &str| {
        !matches!(
            m.value_source(id),
            Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
        )
    };
    apply_config_text(a, &text, unset).map_err(|e| format!("{}: {e}", path.display()))
}

/// Fills every setting for which `unset` is true from the config file's `text`.
fn apply_config_text(a: &mut ServerArgs, text: &str, unset: impl Fn(&str) -> bool) -> Result<(), String> {
    let f: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
    if let Some(v) = f.bind.filter(|_| unset("bind")) {
        a.bind = v;
    }
    if let Some(v) = f.public_addr.filter(|_| unset("public_addr")) {
        a.public_addr = Some(v);
    }
    if let Some(v) = f.private_key.filter(|_| unset("private_key")) {
        a.private_key = Some(v);
    }
    if let Some(v) = f.protocol_id.filter(|_| unset("protocol_id")) {
        a.protocol_id = v;
    }
    if let Some(v) = f.max_players.filter(|_| unset("max_players")) {
        a.max_players = v;
    }
    if let Some(v) = f.tick_rate.filter(|_| unset("tick_rate")) {
        a.tick_rate = v;
    }
    if let Some(v) = f.snapshot_rate.filter(|_| unset("snapshot_rate")) {
        a.snapshot_rate = v;
    }
    if let Some(v) = f.min_snapshot_rate.filter(|_| unset("min_snapshot_rate")) {
        a.min_snapshot_rate = v;
    }
    if let Some(v) = f.web.filter(|_| unset("web")) {
        a.web = Some(v);
    }
    if let Some(v) = f.web_cert.filter(|_| unset("web_cert")) {
        a.web_cert = Some(v);
    }
    if let Some(v) = f.web_key.filter(|_| unset("web_key")) {
        a.web_key = Some(v);
    }
    if let Some(v) = f.web_tokens.filter(|_| unset("web_tokens")) {
        a.web_tokens = Some(v);
    }
    if let Some(v) = f.duration.filter(|_| unset("duration")) {
        a.duration = Some(v);
    }
    if let Some(v) = f.shutdown_grace.filter(|_| unset("shutdown_grace")) {
        a.shutdown_grace = v;
    }
    if let Some(v) = f.resume_grace.filter(|_| unset("resume_grace")) {
        a.resume_grace = v;
    }
    if let Some(v) = f.admin.filter(|_| unset("admin")) {
        a.admin = v;
    }
    if let Some(v) = f.admin_token.filter(|_| unset("admin_token")) {
        a.admin_token = Some(v);
    }
    if let Some(v) = f.admin_token_file.filter(|_| unset("admin_token_file")) {
        a.admin_token_file = Some(v);
    }
    if let Some(v) = f.admin_show_addresses.filter(|_| unset("admin_show_addresses")) {
        a.admin_show_addresses = v;
    }
    if let Some(v) = f.admin_link_control.filter(|_| unset("admin_link_control")) {
        a.admin_link_control = v;
    }
    if let Some(v) = f.stall_after.filter(|_| unset("stall_after")) {
        a.stall_after = v;
    }
    if let Some(v) = f.send_batch.filter(|_| unset("send_batch")) {
        a.send_batch = v;
    }
    if let Some(v) = f.socket_buffer.filter(|_| unset("socket_buffer")) {
        a.socket_buffer = v;
    }
    if let Some(v) = f.max_send_rate.filter(|_| unset("max_send_rate")) {
        a.max_send_rate = v;
    }
    if let Some(v) = f.min_send_rate.filter(|_| unset("min_send_rate")) {
        a.min_send_rate = v;
    }
    if let Some(v) = f.predict_snapshots.filter(|_| unset("predict_snapshots")) {
        a.predict_snapshots = v;
    }
    if let Some(v) = f.match_size.filter(|_| unset("match_size")) {
        a.match_size = v;
    }
    if let Some(v) = f.match_min.filter(|_| unset("match_min")) {
        a.match_min = v;
    }
    if let Some(v) = f.match_wait.filter(|_| unset("match_wait")) {
        a.match_wait = v;
    }
    if let Some(v) = f.match_seconds.filter(|_| unset("match_seconds")) {
        a.match_seconds = v;
    }
    if let Some(v) = f.beacons.filter(|_| unset("beacons")) {
        a.beacons = v;
    }
    if let Some(v) = f.spectator_delay.filter(|_| unset("spectator_delay")) {
        a.spectator_delay = v;
    }
    if let Some(v) = f.record.filter(|_| unset("record")) {
        a.record = Some(v);
    }
    if let Some(v) = f.zone.filter(|_| unset("zone")) {
        a.zone = Some(v);
    }
    if let Some(v) = f.zones.filter(|_| unset("zones")) {
        a.zones = v;
    }
    if let Some(v) = f.nats.filter(|_| unset("nats")) {
        a.nats = v;
    }
    Ok(())
}

/// The browser side (`--web`): the arena's page, WebTransport and the WebSocket fallback,
/// relaying to the server at `server`; tokens for pages minted here in development.
async fn start_web(
    args: &ServerArgs,
    at: SocketAddr,
    server: SocketAddr,
    public: SocketAddr,
    key: [u8; 32],
) -> Result<volley_web::WebHandle, String> {
    let mint = args.web_tokens.unwrap_or(args.private_key.is_none()).then_some((public, key, args.protocol_id));
    let mut cfg = volley_arena::web::config(at, server, mint);
    if let (Some(cert), Some(key)) = (&args.web_cert, &args.web_key) {
        cfg.certificates = volley_web::Certificates::Files { cert: cert.clone(), key: key.clone() };
    }
    cfg.max_sessions = args.max_players;
    let web = volley_web::serve(cfg).await.map_err(|e| format!("--web: {e}"))?;
    println!(
        "web: http://{}/ (WebTransport on udp {}, WebSocket fallback at /ws)",
        web.http_addr(),
        web.webtransport_addr()
    );
    Ok(web)
}

fn key_or_random(hex_key: Option<&str>) -> Result<[u8; 32], String> {
    match hex_key {
        Some(k) => hex::decode_array::<32>(k).map_err(|e| format!("--private-key: {e}")),
        None => netcode::generate_key().map_err(|e| format!("no randomness: {e}")),
    }
}

/// A setting given in seconds, checked: finite and within `lo..=hi`, or an error naming the
/// setting and its range.
fn seconds(name: &str, v: f64, lo: f64, hi: f64) -> Result<Duration, String> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("{name} must be between {lo} and {hi} seconds (got {v})"))
    }
}

/// A setting given as a count, checked: within `lo..=hi`, or an error naming the setting and
/// its range.
fn within<T: PartialOrd + std::fmt::Display + Copy>(name: &str, v: T, lo: T, hi: T) -> Result<T, String> {
    if v >= lo && v <= hi { Ok(v) } else { Err(format!("{name} must be between {lo} and {hi} (got {v})")) }
}

/// Every numeric setting of the server's, against its range (flags, environment and the
/// config file alike reach it here, before anything is allocated from them).
fn validate(a: &ServerArgs) -> Result<(), String> {
    if let Some(d) = a.duration {
        seconds("--duration", d, 0.0, MAX_RUN_SECONDS)?;
    }
    seconds("--shutdown-grace", a.shutdown_grace, 0.0, 600.0)?;
    seconds("--resume-grace", a.resume_grace, 0.0, volley::server::MAX_RESUME_GRACE.as_secs_f64())?;
    seconds("--stall-after", a.stall_after, 0.01, 3600.0)?;
    seconds("--match-seconds", a.match_seconds, 0.01, 86_400.0)?;
    seconds("--match-wait", a.match_wait, 0.0, 3600.0)?;
    seconds("--spectator-delay", a.spectator_delay, 0.0, 60.0)?;
    within("--max-players", a.max_players, 1, volley::server::MAX_PLAYERS)?;
    within("--tick-rate", a.tick_rate, 1, 1000)?;
    within("--snapshot-rate", a.snapshot_rate, 1, a.tick_rate)?;
    within("--min-snapshot-rate", a.min_snapshot_rate, 1, 1000)?;
    within("--send-batch", a.send_batch, 1, volley::transport::batch::BATCH)?;
    within("--socket-buffer", a.socket_buffer, 0, 1 << 30)?;
    within("--max-send-rate", a.max_send_rate, 2_000, 1 << 30)?;
    within("--min-send-rate", a.min_send_rate, 1_000, a.max_send_rate)?;
    // A match larger than the server never fills; it starts short of full (--match-wait).
    within("--match-size", a.match_size, 0, volley::server::MAX_PLAYERS)?;
    within("--match-min", a.match_min, 1, volley::server::MAX_PLAYERS)?;
    within("--beacons", a.beacons, 0, 100_000)?;
    within("--zones", a.zones, 1, 64)?;
    if let Some(z) = a.zone {
        within("--zone", z, 0, a.zones - 1)?;
    }
    Ok(())
}

/// The longest `--duration`: ten years.
const MAX_RUN_SECONDS: f64 = 315_360_000.0;

/// The most bots one swarm runs (each holds a socket and a client).
const MAX_BOTS: usize = 100_000;

fn server_config(a: &ServerArgs, key: [u8; 32]) -> Result<ServerConfig, String> {
    validate(a)?;
    let mut c = ServerConfig::new(a.bind, key);
    c.protocol_id = a.protocol_id;
    c.max_players = a.max_players;
    c.tick_rate_hz = a.tick_rate;
    c.snapshot_rate_hz = a.snapshot_rate;
    c.min_snapshot_rate_hz = a.min_snapshot_rate;
    c.shutdown_grace = Duration::from_secs_f64(a.shutdown_grace);
    c.resume_grace = Duration::from_secs_f64(a.resume_grace);
    c.stall_after = Duration::from_secs_f64(a.stall_after);
    c.send_batch = a.send_batch;
    c.socket_buffer_bytes = a.socket_buffer;
    c.send_rate.max_bytes_per_second = a.max_send_rate;
    c.send_rate.min_bytes_per_second = a.min_send_rate;
    c.predict_snapshots = a.predict_snapshots;
    c.admin_addr = match a.admin.as_str() {
        "off" | "" => None,
        addr => {
            Some(addr.parse().map_err(|e| format!("--admin {addr:?}: {e} (an address like 0.0.0.0:9100, or off)"))?)
        }
    };
    c.admin_token = match (&a.admin_token, &a.admin_token_file) {
        (Some(_), Some(_)) => return Err("give --admin-token or --admin-token-file, not both".into()),
        (Some(t), None) => Some(t.trim().to_string()),
        (None, Some(path)) => Some(read_text(path, "--admin-token-file")?.trim().to_string()),
        (None, None) => None,
    };
    if c.admin_token.as_deref() == Some("") {
        return Err("the admin token is empty".into());
    }
    c.admin_show_addresses = a.admin_show_addresses;
    c.admin_link_control = a.admin_link_control;
    c.record = a.record.clone();
    if a.zone.is_some() {
        c.world_kinds = vec!["arena".into(), "border".into()];
    } else if a.match_size > 0 {
        c.world_kinds = volley_arena::rooms::KINDS.iter().map(|k| (*k).to_owned()).collect();
        if a.faulty_match.is_some() {
            c.world_kinds.push("faulty".into());
        }
    }
    Ok(c)
}

/// The rooms `volley run`/`server` serves, unless it serves one arena world (`--match-size 0`,
/// or a zone).
fn rooms(a: &ServerArgs) -> Option<Rooms> {
    (a.match_size > 0 && a.zone.is_none()).then(|| Rooms {
        match_size: a.match_size,
        match_min: a.match_min.min(a.match_size),
        match_wait: Duration::try_from_secs_f64(a.match_wait.clamp(0.0, 3600.0)).unwrap_or_default(),
        match_length: Duration::try_from_secs_f64(a.match_seconds.clamp(0.01, 86_400.0))
            .unwrap_or(Duration::from_secs(60)),
        beacons: a.beacons,
        faulty_match: a.faulty_match,
        spectator_delay: Duration::try_from_secs_f64(a.spectator_delay.clamp(0.0, 60.0)).unwrap_or_default(),
        ..Rooms::default()
    })
}

/// Resolves when Ctrl-C or SIGTERM arrives, or after `duration`.
async fn until_stopped(duration: Option<f64>) {
    let timer = async {
        match duration {
            // Checked by the caller (`seconds`); an unchecked one too large to sleep runs on.
            Some(s) => match Duration::try_from_secs_f64(s) {
                Ok(d) => tokio::time::sleep(d).await,
                Err(_) => std::future::pending().await,
            },
            _ => std::future::pending().await,
        }
    };
    let term = async {
        #[cfg(unix)]
        if let Ok(mut t) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            t.recv().await;
            return;
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = timer => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

fn live_line(
    m: &ServerMetrics,
    progress: Option<&SwarmProgress>,
    rooms: Option<&RoomFigures>,
    prev: &mut (u64, u64, u64),
    dt: f64,
) -> String {
    let out = m.totals().bytes_sent;
    let inb = m.totals().bytes_received;
    let snaps = m.totals().snapshots;
    let players = m.totals().players;
    // The players' median RTT: one client with a broken link cannot move it, as it did a mean.
    let rtt = m.rtt_quantile(0.5).as_secs_f64() * 1000.0;
    let kinds = m.worlds_by_kind();
    let kind = |name: &str| kinds.iter().find(|k| k.0 == name).map_or((0, 0), |k| (k.1, k.2));
    // What a newcomer looks for first: games running and who is in them.
    let games = match rooms {
        Some(r) => {
            let (matches, playing) = kind("match");
            let (_, waiting) = kind("lobby");
            let (_, watching) = kind("spectators");
            format!(
                "matches {matches} running ({playing} playing, {waiting} waiting, {watching} watching), {} played | ",
                r.finished.load(std::sync::atomic::Ordering::Relaxed)
            )
        }
        None => String::new(),
    };
    let (frames, recorded) = m.recorded();
    let line = format!(
        "{games}players {:>4} | tick p50 {:>6.3} ms p99 {:>6.3} ms | out {:>8.1} kbit/s in {:>7.1} kbit/s | snapshots {:>6.0}/s | rtt p50 {:>5.2} ms{}{}",
        players,
        m.tick_quantile(0.5).as_secs_f64() * 1e3,
        m.tick_quantile(0.99).as_secs_f64() * 1e3,
        (out - prev.0) as f64 * 8.0 / 1000.0 / dt,
        (inb - prev.1) as f64 * 8.0 / 1000.0 / dt,
        (snaps - prev.2) as f64 / dt,
        rtt,
        progress.map_or(String::new(), |p| format!(
            " | bots connected {}",
            p.connected.load(std::sync::atomic::Ordering::Relaxed)
        )),
        if frames > 0 {
            format!(" | recorded {frames} ticks, {:.1} MiB", recorded as f64 / 1048576.0)
        } else {
            String::new()
        },
    );
    *prev = (out, inb, snaps);
    line
}

const CSV_HEADER: &str = "seconds,players,tick_p50_ms,tick_p99_ms,tick_budget_ms,egress_kbit_s,ingress_kbit_s,egress_per_player_kbit_s,rtt_p50_ms";

/// One line per second of `--csv` output (tick quantiles over the recent ticks; rates over the
/// last second).
#[derive(Default)]
struct CsvRow {
    out: u64,
    inb: u64,
    at: f64,
}

impl CsvRow {
    fn next(&mut self, m: &ServerMetrics, now: f64) -> String {
        let (out, inb) = (m.totals().bytes_sent, m.totals().bytes_received);
        let dt = (now - self.at).max(1e-3);
        let players = m.totals().players;
        let egress = (out - self.out) as f64 * 8.0 / 1000.0 / dt;
        let rtt = m.rtt_quantile(0.5).as_secs_f64() * 1000.0;
        let line = format!(
            "{now:.1},{players},{:.3},{:.3},{:.3},{egress:.1},{:.1},{:.2},{rtt:.2}",
            m.tick_quantile(0.5).as_secs_f64() * 1e3,
            m.tick_quantile(0.99).as_secs_f64() * 1e3,
            m.tick_period().as_secs_f64() * 1e3,
            (inb - self.inb) as f64 * 8.0 / 1000.0 / dt,
            egress / players.max(1) as f64,
        );
        *self = Self { out, inb, at: now };
        line
    }
}

/// Resolves `host:port` (an IPv4 address preferred).
async fn resolve(what: &str, addr: &str) -> Result<SocketAddr, String> {
    let all: Vec<SocketAddr> =
        tokio::net::lookup_host(addr).await.map_err(|e| format!("{what} {addr:?}: {e}"))?.collect();
    all.iter().find(|a| a.is_ipv4()).or(all.first()).copied().ok_or_else(|| format!("{what} {addr:?}: no address"))
}

/// Opens a recording of the arena for `volley replay`.
fn open_replay(a: &ReplayArgs) -> Result<volley::server::spectate::SpectatorWorld, String> {
    use volley::server::World;
    let arena = Arena::new();
    volley::server::spectate::SpectatorWorld::open(&a.file, arena.schema(), arena.relevancy(), a.max_bytes)
        .map_err(|e| format!("{}: {e}", a.file.display()))
}

/// `volley replay --info`: what a recording holds.
fn replay_info(a: &ReplayArgs) -> Result<(), String> {
    use volley::protocol::recording::Recording;
    use volley::server::World;
    let data = volley_util::file::read_bounded(&a.file, a.max_bytes).map_err(|e| match e {
        volley_util::file::ReadError::TooLarge(max) => format!("{}: more than --max-bytes {max}", a.file.display()),
        e => format!("{}: {e}", a.file.display()),
    })?;
    let size = data.len() as u64;
    let rec = Recording::parse(data.into(), Some(&Arena::new().schema()))
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let h = rec.header();
    let (first, last) = rec.ticks().unwrap_or((0, 0));
    let seconds = f64::from(last.saturating_sub(first) + 1) / f64::from(h.tick_rate_hz.max(1));
    println!("kind: {}", h.kind);
    println!("protocol: {}, schema: {:016x}", h.protocol, h.schema);
    println!(
        "tick rate: {} Hz (world every {} ticks), keyframe every {} ticks",
        h.tick_rate_hz, h.stride, h.keyframe_every
    );
    println!("started: {} ms after the Unix epoch", h.started_unix_ms);
    println!("ticks: {first}..={last} ({seconds:.1} s) in {} chunks", rec.chunks().len());
    println!("size: {size} bytes ({:.1} KiB per minute)", size as f64 / 1024.0 / (seconds / 60.0).max(1e-9));
    let sizes = rec.sizes().map_err(|e| format!("{}: {e}", a.file.display()))?;
    if sizes.keyframes > 0 {
        // Full snapshots every tick: each frame as big as the mean keyframe.
        let full = sizes.keyframe_bytes as f64 / sizes.keyframes as f64 * sizes.frames as f64;
        println!(
            "frames: {} ({} keyframes, mean {:.0} bytes; changes mean {:.0} bytes), {} events; full snapshots every tick would take {:.1} KiB per minute: this file is 1/{:.1} of that",
            sizes.frames,
            sizes.keyframes,
            sizes.keyframe_bytes as f64 / sizes.keyframes as f64,
            sizes.delta_bytes as f64 / (sizes.frames - sizes.keyframes).max(1) as f64,
            sizes.events,
            full / 1024.0 / (seconds / 60.0).max(1e-9),
            full / size.max(1) as f64,
        );
    }
    if rec.chunks().is_empty() {
        println!("cut off: not one complete chunk ({} bytes after the header): nothing to play", rec.cut_off());
    } else if rec.cut_off() > 0 {
        println!(
            "cut off: the last {} bytes were not a complete chunk (a crash?); it plays to tick {last}",
            rec.cut_off()
        );
    }
    Ok(())
}

async fn serve(args: ServerArgs, bots: (usize, usize), link: BotLink) -> Result<(), String> {
    serve_world(args, bots, link, None).await
}

async fn serve_world(
    args: ServerArgs,
    (bots, spectators): (usize, usize),
    link: BotLink,
    replay: Option<volley::server::spectate::SpectatorWorld>,
) -> Result<(), String> {
    let key = key_or_random(args.private_key.as_deref())?;
    let mut config = server_config(&args, key)?;
    if let Some(p) = &args.public_addr {
        config.public_addr = Some(resolve("--public-addr", p).await?);
    }
    let agones_config =
        volley_fleet::agones::AgonesConfig::from_env().or_else(|| args.agones.then(Default::default)).map(|mut c| {
            c.port = args.agones_port.or(c.port);
            c
        });
    if let (Some(cfg), None) = (&agones_config, &args.public_addr) {
        // Tokens must name the address and port Agones gave this GameServer.
        match volley_fleet::agones::public_addr(cfg).await.map_err(|e| e.to_string())? {
            Some(a) => {
                println!("agones: public address {a}");
                config.public_addr = Some(a);
            }
            None => tracing::warn!("Agones: the GameServer has no address yet; tokens must name the bound address"),
        }
    }
    let figures = Arc::new(RoomFigures::default());
    let (zone_world, zone_link) = match zones::arena_zone(&args)? {
        Some((arena, link)) => (Some(arena), Some(link)),
        None => (None, None),
    };
    let public = config.public_addr;
    let replay_off = replay.is_none();
    let mut server = match (replay, rooms(&args), zone_world) {
        (Some(w), ..) => volley::server::start(config, w).await,
        (None, _, Some(arena)) => volley::server::start(config, arena).await,
        (None, Some(r), None) => volley::server::start(config, Lobby::new(r, figures.clone())).await,
        (None, None, None) => volley::server::start(config, Arena::new()).await,
    }
    .map_err(|e| e.to_string())?;
    let addr = server.addr();
    let _web = match args.web {
        Some(at) => Some(start_web(&args, at, addr, public.unwrap_or(addr), key).await?),
        None => None,
    };
    let _bus = match zone_link {
        Some(link) => Some(zones::start_bus(&args, public.unwrap_or(addr), link).await?),
        None => None,
    };
    if let Some(a) = server.admin_addr() {
        println!("admin: http://{a}/metrics /healthz /readyz /players");
    }
    let mut agones = match volley_fleet::agones::AgonesConfig::from_env().or_else(|| args.agones.then(Default::default))
    {
        Some(mut cfg) => {
            cfg.port = args.agones_port.or(cfg.port);
            let allocated = |a: volley_fleet::agones::Allocation| {
                // The arena hosts whoever comes; a game would start the match the labels name.
                tracing::info!(labels = ?a.labels, annotations = ?a.annotations, "allocated");
            };
            let lifecycle = volley_fleet::agones::Lifecycle::start(cfg, server.metrics().clone(), allocated)
                .await
                .map_err(|e| e.to_string())?;
            println!("agones: connected to the SDK server; Ready after the first tick");
            Some(lifecycle)
        }
        None => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let progress = Arc::new(SwarmProgress::default());
    let swarm = (bots > 0).then(|| {
        let cfg = SwarmConfig {
            protocol_id: args.protocol_id,
            link: link.profile,
            line: link.line,
            rebind_every: link.rebind_every,
            spectators,
            ..SwarmConfig::new(addr, bots, key)
        };
        tokio::spawn(run_swarm(cfg, progress.clone(), stop_rx))
    });
    let metrics = server.metrics().clone();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut csv = match &args.csv {
        Some(path) => {
            let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
            writeln!(f, "{CSV_HEADER}").map_err(|e| format!("{}: {e}", path.display()))?;
            Some(f)
        }
        None => None,
    };
    let rooms_on = rooms(&args).is_some() && replay_off;
    let live = tokio::spawn({
        let progress = progress.clone();
        let peak = peak.clone();
        let live_figures = figures.clone();
        async move {
            let mut prev = (0, 0, 0);
            let mut row = CsvRow::default();
            let mut t = tokio::time::interval(Duration::from_secs(1));
            t.tick().await;
            let started = tokio::time::Instant::now();
            loop {
                t.tick().await;
                peak.fetch_max(metrics.totals().players, std::sync::atomic::Ordering::Relaxed);
                if let Some(f) = csv.as_mut() {
                    let line = row.next(&metrics, started.elapsed().as_secs_f64());
                    if writeln!(f, "{line}").is_err() {
                        csv = None;
                    }
                }
                println!(
                    "{}",
                    live_line(
                        &metrics,
                        (bots > 0).then_some(&*progress),
                        rooms_on.then_some(&*live_figures),
                        &mut prev,
                        1.0
                    )
                );
            }
        }
    });
    let game_ended = async {
        match agones.as_mut() {
            Some(l) => l.requested().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = until_stopped(args.duration) => {}
        _ = game_ended => {}
        _ = server.wait() => {
            live.abort();
            return Err(format!("the server failed: {}", server.failure().unwrap_or_else(|| "it stopped".into())));
        }
    }
    live.abort();
    let _ = stop_tx.send(true);
    let report = match swarm {
        Some(s) => s.await.ok(),
        None => None,
    };
    if let Some(report) = report {
        println!("{}", report.summary());
        println!("{}", report.kill_feed().line());
    }
    if rooms_on {
        println!(
            "matches: {} started, {} played to the end",
            figures.started.load(std::sync::atomic::Ordering::Relaxed),
            figures.finished.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    if let (Some(dir), (frames, bytes)) = (&args.record, server.metrics().recorded()) {
        println!(
            "recordings: {frames} world ticks, {:.1} MiB in {} (`volley replay FILE` plays one)",
            bytes as f64 / 1048576.0,
            dir.display()
        );
    }
    let m = server.metrics().clone();
    let usage = volley::server::metrics::process_usage();
    let peak_players = peak.load(std::sync::atomic::Ordering::Relaxed);
    let left = server.shutdown().await;
    if let Some(l) = agones {
        // After the drain: every client has been told.
        match l.shutdown().await {
            Ok(()) => println!("agones: Shutdown sent"),
            Err(e) => eprintln!("agones: {e}"),
        }
    }
    println!(
        "server: {} ticks, tick p99 {:.3} ms, start lateness p99 {:.3} ms, {} overruns, input delay p99 {:.3} ms, input to effect (without the tick wait) p50 {:.3} ms p99 {:.3} ms, {} full snapshots of {}, {} still connected at exit",
        m.totals().ticks,
        m.tick_quantile(0.99).as_secs_f64() * 1e3,
        m.tick_lateness_quantile(0.99).as_secs_f64() * 1e3,
        m.totals().tick_overruns,
        m.input_delay_quantile(0.99).as_secs_f64() * 1e3,
        m.input_effect_quantile(0.5).as_secs_f64() * 1e3,
        m.input_effect_quantile(0.99).as_secs_f64() * 1e3,
        m.totals().full_snapshots,
        m.totals().snapshots,
        left
    );
    let applied = m.totals().inputs_applied.max(1);
    let player_ticks = m.totals().player_ticks.max(1);
    println!(
        "inputs applied at the next tick: {:.2} % of {} (within one tick period: {:.2} %)",
        m.totals().inputs_next_tick as f64 * 100.0 / applied as f64,
        applied,
        m.totals().inputs_on_time as f64 * 100.0 / applied as f64,
    );
    if let Some((cpu, rss)) = usage {
        println!(
            "process: CPU {:.2} s over {} player-ticks = {:.2} us per player-tick{}; RSS {:.1} MiB = {:.1} KiB per player at the peak of {}",
            cpu.as_secs_f64(),
            player_ticks,
            cpu.as_secs_f64() * 1e6 / player_ticks as f64,
            if bots > 0 { " (bots included: they run in this process)" } else { "" },
            rss as f64 / 1048576.0,
            rss as f64 / 1024.0 / peak_players.max(1) as f64,
            peak_players
        );
    }
    Ok(())
}

async fn bots(args: BotsArgs) -> Result<(), String> {
    let key = match (&args.private_key, &args.backend) {
        (Some(k), _) => hex::decode_array::<32>(k).map_err(|e| format!("--private-key: {e}"))?,
        (None, Some(_)) => [0; 32],
        (None, None) => return Err("give --private-key (the swarm mints tokens) or --backend".into()),
    };
    let backend = match &args.backend {
        Some(url) => Some(fleet::BackendTokens::new(
            url,
            args.backend_secret.clone(),
            args.backend_api_key.clone(),
            args.first_client_id,
        )?),
        None => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let progress = Arc::new(SwarmProgress::default());
    let link = args.link.bot_link()?;
    let mut args = args;
    if args.soak {
        if args.churn_percent == 0.0 {
            args.churn_percent = 10.0;
        }
        args.figures_every.get_or_insert(60.0);
    }
    if !(0.0..=100.0).contains(&args.churn_percent) {
        return Err(format!("--churn-percent {}: give 0 to 100", args.churn_percent));
    }
    seconds("--churn-every", args.churn_every, 1.0, 86_400.0)?;
    if let Some(d) = args.duration {
        seconds("--duration", d, 0.0, MAX_RUN_SECONDS)?;
    }
    if let Some(e) = args.figures_every {
        seconds("--figures-every", e, 1.0, 86_400.0)?;
    }
    within("--bots", args.bots, 0, MAX_BOTS)?;
    let churn = (args.churn_percent > 0.0)
        .then(|| Churn { every: Duration::from_secs_f64(args.churn_every), fraction: args.churn_percent / 100.0 });
    let webtransport = match args.transport {
        Transport::Udp => None,
        Transport::Webtransport => {
            if link.profile.is_some() || link.line.is_some() || link.rebind_every.is_some() {
                return Err("--transport webtransport: the link options (conditioner, line, rebind) are UDP's".into());
            }
            let web = resolve("--web", &args.web).await?;
            let found = volley_web::client::discover(web).await.map_err(|e| format!("--web: {e}"))?;
            println!("bots over WebTransport to {} (certificates {})", found.addr, found.certificate_hashes.len());
            Some(volley_arena::bots::WebTarget { addr: found.addr, certificate_hashes: found.certificate_hashes })
        }
    };
    let cfg = SwarmConfig {
        protocol_id: args.protocol_id,
        first_client_id: args.first_client_id,
        link: link.profile,
        line: link.line,
        rebind_every: link.rebind_every,
        webtransport,
        churn,
        spectators: args.spectators,
        tokens: backend.clone().map(|b| Arc::new(fleet::SharedTokens(b)) as Arc<dyn volley_arena::bots::TokenSource>),
        ..SwarmConfig::new(resolve("--server", &args.server).await?, args.bots, key)
    };
    let admin = match &args.admin {
        Some(a) => Some(resolve("--admin", a).await?),
        None => None,
    };
    let wanted = args.bots as u64;
    let mut swarm = tokio::spawn(run_swarm(cfg, progress.clone(), stop_rx));
    // The server's figures are taken from the moment every bot is connected (and a second
    // more, for the joins to settle) to the end.
    let token = args.admin_token.clone();
    let first_scrape = admin.map(|addr| {
        let progress = progress.clone();
        let token = token.clone();
        tokio::spawn(async move {
            while progress.connected.load(std::sync::atomic::Ordering::Relaxed) < wanted {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            scrape(addr, token.as_deref()).await
        })
    });
    let ticker = tokio::spawn({
        let progress = progress.clone();
        async move {
            let mut t = tokio::time::interval(Duration::from_secs(1));
            loop {
                t.tick().await;
                println!(
                    "bots connected {} | snapshots {} | inputs {} | disconnected by server {}",
                    progress.connected.load(std::sync::atomic::Ordering::Relaxed),
                    progress.snapshots.load(std::sync::atomic::Ordering::Relaxed),
                    progress.inputs.load(std::sync::atomic::Ordering::Relaxed),
                    progress.disconnected_by_server.load(std::sync::atomic::Ordering::Relaxed)
                );
            }
        }
    });
    // A soak's periodic reports: the server's memory and tables, from its /metrics.
    let rows: Arc<std::sync::Mutex<Vec<SoakRow>>> = Arc::default();
    let figures = match (args.figures_every, admin) {
        (Some(every), Some(addr)) if every.is_finite() && every >= 1.0 => {
            let (progress, token, rows) = (progress.clone(), token.clone(), rows.clone());
            Some(tokio::spawn(async move {
                // Half a period in, then every period: between two churns, not on them.
                let every = Duration::from_secs_f64(every);
                let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every / 2, every);
                for n in 1.. {
                    t.tick().await;
                    match scrape(addr, token.as_deref()).await {
                        Ok(s) => {
                            let row = SoakRow::read(&s, &progress);
                            println!("report {n}: {}", row.line());
                            if let Ok(mut rows) = rows.lock() {
                                rows.push(row);
                            }
                        }
                        Err(e) => println!("report {n}: scraping --admin failed: {e}"),
                    }
                }
            }))
        }
        (Some(_), None) => return Err("--figures-every (and --soak) needs --admin".into()),
        (Some(every), _) => return Err(format!("--figures-every {every}: give at least 1 second")),
        _ => None,
    };
    // Until told to stop, or until every bot has ended (the server shut down).
    let mut last_scrape = None;
    let report = tokio::select! {
        _ = until_stopped(args.duration) => {
            if let Some(addr) = admin {
                last_scrape = Some(scrape(addr, token.as_deref()).await);
            }
            let _ = stop_tx.send(true);
            (&mut swarm).await
        }
        r = &mut swarm => r,
    }
    .map_err(|e| e.to_string())?;
    ticker.abort();
    let first_scrape = match first_scrape {
        Some(task) if task.is_finished() => task.await.ok(),
        Some(task) => {
            task.abort();
            None
        }
        None => None,
    };
    println!(
        "bots: {} were disconnected by the server (it said goodbye)",
        progress.disconnected_by_server.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!("{}", report.summary());
    if let Some(b) = &backend {
        println!(
            "backend: {} bots got a token, {} refusals asked again, {} bots got none",
            report.bots.iter().filter(|r| r.connected).count(),
            b.refusals.load(std::sync::atomic::Ordering::Relaxed),
            b.failed.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    match (first_scrape, last_scrape) {
        (Some(Ok(first)), Some(Ok(last))) => println!("{}", ServerFigures::between(&first, &last).line()),
        (Some(Err(e)), _) | (_, Some(Err(e))) => println!("server figures: scraping --admin failed: {e}"),
        (None, Some(_)) => println!("server figures: not every bot connected; no server figures"),
        _ => {}
    }
    if let Some(task) = figures {
        task.abort();
    }
    let feed = report.kill_feed();
    if churn.is_some() || args.soak {
        println!(
            "churn: {} bots left and {} joined",
            progress.churned_out.load(std::sync::atomic::Ordering::Relaxed),
            progress.churned_in.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    println!("{}", feed.line());
    if args.soak {
        let rows = rows.lock().map(|r| r.clone()).unwrap_or_default();
        match soak_verdict(&rows, &feed) {
            Ok(line) => println!("soak: PASS: {line}"),
            Err(line) => {
                println!("soak: FAIL: {line}");
                return Err("the soak run failed".into());
            }
        }
    }
    Ok(())
}

/// One periodic report of a soak run: the server's memory and table occupancy, and the swarm.
#[derive(Debug, Clone, Default)]
struct SoakRow {
    rss_bytes: f64,
    players: f64,
    /// `volley_table_entries` by table, in `TABLES` order.
    tables: Vec<f64>,
    bots: u64,
}

impl SoakRow {
    fn read(s: &Scrape, progress: &SwarmProgress) -> Self {
        Self {
            rss_bytes: s.value("process_resident_memory_bytes", "").unwrap_or(0.0),
            players: s.value("volley_players", "").unwrap_or(0.0),
            tables: TABLES
                .iter()
                .map(|t| s.value("volley_table_entries", &format!("table=\"{t}\"")).unwrap_or(f64::NAN))
                .collect(),
            bots: progress.connected.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn line(&self) -> String {
        let tables: Vec<String> = TABLES.iter().zip(&self.tables).map(|(t, n)| format!("{t} {n}")).collect();
        format!(
            "server RSS {:.1} MiB | players {} (bots connected {}) | tables: {}",
            self.rss_bytes / (1024.0 * 1024.0),
            self.players,
            self.bots,
            tables.join(", ")
        )
    }
}

/// A soak run passes when the server's memory at the last report is within 5 % of the
/// second's, its tables hold what its players need (connected clients, addresses, actors and
/// rows equal to the players; pending handshakes no more than a churn's worth), and every bot
/// that stayed heard the kill feed exactly once and in order.
fn soak_verdict(rows: &[SoakRow], feed: &volley_arena::bots::FeedCheck) -> Result<String, String> {
    let (Some(second), Some(last)) = (rows.get(1), rows.last()) else {
        return Err(format!("{} reports; a soak needs at least two (run longer than two periods)", rows.len()));
    };
    let growth = (last.rss_bytes - second.rss_bytes) / second.rss_bytes.max(1.0);
    let mut faults = Vec::new();
    if growth.abs() > 0.05 {
        faults.push(format!("RSS {:+.1} % from report 2 to {}", growth * 100.0, rows.len()));
    }
    for row in [second, last] {
        // connected_clients, connected_addresses, player_actors, player_rows: one per player.
        for (t, n) in TABLES.iter().zip(&row.tables).skip(2) {
            if (*n - row.players).abs() > 0.5 {
                faults.push(format!("{t} holds {n} entries for {} players", row.players));
            }
        }
    }
    if !feed.faulty.is_empty() || feed.silent > 0 {
        faults.push(feed.line());
    }
    let summary = format!(
        "RSS {:.1} MiB at report 2, {:.1} MiB at report {} ({:+.2} %); tables one entry per player; \
         {} bots that stayed heard every kill once and in order",
        second.rss_bytes / (1024.0 * 1024.0),
        last.rss_bytes / (1024.0 * 1024.0),
        rows.len(),
        growth * 100.0,
        feed.stayed
    );
    if faults.is_empty() { Ok(summary) } else { Err(faults.join("; ")) }
}

/// The server's /metrics.
async fn scrape(addr: SocketAddr, token: Option<&str>) -> Result<Scrape, String> {
    match volley_fleet::admin_client::get_with(addr, "/metrics", token, Duration::from_secs(5)).await {
        Ok((200, body)) => Ok(Scrape::parse(&body)),
        Ok((status, _)) => Err(format!("{addr}/metrics answered {status}")),
        Err(e) => Err(format!("{addr}/metrics: {e}")),
    }
}

async fn health(args: HealthArgs) -> Result<bool, String> {
    seconds("--timeout", args.timeout, 0.001, 3600.0)?;
    let (status, body) = volley_fleet::admin_client::get(args.admin, &args.path, Duration::from_secs_f64(args.timeout))
        .await
        .map_err(|e| format!("{}{}: {e}", args.admin, args.path))?;
    print!("{body}");
    Ok(status == 200)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))
}

fn mint(args: &TokenArgs) -> Result<(), String> {
    let key = hex::decode_array::<32>(&args.private_key).map_err(|e| format!("--private-key: {e}"))?;
    let data = hex::decode(&args.user_data).map_err(|e| format!("--user-data: {e}"))?;
    if data.len() > USER_DATA_BYTES {
        return Err(format!("--user-data: {} bytes, at most {USER_DATA_BYTES}", data.len()));
    }
    let mut user_data = [0u8; USER_DATA_BYTES];
    user_data[..data.len()].copy_from_slice(&data);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| format!("system clock: {e}"))?;
    let params = TokenParams {
        protocol_id: args.protocol_id,
        client_id: args.client_id,
        now_unix_secs: now.as_secs(),
        expire_seconds: args.expire_seconds,
        timeout_seconds: args.timeout_seconds,
        server_addresses: args.servers.clone(),
        user_data,
    };
    let token = ConnectToken::generate(&params, &key).map_err(|e| e.to_string())?;
    let bytes = token.to_bytes();
    match &args.out {
        Some(path) => std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display())),
        None => writeln!(std::io::stdout(), "{}", hex::encode(&bytes)).map_err(|e| e.to_string()),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let sub = matches.subcommand().map(|(_, m)| m.clone());
    let result = match cli.command {
        Command::Keygen => {
            netcode::generate_key().map_err(|e| format!("no randomness: {e}")).map(|k| println!("{}", hex::encode(&k)))
        }
        Command::Token(args) => mint(&args),
        Command::Schema => {
            let schema = volley::server::World::schema(&Arena::new());
            writeln!(std::io::stdout(), "{}", schema.to_json()).map_err(|e| e.to_string())
        }
        Command::Run(mut a) if a.server.zones > 1 && a.server.zone.is_none() => sub
            .as_ref()
            .map_or(Ok(()), |m| apply_config_file(&mut a.server, m))
            .and_then(|()| runtime())
            .and_then(|rt| rt.block_on(zones::run(a.server, a.bots, a.oracle))),
        Command::Run(mut a) => sub
            .as_ref()
            .map_or(Ok(()), |m| apply_config_file(&mut a.server, m))
            .and_then(|()| a.link.bot_link())
            .and_then(|link| runtime().map(|rt| (rt, link)))
            .and_then(|(rt, link)| {
                within("--bots", a.bots, 0, MAX_BOTS)?;
                // Spectators watch matches: by default two, when there are matches to watch.
                let spectators = a.spectators.unwrap_or(if rooms(&a.server).is_some() { 2 } else { 0 }).min(a.bots);
                rt.block_on(serve(a.server, (a.bots, spectators), link))
            }),
        Command::Server(mut a) => sub
            .as_ref()
            .map_or(Ok(()), |m| apply_config_file(&mut a, m))
            .and_then(|()| runtime())
            .and_then(|rt| rt.block_on(serve(a, (0, 0), BotLink::default()))),
        Command::Bots(a) => runtime().and_then(|rt| rt.block_on(bots(a))),
        Command::Backend(a) => runtime().and_then(|rt| rt.block_on(fleet::run_backend(a))),
        Command::BackendBench(a) => runtime().and_then(|rt| rt.block_on(fleet::run_bench(a))),
        Command::Replay(a) if a.info => replay_info(&a),
        Command::Replay(mut a) => sub
            .as_ref()
            .map_or(Ok(()), |m| apply_config_file(&mut a.server, m))
            .and_then(|()| open_replay(&a))
            .and_then(|w| runtime().map(|rt| (rt, w)))
            .and_then(|(rt, w)| {
                // It ticks at the recording's rate; one world, however the game was served.
                let hz = w.recording_tick_rate().unwrap_or(a.server.tick_rate);
                a.server.tick_rate = hz;
                a.server.snapshot_rate = hz;
                a.server.match_size = 0;
                a.server.record = None;
                rt.block_on(serve_world(a.server, (a.bots, 0), BotLink::default(), Some(w)))
            }),
        Command::Health(a) => match runtime().and_then(|rt| rt.block_on(health(a))) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => {
                eprintln!("unhealthy: {e}");
                return ExitCode::from(1);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SoakRow, soak_verdict};
    use volley_arena::bots::FeedCheck;

    fn row(rss_mib: f64, players: f64, actors: f64) -> SoakRow {
        SoakRow {
            rss_bytes: rss_mib * 1024.0 * 1024.0,
            players,
            tables: vec![0.0, 0.0, players, players, actors, players],
            bots: players as u64,
        }
    }

    #[test]
    fn a_soak_passes_only_with_flat_memory_tidy_tables_and_an_exact_feed() {
        let clean = FeedCheck { stayed: 10, ..FeedCheck::default() };
        let flat = [row(40.0, 10.0, 10.0), row(42.0, 10.0, 10.0), row(43.5, 10.0, 10.0)];
        assert!(soak_verdict(&flat, &clean).is_ok());
        let growing = [row(40.0, 10.0, 10.0), row(42.0, 10.0, 10.0), row(44.5, 10.0, 10.0)];
        let err = soak_verdict(&growing, &clean).unwrap_err();
        assert!(err.contains("RSS +6.0 %"), "{err}");
        let leaking = [row(40.0, 10.0, 10.0), row(42.0, 10.0, 10.0), row(42.0, 10.0, 13.0)];
        let err = soak_verdict(&leaking, &clean).unwrap_err();
        assert!(err.contains("player_actors holds 13 entries for 10 players"), "{err}");
        let lossy = FeedCheck { stayed: 10, faulty: vec![3], ..FeedCheck::default() };
        assert!(soak_verdict(&flat, &lossy).is_err());
        assert!(soak_verdict(&flat[..1], &clean).is_err(), "one report is not a soak");
    }

    /// Every key of the config file.
    const KEYS: [&str; 36] = [
        "bind",
        "public_addr",
        "private_key",
        "protocol_id",
        "max_players",
        "tick_rate",
        "snapshot_rate",
        "min_snapshot_rate",
        "duration",
        "shutdown_grace",
        "resume_grace",
        "admin",
        "admin_token",
        "admin_token_file",
        "admin_show_addresses",
        "admin_link_control",
        "stall_after",
        "send_batch",
        "socket_buffer",
        "max_send_rate",
        "min_send_rate",
        "predict_snapshots",
        "match_size",
        "match_min",
        "match_wait",
        "match_seconds",
        "beacons",
        "record",
        "spectator_delay",
        "zone",
        "zones",
        "nats",
        "web",
        "web_cert",
        "web_key",
        "web_tokens",
    ];

    /// The server's settings as `volley server` starts with them, then `text` as its config
    /// file, then checked and turned into the server's config and rooms, as the program
    /// does: an error or a config, never a panic.
    fn settle(text: &str) -> Result<(), String> {
        use clap::Parser;
        let super::Command::Server(mut a) =
            super::Cli::try_parse_from(["volley", "server"]).expect("the defaults parse").command
        else {
            unreachable!("asked for the server")
        };
        super::apply_config_text(&mut a, text, |_| true)?;
        super::server_config(&a, [1; 32])?;
        let _ = super::rooms(&a);
        Ok(())
    }

    #[test]
    fn the_reported_values_are_clear_errors_naming_the_setting() {
        for (text, names) in [
            ("duration = 1e300", "--duration"),
            ("duration = -1.0", "--duration"),
            ("duration = nan", "--duration"),
            ("shutdown_grace = 1e300", "--shutdown-grace"),
            ("stall_after = inf", "--stall-after"),
            ("match_seconds = 1e300", "--match-seconds"),
            ("max_players = 100000000", "--max-players"),
            ("beacons = 4294967295", "--beacons"),
            ("zones = 65535", "--zones"),
            ("match_size = 70000", "--match-size"),
            ("admin_token_file = \"/dev/zero\"", "not a regular file"),
        ] {
            let err = settle(text).expect_err(text);
            assert!(err.contains(names), "{text}: {err}");
        }
        // u64::MAX does not fit TOML's integers: the file does not parse, with its line.
        assert!(settle("max_players = 18446744073709551615").is_err());
        settle("").expect("the defaults are valid");
        // The Docker stack's servers: 10 seats, matches of the default 20 (they start short).
        settle("max_players = 10").expect("a match may be larger than the server");
    }

    fn value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| if v.is_nan() {
                "nan".to_string()
            } else if v.is_infinite() {
                if v > 0.0 { "inf".into() } else { "-inf".into() }
            } else {
                format!("{v:e}")
            }),
            (0u32..70_000).prop_map(|v| v.to_string()),
            prop::sample::select(vec![
                "0",
                "1",
                "-1",
                "65535",
                "65536",
                "4294967295",
                "1e300",
                "-0.0",
                "nan",
                "inf",
                "true",
                "[]",
                "{}",
                "\"\"",
                "\"/dev/zero\"",
                "\"off\"",
                "\"0.0.0.0:0\"",
                "\"[::1]:99999\"",
                "\"zz\"",
            ])
            .prop_map(String::from),
            "[ -~]{0,24}".prop_map(|s| format!("{s:?}")),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Any value of any key, one to three of them: a config or a clear error, no panic.
        #[test]
        fn no_value_of_any_key_panics(entries in proptest::collection::vec((0..KEYS.len(), value()), 1..4)) {
            let text: String = entries.iter().map(|(k, v)| format!("{} = {v}\n", KEYS[*k])).collect();
            let _ = settle(&text);
        }
    }
}
