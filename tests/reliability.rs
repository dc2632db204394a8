//! The reliability layer between two endpoints over a simulated lossy, jittery, duplicating
//! link, stepped deterministically.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use volley::protocol::reliability::{Channel, ChannelConfig, QueueError};

const STEP: Duration = Duration::from_millis(10);

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy)]
struct Link {
    loss: f64,
    duplicate: f64,
    base_delay_steps: u32,
    jitter_steps: u32,
}

struct Sim {
    now: Duration,
    rng: Rng,
    link: Link,
    a: Channel,
    b: Channel,
    to_a: Vec<(Duration, Vec<u8>)>,
    to_b: Vec<(Duration, Vec<u8>)>,
    states_at_b: Vec<u32>,
}

impl Sim {
    fn new(link: Link, seed: u64) -> Self {
        Self::with_config(link, seed, ChannelConfig::default())
    }

    fn with_config(link: Link, seed: u64, config: ChannelConfig) -> Self {
        Self {
            now: Duration::from_secs(1),
            rng: Rng(seed | 1),
            link,
            a: Channel::new(config),
            b: Channel::new(config),
            to_a: Vec::new(),
            to_b: Vec::new(),
            states_at_b: Vec::new(),
        }
    }

    fn transmit(&mut self, packet: Vec<u8>, to_b: bool) {
        let copies = if self.rng.next() < self.link.duplicate { 2 } else { 1 };
        for _ in 0..copies {
            if self.rng.next() < self.link.loss {
                continue;
            }
            let steps = self.link.base_delay_steps + (self.rng.next() * f64::from(self.link.jitter_steps + 1)) as u32;
            let at = self.now + STEP * steps;
            if to_b { self.to_b.push((at, packet.clone())) } else { self.to_a.push((at, packet.clone())) }
        }
    }

    fn step(&mut self, tick: u32) {
        self.now += STEP;
        let mut buf = [0u8; 1200];
        let state = tick.to_le_bytes();
        let n = self.a.build_packet(self.now, Some(&state), &mut buf);
        self.transmit(buf[..n].to_vec(), true);
        let n = self.b.build_packet(self.now, None, &mut buf);
        self.transmit(buf[..n].to_vec(), false);
        let now = self.now;
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.to_b).into_iter().partition(|(at, _)| *at <= now);
        self.to_b = rest;
        for (_, p) in due {
            if let Some(s) = self.b.receive(now, &p).unwrap() {
                self.states_at_b.push(u32::from_le_bytes(s.try_into().unwrap()));
            }
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.to_a).into_iter().partition(|(at, _)| *at <= now);
        self.to_a = rest;
        for (_, p) in due {
            self.a.receive(now, &p).unwrap();
        }
    }
}

fn harsh() -> Link {
    // 20 % loss, 30–80 ms one way (±25 ms jitter), 5 % duplicates.
    Link { loss: 0.2, duplicate: 0.05, base_delay_steps: 3, jitter_steps: 5 }
}

#[test]
fn reliable_messages_arrive_exactly_once_and_in_order_under_loss_and_jitter() {
    let mut sim = Sim::new(harsh(), 7);
    let mut sent = Vec::new();
    let mut got = Vec::new();
    for tick in 0..1500u32 {
        if tick < 1000 && tick % 3 == 0 {
            let msg = format!("message {tick}").into_bytes();
            sim.a.send_reliable(Bytes::from(msg.clone())).unwrap();
            sent.push(msg);
        }
        if tick == 500 {
            // A large message travels as fragments.
            let big: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
            sim.a.send_reliable(Bytes::from(big.clone())).unwrap();
            sent.push(big);
        }
        sim.step(tick);
        while let Some(m) = sim.b.recv_reliable() {
            got.push(m.to_vec());
        }
    }
    assert_eq!(got.len(), sent.len(), "every message, once");
    assert!(got == sent, "in order and intact");
    assert_eq!(sim.a.unacked_messages(), 0, "everything acknowledged");
    assert!(sim.a.stats().resends > 0, "loss forced resends");
}

#[test]
fn a_window_of_thousands_of_messages_delivers_each_once_and_in_order() {
    // A window of 4 096 messages, a 400 ms round trip at 100 packets a second and 32 small
    // messages a packet: about 1 300 message ids in flight before the first ack.
    let config = ChannelConfig {
        reliable_window: 4096,
        send_queue_messages: 8192,
        inbox_messages: 8192,
        ..ChannelConfig::default()
    };
    let link = Link { loss: 0.05, duplicate: 0.0, base_delay_steps: 20, jitter_steps: 0 };
    let mut sim = Sim::with_config(link, 11, config);
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    for tick in 0..1200u32 {
        while sent.len() < 6000 {
            let msg = (sent.len() as u32).to_le_bytes().to_vec();
            if sim.a.send_reliable(Bytes::from(msg.clone())).is_err() {
                break;
            }
            sent.push(msg);
        }
        sim.step(tick);
        while let Some(m) = sim.b.recv_reliable() {
            got.push(m.to_vec());
        }
    }
    assert_eq!(got.len(), sent.len(), "every message, once");
    assert!(got == sent, "in order and intact");
    assert_eq!(sim.a.unacked_messages(), 0, "everything acknowledged");
    assert!(sim.a.stats().resends > 0);
}

#[test]
fn an_ack_for_a_packet_whose_ids_were_forgotten_resends_instead_of_losing() {
    // A window of 16 gives the sender a ring of 128 message ids. Unacknowledged, the 16
    // messages go out again in every packet (100 ms resend timeout before any RTT sample),
    // so by the ninth packet the first packet's ids are overwritten.
    let config = ChannelConfig { reliable_window: 16, ..ChannelConfig::default() };
    let (mut a, mut b) = (Channel::new(config), Channel::new(config));
    for i in 0..16u8 {
        a.send_reliable(Bytes::from(vec![i])).unwrap();
    }
    let mut now = Duration::from_secs(1);
    let mut packets = Vec::new();
    let mut buf = [0u8; 1200];
    for _ in 0..9 {
        now += Duration::from_millis(150);
        let n = a.build_packet(now, None, &mut buf);
        packets.push(buf[..n].to_vec());
    }
    // The first packet arrives and is acknowledged: its ids are gone, so nothing is marked.
    b.receive(now, &packets[0]).unwrap();
    let n = b.build_packet(now, None, &mut buf);
    a.receive(now, &buf[..n]).unwrap();
    assert_eq!(a.unacked_messages(), 16, "forgotten ids mark nothing acknowledged");
    // The last one arrives too: its ids are known, and all 16 are acknowledged.
    b.receive(now, &packets[8]).unwrap();
    let n = b.build_packet(now, None, &mut buf);
    a.receive(now, &buf[..n]).unwrap();
    assert_eq!(a.unacked_messages(), 0);
    let got: Vec<u8> = std::iter::from_fn(|| b.recv_reliable()).map(|m| m[0]).collect();
    assert_eq!(got, (0..16).collect::<Vec<u8>>(), "each once, in order");
}

#[test]
fn state_is_newest_wins_and_never_goes_back() {
    let mut sim = Sim::new(harsh(), 11);
    for tick in 0..600 {
        sim.step(tick);
    }
    let s = &sim.states_at_b;
    assert!(s.len() > 300, "most states arrive: {}", s.len());
    assert!(s.windows(2).all(|w| w[0] < w[1]), "a state older than one already returned is never returned");
}

#[test]
fn rtt_jitter_and_loss_estimates_follow_the_link() {
    // Fixed 50 ms each way, 10 % loss each way.
    let link = Link { loss: 0.1, duplicate: 0.0, base_delay_steps: 5, jitter_steps: 0 };
    let mut sim = Sim::new(link, 3);
    for tick in 0..3000 {
        sim.step(tick);
    }
    let l = sim.a.link();
    // A packet is acknowledged by the peer's next packet: RTT is 100 ms plus up to one step.
    assert!(l.rtt() >= Duration::from_millis(100) && l.rtt() <= Duration::from_millis(125), "{:?}", l.rtt());
    assert!(l.jitter() < Duration::from_millis(10), "{:?}", l.jitter());
    // Redundant acks (32 bits) hide the reverse path's loss: only the forward loss shows.
    assert!((l.loss() - 0.1).abs() < 0.07, "loss {}", l.loss());
}

#[test]
fn events_arrive_at_most_once() {
    let mut sim = Sim::new(harsh(), 5);
    for tick in 0..400u32 {
        if tick < 300 {
            sim.a.send_event(Bytes::from(tick.to_le_bytes().to_vec())).unwrap();
        }
        sim.step(tick);
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(e) = sim.b.recv_event() {
        assert!(seen.insert(e.to_vec()), "duplicate event delivered");
    }
    assert!(seen.len() > 180 && seen.len() < 300, "events are unreliable: {} of 300", seen.len());
}

#[test]
fn typed_messages_round_trip() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Chat {
        Say { from: u32, text: String },
        Leave(u32),
    }
    let mut sim = Sim::new(Link { loss: 0.0, duplicate: 0.0, base_delay_steps: 1, jitter_steps: 0 }, 1);
    sim.a.send_message(&Chat::Say { from: 3, text: "gg".into() }).unwrap();
    sim.a.send_message(&Chat::Leave(3)).unwrap();
    sim.a.send_event_message(&Chat::Leave(4)).unwrap();
    for tick in 0..5 {
        sim.step(tick);
    }
    assert_eq!(sim.b.recv_message::<Chat>().unwrap().unwrap(), Chat::Say { from: 3, text: "gg".into() });
    assert_eq!(sim.b.recv_message::<Chat>().unwrap().unwrap(), Chat::Leave(3));
    assert!(sim.b.recv_message::<Chat>().is_none());
    assert_eq!(sim.b.recv_event_message::<Chat>().unwrap().unwrap(), Chat::Leave(4));
}

#[test]
fn limits_are_errors_not_silent_loss() {
    let mut e = Channel::new(ChannelConfig { send_queue_messages: 4, ..ChannelConfig::default() });
    for _ in 0..4 {
        e.send_reliable(Bytes::from_static(b"x")).unwrap();
    }
    assert_eq!(e.send_reliable(Bytes::from_static(b"x")), Err(QueueError::QueueFull(4)));
    let huge = Bytes::from(vec![0u8; 70_000]);
    assert!(matches!(e.send_reliable(huge), Err(QueueError::MessageTooLarge { size: 70_000, .. })));
    let big_event = Bytes::from(vec![0u8; 1500]);
    assert!(matches!(e.send_event(big_event), Err(QueueError::MessageTooLarge { .. })));
}

#[test]
fn compressible_packets_are_compressed_and_still_read() {
    let link = Link { loss: 0.0, duplicate: 0.0, base_delay_steps: 1, jitter_steps: 0 };
    let mut sim = Sim::new(link, 9);
    let text = Bytes::from("the quick brown fox jumps over the lazy dog. ".repeat(20));
    sim.a.send_reliable(text.clone()).unwrap();
    for tick in 0..5 {
        sim.step(tick);
    }
    assert_eq!(sim.b.recv_reliable(), Some(text));
    assert!(sim.a.stats().compressed_packets >= 1);
    assert!(sim.a.stats().compression_saved_bytes > 500);
}

/// After a long run of packets lz4 cannot shrink (bit-packed snapshots) the endpoint tries it
/// only now and then, yet compressible packets are compressed again within a pause, and every
/// packet still reads back.
#[test]
fn lz4_backs_off_on_incompressible_packets_and_comes_back() {
    let mut a = Channel::new(ChannelConfig::default());
    let mut b = Channel::new(ChannelConfig::default());
    let mut out = [0u8; 1200];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut t = 0u64;
    let mut send = |a: &mut Channel, b: &mut Channel, state: &[u8]| {
        t += 1;
        let now = Duration::from_millis(16 * t);
        let n = a.build_packet(now, Some(state), &mut out);
        assert_eq!(b.receive(now, &out[..n]).unwrap(), Some(state), "packet {t} reads back");
        // b answers, so that a's headers carry acks and an ack delay, as they do in play
        // (a one-way stream's header is a run of zeros lz4 can take a few bytes off).
        let later = now + Duration::from_millis(3);
        let n = b.build_packet(later, Some(&[1]), &mut out);
        a.receive(later + Duration::from_millis(1), &out[..n]).unwrap();
    };
    for _ in 0..200 {
        let noise: Vec<u8> = (0..300)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        send(&mut a, &mut b, &noise);
    }
    let before = a.stats().compressed_packets;
    assert!(before <= 2, "noise rarely shrinks: {before}");
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(6);
    for _ in 0..40 {
        send(&mut a, &mut b, text.as_bytes());
    }
    // At most a pause of 32 passes uncompressed; every packet after it shrinks.
    let after = a.stats().compressed_packets - before;
    assert!(after >= 40 - 33, "{after} compressed");
}

proptest! {
    #[test]
    fn garbage_packets_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1300), frame in 0u8..3) {
        let mut e = Channel::new(ChannelConfig::default());
        let mut p = bytes;
        if let Some(b) = p.first_mut() {
            *b = frame;
        }
        let _ = e.receive(Duration::from_secs(1), &p);
        let mut buf = [0u8; 1200];
        let n = e.build_packet(Duration::from_secs(2), None, &mut buf);
        prop_assert!(n >= 9);
    }
}

/// `a` sends to `b` every step and everything arrives; `b`'s packets back reach `a` only in
/// bursts every `every` steps (`deliver` picks which of the held ones go, in which order). Returns `a`'s loss
/// estimate.
fn loss_seen_with_acks_in_bursts(every: u32, deliver: impl Fn(&mut Vec<Vec<u8>>) -> Vec<Vec<u8>>) -> f64 {
    let mut a = Channel::new(ChannelConfig::default());
    let mut b = Channel::new(ChannelConfig::default());
    let mut now = Duration::from_secs(1);
    let mut held = Vec::new();
    let mut buf = [0u8; 1200];
    for i in 0u32..2000 {
        now += STEP;
        let n = a.build_packet(now, Some(&i.to_le_bytes()), &mut buf);
        b.receive(now, &buf[..n]).unwrap();
        let n = b.build_packet(now, None, &mut buf);
        held.push(buf[..n].to_vec());
        if i % every == every - 1 {
            for p in deliver(&mut held) {
                a.receive(now, &p).unwrap();
            }
            held.clear();
        }
    }
    a.link().loss()
}

#[test]
fn acks_that_arrive_only_in_the_ack_field_still_count() {
    // Only one of every eight return packets arrives: the seven others' acks reach `a` only
    // through the 32-bit field, and nothing `a` sent was lost.
    let loss = loss_seen_with_acks_in_bursts(8, |held| held.last().cloned().into_iter().collect());
    assert!(loss < 0.01, "loss {loss}");
    // All eight arrive, newest first: the older acks come after a newer one already covered
    // them (and the newest covers what the older ones cover).
    let loss = loss_seen_with_acks_in_bursts(8, |held| held.iter().rev().cloned().collect());
    assert!(loss < 0.01, "loss {loss}");
    // Only the two oldest arrive, in reverse: the newest ack seen is then seven packets short
    // of the last, which `a` must count as lost only once they leave the ack window.
    // One in 30: most of the field is news.
    let loss = loss_seen_with_acks_in_bursts(30, |held| held.last().cloned().into_iter().collect());
    assert!(loss < 0.01, "loss {loss}");
    let loss = loss_seen_with_acks_in_bursts(8, |held| held[..2].iter().rev().cloned().collect());
    assert!(loss < 0.01, "loss {loss}");
}

#[test]
fn the_round_trip_leaves_out_the_time_a_packet_waited_at_the_peer() {
    // One-way delay 5 ms; b answers each packet 15 ms after it arrives (its next tick).
    let mut a = Channel::new(ChannelConfig::default());
    let mut b = Channel::new(ChannelConfig::default());
    let mut out = [0u8; 1200];
    for k in 0..50u64 {
        let t = Duration::from_millis(40 * k);
        let n = a.build_packet(t, Some(&[1]), &mut out);
        b.receive(t + Duration::from_millis(5), &out[..n]).unwrap();
        let n = b.build_packet(t + Duration::from_millis(20), Some(&[2]), &mut out);
        a.receive(t + Duration::from_millis(25), &out[..n]).unwrap();
    }
    let rtt = a.link().rtt().as_secs_f64() * 1000.0;
    assert!((rtt - 10.0).abs() < 0.1, "the network's 10 ms, not the 25 ms round trip: {rtt:.2} ms");
}

/// The receiving side holds at most `receive_bytes` of messages however much is sent, and a
/// reader that keeps reading gets every message through, once and in order, over a lossy
/// link: a window's worth of fragments waiting behind a lost one leaves room for the gap to
/// be filled (were the budget shared without that reserve, the refused resend of the lost
/// fragment would stall the channel for good).
#[test]
fn a_small_receive_budget_holds_its_bound_and_loses_nothing() {
    let config = ChannelConfig { receive_bytes: 72 * 1024, ..ChannelConfig::default() };
    let link = Link { loss: 0.1, duplicate: 0.02, base_delay_steps: 2, jitter_steps: 3 };
    let mut sim = Sim::with_config(link, 23, config);
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    let mut peak = 0;
    for tick in 0..30_000u32 {
        while sent.len() < 40 {
            let len = 1 + (sent.len() * 7919) % (63 * 1024);
            let msg: Vec<u8> = (0..len).map(|i| (i + sent.len()) as u8).collect();
            if sim.a.send_reliable(Bytes::from(msg.clone())).is_err() {
                break;
            }
            sent.push(msg);
        }
        sim.step(tick);
        peak = peak.max(sim.b.received_bytes_held());
        // The reader reads every other step.
        if tick % 2 == 0 {
            while let Some(m) = sim.b.recv_reliable() {
                got.push(m.to_vec());
            }
        }
    }
    println!("peak held {peak} bytes; {} packets refused", sim.b.stats().refused_packets);
    assert!(peak <= config.receive_bytes, "held {peak}");
    assert!(sim.b.stats().refused_packets > 0, "the budget was reached");
    assert_eq!(got.len(), sent.len(), "every message, once");
    assert!(got == sent, "in order and intact");
}

/// A peer's packet built before it had received anything acknowledges nothing: the first
/// packet the other side sent, lost on the way, is not taken as delivered, and its reliable
/// message is sent again (found writing `docs/wire.md`: such a packet used to say "ack 0,
/// no bits", which read as "your packet 0 arrived").
#[test]
fn a_packet_from_a_peer_that_has_received_nothing_acknowledges_nothing() {
    let (mut a, mut b) = (Channel::new(ChannelConfig::default()), Channel::new(ChannelConfig::default()));
    let mut buf = [0u8; 1200];
    let t = |ms: u64| Duration::from_millis(ms);
    b.send_reliable(Bytes::from_static(b"welcome")).unwrap();
    let _lost = b.build_packet(t(0), None, &mut buf);
    // A has received nothing, and sends.
    let n = a.build_packet(t(1), None, &mut buf);
    b.receive(t(2), &buf[..n]).unwrap();
    assert_eq!(b.unacked_messages(), 1, "the lost packet's message is not taken as delivered");
    // B sends again once its resend timeout passes, and this time the message arrives.
    let mut delivered = None;
    for ms in (3..2000).step_by(10) {
        let n = b.build_packet(t(ms), None, &mut buf);
        a.receive(t(ms), &buf[..n]).unwrap();
        if let Some(m) = a.recv_reliable() {
            delivered = Some(m);
            break;
        }
    }
    assert_eq!(delivered.as_deref(), Some(&b"welcome"[..]));
}
