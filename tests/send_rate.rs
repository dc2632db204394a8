//! A client behind a narrow line (256 kbit/s, a quarter second of router buffer, 2 % loss,
//! 20 ms each way), in the stepper: the server's send rate follows the line, so the router's
//! queue does not stand full; the nearby entities, first by priority, stay fresh. Without the
//! rate (a budget of one packet a tick, as before), the queue fills and drops and every
//! entity's news waits a quarter second in it. Each figure is printed; the virtual clock
//! makes them the same every run. Then the same over real UDP: the server's actors run the
//! same session, and the client's own link puts the line on what it receives.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use glam::Vec2;
use volley::prelude::*;
use volley::protocol::reliability::RateConfig;
use volley::protocol::snapshot::{Interest, WorldSnapshot};
use volley::server::{Relevancy, ServerConfig};
use volley::transport::conditioner::Bottleneck;

volley::replicated! {
    /// Something that moves every tick, stamped with the tick its state is of.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Mover {
        /// Where it is.
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-512.0), Vec2::splat(512.0), 0.01),
        /// The tick of this state.
        pub stamp: u32 = Bits(24),
    }
}

/// Movers 1..=`MOVERS`; the first `NEAR` are the player's neighbours.
const MOVERS: u32 = 400;
const NEAR: u32 = 24;

/// The tick, and how often the far movers' changes are sent (`Interest::every`).
struct Field(u32, u16);

impl World for Field {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Mover>().unwrap();
        s
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, tick: u32, _: Duration) {
        self.0 = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        for id in 1..=MOVERS {
            let t = self.0 as f32 * 0.05 + id as f32;
            let at = Vec2::new(t.cos(), t.sin()) * (id as f32);
            out.insert(id, &Mover { position: at, stamp: self.0 }).unwrap();
        }
    }
    fn relevancy(&self) -> Arc<dyn Relevancy> {
        Arc::new(ByDistance(self.1))
    }
}

/// Everything, the nearer the higher: a mover's id is its distance. The far ones' changes
/// are sent in one snapshot of the number it holds.
struct ByDistance(u16);

impl Relevancy for ByDistance {
    fn interest(&self, world: &WorldSnapshot, _: PlayerId, out: &mut Vec<Interest>) {
        out.clear();
        out.extend(world.ids().iter().enumerate().map(|(i, id)| {
            if *id <= NEAR {
                Interest::new(i as u32, 8.0)
            } else {
                Interest::new(i as u32, 1.0 / (1.0 + *id as f32 / 20.0)).every(self.0)
            }
        }));
    }
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    /// The near movers' age at each frame (the time since the state the client holds was
    /// the server's), 99th percentile and mean, in ms.
    near_p99_ms: f64,
    near_mean_ms: f64,
    /// Every mover's mean age, ms.
    all_mean_ms: f64,
    /// The share of the datagrams to the client that its line's queue dropped.
    queue_drop_ratio: f64,
    /// The rate the server settled at, bytes a second.
    rate: u32,
    /// Times a mover's state as shown went back to an older one from one frame to the
    /// next, per mover per second: near ones, all.
    near_reverts: f64,
    all_reverts: f64,
    /// The same in the snapshots as decoded: a merged delta leaves an entity the server
    /// deferred at the baseline's state, older than what a newer packet had brought, and the
    /// client shows the newer one instead (`GameClient::snapshot` against `decoded`).
    decoded_reverts: f64,
}

fn run(rate: RateConfig) -> Run {
    run_far(rate, 1)
}

/// [`run`], the far movers' changes sent in one snapshot of `far_every`.
fn run_far(rate: RateConfig, far_every: u16) -> Run {
    const HZ: u16 = 60;
    let mut stepper = Stepper::new(Field(0, far_every), HZ, 4).with_send_rate(rate);
    let link = LinkProfile { latency: Duration::from_millis(20), loss: 0.02, ..LinkProfile::PERFECT };
    let c = stepper.add_client(link);
    stepper.set_bottleneck(c, Some(Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(250) }));
    let schema = stepper.schema().clone();
    let dt = Duration::from_secs(1) / u32::from(HZ);
    let (mut near, mut all) = (Vec::new(), Vec::new());
    let (mut stamps, mut reverts) = (vec![0u32; MOVERS as usize + 1], [0u64; 2]);
    let (mut decoded_stamps, mut decoded_reverts) = (vec![0u32; MOVERS as usize + 1], 0u64);
    stepper.step();
    // When the server's tick 0 began, on the stepper's clock.
    let start = stepper.now - dt * stepper.tick();
    for frame in 0..60 * u32::from(HZ) {
        stepper.step();
        // The first 20 seconds settle; the last 40 are measured.
        if frame < 20 * u32::from(HZ) {
            continue;
        }
        let now = stepper.now;
        let client = &stepper.clients[c].client;
        let Some(latest) = client.latest() else { continue };
        let decoded = client.decoded(latest.tick()).expect("kept");
        for id in 1..=MOVERS {
            let Some(m) = decoded.read::<Mover>(&schema, id) else { continue };
            decoded_reverts += u64::from(m.stamp < decoded_stamps[id as usize]);
            decoded_stamps[id as usize] = m.stamp;
        }
        for id in 1..=MOVERS {
            let Some(m) = latest.read::<Mover>(&schema, id) else { continue };
            // The tick the state is of began at stamp × dt on the server's clock.
            let age = now.saturating_sub(start + dt * m.stamp).as_secs_f64() * 1000.0;
            if m.stamp < stamps[id as usize] {
                reverts[usize::from(id <= NEAR)] += 1;
            }
            stamps[id as usize] = m.stamp;
            if id <= NEAR {
                near.push(age);
            }
            all.push(age);
        }
    }
    near.sort_by(f64::total_cmp);
    let (_, down) = stepper.link_counts(c).unwrap();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Run {
        near_p99_ms: near[near.len() * 99 / 100],
        near_mean_ms: mean(&near),
        all_mean_ms: mean(&all),
        queue_drop_ratio: down.queue_drops as f64 / down.datagrams.max(1) as f64,
        rate: stepper.send_rate(c).unwrap(),
        near_reverts: reverts[1] as f64 / 40.0 / f64::from(NEAR),
        all_reverts: (reverts[0] + reverts[1]) as f64 / 40.0 / f64::from(MOVERS),
        decoded_reverts: decoded_reverts as f64 / 40.0 / f64::from(MOVERS),
    }
}

#[test]
fn a_narrow_line_keeps_its_nearby_entities_fresh_and_its_queue_short() {
    let followed = run(RateConfig::default());
    // The queueing target trades freshness for throughput: the far movers' age, the
    // near ones' (the default is 15 ms).
    for ms in [5u64, 30] {
        let r = run(RateConfig { queue_target: Duration::from_millis(ms), ..RateConfig::default() });
        println!("target {ms} ms: {r:?}");
    }
    let fixed = run(fixed());
    let far_at_20_hz = run_far(RateConfig::default(), 3);
    println!("far at 20 Hz: {far_at_20_hz:?}");
    println!("followed: {followed:?}");
    println!("fixed:    {fixed:?}");
    assert!(followed.near_p99_ms <= 100.0, "near movers' age p99 {} ms", followed.near_p99_ms);
    assert!(followed.near_mean_ms < 50.0, "near movers' mean age {} ms", followed.near_mean_ms);
    // Fewer bytes sent, and still every mover fresher on average than behind a full queue.
    assert!(followed.all_mean_ms < fixed.all_mean_ms, "{followed:?} {fixed:?}");
    assert!(followed.queue_drop_ratio <= 0.02, "queue drops {}", followed.queue_drop_ratio);
    // What the client shows never goes back in time, although the snapshots as decoded
    // do for the movers the budget leaves out.
    assert_eq!((followed.near_reverts, followed.all_reverts), (0.0, 0.0), "{followed:?}");
    assert!(followed.decoded_reverts > 1.0, "{followed:?}");
    // The far movers sent one snapshot in three: the near ones as fresh, the budget goes
    // round more of the far ones, so they are fresher on average.
    assert!(far_at_20_hz.near_p99_ms <= 100.0, "{far_at_20_hz:?}");
    assert!(far_at_20_hz.all_mean_ms < followed.all_mean_ms, "{far_at_20_hz:?} {followed:?}");
    assert!((16_000..=40_000).contains(&followed.rate), "settled at {} bytes/s", followed.rate);
    // The fixed budget is what the rate replaced: it fills the queue.
    assert!(fixed.queue_drop_ratio > 0.3, "{fixed:?}");
    assert!(fixed.near_p99_ms > 200.0, "{fixed:?}");
}

/// A client whose downlink breaks keeps sending (its inputs, its acknowledgements of what it
/// last heard) but acknowledges nothing new: the server's rate for it falls to the least
/// within a second and a half, what it sends in the next second is no more than that (and a
/// burst), and when the line mends the rate is back at the most within three seconds, the
/// session never dropped. Without the silence rule the rate stayed at the most (125 000
/// bytes a second of full snapshots, nothing acknowledged to delta against).
#[test]
fn a_client_that_acknowledges_nothing_is_sent_the_least() {
    const HZ: u16 = 60;
    let mut stepper = Stepper::new(Field(0, 1), HZ, 4);
    let c = stepper.add_client(LinkProfile { latency: Duration::from_millis(20), ..LinkProfile::PERFECT });
    for _ in 0..2 * HZ {
        stepper.step();
    }
    let before = stepper.send_rate(c).unwrap();
    assert_eq!(before, RateConfig::default().max_bytes_per_second);
    // Nothing reaches the client from here.
    stepper.set_bottleneck(c, Some(Bottleneck { bytes_per_second: 1, queue: Duration::ZERO }));
    let cut_at = stepper.now;
    let mut least_after = None;
    for _ in 0..2 * HZ {
        stepper.step();
        if least_after.is_none() && stepper.send_rate(c) == Some(RateConfig::default().min_bytes_per_second) {
            least_after = Some(stepper.now - cut_at);
        }
    }
    let least_after = least_after.expect("the rate fell to the least");
    println!("the least after {least_after:?}");
    assert!(least_after <= Duration::from_millis(1_600), "the least after {least_after:?}");
    stepper.capture();
    for _ in 0..HZ {
        stepper.step();
    }
    let sent: usize = stepper.captured().iter().filter(|d| !d.to_server && d.client == c).map(|d| d.len).sum();
    println!("{sent} bytes sent to the silent client in a second");
    assert!(sent <= 8_000, "{sent} bytes in a second to a client that hears nothing");
    stepper.set_bottleneck(c, None);
    for _ in 0..3 * HZ {
        stepper.step();
    }
    assert_eq!(stepper.players(), 1, "the session held");
    assert_eq!(stepper.send_rate(c), Some(before), "back at the most once acknowledged again");
}

/// The budget before send rates: room for a full packet every tick, whatever the line does.
fn fixed() -> RateConfig {
    RateConfig {
        max_bytes_per_second: 10_000_000,
        min_bytes_per_second: 10_000_000,
        queue_target: Duration::from_secs(3600),
    }
}

/// Over real UDP, a client behind the same line for 14 s, the last 8 measured: the near
/// movers' age in ticks (the server's ticks done when the frame ran, over the state's
/// stamp), 99th percentile, and the server's rate cuts and snapshots held back (none while
/// each tick's room is over the least a snapshot is sent in).
async fn over_udp(rate: RateConfig) -> (u32, u64, u64) {
    let key = [7u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.send_rate = rate;
    let server = volley::server::start(config, Field(0, 1)).await.unwrap();
    let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key).unwrap();
    let schema = Arc::new(Field(0, 1).schema());
    let client = GameClient::new(token, schema.clone(), unix_now());
    let link = LinkProfile { latency: Duration::from_millis(20), loss: 0.02, ..LinkProfile::PERFECT };
    let mut c =
        UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap().with_conditioner(link, 11);
    c.set_downlink(Some(Bottleneck { bytes_per_second: 32_000, queue: Duration::from_millis(250) }));
    let mut ages = Vec::new();
    let mut next = tokio::time::Instant::now();
    for frame in 0..14 * 60 {
        next += Duration::from_micros(16_667);
        c.step(&[0], next).await;
        if frame < 6 * 60 {
            continue;
        }
        let done = server.metrics().totals().ticks;
        let Some(latest) = c.client.latest() else { continue };
        for id in 1..=NEAR {
            if let Some(m) = latest.read::<Mover>(&schema, id) {
                ages.push(u32::try_from(done).unwrap().saturating_sub(m.stamp));
            }
        }
    }
    let t = server.metrics().totals();
    server.shutdown().await;
    ages.sort_unstable();
    assert!(!ages.is_empty(), "the client saw the movers");
    (ages[ages.len() * 99 / 100], t.send_rate_cuts, t.snapshots_held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_the_servers_rate_follows_a_narrow_line() {
    let (followed, cuts, held) = over_udp(RateConfig::default()).await;
    let (fixed, fixed_cuts, _) = over_udp(fixed()).await;
    println!(
        "near movers' age p99 in ticks: {followed} with the send rate ({cuts} cuts, {held} snapshots held), {fixed} fixed"
    );
    assert!(cuts > 0, "the server's rate followed the line: {cuts} cuts");
    assert_eq!(fixed_cuts, 0);
    // 20 ms each way, a tick, the line's sending: about 7 ticks (the stepper's 50 ms p99 and
    // the frame loop's own ticks); the fixed budget keeps the line's queue full (a quarter
    // second more). Bounds with room for a busy machine.
    assert!(followed <= 10, "near movers' age p99 {followed} ticks");
    assert!(fixed >= 14 && followed * 3 / 2 < fixed, "the fixed budget's queue: {fixed} ticks against {followed}");
}

/// The player's send rate as `/players` shows it (updated about once a second).
async fn rate_of(admin: std::net::SocketAddr, player: u32) -> u64 {
    let (_, body) = crate::admin_client::get(admin, "/players", Duration::from_secs(2)).await.unwrap();
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let me = list.as_array().unwrap().iter().find(|p| p["id"] == player).expect("the player is listed");
    me["send_rate_bytes_per_second"].as_u64().unwrap()
}

/// The same line put on by the server itself, through its admin endpoint, while it runs
/// (the client conditions nothing): 4 s free, 12 s behind the line (the last 4 measured:
/// the rate settles once its floor has moved to the line's own delay), 6 s after it is
/// taken off. The rate follows the line down, the near movers stay fresh, and once it is
/// taken off the rate grows back. The admin endpoint refuses a bad setting
/// and an unknown player, and a server that does not allow link control refuses it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_udp_a_line_the_server_puts_on_while_running_is_followed_and_taken_off() {
    use crate::admin_client::request;
    let t = Duration::from_secs(2);
    let key = [7u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    let off = volley::server::start(config.clone(), Field(0, 1)).await.unwrap();
    let (status, _) = request(off.admin_addr().unwrap(), "POST", "/players/0/link?rate=32000", None, t).await.unwrap();
    assert_eq!(status, 404, "link control is off by default");
    off.shutdown().await;

    config.admin_link_control = true;
    let server = volley::server::start(config, Field(0, 1)).await.unwrap();
    let admin = server.admin_addr().unwrap();
    let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key).unwrap();
    let schema = Arc::new(Field(0, 1).schema());
    let client = GameClient::new(token, schema.clone(), unix_now());
    let mut c = UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut ages = Vec::new();
    let mut next = tokio::time::Instant::now();
    let (mut player, mut free_rate, mut line_rate, mut line_cuts) = (0, 0, 0, 0);
    let mut line_rates = Vec::new();
    for frame in 0..22 * 60 {
        next += Duration::from_micros(16_667);
        c.step(&[0], next).await;
        match frame {
            f if f == 4 * 60 => {
                player = c.client.client_index().expect("connected");
                free_rate = rate_of(admin, player).await;
                let bad = request(admin, "POST", &format!("/players/{player}/link?rate=0"), None, t).await.unwrap();
                assert_eq!(bad.0, 400, "{}", bad.1);
                let nobody = request(admin, "POST", "/players/999/link?rate=32000", None, t).await.unwrap();
                assert_eq!(nobody.0, 404, "{}", nobody.1);
                let line = format!("/players/{player}/link?rate=32000&queue_ms=250&loss=0.02&latency_ms=20");
                let (status, body) = request(admin, "POST", &line, None, t).await.unwrap();
                assert_eq!(status, 200, "{body}");
            }
            f if [12 * 60, 13 * 60, 14 * 60].contains(&f) => line_rates.push(rate_of(admin, player).await),
            f if f == 16 * 60 => {
                // The median of four samples a second apart: the rate probes up and is cut
                // back, and one sample may catch it high.
                line_rates.push(rate_of(admin, player).await);
                line_rates.sort_unstable();
                line_rate = line_rates[line_rates.len() / 2];
                line_cuts = server.metrics().totals().send_rate_cuts;
                let (_, links) = crate::admin_client::get(admin, "/links", t).await.unwrap();
                println!("the line: {links}");
                let links: serde_json::Value = serde_json::from_str(&links).unwrap();
                assert!(links[0]["lost"].as_u64().unwrap() > 0, "2 % loss: {links}");
                let (status, last) =
                    request(admin, "DELETE", &format!("/players/{player}/link"), None, t).await.unwrap();
                assert_eq!(status, 200);
                let last: serde_json::Value = serde_json::from_str(&last).unwrap();
                assert!(last["datagrams"].as_u64().unwrap() > 100, "what the link did: {last}");
                assert_eq!(server.player_links(), [], "taken off");
            }
            f if (12 * 60..16 * 60).contains(&f) => {
                let done = server.metrics().totals().ticks;
                let Some(latest) = c.client.latest() else { continue };
                for id in 1..=NEAR {
                    if let Some(m) = latest.read::<Mover>(&schema, id) {
                        ages.push(u32::try_from(done).unwrap().saturating_sub(m.stamp));
                    }
                }
            }
            _ => {}
        }
    }
    let after = rate_of(admin, player).await;
    server.shutdown().await;
    ages.sort_unstable();
    let p99 = ages[ages.len() * 99 / 100];
    println!(
        "send rate before the line {free_rate} B/s, behind it {line_rate} B/s (median of {line_rates:?}; \
         {line_cuts} cuts), 6 s after it was taken off {after} B/s; near movers' age p99 behind it {p99} ticks"
    );
    assert!(line_cuts > 0 && line_rate <= 45_000, "the rate followed the line down: {line_rate} B/s, {line_cuts} cuts");
    // The line's 20 ms and its sending time are the path's, not a queue: the rate does not
    // stay at its least (4 000) but uses the line.
    assert!(line_rate >= 12_000, "the rate uses the line: {line_rate} B/s");
    assert!(p99 <= 10, "near movers' age p99 {p99} ticks behind the line");
    assert!(after >= 2 * line_rate, "the rate grew back: {after} B/s against {line_rate}");
}

/// A player can be put behind a line as soon as it is connected: its row of `/players`, by
/// which the conditioner finds its address, is written when it connects, not at its first
/// second's figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_can_be_conditioned_as_soon_as_it_is_connected() {
    let key = [7u8; 32];
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), Field(0, 1)).await.unwrap();
    let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key).unwrap();
    let client = GameClient::new(token, Arc::new(Field(0, 1).schema()), unix_now());
    let mut c = UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let (mut next, mut frames) = (tokio::time::Instant::now(), 0);
    while server.metrics().totals().players == 0 && frames < 120 {
        next += Duration::from_micros(16_667);
        c.step(&[0], next).await;
        frames += 1;
    }
    let line = volley::server::PlayerLink::from_query("rate=32000").unwrap();
    let at_once = server.condition_player(0, Some(line));
    server.shutdown().await;
    assert!(at_once, "the player, connected {frames} frames ago, could not be conditioned");
}

/// A client behind a path MTU black hole (nothing over 100 bytes reaches it: no snapshot, no
/// handshake answer) stops hearing its server, tries to resume after a second, and its old
/// connection falls silent: past the connection's timeout the server keeps the player away
/// (not gone: the grace is 8 s here), sends it nothing, and when the path mends the client's
/// resume gets through and the player is back, the same player.
#[test]
fn a_client_behind_a_black_hole_for_large_datagrams_goes_away_and_comes_back() {
    struct Presence(Arc<std::sync::Mutex<Vec<bool>>>, Field);
    impl World for Presence {
        fn schema(&self) -> Schema {
            self.1.schema()
        }
        fn leave(&mut self, _: PlayerId) {}
        fn input(&mut self, _: PlayerId, _: &[u8]) {}
        fn away(&mut self, _: PlayerId) {
            self.0.lock().unwrap().push(true);
        }
        fn back(&mut self, _: PlayerId) {
            self.0.lock().unwrap().push(false);
        }
        fn tick(&mut self, tick: u32, dt: Duration) {
            self.1.tick(tick, dt);
        }
        fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
            self.1.snapshot(out);
        }
    }
    const HZ: u16 = 60;
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let world = Presence(heard.clone(), Field(0, 1));
    let mut stepper = Stepper::new(world, HZ, 4).with_resume_grace(Duration::from_secs(8));
    let c = stepper.add_client(LinkProfile::PERFECT);
    for _ in 0..2 * HZ {
        stepper.step();
    }
    let me = stepper.clients[c].client.client_index();
    stepper.set_largest_datagram(c, Some(100));
    let cut_at = stepper.now;
    let mut away_at = None;
    for _ in 0..7 * HZ {
        stepper.step();
        if away_at.is_none() && heard.lock().unwrap().first() == Some(&true) {
            away_at = Some(stepper.now - cut_at);
        }
    }
    let away_at = away_at.expect("away");
    println!("away {away_at:?} after the path broke");
    let client = &stepper.clients[c].client;
    assert!(client.is_resuming() && client.ended().is_none(), "still trying to resume");
    assert_eq!(stepper.players(), 1, "kept within the grace");
    // Its old connection's last packet came about a second after the break (then the client
    // turned to its resume): away at that plus the timeout (5 s).
    assert!((Duration::from_secs(5)..Duration::from_secs(7)).contains(&away_at), "away after {away_at:?}");
    stepper.set_largest_datagram(c, None);
    for _ in 0..4 * HZ {
        stepper.step();
    }
    let client = &stepper.clients[c].client;
    assert!(client.is_ready() && client.ended().is_none(), "{:?}", client.ended());
    assert_eq!(client.client_index(), me, "the same player");
    assert_eq!(*heard.lock().unwrap(), vec![true, false], "away, then back");
}
