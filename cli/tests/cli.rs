//! The `volley` binary's token subcommands, run as a user would.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use volley::protocol::netcode::token::{ConnectToken, PrivateConnectToken};
use volley_util::hex;

fn volley(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_volley")).args(args).env_remove("VOLLEY_PRIVATE_KEY").output().unwrap()
}

#[test]
fn a_minted_token_opens_with_the_same_key_and_carries_the_arguments() {
    let key_out = volley(&["keygen"]);
    assert!(key_out.status.success());
    let key_hex = String::from_utf8(key_out.stdout).unwrap();
    let key = hex::decode_array::<32>(&key_hex).unwrap();

    let out = volley(&[
        "token",
        "--private-key",
        key_hex.trim(),
        "--client-id",
        "4242",
        "--server",
        "127.0.0.1:40000",
        "--server",
        "[::1]:40001",
        "--user-data",
        "cafe",
        "--protocol-id",
        "77",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = hex::decode(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let token = ConnectToken::from_bytes(&bytes).unwrap();
    assert_eq!(token.protocol_id, 77);
    assert_eq!(token.server_addresses.as_slice().len(), 2);
    assert_eq!(token.expire_timestamp - token.create_timestamp, 30);
    let mut sealed = token.private_data;
    let private = PrivateConnectToken::open(&mut sealed, 77, token.expire_timestamp, &token.nonce, &key).unwrap();
    assert_eq!(private.client_id, 4242);
    assert_eq!(&private.user_data[..3], &[0xca, 0xfe, 0]);
    assert_eq!(private.timeout_seconds, 10);
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out = volley(&["token", "--private-key", "abcd", "--client-id", "1", "--server", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--private-key") && err.contains("32 bytes"), "{err}");

    let long = "00".repeat(257);
    let key = "11".repeat(32);
    let out =
        volley(&["token", "--private-key", &key, "--client-id", "1", "--server", "127.0.0.1:1", "--user-data", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 256"));
}

#[test]
fn settings_come_from_flags_then_environment_then_the_config_file() {
    let dir = std::env::temp_dir().join(format!("volley-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("server.toml");
    std::fs::write(
        &file,
        "tick_rate = 30\nsnapshot_rate = 15\nduration = 0.5\nbind = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\npredict_snapshots = true\n",
    )
    .unwrap();
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_volley"));
        c.args(["server", "--config", file.to_str().unwrap()]).args(extra).env("RUST_LOG", "info");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let from_file = run(&[], &[]);
    assert!(from_file.contains("tick_hz=30") && from_file.contains("predict_snapshots=true"), "from the file");
    assert!(
        run(&[("VOLLEY_PREDICT_SNAPSHOTS", "false")], &[]).contains("predict_snapshots=false"),
        "environment over file"
    );
    assert!(
        run(&[("VOLLEY_TICK_RATE", "20"), ("VOLLEY_SNAPSHOT_RATE", "10")], &[]).contains("tick_hz=20"),
        "environment over file"
    );
    assert!(
        run(&[("VOLLEY_TICK_RATE", "20")], &["--tick-rate", "40", "--snapshot-rate", "20"]).contains("tick_hz=40"),
        "flag over environment"
    );

    std::fs::write(&file, "tick_rat = 30\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(["server", "--config", file.to_str().unwrap(), "--admin", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `tick_rat`"));
    let out = Command::new(env!("CARGO_BIN_EXE_volley"))
        .args(["server", "--tick-rate", "60", "--snapshot-rate", "7", "--duration", "1", "--admin", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a snapshot rate that does not divide the tick rate is refused");
    std::fs::remove_dir_all(&dir).ok();
}
