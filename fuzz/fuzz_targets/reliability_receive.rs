//! Arbitrary bytes as game packets into a reliability endpoint.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley::protocol::reliability::{Channel, ChannelConfig};

fuzz_target!(|data: &[u8]| {
    let mut e = Channel::new(ChannelConfig::default());
    let mut out = [0u8; 1200];
    let mut now = Duration::from_secs(1);
    for chunk in data.split(|b| *b == 0xfe) {
        now += Duration::from_millis(10);
        let _ = e.receive(now, chunk);
        while e.recv_reliable().is_some() {}
        while e.recv_event().is_some() {}
        let n = e.build_packet(now, Some(b"state"), &mut out);
        assert!(n <= 1200);
    }
});
