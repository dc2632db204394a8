//! The admin listener of a real server under bot load: `/metrics` passes `promtool check
//! metrics` and carries live figures, `/healthz` fails while the tick loop is stalled,
//! `/readyz` says when the server is full, `/players` has one row per player.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::prom;
use crate::tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prom::metric_value;
use volley::protocol::snapshot::{Schema, SnapshotBuilder};
use volley::server::{PlayerId, ServerConfig, World};
use volley_arena::Arena;
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};
use volley_fleet::admin_client as admin;

const T: Duration = Duration::from_secs(3);

async fn wait_for(progress: &SwarmProgress, bots: u64) {
    for _ in 0..200 {
        if progress.connected.load(Ordering::Relaxed) == bots {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("bots did not connect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_live_and_pass_promtool_and_players_has_one_row_each() {
    let key = [9u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    let server = volley::server::start(config, Arena::new()).await.unwrap();
    let admin_addr = server.admin_addr().unwrap();
    // More players than the fan-out wakes at once (four per core), so that its chains
    // also send snapshots themselves.
    let bots = 24;
    let progress = Arc::new(SwarmProgress::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(SwarmConfig::new(server.addr(), bots, key), progress.clone(), stop_rx));
    wait_for(&progress, bots as u64).await;
    // Each player samples its link once a second.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let (status, text) = admin::get(admin_addr, "/metrics", T).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(metric_value(&text, "volley_players"), Some(bots as f64));
    assert_eq!(metric_value(&text, "volley_player_slots"), Some(1024.0));
    assert!(metric_value(&text, "volley_ticks_total").unwrap() > 60.0);
    assert!(metric_value(&text, "volley_tick_duration_seconds_count").unwrap() > 60.0);
    assert!(metric_value(&text, "volley_rtt_seconds_count").unwrap() >= bots as f64, "every player sampled its RTT");
    assert!(metric_value(&text, "volley_input_delay_seconds_count").unwrap() > 0.0);
    // Every bot's input carries the view it aimed from (its newest snapshot), and the world
    // actor passes them on: on loopback a tick or so behind the newest snapshot made.
    let views = metric_value(&text, "volley_input_view_age_seconds_count").unwrap();
    let age = metric_value(&text, "volley_input_view_age_seconds_sum").unwrap() / views;
    assert!(views > bots as f64 * 60.0 && (0.0..0.2).contains(&age), "{views} views, mean age {age} s");
    assert!(metric_value(&text, "volley_sent_bytes_total{kind=\"snapshot\"}").unwrap() > 1000.0);
    assert!(metric_value(&text, "volley_received_bytes_total{kind=\"input\"}").unwrap() > 1000.0);
    // Each player's payloads wait for its actor's tick (its inputs went to the world at
    // once); only a few (a control message, the client's messages) wake it.
    let left = metric_value(&text, "volley_player_datagrams_total{path=\"left\"}").unwrap();
    let woke = metric_value(&text, "volley_player_datagrams_total{path=\"woke\"}").unwrap();
    assert!(left > bots as f64 * 60.0 && left > woke, "left {left}, woke {woke}");
    // The fan-out wakes each player actor once a tick for its snapshot, never twice.
    let snapshot = metric_value(&text, "volley_player_wakeups_total{reason=\"snapshot\"}").unwrap();
    assert!(snapshot > bots as f64 * 60.0, "{snapshot} snapshot wake-ups");
    assert_eq!(metric_value(&text, "volley_fanout_repeat_wakeups_total"), Some(0.0));
    // Full snapshots go out only until a player's first ack arrives.
    let full = metric_value(&text, "volley_snapshot_full_total").unwrap();
    let snapshots = metric_value(&text, "volley_snapshots_total").unwrap();
    assert!(full >= bots as f64 && full <= 0.05 * snapshots, "{full} full snapshots of {snapshots}");
    assert!(metric_value(&text, "volley_snapshot_baseline_age_seconds_count").unwrap() > 100.0);
    assert!(metric_value(&text, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(!text.contains("127.0.0.1"), "no address ever becomes a label");

    // The sum of bytes by kind is every byte sent.
    let kinds: f64 = ["snapshot", "reliable", "control", "overhead"]
        .iter()
        .map(|k| metric_value(&text, &format!("volley_sent_bytes_total{{kind=\"{k}\"}}")).unwrap())
        .sum();
    let total = server.metrics().totals().bytes_sent as f64;
    assert!(kinds <= total && kinds > 0.9 * total, "kinds {kinds} of {total}");

    tools::assert_promtool_clean(&text);

    let (status, json) = admin::get(admin_addr, "/players", T).await.unwrap();
    assert_eq!(status, 200);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), bots);
    for r in rows {
        assert!(r["rtt_seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["sent_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["snapshots"].as_u64().unwrap() > 60, "{r}");
    }
    assert_eq!(admin::get(admin_addr, "/healthz", T).await.unwrap().0, 200);
    assert_eq!(admin::get(admin_addr, "/readyz", T).await.unwrap().0, 200);
    assert_eq!(admin::get(admin_addr, "/nope", T).await.unwrap().0, 404);

    let _ = stop_tx.send(true);
    let _ = swarm.await;
    server.shutdown().await;
}

/// A world whose tick blocks its thread for a while when told to.
struct Stalling {
    stall: Arc<AtomicBool>,
}

impl World for Stalling {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, _: PlayerId) {}
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        if self.stall.swap(false, Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1500));
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_while_the_tick_loop_is_stalled_and_recovers() {
    let stall = Arc::new(AtomicBool::new(false));
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), [1u8; 32]);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    config.stall_after = Duration::from_millis(500);
    let server = volley::server::start(config, Stalling { stall: stall.clone() }).await.unwrap();
    let admin_addr = server.admin_addr().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(admin::get(admin_addr, "/healthz", T).await.unwrap().0, 200);

    stall.store(true, Ordering::Relaxed);
    // Blocking sleeps and a blocking client: this thread is not one of the runtime's, so the
    // test keeps time while the world blocks a worker.
    std::thread::sleep(Duration::from_millis(1000));
    let (status, body) = prom::http_get(&admin_addr.to_string(), "/healthz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("stalled"), "{body}");

    std::thread::sleep(Duration::from_millis(1200));
    let (status, body) = prom::http_get(&admin_addr.to_string(), "/healthz").unwrap();
    assert_eq!(status, 200, "recovered: {body}");

    // The health-check subcommand agrees (it is the Docker HEALTHCHECK).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(["health", "--admin", &admin_addr.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    server.shutdown().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(["health", "--admin", &admin_addr.to_string(), "--timeout", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a stopped server is unhealthy: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_full_when_every_slot_is_taken() {
    let key = [3u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    config.max_players = 2;
    let server = volley::server::start(config, Arena::new()).await.unwrap();
    let admin_addr = server.admin_addr().unwrap();
    assert_eq!(admin::get(admin_addr, "/readyz", T).await.unwrap().0, 200);
    let progress = Arc::new(SwarmProgress::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(SwarmConfig::new(server.addr(), 2, key), progress.clone(), stop_rx));
    wait_for(&progress, 2).await;
    let (status, body) = admin::get(admin_addr, "/readyz", T).await.unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("full"), "{body}");
    let _ = stop_tx.send(true);
    let _ = swarm.await;
    server.shutdown().await;
}

/// `volley bots --admin` reads the server's own figures back from its /metrics and prints
/// them; they agree with the server's counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_swarm_prints_the_servers_own_figures() {
    let key = [4u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    let server = volley::server::start(config, Arena::new()).await.unwrap();
    let admin_addr = server.admin_addr().unwrap();
    let (addr, hex_key) = (server.addr().to_string(), volley_util::hex::encode(&key));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_volley"))
            .args(["bots", "--bots", "6", "--duration", "4", "--server", &addr])
            .args(["--private-key", &hex_key, "--admin", &admin_addr.to_string()])
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.starts_with("server (its /metrics")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains(": 6 players;"), "{line}");
    let figure = |label: &str, unit: &str| -> f64 {
        let rest = line.split(label).nth(1).unwrap_or_else(|| panic!("{label} in {line}"));
        rest.trim().split(unit).next().unwrap().trim().parse().unwrap_or_else(|_| panic!("{label} in {line}"))
    };
    assert!(figure("CPU", "us") > 0.0, "{line}");
    assert!(figure("memory", "KiB") > 0.0, "{line}");
    let next = figure("inputs applied at the next tick", "%");
    let within = figure("within one tick period", "%");
    assert!((0.0..=100.0).contains(&within) && within > 0.0, "{line}");
    assert!((0.0..=100.0).contains(&next) && next > 0.0, "{line}");
    assert!(figure("tick p99", "ms") > 0.0, "{line}");
    server.shutdown().await;
}
