//! The arena: a top-down shooter world (see `src/demo/arena.rs`) with a few bots playing,
//! watched through the client library's eyes. `cargo run --release --example arena`.
//!
//! Prints a text view of the arena as the first bot's client sees it, and the scoreboard.

use std::sync::Arc;
use std::time::Duration;

use volley::client::GameClient;
use volley::client::udp::UdpClient;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::Replicate;
use volley::server::{ServerConfig, unix_now};
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};
use volley_arena::{self as arena, Arena, ArenaInput, Avatar, HALF_SIZE, Shot};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = volley::protocol::netcode::generate_key()?;
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse()?, key), Arena::new()).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(
        SwarmConfig { first_client_id: 100, ..SwarmConfig::new(server.addr(), 7, key) },
        Arc::new(SwarmProgress::default()),
        stop_rx,
    ));

    // An observer client that stands still and watches.
    let params = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let schema = Arc::new(arena::schema());
    let client = GameClient::new(ConnectToken::generate(&params, &key)?, schema.clone(), unix_now());
    let mut me = UdpClient::bind(client, "127.0.0.1:0".parse()?, unix_now).await?;
    let idle = ArenaInput::default().to_bytes();
    let mut next = tokio::time::Instant::now();
    for frame in 0..300 {
        next += Duration::from_millis(16);
        me.step(&idle, next).await;
        if let Some(world) = me.client.latest().filter(|_| frame % 60 == 59) {
            draw(world, &schema);
        }
    }
    let _ = stop_tx.send(true);
    let _ = swarm.await;
    me.disconnect();
    server.shutdown().await;
    Ok(())
}

fn draw(world: &volley::protocol::snapshot::WorldSnapshot, schema: &volley::protocol::snapshot::Schema) {
    const W: usize = 50;
    const H: usize = 25;
    let mut grid = vec![vec!['.'; W]; H];
    let mut board = Vec::new();
    let avatar = schema.kind_of::<Avatar>();
    for e in world.iter() {
        let (pos, ch) = if Some(e.kind) == avatar {
            let a = Avatar::dequantize(e.words);
            board.push((e.id, a.score, a.deaths, a.health, a.alive));
            (a.position, if a.alive { char::from(b'A' + (e.id % 26) as u8) } else { 'x' })
        } else {
            (Shot::dequantize(e.words).position, '*')
        };
        let x = (((pos.x + HALF_SIZE) / (2.0 * HALF_SIZE)) * W as f32).clamp(0.0, W as f32 - 1.0) as usize;
        let y = (((pos.y + HALF_SIZE) / (2.0 * HALF_SIZE)) * H as f32).clamp(0.0, H as f32 - 1.0) as usize;
        grid[H - 1 - y][x] = ch;
    }
    println!("tick {}", world.tick());
    for row in grid {
        println!("{}", row.into_iter().collect::<String>());
    }
    board.sort_by_key(|b| std::cmp::Reverse(b.1));
    for (id, score, deaths, health, alive) in board {
        println!(
            "  player {id:>3}: {score:>3} kills {deaths:>3} deaths  health {health:>3}{}",
            if alive { "" } else { " (dead)" }
        );
    }
}
