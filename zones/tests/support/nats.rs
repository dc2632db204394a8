//! A `nats-server` on loopback for the zone tests, killed when dropped. Include with
//! `#[path = "support/nats.rs"] mod nats;`.
#![allow(dead_code, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
