//! The headless bot swarm: N clients of the arena, driven by a simple AI through the normal
//! input path, over real UDP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use glam::Vec2;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{self as arena, ArenaEvent, ArenaInput, Avatar, RAIL_RANGE};
use volley::client::polled::PolledClient;
use volley::client::{GameClient, ViewMode};
use volley::protocol::netcode::Key;
use volley::protocol::netcode::client::ClientState;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::{Schema, WorldSnapshot};
use volley::server::unix_now;
use volley::transport::conditioner::{Bottleneck, LinkProfile};
use volley_web::client::WebTransportClient;

/// Swarm settings.
#[derive(Debug, Clone)]
pub struct SwarmConfig {
    /// The server.
    pub server: SocketAddr,
    /// Local address to bind each bot's socket on.
    pub bind: SocketAddr,
    /// How many bots.
    pub bots: usize,
    /// The server's private key (the swarm mints its own tokens, as a backend would).
    pub private_key: Key,
    /// The game's protocol id.
    pub protocol_id: u64,
    /// Client id of the first bot; the others follow.
    pub first_client_id: u64,
    /// Input rate, Hz.
    pub input_rate_hz: u32,
    /// Bots connect this far apart.
    pub connect_spacing: Duration,
    /// A conditioned link for every bot (each with its own random sequence), both ways.
    pub link: Option<LinkProfile>,
    /// A narrow line on what every bot receives (a home line with its router's queue).
    pub line: Option<Bottleneck>,
    /// After this long, bots stop moving and shooting (to let the world settle in tests).
    pub idle_after: Option<Duration>,
    /// Bots leaving and new ones joining while the swarm runs (a soak run), if any.
    pub churn: Option<Churn>,
    /// Of the bots, this many (the last) are spectators: their tokens' user data says
    /// "spectator" (the rooms send them to watch a match), and they send no inputs.
    pub spectators: usize,
    /// Where the bots' tokens come from instead of minting them with `private_key` (a
    /// connect-token backend), if anywhere.
    pub tokens: Option<Arc<dyn TokenSource>>,
    /// Shown every snapshot every playing bot decodes, if anything is (a test's oracle).
    pub watch: Option<Arc<dyn SnapshotWatch>>,
    /// Every this long, each bot's socket moves to a new local port (as a NAT rebinding
    /// moves a player, untold: the bot hears a second of silence and resumes its session
    /// with its ticket); the bots' moves are spread over the period.
    pub rebind_every: Option<Duration>,
    /// Connect over WebTransport, as a browser does, to this endpoint of the server's
    /// `volley_web` front instead of over UDP (the tokens still name the server's netcode
    /// address: the web front relays to it). `None`: UDP.
    pub webtransport: Option<WebTarget>,
}

/// A WebTransport endpoint to connect the bots to ([`SwarmConfig::webtransport`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebTarget {
    /// The endpoint's UDP address (`/web.json`'s `webtransport_port` on the web host).
    pub addr: SocketAddr,
    /// The hex SHA-256 hashes of the certificates to trust (`/web.json`'s
    /// `certificate_hashes`); empty: the system's roots.
    pub certificate_hashes: Vec<String>,
}

/// Sees every snapshot the swarm's playing bots decode, as they decode them: an oracle that
/// checks what each bot is shown, say. Called on the bots' driver tasks, so it should be
/// quick (hand the work to a thread of its own).
pub trait SnapshotWatch: Send + Sync + std::fmt::Debug {
    /// Bot `bot` (its index in the swarm), connected to `server` as player `me`, decoded
    /// `snapshot` (merged ids, as the server sent them).
    fn snapshot(&self, bot: usize, server: SocketAddr, me: u32, snapshot: &WorldSnapshot);
}

/// Where bots get their connect tokens when the swarm does not mint its own: a backend
/// asked over HTTP, say. Asked once a frame for a bot that is due to connect, until it
/// answers.
pub trait TokenSource: Send + Sync + std::fmt::Debug {
    /// The token for bot `index` (its client id is the source's to choose).
    fn token(&self, index: usize) -> TokenPoll;
}

/// A [`TokenSource`]'s answer.
#[derive(Debug)]
pub enum TokenPoll {
    /// Here it is.
    Ready(Box<ConnectToken>),
    /// Not yet: ask again next frame.
    Pending,
    /// None will come (the bot reports as never connected).
    Failed,
}

/// Churn: every `every`, `fraction` of the live bots say goodbye and as many new bots (new
/// client ids) connect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Churn {
    /// How often bots leave and join.
    pub every: Duration,
    /// The share of live bots that leave each time (0 to 1).
    pub fraction: f64,
}

impl SwarmConfig {
    /// Defaults for `bots` bots against `server` (sockets on loopback for a loopback server,
    /// else on any local address of the server's family).
    pub fn new(server: SocketAddr, bots: usize, private_key: Key) -> Self {
        let bind = match server.ip() {
            ip if ip.is_loopback() => SocketAddr::new(ip, 0),
            std::net::IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
            std::net::IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
        };
        Self {
            server,
            bind,
            bots,
            private_key,
            protocol_id: volley::DEFAULT_PROTOCOL_ID,
            first_client_id: 1,
            input_rate_hz: 60,
            connect_spacing: Duration::from_millis(2),
            link: None,
            line: None,
            idle_after: None,
            churn: None,
            spectators: 0,
            tokens: None,
            watch: None,
            rebind_every: None,
            webtransport: None,
        }
    }
}

/// Live counters of a running swarm.
#[derive(Debug, Default)]
pub struct SwarmProgress {
    /// Bots connected and in session now.
    pub connected: AtomicU64,
    /// Snapshots received, all bots.
    pub snapshots: AtomicU64,
    /// Snapshot bytes received, all bots.
    pub snapshot_bytes: AtomicU64,
    /// Inputs sent, all bots.
    pub inputs: AtomicU64,
    /// Bots the server disconnected (it said goodbye: a shutdown or a kick).
    pub disconnected_by_server: AtomicU64,
    /// Bots that left by churn (said goodbye).
    pub churned_out: AtomicU64,
    /// Bots that joined by churn.
    pub churned_in: AtomicU64,
}

/// One bot's outcome.
#[derive(Debug, Clone, Default)]
pub struct BotReport {
    /// Final connection state.
    pub state: Option<ClientState>,
    /// Whether it ever completed the session handshake.
    pub connected: bool,
    /// Snapshots decoded.
    pub snapshots: u64,
    /// Snapshot decode failures.
    pub snapshot_errors: u64,
    /// Most other avatars seen in one snapshot.
    pub max_others_seen: usize,
    /// Final smoothed RTT.
    pub rtt: Duration,
    /// Final loss estimate.
    pub loss: f64,
    /// Bytes received.
    pub bytes_received: u64,
    /// The kill-feed messages received, in arrival order. Each world numbers its own kills
    /// from 0, so each is told with the world the bot was in when it came.
    pub kill_feed: Vec<Heard>,
    /// It was a spectator (watched, sent no inputs).
    pub spectator: bool,
    /// The newest snapshot at the end.
    pub latest: Option<WorldSnapshot>,
    /// It left before the end (churn).
    pub left_early: bool,
    /// Times it was handed to another zone's server and followed (see
    /// [`GameClient::moves`](volley::client::GameClient::moves)).
    pub moves: u32,
    /// For each move, the time from the last snapshot of the old zone to the first of the
    /// new (the handoff as the player sees it: the redirect comes a tick after the crossing).
    pub move_gaps: Vec<Duration>,
    /// Snapshots a second from its first to its last (0 with fewer than two): what the
    /// server gave this bot, to tell an even rate from an uneven one.
    pub snapshot_rate: f64,
    /// Times its socket moved to a new port ([`SwarmConfig::rebind_every`]), and sessions it
    /// resumed with its ticket ([`GameClient::resumes`](volley::client::GameClient::resumes)).
    pub rebinds: u32,
    /// See `rebinds`.
    pub resumes: u32,
    /// Its player id changed across a resume (it came back as another player): never, when
    /// resumption works.
    pub lost_player: bool,
}

/// One kill-feed message a bot received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heard {
    /// Which of the bot's stays in a world it came in: 0 from the connection, one more at
    /// each move to another world or server (a world's number can be used again later; a
    /// stay cannot).
    pub stay: u32,
    /// The world's number on the server then (0 before the first notice).
    pub world: u16,
    /// The kill's running number in that world.
    pub seq: u32,
}

/// The whole swarm's outcome.
#[derive(Debug, Clone, Default)]
pub struct SwarmReport {
    /// Each bot.
    pub bots: Vec<BotReport>,
    /// How long it ran.
    pub elapsed: Duration,
}

/// What the kill feed (reliable messages to everyone) showed, over the bots that stayed to
/// the end ([`SwarmReport::kill_feed`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedCheck {
    /// Bots that connected and stayed to the end.
    pub stayed: usize,
    /// Of them, bots whose feed skipped, repeated or reordered a kill: each index.
    pub faulty: Vec<usize>,
    /// Of them, bots that heard no kill at all.
    pub silent: usize,
    /// The newest kill anyone heard (its running number in its world).
    pub last: Option<u32>,
    /// Of them, bots whose newest kill is older than the newest of the world they heard it
    /// in (still in flight at the end: not a loss, the run stopped).
    pub behind: usize,
}

impl FeedCheck {
    /// One line for a person.
    pub fn line(&self) -> String {
        format!(
            "reliable kill feed over the {} bots that stayed: {} with a kill skipped, repeated or out of order{}; \
             {} heard none; newest kill #{}, {} bots had not heard their world's newest yet at the stop",
            self.stayed,
            self.faulty.len(),
            if self.faulty.is_empty() { String::new() } else { format!(" (bots {:?})", self.faulty) },
            self.silent,
            self.last.map_or("-".to_string(), |l| l.to_string()),
            self.behind,
        )
    }
}

impl SwarmReport {
    /// Whether every bot that stayed heard every kill from its first on exactly once and in
    /// order, within each stay in a world (each world numbers its own kills: a kill's
    /// running number follows the one before it in the same world). The newest kill is
    /// judged per world, among the bots that ended in the world they heard their last kill in.
    pub fn kill_feed(&self) -> FeedCheck {
        let stayed: Vec<(usize, &BotReport)> =
            self.bots.iter().enumerate().filter(|(_, b)| b.connected && !b.left_early).collect();
        let in_order =
            |feed: &[Heard]| feed.windows(2).all(|w| w[1].stay != w[0].stay || w[1].seq == w[0].seq.wrapping_add(1));
        // The newest kill of each world, over the bots that heard their last there.
        let mut newest: std::collections::BTreeMap<u16, u32> = std::collections::BTreeMap::new();
        for (_, b) in &stayed {
            if let Some(h) = b.kill_feed.last() {
                let n = newest.entry(h.world).or_insert(h.seq);
                *n = (*n).max(h.seq);
            }
        }
        FeedCheck {
            stayed: stayed.len(),
            faulty: stayed.iter().filter(|(_, b)| !in_order(&b.kill_feed)).map(|(i, _)| *i).collect(),
            silent: stayed.iter().filter(|(_, b)| b.kill_feed.is_empty()).count(),
            last: newest.values().copied().max(),
            behind: stayed
                .iter()
                .filter(|(_, b)| b.kill_feed.last().is_some_and(|h| newest.get(&h.world).is_some_and(|n| h.seq < *n)))
                .count(),
        }
    }

    /// Bots that connected.
    pub fn connected(&self) -> usize {
        self.bots.iter().filter(|b| b.connected).count()
    }

    /// A few lines for a person.
    pub fn summary(&self) -> String {
        let n = self.bots.len().max(1);
        let snaps: u64 = self.bots.iter().map(|b| b.snapshots).sum();
        let bytes: u64 = self.bots.iter().map(|b| b.bytes_received).sum();
        let mut rtts: Vec<Duration> = self.bots.iter().filter(|b| b.connected).map(|b| b.rtt).collect();
        rtts.sort();
        let q = |q: f64| rtts.get(((rtts.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
        let saw_others = self.bots.iter().filter(|b| b.max_others_seen > 0).count();
        let spectators = self.bots.iter().filter(|b| b.spectator).count();
        let watchers = if spectators == 0 {
            String::new()
        } else {
            format!(
                " ({} of them spectators, {} of which saw a match)",
                spectators,
                self.bots.iter().filter(|b| b.spectator && b.max_others_seen > 0).count()
            )
        };
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        // Each player's own rate (bots that stayed): the lowest ones tell an uneven server.
        let mut rates: Vec<f64> = self
            .bots
            .iter()
            .filter(|b| b.connected && !b.left_early && !b.spectator)
            .map(|b| b.snapshot_rate)
            .collect();
        rates.sort_by(f64::total_cmp);
        let rate_q = |q: f64| rates.get(((rates.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
        let moves: u64 = self.bots.iter().map(|b| u64::from(b.moves)).sum();
        let mut gaps: Vec<Duration> = self.bots.iter().flat_map(|b| b.move_gaps.iter().copied()).collect();
        gaps.sort();
        let g = |q: f64| gaps.get(((gaps.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
        let moved = if moves == 0 {
            String::new()
        } else {
            format!(
                "\nzones: {moves} handoffs followed, by {} bots; from the old zone's last snapshot to the new zone's first: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                self.bots.iter().filter(|b| b.moves > 0).count(),
                g(0.5).as_secs_f64() * 1e3,
                g(0.99).as_secs_f64() * 1e3,
                gaps.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
            )
        };
        let rebinds: u64 = self.bots.iter().map(|b| u64::from(b.rebinds)).sum();
        let resumed = if rebinds == 0 {
            String::new()
        } else {
            let resumes: u64 = self.bots.iter().map(|b| u64::from(b.resumes)).sum();
            let kept = self.bots.iter().filter(|b| b.connected && !b.lost_player).count();
            format!(
                "\nresumptions: {resumes} after {rebinds} socket moves; {kept} of {} bots kept their player (the same id, so the same world, team and score) throughout",
                self.connected()
            )
        };
        format!(
            "bots: {} connected of {}; {} saw other players{watchers}\n\
             snapshots: {} ({:.1}/s per bot; each bot's own rate: lowest {:.1}/s, p1 {:.1}/s, p50 {:.1}/s), {} decode errors\n\
             download: {:.1} kbit/s per bot\n\
             RTT p50 {:.2} ms, p99 {:.2} ms; loss {:.2} %{moved}{resumed}",
            self.connected(),
            self.bots.len(),
            saw_others,
            snaps,
            snaps as f64 / secs / n as f64,
            rate_q(0.0),
            rate_q(0.01),
            rate_q(0.5),
            self.bots.iter().map(|b| b.snapshot_errors).sum::<u64>(),
            bytes as f64 * 8.0 / 1000.0 / secs / n as f64,
            q(0.5).as_secs_f64() * 1e3,
            q(0.99).as_secs_f64() * 1e3,
            self.bots.iter().map(|b| b.loss).sum::<f64>() / n as f64 * 100.0,
        )
    }
}

/// The bot's brain: chase the nearest living avatar, keep some distance, shoot when close.
pub fn think(me: u32, world: &WorldSnapshot, schema: &Schema, tick: u64) -> (ArenaInput, usize) {
    let Some(mine) = world.read::<Avatar>(schema, me) else { return (ArenaInput::default(), 0) };
    let avatar_kind = schema.kind_of::<Avatar>();
    let mut nearest: Option<(f32, Vec2)> = None;
    let mut others = 0;
    for e in world.iter().filter(|e| Some(e.kind) == avatar_kind && e.id != me) {
        others += 1;
        let a = <Avatar as volley::protocol::snapshot::Replicate>::dequantize(e.words);
        let d = a.position.distance(mine.position);
        if a.alive && nearest.is_none_or(|(nd, _)| d < nd) {
            nearest = Some((d, a.position));
        }
    }
    let wander = Vec2::from_angle((tick as f32 * 0.01) + me as f32);
    let (move_dir, aim, fire, rail) = match nearest {
        Some((d, target)) => {
            let to = (target - mine.position).normalize_or_zero();
            let strafe =
                Vec2::new(-to.y, to.x) * if (tick / 120 + u64::from(me)).is_multiple_of(2) { 1.0 } else { -1.0 };
            let dir = if d > 12.0 { to } else { strafe };
            (dir, to.to_angle(), d < 25.0, d < RAIL_RANGE)
        }
        None => (wander, wander.to_angle(), false, false),
    };
    let input = ArenaInput {
        move_x: (move_dir.x * 127.0) as i8,
        move_y: (move_dir.y * 127.0) as i8,
        aim: ArenaInput::aim_from_radians(aim),
        fire,
        rail,
    };
    (input, others)
}

/// A bot's connection: UDP, or WebTransport as a browser's.
// Both hold a GameClient (about 5.5 KB); they differ by the UDP one's receive buffer.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Conn {
    Udp(PolledClient),
    Web(WebTransportClient),
}

impl Conn {
    fn game(&self) -> &GameClient {
        match self {
            Conn::Udp(c) => &c.client,
            Conn::Web(c) => &c.client,
        }
    }

    fn game_mut(&mut self) -> &mut GameClient {
        match self {
            Conn::Udp(c) => &mut c.client,
            Conn::Web(c) => &mut c.client,
        }
    }

    fn poll(&mut self, input: &[u8]) -> usize {
        match self {
            Conn::Udp(c) => c.poll(input),
            Conn::Web(c) => c.poll(input),
        }
    }

    fn poll_watching(&mut self) -> usize {
        match self {
            Conn::Udp(c) => c.poll_watching(),
            Conn::Web(c) => c.poll_watching(),
        }
    }

    /// A new local port (UDP only: a WebTransport session's QUIC migrates by itself).
    fn rebind(&mut self) -> bool {
        match self {
            Conn::Udp(c) => c.rebind().is_ok(),
            Conn::Web(_) => false,
        }
    }

    fn disconnect(&mut self) {
        match self {
            Conn::Udp(c) => c.disconnect(),
            Conn::Web(c) => c.disconnect(),
        }
    }
}

/// One bot between frames.
struct Bot {
    client: Conn,
    report: BotReport,
    started: Instant,
    tick: u64,
    input: Vec<u8>,
    was_ready: bool,
    /// It watches (no inputs).
    spectator: bool,
    /// When its newest snapshot came, and, while it moves to another zone, when the old
    /// zone's last one came.
    snapshot_at: Option<Instant>,
    /// When it got its first snapshot, and how many it got since.
    first_snapshot: Option<(Instant, u64)>,
    moving_since: Option<Instant>,
    /// Its index in the swarm.
    index: usize,
    /// The server and tick of the newest snapshot shown to the swarm's watch.
    watched: Option<(SocketAddr, u32)>,
    /// The world it is in (its number: 0 before the first notice), and its stays so far.
    world: u16,
    stay: u32,
    /// When its socket moves next ([`SwarmConfig::rebind_every`]), and its player id once
    /// connected.
    next_rebind: Option<Instant>,
    player: Option<u32>,
}

/// The user data that makes a bot (or any client) a spectator in the rooms.
pub const SPECTATOR: &[u8] = b"spectator";

impl Bot {
    /// Its token: from the swarm's [`TokenSource`], or minted with the private key.
    fn token(cfg: &SwarmConfig, index: usize) -> TokenPoll {
        if let Some(source) = &cfg.tokens {
            return source.token(index);
        }
        let params = TokenParams {
            protocol_id: cfg.protocol_id,
            client_id: cfg.first_client_id + index as u64,
            now_unix_secs: unix_now().as_secs(),
            expire_seconds: 60,
            timeout_seconds: 10,
            server_addresses: vec![cfg.server],
            user_data: [0; volley::protocol::netcode::USER_DATA_BYTES],
        };
        let spectator = index >= cfg.bots.saturating_sub(cfg.spectators);
        let mut params = params;
        if spectator {
            params.user_data[..SPECTATOR.len()].copy_from_slice(SPECTATOR);
        }
        match ConnectToken::generate(&params, &cfg.private_key) {
            Ok(t) => TokenPoll::Ready(Box::new(t)),
            Err(_) => TokenPoll::Failed,
        }
    }

    /// Binds its socket; `None` if it cannot (it reports as never connected).
    fn start(cfg: &SwarmConfig, index: usize, token: ConnectToken, schema: &Arc<Schema>) -> Option<Self> {
        let spectator = index >= cfg.bots.saturating_sub(cfg.spectators);
        // The bots aim at what the newest snapshot shows: their rail is judged there.
        let client = match &cfg.webtransport {
            Some(web) => {
                let mut c =
                    WebTransportClient::connect(web.addr, &web.certificate_hashes, &token, schema.clone(), unix_now);
                c.client.set_view_mode(ViewMode::Newest);
                Conn::Web(c)
            }
            None => {
                let mut client = GameClient::new(token, schema.clone(), unix_now());
                client.set_view_mode(ViewMode::Newest);
                let mut client = PolledClient::bind(client, cfg.bind, unix_now).ok()?;
                if let Some(link) = cfg.link {
                    client = client.with_conditioner(link, 0x9e37_79b9 ^ (index as u64).wrapping_mul(0x2545_f491));
                }
                if cfg.line.is_some() {
                    client.set_downlink(cfg.line);
                }
                Conn::Udp(client)
            }
        };
        Some(Self {
            client,
            report: BotReport { spectator, ..BotReport::default() },
            started: Instant::now(),
            tick: 0,
            input: ArenaInput::default().to_bytes(),
            was_ready: false,
            spectator,
            snapshot_at: None,
            first_snapshot: None,
            moving_since: None,
            index,
            watched: None,
            world: 0,
            stay: 0,
            // Spread over the period, so the server sees a steady trickle of resumptions.
            next_rebind: cfg.rebind_every.map(|every| {
                let offset = every.mul_f64((index % cfg.bots.max(1)) as f64 / cfg.bots.max(1) as f64);
                Instant::now() + every + offset
            }),
            player: None,
        })
    }

    /// One frame: take what arrived, think, send the input. `false` once the bot is over
    /// (the server said goodbye, or the connection failed).
    fn frame(&mut self, cfg: &SwarmConfig, progress: &SwarmProgress, schema: &Schema) -> bool {
        let bot = &mut self.client;
        let report = &mut self.report;
        let moves = bot.game().moves();
        let got = if self.spectator { bot.poll_watching() } else { bot.poll(&self.input) };
        self.tick += 1;
        if bot.game().moves() != moves {
            self.moving_since = self.snapshot_at;
        }
        if got > 0
            && !self.spectator
            && let Some(watch) = &cfg.watch
        {
            show(bot, self.index, &mut self.watched, watch.as_ref());
        }
        if got > 0 {
            let now = Instant::now();
            if let Some(since) = self.moving_since.take() {
                report.move_gaps.push(now.duration_since(since));
            }
            self.snapshot_at = Some(now);
            let first = self.first_snapshot.get_or_insert((now, 0));
            first.1 += got as u64;
        }
        let ready = bot.game().is_ready();
        if let (Some(at), Some(every)) = (self.next_rebind, cfg.rebind_every)
            && Instant::now() >= at
        {
            self.next_rebind = Some(at + every);
            if bot.rebind() {
                report.rebinds += 1;
            }
        }
        if ready && bot.game().moves() == 0 {
            let me = bot.game().client_index();
            match (self.player, me) {
                (None, Some(me)) => self.player = Some(me),
                (Some(was), Some(me)) if was != me => report.lost_player = true,
                _ => {}
            }
        }
        if ready != self.was_ready {
            if ready {
                progress.connected.fetch_add(1, Ordering::Relaxed);
                report.connected = true;
            } else {
                progress.connected.fetch_sub(1, Ordering::Relaxed);
            }
            self.was_ready = ready;
        }
        if ready && !self.spectator {
            progress.inputs.fetch_add(1, Ordering::Relaxed);
        }
        // Another world, or another server (a zone's handoff): another numbering.
        let world = bot.game().world().map_or(0, |n| n.world);
        if world != self.world || bot.game().moves() != moves {
            self.world = world;
            self.stay += 1;
        }
        while let Some(msg) = bot.game_mut().channel().recv_message::<ArenaEvent>() {
            if let Ok(ArenaEvent::Kill { seq, .. }) = msg {
                report.kill_feed.push(Heard { stay: self.stay, world, seq });
            }
        }
        let idle = cfg.idle_after.is_some_and(|d| self.started.elapsed() >= d);
        if idle {
            self.input = ArenaInput::default().to_bytes();
        }
        if got > 0 && self.spectator {
            progress.snapshots.fetch_add(got as u64, Ordering::Relaxed);
            progress.snapshot_bytes.fetch_add(bot.game().stats().last_snapshot_bytes as u64, Ordering::Relaxed);
            // Avatars only (the global world's beacons are seen from the lobby too).
            let avatar = schema.kind_of::<Avatar>();
            let seen = bot.game().latest().map_or(0, |w| w.iter().filter(|e| Some(e.kind) == avatar).count());
            report.max_others_seen = report.max_others_seen.max(seen);
        } else if got > 0 && !idle {
            progress.snapshots.fetch_add(got as u64, Ordering::Relaxed);
            progress.snapshot_bytes.fetch_add(bot.game().stats().last_snapshot_bytes as u64, Ordering::Relaxed);
            // Its avatar's id (in a match world it carries the world's number).
            if let (Some(world), Some(me)) = (bot.game().latest(), bot.game().own_entity()) {
                let (i, others) = think(me, world, schema, self.tick);
                report.max_others_seen = report.max_others_seen.max(others);
                self.input = i.to_bytes();
            }
        }
        if bot.game().state() == ClientState::Disconnected {
            progress.disconnected_by_server.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        !bot.game().state().is_error()
    }
}

/// Shows `watch` every snapshot bot `index` decoded since the last it was shown (`watched`;
/// ticks follow one another; after a move to another server, from the new server's first).
fn show(bot: &Conn, index: usize, watched: &mut Option<(SocketAddr, u32)>, watch: &dyn SnapshotWatch) {
    let c = bot.game();
    let (Some(server), Some(me), Some(newest)) = (c.server_addr(), c.client_index(), c.latest().map(|l| l.tick()))
    else {
        return;
    };
    // At most a second back: the client keeps fewer than that.
    let from = match *watched {
        Some((s, t)) if s == server => t.wrapping_add(1).max(newest.saturating_sub(60)),
        _ => newest.saturating_sub(60),
    };
    for tick in from..=newest {
        if let Some(snapshot) = c.snapshot(tick) {
            watch.snapshot(index, server, me, snapshot);
        }
    }
    *watched = Some((server, newest));
}

impl Bot {
    /// Its report (saying goodbye to the server if still connected).
    fn finish(mut self, progress: &SwarmProgress) -> BotReport {
        if self.was_ready {
            progress.connected.fetch_sub(1, Ordering::Relaxed);
        }
        let bot = &mut self.client;
        let s = bot.game().stats();
        let report = &mut self.report;
        report.state = Some(bot.game().state());
        report.snapshots = s.snapshots;
        report.snapshot_errors = s.snapshot_errors;
        report.rtt = s.rtt;
        report.loss = s.loss;
        report.bytes_received = s.bytes_received;
        report.latest = bot.game().latest().cloned();
        report.moves = bot.game().moves();
        report.resumes = bot.game().resumes();
        if let (Some((first, n)), Some(last)) = (self.first_snapshot, self.snapshot_at) {
            let secs = last.duration_since(first).as_secs_f64();
            report.snapshot_rate = if n > 1 && secs > 0.0 { (n - 1) as f64 / secs } else { 0.0 };
        }
        if bot.game().state() == ClientState::Connected {
            bot.disconnect();
        }
        self.report
    }
}

/// Each driver task's frame is split into this many slices, polled one after another, so its
/// bots' inputs reach the server spread over the frame rather than in one burst.
const SLICES: usize = 8;

/// One driver: the bots `lane`, `lane + lanes`, … polled once a frame each, in slices (and,
/// with churn, the new bots it starts, numbered from `next_index`).
async fn drive(
    cfg: Arc<SwarmConfig>,
    lane: usize,
    lanes: usize,
    progress: Arc<SwarmProgress>,
    mut stop: watch::Receiver<bool>,
    began: Instant,
    next_index: Arc<AtomicUsize>,
) -> Vec<(usize, BotReport)> {
    let schema = Arc::new(arena::schema());
    // Bots due to connect, in order: this lane's share of the configured bots (each due at
    // its spacing), then those churn starts (due at once).
    let mut waiting: std::collections::VecDeque<usize> = (lane..cfg.bots).step_by(lanes.max(1)).collect();
    let mine = waiting.len();
    let mut live: Vec<(usize, Bot)> = Vec::with_capacity(mine);
    let mut reports = Vec::with_capacity(mine);
    let frame = Duration::from_secs_f64(1.0 / f64::from(cfg.input_rate_hz.max(1)));
    let slice_period = frame / SLICES as u32;
    let mut next = Instant::now();
    let mut slice = 0usize;
    let mut next_churn = cfg.churn.map(|c| began + c.every);
    let mut churns = 0u64;
    loop {
        if *stop.borrow() {
            break;
        }
        let now = Instant::now();
        if let (Some(at), Some(churn)) = (next_churn, cfg.churn)
            && now >= at
        {
            next_churn = Some(at + churn.every);
            churns += 1;
            let leaving = ((live.len() as f64 * churn.fraction.clamp(0.0, 1.0)).round() as usize).min(live.len());
            for k in 0..leaving {
                // Spread over the live bots, a different set each time.
                let n = live.len();
                let at = (k.wrapping_mul(7919) + churns as usize * 104_729 + lane) % n;
                let (i, mut bot) = live.swap_remove(at);
                bot.report.left_early = true;
                reports.push((i, bot.finish(&progress)));
                progress.churned_out.fetch_add(1, Ordering::Relaxed);
            }
            for _ in 0..leaving {
                waiting.push_back(next_index.fetch_add(1, Ordering::Relaxed));
                progress.churned_in.fetch_add(1, Ordering::Relaxed);
            }
        }
        while let Some(&i) = waiting.front() {
            if i < cfg.bots && began + cfg.connect_spacing * i as u32 > now {
                break;
            }
            let token = match Bot::token(&cfg, i) {
                TokenPoll::Pending => break,
                TokenPoll::Ready(t) => Some(*t),
                TokenPoll::Failed => None,
            };
            waiting.pop_front();
            match token.and_then(|t| Bot::start(&cfg, i, t, &schema)) {
                Some(bot) => live.push((i, bot)),
                None => reports.push((i, BotReport::default())),
            }
        }
        // This slice: every SLICES-th live bot, so each bot is polled once a frame.
        let mut k = slice;
        while k < live.len() {
            if live[k].1.frame(&cfg, &progress, &schema) {
                k += SLICES;
            } else {
                let (i, bot) = live.swap_remove(k);
                reports.push((i, bot.finish(&progress)));
            }
        }
        if live.is_empty() && waiting.is_empty() {
            break;
        }
        slice = (slice + 1) % SLICES;
        next += slice_period;
        let now = Instant::now();
        if next + frame < now {
            // Far behind (a stalled machine): skip what was missed rather than rush.
            next = now;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = stop.changed() => {}
        }
    }
    reports.extend(live.into_iter().map(|(i, bot)| (i, bot.finish(&progress))));
    reports
}

/// Runs the swarm until `stop` turns true (or every bot ends); returns the report.
///
/// The bots are polled, as a game's frame loop polls its socket: one driver task per core
/// takes its share of bots through a frame (each bot: take what arrived, think, send its
/// input), so a bot costs no task, timer or wake-up of its own.
pub async fn run_swarm(cfg: SwarmConfig, progress: Arc<SwarmProgress>, stop: watch::Receiver<bool>) -> SwarmReport {
    let started = Instant::now();
    let cfg = Arc::new(cfg);
    let lanes = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, cfg.bots.max(1));
    let next_index = Arc::new(AtomicUsize::new(cfg.bots));
    let drivers: Vec<_> = (0..lanes)
        .map(|lane| {
            let (cfg, progress, stop, next) = (cfg.clone(), progress.clone(), stop.clone(), next_index.clone());
            tokio::spawn(drive(cfg, lane, lanes, progress, stop, started, next))
        })
        .collect();
    // The configured bots, then those churn started, by index.
    let mut bots = vec![BotReport::default(); cfg.bots];
    for d in drivers {
        for (i, report) in d.await.unwrap_or_default() {
            if i >= bots.len() {
                bots.resize(i + 1, BotReport::default());
            }
            bots[i] = report;
        }
    }
    SwarmReport { bots, elapsed: started.elapsed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(feed: &[(u32, u16, u32)]) -> BotReport {
        BotReport {
            connected: true,
            kill_feed: feed.iter().map(|&(stay, world, seq)| Heard { stay, world, seq }).collect(),
            ..BotReport::default()
        }
    }

    #[test]
    fn the_feed_check_follows_each_world_s_numbering() {
        // Two matches one after the other, each numbering from 0; a third bot joined late.
        let clean = SwarmReport {
            bots: vec![
                bot(&[(1, 3, 0), (1, 3, 1), (1, 3, 2), (3, 5, 0), (3, 5, 1)]),
                bot(&[(1, 4, 0), (1, 4, 1), (3, 3, 0)]),
                bot(&[(1, 5, 1)]),
            ],
            ..SwarmReport::default()
        };
        let check = clean.kill_feed();
        assert_eq!(check.faulty, Vec::<usize>::new(), "{}", check.line());
        assert_eq!((check.last, check.behind), (Some(1), 0), "each ended on its world's newest: {}", check.line());
        let late =
            SwarmReport { bots: vec![bot(&[(1, 3, 0), (1, 3, 1)]), bot(&[(2, 3, 0)])], ..SwarmReport::default() };
        assert_eq!(late.kill_feed().behind, 1, "world 3's kill #1 had not reached bot 1 yet");
        let skipped = SwarmReport { bots: vec![bot(&[(1, 3, 0), (1, 3, 2)])], ..SwarmReport::default() };
        assert_eq!(skipped.kill_feed().faulty, vec![0]);
        let repeated = SwarmReport { bots: vec![bot(&[(1, 3, 0), (1, 3, 0)])], ..SwarmReport::default() };
        assert_eq!(repeated.kill_feed().faulty, vec![0]);
        let reordered = SwarmReport { bots: vec![bot(&[(2, 3, 1), (2, 3, 0)])], ..SwarmReport::default() };
        assert_eq!(reordered.kill_feed().faulty, vec![0]);
    }
}
