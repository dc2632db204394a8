//! The scoreboard: Bazinga's slow channel, built in and opt-in. Every player's name, the
//! score fields the world sets and the player's ping, sent to every client twice a second
//! on the framework's own reliable channel (beside the game's, told apart by its frame byte:
//! [`SYSTEM_FRAME_TAG`](crate::protocol::reliability::channel::SYSTEM_FRAME_TAG)), as a
//! delta against the board sent before; a client that joins gets the whole board first.
//!
//! Sans-IO: [`BoardSender`] makes the updates from rows, [`Scoreboard`] applies them.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The longest name a row carries, in bytes (longer ones are cut at a character boundary).
pub const MAX_NAME_BYTES: usize = 32;
/// The most score fields (columns) a board has.
pub const MAX_FIELDS: usize = 8;
/// The most rows a client keeps (a board for more players is cut).
pub const MAX_ROWS: usize = 4096;
/// A ping that moved by less than this many milliseconds since it was last sent is not sent
/// again (pings wander a little every second; the board need not chase them).
pub const PING_STEP_MS: u16 = 3;

/// One player's line on the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreRow {
    /// The player's id.
    pub player: u32,
    /// Its name: from its connect token's user data, or as the world set it.
    pub name: String,
    /// The world's score fields, one per column.
    pub fields: Vec<i32>,
    /// Its round trip as the server measures it, in milliseconds.
    pub ping_ms: u16,
}

/// What changed in one row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RowChange {
    player: u32,
    name: Option<String>,
    fields: Option<Vec<i32>>,
    ping_ms: Option<u16>,
}

/// One update on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum BoardUpdate {
    /// The whole board.
    Full { columns: Vec<String>, rows: Vec<ScoreRow> },
    /// What changed since the update before.
    Delta { changed: Vec<RowChange>, removed: Vec<u32> },
}

/// `text` cut to at most `max` bytes at a character boundary, owned.
fn cut(text: &str, max: usize) -> String {
    super::cut(text, max).to_owned()
}

/// The server's side: the board as last sent, and the next update.
#[derive(Debug, Clone)]
pub struct BoardSender {
    columns: Vec<String>,
    last: BTreeMap<u32, ScoreRow>,
}

/// What [`BoardSender::update`] made.
#[derive(Debug, Clone)]
pub struct BoardUpdates {
    /// For the clients that have every update before: what changed (`None`: nothing did).
    pub delta: Option<Bytes>,
    /// For a client that has none yet: the whole board.
    pub full: Bytes,
}

impl BoardSender {
    /// A board with these columns (at most [`MAX_FIELDS`]).
    pub fn new(columns: Vec<String>) -> Self {
        let columns = columns.into_iter().take(MAX_FIELDS).map(|c| cut(&c, MAX_NAME_BYTES)).collect();
        Self { columns, last: BTreeMap::new() }
    }

    /// Its columns.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The next update from the board now: every row's name, fields and ping (a ping that
    /// moved by less than [`PING_STEP_MS`] keeps its last value).
    pub fn update(&mut self, rows: impl IntoIterator<Item = ScoreRow>) -> BoardUpdates {
        let mut next = BTreeMap::new();
        let mut changed = Vec::new();
        for mut row in rows.into_iter().take(MAX_ROWS) {
            row.name = cut(&row.name, MAX_NAME_BYTES);
            row.fields.truncate(self.columns.len());
            row.fields.resize(self.columns.len(), 0);
            let before = self.last.get(&row.player);
            if let Some(b) = before
                && b.ping_ms.abs_diff(row.ping_ms) < PING_STEP_MS
            {
                row.ping_ms = b.ping_ms;
            }
            let change = RowChange {
                player: row.player,
                name: (before.map(|b| &b.name) != Some(&row.name)).then(|| row.name.clone()),
                fields: (before.map(|b| &b.fields) != Some(&row.fields)).then(|| row.fields.clone()),
                ping_ms: (before.map(|b| b.ping_ms) != Some(row.ping_ms)).then_some(row.ping_ms),
            };
            if change.name.is_some() || change.fields.is_some() || change.ping_ms.is_some() {
                changed.push(change);
            }
            next.insert(row.player, row);
        }
        let removed: Vec<u32> = self.last.keys().filter(|p| !next.contains_key(p)).copied().collect();
        self.last = next;
        let encode = |u: &BoardUpdate| {
            let mut out = vec![crate::protocol::system::BOARD];
            out.extend(postcard::to_allocvec(u).unwrap_or_default());
            Bytes::from(out)
        };
        let delta =
            (!changed.is_empty() || !removed.is_empty()).then(|| encode(&BoardUpdate::Delta { changed, removed }));
        let full =
            encode(&BoardUpdate::Full { columns: self.columns.clone(), rows: self.last.values().cloned().collect() });
        BoardUpdates { delta, full }
    }
}

/// A scoreboard update could not be read (or came before the whole board).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed scoreboard update")]
pub struct BadUpdate;

/// The client's copy of the board ([`GameClient::scoreboard`](crate::client::GameClient::scoreboard)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scoreboard {
    columns: Vec<String>,
    rows: BTreeMap<u32, ScoreRow>,
    whole: bool,
}

impl Scoreboard {
    /// The score fields' names, in order (empty until the first board, or when the game has
    /// no scoreboard).
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Every player's row, by player id.
    pub fn rows(&self) -> impl Iterator<Item = &ScoreRow> + '_ {
        self.rows.values()
    }

    /// One player's row.
    pub fn row(&self, player: u32) -> Option<&ScoreRow> {
        self.rows.get(&player)
    }

    /// Whether a board has arrived.
    pub fn is_empty(&self) -> bool {
        !self.whole
    }

    /// Applies one update (they arrive reliably and in order).
    ///
    /// # Errors
    /// When it does not decode, or a delta comes before any whole board: the board is left
    /// as it was.
    pub fn apply(&mut self, bytes: &[u8]) -> Result<(), BadUpdate> {
        let Some((&crate::protocol::system::BOARD, bytes)) = bytes.split_first() else { return Err(BadUpdate) };
        match postcard::from_bytes::<BoardUpdate>(bytes).map_err(|_| BadUpdate)? {
            BoardUpdate::Full { columns, rows } => {
                self.columns = columns.into_iter().take(MAX_FIELDS).map(|c| cut(&c, MAX_NAME_BYTES)).collect();
                self.rows = rows
                    .into_iter()
                    .take(MAX_ROWS)
                    .map(|mut r| {
                        r.name = cut(&r.name, MAX_NAME_BYTES);
                        r.fields.truncate(MAX_FIELDS);
                        (r.player, r)
                    })
                    .collect();
                self.whole = true;
            }
            BoardUpdate::Delta { .. } if !self.whole => return Err(BadUpdate),
            BoardUpdate::Delta { changed, removed } => {
                for p in removed {
                    self.rows.remove(&p);
                }
                for c in changed {
                    if self.rows.len() >= MAX_ROWS && !self.rows.contains_key(&c.player) {
                        continue;
                    }
                    let row = self.rows.entry(c.player).or_insert_with(|| ScoreRow {
                        player: c.player,
                        name: String::new(),
                        fields: Vec::new(),
                        ping_ms: 0,
                    });
                    if let Some(n) = c.name {
                        row.name = cut(&n, MAX_NAME_BYTES);
                    }
                    if let Some(f) = c.fields {
                        row.fields = f.into_iter().take(MAX_FIELDS).collect();
                    }
                    if let Some(p) = c.ping_ms {
                        row.ping_ms = p;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(player: u32, name: &str, score: i32, ping_ms: u16) -> ScoreRow {
        ScoreRow { player, name: name.into(), fields: vec![score], ping_ms }
    }

    #[test]
    fn deltas_carry_only_what_changed_and_a_newcomer_gets_the_whole_board() {
        let mut s = BoardSender::new(vec!["tags".into()]);
        let mut early = Scoreboard::default();
        let u = s.update([row(0, "ada", 0, 20), row(1, "bo", 0, 30)]);
        early.apply(&u.full).unwrap();
        assert_eq!(early.columns(), ["tags"]);
        // Bo scores, ada's ping wanders by 1 ms (not sent), cy joins.
        let u = s.update([row(0, "ada", 0, 21), row(1, "bo", 1, 30), row(2, "cy", 0, 50)]);
        let delta = u.delta.unwrap();
        assert!(delta.len() < u.full.len(), "{} against {}", delta.len(), u.full.len());
        early.apply(&delta).unwrap();
        let mut late = Scoreboard::default();
        late.apply(&u.full).unwrap();
        assert_eq!(early, late, "the delta brings an early client where the whole board brings a new one");
        assert_eq!(late.row(0).unwrap().ping_ms, 20);
        assert_eq!(late.row(1).unwrap().fields, [1]);
        // Nothing changes: no delta. Ada leaves: removed.
        assert!(s.update([row(0, "ada", 0, 21), row(1, "bo", 1, 30), row(2, "cy", 0, 50)]).delta.is_none());
        let u = s.update([row(1, "bo", 1, 30), row(2, "cy", 0, 50)]);
        early.apply(&u.delta.unwrap()).unwrap();
        assert!(early.row(0).is_none() && early.rows().count() == 2);
    }

    #[test]
    fn bad_updates_leave_the_board_alone() {
        let mut b = Scoreboard::default();
        let mut s = BoardSender::new(vec!["x".into()]);
        let first = s.update([row(0, "ada", 1, 10)]);
        let second = s.update([row(0, "ada", 2, 10)]);
        assert_eq!(b.apply(&second.delta.unwrap()), Err(BadUpdate), "a delta before any whole board");
        assert_eq!(b.apply(&[0xff, 0xff, 0xff]), Err(BadUpdate));
        assert!(b.is_empty());
        b.apply(&first.full).unwrap();
        assert_eq!(b.row(0).unwrap().fields, [1]);
        // Long names are cut; too many fields are cut to the columns.
        let u = BoardSender::new(vec!["x".into()]).update([ScoreRow {
            player: 3,
            name: "é".repeat(40),
            fields: vec![1, 2, 3],
            ping_ms: 0,
        }]);
        b.apply(&u.full).unwrap();
        assert_eq!(b.row(3).unwrap().name.len(), MAX_NAME_BYTES);
        assert_eq!(b.row(3).unwrap().fields, [1]);
    }
}
