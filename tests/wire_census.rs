//! Every kind of packet and message a full scenario puts on the wire is named in
//! `docs/wire.md`. The stepper captures every datagram of two runs (decrypted with each
//! client's keys): players in a hall with a scoreboard, moved to a match and back, spectators
//! watching it and sent back when it ends, reliable messages (one big enough for fragments
//! and lz4), events both ways, a kick, a client leaving, the server shutting down; once with
//! plain snapshots every tick over a lossy link, once with a predicting sender every third
//! tick. Each datagram is read here as the document describes it — netcode packet type,
//! payload byte, control message, channel frame and sections, the input packet and its
//! views, the snapshot's form, the framework's messages — and each kind found must have its
//! place in the document. A kind the reading does not know, or the document does not name,
//! fails the test, listed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::bits::BitReader;
use volley::protocol::netcode::packet::PacketKind;
use volley::protocol::snapshot::SenderConfig;
use volley::testing::Datagram;

volley::replicated! {
    /// A moving dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-100.0), glam::Vec2::splat(100.0), 0.01),
        /// Which way it faces.
        pub heading: f32 = AngleQ(8),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

fn dots(tick: u32, out: &mut SnapshotBuilder<'_>) {
    for i in 0..10u32 {
        let t = tick as f32 * 0.02 + i as f32;
        let dot = Dot { position: glam::Vec2::new(t.sin() * 40.0, t.cos() * 20.0), heading: t };
        let _ = out.insert(i, &dot);
    }
}

const KINDS: [&str; 3] = ["hall", "match", "spectators"];
const MATCH_TICKS: u32 = 240;

#[derive(Default)]
struct Shared {
    worlds: Option<(WorldId, WorldId)>,
    kick: Option<PlayerId>,
}

struct Match {
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
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
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
        dots(self.tick, out);
    }
}

/// The entry world: a scoreboard, a big reliable message and events to everyone now and
/// then, a kick when asked; it starts the match and its spectators' world.
struct Hall {
    shared: Arc<Mutex<Shared>>,
    players: Vec<PlayerId>,
    tick: u32,
}

impl World for Hall {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        let game = Match { tick: 0, ticks: 0, players: Vec::new() };
        let m = worlds.spawn(WorldOptions::new("match").fallback(WorldId::ENTRY), game).unwrap();
        let stands = WorldOptions::new("spectators").fallback(WorldId::ENTRY);
        let s = Spectators::new(Duration::from_millis(250), Arc::new(Everything)).start(worlds, m, stands).unwrap();
        self.shared.lock().unwrap().worlds = Some((m, s));
    }
    fn join(&mut self, p: PlayerId) {
        self.players.push(p);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.retain(|q| *q != p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn messages(&mut self, out: &mut Outbox) {
        for (i, p) in self.players.iter().enumerate() {
            out.set_score(*p, &[(self.tick / 30) as i32 + i as i32]);
        }
        if self.tick % 90 == 20 {
            // Three kilobytes: fragments, and lz4 shrinks them.
            out.reliable(Audience::All, b"volley ".repeat(440));
            out.reliable(Audience::All, &b"hello"[..]);
        }
        if self.tick.is_multiple_of(10) {
            out.event(Audience::All, &b"tick"[..]);
        }
        if let Some(p) = self.shared.lock().unwrap().kick.take() {
            out.kick(p, "the census is done with you");
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        dots(self.tick, out);
    }
    fn scoreboard_columns(&self) -> Vec<String> {
        vec!["points".into()]
    }
}

struct Everything;

impl Relevancy for Everything {
    fn interest(&self, world: &WorldSnapshot, _: PlayerId, out: &mut Vec<Interest>) {
        Interest::everything(world, out);
    }
}

/// One run of the scenario; what went over the wire.
fn run(sender: SenderConfig, every: u32, profile: LinkProfile) -> Vec<Datagram> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let hall = Hall { shared: shared.clone(), players: Vec::new(), tick: 0 };
    let mut s =
        Stepper::new(hall, 60, 16).with_world_kinds(&KINDS).with_sender_config(sender).with_snapshots_every(every);
    s.capture();
    for i in 0..3 {
        s.add_client_with(profile, 1 + i, [0; 256]);
    }
    for i in 0..2 {
        s.add_client_with(profile, 100 + i, [0; 256]);
    }
    for c in s.clients.iter_mut().take(3) {
        c.input = Some(vec![1, 2, 3]);
    }
    s.run(40);
    let ids: Vec<PlayerId> = s.clients.iter().map(|c| c.client.client_index().unwrap()).collect();
    let (m, stands) = shared.lock().unwrap().worlds.unwrap();
    for (i, p) in ids.iter().enumerate() {
        s.worlds().move_player(*p, if i < 3 { m } else { stands });
    }
    for step in 0..MATCH_TICKS + 90 {
        if step % 45 == 0 {
            let c = s.clients[0].client.channel();
            c.send_reliable(bytes::Bytes::from_static(b"gg")).unwrap();
            c.send_event(bytes::Bytes::from_static(b"ping")).unwrap();
        }
        if step == 60 {
            s.clients[4].client.channel().send_message(&SpectatorControl::Follow(Some(ids[0]))).unwrap();
        }
        s.step();
    }
    shared.lock().unwrap().kick = Some(ids[2]);
    s.run(30);
    s.disconnect(1);
    s.run(10);
    s.shutdown();
    s.captured()
}

/// Each kind of thing the reading below finds, and the words of `docs/wire.md` that name it.
const NAMED: &[(&str, &str)] = &[
    ("netcode: connection request", "the connection request (1078 bytes)"),
    ("netcode: denied", "Challenge and denied packets"),
    ("netcode: challenge", "the challenge and response"),
    ("netcode: response", "the challenge and response"),
    ("netcode: keep-alive", "keep-alive, payload and disconnect packets"),
    ("netcode: payload", "payload packets (netcode packet type 5)"),
    ("netcode: disconnect", "keep-alive, payload and disconnect packets"),
    ("session: hello", "| 0 | hello (client → server)"),
    ("session: welcome", "| 1 | welcome (server → client)"),
    ("session: reject", "| 2 | reject (server → client)"),
    ("session: goodbye", "| 3 | goodbye (server → client)"),
    ("goodbye: kicked by the world", "| 1 | kicked by the world"),
    ("goodbye: shutting down", "| 2 | the server is shutting down"),
    ("goodbye: the world stopped", "| 3 | the world stopped"),
    ("goodbye: flooding", "| 4 | flooding the server with messages"),
    ("goodbye: too far behind", "| 5 | too far behind on reliable messages"),
    ("goodbye: moved to another server", "| 6 | moved to another server"),
    ("goodbye: only malformed packets", "| 7 | only malformed packets"),
    ("channel: the game's, plain", "`0x01` plain"),
    ("channel: the game's, lz4", "`0x02` the rest is one lz4 block"),
    ("channel: the framework's", "| `0x11`, `0x12` | a packet of the framework's channel"),
    ("channel: ack delay, nothing received", "`0xFFFF` when the sender has received nothing yet"),
    ("section: state", "| `0x01` | the state"),
    ("section: reliable message", "| `0x02` | a reliable message"),
    ("section: event", "| `0x03` | an event (unreliable)"),
    ("section: fragment", "| `0x04` | a fragment of a reliable message"),
    ("input: a packet", "## Client → server: the input packet"),
    ("input: no snapshot decoded yet", "`0xFFFFFFFF` for none |"),
    ("input: view none", "Its first byte is `0xFF` for none"),
    ("input: view form 0", "| 0 | that snapshot alone"),
    ("input: view form 1", "| 1 | blended towards the next tick"),
    ("input: view form 2", "| 2 | blended towards a later tick"),
    ("snapshot: no input applied yet", "(u32, `0xFFFFFFFF` for none"),
    ("snapshot: whole", "a snapshot without one is whole"),
    ("snapshot: plain, against a baseline", "### Records (the plain form)"),
    ("snapshot: range-coded", "### The range-coded form"),
    ("snapshot: range-coded, with a second reference", "#### A changed entity"),
    ("snapshot: range-coded by the game's predictor", "*predicted by the game's predictor* bit is 1"),
    ("game: a reliable message", "## The game's messages"),
    ("game: an event", "## The game's messages"),
    ("framework: a fragment", "| `0x04` | a fragment of a reliable message"),
    ("framework: scoreboard, full", "0 `Full {"),
    ("framework: scoreboard, delta", "1 `Delta {"),
    ("framework: world notice", "| 1 | a world notice"),
    ("notice: connected", "0 Connected"),
    ("notice: moved", "1 Moved"),
    ("notice: world stopped", "2 WorldStopped(string)"),
    ("framework: spectator status", "| 2 | a spectator's playback status"),
    ("framework: redirect", "| 3 | a redirect to another zone's server"),
];

/// A LEB128 number at `at`, moving it on.
fn leb(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Reads one datagram as `docs/wire.md` describes it, counting each kind of thing found.
fn read(d: &Datagram, found: &mut BTreeMap<String, usize>) {
    let mut note = |what: &str| *found.entry(what.to_string()).or_default() += 1;
    note(match d.kind {
        PacketKind::Request => "netcode: connection request",
        PacketKind::Denied => "netcode: denied",
        PacketKind::Challenge => "netcode: challenge",
        PacketKind::Response => "netcode: response",
        PacketKind::KeepAlive => "netcode: keep-alive",
        PacketKind::Payload => "netcode: payload",
        PacketKind::Disconnect => "netcode: disconnect",
    });
    let Some(p) = &d.payload else { return };
    match p[0] {
        0xC5 => {
            assert_eq!(&p[1..5], b"VLLY", "the control magic");
            match p[5] {
                0 => note("session: hello"),
                1 => note("session: welcome"),
                2 => note("session: reject"),
                3 => {
                    note("session: goodbye");
                    let reason = match p[6] {
                        1 => "goodbye: kicked by the world".to_string(),
                        2 => "goodbye: shutting down".to_string(),
                        3 => "goodbye: the world stopped".to_string(),
                        4 => "goodbye: flooding".to_string(),
                        5 => "goodbye: too far behind".to_string(),
                        6 => "goodbye: moved to another server".to_string(),
                        7 => "goodbye: only malformed packets".to_string(),
                        other => format!("goodbye reason {other}"),
                    };
                    note(&reason);
                }
                other => note(&format!("session: control type {other}")),
            }
        }
        frame @ (0x01 | 0x02 | 0x11 | 0x12) => {
            let framework = frame & 0x10 != 0;
            note(match frame {
                0x01 => "channel: the game's, plain",
                0x02 => "channel: the game's, lz4",
                _ => "channel: the framework's",
            });
            let body = if frame & 0x0f == 0x02 {
                let mut out = vec![0u8; 4096];
                let n = lz4_flex::block::decompress_into(&p[1..], &mut out).expect("an lz4 block");
                out.truncate(n);
                out
            } else {
                p[1..].to_vec()
            };
            if u16::from_le_bytes([body[8], body[9]]) == 0xFFFF {
                note("channel: ack delay, nothing received");
            }
            let mut at = 10;
            while at < body.len() {
                let tag = body[at];
                at += 1;
                let (what, header) = match tag {
                    0x01 => ("state", 0),
                    0x02 => ("reliable message", 2),
                    0x03 => ("event", 0),
                    0x04 => ("fragment", 6),
                    other => {
                        note(&format!("section: tag {other:#04x}"));
                        return;
                    }
                };
                note(&format!("section: {what}"));
                at += header;
                let len = leb(&body, &mut at).expect("a section's length") as usize;
                let bytes = &body[at..at + len];
                at += len;
                match (framework, tag) {
                    (false, 0x01) if d.to_server => input(bytes, &mut note),
                    (false, 0x01) => snapshot(bytes, &mut note),
                    (false, 0x02 | 0x04) => note("game: a reliable message"),
                    (false, _) => note("game: an event"),
                    (true, 0x02) => framework_message(bytes, &mut note),
                    (true, 0x04) => note("framework: a fragment"),
                    (true, _) => note(&format!("framework: a section of tag {tag}")),
                }
            }
        }
        other => note(&format!("payload: first byte {other:#04x}")),
    }
}

/// The client's state section: the input packet.
fn input(b: &[u8], note: &mut impl FnMut(&str)) {
    note("input: a packet");
    if b[0..4] == [0xFF; 4] {
        note("input: no snapshot decoded yet");
    }
    let count = b[8];
    let mut at = 9;
    for _ in 0..count {
        at += 1 + usize::from(b[at]);
        let view = b[at];
        at += 1;
        if view == 0xFF {
            note("input: view none");
            continue;
        }
        match view >> 6 {
            0 => note("input: view form 0"),
            1 => {
                note("input: view form 1");
                at += 1;
            }
            2 => {
                note("input: view form 2");
                at += 2;
            }
            _ => note("input: view form 3"),
        }
    }
    assert_eq!(at, b.len(), "the input packet read to its end");
}

/// The server's state section: the applied input, then the snapshot's header.
fn snapshot(b: &[u8], note: &mut impl FnMut(&str)) {
    if b[0..4] == [0xFF; 4] {
        note("snapshot: no input applied yet");
    }
    let mut r = BitReader::new(&b[4..]);
    r.read(32).unwrap();
    if !r.read_bool().unwrap() {
        return note("snapshot: whole");
    }
    r.read_golomb(2).unwrap();
    let second = r.read_bool().unwrap();
    if second {
        r.read_golomb(2).unwrap();
    }
    if !r.read_bool().unwrap() {
        return note("snapshot: plain, against a baseline");
    }
    note("snapshot: range-coded");
    if second {
        note("snapshot: range-coded, with a second reference");
        if r.read_bool().unwrap() {
            note("snapshot: range-coded by the game's predictor");
        }
    }
}

/// A reliable message of the framework's channel.
fn framework_message(b: &[u8], note: &mut impl FnMut(&str)) {
    match b[0] {
        0 => note(if b[1] == 0 { "framework: scoreboard, full" } else { "framework: scoreboard, delta" }),
        1 => {
            note("framework: world notice");
            // world (varint), kind (string), reason (enum)
            let mut at = 1;
            leb(b, &mut at).unwrap();
            at += leb(b, &mut at).unwrap() as usize;
            let reason = match leb(b, &mut at).unwrap() {
                0 => "notice: connected".to_string(),
                1 => "notice: moved".to_string(),
                2 => "notice: world stopped".to_string(),
                other => format!("notice: reason {other}"),
            };
            note(&reason);
        }
        2 => note("framework: spectator status"),
        3 => note("framework: redirect"),
        other => note(&format!("framework: message type {other}")),
    }
}

#[test]
fn every_packet_and_message_of_a_full_scenario_is_named_in_the_wire_document() {
    let wire = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/wire.md")).unwrap();
    let lossy =
        LinkProfile { latency: Duration::from_millis(20), jitter: Duration::from_millis(5), loss: 0.05, burst: None };
    let predicting = SenderConfig { predict: true, ..SenderConfig::default() };
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for datagrams in [run(SenderConfig::default(), 1, lossy), run(predicting, 3, LinkProfile::PERFECT)] {
        assert!(datagrams.len() > 1000, "{} datagrams", datagrams.len());
        for d in &datagrams {
            read(d, &mut found);
        }
    }
    let named: BTreeMap<&str, &str> = NAMED.iter().copied().collect();
    let mut unnamed = Vec::new();
    eprintln!("what two runs put on the wire, and the words of docs/wire.md that name each:");
    for (what, n) in &found {
        let words = named.get(what.as_str()).filter(|w| wire.contains(**w));
        eprintln!("{n:>8}  {what}  {}", words.map_or("— NOT NAMED".to_string(), |w| format!("({w:?})")));
        if words.is_none() {
            unnamed.push(what.clone());
        }
    }
    let unseen: Vec<&str> = NAMED.iter().map(|(w, _)| *w).filter(|w| !found.contains_key(*w)).collect();
    eprintln!("named in the document, not produced by this scenario: {unseen:?}");
    assert!(unnamed.is_empty(), "found on the wire, not named in docs/wire.md: {unnamed:?}");
    // The scenario reaches what it is meant to.
    for what in [
        "netcode: connection request",
        "netcode: disconnect",
        "session: welcome",
        "goodbye: kicked by the world",
        "goodbye: shutting down",
        "channel: the game's, lz4",
        "channel: ack delay, nothing received",
        "section: fragment",
        "input: view form 1",
        "input: view form 2",
        "snapshot: whole",
        "snapshot: plain, against a baseline",
        "snapshot: range-coded, with a second reference",
        "framework: scoreboard, full",
        "framework: scoreboard, delta",
        "notice: moved",
        "notice: world stopped",
        "framework: spectator status",
    ] {
        assert!(found.contains_key(what), "the scenario never produced {what:?}");
    }
}
