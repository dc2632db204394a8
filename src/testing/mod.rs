//! Deterministic end-to-end testing: a server and its clients stepped one tick at a time in
//! memory, on a virtual clock, through link conditioners — no threads, sockets or wall clock.
//! The same sans-IO pieces as the actor server run here (handshake, `PlayerSession`,
//! [`World`]); only the actors' message passing is replaced by direct calls.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::client::GameClient;
use crate::protocol::input::ViewTime;
use crate::protocol::netcode::packet::{self, PacketKind};
use crate::protocol::netcode::server::{Endpoint, EndpointConfig, Handled, NewConnection};
use crate::protocol::netcode::token::{ConnectToken, TokenParams};
use crate::protocol::netcode::{Key, USER_DATA_BYTES};
use crate::protocol::reliability::RateConfig;
use crate::protocol::scoreboard::BoardUpdates;
use crate::protocol::session::{PROTOCOL_VERSION, SessionEnd, SessionParams};
use crate::protocol::snapshot::{Predictor, Schema, SenderConfig, WorldSnapshot};
use crate::protocol::system::Pace;
use crate::server::cores::directory::{Directory, ToWorld, View};
use crate::server::cores::executor::{Executor, Outlet};
use crate::server::cores::inlet::{Arrived, Inlet};
use crate::server::cores::pace::Pacer;
use crate::server::cores::resume::{Judged, TicketHolder, Tickets, refuse_gone, renewal_due};
use crate::server::cores::session::{Beat, MessageDrops, PlayerSession, SessionSettings};
use crate::server::cores::simulation::{Simulation, Stepped, TickInput};
use crate::server::extensions::record::RecordTo;
pub use crate::server::extensions::record::SharedBuffer;
use crate::server::game::world::{Numbers, Request, TokenKeys};
use crate::server::shells::mailbox::{Frames, Left};
use crate::server::shells::world_actor::{Start, start_world};
use crate::server::{JoinInfo, PlayerId, World, WorldFault, WorldId, WorldOptions, Worlds};
use crate::transport::conditioner::{Bottleneck, LinkConditioner, LinkCounts, LinkProfile};
use bytes::Bytes;

const KEY: Key = [0x5a; 32];

/// What the stepper's zones mint handoff tokens with.
const STEPPER_KEYS: TokenKeys = TokenKeys { protocol_id: crate::DEFAULT_PROTOCOL_ID, private_key: KEY };
const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)), 40_000);

/// A client in the stepper.
#[derive(Debug)]
pub struct StepClient {
    /// Its protocol state.
    pub client: GameClient,
    /// Its (virtual) address.
    pub addr: SocketAddr,
    /// The input it sends every tick; `None` (the default) sends none: the client then
    /// acknowledges snapshots and sends its messages ([`GameClient::send_without_input`]),
    /// and the world hears no input from it.
    pub input: Option<Vec<u8>>,
    up: LinkConditioner,
    down: LinkConditioner,
    /// The largest datagram its downlink carries (a path MTU black hole), if any.
    largest_down: Option<usize>,
}

/// The datagrams a player's mailbox holds at most ([`ServerConfig::player_queue`]'s default).
///
/// [`ServerConfig::player_queue`]: crate::server::ServerConfig::player_queue
const PLAYER_QUEUE: usize = 16;

/// A connected player as the stepper keeps it: what the socket actor keeps (its inlet), what
/// its mailbox holds, and what its player actor owns (its session).
#[derive(Debug)]
struct Seat {
    inlet: Inlet,
    session: PlayerSession,
    frames: Frames,
    /// Who its resume tickets are for, and when the newest was minted (as the socket actor's
    /// route keeps them).
    holder: TicketHolder,
    ticket_at: Duration,
}

impl Seat {
    /// What the player actor does at a wake-up before anything else: reads the payloads
    /// left for it, and hands its client's messages to the world (into `taken`).
    fn read(
        &mut self,
        now: Duration,
        round: u64,
        wire: &mut Vec<(SocketAddr, Vec<u8>)>,
        taken: &mut Vec<StepInput>,
    ) -> MessageDrops {
        if self.frames.read_into(&mut self.session, now, wire, |_| {}).is_none() {
            return MessageDrops::default();
        }
        let id = self.session.id();
        let open = self.session.ending().is_none();
        self.session.take_messages(now, round, wire, |data, reliable| {
            if open {
                taken.push(StepInput {
                    player: id,
                    seq: 0,
                    bytes: Vec::new(),
                    view: None,
                    message: Some((data, reliable)),
                });
            }
        })
    }
}

impl std::ops::Deref for Seat {
    type Target = PlayerSession;
    fn deref(&self) -> &PlayerSession {
        &self.session
    }
}

impl std::ops::DerefMut for Seat {
    fn deref_mut(&mut self) -> &mut PlayerSession {
        &mut self.session
    }
}

/// An input the stepper's server took, for the next tick.
#[derive(Debug)]
struct StepInput {
    player: PlayerId,
    seq: u32,
    bytes: Vec<u8>,
    view: Option<ViewTime>,
    message: Option<(Bytes, bool)>,
}

impl TickInput for StepInput {
    fn player(&self) -> PlayerId {
        self.player
    }
    fn seq(&self) -> u32 {
        self.seq
    }
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn view(&self) -> Option<ViewTime> {
        self.view
    }
    fn message(&self) -> Option<(&[u8], bool)> {
        self.message.as_ref().map(|(m, r)| (&m[..], *r))
    }
}

#[derive(Debug)]
struct InFlight {
    at: Duration,
    order: u64,
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

/// A world the stepper runs besides its entry world (spawned through [`Worlds`]).
struct Hosted {
    world: Box<dyn World>,
    sim: Simulation,
    /// Server ticks per tick of this world.
    stride: u32,
    /// Where its players' inputs wait for its next tick.
    pending: Vec<StepInput>,
}

/// A server running `W` as its entry world (and any world the game starts with
/// [`Worlds`]) and its clients, stepped one tick at a time.
pub struct Stepper<W: World> {
    /// The virtual Unix time.
    pub now: Duration,
    /// The entry world.
    pub world: W,
    /// The clients, in the order added.
    pub clients: Vec<StepClient>,
    /// Inputs applied, per player (in whatever world).
    pub applied: BTreeMap<PlayerId, u64>,
    /// The entry world's tick step, the same as the world actor's.
    sim: Simulation,
    /// Inputs for the entry world's next tick.
    pending_inputs: Vec<StepInput>,
    /// The other worlds.
    hosted: BTreeMap<WorldId, Hosted>,
    /// Who is where: the same directory the broadcaster keeps.
    /// Who is where and each world's scoreboard, carried out by the executor the
    /// broadcaster runs.
    exec: Executor<()>,
    worlds: Worlds,
    numbers: Arc<std::sync::Mutex<Numbers>>,
    /// The server's tick (every world numbers its ticks on it).
    server_tick: u32,
    /// The entry world has been told it started.
    started: bool,
    /// Shut down: steps tick nothing.
    shut_down: bool,
    /// What each player's session starts with, as the socket actor's.
    settings: SessionSettings,
    /// The server's endpoint, the same as the socket actor's; it keeps each player's session.
    sessions: Endpoint<Seat>,
    /// The resume tickets it minted, as the socket actor's (keys from a counter).
    tickets: Tickets,
    /// Sessions resumed with a ticket, and tickets refused as gone.
    resumed: u64,
    in_flight: Vec<InFlight>,
    order: u64,
    /// Client messages dropped (flood, too large), as the server counts them.
    message_drops: MessageDrops,
    /// The view each player was last sent (the merged snapshot the server encoded for it).
    views: BTreeMap<PlayerId, Arc<View>>,
    /// Faults of worlds that ended.
    retired_faults: BTreeMap<WorldFault, u64>,
    /// What failed, as the server's [`ServerHandle::failure`](crate::server::ServerHandle::failure)
    /// would say: the entry world, once it stopped.
    failure: Option<String>,
    /// Each client's token keys (client to server, server to client), to read captures.
    keys: Vec<(Key, Key)>,
    /// The datagrams sent since [`Stepper::capture`], when capturing.
    capture: Option<Vec<Datagram>>,
    /// Every player's snapshot interval, as the broadcaster's ([`Stepper::pin_snapshot_interval`]).
    pacer: Pacer,
}

/// One datagram the stepper's network carried, as [`Stepper::captured`] gives it: a capture
/// of the wire, decrypted with the client's keys (what `docs/wire.md` describes).
#[derive(Debug, Clone)]
pub struct Datagram {
    /// When it was sent, on the stepper's clock.
    pub at: Duration,
    /// Its client's index in [`Stepper::clients`].
    pub client: usize,
    /// Sent by the client (else by the server).
    pub to_server: bool,
    /// Its netcode packet type.
    pub kind: PacketKind,
    /// Its length on the wire.
    pub len: usize,
    /// The plaintext of a payload packet.
    pub payload: Option<Vec<u8>>,
    /// Lost on the way (its link's conditioner dropped it).
    pub lost: bool,
}

/// How the stepper delivers what its executor decides: by calls into its sessions and
/// worlds, in this thread (the broadcaster's outlet casts to actors instead).
struct StepOutlet<'a> {
    now: Duration,
    sessions: &'a mut Endpoint<Seat>,
    /// The entry world: its step, its game, its inputs waiting for the next tick.
    entry: (&'a mut Simulation, &'a mut dyn World, &'a mut Vec<StepInput>),
    hosted: &'a mut BTreeMap<WorldId, Hosted>,
    pacer: &'a Pacer,
    tick: u32,
    /// The newest input applied of each player by the tick being carried out.
    newest: BTreeMap<PlayerId, u32>,
    wire: Vec<(SocketAddr, Vec<u8>)>,
    /// Players a reliable message did not fit for: disconnected once the tick is carried out.
    cut_off: Vec<PlayerId>,
    /// The snapshots published: (player, its view, its newest applied input).
    sends: Vec<(PlayerId, Arc<View>, Option<u32>)>,
}

/// What a [`StepOutlet`] delivered: the datagrams to send, and the snapshots published
/// (player, its view, its newest applied input).
type Delivered = (Vec<(SocketAddr, Vec<u8>)>, Vec<(PlayerId, Arc<View>, Option<u32>)>);

impl StepOutlet<'_> {
    fn session(&mut self, player: PlayerId) -> Option<&mut PlayerSession> {
        self.sessions.iter_mut().map(|(_, o)| &mut o.value.session).find(|s| s.id() == player)
    }

    /// Runs `f` on `player`'s session, if it has one, with the time and the datagrams to send.
    fn with_session(
        &mut self,
        player: PlayerId,
        f: impl FnOnce(&mut PlayerSession, Duration, &mut Vec<(SocketAddr, Vec<u8>)>),
    ) {
        let now = self.now;
        let wire = &mut self.wire;
        if let Some(s) = self.sessions.iter_mut().map(|(_, o)| &mut o.value.session).find(|s| s.id() == player) {
            f(s, now, wire);
        }
    }

    /// Disconnects the players cut off, as on the server; what to send, and the snapshots.
    fn finish(mut self) -> Delivered {
        let (now, mut wire) = (self.now, std::mem::take(&mut self.wire));
        for p in std::mem::take(&mut self.cut_off) {
            if let Some(s) = self.session(p) {
                s.close(now, SessionEnd::TooFarBehind, &mut wire);
            }
        }
        (wire, self.sends)
    }
}

impl Outlet<()> for StepOutlet<'_> {
    fn to_world(&mut self, world: WorldId, told: ToWorld) {
        let (sim, game, pending): (_, &mut dyn World, _) = if world == WorldId::ENTRY {
            (&mut *self.entry.0, &mut *self.entry.1, &mut *self.entry.2)
        } else if let Some(h) = self.hosted.get_mut(&world) {
            (&mut h.sim, &mut *h.world, &mut h.pending)
        } else {
            return;
        };
        if let ToWorld::Leave(player) = told {
            // Its inputs still queued go with it, as in the world's queue.
            pending.retain(|i| i.player != player);
        }
        sim.handle(game, told);
    }

    fn to_player(&mut self, player: PlayerId, _: &(), told: crate::server::cores::directory::ToPlayer) {
        self.with_session(player, |s, now, wire| s.handle(now, told, wire));
    }

    fn to_all(&mut self, dir: &Directory<()>, world: WorldId, data: Bytes, reliable: bool) {
        for (p, h) in dir.audience(world, crate::server::Audience::All) {
            self.message(p, h, &data, reliable);
        }
    }

    fn flush(&mut self, _: &Directory<()>) {}

    fn message(&mut self, player: PlayerId, _: &(), data: &Bytes, reliable: bool) {
        if self.session(player).is_some_and(|s| s.queue_message(data.clone(), reliable)) {
            self.cut_off.push(player);
        }
    }

    fn notice(&mut self, player: PlayerId, _: &(), data: &Bytes) {
        self.with_session(player, |s, now, wire| s.send_notice(now, data.clone(), wire));
    }

    fn board(&mut self, player: PlayerId, _: &(), updates: &Arc<BoardUpdates>) {
        self.with_session(player, |s, now, wire| s.queue_board(now, updates, wire));
    }

    fn kick(&mut self, player: PlayerId, _: &(), end: SessionEnd) {
        self.with_session(player, |s, now, wire| s.close(now, end, wire));
    }

    fn ping(&self, player: PlayerId, _: &()) -> u16 {
        let rtt = self.sessions.iter().map(|(_, o)| &o.value.session).find(|s| s.id() == player);
        rtt.map_or(0, |s| s.channel().link().rtt().as_millis().min(u128::from(u16::MAX)) as u16)
    }

    fn snapshot(&mut self, dir: &mut Directory<()>, world: WorldId, snapshot: Arc<WorldSnapshot>) {
        // Only the players whose turn it is, as the broadcaster hands them out.
        let (pacer, tick, newest, sends) = (self.pacer, self.tick, &self.newest, &mut self.sends);
        dir.publish(world, snapshot, |view, p, _| {
            if pacer.due(tick, p) {
                sends.push((p, view.clone(), newest.get(&p).copied()));
            }
        });
    }
}

impl<W: World> Stepper<W> {
    /// A server for `max_players` at `tick_rate_hz`.
    pub fn new(world: W, tick_rate_hz: u16, max_players: usize) -> Self {
        let now = Duration::from_secs(1_800_000_000);
        let netcode = EndpointConfig::new(crate::DEFAULT_PROTOCOL_ID, KEY, vec![SERVER], max_players);
        let schema = Arc::new(world.schema());
        let hz = tick_rate_hz.max(1);
        let columns = world.scoreboard_columns();
        let has_board = !columns.is_empty();
        let numbers = Arc::new(std::sync::Mutex::new(Numbers::default()));
        let entry = numbers.lock().ok().and_then(|mut n| n.take()).unwrap_or(WorldId::ENTRY);
        let mut exec = Executor::default();
        exec.add_world(entry, WorldOptions::new("main"), world.relevancy(), None, columns);
        let worlds = Worlds::stepper(numbers.clone(), vec!["main".into()], hz, schema.clone(), STEPPER_KEYS);
        worlds.set_columns(entry, exec.board_columns(entry));
        Self {
            now,
            clients: Vec::new(),
            applied: BTreeMap::new(),
            sim: Simulation::new(schema.clone(), Duration::from_secs_f64(1.0 / f64::from(hz)))
                .with_scoreboard(has_board),
            pending_inputs: Vec::new(),
            hosted: BTreeMap::new(),
            exec,
            worlds,
            numbers,
            server_tick: 0,
            started: false,
            shut_down: false,
            tickets: Tickets::deterministic(&netcode, crate::server::cores::resume::DEFAULT_GRACE),
            resumed: 0,
            sessions: Endpoint::with_challenge_key(netcode, [0x77; 32], now),
            in_flight: Vec::new(),
            order: 0,
            message_drops: MessageDrops::default(),
            settings: SessionSettings {
                schema,
                params: SessionParams {
                    protocol_version: PROTOCOL_VERSION,
                    tick_rate_hz: hz,
                    snapshot_rate_hz: hz,
                    max_payload_bytes: 1200,
                },
                snapshot_every: 1,
                sender: SenderConfig::default(),
                predictor: None,
                rate: RateConfig::default(),
                resume_grace: crate::server::cores::resume::DEFAULT_GRACE,
            },
            views: BTreeMap::new(),
            retired_faults: BTreeMap::new(),
            failure: None,
            keys: Vec::new(),
            capture: None,
            pacer: Pacer::new(u32::from(hz), u32::from(hz)),
            world,
        }
    }

    /// How long a silent client's player is kept for it to resume (as
    /// [`ServerConfig::resume_grace`](crate::server::ServerConfig::resume_grace), 15 s by
    /// default; at most the connection timeout: none).
    pub fn with_resume_grace(mut self, grace: Duration) -> Self {
        let grace = grace.min(crate::server::MAX_RESUME_GRACE);
        self.settings.resume_grace = grace;
        self.tickets.set_grace(grace);
        self
    }

    /// The stepper's clock now (Unix time, as a client's `now`): to make a client of one's
    /// own mid-run (a restarted program).
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The world kinds the game declares (as
    /// [`ServerConfig::world_kinds`](crate::server::ServerConfig::world_kinds)); the entry
    /// world is of the first. `["main"]` by default.
    pub fn with_world_kinds(mut self, kinds: &[&str]) -> Self {
        let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_owned()).collect();
        if let Some(first) = kinds.first() {
            let relevancy = self.world.relevancy();
            let dir = self.exec.dir_mut();
            dir.remove_world(WorldId::ENTRY, "");
            dir.add_world(WorldId::ENTRY, WorldOptions::new(first.clone()), relevancy, None);
        }
        let hz = self.settings.params.tick_rate_hz;
        self.worlds = Worlds::stepper(self.numbers.clone(), kinds, hz, self.settings.schema.clone(), STEPPER_KEYS);
        self.worlds.set_columns(WorldId::ENTRY, self.exec.board_columns(WorldId::ENTRY));
        self
    }

    /// The server's worlds, as a game's world gets them in [`World::started`].
    pub fn worlds(&self) -> &Worlds {
        &self.worlds
    }

    /// The worlds running: the entry world and those started since, with their kinds and
    /// players.
    pub fn world_list(&self) -> Vec<(WorldId, String, usize)> {
        self.exec.dir().worlds().map(|(id, k, n)| (id, k.to_owned(), n)).collect()
    }

    /// The world a player is in.
    pub fn home(&self, player: PlayerId) -> Option<WorldId> {
        self.exec.dir().home(player)
    }

    /// The worlds a player watches besides its own.
    pub fn watching(&self, player: PlayerId) -> Vec<WorldId> {
        self.exec.dir().watching(player).to_vec()
    }

    /// What the server last encoded for a player: its merged view of every world it sees
    /// (before its relevancy).
    pub fn view_of(&self, player: PlayerId) -> Option<&Arc<WorldSnapshot>> {
        self.views.get(&player).map(|v| &v.merged)
    }

    /// How snapshots are encoded (for example predicted: `SenderConfig { predict:
    /// true, .. }`), for the players that connect from now on.
    pub fn with_sender_config(mut self, sender: SenderConfig) -> Self {
        self.settings.sender = sender;
        self
    }

    /// The game's own snapshot predictor on both sides, for the players that connect from now
    /// on (their senders, and their clients' receivers).
    pub fn with_predictor(mut self, predictor: Arc<dyn Predictor>) -> Self {
        self.settings.predictor = Some(predictor);
        self
    }

    /// Each client's send rate (as [`ServerConfig::send_rate`]), for the players that connect
    /// from now on.
    ///
    /// [`ServerConfig::send_rate`]: crate::server::ServerConfig::send_rate
    pub fn with_send_rate(mut self, rate: RateConfig) -> Self {
        self.settings.rate = rate;
        self
    }

    /// Puts a bottleneck on the link from the server to client `i` (a narrow home line with
    /// its router's queue), or takes it off with `None`; it may change while running.
    pub fn set_bottleneck(&mut self, i: usize, bottleneck: Option<Bottleneck>) {
        if let Some(c) = self.clients.get_mut(i) {
            c.down.set_bottleneck(bottleneck);
        }
    }

    /// Client `i`'s downlink drops every datagram over `most` bytes from now on (`None`:
    /// none): a path MTU black hole, where keep-alives pass and snapshots do not.
    pub fn set_largest_datagram(&mut self, i: usize, most: Option<usize>) {
        if let Some(c) = self.clients.get_mut(i) {
            c.largest_down = most;
        }
    }

    /// Client `i`'s link (both ways) is `profile` from now on (`loss: 1.0` cuts it).
    pub fn set_link(&mut self, i: usize, profile: LinkProfile) {
        if let Some(c) = self.clients.get_mut(i) {
            c.up.set_profile(profile);
            c.down.set_profile(profile);
        }
    }

    /// What the links of client `i` did to its datagrams so far: (up, down).
    pub fn link_counts(&self, i: usize) -> Option<(LinkCounts, LinkCounts)> {
        self.clients.get(i).map(|c| (c.up.counts(), c.down.counts()))
    }

    /// Client `i`'s send rate on the server, in bytes a second (`None` before it is
    /// connected).
    pub fn send_rate(&self, i: usize) -> Option<u32> {
        let addr = self.clients.get(i)?.addr;
        self.sessions.iter().find(|(_, o)| o.addr == addr).map(|(_, o)| o.value.send_rate().bytes_per_second())
    }

    /// What the server holds that client `i` has after the snapshot of `tick`: the merged
    /// view ([`view_of`](Self::view_of)) less the changes its budget deferred (those keep the
    /// state the client had, or are not there yet). `None` for a tick it did not send, or
    /// one that left its history.
    pub fn client_view(&self, i: usize, tick: u32) -> Option<WorldSnapshot> {
        let addr = self.clients.get(i)?.addr;
        self.sessions.iter().find(|(_, o)| o.addr == addr)?.1.value.client_view(tick)
    }

    /// Snapshots every `every` ticks (the session tells clients the rate), for the players
    /// that connect from now on.
    pub fn with_snapshots_every(mut self, every: u32) -> Self {
        let s = &mut self.settings;
        s.snapshot_every = every.max(1);
        s.params.snapshot_rate_hz = (s.params.tick_rate_hz / s.snapshot_every as u16).max(1);
        self
    }

    /// Holds every player's snapshot interval at `interval` ticks (1 to 4), as
    /// [`ServerHandle::pin_snapshot_interval`](crate::server::ServerHandle::pin_snapshot_interval)
    /// does on the server: a player gets the snapshots of the ticks where `(tick + id) %
    /// interval == 0`, staggered by player, and every client is told the pace
    /// ([`GameClient::pace`]) and sends its inputs at that rate, each packet carrying more of
    /// them. So a game tries its client at the rate a server short of CPU would choose.
    /// `None` lets go: the stepper is never short of CPU, so its players get every snapshot
    /// again at once (a server raises the rate once it has had room for a while).
    pub fn pin_snapshot_interval(&mut self, interval: Option<u8>) {
        let Some(interval) = self.pacer.pin(Some(interval.unwrap_or(1))) else { return };
        let (now, pace) = (self.now, Pace::new(interval).encode());
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (_, o) in self.sessions.iter_mut() {
            o.value.send_notice(now, pace.clone(), &mut wire);
        }
        self.send_from_server(wire);
    }

    /// Adds a client behind a link with `profile` (both ways); returns its index. Its
    /// token's client id is 1000 plus the index, its user data zeros.
    pub fn add_client(&mut self, profile: LinkProfile) -> usize {
        let i = self.clients.len();
        self.add_client_with(profile, 1000 + i as u64, [0; USER_DATA_BYTES])
    }

    /// Adds a client whose connect token carries `client_id` and `user_data`; returns its
    /// index.
    pub fn add_client_with(&mut self, profile: LinkProfile, client_id: u64, user_data: [u8; USER_DATA_BYTES]) -> usize {
        let i = self.clients.len();
        let params = TokenParams {
            protocol_id: crate::DEFAULT_PROTOCOL_ID,
            client_id,
            now_unix_secs: self.now.as_secs(),
            expire_seconds: 60,
            timeout_seconds: 5,
            server_addresses: vec![SERVER],
            user_data,
        };
        let seed = 0x1234_5678 ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Fixed nonce and keys keep the run deterministic.
        let keys = ([i as u8 ^ 1; 32], [i as u8 ^ 2; 32]);
        let token =
            ConnectToken::generate_with(&params, &KEY, [i as u8; 24], keys.0, keys.1).expect("one server address");
        self.keys.push(keys);
        let mut client = GameClient::new(token, self.settings.schema.clone(), self.now);
        if let Some(p) = &self.settings.predictor {
            client.set_predictor(p.clone());
        }
        self.clients.push(StepClient {
            client,
            addr: SocketAddr::from(([10, 0, 1, (i % 250) as u8], 50_000 + i as u16)),
            input: None,
            up: LinkConditioner::new(profile, seed),
            down: LinkConditioner::new(profile, seed.rotate_left(29)),
            largest_down: None,
        });
        i
    }

    /// Players connected.
    pub fn players(&self) -> usize {
        self.sessions.connected_clients()
    }

    /// Ticks run (the server's tick: every world numbers its ticks on it).
    pub fn tick(&self) -> u32 {
        self.server_tick
    }

    /// The entry world's snapshot of its last tick.
    pub fn last_snapshot(&self) -> Option<&Arc<WorldSnapshot>> {
        self.sim.latest()
    }

    /// The schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.settings.schema
    }

    /// Starts capturing every datagram sent (see [`Stepper::captured`]), forgetting any
    /// capture so far.
    pub fn capture(&mut self) {
        self.capture = Some(Vec::new());
    }

    /// The datagrams sent since [`Stepper::capture`] (or the last call), in the order they
    /// were sent, each decrypted with its client's keys; capturing goes on.
    pub fn captured(&mut self) -> Vec<Datagram> {
        self.capture.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn post(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>, delay: Option<Duration>) {
        if self.capture.is_some() {
            let to_server = to == SERVER;
            let peer = if to_server { from } else { to };
            let client = self.clients.iter().position(|c| c.addr == peer).unwrap_or(usize::MAX);
            let key = self.keys.get(client).map(|k| if to_server { k.0 } else { k.1 });
            let kind = packet::read_header(&bytes).map(|h| h.kind);
            let mut copy = bytes.clone();
            let payload = key.and_then(|key| {
                let (_, p) =
                    packet::open_packet(&mut copy, packet::Allowed::ENCRYPTED, crate::DEFAULT_PROTOCOL_ID, &key, None)
                        .ok()?;
                match p {
                    packet::Packet::Payload(plain) => Some(plain.to_vec()),
                    _ => None,
                }
            });
            if let (Ok(kind), Some(c)) = (kind, self.capture.as_mut()) {
                c.push(Datagram {
                    at: self.now,
                    client,
                    to_server,
                    kind,
                    len: bytes.len(),
                    payload,
                    lost: delay.is_none(),
                });
            }
        }
        if let Some(d) = delay {
            self.order += 1;
            self.in_flight.push(InFlight { at: self.now + d, order: self.order, from, to, bytes });
        }
    }

    fn send_from_server(&mut self, wire: Vec<(SocketAddr, Vec<u8>)>) {
        for (to, bytes) in wire {
            let now = self.now;
            let delay = self
                .clients
                .iter_mut()
                .find(|c| c.addr == to)
                .filter(|c| c.largest_down.is_none_or(|most| bytes.len() <= most))
                .map(|c| c.down.pass(now, bytes.len()));
            if let Some(delay) = delay {
                self.post(SERVER, to, bytes, delay);
            }
        }
    }

    /// Where a player's inputs go: the queue of the world it is in.
    fn queue_of(&mut self, player: PlayerId) -> Option<&mut Vec<StepInput>> {
        match self.exec.dir().home(player)? {
            WorldId::ENTRY => Some(&mut self.pending_inputs),
            w => self.hosted.get_mut(&w).map(|h| &mut h.pending),
        }
    }

    fn server_receives(&mut self, from: SocketAddr, mut bytes: Vec<u8>) {
        let now = self.now;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        match self.sessions.handle(now, from, &mut bytes, &mut wire) {
            Handled::Route(index) => {
                let Some(seat) = self.sessions.get_mut(index).map(|o| &mut o.value) else { return };
                let id = seat.session.id();
                let mut taken = Vec::new();
                let round = u64::from(self.server_tick);
                // As the socket actor: the inlet's inputs go to the world at once (unless the
                // session is closing), the payload waits for the session.
                let open = seat.session.ending().is_none();
                let (gone, wake) = match seat.inlet.receive(now, round, &mut bytes) {
                    Arrived::Payload { frame, inputs, wake } => {
                        if open {
                            taken.extend(inputs.as_slice().iter().map(|i| StepInput {
                                player: id,
                                seq: i.seq,
                                bytes: i.bytes.to_vec(),
                                view: i.view,
                                message: None,
                            }));
                        }
                        let left = seat.frames.leave(now, tokio::time::Instant::now(), frame, PLAYER_QUEUE, wake);
                        (false, left == Left::Queued(true))
                    }
                    Arrived::Unreadable { frame, close, .. } => {
                        if close {
                            seat.session.close(now, SessionEnd::Malformed, &mut wire);
                        }
                        if let Some(frame) = frame {
                            seat.frames.leave(now, tokio::time::Instant::now(), frame, PLAYER_QUEUE, false);
                        }
                        (false, false)
                    }
                    Arrived::Disconnected => (true, false),
                    Arrived::KeepAlive | Arrived::Dropped(_) => (false, false),
                };
                if wake {
                    // As the player actor woken for them.
                    let drops = seat.read(now, round, &mut wire, &mut taken);
                    self.count_message_drops(drops);
                }
                if let Some(q) = self.queue_of(id) {
                    q.extend(taken);
                }
                if gone {
                    self.drop_session(index);
                }
            }
            Handled::Connected(new) => {
                let NewConnection { mut connection, reservation, replaces } = *new;
                // As the socket actor: a ticket resumes its session; a fresh token replaces the
                // session that lingers, whose client is told why.
                match self.tickets.judge(&connection, replaces, now) {
                    Judged::Resume(slot) => {
                        connection.greet(slot as u32, now, &mut wire);
                        let (rx, tx) = connection.split();
                        let mut back = None;
                        if let Some(o) = self.sessions.rebind(reservation, slot) {
                            let seat = &mut o.value;
                            seat.inlet.rebind(rx);
                            if seat.session.rebind(tx) {
                                back = Some(seat.session.id());
                            }
                            if let Some(ticket) = self.tickets.mint(&seat.holder, now) {
                                seat.ticket_at = now;
                                seat.session.send_notice(now, ticket, &mut wire);
                            }
                            self.resumed += 1;
                        }
                        self.send_from_server(wire);
                        if let Some(p) = back {
                            self.presence(p, false);
                        }
                        return;
                    }
                    Judged::Gone => {
                        refuse_gone(&mut connection, reservation.slot(), now, &mut wire);
                        self.sessions.abandon(reservation);
                        self.send_from_server(wire);
                        return;
                    }
                    Judged::Replace(slot) => {
                        if let Some(old) = self.sessions.get_mut(slot) {
                            old.value.session.close(now, SessionEnd::Replaced, &mut wire);
                        }
                    }
                    Judged::Fresh => {}
                }
                connection.greet(reservation.slot() as u32, now, &mut wire);
                let holder = TicketHolder::of(&connection);
                let who = JoinInfo::new(connection.client_id(), *connection.user_data());
                let slot = connection.client_index();
                let (inlet, mut session) = crate::server::cores::inlet::open(&self.settings, connection);
                // Told the pace at once when the server paces, as the broadcaster tells it.
                if self.pacer.interval() > 1 {
                    session.send_notice(now, Pace::new(self.pacer.interval()).encode(), &mut wire);
                }
                if let Some(ticket) = self.tickets.mint(&holder, now) {
                    session.send_notice(now, ticket, &mut wire);
                }
                let seat = Seat { inlet, session, frames: Frames::default(), holder, ticket_at: now };
                self.sessions.attach(reservation, seat);
                self.send_from_server(wire);
                let (exec, mut out) = self.parts();
                exec.add_player(slot, (), who, &mut out);
                let done = out.finish();
                self.delivered(done);
                return;
            }
            Handled::Handled | Handled::Dropped(_) => {}
        }
        self.send_from_server(wire);
    }

    fn count_message_drops(&mut self, drops: MessageDrops) {
        self.message_drops.flood += drops.flood;
        self.message_drops.too_large += drops.too_large;
        self.message_drops.disconnected += drops.disconnected;
    }

    /// A player's client went away (silent within the grace) or came back, as the player
    /// actor tells the broadcaster.
    fn presence(&mut self, player: PlayerId, away: bool) {
        let (exec, mut out) = self.parts();
        exec.presence(player, away, &mut out);
        let done = out.finish();
        self.delivered(done);
    }

    fn drop_session(&mut self, index: usize) {
        if let Some(o) = self.sessions.remove(index) {
            self.views.remove(&o.value.id());
            let (exec, mut out) = self.parts();
            exec.remove_player(o.value.id(), &mut out);
            let done = out.finish();
            self.delivered(done);
        }
    }

    /// The executor and the outlet the stepper delivers through (its sessions and worlds,
    /// by calls), borrowed apart.
    fn parts(&mut self) -> (&mut Executor<()>, StepOutlet<'_>) {
        let out = StepOutlet {
            now: self.now,
            sessions: &mut self.sessions,
            entry: (&mut self.sim, &mut self.world, &mut self.pending_inputs),
            hosted: &mut self.hosted,
            pacer: &self.pacer,
            tick: self.server_tick,
            newest: BTreeMap::new(),
            wire: Vec::new(),
            cut_off: Vec::new(),
            sends: Vec::new(),
        };
        (&mut self.exec, out)
    }

    /// Sends what the outlet's deliveries sent; returns the snapshots it published.
    fn delivered(&mut self, done: Delivered) -> Vec<(PlayerId, Arc<View>, Option<u32>)> {
        let (wire, sends) = done;
        self.worlds_changed();
        self.send_from_server(wire);
        sends
    }

    /// The worlds running changed: the game's handle lists them ([`Worlds::running`]).
    fn worlds_changed(&self) {
        self.worlds.set_running(&mut self.exec.dir().worlds().map(|(id, _, _)| id));
    }

    /// What the game asked of its worlds since the last step.
    fn take_requests(&mut self) {
        for r in self.worlds.take_requests() {
            match r {
                Request::Spawn { id, options, mut world, parent, stride } => {
                    let server = self.settings.params.tick_rate_hz;
                    let columns = world.scoreboard_columns();
                    let (record, kind, stop_when_empty, handle) = (
                        options.record.clone(),
                        options.kind.clone(),
                        options.stop_when_empty,
                        options.recording.clone(),
                    );
                    self.exec.add_world(id, options, world.relevancy(), parent, columns);
                    let start = Start {
                        id,
                        dt: self.sim.dt() * stride,
                        stride,
                        tick_rate_hz: server,
                        stop_when_empty,
                        // Written as the world ticks, in this thread: every frame, and the
                        // file whole when the world stops.
                        record: record.as_deref().map(|dir| (kind.as_str(), RecordTo { dir, handle, inline: true })),
                        metrics: None,
                    };
                    let sim = start_world(&mut *world, &self.worlds, start);
                    self.hosted.insert(id, Hosted { world, sim, stride, pending: Vec::new() });
                }
                Request::Stop(id) => self.end_world(id, "the world was stopped", true),
                Request::Move(player, to) => {
                    let (exec, mut out) = self.parts();
                    exec.move_player(None, player, to, &mut out);
                    let done = out.finish();
                    self.delivered(done);
                }
                Request::Watch(player, world, on) => self.exec.watch(None, player, world, on),
                Request::Tap(id, tap) => self.add_tap(id, tap),
            }
        }
        self.worlds_changed();
    }

    fn add_tap(&mut self, id: WorldId, tap: Box<dyn crate::server::game::world::Tap>) {
        if id == WorldId::ENTRY {
            self.sim.add_tap(tap);
        } else if let Some(h) = self.hosted.get_mut(&id) {
            h.sim.add_tap(tap);
        }
    }

    /// Records world `id` from its next tick, into memory: the bytes of the recording file
    /// ([`crate::protocol::recording`]) grow in the returned buffer as the world ticks, in
    /// the stepper's own thread, every frame (nothing is left out however fast the stepper
    /// runs), and the file is whole, its last chunk and end written, as soon as the world
    /// stops or the stepper is dropped. Worlds spawned with
    /// [`WorldOptions::recorded`](crate::server::WorldOptions::recorded) are recorded the same
    /// way, into their files.
    ///
    /// # Errors
    /// When the recording's header cannot be written (never, into memory).
    pub fn record(&mut self, id: WorldId) -> std::io::Result<SharedBuffer> {
        let out = SharedBuffer::default();
        let stride = if id == WorldId::ENTRY { 1 } else { self.hosted.get(&id).map_or(1, |h| h.stride) };
        let of = crate::server::extensions::record::RecordingOf {
            schema: self.settings.schema.clone(),
            kind: "recorded",
            columns: self.exec.board_columns(id),
            tick_rate_hz: self.settings.params.tick_rate_hz,
            stride,
        };
        let handle = crate::server::RecordingHandle::default();
        let recorder = crate::server::extensions::record::Recorder::start(
            out.clone(),
            std::path::PathBuf::new(),
            handle,
            true,
            of,
            None,
        )?;
        self.add_tap(id, Box::new(recorder));
        Ok(out)
    }

    /// A hosted world ends (`gracefully`: its players leave and its shutdown runs first):
    /// its players go to its fallback.
    fn end_world(&mut self, id: WorldId, why: &str, gracefully: bool) {
        let Some(mut h) = self.hosted.remove(&id) else { return };
        if gracefully {
            h.sim.shutdown(&mut h.world);
        }
        for (f, n) in h.sim.faults() {
            *self.retired_faults.entry(f).or_default() += n;
        }
        let (exec, mut out) = self.parts();
        exec.remove_world(id, why, &mut out);
        let done = out.finish();
        self.delivered(done);
        if let Ok(mut n) = self.numbers.lock() {
            n.free(id);
        }
    }

    fn deliver_due(&mut self) {
        let now = self.now;
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].at <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|d| (d.at, d.order));
        for d in due {
            if d.to == SERVER {
                self.server_receives(d.from, d.bytes);
            } else if let Some(c) = self.clients.iter_mut().find(|c| c.addr == d.to) {
                let mut bytes = d.bytes;
                c.client.receive(now, d.from, &mut bytes);
            }
        }
    }

    /// Advances one tick: deliver what arrived, clients send, the worlds tick, every player
    /// gets its snapshot. Each client sends its [`StepClient::input`], if it has one.
    pub fn step(&mut self) {
        self.step_each(|_, c, _| c.input.clone());
    }

    /// [`Stepper::step`], each client's input made by `input(index, client, now)` at the
    /// moment it is sent, after that tick's datagrams arrived: `client.client.playback(now)`
    /// then shows what the player sees as it acts.
    pub fn step_with(&mut self, mut input: impl FnMut(usize, &mut StepClient, Duration) -> Vec<u8>) {
        self.step_each(|i, c, now| Some(input(i, c, now)));
    }

    /// [`Stepper::step_with`], where `None` sends no input this tick for that client (it
    /// still acknowledges what it received and sends its messages, as a client with no
    /// [`StepClient::input`] does): a client that stalls a frame, or one that only watches.
    pub fn step_each(&mut self, mut input: impl FnMut(usize, &mut StepClient, Duration) -> Option<Vec<u8>>) {
        if self.shut_down {
            return;
        }
        if !self.started {
            self.started = true;
            let worlds = self.worlds.of(WorldId::ENTRY);
            self.sim.guard(WorldFault::PanicInJoin, || self.world.started(WorldId::ENTRY, &worlds));
        }
        self.now += self.sim.dt();
        self.deliver_due();
        let now = self.now;
        for i in 0..self.clients.len() {
            let c = &mut self.clients[i];
            let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
            c.client.update(now, &mut wire);
            match input(i, c, now) {
                Some(input) => c.client.send_input(now, &input, &mut wire),
                None => c.client.send_without_input(now, &mut wire),
            }
            self.send_from_client(i, wire);
        }
        // Datagrams with no delay arrive within the same tick.
        self.deliver_due();
        self.take_requests();
        self.server_tick += 1;
        let tick = self.server_tick;

        // Each world that runs this tick, the entry world first, then by number.
        let mut sends: Vec<(PlayerId, Arc<View>, Option<u32>)> = Vec::new();
        let inputs = std::mem::take(&mut self.pending_inputs);
        let mut applied = std::mem::take(&mut self.applied);
        self.sim.set_next_tick(tick);
        let stepped = self.sim.step(&mut self.world, inputs, |i, _| *applied.entry(i.player).or_default() += 1);
        match stepped {
            Ok(stepped) => {
                let newest: BTreeMap<PlayerId, u32> = self.sim.applied_inputs().collect();
                self.after_step(WorldId::ENTRY, stepped, &newest, &mut sends);
            }
            Err(_) => {
                // The entry world stopped: every player is told why, as the server tells them,
                // and the server is failed (the other worlds run on, as their actors do).
                self.failure = Some(crate::server::failure_of(crate::server::ENTRY_WORLD_PART));
                self.applied = applied;
                let (exec, mut out) = self.parts();
                exec.remove_world(WorldId::ENTRY, "the world's code kept failing", &mut out);
                let done = out.finish();
                self.delivered(done);
                return;
            }
        }
        let ids: Vec<WorldId> = self.hosted.keys().copied().collect();
        for id in ids {
            let Some(h) = self.hosted.get_mut(&id) else { continue };
            if !tick.is_multiple_of(h.stride) {
                continue;
            }
            let inputs = std::mem::take(&mut h.pending);
            h.sim.set_next_tick(tick);
            let stepped = h.sim.step(&mut h.world, inputs, |i, _| *applied.entry(i.player).or_default() += 1);
            let newest: BTreeMap<PlayerId, u32> = h.sim.applied_inputs().collect();
            match stepped {
                Ok(stepped) => self.after_step(id, stepped, &newest, &mut sends),
                Err(_) => self.end_world(id, "the world's code kept failing", false),
            }
        }
        self.applied = applied;

        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let mut gone = Vec::new();
        let mut presence = Vec::new();
        let mut relevancy_faults = 0;
        // The newest view of this tick for each player (a later world's replaces an earlier).
        let sends: BTreeMap<PlayerId, (Arc<View>, Option<u32>)> =
            sends.into_iter().map(|(p, v, a)| (p, (v, a))).collect();
        let round = u64::from(self.server_tick);
        let mut drops = MessageDrops::default();
        let mut late_inputs = Vec::new();
        for (index, o) in self.sessions.iter_mut() {
            // As the socket actor once a second: a ticket a minute old is renewed.
            if renewal_due(o.value.ticket_at, now)
                && let Some(ticket) = self.tickets.mint(&o.value.holder, now)
            {
                o.value.ticket_at = now;
                o.value.session.send_notice(now, ticket, &mut wire);
            }
            // As the player actor at each wake-up: what its socket left first.
            let d = o.value.read(now, round, &mut wire, &mut late_inputs);
            drops.flood += d.flood;
            drops.too_large += d.too_large;
            drops.disconnected += d.disconnected;
            let rx = o.value.inlet.receive_half();
            let (heard, confirmed) = (rx.last_received(), rx.is_confirmed());
            let s = &mut o.value.session;
            s.confirm(confirmed);
            if let Some((view, applied)) = sends.get(&s.id()).cloned() {
                if s.on_snapshot(now, &view, applied, &mut wire).is_some_and(|sent| sent.relevancy_fixed) {
                    relevancy_faults += 1;
                }
                self.views.insert(s.id(), view);
            }
            match s.heartbeat(now, heard, &mut wire) {
                Some(Beat::Over(_)) => gone.push(index),
                Some(Beat::Away) => presence.push((s.id(), true)),
                Some(Beat::Back) => presence.push((s.id(), false)),
                None => {}
            }
        }
        self.count_message_drops(drops);
        for i in late_inputs {
            if let Some(q) = self.queue_of(i.player) {
                q.push(i);
            }
        }
        for _ in 0..relevancy_faults {
            self.sim.record(WorldFault::RelevancyOrder, "a relevancy list out of order; sorted");
        }
        for (p, away) in presence {
            self.presence(p, away);
        }
        for a in gone {
            self.drop_session(a);
        }
        self.send_from_server(wire);
    }

    /// What world `id` sent this tick reaches its players, as the broadcaster hands it out;
    /// its snapshot's views are collected in `sends` (player, view, newest applied input).
    fn after_step(
        &mut self,
        id: WorldId,
        stepped: Stepped,
        newest: &BTreeMap<PlayerId, u32>,
        sends: &mut Vec<(PlayerId, Arc<View>, Option<u32>)>,
    ) {
        // Worlds it started exist before its moves into them, as on the server.
        self.take_requests();
        let (exec, mut out) = self.parts();
        out.newest = newest.clone();
        // The tick's commands, carried out by the executor the broadcaster runs.
        let stop = exec.run(id, stepped.commands(), &mut out);
        let done = out.finish();
        sends.extend(self.delivered(done));
        if stop && id != WorldId::ENTRY {
            self.end_world(id, "the world stopped", true);
        }
    }

    /// Every player's session ends for `end`: each client is told why.
    fn close_all(&mut self, end: SessionEnd) {
        let now = self.now;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        for (_, o) in self.sessions.iter_mut() {
            o.value.close(now, end.clone(), &mut wire);
        }
        self.send_from_server(wire);
    }

    /// Shuts the server down as [`ServerHandle::shutdown`](crate::server::ServerHandle::shutdown)
    /// does: every client is told [`SessionEnd::ShuttingDown`], the stepper steps (up to the
    /// goodbye timeout, a second) until every client has answered, then every player still
    /// there leaves and each world's [`World::shutdown`] runs. Steps after it tick nothing.
    pub fn shutdown(&mut self) {
        self.close_all(SessionEnd::ShuttingDown);
        let grace = crate::server::cores::session::GOODBYE_TIMEOUT.as_secs_f64() / self.sim.dt().as_secs_f64();
        for _ in 0..=(grace.ceil() as u32) {
            if self.players() == 0 {
                break;
            }
            self.step();
        }
        self.sim.shutdown(&mut self.world);
        for h in self.hosted.values_mut() {
            h.sim.shutdown(&mut h.world);
        }
        self.shut_down = true;
    }

    /// Client messages dropped so far (past the per-tick limit, or too large), as the
    /// server counts them in `volley_client_messages_dropped_total`.
    pub fn message_drops(&self) -> MessageDrops {
        self.message_drops
    }

    /// What failed, if the server would be failed: the entry world stopped (its code kept
    /// failing), as [`ServerHandle::failure`](crate::server::ServerHandle::failure) says it.
    pub fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    /// Faults of the game's code the server survived so far, by kind, in every world (what
    /// the actor server counts in `volley_world_errors_total`).
    pub fn world_faults(&self) -> BTreeMap<WorldFault, u64> {
        let mut all = self.retired_faults.clone();
        let running = self.sim.faults().chain(self.hosted.values().flat_map(|h| h.sim.faults()));
        for (f, n) in running {
            *all.entry(f).or_default() += n;
        }
        all.retain(|_, n| *n > 0);
        all
    }

    /// Client `i` says goodbye (through its link, like any datagram); it sends nothing more.
    pub fn disconnect(&mut self, i: usize) {
        let now = self.now;
        let Some(c) = self.clients.get_mut(i) else { return };
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        c.client.disconnect(now, &mut wire);
        self.send_from_client(i, wire);
    }

    /// Datagrams from client `i` go out through its uplink.
    fn send_from_client(&mut self, i: usize, wire: Vec<(SocketAddr, Vec<u8>)>) {
        let from = self.clients[i].addr;
        for (to, bytes) in wire {
            let delay = self.clients[i].up.pass(self.now, bytes.len());
            self.post(from, to, bytes, delay);
        }
    }

    /// Steps `n` ticks.
    pub fn run(&mut self, n: u32) {
        for _ in 0..n {
            self.step();
        }
    }
}

/// A world with nothing in it: no schema, no entities, inputs ignored. For tests about
/// connections, the admin listener or a fleet, where the game does not matter.
///
/// ```
/// # async fn run() -> Result<(), volley::server::StartError> {
/// use volley::prelude::*;
/// let config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), [7; 32]);
/// let server = volley::server::start(config, volley::testing::EmptyWorld).await?;
/// # let _ = server; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyWorld;

impl World for EmptyWorld {
    fn schema(&self) -> Schema {
        Schema::default()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut crate::protocol::snapshot::SnapshotBuilder<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::quant::Vec2Q;
    use crate::protocol::snapshot::SnapshotBuilder;

    crate::replicated! {
        /// A player's dot.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Dot {
            /// Where it is.
            pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-10.0), glam::Vec2::splat(10.0), 0.01),
        }
    }

    /// One still dot per player.
    #[derive(Default)]
    struct Dots(Vec<PlayerId>);

    impl World for Dots {
        fn schema(&self) -> Schema {
            let mut s = Schema::new();
            s.register::<Dot>().expect("a fresh schema");
            s
        }
        fn join(&mut self, player: PlayerId) {
            self.0.push(player);
        }
        fn leave(&mut self, player: PlayerId) {
            self.0.retain(|p| *p != player);
        }
        fn input(&mut self, _: PlayerId, _: &[u8]) {}
        fn tick(&mut self, _: u32, _: Duration) {}
        fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
            for p in &self.0 {
                let _ = out.insert(*p, &Dot { position: glam::Vec2::ONE });
            }
        }
    }

    /// The actor server keeps a closing player's session until its actor has stopped, and a
    /// fan-out chain may pass it before then: it must send no snapshot after the goodbye.
    #[test]
    fn a_disconnected_session_sends_no_snapshot() {
        let mut stepper = Stepper::new(Dots::default(), 60, 4);
        stepper.add_client(LinkProfile::PERFECT);
        stepper.run(60);
        let now = stepper.now;
        let snap = |tick: u32| {
            let mut b = SnapshotBuilder::new(stepper.schema(), tick);
            stepper.world.snapshot(&mut b);
            Arc::new(b.finish_after(stepper.last_snapshot().map(|s| &**s)).unwrap())
        };
        let (next, after) = (snap(stepper.tick() + 1), snap(stepper.tick() + 2));
        let session = &mut stepper.sessions.iter_mut().next().unwrap().1.value.session;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let view = |s: Arc<WorldSnapshot>| View::single(s, Arc::new(crate::server::Everything));
        assert!(session.on_snapshot(now, &view(next), None, &mut wire).is_some(), "a connected player gets snapshots");
        wire.clear();
        session.close(now, SessionEnd::ShuttingDown, &mut wire);
        let told = wire.len();
        assert!(told > 0, "the goodbye went out");
        assert!(session.on_snapshot(now, &view(after), None, &mut wire).is_none());
        assert_eq!(wire.len(), told, "nothing after the disconnect packets");
    }
}
