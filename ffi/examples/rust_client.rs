//! The C example's loop in Rust, for comparing the CPU a frame costs through the C library
//! with the Rust client's own (BENCHMARKS.md, "The C client's CPU per frame"): the same
//! input each frame, a poll, and every avatar blended for drawing.
//!
//!     cargo run --release -p volley-ffi --example rust_client -- TOKEN_FILE SECONDS
use std::time::Duration;

use volley::client::GameClient;
use volley::client::polled::PolledClient;
use volley::protocol::netcode::token::ConnectToken;
use volley::server::{World, unix_now};
use volley_arena::{Arena, ArenaInput, Avatar};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(token), Some(seconds)) = (args.get(1), args.get(2)) else {
        return Err("usage: rust_client TOKEN_FILE SECONDS".into());
    };
    let token = std::fs::read(token).map_err(|e| format!("{token}: {e}"))?;
    let token = ConnectToken::from_bytes(&token).map_err(|e| e.to_string())?;
    let seconds: u32 = seconds.parse().map_err(|e| format!("SECONDS: {e}"))?;
    let client = GameClient::new(token, std::sync::Arc::new(Arena::new().schema()), unix_now());
    let mut client = PolledClient::bind(client, "0.0.0.0:0".parse().map_err(|e| format!("{e}"))?, unix_now)
        .map_err(|e| e.to_string())?;
    let (mut snapshots, mut drawn, mut avatars) = (0usize, 0usize, Vec::new());
    let began = process_cpu();
    let frames = seconds * 60;
    for f in 0..frames {
        let a = f as f32 * 0.05;
        let input = ArenaInput {
            move_x: (a.cos() * 127.0) as i8,
            move_y: (a.sin() * 127.0) as i8,
            aim: ((a / std::f32::consts::TAU).rem_euclid(1.0) * 65536.0) as u16,
            fire: f % 30 == 0,
            rail: false,
        };
        snapshots += client.poll(&input.to_bytes());
        while client.client.channel().recv_reliable().is_some() {}
        client.client.entities_into::<Avatar>(unix_now(), &mut avatars);
        drawn += usize::from(!avatars.is_empty());
        std::thread::sleep(Duration::from_micros(16_667));
    }
    let cpu = process_cpu().saturating_sub(began);
    println!(
        "cpu per frame {:.1} us over {frames} frames; snapshots {snapshots}, frames drawn {drawn}, avatars {}",
        cpu.as_secs_f64() * 1e6 / f64::from(frames),
        avatars.len()
    );
    client.disconnect();
    Ok(())
}

/// The CPU time of this thread, the only one the client runs on (the C example reads its
/// process's, which is the same: the library starts no thread).
fn process_cpu() -> Duration {
    volley_util::cpu::thread_cpu_time()
}
