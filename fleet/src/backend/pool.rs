//! The game servers the backend hands out, what their `/readyz` last said, and the seats
//! it promised since.
//!
//! Each server is polled (its admin listener's `/readyz`: `ready: N/M players`, or 503 when
//! starting, draining or full). Between polls the backend counts the tokens it minted for a
//! server as taken seats for [`RESERVATION`], so a burst of requests does not overfill a
//! server whose last poll said it had room. Time is passed in.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a minted token counts as a taken seat (long enough for its client to connect
/// and the next poll to see it).
pub const RESERVATION: Duration = Duration::from_secs(3);

/// A poll older than this is not believed: the server is treated as gone.
pub const STALE_AFTER: Duration = Duration::from_secs(5);

/// One game server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// The address clients connect to (it goes in the token).
    pub public: SocketAddr,
    /// Its admin listener (polled for `/readyz`).
    pub admin: SocketAddr,
    /// Its web front as a browser reaches it (`http://…` or `https://…`, the server's
    /// `--web` address or the proxy before it), if it has one: a token grant for this server
    /// names it ([`TokenGrant::web`](super::desk::TokenGrant::web)), where the page reads
    /// `/web.json` and connects.
    pub web: Option<String>,
}

/// Checks a web front's address for a [`ServerSpec`]: an `http://` or `https://` URL of at
/// most 200 characters, without spaces, quotes or angle brackets.
///
/// # Errors
/// When it is not one.
pub fn check_web(web: &str) -> Result<String, String> {
    let scheme = web.starts_with("http://") || web.starts_with("https://");
    let clean = web.len() <= 200 && !web.chars().any(|c| c.is_whitespace() || c.is_control() || "\"'<>\\".contains(c));
    if scheme && clean {
        Ok(web.trim_end_matches('/').to_owned())
    } else {
        Err(format!("{web:?}: give the web front as http://HOST:PORT or https://HOST:PORT"))
    }
}

impl std::str::FromStr for ServerSpec {
    type Err = String;

    /// `PUBLIC@ADMIN[@WEB]`: the UDP address clients use, the admin listener and, for a
    /// server with a web front, its URL, e.g.
    /// `10.0.0.5:40000@10.0.0.5:9100@https://play1.example.com:8080`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (public, rest) = s
            .split_once('@')
            .ok_or_else(|| format!("{s:?}: give PUBLIC_ADDR@ADMIN_ADDR, e.g. 10.0.0.5:40000@10.0.0.5:9100"))?;
        let (admin, web) = match rest.split_once('@') {
            Some((admin, web)) => (admin, Some(check_web(web)?)),
            None => (rest, None),
        };
        let public = public.parse().map_err(|e| format!("{public:?}: {e}"))?;
        let admin = admin.parse().map_err(|e| format!("{admin:?}: {e}"))?;
        Ok(Self { public, admin, web })
    }
}

/// What one poll of `/readyz` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Taking players: this many of this many seats taken.
    Ready {
        /// Players connected.
        players: u64,
        /// Seats.
        slots: u64,
    },
    /// Full, starting or draining (a 503), or no answer.
    NotReady,
}

/// Reads a `/readyz` answer.
pub fn parse_readyz(status: u16, body: &str) -> Readiness {
    let counts = || {
        let s = body.split_once("ready: ")?.1;
        let (players, rest) = s.split_once('/')?;
        let slots: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((players.trim().parse().ok()?, slots.parse().ok()?))
    };
    match (status, counts()) {
        (200, Some((players, slots))) => Readiness::Ready { players, slots },
        _ => Readiness::NotReady,
    }
}

#[derive(Debug)]
struct Server {
    spec: ServerSpec,
    last: Readiness,
    polled_at: Option<Duration>,
    reserved: VecDeque<Duration>,
}

impl Server {
    fn room(&mut self, now: Duration) -> u64 {
        while self.reserved.front().is_some_and(|&t| now.saturating_sub(t) >= RESERVATION) {
            self.reserved.pop_front();
        }
        let fresh = self.polled_at.is_some_and(|t| now.saturating_sub(t) < STALE_AFTER);
        match (fresh, self.last) {
            (true, Readiness::Ready { players, slots }) => slots.saturating_sub(players + self.reserved.len() as u64),
            _ => 0,
        }
    }
}

/// The servers, in the order given.
#[derive(Debug)]
pub struct Pool {
    servers: Vec<Server>,
}

impl Pool {
    /// A pool of `specs`, none polled yet.
    pub fn new(specs: Vec<ServerSpec>) -> Self {
        Self {
            servers: specs
                .into_iter()
                .map(|spec| Server { spec, last: Readiness::NotReady, polled_at: None, reserved: VecDeque::new() })
                .collect(),
        }
    }

    /// The servers.
    pub fn specs(&self) -> impl Iterator<Item = &ServerSpec> {
        self.servers.iter().map(|s| &s.spec)
    }

    /// Records what server `index` answered at `now`.
    pub fn polled(&mut self, index: usize, readiness: Readiness, now: Duration) {
        if let Some(s) = self.servers.get_mut(index) {
            s.last = readiness;
            s.polled_at = Some(now);
        }
    }

    /// Servers ready with room, and their free seats in all.
    pub fn room(&mut self, now: Duration) -> (usize, u64) {
        self.servers.iter_mut().map(|s| s.room(now)).filter(|&r| r > 0).fold((0, 0), |(n, t), r| (n + 1, t + r))
    }

    /// Picks servers for one player and reserves a seat on the first: the servers with room,
    /// fullest first (so one server fills before the next, and an idle one can be scaled
    /// away), at most `max`. The client tries them in this order, so if the first has filled
    /// by the time it connects it falls through to the next. `None` when none has room.
    pub fn pick(&mut self, now: Duration, max: usize) -> Option<Vec<SocketAddr>> {
        let mut open: Vec<(u64, usize)> = Vec::with_capacity(self.servers.len());
        for (i, s) in self.servers.iter_mut().enumerate() {
            let room = s.room(now);
            if room > 0 {
                open.push((room, i));
            }
        }
        open.sort_unstable();
        let first = open.first()?.1;
        self.servers[first].reserved.push_back(now);
        Some(open.iter().take(max.max(1)).map(|&(_, i)| self.servers[i].spec.public).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(n: u16) -> ServerSpec {
        format!("127.0.0.1:{}@127.0.0.1:{}", 40000 + n, 9100 + n).parse().unwrap()
    }

    #[test]
    fn readyz_answers_are_read() {
        assert_eq!(parse_readyz(200, "ready: 3/100 players\n"), Readiness::Ready { players: 3, slots: 100 });
        assert_eq!(parse_readyz(503, "not ready: full (100/100)\n"), Readiness::NotReady);
        assert_eq!(parse_readyz(200, "garbage"), Readiness::NotReady);
        assert!("127.0.0.1:1".parse::<ServerSpec>().is_err());
    }

    #[test]
    fn the_fullest_server_with_room_comes_first_and_reservations_count_until_they_lapse() {
        let mut p = Pool::new(vec![spec(0), spec(1)]);
        let t = Duration::from_secs(100);
        assert_eq!(p.pick(t, 8), None, "nothing polled yet");
        p.polled(0, Readiness::Ready { players: 0, slots: 3 }, t);
        p.polled(1, Readiness::Ready { players: 1, slots: 3 }, t);
        // Server 1 is fuller: it fills first, server 0 follows in the list.
        assert_eq!(p.pick(t, 8), Some(vec![spec(1).public, spec(0).public]));
        assert_eq!(p.pick(t, 8), Some(vec![spec(1).public, spec(0).public]));
        // Server 1 is now full by reservations: server 0 alone.
        assert_eq!(p.pick(t, 8), Some(vec![spec(0).public]));
        assert_eq!(p.room(t), (1, 2));
        // Reservations lapse; a stale poll counts as no room.
        assert_eq!(p.room(t + RESERVATION), (2, 5));
        assert_eq!(p.room(t + STALE_AFTER), (0, 0));
    }
}
