//! The 901-cube scene as a networked game: a volley server runs the rapier3d simulation as
//! its world, and a client — through the client library, over UDP — drives the large cube
//! (its autopilot sends the target as input) and draws what it receives, top-down, once a
//! second, with the bandwidth it costs.
//!
//!     cargo run --release -p volley-cubes [-- SECONDS [builtin]]
//!
//! Snapshots are predicted by the scene's own physics ([`ScenePredictor`], on the server and
//! in the client alike); `builtin` uses the codec's built-in extrapolation instead, to compare.

use std::sync::Arc;
use std::time::Duration;

use glam::Vec3;
use volley::client::GameClient;
use volley::client::udp::UdpClient;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::{Replicate, Schema, WorldSnapshot};
use volley::server::{ServerConfig, unix_now};
use volley_cubes::{Cube, CubeScene, CubeWorld, HZ, ScenePredictor};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u32 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20);
    let physics = std::env::args().nth(2).is_none_or(|a| a != "builtin");
    let key = volley::protocol::netcode::generate_key()?;
    let world = CubeWorld::default();
    // A physics scene: predicted, range-coded snapshots, predicted by the scene's own physics
    // on both sides (the player's cube is stepped with the same tick numbers, from tick 1).
    let schema = volley_cubes::schema();
    let predictor = Arc::new(ScenePredictor::new(schema.clone()));
    let mut config = ServerConfig::new("127.0.0.1:0".parse()?, key);
    config.predict_snapshots = true;
    if physics {
        config.snapshot_predictor = Some(predictor.clone());
    }
    let server = volley::server::start(config, world).await?;
    let params = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let mut client = GameClient::new(ConnectToken::generate(&params, &key)?, schema.clone(), unix_now());
    if physics {
        client.set_predictor(predictor);
    }
    println!("snapshots predicted by {}", if physics { "the scene's physics" } else { "the built-in extrapolation" });
    let mut me = UdpClient::bind(client, "127.0.0.1:0".parse()?, unix_now).await?;
    let mut next = tokio::time::Instant::now();
    let mut last_bytes = 0;
    let mut previous: Option<Arc<WorldSnapshot>> = None;
    for frame in 0..seconds * HZ {
        next += Duration::from_secs(1) / HZ;
        me.step(&CubeWorld::input_for(CubeScene::autopilot(frame)), next).await;
        if frame % HZ == HZ - 1
            && let Some(world) = me.client.latest()
        {
            let stats = me.client.stats();
            let kbits = (stats.bytes_received - last_bytes) as f64 * 8.0 / 1000.0;
            last_bytes = stats.bytes_received;
            draw(world, previous.as_deref(), &schema);
            println!(
                "second {:>3}: received {kbits:.0} kbit/s, RTT {:.1} ms, {} snapshots so far",
                frame / HZ + 1,
                stats.rtt.as_secs_f64() * 1e3,
                stats.snapshots
            );
            previous = Some(Arc::new(world.clone()));
        }
    }
    me.disconnect();
    server.shutdown().await;
    Ok(())
}

/// Top-down view of [-33, 33] m square: `#` the large cube, `o` a cube that moved in the last
/// second, `.` a cube at rest, `^` a cube off the ground.
fn draw(world: &WorldSnapshot, before: Option<&WorldSnapshot>, schema: &Schema) {
    const W: usize = 66;
    const H: usize = 33;
    let mut grid = vec![vec![' '; W]; H];
    let cell = |p: Vec3| {
        let x = ((p.x + 33.0) / 66.0 * W as f32).floor();
        let y = ((p.y + 33.0) / 66.0 * H as f32).floor();
        (x >= 0.0 && y >= 0.0 && (x as usize) < W && (y as usize) < H).then(|| (x as usize, H - 1 - y as usize))
    };
    for e in world.iter() {
        let c = Cube::dequantize(e.words);
        let moved = before.and_then(|b| b.read::<Cube>(schema, e.id)).is_none_or(|b| b != c);
        let ch = match (e.id, moved, c.position.z > 0.7) {
            (0, _, _) => '#',
            (_, _, true) => '^',
            (_, true, _) => 'o',
            _ => '.',
        };
        if let Some((x, y)) = cell(c.position)
            && grid[y][x] != '#'
        {
            grid[y][x] = ch;
        }
    }
    println!("tick {}", world.tick());
    for row in grid {
        println!("{}", row.into_iter().collect::<String>().trim_end());
    }
}
