//! Arbitrary bytes as a public connect token, and as a sealed private token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley::protocol::netcode::client::Client;
use volley::protocol::netcode::token::{ConnectToken, PrivateConnectToken};

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = ConnectToken::from_bytes(data) {
        assert_eq!(ConnectToken::from_bytes(&token.to_bytes()).as_ref(), Ok(&token));
    }
    let _ = Client::from_token_bytes(data, std::time::Duration::from_secs(5));
    let mut sealed = [0u8; 1024];
    let n = data.len().min(1024);
    sealed[..n].copy_from_slice(&data[..n]);
    let _ = PrivateConnectToken::open(&mut sealed, 1, 2, &[0; 24], &[0; 32]);
});
