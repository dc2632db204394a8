//! The 901-cube scene ("Snapshot Compression"): bandwidth of the merged delta snapshot at
//! 60 Hz with the baseline 1 and 6 ticks behind, over a rigid-body recording of at least
//! 2000 frames, and the encode time of one frame.
//!
//!     cargo bench -p volley-cubes
//!
//! The recording is simulated once (rapier3d) and kept in target/cube-scene/; its checksum is
//! printed so that runs on the same recording can be compared. CUBE_FRAMES sets its length;
//! CUBE_SPLIT=1 also prints what positions and orientations cost apart; CUBE_NEAR sets the
//! physics predictor's `near` (metres, or `all` to simulate every cube); CUBE_ONLY=physics
//! runs just the physics predictor's rows.

use std::hint::black_box;
use std::sync::Arc;

use criterion::Criterion;
use volley::protocol::snapshot::{Interest, SenderConfig, SnapshotReceiver, SnapshotSender, WorldSnapshot};
use volley_cubes::{self as scene, CUBES, HZ, Recording, ScenePredictor};

/// Replays the recording through a sender and a receiver whose acks arrive `lag` ticks
/// late; returns each frame's snapshot bytes (after the first full one).
fn replay(worlds: &[Arc<WorldSnapshot>], lag: u32, predict: bool) -> Vec<usize> {
    replay_with(worlds, lag, predict, false)
}

/// [`replay`], with the scene's physics as the predictor on both sides if `physics`.
fn replay_with(worlds: &[Arc<WorldSnapshot>], lag: u32, predict: bool, physics: bool) -> Vec<usize> {
    let schema = scene::schema();
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig { predict, ..SenderConfig::default() });
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    if physics {
        let mut p = ScenePredictor::new(schema);
        if let Ok(near) = std::env::var("CUBE_NEAR") {
            p.near = near.parse().ok();
        }
        let p = Arc::new(p);
        sender.set_predictor(p.clone());
        receiver.set_predictor(p);
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut interest = Vec::new();
    let mut sizes = Vec::with_capacity(worlds.len());
    for (i, world) in worlds.iter().enumerate() {
        let tick = world.tick();
        if tick > lag {
            sender.ack(tick - lag);
        }
        Interest::everything(world, &mut interest);
        let stats = sender.encode(world, &interest, &mut buf).expect("fits");
        assert_eq!(stats.deferred, 0, "the budget never binds here");
        receiver.decode(&buf[..stats.bytes]).expect("decodes");
        assert_eq!(receiver.latest().expect("a snapshot"), &**world, "frame {i}: client == server");
        if i > lag as usize {
            assert_eq!(stats.baseline, Some(tick - lag));
            sizes.push(stats.bytes);
        }
    }
    sizes
}

fn report(name: &str, sizes: &[usize]) {
    let mut s = sizes.to_vec();
    s.sort_unstable();
    let mean = s.iter().sum::<usize>() as f64 / s.len() as f64;
    let kbits = mean * 8.0 * f64::from(HZ) / 1000.0;
    println!(
        "{name}: {kbits:.1} kbit/s at {HZ} Hz = {mean:.1} B/frame = {:.2} bits/cube; frame p50 {} B, p95 {} B, max {} B",
        mean * 8.0 / CUBES as f64,
        s[s.len() / 2],
        s[s.len() * 95 / 100],
        s[s.len() - 1]
    );
}

fn main() {
    let frames: u32 = std::env::var("CUBE_FRAMES").ok().and_then(|v| v.parse().ok()).unwrap_or(2400);
    let started = std::time::Instant::now();
    let rec = Recording::load_or_record(&Recording::default_path(frames), frames);
    let moving: Vec<usize> = (0..rec.frames.len()).map(|f| rec.moving(f)).collect();
    println!(
        "recording: {} frames of {CUBES} cubes, checksum {:016x} ({:.1} s to load or simulate); cubes moving per frame: mean {:.0}, max {}",
        rec.frames.len(),
        rec.checksum(),
        started.elapsed().as_secs_f64(),
        moving.iter().sum::<usize>() as f64 / moving.len() as f64,
        moving.iter().max().copied().unwrap_or(0)
    );
    let schema = scene::schema();
    let mut worlds: Vec<Arc<WorldSnapshot>> = Vec::with_capacity(rec.frames.len());
    for (i, poses) in rec.frames.iter().enumerate() {
        let w = scene::snapshot(&schema, i as u32 + 1, poses, worlds.last().map(|w| &**w));
        worlds.push(w);
    }
    let naive = (2 + 12 + 16) * CUBES;
    println!(
        "naive (u16 id + f32 position + f32 quaternion): {naive} B/frame = {:.0} kbit/s",
        naive as f64 * 8.0 * f64::from(HZ) / 1000.0
    );
    let full = {
        let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
        let mut buf = vec![0u8; 64 * 1024];
        let mut interest = Vec::new();
        Interest::everything(&worlds[0], &mut interest);
        sender.encode(&worlds[0], &interest, &mut buf).expect("fits").bytes
    };
    println!("full snapshot: {full} B = {:.2} B/cube", full as f64 / CUBES as f64);
    let only_physics = std::env::var("CUBE_ONLY").is_ok_and(|v| v == "physics");
    if !only_physics {
        report("delta, baseline 1 tick back", &replay(&worlds, 1, false));
        report("delta, baseline 6 ticks back", &replay(&worlds, 6, false));
        report("delta with prediction, baseline 1 tick back", &replay(&worlds, 1, true));
        report("delta with prediction, baseline 6 ticks back", &replay(&worlds, 6, true));
    }
    for lag in [1, 6] {
        let started = std::time::Instant::now();
        let sizes = replay_with(&worlds, lag, true, true);
        report(&format!("delta predicted by the scene's physics (ScenePredictor), baseline {lag} ticks back"), &sizes);
        println!(
            "  ({:.1} ms a frame to encode and decode, the simulation run on both sides)",
            started.elapsed().as_secs_f64() * 1e3 / worlds.len() as f64
        );
    }

    if std::env::var("CUBE_SPLIT").is_ok() {
        for (name, pos) in [("position only", true), ("rotation only", false)] {
            let mut sch = volley::protocol::snapshot::Schema::new();
            if pos {
                sch.register::<split::PosOnly>().unwrap();
            } else {
                sch.register::<split::RotOnly>().unwrap();
            }
            let sch = Arc::new(sch);
            let mut ws: Vec<Arc<WorldSnapshot>> = Vec::new();
            for (i, poses) in rec.frames.iter().enumerate() {
                let mut b = volley::protocol::snapshot::SnapshotBuilder::new(&sch, i as u32 + 1);
                for (id, (p, q)) in poses.iter().enumerate() {
                    if pos {
                        b.insert(id as u32, &split::PosOnly { position: *p }).unwrap();
                    } else {
                        b.insert(id as u32, &split::RotOnly { rotation: *q }).unwrap();
                    }
                }
                let w = Arc::new(b.finish_after(ws.last().map(|w| &**w)).unwrap());
                ws.push(w);
            }
            for lag in [1, 6] {
                for predict in [false, true] {
                    let mut sender =
                        SnapshotSender::new(sch.clone(), SenderConfig { predict, ..SenderConfig::default() });
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut interest = Vec::new();
                    let (mut total, mut changed) = (0usize, 0u32);
                    for w in &ws {
                        if w.tick() > lag {
                            sender.ack(w.tick() - lag);
                        }
                        Interest::everything(w, &mut interest);
                        let st = sender.encode(w, &interest, &mut buf).unwrap();
                        if w.tick() > 10 {
                            total += st.bytes;
                            changed += st.changed;
                        }
                    }
                    println!(
                        "{name} lag {lag} predict {predict}: {:.1} kbit/s, {:.1} changed/frame, {:.1} bits/changed",
                        total as f64 * 8.0 * 60.0 / 1000.0 / (ws.len() - 10) as f64,
                        changed as f64 / (ws.len() - 10) as f64,
                        total as f64 * 8.0 / changed as f64
                    );
                }
            }
        }
    }

    // Encode time: the whole recording, baseline 6 back (divide by the frame count for one
    // frame of 901 cubes).
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    for predict in [false, true] {
        let name = if predict { "encode_{}_frames_lag6_predicted" } else { "encode_{}_frames_lag6" };
        c.bench_function(&format!("cube_scene/{}", name.replace("{}", &worlds.len().to_string())), |b| {
            let mut buf = vec![0u8; 64 * 1024];
            let mut interest = Vec::new();
            b.iter(|| {
                let mut sender =
                    SnapshotSender::new(schema.clone(), SenderConfig { predict, ..SenderConfig::default() });
                let mut total = 0;
                for world in &worlds {
                    if world.tick() > 6 {
                        sender.ack(world.tick() - 6);
                    }
                    Interest::everything(world, &mut interest);
                    total += sender.encode(world, &interest, &mut buf).expect("fits").bytes;
                }
                black_box(total)
            });
        });
    }
    c.final_summary();
}

mod split {
    use glam::{Quat, Vec3};
    use volley::protocol::quant::{QuatQ, Vec3Q};
    volley::replicated! {
        #[derive(Debug, Clone, PartialEq)]
        pub struct PosOnly {
            pub position: Vec3 = Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(255.998, 255.998, 31.998), 1.0 / 512.0),
        }
    }
    volley::replicated! {
        #[derive(Debug, Clone, PartialEq)]
        pub struct RotOnly {
            pub rotation: Quat = QuatQ::new(9),
        }
    }
}
