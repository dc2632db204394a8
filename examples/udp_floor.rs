//! What one UDP datagram costs the sender on this machine: the floor under the server's CPU
//! per player-tick, which sends at least one datagram to every player every tick.
//!
//! Run with `cargo run --release --example udp_floor`. One thread sends 200-byte datagrams
//! (a typical snapshot) to 250 sockets on 127.0.0.1 in rounds, as a server's fan-out does;
//! another drains them. It prints the sending thread's CPU time per datagram, read from
//! `/proc/thread-self/stat` (Linux). On loopback the sender's system call also runs the
//! receiving side of the kernel's network stack (and any netfilter rules), so this is an
//! upper bound of what a real network interface costs. Then a client's side: one socket
//! sending 120-byte datagrams to one address, with `send_to` and with the socket connected.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// This thread's user + system CPU time, in clock ticks (usually 10 ms), if readable.
fn thread_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which ends with ')'): utime and stime are the 12th and
    // 13th of them.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn main() -> std::io::Result<()> {
    const DESTINATIONS: usize = 250;
    const ROUNDS: usize = 800;
    let receivers: Vec<UdpSocket> =
        (0..DESTINATIONS).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    let addrs: Vec<_> = receivers.iter().map(UdpSocket::local_addr).collect::<Result<_, _>>()?;
    for r in &receivers {
        r.set_nonblocking(true)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let drain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut buf, mut received) = ([0u8; 2048], 0u64);
            while !stop.load(Ordering::Relaxed) {
                for r in &receivers {
                    while r.recv(&mut buf).is_ok() {
                        received += 1;
                    }
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            received
        })
    };
    let sender = UdpSocket::bind("127.0.0.1:0")?;
    let payload = [7u8; 200];
    let (start, wall) = (thread_cpu_ticks(), Instant::now());
    let mut sent = 0u64;
    for _ in 0..ROUNDS {
        for a in &addrs {
            sent += u64::from(sender.send_to(&payload, a).is_ok());
        }
        // The drain thread keeps up between rounds, as clients do between ticks.
        std::thread::sleep(Duration::from_micros(200));
    }
    let end = thread_cpu_ticks();
    let elapsed = wall.elapsed();
    stop.store(true, Ordering::Relaxed);
    let received = drain.join().unwrap_or(0);
    let Some((start, end)) = start.zip(end) else {
        println!("/proc/thread-self/stat is not readable here: no figure");
        return Ok(());
    };
    // Clock ticks are 10 ms on Linux (USER_HZ = 100).
    let cpu = Duration::from_millis((end - start) * 10);
    println!(
        "{sent} datagrams of {} B sent ({received} received) in {elapsed:.2?}: sending thread CPU {:.2} µs a datagram",
        payload.len(),
        cpu.as_secs_f64() * 1e6 / sent.max(1) as f64
    );
    client_side()
}

/// A client's side: one socket sending to one server, with `send_to` or connected (the
/// polled client connects its socket). Receivers are drained by another thread.
fn client_side() -> std::io::Result<()> {
    const SENDS: u32 = 200_000;
    let server = UdpSocket::bind("127.0.0.1:0")?;
    server.set_nonblocking(true)?;
    let to = server.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let drain = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if server.recv(&mut buf).is_err() {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        })
    };
    let payload = [7u8; 120];
    for connected in [false, true, false, true] {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        if connected {
            socket.connect(to)?;
        }
        let start = thread_cpu_ticks();
        for _ in 0..SENDS {
            let _ = if connected { socket.send(&payload) } else { socket.send_to(&payload, to) };
        }
        let Some((start, end)) = start.zip(thread_cpu_ticks()) else { break };
        println!(
            "client, one server, {} B: {} {:.2} µs a datagram",
            payload.len(),
            if connected { "connected socket, send:" } else { "send_to:" },
            Duration::from_millis((end - start) * 10).as_secs_f64() * 1e6 / f64::from(SENDS)
        );
    }
    stop.store(true, Ordering::Relaxed);
    let _ = drain.join();
    Ok(())
}
