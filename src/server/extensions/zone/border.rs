//! The border world: the newest border entities each neighbour sent, shown read-only beside the zone's own, and its relevancy.

use super::link::{RELEVANCY_TIMED_EVERY, add_spent};
use super::tap::{HIDE_TICKS, Hidden, LINGER, Shown};
use super::{BorderPlaces, BorderView, ZoneGame, ZoneOptions};
use crate::protocol::snapshot::{Interest, Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::zone::ZoneCounters;
use crate::protocol::zone::{BorderFrame, ZoneId, border_id, split_border_id};
use crate::server::game::world::{Handles, PlayerId, Relevancy, World};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use volley_util::cpu::{cpu_since, thread_cpu_time};

/// A neighbour's newest frame, and when (in border-world ticks) it came.
pub(super) struct Heard {
    frame: BorderFrame,
    at: u64,
}

/// The border world: the newest border entities of each neighbour, read-only (see the
/// module docs).
pub(crate) struct BorderWorld {
    pub schema: Schema,
    pub me: ZoneId,
    pub game: Arc<dyn ZoneGame>,
    pub home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    pub fade_ticks: u64,
    pub counters: Arc<ZoneCounters>,
    /// The zone's neighbours: a border entity's id carries its zone's place here.
    neighbours: Vec<ZoneId>,
    heard: BTreeMap<ZoneId, Heard>,
    ticks: u64,
    /// Handed-in players not to show from their old zone's frames.
    hidden: Hidden,
    /// The frames its snapshots were made of, when the zone publishes its state.
    pub(super) shown: Option<Shown>,
}

impl BorderWorld {
    pub(crate) fn new(
        schema: Schema,
        options: &ZoneOptions,
        home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
        fade_ticks: u64,
        counters: Arc<ZoneCounters>,
        hidden: Hidden,
    ) -> Self {
        Self {
            schema,
            me: options.me,
            game: options.game.clone(),
            home,
            fade_ticks: fade_ticks.max(1),
            counters,
            neighbours: options.layout.neighbours(options.me).to_vec(),
            heard: BTreeMap::new(),
            ticks: 0,
            hidden,
            shown: None,
        }
    }
}

impl Handles<BorderFrame> for BorderWorld {
    fn handle(&mut self, frame: BorderFrame) {
        let began = thread_cpu_time();
        self.keep(frame);
        add_spent(&self.counters.world_ns, began);
    }
}

impl World for BorderWorld {
    fn schema(&self) -> Schema {
        self.schema.clone()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        let began = thread_cpu_time();
        self.age();
        add_spent(&self.counters.world_ns, began);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let began = thread_cpu_time();
        self.show(out);
        add_spent(&self.counters.world_ns, began);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(BorderRelevancy {
            game: self.game.clone(),
            home: self.home.clone(),
            hidden: self.hidden.clone(),
            places: Mutex::default(),
            counters: self.counters.clone(),
        })
    }
}

impl BorderWorld {
    /// Keeps a neighbour's frame, unless an older one than what is shown.
    fn keep(&mut self, frame: BorderFrame) {
        let zone = frame.zone;
        // A frame older than the one shown (reordered on the bus) is left out.
        if self.heard.get(&zone).is_some_and(|h| h.frame.tick >= frame.tick && self.ticks - h.at < self.fade_ticks) {
            return;
        }
        if !self.heard.contains_key(&zone) {
            tracing::info!(zone = self.me, neighbour = zone, "border entities from a neighbour");
        }
        if let Some(shown) = &self.shown
            && let Ok(mut shown) = shown.lock()
        {
            shown.heard.insert(zone, frame.tick);
        }
        self.heard.insert(zone, Heard { frame, at: self.ticks });
    }

    /// One tick on: neighbours quiet too long fade.
    fn age(&mut self) {
        self.ticks += 1;
        let (now, fade) = (self.ticks, self.fade_ticks);
        let (me, counters) = (self.me, &self.counters);
        self.heard.retain(|zone, h| {
            let alive = now - h.at <= fade;
            if !alive {
                counters.fades.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(zone = me, neighbour = zone, "a neighbour went quiet: its border entities fade");
            }
            alive
        });
        let n: usize = self.heard.values().map(|h| h.frame.snapshot.len()).sum();
        counters.entities_in.store(n as u64, Ordering::Relaxed);
    }

    /// Every neighbour's newest entities, under border ids, less the hidden players.
    fn show(&self, out: &mut SnapshotBuilder<'_>) {
        // A hidden player goes LINGER snapshots after the first made from its old zone's
        // frame without it (the relevancy reads the set when a player's view is sent; the
        // view may merge the border world's snapshot before this one).
        if let Ok(mut hidden) = self.hidden.write()
            && !hidden.is_empty()
        {
            hidden.retain(|b, hide| {
                let (slot, id) = split_border_id(*b);
                let Some(h) = self.neighbours.get(slot).and_then(|z| self.heard.get(z)) else { return false };
                let until = *hide.until.get_or_insert(h.frame.tick.wrapping_add(HIDE_TICKS));
                if hide.lacking > 0 || h.frame.snapshot.find(id).is_none() {
                    hide.lacking = hide.lacking.saturating_add(1);
                    return hide.lacking < LINGER;
                }
                h.frame.tick.wrapping_sub(until) >= 1 << 31
            });
        }
        if let Some(shown) = &self.shown
            && let Ok(mut shown) = shown.lock()
        {
            let now = self.heard.iter().map(|(z, h)| (*z, h.frame.tick)).collect();
            shown.snapshots[1] = std::mem::replace(&mut shown.snapshots[0], now);
        }
        for (zone, h) in &self.heard {
            // Frames come from neighbours only (the inbox checks).
            let Some(slot) = self.neighbours.iter().position(|n| n == zone) else { continue };
            for e in h.frame.snapshot.iter() {
                // The frame decoded with this schema: its kinds fit.
                let _ = out.copy_entity_as(border_id(slot, e.id), e);
            }
        }
    }
}

/// Who sees which border entity: the game's [`ZoneGame::border_interest`], with the zone's
/// newest snapshot to find the player in.
pub(super) struct BorderRelevancy {
    game: Arc<dyn ZoneGame>,
    home: Arc<RwLock<Option<Arc<WorldSnapshot>>>>,
    hidden: Hidden,
    places: Mutex<Places>,
    counters: Arc<ZoneCounters>,
}

thread_local! {
    /// Calls of border relevancies on this thread (one in [`RELEVANCY_TIMED_EVERY`] is
    /// timed): a count of the thread's own, as a shared one would bounce between cores.
    static CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The places of the entities of the border world's recent snapshots, by snapshot: read
/// once per snapshot, for every player's view (a view may merge one before the newest).
#[derive(Default)]
pub(super) struct Places {
    recent: std::collections::VecDeque<(u64, Arc<BorderPlaces>)>,
}

/// Border snapshots whose places are kept.
pub(super) const PLACES_KEPT: usize = 4;

impl BorderRelevancy {
    fn places_of(&self, world: &WorldSnapshot) -> Arc<BorderPlaces> {
        let serial = world.serial();
        let place = || Arc::new(BorderPlaces::of(&*self.game, world));
        let Ok(mut places) = self.places.lock() else { return place() };
        if let Some((_, p)) = places.recent.iter().find(|(s, _)| *s == serial) {
            return p.clone();
        }
        let p = place();
        if places.recent.len() == PLACES_KEPT {
            places.recent.pop_front();
        }
        places.recent.push_back((serial, p.clone()));
        p
    }
}

impl Relevancy for BorderRelevancy {
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>) {
        let timed = CALLS.with(|c| {
            c.set(c.get().wrapping_add(1));
            c.get().is_multiple_of(RELEVANCY_TIMED_EVERY)
        });
        let began = timed.then(thread_cpu_time);
        out.clear();
        let home = self.home.read().ok().and_then(|h| h.clone());
        if let Some(home) = home {
            let placed = self.places_of(world);
            self.game.border_interest(&home, &BorderView { snapshot: world, places: &placed }, player, out);
        }
        if let Ok(hidden) = self.hidden.read()
            && !hidden.is_empty()
        {
            let ids = world.ids();
            out.retain(|i| ids.get(i.index as usize).is_none_or(|id| !hidden.contains_key(id)));
        }
        if let Some(began) = began {
            let spent = cpu_since(began).as_nanos() as u64;
            self.counters.relevancy_ns.fetch_add(spent * RELEVANCY_TIMED_EVERY, Ordering::Relaxed);
        }
    }
}
