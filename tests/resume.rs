//! Sessions that survive a broken network: a client whose address changes (a NAT rebinding,
//! a new network) or whose link goes silent for a while comes back with its resume ticket as
//! the same player: the same id, world and standing, no input lost or applied twice, no
//! reliable message lost or repeated. In the stepper (the address changed, a link cut) and
//! over real sockets (the client's socket moved to a new port).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;

/// Records every input (a counter the client sends) and every join and leave; sends each
/// player a numbered reliable message every ten ticks.
#[derive(Default, Clone)]
struct Ledger {
    inputs: Arc<Mutex<Vec<(PlayerId, u32)>>>,
    joins: Arc<Mutex<Vec<PlayerId>>>,
    left: Arc<Mutex<Vec<PlayerId>>>,
    /// `away` (true) and `back` (false), in order.
    presence: Arc<Mutex<Vec<(PlayerId, bool)>>>,
    to_kick: Arc<Mutex<Vec<PlayerId>>>,
    players: Vec<PlayerId>,
    ticks: u32,
    sent: u32,
}

impl World for Ledger {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, p: PlayerId) {
        self.joins.lock().unwrap().push(p);
        self.players.push(p);
    }
    fn leave(&mut self, p: PlayerId) {
        self.left.lock().unwrap().push(p);
        self.players.retain(|q| *q != p);
    }
    fn away(&mut self, p: PlayerId) {
        self.presence.lock().unwrap().push((p, true));
    }
    fn back(&mut self, p: PlayerId) {
        self.presence.lock().unwrap().push((p, false));
    }
    fn input(&mut self, p: PlayerId, input: &[u8]) {
        if let Ok(b) = <[u8; 4]>::try_from(input) {
            self.inputs.lock().unwrap().push((p, u32::from_le_bytes(b)));
        }
    }
    fn tick(&mut self, _: u32, _: Duration) {
        self.ticks += 1;
    }
    fn messages(&mut self, out: &mut Outbox) {
        for p in self.to_kick.lock().unwrap().drain(..) {
            out.kick(p, "bye");
        }
        if self.ticks.is_multiple_of(10) {
            self.sent += 1;
            for p in &self.players {
                out.reliable(Audience::Player(*p), postcard::to_allocvec(&self.sent).unwrap());
            }
        }
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// The inputs `p` brought, in the order the world took them.
fn inputs_of(world: &Ledger, p: PlayerId) -> Vec<u32> {
    world.inputs.lock().unwrap().iter().filter(|(q, _)| *q == p).map(|(_, n)| *n).collect()
}

/// Every input from the first to the last, once, in order.
fn whole(inputs: &[u32]) -> bool {
    inputs.windows(2).all(|w| w[1] == w[0] + 1)
}

/// A stepper whose one client has played for a second: the world, the stepper, the client's
/// counter and its player.
fn one_playing() -> (Ledger, Stepper<Ledger>, [u32; 1], PlayerId) {
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 1];
    play(&mut stepper, &mut counters, 60);
    let me = stepper.clients[0].client.client_index().unwrap();
    (world, stepper, counters, me)
}

/// Steps with each client sending its next counter as its input.
fn play(stepper: &mut Stepper<Ledger>, counters: &mut [u32], ticks: u32) {
    for _ in 0..ticks {
        stepper.step_with(|i, _, _| {
            counters[i] += 1;
            counters[i].to_le_bytes().to_vec()
        });
    }
}

fn messages(client: &mut GameClient, into: &mut Vec<u32>) {
    while let Some(m) = client.channel().recv_message::<u32>() {
        into.push(m.unwrap());
    }
}

#[test]
fn in_the_stepper_a_client_whose_address_changes_mid_match_resumes_as_the_same_player() {
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 2];
    let mut got = Vec::new();
    play(&mut stepper, &mut counters, 60);
    messages(&mut stepper.clients[0].client, &mut got);
    assert!(stepper.clients[0].client.has_ticket(), "a ticket soon after connecting");
    let me = stepper.clients[0].client.client_index().unwrap();
    // A NAT rebinding: the client's packets come from a new port; the server's to the old
    // one are lost. The client does not know: it hears nothing for a second, then resumes.
    stepper.clients[0].addr = "10.0.9.9:61000".parse().unwrap();
    for _ in 0..180 {
        play(&mut stepper, &mut counters, 1);
        messages(&mut stepper.clients[0].client, &mut got);
    }
    let c = &stepper.clients[0].client;
    assert_eq!(c.resumes(), 1, "resumed once");
    assert!(c.is_ready() && c.ended().is_none());
    assert_eq!(c.client_index(), Some(me), "the same slot");
    assert_eq!(stepper.players(), 2);
    assert!(world.left.lock().unwrap().is_empty(), "nobody left");
    assert_eq!(world.joins.lock().unwrap().len(), 2, "nobody joined again");
    let mine = inputs_of(&world, me);
    assert!(whole(&mine), "every input once, in order: {mine:?}");
    assert!(
        *mine.last().unwrap() + 4 >= counters[0],
        "the newest inputs arrive ({} of {})",
        mine.last().unwrap(),
        counters[0]
    );
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1) && got[0] == 1, "every reliable message once, in order: {got:?}");
    assert!(got.len() >= 22, "messages went on after the resume: {}", got.len());
    // The other player did not notice.
    let other = stepper.clients[1].client.client_index().unwrap();
    assert!(whole(&inputs_of(&world, other)));
}

#[test]
fn in_the_stepper_a_silence_shorter_than_the_timeout_resumes_on_the_same_address() {
    let (world, mut stepper, mut counters, me) = one_playing();
    // Both ways cut for three seconds (a tunnel, a laptop lid): no datagram passes.
    let cut = LinkProfile { loss: 1.0, ..LinkProfile::PERFECT };
    stepper.set_link(0, cut);
    play(&mut stepper, &mut counters, 180);
    stepper.set_link(0, LinkProfile::PERFECT);
    play(&mut stepper, &mut counters, 120);
    let c = &stepper.clients[0].client;
    assert!(c.is_ready() && c.ended().is_none(), "{:?}", c.ended());
    assert_eq!(c.resumes(), 1);
    assert_eq!(c.client_index(), Some(me));
    assert!(world.left.lock().unwrap().is_empty());
    let mine = inputs_of(&world, me);
    assert!(mine.windows(2).all(|w| w[1] > w[0]), "no input applied twice, none out of order: {mine:?}");
    // What the client keeps for the server is the last two seconds (REPLAY_INPUTS): of the
    // 180 inputs made while cut off, the oldest 60 or so are given up, the rest arrive.
    let missing = mine.last().unwrap() - mine[0] + 1 - mine.len() as u32;
    assert!(missing as usize <= 180 - volley::client::REPLAY_INPUTS + 8, "{missing} inputs lost");
}

#[test]
fn in_the_stepper_a_silence_past_the_timeout_but_within_the_grace_keeps_the_player() {
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 1];
    let mut got = Vec::new();
    play(&mut stepper, &mut counters, 60);
    messages(&mut stepper.clients[0].client, &mut got);
    let me = stepper.clients[0].client.client_index().unwrap();
    assert_eq!(stepper.clients[0].client.link_status(), LinkStatus::Ready);
    // Both ways cut for eight seconds: past the connection's timeout (5 s), within the
    // server's resume grace (15 s by default). The world hears the player went away.
    stepper.set_link(0, LinkProfile { loss: 1.0, ..LinkProfile::PERFECT });
    play(&mut stepper, &mut counters, 60 * 8);
    assert_eq!(*world.presence.lock().unwrap(), vec![(me, true)], "away, once");
    assert_eq!(stepper.players(), 1, "the player is kept");
    assert!(world.left.lock().unwrap().is_empty());
    let c = &stepper.clients[0].client;
    assert!(c.is_resuming() && c.ended().is_none(), "still trying: {:?}", c.ended());
    assert_eq!(c.link_status(), LinkStatus::Resuming, "the game is told it is reconnecting");
    // The link comes back: the client's handshake (tried again and again) gets through.
    stepper.set_link(0, LinkProfile::PERFECT);
    for _ in 0..120 {
        play(&mut stepper, &mut counters, 1);
        messages(&mut stepper.clients[0].client, &mut got);
    }
    let c = &stepper.clients[0].client;
    assert!(c.is_ready() && c.ended().is_none(), "{:?}", c.ended());
    assert_eq!((c.resumes(), c.client_index()), (1, Some(me)), "the same player, resumed once");
    assert_eq!(c.link_status(), LinkStatus::Ready, "and that it is back");
    assert_eq!(*world.presence.lock().unwrap(), vec![(me, true), (me, false)], "away, then back");
    assert!(world.left.lock().unwrap().is_empty(), "nobody left");
    assert_eq!(world.joins.lock().unwrap().len(), 1, "nobody joined again");
    let mine = inputs_of(&world, me);
    assert!(mine.windows(2).all(|w| w[1] > w[0]), "no input applied twice, none out of order");
    assert!(*mine.last().unwrap() + 4 >= counters[0], "inputs flow again");
    assert!(got.windows(2).all(|w| w[1] == w[0] + 1) && got[0] == 1, "every reliable message once, in order: {got:?}");
    assert!(got.len() >= 60, "the messages of the silence arrived: {}", got.len());
}

#[test]
fn in_the_stepper_a_client_silent_past_the_grace_leaves_and_reads_timed_out() {
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4).with_resume_grace(Duration::from_secs(8));
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 1];
    play(&mut stepper, &mut counters, 60);
    let me = stepper.clients[0].client.client_index().unwrap();
    // Cut for longer than the grace: away at the timeout, gone at the grace; the client's
    // resume, tried meanwhile, gives up when the server has.
    stepper.set_link(0, LinkProfile { loss: 1.0, ..LinkProfile::PERFECT });
    play(&mut stepper, &mut counters, 60 * 7);
    assert_eq!(stepper.players(), 1, "kept at 7 s");
    assert_eq!(stepper.clients[0].client.ended(), None);
    play(&mut stepper, &mut counters, 60 * 2);
    assert_eq!(stepper.players(), 0, "gone at 9 s");
    assert_eq!(*world.left.lock().unwrap(), vec![me]);
    assert_eq!(*world.presence.lock().unwrap(), vec![(me, true)], "away, then no back");
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::TimedOut));
    assert_eq!(stepper.clients[0].client.link_status(), LinkStatus::Ended(SessionEnd::TimedOut));
}

#[test]
fn in_the_stepper_without_a_grace_a_client_cut_off_past_the_timeout_reads_timed_out_as_before() {
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 4).with_resume_grace(Duration::ZERO);
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 1];
    play(&mut stepper, &mut counters, 60);
    // Cut for longer than the timeout (5 s): the server ends the session, and the client's
    // resume, tried meanwhile, gives up when the old connection would have timed out.
    stepper.set_link(0, LinkProfile { loss: 1.0, ..LinkProfile::PERFECT });
    play(&mut stepper, &mut counters, 60 * 7);
    assert_eq!(stepper.players(), 0, "timed out on the server");
    assert_eq!(world.left.lock().unwrap().len(), 1);
    assert!(world.presence.lock().unwrap().is_empty(), "never away");
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::TimedOut));
}

#[test]
fn in_the_stepper_a_client_program_that_restarts_with_its_saved_ticket_is_the_same_player() {
    let (world, mut stepper, mut counters, me) = one_playing();
    let saved = stepper.clients[0].client.ticket().expect("a ticket").to_vec();
    // The program crashes and starts again two seconds later, from a new port, with nothing
    // but the ticket it saved.
    stepper.clients[0].input = None;
    stepper.set_link(0, LinkProfile { loss: 1.0, ..LinkProfile::PERFECT });
    for _ in 0..120 {
        stepper.step();
    }
    let token = volley::protocol::netcode::token::ConnectToken::from_bytes(&saved).unwrap();
    let schema = stepper.schema().clone();
    stepper.clients[0].client = GameClient::new(token, schema, stepper.now());
    stepper.clients[0].addr = "10.0.7.7:50000".parse().unwrap();
    stepper.set_link(0, LinkProfile::PERFECT);
    let mut got = Vec::new();
    for _ in 0..120 {
        play(&mut stepper, &mut counters, 1);
        messages(&mut stepper.clients[0].client, &mut got);
    }
    let c = &stepper.clients[0].client;
    assert!(c.is_ready() && c.ended().is_none(), "{:?}", c.ended());
    assert_eq!(c.client_index(), Some(me), "the same player");
    assert!(c.world().is_some(), "told its world again");
    assert!(c.has_ticket(), "and given a new ticket");
    assert!(world.left.lock().unwrap().is_empty(), "nobody left");
    assert_eq!(world.joins.lock().unwrap().len(), 1, "nobody joined again");
    let mine = inputs_of(&world, me);
    assert!(mine.windows(2).all(|w| w[1] > w[0]), "no input applied twice, none out of order");
    assert!(*mine.last().unwrap() + 4 >= counters[0], "the new program's inputs arrive: {mine:?}");
    assert!(!got.is_empty() && got.windows(2).all(|w| w[1] == w[0] + 1), "messages flow again, in order: {got:?}");
}

#[test]
fn in_the_stepper_forged_stale_and_replayed_tickets_are_refused_and_disturb_nobody() {
    use volley::protocol::netcode::token::ConnectToken;
    let world = Ledger::default();
    let mut stepper = Stepper::new(world.clone(), 60, 8);
    stepper.add_client(LinkProfile::PERFECT);
    stepper.add_client(LinkProfile::PERFECT);
    let mut counters = [0u32; 6];
    play(&mut stepper, &mut counters, 60);
    let first = stepper.clients[0].client.ticket().unwrap().to_vec();
    let (a, b) = (stepper.clients[0].client.client_index(), stepper.clients[1].client.client_index());
    // A uses its ticket (a NAT rebinding): spent.
    stepper.clients[0].addr = "10.0.9.1:61000".parse().unwrap();
    play(&mut stepper, &mut counters, 180);
    assert_eq!(stepper.clients[0].client.resumes(), 1);
    // Then, from elsewhere: the spent ticket again (replayed), the same with one byte of its
    // sealed part changed (forged), and, two minutes on, a ticket A held then (stale).
    let schema = stepper.schema().clone();
    let thief = |bytes: &[u8], stepper: &mut Stepper<Ledger>| {
        let i = stepper.add_client(LinkProfile::PERFECT);
        let token = ConnectToken::from_bytes(bytes).unwrap();
        stepper.clients[i].client = GameClient::new(token, schema.clone(), stepper.now());
        i
    };
    let replayed = thief(&first, &mut stepper);
    let mut forged_bytes = first.clone();
    forged_bytes[600] ^= 1;
    let forged = thief(&forged_bytes, &mut stepper);
    let held = stepper.clients[0].client.ticket().unwrap().to_vec();
    play(&mut stepper, &mut counters, 60 * 3);
    for _ in 0..125 {
        play(&mut stepper, &mut counters, 60);
    }
    let stale = thief(&held, &mut stepper);
    play(&mut stepper, &mut counters, 60 * 3);
    for (name, i) in [("replayed", replayed), ("forged", forged), ("stale", stale)] {
        let c = &stepper.clients[i].client;
        assert!(!c.is_ready() && c.client_index().is_none(), "a {name} ticket got in");
    }
    // Nobody was disturbed: A and B are who they were, nobody joined or left.
    assert_eq!(stepper.players(), 2);
    assert_eq!((stepper.clients[0].client.client_index(), stepper.clients[1].client.client_index()), (a, b));
    assert!(stepper.clients[0].client.is_ready() && stepper.clients[1].client.is_ready());
    assert_eq!(stepper.clients[0].client.resumes(), 1, "A was not moved");
    assert_eq!(world.joins.lock().unwrap().len(), 2);
    assert!(world.left.lock().unwrap().is_empty());
    assert!(whole(&inputs_of(&world, a.unwrap())), "A's inputs went on, once each, in order");
}

#[test]
fn in_the_stepper_a_ticket_whose_session_is_over_is_refused_and_says_so() {
    let (world, mut stepper, mut counters, me) = one_playing();
    // The link is cut and, meanwhile, the world removes the player: its goodbye never
    // arrives, and its session ends a second later. The client resumes once the link is back.
    stepper.set_link(0, LinkProfile { loss: 1.0, ..LinkProfile::PERFECT });
    world.to_kick.lock().unwrap().push(me);
    play(&mut stepper, &mut counters, 100);
    assert_eq!(stepper.players(), 0, "the session is over");
    assert!(stepper.clients[0].client.is_resuming());
    stepper.set_link(0, LinkProfile::PERFECT);
    play(&mut stepper, &mut counters, 30);
    assert_eq!(stepper.clients[0].client.ended(), Some(SessionEnd::Gone));
    assert_eq!(stepper.players(), 0, "the refused ticket took no slot");
    assert_eq!(world.joins.lock().unwrap().len(), 1, "and no new player joined");
}

fn counter_of(server: &ServerHandle, name: &str) -> f64 {
    let needle = format!("{name} ");
    server.metrics().render().lines().find_map(|l| l.strip_prefix(&needle)?.trim().parse().ok()).unwrap_or(0.0)
}

/// Steps every client one 16 ms frame, each sending its next counter; collects client 0's
/// messages.
async fn frame(clients: &mut [UdpClient], counters: &mut [u32], next: &mut tokio::time::Instant, got: &mut Vec<u32>) {
    *next += Duration::from_millis(16);
    for (i, c) in clients.iter_mut().enumerate() {
        counters[i] += 1;
        c.step(&counters[i].to_le_bytes(), *next).await;
    }
    messages(&mut clients[0].client, got);
}

/// What the UDP tests play with: the world, a real server and two clients a second and a
/// half into the game, their counters, the messages the first got, and the next frame's time.
type Playing = (Ledger, ServerHandle, Vec<UdpClient>, Vec<u32>, Vec<u32>, tokio::time::Instant);

async fn two_playing(key: [u8; 32]) -> Playing {
    let world = Ledger::default();
    let server = start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world.clone()).await.unwrap();
    let mut clients =
        vec![crate::udp::client(&server, &key, 1, "").await, crate::udp::client(&server, &key, 2, "").await];
    let (mut counters, mut got) = (vec![0u32; 2], Vec::new());
    let mut next = tokio::time::Instant::now();
    for _ in 0..90 {
        frame(&mut clients, &mut counters, &mut next, &mut got).await;
    }
    (world, server, clients, counters, got, next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_client_whose_socket_moves_to_a_new_port_resumes_as_the_same_player() {
    let (world, server, mut clients, mut counters, mut got, mut next) = two_playing([21u8; 32]).await;
    assert!(clients[0].client.is_ready() && clients[0].client.has_ticket());
    let me = clients[0].client.client_index().unwrap();
    let before = clients[0].local_addr().unwrap();
    // A NAT rebinding, untold: the client notices a second of silence and resumes.
    let after = clients[0].rebind().await.unwrap();
    assert_ne!(before, after);
    let since = tokio::time::Instant::now();
    let mut took = None;
    for _ in 0..200 {
        frame(&mut clients, &mut counters, &mut next, &mut got).await;
        if took.is_none() && clients[0].client.resumes() == 1 && clients[0].client.is_ready() {
            took = Some(since.elapsed());
        }
    }
    let took = took.expect("resumed");
    eprintln!("resumed {took:?} after the rebind (the silence it waits for is 1 s)");
    // Then once more, told: the game knows its network changed.
    clients[0].rebind().await.unwrap();
    let now = unix_now();
    assert!(clients[0].client.resume(now));
    for _ in 0..120 {
        frame(&mut clients, &mut counters, &mut next, &mut got).await;
    }
    let c = &clients[0].client;
    assert_eq!(c.resumes(), 2);
    assert!(c.is_ready() && c.ended().is_none());
    assert_eq!(c.client_index(), Some(me), "the same player");
    assert!(world.left.lock().unwrap().is_empty(), "nobody left");
    assert_eq!(world.joins.lock().unwrap().len(), 2, "nobody joined again");
    let mine = inputs_of(&world, me);
    assert!(whole(&mine), "every input once, in order: {mine:?}");
    assert!(
        got.windows(2).all(|w| w[1] == w[0] + 1) && got.first() == Some(&1),
        "every message once, in order: {got:?}"
    );
    assert_eq!(counter_of(&server, "volley_sessions_resumed_total"), 2.0);
    assert!(clients[1].client.is_ready());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_client_silent_past_the_timeout_comes_back_as_the_same_player_within_the_grace() {
    let (world, server, mut clients, mut counters, mut got, mut next) = two_playing([22u8; 32]).await;
    let me = clients[0].client.client_index().unwrap();
    // The first client's program sleeps for seven seconds (a laptop lid): nothing from it,
    // nothing read. Past the connection's timeout (5 s) the server keeps its player, away.
    let mut other = clients.split_off(1);
    let mut other_counter = vec![counters[1]];
    let asleep = tokio::time::Instant::now();
    while asleep.elapsed() < Duration::from_secs(7) {
        frame(&mut other, &mut other_counter, &mut next, &mut Vec::new()).await;
    }
    assert_eq!(counter_of(&server, "volley_players_away"), 1.0, "away");
    assert_eq!(counter_of(&server, "volley_players"), 2.0, "kept");
    assert_eq!(*world.presence.lock().unwrap(), vec![(me, true)]);
    clients.append(&mut other);
    counters[1] = other_counter[0];
    next = tokio::time::Instant::now();
    for _ in 0..180 {
        frame(&mut clients, &mut counters, &mut next, &mut got).await;
    }
    let c = &clients[0].client;
    assert!(c.is_ready() && c.ended().is_none(), "{:?}", c.ended());
    assert_eq!(c.client_index(), Some(me), "the same player");
    assert_eq!(*world.presence.lock().unwrap(), vec![(me, true), (me, false)], "away, then back");
    assert!(world.left.lock().unwrap().is_empty(), "nobody left");
    assert_eq!(world.joins.lock().unwrap().len(), 2, "nobody joined again");
    let mine = inputs_of(&world, me);
    assert!(mine.windows(2).all(|w| w[1] > w[0]), "no input applied twice, none out of order");
    assert!(
        got.windows(2).all(|w| w[1] == w[0] + 1) && got.first() == Some(&1),
        "every message once, in order: {got:?}"
    );
    assert_eq!(counter_of(&server, "volley_players_away"), 0.0);
    eprintln!(
        "resumes {}, resume gap histogram count {}",
        c.resumes(),
        counter_of(&server, "volley_resume_gap_seconds_count")
    );
    server.shutdown().await;
}
