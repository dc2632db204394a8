//! The token backend's desk on arbitrary request bodies and bearer tokens: never a panic,
//! every answer a token for a valid request or a refusal with an HTTP status; and a valid
//! signed request with bytes flipped is never granted for another player.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use volley_fleet::backend::auth::{self, Auth};
use volley_fleet::backend::desk::{Desk, DeskConfig, TokenRequest};
use volley_fleet::backend::pool::{Pool, Readiness, ServerSpec};

const SECRET: &[u8] = b"fuzz-secret";
const NOW: u64 = 1_800_000_000;

fn desk() -> Desk {
    let auth = Auth { secret: Some(SECRET.to_vec()), api_keys: vec!["fuzz-key".into()] };
    let spec =
        ServerSpec { public: "127.0.0.1:40000".parse().unwrap(), admin: "127.0.0.1:9100".parse().unwrap(), web: None };
    let mut pool = Pool::new(vec![spec]);
    pool.polled(0, Readiness::Ready { players: 0, slots: 1_000_000 }, Duration::ZERO);
    let mut config = DeskConfig::new(auth, 1);
    config.per_player = (0.0, 1.0);
    config.per_address = (0.0, 1.0);
    Desk::new(config, pool)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut d = desk();
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, mode));
    let now = Duration::from_secs(NOW);
    match mode % 3 {
        // Arbitrary bytes as the body, no bearer.
        0 => {
            if let Err(e) = d.handle(rest, None, peer, now, Duration::ZERO) {
                assert!([400, 401, 429, 503].contains(&e.status()));
            }
        }
        // Arbitrary bytes as the bearer of a plain request.
        1 => {
            let bearer = String::from_utf8_lossy(rest);
            let granted = d.handle(br#"{"player":"p"}"#, Some(&bearer), peer, now, Duration::ZERO).is_ok();
            assert_eq!(granted, bearer == "fuzz-key");
        }
        // A valid signed request with one byte flipped: granted only if the player it names
        // is the one signed for, with the expiry signed for.
        _ => {
            let req = TokenRequest {
                player: "alice".into(),
                expires: Some(NOW + 60),
                signature: Some(auth::sign(SECRET, "alice", NOW + 60)),
            };
            let mut body = serde_json::to_vec(&req).unwrap();
            if let Some((&at, &with)) = rest.first().zip(rest.get(1)) {
                let i = usize::from(at) % body.len();
                body[i] ^= with;
            }
            if let Ok(params) = d.handle(&body, None, peer, now, Duration::ZERO) {
                assert_eq!(params.client_id, auth::client_id("alice"));
            }
        }
    }
});
