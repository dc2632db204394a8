//! Recording a world while it runs. The world's shell hands each tick's frame (its snapshot,
//! already shared with the players, and what happened) to its [`Tap`]s; a [`Recorder`] is
//! one. On the server it queues the frame for the process's recording thread, which codes
//! and writes it ([`RecordWriter`]), so a tick never waits for the disk; each recording's
//! queue is bounded: when it fills, the recorder keeps one frame per keyframe interval (each
//! coded whole) until the writer catches up, counts what it left out and says so in the file
//! and the log. In the stepper it codes and writes each frame at once, in the stepper's
//! thread: every frame, the same bytes on every run. Either way the recording is closed whole
//! when the world stops (the recorder is dropped with it), and its
//! [`RecordingHandle`] says so and where.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::protocol::recording::{Event, FrameIn, RecordWriter, RecordingHeader};
use crate::protocol::session::PROTOCOL_VERSION;
use crate::protocol::snapshot::{Schema, WorldSnapshot};
use crate::server::game::world::{RecordingClosed, RecordingHandle, RecordingState, Tap};
use crate::server::ops::metrics::ServerMetrics;

/// Frames waiting for the writer, at most, per recording (four seconds of a world at 60 Hz).
pub(crate) const RECORDER_QUEUE: usize = 256;

/// Seconds between keyframes in a recording.
pub(crate) const KEYFRAME_SECONDS: u32 = 2;

/// How often the writer thread takes what the recordings queued.
const WRITER_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

struct Job {
    tick: u32,
    snapshot: Option<Arc<WorldSnapshot>>,
    events: Vec<Event>,
    after_gap: bool,
}

/// What a recorder and the writer thread share of one recording: the frames waiting (a
/// plain locked queue: queuing a frame costs the tick no system call, the writer takes them
/// every [`WRITER_PERIOD`]), whether the recorder is gone, whether the writer gave up, and
/// the frames the recorder left out.
#[derive(Default)]
struct Shared {
    queue: Mutex<std::collections::VecDeque<Job>>,
    closed: AtomicBool,
    failed: AtomicBool,
    left_out: AtomicU64,
}

/// One recording's file and coder: held by the writer thread (on the server), or by the
/// recorder itself (in the stepper, which writes each frame as its world ticks).
struct Open {
    writer: RecordWriter,
    out: Box<dyn Write + Send>,
    metrics: Option<Arc<ServerMetrics>>,
    handle: RecordingHandle,
    path: PathBuf,
    frames: u64,
    bytes: u64,
}

impl Open {
    fn count(&self, i: usize, n: u64) {
        if let Some(m) = &self.metrics {
            m.recording[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Codes and writes `jobs`, then (`finish`) the file's end, flushed, and the handle says
    /// it is closed. An error is counted, logged and told to the handle; false then.
    fn write(&mut self, jobs: &[Job], finish: Option<u64>) -> bool {
        let mut chunks = Vec::new();
        for job in jobs {
            let frame = FrameIn {
                tick: job.tick,
                snapshot: job.snapshot.as_ref(),
                events: &job.events,
                after_gap: job.after_gap,
            };
            chunks.extend(self.writer.push(frame));
        }
        self.frames += jobs.len() as u64;
        self.count(0, jobs.len() as u64);
        if finish.is_some() {
            chunks.extend(self.writer.finish());
        }
        for c in chunks {
            if let Err(e) = self.out.write_all(&c) {
                self.fail(&e.to_string());
                return false;
            }
            self.bytes += c.len() as u64;
            self.count(2, c.len() as u64);
        }
        if let Some(left_out) = finish {
            if let Err(e) = self.out.flush() {
                self.fail(&e.to_string());
                return false;
            }
            let closed = RecordingClosed { path: self.path.clone(), frames: self.frames, left_out, bytes: self.bytes };
            tracing::info!(path = %self.path.display(), frames = self.frames, left_out, bytes = self.bytes, "a recording closed");
            self.handle.set(RecordingState::Closed(closed));
        }
        true
    }

    fn fail(&self, error: &str) {
        tracing::error!(path = %self.path.display(), error, "a recording could not be written; it stops here");
        self.count(3, 1);
        self.handle.set(RecordingState::Failed { path: Some(self.path.clone()), error: error.to_owned() });
    }
}

/// One recording as the writer thread holds it.
struct Writing {
    shared: Arc<Shared>,
    open: Open,
}

/// The process's recording writer: one thread for every recording on the server, so fifty
/// recorded worlds cost one thread waking a hundred times a second, not fifty threads woken
/// at every tick. Each recording is written under its own panic guard: a fault while coding
/// or writing one ends that recording alone (counted as a write error, told to its handle),
/// and the thread goes on with the others.
fn writer_thread() -> Option<&'static Mutex<Vec<Writing>>> {
    static NEW: std::sync::OnceLock<Option<&'static Mutex<Vec<Writing>>>> = std::sync::OnceLock::new();
    *NEW.get_or_init(|| {
        let new: &'static Mutex<Vec<Writing>> = Box::leak(Box::default());
        let started = std::thread::Builder::new().name("volley-recorder".into()).spawn(move || {
            let mut open: Vec<Writing> = Vec::new();
            loop {
                std::thread::sleep(WRITER_PERIOD);
                if let Ok(mut n) = new.lock() {
                    open.append(&mut n);
                }
                open.retain_mut(|r| match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_queued(r))) {
                    Ok(more) => more,
                    Err(panic) => {
                        let why = crate::server::cores::simulation::panic_text(&*panic);
                        r.shared.failed.store(true, Ordering::Relaxed);
                        r.open.fail(&format!("the recording's writer panicked: {why}"));
                        false
                    }
                });
            }
        });
        match started {
            Ok(_) => Some(new),
            Err(e) => {
                tracing::error!(error = %e, "the recording thread did not start: nothing is recorded");
                None
            }
        }
    })
}

/// Writes what one recording queued; false once it is finished (closed and written) or failed.
fn write_queued(r: &mut Writing) -> bool {
    // Closed before taking the queue: whatever it holds then is all there will be.
    let closed = r.shared.closed.load(Ordering::Acquire);
    let jobs: Vec<Job> = r.shared.queue.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default();
    let finish = closed.then(|| r.shared.left_out.load(Ordering::Relaxed));
    if !r.open.write(&jobs, finish) {
        r.shared.failed.store(true, Ordering::Relaxed);
        return false;
    }
    !closed
}

/// How a recorder's frames reach its file.
enum Output {
    /// Queued for the writer thread (the server: a tick never waits for the disk).
    Thread(Arc<Shared>),
    /// Written at once, in the caller's thread (the stepper: every frame, deterministically;
    /// `None` once writing failed).
    Inline(Option<Box<Open>>),
}

/// Where a recording goes and how it is written.
pub(crate) struct RecordTo<'a> {
    /// The folder of its file.
    pub dir: &'a Path,
    /// Told how it goes.
    pub handle: RecordingHandle,
    /// Written in the caller's thread, every frame as it comes (the stepper), rather than
    /// queued for the writer thread (the server).
    pub inline: bool,
}

/// Records one world into a file (or any writer).
pub(crate) struct Recorder {
    output: Output,
    /// The writer fell behind: only keyframes go until it catches up.
    behind: bool,
    /// Frames were left out since the last one queued.
    gap: bool,
    left_out: u64,
    keyframe_every: u32,
    last_key: Option<u32>,
    metrics: Option<Arc<ServerMetrics>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        match &mut self.output {
            // The writer finishes the file with what is queued.
            Output::Thread(shared) => {
                shared.left_out.store(self.left_out, Ordering::Relaxed);
                shared.closed.store(true, Ordering::Release);
            }
            Output::Inline(open) => {
                if let Some(open) = open {
                    open.write(&[], Some(0));
                }
            }
        }
    }
}

/// What a recording is of.
pub(crate) struct RecordingOf<'a> {
    /// The world's schema.
    pub schema: Arc<Schema>,
    /// Its kind.
    pub kind: &'a str,
    /// Its scoreboard's columns (none: no scoreboard).
    pub columns: Vec<String>,
    /// The server's tick rate.
    pub tick_rate_hz: u16,
    /// Server ticks per world tick.
    pub stride: u32,
}

/// Starts recording world `id` into a new file in `to.dir` as one of its taps
/// ([`WorldOptions::recorded`](crate::server::WorldOptions::recorded)), on the server and in the
/// stepper alike: a folder that cannot be written is logged, counted and told to the
/// handle, and the world runs on unrecorded.
pub(crate) fn record_into(
    taps: &mut impl FnMut(Box<dyn Tap>),
    to: RecordTo<'_>,
    id: crate::server::WorldId,
    of: RecordingOf<'_>,
    metrics: Option<Arc<ServerMetrics>>,
) {
    let handle = to.handle.clone();
    match Recorder::to_dir(to, id.number(), of, metrics.clone()) {
        Ok((recorder, path)) => {
            tracing::info!(world = %id, path = %path.display(), "recording");
            taps(Box::new(recorder));
        }
        Err((e, dir)) => {
            if let Some(m) = metrics {
                m.recording[3].fetch_add(1, Ordering::Relaxed);
            }
            tracing::error!(world = %id, dir = %dir.display(), error = %e, "the world cannot be recorded");
            handle.set(RecordingState::Failed { path: None, error: e.to_string() });
        }
    }
}

impl Recorder {
    /// Records into a new file in `to.dir` named after the world's kind, number and the
    /// time; returns the recorder and the file's path.
    fn to_dir(
        to: RecordTo<'_>,
        world: u16,
        of: RecordingOf<'_>,
        metrics: Option<Arc<ServerMetrics>>,
    ) -> Result<(Self, PathBuf), (std::io::Error, PathBuf)> {
        let dir = to.dir.to_owned();
        let opened = (|| {
            std::fs::create_dir_all(&dir)?;
            let ms = unix_ms();
            let kind: String =
                of.kind.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
            let path = dir.join(format!("{kind}-{world}-{ms}.vrec"));
            let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
            Ok((file, path))
        })();
        let (file, path) = opened.map_err(|e| (e, dir.clone()))?;
        let recorder = Self::start(file, path.clone(), to.handle, to.inline, of, metrics).map_err(|e| (e, dir))?;
        Ok((recorder, path))
    }

    /// Records into `out` (a file, or memory for tests), called `path` in what it tells
    /// `handle`; `inline`: written in the caller's thread as each frame comes.
    pub(crate) fn start(
        mut out: impl Write + Send + 'static,
        path: PathBuf,
        handle: RecordingHandle,
        inline: bool,
        of: RecordingOf<'_>,
        metrics: Option<Arc<ServerMetrics>>,
    ) -> std::io::Result<Self> {
        let keyframe_every = u32::from(of.tick_rate_hz) * KEYFRAME_SECONDS;
        let header = RecordingHeader {
            protocol: PROTOCOL_VERSION,
            schema: of.schema.fingerprint(),
            tick_rate_hz: of.tick_rate_hz,
            stride: u16::try_from(of.stride.max(1)).unwrap_or(u16::MAX),
            started_unix_ms: unix_ms(),
            keyframe_every,
            kind: of.kind.to_owned(),
            columns: of.columns.clone(),
        };
        let (writer, head) = RecordWriter::new(of.schema, &header);
        out.write_all(&head)?;
        if let Some(m) = &metrics {
            m.recording[2].fetch_add(head.len() as u64, Ordering::Relaxed);
        }
        handle.set(RecordingState::Writing(path.clone()));
        let open = Open {
            writer,
            out: Box::new(out),
            metrics: metrics.clone(),
            handle,
            path,
            frames: 0,
            bytes: head.len() as u64,
        };
        let output = if inline {
            Output::Inline(Some(Box::new(open)))
        } else {
            let new = writer_thread().ok_or_else(|| std::io::Error::other("the recording thread did not start"))?;
            let shared = Arc::new(Shared::default());
            new.lock()
                .map_err(|_| std::io::Error::other("the recording thread failed"))?
                .push(Writing { shared: shared.clone(), open });
            Output::Thread(shared)
        };
        Ok(Self {
            output,
            behind: false,
            gap: false,
            left_out: 0,
            keyframe_every: keyframe_every.max(1),
            last_key: None,
            metrics,
        })
    }

    fn dropped(&mut self) {
        self.gap = true;
        self.left_out += 1;
        if let Some(m) = &self.metrics {
            m.recording[1].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Tap for Recorder {
    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        let shared = match &mut self.output {
            Output::Inline(open) => {
                let Some(o) = open else { return false };
                let job = Job { tick, snapshot: snapshot.cloned(), events: events.to_vec(), after_gap: false };
                if !o.write(std::slice::from_ref(&job), None) {
                    *open = None;
                    return false;
                }
                return true;
            }
            Output::Thread(shared) => shared.clone(),
        };
        if shared.failed.load(Ordering::Relaxed) {
            return false;
        }
        let due = self.last_key.is_none_or(|k| tick.wrapping_sub(k) >= self.keyframe_every);
        if self.behind && (!due || snapshot.is_none()) {
            self.dropped();
            return true;
        }
        let Ok(mut queue) = shared.queue.lock() else { return false };
        let waiting = queue.len();
        if waiting >= RECORDER_QUEUE {
            drop(queue);
            if !self.behind {
                tracing::warn!(tick, "a recording's disk fell behind: keeping keyframes only until it catches up");
            }
            self.behind = true;
            self.dropped();
            return true;
        }
        let after_gap = std::mem::take(&mut self.gap);
        if (after_gap || due) && snapshot.is_some() {
            self.last_key = Some(tick);
        }
        queue.push_back(Job { tick, snapshot: snapshot.cloned(), events: events.to_vec(), after_gap });
        drop(queue);
        if self.behind && waiting < RECORDER_QUEUE / 4 {
            self.behind = false;
            tracing::info!(tick, "a recording caught up: every tick is recorded again");
        }
        true
    }
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A writer into shared memory (the stepper's recordings, tests).
#[derive(Debug, Clone, Default)]
pub struct SharedBuffer(pub Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::protocol::recording::{Playhead, Recording};
    use crate::protocol::snapshot::SnapshotBuilder;

    crate::replicated! {
        /// A counter.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Count {
            /// Its value.
            pub n: u32 = crate::protocol::quant::Bits(20),
        }
    }

    /// A disk that stalls while `stalled` is set.
    struct SlowDisk {
        out: SharedBuffer,
        stalled: Arc<AtomicBool>,
    }

    impl Write for SlowDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            while self.stalled.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.out.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A writer that panics once it has taken `after` writes.
    struct Panicky {
        after: usize,
        writes: usize,
    }

    impl Write for Panicky {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.writes += 1;
            assert!(self.writes <= self.after, "the disk's driver panics");
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_panic_while_writing_one_recording_ends_that_one_alone() {
        let mut schema = Schema::new();
        schema.register::<Count>().unwrap();
        let schema = Arc::new(schema);
        let of =
            || RecordingOf { schema: schema.clone(), kind: "test", columns: Vec::new(), tick_rate_hz: 60, stride: 1 };
        let (bad, good) = (RecordingHandle::default(), RecordingHandle::default());
        // The header is the first write; the first chunk, two seconds in, panics.
        let mut broken =
            Recorder::start(Panicky { after: 1, writes: 0 }, "broken".into(), bad.clone(), false, of(), None).unwrap();
        let out = SharedBuffer::default();
        let mut fine = Recorder::start(out.clone(), "fine".into(), good.clone(), false, of(), None).unwrap();
        let frame = |t: u32| {
            let mut b = SnapshotBuilder::new(&schema, t);
            b.insert(1, &Count { n: t }).unwrap();
            Arc::new(b.finish().unwrap())
        };
        for t in 1..=300 {
            broken.frame(t, Some(&frame(t)), &[]);
            assert!(fine.frame(t, Some(&frame(t)), &[]));
            if t % 50 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        drop(broken);
        drop(fine);
        let RecordingState::Failed { error, .. } = bad.wait_closed(std::time::Duration::from_secs(5)) else {
            panic!("the broken recording failed: {:?}", bad.state())
        };
        assert!(error.contains("panicked") && error.contains("driver"), "{error}");
        // The other recording, on the same thread, was written whole.
        let RecordingState::Closed(c) = good.wait_closed(std::time::Duration::from_secs(5)) else {
            panic!("the other recording closed: {:?}", good.state())
        };
        assert_eq!(c.frames, 300);
        let file = out.0.lock().unwrap().clone();
        assert_eq!(Recording::parse(file.into(), Some(&schema)).unwrap().ticks(), Some((1, 300)));
        // And the thread takes new recordings after it.
        let again = RecordingHandle::default();
        let r = Recorder::start(SharedBuffer::default(), "again".into(), again.clone(), false, of(), None).unwrap();
        drop(r);
        assert!(matches!(again.wait_closed(std::time::Duration::from_secs(5)), RecordingState::Closed(_)));
    }

    #[test]
    fn a_stalled_disk_costs_frames_not_ticks_keyframes_go_on_and_the_file_says_so() {
        let mut schema = Schema::new();
        schema.register::<Count>().unwrap();
        let schema = Arc::new(schema);
        let stalled = Arc::new(AtomicBool::new(false));
        let out = SharedBuffer::default();
        let disk = SlowDisk { out: out.clone(), stalled: stalled.clone() };
        let of = RecordingOf { schema: schema.clone(), kind: "test", columns: Vec::new(), tick_rate_hz: 60, stride: 1 };
        let handle = RecordingHandle::default();
        let mut rec = Recorder::start(disk, PathBuf::new(), handle.clone(), false, of, None).unwrap();
        stalled.store(true, Ordering::Relaxed);
        let frame = |t: u32| {
            let mut b = SnapshotBuilder::new(&schema, t);
            for i in 0..10u32 {
                b.insert(i, &Count { n: t + i }).unwrap();
            }
            Arc::new(b.finish().unwrap())
        };
        // The disk stalls for 1200 ticks (the header is written before): every tick's frame is
        // taken at once, and the recorder falls behind to keyframes only.
        let started = std::time::Instant::now();
        for t in 1..=1200 {
            assert!(rec.frame(t, Some(&frame(t)), &[]));
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "no tick waited for the disk");
        assert!(rec.behind, "it noticed");
        stalled.store(false, Ordering::Relaxed);
        // Then the disk keeps up: the recorder catches up and records every tick again.
        for t in 1201..=1800 {
            assert!(rec.frame(t, Some(&frame(t)), &[]));
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        assert!(!rec.behind, "it caught up");
        drop(rec);
        let closed = handle.wait_closed(std::time::Duration::from_secs(5));
        let RecordingState::Closed(closed) = closed else { panic!("closed: {closed:?}") };
        assert!(closed.left_out > 0 && closed.frames + closed.left_out == 1800, "{closed:?}");
        let mut file = Vec::new();
        for _ in 0..200 {
            file = out.0.lock().unwrap().clone();
            if Recording::parse(file.clone().into(), None).is_ok_and(|r| r.ticks().is_some_and(|t| t.1 == 1800)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let recording = Recording::parse(file.into(), Some(&schema)).unwrap();
        let sizes = recording.sizes().unwrap();
        assert!(sizes.frames < 1800 && sizes.frames > 700, "frames left out while behind: {sizes:?}");
        let mut head = Playhead::new(recording, schema.clone()).unwrap();
        let (mut notes, mut seen, mut last) = (0, 0, 0);
        head.advance_to(1800, |f| {
            seen += 1;
            last = f.tick;
            notes += f.events.iter().filter(|e| matches!(e, Event::Note(_))).count();
            assert_eq!(*f.snapshot, *frame(f.tick).as_ref(), "tick {} as it was", f.tick);
        })
        .unwrap();
        assert!(notes > 0, "the file says frames were left out");
        assert_eq!(last, 1800, "every tick after catching up is there");
        assert!(seen > 600);
    }
}
