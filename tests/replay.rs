//! Recording and replaying through the normal protocol, over real UDP: a world with players
//! sending inputs is recorded while a client that sees everything decodes it; the recording is
//! then served by a replay world to a viewer, who must decode, at every recorded tick it is
//! shown, exactly what the live client decoded at that tick — playing from the start, after a
//! seek back, at double speed, and from a file cut off in its last chunk.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::recording::Recording;

volley::replicated! {
    /// A moving dot.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Dot {
        /// Where it is.
        pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-100.0), glam::Vec2::splat(100.0), 0.01),
        /// Whose it is (0: nobody's).
        pub owner: u32 = Bits(16),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Dot>().unwrap();
    s
}

/// Twenty drifting dots, and one per player moved by its inputs.
#[derive(Default)]
struct Drift {
    tick: u32,
    players: BTreeMap<PlayerId, glam::Vec2>,
}

impl World for Drift {
    fn schema(&self) -> Schema {
        schema()
    }
    fn join(&mut self, p: PlayerId) {
        self.players.insert(p, glam::Vec2::ZERO);
    }
    fn leave(&mut self, p: PlayerId) {
        self.players.remove(&p);
    }
    fn input(&mut self, p: PlayerId, input: &[u8]) {
        if let (Some(pos), Some(b)) = (self.players.get_mut(&p), input.first()) {
            *pos += glam::Vec2::new(f32::from(*b) * 0.013, f32::from(p as u8) * 0.007);
            *pos = pos.clamp(glam::Vec2::splat(-90.0), glam::Vec2::splat(90.0));
        }
    }
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for i in 0..20u32 {
            let t = self.tick as f32 * 0.02 + i as f32;
            let _ = out.insert(1000 + i, &Dot { position: glam::Vec2::new(t.sin() * 50.0, t.cos() * 30.0), owner: 0 });
        }
        for (p, pos) in &self.players {
            let _ = out.insert(*p, &Dot { position: *pos, owner: *p + 1 });
        }
    }
}

async fn client(addr: std::net::SocketAddr, key: &Key, id: u64) -> UdpClient {
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, id, addr, unix_now().as_secs());
    let token = ConnectToken::generate(&p, key).unwrap();
    let c = GameClient::new(token, Arc::new(schema()), unix_now());
    UdpClient::bind(c, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap()
}

/// A snapshot's entities (its tick left out: the replay's ticks are its own server's).
type Content = Vec<(u32, u16, Vec<u32>)>;

fn content(s: &WorldSnapshot) -> Content {
    s.iter().map(|e| (e.id, e.kind, e.words.to_vec())).collect()
}

/// Every snapshot the client decoded since `after`, by tick.
fn collect(c: &UdpClient, after: &mut u32, into: &mut BTreeMap<u32, Content>) {
    let Some(newest) = c.client.latest().map(WorldSnapshot::tick) else { return };
    for t in (*after + 1).max(newest.saturating_sub(63))..=newest {
        if let Some(s) = c.client.snapshot(t) {
            into.insert(t, content(s));
        }
    }
    *after = newest;
}

/// The recording in `dir`, once its writer has closed it.
async fn finished_recording(dir: &Path) -> PathBuf {
    for _ in 0..100 {
        if let Some(Ok(e)) = std::fs::read_dir(dir).unwrap().next() {
            let bytes = std::fs::read(e.path()).unwrap();
            if Recording::parse(bytes.into(), Some(&schema())).is_ok_and(|r| r.cut_off() == 0 && !r.chunks().is_empty())
            {
                // The last chunk may still be on its way: wait for the size to settle.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let again = std::fs::metadata(e.path()).unwrap().len();
                tokio::time::sleep(Duration::from_millis(200)).await;
                if std::fs::metadata(e.path()).unwrap().len() == again {
                    return e.path();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no finished recording in {}", dir.display());
}

/// What a viewer of `file` decoded, by the recorded tick each snapshot showed, with the
/// controls sent at the given frames; how often playback went back; the statuses it was
/// told. Two snapshots said to show the same recorded tick must hold the same state.
async fn watch(
    file: &Path,
    frames: usize,
    controls: &[(usize, SpectatorControl)],
) -> (BTreeMap<u32, Content>, u32, Vec<SpectatorStatus>) {
    let key = [44u8; 32];
    let world = SpectatorWorld::open(file, schema(), Arc::new(Everything), 1 << 30).unwrap();
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world).await.unwrap();
    let mut viewer = client(server.addr(), &key, 900).await;
    let mut by_server_tick = BTreeMap::new();
    let mut statuses: Vec<SpectatorStatus> = Vec::new();
    let (mut after, mut next) = (0u32, tokio::time::Instant::now());
    for frame in 0..frames {
        for (at, c) in controls {
            if *at == frame {
                viewer.client.channel().send_message(c).unwrap();
            }
        }
        next += Duration::from_millis(16);
        viewer.step(&[0], next).await;
        collect(&viewer, &mut after, &mut by_server_tick);
        if let Some(s) = viewer.client.spectator()
            && statuses.last() != Some(s)
        {
            statuses.push(s.clone());
        }
    }
    server.shutdown().await;
    assert!(!statuses.is_empty(), "the viewer was told where the replay stands");
    let mut shown = BTreeMap::new();
    let mut went_back = 0;
    let mut last_shown = 0;
    for (t, c) in by_server_tick {
        // The status in force at this tick: the newest that began at or before it.
        let Some(s) = statuses.iter().filter(|s| s.since <= t).max_by_key(|s| s.since) else { continue };
        let r = s.shown_at(t);
        if r < last_shown {
            went_back += 1;
        }
        last_shown = r;
        if let Some(before) = shown.insert(r, c.clone()) {
            assert_eq!(before, c, "two snapshots showing recorded tick {r} differ");
        }
    }
    (shown, went_back, statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_world_replays_to_a_viewer_exactly_as_a_live_client_saw_it() {
    let dir = std::env::temp_dir().join(format!("volley-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = [43u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.record = Some(dir.clone());
    let server = start(config, Drift::default()).await.unwrap();
    let mut players = Vec::new();
    for i in 0..8 {
        players.push(client(server.addr(), &key, 10 + i).await);
    }
    let mut live = BTreeMap::new();
    let (mut after, mut next) = (0u32, tokio::time::Instant::now());
    for frame in 0..400u32 {
        next += Duration::from_millis(16);
        for (i, c) in players.iter_mut().enumerate() {
            c.step(&[(frame % 7 + i as u32) as u8], next).await;
        }
        collect(&players[0], &mut after, &mut live);
    }
    server.shutdown().await;
    let file = finished_recording(&dir).await;
    let recording = Recording::parse(std::fs::read(&file).unwrap().into(), Some(&schema())).unwrap();
    let (first, last) = recording.ticks().unwrap();
    assert!(live.len() > 300, "the live client decoded {} snapshots", live.len());
    assert!(live.values().any(|c| c.len() == 28), "it saw the eight players and twenty dots");

    let check = |shown: &BTreeMap<u32, Content>, what: &str| {
        let mut compared = 0;
        for (t, c) in shown {
            if let Some(l) = live.get(t) {
                assert_eq!(c, l, "{what}: the viewer's state at recorded tick {t} is what the live client decoded");
                compared += 1;
            }
        }
        compared
    };

    // From the start, then a seek back to a tick in the middle of a chunk, then double speed.
    let mid = first + 45;
    let controls = [(120, SpectatorControl::Seek(mid)), (240, SpectatorControl::Speed(8))];
    let (shown, went_back, _) = watch(&file, 420, &controls).await;
    let compared = check(&shown, "played");
    assert!(compared > 200, "{compared} recorded ticks compared");
    assert!(went_back >= 1, "the seek went back");
    assert!(shown.keys().any(|t| *t == mid), "the seek landed on tick {mid}");
    assert!(shown.keys().any(|t| *t > first + 330), "double speed went past real time");

    // Paused for two seconds, then played on: the viewer is told (speed 0, then real time
    // again), every snapshot of the pause shows the same recorded tick, and after it the
    // replay goes on from there, not from where real time would be.
    let controls = [(60, SpectatorControl::Pause), (180, SpectatorControl::Play)];
    let (shown, went_back, statuses) = watch(&file, 300, &controls).await;
    assert_eq!(went_back, 0);
    let paused = statuses.iter().find(|s| s.quarters == 0).expect("a paused status");
    let resumed = statuses.iter().find(|s| s.since > paused.since && s.quarters == 4).expect("a playing status after");
    let held = paused.shown_at(paused.since);
    let from = resumed.shown_at(resumed.since);
    assert!(from.abs_diff(held) <= 1, "it plays on from where it paused (within a tick): {held} then {from}");
    assert_eq!(paused.shown_at(paused.since + 90), held, "held still while paused");
    let newest = *shown.keys().next_back().unwrap();
    assert!(newest > held + 60 && newest < first + 300 - 60, "played on after the pause: {held} then {newest}");
    check(&shown, "paused");

    // A file cut off in its last chunk plays to the end of the chunk before.
    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.join("cut.vrec");
    std::fs::write(&cut, &bytes[..bytes.len() - 50]).unwrap();
    let truncated = Recording::parse(bytes[..bytes.len() - 50].to_vec().into(), Some(&schema())).unwrap();
    let (_, end) = truncated.ticks().unwrap();
    assert!(truncated.cut_off() > 0 && end < last, "the last chunk is gone: {end} < {last}");
    let (shown, ..) = watch(&cut, 240, &[(1, SpectatorControl::Seek(end - 30))]).await;
    check(&shown, "cut off");
    assert_eq!(shown.keys().next_back(), Some(&end), "it played to tick {end} and stopped there");
    let _ = std::fs::remove_dir_all(&dir);
}
