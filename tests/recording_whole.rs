//! Recordings are whole: every frame a world ticks is in its file, the file is closed (its
//! last chunk and end written) as soon as the world stops, and whoever asked for the
//! recording learns that it closed and where ([`WorldOptions::recording`]). In the stepper,
//! which runs as fast as the machine does, every frame is written in its own thread, the same
//! on every run; on the server, a world's stop closes its recording on the writer thread.
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::protocol::recording::Recording;
use volley::server::{RecordingHandle, RecordingState};

/// A fresh folder of this test's own (removed when dropped).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("volley-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

volley::replicated! {
    /// A counter that moves.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Tally {
        /// Its value.
        pub n: u32 = Bits(24),
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Tally>().unwrap();
    s
}

/// Twenty counters, one a tick further each tick; it stops itself after `stop_after` ticks.
struct Counters {
    ticks: u32,
    stop_after: u32,
}

impl World for Counters {
    fn schema(&self) -> Schema {
        schema()
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        if self.ticks == self.stop_after {
            out.stop_world();
        }
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for i in 0..20u32 {
            let _ = out.insert(i + 1, &Tally { n: self.ticks * (i + 1) });
        }
    }
}

/// The entry world: at its first tick it starts a recorded match of `match_ticks` ticks, and
/// keeps the match's recording handle where the test reads it.
struct Lobby {
    worlds: Option<Worlds>,
    dir: std::path::PathBuf,
    match_ticks: u32,
    handle: Arc<Mutex<Option<RecordingHandle>>>,
}

impl World for Lobby {
    fn schema(&self) -> Schema {
        schema()
    }
    fn started(&mut self, _: WorldId, worlds: &Worlds) {
        self.worlds = Some(worlds.clone());
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        let mut handle = self.handle.lock().unwrap();
        if handle.is_none() {
            let options = WorldOptions::new("match").recorded(&self.dir);
            *handle = Some(options.recording());
            let game = Counters { ticks: 0, stop_after: self.match_ticks };
            self.worlds.as_ref().unwrap().spawn(options, game).unwrap();
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

fn lobby(dir: &Path, match_ticks: u32) -> (Lobby, Arc<Mutex<Option<RecordingHandle>>>) {
    let handle = Arc::new(Mutex::new(None));
    let lobby = Lobby { worlds: None, dir: dir.to_owned(), match_ticks, handle: handle.clone() };
    (lobby, handle)
}

/// The frames of a recording file: every tick from its first to its last, each holding the
/// counters as they were, and nothing cut off.
fn check_whole(bytes: Vec<u8>, ticks: u32) {
    let schema = Arc::new(schema());
    let recording = Recording::parse(bytes.into(), Some(&schema)).unwrap();
    assert_eq!(recording.cut_off(), 0, "no partial chunk");
    let (first, last) = recording.ticks().unwrap();
    assert_eq!(last - first + 1, ticks, "ticks {first}..={last}");
    let sizes = recording.sizes().unwrap();
    assert_eq!(sizes.frames, u64::from(ticks), "every tick a frame: {sizes:?}");
    let mut head = volley::protocol::recording::Playhead::new(recording, schema).unwrap();
    let mut seen = 0;
    head.advance_to(last, |f| {
        seen += 1;
        assert_eq!(f.snapshot.len(), 20, "tick {}", f.tick);
    })
    .unwrap();
    // (The playhead starts on the first frame: the rest are advanced to.)
    assert_eq!(seen, ticks - 1);
}

fn the_file(dir: &Path) -> Vec<u8> {
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::read(&files[0]).unwrap()
}

#[test]
fn in_the_stepper_a_stopped_worlds_recording_is_whole_at_once() {
    let dir = TempDir::new("whole-stepper");
    let (world, handle) = lobby(dir.path(), 700);
    let mut s = Stepper::new(world, 60, 8).with_world_kinds(&["lobby", "match"]);
    // Flat out: 700 ticks take the machine a few milliseconds, far faster than real time.
    let mut stopped_at = None;
    for step in 0..800 {
        s.step();
        let h = handle.lock().unwrap().clone();
        if let Some(closed) = h.as_ref().and_then(RecordingHandle::closed) {
            // Closed in the very step the match stopped, in the stepper's own thread.
            assert!(s.world_list().iter().all(|(_, kind, _)| kind != "match"), "the match stopped");
            assert_eq!(closed.frames, 700, "{closed:?}");
            assert_eq!(closed.left_out, 0);
            assert!(closed.path.starts_with(dir.path()), "{closed:?}");
            stopped_at = Some(step);
            break;
        }
        assert!(!matches!(h.map(|h| h.state()), Some(RecordingState::Failed { .. })));
    }
    assert!(stopped_at.is_some(), "the recording closed");
    check_whole(the_file(dir.path()), 700);
}

#[test]
fn in_the_stepper_a_recording_is_whole_when_the_stepper_is_dropped_and_the_same_every_run() {
    let run = || {
        let dir = TempDir::new("whole-drop");
        let (world, _) = lobby(dir.path(), u32::MAX);
        let mut s = Stepper::new(world, 60, 8).with_world_kinds(&["lobby", "match"]);
        s.step(); // the match starts
        let buffer = s.record(WorldId::ENTRY).unwrap();
        s.run(599);
        drop(s);
        // Both: the entry world's memory recording and the running match's file.
        let entry = buffer.0.lock().unwrap().clone();
        let file = the_file(dir.path());
        check_whole(file.clone(), 600);
        (entry, file)
    };
    let (entry, file) = run();
    let schema = Arc::new(schema());
    let recording = Recording::parse(entry.clone().into(), Some(&schema)).unwrap();
    assert_eq!(recording.ticks().map(|(a, b)| b - a + 1), Some(599), "every tick of the entry world");
    assert_eq!(recording.sizes().unwrap().frames, 599);
    // The header holds the time it began; after it, the files are byte for byte the same.
    let (again_entry, again_file) = run();
    let body = |b: &[u8]| Recording::parse(b.to_vec().into(), Some(&schema)).unwrap().sizes().unwrap();
    assert_eq!(body(&entry), body(&again_entry));
    assert_eq!(body(&file), body(&again_file));
    assert_eq!(entry.len(), again_entry.len());
    assert_eq!(file.len(), again_file.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_server_a_stopped_worlds_recording_closes_whole_and_says_where() {
    let dir = TempDir::new("whole-server");
    let (world, handle) = lobby(dir.path(), 120);
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), [3; 32]);
    config.world_kinds = vec!["lobby".into(), "match".into()];
    let server = volley::server::start(config, world).await.unwrap();
    let mut h = None;
    for _ in 0..100 {
        h = handle.lock().unwrap().clone();
        if h.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let h = h.expect("the lobby started the match");
    let state = tokio::task::spawn_blocking(move || h.wait_closed(Duration::from_secs(10))).await.unwrap();
    let RecordingState::Closed(closed) = state else { panic!("the recording closed: {state:?}") };
    assert_eq!((closed.frames, closed.left_out), (120, 0), "{closed:?}");
    assert_eq!(std::fs::metadata(&closed.path).unwrap().len(), closed.bytes);
    // Read at once: nothing is still on its way.
    check_whole(std::fs::read(&closed.path).unwrap(), 120);
    server.shutdown().await;
}
