//! Lag compensation end to end, one tick at a time: a client behind a slow link aims at a
//! moving target where it sees it (its interpolated playback) and fires; the world judges
//! the shot against its history rewound to the view the input carried.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use glam::Vec2;
use volley::client::Playback;
use volley::protocol::input::ViewTime;
use volley::protocol::quant::Vec2Q;
use volley::protocol::snapshot::{Schema, SnapshotBuilder, WorldSnapshot};
use volley::server::lagcomp::History;
use volley::server::{PlayerId, World};
use volley::testing::Stepper;
use volley::transport::conditioner::LinkProfile;

volley::replicated! {
    #[derive(Debug, Clone, PartialEq)]
    pub struct Target {
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-100.0), Vec2::splat(100.0), 0.01),
    }
}

/// A shot must land this close to the target's centre.
const HIT_RADIUS: f32 = 0.1;

/// A target circling at 10 m/s; every input is a shot at a point.
struct Gallery {
    compensate: bool,
    target: Vec2,
    tick: u32,
    history: History<Vec2>,
    hits: u32,
    misses: u32,
    clamped: u32,
    /// Views after the newest snapshot made (the server must never pass one on).
    from_the_future: u32,
    /// Views blending snapshots more than a tick apart.
    wide: u32,
}

impl Gallery {
    fn new(compensate: bool, history_ticks: usize) -> Self {
        let mut g = Self {
            compensate,
            target: Vec2::ZERO,
            tick: 0,
            history: History::new(history_ticks),
            hits: 0,
            misses: 0,
            clamped: 0,
            from_the_future: 0,
            wide: 0,
        };
        g.target = g.position_at(0);
        g.history.record(0, g.target);
        g
    }

    fn position_at(&self, tick: u32) -> Vec2 {
        // Radius 10 m, one radian a second: 10 m/s.
        Vec2::from_angle(tick as f32 / 60.0) * 10.0
    }
}

fn shot(aim: Option<Vec2>) -> Vec<u8> {
    aim.map(|a| [a.x.to_le_bytes(), a.y.to_le_bytes()].concat()).unwrap_or_default()
}

impl World for Gallery {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Target>().unwrap();
        s
    }
    fn join(&mut self, _: PlayerId) {}
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, p: PlayerId, input: &[u8]) {
        self.input_viewed(p, input, None);
    }
    fn input_viewed(&mut self, _: PlayerId, input: &[u8], view: Option<ViewTime>) {
        let Ok(bytes) = <[u8; 8]>::try_from(input) else { return };
        let aim = Vec2::new(
            f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            f32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        );
        if view.is_some_and(|v| v.to() > self.tick) {
            self.from_the_future += 1;
        }
        self.wide += u32::from(view.is_some_and(|v| v.to() - v.from() > 1));
        let target = if self.compensate {
            let r = self.history.rewind(view).unwrap();
            self.clamped += u32::from(r.clamped);
            r.from.lerp(*r.to, r.alpha)
        } else {
            self.target
        };
        if target.distance(aim) < HIT_RADIUS {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
        self.target = self.position_at(tick);
        self.history.record(tick, self.target);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        out.insert(0, &Target { position: self.target }).unwrap();
    }
}

fn target_in(s: Option<&WorldSnapshot>, schema: &Schema) -> Option<Vec2> {
    Some(s?.read::<Target>(schema, 0)?.position)
}

/// One client behind `link` shoots every frame, for 8 seconds, at the target where its
/// playback draws it. Returns the world and how many shots the client fired.
fn shoot(world: Gallery, link: LinkProfile) -> (Gallery, u32) {
    shoot_with(Stepper::new(world, 60, 4), link)
}

fn shoot_with(mut s: Stepper<Gallery>, link: LinkProfile) -> (Gallery, u32) {
    s.add_client(link);
    let schema = s.schema().clone();
    let mut fired = 0;
    for _ in 0..480 {
        s.step_with(|_, c, now| {
            let seen = match c.client.playback(now) {
                Playback::Interpolating { from, to, alpha } => {
                    let (a, b) =
                        (target_in(c.client.snapshot(from), &schema), target_in(c.client.snapshot(to), &schema));
                    a.zip(b).map(|(a, b)| a.lerp(b, alpha))
                }
                _ => None,
            };
            fired += u32::from(seen.is_some());
            shot(seen)
        });
    }
    (s.world, fired)
}

const SLOW: LinkProfile =
    LinkProfile { latency: Duration::from_millis(100), jitter: Duration::from_millis(10), loss: 0.1, burst: None };

#[test]
fn a_shooter_behind_a_slow_link_hits_what_it_saw() {
    let (w, fired) = shoot(Gallery::new(true, 32), SLOW);
    let judged = w.hits + w.misses;
    assert!(
        fired > 300 && judged * 100 >= fired * 95,
        "shots fired {fired}, judged {judged} (inputs repeat over loss)"
    );
    assert!(w.hits * 100 >= judged * 98, "hits {} of {judged}", w.hits);
    assert_eq!((w.clamped, w.from_the_future), (0, 0));
}

#[test]
fn views_spanning_several_ticks_are_judged_between_the_same_two() {
    // Snapshots every third tick: the client blends ticks three apart, and the world its
    // history between the same two.
    let (w, fired) = shoot_with(Stepper::new(Gallery::new(true, 32), 60, 4).with_snapshots_every(3), SLOW);
    let judged = w.hits + w.misses;
    assert!(fired > 300 && judged * 100 >= fired * 95, "fired {fired}, judged {judged}");
    assert!(w.hits * 100 >= judged * 98, "hits {} of {judged}", w.hits);
    assert_eq!((w.clamped, w.from_the_future), (0, 0));
    assert!(w.wide * 100 >= judged * 95, "views three ticks wide: {} of {judged}", w.wide);
}

#[test]
fn without_rewinding_the_same_shots_miss() {
    // The same shots judged against the present: the target has moved on about 2 m.
    let (w, _) = shoot(Gallery::new(false, 32), SLOW);
    let judged = w.hits + w.misses;
    assert!(judged > 300);
    assert!(w.hits * 100 <= judged * 2, "hits {} of {judged}", w.hits);
}

#[test]
fn nobody_shoots_further_back_than_the_history() {
    // 400 ms each way: the views the inputs carry are about 50 ticks old by the time they
    // arrive; a history of 32 ticks judges them at its oldest, where the target was not.
    let far = LinkProfile { latency: Duration::from_millis(400), ..SLOW };
    let (short, _) = shoot(Gallery::new(true, 32), far);
    let judged = short.hits + short.misses;
    assert!(judged > 200);
    assert!(short.clamped * 100 >= judged * 95, "clamped {} of {judged}", short.clamped);
    assert!(short.hits * 100 <= judged * 2, "hits {} of {judged}", short.hits);
    // A history long enough for that link serves it.
    let (long, _) = shoot(Gallery::new(true, 64), far);
    let judged = long.hits + long.misses;
    assert!(long.hits * 100 >= judged * 98 && long.clamped == 0, "hits {} of {judged}", long.hits);
    assert_eq!(long.from_the_future, 0);
}
