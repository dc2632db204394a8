//! What a client draws: `GameClient::entities::<T>(now)` blends each entity between the two
//! snapshots the playback clock picks, carries it on from the two newest when the next
//! snapshot is late, and holds it once the extrapolation limit is reached.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use glam::Vec2;
use volley::client::Playback;
use volley::prelude::*;

volley::replicated! {
    /// A runner going right at 6 m/s (a tenth of a metre a tick), and turning.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Runner {
        /// Where it is.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-1000.0), Vec2::splat(1000.0), 0.001),
        /// Which way it faces.
        pub heading: f32 = AngleQ(16),
        /// Its lap.
        pub lap: u32 = Bits(8),
    }
}

struct Track(u32);

impl World for Track {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Runner>().unwrap();
        s
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.0 = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let t = self.0 as f32;
        out.insert(1 << 20, &runner_at(t)).unwrap();
    }
}

fn runner_at(t: f32) -> Runner {
    // Heading turns 0.2 rad a tick, wrapping at ±π.
    let heading = (t * 0.2 + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU) - std::f32::consts::PI;
    Runner { position: Vec2::new(t * 0.1, 0.0), heading, lap: t as u32 / 10 % 256 }
}

#[test]
fn entities_are_blended_between_snapshots_extrapolated_when_late_then_held() {
    let mut stepper = Stepper::new(Track(0), 60, 2).with_snapshots_every(3);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.clients[0].input = Some(vec![0]);
    stepper.run(120);
    let now = stepper.now;
    let c = &mut stepper.clients[0].client;
    let mut checked = 0;
    // Frames between the last two snapshots: each drawn value is the world's at the render
    // tick (the quantizers' own error aside).
    for ms in 0..50 {
        let at = now + Duration::from_millis(ms);
        let Playback::Interpolating { from, to, alpha } = c.playback(at) else { continue };
        let render = from as f32 + alpha * (to - from) as f32;
        let drawn = c.entities::<Runner>(at);
        assert_eq!(drawn.len(), 1);
        let (id, r) = &drawn[0];
        assert_eq!(*id, 1 << 20);
        let want = runner_at(render);
        assert!(
            (r.position.x - want.position.x).abs() < 0.002,
            "at tick {render}: {} against {}",
            r.position.x,
            want.position.x
        );
        let dh =
            (r.heading - want.heading + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU) - std::f32::consts::PI;
        assert!(
            dh.abs() < 0.001,
            "heading the shorter way round at tick {render}: {} against {}",
            r.heading,
            want.heading
        );
        let laps = [runner_at(from as f32).lap, runner_at(to as f32).lap];
        assert!(laps.contains(&r.lap), "an integer is one of the two, never between");
        checked += 1;
    }
    assert!(checked > 5, "{checked} interpolated frames");

    // Nothing more arrives: a tenth of a second on, the runner carries on at its speed.
    let newest = c.latest().unwrap().tick();
    let late = now + Duration::from_millis(150);
    let Playback::Extrapolating { from, ahead } = c.playback(late) else { panic!("extrapolating") };
    assert_eq!(from, newest);
    let r = &c.entities::<Runner>(late)[0].1;
    let want = (from as f32 + ahead) * 0.1;
    assert!(ahead > 0.0 && (r.position.x - want).abs() < 0.002, "{} against {want}", r.position.x);

    // Two seconds on: held at the limit (a quarter second, 15 ticks past the newest).
    let held = c.entities::<Runner>(now + Duration::from_secs(2))[0].1.position.x;
    let later = c.entities::<Runner>(now + Duration::from_secs(3))[0].1.position.x;
    assert_eq!(held, later, "held");
    assert!((held - (newest as f32 + 15.0) * 0.1).abs() < 0.002, "{held}");
}

#[test]
fn a_kind_not_in_the_schema_or_no_snapshot_yet_is_empty() {
    let mut stepper = Stepper::new(Track(0), 60, 2);
    stepper.add_client(LinkProfile::PERFECT);
    assert!(stepper.clients[0].client.entities::<Runner>(stepper.now).is_empty(), "nothing before a snapshot");
    volley::replicated! {
        /// Not registered.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Stranger { pub x: u32 = Bits(4) }
    }
    stepper.clients[0].input = Some(vec![0]);
    stepper.run(60);
    assert!(stepper.clients[0].client.entities::<Stranger>(stepper.now).is_empty());
    assert_eq!(stepper.clients[0].client.entities::<Runner>(stepper.now).len(), 1);
}

/// What a client in another language draws (`GameClient::entity_values`, by kind id, each
/// field decoded by its described quantizer) is what the Rust type draws, frame by frame:
/// between snapshots, carried on past the newest, and held.
#[test]
fn entities_as_numbers_are_the_rust_types_values_frame_by_frame() {
    let mut stepper = Stepper::new(Track(0), 60, 2).with_snapshots_every(3);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.clients[0].input = Some(vec![0]);
    stepper.run(120);
    let now = stepper.now;
    let c = &stepper.clients[0].client;
    let kind = c.schema().kind_named("Runner").unwrap();
    let (mut ids, mut values) = (Vec::new(), Vec::new());
    let mut compared = 0;
    for ms in (0..3000).step_by(7) {
        let at = now + Duration::from_millis(ms);
        c.entity_values(kind, at, &mut ids, &mut values);
        let typed = c.entities::<Runner>(at);
        let want: Vec<f64> = typed
            .iter()
            .flat_map(|(_, r)| [r.position.x, r.position.y, r.heading, r.lap as f32])
            .map(f64::from)
            .collect();
        assert_eq!(ids, typed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), "at {ms} ms");
        assert_eq!(values, want, "at {ms} ms");
        compared += usize::from(!ids.is_empty());
    }
    assert!(compared > 400, "{compared} frames with the runner");
    c.entity_values(7, now, &mut ids, &mut values);
    assert!(ids.is_empty() && values.is_empty(), "a kind the schema does not have");
}
