//! The arena's map split among zone servers that talk through NATS: `volley server --zone K
//! --zones N --nats URL` runs one zone; `volley run --zones N` starts `nats-server` (when it
//! is installed), N zone servers as processes of their own, and the bots, spread over the
//! zones, playing across the borders.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glam::Vec2;
use volley::protocol::zone::{ZoneId, ZoneLayout};
use volley::server::zone::ZoneLink;
use volley_arena::bots::{SnapshotWatch, SwarmConfig, SwarmProgress, SwarmReport, run_swarm};
use volley_arena::{Arena, HALF_SIZE, VIEW_RADIUS};
use volley_util::hex;
use volley_zones::{BusConfig, ZoneBus};

use crate::oracle::Oracle;
use crate::{ServerArgs, key_or_random, until_stopped};

/// Client ids of the bots that start in zone K begin at `1 + K * ZONE_CLIENT_IDS` (a client
/// id is who a player is across zones).
const ZONE_CLIENT_IDS: u64 = 1_000_000;

/// The arena's map (±[`HALF_SIZE`]) cut into `zones` regions: a grid where one fits (4: 2 × 2,
/// 6: 3 × 2, 9: 3 × 3), else side by side; each shares what stands within the view radius of
/// its borders.
pub fn layout(zones: u16) -> Result<ZoneLayout, String> {
    let (cols, rows) = match zones {
        4 => (2, 2),
        6 => (3, 2),
        9 => (3, 3),
        n => (n, 1),
    };
    ZoneLayout::grid(Vec2::splat(-HALF_SIZE), Vec2::splat(HALF_SIZE), cols, rows, VIEW_RADIUS)
        .map_err(|e| format!("--zones {zones}: {e}"))
}

/// Where a zone's link arrives once its world has started.
pub type LinkSlot = Arc<Mutex<Option<ZoneLink>>>;

/// The arena world of `--zone K`, and the slot its link arrives in; `None` without `--zone`.
pub fn arena_zone(a: &ServerArgs) -> Result<Option<(Arena, LinkSlot)>, String> {
    let Some(k) = a.zone else { return Ok(None) };
    if k >= a.zones {
        return Err(format!("--zone {k}: the map has {} zones (--zones)", a.zones));
    }
    let (arena, link) = Arena::zoned(layout(a.zones)?, k);
    Ok(Some((if a.publish_state { arena.publishing_state() } else { arena }, link)))
}

/// Starts the zone's bus shell once its world has started, taking handoffs at `public`.
pub async fn start_bus(a: &ServerArgs, public: SocketAddr, link: LinkSlot) -> Result<ZoneBus, String> {
    let began = Instant::now();
    let link = loop {
        if let Some(l) = link.lock().ok().and_then(|mut l| l.take()) {
            break l;
        }
        if began.elapsed() > Duration::from_secs(5) {
            return Err("the arena did not start as a zone (see the log)".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    link.inbox().set_public_addr(public);
    let me = link.me();
    let bus = ZoneBus::start(link, BusConfig::new(a.nats.clone())).await.map_err(|e| e.to_string())?;
    println!("zone {me} of {}: NATS at {} (the zone runs alone until it answers)", a.zones, a.nats);
    Ok(bus)
}

/// Where a program is: on the PATH, or in /usr/sbin (where Debian puts `nats-server`).
fn find(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A child process, killed when dropped.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `nats-server` on a free loopback port; its URL.
fn start_nats(path: &std::path::Path) -> Result<(Kid, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a port for NATS: {e}"))?
        .port();
    let child = Command::new(path)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let kid = Kid(child);
    let began = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if began.elapsed() > Duration::from_secs(10) {
            return Err("nats-server did not start within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((kid, format!("nats://127.0.0.1:{port}")))
}

/// `--bind`'s and `--admin`'s address for zone `k`: the port plus `k`.
fn nth(addr: SocketAddr, k: u16) -> SocketAddr {
    SocketAddr::new(addr.ip(), addr.port().wrapping_add(k))
}

/// One zone server, a process of its own, its output lines prefixed with its zone.
fn spawn_zone(
    a: &ServerArgs,
    k: ZoneId,
    nats: &str,
    key: &[u8; 32],
    admin: Option<SocketAddr>,
    publish_state: bool,
) -> Result<Kid, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("server")
        .args(["--zone", &k.to_string(), "--zones", &a.zones.to_string(), "--nats", nats])
        .args(["--private-key", &hex::encode(key)])
        .args(["--bind", &nth(a.bind, k).to_string()])
        .args(["--admin", &admin.map_or("off".to_string(), |x| nth(x, k).to_string())])
        .args(["--protocol-id", &a.protocol_id.to_string()])
        .args(["--max-players", &a.max_players.to_string()])
        .args(["--tick-rate", &a.tick_rate.to_string(), "--snapshot-rate", &a.snapshot_rate.to_string()])
        // Its settings are these flags, not a file meant for `volley run`.
        .env_remove("VOLLEY_CONFIG")
        .stdout(Stdio::piped());
    if publish_state {
        cmd.arg("--publish-state");
    }
    if let Some(d) = a.duration {
        cmd.args(["--duration", &(d + 2.0).to_string()]);
    }
    let mut child = cmd.spawn().map_err(|e| format!("zone {k}: {e}"))?;
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                println!("[zone {k}] {line}");
            }
        });
    }
    Ok(Kid(child))
}

/// A series' value in a Prometheus text page (the first line that starts with `series`).
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `volley run --zones N`: NATS, N zone servers and the bots, until `--duration` or Ctrl-C;
/// then the bots' report and each zone's handoffs; with `oracle`, what the global oracle
/// found (see [`crate::oracle`]).
pub async fn run(a: ServerArgs, bots: usize, oracle: bool) -> Result<(), String> {
    let key = key_or_random(a.private_key.as_deref())?;
    let map = layout(a.zones)?;
    let (_nats, url) = match find("nats-server") {
        Some(path) => {
            let (kid, url) = start_nats(&path)?;
            println!("nats-server started at {url}");
            (Some(kid), url)
        }
        None => {
            println!("nats-server is not installed: the zones use {} (start one there)", a.nats);
            (None, a.nats.clone())
        }
    };
    let admin: Option<SocketAddr> =
        if a.admin == "off" { None } else { Some(a.admin.parse().map_err(|e| format!("--admin {:?}: {e}", a.admin))?) };
    let mut kids = Vec::new();
    for k in 0..a.zones {
        kids.push(spawn_zone(&a, k, &url, &key, admin, oracle)?);
    }
    // Up when each admin listener answers (or, without them, after a second).
    let began = Instant::now();
    for k in 0..a.zones {
        let Some(x) = admin.map(|x| nth(x, k)) else { break };
        while volley_fleet::admin_client::get(x, "/readyz", Duration::from_millis(200)).await.is_err() {
            if began.elapsed() > Duration::from_secs(15) {
                return Err(format!("zone {k} did not start within 15 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    if admin.is_none() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let oracle = if oracle {
        let o = Oracle::start(map, a.bind);
        let feed = volley_zones::watch_states(&BusConfig::new(url.clone()), o.states())
            .await
            .map_err(|e| format!("the oracle cannot watch the zones' states: {e}"))?;
        Some((o, feed))
    } else {
        None
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut swarms = Vec::new();
    let per = bots / usize::from(a.zones);
    for k in 0..a.zones {
        let n = per + usize::from(usize::from(k) < bots % usize::from(a.zones));
        if n == 0 {
            continue;
        }
        let cfg = SwarmConfig {
            protocol_id: a.protocol_id,
            first_client_id: 1 + u64::from(k) * ZONE_CLIENT_IDS,
            watch: oracle.as_ref().map(|(o, _)| o.watch() as Arc<dyn SnapshotWatch>),
            ..SwarmConfig::new(nth(a.bind, k), n, key)
        };
        swarms.push(tokio::spawn(run_swarm(cfg, Arc::new(SwarmProgress::default()), stop_rx.clone())));
    }
    println!("{} zones, {bots} bots: running", a.zones);
    until_stopped(a.duration).await;
    let _ = stop_tx.send(true);
    let mut report = SwarmReport::default();
    for s in swarms {
        if let Ok(r) = s.await {
            report.elapsed = report.elapsed.max(r.elapsed);
            report.bots.extend(r.bots);
        }
    }
    // The zones' figures first: they stop by themselves two seconds after the bots, and the
    // oracle may still have snapshots to check.
    let mut lines = Vec::new();
    for k in 0..a.zones {
        let Some(x) = admin.map(|x| nth(x, k)) else { break };
        let text = match volley_fleet::admin_client::get(x, "/metrics", Duration::from_secs(2)).await {
            Ok((_, text)) => text,
            Err(e) => {
                lines.push(format!("zone {k}: no figures (its admin at {x}: {e})"));
                continue;
            }
        };
        let h = |o: &str| value(&text, &format!("volley_zone_handoffs_total{{outcome=\"{o}\"}}"));
        let accepted = h("accepted");
        // The frames' work, the border world's ticks and the players' border relevancy,
        // against the process's CPU.
        let frames = value(&text, "volley_zone_border_work_seconds_total ");
        let chosen = value(&text, "volley_zone_border_relevancy_seconds_total ");
        let world = value(&text, "volley_zone_border_world_seconds_total ");
        let cpu = value(&text, "process_cpu_seconds_total ");
        lines.push(format!(
            "zone {k}: handoffs out {accepted} accepted, {} refused, {} timed out (answer in {:.2} ms on average); inputs of players handed in: {} lost, {} repeated; border frames in {}, entities shown now {}; border work {:.3} s (frames {:.3} s; border world {:.3} s; players' border relevancy {:.3} s) of {:.2} s CPU: {:.1} %{}",
            h("refused"),
            h("timed_out"),
            value(&text, "volley_zone_handoff_wait_seconds_total ") * 1e3 / accepted.max(1.0),
            value(&text, "volley_zone_handoff_inputs_lost_total "),
            value(&text, "volley_zone_handoff_inputs_repeated_total "),
            value(&text, "volley_zone_border_frames_total{direction=\"in\"}"),
            value(&text, "volley_zone_border_entities "),
            frames + world + chosen,
            frames,
            world,
            chosen,
            cpu,
            (frames + world + chosen) * 100.0 / cpu.max(1e-9),
            " (the NATS client's own work not counted)",
        ));
    }
    println!("{}", report.summary());
    if let Some((o, feed)) = oracle {
        feed.abort();
        let _ = feed.await;
        println!("{}", o.finish().line());
    }
    for l in lines {
        println!("{l}");
    }
    // The zones stop by themselves two seconds after the bots (with --duration); else now.
    let until = Instant::now() + Duration::from_secs(if a.duration.is_some() { 6 } else { 0 });
    for mut kid in kids {
        while Instant::now() < until && matches!(kid.0.try_wait(), Ok(None)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(kid);
    }
    Ok(())
}
