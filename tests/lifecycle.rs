//! A world's life: `World::shutdown` runs once, after every player's `leave`, when the
//! server shuts down (and `ServerHandle::shutdown` returns only once it has); a world that
//! keeps panicking is stopped and its players are told why. The stepper and the actor
//! server are both checked.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;

use crate::udp;
use udp::{client, run};

/// Records what happens to it, in order; its tick panics from tick `panic_from` on.
#[derive(Clone)]
struct Journal {
    log: Arc<Mutex<Vec<String>>>,
    panic_from: u32,
}

impl Journal {
    fn new(panic_from: u32) -> Self {
        Self { log: Arc::default(), panic_from }
    }
    fn entries(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl World for Journal {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, p: PlayerId) {
        self.log.lock().unwrap().push(format!("join {p}"));
    }
    fn leave(&mut self, p: PlayerId) {
        self.log.lock().unwrap().push(format!("leave {p}"));
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, t: u32, _: Duration) {
        assert!(t < self.panic_from, "a bug in the game");
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    fn shutdown(&mut self) {
        self.log.lock().unwrap().push("shutdown".into());
    }
}

/// The journal's entries after the joins, sorted where their order is the runtime's (the
/// leaves), with "shutdown" kept last.
fn after_joins(j: &Journal) -> Vec<String> {
    let mut e: Vec<String> = j.entries().into_iter().filter(|e| !e.starts_with("join")).collect();
    let last = e.pop();
    e.sort();
    e.extend(last);
    e
}

#[test]
fn the_stepper_shuts_down_after_every_leave_and_tells_each_client() {
    let world = Journal::new(u32::MAX);
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    for _ in 0..2 {
        stepper.add_client(LinkProfile::PERFECT);
        stepper.clients.last_mut().unwrap().input = Some(vec![1]);
    }
    stepper.run(30);
    assert_eq!(stepper.players(), 2);
    stepper.shutdown();
    assert_eq!(after_joins(&world), ["leave 0", "leave 1", "shutdown"]);
    for c in &stepper.clients {
        assert_eq!(c.client.ended(), Some(SessionEnd::ShuttingDown));
    }
    let ticks = stepper.tick();
    stepper.run(5);
    assert_eq!(stepper.tick(), ticks, "a shut-down world ticks no more");
    assert_eq!(after_joins(&world).len(), 3, "and hears nothing more");
}

#[test]
fn the_stepper_tells_every_client_when_the_world_is_stopped() {
    let world = Journal::new(20);
    let mut stepper = Stepper::new(world, 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.clients[0].input = Some(vec![1]);
    stepper.run(20 + volley::server::MAX_PANICKING_TICKS + 5);
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::WorldStopped));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_the_worlds_shutdown_after_every_leave_even_an_unanswered_one() {
    let key = [7u8; 32];
    let world = Journal::new(u32::MAX);
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.shutdown_grace = Duration::from_millis(300);
    let server = start(config, world.clone()).await.unwrap();
    let mut clients = vec![client(&server, &key, 1, "").await, client(&server, &key, 2, "").await];
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 40).await;
    assert!(clients.iter().all(|c| c.client.is_ready()));
    // Client 1 goes quiet (it will never answer the goodbye); client 0 keeps stepping.
    let mut quiet = clients.pop().unwrap();
    let stop = tokio::spawn(server.shutdown());
    while !stop.is_finished() {
        run(&mut clients, &mut next, 1).await;
    }
    let left = stop.await.unwrap();
    assert_eq!(left, 1, "the quiet client was still connected when the grace ran out");
    assert_eq!(clients[0].client.ended(), Some(SessionEnd::ShuttingDown));
    assert_eq!(after_joins(&world), ["leave 0", "leave 1", "shutdown"], "shutdown is last, after every leave");
    // The quiet one had its goodbye waiting all along.
    quiet.step(&[1], tokio::time::Instant::now() + Duration::from_millis(20)).await;
    assert_eq!(quiet.client.ended(), Some(SessionEnd::ShuttingDown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_tells_every_client_when_the_world_is_stopped() {
    let key = [8u8; 32];
    let mut server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Journal::new(60)).await.unwrap();
    let mut clients = vec![client(&server, &key, 1, "").await];
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 40).await;
    assert!(clients[0].client.is_ready());
    // MAX_PANICKING_TICKS panicking ticks in a row (five seconds) stop the world.
    for _ in 0..600 {
        run(&mut clients, &mut next, 1).await;
        if clients[0].client.ended().is_some() {
            break;
        }
    }
    assert_eq!(clients[0].client.ended(), Some(SessionEnd::WorldStopped));
    tokio::time::timeout(Duration::from_secs(2), server.wait()).await.expect("the server failed");
    server.shutdown().await;
}
