//! The one executor: what a tick's commands and the directory's changes mean, carried out
//! once for both shells. The broadcaster (actors) and the stepper (one thread, in memory)
//! each hold an [`Executor`] and implement [`Outlet`], the seam: the executor decides who
//! gets what and in which order (a kick only for a player still in the kicking world, a
//! world's move only of its own player, each scoreboard row's ping, the effects of a join, a
//! leave, a move, a world's end), and the outlet delivers it (the broadcaster casts to
//! actors, the stepper calls the sessions and worlds).
//!
//! What stays the shells' own is listed in `docs/architecture.md` ("two shells").

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::directory::{Directory, Effect, ToPlayer, ToWorld};
use super::simulation::Command;
use crate::protocol::scoreboard::{BoardSender, BoardUpdates, ScoreRow};
use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::WorldSnapshot;
use crate::server::game::world::{Audience, JoinInfo, PlayerId, Relevancy, WorldId, WorldOptions};

/// What a shell does with what the [`Executor`] decided. `P` is how the shell reaches a
/// player (the broadcaster's player reference, the stepper's nothing).
pub(crate) trait Outlet<P> {
    /// Delivers what the directory tells a world (a join, a leave, a started world's end).
    fn to_world(&mut self, world: WorldId, told: ToWorld);
    /// Delivers what the directory tells a player (it entered a world, its session ends).
    fn to_player(&mut self, player: PlayerId, handle: &P, told: ToPlayer);
    /// A message from `world` to every player in it. A shell may hold such messages back
    /// and hand them out together ([`Outlet::flush`]); nothing else reaches a player before
    /// them.
    fn to_all(&mut self, dir: &Directory<P>, world: WorldId, data: Bytes, reliable: bool);
    /// Hands out what [`Outlet::to_all`] held back (before anything else is delivered).
    fn flush(&mut self, dir: &Directory<P>);
    /// A message from a world to one player (a team, a player, everyone but one).
    fn message(&mut self, player: PlayerId, handle: &P, data: &Bytes, reliable: bool);
    /// A message on the framework's channel (a playback status).
    fn notice(&mut self, player: PlayerId, handle: &P, data: &Bytes);
    /// The scoreboard's next update.
    fn board(&mut self, player: PlayerId, handle: &P, updates: &Arc<BoardUpdates>);
    /// A world ends one of its players' sessions, saying why.
    fn kick(&mut self, player: PlayerId, handle: &P, end: SessionEnd);
    /// A player's round-trip time, in milliseconds, for its scoreboard row.
    fn ping(&self, player: PlayerId, handle: &P) -> u16;
    /// A world's tick snapshot: the shell publishes it to its players (`dir.publish`), at
    /// its own pace.
    fn snapshot(&mut self, dir: &mut Directory<P>, world: WorldId, snapshot: Arc<WorldSnapshot>);
}

/// The directory and the worlds' scoreboards, and the one meaning of every change to them.
pub(crate) struct Executor<P> {
    dir: Directory<P>,
    boards: BTreeMap<WorldId, BoardSender>,
}

impl<P> Default for Executor<P> {
    fn default() -> Self {
        Self { dir: Directory::default(), boards: BTreeMap::new() }
    }
}

impl<P: Clone> Executor<P> {
    /// Who is where.
    pub(crate) fn dir(&self) -> &Directory<P> {
        &self.dir
    }

    /// Who is where, to change it outside a command (the stepper's own bookkeeping).
    pub(crate) fn dir_mut(&mut self) -> &mut Directory<P> {
        &mut self.dir
    }

    /// The scoreboard columns of world `id` (none: it has no scoreboard).
    pub(crate) fn board_columns(&self, id: WorldId) -> Vec<String> {
        self.boards.get(&id).map(|b| b.columns().to_vec()).unwrap_or_default()
    }

    /// Carries out what a directory change asks, in order.
    pub(crate) fn apply(&mut self, effects: Vec<Effect>, out: &mut impl Outlet<P>) {
        out.flush(&self.dir);
        for e in effects {
            match e {
                Effect::World(world, told) => out.to_world(world, told),
                Effect::Player(player, told) => {
                    if let Some(h) = self.dir.handle(player) {
                        out.to_player(player, h, told);
                    }
                }
            }
        }
    }

    /// A world starts (its scoreboard, if it has columns).
    pub(crate) fn add_world(
        &mut self,
        id: WorldId,
        options: WorldOptions,
        relevancy: Arc<dyn Relevancy>,
        parent: Option<WorldId>,
        board_columns: Vec<String>,
    ) {
        if !board_columns.is_empty() {
            self.boards.insert(id, BoardSender::new(board_columns));
        }
        self.dir.add_world(id, options, relevancy, parent);
    }

    /// A world ended, and why: its players go to its fallback.
    pub(crate) fn remove_world(&mut self, id: WorldId, why: &str, out: &mut impl Outlet<P>) {
        self.boards.remove(&id);
        let effects = self.dir.remove_world(id, why);
        self.apply(effects, out);
    }

    /// A player connected: it joins the entry world (a slot reused before its last player's
    /// removal was seen: that one left first).
    pub(crate) fn add_player(&mut self, player: PlayerId, handle: P, who: JoinInfo, out: &mut impl Outlet<P>) {
        let mut effects = self.dir.remove_player(player);
        effects.extend(self.dir.add_player(player, handle, who));
        self.apply(effects, out);
    }

    /// A player left.
    pub(crate) fn remove_player(&mut self, player: PlayerId, out: &mut impl Outlet<P>) {
        let effects = self.dir.remove_player(player);
        self.apply(effects, out);
    }

    /// A player's client went silent (`away`) or was heard again: its world hears it.
    pub(crate) fn presence(&mut self, player: PlayerId, away: bool, out: &mut impl Outlet<P>) {
        let effects = self.dir.presence(player, away);
        self.apply(effects, out);
    }

    /// Moves a player to a world (`by`: only if it is in that world, the one asking).
    pub(crate) fn move_player(&mut self, by: Option<WorldId>, player: PlayerId, to: WorldId, out: &mut impl Outlet<P>) {
        if by.is_none_or(|w| self.dir.home(player) == Some(w)) {
            let effects = self.dir.move_player(player, to);
            self.apply(effects, out);
        }
    }

    /// A player starts or stops watching a world (`by`: only if it is in that world).
    pub(crate) fn watch(&mut self, by: Option<WorldId>, player: PlayerId, world: WorldId, on: bool) {
        if by.is_none_or(|w| self.dir.home(player) == Some(w)) {
            self.dir.watch(player, world, on);
        }
    }

    /// Carries out what world `id`'s tick asked, in the tick's order ([`Command`]). True when
    /// the world asked to stop (the shell stops it, last of all).
    pub(crate) fn run(&mut self, id: WorldId, commands: Vec<Command>, out: &mut impl Outlet<P>) -> bool {
        let mut stop = false;
        for c in commands {
            if !matches!(c, Command::Message(Audience::All, ..)) {
                out.flush(&self.dir);
            }
            match c {
                Command::Team(player, team) => self.dir.set_team(id, player, team),
                Command::System(to, data) => {
                    for (p, h) in self.dir.audience(id, to) {
                        out.notice(p, h, &data);
                    }
                }
                Command::Message(Audience::All, data, reliable) => out.to_all(&self.dir, id, data, reliable),
                Command::Message(to, data, reliable) => {
                    for (p, h) in self.dir.audience(id, to) {
                        out.message(p, h, &data, reliable);
                    }
                }
                Command::Board(rows) => {
                    let Some(sender) = self.boards.get_mut(&id) else { continue };
                    let dir = &self.dir;
                    let ping = |p: PlayerId| dir.handle(p).map_or(0, |h| out.ping(p, h));
                    let rows: Vec<ScoreRow> =
                        rows.into_iter().map(|r| ScoreRow { ping_ms: ping(r.player), ..r }).collect();
                    let updates = Arc::new(sender.update(rows));
                    for (p, h) in self.dir.members(id) {
                        out.board(p, h, &updates);
                    }
                }
                Command::Kick(player, end) => {
                    // After every message the world sent it before.
                    if self.dir.home(player) == Some(id)
                        && let Some(h) = self.dir.handle(player)
                    {
                        out.kick(player, h, end);
                    }
                }
                Command::Snapshot(snapshot) => out.snapshot(&mut self.dir, id, snapshot),
                Command::Move(player, to) => self.move_player(Some(id), player, to, out),
                Command::Watch(player, world, on) => self.watch(Some(id), player, world, on),
                Command::Stop => stop = true,
            }
        }
        out.flush(&self.dir);
        stop
    }
}
