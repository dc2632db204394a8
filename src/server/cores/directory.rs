//! Many worlds on one server, sans-IO: which world each player is in (it gets the player's
//! inputs), which others it watches, and the one view per player and tick merged from them.
//! The broadcaster and the [`Stepper`](crate::testing::Stepper) drive this same
//! [`Directory`]; the effects it returns (a world's `join`/`leave`, a client told where it
//! is, a session closed) are each addressed to one world or one player, whose core
//! carries it out: a shell only delivers them.
//!
//! # How views merge
//!
//! A player's snapshots follow the world it is in: each time that world ticks, the player's
//! view is its newest snapshot plus the newest snapshot of every world the player watches,
//! as one [`WorldSnapshot`] ([`WorldSnapshot::merge`]): entity ids carry their world's
//! number in their top bits ([`merged_id`]), so they never collide, and the player's encoder
//! deltas the whole against the view its client acknowledged, with one byte budget and one
//! priority order across every source. A watched world that ticks less often (20 Hz under
//! a 60 Hz world) is held: its newest snapshot goes into every view until its next tick,
//! and since its entities' change ticks do not move meanwhile, they cost nothing in the
//! deltas in between. Players with the same home and the same watched worlds share one
//! merged view per tick (one merge per group, not per player); a player in world 0 that
//! watches nothing gets that world's snapshot itself, not a copy.
//!
//! Every world of a server numbers its ticks on the server's clock (a world started later
//! starts at the server's current tick; a 20 Hz world on a 60 Hz server runs every third
//! tick number), so a player moved from one world to another never sees its snapshot ticks
//! go backwards.
//!
//! [`merged_id`]: crate::protocol::snapshot::world::merged_id

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::protocol::session::SessionEnd;
use crate::protocol::snapshot::{Interest, WorldSnapshot};
use crate::protocol::system::{EnterReason, WorldNotice};
use crate::server::game::world::{Audience, JoinInfo, Origin, PlayerId, Relevancy, WorldId, WorldOptions};

/// One world's part of a view.
pub(crate) struct Part {
    /// The world's number.
    pub number: u16,
    /// Its newest snapshot (local ids).
    pub snapshot: Arc<WorldSnapshot>,
    /// Its game's relevancy.
    pub relevancy: Arc<dyn Relevancy>,
    /// Where its entities start in the merged snapshot.
    pub start: u32,
}

/// What one player sees at one tick: the merged snapshot, and the parts it was made of (each
/// world's relevancy runs on its own part, with its own ids).
pub(crate) struct View {
    /// The merged snapshot (the player's encoder's input).
    pub merged: Arc<WorldSnapshot>,
    /// The worlds in it, by ascending number.
    pub parts: Vec<Part>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("tick", &self.merged.tick())
            .field("entities", &self.merged.len())
            .field("worlds", &self.parts.iter().map(|p| p.number).collect::<Vec<_>>())
            .finish()
    }
}

impl View {
    /// A view of world 0 alone (its snapshot, unchanged).
    #[cfg(test)]
    pub fn single(snapshot: Arc<WorldSnapshot>, relevancy: Arc<dyn Relevancy>) -> Self {
        Self { merged: snapshot.clone(), parts: vec![Part { number: 0, snapshot, relevancy, start: 0 }] }
    }

    /// A view of `parts` (ascending numbers) at `tick`.
    fn merge(tick: u32, mut parts: Vec<Part>) -> Self {
        if let [p] = &parts[..]
            && p.number == 0
        {
            return Self { merged: p.snapshot.clone(), parts };
        }
        let list: Vec<(u32, &WorldSnapshot)> = parts.iter().map(|p| (u32::from(p.number), &*p.snapshot)).collect();
        let merged = Arc::new(WorldSnapshot::merge(tick, &list));
        let mut start = 0;
        for p in &mut parts {
            p.start = start;
            start += p.snapshot.len() as u32;
        }
        Self { merged, parts }
    }

    /// `player`'s interest in the merged snapshot: each world's relevancy on its own part,
    /// tidied (true when a game's list needed it), shifted to the part's place. `scratch` is
    /// reused between calls.
    pub(crate) fn interest(&self, player: PlayerId, out: &mut Vec<Interest>, scratch: &mut Vec<Interest>) -> bool {
        out.clear();
        if let [p] = &self.parts[..] {
            p.relevancy.interest(&p.snapshot, player, out);
            let fixed = Interest::tidy(out, p.snapshot.len());
            if p.start != 0 {
                out.iter_mut().for_each(|i| i.index += p.start);
            }
            return fixed;
        }
        let mut fixed = false;
        for p in &self.parts {
            scratch.clear();
            p.relevancy.interest(&p.snapshot, player, scratch);
            fixed |= Interest::tidy(scratch, p.snapshot.len());
            out.extend(scratch.iter().map(|i| Interest { index: i.index + p.start, ..*i }));
        }
        // Parts whose local ids were out of range lose entities in the merge; never index past it.
        if out.last().is_some_and(|i| i.index as usize >= self.merged.len()) {
            fixed |= Interest::tidy(out, self.merged.len());
        }
        fixed
    }
}

/// What a directory change asks: each effect is addressed to one world or one player, and
/// its meaning is written once, in the core that receives it ([`Simulation::handle`] for a
/// world, [`PlayerSession::handle`] for a player). A shell only delivers it: the broadcaster
/// in a message to the world's or the player's actor, the stepper by a call.
///
/// [`Simulation::handle`]: super::simulation::Simulation::handle
/// [`PlayerSession::handle`]: super::session::PlayerSession::handle
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// For a world.
    World(WorldId, ToWorld),
    /// For a player's session.
    Player(PlayerId, ToPlayer),
}

/// What a world is told by the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToWorld {
    /// A player joins it (`join_with`), with who it is (kept from its connect token across
    /// moves) and where it comes from.
    Join(PlayerId, Box<JoinInfo>),
    /// A player leaves it (`leave`); its inputs still queued go with it.
    Leave(PlayerId),
    /// A world it started stopped, and why (`world_stopped`).
    Stopped(WorldId, String),
    /// One of its players' client went silent (`away`, true) or was heard again (`back`).
    Presence(PlayerId, bool),
}

/// What a player's session is told by the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToPlayer {
    /// Its inputs and messages go to this world from now on, and its client is told so.
    Enter(WorldId, Box<WorldNotice>),
    /// Its session ends (its world stopped and has no fallback).
    Close(SessionEnd),
}

impl Effect {
    fn join(world: WorldId, player: PlayerId, who: JoinInfo) -> Self {
        Effect::World(world, ToWorld::Join(player, Box::new(who)))
    }
    fn leave(world: WorldId, player: PlayerId) -> Self {
        Effect::World(world, ToWorld::Leave(player))
    }
    fn enter(player: PlayerId, world: WorldId, notice: WorldNotice) -> Self {
        Effect::Player(player, ToPlayer::Enter(world, Box::new(notice)))
    }
    fn close(player: PlayerId) -> Self {
        Effect::Player(player, ToPlayer::Close(SessionEnd::WorldStopped))
    }
}

/// A world as the directory knows it.
struct Entry<P> {
    options: WorldOptions,
    /// The world that started it, if one did.
    parent: Option<WorldId>,
    relevancy: Arc<dyn Relevancy>,
    latest: Option<Arc<WorldSnapshot>>,
    /// Its players, grouped by the worlds they watch (one merged view per group and tick).
    groups: Vec<Group<P>>,
}

struct Group<P> {
    watching: Vec<WorldId>,
    members: BTreeMap<PlayerId, P>,
}

/// A player as the directory knows it.
#[derive(Debug, Clone)]
struct Member<P> {
    home: WorldId,
    /// Worlds it watches besides its home, ascending.
    watching: Vec<WorldId>,
    who: JoinInfo,
    team: Option<u16>,
    /// Its client is away (silent, within the resume grace): a world it enters hears so.
    away: bool,
    handle: P,
}

/// Which world each player is in and which it watches; each world's newest snapshot; the
/// views (see the module docs). `P` is how the shell reaches a player (the broadcaster's
/// player reference, the stepper's nothing).
pub(crate) struct Directory<P> {
    worlds: BTreeMap<WorldId, Entry<P>>,
    players: BTreeMap<PlayerId, Member<P>>,
}

impl<P> Default for Directory<P> {
    fn default() -> Self {
        Self { worlds: BTreeMap::new(), players: BTreeMap::new() }
    }
}

impl<P: Clone> Directory<P> {
    /// Adds a world (started by world `parent`, if one did); players arrive in
    /// [`WorldId::ENTRY`].
    pub(crate) fn add_world(
        &mut self,
        id: WorldId,
        options: WorldOptions,
        relevancy: Arc<dyn Relevancy>,
        parent: Option<WorldId>,
    ) {
        let everyone = options.watched_by_everyone;
        self.worlds.insert(id, Entry { options, parent, relevancy, latest: None, groups: Vec::new() });
        if everyone {
            let ids: Vec<PlayerId> = self.players.keys().copied().collect();
            for p in ids {
                self.watch(p, id, true);
            }
        }
    }

    /// The worlds, with their kinds and how many players are in each.
    pub(crate) fn worlds(&self) -> impl Iterator<Item = (WorldId, &str, usize)> + '_ {
        self.worlds.iter().map(|(id, e)| (*id, e.options.kind.as_str(), e.groups.iter().map(|g| g.members.len()).sum()))
    }

    /// Removes a world (it stopped: `why` says how, for its players' clients). The world
    /// that started it hears it first; then its players go to its fallback if that still
    /// runs, else their sessions end; nobody watches it any more. Its `leave`s are its
    /// shell's business (the world is gone or shutting down).
    pub(crate) fn remove_world(&mut self, id: WorldId, why: &str) -> Vec<Effect> {
        let Some(entry) = self.worlds.remove(&id) else { return Vec::new() };
        let fallback = entry.options.fallback.filter(|f| *f != id && self.worlds.contains_key(f));
        let mut effects = Vec::new();
        if let Some(to) = entry.parent.filter(|p| self.worlds.contains_key(p)) {
            effects.push(Effect::World(to, ToWorld::Stopped(id, why.to_owned())));
        }
        for g in entry.groups {
            for p in g.members.into_keys() {
                match fallback {
                    Some(to) => {
                        let origin = Origin::Returned { from: id, why: why.to_owned() };
                        self.enter(p, to, EnterReason::WorldStopped(why.into()), origin, &mut effects);
                    }
                    None => {
                        // It stays known (its session is closing) but in no running world.
                        effects.push(Effect::close(p));
                    }
                }
            }
        }
        let watchers: Vec<PlayerId> =
            self.players.iter().filter(|(_, m)| m.watching.contains(&id)).map(|(p, _)| *p).collect();
        for p in watchers {
            self.watch(p, id, false);
        }
        effects
    }

    /// A player connected: it goes to [`WorldId::ENTRY`] and watches every world watched by
    /// everyone. Its session ends at once if the entry world is gone.
    pub(crate) fn add_player(&mut self, player: PlayerId, handle: P, who: JoinInfo) -> Vec<Effect> {
        if !self.worlds.contains_key(&WorldId::ENTRY) {
            let m = Member { home: WorldId::ENTRY, watching: Vec::new(), who, team: None, away: false, handle };
            self.players.insert(player, m);
            return vec![Effect::close(player)];
        }
        let watching = self.everyone_watches(WorldId::ENTRY);
        let m = Member { home: WorldId::ENTRY, watching, who: who.clone(), team: None, away: false, handle };
        self.players.insert(player, m);
        self.group_insert(player);
        let notice = self.notice(WorldId::ENTRY, EnterReason::Connected);
        vec![Effect::join(WorldId::ENTRY, player, who), Effect::enter(player, WorldId::ENTRY, notice)]
    }

    /// A player left the server: its world's `leave`.
    pub(crate) fn remove_player(&mut self, player: PlayerId) -> Vec<Effect> {
        self.group_remove(player);
        match self.players.remove(&player) {
            Some(m) if self.worlds.contains_key(&m.home) => vec![Effect::leave(m.home, player)],
            _ => Vec::new(),
        }
    }

    /// `player`'s client went silent (`away`) or was heard again: its world hears it, once
    /// for each change (nothing for a player not here, or no change).
    pub(crate) fn presence(&mut self, player: PlayerId, away: bool) -> Vec<Effect> {
        match self.players.get_mut(&player) {
            Some(m) if m.away != away => {
                m.away = away;
                vec![Effect::World(m.home, ToWorld::Presence(player, away))]
            }
            _ => Vec::new(),
        }
    }

    /// Moves a player to world `to` (nothing if it is not here, already there, or `to`
    /// does not run): it leaves its world, joins `to` with the same [`JoinInfo`], its
    /// inputs go there, and its client is told.
    pub(crate) fn move_player(&mut self, player: PlayerId, to: WorldId) -> Vec<Effect> {
        let Some(from) = self.players.get(&player).map(|m| m.home) else { return Vec::new() };
        if from == to || !self.worlds.contains_key(&to) {
            return Vec::new();
        }
        let mut effects = vec![Effect::leave(from, player)];
        self.enter(player, to, EnterReason::Moved, Origin::Moved { from }, &mut effects);
        effects
    }

    /// Puts `player` (whose old world is left or gone) in `to`.
    fn enter(&mut self, player: PlayerId, to: WorldId, reason: EnterReason, origin: Origin, effects: &mut Vec<Effect>) {
        self.group_remove(player);
        let everyone = self.everyone_watches(to);
        let Some(m) = self.players.get_mut(&player) else { return };
        let old = m.home;
        m.home = to;
        m.team = None;
        // It keeps watching what it watched (less its new home), and the worlds everyone does.
        m.watching.retain(|w| *w != to && *w != old);
        for w in everyone {
            if !m.watching.contains(&w) {
                m.watching.push(w);
            }
        }
        m.watching.sort_unstable();
        let who = JoinInfo { origin, ..m.who.clone() };
        let away = m.away;
        self.group_insert(player);
        effects.push(Effect::join(to, player, who));
        if away {
            effects.push(Effect::World(to, ToWorld::Presence(player, true)));
        }
        let notice = self.notice(to, reason);
        effects.push(Effect::enter(player, to, notice));
    }

    fn everyone_watches(&self, except: WorldId) -> Vec<WorldId> {
        self.worlds
            .iter()
            .filter(|(id, e)| e.options.watched_by_everyone && **id != except)
            .map(|(id, _)| *id)
            .collect()
    }

    fn notice(&self, world: WorldId, reason: EnterReason) -> WorldNotice {
        let kind = self.worlds.get(&world).map(|e| e.options.kind.clone()).unwrap_or_default();
        WorldNotice { world: world.0, kind, reason }
    }

    /// `player` watches world `world` (`on`), or stops watching it; false when nothing
    /// changed (no such player or world, or it is the player's own world).
    pub(crate) fn watch(&mut self, player: PlayerId, world: WorldId, on: bool) -> bool {
        let Some(m) = self.players.get(&player) else { return false };
        if m.home == world || (on && !self.worlds.contains_key(&world)) || m.watching.contains(&world) == on {
            return false;
        }
        self.group_remove(player);
        if let Some(m) = self.players.get_mut(&player) {
            if on {
                m.watching.push(world);
                m.watching.sort_unstable();
            } else {
                m.watching.retain(|w| *w != world);
            }
        }
        self.group_insert(player);
        true
    }

    /// Puts `player` in a team of its world (`None`: none), for [`Audience::Team`]; only
    /// `world` may, and only for its own players.
    pub(crate) fn set_team(&mut self, world: WorldId, player: PlayerId, team: Option<u16>) {
        if let Some(m) = self.players.get_mut(&player).filter(|m| m.home == world) {
            m.team = team;
        }
    }

    fn group_remove(&mut self, player: PlayerId) {
        let Some(m) = self.players.get(&player) else { return };
        let Some(e) = self.worlds.get_mut(&m.home) else { return };
        if let Some(i) = e.groups.iter().position(|g| g.watching == m.watching) {
            e.groups[i].members.remove(&player);
            if e.groups[i].members.is_empty() {
                e.groups.swap_remove(i);
            }
        }
    }

    fn group_insert(&mut self, player: PlayerId) {
        let Some(m) = self.players.get(&player) else { return };
        let Some(e) = self.worlds.get_mut(&m.home) else { return };
        match e.groups.iter_mut().find(|g| g.watching == m.watching) {
            Some(g) => {
                g.members.insert(player, m.handle.clone());
            }
            None => {
                let members = BTreeMap::from([(player, m.handle.clone())]);
                e.groups.push(Group { watching: m.watching.clone(), members });
            }
        }
    }

    /// World `world` made `snapshot`: it is kept as its newest, and `each(view, player,
    /// handle)` is called for every player in it with that player's merged view (shared by
    /// the players who watch the same worlds).
    pub(crate) fn publish(
        &mut self,
        world: WorldId,
        snapshot: Arc<WorldSnapshot>,
        mut each: impl FnMut(&Arc<View>, PlayerId, &P),
    ) {
        let tick = snapshot.tick();
        let Some(e) = self.worlds.get_mut(&world) else { return };
        e.latest = Some(snapshot);
        let Some(e) = self.worlds.get(&world) else { return };
        for g in &e.groups {
            let mut parts = Vec::with_capacity(1 + g.watching.len());
            let mut push = |id: WorldId, e: &Entry<P>| {
                if let Some(s) = &e.latest {
                    parts.push(Part { number: id.0, snapshot: s.clone(), relevancy: e.relevancy.clone(), start: 0 });
                }
            };
            // Ascending numbers: the home world in its place among the watched ones.
            let mut watched = g.watching.iter().peekable();
            while let Some(w) = watched.next_if(|w| **w < world) {
                if let Some(we) = self.worlds.get(w) {
                    push(*w, we);
                }
            }
            push(world, e);
            for w in watched {
                if let Some(we) = self.worlds.get(w) {
                    push(*w, we);
                }
            }
            let view = Arc::new(View::merge(tick, parts));
            for (p, h) in &g.members {
                each(&view, *p, h);
            }
        }
    }

    /// The world a player is in.
    pub(crate) fn home(&self, player: PlayerId) -> Option<WorldId> {
        self.players.get(&player).map(|m| m.home)
    }

    /// The worlds a player watches.
    pub(crate) fn watching(&self, player: PlayerId) -> &[WorldId] {
        self.players.get(&player).map_or(&[], |m| &m.watching)
    }

    /// How the shell reaches a player.
    pub(crate) fn handle(&self, player: PlayerId) -> Option<&P> {
        self.players.get(&player).map(|m| &m.handle)
    }

    /// Every player on the server, with its handle.
    pub(crate) fn players(&self) -> impl Iterator<Item = (PlayerId, &P)> + '_ {
        self.players.iter().map(|(id, m)| (*id, &m.handle))
    }

    /// Players on the server.
    pub(crate) fn player_count(&self) -> usize {
        self.players.len()
    }

    /// Who a message from `world` to `to` reaches: [`Audience::All`] is the world's own
    /// players, [`Audience::Team`] those of them in the team, [`Audience::Watchers`] its
    /// players and every player watching it, [`Audience::Player`] one player in it or
    /// watching it.
    pub(crate) fn audience(&self, world: WorldId, to: Audience) -> Box<dyn Iterator<Item = (PlayerId, &P)> + '_> {
        let sees = move |m: &Member<P>| m.home == world || m.watching.contains(&world);
        match to {
            // The world's own groups: no walk over every player of the server.
            Audience::All => Box::new(self.members(world)),
            Audience::Team(t) => Box::new(
                self.members(world).filter(move |(p, _)| self.players.get(p).is_some_and(|m| m.team == Some(t))),
            ),
            Audience::Watchers => {
                Box::new(self.players.iter().filter(move |(_, m)| sees(m)).map(|(p, m)| (*p, &m.handle)))
            }
            Audience::Player(q) => Box::new(
                self.players.get_key_value(&q).filter(move |(_, m)| sees(m)).map(|(p, m)| (*p, &m.handle)).into_iter(),
            ),
        }
    }

    /// The players in `world`.
    pub(crate) fn members(&self, world: WorldId) -> impl Iterator<Item = (PlayerId, &P)> + '_ {
        self.worlds
            .get(&world)
            .into_iter()
            .flat_map(|e| e.groups.iter().flat_map(|g| g.members.iter().map(|(p, h)| (*p, h))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Everything;
    use crate::server::game::world::Numbers;

    fn who(n: u64) -> JoinInfo {
        JoinInfo::new(n, [0; crate::protocol::netcode::USER_DATA_BYTES])
    }

    fn snap(tick: u32, ids: &[u32]) -> Arc<WorldSnapshot> {
        let mut s = WorldSnapshot::new(tick);
        for id in ids {
            s.push_raw(*id, 0, &[*id]);
        }
        Arc::new(s)
    }

    #[test]
    fn players_move_watch_and_get_merged_views() {
        let mut d: Directory<()> = Directory::default();
        d.add_world(WorldId::ENTRY, WorldOptions::new("lobby"), Arc::new(Everything), None);
        d.add_world(WorldId(1), WorldOptions::new("global").watched_by_everyone(), Arc::new(Everything), None);
        let started_by = Some(WorldId::ENTRY);
        d.add_world(WorldId(2), WorldOptions::new("match").fallback(WorldId::ENTRY), Arc::new(Everything), started_by);
        let fx = d.add_player(5, (), who(50));
        assert!(
            matches!(&fx[..], [Effect::World(WorldId(0), ToWorld::Join(5, who)), Effect::Player(5, ToPlayer::Enter(..))]
            if who.origin == Origin::Connected)
        );
        assert_eq!(d.watching(5), [WorldId(1)], "the global world is watched by everyone");
        d.publish(WorldId(1), snap(3, &[1]), |_, _, _| panic!("nobody is in the global world"));
        let mut seen = Vec::new();
        d.publish(WorldId::ENTRY, snap(3, &[7]), |v, p, _| seen.push((p, v.merged.ids().to_vec())));
        assert_eq!(seen, [(5, vec![7, merged_id(1, 1)])]);

        let fx = d.move_player(5, WorldId(2));
        assert_eq!(fx[0], Effect::World(WorldId::ENTRY, ToWorld::Leave(5)));
        assert!(matches!(&fx[1], Effect::World(WorldId(2), ToWorld::Join(5, who))
            if who.client_id == 50 && who.origin == Origin::Moved { from: WorldId::ENTRY }));
        assert!(
            matches!(&fx[2], Effect::Player(5, ToPlayer::Enter(_, notice)) if notice.kind == "match" && notice.reason == EnterReason::Moved)
        );
        let mut seen = Vec::new();
        d.publish(WorldId(2), snap(4, &[7, 8]), |v, p, _| seen.push((p, v.merged.ids().to_vec())));
        assert_eq!(seen, [(5, vec![merged_id(1, 1), merged_id(2, 7), merged_id(2, 8)])], "ids never collide");
        assert!(d.move_player(5, WorldId(9)).is_empty(), "no such world: nothing");

        let fx = d.remove_world(WorldId(2), "the match ended");
        let why = String::from("the match ended");
        assert_eq!(fx[0], Effect::World(WorldId::ENTRY, ToWorld::Stopped(WorldId(2), why.clone())), "told first");
        assert!(matches!(&fx[1], Effect::World(WorldId(0), ToWorld::Join(_, who))
            if who.origin == Origin::Returned { from: WorldId(2), why: why.clone() }));
        assert!(fx.iter().any(|e| matches!(e, Effect::Player(_, ToPlayer::Enter(WorldId(0), notice))
            if notice.reason == EnterReason::WorldStopped(why.clone()))));
        assert_eq!(d.home(5), Some(WorldId::ENTRY), "to the fallback");
        assert_eq!(d.remove_player(5), [Effect::World(WorldId::ENTRY, ToWorld::Leave(5))]);
    }

    #[test]
    fn a_world_without_fallback_closes_its_players() {
        let mut d: Directory<()> = Directory::default();
        d.add_world(WorldId::ENTRY, WorldOptions::new("main"), Arc::new(Everything), None);
        d.add_player(1, (), who(1));
        assert_eq!(
            d.remove_world(WorldId::ENTRY, "failed"),
            [Effect::Player(1, ToPlayer::Close(SessionEnd::WorldStopped))]
        );
        assert_eq!(d.add_player(2, (), who(2)), [Effect::Player(2, ToPlayer::Close(SessionEnd::WorldStopped))]);
    }

    #[test]
    fn world_numbers_go_round_before_reuse() {
        let mut n = Numbers::default();
        let a = n.take();
        n.free(WorldId(0));
        assert_eq!(a, Some(WorldId(0)));
        assert_eq!(n.take(), Some(WorldId(1)), "not the one just freed");
    }

    use crate::protocol::snapshot::world::merged_id;
}
