//! The order a client reads things in: the notice that its player is in a world
//! ([`GameClient::next_notice`], [`GameClient::world`]) comes before anything that world sends
//! it, at connect and at every move, on a link that loses and reorders, in the stepper and
//! over real UDP, with the same game.
//!
//! The game: the lobby (the entry world) greets each player as it joins and moves it at once
//! to a match, which greets it as it joins, and sends it back after a while; the lobby greets
//! it again and sends it to the next match. Every message and event names the world that sent
//! it, so a client can check that it was told it is in that world first.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeSet;
use std::time::Duration;

use volley::prelude::*;

/// Ticks a player spends in a match before it goes back to the lobby.
const MATCH_TICKS: u32 = 40;

/// Messages a world sends a player as it joins: a reliable one, an event, and another
/// reliable one the next tick.
fn greet(out: &mut Outbox, me: WorldId, player: PlayerId, n: u32) {
    out.reliable(Audience::Player(player), format!("{} reliable {n}", me.number()).into_bytes());
    out.event(Audience::Player(player), format!("{} event {n}", me.number()).into_bytes());
}

/// The entry world: greets whoever joins (or comes back) and moves it at once to a match.
#[derive(Default)]
struct Lobby {
    me: Option<WorldId>,
    worlds: Option<Worlds>,
    joined: Vec<PlayerId>,
    greeted: u32,
}

impl World for Lobby {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        self.me = Some(me);
        self.worlds = Some(worlds.clone());
    }
    fn join(&mut self, player: PlayerId) {
        self.joined.push(player);
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn messages(&mut self, out: &mut Outbox) {
        let me = self.me.unwrap();
        for p in std::mem::take(&mut self.joined) {
            self.greeted += 1;
            greet(out, me, p, self.greeted);
            let worlds = self.worlds.as_ref().unwrap();
            let to = worlds.spawn(WorldOptions::new("match").fallback(WorldId::ENTRY), Match::default()).unwrap();
            out.move_to(p, to);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// A match of one: greets its player on the tick it joins and the next, then after
/// [`MATCH_TICKS`] sends it back to the lobby and stops.
#[derive(Default)]
struct Match {
    me: Option<WorldId>,
    player: Option<(PlayerId, u32)>,
    ticks: u32,
}

impl World for Match {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn started(&mut self, me: WorldId, _: &Worlds) {
        self.me = Some(me);
    }
    fn join(&mut self, player: PlayerId) {
        self.player = Some((player, self.ticks));
    }
    fn leave(&mut self, _: PlayerId) {
        self.player = None;
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        let me = self.me.unwrap();
        let Some((p, since)) = self.player else { return };
        let age = self.ticks - since;
        if age <= 1 {
            greet(out, me, p, age);
        }
        if age == MATCH_TICKS {
            out.move_to(p, WorldId::ENTRY);
            out.stop_world();
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// What one client read, checked as it reads: each frame, first the notices, then the
/// messages and events; each of those must come from the world the client was last told
/// it is in.
#[derive(Default)]
struct Reader {
    world: Option<u16>,
    notices: u32,
    messages: u32,
    events: u32,
    /// Worlds a message came from (the lobby and every match).
    from: BTreeSet<u16>,
    /// Worlds the client was told of.
    announced: BTreeSet<u16>,
    frame: u32,
    log: Vec<String>,
}

impl Reader {
    fn read(&mut self, who: usize, client: &mut GameClient) {
        self.frame += 1;
        while let Some(n) = client.next_notice() {
            self.log.push(format!("{}: notice {}", self.frame, n.world));
            self.world = Some(n.world);
            self.announced.insert(n.world);
            self.notices += 1;
        }
        let channel = client.channel();
        let reliable: Vec<Vec<u8>> = std::iter::from_fn(|| channel.recv_reliable()).map(|b| b.to_vec()).collect();
        let events: Vec<Vec<u8>> = std::iter::from_fn(|| channel.recv_event()).map(|b| b.to_vec()).collect();
        for m in reliable {
            let text = String::from_utf8(m).unwrap();
            let sender: u16 = text.split(' ').next().unwrap().parse().unwrap();
            self.log.push(format!("{}: {text}", self.frame));
            let tail = self.log[self.log.len().saturating_sub(12)..].join("; ");
            // A reliable message keeps its place among the notices: it is read while its
            // world is the one the client was last told of.
            assert_eq!(
                self.world,
                Some(sender),
                "client {who} read \"{text}\" from world {sender} while told it is in {:?} (after {} notices): {tail}",
                self.world,
                self.notices
            );
            self.messages += 1;
            self.from.insert(sender);
        }
        for e in events {
            let text = String::from_utf8(e).unwrap();
            let sender: u16 = text.split(' ').next().unwrap().parse().unwrap();
            // An event (unreliable: it may be lost, or overtaken by the next notice) never
            // comes from a world the client has not yet been told of.
            assert!(
                self.announced.contains(&sender),
                "client {who} read \"{text}\" before it was told of world {sender} (in {:?})",
                self.world
            );
            self.events += 1;
        }
    }

    /// The game went round often enough to have checked something.
    fn check_enough(&self, who: usize, client: &GameClient) {
        assert_eq!(client.ended(), None, "client {who} still connected");
        assert!(self.notices >= 6, "client {who}: {} notices", self.notices);
        assert!(self.messages >= 10, "client {who}: {} messages", self.messages);
        assert!(self.events >= 5, "client {who}: {} events", self.events);
        assert!(self.from.contains(&0) && self.from.len() >= 3, "client {who}: from {:?}", self.from);
    }
}

/// A link that loses a tenth of what it carries and reorders some of the rest.
const LOSSY: LinkProfile =
    LinkProfile { latency: Duration::from_millis(20), jitter: Duration::from_millis(15), loss: 0.1, burst: None };

#[test]
fn in_the_stepper_a_world_is_announced_before_anything_it_sends() {
    let mut s = Stepper::new(Lobby::default(), 60, 16).with_world_kinds(&["lobby", "match"]);
    let mut readers: Vec<Reader> = Vec::new();
    for profile in [LinkProfile { latency: Duration::from_millis(20), ..LinkProfile::PERFECT }, LOSSY, LOSSY, LOSSY] {
        s.add_client(profile);
        readers.push(Reader::default());
    }
    for _ in 0..600 {
        s.step();
        for (i, (c, r)) in s.clients.iter_mut().zip(&mut readers).enumerate() {
            r.read(i, &mut c.client);
        }
    }
    for (i, r) in readers.iter().enumerate() {
        r.check_enough(i, &s.clients[i].client);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_world_is_announced_before_anything_it_sends() {
    let key = [9u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.world_kinds = vec!["lobby".into(), "match".into()];
    let server = volley::server::start(config, Lobby::default()).await.unwrap();
    let mut clients = Vec::new();
    for id in 1..=4u64 {
        let c = crate::udp::client(&server, &key, id, "").await;
        // The first client on a plain loopback (the connect case as a new user sees it).
        clients.push(if id == 1 { c } else { c.with_conditioner(LOSSY, id) });
    }
    let mut readers: Vec<Reader> = clients.iter().map(|_| Reader::default()).collect();
    let mut next = tokio::time::Instant::now();
    for _ in 0..600 {
        next += Duration::from_millis(16);
        for (i, (c, r)) in clients.iter_mut().zip(&mut readers).enumerate() {
            c.step(&[1], next).await;
            r.read(i, &mut c.client);
        }
    }
    for (i, r) in readers.iter().enumerate() {
        r.check_enough(i, &clients[i].client);
    }
    server.shutdown().await;
}
