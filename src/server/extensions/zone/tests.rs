//! The zone's tests.

#![allow(clippy::unwrap_used)]
use super::border::*;
use super::tap::*;
use super::*;
use crate::protocol::quant::Bits;
use crate::protocol::snapshot::{EntityRef, Interest, Schema, SnapshotBuilder, WorldSnapshot};
use crate::protocol::zone::handoff::{Answer, Offer};
use crate::protocol::zone::{BorderFrame, ZoneLayout, border_id, split_border_id};
use crate::server::game::spatial::Grid;
use crate::server::game::world::{Handles, JoinInfo, PlayerId, TokenKeys, World, WorldId, WorldRef};
use glam::Vec2;
use std::sync::{Arc, RwLock};
use std::time::Duration;

crate::replicated! {
    /// A dot on a line.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where, in whole units.
        pub x: u32 = Bits(10),
    }
}

struct Line;
impl ZoneGame for Line {
    fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
        Some(Vec2::new(*e.words.first()? as f32, 0.0))
    }
    fn view_radius(&self) -> f32 {
        1000.0
    }
}

fn snapshot(schema: &Schema, tick: u32, dots: &[(u32, u32)]) -> WorldSnapshot {
    let mut b = SnapshotBuilder::new(schema, tick);
    for &(id, x) in dots {
        b.insert(id, &Dot { x }).unwrap();
    }
    b.finish().unwrap()
}

/// Zone 0 of two side by side (its player 1 at x = 90); zone 1's frames hold `dots`.
struct Border {
    schema: Schema,
    world: BorderWorld,
    hidden: Hidden,
}

impl Border {
    fn new() -> Self {
        let mut schema = Schema::new();
        schema.register::<Dot>().unwrap();
        let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
        let options = ZoneOptions::new(layout, 0, Arc::new(Line));
        let home = Arc::new(RwLock::new(Some(Arc::new(snapshot(&schema, 1, &[(1, 90)])))));
        let hidden = Hidden::default();
        let world = BorderWorld::new(schema.clone(), &options, home, 30, Arc::default(), hidden.clone());
        Self { schema, world, hidden }
    }

    /// Zone 1's frame of `tick` arrives; what player 1 is shown of the border world then
    /// (zone 1's ids).
    fn shown(&mut self, tick: u32, dots: &[(u32, u32)]) -> Vec<u32> {
        let frame = snapshot(&self.schema, tick, dots);
        self.world.handle(BorderFrame { zone: 1, tick, snapshot: frame });
        let mut b = SnapshotBuilder::new(&self.schema, tick);
        self.world.snapshot(&mut b);
        let border = b.finish().unwrap();
        let mut out = Vec::new();
        self.world.relevancy().interest(&border, 1, &mut out);
        out.iter().map(|i| split_border_id(border.ids()[i.index as usize]).1).collect()
    }
}

/// A game that sees 15 units around a player.
struct Near;
impl ZoneGame for Near {
    fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
        Line.position(e)
    }
    fn view_radius(&self) -> f32 {
        15.0
    }
}

/// A game on a plane (x, y in whole units), seeing its `.0` units around.
struct Plane(f32);
impl ZoneGame for Plane {
    fn position(&self, e: EntityRef<'_>) -> Option<Vec2> {
        let (x, y) = (*e.words.first()?, *e.words.get(1)?);
        // Some entities have no place.
        (x % 7 != 3).then(|| Vec2::new(x as f32, y as f32))
    }
    fn view_radius(&self) -> f32 {
        self.0
    }
}

crate::replicated! {
    /// A dot on a plane.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Spot {
        /// Where, in whole units.
        pub x: u32 = Bits(10),
        /// Where, in whole units.
        pub y: u32 = Bits(10),
    }
}

#[test]
fn the_default_border_interest_searches_its_grid_and_finds_what_a_full_scan_finds() {
    let mut schema = Schema::new();
    schema.register::<Spot>().unwrap();
    let mut next = numbers(0x2545_f491_4f6c_dd1d);
    let (mut compared, mut indexed) = (0, Vec::new());
    for (radius, count) in [(15.0, 400), (60.0, 200), (0.0, 50), (5000.0, 300), (f32::NAN, 20)] {
        let game = Plane(radius);
        let border = spots(&schema, count, (1000, 300), &mut next);
        let places = BorderPlaces::of(&game, &border);
        let view = BorderView { snapshot: &border, places: &places };
        for _ in 0..50 {
            let me = (next(1200), next(400));
            let home = snapshot_of(&schema, me);
            let mut got = Vec::new();
            game.border_interest(&home, &view, 1, &mut got);
            // The full scan: every placed entity within the radius, by index (nothing for a
            // player with no place).
            let Some(at) = game.viewer(&home, 1) else {
                assert_eq!(got, []);
                continue;
            };
            let per = 1.0 / (radius * radius).max(f32::MIN_POSITIVE);
            let want: Vec<Interest> = view
                .placed()
                .iter()
                .map(|p| (p, p.position.distance_squared(at)))
                .filter(|(_, d2)| *d2 <= radius * radius)
                .map(|(p, d2)| Interest::new(p.index, 2.0 - d2 * per))
                .collect();
            assert_eq!(got, want, "radius {radius}, player at {me:?}");
            // What a game's own relevancy asks of the view: the same entities.
            let mut within: Vec<u32> = view.within(at, radius).map(|(p, _)| p.index).collect();
            within.sort_unstable();
            assert_eq!(within, want.iter().map(|i| i.index).collect::<Vec<_>>());
            compared += want.len();
        }
        indexed.push(view.is_indexed());
    }
    assert!(compared > 1000, "the answers held entities: {compared}");
    assert_eq!(indexed, [true, true, false, false, false], "spread over many cells, and not");
}

/// What the default border relevancy costs a player, indexed and by one pass over every
/// border entity, on a long border and on a small zone's (printed, not asserted; run with
/// `cargo test --release -p volley --lib border_interest_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a figure to read, in release"]
fn border_interest_cost() {
    let mut schema = Schema::new();
    schema.register::<Spot>().unwrap();
    let mut next = numbers(0x9e37_79b9_7f4a_7c15);
    // (what, radius, entities, width, height): a 1 km border 40 m deep; a 50 m zone's.
    for (what, radius, count, w, h) in [("long border", 40.0, 1000, 1000, 40), ("small zone", 40.0, 150, 50, 50)] {
        let game = Plane(radius);
        let border = spots(&schema, count, (w, h), &mut next);
        let placed = BorderPlaces::of(&game, &border).placed;
        let homes: Vec<WorldSnapshot> = (0..1000).map(|_| snapshot_of(&schema, (next(w), next(h + 100)))).collect();
        let mut indexed = BorderPlaces::new(placed.clone(), radius);
        let mut scanned = BorderPlaces::new(placed, radius);
        println!("{what}: indexed by the rule: {}", indexed.grid.is_some());
        scanned.grid = None;
        if indexed.grid.is_none() {
            let mut grid = Grid::new(Vec2::ZERO, Vec2::new(w as f32, h as f32), radius);
            for p in indexed.placed.iter() {
                grid.push(p.position);
            }
            indexed.grid = Some(grid);
        }
        for (how, places) in [("indexed", &indexed), ("one pass", &scanned)] {
            let view = BorderView { snapshot: &border, places };
            let mut out = Vec::new();
            let began = std::time::Instant::now();
            let mut shown = 0;
            for _ in 0..20 {
                for home in &homes {
                    game.border_interest(home, &view, 1, &mut out);
                    shown += out.len();
                }
            }
            let each = began.elapsed() / 20_000;
            println!("{what} ({count} entities): {how}: {each:?} a player, {} shown on average", shown / 20_000);
        }
    }
}

/// Numbers below `n`, the same each run from `seed` (xorshift).
fn numbers(mut seed: u64) -> impl FnMut(u32) -> u32 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % u64::from(n)) as u32
    }
}

/// A border snapshot of `count` spots placed at random within `(width, height)`.
fn spots(schema: &Schema, count: u32, (w, h): (u32, u32), next: &mut impl FnMut(u32) -> u32) -> WorldSnapshot {
    let mut b = SnapshotBuilder::new(schema, 1);
    for id in 0..count {
        b.insert(id, &Spot { x: next(w), y: next(h) }).unwrap();
    }
    b.finish().unwrap()
}

/// Player 1's zone, with it at `at`.
fn snapshot_of(schema: &Schema, at: (u32, u32)) -> WorldSnapshot {
    let mut b = SnapshotBuilder::new(schema, 1);
    b.insert(1, &Spot { x: at.0, y: at.1 }).unwrap();
    b.finish().unwrap()
}

#[test]
fn each_player_is_judged_where_it_stands_as_the_border_snapshots_come() {
    let mut schema = Schema::new();
    schema.register::<Dot>().unwrap();
    let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
    let options = ZoneOptions::new(layout, 0, Arc::new(Near));
    let home = Arc::new(RwLock::new(Some(Arc::new(snapshot(&schema, 1, &[(1, 90), (2, 130)])))));
    let mut world = BorderWorld::new(schema.clone(), &options, home.clone(), 30, Arc::default(), Hidden::default());
    let relevancy = world.relevancy();
    let mut border = |tick: u32| {
        world.handle(BorderFrame { zone: 1, tick, snapshot: snapshot(&schema, tick, &[(7, 100), (8, 140)]) });
        let mut b = SnapshotBuilder::new(&schema, tick);
        world.snapshot(&mut b);
        b.finish().unwrap()
    };
    let shown = |border: &WorldSnapshot, player: PlayerId| {
        let mut out = Vec::new();
        relevancy.interest(border, player, &mut out);
        out.iter().map(|i| split_border_id(border.ids()[i.index as usize]).1).collect::<Vec<_>>()
    };
    // One border snapshot, two players: each its own.
    let first = border(10);
    assert_eq!((shown(&first, 1), shown(&first, 2), shown(&first, 1)), (vec![7], vec![8], vec![7]));
    // Player 1 walks to 135: the next border snapshot judges it there.
    *home.write().unwrap() = Some(Arc::new(snapshot(&schema, 2, &[(1, 135), (2, 130)])));
    let second = border(11);
    assert_eq!((shown(&second, 1), shown(&second, 2)), (vec![8], vec![8]));
    // A player the zone does not hold sees nothing.
    assert_eq!(shown(&second, 3), Vec::<u32>::new());
}

#[test]
fn a_handed_in_player_is_hidden_from_its_old_zones_frames_until_they_lack_it() {
    let mut z = Border::new();
    assert_eq!(z.shown(10, &[(7, 110), (8, 120)]), vec![7, 8]);
    // Player 7 of zone 1 joins zone 0 (the tap hides it); zone 1's frames from before it
    // let go still hold it.
    z.hidden.write().unwrap().insert(border_id(0, 7), Hide::default());
    assert_eq!(z.shown(11, &[(7, 110), (8, 120)]), vec![8]);
    assert_eq!(z.shown(12, &[(7, 110), (8, 120)]), vec![8]);
    // Zone 1's frames lack it: one snapshot more (the players' views may still merge
    // the border world's one before), then it is no longer hidden, and id 7 given to a
    // new player there is shown.
    assert_eq!(z.shown(13, &[(8, 120)]), vec![8]);
    assert!(!z.hidden.read().unwrap().is_empty());
    assert_eq!(z.shown(14, &[(7, 105), (8, 120)]), vec![7, 8]);
    assert!(z.hidden.read().unwrap().is_empty());

    // Given to another player before the frames lacked it: hidden four of zone 1's ticks
    // past the newest frame the border world had when it hid it, then shown.
    z.hidden.write().unwrap().insert(border_id(0, 7), Hide::default());
    assert_eq!(z.shown(15, &[(7, 105), (8, 120)]), vec![8]);
    assert_eq!(z.shown(18, &[(7, 105), (8, 120)]), vec![8]);
    assert_eq!(z.shown(19, &[(7, 105), (8, 120)]), vec![7, 8]);
    assert!(z.hidden.read().unwrap().is_empty());
}

/// A zone's world as its handoffs need it: applies inputs (their sequence numbers).
#[derive(Default)]
struct Walkers {
    applied: Vec<(PlayerId, u32)>,
    left: Vec<PlayerId>,
}
impl World for Walkers {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, p: PlayerId) {
        self.left.push(p);
    }
    fn input(&mut self, p: PlayerId, input: &[u8]) {
        self.applied.push((p, u32::from(input[0])));
    }
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

struct In(PlayerId, u32);
impl crate::server::cores::simulation::TickInput for In {
    fn player(&self) -> PlayerId {
        self.0
    }
    fn seq(&self) -> u32 {
        self.1
    }
    fn bytes(&self) -> &[u8] {
        std::slice::from_ref(&[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9][self.1 as usize % 10])
    }
    fn view(&self) -> Option<crate::protocol::input::ViewTime> {
        None
    }
}

#[test]
fn the_zones_tap_holds_offers_and_ends_each_handoff_through_the_players_hooks() {
    use crate::server::cores::simulation::Simulation;
    let schema = Arc::new(Schema::new());
    let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), 2, 1, 50.0).unwrap();
    let options = ZoneOptions::new(layout, 0, Arc::new(Line));
    let keys = TokenKeys { protocol_id: 7, private_key: [3; 32] };
    let (_border, build) = parts(schema.clone(), &options, 30, keys);
    let (border, _frames) = WorldRef::detached(WorldId(1));
    let (mut link, tap) = build(border);
    let mut departures = link.take_departures().unwrap();
    let (exit, inbox) = (link.exit(), link.inbox());
    let mut sim = Simulation::new(schema, Duration::from_millis(10));
    sim.add_tap(Box::new(tap));
    let mut game = Walkers::default();
    for p in [1, 2] {
        sim.join(&mut game, p, &JoinInfo::new(u64::from(p) + 100, [0; crate::protocol::netcode::USER_DATA_BYTES]));
    }
    let step = |sim: &mut Simulation, game: &mut Walkers, inputs: Vec<In>| sim.step(game, inputs, |_, _| {}).unwrap();
    step(&mut sim, &mut game, vec![In(1, 1)]);

    // Asked: offered to zone 1 through the bus shell, its inputs held from the next tick.
    exit.hand_off(1, 1, b"east".to_vec());
    exit.hand_off(1, 1, b"east".to_vec());
    step(&mut sim, &mut game, vec![In(1, 2), In(1, 3)]);
    let d = departures.try_recv().unwrap();
    let offer = Offer::decode(&d.offer).unwrap();
    assert_eq!((d.player, d.to, offer.state.as_slice(), offer.last_applied), (1, 1, &b"east"[..], 1));
    assert!(departures.try_recv().is_err(), "one offer for two asks");
    assert_eq!(game.applied, [(1, 1)], "held while the neighbour is asked");

    // Refused: the held inputs are applied in order, the game hears why, and another
    // ask within the cooldown is ignored.
    let refused = Answer::Refused { reason: "full".into() }.encode();
    inbox.end_handoff(1, Ok(&refused), inbox.now()).unwrap();
    exit.hand_off(1, 1, b"east".to_vec());
    step(&mut sim, &mut game, vec![In(1, 4)]);
    assert_eq!(game.applied, [(1, 1), (1, 2), (1, 3), (1, 4)]);
    let r = exit.take_refused();
    assert_eq!((r.len(), r[0].player, r[0].to, r[0].why.as_str()), (1, 1, 1, "zone 1 refused: full"));
    assert!(departures.try_recv().is_err(), "cooling down");

    // Accepted: player 2 leaves with a connect token for the new zone's server.
    exit.hand_off(2, 1, Vec::new());
    step(&mut sim, &mut game, vec![In(2, 1)]);
    assert_eq!(departures.try_recv().unwrap().player, 2);
    let accepted = Answer::Accepted { server: "127.0.0.1:4000".parse().unwrap() }.encode();
    inbox.end_handoff(2, Ok(&accepted), inbox.now()).unwrap();
    let mut stepped = step(&mut sim, &mut game, vec![In(2, 2)]);
    assert_eq!(game.left, [2]);
    let system = stepped.outbox.take_system();
    let redirect = crate::protocol::system::Redirect::decode(&system[0].1).unwrap();
    assert_eq!(redirect.last_applied, None, "its one input was held");
    let token = crate::protocol::netcode::token::ConnectToken::from_bytes(&redirect.token).unwrap();
    assert_eq!(token.server_addresses.as_slice(), ["127.0.0.1:4000".parse().unwrap()]);
    assert!(!game.applied.contains(&(2, 1)), "its held input goes to the new zone");
}
