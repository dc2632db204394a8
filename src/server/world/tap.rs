//! Taps: what takes a world's frames on the tick's path (a recorder, a spectators' feed, a
//! zone's border), and the hooks a tap has on a world's joins and handoffs.

use std::sync::Arc;

use super::{JoinInfo, Outgoing, PlayerId};
use crate::protocol::recording::Event;
use crate::protocol::snapshot::WorldSnapshot;

/// Something that takes a world's frames, one per tick, on the tick's path (so it must not
/// block).
pub(crate) trait Tap: Send {
    /// The frame of `tick`; false once the tap is done with (its writer or reader is gone).
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

/// A player the world hands to another zone, as its tap sees it.
#[derive(Debug, Clone)]
pub(crate) struct Departure {
    pub player: PlayerId,
    pub to: crate::protocol::zone::ZoneId,
    /// The game's state for it.
    pub state: Vec<u8>,
    /// The newest of its inputs the world applied.
    pub last_applied: Option<u32>,
}

/// How a handoff ended: the connect token for the new zone (accepted), or why the player
/// stays.
#[derive(Debug, Clone)]
pub(crate) struct HandoffEnd {
    pub player: PlayerId,
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
