//! Glenn Fiedler's "Snapshot Compression" scene, rebuilt: a real rigid-body simulation
//! (rapier3d) of a 30 × 30 grid of cubes and one large cube that rolls through them, in the
//! same quantization (positions at 512 units a metre in a bounded volume, smallest-three
//! quaternions at 9 bits). The recording feeds `benches/cube_scene.rs`; [`CubeWorld`] is the
//! scene as a server's world, run live by the networked example (`src/main.rs`) and on the
//! stepper by `tests/stepper.rs`; [`ScenePredictor`] is the scene's physics as the snapshot
//! codec's predictor, on both sides.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use glam::{Quat, Vec3};
use rapier3d::prelude::*;
use volley::protocol::quant::{QuatQ, Vec3Q};
use volley::protocol::snapshot::{Predictor, Schema, SnapshotBuilder, WorldSnapshot};
use volley::server::{PlayerId, World};

volley::replicated! {
    /// A cube: where it is and how it is turned.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Cube {
        /// Position, 1/512 m in [-256, 256) × [-256, 256) × [0, 32) m: 18 + 18 + 14 bits.
        pub position: Vec3 = Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(255.998, 255.998, 31.998), 1.0 / 512.0),
        /// Orientation, smallest three at 9 bits: 29 bits.
        pub rotation: Quat = QuatQ::new(9),
    }
}

/// Cubes on each side of the grid.
pub const SIDE: usize = 30;
/// Every cube, the player's (id 0) first.
pub const CUBES: usize = SIDE * SIDE + 1;
/// Distance between neighbouring cubes' centres (they are 1 m wide).
pub const SPACING: f32 = 1.25;
/// Bumped whenever the scene changes (it names the cached recording).
pub const SCENE_VERSION: u32 = 2;
/// Simulation rate.
pub const HZ: u32 = 60;
/// How far the player's cube pulls cubes in, half of the time (metres).
const PULL_RADIUS: f32 = 10.0;

/// Whether the large cube pulls the cubes around it at `frame` (5 s of every 10).
fn pulling(frame: u32) -> bool {
    (frame / (5 * HZ)) % 2 == 1
}

/// The schema with just [`Cube`].
pub fn schema() -> Arc<Schema> {
    let mut s = Schema::new();
    s.register::<Cube>().expect("fresh schema");
    Arc::new(s)
}

/// The physics world.
pub struct CubeScene {
    world: PhysicsWorld,
    bodies: Vec<RigidBodyHandle>,
    frame: u32,
}

impl Default for CubeScene {
    fn default() -> Self {
        Self::new()
    }
}

impl CubeScene {
    /// The grid at rest on the ground and the player's cube at one corner.
    pub fn new() -> Self {
        Self::with_cubes(1..CUBES)
    }

    /// The scene with only the player's cube and the grid cubes `ids` (1 to `CUBES - 1`, in
    /// increasing order): a [`ScenePredictor`] simulates just the cubes near motion. The
    /// bodies, as [`set_state`](Self::set_state) and [`poses`](Self::poses) take and give
    /// them, are the player's first, then `ids` in order.
    pub fn with_cubes(ids: impl IntoIterator<Item = usize>) -> Self {
        let mut world = PhysicsWorld::new();
        world.gravity = Vector::new(0.0, 0.0, -9.81);
        world.integration_parameters.dt = 1.0 / HZ as f32;
        let ground = world.bodies.insert(RigidBodyBuilder::fixed().translation(Vector::new(0.0, 0.0, -1.0)));
        world.colliders.insert_with_parent(
            ColliderBuilder::cuboid(200.0, 200.0, 1.0).friction(0.8),
            ground,
            &mut world.bodies,
        );
        let mut bodies = Vec::with_capacity(CUBES);
        let player = world.bodies.insert(
            RigidBodyBuilder::dynamic()
                .translation(Vector::new(-32.0, -32.0, 2.0))
                .angular_damping(0.5)
                .linear_damping(0.2),
        );
        world.colliders.insert_with_parent(
            ColliderBuilder::cuboid(2.0, 2.0, 2.0).density(4.0).friction(0.9),
            player,
            &mut world.bodies,
        );
        bodies.push(player);
        for id in ids.into_iter().filter(|id| (1..CUBES).contains(id)) {
            let i = id - 1;
            let (x, y) = ((i % SIDE) as f32, (i / SIDE) as f32);
            let at =
                Vector::new((x - (SIDE as f32 - 1.0) / 2.0) * SPACING, (y - (SIDE as f32 - 1.0) / 2.0) * SPACING, 0.5);
            let h = world.bodies.insert(RigidBodyBuilder::dynamic().translation(at));
            world.colliders.insert_with_parent(
                ColliderBuilder::cuboid(0.5, 0.5, 0.5).density(1.0).friction(0.7),
                h,
                &mut world.bodies,
            );
            bodies.push(h);
        }
        Self { world, bodies, frame: 0 }
    }

    /// Frames simulated so far.
    pub fn frame(&self) -> u32 {
        self.frame
    }

    /// Where the autopilot heads at `frame`: a slow figure of eight across the grid, wider
    /// than it, so that the player's cube ploughs through the cubes and out again.
    pub fn autopilot(frame: u32) -> Vec3 {
        let t = frame as f32 / HZ as f32;
        Vec3::new(22.0 * (t * 0.5).sin(), 18.0 * (t * 1.0).sin(), 0.0)
    }

    /// Advances one frame, the player's cube pushed and spun towards `target`.
    pub fn step(&mut self, target: Vec3) {
        if let Some(p) = self.world.bodies.get_mut(self.bodies[0]) {
            let at = p.translation();
            let to = Vec3::new(target.x - at.x, target.y - at.y, 0.0);
            let dir = if to.length() > 0.5 { to.normalize() } else { Vec3::ZERO };
            let mass = p.mass();
            p.reset_forces(true);
            p.reset_torques(true);
            p.add_force(Vector::new(dir.x, dir.y, 0.0) * (mass * 14.0), true);
            // Rolling: spin about the horizontal axis across the heading.
            let axis = Vec3::Z.cross(dir);
            p.add_torque(Vector::new(axis.x, axis.y, 0.0) * (mass * 8.0), true);
        }
        // For 5 s of every 10 the large cube pulls in the cubes within 10 m, so that a crowd
        // keeps moving around it, not only the cubes it hits.
        let attract = pulling(self.frame);
        if attract && let Some(center) = self.world.bodies.get(self.bodies[0]).map(|p| p.translation()) {
            for h in &self.bodies[1..] {
                if let Some(b) = self.world.bodies.get_mut(*h) {
                    let to = center - b.translation();
                    let d = to.length();
                    b.reset_forces(false);
                    if d < PULL_RADIUS && d > 0.1 {
                        let m = b.mass();
                        b.add_force(to / d * (m * 25.0), true);
                    }
                }
            }
        } else if self.frame.is_multiple_of(5 * HZ) {
            for h in &self.bodies[1..] {
                if let Some(b) = self.world.bodies.get_mut(*h) {
                    b.reset_forces(false);
                }
            }
        }
        self.world.step();
        self.frame += 1;
    }

    /// Every body put at `poses` moving at `velocities` (linear, angular), forces cleared, and
    /// the frame counter (which times the pull) set to `frame`: the state a [`ScenePredictor`]
    /// continues from.
    pub fn set_state(&mut self, frame: u32, poses: &[(Vec3, Quat)], velocities: &[(Vec3, Vec3)]) {
        for ((h, (p, q)), (v, w)) in self.bodies.iter().zip(poses).zip(velocities) {
            if let Some(b) = self.world.bodies.get_mut(*h) {
                b.set_translation(Vector::new(p.x, p.y, p.z), true);
                b.set_rotation(Rotation::from_xyzw(q.x, q.y, q.z, q.w), true);
                b.set_linvel(Vector::new(v.x, v.y, v.z), true);
                b.set_angvel(Vector::new(w.x, w.y, w.z), true);
                b.reset_forces(true);
                b.reset_torques(true);
            }
        }
        self.frame = frame;
    }

    /// Every cube's position and orientation, the player's first.
    pub fn poses(&self) -> Vec<(Vec3, Quat)> {
        self.bodies
            .iter()
            .map(|h| {
                let b = &self.world.bodies[*h];
                let t = b.translation();
                let r = b.rotation();
                (Vec3::new(t.x, t.y, t.z), Quat::from_xyzw(r.x, r.y, r.z, r.w).normalize())
            })
            .collect()
    }
}

/// The scene as a volley server's world: the first player to join drives the large cube,
/// its input the point to head for ([`CubeWorld::input_for`]).
#[derive(Default)]
pub struct CubeWorld {
    scene: CubeScene,
    driver: Option<PlayerId>,
    target: Vec3,
}

impl CubeWorld {
    /// The input that steers the large cube towards `target`: two little-endian `f32` (x, y).
    pub fn input_for(target: Vec3) -> [u8; 8] {
        let mut input = [0u8; 8];
        input[..4].copy_from_slice(&target.x.to_le_bytes());
        input[4..].copy_from_slice(&target.y.to_le_bytes());
        input
    }
}

impl World for CubeWorld {
    fn schema(&self) -> Schema {
        (*schema()).clone()
    }
    fn join(&mut self, player: PlayerId) {
        self.driver.get_or_insert(player);
    }
    fn leave(&mut self, player: PlayerId) {
        if self.driver == Some(player) {
            self.driver = None;
        }
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        // Anything but eight bytes of two finite numbers is ignored.
        if self.driver == Some(player)
            && let Ok(b) = <[u8; 8]>::try_from(input)
        {
            let (x, y) = (f32::from_le_bytes([b[0], b[1], b[2], b[3]]), f32::from_le_bytes([b[4], b[5], b[6], b[7]]));
            if x.is_finite() && y.is_finite() {
                self.target = Vec3::new(x.clamp(-100.0, 100.0), y.clamp(-100.0, 100.0), 0.0);
            }
        }
    }
    fn tick(&mut self, _: u32, _: std::time::Duration) {
        self.scene.step(self.target);
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (i, (position, rotation)) in self.scene.poses().into_iter().enumerate() {
            let _ = out.insert(i as u32, &Cube { position, rotation });
        }
    }
}

/// Builds the tick's world snapshot from poses (the server's side of every frame).
pub fn snapshot(
    schema: &Schema,
    tick: u32,
    poses: &[(Vec3, Quat)],
    previous: Option<&WorldSnapshot>,
) -> Arc<WorldSnapshot> {
    let mut b = SnapshotBuilder::new(schema, tick);
    for (i, (position, rotation)) in poses.iter().enumerate() {
        b.insert(i as u32, &Cube { position: *position, rotation: *rotation }).expect("Cube is registered");
    }
    Arc::new(b.finish_after(previous).expect("unique ids"))
}

/// A recording: `frames` frames of [`CUBES`] poses.
pub struct Recording {
    /// Poses per frame.
    pub frames: Vec<Vec<(Vec3, Quat)>>,
}

const MAGIC: &[u8; 12] = b"VOLLEYCUBES1";

impl Recording {
    /// Simulates `frames` frames with the autopilot.
    pub fn simulate(frames: u32) -> Self {
        let mut scene = CubeScene::new();
        let mut out = Vec::with_capacity(frames as usize);
        for f in 0..frames {
            scene.step(CubeScene::autopilot(f));
            out.push(scene.poses());
        }
        Self { frames: out }
    }

    /// Where the recording is kept between runs (under the workspace's `target/`; the name
    /// carries [`SCENE_VERSION`], so a changed scene is simulated afresh).
    pub fn default_path(frames: u32) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../target/cube-scene/recording-v{SCENE_VERSION}-{frames}.bin"))
    }

    /// Loads the recording at `path`, or simulates and saves it there.
    pub fn load_or_record(path: &Path, frames: u32) -> Self {
        if let Some(r) =
            std::fs::read(path).ok().and_then(|b| Self::from_bytes(&b)).filter(|r| r.frames.len() == frames as usize)
        {
            return r;
        }
        let r = Self::simulate(frames);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(path, r.to_bytes());
        r
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(20 + self.frames.len() * CUBES * 28);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(self.frames.len() as u32).to_le_bytes());
        b.extend_from_slice(&(CUBES as u32).to_le_bytes());
        for f in &self.frames {
            for (p, q) in f {
                for v in [p.x, p.y, p.z, q.x, q.y, q.z, q.w] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        let rest = b.strip_prefix(MAGIC)?;
        let frames = u32::from_le_bytes(rest.get(0..4)?.try_into().ok()?) as usize;
        let cubes = u32::from_le_bytes(rest.get(4..8)?.try_into().ok()?) as usize;
        let body = rest.get(8..)?;
        if cubes != CUBES || body.len() != frames * cubes * 28 {
            return None;
        }
        let f32s: Vec<f32> = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let frames = f32s
            .chunks_exact(cubes * 7)
            .map(|f| {
                f.chunks_exact(7)
                    .map(|c| (Vec3::new(c[0], c[1], c[2]), Quat::from_xyzw(c[3], c[4], c[5], c[6])))
                    .collect()
            })
            .collect();
        Some(Self { frames })
    }

    /// A checksum of the recording (to tell recordings apart in reports).
    pub fn checksum(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for f in &self.frames {
            for (p, q) in f {
                for v in [p.x, p.y, p.z, q.x, q.y, q.z, q.w] {
                    h = (h ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        h
    }

    /// How many cubes moved (by more than quantization) between frames `f - 1` and `f`.
    pub fn moving(&self, f: usize) -> usize {
        if f == 0 {
            return CUBES;
        }
        self.frames[f]
            .iter()
            .zip(&self.frames[f - 1])
            .filter(|(a, b)| (a.0 - b.0).abs().max_element() > 1.0 / 1024.0 || a.1.dot(b.1).abs() < 0.99999)
            .count()
    }
}

/// The scene's own physics as the snapshot codec's [`Predictor`]: from the client's baseline
/// (poses) and the snapshot before it (velocities, from the difference), it runs the same
/// rapier3d simulation forward to the packet's tick, so a changed cube costs only what the
/// simulation could not foresee. The player's cube is simulated undriven: its input is the
/// one thing the client does not share.
///
/// Both sides build a fresh simulation from the same quantized words, and rapier3d is built
/// with `enhanced-determinism`, so the server and the client compute the same prediction.
/// It costs one simulation step (of the cubes near motion, see [`near`](Self::near)) per
/// tick ahead on each side, per predicted packet.
pub struct ScenePredictor {
    schema: Arc<Schema>,
    /// Added to a snapshot's tick to give the frame counter after that tick (which times the
    /// pull): 0 for a [`Recording`] replayed with tick `i + 1` for frame `i`.
    pub frame_offset: i64,
    /// The most ticks ahead it predicts (more are left to the built-in extrapolation).
    pub max_ahead: u32,
    /// Simulate only the cubes that moved between the two snapshots, those within this many
    /// metres of one that moved, and (while the pull is on) those the player's cube pulls;
    /// the rest, which lie still, are left to the built-in extrapolation (which keeps them
    /// where they are). `None` simulates every cube.
    pub near: Option<f32>,
}

impl ScenePredictor {
    /// A predictor for snapshots of [`schema`], simulating the cubes within 2 m of motion.
    pub fn new(schema: Arc<Schema>) -> Self {
        Self { schema, frame_offset: 0, max_ahead: 16, near: Some(2.0) }
    }

    /// Which grid cubes to simulate: see [`near`](Self::near).
    fn active(&self, poses: &[(Vec3, Quat)], moved: &[bool], mut frames: std::ops::Range<u32>) -> Vec<usize> {
        let Some(r) = self.near else {
            return (1..CUBES).collect();
        };
        let pulled = frames.any(pulling);
        let player = poses[0].0;
        let cell = |p: Vec3| ((p.x / r).floor() as i32, (p.y / r).floor() as i32);
        let mut grid: std::collections::HashMap<(i32, i32), Vec<Vec3>> = std::collections::HashMap::new();
        for (i, (p, _)) in poses.iter().enumerate() {
            if moved[i] {
                grid.entry(cell(*p)).or_default().push(*p);
            }
        }
        (1..CUBES)
            .filter(|&i| {
                let p = poses[i].0;
                if moved[i] || (pulled && p.distance(player) < PULL_RADIUS + r) {
                    return true;
                }
                let (cx, cy) = cell(p);
                (-1..=1).any(|dx| {
                    (-1..=1)
                        .any(|dy| grid.get(&(cx + dx, cy + dy)).is_some_and(|ps| ps.iter().any(|q| q.distance(p) < r)))
                })
            })
            .collect()
    }
}

/// The player's entry of `all`, then those of `ids`.
fn pick<T: Copy>(all: &[T], ids: &[usize]) -> Vec<T> {
    std::iter::once(all[0]).chain(ids.iter().map(|&i| all[i])).collect()
}

impl Predictor for ScenePredictor {
    fn predict(
        &self,
        baseline: &WorldSnapshot,
        older: &WorldSnapshot,
        ahead: u32,
        behind: u32,
    ) -> Option<WorldSnapshot> {
        if ahead == 0 || ahead > self.max_ahead || behind == 0 || baseline.len() != CUBES {
            return None;
        }
        let rate = HZ as f32 / behind as f32;
        let mut poses = Vec::with_capacity(CUBES);
        let mut velocities = Vec::with_capacity(CUBES);
        let mut moved = Vec::with_capacity(CUBES);
        for id in 0..CUBES as u32 {
            let now = baseline.read::<Cube>(&self.schema, id)?;
            let (v, w) = match older.read::<Cube>(&self.schema, id) {
                Some(before) => {
                    moved.push(before != now);
                    // The turn from before to now, as a rotation vector (small angles: twice
                    // the vector part), per second.
                    let mut d = now.rotation * before.rotation.conjugate();
                    if d.w < 0.0 {
                        d = -d;
                    }
                    ((now.position - before.position) * rate, Vec3::new(d.x, d.y, d.z) * (2.0 * rate))
                }
                None => {
                    moved.push(true);
                    (Vec3::ZERO, Vec3::ZERO)
                }
            };
            poses.push((now.position, now.rotation));
            velocities.push((v, w));
        }
        let frame = u32::try_from(i64::from(baseline.tick()) + self.frame_offset).ok()?;
        let ids = self.active(&poses, &moved, frame..frame.saturating_add(ahead));
        let mut scene = CubeScene::with_cubes(ids.iter().copied());
        scene.set_state(frame, &pick(&poses, &ids), &pick(&velocities, &ids));
        for _ in 0..ahead {
            // Undriven: the target is where the player's cube already is.
            let at = scene.world.bodies.get(scene.bodies[0]).map_or(Vector::ZERO, |p| p.translation());
            scene.step(Vec3::new(at.x, at.y, at.z));
        }
        let mut b = SnapshotBuilder::new(&self.schema, baseline.tick().wrapping_add(ahead));
        let predicted = scene.poses();
        for (id, (position, rotation)) in std::iter::once(0).chain(ids.iter().copied()).zip(predicted) {
            b.insert(id as u32, &Cube { position, rotation }).ok()?;
        }
        b.finish().ok()
    }
}
