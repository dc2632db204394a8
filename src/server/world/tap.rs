//! Taps: the extension interface. A tap takes a world's frames on the tick's path — the
//! recorder, the spectators' feed and a zone's border are taps — with hooks on its joins
//! and handoffs; a game adds its own ([`Worlds::tap`](super::Worlds::tap)).

use std::sync::Arc;

use super::{JoinInfo, Outgoing, PlayerId};
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

    /// The world hands a player to another zone ([`Outbox::hand_off`]): a zone's tap takes
    /// it (true) and asks the new zone; any other leaves it (false).
    ///
    /// [`Outbox::hand_off`]: crate::server::Outbox::hand_off
    fn handing_off(&mut self, departure: &Departure) -> bool {
        let _ = departure;
        false
    }

    /// Handoffs that ended since the last step, into `out`. Nothing by default.
    fn poll_handoffs(&mut self, out: &mut Vec<HandoffEnd>) {
        let _ = out;
    }

    /// A player handed over from another zone had its first input applied here: `lost`
    /// inputs between the old zone's newest applied one and it never came, `repeated` were
    /// applied by both zones (both 0 when the handoff lost nothing). Nothing by default.
    fn arrival_inputs(&mut self, player: PlayerId, lost: u32, repeated: u32) {
        let _ = (player, lost, repeated);
    }
}

/// A player the world hands to another zone, as its tap sees it ([`Tap::handing_off`]).
#[derive(Debug, Clone)]
pub struct Departure {
    /// The player.
    pub player: PlayerId,
    /// The zone it goes to.
    pub to: crate::protocol::zone::ZoneId,
    /// The game's state for it.
    pub state: Vec<u8>,
    /// The newest of its inputs the world applied.
    pub last_applied: Option<u32>,
}

/// How a handoff ended ([`Tap::poll_handoffs`]): the connect token for the new zone
/// (accepted), or why the player stays.
#[derive(Debug, Clone)]
pub struct HandoffEnd {
    /// The player.
    pub player: PlayerId,
    /// The connect token for the new zone, or why the handoff failed.
    pub token: Result<Vec<u8>, String>,
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
