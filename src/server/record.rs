//! Recording a world while it runs. The world's shell hands each tick's frame (its snapshot,
//! already shared with the players, and what happened) to its [`Tap`]s; a [`Recorder`] is
//! one, which queues the frame for the process's recording thread, which codes and writes it
//! ([`RecordWriter`]), so a tick never waits for the disk. Each recording's queue is bounded:
//! when it fills, the recorder keeps one frame per keyframe interval (each coded whole)
//! until the writer catches up, counts what it left out and says so in the file and the log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::metrics::ServerMetrics;
use super::world::Tap;
use crate::protocol::recording::{Event, FrameIn, Header, RecordWriter};
use crate::protocol::session::PROTOCOL_VERSION;
use crate::protocol::snapshot::{Schema, WorldSnapshot};

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
/// every [`WRITER_PERIOD`]), whether the recorder is gone, whether the writer gave up.
#[derive(Default)]
struct Shared {
    queue: Mutex<std::collections::VecDeque<Job>>,
    closed: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
}

/// One recording as the writer thread holds it.
struct Open {
    shared: Arc<Shared>,
    writer: RecordWriter,
    out: Box<dyn Write + Send>,
    metrics: Option<Arc<ServerMetrics>>,
}

/// The process's recording writer: one thread for every recording, so fifty recorded worlds
/// cost one thread waking a hundred times a second, not fifty threads woken at every tick.
fn writer_thread() -> Option<&'static Mutex<Vec<Open>>> {
    static NEW: std::sync::OnceLock<Option<&'static Mutex<Vec<Open>>>> = std::sync::OnceLock::new();
    *NEW.get_or_init(|| {
        let new: &'static Mutex<Vec<Open>> = Box::leak(Box::default());
        let started = std::thread::Builder::new().name("volley-recorder".into()).spawn(move || {
            let mut open: Vec<Open> = Vec::new();
            loop {
                std::thread::sleep(WRITER_PERIOD);
                if let Ok(mut n) = new.lock() {
                    open.append(&mut n);
                }
                open.retain_mut(write_queued);
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
fn write_queued(r: &mut Open) -> bool {
    let add = |m: &Option<Arc<ServerMetrics>>, i: usize, n: u64| {
        if let Some(m) = m {
            m.recording[i].fetch_add(n, Ordering::Relaxed);
        }
    };
    // Closed before taking the queue: whatever it holds then is all there will be.
    let closed = r.shared.closed.load(Ordering::Acquire);
    let jobs: Vec<Job> = r.shared.queue.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default();
    let mut chunks = Vec::new();
    for job in &jobs {
        let frame =
            FrameIn { tick: job.tick, snapshot: job.snapshot.as_ref(), events: &job.events, after_gap: job.after_gap };
        chunks.extend(r.writer.push(frame));
    }
    add(&r.metrics, 0, jobs.len() as u64);
    drop(jobs);
    if closed {
        chunks.extend(r.writer.finish());
    }
    for c in chunks {
        if let Err(e) = r.out.write_all(&c) {
            tracing::error!(error = %e, "a recording could not be written; it stops here");
            add(&r.metrics, 3, 1);
            r.shared.failed.store(true, Ordering::Relaxed);
            return false;
        }
        add(&r.metrics, 2, c.len() as u64);
    }
    if closed {
        let _ = r.out.flush();
    }
    !closed
}

/// Records one world into a file (or any writer), written by the recording thread.
pub(crate) struct Recorder {
    shared: Arc<Shared>,
    /// The writer fell behind: only keyframes go until it catches up.
    behind: bool,
    /// Frames were left out since the last one queued.
    gap: bool,
    keyframe_every: u32,
    last_key: Option<u32>,
    metrics: Option<Arc<ServerMetrics>>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // The writer finishes the file with what is queued.
        self.shared.closed.store(true, Ordering::Release);
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

/// Starts recording world `id` into a new file in `dir` as one of its taps
/// ([`WorldOptions::recorded`](super::WorldOptions::recorded)), on the server and in the
/// stepper alike: a folder that cannot be written is logged and counted, and the world runs
/// on unrecorded.
pub(crate) fn record_into(
    taps: &mut impl FnMut(Box<dyn Tap>),
    dir: &Path,
    id: super::WorldId,
    of: RecordingOf<'_>,
    metrics: Option<Arc<ServerMetrics>>,
) {
    match Recorder::to_dir(dir, id.number(), of, metrics.clone()) {
        Ok((recorder, path)) => {
            tracing::info!(world = %id, path = %path.display(), "recording");
            taps(Box::new(recorder));
        }
        Err(e) => {
            if let Some(m) = metrics {
                m.recording[3].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::error!(world = %id, dir = %dir.display(), error = %e, "the world cannot be recorded");
        }
    }
}

impl Recorder {
    /// Records into a new file in `dir` named after the world's kind, number and the time;
    /// returns the recorder and the file's path.
    pub(crate) fn to_dir(
        dir: &Path,
        world: u16,
        of: RecordingOf<'_>,
        metrics: Option<Arc<ServerMetrics>>,
    ) -> std::io::Result<(Self, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let ms = unix_ms();
        let kind: String =
            of.kind.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let path = dir.join(format!("{kind}-{world}-{ms}.vrec"));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
        Ok((Self::start(file, of, metrics)?, path))
    }

    /// Records into `out` (a file, or memory for tests).
    pub(crate) fn start(
        mut out: impl Write + Send + 'static,
        of: RecordingOf<'_>,
        metrics: Option<Arc<ServerMetrics>>,
    ) -> std::io::Result<Self> {
        let keyframe_every = u32::from(of.tick_rate_hz) * KEYFRAME_SECONDS;
        let header = Header {
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
        let new = writer_thread().ok_or_else(|| std::io::Error::other("the recording thread did not start"))?;
        let shared = Arc::new(Shared::default());
        let open = Open { shared: shared.clone(), writer, out: Box::new(out), metrics: metrics.clone() };
        new.lock().map_err(|_| std::io::Error::other("the recording thread failed"))?.push(open);
        Ok(Self { shared, behind: false, gap: false, keyframe_every: keyframe_every.max(1), last_key: None, metrics })
    }

    fn dropped(&mut self) {
        self.gap = true;
        if let Some(m) = &self.metrics {
            m.recording[1].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Tap for Recorder {
    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool {
        if self.shared.failed.load(Ordering::Relaxed) {
            return false;
        }
        let due = self.last_key.is_none_or(|k| tick.wrapping_sub(k) >= self.keyframe_every);
        if self.behind && (!due || snapshot.is_none()) {
            self.dropped();
            return true;
        }
        let Ok(mut queue) = self.shared.queue.lock() else { return false };
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

    #[test]
    fn a_stalled_disk_costs_frames_not_ticks_keyframes_go_on_and_the_file_says_so() {
        let mut schema = Schema::new();
        schema.register::<Count>().unwrap();
        let schema = Arc::new(schema);
        let stalled = Arc::new(AtomicBool::new(false));
        let out = SharedBuffer::default();
        let disk = SlowDisk { out: out.clone(), stalled: stalled.clone() };
        let of = RecordingOf { schema: schema.clone(), kind: "test", columns: Vec::new(), tick_rate_hz: 60, stride: 1 };
        let mut rec = Recorder::start(disk, of, None).unwrap();
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
