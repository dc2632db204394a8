//! Snapshot pacing over real UDP: a server short of CPU lowers every player's snapshot rate
//! evenly and asks the clients to send their inputs at the same rate. Here the interval is
//! pinned by hand ([`ServerHandle::pin_snapshot_interval`]; the pacer's own decisions, from
//! the fan-out's figures, are unit-tested in `server::pace`): the client gets one snapshot in
//! three and sends one packet in three, every input still reaches the world once and in
//! order, and both rates come back when the pin goes.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::prelude::*;
use volley::server::ServerConfig;

volley::replicated! {
    /// The tick the world's snapshot is of.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Stamp {
        /// The tick.
        pub tick: u32 = Bits(24),
    }
}

/// Keeps every input it is given (a client's frame number), in order.
struct Counting {
    inputs: Arc<Mutex<Vec<u32>>>,
    tick: u32,
}

impl World for Counting {
    fn schema(&self) -> Schema {
        let mut s = Schema::new();
        s.register::<Stamp>().unwrap();
        s
    }
    fn leave(&mut self, _: PlayerId) {}
    fn input(&mut self, _: PlayerId, input: &[u8]) {
        if let Ok(b) = <[u8; 4]>::try_from(input) {
            self.inputs.lock().unwrap().push(u32::from_le_bytes(b));
        }
    }
    fn tick(&mut self, tick: u32, _: Duration) {
        self.tick = tick;
    }
    fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
        out.insert(1, &Stamp { tick: self.tick }).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_server_sends_fewer_snapshots_gets_fewer_packets_and_loses_no_input() {
    let key = [9u8; 32];
    let inputs = Arc::new(Mutex::new(Vec::new()));
    let world = Counting { inputs: inputs.clone(), tick: 0 };
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world).await.unwrap();
    let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key).unwrap();
    let schema = Arc::new(Counting { inputs: Arc::default(), tick: 0 }.schema());
    let client = GameClient::new(token, schema.clone(), unix_now());
    let mut c = UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let m = server.metrics().clone();
    // Per phase: snapshots the client got, packets the server got, the client's pace.
    let mut phases: Vec<(u64, u64, u8)> = Vec::new();
    let (mut snapshots, mut packets_at) = (0u64, 0u64);
    let mut next = tokio::time::Instant::now();
    let mut last_sent = 0;
    // A second client connects while the server paces: it is told at once.
    let mut late: Option<UdpClient> = None;
    for frame in 0u32..11 * 60 {
        next += Duration::from_micros(16_667);
        snapshots += c.step(&frame.to_le_bytes(), next).await as u64;
        if let Some(l) = &mut late {
            l.step(&[], tokio::time::Instant::now()).await;
        }
        if c.client.is_ready() {
            last_sent = frame;
        }
        // Phases: free (2–4 s), pinned at 3 (4.5–6.5 s), pinned back at 1 (8–10 s).
        match frame {
            120 | 270 | 480 => (snapshots, packets_at) = (0, m.totals().packets_received),
            240 | 390 | 600 => phases.push((snapshots, m.totals().packets_received - packets_at, c.client.pace())),
            _ => {}
        }
        match frame {
            240 => server.pin_snapshot_interval(Some(3)),
            390 => {
                let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 2, server.addr(), unix_now().as_secs());
                let token = ConnectToken::generate(&params, &key).unwrap();
                let client = GameClient::new(token, schema.clone(), unix_now());
                late = Some(UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap());
            }
            420 => {
                let mut l = late.take().unwrap();
                l.disconnect();
                assert_eq!(l.client.pace(), 3, "a client that connects while the server paces is told");
                let t = m.totals();
                assert_eq!(t.snapshot_interval, 3);
                assert!(t.snapshots_paced > 0, "paced snapshots are counted");
                server.pin_snapshot_interval(Some(1));
            }
            _ => {}
        }
    }
    server.shutdown().await;
    println!(
        "two seconds each (snapshots to the client, packets from it, its pace): free, paced at 3, back at 1: {phases:?}"
    );
    let [free, paced, back] = phases[..] else { panic!("three phases: {phases:?}") };
    assert_eq!((free.2, paced.2, back.2), (1, 3, 1), "the client was told the pace each time");
    for (what, (snaps, packets, _)) in [("free", free), ("back at 1", back)] {
        assert!(snaps >= 100, "{what}: {snaps} snapshots in 2 s at 60 Hz");
        assert!(packets >= 100, "{what}: {packets} packets in 2 s at 60 Hz");
    }
    assert!((30..=50).contains(&paced.0), "one snapshot in three: {} in 2 s", paced.0);
    assert!((30..=55).contains(&paced.1), "one packet in three: {} in 2 s", paced.1);
    // Every input from the first the world had to the last the client sent but three (the
    // last packet may still be on its way): once each, in order.
    let got = inputs.lock().unwrap().clone();
    let first = *got.first().expect("inputs arrived");
    let want: Vec<u32> = (first..=last_sent - 3).collect();
    assert_eq!(&got[..want.len()], &want[..], "every input once, in order (the world had {} inputs)", got.len());
}

/// Paced at 4 (one packet in four inputs), every input still travels in four packets: a
/// packet carries the last sixteen. With 30 % of the client's packets lost, almost every
/// input arrives (one packet in four carrying only the last four, each input would travel
/// in one and 30 % of them would be lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_inputs_keep_their_redundancy_through_a_lossy_uplink() {
    use volley::transport::conditioner::LinkProfile;
    let key = [9u8; 32];
    let inputs = Arc::new(Mutex::new(Vec::new()));
    let world = Counting { inputs: inputs.clone(), tick: 0 };
    let server = volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), world).await.unwrap();
    server.pin_snapshot_interval(Some(4));
    let params = TokenParams::new(DEFAULT_PROTOCOL_ID, 1, server.addr(), unix_now().as_secs());
    let token = ConnectToken::generate(&params, &key).unwrap();
    let schema = Arc::new(Counting { inputs: Arc::default(), tick: 0 }.schema());
    let client = GameClient::new(token, schema, unix_now());
    let lossy = LinkProfile { loss: 0.3, ..LinkProfile::PERFECT };
    let mut c =
        UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap().with_conditioner(lossy, 7);
    let mut next = tokio::time::Instant::now();
    let (mut first_paced, mut last_sent) = (None, 0);
    for frame in 0u32..6 * 60 {
        next += Duration::from_micros(16_667);
        c.step(&frame.to_le_bytes(), next).await;
        if c.client.pace() == 4 {
            first_paced.get_or_insert(frame);
            last_sent = frame;
        }
    }
    server.shutdown().await;
    let first = first_paced.expect("the client was told the pace") + 8;
    let got: std::collections::BTreeSet<u32> = inputs.lock().unwrap().iter().copied().collect();
    // The last sixteen may still be on their way.
    let sent: Vec<u32> = (first..=last_sent - 16).collect();
    let lost: Vec<u32> = sent.iter().copied().filter(|f| !got.contains(f)).collect();
    println!("paced at 4, 30 % loss: {} of {} inputs lost ({lost:?})", lost.len(), sent.len());
    assert!(sent.len() >= 200, "{} inputs sent while paced", sent.len());
    assert!(lost.len() * 50 <= sent.len(), "at most 2 % lost: {} of {}", lost.len(), sent.len());
}

/// The same pacing in the stepper (`Stepper::pin_snapshot_interval`), where it is exact: at
/// one in three the client gets the snapshot of every third tick and sends one packet in
/// three, a client that connects meanwhile is told, every input reaches the world once and
/// in order, and letting go brings every tick's snapshot back at once. A game tries its
/// client at a paced rate this way, one tick at a time.
#[test]
fn the_stepper_paces_as_the_server_does() {
    let inputs = Arc::new(Mutex::new(Vec::new()));
    let mut stepper = volley::testing::Stepper::new(Counting { inputs: inputs.clone(), tick: 0 }, 60, 4);
    stepper.add_client(LinkProfile::PERFECT);
    let mut frame = 0u32;
    // Steps `n` ticks, client 0 sending its frame number; (snapshots it got, packets it sent).
    let mut phase = |stepper: &mut volley::testing::Stepper<Counting>, n: u32| {
        let up = |s: &volley::testing::Stepper<Counting>| s.link_counts(0).unwrap().0.datagrams;
        let (mut snapshots, packets) = (0, up(stepper));
        let mut last = stepper.clients[0].client.latest().map(|s| s.tick());
        for _ in 0..n {
            stepper.step_with(|i, _, _| if i == 0 { frame.to_le_bytes().to_vec() } else { Vec::new() });
            frame += 1;
            let now = stepper.clients[0].client.latest().map(|s| s.tick());
            snapshots += u32::from(now != last);
            last = now;
        }
        (snapshots, up(stepper) - packets)
    };
    phase(&mut stepper, 60);
    let free = phase(&mut stepper, 120);
    stepper.pin_snapshot_interval(Some(3));
    phase(&mut stepper, 30);
    let late = stepper.add_client(LinkProfile::PERFECT);
    let paced = phase(&mut stepper, 120);
    assert_eq!(stepper.clients[0].client.pace(), 3, "told the pace");
    assert_eq!(stepper.clients[late].client.pace(), 3, "a client that connects while the server paces is told");
    stepper.pin_snapshot_interval(None);
    phase(&mut stepper, 5);
    let back = phase(&mut stepper, 120);
    println!(
        "120 ticks each (snapshots to the client, packets from it): free {free:?}, paced at 3 {paced:?}, back {back:?}"
    );
    assert_eq!(free, (120, 120));
    assert_eq!(paced.0, 40, "the snapshot of every third tick");
    assert!((39..=41).contains(&paced.1), "one packet in three: {}", paced.1);
    assert_eq!(stepper.clients[0].client.pace(), 1);
    assert_eq!(back, (120, 120));
    let got = inputs.lock().unwrap().clone();
    let first = *got.first().expect("inputs arrived");
    let want: Vec<u32> = (first..frame).collect();
    assert_eq!(got, want, "every input once, in order");
}
