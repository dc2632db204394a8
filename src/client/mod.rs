//! The client library: the same protocol core as the server, driven by the game's loop.
//!
//! [`GameClient`] is sans-IO: feed it datagrams and the time, and it hands datagrams to a
//! [`Transmit`] sink. [`udp`] drives one over a real UDP socket from a task of its own;
//! [`polled`] from the game's frame loop.

mod carrier;
mod link;
pub mod playback;
pub mod polled;
pub mod predict;
pub mod udp;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::input::{MAX_PACKET_INPUTS, REDUNDANT_INPUTS, ViewTime, write_input_packet};
use crate::protocol::netcode::client::{Client as NetcodeClient, ClientState};
use crate::protocol::netcode::token::ConnectToken;
use crate::protocol::netcode::{MAX_PAYLOAD_BYTES, Transmit};
use crate::protocol::reliability::channel::SYSTEM_FRAME_TAG;
use crate::protocol::reliability::{Channel, ChannelConfig};
use crate::protocol::scoreboard::Scoreboard;
use crate::protocol::session::{CONTROL_FRAME, ClientSession, Control, MAX_CONTROL_BYTES, SessionEnd, SessionParams};
use crate::protocol::snapshot::{EntityId, Replicate, Schema, SnapshotReceiver, WorldSnapshot};
use crate::protocol::system::{Pace, Redirect, SpectatorStatus, Ticket, WorldNotice};
use carrier::Carrier;
pub use carrier::RELAY_LEAVE;
pub use playback::{Playback, PlaybackClock};

/// What a game shows about its connection (the data for a lagometer).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientStats {
    /// Smoothed round trip.
    pub rtt: Duration,
    /// Round-trip variation.
    pub jitter: Duration,
    /// Recent packet loss, 0 to 1.
    pub loss: f64,
    /// Snapshots decoded.
    pub snapshots: u64,
    /// Snapshots that could not be decoded.
    pub snapshot_errors: u64,
    /// Bytes of the last snapshot.
    pub last_snapshot_bytes: usize,
    /// Packets received.
    pub packets_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Frames drawn between two snapshots.
    pub frames_interpolated: u64,
    /// Frames drawn past the newest snapshot.
    pub frames_extrapolated: u64,
    /// Measured snapshot arrival jitter.
    pub arrival_jitter: Duration,
    /// Current render delay, in ticks.
    pub render_delay_ticks: f64,
    /// Entities shown at their newest state instead of going back to an older one: the
    /// server left them out of a snapshot (its budget was full, or it was not their turn,
    /// [`Interest::every`](crate::protocol::snapshot::Interest::every)), and what was shown
    /// before came in a newer packet than their decoded state did.
    pub entities_held: u64,
}

/// What view a client reports with each input (the server's lag compensation rewinds its
/// world to it when judging that input).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ViewMode {
    /// What [`GameClient::playback`] gives at the time the input is sent: for a game that
    /// draws the interpolated playback (the default).
    #[default]
    Playback,
    /// The newest snapshot: for a game (or bot) that acts on [`GameClient::latest`].
    Newest,
    /// No view: the server judges the input against its present.
    Off,
}

/// Where a client's session is, for a game to show ([`GameClient::link_status`]): what to
/// draw over the game while it connects, while it comes back after a network blip, and when it
/// is over.
///
/// ```
/// # use volley::prelude::*;
/// # fn overlay(client: &GameClient, resumes_seen: &mut u32) {
/// match client.link_status() {
///     LinkStatus::Connecting => println!("connecting…"),
///     LinkStatus::Resuming => println!("connection lost, reconnecting…"),
///     LinkStatus::Ready if client.resumes() > *resumes_seen => {
///         *resumes_seen = client.resumes();
///         println!("back in the game");
///     }
///     LinkStatus::Ready => {}
///     LinkStatus::Ended(why) => println!("disconnected: {why}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    /// Connecting for the first time (the handshake, then the session's Hello).
    Connecting,
    /// Connected and the session agreed: inputs go, snapshots come. After a resume it is
    /// `Ready` again, the same player; [`GameClient::resumes`] counts the resumes.
    Ready,
    /// The connection dropped (the server silent for
    /// [`RESUME_AFTER_SILENCE`], or the driver moved to a new address) and the client is
    /// resuming its session with its resume ticket, until the server's grace runs out. The
    /// game keeps its state; inputs made meanwhile go when it is back.
    Resuming,
    /// The session is over, for this reason ([`GameClient::ended`]).
    Ended(SessionEnd),
}

/// A connection to a volley server.
#[derive(Debug)]
pub struct GameClient {
    carrier: Carrier,
    session: ClientSession,
    channel: Channel,
    snapshots: SnapshotReceiver,
    /// The last inputs sent, newest first, with the view each was made with.
    inputs: VecDeque<(Vec<u8>, Option<ViewTime>)>,
    input_seq: u32,
    view_mode: ViewMode,
    stats: ClientStats,
    scratch: Vec<u8>,
    clock: PlaybackClock,
    /// Per snapshot tick (ring of 64): the newest of our inputs the server had applied.
    applied: [Option<(u32, u32)>; 64],
    /// Why the session ended, when the server said (its goodbye or its refusal) or this
    /// client disconnected.
    ended: Option<SessionEnd>,
    /// The server said goodbye (or refused): answer with the netcode disconnect at the next
    /// [`GameClient::update`].
    leaving: bool,
    /// The framework's channel (the scoreboard), once the server has used it, and whether
    /// an acknowledgement on it is due.
    system: Option<Box<Channel>>,
    system_ack_due: bool,
    scoreboard: Scoreboard,
    /// The board of the last world with one that the player left.
    previous_scoreboard: Scoreboard,
    /// Where the server last said the player is.
    world: Option<WorldNotice>,
    /// Every notice not yet taken ([`GameClient::next_notice`]), oldest first.
    notices: VecDeque<WorldNotice>,
    /// Where the replay or spectators' world it is in stands, if it is in one.
    spectator: Option<SpectatorStatus>,
    /// The protocol version its hello claims (tests make an old client with it).
    protocol_version: u16,
    /// A redirect to another zone's server, received and not yet followed.
    redirect: Option<Redirect>,
    /// The server's [`Pace`]: one input packet in this many inputs (1: every one).
    pace: u8,
    /// The most inputs the server reads in a packet (its [`Pace`] says).
    pace_inputs: u8,
    /// Inputs (or, watching, frames) since the last packet sent.
    unsent: u8,
    /// The inputs sent lately, oldest first, with their sequence numbers (at most
    /// [`REPLAY_INPUTS`]): those the old zone had not applied go again to the new one.
    sent: VecDeque<(u32, Vec<u8>)>,
    /// Moving to another zone's server: inputs wait here (oldest first) until it is
    /// connected, then go first.
    replay: Option<VecDeque<(u32, Vec<u8>)>>,
    /// The catch-up's pace: when its current server tick's worth of time began, and the
    /// inputs sent in it (at most [`CATCH_UP_INPUTS`], however many frames fall in it).
    catch_up: (Duration, usize),
    /// Redirects followed.
    moves: u32,
    /// The newest resume ticket the server sent (a connect token for this client's id), and
    /// the sessions resumed with one so far.
    ticket: Option<Vec<u8>>,
    resumes: u32,
    /// How long the server keeps this client's session once it no longer hears it (the
    /// newest ticket says; none before one): a resume is tried until then.
    grace: Duration,
    /// The ticket a resume under way connects with (tried again, from the same address, when
    /// a handshake gets no answer before the deadline).
    resume_token: Option<Vec<u8>>,
    /// Resuming: a handshake with a ticket is under way, and when it gives up (the old
    /// connection's timeout after the server was last heard: a server that is gone reads
    /// [`SessionEnd::TimedOut`] as late as it would have without the attempt).
    resuming: Option<Duration>,
    /// The old zone's view while the new zone's cannot be played yet (after a redirect).
    before: Option<Box<Before>>,
    /// What is shown of a decoded snapshot where it differs from it (by tick modulo 64):
    /// entities the server left out of it keep the newest state shown
    /// ([`hold_left_out`](crate::protocol::snapshot::receiver::hold_left_out)).
    shown: Vec<Option<crate::protocol::snapshot::receiver::Shown>>,
}

/// What a client drew from before it followed a redirect: the old server's newest snapshots
/// and its playback clock, so that [`GameClient::entities`] carries the old view on
/// (extrapolated, then held) until the new server's snapshots can be played.
#[derive(Debug)]
struct Before {
    clock: PlaybackClock,
    /// The newest two snapshots, newest first.
    snapshots: Vec<WorldSnapshot>,
}

impl Before {
    fn get(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.snapshots.iter().find(|s| s.tick() == tick)
    }
}

/// Inputs a client keeps to send again after a redirect (two seconds at 60 Hz): a move that
/// takes longer than that loses the oldest.
pub const REPLAY_INPUTS: usize = 120;

/// Inputs a client sends a server tick while it catches up after a redirect or a resume (half
/// what a server takes in one tick, so two ticks' worth arriving in one still fit).
pub const CATCH_UP_INPUTS: usize = 16;

/// Silence from the server after which a connected client resumes its session with its
/// ticket ([`GameClient::resume`]): the server sends at least ten packets a second, so a
/// second of nothing means its packets no longer reach this client.
pub const RESUME_AFTER_SILENCE: Duration = Duration::from_secs(1);

/// The longest grace a server's ticket is believed for (a hostile server's cannot keep a
/// client resuming for ever).
const MAX_GRACE: Duration = Duration::from_secs(60);

/// The least time a resume attempt is given (a client that noticed its silence late still
/// gets a few handshake round trips).
pub const RESUME_AT_LEAST: Duration = Duration::from_secs(2);

/// World notices a client keeps until they are taken ([`GameClient::next_notice`]); older ones
/// give way.
pub const MAX_NOTICES: usize = 64;

/// Sends through the netcode client; collects failures silently (they are counted nowhere
/// but cannot happen for sizes we control).
struct Via<'a, T: Transmit> {
    carrier: &'a mut Carrier,
    now: Duration,
    tx: &'a mut T,
}

impl<T: Transmit> Via<'_, T> {
    fn payload(&mut self, bytes: &[u8]) {
        self.carrier.send_payload(self.now, bytes, self.tx);
    }
}

impl GameClient {
    /// A client that starts connecting with `token` now.
    pub fn new(token: ConnectToken, schema: Arc<Schema>, now: Duration) -> Self {
        let mut netcode = NetcodeClient::new(token, now);
        netcode.connect(now);
        Self::with_carrier(Carrier::Netcode(netcode), schema)
    }

    /// A client whose connection a relay makes for it: the WebTransport client of
    /// `volley-web` gives the connect token to the server's relay, which is the server's
    /// netcode client, and QUIC encrypts. Everything above the connection is the same code as
    /// [`GameClient::new`]'s: the session, its channels, inputs, snapshots and framework
    /// messages. The payloads it hands to the [`Transmit`] sink go to `relay` as they are
    /// (each one datagram for the relay), and the shell hands it the relay's payloads with
    /// [`GameClient::receive`], tells it when the relay connected
    /// ([`GameClient::relay_connected`]) and when the connection ended
    /// ([`GameClient::relay_ended`]). [`GameClient::disconnect`] sends the one-byte
    /// [`RELAY_LEAVE`].
    ///
    /// A relayed client neither resumes by itself nor follows a redirect: its shell reconnects
    /// (with [`GameClient::ticket`] as the token, to resume), and a redirect ends it with
    /// [`SessionEnd::Moved`].
    pub fn relayed(relay: SocketAddr, schema: Arc<Schema>, now: Duration) -> Self {
        Self::with_carrier(Carrier::relayed(relay, now), schema)
    }

    /// The relay connected ([`GameClient::relayed`]); the server gave this client the slot
    /// `client_index`. The session's hello goes at the next [`GameClient::update`].
    pub fn relay_connected(&mut self, client_index: u32, now: Duration) {
        self.carrier.relay_connected(client_index, now);
    }

    /// The relay's connection ended ([`GameClient::relayed`]), in this netcode state (say
    /// [`ClientState::ConnectionTimedOut`] when the connection was lost,
    /// [`ClientState::Disconnected`] when the relay closed it): [`GameClient::ended`] then
    /// says why, unless the server said so first.
    pub fn relay_ended(&mut self, state: ClientState) {
        self.carrier.relay_ended(state);
    }

    fn with_carrier(carrier: Carrier, schema: Arc<Schema>) -> Self {
        Self {
            carrier,
            session: ClientSession::default(),
            channel: Channel::new(ChannelConfig::default()),
            snapshots: SnapshotReceiver::new(schema, 64),
            inputs: VecDeque::with_capacity(REDUNDANT_INPUTS),
            input_seq: 0,
            view_mode: ViewMode::default(),
            stats: ClientStats::default(),
            scratch: Vec::with_capacity(MAX_PAYLOAD_BYTES),
            clock: PlaybackClock::new(60, 60),
            applied: [None; 64],
            ended: None,
            leaving: false,
            system: None,
            system_ack_due: false,
            scoreboard: Scoreboard::default(),
            previous_scoreboard: Scoreboard::default(),
            world: None,
            notices: VecDeque::new(),
            spectator: None,
            protocol_version: crate::protocol::session::PROTOCOL_VERSION,
            redirect: None,
            pace: 1,
            pace_inputs: REDUNDANT_INPUTS as u8,
            unsent: 0,
            sent: VecDeque::new(),
            replay: None,
            catch_up: (Duration::ZERO, 0),
            moves: 0,
            ticket: None,
            grace: Duration::ZERO,
            resume_token: None,
            resumes: 0,
            resuming: None,
            before: None,
            shown: (0..64).map(|_| None).collect(),
        }
    }

    /// How many times this client moved to another zone's server (a
    /// [`Redirect`]: the player was handed over, see
    /// [`ZoneExit::hand_off`](crate::server::extensions::zone::ZoneExit::hand_off)). The library follows a redirect
    /// by itself: it connects to the new server with the token it was sent and sends again,
    /// first, every input the old server had not applied, and the inputs the game makes
    /// while it connects. Snapshots start again from the new server's first (entity ids are
    /// the new server's; a game that keys its drawing by a game id of its own draws across).
    pub fn moves(&self) -> u32 {
        self.moves
    }

    /// Follows a redirect: leaves the old server, connects to the new one with the token.
    fn follow(&mut self, now: Duration, r: Redirect, tx: &mut impl Transmit) {
        if self.carrier.is_relayed() {
            // Its shell connected it; another server's web address is not in a redirect.
            self.ended = Some(SessionEnd::Moved);
            self.carrier.disconnect(now, tx);
            return;
        }
        let token = match ConnectToken::from_bytes(&r.token) {
            Ok(t) => t,
            Err(_) => {
                self.ended = Some(SessionEnd::InvalidToken);
                self.leaving = true;
                return;
            }
        };
        self.carrier.disconnect(now, tx);
        // A client for the new server, as new, keeping what is the game's or the player's:
        // the decoder's predictor (its snapshots forgotten: the new server's ticks are its
        // own), the view mode, the figures, the input numbering and the moves.
        let schema = self.snapshots.schema().clone();
        // The old view, to draw from until the new one plays.
        let newest = self.snapshots.newest_tick();
        let kept: Vec<WorldSnapshot> = newest
            .map(|n| (0..64u32).filter_map(|k| self.shown(n.wrapping_sub(k)).cloned()).take(2).collect())
            .unwrap_or_default();
        let before = (!kept.is_empty()).then(|| Box::new(Before { clock: self.clock.clone(), snapshots: kept }));
        let mut snapshots = std::mem::replace(&mut self.snapshots, SnapshotReceiver::new(schema.clone(), 2));
        snapshots.forget();
        let mut fresh = GameClient::new(token, schema, now);
        fresh.snapshots = snapshots;
        fresh.clock.set_max_extrapolation(self.clock.max_extrapolation());
        fresh.view_mode = self.view_mode;
        fresh.stats = self.stats;
        fresh.protocol_version = self.protocol_version;
        fresh.input_seq = self.input_seq;
        fresh.moves = self.moves + 1;
        fresh.before = before;
        // Every input the old zone did not apply goes to the new one, in order.
        let after = r.last_applied;
        let unapplied =
            self.sent.drain(..).filter(|(seq, _)| after.is_none_or(|a| seq.wrapping_sub(a).wrapping_sub(1) < 1 << 31));
        fresh.replay = Some(unapplied.collect());
        *self = fresh;
    }

    /// Connects again with the newest resume ticket the server sent, keeping the session:
    /// the channels, the snapshots and the playback, the inputs (those the server had not
    /// applied go again, first, with those made meanwhile), the world and the board. The server
    /// recognises its ticket and resumes the same player on the new connection, wherever this
    /// client's packets now come from. [`GameClient::update`] does this by itself after
    /// [`RESUME_AFTER_SILENCE`] without a word from the server; a driver that knows its
    /// address changed (a new socket) calls it at once. Returns whether there was a ticket to
    /// resume with (a client without one, or whose session is over, does nothing).
    pub fn resume(&mut self, now: Duration) -> bool {
        if self.ended.is_some()
            || self.leaving
            || self.carrier.is_relayed()
            || self.resuming.is_some() && !self.carrier.is_connected()
        {
            return false;
        }
        let Some(ticket) = self.ticket.take() else { return false };
        let Ok(token) = ConnectToken::from_bytes(&ticket) else { return false };
        // The server keeps the session for its grace after it last heard this client (about
        // when this client last heard it), and at least for the connection's timeout.
        let deadline = match self.carrier.timeout() {
            Some(t) if self.carrier.is_connected() => self.carrier.last_received() + t.max(self.grace),
            Some(t) => now + t.max(self.grace),
            None => Duration::MAX,
        };
        let mut netcode = NetcodeClient::new(token, now);
        netcode.connect(now);
        // No disconnect on the old connection: the server would end the session.
        self.carrier = Carrier::Netcode(netcode);
        self.resume_token = Some(ticket);
        self.resuming = Some(deadline.max(now + RESUME_AT_LEAST));
        // Inputs wait for the new connection, in order, from the first the server had not
        // applied (its de-duplication drops any it had after all).
        if self.replay.is_none() {
            let newest = self.snapshots.newest_tick().and_then(|t| self.applied_input(t));
            let unapplied = self
                .sent
                .drain(..)
                .filter(|(seq, _)| newest.is_none_or(|a| seq.wrapping_sub(a).wrapping_sub(1) < 1 << 31));
            self.replay = Some(unapplied.collect());
        }
        true
    }

    /// Sessions this client resumed on a new connection with a resume ticket
    /// ([`GameClient::resume`]).
    pub fn resumes(&self) -> u32 {
        self.resumes
    }

    /// Whether it is resuming its session on a new connection now (a handshake with its ticket
    /// under way).
    pub fn is_resuming(&self) -> bool {
        self.resuming.is_some()
    }

    /// The newest resume ticket, to keep where a restart of this program finds it: a connect
    /// token for this client's own id, good for one handshake within two minutes of when the
    /// server sent it (it sends a new one every minute). A program that starts again connects
    /// with it as with any token (`ConnectToken::from_bytes`, then [`GameClient::new`]) and
    /// is the same player again, if the server still keeps its session (within its resume
    /// grace): the same id, world, team and score; its first snapshot is whole, and what the
    /// old program had not acknowledged is gone with it. Keep it as you would a password: whoever
    /// holds it can take this player's place until it expires.
    ///
    /// ```no_run
    /// # use volley::client::GameClient;
    /// # use volley::protocol::netcode::token::ConnectToken;
    /// # fn f(client: &GameClient, schema: std::sync::Arc<volley::protocol::snapshot::Schema>, now: std::time::Duration) {
    /// if let Some(ticket) = client.ticket() {
    ///     std::fs::write("ticket.bin", ticket).ok();
    /// }
    /// // ... the program crashes and starts again:
    /// let saved = std::fs::read("ticket.bin").unwrap();
    /// let again = GameClient::new(ConnectToken::from_bytes(&saved).unwrap(), schema, now);
    /// # }
    /// ```
    pub fn ticket(&self) -> Option<&[u8]> {
        self.ticket.as_deref()
    }

    /// Whether it holds a resume ticket (the server sends one soon after connecting, and a new
    /// one every minute and after each resume).
    pub fn has_ticket(&self) -> bool {
        self.ticket.is_some()
    }

    /// Sends the oldest of the inputs waiting since a redirect or a resume, at most
    /// [`CATCH_UP_INPUTS`] a server tick, [`REDUNDANT_INPUTS`] a packet: the server takes at
    /// most 32 new inputs in a tick, so a backlog goes in over a few ticks rather than in one
    /// burst it would cut.
    /// Once none waits, inputs go the ordinary way again.
    fn send_replay(&mut self, now: Duration, tx: &mut impl Transmit) {
        let Some(replay) = &mut self.replay else { return };
        // At most CATCH_UP_INPUTS a server tick of time, not a frame: frames that bunch (a
        // loaded machine runs three in a moment) must not bunch the backlog into one tick.
        let tick = self
            .session
            .params()
            .map_or(Duration::from_millis(16), |p| Duration::from_secs_f64(1.0 / f64::from(p.tick_rate_hz.max(1))));
        if now.saturating_sub(self.catch_up.0) >= tick {
            self.catch_up = (now, 0);
        }
        let n = replay.len().min(CATCH_UP_INPUTS - self.catch_up.1.min(CATCH_UP_INPUTS));
        if n == 0 && !replay.is_empty() {
            return;
        }
        self.catch_up.1 += n;
        let items: Vec<(u32, Vec<u8>)> = replay.drain(..n).collect();
        if replay.is_empty() {
            self.replay = None;
            // The ordinary packets' window of inputs starts afresh after the backlog.
            self.inputs.clear();
        }
        for chunk in items.chunks(REDUNDANT_INPUTS) {
            let Some((newest, _)) = chunk.last() else { continue };
            let refs: Vec<(&[u8], Option<ViewTime>)> = chunk.iter().rev().map(|(_, b)| (&b[..], None)).collect();
            let mut state = std::mem::take(&mut self.scratch);
            write_input_packet(&mut state, self.snapshots.newest_tick(), *newest, &refs);
            let mut out = [0u8; MAX_PAYLOAD_BYTES];
            let n = self.channel.build_packet(now, Some(&state), &mut out);
            self.scratch = state;
            Via { carrier: &mut self.carrier, now, tx }.payload(&out[..n]);
        }
        for (seq, bytes) in items {
            self.remember(seq, &bytes);
        }
    }

    /// Keeps an input sent, for a redirect.
    fn remember(&mut self, seq: u32, input: &[u8]) {
        let mut kept = if self.sent.len() >= REPLAY_INPUTS { self.sent.pop_front().map(|(_, b)| b) } else { None }
            .unwrap_or_default();
        kept.clear();
        kept.extend_from_slice(input);
        self.sent.push_back((seq, kept));
    }

    /// Claims another protocol version in its hello, as a client of another release would
    /// (for tests of the server's refusal).
    #[doc(hidden)]
    pub fn claim_protocol_version(&mut self, version: u16) {
        self.protocol_version = version;
    }

    /// The scoreboard, when the game has the built-in one
    /// ([`World::scoreboard_columns`](crate::server::World::scoreboard_columns)): every
    /// player's name, the world's score fields and the player's ping, updated twice a
    /// second. Empty until the first board arrives.
    pub fn scoreboard(&self) -> &Scoreboard {
        &self.scoreboard
    }

    /// The scoreboard of the last world with one that the player left, as it stood when it
    /// left: a match's final board, once the player is back in the lobby. The server sends
    /// a world's board to a player at once when the world moves or kicks it, or stops
    /// ([`Outbox::move_to`], [`Outbox::kick`], [`Outbox::stop_world`]; a move from outside
    /// the world, [`Worlds::move_player`], takes the board of at most half a second
    /// before). Empty until then.
    ///
    /// [`Outbox::move_to`]: crate::server::Outbox::move_to
    /// [`Outbox::kick`]: crate::server::Outbox::kick
    /// [`Outbox::stop_world`]: crate::server::Outbox::stop_world
    /// [`Worlds::move_player`]: crate::server::Worlds::move_player
    pub fn previous_scoreboard(&self) -> &Scoreboard {
        &self.previous_scoreboard
    }

    /// The world this client's player is in, as the server last said ([`WorldNotice`]: its
    /// number, its kind, and why it is there: it connected, the game moved it, or its world
    /// stopped). `None` until the first notice arrives, just after connecting. Entity ids
    /// from world `n` other than world 0 arrive as
    /// [`merged_id`](crate::protocol::snapshot::world::merged_id)`(n, local)`.
    pub fn world(&self) -> Option<&WorldNotice> {
        self.world.as_ref()
    }

    /// The next world notice not yet taken, oldest first: every world this client's player
    /// entered, in order, even when several arrive between two frames (a match that ends as
    /// it starts, a move and a move back), where [`GameClient::world`] shows only the newest.
    /// The last [`MAX_NOTICES`] are kept.
    pub fn next_notice(&mut self) -> Option<WorldNotice> {
        self.notices.pop_front()
    }

    /// In a replay or a delayed spectators' world: the latest playback status (which
    /// recorded tick each snapshot shows, speed, whom it follows); `None` elsewhere. Steer it
    /// by sending a [`SpectatorControl`](crate::protocol::system::SpectatorControl) as a message.
    pub fn spectator(&self) -> Option<&SpectatorStatus> {
        self.spectator.as_ref()
    }

    /// Where the session is, in one value: connecting, ready, resuming after a drop, or ended
    /// with the reason ([`LinkStatus`]).
    pub fn link_status(&self) -> LinkStatus {
        if let Some(why) = self.ended() {
            LinkStatus::Ended(why)
        } else if self.is_resuming() {
            LinkStatus::Resuming
        } else if self.is_ready() {
            LinkStatus::Ready
        } else {
            LinkStatus::Connecting
        }
    }

    /// The connection state (netcode's, with its error states).
    pub fn state(&self) -> ClientState {
        self.carrier.state()
    }

    /// Connected and the session agreed.
    pub fn is_ready(&self) -> bool {
        self.carrier.is_connected() && self.session.params().is_some()
    }

    /// The session parameters, once agreed.
    pub fn session(&self) -> Option<SessionParams> {
        self.session.params()
    }

    /// The server's address.
    pub fn server_addr(&self) -> Option<SocketAddr> {
        self.carrier.server_addr()
    }

    /// The slot the server gave us (our player id, as the world knows it), once connected.
    pub fn client_index(&self) -> Option<u32> {
        self.carrier.is_connected().then(|| self.carrier.client_index())
    }

    /// The id of this player's own entity in its snapshots, for a game whose worlds give each
    /// player one entity under the player's id (the arena, tag: `out.insert(player, ..)`):
    /// the player's id merged with the number of the world it is in
    /// ([`merged_id`](crate::protocol::snapshot::world::merged_id)). It follows the player
    /// across moves (the world's number changes) and zones (so does its id). `None` until the
    /// client is connected and told its world.
    pub fn own_entity(&self) -> Option<EntityId> {
        let world = self.world.as_ref()?.world;
        Some(crate::protocol::snapshot::world::merged_id(u32::from(world), self.client_index()?))
    }

    /// The bytes of the input this client sent with sequence number `seq`
    /// ([`GameClient::input_seq`]), while it is kept (the last [`REPLAY_INPUTS`], including
    /// those waiting for the next zone's server): what [`predict::Prediction::frame`] reads
    /// the inputs sent from, whatever driver sent them.
    pub fn sent_input(&self, seq: u32) -> Option<&[u8]> {
        fn find(q: &VecDeque<(u32, Vec<u8>)>, seq: u32) -> Option<&[u8]> {
            q.iter().rev().find(|(s, _)| *s == seq).map(|(_, b)| &b[..])
        }
        find(&self.sent, seq).or_else(|| self.replay.as_ref().and_then(|r| find(r, seq)))
    }

    /// Why the session ended, once it has: what the server said in its goodbye (kicked, with
    /// the world's words; shutting down; …), what it refused (server full, protocol
    /// version), or what this client saw (timed out, no answer, its own disconnect). `None`
    /// while connecting or connected.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # fn show(client: &GameClient) {
    /// if let Some(why) = client.ended() {
    ///     println!("disconnected: {why}"); // "kicked: camping the spawn"
    /// }
    /// # }
    /// ```
    pub fn ended(&self) -> Option<SessionEnd> {
        if let Some(e) = &self.ended {
            return Some(e.clone());
        }
        if self.resuming.is_some() && !matches!(self.carrier.state(), ClientState::ConnectionDenied) {
            // A resume's handshake that got no answer is tried again until the deadline.
            return None;
        }
        match self.carrier.state() {
            ClientState::ConnectionDenied => Some(SessionEnd::ServerFull),
            ClientState::ConnectionTimedOut => Some(SessionEnd::TimedOut),
            ClientState::ConnectionRequestTimedOut | ClientState::ConnectionResponseTimedOut => {
                Some(SessionEnd::NoAnswer)
            }
            ClientState::ConnectTokenExpired => Some(SessionEnd::TokenExpired),
            ClientState::InvalidConnectToken => Some(SessionEnd::InvalidToken),
            ClientState::Disconnected => Some(SessionEnd::Closed),
            ClientState::SendingConnectionRequest | ClientState::SendingConnectionResponse | ClientState::Connected => {
                None
            }
        }
    }

    /// Decodes snapshots with the game's own predictor, the same one the server's
    /// [`ServerConfig::snapshot_predictor`](crate::server::ServerConfig::snapshot_predictor)
    /// holds (see [`Predictor`](crate::protocol::snapshot::Predictor)).
    pub fn set_predictor(&mut self, predictor: Arc<dyn crate::protocol::snapshot::Predictor>) {
        self.snapshots.set_predictor(predictor);
    }

    /// The newest snapshot, as the player should see it: an entity the server left out of
    /// it (over the client's send budget, see [`GameClient::snapshot`]) shows its newest
    /// state.
    pub fn latest(&self) -> Option<&WorldSnapshot> {
        self.shown(self.snapshots.newest_tick()?)
    }

    /// What is shown of the snapshot of `tick`, if it is kept.
    fn shown(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.shown_with_origins(tick).map(|(s, _)| s)
    }

    /// [`Self::shown`], with the ticks its held entities' states come from.
    fn shown_with_origins(&self, tick: u32) -> Option<(&WorldSnapshot, &[(EntityId, u32)])> {
        let held = self.shown[tick as usize % self.shown.len()].as_ref().filter(|s| s.snapshot.tick() == tick);
        match held {
            Some(h) => Some((&h.snapshot, &h.origins)),
            None => self.snapshots.get(tick).map(|s| (s, &[][..])),
        }
    }

    /// Works out what is shown of the snapshot of `tick`, just decoded: entities the server
    /// left out of it keep what was shown of the newest snapshot between its baseline and it.
    fn settle_shown(&mut self, tick: u32) {
        let slot = tick as usize % self.shown.len();
        let mut out = self.shown[slot].take().unwrap_or_default();
        let snaps = &self.snapshots;
        let held = (|| {
            let decoded = snaps.get(tick)?;
            let origins = snaps.origins(tick)?;
            let before = (1..64u32).map(|k| tick.wrapping_sub(k)).find(|t| snaps.get(*t).is_some())?;
            let (shown, held) = self.shown_with_origins(before)?;
            let before_origins = snaps.origins(before)?;
            Some(crate::protocol::snapshot::receiver::hold_left_out(
                decoded,
                origins,
                (shown, held, before_origins),
                &mut out,
            ))
        })()
        .unwrap_or(0);
        self.stats.entities_held += held as u64;
        if held > 0 {
            self.shown[slot] = Some(out);
        }
    }

    /// The sequence number of the newest input sent (record it in a
    /// [`predict::Reconciler`] with the input).
    pub fn input_seq(&self) -> u32 {
        self.input_seq
    }

    /// The newest of our inputs that the server had applied in the snapshot of `tick`.
    pub fn applied_input(&self, tick: u32) -> Option<u32> {
        self.applied[tick as usize % 64].filter(|(t, _)| *t == tick).map(|(_, a)| a)
    }

    /// A snapshot by tick, while it is kept (the last 64 received), as the player should see
    /// it. When the client's send budget is full the server leaves some changed entities out
    /// of a snapshot for a later one, by priority (and entities sent at a lower rate of their
    /// own wait for their turn); the merged delta then gives them their state in the
    /// snapshot's baseline, older than what the client may already have shown. Those keep the
    /// state shown last, from the newer packet, instead of going back (counted in
    /// [`ClientStats::entities_held`]). [`GameClient::decoded`] is the snapshot as decoded.
    pub fn snapshot(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.shown(tick)
    }

    /// A snapshot by tick exactly as decoded: the server's state, except that entities left
    /// out of it have their state in its baseline.
    pub fn decoded(&self, tick: u32) -> Option<&WorldSnapshot> {
        self.snapshots.get(tick)
    }

    /// What to draw at `now`: two snapshots to blend (a little behind the server, by a delay
    /// that adapts to the arrival jitter), or the newest to extrapolate from when the next is
    /// late. Counts the frame in the stats.
    pub fn playback(&mut self, now: Duration) -> Playback {
        let p = self.clock.playback(now, self.snapshots.newest_tick(), |t| self.snapshots.get(t).is_some());
        if p != Playback::Waiting {
            // The new server's view plays: the old one is done with.
            self.before = None;
        }
        match p {
            Playback::Interpolating { .. } => self.stats.frames_interpolated += 1,
            Playback::Extrapolating { .. } => self.stats.frames_extrapolated += 1,
            Playback::Waiting => {}
        }
        p
    }

    /// Every entity of kind `T` as the player should see it at `now`: each one's value
    /// blended between the two snapshots [`GameClient::playback`] picks (by the field's
    /// quantizer: positions linearly, rotations along the shorter arc, flags and integers at
    /// the midpoint), or carried on from the two newest when the next snapshot is late (at
    /// most [`GameClient::set_max_extrapolation`], then held). An entity in only one of the
    /// two snapshots shows as it is there; the set of entities is the nearer snapshot's.
    /// Empty before the first snapshot. Does not count the frame in the stats (call
    /// [`GameClient::playback`] once a frame for that).
    ///
    /// Across a move to another zone's server (see [`GameClient::moves`]) it goes on with the
    /// old server's view, carried on and then held as when a snapshot is late, until the new
    /// server's snapshots can be played: the picture does not blank. The ids are each
    /// server's own: an entity drawn across the switch changes id with it.
    ///
    /// ```
    /// # use volley::prelude::*;
    /// # volley::replicated! {
    /// #     /// A runner.
    /// #     #[derive(Debug, Clone, PartialEq)]
    /// #     pub struct Runner { pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-50.0), glam::Vec2::splat(50.0), 0.01) }
    /// # }
    /// # fn draw(_: EntityId, _: glam::Vec2) {}
    /// # fn frame(client: &GameClient, now: std::time::Duration) {
    /// for (id, runner) in client.entities::<Runner>(now) {
    ///     draw(id, runner.position);
    /// }
    /// # }
    /// ```
    pub fn entities<T: Replicate + 'static>(&self, now: Duration) -> Vec<(EntityId, T)> {
        let mut out = Vec::new();
        self.entities_into(now, &mut out);
        out
    }

    /// [`GameClient::entities`] into `out` (cleared first), reusing its allocation frame after
    /// frame.
    pub fn entities_into<T: Replicate + 'static>(&self, now: Duration, out: &mut Vec<(EntityId, T)>) {
        out.clear();
        let snaps = &self.snapshots;
        let Some(kind) = snaps.schema().kind_of::<T>() else { return };
        self.walk_view(kind, now, |id, here, there, t| {
            let here = T::dequantize(here);
            let value = match there {
                Some(there) => T::blend(&T::dequantize(there), &here, t),
                None => here,
            };
            out.push((id, value));
        });
    }

    /// [`GameClient::entities`] for a kind known by its id rather than its Rust type (a
    /// schema read from its description, [`Schema::from_json`]): the ids into `ids`, and
    /// each entity's numbers ([`KindSchema::decode`]: every field as its quantizer decodes
    /// and blends it) one after another into `values` (both cleared first). Nothing for a
    /// kind the schema does not have. What `volley-ffi` hands a client in another language.
    ///
    /// [`Schema::from_json`]: crate::protocol::snapshot::Schema::from_json
    /// [`KindSchema::decode`]: crate::protocol::snapshot::KindSchema::decode
    pub fn entity_values(
        &self,
        kind: crate::protocol::snapshot::KindId,
        now: Duration,
        ids: &mut Vec<EntityId>,
        values: &mut Vec<f64>,
    ) {
        ids.clear();
        values.clear();
        let schema = self.snapshots.schema().clone();
        let Some(k) = schema.kind(kind) else { return };
        let mut one = Vec::new();
        self.walk_view(kind, now, |id, here, there, t| {
            ids.push(id);
            k.decode(here, there, t, &mut one);
            values.extend_from_slice(&one);
        });
    }

    /// The schema this client decodes snapshots with.
    pub fn schema(&self) -> &Arc<Schema> {
        self.snapshots.schema()
    }

    /// Walks what to draw of `kind` at `now` (see [`view_each`]): this server's view, or
    /// across a move to another zone's server the old one's until the new one plays.
    fn walk_view(
        &self,
        kind: crate::protocol::snapshot::KindId,
        now: Duration,
        mut emit: impl FnMut(EntityId, &[u32], Option<&[u32]>, f32),
    ) {
        let snaps = &self.snapshots;
        let playing = view_each(kind, &self.clock, snaps.newest_tick(), |t| self.shown(t), now, &mut emit);
        if let (false, Some(b)) = (playing, &self.before) {
            let newest = b.snapshots.first().map(WorldSnapshot::tick);
            view_each(kind, &b.clock, newest, |t| b.get(t), now, &mut emit);
        }
    }

    /// Clock sync: the (fractional) tick the server is running now, from snapshot arrivals
    /// and the measured round-trip time. `None` before the first snapshot.
    pub fn server_tick(&self, now: Duration) -> Option<f64> {
        self.clock.server_tick(now, self.channel.link().rtt())
    }

    /// The (fractional) tick at which an input sent now will reach the server (with a margin
    /// for jitter): how far ahead a predicting client simulates.
    pub fn input_arrival_tick(&self, now: Duration) -> Option<f64> {
        self.clock.input_arrival_tick(now, self.channel.link().rtt())
    }

    /// Extrapolates at most `limit` past the newest snapshot when the next is late, then
    /// holds ([`playback::DEFAULT_MAX_EXTRAPOLATION`], a quarter second, by default).
    pub fn set_max_extrapolation(&mut self, limit: Duration) {
        self.clock.set_max_extrapolation(limit);
    }

    /// The reliability channel, for reliable messages and events.
    pub fn channel(&mut self) -> &mut Channel {
        &mut self.channel
    }

    /// Connection figures.
    pub fn stats(&self) -> ClientStats {
        let l = self.channel.link();
        ClientStats {
            rtt: l.rtt(),
            jitter: l.jitter(),
            loss: l.loss(),
            arrival_jitter: self.clock.jitter(),
            render_delay_ticks: self.clock.delay_ticks(),
            ..self.stats
        }
    }

    /// Advances timers: netcode handshake and keep-alives, and the session hello.
    /// Once the server said goodbye, this answers with the netcode disconnect.
    pub fn update(&mut self, now: Duration, tx: &mut impl Transmit) {
        if let Some(r) = self.redirect.take() {
            self.follow(now, r, tx);
        }
        if std::mem::take(&mut self.leaving) {
            self.carrier.disconnect(now, tx);
            return;
        }
        let silent = now.saturating_sub(self.carrier.last_received()) >= RESUME_AFTER_SILENCE;
        if self.carrier.is_connected() && silent && self.ended.is_none() {
            // Nothing from the server for a while: its packets no longer find this client
            // (its address changed under a NAT, its network moved). Back in with the ticket.
            self.resume(now);
        }
        self.carrier.update(now, tx);
        if let Some(deadline) = self.resuming {
            if self.carrier.is_connected() {
                self.resuming = None;
                self.resume_token = None;
                self.resumes += 1;
            } else if now >= deadline && self.ended.is_none() {
                self.resuming = None;
                self.resume_token = None;
                self.ended = Some(SessionEnd::TimedOut);
            } else if matches!(
                self.carrier.state(),
                ClientState::ConnectionRequestTimedOut | ClientState::ConnectionResponseTimedOut
            ) && let Some(token) = self.resume_token.as_deref().and_then(|t| ConnectToken::from_bytes(t).ok())
            {
                // No answer yet (the network is still down): the same ticket again, until the
                // server's grace is over. A handshake sends ten requests a second.
                let mut netcode = NetcodeClient::new(token, now);
                netcode.connect(now);
                netcode.update(now, tx);
                self.carrier = Carrier::Netcode(netcode);
            }
        }
        if std::mem::take(&mut self.system_ack_due)
            && let Some(system) = &mut self.system
        {
            let mut out = [0u8; MAX_PAYLOAD_BYTES];
            let n = system.build_packet(now, None, &mut out);
            Via { carrier: &mut self.carrier, now, tx }.payload(&out[..n]);
        }
        if let Some(hello) = self.carrier.is_connected().then(|| self.session.poll_hello(now)).flatten() {
            let hello = match hello {
                Control::Hello { .. } => Control::Hello { protocol_version: self.protocol_version },
                other => other,
            };
            let mut b = [0u8; MAX_CONTROL_BYTES];
            let n = hello.encode(&mut b);
            Via { carrier: &mut self.carrier, now, tx }.payload(&b[..n]);
        }
    }

    /// Takes one datagram; returns the tick of a newly decoded snapshot.
    pub fn receive(&mut self, now: Duration, from: SocketAddr, buf: &mut [u8]) -> Option<u32> {
        let payload = self.carrier.process(now, from, buf)?;
        self.stats.packets_received += 1;
        self.stats.bytes_received += payload.len() as u64;
        if payload.first().is_some_and(|b| b & 0xF0 == SYSTEM_FRAME_TAG) {
            let system = self.system.get_or_insert_with(|| Box::new(Channel::new(ChannelConfig::system())));
            if system.receive(now, payload).is_ok() {
                self.system_ack_due = true;
                while let Some(message) = system.recv_reliable() {
                    if let Some(notice) = WorldNotice::decode(&message) {
                        // A new world: its board (if any) comes whole next; the old one's is kept.
                        let left = std::mem::take(&mut self.scoreboard);
                        if !left.is_empty() {
                            self.previous_scoreboard = left;
                        }
                        if self.notices.len() == MAX_NOTICES {
                            self.notices.pop_front();
                        }
                        self.notices.push_back(notice.clone());
                        self.world = Some(notice);
                        self.spectator = None;
                        continue;
                    }
                    if let Some(status) = SpectatorStatus::decode(&message) {
                        self.spectator = Some(status);
                        continue;
                    }
                    if let Some(p) = Pace::decode(&message) {
                        self.pace = p.interval;
                        self.pace_inputs = p.max_inputs;
                        continue;
                    }
                    if let Some(t) = Ticket::decode(&message) {
                        self.ticket = Some(t.token);
                        self.grace = Duration::from_millis(u64::from(t.grace_ms)).min(MAX_GRACE);
                        continue;
                    }
                    if let Some(r) = Redirect::decode(&message) {
                        // Followed at the next update (the old server's goodbye follows).
                        self.redirect = Some(r);
                        continue;
                    }
                    // A bad update leaves the board as it was (a hostile server's garbage).
                    let _ = self.scoreboard.apply(&message);
                }
            }
            return None;
        }
        if payload.first() == Some(&CONTROL_FRAME) {
            if let Ok(c) = Control::decode(payload) {
                if let Control::Goodbye(end) = &c {
                    if *end == SessionEnd::Moved {
                        // Moved: the redirect it sent before comes again with each repeat
                        // until this client has it; then it goes on there.
                        return None;
                    }
                    // The first reason stands (repeats carry the same).
                    self.ended.get_or_insert_with(|| end.clone());
                    self.leaving = true;
                    return None;
                }
                let was = self.session.params();
                self.session.on_control(c);
                if let Some(crate::protocol::session::RejectReason::VersionMismatch { server, client }) =
                    self.session.rejected()
                {
                    self.ended.get_or_insert(SessionEnd::VersionMismatch { server, client });
                    self.leaving = true;
                }
                if let (None, Some(p)) = (was, self.session.params()) {
                    let limit = self.clock.max_extrapolation();
                    self.clock = PlaybackClock::new(p.tick_rate_hz, p.snapshot_rate_hz);
                    self.clock.set_max_extrapolation(limit);
                }
            }
            return None;
        }
        let state = self.channel.receive(now, payload).ok()??;
        // The server's state blob: our newest applied input, then the snapshot.
        let (applied, snapshot) = state.split_first_chunk::<4>()?;
        let applied = Some(u32::from_le_bytes(*applied)).filter(|a| *a != u32::MAX);
        self.stats.last_snapshot_bytes = snapshot.len();
        match self.snapshots.decode(snapshot) {
            Ok(t) => {
                self.settle_shown(t);
                self.stats.snapshots += 1;
                self.clock.on_snapshot(t, now);
                self.applied[t as usize % 64] = applied.map(|a| (t, a));
                Some(t)
            }
            Err(_) => {
                self.stats.snapshot_errors += 1;
                None
            }
        }
    }

    /// Chooses what view each input reports from now on ([`ViewMode::Playback`] by default).
    pub fn set_view_mode(&mut self, mode: ViewMode) {
        self.view_mode = mode;
    }

    /// The view an input sent at `now` reports, as [`GameClient::set_view_mode`] says: what
    /// [`GameClient::playback`] draws at `now` (extrapolation reported as the span of ticks it
    /// reaches past the newest snapshot), or the newest snapshot.
    pub fn view(&self, now: Duration) -> Option<ViewTime> {
        let newest = self.snapshots.newest_tick()?;
        match self.view_mode {
            ViewMode::Off => None,
            ViewMode::Newest => Some(ViewTime::at(newest)),
            ViewMode::Playback => match self.clock.playback(now, Some(newest), |t| self.snapshots.get(t).is_some()) {
                Playback::Waiting => None,
                Playback::Interpolating { from, to, alpha } => Some(ViewTime::between(from, to, alpha)),
                Playback::Extrapolating { from, ahead } => {
                    let span = ahead.max(0.0).ceil().min(255.0);
                    let alpha = if span > 0.0 { ahead / span } else { 0.0 };
                    Some(ViewTime::between(from, from.saturating_add(span as u32), alpha))
                }
            },
        }
    }

    /// Sends this tick's input (with the last few repeated) and anything due on the reliable
    /// and event channels, acknowledging the newest snapshot. The input carries the view it
    /// was made with ([`GameClient::view`] at `now`).
    pub fn send_input(&mut self, now: Duration, input: &[u8], tx: &mut impl Transmit) {
        let view = self.view(now);
        self.send_input_with_view(now, input, view, tx);
    }

    /// [`GameClient::send_input`] with the view given: what the game drew when the player
    /// made this input, if it draws neither the playback nor the newest snapshot.
    pub fn send_input_with_view(
        &mut self,
        now: Duration,
        input: &[u8],
        view: Option<ViewTime>,
        tx: &mut impl Transmit,
    ) {
        let ready = self.is_ready();
        if let Some(replay) = &mut self.replay {
            // Moving or resuming, or catching up since: kept in order behind the inputs the
            // server has not had yet, and sent from the oldest at a pace it takes.
            if replay.len() >= REPLAY_INPUTS {
                replay.pop_front();
            }
            self.input_seq = self.input_seq.wrapping_add(1);
            replay.push_back((self.input_seq, input.to_vec()));
            if ready {
                self.send_replay(now, tx);
            }
            return;
        }
        if !ready {
            return;
        }
        // The oldest input's buffer is reused for the newest: no allocation per frame once
        // the packet's inputs are all kept. A packet carries the last REDUNDANT_INPUTS inputs
        // for every one in `pace` it stands for, so each input still goes in as many packets.
        let keep = (REDUNDANT_INPUTS * usize::from(self.pace.max(1)))
            .min(usize::from(self.pace_inputs).clamp(REDUNDANT_INPUTS, MAX_PACKET_INPUTS));
        while self.inputs.len() > keep {
            self.inputs.pop_back();
        }
        let (mut newest, _) = if self.inputs.len() == keep { self.inputs.pop_back() } else { None }.unwrap_or_default();
        newest.clear();
        newest.extend_from_slice(input);
        self.inputs.push_front((newest, view));
        self.input_seq = self.input_seq.wrapping_add(1);
        self.remember(self.input_seq, input);
        if !self.paced_send_due() {
            // The server asked for fewer packets: the next one carries this input too.
            return;
        }
        let mut refs: [(&[u8], Option<ViewTime>); MAX_PACKET_INPUTS] = [(&[], None); MAX_PACKET_INPUTS];
        for (r, (i, v)) in refs.iter_mut().zip(&self.inputs) {
            *r = (i, *v);
        }
        let refs = &refs[..self.inputs.len().min(MAX_PACKET_INPUTS)];
        let mut state = std::mem::take(&mut self.scratch);
        write_input_packet(&mut state, self.snapshots.newest_tick(), self.input_seq, refs);
        let mut out = [0u8; MAX_PAYLOAD_BYTES];
        let n = self.channel.build_packet(now, Some(&state), &mut out);
        self.scratch = state;
        Via { carrier: &mut self.carrier, now, tx }.payload(&out[..n]);
    }

    /// Whether this call sends its packet, at the server's [`Pace`]: one call in
    /// [`GameClient::pace`] does.
    fn paced_send_due(&mut self) -> bool {
        self.unsent = self.unsent.saturating_add(1);
        if self.unsent < self.pace {
            return false;
        }
        self.unsent = 0;
        true
    }

    /// How many inputs (calls of [`GameClient::send_input`] or
    /// [`GameClient::send_without_input`]) go into one packet: 1 unless the server, short of
    /// CPU, lowered every player's snapshot rate and asked its clients to send at the same
    /// rate ([`Pace`]). The game goes on calling once a frame; every input still reaches the
    /// server, a few milliseconds later, and travels in as many packets as before (a packet
    /// carries the last [`REDUNDANT_INPUTS`] inputs for each one in `pace` it stands for).
    pub fn pace(&self) -> u8 {
        self.pace
    }

    /// Sends a packet with no input: the acknowledgement of the newest snapshot (so the next
    /// is a delta against it) and whatever is due on the reliable and event channels. For a
    /// client that has nothing to steer this frame (a spectator, a menu, a loading screen)
    /// but must keep its snapshots small and its messages flowing; the world hears no
    /// input from it.
    pub fn send_without_input(&mut self, now: Duration, tx: &mut impl Transmit) {
        if !self.is_ready() {
            return;
        }
        if !self.paced_send_due() {
            return;
        }
        self.send_replay(now, tx);
        let mut state = std::mem::take(&mut self.scratch);
        write_input_packet(&mut state, self.snapshots.newest_tick(), self.input_seq, &[]);
        let mut out = [0u8; MAX_PAYLOAD_BYTES];
        let n = self.channel.build_packet(now, Some(&state), &mut out);
        self.scratch = state;
        Via { carrier: &mut self.carrier, now, tx }.payload(&out[..n]);
    }

    /// Disconnects, telling the server ([`GameClient::ended`] then says
    /// [`SessionEnd::Local`]).
    pub fn disconnect(&mut self, now: Duration, tx: &mut impl Transmit) {
        if self.ended().is_none() {
            self.ended = Some(SessionEnd::Local);
        }
        self.leaving = false;
        self.carrier.disconnect(now, tx);
    }
}

/// Walks the entities of `kind` as the player should see them at `now` (the playback of
/// [`GameClient::entities`]): each one's id, its words in the nearer snapshot, and the
/// other snapshot's words with the blend from them (`t` = 1: its own) when both hold it.
/// False while waiting for a snapshot to play.
fn view_each<'a>(
    kind: crate::protocol::snapshot::KindId,
    clock: &PlaybackClock,
    newest: Option<u32>,
    get: impl Fn(u32) -> Option<&'a WorldSnapshot>,
    now: Duration,
    mut emit: impl FnMut(EntityId, &[u32], Option<&[u32]>, f32),
) -> bool {
    let read = |w: &'a WorldSnapshot, id: EntityId| {
        let e = w.get(w.find(id)?)?;
        (e.kind == kind).then_some(e.words)
    };
    // `base`'s entities of the kind, each blended from its value in `other` (t = 0:
    // `other`'s, t = 1: `base`'s own).
    let mut blend_over = |base: &WorldSnapshot, other: Option<&'a WorldSnapshot>, t: f32| {
        for e in base.iter().filter(|e| e.kind == kind) {
            emit(e.id, e.words, other.and_then(|o| read(o, e.id)), t);
        }
    };
    match clock.playback(now, newest, |t| get(t).is_some()) {
        Playback::Waiting => return false,
        Playback::Interpolating { from, to, alpha } => {
            let (a, b) = (get(from), get(to));
            match (a, b) {
                // The nearer snapshot's entities: `a`'s as blended from `b` back towards
                // `a` (blend(b, a, 1 − α) is blend(a, b, α)), or `b`'s from `a`.
                (Some(a), Some(b)) if alpha < 0.5 => blend_over(a, Some(b), 1.0 - alpha),
                (Some(a), Some(b)) => blend_over(b, Some(a), alpha),
                (Some(only), None) | (None, Some(only)) => blend_over(only, None, 1.0),
                (None, None) => {}
            }
        }
        Playback::Extrapolating { from, ahead } => {
            let Some(newest) = get(from) else { return true };
            let older = (1..64u32).map(|k| from.wrapping_sub(k)).find_map(|t| get(t).map(|s| (t, s)));
            match older {
                Some((t, older)) => {
                    let span = from.wrapping_sub(t).max(1) as f32;
                    blend_over(newest, Some(older), 1.0 + ahead / span);
                }
                None => blend_over(newest, None, 1.0),
            }
        }
    }
    true
}
