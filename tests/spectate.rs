//! Live spectators, in the stepper (the server's directory, world and spectator code with
//! only the IO swapped): a spectators' world shows its match exactly as the match made it a
//! fixed delay ago, follows a player through the match's own relevancy on request, never
//! passes a spectator's input to the match, and ends after its match, sending its spectators
//! to its fallback.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::snapshot::world::split_id;

volley::replicated! {
    /// A moving dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-100.0), glam::Vec2::splat(100.0), 0.01),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

const KINDS: [&str; 3] = ["hall", "match", "spectators"];
/// The spectators' delay: half a second, 30 ticks at 60 Hz.
const DELAY_TICKS: u32 = 30;
/// Match ticks before it stops.
const MATCH_TICKS: u32 = 300;

/// Entities of one match tick, by local id.
type Content = BTreeMap<u32, Vec<u32>>;

#[derive(Default)]
struct Seen {
    /// What the match made at each tick.
    made: Mutex<BTreeMap<u32, Content>>,
    /// Players whose inputs reached the match.
    inputs_from: Mutex<std::collections::BTreeSet<PlayerId>>,
    worlds: Mutex<Option<(WorldId, WorldId)>>,
}

/// Players see the dots whose id has their own id's parity.
struct Parity;

impl Relevancy for Parity {
    fn interest(&self, world: &WorldSnapshot, player: PlayerId, out: &mut Vec<Interest>) {
        out.clear();
        for (index, id) in world.ids().iter().enumerate() {
            if id % 2 == player % 2 {
                out.push(Interest::new(index as u32, 1.0));
            }
        }
    }
}

struct Match {
    seen: Arc<Seen>,
    tick: u32,
    ticks: u32,
    players: Vec<PlayerId>,
}

impl World for Match {
    fn schema(&self) -> Schema {
        schema()
    }
    fn join(&mut self, p: PlayerId) {
        self.players.push(p);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.retain(|q| *q != p);
    }
    fn input(&mut self, p: PlayerId, _: &[u8]) {
        self.seen.inputs_from.lock().unwrap().insert(p);
    }
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        if self.ticks == MATCH_TICKS {
            for p in &self.players {
                out.move_to(*p, WorldId::ENTRY);
            }
            out.stop_world();
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        let schema = schema();
        let mut b = SnapshotBuilder::new(&schema, self.tick);
        for i in 0..12u32 {
            let t = self.tick as f32 * 0.03 + i as f32;
            let dot = Dot { position: glam::Vec2::new(t.sin() * 40.0, t.cos() * 20.0) };
            let _ = out.insert(i, &dot);
            let _ = b.insert(i, &dot);
        }
        let made = b.finish().unwrap();
        let content = made.iter().map(|e| (e.id, e.words.to_vec())).collect();
        self.seen.made.lock().unwrap().insert(self.tick, content);
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(Parity)
    }
}

/// The entry world: client ids below 100 play the match, the others watch it.
struct Hall {
    seen: Arc<Seen>,
}

impl World for Hall {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        let game = Match { seen: self.seen.clone(), tick: 0, ticks: 0, players: Vec::new() };
        let m = worlds.spawn(WorldOptions::new("match").fallback(WorldId::ENTRY), game).unwrap();
        let delay = Duration::from_millis(500);
        let stands = WorldOptions::new("spectators").fallback(WorldId::ENTRY);
        let s = Spectators::new(delay, Arc::new(Parity)).start(worlds, m, stands).unwrap();
        *self.seen.worlds.lock().unwrap() = Some((m, s));
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

#[test]
fn spectators_see_the_match_as_it_was_half_a_second_ago_and_follow_a_player_on_request() {
    let seen = Arc::new(Seen::default());
    let mut s = Stepper::new(Hall { seen: seen.clone() }, 60, 16).with_world_kinds(&KINDS);
    for i in 0..4 {
        s.add_client_with(LinkProfile::PERFECT, 1 + i, [0; 256]);
    }
    for i in 0..6 {
        s.add_client_with(LinkProfile::PERFECT, 100 + i, [0; 256]);
    }
    for c in &mut s.clients {
        c.input = Some(vec![1]);
    }
    s.run(20);
    let (m, stands) = seen.worlds.lock().unwrap().unwrap();
    let ids: Vec<(u32, bool)> =
        s.clients.iter().enumerate().map(|(i, c)| (c.client.client_index().unwrap(), i < 4)).collect();
    for (p, player) in &ids {
        s.worlds().move_player(*p, if *player { m } else { stands });
    }
    // The last spectator follows the first player.
    let followed = ids[0].0;
    let mut compared = 0;
    let mut followed_checked = 0;
    for step in 0..MATCH_TICKS + 120 {
        if step == 60 {
            s.clients[9].client.channel().send_message(&SpectatorControl::Follow(Some(followed))).unwrap();
        }
        s.step();
        for (i, c) in s.clients.iter().enumerate().skip(4) {
            let Some(got) = c.client.latest() else { continue };
            if c.client.world().map(|n| n.world) != Some(stands.number()) {
                continue;
            }
            let status = c.client.spectator().expect("a spectator is told where it stands");
            assert!(status.live);
            if got.is_empty() {
                continue; // nothing shown yet: the delay has not passed since the match began
            }
            let shown = status.shown_at(got.tick());
            assert_eq!(shown, got.tick() - DELAY_TICKS, "the delay is exact");
            let made = seen.made.lock().unwrap();
            let Some(want) = made.get(&shown) else { continue };
            let decoded: Content = got
                .iter()
                .map(|e| {
                    let (w, local) = split_id(e.id);
                    assert_eq!(w, u32::from(stands.number()), "the spectators' world's entities");
                    (local, e.words.to_vec())
                })
                .collect();
            if i == 9 && status.following == Some(followed) {
                let want: Content =
                    want.iter().filter(|(id, _)| *id % 2 == followed % 2).map(|(k, v)| (*k, v.clone())).collect();
                assert_eq!(decoded, want, "following player {followed}: what its relevancy shows, at tick {shown}");
                followed_checked += 1;
            } else if i != 9 {
                assert_eq!(&decoded, want, "spectator {i}: the match at tick {shown}");
                compared += 1;
            }
        }
    }
    assert!(compared > 5 * 200, "{compared} spectator snapshots compared");
    assert!(followed_checked > 150, "{followed_checked} followed snapshots compared");
    let spectators: Vec<PlayerId> = ids.iter().filter(|(_, p)| !p).map(|(p, _)| *p).collect();
    let inputs = seen.inputs_from.lock().unwrap().clone();
    assert!(spectators.iter().all(|p| !inputs.contains(p)), "no spectator's input reached the match");
    assert!(ids.iter().filter(|(_, p)| *p).all(|(p, _)| inputs.contains(p)), "the players' did");
    // The match ended; its spectators' world showed it to the end, then ended too.
    let kinds: Vec<String> = s.world_list().into_iter().map(|(_, k, _)| k).collect();
    assert_eq!(kinds, ["hall"], "the match and its stands stopped");
    for (p, _) in &ids {
        assert_eq!(s.home(*p), Some(WorldId::ENTRY), "player {p} is back in the hall");
    }
}

/// A match that keeps its players in two teams (by parity) and, every tenth tick, says
/// something to everyone, to its watchers, to team 1, and to its first player alone.
struct Chatter {
    players: Vec<PlayerId>,
    ticks: u32,
    new: Vec<PlayerId>,
}

impl World for Chatter {
    fn schema(&self) -> Schema {
        schema()
    }
    fn join(&mut self, p: PlayerId) {
        self.players.push(p);
        self.new.push(p);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.retain(|q| *q != p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        for p in self.new.drain(..) {
            out.set_team(p, Some((p % 2) as u16));
        }
        let n = self.ticks;
        if n.is_multiple_of(10)
            && let Some(first) = self.players.first()
        {
            out.reliable(Audience::All, format!("all {n}").into_bytes());
            out.reliable(Audience::Watchers, format!("watchers {n}").into_bytes());
            out.reliable(Audience::Team(1), format!("team {n}").into_bytes());
            out.reliable(Audience::Player(*first), format!("player {first} {n}").into_bytes());
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// The match and its three stands, once started.
type Started = Arc<Mutex<Option<(WorldId, [WorldId; 3])>>>;

/// Starts a chattering match and three spectators' worlds of it, one for each [`Hearing`].
struct ChatHall {
    worlds: Started,
}

impl World for ChatHall {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        let game = Chatter { players: Vec::new(), ticks: 0, new: Vec::new() };
        let m = worlds.spawn(WorldOptions::new("match").fallback(WorldId::ENTRY), game).unwrap();
        let delay = Duration::from_millis(100);
        let mut stands = [WorldId::ENTRY; 3];
        for (i, hearing) in [Hearing::Public, Hearing::Followed, Hearing::Everything].into_iter().enumerate() {
            let how = Spectators::new(delay, Arc::new(Everything)).hearing(hearing);
            stands[i] = how.start(worlds, m, WorldOptions::new("spectators").fallback(WorldId::ENTRY)).unwrap();
        }
        *self.worlds.lock().unwrap() = Some((m, stands));
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// Spectators' worlds used to pass every team's messages to every spectator (and a player's
/// own to whoever followed it): team chat reached the other team's friends in the stands.
/// Now the stands hear what everyone and the watchers heard; a followed player's own messages
/// reach its followers only with `Hearing::Followed`, and everything only with
/// `Hearing::Everything`.
#[test]
fn team_and_player_messages_reach_only_the_spectators_allowed_to_hear_them() {
    let worlds = Arc::new(Mutex::new(None));
    let mut s = Stepper::new(ChatHall { worlds: worlds.clone() }, 60, 16).with_world_kinds(&KINDS);
    // Two players, then a spectator in each of the three stands.
    for i in 0..5 {
        s.add_client_with(LinkProfile::PERFECT, 1 + i, [0; 256]);
    }
    s.run(20);
    let (m, stands) = worlds.lock().unwrap().unwrap();
    let ids: Vec<PlayerId> = s.clients.iter().map(|c| c.client.client_index().unwrap()).collect();
    s.worlds().move_player(ids[0], m);
    s.worlds().move_player(ids[1], m);
    for (k, stand) in stands.iter().enumerate() {
        s.worlds().move_player(ids[2 + k], *stand);
    }
    let mut heard: Vec<Vec<String>> = vec![Vec::new(); 5];
    for step in 0..400 {
        if step == 30 {
            // The spectator in the `Followed` stands follows the match's first player.
            let first = ids[0];
            s.clients[3].client.channel().send_message(&SpectatorControl::Follow(Some(first))).unwrap();
        }
        s.step();
        for (i, c) in s.clients.iter_mut().enumerate() {
            while let Some(m) = c.client.channel().recv_reliable() {
                if let Ok(text) = String::from_utf8(m.to_vec()) {
                    heard[i].push(text);
                }
            }
        }
    }
    let kinds = |i: usize| -> std::collections::BTreeSet<String> {
        heard[i].iter().map(|t| t.split(' ').next().unwrap_or("").to_string()).collect()
    };
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<std::collections::BTreeSet<_>>();
    println!("heard: {:?}", (0..5).map(|i| (i, kinds(i), heard[i].len())).collect::<Vec<_>>());
    // The players: the first (team 0) hears its own; the second is on team 1.
    assert_eq!(kinds(0), set(&["all", "player", "watchers"]), "the first player");
    assert_eq!(kinds(1), set(&["all", "team", "watchers"]), "the second player, on team 1");
    assert_eq!(kinds(2), set(&["all", "watchers"]), "the public stands: no team chat, no private message");
    assert_eq!(kinds(3), set(&["all", "player", "watchers"]), "following the first player: its own messages too");
    assert_eq!(kinds(4), set(&["all", "player", "team", "watchers"]), "the casters' booth: everything");
    let first = ids[0];
    assert!(
        heard[3].iter().filter(|t| t.starts_with("player")).all(|t| t.starts_with(&format!("player {first} "))),
        "only the followed player's"
    );
}
