//! Recording a world while it runs. The world's shell hands each tick's frame (its snapshot,
//! already shared with the players, and what happened) to its [`Tap`]s; a [`Recorder`] is
//! one, which passes the frame to a thread of its own that codes and writes it
//! ([`RecordWriter`]), so a tick never waits for the disk. The queue between them is bounded:
//! when it fills, the recorder keeps one frame per keyframe interval (each coded whole)
//! until the writer catches up, counts what it left out and says so in the file and the log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::metrics::ServerMetrics;
use super::world::{Audience, Outgoing};
use crate::protocol::recording::{Event, FrameIn, Header, Recipient, RecordWriter};
use crate::protocol::session::PROTOCOL_VERSION;
use crate::protocol::snapshot::{Schema, WorldSnapshot};

/// Something that takes a world's frames, one per tick, on the tick's path (so it must not
/// block).
pub(crate) trait Tap: Send {
    /// The frame of `tick`; false once the tap is done with (its writer or reader is gone).
    fn frame(&mut self, tick: u32, snapshot: Option<&Arc<WorldSnapshot>>, events: &[Event]) -> bool;
}

/// A tap on its way to a world.
pub(crate) struct TapBox(pub Box<dyn Tap>);

impl std::fmt::Debug for TapBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TapBox")
    }
}

/// The recorded form of a message a world sent.
pub(crate) fn message_event((to, data, reliable): &Outgoing) -> Event {
    let to = match *to {
        Audience::All => Recipient::All,
        Audience::Team(t) => Recipient::Team(t),
        Audience::Watchers => Recipient::Watchers,
        Audience::Player(p) => Recipient::Player(p),
    };
    Event::Message { to, reliable: *reliable, data: data.clone() }
}

/// Frames waiting for the writer, at most (a few seconds of a world at 60 Hz).
pub const RECORDER_QUEUE: usize = 256;

/// Seconds between keyframes in a recording.
pub const KEYFRAME_SECONDS: u32 = 2;

struct Job {
    tick: u32,
    snapshot: Option<Arc<WorldSnapshot>>,
    events: Vec<Event>,
    after_gap: bool,
}

/// Records one world into a file (or any writer) from a thread of its own.
pub(crate) struct Recorder {
    tx: SyncSender<Job>,
    queued: Arc<AtomicUsize>,
    /// The writer fell behind: only keyframes go until it catches up.
    behind: bool,
    /// Frames were left out since the last one queued.
    gap: bool,
    keyframe_every: u32,
    last_queued: Option<u32>,
    last_key: Option<u32>,
    metrics: Option<Arc<ServerMetrics>>,
}

/// What a recording is of.
pub(crate) struct RecordingOf<'a> {
    /// The world's schema.
    pub schema: Arc<Schema>,
    /// Its kind.
    pub kind: &'a str,
    /// The server's tick rate.
    pub tick_rate_hz: u16,
    /// Server ticks per world tick.
    pub stride: u32,
}

impl Recorder {
    /// Records into a new file in `dir` named after the world's kind, number and the time;
    /// returns the recorder and the file's path.
    pub fn to_dir(
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
    pub fn start(
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
        };
        let (mut writer, head) = RecordWriter::new(of.schema, &header);
        out.write_all(&head)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(RECORDER_QUEUE);
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        let m = metrics.clone();
        std::thread::Builder::new().name("volley-recorder".into()).spawn(move || {
            let add = |i: usize, n: u64| {
                if let Some(m) = &m {
                    m.recording[i].fetch_add(n, Ordering::Relaxed);
                }
            };
            add(2, head.len() as u64);
            let mut write = |chunk: Option<Vec<u8>>| -> bool {
                let Some(c) = chunk else { return true };
                match out.write_all(&c) {
                    Ok(()) => {
                        add(2, c.len() as u64);
                        true
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "a recording could not be written; it stops here");
                        add(3, 1);
                        false
                    }
                }
            };
            for job in rx.iter() {
                q.fetch_sub(1, Ordering::Relaxed);
                let chunk = writer.push(FrameIn {
                    tick: job.tick,
                    snapshot: job.snapshot.as_ref(),
                    events: &job.events,
                    after_gap: job.after_gap,
                });
                add(0, 1);
                if !write(chunk) {
                    return;
                }
            }
            if write(writer.finish()) {
                let _ = out.flush();
            }
        })?;
        Ok(Self {
            tx,
            queued,
            behind: false,
            gap: false,
            keyframe_every: keyframe_every.max(1),
            last_queued: None,
            last_key: None,
            metrics,
        })
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
        if self.behind {
            let due = self.last_key.is_none_or(|k| tick.wrapping_sub(k) >= self.keyframe_every);
            if !due || snapshot.is_none() {
                self.dropped();
                return true;
            }
        }
        let job = Job {
            tick,
            snapshot: snapshot.cloned(),
            events: events.to_vec(),
            after_gap: std::mem::take(&mut self.gap),
        };
        let keyframe = job.after_gap || self.last_key.is_none_or(|k| tick.wrapping_sub(k) >= self.keyframe_every);
        self.queued.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(job) {
            Ok(()) => {
                if keyframe && snapshot.is_some() {
                    self.last_key = Some(tick);
                }
                self.last_queued = Some(tick);
                if self.behind && self.queued.load(Ordering::Relaxed) < RECORDER_QUEUE / 4 {
                    self.behind = false;
                    tracing::info!(tick, "a recording caught up: every tick is recorded again");
                }
                true
            }
            Err(TrySendError::Full(_)) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                if !self.behind {
                    tracing::warn!(tick, "a recording's disk fell behind: keeping keyframes only until it catches up");
                }
                self.behind = true;
                self.dropped();
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
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
