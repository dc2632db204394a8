//! Any interleaving of joins, leaves, moves between worlds, watching and unwatching, entity
//! churn in several worlds and packet loss: every snapshot a client decodes equals what the
//! server's record says it holds at that tick (the merged view the server made for it, less
//! what the budget deferred), and that view holds exactly the entities of the worlds the
//! player is in or watches.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::rooms;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use rooms::Token;
use volley::prelude::*;

/// A world whose entities the test sets directly.
#[derive(Clone, Default)]
struct Churn {
    me: Arc<Mutex<u16>>,
    entities: Arc<Mutex<BTreeSet<u32>>>,
    tick: u32,
}

impl World for Churn {
    fn schema(&self) -> Schema {
        rooms::schema()
    }
    fn started(&mut self, me: WorldId, _: &Worlds) {
        *self.me.lock().unwrap() = me.number();
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let me = *self.me.lock().unwrap();
        for e in self.entities.lock().unwrap().iter() {
            // Half of them move every tick, half stand still.
            let tick = if e % 2 == 0 { self.tick } else { 0 };
            let _ = out.insert(*e, &Token { world: me, local: *e, tick });
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Step(u8),
    Connect,
    Disconnect(usize),
    Move(usize, usize),
    Watch(usize, usize, bool),
    Churn(usize, Vec<u32>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..40).prop_map(Op::Step),
        1 => Just(Op::Connect),
        1 => (0usize..8).prop_map(Op::Disconnect),
        3 => (0usize..8, 0usize..4).prop_map(|(c, w)| Op::Move(c, w)),
        2 => (0usize..8, 0usize..4, any::<bool>()).prop_map(|(c, w, on)| Op::Watch(c, w, on)),
        3 => (0usize..4, prop::collection::vec(0u32..40, 0..30)).prop_map(|(w, e)| Op::Churn(w, e)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_decoded_view_is_what_the_server_recorded_for_it(ops in prop::collection::vec(op(), 1..40), loss in 0.0f64..0.3) {
        let entry = Churn::default();
        let mut worlds = vec![entry.clone()];
        let mut s = Stepper::new(entry, 60, 16).with_world_kinds(&["a", "b"]);
        let mut ids = vec![WorldId::ENTRY];
        for k in 1..4 {
            let w = Churn::default();
            let options = if k == 3 { WorldOptions::new("b").tick_rate(20) } else { WorldOptions::new("b") };
            ids.push(s.worlds().spawn(options, w.clone()).unwrap());
            worlds.push(w);
        }
        let link = LinkProfile { latency: Duration::from_millis(20), jitter: Duration::from_millis(10), loss, burst: None };
        s.add_client(link);
        s.add_client(link);
        // What the server merged for each player at each tick.
        let mut sent: BTreeMap<(u32, u32), Arc<WorldSnapshot>> = BTreeMap::new();
        let mut checked = 0;
        let mut multi = 0;
        for op in std::iter::once(Op::Step(30)).chain(ops) {
            match op {
                Op::Step(n) => {
                    for _ in 0..n {
                        s.step();
                        let tick = s.tick();
                        for c in &s.clients {
                            let Some(p) = c.client.client_index() else { continue };
                            if let Some(view) = s.view_of(p).filter(|v| v.tick() == tick) {
                                let worlds: BTreeSet<u32> = view.ids().iter().map(|id| volley::protocol::snapshot::world::split_id(*id).0).collect();
                                multi += usize::from(worlds.len() > 1);
                                sent.insert((p, tick), view.clone());
                            }
                        }
                        for (i, c) in s.clients.iter().enumerate() {
                            let Some(p) = c.client.client_index() else { continue };
                            if c.client.ended().is_none() && let Some(got) = c.client.latest() {
                                let merged = sent.get(&(p, got.tick()));
                                prop_assert!(merged.is_some(), "player {} decoded tick {} the server never sent", p, got.tick());
                                // What the client decoded is what the server's record says
                                // it holds: the merged view less what the budget deferred
                                // (the room a move's world notice takes from the packet).
                                if let Some(held) = s.client_view(i, got.tick()) {
                                    prop_assert_eq!(got, &held);
                                    let merged = merged.unwrap();
                                    for &id in held.ids() {
                                        prop_assert!(merged.ids().contains(&id), "entity {} the merged view lacks", id);
                                    }
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
                Op::Connect if s.clients.len() < 8 => {
                    s.add_client(link);
                }
                Op::Disconnect(i) if i < s.clients.len() => s.disconnect(i),
                Op::Move(i, w) => {
                    if let Some(p) = s.clients.get(i).and_then(|c| c.client.client_index()) {
                        s.worlds().move_player(p, ids[w]);
                    }
                }
                Op::Watch(i, w, on) => {
                    if let Some(p) = s.clients.get(i).and_then(|c| c.client.client_index()) {
                        s.worlds().watch(p, ids[w], on);
                    }
                }
                Op::Churn(w, entities) => *worlds[w].entities.lock().unwrap() = entities.into_iter().collect(),
                _ => {}
            }
        }
        // The views hold exactly the worlds each player sees: its home and what it watches
        // (each of them that has entities).
        s.run(4);
        for c in &s.clients {
            let Some(p) = c.client.client_index() else { continue };
            let (Some(view), Some(home)) = (s.view_of(p), s.home(p)) else { continue };
            let shown: BTreeSet<u32> =
                view.ids().iter().map(|id| volley::protocol::snapshot::world::split_id(*id).0).collect();
            let sees: BTreeSet<u32> = std::iter::once(home).chain(s.watching(p)).map(|w| u32::from(w.number())).collect();
            let nonempty: BTreeSet<u32> = sees
                .iter()
                .copied()
                .filter(|n| !worlds[ids.iter().position(|i| u32::from(i.number()) == *n).unwrap()].entities.lock().unwrap().is_empty())
                .collect();
            prop_assert_eq!(&shown, &nonempty, "player {} sees {:?}", p, sees);
        }
        prop_assert!(checked > 0 || multi == 0);
        for c in &s.clients {
            prop_assert_eq!(c.client.stats().snapshot_errors, 0, "every snapshot decodes");
        }
    }
}
