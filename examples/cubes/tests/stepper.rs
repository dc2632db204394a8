//! The cube scene through the whole server path on the deterministic stepper: the physics
//! world in a session, a client over a lossy, jittery link driving the large cube, and the
//! scene's own physics predicting snapshots on both sides.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use volley::protocol::snapshot::{SenderConfig, WorldSnapshot};
use volley::testing::Stepper;
use volley::transport::conditioner::LinkProfile;
use volley_cubes::{Cube, CubeScene, CubeWorld, ScenePredictor};

/// What one run saw.
struct Run {
    bytes: u64,
    /// Client snapshots checked, and how many of those equalled the server's world at their
    /// tick entity for entity.
    checked: u32,
    exact: u32,
    /// The most ticks an entity's value lagged behind the server's at the snapshot's tick
    /// (a packet over its byte budget defers some changed cubes to the next).
    max_staleness: u32,
}

/// Runs the scene for `ticks` with one driving client through a lossy link. Every new client
/// snapshot is checked against the server's history: each cube the client holds must have
/// exactly the value the server gave it at that tick or a recent one (a wrongly predicted
/// decode would give values the server never had).
fn run(physics: bool, ticks: u32) -> Run {
    let schema = volley_cubes::schema();
    let mut s = Stepper::new(CubeWorld::default(), 60, 4)
        .with_sender_config(SenderConfig { predict: true, ..SenderConfig::default() });
    if physics {
        s = s.with_predictor(Arc::new(ScenePredictor::new(schema.clone())));
    }
    let link =
        LinkProfile { latency: Duration::from_millis(40), jitter: Duration::from_millis(20), loss: 0.1, burst: None };
    s.add_client(link);
    let mut history: BTreeMap<u32, Arc<WorldSnapshot>> = BTreeMap::new();
    let mut run = Run { bytes: 0, checked: 0, exact: 0, max_staleness: 0 };
    let mut last_checked = 0;
    for frame in 0..ticks {
        s.clients[0].input = Some(CubeWorld::input_for(CubeScene::autopilot(frame)).to_vec());
        s.step();
        history.insert(s.tick(), s.last_snapshot().cloned().unwrap());
        history.retain(|t, _| *t + 200 > s.tick());
        let Some(latest) = s.clients[0].client.latest() else { continue };
        if latest.tick() == last_checked {
            continue;
        }
        last_checked = latest.tick();
        run.checked += 1;
        if latest == &*history[&latest.tick()] {
            run.exact += 1;
        }
        for e in latest.iter() {
            let mine = latest.read::<Cube>(&schema, e.id);
            let lag = history
                .range(..=latest.tick())
                .rev()
                .position(|(_, w)| w.read::<Cube>(&schema, e.id) == mine)
                .unwrap_or_else(|| panic!("cube {} at tick {}: a value the server never had", e.id, latest.tick()));
            run.max_staleness = run.max_staleness.max(lag as u32);
        }
    }
    run.bytes = s.clients[0].client.stats().bytes_received;
    run
}

#[test]
fn the_scenes_physics_predicts_live_snapshots_exactly_and_in_fewer_bytes() {
    // 7 s: the large cube ploughs into the grid, then pulls a crowd around it.
    let ticks = 420;
    let builtin = run(false, ticks);
    let physics = run(true, ticks);
    for (name, r) in [("built-in extrapolation", &builtin), ("the scene's physics", &physics)] {
        eprintln!(
            "{name}: {} bytes received in {ticks} ticks, {} of {} snapshots exactly the server's, values at most {} ticks stale",
            r.bytes, r.exact, r.checked, r.max_staleness
        );
        assert!(r.checked > ticks / 2, "{name}: {} snapshots checked", r.checked);
        assert!(r.exact > r.checked / 4, "{name}: only {} of {} exact", r.exact, r.checked);
        assert!(r.max_staleness < 60, "{name}: a value {} ticks stale", r.max_staleness);
    }
    assert!(
        physics.bytes < builtin.bytes,
        "the physics should predict the scene better: {} vs {}",
        physics.bytes,
        builtin.bytes
    );
}
