//! Bad input at the C boundary: a null or unknown or freed handle, null pointers, a buffer
//! too small, a schema that is not one or not the server's, a token that is not one, calls
//! before the session is up. Each is a documented error code with a message, never a crash.
#![allow(clippy::unwrap_used, missing_docs, unsafe_code)]

use std::ffi::{CString, c_char};

use volley::server::World;
use volley_ffi::*;

fn message() -> String {
    let mut buf = vec![0u8; 512];
    // SAFETY: a buffer of its length.
    let n = unsafe { volley_last_error(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    buf.truncate(n.saturating_sub(1));
    String::from_utf8(buf).unwrap()
}

fn schema_json() -> CString {
    CString::new(volley_arena::Arena::new().schema().to_json()).unwrap()
}

fn token() -> Vec<u8> {
    let p = volley::protocol::netcode::token::TokenParams::new(
        volley::DEFAULT_PROTOCOL_ID,
        9,
        "127.0.0.1:9".parse().unwrap(),
        volley::server::unix_now().as_secs(),
    );
    volley::protocol::netcode::token::ConnectToken::generate(&p, &[1; 32]).unwrap().to_bytes().to_vec()
}

fn new_client(token: &[u8], schema: &CString) -> (i32, u64) {
    let mut handle = 0u64;
    // SAFETY: every pointer is valid for its length.
    let rc = unsafe { volley_client_new(token.as_ptr(), token.len(), schema.as_ptr(), std::ptr::null(), &mut handle) };
    (rc, handle)
}

#[test]
fn handles_never_made_or_freed_are_refused() {
    assert_eq!(volley_client_status(0), VOLLEY_ERR_HANDLE);
    assert!(message().contains("no client 0"), "{}", message());
    assert_eq!(volley_client_status(u64::MAX), VOLLEY_ERR_HANDLE);
    assert_eq!(volley_client_poll_watching(12345), VOLLEY_ERR_HANDLE);
    let (rc, c) = new_client(&token(), &schema_json());
    assert_eq!(rc, VOLLEY_OK, "{}", message());
    assert_eq!(volley_client_status(c), VOLLEY_CONNECTING);
    assert_eq!(volley_client_free(c), VOLLEY_OK);
    assert_eq!(volley_client_free(c), VOLLEY_ERR_HANDLE, "freed twice");
    assert_eq!(volley_client_status(c), VOLLEY_ERR_HANDLE, "used after free");
    // SAFETY: null pointers with zero lengths.
    assert_eq!(unsafe { volley_client_poll(c, std::ptr::null(), 0) }, VOLLEY_ERR_HANDLE);
}

#[test]
fn bad_arguments_to_new_are_each_a_code_with_a_reason() {
    let (good_token, good_schema) = (token(), schema_json());
    let mut handle = 0u64;
    // SAFETY: each call passes valid pointers or nulls.
    unsafe {
        assert_eq!(
            volley_client_new(
                good_token.as_ptr(),
                good_token.len(),
                good_schema.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut()
            ),
            VOLLEY_ERR_NULL
        );
        assert_eq!(
            volley_client_new(std::ptr::null(), 2048, good_schema.as_ptr(), std::ptr::null(), &mut handle),
            VOLLEY_ERR_NULL
        );
        assert_eq!(
            volley_client_new(good_token.as_ptr(), good_token.len(), std::ptr::null(), std::ptr::null(), &mut handle),
            VOLLEY_ERR_NULL
        );
        let bind = CString::new("not an address").unwrap();
        assert_eq!(
            volley_client_new(good_token.as_ptr(), good_token.len(), good_schema.as_ptr(), bind.as_ptr(), &mut handle),
            VOLLEY_ERR_IO
        );
        let latin1 = [0xE9u8, 0];
        assert_eq!(
            volley_client_new(
                good_token.as_ptr(),
                good_token.len(),
                latin1.as_ptr().cast(),
                std::ptr::null(),
                &mut handle
            ),
            VOLLEY_ERR_UTF8
        );
    }
    assert_eq!(new_client(&good_token[..100], &good_schema).0, VOLLEY_ERR_TOKEN);
    assert_eq!(new_client(&[0; 2048], &good_schema).0, VOLLEY_ERR_TOKEN);
    assert_eq!(new_client(&good_token, &CString::new("{}").unwrap()).0, VOLLEY_ERR_SCHEMA);
    let tampered = good_schema.to_str().unwrap().replacen("\"bits\": 7", "\"bits\": 8", 1);
    assert_eq!(new_client(&good_token, &CString::new(tampered).unwrap()).0, VOLLEY_ERR_SCHEMA);
    assert!(message().contains("layout"), "{}", message());
    assert_eq!(handle, 0, "no handle made by a refused call");
}

#[test]
fn small_buffers_unknown_kinds_and_early_calls_are_codes() {
    let (rc, c) = new_client(&token(), &schema_json());
    assert_eq!(rc, VOLLEY_OK);
    let (mut kind, mut per) = (0u16, 0u32);
    let name = CString::new("Avatar").unwrap();
    let nope = CString::new("Dragon").unwrap();
    // SAFETY: valid pointers throughout.
    unsafe {
        assert_eq!(volley_client_kind(c, name.as_ptr(), &mut kind, &mut per), VOLLEY_OK);
        assert_eq!((kind, per), (0, 7), "position (2), aim, health, score, deaths, alive");
        assert_eq!(volley_client_kind(c, nope.as_ptr(), &mut kind, &mut per), VOLLEY_ERR_KIND);
        assert_eq!(volley_client_kind(c, std::ptr::null(), &mut kind, &mut per), VOLLEY_ERR_NULL);
        let mut count = 99usize;
        assert_eq!(
            volley_client_entities(c, 0, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            VOLLEY_OK,
            "nothing to draw before a snapshot"
        );
        assert_eq!(count, 0);
        assert_eq!(
            volley_client_entities(c, 77, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            VOLLEY_ERR_KIND
        );
        assert_eq!(
            volley_client_snapshot_entities(c, 5, 0, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            0,
            "no such snapshot held"
        );
        let mut tick = 0u32;
        assert_eq!(volley_client_latest_tick(c, &mut tick), 0);
        let mut index = 0u32;
        assert_eq!(volley_client_index(c, &mut index), 0, "not connected yet");
        let mut world = 0u16;
        assert_eq!(volley_client_world(c, &mut world, std::ptr::null_mut(), 0), 0, "in no world yet");
        assert_eq!(volley_client_end_reason(c, std::ptr::null_mut(), 0), 0, "not ended");
        let (mut len, mut reliable) = (0usize, false);
        assert_eq!(volley_client_next_message(c, std::ptr::null_mut(), 0, &mut len, &mut reliable), 0, "no message");
        assert_eq!(volley_client_stats(c, std::ptr::null_mut()), VOLLEY_ERR_NULL);
        let mut stats = VolleyStats::default();
        assert_eq!(volley_client_stats(c, &mut stats), VOLLEY_OK);
        assert_eq!(stats.snapshots, 0);
        let long = [0u8; 65];
        assert_eq!(volley_client_poll(c, long.as_ptr(), long.len()), VOLLEY_ERR_MESSAGE, "an input over 64 bytes");
        assert_eq!(volley_client_poll(c, std::ptr::null(), 3), VOLLEY_ERR_NULL);
        // A message may be queued before the session is up (it leaves once it is).
        let hello = b"hello";
        assert_eq!(volley_client_send_message(c, hello.as_ptr(), hello.len(), true), VOLLEY_OK);
        assert_eq!(volley_client_send_message(c, std::ptr::null(), 4, true), VOLLEY_ERR_NULL);
        let huge = vec![0u8; 1 << 20];
        assert_eq!(volley_client_send_message(c, huge.as_ptr(), huge.len(), false), VOLLEY_ERR_MESSAGE);
        // The message buffer: the text needs more than one byte.
        let mut small = [0 as c_char; 1];
        let need = volley_last_error(small.as_mut_ptr(), small.len());
        assert!(need > 1 && small[0] == 0, "nothing written into a buffer too small");
    }
    assert_eq!(volley_client_free(c), VOLLEY_OK);
}

/// A client runs on the clock its first call that takes the time chose: the caller's (the
/// `_at` calls) or the system's. Mixing them, or a time that goes back, is refused; and the
/// caller's time is the one its timers follow (an hour of it ends an unanswered connect at
/// once, whatever the wall clock says).
#[test]
fn a_client_keeps_to_one_clock_and_the_callers_time_runs_its_timers() {
    let schema = schema_json();
    let (rc, c) = new_client(&token(), &schema);
    assert_eq!(rc, VOLLEY_OK);
    let mut count = 0usize;
    // SAFETY: null buffers with zero capacity, a writable count.
    unsafe {
        assert_eq!(volley_client_poll_at(c, 5_000_000, std::ptr::null(), 0), 0);
        assert_eq!(volley_client_status(c), VOLLEY_CONNECTING);
        assert_eq!(volley_client_poll(c, std::ptr::null(), 0), VOLLEY_ERR_STATE);
        assert!(message().contains("caller's clock"), "{}", message());
        assert_eq!(volley_client_poll_watching(c), VOLLEY_ERR_STATE);
        assert_eq!(
            volley_client_entities(c, 0, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            VOLLEY_ERR_STATE
        );
        assert_eq!(
            volley_client_entities_at(c, 0, 5_000_000, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            VOLLEY_OK
        );
        assert_eq!(volley_client_poll_watching_at(c, 4_999_999), VOLLEY_ERR_STATE);
        assert!(message().contains("went back"), "{}", message());
        // An hour later on the caller's clock, a moment later on the wall's.
        assert_eq!(volley_client_poll_at(c, 3_605_000_000, std::ptr::null(), 0), 0);
        assert_eq!(volley_client_status(c), VOLLEY_ENDED, "the connect timed out on the caller's time");
    }
    assert_eq!(volley_client_free(c), VOLLEY_OK);

    let (_, c) = new_client(&token(), &schema);
    // SAFETY: as above.
    unsafe {
        assert_eq!(volley_client_poll(c, std::ptr::null(), 0), 0);
        assert_eq!(volley_client_poll_at(c, 0, std::ptr::null(), 0), VOLLEY_ERR_STATE);
        assert!(message().contains("system clock"), "{}", message());
        assert_eq!(
            volley_client_entities_at(c, 0, 0, std::ptr::null_mut(), std::ptr::null_mut(), 0, &mut count),
            VOLLEY_ERR_STATE
        );
        assert_eq!(volley_client_status(c), VOLLEY_CONNECTING, "a moment of the wall's clock");
    }
    assert_eq!(volley_client_free(c), VOLLEY_OK);
}
