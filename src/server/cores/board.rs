//! A world's scoreboard, sans-IO: the rows (a name and the game's fields per player), what
//! changes them, and when an update is due. [`Simulation`](super::simulation) keeps one for a
//! world that names columns ([`World::scoreboard_columns`](crate::server::World::scoreboard_columns))
//! and hands its rows on with the tick; the shells add each player's ping and send it on the
//! framework's channel, and taps get the rows in their frames (recordings and spectators
//! mirror them).
//!
//! | when | the rows go out |
//! | --- | --- |
//! | every half second | as they stand |
//! | a player is moved, kicked, redirected or its world stops | at once, so it leaves with the final board |
//! | the world mirrors another's board (a spectators' world) | as they come, and its own never again |

use std::collections::BTreeMap;
use std::time::Duration;

use crate::protocol::cut;
use crate::protocol::scoreboard::{MAX_NAME_BYTES, ScoreRow};
use crate::server::game::world::{BoardChange, JoinInfo, PlayerId};

/// Ticks between two scoreboard updates at a tick of `dt`: half a second.
pub(crate) fn board_every(dt: Duration) -> u32 {
    (0.5 / dt.as_secs_f64().max(1e-6)).round().max(1.0) as u32
}

/// A player's name from its connect token's user data: the UTF-8 text before the first zero
/// byte, or "player N".
fn name_from_token(player: PlayerId, who: &JoinInfo) -> String {
    let end = who.user_data.iter().position(|b| *b == 0).unwrap_or(who.user_data.len());
    match std::str::from_utf8(&who.user_data[..end]) {
        Ok(name) if !name.trim().is_empty() => cut(name, MAX_NAME_BYTES).to_owned(),
        _ => format!("player {player}"),
    }
}

/// One world's scoreboard (see the module docs).
#[derive(Debug)]
pub(crate) struct Board {
    /// Name and fields, by player.
    rows: BTreeMap<PlayerId, (String, Vec<i32>)>,
    /// The other world's board this world shows instead of its own, as it last came.
    mirrored: Option<Vec<ScoreRow>>,
    /// Ticks between two updates.
    every: u64,
}

impl Board {
    /// An empty board of a world that ticks every `dt`.
    pub(crate) fn new(dt: Duration) -> Self {
        Self { rows: BTreeMap::new(), mirrored: None, every: u64::from(board_every(dt)) }
    }

    /// A player joined: its row, named from its token.
    pub(crate) fn join(&mut self, player: PlayerId, who: &JoinInfo) {
        self.rows.insert(player, (name_from_token(player, who), Vec::new()));
    }

    /// A player left: its row goes.
    pub(crate) fn leave(&mut self, player: PlayerId) {
        self.rows.remove(&player);
    }

    /// Applies the tick's changes; the rows when an update is due at step `step` (every half
    /// second, and at once when players are sent away: `now`). A world that mirrors another's
    /// board (`mirror`) shows those rows when they come, and its own players' never again.
    pub(crate) fn update(
        &mut self,
        changes: Vec<(PlayerId, BoardChange)>,
        now: bool,
        mirror: Option<Vec<ScoreRow>>,
        step: u64,
    ) -> Option<Vec<ScoreRow>> {
        if let Some(rows) = mirror {
            self.mirrored = Some(rows.clone());
            return Some(rows);
        }
        if let Some(rows) = &self.mirrored {
            // Players sent away get it as it stands.
            return now.then(|| rows.clone());
        }
        for (p, change) in changes {
            let Some(row) = self.rows.get_mut(&p) else { continue };
            match change {
                BoardChange::Fields(f) => row.1 = f,
                BoardChange::Name(n) => row.0 = n,
            }
        }
        (now || step.is_multiple_of(self.every)).then(|| {
            self.rows
                .iter()
                .map(|(p, (name, fields))| ScoreRow {
                    player: *p,
                    name: name.clone(),
                    fields: fields.clone(),
                    ping_ms: 0,
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &[u8]) -> JoinInfo {
        let mut data = [0; crate::protocol::netcode::USER_DATA_BYTES];
        data[..name.len()].copy_from_slice(name);
        JoinInfo::new(1, data)
    }

    #[test]
    fn rows_go_out_every_half_second_and_at_once_when_players_are_sent_away() {
        let mut b = Board::new(Duration::from_millis(100));
        b.join(1, &who(b"ada"));
        b.join(2, &who(b""));
        assert_eq!(b.update(vec![(1, BoardChange::Fields(vec![3]))], false, None, 1), None);
        let rows = b.update(Vec::new(), false, None, 5).unwrap();
        let names: Vec<(&str, &[i32])> = rows.iter().map(|r| (r.name.as_str(), r.fields.as_slice())).collect();
        assert_eq!(names, [("ada", &[3][..]), ("player 2", &[][..])]);
        b.leave(1);
        assert_eq!(b.update(Vec::new(), true, None, 6).unwrap().len(), 1, "sent away: at once");
        // Mirroring another world's board: its rows, and this world's own never again.
        let theirs = vec![ScoreRow { player: 9, name: "x".into(), fields: vec![1], ping_ms: 0 }];
        assert_eq!(b.update(Vec::new(), false, Some(theirs.clone()), 7), Some(theirs.clone()));
        assert_eq!(b.update(Vec::new(), false, None, 10), None);
        assert_eq!(b.update(Vec::new(), true, None, 11), Some(theirs));
    }
}
