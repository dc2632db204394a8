//! Worlds that talk to each other, in the stepper and over real UDP, with the same game: a
//! lobby (the entry world, taking typed messages) pairs its players into matches it starts;
//! each match finds the lobby that started it ([`Worlds::started_by`], [`Worlds::world_ref`]),
//! sends it the result, and stops; the lobby hears that it stopped
//! ([`World::world_stopped`]) and tells a returning player from a new one
//! ([`JoinInfo::origin`]); each client keeps the match's final scoreboard
//! ([`GameClient::previous_scoreboard`]).
//!
//! Four pairs play: two matches run their course, one match's code starts panicking every
//! tick (the server stops it after [`MAX_PANICKING_TICKS`] and returns its players to the
//! lobby, saying why), and one match kicks a player and plays on with the other. Each match
//! puts its players in teams and sends a message to all, to each player and to a team; a
//! ninth client watches the first match from the stands (a spectators' world with a delay),
//! hearing only what all heard.
//!
//! What the worlds observed is logged (by pair of client ids, not world numbers or slots,
//! which depend on arrival order over UDP) and the two logs are compared: the same lines,
//! each shell in an order the framework guarantees (a stopped match is heard before its
//! players arrive back). So is what each client received: its world notices in order, how
//! its session ended, its scoreboard and the previous one (the spectator's: the match's board,
//! mirrored by the stands as late as their frames). The one difference, named: over
//! UDP the match's result message may reach the lobby before or after the news that it
//! stopped (a message is handled at the lobby's next tick; the stop comes through the
//! broadcaster), in the stepper always after.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::recording::Event;
use volley::protocol::scoreboard::Scoreboard;
use volley::server::{Handles, MAX_PANICKING_TICKS, WithMessages, WorldRef};

use crate::udp;

/// Ticks a match lasts.
const MATCH_TICKS: u32 = 40;

/// The match tick at which the pair 5+6's match starts panicking, and at which the pair
/// 7+8's kicks 8.
const TROUBLE_AT: u32 = 10;

type Log = Arc<Mutex<Vec<String>>>;

fn log(log: &Log, line: String) {
    log.lock().unwrap().push(line);
}

/// The pair a client plays in: clients 1 and 2, 3 and 4.
fn pair(client: u64) -> String {
    let first = (client - 1) / 2 * 2 + 1;
    format!("{}+{}", first, first + 1)
}

fn origin(o: &Origin, matches: &BTreeMap<WorldId, String>) -> String {
    match o {
        Origin::Connected => "connected".into(),
        Origin::HandedOver => "handed over".into(),
        Origin::Moved { from } => {
            format!("moved from {}", if *from == WorldId::ENTRY { "the lobby" } else { "a match" })
        }
        Origin::Returned { from, why } => {
            format!("returned from match {} ({why})", matches.get(from).map_or("?", String::as_str))
        }
    }
}

enum LobbyMsg {
    Result { pair: String, winner: u64 },
}

struct Lobby {
    worlds: Option<Worlds>,
    log: Log,
    clients: BTreeMap<PlayerId, u64>,
    /// Players waiting for their partner, by pair.
    waiting: BTreeMap<String, Vec<PlayerId>>,
    matches: BTreeMap<WorldId, String>,
    moves: Vec<(PlayerId, WorldId)>,
    /// Record the matches into this folder.
    record: Option<std::path::PathBuf>,
    /// The spectator (client 9), until it goes to the stands of match 1+2.
    spectator: Option<PlayerId>,
}

impl Lobby {
    fn new(log: Log, record: Option<std::path::PathBuf>) -> Self {
        let (clients, waiting, matches, moves) = Default::default();
        Self { worlds: None, log, clients, waiting, matches, moves, record, spectator: None }
    }
}

impl Handles<LobbyMsg> for Lobby {
    fn handle(&mut self, msg: LobbyMsg) {
        let LobbyMsg::Result { pair, winner } = msg;
        log(&self.log, format!("lobby: match {pair} says {winner} won"));
    }
}

impl World for Lobby {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        self.worlds = Some(worlds.clone());
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.clients.insert(player, who.client_id);
        log(&self.log, format!("lobby: {} joins, {}", who.client_id, origin(&who.origin, &self.matches)));
        // A player back from its match is not queued again; the spectator is not queued.
        if who.client_id == SPECTATOR {
            self.spectator = Some(player).filter(|_| who.origin == Origin::Connected);
        } else if who.origin == Origin::Connected {
            self.waiting.entry(pair(who.client_id)).or_default().push(player);
        }
    }
    fn leave(&mut self, player: PlayerId) {
        self.clients.remove(&player);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn world_stopped(&mut self, world: WorldId, why: &str) {
        let name = self.matches.get(&world).map_or("?", String::as_str);
        log(&self.log, format!("lobby: match {name} stopped ({why})"));
    }
    fn tick(&mut self, _: u32, _: Duration) {
        let full: Vec<String> = self.waiting.iter().filter(|(_, w)| w.len() == 2).map(|(k, _)| k.clone()).collect();
        for name in full {
            let players = self.waiting.remove(&name).unwrap();
            let worlds = self.worlds.as_ref().unwrap();
            let clients = players.iter().map(|p| (*p, self.clients[p])).collect();
            let world = Match {
                name: name.clone(),
                log: self.log.clone(),
                lobby: None,
                clients,
                points: BTreeMap::new(),
                started: false,
                ticks: 0,
            };
            let mut options = WorldOptions::new("match").fallback(WorldId::ENTRY);
            if let Some(dir) = &self.record {
                options = options.recorded(dir);
            }
            let id = worlds.spawn(options, world).unwrap();
            self.matches.insert(id, name);
            self.moves.extend(players.into_iter().map(|p| (p, id)));
        }
        // The stands of match 1+2, once it runs and the spectator is here.
        let first = self.matches.iter().find(|(_, n)| *n == "1+2").map(|(id, _)| *id);
        if let (Some(m), Some(spectator)) = (first, self.spectator) {
            let worlds = self.worlds.as_ref().unwrap();
            let how = Spectators::new(Duration::from_millis(100), Arc::new(AllOfIt));
            let stands = how.start(worlds, m, WorldOptions::new("spectators").fallback(WorldId::ENTRY)).unwrap();
            self.matches.insert(stands, "stands of 1+2".into());
            self.moves.push((spectator, stands));
            self.spectator = None;
        }
    }
    fn messages(&mut self, out: &mut Outbox) {
        for (p, to) in self.moves.drain(..) {
            out.move_to(p, to);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// Every entity to every spectator.
struct AllOfIt;

impl Relevancy for AllOfIt {
    fn interest(&self, world: &WorldSnapshot, _: PlayerId, out: &mut Vec<Interest>) {
        out.clear();
        out.extend((0..world.len() as u32).map(|index| Interest::new(index, 1.0)));
    }
}

/// The kinds of world the game names.
const KINDS: [&str; 3] = ["lobby", "match", "spectators"];

/// The client that watches.
const SPECTATOR: u64 = 9;

struct Match {
    name: String,
    log: Log,
    lobby: Option<WorldRef<LobbyMsg>>,
    clients: BTreeMap<PlayerId, u64>,
    points: BTreeMap<PlayerId, i32>,
    /// Both players have joined.
    started: bool,
    ticks: u32,
}

impl World for Match {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn started(&mut self, me: WorldId, worlds: &Worlds) {
        let by = worlds.started_by(me);
        self.lobby = by.and_then(|lobby| worlds.world_ref(lobby));
        let reach = self.lobby.is_some();
        log(&self.log, format!("match {}: started by {by:?}, reaches it: {reach}", self.name));
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.points.insert(player, 0);
        log(
            &self.log,
            format!("match {}: {} joins, {}", self.name, who.client_id, origin(&who.origin, &BTreeMap::new())),
        );
    }
    fn leave(&mut self, player: PlayerId) {
        self.points.remove(&player);
        log(&self.log, format!("match {}: {} leaves", self.name, self.clients[&player]));
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.started |= self.points.len() == 2;
        if !self.started {
            return; // both players first
        }
        if self.name == "5+6" && self.ticks >= TROUBLE_AT {
            panic!("match {} breaks", self.name);
        }
        self.ticks += 1;
        for (p, points) in &mut self.points {
            *points += self.clients[p] as i32;
        }
    }
    fn messages(&mut self, out: &mut Outbox) {
        for (p, points) in &self.points {
            out.set_score(*p, &[*points]);
        }
        // Teams (odd client ids team 1), then a message to all, to each player, to team 1.
        if self.ticks == 1 {
            for (p, c) in &self.clients {
                out.set_team(*p, Some((*c % 2) as u16));
            }
        }
        if self.ticks == 5 {
            out.reliable(Audience::All, format!("{}: all", self.name).into_bytes());
            for (p, c) in &self.clients {
                out.reliable(Audience::Player(*p), format!("{}: to {c}", self.name).into_bytes());
            }
            out.reliable(Audience::Team(1), format!("{}: team 1", self.name).into_bytes());
        }
        if self.name == "7+8"
            && self.ticks == TROUBLE_AT
            && let Some((&p, _)) = self.clients.iter().find(|(_, c)| **c == 8)
        {
            out.kick(p, "a test");
            log(&self.log, format!("match {}: kicks 8", self.name));
        }
        if self.ticks == MATCH_TICKS {
            let winner = self.points.iter().max_by_key(|(_, n)| **n).map(|(p, _)| self.clients[p]).unwrap();
            let sent = self.lobby.as_ref().map(|l| l.send(LobbyMsg::Result { pair: self.name.clone(), winner }));
            log(&self.log, format!("match {}: over, result sent: {sent:?}", self.name));
            out.stop_world();
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    fn scoreboard_columns(&self) -> Vec<String> {
        vec!["points".into()]
    }
}

const CLIENTS: u64 = 9;

/// What a client received: its world notices in order, how its session ended, its scoreboard
/// and the previous one (rows sorted).
fn received(id: u64, c: &mut GameClient) -> String {
    let mut notices = Vec::new();
    while let Some(n) = c.next_notice() {
        notices.push(format!("{} ({:?})", n.kind, n.reason));
    }
    let mut heard = Vec::new();
    while let Some(m) = c.channel().recv_reliable() {
        heard.push(String::from_utf8_lossy(&m).into_owned());
    }
    let rows = |b: &Scoreboard| {
        let mut r: Vec<Vec<i32>> = b.rows().map(|r| r.fields.clone()).collect();
        r.sort();
        r
    };
    format!(
        "client {id}: notices {notices:?}; heard {heard:?}; ended {:?}; board {:?}; previous board {:?}",
        c.ended(),
        rows(c.scoreboard()),
        rows(c.previous_scoreboard())
    )
}

/// What every shell must show: the log's lines, and each client back in the lobby with its
/// match's final board (but the kicked one). Returns the log's lines sorted.
fn check(lines: &[String], clients: &[(u64, &GameClient)]) -> Vec<String> {
    let at = |line: &str| lines.iter().position(|l| l == line).unwrap_or_else(|| panic!("no {line:?} in {lines:#?}"));
    // The match that panics: stopped with why, its players back with it.
    let failing = "the world's code kept failing";
    let stopped = at(&format!("lobby: match 5+6 stopped ({failing})"));
    for c in [5, 6] {
        assert!(at(&format!("lobby: {c} joins, returned from match 5+6 ({failing})")) > stopped, "{lines:#?}");
    }
    // The spectator back from the stands once they stopped after their match.
    assert!(
        at("lobby: match stands of 1+2 stopped (the world stopped)")
            > at("lobby: match 1+2 stopped (the world stopped)")
    );
    assert!(
        at("lobby: 9 joins, returned from match stands of 1+2 (the world stopped)") > at("lobby: 9 joins, connected")
    );
    // The match that kicks 8: 8 leaves it, 7 plays on alone and wins.
    assert!(at("match 7+8: kicks 8") < at("match 7+8: 8 leaves"), "{lines:#?}");
    at("lobby: match 7+8 says 7 won");
    assert!(
        at("lobby: match 7+8 stopped (the world stopped)")
            < at("lobby: 7 joins, returned from match 7+8 (the world stopped)")
    );
    for first in [1, 3] {
        let name = pair(first);
        at(&format!("match {name}: started by Some(WorldId(0)), reaches it: true"));
        at(&format!("match {name}: over, result sent: Some(Ok(()))"));
        let winner = first + 1; // more points a tick
        at(&format!("lobby: match {name} says {winner} won"));
        let stopped = at(&format!("lobby: match {name} stopped (the world stopped)"));
        for c in [first, first + 1] {
            let joined = at(&format!("lobby: {c} joins, connected"));
            let played = at(&format!("match {name}: {c} joins, moved from the lobby"));
            let back = at(&format!("lobby: {c} joins, returned from match {name} (the world stopped)"));
            assert!(joined < played && played < stopped && stopped < back, "in order, for {c}: {lines:#?}");
        }
    }
    for (me, c) in clients.iter().filter(|(id, _)| *id <= 4) {
        let n = c.world().unwrap();
        assert_eq!((n.world, n.kind.as_str()), (0, "lobby"), "back in the lobby");
        assert!(c.scoreboard().is_empty(), "the lobby has no board");
        let board = c.previous_scoreboard();
        assert_eq!(board.columns(), ["points"]);
        let mut points: Vec<i32> = board.rows().map(|r| r.fields[0]).collect();
        points.sort_unstable();
        // The final board: every tick counted (the last half-second update had fewer).
        let me = *me as i32;
        let first = (me - 1) / 2 * 2 + 1;
        assert_eq!(points, [first * MATCH_TICKS as i32, (first + 1) * MATCH_TICKS as i32], "client {me}");
    }
    let mut sorted = lines.to_vec();
    sorted.sort();
    sorted
}

/// The matches' recordings in `dir`: each parses, and its last frame is the match's last
/// tick.
fn check_recordings(dir: &std::path::Path) {
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 4, "one recording a match: {files:?}");
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let r = volley::protocol::recording::Recording::parse(bytes.into(), Some(&Schema::new())).unwrap();
        assert_eq!(r.header().kind, "match");
        assert!(!r.chunks().is_empty() && r.cut_off() == 0, "{f:?} is whole");
        // The board goes into the recording (a replay shows it): its columns, and its rows
        // each half second.
        assert_eq!(r.header().columns, ["points"]);
        let mut p = volley::protocol::recording::Playhead::new(r, Arc::new(Schema::new())).unwrap();
        let mut boards = p.frame().events.iter().filter(|e| matches!(e, Event::Board(_))).count();
        p.advance_to(u32::MAX, |f| boards += f.events.iter().filter(|e| matches!(e, Event::Board(_))).count()).unwrap();
        assert!(boards >= 1, "{f:?} holds the board");
    }
}

/// [`check_recordings`] once each recorder's thread has closed its file after its match
/// stopped (at most 5 s); then the folder goes.
fn check_recordings_soon(dir: &std::path::Path) {
    for _ in 0..50 {
        if std::panic::catch_unwind(|| check_recordings(dir)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    check_recordings(dir);
    let _ = std::fs::remove_dir_all(dir);
}

fn stepper_run() -> (Vec<String>, Vec<String>) {
    let lines = Log::default();
    let dir = std::env::temp_dir().join(format!("volley-worlds-talk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let lobby = Lobby::new(lines.clone(), Some(dir.clone()));
    let mut s = Stepper::new(WithMessages::<_, LobbyMsg>::new(lobby), 60, 16).with_world_kinds(&KINDS);
    for c in 1..=CLIENTS {
        s.add_client_with(LinkProfile::PERFECT, c, [0; 256]);
    }
    let mut most = 0;
    for _ in 0..(MAX_PANICKING_TICKS + 120) {
        s.step();
        let running = s.worlds().running();
        assert_eq!(running.len(), s.world_list().len(), "the handle and the stepper agree");
        most = most.max(running.len());
    }
    assert!(most >= 5, "the lobby and four matches ran at once: {most}");
    assert_eq!(s.worlds().running(), [WorldId::ENTRY], "the matches stopped");
    // The stepper records as the server does.
    check_recordings_soon(&dir);
    let clients: Vec<(u64, &GameClient)> = s.clients.iter().zip(1..).map(|(c, id)| (id, &c.client)).collect();
    let lines = lines.lock().unwrap().clone();
    let lines = check(&lines, &clients);
    (lines, s.clients.iter_mut().zip(1..).map(|(c, id)| received(id, &mut c.client)).collect())
}

#[test]
fn in_the_stepper_a_match_reports_to_the_lobby_that_started_it() {
    let (lines, received) = stepper_run();
    for r in &received {
        eprintln!("{r}");
    }
    // Per pair: two joins in the lobby and two in the match, a start; per match that ends: a
    // result sent and heard, two leaves (one for 5+6, which stopped failing: no leave), a
    // stop heard, two returns; the kick; the spectator's join, its stands' stop and its return.
    assert_eq!(lines.len(), 47, "nothing else: {lines:#?}");
    // From the stands, only what all heard: no team chat, no other player's message.
    assert!(received[8].contains("heard [\"1+2: all\"]"), "{}", received[8]);
    // The stands showed the match's board, as late as its frames: the final one last.
    let (one, two) = (MATCH_TICKS, 2 * MATCH_TICKS);
    assert!(received[8].ends_with(&format!("board []; previous board [[{one}], [{two}]]")), "{}", received[8]);
    assert!(received[0].contains("heard [\"1+2: all\", \"1+2: to 1\", \"1+2: team 1\"]"), "{}", received[0]);
    assert!(received[1].contains("heard [\"1+2: all\", \"1+2: to 2\"]"), "{}", received[1]);
    // The kicked player keeps the board as it was kicked (sent before the kick), and its
    // partner's final board has only itself.
    assert!(
        received[7].ends_with("ended Some(Kicked(\"a test\")); board [[70], [80]]; previous board []"),
        "{}",
        received[7]
    );
    assert!(received[6].ends_with("previous board [[280]]"), "{}", received[6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_the_worlds_talk_as_in_the_stepper() {
    let key = [9u8; 32];
    let lines = Log::default();
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.world_kinds = KINDS.iter().map(|k| k.to_string()).collect();
    let dir = std::env::temp_dir().join(format!("volley-worlds-talk-udp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let lobby = WithMessages::<_, LobbyMsg>::new(Lobby::new(lines.clone(), Some(dir.clone())));
    let server = start(config, lobby).await.unwrap();
    let mut clients = Vec::new();
    for c in 1..=CLIENTS {
        clients.push(udp::client(&server, &key, c, "").await);
    }
    let mut next = tokio::time::Instant::now();
    let (in_the_stepper, received_in_the_stepper) = stepper_run();
    // Until every match is over and its players back (at most 15 s: the panicking match
    // takes MAX_PANICKING_TICKS ticks to stop).
    for _ in 0..160 {
        udp::run(&mut clients, &mut next, 6).await;
        let back = clients.iter().zip(1..).filter(|(c, _)| c.client.ended().is_none()).all(|(c, id)| {
            let board = id == SPECTATOR || !c.client.previous_scoreboard().is_empty();
            c.client.world().is_some_and(|n| n.kind == "lobby") && board
        });
        if back && lines.lock().unwrap().len() >= in_the_stepper.len() {
            break;
        }
    }
    udp::run(&mut clients, &mut next, 30).await;
    let udp_lines = lines.lock().unwrap().clone();
    let all: Vec<(u64, &GameClient)> = clients.iter().zip(1..).map(|(c, id)| (id, &c.client)).collect();
    let over_udp = check(&udp_lines, &all);
    let received_over_udp: Vec<String> =
        clients.iter_mut().zip(1..).map(|(c, id)| received(id, &mut c.client)).collect();
    server.shutdown().await;
    tokio::task::spawn_blocking(move || check_recordings_soon(&dir)).await.unwrap();
    assert_eq!(over_udp, in_the_stepper, "the same lines in both shells");
    assert_eq!(received_over_udp, received_in_the_stepper, "each client received the same in both shells");
}

/// Gives each player that joined its team (odd client ids team 1, even team 2) in the same
/// `messages` call as a message to that team.
#[derive(Default)]
struct Teams {
    joined: Vec<(PlayerId, u16)>,
}

impl World for Teams {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        self.joined.push((player, 2 - (who.client_id % 2) as u16));
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn messages(&mut self, out: &mut Outbox) {
        for (player, team) in self.joined.drain(..) {
            // The message first: the team holds for the tick's messages all the same.
            out.reliable(Audience::Team(team), format!("team {team}: welcome {player}"));
            out.set_team(player, Some(team));
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

fn heard(c: &mut GameClient) -> Vec<String> {
    std::iter::from_fn(|| c.channel().recv_reliable()).map(|m| String::from_utf8(m.to_vec()).unwrap()).collect()
}

/// What each client heard: its own welcome (it joined its team in that tick) and those of
/// its team's later players, never the other team's.
fn check_teams(heard: &[Vec<String>]) {
    for (i, lines) in heard.iter().enumerate() {
        let team = 2 - (i as u64 + 1) % 2;
        assert!(!lines.is_empty(), "client {} heard its welcome: {heard:?}", i + 1);
        assert!(lines.iter().all(|l| l.starts_with(&format!("team {team}:"))), "client {}: {lines:?}", i + 1);
    }
}

#[test]
fn a_team_set_at_join_hears_the_team_message_of_the_same_tick_in_the_stepper() {
    let mut s = Stepper::new(Teams::default(), 60, 8);
    for c in 1..=4 {
        s.add_client_with(LinkProfile::PERFECT, c, [0; 256]);
        s.run(10);
    }
    s.run(30);
    let heard: Vec<Vec<String>> = s.clients.iter_mut().map(|c| heard(&mut c.client)).collect();
    check_teams(&heard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_set_at_join_hears_the_team_message_of_the_same_tick_over_udp() {
    let key = [10u8; 32];
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Teams::default()).await.unwrap();
    let mut clients = Vec::new();
    let mut next = tokio::time::Instant::now();
    for c in 1..=4 {
        clients.push(udp::client(&server, &key, c, "").await);
        udp::run(&mut clients, &mut next, 10).await;
    }
    udp::run(&mut clients, &mut next, 60).await;
    let heard: Vec<Vec<String>> = clients.iter_mut().map(|c| heard(&mut c.client)).collect();
    check_teams(&heard);
    server.shutdown().await;
}

/// A UDP client that sends no input (a spectator) still connects, gets its snapshots and its
/// reliable messages: [`UdpClient::step_watching`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_client_can_watch_without_sending_input() {
    let key = [11u8; 32];
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Teams::default()).await.unwrap();
    let mut watcher = udp::client(&server, &key, 1, "").await;
    let mut next = tokio::time::Instant::now();
    let mut snapshots = 0;
    for _ in 0..90 {
        next += Duration::from_millis(16);
        snapshots += watcher.step_watching(next).await;
    }
    assert!(snapshots >= 45, "snapshots while watching: {snapshots}");
    assert_eq!(heard(&mut watcher.client), ["team 1: welcome 0"], "its welcome arrived");
    assert_eq!(watcher.client.ended(), None);
    server.shutdown().await;
}
