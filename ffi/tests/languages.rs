//! volley-ffi from other languages, each against a real arena server over UDP: the C example
//! (built with the system's compiler, run under valgrind: no leak, no invalid access), the
//! Python bot (ctypes only) and the C# client (Mono's compiler and runtime, P/Invoke: the
//! route of a Unity or Godot .NET game). Each connects, steers, decodes snapshots and is
//! welcomed by a reliable message; the avatars each decodes from the snapshots of given ticks
//! are compared with what a Rust client beside it decoded from the snapshots of the same
//! ticks. Under the test command (`VOLLEY_REQUIRE_TOOLS` set) valgrind and Mono must be
//! installed (tests/run.sh installs them); elsewhere a missing one is said and skipped.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use volley::DEFAULT_PROTOCOL_ID;
use volley::client::GameClient;
use volley::client::polled::PolledClient;
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::snapshot::Replicate;
use volley::server::{ServerConfig, World, unix_now};
use volley_arena::{Arena, Avatar};

const KEY: [u8; 32] = [42; 32];

/// The avatars of each snapshot tick: id and numbers, field by field.
type Seen = BTreeMap<u32, Vec<(u32, Vec<f64>)>>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Where cargo put libvolley_ffi.so: beside the test itself (cargo test), or one up (cargo
/// build).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()].into_iter().find(|d| d.join("libvolley_ffi.so").exists()).unwrap().to_path_buf()
}

fn token(server: std::net::SocketAddr, id: u64) -> ConnectToken {
    let p = TokenParams::new(DEFAULT_PROTOCOL_ID, id, server, unix_now().as_secs());
    ConnectToken::generate(&p, &KEY).unwrap()
}

/// The numbers the Rust type gives, in the schema's order.
fn numbers(a: &Avatar) -> Vec<f64> {
    [a.position.x, a.position.y, a.aim, f32::from(a.health), f32::from(a.score), f32::from(a.deaths)]
        .iter()
        .map(|v| f64::from(*v))
        .chain([f64::from(u8::from(a.alive))])
        .collect()
}

/// Reads what the other language wrote: "tick T", then "id v1 v2 …" per avatar.
fn read_seen(path: &Path) -> Seen {
    let mut seen = Seen::new();
    let mut tick = None;
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("tick") => {
                tick = words.next().and_then(|t| t.parse().ok());
                seen.entry(tick.unwrap()).or_default();
            }
            Some(id) => {
                let values = words.map(|w| w.parse().unwrap()).collect();
                seen.get_mut(&tick.unwrap()).unwrap().push((id.parse().unwrap(), values));
            }
            None => {}
        }
    }
    seen
}

/// Runs `program` (given the token and schema files and where to write what it decoded)
/// against a real arena server, with a Rust client playing beside it; returns its output,
/// what it decoded and what the Rust client decoded.
async fn play_beside(name: &str, program: impl FnOnce(&Path, &Path, &Path) -> Command) -> (String, Seen, Seen) {
    let server =
        volley::server::start(ServerConfig::new("127.0.0.1:0".parse().unwrap(), KEY), Arena::new()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("volley-ffi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (token_file, schema_file, out_file) = (dir.join("token.bin"), dir.join("arena.json"), dir.join("seen.txt"));
    std::fs::write(&token_file, token(server.addr(), 1).to_bytes()).unwrap();
    std::fs::write(&schema_file, Arena::new().schema().to_json()).unwrap();
    let mut cmd = program(&token_file, &schema_file, &out_file);
    let child = tokio::task::spawn_blocking(move || cmd.output().unwrap());

    // The Rust client, the same seconds.
    let schema = Arc::new(Arena::new().schema());
    let kind = schema.kind_of::<Avatar>().unwrap();
    let rust = GameClient::new(token(server.addr(), 2), schema, unix_now());
    let mut rust = PolledClient::bind(rust, "127.0.0.1:0".parse().unwrap(), unix_now).unwrap();
    let mut mine = Seen::new();
    let mut frame = tokio::time::interval(Duration::from_millis(16));
    while !child.is_finished() {
        frame.tick().await;
        rust.poll(&[0, 0, 0, 0, 0]);
        if let Some(s) = rust.client.latest() {
            let avatars = s.iter().filter(|e| e.kind == kind).map(|e| (e.id, numbers(&Avatar::dequantize(e.words))));
            mine.entry(s.tick()).or_insert_with(|| avatars.collect());
        }
    }
    let output = child.await.unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{name} failed ({:?}):\n{text}", output.status);
    rust.disconnect();
    server.shutdown().await;
    let theirs = read_seen(&out_file);
    let _ = std::fs::remove_dir_all(&dir);
    (text, theirs, mine)
}

/// The client predicted its own avatar against the real server: the line it printed
/// ("prediction: R reconciled, C corrections, mean M m"), reconciled often, its corrections
/// counted and small (on loopback the server applies each input about as the client
/// predicted it; a reconciler that replayed the wrong inputs would be metres off).
fn predicted(name: &str, text: &str) {
    let line = text.lines().find(|l| l.starts_with("prediction: ")).unwrap_or_else(|| panic!("{name}: {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let reconciled: u64 = words[1].parse().unwrap();
    let corrections: u64 = words[3].parse().unwrap();
    let mean: f64 = words[6].parse().unwrap();
    eprintln!("{name}: {line}");
    assert!(reconciled >= 30, "{name}: {line}");
    assert!(corrections <= reconciled && mean < 0.25, "{name}: {line}");
}

/// The client's socket moved half way (a NAT rebinding, untold) and it resumed its session
/// as the same player, told meanwhile that it was resuming: the line it printed ("resumes N,
/// player A before the rebind and B after, F frames resuming").
fn resumed(name: &str, text: &str) {
    let line = text.lines().find(|l| l.starts_with("resumes ")).unwrap_or_else(|| panic!("{name}: {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let resumes: u32 = words[1].trim_end_matches(',').parse().unwrap();
    eprintln!("{name}: {line}");
    assert!(resumes >= 1, "{name} did not resume after its rebind: {line}");
    assert_eq!(words[3], words[8], "{name} came back as another player: {line}");
    // The library told the game it was reconnecting meanwhile (VOLLEY_RESUMING).
    let resuming: u32 = words.get(10).and_then(|w| w.parse().ok()).unwrap_or(0);
    assert!(resuming >= 1, "{name} was never told it was resuming: {line}");
}

/// Whether `tool` runs; under the test command (tests/run.sh) it must.
fn installed(tool: &str, arg: &str) -> bool {
    let there = Command::new(tool).arg(arg).output().is_ok_and(|o| o.status.success());
    assert!(
        there || std::env::var_os("VOLLEY_REQUIRE_TOOLS").is_none(),
        "{tool} is not installed (tests/run.sh installs it)"
    );
    if !there {
        eprintln!("{tool} is not installed here: skipped");
    }
    there
}

/// Both saw the same avatars at every tick both decoded, for many ticks, with both players.
fn same_ticks(name: &str, theirs: &Seen, mine: &Seen) {
    let mut compared = 0;
    for (tick, avatars) in theirs {
        let Some(rust) = mine.get(tick) else { continue };
        assert_eq!(avatars, rust, "{name} and the Rust client decoded tick {tick} differently");
        compared += usize::from(avatars.len() == 2);
    }
    eprintln!("{name}: {compared} ticks with both avatars compared, of {} it decoded", theirs.len());
    assert!(compared >= 30, "{name}: {compared} ticks with both avatars compared ({} decoded)", theirs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_client_plays_against_a_real_server_and_decodes_what_rust_decodes() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = std::env::temp_dir().join(format!("volley-c-client-{}", std::process::id()));
    let lib = lib_dir();
    let built = Command::new(&cc)
        .arg(root().join("examples/c/client.c"))
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Wextra")
        .arg("-Werror")
        .arg(format!("-I{}", root().join("ffi/include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-lvolley_ffi")
        .arg("-lm")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(built.status.success(), "the C example does not build:\n{}", String::from_utf8_lossy(&built.stderr));
    let valgrind = installed("valgrind", "--version");
    let (text, theirs, mine) = play_beside("c", |token, schema, out| {
        let mut cmd = if valgrind {
            let mut v = Command::new("valgrind");
            v.args(["--error-exitcode=9", "--leak-check=full", "--errors-for-leak-kinds=definite", "--quiet"]);
            v.arg(&exe);
            v
        } else {
            Command::new(&exe)
        };
        cmd.arg(token).arg(schema).arg("6").arg(out);
        // The library just built, not another on cargo's search path (a stale
        // target/debug/libvolley_ffi.so from a `cargo build` comes first there).
        cmd.env("LD_LIBRARY_PATH", &lib);
        cmd
    })
    .await;
    let _ = std::fs::remove_file(&exe);
    eprintln!("{text}");
    assert!(text.contains("welcome: player") && text.contains("ok"), "{text}");
    if valgrind {
        assert!(!text.contains("definitely lost") && !text.contains("Invalid"), "valgrind:\n{text}");
    } else {
        eprintln!("valgrind is not installed: the C client ran without it");
    }
    same_ticks("the C client", &theirs, &mine);
    predicted("the C client", &text);
    resumed("the C client", &text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_bot_plays_against_a_real_server_and_decodes_what_rust_decodes() {
    let lib = lib_dir().join("libvolley_ffi.so");
    let (text, theirs, mine) = play_beside("python", |token, schema, out| {
        let mut cmd = Command::new("python3");
        cmd.arg(root().join("examples/python/bot.py")).arg(token).arg(schema).arg("4").arg(out);
        cmd.env("VOLLEY_FFI_LIB", &lib);
        cmd
    })
    .await;
    assert!(text.contains("welcome: player") && text.contains("ok"), "{text}");
    same_ticks("the Python bot", &theirs, &mine);
    predicted("the Python bot", &text);
    resumed("the Python bot", &text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csharp_client_plays_against_a_real_server_and_decodes_what_rust_decodes() {
    if !installed("mcs", "--version") || !installed("mono", "--version") {
        return;
    }
    let exe = std::env::temp_dir().join(format!("volley-csharp-client-{}.exe", std::process::id()));
    let built = Command::new("mcs")
        .arg(format!("-out:{}", exe.display()))
        .arg("-warnaserror")
        .arg(root().join("examples/csharp/Client.cs"))
        .output()
        .unwrap();
    assert!(built.status.success(), "the C# example does not build:\n{}", String::from_utf8_lossy(&built.stdout));
    let lib = lib_dir();
    let (text, theirs, mine) = play_beside("csharp", |token, schema, out| {
        let mut cmd = Command::new("mono");
        cmd.arg(&exe).arg(token).arg(schema).arg("4").arg(out);
        cmd.env("LD_LIBRARY_PATH", &lib);
        cmd
    })
    .await;
    let _ = std::fs::remove_file(&exe);
    assert!(text.contains("welcome: player") && text.contains("ok"), "{text}");
    same_ticks("the C# client", &theirs, &mine);
    predicted("the C# client", &text);
    resumed("the C# client", &text);
}
