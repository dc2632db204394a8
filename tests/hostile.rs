//! Hostile traffic against a real server on loopback, each test a point of the hardening
//! list: what an attacker can do must cost the attacker, be counted, and leave the players
//! alone.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::admin_client;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use volley::client::GameClient;
use volley::protocol::netcode::DropReason;
use volley::protocol::netcode::client::ClientState;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::{Schema, SnapshotBuilder};
use volley::server::PacketDrop;
use volley::server::metrics::ReceivedKind;
use volley::server::{PlayerId, ServerConfig, World, unix_now};

const KEY: [u8; 32] = [9; 32];

/// Counts the inputs it is given.
#[derive(Default, Clone)]
struct Counter(Arc<AtomicU64>);

impl World for Counter {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, _: PlayerId) {}
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// One client on a plain socket, driven a frame at a time; the test sends garbage through
/// the same socket, so it comes from the client's very address.
struct Player {
    client: GameClient,
    socket: UdpSocket,
    server: SocketAddr,
}

impl Player {
    fn connect(server: SocketAddr, client_id: u64) -> Self {
        let token = ConnectToken::generate(
            &TokenParams::new(volley::DEFAULT_PROTOCOL_ID, client_id, server, unix_now().as_secs()),
            &KEY,
        )
        .unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        Self { client: GameClient::new(token, Arc::new(Schema::new()), unix_now()), socket, server }
    }

    /// Takes what arrived, runs the timers, sends one input.
    fn frame(&mut self, input: u8) {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            self.client.receive(unix_now(), from, &mut buf[..n]);
        }
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.update(unix_now(), &mut wire);
        if self.client.is_ready() {
            self.client.send_input(unix_now(), &[input], &mut wire);
        }
        for (to, b) in wire {
            let _ = self.socket.send_to(&b, to);
        }
    }
}

/// Hardening 1 and 2: 15 000 forged datagrams a second from a connected player's address.
/// They used to be charged to the player's packet budget before authentication (the player's
/// own packets were then refused: its inputs stopped) and were counted as its input bytes
/// while the reason they were dropped went nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_datagrams_from_a_players_address_are_counted_and_do_not_starve_it() {
    let inputs = Counter::default();
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), inputs.clone()).await.unwrap();
    let addr = server.addr();
    let (frames, forged) = tokio::task::spawn_blocking(move || {
        let mut p = Player::connect(addr, 1);
        let start = Instant::now();
        while !p.client.is_ready() && start.elapsed() < Duration::from_secs(5) {
            p.frame(0);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(p.client.is_ready(), "connected");
        // Three seconds at 60 frames a second, 250 forged datagrams between two frames.
        let garbage: Vec<u8> = std::iter::once(0x15).chain((0..60).map(|i| i as u8)).collect();
        let (mut frames, mut forged) = (0u64, 0u64);
        let flood = Instant::now();
        while flood.elapsed() < Duration::from_secs(3) {
            p.frame(frames as u8);
            frames += 1;
            for _ in 0..250 {
                forged += u64::from(p.socket.send_to(&garbage, p.server).is_ok());
            }
            std::thread::sleep(Duration::from_millis(16));
        }
        assert_eq!(p.client.state(), ClientState::Connected);
        (frames, forged)
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = server.metrics().clone();
    let applied = inputs.0.load(Ordering::Relaxed);
    let decrypt = m.player_drops(PacketDrop::Netcode(DropReason::Decrypt));
    let limited = m.player_drops(PacketDrop::Netcode(DropReason::RateLimited));
    let (input_bytes, rejected_bytes) =
        (m.received_bytes(ReceivedKind::Input), m.received_bytes(ReceivedKind::Rejected));
    println!(
        "{frames} frames, {forged} forged: {applied} inputs applied, drops decrypt {decrypt} rate_limited {limited}, \
         bytes input {input_bytes} rejected {rejected_bytes}"
    );
    assert!(applied * 10 >= frames * 9, "the player's inputs got through: {applied} of {frames}");
    assert_eq!(limited, 0, "the player's own packets stayed within its budget");
    assert!(decrypt * 2 >= forged, "forged datagrams are counted by reason: {decrypt} of {forged}");
    assert!(rejected_bytes >= decrypt * 61, "and their bytes as rejected");
    assert!(input_bytes < frames * 200, "not as the player's input: {input_bytes} bytes for {frames} frames");
    server.shutdown().await;
}

fn admin_config() -> ServerConfig {
    let mut c = ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY);
    c.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    c
}

/// Hardening 3: 64 idle TCP connections held open and reopened used to lock out `/metrics`,
/// `/healthz` and the Docker HEALTHCHECK. The oldest idle one now makes way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_admin_connections_do_not_lock_out_health_checks() {
    let server = volley::server::start(admin_config(), Counter::default()).await.unwrap();
    let admin = server.admin_addr().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Keep 128 idle connections open, reopening as fast as they are closed.
                if held.len() >= 128 {
                    held.remove(0);
                }
                if let Ok(c) = std::net::TcpStream::connect(admin) {
                    held.push(c);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            held.len()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut answered = 0;
    for _ in 0..10 {
        if let Ok((200, _)) = admin_client::get(admin, "/healthz", Duration::from_secs(2)).await {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = admin_client::get(admin, "/metrics", Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let held = holder.join().unwrap();
    assert!(held >= 64, "the attacker held {held} connections");
    assert_eq!(answered, 10, "every health check answered while {held} idle connections were held");
    assert!(matches!(metrics, Ok((200, _))), "and a scrape: {metrics:?}");
    server.shutdown().await;
}

/// Hardening 4: `/players` showed every client's IP and port to anyone who could reach the
/// admin port. Addresses are off by default; a bearer token guards `/metrics` and `/players`
/// while probes stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_hide_addresses_and_can_require_a_token() {
    use admin_client::{get, get_with};
    let t = Duration::from_secs(2);
    for (token, show) in [(None, false), (Some("s3cret"), true)] {
        let mut config = admin_config();
        config.admin_token = token.map(String::from);
        config.admin_show_addresses = show;
        let server = volley::server::start(config, Counter::default()).await.unwrap();
        let admin = server.admin_addr().unwrap();
        let addr = server.addr();
        let player = tokio::task::spawn_blocking(move || {
            let mut p = Player::connect(addr, 7);
            for _ in 0..150 {
                p.frame(0);
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(p.client.is_ready());
            p
        });
        let mut p = player.await.unwrap();
        let local = p.socket.local_addr().unwrap().to_string();
        let (status, players) = get_with(admin, "/players", token, t).await.unwrap();
        assert_eq!(status, 200);
        assert!(players.contains("\"rtt_seconds\""), "{players}");
        assert_eq!(players.contains(&local), show, "the address shown only when asked: {players}");
        assert_eq!(players.contains("\"addr\""), show, "{players}");
        let (healthz, _) = get(admin, "/healthz", t).await.unwrap();
        assert_eq!(healthz, 200, "probes need no token");
        let (metrics, _) = get(admin, "/metrics", t).await.unwrap();
        let (players_anon, _) = get(admin, "/players", t).await.unwrap();
        let (wrong, _) = get_with(admin, "/metrics", Some("guess"), t).await.unwrap();
        if token.is_some() {
            assert_eq!((metrics, players_anon, wrong), (401, 401, 401));
        } else {
            assert_eq!((metrics, players_anon), (200, 200));
        }
        p.frame(0);
        server.shutdown().await;
    }
}

/// Hardening (memory): a client's reliable messages on the framework's channel, where a
/// client sends only acknowledgements. They were reassembled and queued in an inbox nothing
/// read: 64 KiB messages at 1000 packets a second grew the server by ~1 MiB a second, up to
/// 64 MiB for one client. Each is now dropped as soon as it is whole, and counted; the
/// hostile client and the other player keep playing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_on_the_framework_channel_are_dropped_at_once_and_counted() {
    use volley::protocol::netcode::client::Client;
    use volley::protocol::reliability::channel::{Channel, ChannelConfig, SYSTEM_FRAME_TAG};

    let inputs = Counter::default();
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), inputs.clone()).await.unwrap();
    let addr = server.addr();
    // VOLLEY_HOSTILE_SECONDS lengthens the flood (60 for the figure BENCHMARKS gives); the
    // process's RSS is printed before and after.
    let flood_secs: u64 = std::env::var("VOLLEY_HOSTILE_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
    let rss_before = rss_kib();
    let (frames, sent, hostile_state) = tokio::task::spawn_blocking(move || {
        let mut p = Player::connect(addr, 1);
        let token =
            ConnectToken::generate(&TokenParams::new(volley::DEFAULT_PROTOCOL_ID, 2, addr, unix_now().as_secs()), &KEY)
                .unwrap();
        let mut hostile = Client::new(token, unix_now());
        hostile.connect(unix_now());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        // The hostile client's own channel takes as much as it is given (the server's
        // receiving side is what is under test).
        let mut system = Channel::new(ChannelConfig {
            send_queue_messages: 1 << 16,
            send_queue_bytes: 64 << 20,
            reliable_window: 4096,
            frame_tag: SYSTEM_FRAME_TAG,
            ..ChannelConfig::default()
        });
        let mut buf = [0u8; 2048];
        let (mut frames, mut sent) = (0u64, 0u64);
        let start = Instant::now();
        let mut flood_from = None;
        while start.elapsed() < Duration::from_secs(flood_secs + 2) {
            let now = unix_now();
            p.frame(frames as u8);
            frames += 1;
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Ok(Some(payload)) = hostile.process(now, from, &mut buf[..n])
                    && payload.first().is_some_and(|b| b & 0xF0 == SYSTEM_FRAME_TAG)
                {
                    let _ = system.receive(now, payload);
                }
            }
            let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
            hostile.update(now, &mut wire);
            if p.client.is_ready() && hostile.is_connected() {
                let from = *flood_from.get_or_insert(Instant::now());
                // Four seconds of 4 KiB messages, about 1000 packets a second (16 a frame).
                if from.elapsed() < Duration::from_secs(flood_secs) {
                    // A new message every fourth frame (nothing acknowledges them: the server
                    // answers nothing on that channel, so the old ones are sent again too).
                    if frames % 4 == 0 && system.send_reliable(vec![7u8; 4 * 1024].into()).is_ok() {
                        sent += 1;
                    }
                    let mut packet = [0u8; 1200];
                    for _ in 0..16 {
                        // The channel's clock held still: nothing comes due again, so every
                        // packet carries a fragment not sent before (an attacker does not
                        // resend).
                        let n = system.build_packet(Duration::from_secs(1), None, &mut packet);
                        let _ = hostile.send_payload(now, &packet[..n], &mut wire);
                    }
                }
            }
            for (to, b) in wire {
                let _ = socket.send_to(&b, to);
            }
            std::thread::sleep(Duration::from_millis(16));
        }
        (frames, sent, hostile.state())
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = server.metrics().clone();
    let dropped = m.player_drops(PacketDrop::UnexpectedSystemMessage);
    let applied = inputs.0.load(Ordering::Relaxed);
    println!(
        "{frames} frames; {sent} messages of 4 KiB queued by the hostile client, {dropped} dropped whole; \
         process RSS {rss_before} KiB before, {} KiB after",
        rss_kib()
    );
    assert!(dropped >= 20, "whole messages were dropped and counted: {dropped}");
    assert_eq!(hostile_state, ClientState::Connected, "the hostile client itself is not cut off for it");
    assert!(applied * 10 >= frames * 8, "the other player kept playing: {applied} inputs of {frames} frames");
    let exposition = m.render();
    assert!(
        exposition.contains("volley_player_packets_dropped_total{reason=\"unexpected_system_message\"}"),
        "counted under its own reason"
    );
    server.shutdown().await;
}

/// This process's resident memory, KiB (0 where /proc is missing).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4)
}

/// One netcode client driven by hand (the protocol's own client type), so the test can send
/// any payload through a connection that authenticates.
struct Raw {
    client: volley::protocol::netcode::client::Client,
    socket: UdpSocket,
    /// The goodbye the server said, if it did.
    goodbye: Option<volley::protocol::session::SessionEnd>,
    /// Datagrams from the server it took.
    received: u64,
}

impl Raw {
    fn connect(server: SocketAddr, client_id: u64) -> Self {
        let token = ConnectToken::generate(
            &TokenParams::new(volley::DEFAULT_PROTOCOL_ID, client_id, server, unix_now().as_secs()),
            &KEY,
        )
        .unwrap();
        let mut client = volley::protocol::netcode::client::Client::new(token, unix_now());
        client.connect(unix_now());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let mut raw = Self { client, socket, goodbye: None, received: 0 };
        let start = Instant::now();
        while !raw.client.is_connected() && start.elapsed() < Duration::from_secs(5) {
            raw.frame(&[]);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(raw.client.is_connected(), "connected");
        raw
    }

    /// Takes what arrived (noting a goodbye), runs the timers, sends `payloads`.
    fn frame(&mut self, payloads: &[&[u8]]) {
        use volley::protocol::session::{CONTROL_FRAME, Control};
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
            self.received += 1;
            if let Ok(Some(p)) = self.client.process(unix_now(), from, &mut buf[..n])
                && p.first() == Some(&CONTROL_FRAME)
                && let Ok(Control::Goodbye(end)) = Control::decode(p)
            {
                self.goodbye = Some(end);
            }
        }
        let mut wire: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        self.client.update(unix_now(), &mut wire);
        for p in payloads {
            let _ = self.client.send_payload(unix_now(), p, &mut wire);
        }
        for (to, b) in wire {
            let _ = self.socket.send_to(&b, to);
        }
    }
}

/// Hardening: a client whose every payload authenticates but cannot be read (a plain frame
/// byte and garbage) was kept forever, each packet dropped and counted. A run of
/// `MAX_MALFORMED_RUN` in a row now ends its session, told why; a burst shorter than that,
/// followed by a readable payload, costs only its packets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_only_malformed_payloads_is_disconnected_and_a_burst_is_not() {
    use volley::protocol::session::{Control, MAX_CONTROL_BYTES, PROTOCOL_VERSION, SessionEnd};
    use volley::server::MAX_MALFORMED_RUN;

    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), Counter::default())
        .await
        .unwrap();
    let addr = server.addr();
    let garbage: &[u8] = &[0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let (bursty, flooder) = tokio::task::spawn_blocking(move || {
        let mut hello = [0u8; MAX_CONTROL_BYTES];
        let n = Control::Hello { protocol_version: PROTOCOL_VERSION }.encode(&mut hello);
        let hello = hello[..n].to_vec();
        let mut bursty = Raw::connect(addr, 1);
        let mut flooder = Raw::connect(addr, 2);
        let burst = 50;
        // Three bursts a little short of the run, each followed by a readable payload; the
        // flooder sends garbage only, as many packets in all.
        for _ in 0..3 {
            for chunk in 0..(MAX_MALFORMED_RUN as usize - 6).div_ceil(burst) {
                let n = burst.min(MAX_MALFORMED_RUN as usize - 6 - chunk * burst);
                bursty.frame(&vec![garbage; n]);
                flooder.frame(&vec![garbage; n]);
                std::thread::sleep(Duration::from_millis(20));
            }
            bursty.frame(&[&hello]);
            flooder.frame(&[garbage]);
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..50 {
            bursty.frame(&[]);
            flooder.frame(&[]);
            std::thread::sleep(Duration::from_millis(10));
        }
        (bursty.goodbye, flooder.goodbye)
    })
    .await
    .unwrap();
    // The flooder never answers the goodbye: the server ends it after GOODBYE_TIMEOUT.
    tokio::time::sleep(volley::server::GOODBYE_TIMEOUT + Duration::from_millis(500)).await;
    let m = server.metrics().clone();
    println!(
        "bursty told {bursty:?}, flooder told {flooder:?}; malformed payloads dropped: {}",
        m.player_drops(PacketDrop::Malformed)
    );
    assert_eq!(flooder, Some(SessionEnd::Malformed), "the flooder is told why it goes");
    assert_eq!(bursty, None, "bursts shorter than the run, between readable payloads, cost only the packets");
    assert!(m.player_drops(PacketDrop::Malformed) >= u64::from(MAX_MALFORMED_RUN), "each counted");
    assert!(m.render().contains("volley_disconnects_total{reason=\"malformed\"} 1"), "the disconnect counted");
    server.shutdown().await;
}

/// Counts, per tick, the inputs each player's were applied, and keeps the most any player had
/// in one tick.
#[derive(Default, Clone)]
struct PerTick {
    this_tick: Arc<std::sync::Mutex<std::collections::HashMap<PlayerId, u32>>>,
    most: Arc<AtomicU64>,
    applied: Arc<std::sync::Mutex<std::collections::HashMap<PlayerId, u64>>>,
}

impl World for PerTick {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, _: PlayerId) {}
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, p: PlayerId, _: &[u8]) {
        *self.this_tick.lock().unwrap().entry(p).or_default() += 1;
        *self.applied.lock().unwrap().entry(p).or_default() += 1;
    }
    fn tick(&mut self, _: u32, _: Duration) {
        let mut t = self.this_tick.lock().unwrap();
        let most = t.values().copied().max().unwrap_or(0);
        self.most.fetch_max(u64::from(most), Ordering::Relaxed);
        t.clear();
    }
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

/// A reliability frame made by hand, as a hostile client sends it (the layout of
/// `protocol::reliability::channel`): a frame byte, the packet's sequence, no acks, then
/// sections of (tag, id, index, count, bytes).
fn frame(frame_byte: u8, seq: u16, state: Option<&[u8]>, fragments: &[(u16, u16, u16, usize)]) -> Vec<u8> {
    let mut p = vec![frame_byte];
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&[0; 8]);
    if let Some(s) = state {
        p.push(0x01);
        p.push(s.len() as u8);
        p.extend_from_slice(s);
    }
    for &(id, index, count, len) in fragments {
        p.push(0x04);
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        // The length as a varint (two bytes: 128 to 16 383).
        p.push((len as u8 & 0x7F) | 0x80);
        p.push((len >> 7) as u8);
        p.extend(std::iter::repeat_n(7, len));
    }
    p
}

/// Hardening, the per-player memory budget: one authenticated client sends, at about 1500
/// packets a second, 64 KiB messages on the framework's channel (in order, never
/// acknowledged by anyone), fragments on the game's channel each waiting behind a gap it
/// never fills, and four new inputs in every packet of the game's channel (64 a frame). Before the budget the server held up to
/// 1024 such messages (64 MiB) and every fragment of its reorder window, and queued all its
/// inputs; now it holds at most `GAME_CHANNEL_RECEIVE_BYTES + SYSTEM_CHANNEL_RECEIVE_BYTES` of
/// its messages (`volley_player_received_bytes`), gives the world at most
/// `MAX_INPUTS_PER_TICK` of its inputs a tick, and the other player plays on.
/// `VOLLEY_HOSTILE_SECONDS=60` gives the one-minute figure (the attacker here holds nothing
/// itself, so the process's RSS growth is the server's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_client_sends_is_held_within_its_budget() {
    use volley::protocol::input::write_input_packet;
    use volley::protocol::session::{Control, MAX_CONTROL_BYTES, PROTOCOL_VERSION};
    use volley::server::{GAME_CHANNEL_RECEIVE_BYTES, MAX_INPUTS_PER_TICK, SYSTEM_CHANNEL_RECEIVE_BYTES};

    let world = PerTick::default();
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), world.clone()).await.unwrap();
    let addr = server.addr();
    let flood_secs: u64 = std::env::var("VOLLEY_HOSTILE_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
    let m = server.metrics().clone();
    // The most held at once, sampled every 5 ms while the flood lasts.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (m, sampling) = (m.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(m.totals().received_held);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            peak
        })
    };
    let (frames, player_id, hostile_goodbye, rss_before, rss_during) = tokio::task::spawn_blocking(move || {
        let mut p = Player::connect(addr, 1);
        let mut hostile = Raw::connect(addr, 2);
        let mut hello = [0u8; MAX_CONTROL_BYTES];
        let n = Control::Hello { protocol_version: PROTOCOL_VERSION }.encode(&mut hello);
        hostile.frame(&[&hello[..n]]);
        // Two seconds of play first, so the flood's growth is told from the start-up's.
        for f in 0..120 {
            p.frame(f as u8);
            hostile.frame(&[]);
            std::thread::sleep(Duration::from_millis(16));
        }
        let rss_before = rss_kib();
        // The warm-up's frames count: the other player's inputs are counted from its start.
        let (mut frames, mut seq, mut input_seq) = (120u64, 0u16, 0u32);
        // The framework's channel: 64 KiB messages, fragment after fragment, in order.
        let (mut sys_id, mut sys_index) = (0u16, 0u16);
        let mut rss_during = 0;
        let start = Instant::now();
        let mut input = Vec::new();
        while start.elapsed() < Duration::from_secs(flood_secs) {
            p.frame(frames as u8);
            frames += 1;
            let mut packets: Vec<Vec<u8>> = Vec::new();
            for k in 0..16u16 {
                seq = seq.wrapping_add(1);
                input_seq += 4;
                write_input_packet(&mut input, None, input_seq, &[(&b"a"[..], None); 4]);
                if k % 2 == 0 {
                    // The game's channel: ids 1 to 127 (id 0 never comes), 1000 bytes each.
                    let id = 1 + (seq / 2 + frames as u16 * 8) % 127;
                    packets.push(frame(0x01, seq, Some(&input), &[(id, 1, 2, 1000)]));
                } else {
                    packets.push(frame(0x11, seq, None, &[(sys_id, sys_index, 64, 1024)]));
                    sys_id = sys_id.wrapping_add(1);
                    sys_index = (sys_index + 1) % 64;
                }
            }
            // Eight more with inputs only: 64 new inputs a frame, twice what a tick takes, so
            // the excess does not hang on two frames landing in one tick.
            for _ in 0..8 {
                seq = seq.wrapping_add(1);
                input_seq += 4;
                write_input_packet(&mut input, None, input_seq, &[(&b"a"[..], None); 4]);
                packets.push(frame(0x01, seq, Some(&input), &[]));
            }
            // VOLLEY_HOSTILE_CONTROL=1: the same run without the flood (the RSS's own drift).
            if std::env::var_os("VOLLEY_HOSTILE_CONTROL").is_some() {
                packets.clear();
            }
            let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            hostile.frame(&refs);
            if frames % 60 == 0 {
                rss_during = rss_during.max(rss_kib());
            }
            std::thread::sleep(Duration::from_millis(16));
        }
        (frames, p.client.client_index(), hostile.goodbye, rss_before, rss_during)
    })
    .await
    .unwrap();
    sampling.store(false, Ordering::Relaxed);
    let peak = sampler.await.unwrap();
    let t = m.totals();
    let most = world.most.load(Ordering::Relaxed);
    let applied = world.applied.lock().unwrap().get(&player_id.unwrap()).copied().unwrap_or(0);
    let budget = (GAME_CHANNEL_RECEIVE_BYTES + SYSTEM_CHANNEL_RECEIVE_BYTES) as u64;
    println!(
        "{frames} frames over {flood_secs} s; the hostile client's messages held at most {peak} bytes (budget {budget}); \
         most inputs of one player in a tick {most}, {} dropped; the other player's inputs applied {applied}; \
         process RSS {rss_before} KiB as the flood began, {rss_during} KiB at most during it, {} KiB after ({} KiB \
         the budget of one player)",
        t.inputs_dropped,
        rss_kib(),
        ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY).player_budget().total() / 1024,
    );
    assert!(peak > 0, "the flood was held at all");
    assert!(peak <= budget, "held {peak} bytes, more than the budget {budget}");
    assert!(most <= u64::from(MAX_INPUTS_PER_TICK), "{most} inputs of one player in one tick");
    assert!(t.inputs_dropped > 0, "the excess inputs were dropped and counted");
    assert_eq!(hostile_goodbye, None, "flow control is not misbehaviour: the client is not cut off for it");
    assert!(applied * 10 >= frames * 8, "the other player kept playing: {applied} inputs of {frames} frames");
    server.shutdown().await;
}

/// Issue 56: a client that keeps sending (keep-alives, here) but acknowledges nothing it is
/// sent (a broken downlink, or on purpose) was kept as healthy for as long as it sent, and sent
/// snapshots all along. Acknowledgements missing for the connection timeout (5 s) are now a
/// drop: the player is away (sent nothing at all) for the resume grace (8 s here), then gone,
/// told so; an honest player beside it plays on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_acknowledges_is_taken_for_a_drop() {
    use volley::protocol::session::{Control, MAX_CONTROL_BYTES, PROTOCOL_VERSION};

    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY);
    config.resume_grace = Duration::from_secs(8);
    let inputs = Counter::default();
    let server = volley::server::start(config, inputs.clone()).await.unwrap();
    let addr = server.addr();
    let metrics = server.metrics().clone();
    let seen = tokio::task::spawn_blocking(move || {
        let mut honest = Player::connect(addr, 1);
        let mut deaf = Raw::connect(addr, 2);
        let mut hello = [0u8; MAX_CONTROL_BYTES];
        let n = Control::Hello { protocol_version: PROTOCOL_VERSION }.encode(&mut hello);
        deaf.frame(&[&hello[..n]]);
        let start = Instant::now();
        // (seconds from the Hello: away first seen; datagrams in the second after that;
        // told it is over).
        let (mut away_at, mut after_away, mut over_at) = (None, None, None);
        while start.elapsed() < Duration::from_secs(16) && over_at.is_none() {
            honest.frame(1);
            deaf.frame(&[]);
            let t = start.elapsed();
            if away_at.is_none() && metrics.totals().players_away == 1 {
                away_at = Some(t);
                deaf.received = 0;
            }
            if let Some(a) = away_at
                && after_away.is_none()
                && t >= a + Duration::from_secs(1)
            {
                after_away = Some(deaf.received);
            }
            if deaf.client.state() != ClientState::Connected {
                over_at = Some(t);
            }
            std::thread::sleep(Duration::from_millis(16));
        }
        (away_at, after_away, over_at, honest.client.is_ready(), metrics.totals().players)
    })
    .await
    .unwrap();
    println!("away, datagrams in the second after, over, honest ready, players: {seen:?}");
    let (away_at, after_away, over_at, honest_ready, players) = seen;
    let away_at = away_at.expect("the deaf client went away");
    assert!((Duration::from_secs(4)..Duration::from_secs(8)).contains(&away_at), "away at {away_at:?}");
    assert_eq!(after_away, Some(0), "nothing goes to a client away");
    let over_at = over_at.expect("told it is over");
    assert!(over_at >= away_at + Duration::from_secs(2), "kept for the grace: over at {over_at:?}");
    assert!(honest_ready && players == 1, "the honest player plays on ({players} players)");
    assert!(inputs.0.load(Ordering::Relaxed) > 300, "the honest player's inputs applied");
    server.shutdown().await;
}
