//! The smallest useful world: each player is a dot that moves where its input says.
//!
//! Run with `cargo run --example custom_world`. It starts a server on 127.0.0.1, connects one
//! client over UDP, steers it for two seconds and prints what the client sees.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use glam::Vec2;
use volley::prelude::*;

volley::replicated! {
    /// A player's dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is, to the centimetre in a 200 m square.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-100.0), Vec2::splat(100.0), 0.01),
    }
}

/// The world: one dot per player, and the direction each player last asked for.
#[derive(Default)]
struct Dots {
    dots: BTreeMap<PlayerId, (Vec2, Vec2)>,
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().expect("a fresh schema");
    s
}

impl World for Dots {
    fn schema(&self) -> Schema {
        schema()
    }
    fn join(&mut self, player: PlayerId) {
        self.dots.insert(player, (Vec2::ZERO, Vec2::ZERO));
    }
    fn leave(&mut self, player: PlayerId) {
        self.dots.remove(&player);
    }
    fn input(&mut self, player: PlayerId, input: &[u8]) {
        // Two signed bytes: the direction. Anything else is ignored.
        if let (Some(d), [x, y]) = (self.dots.get_mut(&player), input) {
            d.1 = Vec2::new(f32::from(*x as i8), f32::from(*y as i8)) / 127.0;
        }
    }
    fn tick(&mut self, _tick: u32, dt: Duration) {
        for (position, direction) in self.dots.values_mut() {
            *position =
                (*position + *direction * 5.0 * dt.as_secs_f32()).clamp(Vec2::splat(-100.0), Vec2::splat(100.0));
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (id, (position, _)) in &self.dots {
            let _ = out.insert(*id, &Dot { position: *position });
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = volley::protocol::netcode::generate_key()?;
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse()?, key), Dots::default()).await?;

    // A backend would mint this token and hand it to the client over HTTPS.
    let params = TokenParams::new(volley::DEFAULT_PROTOCOL_ID, 42, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key)?;
    let client = GameClient::new(token, Arc::new(schema()), unix_now());
    let mut client = UdpClient::bind(client, "127.0.0.1:0".parse()?, unix_now).await?;

    let mut next = tokio::time::Instant::now();
    for _ in 0..120 {
        next += Duration::from_millis(16);
        client.step(&[127, 0], next).await; // steer right
    }
    let s = Arc::new(schema());
    let me = client.client.client_index();
    if let Some(dot) = client.client.latest().zip(me).and_then(|(w, me)| w.read::<Dot>(&s, me)) {
        println!("after two seconds steering right, my dot is at {:?}", dot.position);
    }
    println!("connection: {:?}", client.client.stats());
    client.disconnect();
    server.shutdown().await;
    Ok(())
}
