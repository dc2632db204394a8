//! A `nats-server` on loopback for the zone tests, killed when dropped, and a zone server
//! on it. Include with `#[path = "support/nats.rs"] mod nats;`.
#![allow(dead_code, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use volley::server::zone::ZoneLink;
use volley::server::{ServerConfig, ServerHandle, World};
use volley_zones::{BusConfig, ZoneBus};

/// Serves `world` (which makes itself a zone when it starts, its link into `link`) on a
/// loopback port with `key`, worlds of kinds "zone" and "border", and starts its bus shell
/// on `url`, taking handoffs at the server's address.
pub async fn serve_zone<W: World>(
    world: W,
    link: Arc<Mutex<Option<ZoneLink>>>,
    key: [u8; 32],
    url: &str,
) -> (ServerHandle, ZoneBus) {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.world_kinds = vec!["zone".into(), "border".into()];
    let server = volley::server::start(config, world).await.unwrap();
    let began = Instant::now();
    let link = loop {
        if let Some(l) = link.lock().unwrap().take() {
            break l;
        }
        assert!(began.elapsed() < Duration::from_secs(5), "the zone did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    link.inbox().set_public_addr(server.addr());
    let bus = ZoneBus::start(link, BusConfig::new(url)).await.unwrap();
    (server, bus)
}

pub struct Nats {
    path: std::path::PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Nats {
    pub fn start(path: std::path::PathBuf) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut n = Self { path, port, child: None };
        n.restart();
        n
    }

    pub fn restart(&mut self) {
        let child = Command::new(&self.path)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let began = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(began.elapsed() < Duration::from_secs(10), "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}
