//! The figures of worlds by kind: ticks, overruns, faults, the client messages they were handed, and the zones.

use super::hot::Count;
use super::render::{META, key};
use super::{KindFigures, ServerMetrics};
use crate::protocol::zone::ZoneCounters;
use crate::server::game::world::WorldFault;
use metrics::Recorder;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

impl ServerMetrics {
    /// Declares the server's world kinds (the `kind` label's values: a bounded set, fixed
    /// at start; later calls change nothing). Labels are kept for the process's lifetime.
    pub(crate) fn declare_world_kinds(&self, kinds: &[String]) {
        let figures = kinds
            .iter()
            .map(|k| {
                let label: &'static str = Box::leak(k.clone().into_boxed_str());
                KindFigures {
                    label,
                    worlds: AtomicU64::new(0),
                    players: AtomicU64::new(0),
                    overruns: AtomicU64::new(0),
                    ticks: AtomicU64::new(0),
                    tick: self
                        .recorder
                        .register_histogram(&key("volley_world_tick_duration_seconds", &[("kind", label)]), &META),
                }
            })
            .collect();
        let _ = self.kinds.set(figures);
    }

    /// The index of a declared world kind.
    pub(crate) fn kind_index(&self, kind: &str) -> Option<usize> {
        self.kinds.get()?.iter().position(|k| k.label == kind)
    }

    /// Records one tick of a world of kind `kind` (an index from [`Self::kind_index`]).
    pub(crate) fn record_world_tick(&self, kind: usize, took: Duration) {
        if let Some(k) = self.kinds.get().and_then(|k| k.get(kind)) {
            k.ticks.fetch_add(1, Ordering::Relaxed);
            k.tick.record(took.as_secs_f64());
        }
    }

    /// Counts an overrun of a world of kind `kind`.
    pub(crate) fn record_world_overrun(&self, kind: usize) {
        if let Some(k) = self.kinds.get().and_then(|k| k.get(kind)) {
            k.overruns.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets the worlds and players per kind from the directory's list (id, kind, players).
    pub(crate) fn set_worlds<'a>(&self, worlds: impl Iterator<Item = (crate::server::WorldId, &'a str, usize)>) {
        let Some(kinds) = self.kinds.get() else { return };
        let mut counts = vec![(0u64, 0u64); kinds.len()];
        for (_, kind, players) in worlds {
            if let Some(i) = kinds.iter().position(|k| k.label == kind) {
                counts[i].0 += 1;
                counts[i].1 += players as u64;
            }
        }
        for (k, (w, p)) in kinds.iter().zip(counts) {
            k.worlds.store(w, Ordering::Relaxed);
            k.players.store(p, Ordering::Relaxed);
        }
    }

    /// Worlds running and players in them, by kind: (kind, worlds, players, ticks).
    pub fn worlds_by_kind(&self) -> Vec<(&'static str, u64, u64, u64)> {
        let get = |a: &dyn Count| a.value();
        self.kinds
            .get()
            .map(|k| k.iter().map(|k| (k.label, get(&k.worlds), get(&k.players), get(&k.ticks))).collect())
            .unwrap_or_default()
    }

    /// The world's counts of its game's faults (all kinds but the relevancy's, which the
    /// player paths count with [`ServerMetrics::record_world_fault`]).
    pub(crate) fn add_world_faults(&self, faults: impl Iterator<Item = (WorldFault, u64)>) {
        for ((fault, n), slot) in faults.zip(&self.world_faults) {
            if fault != WorldFault::RelevancyOrder && n > 0 {
                slot.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Counts client messages: `queued` handed to the world, the ones the session dropped,
    /// and `full` refused by a full input queue.
    pub(crate) fn record_client_messages(
        &self,
        queued: u64,
        drops: crate::server::cores::session::MessageDrops,
        full: u64,
    ) {
        if queued > 0 {
            self.client_messages.fetch_add(queued, Ordering::Relaxed);
        }
        for (i, n) in [drops.flood, drops.too_large, full].into_iter().enumerate() {
            if n > 0 {
                self.client_message_drops[i].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Client messages handed to the world so far, and dropped (flood, too large, queue full).
    pub fn client_messages(&self) -> (u64, [u64; 3]) {
        let get = |a: &dyn Count| a.value();
        (get(&self.client_messages), std::array::from_fn(|i| get(&self.client_message_drops[i])))
    }

    /// Counts one fault of the game's code; how many of its kind so far.
    pub(crate) fn record_world_fault(&self, fault: WorldFault) -> u64 {
        WorldFault::ALL
            .iter()
            .position(|f| *f == fault)
            .map_or(0, |i| self.world_faults[i].fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Faults of the game's code survived so far, of `fault`'s kind.
    pub fn world_faults(&self, fault: WorldFault) -> u64 {
        WorldFault::ALL.iter().position(|f| *f == fault).map_or(0, |i| self.world_faults[i].load(Ordering::Relaxed))
    }

    /// Reports a zone's figures (`volley_zone_*`) from now on.
    pub(crate) fn add_zone(&self, counters: Arc<ZoneCounters>) {
        if let Ok(mut z) = self.zones.lock() {
            z.push(counters);
        }
    }
}
