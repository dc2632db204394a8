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
//! Last, a server's whole wire work per player-tick and nothing else: 500 players each send
//! an encrypted 100-byte input; the server takes them with `recvmmsg`, decrypts each
//! (ChaCha20-Poly1305, as netcode does), encrypts a 200-byte snapshot for each and sends
//! them with `sendmmsg`, 32 a call, as volley's server does; its thread's CPU per player is
//! the least any server spends per player-tick on this machine before it simulates, picks
//! what a player sees or encodes anything.

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
    client_side()?;
    // As inputs come, and waiting 2 ms a tick first so that every recvmmsg is full: the
    // cheapest receiving can get, at the price of latency.
    server_wire_floor(false)?;
    server_wire_floor(true)
}

/// The server's wire work per player-tick, alone (see the module's doc). Players and server
/// go in lockstep: each round every player sends its input and waits for its snapshot.
fn server_wire_floor(full_batches: bool) -> std::io::Result<()> {
    use chacha20poly1305::aead::{AeadInPlace, KeyInit};
    use chacha20poly1305::{ChaCha20Poly1305, Nonce, Tag};
    use volley::transport::batch::{RecvBatch, send_batch};

    const PLAYERS: usize = 500;
    const ROUNDS: usize = 400;
    let cipher = ChaCha20Poly1305::new(&[7u8; 32].into());
    let nonce = |seq: u64| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&seq.to_le_bytes());
        Nonce::from(n)
    };
    let server = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let to = server.local_addr()?;
    let s2 = socket2::SockRef::from(&server);
    s2.set_recv_buffer_size(4 << 20)?;
    s2.set_send_buffer_size(4 << 20)?;
    server.set_nonblocking(true)?;
    let players: Vec<UdpSocket> = (0..PLAYERS).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
    let clients = {
        let cipher = cipher.clone();
        std::thread::spawn(move || -> std::io::Result<u64> {
            let (mut buf, mut lost) = ([0u8; 2048], 0u64);
            for p in &players {
                p.set_read_timeout(Some(Duration::from_millis(200)))?;
            }
            for round in 0..ROUNDS as u64 {
                for p in &players {
                    let mut input = [3u8; 100 + 16];
                    let (data, tag) = input.split_at_mut(100);
                    if let Ok(t) = cipher.encrypt_in_place_detached(&nonce(round), b"", data) {
                        tag.copy_from_slice(&t);
                    }
                    p.send_to(&input, to)?;
                }
                for p in &players {
                    lost += u64::from(p.recv(&mut buf).is_err());
                }
            }
            Ok(lost)
        })
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (cpu, served) = runtime.block_on(async {
        let socket = tokio::net::UdpSocket::from_std(server)?;
        let mut batch = RecvBatch::default();
        // Snapshot buffers reused tick after tick, as the server's batcher does.
        let mut out: Vec<(std::net::SocketAddr, [u8; 200 + 16])> = Vec::with_capacity(PLAYERS);
        let (start, mut served) = (thread_cpu_ticks(), 0u64);
        for round in 0..ROUNDS as u64 {
            out.clear();
            if full_batches {
                std::thread::sleep(Duration::from_millis(2));
            }
            while out.len() < PLAYERS {
                let ready = tokio::time::timeout(Duration::from_millis(100), socket.readable()).await;
                if ready.is_err() {
                    break; // a lost input: serve the others
                }
                let Ok(n) = batch.recv(&socket) else { continue };
                for i in 0..n {
                    let Some((bytes, from)) = batch.get_mut(i) else { continue };
                    let Some(len) = bytes.len().checked_sub(16) else { continue };
                    let (data, tag) = bytes.split_at_mut(len);
                    let tag = Tag::clone_from_slice(tag);
                    if cipher.decrypt_in_place_detached(&nonce(round), b"", data, &tag).is_ok() {
                        let mut snapshot = [9u8; 200 + 16];
                        let (data, tag) = snapshot.split_at_mut(200);
                        if let Ok(t) = cipher.encrypt_in_place_detached(&nonce(round), b"", data) {
                            tag.copy_from_slice(&t);
                        }
                        out.push((from, snapshot));
                    }
                }
            }
            let mut items: Vec<(std::net::SocketAddr, &[u8])> = Vec::with_capacity(32);
            for chunk in out.chunks(32) {
                items.clear();
                items.extend(chunk.iter().map(|(to, b)| (*to, b.as_slice())));
                send_batch(&socket, &items);
            }
            served += out.len() as u64;
        }
        Ok::<_, std::io::Error>((start.zip(thread_cpu_ticks()).map(|(a, b)| b - a), served))
    })?;
    let lost = clients.join().unwrap_or(Ok(0))?;
    let Some(cpu) = cpu else { return Ok(()) };
    println!(
        "server wire work, {PLAYERS} players x {ROUNDS} ticks ({served} served, {lost} lost{}): recvmmsg + decrypt a \
         100 B input + encrypt a 200 B snapshot + sendmmsg = {:.2} µs of the server thread's CPU a player-tick",
        if full_batches { ", inputs taken in full batches" } else { ", inputs taken as they come" },
        Duration::from_millis(cpu * 10).as_secs_f64() * 1e6 / served.max(1) as f64
    );
    Ok(())
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
