//! Zones in the stepper (the server's world, directory, tap and border-world code with only
//! the IO swapped; the two zones' links are joined by a bus in memory): a player near a
//! border sees exactly the entities within its view radius on both sides, each once, with
//! the owning zone's quantized state; a neighbour gone quiet fades, and comes back.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use glam::Vec2;
use volley::prelude::*;
use volley::protocol::snapshot::world::split_id;
use volley::protocol::snapshot::{EntityRef, Replicate};
use volley::protocol::zone::ZoneLayout;
use volley::server::zone::{ZoneGame, ZoneLink, ZoneOptions};

volley::replicated! {
    /// A dot on the map.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: Vec2 = Vec2Q::bounded(Vec2::ZERO, Vec2::new(200.0, 100.0), 0.01),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

const RADIUS: f32 = 30.0;
/// A player's avatar's entity id, in zone `zone` (ids are unique across the map).
fn avatar_id(zone: u16, player: PlayerId) -> u32 {
    100_000 * u32::from(zone) + 50_000 + player
}

struct Dots {
    me: u16,
}

impl ZoneGame for Dots {
    fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
        Some(Dot::dequantize(e.words).position)
    }
    fn view_radius(&self) -> f32 {
        RADIUS
    }
    fn viewer(&self, home: &WorldSnapshot, player: PlayerId) -> Option<Vec2> {
        home.get(home.find(avatar_id(self.me, player))?).and_then(|e| self.position(e))
    }
}

/// The dots each zone owns: a column of them every 5 units near the shared edge x = 100.
fn static_dots(zone: u16) -> Vec<(u32, Vec2)> {
    let xs: Vec<f32> = if zone == 0 { vec![60.0, 80.0, 95.0] } else { vec![101.0, 110.0, 125.0, 140.0] };
    let mut v = Vec::new();
    for (i, x) in xs.iter().enumerate() {
        for j in 0..5u32 {
            v.push((1000 * u32::from(zone) + 10 * i as u32 + j, Vec2::new(*x, 40.0 + 5.0 * j as f32)));
        }
    }
    v
}

struct Zone {
    me: u16,
    tick: u32,
    players: Vec<PlayerId>,
    link: Arc<Mutex<Option<ZoneLink>>>,
}

impl Zone {
    /// Where a player's avatar is at `tick`: walking to and fro along y = 50 between x = 55
    /// and x = 99 (zone 0 only has players).
    fn avatar_at(tick: u32) -> Vec2 {
        let phase = (tick % 176) as f32 / 4.0;
        let x = if phase < 22.0 { 55.0 + 2.0 * phase } else { 99.0 - 2.0 * (phase - 22.0) };
        Vec2::new(x, 50.0)
    }
}

impl World for Zone {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, RADIUS).unwrap();
        let options = ZoneOptions::new(layout, self.me, Arc::new(Dots { me: self.me }));
        *self.link.lock().unwrap() = Some(worlds.zone(me, options, WorldOptions::new("border")).unwrap());
    }
    fn join(&mut self, p: PlayerId) {
        self.players.push(p);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.retain(|q| *q != p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (id, p) in static_dots(self.me) {
            out.insert(id, &Dot { position: p }).unwrap();
        }
        for p in &self.players {
            out.insert(avatar_id(self.me, *p), &Dot { position: Self::avatar_at(self.tick) }).unwrap();
        }
    }
}

fn zone(me: u16) -> (Stepper<Zone>, Arc<Mutex<Option<ZoneLink>>>) {
    let link = Arc::new(Mutex::new(None));
    let world = Zone { me, tick: 0, players: Vec::new(), link: link.clone() };
    (Stepper::new(world, 60, 8).with_world_kinds(&["zone", "border"]), link)
}

/// Moves every frame one zone published to the other; `deliver` false drops them (the bus is
/// down).
fn pump(from: &Arc<Mutex<Option<ZoneLink>>>, to: &Arc<Mutex<Option<ZoneLink>>>, deliver: bool) -> usize {
    let mut from = from.lock().unwrap();
    let to = to.lock().unwrap();
    let (Some(from), Some(to)) = (from.as_mut(), to.as_ref()) else { return 0 };
    let mut n = 0;
    while let Some(frames) = from.try_next_frames() {
        for f in frames {
            assert_eq!(f.to, to.me());
            if deliver {
                to.handle_frame(&f.bytes).unwrap();
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_player_near_the_border_sees_both_sides_exactly_and_a_quiet_neighbour_fades() {
    let (mut a, link_a) = zone(0);
    let (mut b, link_b) = zone(1);
    for i in 0..3 {
        a.add_client(LinkProfile::PERFECT);
        let _ = i;
    }
    // Zone 1's own words for each of its dots, as its snapshot holds them (the oracle).
    let theirs: BTreeMap<u32, (Vec2, Vec<u32>)> = static_dots(1)
        .into_iter()
        .map(|(id, p)| {
            let d = Dot { position: p };
            let mut w = vec![0; 2];
            d.quantize(&mut w);
            (id, (Dot::dequantize(&w).position, w))
        })
        .collect();
    let mut checked = 0;
    let mut saw_across = 0;
    let mut faded_at = None;
    let mut returned_at = None;
    for step in 0..600u32 {
        // The bus goes down for a second in the middle.
        let bus_up = !(300..360).contains(&step);
        a.step();
        b.step();
        pump(&link_a, &link_b, bus_up);
        pump(&link_b, &link_a, bus_up);
        if step < 30 {
            continue;
        }
        for c in &a.clients {
            let Some(got) = c.client.latest() else { continue };
            let me = c.client.client_index().unwrap();
            let mut local = std::collections::BTreeSet::new();
            let mut mine = None;
            let mut across = BTreeMap::new();
            for e in got.iter() {
                let (world, id) = split_id(e.id);
                assert!(local.insert(id), "entity {id} twice in one snapshot");
                if world == 0 && id == avatar_id(0, me) {
                    mine = Some(Dot::dequantize(e.words).position);
                }
                if world != 0 {
                    across.insert(id, e.words.to_vec());
                }
            }
            let mine = mine.expect("the player's own avatar");
            let want: BTreeMap<u32, Vec<u32>> = theirs
                .iter()
                .filter(|(_, (p, _))| p.distance(mine) <= RADIUS)
                .map(|(id, (_, w))| (*id, w.clone()))
                .collect();
            if (41..300).contains(&step) || step > 400 {
                assert_eq!(across, want, "step {step}: zone 1's dots within {RADIUS} of {mine}");
                saw_across += usize::from(!want.is_empty());
                checked += 1;
            } else if !bus_up && faded_at.is_some() {
                assert!(across.is_empty(), "a faded neighbour shows nothing (step {step})");
            }
            // Before relevancy: every border entity the zone shows.
            let shown = a.view_of(me).unwrap().iter().filter(|e| split_id(e.id).0 != 0).count();
            if !bus_up && shown == 0 && faded_at.is_none() {
                faded_at = Some(step);
            }
            if bus_up && faded_at.is_some() && shown > 0 && returned_at.is_none() {
                returned_at = Some(step);
            }
        }
    }
    let faded_at = faded_at.expect("zone 1's dots faded while the bus was down");
    let returned_at = returned_at.expect("and came back");
    // Half a second of silence (30 ticks) and a tick or two of delivery.
    assert!((328..=334).contains(&faded_at), "faded at step {faded_at}");
    assert!((360..=364).contains(&returned_at), "returned at step {returned_at}");
    assert!(checked >= 3 * 450, "{checked} snapshots checked");
    assert!(saw_across > 3 * 200, "{saw_across} snapshots showed dots across the border");
    eprintln!("faded at {faded_at}, returned at {returned_at}, {checked} checked, {saw_across} across");
    let counters = link_a.lock().unwrap().as_ref().unwrap().counters().clone();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(n(&counters.fades), 1);
    assert_eq!(n(&counters.frames_refused), 0);
    assert!(n(&counters.frames_in) > 500, "{}", n(&counters.frames_in));
    assert!(n(&counters.entities_out) > 0, "zone 0 shares its dots at x = 95");
}
