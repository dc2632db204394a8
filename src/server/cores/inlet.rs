//! The receive half of one player's connection, sans-IO: what the socket actor keeps for each
//! connected address beside the [`Endpoint`](crate::protocol::netcode::server::Endpoint), and
//! what the stepper keeps beside each session.
//!
//! An [`Inlet`] authenticates a datagram (the client-to-server key, replay window and packet
//! budget), judges whether its payload can be read at all (and counts a client's unreadable
//! payloads in a row), reads the inputs in it and de-duplicates them (at most
//! [`MAX_INPUTS_PER_TICK`] new ones a tick round), so that the shell hands them to the world's
//! input queue at once. The rest of the payload (acknowledgements, the client's messages, a
//! control message) is the player's session's: the shell leaves it in the player's
//! [`Mailbox`](crate::server::shells::mailbox::Mailbox), and wakes the player actor only when the payload asks
//! for it now ([`Arrived::Payload::wake`]). The inlet never touches the session.

use std::time::Duration;

use crate::protocol::input::{FreshInputs, InputDedup, read_input_packet};
use crate::protocol::netcode::packet::Packet;
use crate::protocol::netcode::server::ReceiveHalf;
use crate::protocol::reliability::channel::{SYSTEM_FRAME_TAG, peek};
use crate::protocol::session::{CONTROL_FRAME, Control};

use super::session::{MAX_INPUTS_PER_TICK, MAX_MALFORMED_RUN, PacketDrop, PlayerSession, SessionSettings};
use crate::protocol::netcode::server::Connection;

/// An accepted connection, split: its receive half's [`Inlet`] (for the socket actor) and the
/// session that owns its send half (for the player actor). The stepper splits the same way.
pub(crate) fn open(settings: &SessionSettings, connection: Connection) -> (Inlet, PlayerSession) {
    let (rx, tx) = connection.split();
    (Inlet::new(rx), settings.open(tx))
}

/// What a datagram from a connected player's address was.
// The inputs are borrowed from the datagram, held in place (no allocation per datagram).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Arrived<'a> {
    /// An authentic keep-alive: the client was heard, nothing more.
    KeepAlive,
    /// An authentic payload: its new inputs for the world (oldest first, at most what this
    /// round allows), and the payload itself, for the player's session.
    Payload {
        /// The decrypted payload (a reliability frame, a control message, or the framework
        /// channel's acknowledgements).
        frame: &'a [u8],
        /// Its new inputs.
        inputs: FreshInputs<'a>,
        /// The session should read it now rather than at its next tick: it carries messages
        /// for the world, or a control message to answer.
        wake: bool,
    },
    /// An authentic payload that cannot be read (a broken or hostile client): `why`, what of
    /// it the session should still read (a message on the framework's channel carries
    /// acknowledgements too), and whether this one completed a run of
    /// [`MAX_MALFORMED_RUN`]: the shell has the session close ([`SessionEnd::Malformed`]).
    ///
    /// [`SessionEnd::Malformed`]: crate::protocol::session::SessionEnd::Malformed
    Unreadable {
        /// Why it was dropped.
        why: PacketDrop,
        /// What the session should read of it anyway.
        frame: Option<&'a [u8]>,
        /// The run of unreadable payloads is complete: close the session.
        close: bool,
    },
    /// The client said goodbye.
    Disconnected,
    /// Not authentic, replayed or over budget: dropped.
    Dropped(PacketDrop),
}

/// The receive half of one player's connection and its inputs' de-duplication.
#[derive(Debug)]
pub(crate) struct Inlet {
    rx: ReceiveHalf,
    dedup: InputDedup,
    /// The tick round of the inputs counted in `inputs_this_round`, and the inputs dropped
    /// past [`MAX_INPUTS_PER_TICK`], not yet counted by the caller.
    input_round: u64,
    inputs_this_round: u32,
    refused_inputs: u64,
    /// Unreadable payloads in a row ([`MAX_MALFORMED_RUN`]).
    malformed_run: u32,
    /// Where a compressed payload is read.
    scratch: Vec<u8>,
    /// Resumed on a new connection, and neither an input nor a Hello on it yet: a Hello now is
    /// a client program that restarted (one that resumes sends its inputs at once and never
    /// says Hello again), whose inputs count from the start again.
    rebound: bool,
}

impl Inlet {
    /// The inlet of a connection's receive half.
    pub(crate) fn new(rx: ReceiveHalf) -> Self {
        Self {
            rx,
            dedup: InputDedup::default(),
            input_round: 0,
            inputs_this_round: 0,
            refused_inputs: 0,
            malformed_run: 0,
            scratch: Vec::new(),
            rebound: false,
        }
    }

    /// The client resumed its session on a new connection (a resume ticket's handshake): its
    /// packets are read with the new receive half from now on; the inputs' de-duplication and
    /// counts carry on (an input the old connection brought is not taken twice).
    pub(crate) fn rebind(&mut self, rx: ReceiveHalf) {
        self.rx = rx;
        self.malformed_run = 0;
        self.rebound = true;
    }

    /// The receive half (when the client was last heard, whether it confirmed).
    pub(crate) fn receive_half(&self) -> &ReceiveHalf {
        &self.rx
    }

    /// Takes one datagram from the player's address in tick round `round` (the world's tick
    /// count, as the caller knows it).
    pub(crate) fn receive<'a>(&'a mut self, now: Duration, round: u64, bytes: &'a mut [u8]) -> Arrived<'a> {
        let payload: &'a [u8] = match self.rx.receive(now, bytes) {
            Ok(Packet::Payload(p)) => p,
            Ok(Packet::Disconnect) => return Arrived::Disconnected,
            Ok(_) => return Arrived::KeepAlive,
            Err(reason) => return Arrived::Dropped(PacketDrop::Netcode(reason)),
        };
        let none = FreshInputs::default();
        let first = payload.first().copied().unwrap_or(0);
        if first & 0xF0 == SYSTEM_FRAME_TAG {
            // Acknowledgements of the framework's channel: the session's, at its next tick. A
            // client has nothing else to say there.
            return match peek(payload, SYSTEM_FRAME_TAG, &mut self.scratch) {
                Ok(p) if !p.messages => readable(&mut self.malformed_run, payload, none, false),
                Ok(_) => unreadable(&mut self.malformed_run, PacketDrop::UnexpectedSystemMessage, Some(payload)),
                Err(_) => unreadable(&mut self.malformed_run, PacketDrop::Malformed, None),
            };
        }
        if first == CONTROL_FRAME {
            return match Control::decode(payload) {
                Ok(Control::Hello { .. }) if self.rebound => {
                    // A restarted client program (the session restarts too, on this frame).
                    self.rebound = false;
                    self.dedup = InputDedup::default();
                    readable(&mut self.malformed_run, payload, none, true)
                }
                Ok(_) => readable(&mut self.malformed_run, payload, none, true),
                Err(_) => unreadable(&mut self.malformed_run, PacketDrop::Malformed, None),
            };
        }
        let Ok(peeked) = peek(payload, 0, &mut self.scratch) else {
            return unreadable(&mut self.malformed_run, PacketDrop::Malformed, None);
        };
        let wake = peeked.messages;
        let input = match peeked.state.map(read_input_packet) {
            None => return readable(&mut self.malformed_run, payload, none, wake),
            Some(Err(_)) => return unreadable(&mut self.malformed_run, PacketDrop::Malformed, None),
            Some(Ok(input)) => input,
        };
        // A client that resumed (a restarted one sends no input before its Hello).
        self.rebound = false;
        let mut fresh = self.dedup.fresh(&input);
        if round != self.input_round {
            self.input_round = round;
            self.inputs_this_round = 0;
        }
        let room = MAX_INPUTS_PER_TICK.saturating_sub(self.inputs_this_round);
        self.refused_inputs += fresh.truncate(room as usize) as u64;
        self.inputs_this_round += fresh.as_slice().len() as u32;
        self.malformed_run = 0;
        Arrived::Payload { frame: payload, inputs: fresh, wake }
    }

    /// `n` inputs this inlet passed on were queued for the world in round `round`: if that is
    /// not the round they were counted in (the world began a tick meanwhile), they count in
    /// that one, so no tick takes more than [`MAX_INPUTS_PER_TICK`] of them.
    pub(crate) fn inputs_landed(&mut self, round: u64, n: u32) {
        if round != self.input_round {
            self.input_round = round;
            self.inputs_this_round = n;
        }
    }

    /// Inputs dropped past [`MAX_INPUTS_PER_TICK`] since this was last asked.
    pub(crate) fn take_refused_inputs(&mut self) -> u64 {
        std::mem::take(&mut self.refused_inputs)
    }
}

/// A readable payload: the run of unreadable ones is over.
fn readable<'a>(run: &mut u32, frame: &'a [u8], inputs: FreshInputs<'a>, wake: bool) -> Arrived<'a> {
    *run = 0;
    Arrived::Payload { frame, inputs, wake }
}

/// One more unreadable payload in a row: a client that sends nothing else is told goodbye at
/// the [`MAX_MALFORMED_RUN`]-th, while a burst of garbage between readable payloads costs
/// only its packets.
fn unreadable<'a>(run: &mut u32, why: PacketDrop, frame: Option<&'a [u8]>) -> Arrived<'a> {
    *run = run.saturating_add(1);
    Arrived::Unreadable { why, frame, close: *run == MAX_MALFORMED_RUN }
}
