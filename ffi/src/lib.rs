//! volley's client as a C library: what a game in C, C++, C# (P/Invoke: Unity, Godot .NET),
//! GDExtension or Python (`ctypes`) links to talk to a volley server.
//!
//! It wraps [`volley::client::polled::PolledClient`], the Rust client a game loop polls once
//! a frame: one call per frame takes every datagram waiting, runs the timers and sends the
//! frame's input. Entities come out decoded into numbers (positions in metres, rotations as
//! quaternions) and blended between snapshots exactly as the Rust client draws them, from
//! the game's schema as JSON (`volley schema` prints the arena's; [`Schema::to_json`] any
//! game's).
//!
//! The rules every entry point keeps (the header `include/volley.h` says them again):
//! - **Handles, not pointers.** A client is a `uint64_t` handle; one that was never made or
//!   was freed is refused with [`VOLLEY_ERR_HANDLE`], never dereferenced.
//! - **Errors are codes.** Every function returns an `int32_t`: 0 or a count on success, a
//!   negative `VOLLEY_ERR_*` on failure; [`volley_last_error`] copies the message of this
//!   thread's last failure.
//! - **No panic crosses the boundary.** Each entry point catches one and returns
//!   [`VOLLEY_ERR_INTERNAL`]; the client it happened in is closed.
//! - **The caller owns every buffer.** Nothing this library returns needs freeing except a
//!   client (with [`volley_client_free`]); it writes only into arrays the caller passes, with
//!   their capacity, and says how much it needed when they are too small.
//!
//! [`Schema::to_json`]: volley::protocol::snapshot::Schema::to_json

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::client::polled::PolledClient;
use volley::client::{GameClient, LinkStatus};
use volley::protocol::netcode::token::ConnectToken;
use volley::protocol::snapshot::{EntityId, KindId, Schema};
use volley::server::unix_now;

/// Success (or: nothing to report).
pub const VOLLEY_OK: i32 = 0;
/// A pointer that must not be null was null.
pub const VOLLEY_ERR_NULL: i32 = -1;
/// No such client: never made, or freed already.
pub const VOLLEY_ERR_HANDLE: i32 = -2;
/// The schema JSON could not be read, or does not describe a schema volley can code.
pub const VOLLEY_ERR_SCHEMA: i32 = -3;
/// The connect token could not be read (it must be the 2048 bytes the backend or
/// `volley token --out` gives).
pub const VOLLEY_ERR_TOKEN: i32 = -4;
/// A buffer passed was too small; the size needed was written where the call says.
pub const VOLLEY_ERR_TOO_SMALL: i32 = -5;
/// No such kind in the schema.
pub const VOLLEY_ERR_KIND: i32 = -6;
/// Not possible in the client's state (a message before the session is established).
pub const VOLLEY_ERR_STATE: i32 = -7;
/// The socket could not be made (the message says why).
pub const VOLLEY_ERR_IO: i32 = -8;
/// A message was refused: too long, or too many waiting to be sent.
pub const VOLLEY_ERR_MESSAGE: i32 = -9;
/// A text argument was not UTF-8.
pub const VOLLEY_ERR_UTF8: i32 = -10;
/// An internal fault was caught (a bug in volley): the client is closed.
pub const VOLLEY_ERR_INTERNAL: i32 = -11;

/// [`volley_client_status`]: connecting (or negotiating the session).
pub const VOLLEY_CONNECTING: i32 = 0;
/// [`volley_client_status`]: connected, snapshots flow.
pub const VOLLEY_CONNECTED: i32 = 1;
/// [`volley_client_status`]: the session ended ([`volley_client_end_reason`] says why).
pub const VOLLEY_ENDED: i32 = 2;
/// [`volley_client_status`]: the connection dropped (the server silent for a second, or the
/// socket moved) and the client is resuming its session with its resume ticket, the same
/// player; [`VOLLEY_CONNECTED`] again once it is back ([`volley_client_resumes`] counts), or
/// [`VOLLEY_ENDED`] when the server's grace ran out.
pub const VOLLEY_RESUMING: i32 = 3;

/// A client's figures, as [`volley_client_stats`] writes them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VolleyStats {
    /// Smoothed round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Packet loss seen by the server, 0 to 1.
    pub loss: f64,
    /// Snapshots decoded.
    pub snapshots: u64,
    /// Snapshots that could not be decoded.
    pub snapshot_errors: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Frames drawn between two snapshots, and carried on past the newest.
    pub frames_interpolated: u64,
    /// See `frames_interpolated`.
    pub frames_extrapolated: u64,
    /// How far behind the server the picture is drawn, in ticks.
    pub render_delay_ticks: f64,
    /// How much the round-trip time varies, milliseconds.
    pub jitter_ms: f64,
    /// How far behind the server the picture is drawn, milliseconds (`render_delay_ticks`
    /// at the session's tick rate; 0 before the session is agreed).
    pub render_delay_ms: f64,
}

/// One client and the scratch its calls reuse.
struct Entry {
    polled: PolledClient,
    /// Entity ids and decoded values of the last `volley_client_entities` call.
    ids: Vec<EntityId>,
    values: Vec<f64>,
    /// A message taken from the channel that did not fit the caller's buffer.
    held: Option<(bytes::Bytes, bool)>,
    /// A world notice taken that did not fit the caller's buffer.
    held_notice: Option<volley::protocol::system::WorldNotice>,
    /// Whose clock the client runs on, settled by the first call that takes the time.
    clock: Clock,
}

/// A client's clock: the system's (`volley_client_poll`, `volley_client_entities`) or the
/// caller's (the `_at` calls). One client keeps to one.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// No call has taken the time yet.
    Unset,
    System,
    /// The caller's microseconds: the first given was `first`, and the client's time was
    /// `base` then; `last` is the newest given (for the goodbye at `volley_client_free`).
    Caller {
        first: u64,
        base: Duration,
        last: u64,
    },
}

impl Entry {
    /// The client's time now on the system clock, or a refusal when it runs on the caller's.
    fn system_now(&mut self) -> Result<Duration, Fail> {
        match self.clock {
            Clock::Caller { .. } => fail(
                VOLLEY_ERR_STATE,
                "this client runs on the caller's clock (a _at call came first): keep to the _at calls",
            ),
            _ => {
                self.clock = Clock::System;
                Ok(unix_now())
            }
        }
    }

    /// The client's time at the caller's `now_us`, or a refusal when it runs on the system
    /// clock. The caller's clock may start anywhere; its first reading is placed at the
    /// system's time then (the client was made on that), and it must never go back.
    fn caller_now(&mut self, now_us: u64) -> Result<Duration, Fail> {
        match self.clock {
            Clock::System => fail(
                VOLLEY_ERR_STATE,
                "this client runs on the system clock (volley_client_poll or volley_client_entities came first): keep to those calls",
            ),
            Clock::Unset => {
                let base = unix_now();
                self.clock = Clock::Caller { first: now_us, base, last: now_us };
                Ok(base)
            }
            Clock::Caller { first, base, last } => {
                if now_us < last {
                    return fail(
                        VOLLEY_ERR_STATE,
                        format!("the time went back: {now_us} µs after {last} µs (the clock must never go back)"),
                    );
                }
                self.clock = Clock::Caller { first, base, last: now_us };
                Ok(base + Duration::from_micros(now_us - first))
            }
        }
    }

    /// The time to say goodbye at: the newest the client was given.
    fn goodbye_now(&self) -> Duration {
        match self.clock {
            Clock::Caller { first, base, last } => base + Duration::from_micros(last - first),
            _ => unix_now(),
        }
    }
}

/// Every live client by handle. Handles count up from 1 and are never reused, so a freed
/// one stays refused.
struct Registry {
    next: u64,
    clients: BTreeMap<u64, Arc<Mutex<Entry>>>,
}

static CLIENTS: Mutex<Registry> = Mutex::new(Registry { next: 1, clients: BTreeMap::new() });

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A failure: its code and its message (kept for `volley_last_error`).
struct Fail(i32, String);

fn fail<T>(code: i32, message: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(code, message.into()))
}

/// Runs an entry point's body: a failure's message is kept for this thread, a panic is
/// caught (and its client, if any, closed by the poisoned lock).
fn guard(body: impl FnOnce() -> Result<i32, Fail>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(n)) => n,
        Ok(Err(Fail(code, message))) => {
            LAST_ERROR.with_borrow_mut(|e| *e = message);
            code
        }
        Err(_) => {
            LAST_ERROR.with_borrow_mut(|e| *e = "an internal fault in volley (the client is closed)".into());
            VOLLEY_ERR_INTERNAL
        }
    }
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    CLIENTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` on the client `handle` names.
fn with_client(handle: u64, f: impl FnOnce(&mut Entry) -> Result<i32, Fail>) -> Result<i32, Fail> {
    let entry = registry().clients.get(&handle).cloned();
    let Some(entry) = entry else {
        return fail(VOLLEY_ERR_HANDLE, format!("no client {handle} (never made, or freed)"));
    };
    let mut e = match entry.lock() {
        Ok(e) => e,
        Err(_) => return fail(VOLLEY_ERR_INTERNAL, "this client was closed by an internal fault; free it"),
    };
    f(&mut e)
}

/// `len` bytes at `ptr` (null with `len` 0 is the empty slice).
///
/// # Safety
/// `ptr` must point to `len` readable bytes when it is not null.
unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], Fail> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { fail(VOLLEY_ERR_NULL, format!("{what} is null")) };
    }
    // SAFETY: the caller promises `len` readable bytes at `ptr`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A NUL-terminated UTF-8 string.
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string.
unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if ptr.is_null() {
        return fail(VOLLEY_ERR_NULL, format!("{what} is null"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(ptr) };
    c.to_str().or_else(|_| fail(VOLLEY_ERR_UTF8, format!("{what} is not UTF-8")))
}

/// Writes `s` and a NUL into `buf` (capacity `cap`) when it fits; returns the bytes needed
/// with the NUL.
///
/// # Safety
/// `buf` must be null or point to `cap` writable bytes.
unsafe fn put_text(s: &str, buf: *mut c_char, cap: usize) -> usize {
    let need = s.len() + 1;
    if !buf.is_null() && cap >= need {
        // SAFETY: `buf` has `cap >= need` writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
            *buf.add(s.len()) = 0;
        }
    }
    need
}

/// Writes `v` through `out` when it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn set<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller promises `out` is writable.
        unsafe { out.write(v) };
    }
}

/// Copies the message of this thread's last failure into `buf` (NUL-terminated, when
/// `capacity` is enough) and returns the bytes it needs with the NUL (1: no failure yet).
///
/// # Safety
/// `buf` must be null or point to `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_last_error(buf: *mut c_char, capacity: usize) -> usize {
    let message = LAST_ERROR.with_borrow(Clone::clone);
    // SAFETY: forwarded from the caller.
    unsafe { put_text(&message, buf, capacity) }
}

/// The volley protocol version this library speaks.
#[unsafe(no_mangle)]
pub extern "C" fn volley_protocol_version() -> u32 {
    u32::from(volley::protocol::session::PROTOCOL_VERSION)
}

/// Makes a client from a connect token (`token_len` must be 2048: the bytes the backend
/// or `volley token --out` gives) and the game's schema as JSON (NUL-terminated; `volley
/// schema` prints it), bound to `bind` (NUL-terminated, e.g. `"0.0.0.0:0"`; null for that).
/// It starts connecting at the first [`volley_client_poll`]. The handle goes to
/// `*out_client`; free it with [`volley_client_free`].
///
/// # Safety
/// `token` must point to `token_len` bytes; `schema_json` and `bind` must be null or
/// NUL-terminated; `out_client` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_new(
    token: *const u8,
    token_len: usize,
    schema_json: *const c_char,
    bind: *const c_char,
    out_client: *mut u64,
) -> i32 {
    guard(|| {
        if out_client.is_null() {
            return fail(VOLLEY_ERR_NULL, "out_client is null");
        }
        // SAFETY: forwarded from the caller.
        let token = unsafe { bytes(token, token_len, "token") }?;
        // SAFETY: forwarded from the caller.
        let json = unsafe { text(schema_json, "schema_json") }?;
        let bind = if bind.is_null() {
            "0.0.0.0:0"
        } else {
            // SAFETY: forwarded from the caller.
            unsafe { text(bind, "bind") }?
        };
        let bind: std::net::SocketAddr =
            bind.parse().or_else(|e| fail(VOLLEY_ERR_IO, format!("bind address {bind:?}: {e}")))?;
        let schema = Schema::from_json(json).or_else(|e| fail(VOLLEY_ERR_SCHEMA, e.to_string()))?;
        let token = ConnectToken::from_bytes(token).or_else(|e| fail(VOLLEY_ERR_TOKEN, e.to_string()))?;
        let client = GameClient::new(token, Arc::new(schema), unix_now());
        let polled =
            PolledClient::bind(client, bind, unix_now).or_else(|e| fail(VOLLEY_ERR_IO, format!("bind {bind}: {e}")))?;
        let entry =
            Entry { polled, ids: Vec::new(), values: Vec::new(), held: None, held_notice: None, clock: Clock::Unset };
        let mut r = registry();
        let handle = r.next;
        r.next += 1;
        r.clients.insert(handle, Arc::new(Mutex::new(entry)));
        // SAFETY: checked not null above; the caller promises it is writable.
        unsafe { out_client.write(handle) };
        Ok(VOLLEY_OK)
    })
}

/// Frees a client, telling its server goodbye first when connected. The handle is refused
/// from then on.
#[unsafe(no_mangle)]
pub extern "C" fn volley_client_free(client: u64) -> i32 {
    guard(|| {
        let entry = registry().clients.remove(&client);
        let Some(entry) = entry else {
            return fail(VOLLEY_ERR_HANDLE, format!("no client {client} (never made, or freed)"));
        };
        if let Ok(mut e) = entry.lock() {
            let now = e.goodbye_now();
            e.polled.disconnect_at(now);
        }
        Ok(VOLLEY_OK)
    })
}

/// One frame: takes every datagram waiting, runs the client's timers and sends `input`
/// (`input_len` bytes, at most 64: the game's own encoding) once connected. Returns how
/// many new snapshots arrived (0 or more). The time is the system clock's; see
/// [`volley_client_poll_at`] for the game's own.
///
/// # Safety
/// `input` must point to `input_len` bytes (or be null with `input_len` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_poll(client: u64, input: *const u8, input_len: usize) -> i32 {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let input = unsafe { input_of(input, input_len) }?;
        with_client(client, |e| {
            let now = e.system_now()?;
            Ok(i32::try_from(e.polled.poll_at(now, input)).unwrap_or(i32::MAX))
        })
    })
}

/// [`volley_client_poll`] at `now_us`, the game's own time in microseconds (an engine's
/// frame clock, a test's): any clock that never goes back, from any start. A client keeps
/// to the clock its first call that takes the time chose: after an `_at` call, the calls
/// on the system clock ([`volley_client_poll`], [`volley_client_poll_watching`],
/// [`volley_client_entities`]) are refused with [`VOLLEY_ERR_STATE`], and the other way
/// round; so is a time before the last one given.
///
/// # Safety
/// `input` must point to `input_len` bytes (or be null with `input_len` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_poll_at(client: u64, now_us: u64, input: *const u8, input_len: usize) -> i32 {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let input = unsafe { input_of(input, input_len) }?;
        with_client(client, |e| {
            let now = e.caller_now(now_us)?;
            Ok(i32::try_from(e.polled.poll_at(now, input)).unwrap_or(i32::MAX))
        })
    })
}

/// An input's bytes, at most 64.
///
/// # Safety
/// As [`bytes`].
unsafe fn input_of<'a>(input: *const u8, input_len: usize) -> Result<&'a [u8], Fail> {
    // SAFETY: forwarded from the caller.
    let input = unsafe { bytes(input, input_len, "input") }?;
    if input.len() > volley::protocol::input::MAX_INPUT_BYTES {
        return fail(VOLLEY_ERR_MESSAGE, format!("an input of {} bytes (at most 64)", input.len()));
    }
    Ok(input)
}

/// [`volley_client_poll`] for a client that sends no input (a spectator).
#[unsafe(no_mangle)]
pub extern "C" fn volley_client_poll_watching(client: u64) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let now = e.system_now()?;
            Ok(i32::try_from(e.polled.poll_watching_at(now)).unwrap_or(i32::MAX))
        })
    })
}

/// [`volley_client_poll_watching`] at the game's own time (see [`volley_client_poll_at`]).
#[unsafe(no_mangle)]
pub extern "C" fn volley_client_poll_watching_at(client: u64, now_us: u64) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let now = e.caller_now(now_us)?;
            Ok(i32::try_from(e.polled.poll_watching_at(now)).unwrap_or(i32::MAX))
        })
    })
}

/// Where the client is: [`VOLLEY_CONNECTING`], [`VOLLEY_CONNECTED`], [`VOLLEY_RESUMING`] or
/// [`VOLLEY_ENDED`] (`GameClient::link_status`).
#[unsafe(no_mangle)]
pub extern "C" fn volley_client_status(client: u64) -> i32 {
    guard(|| {
        with_client(client, |e| {
            Ok(match e.polled.client.link_status() {
                LinkStatus::Connecting => VOLLEY_CONNECTING,
                LinkStatus::Ready => VOLLEY_CONNECTED,
                LinkStatus::Resuming => VOLLEY_RESUMING,
                LinkStatus::Ended(_) => VOLLEY_ENDED,
            })
        })
    })
}

/// Why the session ended, as text ("kicked: camping", "the server is shutting down"), into
/// `buf` (NUL-terminated when `capacity` is enough). Returns the bytes it needs with the
/// NUL, or 0 while the session has not ended.
///
/// # Safety
/// `buf` must be null or point to `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_end_reason(client: u64, buf: *mut c_char, capacity: usize) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(end) = e.polled.client.ended() else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            let need = unsafe { put_text(&end.to_string(), buf, capacity) };
            Ok(i32::try_from(need).unwrap_or(i32::MAX))
        })
    })
}

/// Looks a kind up by name: its id into `*out_kind` and the numbers each of its entities
/// decodes to into `*out_values` (the schema JSON lists them field by field).
///
/// # Safety
/// `name` must be NUL-terminated; the outputs must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_kind(
    client: u64,
    name: *const c_char,
    out_kind: *mut u16,
    out_values: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let name = unsafe { text(name, "name") }?;
        with_client(client, |e| {
            let schema = e.polled.client.schema();
            let Some(kind) = schema.kind_named(name) else {
                return fail(VOLLEY_ERR_KIND, format!("no kind {name:?} in the schema"));
            };
            let values = schema.kind(kind).map_or(0, |k| k.values());
            // SAFETY: forwarded from the caller.
            unsafe {
                set(out_kind, kind);
                set(out_values, u32::try_from(values).unwrap_or(u32::MAX));
            }
            Ok(VOLLEY_OK)
        })
    })
}

/// Every entity of `kind` as the player should see it now, blended between snapshots as the
/// Rust client's `GameClient::entities` draws them: ids into `ids` (`capacity` of them),
/// each one's numbers into `values` (`capacity` × the kind's values per entity, entity by
/// entity, field by field). The count goes to `*out_count`; when it is over `capacity`,
/// nothing is written but the count, and the call returns [`VOLLEY_ERR_TOO_SMALL`].
///
/// # Safety
/// `ids` must be null or hold `capacity` ids; `values` must be null or hold `capacity` ×
/// values-per-entity doubles; `out_count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_entities(
    client: u64,
    kind: u16,
    ids: *mut u32,
    values: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    guard(|| with_client(client, |e| unsafe { entities(e, None, kind, ids, values, capacity, out_count) }))
}

/// [`volley_client_entities`] at the game's own time (see [`volley_client_poll_at`]).
///
/// # Safety
/// As [`volley_client_entities`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_entities_at(
    client: u64,
    kind: u16,
    now_us: u64,
    ids: *mut u32,
    values: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    guard(|| with_client(client, |e| unsafe { entities(e, Some(now_us), kind, ids, values, capacity, out_count) }))
}

/// The body of [`volley_client_entities`] and [`volley_client_entities_at`].
///
/// # Safety
/// As [`volley_client_entities`].
unsafe fn entities(
    e: &mut Entry,
    now_us: Option<u64>,
    kind: u16,
    ids: *mut u32,
    values: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> Result<i32, Fail> {
    let Some(per) = e.polled.client.schema().kind(KindId::from(kind)).map(|k| k.values()) else {
        return fail(VOLLEY_ERR_KIND, format!("no kind {kind} in the schema"));
    };
    let now = match now_us {
        Some(us) => e.caller_now(us)?,
        None => e.system_now()?,
    };
    let Entry { polled, ids: id_buf, values: value_buf, .. } = e;
    polled.client.entity_values(kind, now, id_buf, value_buf);
    // SAFETY: forwarded from the caller.
    unsafe { copy_out(id_buf, value_buf, per, ids, values, capacity, out_count) }?;
    Ok(VOLLEY_OK)
}

/// Sends the game a message (`len` bytes; reliable: arrives once and in order, else an
/// event that may be lost), which the world reads in `World::message`.
///
/// # Safety
/// `data` must point to `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_send_message(client: u64, data: *const u8, len: usize, reliable: bool) -> i32 {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let data = unsafe { bytes(data, len, "data") }?;
        with_client(client, |e| {
            let c = &mut e.polled.client;
            if c.ended().is_some() {
                return fail(VOLLEY_ERR_STATE, "the session has ended");
            }
            let data = bytes::Bytes::copy_from_slice(data);
            let sent = if reliable { c.channel().send_reliable(data) } else { c.channel().send_event(data) };
            sent.map(|()| VOLLEY_OK).or_else(|e| fail(VOLLEY_ERR_MESSAGE, e.to_string()))
        })
    })
}

/// Takes the next message the game sent this client (reliable ones first, in order, then
/// events) into `buf`: returns 1 and writes its length to `*out_len` and whether it came
/// reliably to `*out_reliable`, or 0 when none waits. When `capacity` is too small the
/// message stays, its length goes to `*out_len`, and the call returns
/// [`VOLLEY_ERR_TOO_SMALL`].
///
/// # Safety
/// `buf` must be null or hold `capacity` bytes; the outputs must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_next_message(
    client: u64,
    buf: *mut u8,
    capacity: usize,
    out_len: *mut usize,
    out_reliable: *mut bool,
) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let next = e.held.take().or_else(|| {
                let ch = e.polled.client.channel();
                ch.recv_reliable().map(|m| (m, true)).or_else(|| ch.recv_event().map(|m| (m, false)))
            });
            let Some((message, reliable)) = next else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            unsafe {
                set(out_len, message.len());
                set(out_reliable, reliable);
            }
            if message.len() > capacity || (buf.is_null() && !message.is_empty()) {
                let n = message.len();
                e.held = Some((message, reliable));
                return fail(VOLLEY_ERR_TOO_SMALL, format!("a message of {n} bytes, room for {capacity}"));
            }
            // SAFETY: `buf` holds `capacity >= len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(message.as_ptr(), buf, message.len()) };
            Ok(1)
        })
    })
}

/// The world the player is in: its number into `*out_world` and its kind ("lobby",
/// "match") into `kind` (NUL-terminated when `capacity` is enough). Returns the bytes the
/// kind needs with the NUL, or 0 before the server has said.
///
/// # Safety
/// `out_world` must be null or writable; `kind` null or `capacity` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_world(
    client: u64,
    out_world: *mut u16,
    kind: *mut c_char,
    capacity: usize,
) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(notice) = e.polled.client.world() else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            let need = unsafe {
                set(out_world, notice.world);
                put_text(&notice.kind, kind, capacity)
            };
            Ok(i32::try_from(need).unwrap_or(i32::MAX))
        })
    })
}

/// The client's figures into `*out`.
///
/// # Safety
/// `out` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_stats(client: u64, out: *mut VolleyStats) -> i32 {
    guard(|| {
        if out.is_null() {
            return fail(VOLLEY_ERR_NULL, "out is null");
        }
        with_client(client, |e| {
            let s = e.polled.client.stats();
            let stats = VolleyStats {
                rtt_ms: s.rtt.as_secs_f64() * 1e3,
                loss: s.loss,
                snapshots: s.snapshots,
                snapshot_errors: s.snapshot_errors,
                bytes_received: s.bytes_received,
                frames_interpolated: s.frames_interpolated,
                frames_extrapolated: s.frames_extrapolated,
                render_delay_ticks: s.render_delay_ticks,
                jitter_ms: s.jitter.as_secs_f64() * 1e3,
                render_delay_ms: e
                    .polled
                    .client
                    .session()
                    .map_or(0.0, |p| s.render_delay_ticks * 1e3 / f64::from(p.tick_rate_hz.max(1))),
            };
            // SAFETY: checked not null; the caller promises it is writable.
            unsafe { out.write(stats) };
            Ok(VOLLEY_OK)
        })
    })
}

/// The tick of the newest snapshot decoded into `*out_tick`: returns 1, or 0 before the
/// first.
///
/// # Safety
/// `out_tick` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_latest_tick(client: u64, out_tick: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(s) = e.polled.client.latest() else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            unsafe { set(out_tick, s.tick()) };
            Ok(1)
        })
    })
}

/// The entities of `kind` exactly as the snapshot of `tick` holds them (no blending; the
/// client keeps its last 64 snapshots), written as [`volley_client_entities`] writes them.
/// Returns 1, or 0 when that snapshot is not held.
///
/// # Safety
/// As [`volley_client_entities`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_snapshot_entities(
    client: u64,
    tick: u32,
    kind: u16,
    ids: *mut u32,
    values: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Entry { polled, ids: id_buf, values: value_buf, .. } = e;
            let schema = polled.client.schema().clone();
            let Some(k) = schema.kind(KindId::from(kind)) else {
                return fail(VOLLEY_ERR_KIND, format!("no kind {kind} in the schema"));
            };
            let Some(snapshot) = polled.client.snapshot(tick) else { return Ok(0) };
            id_buf.clear();
            value_buf.clear();
            let mut one = Vec::new();
            for entity in snapshot.iter().filter(|x| x.kind == kind) {
                id_buf.push(entity.id);
                k.decode(entity.words, None, 1.0, &mut one);
                value_buf.extend_from_slice(&one);
            }
            // SAFETY: forwarded from the caller.
            unsafe { copy_out(id_buf, value_buf, k.values(), ids, values, capacity, out_count) }?;
            Ok(1)
        })
    })
}

/// Copies `n` ids and their values out, or says how many there are when they do not fit.
///
/// # Safety
/// As [`volley_client_entities`].
unsafe fn copy_out(
    id_buf: &[EntityId],
    value_buf: &[f64],
    per: usize,
    ids: *mut u32,
    values: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> Result<(), Fail> {
    let n = id_buf.len();
    // SAFETY: forwarded from the caller.
    unsafe { set(out_count, n) };
    if n > capacity {
        return fail(VOLLEY_ERR_TOO_SMALL, format!("{n} entities, room for {capacity}"));
    }
    if n > 0 && (ids.is_null() || (per > 0 && values.is_null())) {
        return fail(VOLLEY_ERR_NULL, "ids or values is null");
    }
    debug_assert_eq!(value_buf.len(), n * per);
    // SAFETY: the caller promises room for `capacity >= n` ids and `capacity × per` values;
    // `value_buf` holds `n × per`.
    unsafe {
        if n > 0 {
            std::ptr::copy_nonoverlapping(id_buf.as_ptr(), ids, n);
        }
        let v = value_buf.len().min(n * per);
        if v > 0 {
            std::ptr::copy_nonoverlapping(value_buf.as_ptr(), values, v);
        }
    }
    Ok(())
}

/// This client's slot on the server (also its player id in the world) into `*out_index`:
/// returns 1, or 0 before it is connected.
///
/// # Safety
/// `out_index` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_index(client: u64, out_index: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(i) = e.polled.client.client_index() else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            unsafe { set(out_index, i) };
            Ok(1)
        })
    })
}

/// Moves this client to a new socket on a new local port (as a NAT rebinding moves a
/// player); with `resume_now` nonzero it resumes its session at once with its resume ticket,
/// else it does so by itself after a second without a word from the server. The player stays
/// the same (its id, world and score); returns 1, or 0 when it holds no ticket to resume with
/// yet (`resume_now` only; the socket moved anyway), or a negative error (`VOLLEY_ERR_IO`: no
/// new socket could be bound, the old one is kept).
#[unsafe(no_mangle)]
pub extern "C" fn volley_client_rebind(client: u64, resume_now: i32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            e.polled.rebind().or_else(|err| fail(VOLLEY_ERR_IO, format!("rebind: {err}")))?;
            if resume_now != 0 && !e.polled.client.resume(unix_now()) {
                return Ok(0);
            }
            Ok(1)
        })
    })
}

/// Sessions this client resumed on a new connection with its resume ticket (after a
/// rebinding, or a silence of its link) into `*out_resumes`: returns 1.
///
/// # Safety
/// `out_resumes` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_resumes(client: u64, out_resumes: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            // SAFETY: forwarded from the caller.
            unsafe { set(out_resumes, e.polled.client.resumes()) };
            Ok(1)
        })
    })
}

/// Prediction: the sequence number of the newest input this client sent (each poll with
/// an input sends one, numbered on from 1) into `*out_seq`: returns 1, or 0 before the
/// first. Record the input under it; a snapshot later says which inputs the server applied
/// ([`volley_client_applied_input`]), and the prediction replays the rest on the snapshot's
/// state of the player's own entity ([`volley_client_own_entity`]).
///
/// # Safety
/// `out_seq` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_input_seq(client: u64, out_seq: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let seq = e.polled.client.input_seq();
            if seq == 0 {
                return Ok(0);
            }
            // SAFETY: forwarded from the caller.
            unsafe { set(out_seq, seq) };
            Ok(1)
        })
    })
}

/// Prediction: the sequence number of the newest of this client's inputs that the server
/// had applied in the snapshot of `tick` into `*out_seq`: returns 1, or 0 when that
/// snapshot is not held or had applied none of them yet.
///
/// # Safety
/// `out_seq` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_applied_input(client: u64, tick: u32, out_seq: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(seq) = e.polled.client.applied_input(tick) else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            unsafe { set(out_seq, seq) };
            Ok(1)
        })
    })
}

/// Prediction: the id of this player's own entity in its snapshots into `*out_id`, for a
/// game whose worlds give each player an entity under the player's id (the arena): the
/// player's id merged with its world's number, so it follows the player across moves.
/// Returns 1, or 0 before the client is connected and told its world.
///
/// # Safety
/// `out_id` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_own_entity(client: u64, out_id: *mut u32) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let Some(id) = e.polled.client.own_entity() else { return Ok(0) };
            // SAFETY: forwarded from the caller.
            unsafe { set(out_id, id) };
            Ok(1)
        })
    })
}

/// [`volley_client_next_notice`]: the player connected and the server put it in its entry
/// world.
pub const VOLLEY_ENTERED_CONNECTED: i32 = 0;
/// [`volley_client_next_notice`]: the game moved the player to this world.
pub const VOLLEY_ENTERED_MOVED: i32 = 1;
/// [`volley_client_next_notice`]: the world the player was in stopped, and this is its
/// fallback.
pub const VOLLEY_ENTERED_WORLD_STOPPED: i32 = 2;

/// Takes the next world notice, oldest first (every world the player entered, in order): its
/// number into `*out_world`, why into `*out_reason` (`VOLLEY_ENTERED_*`), its kind into
/// `kind` (NUL-terminated). Returns 1, or 0 when none waits. When `capacity` is too small
/// for the kind, the notice stays, the bytes needed (with the NUL) go to `*out_needed`, and
/// the call returns [`VOLLEY_ERR_TOO_SMALL`].
///
/// # Safety
/// `kind` must be null or hold `capacity` bytes; the outputs must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_next_notice(
    client: u64,
    out_world: *mut u16,
    out_reason: *mut i32,
    kind: *mut c_char,
    capacity: usize,
    out_needed: *mut usize,
) -> i32 {
    use volley::protocol::system::EnterReason;
    guard(|| {
        with_client(client, |e| {
            let Some(notice) = e.held_notice.take().or_else(|| e.polled.client.next_notice()) else { return Ok(0) };
            let need = notice.kind.len() + 1;
            // SAFETY: forwarded from the caller.
            unsafe { set(out_needed, need) };
            if kind.is_null() || capacity < need {
                e.held_notice = Some(notice);
                return fail(VOLLEY_ERR_TOO_SMALL, format!("a world kind of {need} bytes, room for {capacity}"));
            }
            let reason = match notice.reason {
                EnterReason::Connected => VOLLEY_ENTERED_CONNECTED,
                EnterReason::Moved => VOLLEY_ENTERED_MOVED,
                EnterReason::WorldStopped(_) => VOLLEY_ENTERED_WORLD_STOPPED,
            };
            // SAFETY: forwarded from the caller; `kind` has room for `need` bytes.
            unsafe {
                set(out_world, notice.world);
                set(out_reason, reason);
                put_text(&notice.kind, kind, capacity);
            }
            Ok(1)
        })
    })
}

/// The scoreboard's size: its columns into `*out_columns`; returns its rows (0 when the
/// world keeps none).
///
/// # Safety
/// `out_columns` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_score_size(client: u64, out_columns: *mut usize) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let board = e.polled.client.scoreboard();
            // SAFETY: forwarded from the caller.
            unsafe { set(out_columns, board.columns().len()) };
            Ok(i32::try_from(board.rows().count()).unwrap_or(i32::MAX))
        })
    })
}

/// The name of column `column` into `buf` (NUL-terminated when `capacity` is enough);
/// returns the bytes it needs with the NUL.
///
/// # Safety
/// `buf` must be null or hold `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_score_column(
    client: u64,
    column: usize,
    buf: *mut c_char,
    capacity: usize,
) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let board = e.polled.client.scoreboard();
            let Some(name) = board.columns().get(column) else {
                return fail(VOLLEY_ERR_KIND, format!("no column {column}"));
            };
            // SAFETY: forwarded from the caller.
            Ok(i32::try_from(unsafe { put_text(name, buf, capacity) }).unwrap_or(i32::MAX))
        })
    })
}

/// Row `row` of the scoreboard (rows by player id): the player into `*out_player`, its ping
/// into `*out_ping_ms`, its fields into `fields` (`fields_capacity` of them; as many as
/// there are columns), its name into `name` (NUL-terminated when `name_capacity` is enough).
/// Returns the bytes the name needs with the NUL; [`VOLLEY_ERR_TOO_SMALL`] when the fields do
/// not fit (nothing is written then).
///
/// # Safety
/// `fields` must be null or hold `fields_capacity` values; `name` null or `name_capacity`
/// bytes; the outputs null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn volley_client_score_row(
    client: u64,
    row: usize,
    out_player: *mut u32,
    out_ping_ms: *mut u16,
    fields: *mut i32,
    fields_capacity: usize,
    name: *mut c_char,
    name_capacity: usize,
) -> i32 {
    guard(|| {
        with_client(client, |e| {
            let board = e.polled.client.scoreboard();
            let Some(r) = board.rows().nth(row) else { return fail(VOLLEY_ERR_KIND, format!("no row {row}")) };
            if r.fields.len() > fields_capacity || (fields.is_null() && !r.fields.is_empty()) {
                return fail(VOLLEY_ERR_TOO_SMALL, format!("{} fields, room for {fields_capacity}", r.fields.len()));
            }
            // SAFETY: forwarded from the caller; `fields` has room for every field.
            let need = unsafe {
                set(out_player, r.player);
                set(out_ping_ms, r.ping_ms);
                if !r.fields.is_empty() {
                    std::ptr::copy_nonoverlapping(r.fields.as_ptr(), fields, r.fields.len());
                }
                put_text(&r.name, name, name_capacity)
            };
            Ok(i32::try_from(need).unwrap_or(i32::MAX))
        })
    })
}
