//! Clients talk to the world: reliable messages and events reach `World::message` with the
//! sender, once each and in order; a flood is cut to the per-tick limit and counted, and
//! neither stalls that client's connection nor touches anyone else's. The stepper and the
//! server run the same session code, and both are checked.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::server::MAX_CLIENT_MESSAGES_PER_TICK;

/// What the world heard: (player, message, reliable), and inputs per player.
type Heard = Arc<Mutex<(Vec<(PlayerId, String, bool)>, Vec<(PlayerId, u64)>)>>;

struct Chat(Heard);

impl World for Chat {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, p: PlayerId, _: &[u8]) {
        let mut h = self.0.lock().unwrap();
        match h.1.iter_mut().find(|(q, _)| *q == p) {
            Some((_, n)) => *n += 1,
            None => h.1.push((p, 1)),
        }
    }
    fn message(&mut self, p: PlayerId, message: &[u8], reliable: bool) {
        let text: String = postcard::from_bytes(message).unwrap();
        self.0.lock().unwrap().0.push((p, text, reliable));
    }
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

fn heard_from(h: &Heard, p: PlayerId) -> Vec<(String, bool)> {
    h.lock().unwrap().0.iter().filter(|(q, ..)| *q == p).map(|(_, m, r)| (m.clone(), *r)).collect()
}

fn inputs_from(h: &Heard, p: PlayerId) -> u64 {
    h.lock().unwrap().1.iter().find(|(q, _)| *q == p).map_or(0, |(_, n)| *n)
}

#[test]
fn the_stepper_delivers_client_messages_once_in_order_and_bounds_a_flood() {
    let heard = Heard::default();
    let mut stepper = Stepper::new(Chat(heard.clone()), 60, 4);
    for _ in 0..2 {
        let c = stepper.add_client(LinkProfile::PERFECT);
        stepper.clients[c].input = Some(vec![1]);
    }
    stepper.run(30);
    let index = |i: usize| stepper.clients[i].client.client_index().expect("connected");
    let (a, b) = (index(0), index(1));
    // Client 0 chats: three reliable messages and an event.
    for text in ["hello", "how", "are you"] {
        stepper.clients[0].client.channel().send_message(&text.to_string()).unwrap();
    }
    stepper.clients[0].client.channel().send_event_message(&"wave".to_string()).unwrap();
    stepper.run(10);
    let got = heard_from(&heard, a);
    assert_eq!(
        got,
        [("hello".into(), true), ("how".into(), true), ("are you".into(), true), ("wave".into(), false)],
        "once each, reliable ones in order, with the sender"
    );
    // Client 1 floods: 200 messages at once.
    let inputs_before = (inputs_from(&heard, a), inputs_from(&heard, b));
    for i in 0..200 {
        stepper.clients[1].client.channel().send_message(&format!("spam {i}")).unwrap();
    }
    stepper.run(60);
    let spam = heard_from(&heard, b);
    let drops = stepper.message_drops();
    assert!(drops.flood > 0, "the flood was cut");
    assert_eq!(spam.len() as u64 + drops.flood, 200, "every message either reached the world or was counted");
    let ticks_with_spam = spam.len().div_ceil(MAX_CLIENT_MESSAGES_PER_TICK as usize);
    assert!(ticks_with_spam >= 1 && spam.len() < 200, "{} of 200 reached the world", spam.len());
    // Neither the flooder's connection nor the other player's stalled.
    assert!(inputs_from(&heard, b) >= inputs_before.1 + 50, "the flooder's inputs still arrive");
    assert!(inputs_from(&heard, a) >= inputs_before.0 + 50, "the other player's inputs still arrive");
    stepper.clients[1].client.channel().send_message(&"after".to_string()).unwrap();
    stepper.run(10);
    assert_eq!(heard_from(&heard, b).last().unwrap().0, "after", "the flooder can still talk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_delivers_client_messages_and_bounds_a_flood_over_udp() {
    let key = [4u8; 32];
    let heard = Heard::default();
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Chat(heard.clone())).await.unwrap();
    let mut clients = Vec::new();
    for id in 1..=2u64 {
        let p = TokenParams::new(DEFAULT_PROTOCOL_ID, id, server.addr(), unix_now().as_secs());
        let c = GameClient::new(ConnectToken::generate(&p, &key).unwrap(), Arc::new(Schema::new()), unix_now());
        clients.push(UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap());
    }
    let mut next = tokio::time::Instant::now();
    run(&mut clients, &mut next, 40).await;
    assert!(clients.iter().all(|c| c.client.is_ready()));
    let index = |i: usize| clients[i].client.client_index().expect("connected");
    let (a, b) = (index(0), index(1));
    for text in ["hello", "how", "are you"] {
        clients[0].client.channel().send_message(&text.to_string()).unwrap();
    }
    for i in 0..200 {
        clients[1].client.channel().send_message(&format!("spam {i}")).unwrap();
    }
    run(&mut clients, &mut next, 60).await;
    let got: Vec<String> = heard_from(&heard, a).into_iter().map(|(m, _)| m).collect();
    assert_eq!(got, ["hello", "how", "are you"]);
    let spam = heard_from(&heard, b).len() as u64;
    let (handed, dropped) = server.metrics().client_messages();
    println!("handed {handed}, dropped {dropped:?}, the flooder's reached the world: {spam}");
    assert!(dropped[0] > 0, "the flood was counted");
    assert_eq!(spam + dropped[0], 200, "every message either reached the world or was counted");
    assert_eq!(handed, spam + 3);
    let before = inputs_from(&heard, b);
    run(&mut clients, &mut next, 30).await;
    assert!(inputs_from(&heard, b) >= before + 20, "the flooder's connection did not stall");
    assert!(server.metrics().render().contains("volley_client_messages_dropped_total{reason=\"flood\"}"));
    server.shutdown().await;
}

/// Steps every client `frames` frames of 16 ms, sending input 1.
async fn run(clients: &mut [UdpClient], next: &mut tokio::time::Instant, frames: usize) {
    for _ in 0..frames {
        *next += Duration::from_millis(16);
        for c in clients.iter_mut() {
            c.step(&[1], *next).await;
        }
    }
}
