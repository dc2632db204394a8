//! The scoreboard and the world notices through the C boundary, against a real server whose
//! world keeps a board: the columns, each row's player, name, fields and ping, and the
//! notice of the entry world, as the Rust client reads them.
#![allow(clippy::unwrap_used, missing_docs, unsafe_code)]

use std::ffi::{CString, c_char};
use std::time::Duration;

use volley::prelude::*;
use volley_ffi::*;

const KEY: [u8; 32] = [3; 32];

/// Counts each player's seconds on the board.
#[derive(Default)]
struct Clock(std::collections::BTreeMap<PlayerId, u32>);

impl World for Clock {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, p: PlayerId) {
        self.0.insert(p, 0);
    }
    fn leave(&mut self, p: PlayerId) {
        self.0.remove(&p);
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {
        self.0.values_mut().for_each(|t| *t += 1);
    }
    fn messages(&mut self, out: &mut Outbox) {
        for (p, ticks) in &self.0 {
            out.set_score(*p, &[(*ticks / 60) as i32, 7]);
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
    fn scoreboard_columns(&self) -> Vec<String> {
        vec!["seconds".into(), "seven".into()]
    }
}

fn text(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_and_the_notices_read_through_the_c_calls() {
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), Clock::default()).await.unwrap();
    let mut p = TokenParams::new(DEFAULT_PROTOCOL_ID, 11, server.addr(), unix_now().as_secs());
    p.user_data[..3].copy_from_slice(b"ada");
    let token = ConnectToken::generate(&p, &KEY).unwrap().to_bytes();
    let schema = CString::new(Schema::new().to_json()).unwrap();
    let mut c = 0u64;
    // SAFETY: valid pointers for their lengths.
    let rc = unsafe { volley_client_new(token.as_ptr(), token.len(), schema.as_ptr(), std::ptr::null(), &mut c) };
    assert_eq!(rc, VOLLEY_OK);
    let mut rows = 0;
    for _ in 0..300 {
        // SAFETY: no input.
        assert!(unsafe { volley_client_poll(c, std::ptr::null(), 0) } >= 0);
        let mut columns = 0usize;
        // SAFETY: a writable count.
        rows = unsafe { volley_client_score_size(c, &mut columns) };
        if rows > 0 && columns == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(16)).await;
    }
    assert_eq!(rows, 1, "one row: ours");
    let mut name = [0 as c_char; 32];
    // SAFETY: buffers of their lengths.
    unsafe {
        assert_eq!(volley_client_score_column(c, 0, name.as_mut_ptr(), name.len()), 8);
        assert_eq!(text(&name), "seconds");
        assert_eq!(volley_client_score_column(c, 2, name.as_mut_ptr(), name.len()), VOLLEY_ERR_KIND);
        let (mut player, mut ping) = (0u32, 0u16);
        let mut fields = [0i32; 2];
        assert_eq!(
            volley_client_score_row(
                c,
                0,
                &mut player,
                &mut ping,
                fields.as_mut_ptr(),
                1,
                name.as_mut_ptr(),
                name.len()
            ),
            VOLLEY_ERR_TOO_SMALL,
            "two fields, room for one"
        );
        let need = volley_client_score_row(
            c,
            0,
            &mut player,
            &mut ping,
            fields.as_mut_ptr(),
            2,
            name.as_mut_ptr(),
            name.len(),
        );
        assert_eq!(need, 4);
        assert_eq!(text(&name), "ada");
        assert_eq!(fields[1], 7);
        let mut index = 0u32;
        assert_eq!(volley_client_index(c, &mut index), 1);
        assert_eq!(player, index);
        assert_eq!(
            volley_client_score_row(c, 1, &mut player, &mut ping, fields.as_mut_ptr(), 2, name.as_mut_ptr(), 32),
            VOLLEY_ERR_KIND
        );

        // The notice of the entry world: a buffer too small keeps it, then it comes whole.
        let (mut world, mut reason, mut needed) = (99u16, 99i32, 0usize);
        let mut kind = [0 as c_char; 64];
        assert_eq!(
            volley_client_next_notice(c, &mut world, &mut reason, kind.as_mut_ptr(), 1, &mut needed),
            VOLLEY_ERR_TOO_SMALL
        );
        assert!(needed > 1);
        assert_eq!(
            volley_client_next_notice(c, &mut world, &mut reason, kind.as_mut_ptr(), kind.len(), &mut needed),
            1
        );
        assert_eq!((world, reason), (0, VOLLEY_ENTERED_CONNECTED));
        assert_eq!(text(&kind).len() + 1, needed);
        assert_eq!(
            volley_client_next_notice(c, &mut world, &mut reason, kind.as_mut_ptr(), kind.len(), &mut needed),
            0,
            "one notice"
        );
        let mut current = [0 as c_char; 64];
        assert_eq!(volley_client_world(c, &mut world, current.as_mut_ptr(), current.len()) as usize, needed);
        assert_eq!(text(&current), text(&kind));
    }
    assert_eq!(volley_client_free(c), VOLLEY_OK);

    // A client on the game's own clock (microseconds from 0, as an engine counts frames)
    // connects and plays as well.
    p.client_id = 12;
    let token = ConnectToken::generate(&p, &KEY).unwrap().to_bytes();
    // SAFETY: valid pointers for their lengths.
    let rc = unsafe { volley_client_new(token.as_ptr(), token.len(), schema.as_ptr(), std::ptr::null(), &mut c) };
    assert_eq!(rc, VOLLEY_OK);
    let start = std::time::Instant::now();
    let mut snapshots = 0;
    for _ in 0..300 {
        let now_us = start.elapsed().as_micros() as u64;
        // SAFETY: no input.
        let got = unsafe { volley_client_poll_at(c, now_us, std::ptr::null(), 0) };
        assert!(got >= 0, "{got}");
        snapshots += got;
        if snapshots >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(16)).await;
    }
    assert_eq!(volley_client_status(c), VOLLEY_CONNECTED);
    assert!(snapshots >= 10, "{snapshots} snapshots on the caller's clock");
    assert_eq!(volley_client_free(c), VOLLEY_OK);
    server.shutdown().await;
}
