//! The tap on a zone's world: its newest snapshot for the border relevancy, every snapshot for the bus shell, and which of its players the neighbours show.

use super::exit::{Refused, ZoneExit};
use super::link::{Ticked, ZoneInbox};
use super::{Departing, HANDOFF_COOLDOWN, HandoffEnd};
use crate::protocol::recording::Event;
use crate::protocol::snapshot::WorldSnapshot;
use crate::protocol::zone::ZoneCounters;
use crate::protocol::zone::handoff::{Offer, Outcome};
use crate::protocol::zone::{ZoneId, border_id};
use crate::server::game::world::{JoinInfo, PlayerId, Players, Tap, TokenKeys};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The tap on a zone's world: its newest snapshot for the border relevancy, and every
/// snapshot for the bus shell (bounded: a shell behind loses ticks, counted).
pub(crate) struct ZoneTap {
    pub inbox: ZoneInbox,
    pub newest: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    pub tx: tokio::sync::mpsc::Sender<Ticked>,
    /// Whether each tick's players go with it (for the zone's [`StateFrame`]).
    pub publish_state: bool,
    pub departing: tokio::sync::mpsc::Sender<Departing>,
    pub counters: Arc<ZoneCounters>,
    pub keys: TokenKeys,
    /// How long the token for the new zone may be used to start connecting.
    pub token_life: Duration,
    /// Who each player of the zone's world is (its token's client id and user data): what
    /// an offer for it carries, and what its token for the new zone says.
    pub who: BTreeMap<PlayerId, (u64, [u8; crate::protocol::netcode::USER_DATA_BYTES])>,
    /// The game's side of the handoffs.
    pub exit: ZoneExit,
    /// Players being handed off, and where to.
    pub leaving: BTreeMap<PlayerId, ZoneId>,
    /// Players whose handoff was refused, and until when another is ignored (on the inbox's
    /// clock).
    pub cooldown: BTreeMap<PlayerId, Duration>,
    /// Players handed over to this zone whose first input here has not been applied yet,
    /// with the newest input their old zone applied.
    pub arrived: BTreeMap<PlayerId, u32>,
    /// Border entities not to show (shared with the border world).
    pub hidden: Hidden,
    /// The neighbours' frames the border world's two newest snapshots were made of, when the
    /// zone publishes its state (shared with the border world).
    pub shown: Option<Shown>,
}

/// What the border world's views are made of, for [`StateFrame::held`] (kept only when the
/// zone publishes its state; shared with the border world).
pub(crate) type Shown = Arc<Mutex<ShownFrames>>;

/// See [`Shown`].
#[derive(Debug, Default)]
pub(crate) struct ShownFrames {
    /// The tick of each neighbour's frame in the border world's newest snapshot, and in the
    /// one before (the players' views merge the newest the broadcaster has: it may be the
    /// one before).
    pub(super) snapshots: [Vec<(ZoneId, u32)>; 2],
    /// The newest frame heard from each neighbour (the border world's next snapshot, which
    /// a view may merge before the zone's next tick, is made of it).
    pub(super) heard: BTreeMap<ZoneId, u32>,
}

impl ShownFrames {
    /// Each neighbour both of the border world's newest snapshots hold: the older frame of
    /// the two, and the newest heard (a view merged now holds one in between).
    fn held(&self) -> Vec<(ZoneId, u32, u32)> {
        let [newest, before] = &self.snapshots;
        newest
            .iter()
            .filter_map(|(z, t)| {
                let old = before.iter().find(|(b, _)| b == z)?.1.min(*t);
                Some((*z, old, self.heard.get(z).copied().unwrap_or(*t).max(*t)))
            })
            .collect()
    }
}

/// Border entities (border ids) not shown to the zone's players: players handed over to
/// this zone, as their old zone's frames still held them when they joined here. Each goes
/// [`LINGER`] border-world snapshots after the first made from a frame of that zone without
/// it, or [`HIDE_TICKS`] of that zone's ticks past the newest frame it had when it first hid
/// it (the id may have been given to another player there since). At most [`MAX_HIDDEN`].
pub(crate) type Hidden = Arc<RwLock<BTreeMap<u32, Hide>>>;

/// One entry of [`Hidden`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hide {
    /// The old zone's tick it stays hidden until at most (set at the first snapshot).
    pub(super) until: Option<u32>,
    /// Border-world snapshots made since the old zone's frames lacked it.
    pub(super) lacking: u8,
}

/// How many border-world snapshots a hidden player stays hidden after the first made without
/// it: the players' views merge the border world's newest snapshot the broadcaster has, which
/// may still be the one before (with the player) when the hide would end at once.
pub(super) const LINGER: u8 = 2;

/// How many of the old zone's ticks a handed-in player stays hidden at most: its frames in
/// flight when the player joined here (the old zone let go before that) are older.
pub(super) const HIDE_TICKS: u32 = 4;

/// Handed-in players hidden from the old zone's frames at once, at most.
pub(super) const MAX_HIDDEN: usize = 1024;

impl ZoneTap {
    /// The connect token, for the player whose token said `who`, to the zone at `server`.
    fn mint(
        &self,
        who: (u64, [u8; crate::protocol::netcode::USER_DATA_BYTES]),
        server: std::net::SocketAddr,
    ) -> Result<Vec<u8>, String> {
        use crate::protocol::netcode::token::{ConnectToken, TokenParams};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
        let mut params = TokenParams::new(self.keys.protocol_id, who.0, server, now.as_secs());
        params.user_data = who.1;
        params.expire_seconds = self.token_life.as_secs().max(1);
        let token = ConnectToken::generate(&params, &self.keys.private_key).map_err(|e| e.to_string())?;
        Ok(token.to_bytes().to_vec())
    }

    /// Offers `player` to zone `to` through the bus shell, with the game's `state` for it.
    fn offer(
        &mut self,
        player: PlayerId,
        to: ZoneId,
        state: Vec<u8>,
        last_applied: Option<u32>,
        now: Duration,
    ) -> Result<(), String> {
        let Some(&(client_id, user_data)) = self.who.get(&player) else {
            return Err("the player is not known to the zone".into());
        };
        let offer = Offer {
            from: self.inbox.me,
            client_id,
            user_data: user_data.to_vec(),
            state,
            last_applied: last_applied.unwrap_or(0),
            inputs: Vec::new(),
            old_id: Some(player),
        };
        offer.check().map_err(|e| e.to_string())?;
        if self.inbox.begin_handoff(player, to, now).is_err() {
            return Err("a handoff of the player is under way".into());
        }
        let departing = Departing { player, to, offer: offer.encode().into() };
        if self.departing.try_send(departing).is_err() {
            if let Ok(mut dep) = self.inbox.departures.lock() {
                dep.forget(player);
            }
            return Err("the zone's bus is behind".into());
        }
        Ok(())
    }

    /// How a handoff's outcome reaches the world: the token for the new zone, or why not.
    fn end_of(&self, outcome: Outcome) -> HandoffEnd {
        match outcome {
            Outcome::Accepted { player, server, .. } => {
                let token = match self.who.get(&player) {
                    Some(who) => self.mint(*who, server),
                    None => Err("the player is not known to the zone".into()),
                };
                if let Err(e) = &token {
                    tracing::error!(zone = self.inbox.me, player, error = %e, "no token for an accepted handoff; the player stays");
                }
                HandoffEnd { player, token }
            }
            Outcome::Refused { player, to, reason } => {
                HandoffEnd { player, token: Err(format!("zone {to} refused: {reason}")) }
            }
            Outcome::TimedOut { player, to } => {
                HandoffEnd { player, token: Err(format!("zone {to} did not answer in time")) }
            }
        }
    }
}

impl Tap for ZoneTap {
    fn joining(&mut self, player: PlayerId, who: &mut JoinInfo) {
        let inbox = &self.inbox;
        self.who.insert(player, (who.client_id, who.user_data));
        if let Some(offer) = inbox.take_arrival(who.client_id, inbox.now()) {
            tracing::debug!(zone = inbox.me, player, from = offer.from, "a player handed over arrived");
            // Its old zone's frames may still hold it for a tick or two: not shown twice.
            let slot = inbox.neighbours.iter().position(|n| *n == offer.from);
            if let (Some(slot), Some(old), Ok(mut h)) = (slot, offer.old_id, self.hidden.write())
                && h.len() < MAX_HIDDEN
            {
                h.insert(border_id(slot, old), Hide::default());
            }
            self.arrived.insert(player, offer.last_applied);
            who.handoff = Some(Arc::new(offer));
            who.origin = crate::server::game::world::Origin::HandedOver;
        }
    }

    fn before_inputs(&mut self, players: &mut Players<'_>) {
        let now = self.inbox.now();
        // The handoffs that ended: an accepted one sends the player on, a failed one lets
        // its held inputs go and tells the game.
        let mut ended = self.inbox.ended.lock().map(|mut e| std::mem::take(&mut *e)).unwrap_or_default();
        ended.extend(self.inbox.poll_handoff_timeouts(now));
        for o in ended {
            let HandoffEnd { player, token } = self.end_of(o);
            let Some(to) = self.leaving.remove(&player) else { continue };
            match token {
                Ok(token) => {
                    players.redirect(player, token);
                }
                Err(why) => {
                    players.release(player);
                    self.cooldown.insert(player, now + HANDOFF_COOLDOWN);
                    self.exit.refuse(Refused { player, to, why });
                }
            }
        }
        // The handoffs the game asked for since.
        for (player, to, state) in self.exit.take_asked() {
            let cooling = self.cooldown.get(&player).is_some_and(|until| now < *until);
            if !players.is_joined(player) || players.is_held(player) || self.leaving.contains_key(&player) || cooling {
                continue;
            }
            self.cooldown.remove(&player);
            match self.offer(player, to, state, players.last_applied(player), now) {
                Ok(()) => {
                    players.hold(player);
                    self.leaving.insert(player, to);
                }
                Err(why) => {
                    self.counters.handoffs_out[1].fetch_add(1, Ordering::Relaxed);
                    self.cooldown.insert(player, now + HANDOFF_COOLDOWN);
                    self.exit.refuse(Refused { player, to, why });
                }
            }
        }
        // Players handed over: did their first input here follow the old zone's newest?
        if !self.arrived.is_empty() {
            let counters = &self.counters;
            self.arrived.retain(|player, last| {
                let Some(seq) = players.first_applied(*player) else { return players.is_joined(*player) };
                let d = seq.wrapping_sub(*last);
                let (lost, repeated) =
                    if d == 0 || d >= 1 << 31 { (0, last.wrapping_sub(seq) + 1) } else { (d - 1, 0) };
                if lost + repeated > 0 {
                    tracing::warn!(player, lost, repeated, "a handed-over player's inputs did not follow on");
                }
                counters.inputs_lost.fetch_add(u64::from(lost), Ordering::Relaxed);
                counters.inputs_repeated.fetch_add(u64::from(repeated), Ordering::Relaxed);
                false
            });
        }
    }

    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        for e in events {
            match e {
                Event::Left { player } => {
                    self.leaving.remove(player);
                    self.cooldown.remove(player);
                    self.arrived.remove(player);
                    let client = self.who.remove(player).map(|w| w.0);
                    tracing::debug!(zone = self.inbox.me, tick, player, client, "a player left the zone's world");
                }
                Event::Joined { player, client_id } => {
                    tracing::debug!(zone = self.inbox.me, tick, player, client_id, "a player joined the zone's world");
                }
                _ => {}
            }
        }
        let Some(snapshot) = snapshot else { return true };
        if let Ok(mut n) = self.newest.write() {
            *n = Some(snapshot.clone());
        }
        // The time and the players only go with a tick whose state is published.
        let (unix_micros, players) = if self.publish_state {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            (now.map_or(0, |d| d.as_micros() as u64), Some(self.who.iter().map(|(p, w)| (*p, w.0)).collect()))
        } else {
            (0, None)
        };
        let held = self.shown.as_ref().and_then(|s| s.lock().ok().map(|s| s.held())).unwrap_or_default();
        match self.tx.try_send(Ticked { snapshot: snapshot.clone(), unix_micros, players, held }) {
            Ok(()) => true,
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            // The link is gone: stop sharing, keep the relevancy's view fresh.
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => true,
        }
    }
}
