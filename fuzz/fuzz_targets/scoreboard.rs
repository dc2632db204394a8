//! Arbitrary bytes as scoreboard updates, after a whole board: applying never panics, a
//! refused update leaves the board as it was, and the board stays within its bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley::protocol::scoreboard::{BoardSender, MAX_FIELDS, MAX_NAME_BYTES, MAX_ROWS, ScoreRow, Scoreboard};

fuzz_target!(|data: &[u8]| {
    let mut board = Scoreboard::default();
    let first = BoardSender::new(vec!["a".into()]).update([ScoreRow {
        player: 1,
        name: "ada".into(),
        fields: vec![3],
        ping_ms: 10,
    }]);
    board.apply(&first.full).expect("a whole board applies");
    for chunk in data.split(|b| *b == 0xA5) {
        let before = board.clone();
        if board.apply(chunk).is_err() {
            assert_eq!(board, before, "a refused update changes nothing");
        }
        assert!(board.rows().count() <= MAX_ROWS && board.columns().len() <= MAX_FIELDS);
        assert!(board.rows().all(|r| r.fields.len() <= MAX_FIELDS && r.name.len() <= MAX_NAME_BYTES));
    }
});
