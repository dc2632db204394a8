//! Every disconnect carries a reason the client library exposes (`GameClient::ended`): a kick
//! with the world's words, a shutdown, a flood, a full server. The server's goodbye goes
//! before its netcode disconnect; the stepper and the actor server run the same session code,
//! and both are checked.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;

use crate::udp;
use udp::{client, run};
use volley::protocol::session::PROTOCOL_VERSION;

/// Kicks whoever says "kick me", with the words after it; counts leaves.
#[derive(Default, Clone)]
struct Bouncer {
    to_kick: Arc<Mutex<Vec<(PlayerId, String)>>>,
    left: Arc<Mutex<Vec<PlayerId>>>,
    inputs: Arc<Mutex<Vec<PlayerId>>>,
}

impl World for Bouncer {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, p: PlayerId) {
        self.left.lock().unwrap().push(p);
    }
    fn input(&mut self, p: PlayerId, _: &[u8]) {
        self.inputs.lock().unwrap().push(p);
    }
    fn message(&mut self, p: PlayerId, message: &[u8], _: bool) {
        let text: String = postcard::from_bytes(message).unwrap();
        if let Some(why) = text.strip_prefix("kick me: ") {
            self.to_kick.lock().unwrap().push((p, why.to_string()));
        }
    }
    fn tick(&mut self, _: u32, _: Duration) {}
    fn messages(&mut self, out: &mut Outbox) {
        for (p, why) in self.to_kick.lock().unwrap().drain(..) {
            out.reliable(Audience::Player(p), postcard::to_allocvec(&"last words".to_string()).unwrap());
            out.kick(p, why);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

#[test]
fn a_kicked_client_reads_the_worlds_reason_in_the_stepper() {
    let world = Bouncer::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    for _ in 0..2 {
        stepper.add_client(LinkProfile::PERFECT);
        stepper.clients.last_mut().unwrap().input = Some(vec![1]);
    }
    stepper.run(30);
    let victim = stepper.clients[0].client.client_index().unwrap();
    stepper.clients[0].client.channel().send_message(&"kick me: camping the spawn".to_string()).unwrap();
    stepper.run(10);
    let c = &mut stepper.clients[0].client;
    assert_eq!(c.ended(), Some(SessionEnd::Kicked("camping the spawn".into())));
    let last = c.channel().recv_message::<String>().map(Result::unwrap);
    assert_eq!(last.as_deref(), Some("last words"), "what was sent before the kick");
    assert_eq!(stepper.players(), 1, "the kicked player is gone once its client answered");
    assert_eq!(*world.left.lock().unwrap(), [victim]);
    assert!(!stepper.clients[0].client.is_ready());
    // The other player is untouched.
    let before = world.inputs.lock().unwrap().iter().filter(|p| **p != victim).count();
    stepper.run(10);
    assert!(stepper.clients[1].client.is_ready() && stepper.clients[1].client.ended().is_none());
    assert!(world.inputs.lock().unwrap().iter().filter(|p| **p != victim).count() >= before + 9);
}

#[test]
fn a_kick_whose_answer_is_lost_still_ends_after_the_goodbye_timeout() {
    let world = Bouncer::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.clients[0].input = Some(vec![1]);
    stepper.run(30);
    stepper.clients[0].client.channel().send_message(&"kick me: bye".to_string()).unwrap();
    stepper.step();
    // The client hears nothing more from now on (its downlink dies), so it never answers.
    stepper.clients[0].client = {
        let token = ConnectToken::generate(
            &TokenParams::new(DEFAULT_PROTOCOL_ID, 99, "10.9.9.9:1".parse().unwrap(), stepper.now.as_secs()),
            &[0; 32],
        )
        .unwrap();
        GameClient::new(token, stepper.schema().clone(), stepper.now)
    };
    stepper.run(30);
    assert_eq!(stepper.players(), 1, "still saying goodbye half a second later");
    stepper.run(40);
    assert_eq!(stepper.players(), 0, "gone a second after the goodbye, unanswered");
    assert_eq!(world.left.lock().unwrap().len(), 1);
}

#[test]
fn a_persistent_flooder_is_disconnected_with_a_reason_a_burst_is_not() {
    let world = Bouncer::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    for _ in 0..3 {
        stepper.add_client(LinkProfile::PERFECT);
        stepper.clients.last_mut().unwrap().input = Some(vec![1]);
    }
    stepper.run(30);
    // Client 1: one burst of 200. Client 0: 40 a tick, tick after tick.
    for i in 0..200 {
        stepper.clients[1].client.channel().send_message(&format!("burst {i}")).unwrap();
    }
    for _ in 0..90 {
        for i in 0..40 {
            let _ = stepper.clients[0].client.channel().send_message(&format!("spam {i}"));
        }
        stepper.step();
    }
    stepper.run(10);
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::Flooding));
    assert_eq!(stepper.message_drops().disconnected, 1);
    assert!(stepper.clients[1].client.ended().is_none(), "one burst costs messages, not the connection");
    assert!(stepper.clients[2].client.ended().is_none());
    assert_eq!(stepper.players(), 2);
}

#[test]
fn a_full_server_says_so() {
    let mut stepper = Stepper::new(Bouncer::default(), 60, 1);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.run(30);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.run(30);
    assert!(stepper.clients[0].client.is_ready());
    assert_eq!(stepper.clients[1].client.ended(), Some(SessionEnd::ServerFull));
}

fn disconnects(server: &ServerHandle, reason: &str) -> f64 {
    let needle = format!("volley_disconnects_total{{reason=\"{reason}\"}} ");
    server.metrics().render().lines().find_map(|l| l.strip_prefix(&needle)?.trim().parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_kicked_client_reads_the_reason_and_a_shutdown_tells_the_rest() {
    let key = [6u8; 32];
    let world = Bouncer::default();
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world.clone()).await.unwrap();
    let mut clients = vec![client(&server, &key, 1, "").await, client(&server, &key, 2, "").await];
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 40).await;
    assert!(clients.iter().all(|c| c.client.is_ready()));
    let victim = clients[0].client.client_index().unwrap();
    clients[0].client.channel().send_message(&"kick me: too good".to_string()).unwrap();
    run(&mut clients, &mut next, 30).await;
    assert_eq!(clients[0].client.ended(), Some(SessionEnd::Kicked("too good".into())));
    let last = clients[0].client.channel().recv_message::<String>().map(Result::unwrap);
    assert_eq!(last.as_deref(), Some("last words"));
    assert_eq!(*world.left.lock().unwrap(), [victim], "the world heard it leave");
    assert_eq!(disconnects(&server, "kicked"), 1.0);
    assert!(clients[1].client.is_ready());

    // Shutting down: the other client is told why, and answers at once.
    let rest = &mut clients[1..];
    let stop = tokio::spawn(server.shutdown());
    for _ in 0..60 {
        run(rest, &mut next, 1).await;
        if rest[0].client.ended().is_some() {
            break;
        }
    }
    assert_eq!(rest[0].client.ended(), Some(SessionEnd::ShuttingDown));
    let left = stop.await.unwrap();
    assert_eq!(left, 0, "every client answered within the grace period");
}

#[test]
fn a_client_of_another_protocol_version_reads_why_and_leaves() {
    let mut stepper = Stepper::new(Bouncer::default(), 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.clients[0].client.claim_protocol_version(PROTOCOL_VERSION - 1);
    stepper.run(30);
    let end = SessionEnd::VersionMismatch { server: PROTOCOL_VERSION, client: PROTOCOL_VERSION - 1 };
    assert_eq!(stepper.clients[0].client.ended(), Some(end));
    assert_eq!(stepper.players(), 0, "it disconnected rather than hanging on unwelcomed");
}

/// Sends every player 16 reliable messages of 32 KiB a tick, from its third: more than a
/// channel's reliable queue (256 KiB) can hold before an acknowledgement.
#[derive(Default)]
struct Firehose {
    ticks: u32,
}

impl World for Firehose {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        if self.ticks >= 3 {
            for _ in 0..16 {
                out.reliable(Audience::All, vec![7u8; 32 * 1024]);
            }
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// A reliable message the server cannot queue disconnects the player (nothing is lost
/// silently, nothing arrives out of order), in the stepper as on the server: the rule lives
/// in the session both run.
#[test]
fn a_player_too_far_behind_on_reliable_messages_is_told_so_in_the_stepper() {
    let mut s = Stepper::new(Firehose::default(), 60, 4);
    s.add_client(LinkProfile::PERFECT);
    s.run(120);
    assert_eq!(s.clients[0].client.ended(), Some(SessionEnd::TooFarBehind));
    assert_eq!(s.players(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_player_too_far_behind_on_reliable_messages_is_told_so() {
    let key = [12u8; 32];
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Firehose::default()).await.unwrap();
    let mut clients = vec![client(&server, &key, 1, "").await];
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 120).await;
    assert_eq!(clients[0].client.ended(), Some(SessionEnd::TooFarBehind));
    assert!(disconnects(&server, "too_far_behind") >= 1.0);
    server.shutdown().await;
}

/// A client that comes back with a fresh token for its client id (a new address, a restarted
/// program) while its old session lingers is in at once, and the old session ends with
/// [`SessionEnd::Replaced`]: the world hears the old player leave and the new one join.
#[test]
fn a_fresh_token_replaces_a_lingering_session_in_the_stepper() {
    let world = Bouncer::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    stepper.add_client_with(LinkProfile::PERFECT, 7, [0; 256]);
    stepper.clients[0].input = Some(vec![1]);
    stepper.run(30);
    let old = stepper.clients[0].client.client_index().unwrap();
    stepper.add_client_with(LinkProfile::PERFECT, 7, [0; 256]);
    stepper.clients[1].input = Some(vec![1]);
    stepper.run(20);
    assert!(stepper.clients[1].client.is_ready(), "in within a third of a second");
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::Replaced));
    assert_eq!(*world.left.lock().unwrap(), [old], "the old player left");
    assert_eq!(stepper.players(), 1);
    let new = stepper.clients[1].client.client_index().unwrap();
    let before = world.inputs.lock().unwrap().iter().filter(|p| **p == new).count();
    stepper.run(10);
    assert!(world.inputs.lock().unwrap().iter().filter(|p| **p == new).count() >= before + 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_fresh_token_replaces_a_lingering_session_within_a_second() {
    let key = [13u8; 32];
    let world = Bouncer::default();
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world.clone()).await.unwrap();
    let mut old = vec![client(&server, &key, 7, "").await];
    let mut next = tokio::time::Instant::now();
    run(&mut old, &mut next, 40).await;
    assert!(old[0].client.is_ready());
    // The old client goes silent (its network broke); the same client comes back with a
    // fresh token from a new socket.
    let mut new = vec![client(&server, &key, 7, "").await];
    let since = tokio::time::Instant::now();
    let mut next = since;
    while !new[0].client.is_ready() && since.elapsed() < Duration::from_secs(3) {
        run(&mut new, &mut next, 1).await;
    }
    let took = since.elapsed();
    assert!(new[0].client.is_ready(), "not in after {took:?}");
    assert!(took < Duration::from_secs(1), "in after {took:?}, not within a second");
    eprintln!("the fresh token's connection was in after {took:?}");
    // The old client, heard from again, reads why its session ended.
    let mut both: Vec<_> = old.into_iter().chain(new).collect();
    run(&mut both, &mut next, 40).await;
    assert_eq!(both[0].client.ended(), Some(SessionEnd::Replaced));
    assert!(both[1].client.is_ready() && both[1].client.ended().is_none());
    assert_eq!(world.left.lock().unwrap().len(), 1, "the old player left");
    assert_eq!(disconnects(&server, "replaced"), 1.0);
    let players =
        server.metrics().render().lines().find_map(|l| l.strip_prefix("volley_players ")?.trim().parse().ok());
    assert_eq!(players, Some(1.0), "one player: the new connection");
    server.shutdown().await;
}
