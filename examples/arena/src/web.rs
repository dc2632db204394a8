//! The arena in a browser: the page `volley run --web ADDR` serves (it loads the
//! framework's JavaScript client from `/volley.js`), and the browser side's settings for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley_web::{PageFile, TokenAsk, WebConfig};

use crate::Arena;

/// `/index.html`: the canvas, the scoreboard, the kill feed and `#volley-status`.
pub const INDEX_HTML: &str = include_str!("../web/index.html");
/// `/arena.js`: joins as a player (`?bot=1` plays by itself, `?watch=1` watches a match),
/// draws, and reports in `#volley-status`.
pub const ARENA_JS: &str = include_str!("../web/arena.js");

/// Where pages' client ids start: far above the bots' (1, 2, ...).
pub const FIRST_PAGE_CLIENT_ID: u64 = 1 << 40;

/// The browser side for the arena: its page and schema at `http`, relaying to the server at
/// `server`; with `mint` (development), pages get connect tokens for `public` from `/token`,
/// minted with `key` (`?watch=1`: a spectator's).
pub fn config(http: SocketAddr, server: SocketAddr, mint: Option<(SocketAddr, [u8; 32], u64)>) -> WebConfig {
    let mut cfg = WebConfig::new(http, server);
    cfg.schema_json = volley::server::World::schema(&Arena::new()).to_json();
    let file = |path: &str, content_type, body: &str| PageFile {
        path: path.into(),
        content_type,
        body: Arc::from(body.as_bytes()),
    };
    cfg.page = vec![
        file("/index.html", "text/html; charset=utf-8", INDEX_HTML),
        file("/arena.js", "text/javascript", ARENA_JS),
    ];
    if let Some((public, key, protocol_id)) = mint {
        // At a random place above the bots', so that two servers' pages rarely share an id.
        let start = volley::protocol::netcode::random_bytes::<4>().map_or(0, |b| u64::from(u32::from_le_bytes(b)));
        let next = Arc::new(AtomicU64::new(FIRST_PAGE_CLIENT_ID + start));
        cfg.tokens = Some(Arc::new(move |ask: &TokenAsk| {
            let now = volley::server::unix_now().as_secs();
            let mut params = TokenParams::new(protocol_id, next.fetch_add(1, Ordering::Relaxed), public, now);
            params.timeout_seconds = 10;
            if ask.watch {
                params.user_data[..crate::bots::SPECTATOR.len()].copy_from_slice(crate::bots::SPECTATOR);
            }
            ConnectToken::generate(&params, &key).ok().map(|t| t.to_bytes().to_vec())
        }));
    }
    cfg
}
