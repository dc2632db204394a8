//! The Agones lifecycle against the stand-in SDK server (the SDK's gRPC services generated
//! from the agones crate's protos), with a real server over UDP: the calls a server makes
//! and their order. start → Ready after the first tick; Health every ≤ 2 s while ticking and
//! none while the tick is stalled; the player counter follows a client; an allocation
//! reaches the game (which starts the match it names); the game asks to end → the client is
//! told → Shutdown.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agones_sdk_standin::{Call, StandIn};
use volley::prelude::*;
use volley::protocol::session::SessionEnd;
use volley::server::WorldOptions;
use volley_fleet::agones::{AgonesConfig, Lifecycle, ShutdownRequest};

/// The hall: stalls one tick for `stall` milliseconds when asked, noting when.
struct Hall {
    stall: Arc<AtomicU64>,
    stalled: Arc<Mutex<Option<(Instant, Instant)>>>,
}

impl World for Hall {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        let ms = self.stall.swap(0, Ordering::Relaxed);
        if ms > 0 {
            let began = Instant::now();
            std::thread::sleep(Duration::from_millis(ms));
            *self.stalled.lock().unwrap() = Some((began, Instant::now()));
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// The match an allocation names: it counts its ticks and, after 30, asks for the end.
struct Match {
    ticks: Arc<AtomicU32>,
    end: ShutdownRequest,
}

impl World for Match {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        if self.ticks.fetch_add(1, Ordering::Relaxed) + 1 == 30 {
            self.end.request();
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

async fn until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Plays the client for `d` from now.
async fn step_for(client: &mut UdpClient, d: Duration) {
    let mut next = tokio::time::Instant::now();
    for _ in 0..d.as_millis() / 16 {
        next += Duration::from_millis(16);
        client.step(&[1], next).await;
    }
}

fn healths(calls: &[(Instant, Call)]) -> Vec<Instant> {
    calls.iter().filter(|(_, c)| *c == Call::Health).map(|(t, _)| *t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_goes_ready_pings_while_it_ticks_hands_over_its_allocation_and_shuts_down() {
    let sdk = StandIn::start("volley-abc12", &[("players", 0)]);
    let key = [3u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.max_players = 8;
    config.world_kinds = vec!["hall".into(), "match".into()];
    config.shutdown_grace = Duration::from_secs(2);
    // The first tick stalls for 1.5 s: Ready must wait for it.
    let stall = Arc::new(AtomicU64::new(1500));
    let stalled = Arc::new(Mutex::new(None));
    let started = Instant::now();
    let server = volley::server::start(config, Hall { stall: stall.clone(), stalled: stalled.clone() }).await.unwrap();

    // The allocation names a match; the game starts it (here, from the callback).
    let match_ticks = Arc::new(AtomicU32::new(0));
    let request: Arc<Mutex<Option<ShutdownRequest>>> = Arc::new(Mutex::new(None));
    let hosted = Arc::new(Mutex::new(None::<String>));
    let allocated = {
        let (worlds, ticks, request, hosted) =
            (server.worlds().clone(), match_ticks.clone(), request.clone(), hosted.clone());
        move |a: volley_fleet::agones::Allocation| {
            *hosted.lock().unwrap() = a.labels.get("volley.dev/match").cloned();
            let end = request.lock().unwrap().clone().unwrap();
            worlds.spawn(WorldOptions::new("match"), Match { ticks: ticks.clone(), end }).unwrap();
        }
    };
    let cfg =
        AgonesConfig { port: Some(sdk.port()), connect_timeout: Duration::from_secs(10), ..AgonesConfig::default() };
    let mut lifecycle = Lifecycle::start(cfg, server.metrics().clone(), allocated).await.unwrap();
    *request.lock().unwrap() = Some(lifecycle.shutdown_request());

    // Ready, once the first tick has run.
    until("Ready", Duration::from_secs(5), || sdk.state() == "Ready").await;
    let ready_at = sdk.calls().iter().find(|(_, c)| *c == Call::Ready).unwrap().0;
    let first_tick = stalled.lock().unwrap().take().expect("the first tick has run").1;
    assert!(ready_at > first_tick, "Ready came {:?} before the first tick ended", first_tick - ready_at);
    assert!(healths(&sdk.calls()).iter().all(|&h| h > ready_at), "no Health before Ready");
    assert!(ready_at > started);

    // A client joins: the counter follows, with the slots as its capacity.
    let mut p = TokenParams::new(DEFAULT_PROTOCOL_ID, 77, server.addr(), unix_now().as_secs());
    p.timeout_seconds = 10;
    let token = ConnectToken::generate(&p, &key).unwrap();
    let c = GameClient::new(token, Arc::new(Schema::new()), unix_now());
    let mut client = UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut next = tokio::time::Instant::now();
    let deadline = Instant::now() + Duration::from_secs(5);
    while sdk.counter("players") != Some((1, 8)) {
        assert!(Instant::now() < deadline, "players counter {:?}", sdk.counter("players"));
        next += Duration::from_millis(16);
        client.step(&[1], next).await;
    }

    // Health while ticking: at least two, none more than 2 s apart.
    step_for(&mut client, Duration::from_millis(3500)).await;
    let h = healths(&sdk.calls());
    assert!(h.len() >= 2, "{} Health calls in 3.5 s", h.len());
    for w in h.windows(2) {
        assert!(w[1] - w[0] <= Duration::from_secs(2), "Health {:?} apart", w[1] - w[0]);
    }

    // A stalled tick: no Health while it lasts (after one period's grace), then again.
    stall.store(3000, Ordering::Relaxed);
    until("the stall", Duration::from_secs(8), || stalled.lock().unwrap().is_some()).await;
    let (began, ended) = stalled.lock().unwrap().unwrap();
    step_for(&mut client, Duration::from_millis(2500)).await;
    let h = healths(&sdk.calls());
    let during: Vec<_> = h.iter().filter(|&&t| t > began + Duration::from_millis(1100) && t < ended).collect();
    assert!(during.is_empty(), "{} Health calls during a 3 s stall", during.len());
    assert!(h.iter().any(|&t| t > ended), "Health again after the stall");

    // Allocated: the game hears it and hosts the match it names.
    sdk.allocate(&[("volley.dev/match", "m-42")], &[("volley.dev/map", "docks")]);
    until("the match", Duration::from_secs(5), || match_ticks.load(Ordering::Relaxed) > 0).await;
    assert_eq!(hosted.lock().unwrap().as_deref(), Some("m-42"));

    // The match ends and asks for the end: drain (the client is told), then Shutdown.
    tokio::time::timeout(Duration::from_secs(5), lifecycle.requested()).await.unwrap();
    let drained = tokio::spawn(server.shutdown());
    let deadline = Instant::now() + Duration::from_secs(5);
    next = tokio::time::Instant::now();
    while client.client.ended().is_none() {
        assert!(Instant::now() < deadline, "the client was not told");
        next += Duration::from_millis(16);
        client.step(&[1], next).await;
    }
    assert_eq!(client.client.ended(), Some(SessionEnd::ShuttingDown));
    let told = Instant::now();
    drained.await.unwrap();
    assert!(!sdk.calls().iter().any(|(_, c)| *c == Call::Shutdown), "no Shutdown before the drain");
    lifecycle.shutdown().await.unwrap();
    let shutdown_at = sdk.calls().iter().find(|(_, c)| *c == Call::Shutdown).unwrap().0;
    assert!(shutdown_at >= told);
    assert_eq!(sdk.state(), "Shutdown");
}
