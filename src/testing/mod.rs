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
use crate::protocol::netcode::server::{Endpoint, EndpointConfig, Handled, NewConnection};
use crate::protocol::netcode::token::{ConnectToken, TokenParams};
use crate::protocol::netcode::{Key, USER_DATA_BYTES};
use crate::protocol::scoreboard::{BoardSender, ScoreRow};
use crate::protocol::session::{PROTOCOL_VERSION, SessionEnd, SessionParams};
use crate::protocol::snapshot::{Predictor, Schema, SenderConfig, WorldSnapshot};
use crate::server::session::{Incoming, MessageDrops, PlayerSession, SessionSettings};
use crate::server::simulation::{Simulation, Stepped, TickInput};
use crate::server::{JoinInfo, PlayerId, World, WorldFault};
use crate::transport::conditioner::{LinkConditioner, LinkProfile};

const KEY: Key = [0x5a; 32];
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
}

/// An input the stepper's server took, for the next tick.
#[derive(Debug)]
struct StepInput {
    player: PlayerId,
    seq: u32,
    bytes: Vec<u8>,
    view: Option<ViewTime>,
    message: Option<(bytes::Bytes, bool)>,
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

/// A server running `W` and its clients, stepped one tick at a time.
pub struct Stepper<W: World> {
    /// The virtual Unix time.
    pub now: Duration,
    /// The world.
    pub world: W,
    /// The clients, in the order added.
    pub clients: Vec<StepClient>,
    /// Inputs applied, per player.
    pub applied: BTreeMap<PlayerId, u64>,
    /// The tick step, the same as the world actor's.
    sim: Simulation,
    /// What each player's session starts with, as the socket actor's.
    settings: SessionSettings,
    /// The server's endpoint, the same as the socket actor's; it keeps each player's session.
    sessions: Endpoint<PlayerSession>,
    in_flight: Vec<InFlight>,
    order: u64,
    pending_inputs: Vec<StepInput>,
    /// Client messages dropped (flood, too large), as the server counts them.
    message_drops: MessageDrops,
    /// The scoreboard's updates, when the world has one (as the broadcaster's).
    board: Option<BoardSender>,
}

impl<W: World> Stepper<W> {
    /// A server for `max_players` at `tick_rate_hz`.
    pub fn new(world: W, tick_rate_hz: u16, max_players: usize) -> Self {
        let now = Duration::from_secs(1_800_000_000);
        let netcode = EndpointConfig::new(crate::DEFAULT_PROTOCOL_ID, KEY, vec![SERVER], max_players);
        let schema = Arc::new(world.schema());
        let relevancy = world.relevancy();
        let hz = tick_rate_hz.max(1);
        let columns = world.scoreboard_columns();
        let board = (!columns.is_empty()).then(|| BoardSender::new(columns));
        Self {
            now,
            clients: Vec::new(),
            applied: BTreeMap::new(),
            sim: Simulation::new(schema.clone(), Duration::from_secs_f64(1.0 / f64::from(hz)))
                .with_scoreboard(board.is_some()),
            board,
            sessions: Endpoint::with_challenge_key(netcode, [0x77; 32], now),
            in_flight: Vec::new(),
            order: 0,
            pending_inputs: Vec::new(),
            message_drops: MessageDrops::default(),
            settings: SessionSettings {
                schema,
                relevancy,
                params: SessionParams {
                    protocol_version: PROTOCOL_VERSION,
                    tick_rate_hz: hz,
                    snapshot_rate_hz: hz,
                    max_payload_bytes: 1200,
                },
                snapshot_every: 1,
                sender: SenderConfig::default(),
                predictor: None,
            },
            world,
        }
    }

    /// How players' snapshots are encoded (for example predicted: `SenderConfig { predict:
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

    /// Snapshots every `every` ticks (the session tells clients the rate), for the players
    /// that connect from now on.
    pub fn with_snapshots_every(mut self, every: u32) -> Self {
        let s = &mut self.settings;
        s.snapshot_every = every.max(1);
        s.params.snapshot_rate_hz = (s.params.tick_rate_hz / s.snapshot_every as u16).max(1);
        self
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
        let token = ConnectToken::generate_with(&params, &KEY, [i as u8; 24], [i as u8 ^ 1; 32], [i as u8 ^ 2; 32])
            .expect("one server address");
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
        });
        i
    }

    /// Players connected.
    pub fn players(&self) -> usize {
        self.sessions.connected_clients()
    }

    /// Ticks run.
    pub fn tick(&self) -> u32 {
        self.sim.tick()
    }

    /// The world snapshot of the last tick.
    pub fn last_snapshot(&self) -> Option<&Arc<WorldSnapshot>> {
        self.sim.latest()
    }

    /// The schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.settings.schema
    }

    fn post(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>, delay: Option<Duration>) {
        if let Some(d) = delay {
            self.order += 1;
            self.in_flight.push(InFlight { at: self.now + d, order: self.order, from, to, bytes });
        }
    }

    fn send_from_server(&mut self, wire: Vec<(SocketAddr, Vec<u8>)>) {
        for (to, bytes) in wire {
            let delay = self.clients.iter_mut().find(|c| c.addr == to).map(|c| c.down.decide());
            if let Some(delay) = delay {
                self.post(SERVER, to, bytes, delay);
            }
        }
    }

    fn server_receives(&mut self, from: SocketAddr, mut bytes: Vec<u8>) {
        let now = self.now;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        match self.sessions.handle(now, from, &mut bytes, &mut wire) {
            Handled::Route(index) => {
                let Some(session) = self.sessions.get_mut(index).map(|o| &mut o.value) else { return };
                let id = session.id();
                let gone = match session.on_datagram(now, &mut bytes, &mut wire) {
                    Incoming::Inputs(inputs) => {
                        self.pending_inputs.extend(inputs.as_slice().iter().map(|i| StepInput {
                            player: id,
                            seq: i.seq,
                            bytes: i.bytes.to_vec(),
                            view: i.view,
                            message: None,
                        }));
                        false
                    }
                    Incoming::Disconnected => true,
                    Incoming::Nothing | Incoming::Dropped(_) => false,
                };
                // The client's messages for the world, bounded per tick as on the server.
                let pending = &mut self.pending_inputs;
                let drops = session.take_messages(now, u64::from(self.sim.tick()), &mut wire, |data, reliable| {
                    pending.push(StepInput {
                        player: id,
                        seq: 0,
                        bytes: Vec::new(),
                        view: None,
                        message: Some((data, reliable)),
                    });
                });
                self.message_drops.flood += drops.flood;
                self.message_drops.too_large += drops.too_large;
                self.message_drops.disconnected += drops.disconnected;
                if gone {
                    self.drop_session(index);
                }
            }
            Handled::Connected(new) => {
                let NewConnection { connection, reservation } = *new;
                let who = JoinInfo { client_id: connection.client_id(), user_data: *connection.user_data() };
                let slot = connection.client_index();
                let session = self.settings.open(connection);
                self.sessions.attach(reservation, session);
                self.sim.join(&mut self.world, slot, &who);
            }
            Handled::Handled | Handled::Dropped(_) => {}
        }
        self.send_from_server(wire);
    }

    fn drop_session(&mut self, index: usize) {
        if let Some(o) = self.sessions.remove(index) {
            self.sim.leave(&mut self.world, o.value.id());
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

    /// Advances one tick: deliver what arrived, clients send, the world ticks, every player
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

    /// [`Stepper::step_with`], where `None` sends no input (as [`StepClient::input`]).
    fn step_each(&mut self, mut input: impl FnMut(usize, &mut StepClient, Duration) -> Option<Vec<u8>>) {
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

        let applied = &mut self.applied;
        let inputs = std::mem::take(&mut self.pending_inputs);
        let stepped = self.sim.step(&mut self.world, inputs, |i, _| *applied.entry(i.player).or_default() += 1);
        let Stepped { snapshot, outbox, board } = match stepped {
            Ok(stepped) => stepped,
            Err(_) => {
                // The world stopped: every player is told why, as the server tells them.
                self.close_all(SessionEnd::WorldStopped);
                return;
            }
        };
        let (messages, kicks) = outbox.into_parts();
        for (to, data, reliable) in messages {
            for (_, o) in self.sessions.iter_mut() {
                let s = &mut o.value;
                if matches!(to, crate::server::Audience::All) || to == crate::server::Audience::Player(s.id()) {
                    let _ = s.queue_message(data.clone(), reliable);
                }
            }
        }
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        if let (Some(rows), Some(sender)) = (board, &mut self.board) {
            // Each row's ping from its session, as the broadcaster reads it from the player's.
            let pings: BTreeMap<PlayerId, u16> = self
                .sessions
                .iter()
                .map(|(_, o)| {
                    (o.value.id(), o.value.channel().link().rtt().as_millis().min(u128::from(u16::MAX)) as u16)
                })
                .collect();
            let rows = rows.into_iter().map(|r| ScoreRow { ping_ms: pings.get(&r.player).copied().unwrap_or(0), ..r });
            let updates = sender.update(rows);
            for (_, o) in self.sessions.iter_mut() {
                o.value.queue_board(now, &updates, &mut wire);
            }
        }
        for (player, text) in kicks {
            if let Some((_, o)) = self.sessions.iter_mut().find(|(_, o)| o.value.id() == player) {
                o.value.close(now, SessionEnd::Kicked(text), &mut wire);
            }
        }
        let mut gone = Vec::new();
        let mut relevancy_faults = 0;
        for (index, o) in self.sessions.iter_mut() {
            let s = &mut o.value;
            let applied = self.sim.applied_input(s.id());
            if let Some(snapshot) = &snapshot
                && s.on_snapshot(now, snapshot, applied, &mut wire).is_some_and(|sent| sent.relevancy_fixed)
            {
                relevancy_faults += 1;
            }
            if s.heartbeat(now, &mut wire).is_some() {
                gone.push(index);
            }
        }
        for _ in 0..relevancy_faults {
            self.sim.record(WorldFault::RelevancyOrder, "a relevancy list out of order; sorted");
        }
        for a in gone {
            self.drop_session(a);
        }
        self.send_from_server(wire);
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
    /// there leaves and [`World::shutdown`] runs. Steps after it tick nothing.
    pub fn shutdown(&mut self) {
        self.close_all(SessionEnd::ShuttingDown);
        let grace = crate::server::session::GOODBYE_TIMEOUT.as_secs_f64() / self.sim.dt().as_secs_f64();
        for _ in 0..=(grace.ceil() as u32) {
            if self.players() == 0 {
                break;
            }
            self.step();
        }
        self.sim.shutdown(&mut self.world);
    }

    /// Client messages dropped so far (past the per-tick limit, or too large), as the
    /// server counts them in `volley_client_messages_dropped_total`.
    pub fn message_drops(&self) -> MessageDrops {
        self.message_drops
    }

    /// Faults of the game's code the server survived so far, by kind (what the actor server
    /// counts in `volley_world_errors_total`).
    pub fn world_faults(&self) -> BTreeMap<WorldFault, u64> {
        self.sim.faults().filter(|(_, n)| *n > 0).collect()
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
            let delay = self.clients[i].up.decide();
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
        let session = &mut stepper.sessions.iter_mut().next().unwrap().1.value;
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        assert!(session.on_snapshot(now, &next, None, &mut wire).is_some(), "a connected player gets snapshots");
        wire.clear();
        session.close(now, SessionEnd::ShuttingDown, &mut wire);
        let told = wire.len();
        assert!(told > 0, "the goodbye went out");
        assert!(session.on_snapshot(now, &after, None, &mut wire).is_none());
        assert_eq!(wire.len(), told, "nothing after the disconnect packets");
    }
}
