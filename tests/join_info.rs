//! The world learns who joins: the client id and user data of the connect token the backend
//! minted, through the stepper's server and through the real server over UDP.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use volley::client::GameClient;
use volley::client::udp::UdpClient;
use volley::protocol::netcode::USER_DATA_BYTES;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::{Schema, SnapshotBuilder};
use volley::server::{JoinInfo, PlayerId, ServerConfig, World, unix_now};
use volley::testing::Stepper;
use volley::transport::conditioner::LinkProfile;

/// What the world was told, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Joined(PlayerId, u64, String),
    Left(PlayerId),
}

#[derive(Default, Clone)]
struct Guestbook(Arc<Mutex<Vec<Seen>>>);

fn user_data(name: &str) -> [u8; USER_DATA_BYTES] {
    let mut d = [0u8; USER_DATA_BYTES];
    d[..name.len()].copy_from_slice(name.as_bytes());
    d
}

impl World for Guestbook {
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn join(&mut self, p: PlayerId) {
        self.0.lock().unwrap().push(Seen::Joined(p, 0, "(nobody said)".into()));
    }
    fn join_with(&mut self, p: PlayerId, who: &JoinInfo) {
        let name = String::from_utf8_lossy(&who.user_data).trim_end_matches('\0').to_string();
        self.0.lock().unwrap().push(Seen::Joined(p, who.client_id, name));
    }
    fn leave(&mut self, p: PlayerId) {
        self.0.lock().unwrap().push(Seen::Left(p));
    }
    fn input(&mut self, _: PlayerId, _: &[u8]) {}
    fn tick(&mut self, _: u32, _: Duration) {}
    fn snapshot(&self, _: &mut SnapshotBuilder<'_>) {}
}

#[test]
fn the_world_knows_who_joins_and_who_comes_back() {
    let book = Guestbook::default();
    let mut s = Stepper::new(book.clone(), 60, 4);
    let ann = s.add_client_with(LinkProfile::PERFECT, 42, user_data("ann"));
    s.run(30);
    s.disconnect(ann);
    s.run(30);
    // Ann again, with a new token for the same client id, and Bob.
    s.add_client_with(LinkProfile::PERFECT, 42, user_data("ann"));
    s.add_client_with(LinkProfile::PERFECT, 7, user_data("bob"));
    s.run(30);
    let seen = book.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            Seen::Joined(0, 42, "ann".into()),
            Seen::Left(0),
            Seen::Joined(0, 42, "ann".into()),
            Seen::Joined(1, 7, "bob".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_server_tells_the_world_who_joins() {
    let key = [6u8; 32];
    let book = Guestbook::default();
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), key), book.clone()).await.unwrap();
    let params = TokenParams {
        user_data: user_data("carol"),
        ..TokenParams::new(volley::DEFAULT_PROTOCOL_ID, 4242, server.addr(), unix_now().as_secs())
    };
    let client = GameClient::new(ConnectToken::generate(&params, &key).unwrap(), Arc::new(Schema::new()), unix_now());
    let mut me = UdpClient::bind(client, "127.0.0.1:0".parse().unwrap(), unix_now).await.unwrap();
    let mut joined = false;
    for _ in 0..200 {
        me.step(&[], tokio::time::Instant::now() + Duration::from_millis(16)).await;
        joined = !book.0.lock().unwrap().is_empty();
        if joined {
            break;
        }
    }
    assert!(joined, "the world heard of no one");
    me.disconnect();
    server.shutdown().await;
    assert_eq!(book.0.lock().unwrap()[0], Seen::Joined(0, 4242, "carol".into()));
}
