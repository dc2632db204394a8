//! Tag, on volley: whoever is "it" chases the others; touching one passes it on, and every
//! player hears "X tagged Y". Players chat (client messages the world reads and passes on),
//! the world kicks a player who idles or swears (its client reads why), and the built-in
//! scoreboard shows everyone's name (from the connect token), tags made, seconds spent "it"
//! and ping. Written only against `volley::prelude` and the README: what a game writes.
//!
//! [`TagWorld`] is the server's game; [`Runner`] the replicated state; [`TagInput`] what a
//! client sends each frame; [`ToServer`] and [`ToClient`] the messages either way.

use std::collections::BTreeMap;
use std::time::Duration;

use glam::Vec2;
use serde::{Deserialize, Serialize};
use volley::prelude::*;

/// Half the side of the square field, in metres.
pub const FIELD: f32 = 20.0;
/// How close "it" must come to tag, in metres.
pub const TAG_DISTANCE: f32 = 1.0;
/// Players' speed, metres a second ("it" is a little faster).
pub const SPEED: f32 = 5.0;
/// What one input stands for: a frame of a 60 Hz client (the server's tick). Each input the
/// world applies moves its runner this long at its speed ([`run`]), so a client predicts its
/// own runner exactly by applying the same step to the inputs the server has not yet applied
/// ([`RunnerModel`]).
pub const INPUT_SECONDS: f32 = 1.0 / 60.0;
/// Seconds without input before a player is kicked.
pub const IDLE_KICK_SECS: f32 = 10.0;
/// A word that gets a player kicked from the chat.
pub const BANNED_WORD: &str = "darn";

volley::replicated! {
    /// A player on the field.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Runner {
        /// Where it is, to the centimetre.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-FIELD), Vec2::splat(FIELD), 0.01),
        /// Whether it is "it".
        pub it: bool = Flag,
    }
}

/// The replicated kinds (the server's and every client's).
pub fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Runner>().expect("a fresh schema");
    s
}

/// One frame of a player's steering: a direction, each axis −127 to 127.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TagInput {
    /// Right is positive.
    pub x: i8,
    /// Up is positive.
    pub y: i8,
}

impl TagInput {
    /// The two bytes a client sends.
    pub fn to_bytes(self) -> [u8; 2] {
        [self.x as u8, self.y as u8]
    }

    /// Reads an input; anything but two bytes is no input (a hostile client's garbage).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        match b {
            [x, y] => Some(Self { x: *x as i8, y: *y as i8 }),
            _ => None,
        }
    }

    /// Steering towards `to` from `from`, full speed.
    pub fn towards(from: Vec2, to: Vec2) -> Self {
        let d = (to - from).normalize_or_zero() * 127.0;
        Self { x: d.x as i8, y: d.y as i8 }
    }
}

/// Where one input takes a runner at `from` (faster when it is "it"): the rule the world
/// applies and a predicting client replays.
pub fn run(from: Vec2, it: bool, input: TagInput) -> Vec2 {
    let steer = (Vec2::new(f32::from(input.x), f32::from(input.y)) / 127.0).clamp_length_max(1.0);
    let speed = if it { SPEED * 1.1 } else { SPEED };
    (from + steer * speed * INPUT_SECONDS).clamp(Vec2::splat(-FIELD), Vec2::splat(FIELD))
}

/// The client's prediction of its own runner ([`volley::client::predict::Model`]): its
/// position, moved by each input as the world moves it ([`run`]), at the speed of whether it
/// was "it" in the newest snapshot.
///
/// ```
/// # use volley::prelude::*;
/// # use volley::client::predict::Prediction;
/// # fn frame(client: &GameClient, now: std::time::Duration) {
/// /// // Positions are sent to the centimetre: smaller corrections are rounding.
/// let mut me = Prediction::new(120, std::time::Duration::from_millis(100)).tolerance(0.01);
/// let mut model = volley_tag::RunnerModel::default();
/// // each frame, after sending the input:
/// let drawn = me.frame(client, now, &mut model);
/// # let _ = drawn;
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RunnerModel {
    it: bool,
}

impl volley::client::predict::Model for RunnerModel {
    type Kind = Runner;
    type State = Vec2;
    type Input = TagInput;
    fn state(&mut self, runner: &Runner) -> Vec2 {
        self.it = runner.it;
        runner.position
    }
    fn input(&self, bytes: &[u8]) -> Option<TagInput> {
        TagInput::from_bytes(bytes)
    }
    fn step(&self, position: &mut Vec2, input: &TagInput) {
        *position = run(*position, self.it, *input);
    }
}

/// What a client says to the world (reliable messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToServer {
    /// A chat line for everyone.
    Chat(String),
}

/// What the world tells clients (reliable messages).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToClient {
    /// Someone said something.
    Chat {
        /// Who.
        from: String,
        /// What.
        text: String,
    },
    /// Someone tagged someone: the tagged one is "it" now.
    Tagged {
        /// The tagger.
        by: String,
        /// The new "it".
        it: String,
    },
}

/// The scoreboard's columns (the framework adds each player's name and ping).
pub const COLUMNS: [&str; 2] = ["tags", "seconds it"];

/// One line of the scoreboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The player.
    pub player: PlayerId,
    /// Its name (from its connect token).
    pub name: String,
    /// Players it tagged.
    pub tags: u32,
    /// Seconds it spent "it".
    pub seconds_it: u32,
}

/// A player's name from its token's user data: the UTF-8 text before the first zero byte,
/// or "player N" when there is none.
pub fn name_from(player: PlayerId, who: &JoinInfo) -> String {
    let end = who.user_data.iter().position(|b| *b == 0).unwrap_or(who.user_data.len());
    match std::str::from_utf8(&who.user_data[..end]) {
        Ok(name) if !name.trim().is_empty() => name.chars().take(24).collect(),
        _ => format!("player {player}"),
    }
}

/// The user data a token carries for a player called `name` (what a backend would mint).
pub fn user_data_for(name: &str) -> [u8; 256] {
    let mut data = [0u8; 256];
    let n = name.len().min(24);
    data[..n].copy_from_slice(&name.as_bytes()[..n]);
    data
}

#[derive(Debug)]
struct Player {
    name: String,
    position: Vec2,
    idle: f32,
    tags: u32,
    seconds_it: f32,
}

/// The game: players in join order, who is "it", and what to tell everyone after the tick.
#[derive(Debug, Default)]
pub struct TagWorld {
    players: BTreeMap<PlayerId, Player>,
    it: Option<PlayerId>,
    /// Ticks before "it" may tag again (no tagging straight back).
    cooldown: u32,
    tick: u32,
    said: Vec<ToClient>,
    kicks: Vec<(PlayerId, String)>,
    /// The scores of players who left, for the final scoreboard.
    departed: Vec<Score>,
    /// The final scoreboard (everyone who played, best first), made when the server shuts
    /// down: after every player's leave, so it is kept from their scores.
    pub final_scores: Option<Vec<Score>>,
}

impl TagWorld {
    /// The scoreboard now, best tagger first.
    pub fn scores(&self) -> Vec<Score> {
        let mut s: Vec<Score> = self
            .players
            .iter()
            .map(|(id, p)| Score { player: *id, name: p.name.clone(), tags: p.tags, seconds_it: p.seconds_it as u32 })
            .collect();
        s.sort_by(|a, b| b.tags.cmp(&a.tags).then(a.player.cmp(&b.player)));
        s
    }

    /// Who is "it".
    pub fn it(&self) -> Option<PlayerId> {
        self.it
    }

    fn name(&self, p: PlayerId) -> String {
        self.players.get(&p).map_or_else(|| format!("player {p}"), |p| p.name.clone())
    }
}

impl World for TagWorld {
    fn schema(&self) -> Schema {
        schema()
    }

    fn join_with(&mut self, player: PlayerId, who: &JoinInfo) {
        // Spread out on a circle; the first player is "it".
        let angle = player as f32 * 2.4;
        let position = Vec2::from_angle(angle) * (FIELD * 0.5);
        let name = name_from(player, who);
        self.players.insert(player, Player { name, position, idle: 0.0, tags: 0, seconds_it: 0.0 });
        self.it.get_or_insert(player);
    }

    fn leave(&mut self, player: PlayerId) {
        if let Some(p) = self.players.remove(&player) {
            let seconds_it = p.seconds_it as u32;
            self.departed.push(Score { player, name: p.name, tags: p.tags, seconds_it });
        }
        if self.it == Some(player) {
            self.it = self.players.keys().next().copied();
        }
    }

    fn input(&mut self, player: PlayerId, input: &[u8]) {
        let it = self.it == Some(player);
        let (Some(p), Some(i)) = (self.players.get_mut(&player), TagInput::from_bytes(input)) else { return };
        // Each input moves its runner one frame's way (no input, no move): the client
        // predicts its own runner with the same rule.
        p.position = run(p.position, it, i);
        if i != TagInput::default() {
            p.idle = 0.0;
        }
    }

    fn message(&mut self, player: PlayerId, message: &[u8], _reliable: bool) {
        // A message that does not decode is a broken or hostile client's: skip it.
        let Ok(ToServer::Chat(text)) = decode_message::<ToServer>(message) else { return };
        if text.to_lowercase().contains(BANNED_WORD) {
            self.kicks.push((player, "language".into()));
            return;
        }
        let text: String = text.chars().take(200).collect();
        self.said.push(ToClient::Chat { from: self.name(player), text });
    }

    fn tick(&mut self, tick: u32, dt: Duration) {
        self.tick = tick;
        let dt = dt.as_secs_f32();
        self.cooldown = self.cooldown.saturating_sub(1);
        for (id, p) in &mut self.players {
            p.idle += dt;
            if self.it == Some(*id) {
                p.seconds_it += dt;
            }
            if p.idle > IDLE_KICK_SECS && !self.kicks.iter().any(|(k, _)| k == id) {
                self.kicks.push((*id, format!("idle for {IDLE_KICK_SECS} s")));
            }
        }
        // "It" tags the nearest player within reach.
        let Some(it) = self.it.filter(|_| self.cooldown == 0) else { return };
        let Some(at) = self.players.get(&it).map(|p| p.position) else { return };
        let tagged = self
            .players
            .iter()
            .filter(|(id, p)| **id != it && p.position.distance(at) < TAG_DISTANCE)
            .min_by(|a, b| a.1.position.distance(at).total_cmp(&b.1.position.distance(at)))
            .map(|(id, _)| *id);
        if let Some(t) = tagged {
            if let Some(p) = self.players.get_mut(&it) {
                p.tags += 1;
            }
            self.it = Some(t);
            self.cooldown = 60;
            self.said.push(ToClient::Tagged { by: self.name(it), it: self.name(t) });
        }
    }

    fn messages(&mut self, out: &mut Outbox) {
        for m in self.said.drain(..) {
            let _ = out.reliable_message(Audience::All, &m);
        }
        // The built-in scoreboard sends what changed, twice a second.
        for (id, p) in &self.players {
            out.set_score(*id, &[p.tags as i32, p.seconds_it as i32]);
        }
        for (player, why) in self.kicks.drain(..) {
            out.kick(player, why);
        }
    }

    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for (id, p) in &self.players {
            // Players are the only entities, each under its own id.
            let _ = out.insert(*id, &Runner { position: p.position, it: self.it == Some(*id) });
        }
    }

    fn scoreboard_columns(&self) -> Vec<String> {
        COLUMNS.iter().map(|c| c.to_string()).collect()
    }

    fn shutdown(&mut self) {
        let mut scores = std::mem::take(&mut self.departed);
        scores.extend(self.scores());
        scores.sort_by(|a, b| b.tags.cmp(&a.tags).then(a.name.cmp(&b.name)));
        for s in &scores {
            tracing::info!(name = %s.name, tags = s.tags, seconds_it = s.seconds_it, "final score");
        }
        self.final_scores = Some(scores);
    }
}

/// A simple player: chases the nearest runner when it is "it", runs from "it" otherwise.
pub fn steer(client: &GameClient, now: Duration) -> TagInput {
    let Some(me) = client.client_index() else { return TagInput::default() };
    let runners = client.entities::<Runner>(now);
    let Some(mine) = runners.iter().find(|(id, _)| *id == me).map(|(_, r)| r.clone()) else {
        return TagInput::default();
    };
    let others = runners.iter().filter(|(id, _)| *id != me);
    if mine.it {
        let nearest =
            others.min_by(|a, b| a.1.position.distance(mine.position).total_cmp(&b.1.position.distance(mine.position)));
        nearest.map_or_else(TagInput::default, |(_, r)| TagInput::towards(mine.position, r.position))
    } else {
        let chaser = others.filter(|(_, r)| r.it).map(|(_, r)| r.position).next();
        // Away from "it", bending along the wall so as not to stick in a corner.
        chaser.map_or_else(TagInput::default, |c| {
            let away = (mine.position - c).normalize_or_zero() + mine.position.perp() * 0.02;
            TagInput::towards(Vec2::ZERO, away)
        })
    }
}
