//! Tag over real UDP on this machine: a server and four players (simple bots) for 15 seconds
//! (`cargo run -p volley-tag -- SECONDS`). One says hello in the chat, one swears and is
//! kicked (its client prints why), everyone hears who tagged whom, and the scoreboard comes
//! once a second. `RUST_LOG=info` (the default here) shows the server's own log lines.

use std::sync::Arc;
use std::time::Duration;

use volley::prelude::*;
use volley_tag::{BANNED_WORD, TagWorld, ToClient, ToServer, schema, steer, user_data_for};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server logs through `tracing`: a subscriber shows it (RUST_LOG picks the level).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(15);
    let key = generate_key()?;
    let server = start(ServerConfig::new("127.0.0.1:0".parse()?, key), TagWorld::default()).await?;

    // What a backend does: mint each player a token naming the server, with its name.
    let names = ["ada", "bo", "cy", "dee"];
    let mut players = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut params = TokenParams::new(DEFAULT_PROTOCOL_ID, i as u64 + 1, server.addr(), unix_now().as_secs());
        params.user_data = user_data_for(name);
        let client = GameClient::new(ConnectToken::generate(&params, &key)?, Arc::new(schema()), unix_now());
        players.push(UdpClient::bind(client, "127.0.0.1:0".parse()?, unix_now).await?);
    }

    let frame = Duration::from_millis(16);
    let mut next = tokio::time::Instant::now();
    for f in 0..seconds * 60 {
        next += frame;
        for (i, p) in players.iter_mut().enumerate() {
            if p.client.ended().is_some() {
                continue;
            }
            if f == 60 && i == 0 {
                p.client.channel().send_message(&ToServer::Chat("hello, all".into()))?;
            }
            if f == 300 && i == 3 {
                p.client.channel().send_message(&ToServer::Chat(format!("{BANNED_WORD} it")))?;
            }
            let input = steer(&p.client, unix_now());
            p.step(&input.to_bytes(), next).await;
            while let Some(Ok(m)) = p.client.channel().recv_message::<ToClient>() {
                if i != 0 {
                    continue; // one player's view is enough to print
                }
                match m {
                    ToClient::Chat { from, text } => println!("[chat] {from}: {text}"),
                    ToClient::Tagged { by, it } => println!("{by} tagged {it}"),
                }
            }
            if i == 0 && f % 60 == 59 {
                // The built-in scoreboard: name, the world's fields, ping.
                let board = p.client.scoreboard();
                let line: Vec<String> = board
                    .rows()
                    .map(|r| {
                        let field = |k: usize| r.fields.get(k).copied().unwrap_or(0);
                        format!("{} {} tags {} s it {} ms", r.name, field(0), field(1), r.ping_ms)
                    })
                    .collect();
                println!("scores: {}", line.join(" | "));
            }
            if let Some(why) = p.client.ended() {
                println!("{} was disconnected: {why}", names[i]);
            }
        }
    }
    for p in &mut players {
        p.disconnect();
    }
    server.shutdown().await;
    Ok(())
}
