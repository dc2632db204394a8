//! A zone's handoffs, the game's side: [`ZoneExit`] hands a player to a neighbouring zone, and the departures and refusals it queues.

use super::{MAX_ASKED_HANDOFFS, MAX_REFUSED_KEPT};
use crate::protocol::zone::ZoneId;
use crate::server::game::world::PlayerId;
use std::sync::{Arc, Mutex};

/// The game's side of a zone's handoffs ([`ZoneLink::exit`](crate::server::zone::ZoneLink::exit)): a world that runs as a zone
/// keeps it and hands its players to neighbouring zones through it. Cheap to clone.
///
/// ```
/// # use volley::prelude::*;
/// # use volley::protocol::zone::ZoneLayout;
/// # use volley::server::zone::ZoneExit;
/// # struct Game { layout: ZoneLayout, me: u16, exit: Option<ZoneExit>, avatars: Vec<(PlayerId, glam::Vec2)> }
/// # impl Game {
/// fn tick(&mut self, _tick: u32, _dt: std::time::Duration) {
///     let Some(exit) = &self.exit else { return };
///     for refused in exit.take_refused() {
///         tracing::debug!(player = refused.player, why = %refused.why, "stays here");
///     }
///     for (player, at) in &self.avatars {
///         match self.layout.owner(*at) {
///             Some(zone) if zone != self.me => exit.hand_off(*player, zone, at.x.to_le_bytes().to_vec()),
///             _ => {}
///         }
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ZoneExit {
    shared: Arc<Mutex<ExitQueue>>,
}

/// What a [`ZoneExit`] holds between the game and the zone's tap.
#[derive(Debug, Default)]
pub(super) struct ExitQueue {
    asked: Vec<(PlayerId, ZoneId, Vec<u8>)>,
    refused: std::collections::VecDeque<Refused>,
}

/// A handoff that did not happen ([`ZoneExit::take_refused`]): the player stays, its held
/// inputs applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The player.
    pub player: PlayerId,
    /// The zone it was to go to.
    pub to: ZoneId,
    /// Why not: the new zone refused it, did not answer in time, or the bus is behind.
    pub why: String,
}

impl ZoneExit {
    /// Hands `player` (one of this zone's) to the neighbouring zone `to`, with `state`: what
    /// the game there needs to go on with it (its avatar's place, health, inventory: at most
    /// [`MAX_STATE_BYTES`](crate::protocol::zone::handoff::MAX_STATE_BYTES)). Call it when
    /// the player's avatar crosses into `to`'s region (every tick it stays there is fine).
    ///
    /// From the next tick on the player's inputs are held, not applied, while the new zone
    /// is asked (at most the zone's handoff timeout, 100 ms by default). If it accepts, the
    /// player leaves this world ([`World::leave`](crate::server::World::leave)), its client is given a connect token for
    /// the new zone's server and goes on there by itself, re-sending the inputs held here,
    /// and the new zone's [`World::join_with`](crate::server::World::join_with) gets `state` in [`JoinInfo::handoff`](crate::server::JoinInfo::handoff). If it
    /// refuses or does not answer, the player stays: the held inputs are applied, in order,
    /// and [`ZoneExit::take_refused`] says why. A second handoff of the same player while
    /// one is under way, or within [`HANDOFF_COOLDOWN`](crate::server::zone::HANDOFF_COOLDOWN) of a refusal, is ignored.
    pub fn hand_off(&self, player: PlayerId, to: ZoneId, state: impl Into<Vec<u8>>) {
        let Ok(mut q) = self.shared.lock() else { return };
        if q.asked.len() < MAX_ASKED_HANDOFFS {
            q.asked.push((player, to, state.into()));
        } else {
            q.refuse(Refused { player, to, why: "too many handoffs asked in one tick".into() });
        }
    }

    /// The handoffs refused since the last call (the newest [`MAX_REFUSED_KEPT`]).
    pub fn take_refused(&self) -> Vec<Refused> {
        self.shared.lock().map(|mut q| q.refused.drain(..).collect()).unwrap_or_default()
    }

    pub(super) fn take_asked(&self) -> Vec<(PlayerId, ZoneId, Vec<u8>)> {
        self.shared.lock().map(|mut q| std::mem::take(&mut q.asked)).unwrap_or_default()
    }

    pub(super) fn refuse(&self, r: Refused) {
        if let Ok(mut q) = self.shared.lock() {
            q.refuse(r);
        }
    }
}

impl ExitQueue {
    fn refuse(&mut self, r: Refused) {
        if self.refused.len() >= MAX_REFUSED_KEPT {
            self.refused.pop_front();
        }
        self.refused.push_back(r);
    }
}
