//! One connected player's protocol state, sans-IO: what the player actor runs, and what the
//! deterministic [`Stepper`](crate::testing::Stepper) runs without actors, sockets or clocks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::directory::{ToPlayer, View};
use crate::protocol::input::read_input_packet;
use crate::protocol::netcode::packet::MAX_PACKET_BYTES;
use crate::protocol::netcode::server::SendHalf;
use crate::protocol::netcode::{DisconnectReason, DropReason, MAX_PAYLOAD_BYTES, Transmit};
use crate::protocol::reliability::channel::SYSTEM_FRAME_TAG;
use crate::protocol::reliability::{Channel, ChannelConfig, Mark, RateConfig, SendRate};
use crate::protocol::scoreboard::BoardUpdates;
use crate::protocol::session::{CONTROL_FRAME, Control, MAX_CONTROL_BYTES, SessionEnd, SessionParams, answer_hello};
use crate::protocol::snapshot::{
    EncodeStats, Interest, Predictor, Schema, SenderConfig, SnapshotSender, WorldSnapshot,
};
use crate::protocol::system::WorldNotice;
use crate::server::game::world::{PlayerId, Relevancy};

/// Bytes on the wire around a reliability frame: the netcode packet's prefix, sequence and
/// tag, and the IP and UDP headers (what a narrow link carries too).
const WIRE_OVERHEAD: usize = MAX_PACKET_BYTES - MAX_PAYLOAD_BYTES + 28;
/// The reliability frame's own header around a snapshot (sequence, acks, the state's tag
/// and length).
const FRAME_HEADER: usize = 16;
/// A snapshot is held back (the budget fills on) rather than sent in less room than this.
const MIN_SNAPSHOT_ROOM: usize = 128;

/// Why a datagram from a connected player's address was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketDrop {
    /// The netcode layer refused it (did not authenticate, replayed, over budget, …).
    Netcode(DropReason),
    /// It authenticated, but its payload did not parse (reliability frame, input section or
    /// control message): a broken or hostile client.
    Malformed,
    /// A message on the framework's channel, where a client sends only acknowledgements:
    /// dropped at once, never queued (a hostile client could otherwise fill the server's
    /// memory with messages no one reads).
    UnexpectedSystemMessage,
}

impl PacketDrop {
    /// A snake_case label for metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Netcode(r) => r.label(),
            Self::Malformed => "malformed_payload",
            Self::UnexpectedSystemMessage => "unexpected_system_message",
        }
    }

    /// Whether the packet authenticated (it came from the client).
    pub fn authenticated(self) -> bool {
        matches!(self, Self::Malformed | Self::UnexpectedSystemMessage)
    }
}

/// Messages a client may send the world per tick (reliable and events together); more in
/// one tick are dropped (`volley_client_messages_dropped_total{reason="flood"}`).
pub const MAX_CLIENT_MESSAGES_PER_TICK: u32 = 16;

/// The largest client message the world is handed, in bytes; a larger one is dropped
/// (`reason="too_large"`).
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 4096;

/// Inputs a client may queue for the world per tick; more in one tick are dropped
/// (`volley_inputs_dropped_total`). A client sends one input a frame, and repeats its last
/// few in every packet (only new ones count): a client drawing at 240 Hz against a 60 Hz
/// server queues four a tick.
pub const MAX_INPUTS_PER_TICK: u32 = 32;

/// Bytes of a client's messages the server holds for it on the game's channel (its
/// reorder window, a message being reassembled, messages and events not yet handed to the
/// world): [`ChannelConfig::receive_bytes`] of the player's channel. Room for everything an
/// honest client sends (its messages are at most [`MAX_CLIENT_MESSAGE_BYTES`]); past it, a
/// client's packets go unacknowledged until there is room.
pub const GAME_CHANNEL_RECEIVE_BYTES: usize = 128 * 1024;

/// The same for the framework's channel, where a client sends only acknowledgements
/// (nothing it sends there is kept once whole, and a message waiting behind a gap never is).
pub const SYSTEM_CHANNEL_RECEIVE_BYTES: usize = 16 * 1024;

/// The most memory one client can make the server hold for it, whatever it sends, by
/// what holds it ([`ServerConfig::player_budget`](crate::server::ServerConfig::player_budget)).
/// Each part is enforced in bytes or by a count of things of bounded size; what a client
/// sends past a part's bound is dropped (and counted) or left unacknowledged, never queued.
///
/// This is what the client's traffic adds to the fixed state of a connected player (its
/// netcode connection, snapshot history and reliability rings: about 70 KiB at 1000
/// players, BENCHMARKS.md) and to what the server holds of its own to send the player
/// (reliable messages not yet acknowledged: at most
/// [`ChannelConfig::send_queue_bytes`] on each channel, and the player is disconnected when
/// the game's overflows).
///
/// ```
/// let config = volley::server::ServerConfig::new("127.0.0.1:0".parse().unwrap(), [0; 32]);
/// let budget = config.player_budget();
/// assert!(budget.total() <= 256 * 1024, "{budget:?}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlayerBudget {
    /// Its messages on the game's channel not yet handed to the world (reorder window,
    /// reassembly, inbox and events): [`GAME_CHANNEL_RECEIVE_BYTES`].
    pub game_channel: usize,
    /// Its messages on the framework's channel: [`SYSTEM_CHANNEL_RECEIVE_BYTES`].
    pub system_channel: usize,
    /// Its inputs waiting for the world's next tick: [`MAX_INPUTS_PER_TICK`] of at most
    /// [`MAX_INPUT_BYTES`](crate::protocol::input::MAX_INPUT_BYTES) each, held inline.
    pub inputs: usize,
    /// Its messages waiting for the world's next tick: [`MAX_CLIENT_MESSAGES_PER_TICK`] of
    /// at most [`MAX_CLIENT_MESSAGE_BYTES`].
    pub messages: usize,
    /// Its datagrams waiting for its player actor: `player_queue` of at most
    /// [`DATAGRAM_ROOM`](crate::transport::batch::DATAGRAM_ROOM) bytes.
    pub datagrams: usize,
}

impl PlayerBudget {
    /// The budget of a server whose player actors queue at most `player_queue` datagrams.
    pub(crate) fn new(player_queue: usize) -> Self {
        let queued_input = size_of::<(super::inputs::ClientInput, std::time::Instant)>();
        Self {
            game_channel: GAME_CHANNEL_RECEIVE_BYTES,
            system_channel: SYSTEM_CHANNEL_RECEIVE_BYTES,
            inputs: MAX_INPUTS_PER_TICK as usize * queued_input,
            messages: MAX_CLIENT_MESSAGES_PER_TICK as usize
                * (queued_input
                    + MAX_CLIENT_MESSAGE_BYTES
                    + crate::protocol::reliability::channel::HELD_MESSAGE_OVERHEAD),
            datagrams: player_queue * (crate::transport::batch::DATAGRAM_ROOM + DATAGRAM_OVERHEAD),
        }
    }

    /// All parts together.
    pub fn total(&self) -> usize {
        self.game_channel + self.system_channel + self.inputs + self.messages + self.datagrams
    }
}

/// What a datagram waiting for a player actor costs besides its bytes: its message in the
/// actor's mailbox and its allocation.
const DATAGRAM_OVERHEAD: usize = 128;

/// Tick rounds in which a client's messages overflowed [`MAX_CLIENT_MESSAGES_PER_TICK`],
/// each within [`FLOOD_MEMORY_TICKS`] of the one before, before the server disconnects it
/// ([`SessionEnd::Flooding`]): a burst costs the client its excess messages, a flood that
/// goes on for about a second at 60 Hz costs it the connection.
pub const MAX_FLOODING_TICKS: u32 = 60;

/// Payloads in a row that authenticated but could not be read (or were messages on the
/// framework's channel) after which the server disconnects the client
/// ([`SessionEnd::Malformed`]): any readable payload starts the count again, so a burst of
/// garbage costs only its packets, while a client that sends nothing else (about four
/// seconds of a 60 Hz client's packets) goes.
pub const MAX_MALFORMED_RUN: u32 = 256;

/// Ticks without overflow after which a client's flooding is forgotten.
pub const FLOOD_MEMORY_TICKS: u64 = 60;

/// How long the server repeats its goodbye (`PlayerSession::close`) before it sends the
/// netcode disconnect packets anyway.
pub const GOODBYE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the goodbye is repeated while the client has not answered.
pub const GOODBYE_RESEND: Duration = Duration::from_millis(100);

/// Client messages the server dropped (`PlayerSession::take_messages`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageDrops {
    /// Past [`MAX_CLIENT_MESSAGES_PER_TICK`] in one tick.
    pub flood: u64,
    /// Larger than [`MAX_CLIENT_MESSAGE_BYTES`].
    pub too_large: u64,
    /// Clients disconnected for flooding ([`MAX_FLOODING_TICKS`]).
    pub disconnected: u64,
}

/// A session being closed: its goodbye, repeated until the client answers or time is up.
#[derive(Debug)]
struct Closing {
    end: SessionEnd,
    /// When the netcode disconnect goes out anyway.
    until: Duration,
    /// When the goodbye is next repeated.
    next: Duration,
}

/// What [`PlayerSession::on_snapshot`] sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SentSnapshot {
    /// The snapshot encoder's figures.
    pub encode: EncodeStats,
    /// Bytes of the state section (the applied-input sequence and the encoded snapshot).
    pub state_bytes: usize,
    /// Bytes of the reliability frame that carried it (after lz4 where that helped), with
    /// acks, messages and events.
    pub frame_bytes: usize,
    /// The world tick it described.
    pub tick: u32,
    /// The game's relevancy returned its list out of order (or with repeats, or indices
    /// past the end): it was tidied before encoding ([`crate::server::WorldFault::RelevancyOrder`]).
    pub relevancy_fixed: bool,
}

/// One player's connection, reliability, snapshot history and input de-duplication.
#[derive(Debug)]
pub(crate) struct PlayerSession {
    id: PlayerId,
    /// The send half of its netcode connection (the receive half is its [`Inlet`]'s).
    ///
    /// [`Inlet`]: super::inlet::Inlet
    out: SendHalf,
    channel: Channel,
    sender: SnapshotSender,
    /// The budget its snapshots are sent within, following its link.
    rate: SendRate,
    /// Snapshots not sent because the budget was spent, not yet counted by the caller.
    held_for_rate: u64,
    interest: Vec<Interest>,
    /// One world's interest, before it is shifted into the merged view's.
    scratch: Vec<Interest>,
    snapshot_buf: Vec<u8>,
    welcomed: bool,
    /// The connection is over (the server disconnected it, the client did, or it timed
    /// out): no more snapshots, though the session lives until its actor has stopped.
    closed: bool,
    /// A reliable message from the world did not fit: nothing more is queued.
    cut_off: bool,
    params: SessionParams,
    snapshot_every: u32,
    /// The tick round of the client messages counted in `messages_this_round`.
    message_round: u64,
    messages_this_round: u32,
    /// Rounds that overflowed, each soon after the one before, and the last of them.
    flooding_rounds: u32,
    last_flood_round: u64,
    /// Set once the server closes the session: the goodbye in flight.
    closing: Option<Closing>,
    /// The framework's own reliable channel (the scoreboard), once there is something for
    /// it, with whether the client has been sent the whole board and when it last sent.
    system: Option<Box<SystemChannel>>,
    /// World notices in the order the player entered the worlds, each with the point in the
    /// game's channel where it belongs ([`PlayerSession::enter_world`]), and the framework's
    /// messages queued behind them (`false`: a playback status, a pace).
    notices: std::collections::VecDeque<(Bytes, Mark, bool)>,
    /// The notice on the framework's channel, not yet acknowledged: the point after it
    /// there, and its place in the game's channel.
    notice_sent: Option<(Mark, Mark)>,
    /// How long it waits for a silent client to resume ([`SessionSettings::resume_grace`]).
    resume_grace: Duration,
    /// The client was silent for its connection timeout: nothing goes out until it resumes
    /// ([`PlayerSession::rebind`]) or is heard again, or the grace runs out.
    away: bool,
    /// Away for want of acknowledgements (it kept sending): since when the grace counts (its
    /// last acknowledgement). Only a resume brings it back, as nothing goes out to acknowledge.
    deaf: Option<Duration>,
    /// When the session began waiting for acknowledgements on this connection (its first
    /// heartbeat after it started or was rebound): acknowledgements missing for the
    /// connection timeout since the later of this and the last one are a drop.
    acks_from: Option<Duration>,
    /// Resumed on a new connection, and not yet known how: a client that resumes sends its
    /// inputs at once and never says Hello again, a client program that restarted says Hello
    /// first ([`PlayerSession::restart`]) and sends nothing on the channels before it is
    /// welcomed. Until one or the other, nothing goes out on the channels (a restarted
    /// program would take the old channels' packets for its own).
    rebound: bool,
    /// The world it is in, as its client was told (told again after a restart).
    world: Option<WorldNotice>,
    /// The newest ticket and pace sent on the framework's channel (sent again after a
    /// restart).
    kept_system: [Option<Bytes>; 2],
}

/// A session's channel for the game's messages, as it starts.
fn game_channel() -> Channel {
    Channel::new(ChannelConfig { receive_bytes: GAME_CHANNEL_RECEIVE_BYTES, ..ChannelConfig::default() })
}

/// What [`PlayerSession::heartbeat`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beat {
    /// The client has not been heard from, or has acknowledged nothing, for its connection
    /// timeout, and the resume grace is longer: the session waits for it, sending nothing
    /// (its world hears `away`).
    Away,
    /// An away client was heard again on its connection (its world hears `back`).
    Back,
    /// The connection is over.
    Over(DisconnectReason),
}

/// The framework's channel beside the game's.
#[derive(Debug)]
struct SystemChannel {
    channel: Channel,
    whole_board_sent: bool,
    last_sent: Duration,
}

/// World notices a session keeps waiting for their turn (a game moving a player faster than
/// its link carries the notices); one more disconnects the player
/// ([`SessionEnd::TooFarBehind`]).
const MAX_WAITING_NOTICES: usize = 16;

/// How often unacknowledged scoreboard updates are sent again, at most.
const SYSTEM_RESEND: Duration = Duration::from_millis(200);

impl std::fmt::Debug for dyn Relevancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relevancy")
    }
}

/// What every player's session on one server starts with (the socket actor and the
/// stepper open sessions from the same settings).
#[derive(Clone)]
pub(crate) struct SessionSettings {
    /// The replicated kinds.
    pub schema: Arc<Schema>,
    /// What the session announces to the client.
    pub params: SessionParams,
    /// Send a snapshot every this many ticks.
    pub snapshot_every: u32,
    /// How snapshots are encoded.
    pub sender: SenderConfig,
    /// The game's own snapshot predictor, if any.
    pub predictor: Option<Arc<dyn Predictor>>,
    /// Each client's send rate: its bounds and the queueing it allows.
    pub rate: RateConfig,
    /// How long a session waits for a silent client to resume it (counted from the last
    /// packet heard); at most the connection timeout: none.
    pub resume_grace: Duration,
}

impl std::fmt::Debug for SessionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSettings")
            .field("params", &self.params)
            .field("snapshot_every", &self.snapshot_every)
            .finish_non_exhaustive()
    }
}

impl SessionSettings {
    /// A session for an accepted connection.
    pub(crate) fn open(&self, connection: SendHalf) -> PlayerSession {
        PlayerSession::new(connection, self)
    }
}

impl PlayerSession {
    /// A session for an accepted connection.
    pub(crate) fn new(connection: SendHalf, settings: &SessionSettings) -> Self {
        let SessionSettings { schema, params, snapshot_every, sender, predictor, rate, resume_grace } =
            settings.clone();
        let mut sender = SnapshotSender::new(schema, sender);
        if let Some(p) = predictor {
            sender.set_predictor(p);
        }
        Self {
            id: connection.client_index(),
            out: connection,
            channel: game_channel(),
            sender,
            rate: SendRate::new(rate),
            held_for_rate: 0,
            interest: Vec::new(),
            scratch: Vec::new(),
            snapshot_buf: Vec::with_capacity(MAX_PAYLOAD_BYTES),
            welcomed: false,
            closed: false,
            cut_off: false,
            params,
            snapshot_every: snapshot_every.max(1),
            message_round: 0,
            messages_this_round: 0,
            flooding_rounds: 0,
            last_flood_round: 0,
            closing: None,
            system: None,
            notices: std::collections::VecDeque::new(),
            notice_sent: None,
            resume_grace,
            away: false,
            deaf: None,
            acks_from: None,
            rebound: false,
            world: None,
            kept_system: [None, None],
        }
    }

    /// The player's id (its slot).
    pub(crate) fn id(&self) -> PlayerId {
        self.id
    }

    /// The client resumed this session on a new connection (a resume ticket's handshake, from
    /// wherever its network now is): what the session sends goes out through the new send
    /// half (new keys, sequences from zero, the new address); the channels, the snapshot
    /// history and the send rate carry on, so what the client had not acknowledged goes again
    /// and snapshots go on against the baselines both sides hold.
    ///
    /// Returns whether the session was away (its world then hears `back`).
    pub(crate) fn rebind(&mut self, out: SendHalf) -> bool {
        self.out = out;
        self.rebound = true;
        self.deaf = None;
        self.acks_from = None;
        std::mem::take(&mut self.away)
    }

    /// The client program restarted and resumed with a ticket it had saved: its first word on
    /// the resumed connection is a Hello, and it holds none of the session's state. The player
    /// stays (its id, world, team, score and watched worlds); the channels start afresh (what
    /// the old program had not acknowledged went with it), the next snapshot is whole, and
    /// the world it is in, its newest ticket and its pace are told again once it is welcomed.
    fn restart(&mut self, now: Duration) {
        tracing::debug!(player = self.id, "the client restarted: its session starts afresh");
        self.channel = game_channel();
        self.sender.forget_acks();
        self.system = None;
        self.notices.clear();
        self.notice_sent = None;
        self.welcomed = false;
        if let Some(notice) = self.world.clone() {
            let at = self.channel.mark();
            self.system_channel(now);
            self.notices.push_back((notice.encode(), at, true));
        }
        for kept in self.kept_system.clone().into_iter().flatten() {
            let at = self.channel.mark();
            self.notices.push_back((kept, at, false));
        }
    }

    /// Whether the client is away ([`Beat::Away`]).
    pub(crate) fn is_away(&self) -> bool {
        self.away
    }

    /// The send half of its netcode connection (who the client is).
    pub(crate) fn send_half(&self) -> &SendHalf {
        &self.out
    }

    /// What the receive half last said: whether the client has confirmed the connection
    /// (from then on, payloads go without a keep-alive before them).
    pub(crate) fn confirm(&mut self, confirmed: bool) {
        self.out.confirm(confirmed);
    }

    /// The client said goodbye (its receive half read the disconnect).
    pub(crate) fn on_disconnect(&mut self) {
        self.closed = true;
    }

    /// The reliability channel (link estimates, counters).
    pub(crate) fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Reads one payload the client sent (decrypted by its [`Inlet`], which handed its inputs
    /// to the world already): the acknowledgements of both channels, the client's messages
    /// (taken by [`PlayerSession::take_messages`]), a control message (answered). `at` is
    /// when it arrived, in the netcode clock. (Whether a payload can be read at all is the
    /// inlet's to judge, and a run of [`MAX_MALFORMED_RUN`] unreadable ones its to count.) `Err`: the payload was dropped, and why. It is read as of `at` (what it
    /// acknowledges arrived then); what it makes the session send goes out `now`.
    ///
    /// [`Inlet`]: super::inlet::Inlet
    pub(crate) fn on_frame(
        &mut self,
        at: Duration,
        now: Duration,
        payload: &[u8],
        tx: &mut impl Transmit,
    ) -> Result<(), PacketDrop> {
        self.out.confirm(true);
        if payload.first().is_some_and(|b| b & 0xF0 == SYSTEM_FRAME_TAG) {
            // Acknowledgements on the framework's channel (taken while closing too: a
            // redirect acknowledged is not sent again).
            // A client has nothing to say there but acknowledgements: a message it sends is
            // taken off the channel as soon as it is whole and dropped (nothing reads that
            // inbox), so none is held.
            let Some(s) = self.system.as_mut() else { return Ok(()) };
            if s.channel.receive(at, payload).is_err() {
                return Err(PacketDrop::Malformed);
            }
            let mut unexpected = false;
            while s.channel.recv_reliable().is_some() {
                unexpected = true;
            }
            while s.channel.recv_event().is_some() {
                unexpected = true;
            }
            if unexpected {
                self.advance_notices(now, tx);
                return Err(PacketDrop::UnexpectedSystemMessage);
            }
            self.advance_notices(now, tx);
            return Ok(());
        }
        if self.closing.is_some() {
            // Said goodbye: waiting for the client's disconnect, taking nothing more.
            return Ok(());
        }
        if payload.first() == Some(&CONTROL_FRAME) {
            match Control::decode(payload) {
                Ok(Control::Hello { protocol_version }) => {
                    if std::mem::take(&mut self.rebound) && self.welcomed {
                        self.restart(now);
                    }
                    let answer = answer_hello(protocol_version, self.params);
                    let mut b = [0u8; MAX_CONTROL_BYTES];
                    let n = answer.encode(&mut b);
                    let _ = self.out.send_payload(now, &b[..n], tx);
                    let welcomed = matches!(answer, Control::Welcome(_));
                    if welcomed && !self.welcomed {
                        // What waited for the session to be agreed (the entry world's notice)
                        // goes now, not at the next resend.
                        self.welcomed = true;
                        self.advance_notices(now, tx);
                        if self.system.as_ref().is_some_and(|s| s.channel.unacked_messages() > 0) {
                            self.send_system(now, tx);
                        }
                    }
                    self.welcomed = welcomed;
                }
                Ok(_) => {}
                Err(_) => return Err(PacketDrop::Malformed),
            }
            return Ok(());
        }
        let state = match self.channel.receive(at, payload) {
            Ok(Some(state)) => {
                // A client that resumed: what waited for it goes on.
                self.rebound = false;
                state
            }
            Ok(None) => return Ok(()),
            Err(_) => return Err(PacketDrop::Malformed),
        };
        let Ok(input) = read_input_packet(state) else {
            return Err(PacketDrop::Malformed);
        };
        if let Some(t) = input.ack_tick {
            self.sender.ack(t);
        }
        Ok(())
    }

    /// `n` messages this session passed on were queued for the world in round `round`: if
    /// that is not the round they were counted in (the world began a tick meanwhile), they
    /// count in that one, so no tick takes more than [`MAX_CLIENT_MESSAGES_PER_TICK`] of them.
    pub(crate) fn messages_landed(&mut self, round: u64, n: u32) {
        if round != self.message_round {
            self.message_round = round;
            self.messages_this_round = n;
        }
    }

    /// The send rate its snapshots follow.
    pub(crate) fn send_rate(&self) -> &SendRate {
        &self.rate
    }

    /// What its client holds after the snapshot of `tick`, by the sender's record (the
    /// merged view less what the budget deferred).
    pub(crate) fn client_view(&self, tick: u32) -> Option<WorldSnapshot> {
        self.sender.client_view(tick)
    }

    /// Snapshots held back by the send rate since the last call.
    pub(crate) fn take_held_for_rate(&mut self) -> u64 {
        std::mem::take(&mut self.held_for_rate)
    }

    /// Bytes of the client's messages held on the session's two channels (at most
    /// [`GAME_CHANNEL_RECEIVE_BYTES`] + [`SYSTEM_CHANNEL_RECEIVE_BYTES`]).
    pub(crate) fn received_bytes_held(&self) -> usize {
        self.channel.received_bytes_held() + self.system.as_ref().map_or(0, |s| s.channel.received_bytes_held())
    }

    /// Hands the messages the client sent (reliable ones in order, then events) to `out`,
    /// as many as this tick round allows: at most [`MAX_CLIENT_MESSAGES_PER_TICK`] in
    /// `round` (the world's tick count, as the caller knows it), none larger than
    /// [`MAX_CLIENT_MESSAGE_BYTES`]. What it cannot hand over is dropped and counted; the
    /// session's own inbox is always emptied, so a flooding client never stalls its
    /// connection. A client that overflows the limit in [`MAX_FLOODING_TICKS`] rounds, each
    /// within [`FLOOD_MEMORY_TICKS`] of the last, is told goodbye
    /// ([`SessionEnd::Flooding`], see [`PlayerSession::close`]).
    pub(crate) fn take_messages(
        &mut self,
        now: Duration,
        round: u64,
        tx: &mut impl Transmit,
        mut out: impl FnMut(Bytes, bool),
    ) -> MessageDrops {
        if self.closing.is_some() {
            return MessageDrops::default();
        }
        if round != self.message_round {
            self.message_round = round;
            self.messages_this_round = 0;
        }
        let mut drops = MessageDrops::default();
        let reliable = std::iter::from_fn(|| self.channel.recv_reliable()).map(|m| (m, true)).collect::<Vec<_>>();
        let events = std::iter::from_fn(|| self.channel.recv_event()).map(|m| (m, false));
        for (message, is_reliable) in reliable.into_iter().chain(events.collect::<Vec<_>>()) {
            if message.len() > MAX_CLIENT_MESSAGE_BYTES {
                drops.too_large += 1;
            } else if self.messages_this_round >= MAX_CLIENT_MESSAGES_PER_TICK {
                drops.flood += 1;
            } else {
                self.messages_this_round += 1;
                out(message, is_reliable);
            }
        }
        if drops.flood > 0 && self.last_flood_round != round {
            let recent = self.flooding_rounds > 0 && round.saturating_sub(self.last_flood_round) <= FLOOD_MEMORY_TICKS;
            self.flooding_rounds = if recent { self.flooding_rounds + 1 } else { 1 };
            self.last_flood_round = round;
            if self.flooding_rounds >= MAX_FLOODING_TICKS {
                self.close(now, SessionEnd::Flooding, tx);
                drops.disconnected = 1;
            }
        }
        drops
    }

    /// Encodes and sends this player's snapshot of `view` (on snapshot ticks, once the
    /// session is agreed), with whatever reliable messages and events are due. Each
    /// world's relevancy in the view decides what of it the player sees.
    /// `applied_input` is the sequence of this player's newest input the world applied by
    /// this tick: the client's prediction replays its inputs after it.
    pub(crate) fn on_snapshot(
        &mut self,
        now: Duration,
        view: &View,
        applied_input: Option<u32>,
        tx: &mut impl Transmit,
    ) -> Option<SentSnapshot> {
        let world = &view.merged;
        if !self.notices.is_empty() {
            // The game channel's acknowledgements since the last snapshot may let a waiting
            // world notice go (its datagram before this snapshot's).
            self.advance_notices(now, tx);
        }
        if !self.welcomed
            || self.closed
            || self.away
            || self.rebound
            || self.closing.is_some()
            || !world.tick().is_multiple_of(self.snapshot_every)
        {
            return None;
        }
        // A fresh list each time, checked: a game's mistake here costs its own ordering, not
        // every client's snapshots.
        // The send rate's budget bounds the snapshot; what else rides in the packet (the
        // game's reliable messages, which must not starve) is paid for by later snapshots.
        self.rate.update(now, self.channel.link(), self.channel.stats().bytes_acked);
        let budget = self.rate.room(now).saturating_sub(WIRE_OVERHEAD + FRAME_HEADER);
        if budget < MIN_SNAPSHOT_ROOM {
            self.held_for_rate += 1;
            return None;
        }
        let relevancy_fixed = view.interest(self.id, &mut self.interest, &mut self.scratch);
        let room = self.channel.state_room().min(MAX_PAYLOAD_BYTES - 64).min(budget);
        self.snapshot_buf.resize(room, 0);
        self.snapshot_buf[..4].copy_from_slice(&applied_input.unwrap_or(u32::MAX).to_le_bytes());
        let stats = self.sender.encode(world, &self.interest, &mut self.snapshot_buf[4..]).ok()?;
        let mut packet = [0u8; MAX_PAYLOAD_BYTES];
        let n = self.channel.build_packet(now, Some(&self.snapshot_buf[..4 + stats.bytes]), &mut packet);
        let _ = self.out.send_payload(now, &packet[..n], tx);
        self.rate.spend(n + WIRE_OVERHEAD);
        if !self.notices.is_empty() {
            // The events before a waiting notice may have gone in this packet.
            self.advance_notices(now, tx);
        }
        if self.notice_sent.is_some() && self.system.as_ref().is_some_and(|s| s.channel.has_due(now)) {
            // A world notice lost on the way goes again as soon as its resend timeout
            // passes (not at the framework channel's slower resend of boards): the new
            // world's messages wait for it.
            self.send_system(now, tx);
        }
        Some(SentSnapshot {
            encode: stats,
            state_bytes: 4 + stats.bytes,
            frame_bytes: n,
            tick: world.tick(),
            relevancy_fixed,
        })
    }

    /// Queues a message from the world. An event that does not fit is not sent. A reliable
    /// one that does not fit cuts the player off: it and every message after it are dropped
    /// (none may arrive out of order), and this returns true, once: the caller closes the
    /// session with [`SessionEnd::TooFarBehind`]. Every shell runs this rule.
    pub(crate) fn queue_message(&mut self, data: Bytes, reliable: bool) -> bool {
        if self.cut_off {
            return false;
        }
        let queued = if reliable { self.channel.send_reliable(data) } else { self.channel.send_event(data) };
        match queued {
            Err(e) if reliable => {
                tracing::warn!(player = self.id, error = %e, "reliable queue full; disconnecting");
                self.cut_off = true;
                true
            }
            _ => false,
        }
    }

    /// Keep-alives and timeouts, and a goodbye's repeats. [`Beat::Over`] when the connection
    /// is over: it timed out (after the resume grace, when there is one), or the goodbye went
    /// unanswered for [`GOODBYE_TIMEOUT`] (the netcode disconnect packets then went out);
    /// [`Beat::Away`] and [`Beat::Back`] when a client goes silent within the grace and when
    /// it is heard again. `heard`: when the client was last heard (its receive half says).
    pub(crate) fn heartbeat(&mut self, now: Duration, heard: Duration, tx: &mut impl Transmit) -> Option<Beat> {
        if self.closed {
            return None;
        }
        let acks_from = *self.acks_from.get_or_insert(now);
        let silence = now.saturating_sub(self.deaf.unwrap_or(heard));
        if self.away {
            // Nothing goes to an address that does not answer. A session closed meanwhile (a
            // kick, its world gone) has nobody to tell: it ends at once.
            if self.closing.is_some() || silence >= self.resume_grace {
                self.closed = true;
                if self.deaf.is_some() {
                    // It still sends: it can be told.
                    self.out.disconnect(now, tx);
                }
                let why = if self.closing.is_some() { DisconnectReason::Local } else { DisconnectReason::TimedOut };
                return Some(Beat::Over(why));
            }
            if self.deaf.is_none() && !self.out.timed_out(now, heard) {
                // Heard again on this connection (the network came back before the client
                // gave up on it).
                self.away = false;
                return Some(Beat::Back);
            }
            return None;
        }
        let mut reason = self.out.update(now, heard, tx);
        if reason == Some(DisconnectReason::TimedOut) && self.closing.is_none() && silence < self.resume_grace {
            self.away = true;
            return Some(Beat::Away);
        }
        // A client that keeps sending but has acknowledged nothing for its connection timeout
        // (a broken downlink, or on purpose) is as good as gone: away for the grace counted
        // from its last acknowledgement (a resume brings it back), or timed out without one.
        if reason.is_none()
            && self.closing.is_none()
            && let Some(since) = self.rate.deaf_since().map(|t| t.max(acks_from))
            && self.out.timed_out(now, since)
        {
            tracing::info!(player = self.id, "acknowledged nothing for its connection timeout: taken for a drop");
            if now.saturating_sub(since) < self.resume_grace {
                self.away = true;
                self.deaf = Some(since);
                return Some(Beat::Away);
            }
            // It is still there to be told.
            self.out.disconnect(now, tx);
            reason = Some(DisconnectReason::TimedOut);
        }
        if let Some(s) = &mut self.system
            && s.channel.unacked_messages() > 0
            && now.saturating_sub(s.last_sent) >= SYSTEM_RESEND
            && self.closing.is_none()
        {
            self.send_system(now, tx);
        }
        if reason.is_none()
            && let Some(c) = &mut self.closing
        {
            if now >= c.until {
                self.out.disconnect(now, tx);
                reason = Some(DisconnectReason::Local);
            } else if now >= c.next {
                c.next = now + GOODBYE_RESEND;
                self.send_goodbye(now, tx);
            }
        }
        self.closed |= reason.is_some();
        reason.map(Beat::Over)
    }

    /// Carries out what the directory told this player (every shell delivers it here: the
    /// player actor from its mailbox, the stepper by a call).
    pub(crate) fn handle(&mut self, now: Duration, told: ToPlayer, tx: &mut impl Transmit) {
        match told {
            ToPlayer::Enter(_, notice) => self.enter_world(now, &notice, tx),
            ToPlayer::Close(end) => self.close(now, end, tx),
        }
    }

    /// Ends the session, telling the client why: the goodbye ([`Control::Goodbye`]) goes
    /// now and is repeated every [`GOODBYE_RESEND`] until the client answers with its
    /// disconnect ([`PlayerSession::on_disconnect`]) or [`GOODBYE_TIMEOUT`] has passed, when
    /// [`PlayerSession::heartbeat`] sends the netcode disconnect packets. From now on no
    /// snapshot goes out and nothing from the client reaches the world. A second close
    /// changes nothing.
    pub(crate) fn close(&mut self, now: Duration, end: SessionEnd, tx: &mut impl Transmit) {
        if self.closed || self.closing.is_some() {
            return;
        }
        self.closing = Some(Closing { end, until: now + GOODBYE_TIMEOUT, next: now + GOODBYE_RESEND });
        self.send_goodbye(now, tx);
    }

    /// Queues the scoreboard's update for this client (the whole board the first time, then
    /// each delta) on the framework's channel and sends it. Unacknowledged updates are sent
    /// again by [`PlayerSession::heartbeat`].
    pub(crate) fn queue_board(&mut self, now: Duration, updates: &BoardUpdates, tx: &mut impl Transmit) {
        // While the notice of a new world waits, the board is that world's: it goes whole
        // after the notice.
        if !self.welcomed || self.closed || self.closing.is_some() || !self.notices.is_empty() {
            return;
        }
        let s = self.system_channel(now);
        let update = if s.whole_board_sent { updates.delta.clone() } else { Some(updates.full.clone()) };
        let Some(update) = update else { return };
        // A client so far behind that the queue is full gets no more (its connection times
        // out or recovers; the board is never worth more than the game).
        if s.channel.send_reliable(update).is_ok() {
            s.whole_board_sent = true;
        }
        self.send_system(now, tx);
    }

    fn send_system(&mut self, now: Duration, tx: &mut impl Transmit) {
        if self.rebound {
            // Resumed or restarted: not known yet (the heartbeat sends it again later).
            return;
        }
        let Some(s) = &mut self.system else { return };
        s.last_sent = now;
        let mut packet = [0u8; MAX_PAYLOAD_BYTES];
        // A whole board may take several packets (fragments); at most 32 at once.
        for _ in 0..32 {
            let n = s.channel.build_packet(now, None, &mut packet);
            let _ = self.out.send_payload(now, &packet[..n], tx);
            if !s.channel.has_due(now) {
                break;
            }
        }
    }

    /// The player is now in another world: its client is told (on the framework's channel),
    /// and gets that world's whole scoreboard next, if it has one.
    ///
    /// The notice keeps its place among the game's messages, whatever the link loses or
    /// reorders: it goes once the client has acknowledged every reliable message queued for
    /// the player before it (the old world's last words) and every event before it has been
    /// sent, and what is queued after it (the new world's messages and events) is held back
    /// until the client has acknowledged the notice. So a client reads a world's messages
    /// only while it knows it is in that world, at connect and at every move. The price: the
    /// notice waits a round trip when the old world's last messages are still unacknowledged,
    /// and the new world's first messages a round trip more.
    pub(crate) fn enter_world(&mut self, now: Duration, notice: &WorldNotice, tx: &mut impl Transmit) {
        if self.closed || self.closing.is_some() {
            return;
        }
        // A client this far behind (moved from world to world faster than its link carries
        // the news) is disconnected, as one too far behind on reliable messages is: a notice
        // is never dropped, which would let a world's messages arrive unannounced.
        if self.notices.len() >= MAX_WAITING_NOTICES {
            self.close(now, SessionEnd::TooFarBehind, tx);
            return;
        }
        let at = self.channel.mark();
        // The framework's channel exists from the first notice on (what a client sends there
        // is read, and counted, from then on).
        self.system_channel(now);
        self.world = Some(notice.clone());
        self.notices.push_back((notice.encode(), at, true));
        self.advance_notices(now, tx);
    }

    /// Sends the next world notice once everything before it on the game's channel is
    /// through, and holds the game's channel back at the next notice's place until the
    /// client has the one before ([`PlayerSession::enter_world`]).
    fn advance_notices(&mut self, now: Duration, tx: &mut impl Transmit) {
        loop {
            if let Some((after, _)) = self.notice_sent {
                if !self.system.as_ref().is_some_and(|s| s.channel.through(after)) {
                    return;
                }
                self.notice_sent = None;
            }
            let Some(&(_, at, world)) = self.notices.front() else {
                self.channel.release_held();
                return;
            };
            if world {
                self.channel.hold_from(at);
            }
            if !self.welcomed || (world && !self.channel.through(at)) {
                return;
            }
            let Some((bytes, at, world)) = self.notices.pop_front() else { return };
            let s = self.system_channel(now);
            if world {
                s.whole_board_sent = false;
            }
            let ok = s.channel.send_reliable(bytes).is_ok();
            if ok && world {
                self.notice_sent = Some((s.channel.mark(), at));
            }
            self.send_system(now, tx);
        }
    }

    /// Sends `data` reliably on the framework's channel (a playback status, a pace), after
    /// any world notice still waiting for its turn.
    pub(crate) fn send_notice(&mut self, now: Duration, data: Bytes, tx: &mut impl Transmit) {
        if self.closed || self.closing.is_some() {
            return;
        }
        match data.first() {
            Some(&crate::protocol::system::TICKET) => self.kept_system[0] = Some(data.clone()),
            Some(&crate::protocol::system::PACE) => self.kept_system[1] = Some(data.clone()),
            _ => {}
        }
        if !self.notices.is_empty() {
            let at = self.channel.mark();
            self.notices.push_back((data, at, false));
            return;
        }
        let s = self.system_channel(now);
        let _ = s.channel.send_reliable(data);
        if self.welcomed {
            self.send_system(now, tx);
        }
    }

    fn system_channel(&mut self, now: Duration) -> &mut SystemChannel {
        self.system.get_or_insert_with(|| {
            Box::new(SystemChannel {
                channel: Channel::new(ChannelConfig {
                    receive_bytes: SYSTEM_CHANNEL_RECEIVE_BYTES,
                    ..ChannelConfig::system()
                }),
                whole_board_sent: false,
                last_sent: now,
            })
        })
    }

    /// Why the server is closing this session, once [`PlayerSession::close`] was called.
    pub(crate) fn ending(&self) -> Option<&SessionEnd> {
        self.closing.as_ref().map(|c| &c.end)
    }

    /// Sends the goodbye, after whatever reliable messages and events are due (what the
    /// world sent the player before closing goes out, though no snapshot does), and what the
    /// framework's channel has not had acknowledged (a [`Redirect`] to the next zone: it
    /// goes again with every repeat of the goodbye).
    ///
    /// [`Redirect`]: crate::protocol::system::Redirect
    fn send_goodbye(&mut self, now: Duration, tx: &mut impl Transmit) {
        if self.closing.is_none() {
            return;
        }
        if self.channel.unacked_messages() > 0 || self.channel.has_events() {
            let mut packet = [0u8; MAX_PAYLOAD_BYTES];
            let n = self.channel.build_packet(now, None, &mut packet);
            let _ = self.out.send_payload(now, &packet[..n], tx);
        }
        if self.system.as_ref().is_some_and(|s| s.channel.unacked_messages() > 0) {
            self.send_system(now, tx);
        }
        let Some(c) = &self.closing else { return };
        let mut b = [0u8; MAX_CONTROL_BYTES];
        let n = Control::Goodbye(c.end.clone()).encode(&mut b);
        let _ = self.out.send_payload(now, &b[..n], tx);
    }
}
