//! What the scene's physics predictor simulates and returns.
#![allow(clippy::unwrap_used, missing_docs)]

use glam::Vec3;
use volley::protocol::snapshot::Predictor;
use volley_cubes::{CUBES, Cube, CubeScene, ScenePredictor};

#[test]
fn a_still_grid_is_left_to_the_fallback_and_a_moving_cube_brings_its_neighbours() {
    let schema = volley_cubes::schema();
    let scene = CubeScene::new();
    let poses = scene.poses();
    let at_rest = volley_cubes::snapshot(&schema, 10, &poses, None);
    let before = volley_cubes::snapshot(&schema, 8, &poses, None);
    let p = ScenePredictor::new(schema.clone());

    // Nothing moved (and tick 10 is outside the pull): only the player's cube is simulated.
    let predicted = p.predict(&at_rest, &before, 3, 2).unwrap();
    assert_eq!(predicted.tick(), 13);
    assert_eq!(predicted.iter().map(|e| e.id).collect::<Vec<_>>(), [0]);

    // Cube 400 (mid-grid) moved 5 cm along x between the two snapshots: it and the cubes
    // within 2 m of it (its eight neighbours at 1.25 m and 1.77 m) are simulated, and it goes
    // on moving along x.
    let mut moved = poses.clone();
    moved[400].0 += Vec3::new(0.05, 0.0, 0.0);
    let now = volley_cubes::snapshot(&schema, 10, &moved, None);
    let predicted = p.predict(&now, &before, 3, 2).unwrap();
    let ids: Vec<u32> = predicted.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 1 + 9, "the player's cube, cube 400 and its eight neighbours: {ids:?}");
    for id in [400u32, 399, 401, 370, 430, 369, 371, 429, 431] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let ahead = predicted.read::<Cube>(&schema, 400).unwrap();
    assert!(ahead.position.x > moved[400].0.x, "{} after {}", ahead.position.x, moved[400].0.x);

    // `near: None` simulates every cube.
    let mut all = ScenePredictor::new(schema.clone());
    all.near = None;
    assert_eq!(all.predict(&now, &before, 1, 2).unwrap().len(), CUBES);
    // Too far ahead, or a world that is not the scene: nothing predicted.
    assert!(p.predict(&now, &before, 17, 2).is_none());
    let half = volley_cubes::snapshot(&schema, 10, &moved[..450], None);
    assert!(p.predict(&half, &before, 1, 2).is_none());
}
