//! Arbitrary bytes as game packets into a reliability endpoint configured as a server's
//! player session receives (its receive budget): whatever arrives, and whether or not the
//! application reads (the first byte says), what it holds stays within that budget.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley::protocol::reliability::{Channel, ChannelConfig};
use volley::server::GAME_CHANNEL_RECEIVE_BYTES;

fuzz_target!(|data: &[u8]| {
    let config = ChannelConfig { receive_bytes: GAME_CHANNEL_RECEIVE_BYTES, ..ChannelConfig::default() };
    let mut e = Channel::new(config);
    let reads = data.first().is_some_and(|b| b & 1 == 1);
    let mut out = [0u8; 1200];
    let mut now = Duration::from_secs(1);
    for chunk in data.split(|b| *b == 0xfe) {
        now += Duration::from_millis(10);
        let _ = e.receive(now, chunk);
        assert!(e.received_bytes_held() <= config.receive_bytes);
        if reads {
            while e.recv_reliable().is_some() {}
            while e.recv_event().is_some() {}
        }
        let n = e.build_packet(now, Some(b"state"), &mut out);
        assert!(n <= 1200);
    }
});
