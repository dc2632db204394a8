//! A cube world in Glenn Fiedler's quantization (512 units a metre in a bounded volume,
//! smallest-three at 9 bits), shared by tests and benchmarks.
#![allow(dead_code)]

use std::sync::Arc;

use glam::{Quat, Vec3};
use volley::protocol::quant::{QuatQ, Vec3Q};
use volley::protocol::snapshot::{Schema, SnapshotBuilder, WorldSnapshot};

volley::replicated! {
    /// A cube: where it is and how it is turned.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Cube {
        /// Position, 1/512 m in [-256, 256) × [-256, 256) × [0, 32) m.
        pub position: Vec3 = Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(255.998, 255.998, 31.998), 1.0 / 512.0),
        /// Orientation.
        pub rotation: Quat = QuatQ::new(9),
    }
}

/// The schema with just [`Cube`].
pub fn schema() -> Arc<Schema> {
    let mut s = Schema::new();
    s.register::<Cube>().expect("fresh schema");
    Arc::new(s)
}

/// `n` cubes on a grid, of which a fixed `moving` fraction moves at 5 m/s and turns.
pub struct Scene {
    pub cubes: Vec<Cube>,
    moving: Vec<bool>,
    velocity: Vec<Vec3>,
}

impl Scene {
    pub fn new(n: usize, moving_fraction: f32) -> Self {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32
        };
        let side = (n as f32).sqrt().ceil() as usize;
        let cubes = (0..n)
            .map(|i| Cube {
                position: Vec3::new((i % side) as f32 * 2.0 - 30.0, (i / side) as f32 * 2.0 - 30.0, 0.5),
                rotation: Quat::from_rotation_z(rand() * 6.0),
            })
            .collect();
        let moving = (0..n).map(|i| (i as f32 + 0.5) / n as f32 <= moving_fraction + 1e-6).collect();
        let velocity =
            (0..n).map(|_| Vec3::new(rand() * 2.0 - 1.0, rand() * 2.0 - 1.0, 0.0).normalize() * 5.0).collect();
        Self { cubes, moving, velocity }
    }

    /// Advances one 60 Hz tick.
    pub fn step(&mut self) {
        for (i, c) in self.cubes.iter_mut().enumerate() {
            if self.moving[i] {
                c.position += self.velocity[i] / 60.0;
                c.rotation = (c.rotation * Quat::from_rotation_z(0.05)).normalize();
            }
        }
    }

    pub fn snapshot(&self, schema: &Schema, tick: u32) -> Arc<WorldSnapshot> {
        self.snapshot_after(schema, tick, None)
    }

    /// As the server builds it: noting what is unchanged since the previous tick.
    pub fn snapshot_after(&self, schema: &Schema, tick: u32, previous: Option<&WorldSnapshot>) -> Arc<WorldSnapshot> {
        let mut b = SnapshotBuilder::new(schema, tick);
        for (i, c) in self.cubes.iter().enumerate() {
            b.insert(i as u32, c).expect("Cube is registered");
        }
        Arc::new(b.finish_after(previous).expect("unique ids"))
    }
}
