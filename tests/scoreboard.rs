//! The built-in scoreboard over real UDP: every client sees every player's name (from its
//! connect token), the world's score fields and a ping, twice a second as deltas; a client
//! that joins late gets the whole board; a player who leaves leaves the board. (The stepper
//! runs the same session code: `examples/tag/tests/stepper.rs`.)
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use volley::prelude::*;

use crate::udp;
use udp::{client, run};

/// Each player's score is the seconds it has been connected.
#[derive(Default)]
struct Clock(std::collections::BTreeMap<PlayerId, u32>);

impl World for Clock {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, p: PlayerId) {
        self.0.insert(p, 0);
    }
    fn leave(&mut self, p: PlayerId) {
        self.0.remove(&p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.0.values_mut().for_each(|t| *t += 1);
    }
    fn messages(&mut self, out: &mut Outbox) {
        for (p, ticks) in &self.0 {
            out.set_score(*p, &[(*ticks / 60) as i32]);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    fn scoreboard_columns(&self) -> Vec<String> {
        vec!["seconds".into()]
    }
}

fn names(c: &UdpClient) -> Vec<String> {
    let mut n: Vec<String> = c.client.scoreboard().rows().map(|r| r.name.clone()).collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_sees_the_board_and_a_late_one_gets_it_whole() {
    let key = [5u8; 32];
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Clock::default()).await.unwrap();
    let mut clients = vec![client(&server, &key, 1, "ada").await, client(&server, &key, 2, "bo").await];
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 150).await;
    let board = clients[0].client.scoreboard();
    assert_eq!(board.columns(), ["seconds"]);
    assert_eq!(names(&clients[0]), ["ada", "bo"]);
    assert!(board.rows().all(|r| r.fields[0] >= 1), "{:?}", board.rows().collect::<Vec<_>>());
    assert_eq!(clients[0].client.scoreboard(), clients[1].client.scoreboard());

    // A late joiner gets the whole board; the others get it as a delta.
    clients.push(client(&server, &key, 3, "cy").await);
    run(&mut clients, &mut next, 90).await;
    for c in &clients {
        assert_eq!(names(c), ["ada", "bo", "cy"]);
    }
    let late = clients[2].client.scoreboard();
    let ada = late.rows().find(|r| r.name == "ada").unwrap();
    assert!(ada.fields[0] >= 3, "the late client sees the others' scores: {ada:?}");

    // Bo leaves: gone from everyone's board.
    let mut bo = clients.remove(1);
    bo.disconnect();
    run(&mut clients, &mut next, 60).await;
    for c in &clients {
        assert_eq!(names(c), ["ada", "cy"]);
    }
    server.shutdown().await;
}
