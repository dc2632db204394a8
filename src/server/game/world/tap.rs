//! Taps: the extension interface. A tap takes a world's frames on the tick's path — the
//! recorder, the spectators' feed and a zone's border are taps — with hooks on its joins
//! and on its players before each tick's inputs ([`Players`]: hold, release, redirect, kick, send); a
//! game adds its own ([`Worlds::tap`](super::Worlds::tap)).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{Audience, JoinInfo, Outgoing, PlayerId};
use crate::protocol::recording::Event;
use crate::protocol::snapshot::WorldSnapshot;

/// An extension on a world: it takes the world's frame at every tick — the snapshot (shared
/// with the players, never copied) and what happened: joins, leaves, the world's messages
/// with their audiences, the scoreboard — on the tick's path, so it must not block (hand the
/// work to a thread of your own through a bounded queue, as the recorder does). Recording,
/// spectators and zones are taps; attach your own with [`Worlds::tap`](super::Worlds::tap),
/// in the stepper as on the server. A tap that panics is a game fault like any other
/// (caught, counted; the world goes on without the tick's frame).
///
/// An analytics exporter, counting the messages a world sends:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use volley::protocol::recording::Event;
/// use volley::protocol::snapshot::WorldSnapshot;
/// use volley::server::Tap;
///
/// struct Analytics(Arc<AtomicU64>);
///
/// impl Tap for Analytics {
///     fn frame(&mut self, _tick: u32, _snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
///         let sent = events.iter().filter(|e| matches!(e, Event::Message { .. })).count();
///         self.0.fetch_add(sent as u64, Ordering::Relaxed);
///         true // keep tapping
///     }
/// }
/// // worlds.tap(WorldId::ENTRY, Box::new(Analytics(counter.clone())))?;
/// ```
pub trait Tap: Send {
    /// The frame of `tick`: its snapshot (`None` when the game's snapshot panicked) and
    /// what happened since the last frame. False once the tap is done with: it is dropped.
    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool;

    /// A player is joining the world: a tap may add to who it is before the world hears
    /// (a zone gives a player handed over from a neighbour its carried state). Nothing by
    /// default.
    fn joining(&mut self, player: PlayerId, who: &mut JoinInfo) {
        let _ = (player, who);
    }

    /// Before each tick's inputs: what the tap does to the world's players through
    /// [`Players`] (hold a player's inputs while it may be leaving, let them go, send it to
    /// another server, kick it, send messages). A zone hands its players over this way; an
    /// anti-cheat tap judges what it saw in [`Tap::frame`] and kicks here. Nothing by
    /// default.
    fn before_inputs(&mut self, players: &mut Players<'_>) {
        let _ = players;
    }
}

/// A world's players as a tap may act on them before a tick's inputs
/// ([`Tap::before_inputs`]): hold one's inputs while it may be leaving, let them go, send it
/// to another server, kick it, or send messages to the world's audiences. Holds, releases
/// and redirects are carried out before the tick's inputs, in order; kicks and messages go
/// out with the tick's own, after the world's.
///
/// A tap that sends the players of a world to another server once a backend has a token for
/// each:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use volley::server::{PlayerId, Players, Tap};
/// # use volley::protocol::{recording::Event, snapshot::WorldSnapshot};
///
/// /// Tokens for the new server, by player, as the backend mints them.
/// struct Evacuate(Arc<Mutex<Vec<(PlayerId, Vec<u8>)>>>);
///
/// impl Tap for Evacuate {
///     fn frame(&mut self, _: u32, _: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
///         true
///     }
///     fn before_inputs(&mut self, players: &mut Players<'_>) {
///         for (player, token) in self.0.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default() {
///             players.redirect(player, token);
///         }
///     }
/// }
/// ```
pub struct Players<'a> {
    pub(crate) joined: &'a BTreeSet<PlayerId>,
    pub(crate) applied: &'a BTreeMap<PlayerId, InputSpan>,
    pub(crate) held: &'a mut BTreeMap<PlayerId, HeldInputs>,
    /// Holds let go, their inputs to apply in order.
    pub(crate) released: &'a mut Vec<(PlayerId, HeldInputs)>,
    /// Players to send elsewhere, with their connect tokens.
    pub(crate) redirects: &'a mut Vec<(PlayerId, Vec<u8>)>,
    /// Players to kick, with the reason.
    pub(crate) kicks: &'a mut Vec<(PlayerId, String)>,
    /// Messages to send: audience, bytes, reliable.
    pub(crate) messages: &'a mut Vec<Outgoing>,
    /// The step this is before.
    pub(crate) step: u64,
}

impl Players<'_> {
    /// Whether `player` is in the world (and not being sent elsewhere or kicked this tick).
    pub fn is_joined(&self, player: PlayerId) -> bool {
        self.joined.contains(&player)
            && !self.redirects.iter().any(|(p, _)| *p == player)
            && !self.kicks.iter().any(|(p, _)| *p == player)
    }

    /// The sequence of the newest input of `player` the world applied, if any (since it
    /// joined).
    pub fn last_applied(&self, player: PlayerId) -> Option<u32> {
        self.applied.get(&player).map(|a| a.newest)
    }

    /// The sequence of the first input of `player` the world applied since it joined, if
    /// one was (a zone checks that a player handed over went on where its old zone stopped).
    pub fn first_applied(&self, player: PlayerId) -> Option<u32> {
        self.applied.get(&player).map(|a| a.first)
    }

    /// Whether `player`'s inputs are held.
    pub fn is_held(&self, player: PlayerId) -> bool {
        self.held.contains_key(&player)
    }

    /// Holds `player`'s inputs from this tick on: they are kept, not applied (at most
    /// [`MAX_HELD_INPUTS`](crate::server::MAX_HELD_INPUTS); later ones are dropped), until
    /// [`Players::release`] or [`Players::redirect`], or for [`MAX_HOLD`] at most, after
    /// which they are applied. False when the player is not in the world or already held.
    pub fn hold(&mut self, player: PlayerId) -> bool {
        if !self.is_joined(player) || self.is_held(player) {
            return false;
        }
        self.held.insert(player, HeldInputs { since: self.step, inputs: Vec::new() });
        true
    }

    /// Lets `player`'s held inputs go: the world gets them now, in order, before this
    /// tick's. False when they were not held.
    pub fn release(&mut self, player: PlayerId) -> bool {
        let Some(h) = self.held.remove(&player) else { return false };
        self.released.push((player, h));
        true
    }

    /// Sends `player` to another server: its client is given `token` (a connect token for
    /// that server, with the newest input applied here) and goes on there by itself,
    /// sending again the inputs held here; the player leaves this world
    /// ([`World::leave`](crate::server::World::leave)). False when it is not in the world.
    pub fn redirect(&mut self, player: PlayerId, token: Vec<u8>) -> bool {
        if !self.is_joined(player) {
            return false;
        }
        self.held.remove(&player);
        self.redirects.push((player, token));
        true
    }

    /// Kicks `player`: it leaves the world at once, before this tick's inputs
    /// ([`World::leave`](crate::server::World::leave); none of its inputs is applied from
    /// here on, held ones are dropped), and its client is told
    /// [`SessionEnd::Kicked`](crate::protocol::session::SessionEnd::Kicked) with `reason`
    /// with this tick's output, as [`Outbox::kick`](crate::server::Outbox::kick) tells it.
    /// False when it is not in the world.
    ///
    /// An anti-cheat tap that kicks whoever its check flagged in the frames it saw:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use volley::protocol::{recording::Event, snapshot::WorldSnapshot};
    /// use volley::server::{Audience, PlayerId, Players, Tap};
    ///
    /// struct AntiCheat {
    ///     flagged: Vec<PlayerId>,
    /// }
    ///
    /// impl Tap for AntiCheat {
    ///     fn frame(&mut self, _: u32, _snapshot: Option<&Arc<WorldSnapshot>>, _: &[Event]) -> bool {
    ///         // ... compare each avatar's position with the last frame's, flag the impossible
    ///         true
    ///     }
    ///     fn before_inputs(&mut self, players: &mut Players<'_>) {
    ///         for p in self.flagged.drain(..) {
    ///             if players.kick(p, "moved faster than the game allows") {
    ///                 players.send(Audience::All, format!("player {p} was removed").into_bytes(), true);
    ///             }
    ///         }
    ///     }
    /// }
    /// ```
    pub fn kick(&mut self, player: PlayerId, reason: impl Into<String>) -> bool {
        if !self.is_joined(player) {
            return false;
        }
        self.held.remove(&player);
        self.kicks.push((player, reason.into()));
        true
    }

    /// Sends `data` to `to`, one of the world's audiences (as
    /// [`Outbox::reliable`](crate::server::Outbox::reliable), or as
    /// [`Outbox::event`](crate::server::Outbox::event) when not `reliable`), after the
    /// world's own messages of this tick: recorded, and heard by spectators by the same
    /// rules. At most [`MAX_TAP_MESSAGES`] a tick from a world's taps; false for one past
    /// that (it is not sent).
    pub fn send(&mut self, to: Audience, data: impl Into<bytes::Bytes>, reliable: bool) -> bool {
        if self.messages.len() >= MAX_TAP_MESSAGES {
            return false;
        }
        self.messages.push((to, data.into(), reliable));
        true
    }
}

/// Messages a world's taps may send in one tick ([`Players::send`]).
pub const MAX_TAP_MESSAGES: usize = 1024;

/// Inputs held for a player at most ([`Players::hold`]; four seconds at 60 Hz): later ones
/// are dropped.
pub const MAX_HELD_INPUTS: usize = 240;

/// How long a player's inputs are held at most ([`Players::hold`]): then they are applied,
/// as if released (a tap that holds them is gone, or stuck).
pub const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(2);

/// The first and the newest input of a player a world applied since it joined.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputSpan {
    pub first: u32,
    pub newest: u32,
}

/// A player's held inputs ([`Players::hold`]).
#[derive(Debug)]
pub(crate) struct HeldInputs {
    /// The step the hold began before.
    pub since: u64,
    pub inputs: Vec<HeldInput>,
}

/// An input held ([`Players::hold`]).
#[derive(Debug)]
pub(crate) struct HeldInput {
    pub seq: u32,
    pub bytes: Vec<u8>,
    pub view: Option<crate::protocol::input::ViewTime>,
}

/// A tap on its way to a world.
pub(crate) struct TapBox(pub Box<dyn Tap>);

impl std::fmt::Debug for TapBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TapBox")
    }
}

/// The recorded form of a message a world sent.
pub(crate) fn message_event((to, data, reliable): &Outgoing) -> Event {
    Event::Message { to: *to, reliable: *reliable, data: data.clone() }
}
