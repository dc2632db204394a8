//! The zone test game: dots on a 200 × 100 map split into two zones at x = 100, and players
//! whose avatars walk to and fro towards the border. Include with
//! `#[path = "support/dots.rs"] mod dots;`.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use glam::Vec2;
use volley::prelude::*;
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

pub fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

pub const RADIUS: f32 = 30.0;
/// A player's avatar's entity id, in zone `zone` (ids are unique across the map).
pub fn avatar_id(zone: u16, player: PlayerId) -> u32 {
    100_000 * u32::from(zone) + 50_000 + player
}

pub struct Dots {
    pub me: u16,
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
pub fn static_dots(zone: u16) -> Vec<(u32, Vec2)> {
    let xs: Vec<f32> = if zone == 0 { vec![60.0, 80.0, 95.0] } else { vec![101.0, 110.0, 125.0, 140.0] };
    let mut v = Vec::new();
    for (i, x) in xs.iter().enumerate() {
        for j in 0..5u32 {
            v.push((1000 * u32::from(zone) + 10 * i as u32 + j, Vec2::new(*x, 40.0 + 5.0 * j as f32)));
        }
    }
    v
}

pub struct Zone {
    pub me: u16,
    /// Zones on the map, side by side (2 unless [`Zone::of`] says otherwise).
    pub zones: u16,
    pub tick: u32,
    pub players: Vec<PlayerId>,
    pub link: Arc<Mutex<Option<ZoneLink>>>,
    /// Who joined, as the world heard it.
    pub joins: Arc<Mutex<Vec<JoinInfo>>>,
    /// How long a handoff waits for its answer (`None`: the zone's default, 100 ms).
    pub handoff_timeout: Option<std::time::Duration>,
}

impl Zone {
    /// Where a player's avatar is at `tick`: walking to and fro along y = 50 between x = 55
    /// and x = 99 (zone 0 only has players).
    pub fn avatar_at(tick: u32) -> Vec2 {
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
        let layout = ZoneLayout::grid(Vec2::ZERO, Vec2::new(200.0, 100.0), self.zones, 1, RADIUS).unwrap();
        let mut options = ZoneOptions::new(layout, self.me, Arc::new(Dots { me: self.me }));
        if let Some(t) = self.handoff_timeout {
            options.handoff_timeout = t;
        }
        *self.link.lock().unwrap() = Some(options.start(worlds, me, WorldOptions::new("border")).unwrap());
    }
    fn join_with(&mut self, p: PlayerId, who: &JoinInfo) {
        self.players.push(p);
        self.joins.lock().unwrap().push(who.clone());
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

impl Zone {
    /// Zone `me`, and where its link will be once it starts.
    pub fn new(me: u16) -> (Self, Arc<Mutex<Option<ZoneLink>>>) {
        Self::of(me, 2)
    }

    /// Zone `me` of `zones` side by side.
    pub fn of(me: u16, zones: u16) -> (Self, Arc<Mutex<Option<ZoneLink>>>) {
        let link = Arc::new(Mutex::new(None));
        (
            Self {
                me,
                zones,
                tick: 0,
                players: Vec::new(),
                link: link.clone(),
                joins: Arc::default(),
                handoff_timeout: None,
            },
            link,
        )
    }
}

/// Zone 1's dots as every snapshot holds them (quantized): id, position, words.
pub fn oracle() -> std::collections::BTreeMap<u32, (Vec2, Vec<u32>)> {
    static_dots(1)
        .into_iter()
        .map(|(id, p)| {
            let d = Dot { position: p };
            let mut w = vec![0; 2];
            d.quantize(&mut w);
            (id, (Dot::dequantize(&w).position, w))
        })
        .collect()
}

/// What a client of zone 0 sees in one snapshot: its avatar's position and the entities from
/// across the border (local id → words). Panics if an entity is there twice.
pub fn read_view(got: &WorldSnapshot, me: PlayerId) -> (Vec2, std::collections::BTreeMap<u32, Vec<u32>>) {
    let mut local = std::collections::BTreeSet::new();
    let mut mine = None;
    let mut across = std::collections::BTreeMap::new();
    for e in got.iter() {
        let (world, id) = volley::protocol::snapshot::world::split_id(e.id);
        assert!(local.insert(id), "entity {id} twice in one snapshot");
        if world == 0 && id == avatar_id(0, me) {
            mine = Some(Dot::dequantize(e.words).position);
        }
        if world != 0 {
            // Zone 1 is zone 0's only neighbour: its ids come back whole.
            let (slot, id) = volley::protocol::zone::split_border_id(id);
            assert_eq!(slot, 0);
            across.insert(id, e.words.to_vec());
        }
    }
    (mine.expect("the player's own avatar"), across)
}

/// Zone 1's dots within `radius` of `at`, with their words.
pub fn within(at: Vec2, radius: f32) -> std::collections::BTreeMap<u32, Vec<u32>> {
    oracle().into_iter().filter(|(_, (p, _))| p.distance(at) <= radius).map(|(id, (_, w))| (id, w)).collect()
}
