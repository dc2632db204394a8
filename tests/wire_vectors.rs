//! The test vectors under `docs/vectors/`: bytes and what they decode to, for each packet kind
//! and quantizer `docs/wire.md` describes. This test makes them from the code and fails when
//! the checked-in files differ (`VOLLEY_BLESS=1 cargo test --test it wire_vectors` writes them
//! again), decodes each file's bytes with the library and checks they give what the file
//! says, and checks that `docs/wire.md` has a section for each file. So the document, the
//! vectors and the code cannot drift apart unnoticed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use glam::{Quat, Vec2, Vec3};
use serde_json::{Value, json};
use volley::protocol::bits::BitReader;
use volley::protocol::input::{ViewTime, read_input_packet, write_input_packet};
use volley::protocol::quant::{AngleQ, Bits, Flag, FloatQ, QuatQ, Scalar, Vec2Q, Vec3Q, VelocityQ};
use volley::protocol::reliability::{Channel, ChannelConfig};
use volley::protocol::scoreboard::{BoardSender, ScoreRow, Scoreboard};
use volley::protocol::session::{
    Control, MAX_CONTROL_BYTES, PROTOCOL_VERSION, RejectReason, SessionEnd, SessionParams,
};
use volley::protocol::snapshot::{Interest, Schema, SenderConfig, SnapshotBuilder, SnapshotReceiver, SnapshotSender};
use volley::protocol::system::{EnterReason, Redirect, SpectatorStatus, WorldNotice};
use volley_util::hex;

volley::replicated! {
    /// A ball: three fields, one kind of two.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Ball {
        pub position: Vec2 = Vec2Q::bounded(Vec2::splat(-50.0), Vec2::splat(50.0), 0.01),
        pub spin: f32 = AngleQ(8),
        pub alive: bool = Flag,
    }
}

volley::replicated! {
    /// A crate: a rotation and a velocity at rest.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Crate {
        pub rotation: Quat = QuatQ::new(9),
        pub velocity: Vec3 = VelocityQ::new(16.0, 1.0 / 64.0),
    }
}

fn schema() -> Arc<Schema> {
    let mut s = Schema::new();
    s.register::<Ball>().unwrap();
    s.register::<Crate>().unwrap();
    Arc::new(s)
}

/// `v` as it reads back from its JSON text (what a file holds: serde_json reads some floats
/// back a bit off, the same way each time).
fn rt(v: &Value) -> Value {
    serde_json::from_str(&v.to_string()).unwrap()
}

fn h(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn unhex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

/// Each kind's entities of a decoded snapshot as numbers (`KindSchema::decode`).
fn entities(schema: &Schema, world: &volley::protocol::snapshot::WorldSnapshot) -> Value {
    let mut out = Vec::new();
    let mut numbers = Vec::new();
    for e in world.iter() {
        let kind = schema.kind(e.kind).unwrap();
        kind.decode(e.words, None, 1.0, &mut numbers);
        out.push(json!({ "id": e.id, "kind": kind.name, "words": e.words, "numbers": numbers }));
    }
    Value::Array(out)
}

fn session() -> Value {
    let mut buf = [0u8; MAX_CONTROL_BYTES];
    let v = PROTOCOL_VERSION;
    let params = SessionParams { protocol_version: v, tick_rate_hz: 60, snapshot_rate_hz: 60, max_payload_bytes: 1200 };
    let cases = [
        ("hello", Control::Hello { protocol_version: v }, "this protocol version"),
        (
            "welcome",
            Control::Welcome(params),
            "this version, 60 ticks and 60 snapshots a second, payloads up to 1200 bytes",
        ),
        (
            "reject",
            Control::Reject(RejectReason::VersionMismatch { server: v, client: 6 }),
            "this version is the server's, the client speaks 6",
        ),
        ("goodbye, kicked", Control::Goodbye(SessionEnd::Kicked("camping".into())), "kicked: camping"),
        ("goodbye, shutting down", Control::Goodbye(SessionEnd::ShuttingDown), "the server is shutting down"),
    ];
    let vectors: Vec<Value> = cases
        .into_iter()
        .map(|(name, c, says)| {
            let n = c.encode(&mut buf);
            json!({ "name": name, "hex": h(&buf[..n]), "decoded": format!("{c:?}"), "says": says })
        })
        .collect();
    json!({ "section": "Session", "vectors": vectors })
}

fn channel() -> Value {
    let config = ChannelConfig { compress: false, ..ChannelConfig::default() };
    let (mut a, mut b) = (Channel::new(config), Channel::new(config));
    a.send_reliable(bytes::Bytes::from_static(b"hi")).unwrap();
    a.send_event(bytes::Bytes::from_static(b"ev")).unwrap();
    let mut buf = [0u8; 1200];
    let n = a.build_packet(Duration::from_millis(5), Some(&[1, 2, 3]), &mut buf);
    let first = buf[..n].to_vec();
    let state = b.receive(Duration::from_millis(10), &first).unwrap().map(<[u8]>::to_vec);
    let reliable = b.recv_reliable().map(|m| m.to_vec());
    let event = b.recv_event().map(|m| m.to_vec());
    // B answers 1.5 ms later: its header acknowledges A's packet 0, which waited 150 × 10 µs.
    let n = b.build_packet(Duration::from_micros(11_500), None, &mut buf);
    let answer = buf[..n].to_vec();
    json!({
        "section": "Channel packets",
        "vectors": [
            {
                "name": "a first packet, nothing received yet (ack delay ffff): the state 01 02 03, the reliable message 'hi' (id 0), the event 'ev'",
                "hex": h(&first),
                "decoded": { "sequence": 0, "state": state, "reliable": [reliable], "events": [event] },
            },
            {
                "name": "the answer: sequence 0, acknowledging 0 with an ack delay of 150 (1.5 ms), no sections",
                "hex": h(&answer),
                "decoded": { "sequence": 0, "ack": 0, "ack_bits": 0, "ack_delay_units": 150 },
            },
        ],
    })
}

fn input() -> Value {
    let mut out = Vec::new();
    let inputs: [(&[u8], Option<ViewTime>); 4] = [
        (&[1, 2], Some(ViewTime::at(100))),
        (&[3], Some(ViewTime::between(98, 99, 0.5))),
        (&[], Some(ViewTime::between(95, 100, 0.25))),
        (&[9], None),
    ];
    write_input_packet(&mut out, Some(100), 7, &inputs);
    let p = read_input_packet(&out).unwrap();
    let views: Vec<Value> = p
        .views()
        .iter()
        .map(|v| {
            v.map_or(
                Value::Null,
                |v| json!({ "from": v.from(), "to": v.to(), "alpha_255ths": (v.alpha() * 255.0).round() }),
            )
        })
        .collect();
    let mut none = Vec::new();
    write_input_packet(&mut none, None, 0, &[]);
    json!({
        "section": "Client → server: the input packet",
        "vectors": [
            {
                "name": "ack tick 100, newest input 7: four inputs, newest first, with views of each form",
                "hex": h(&out),
                "decoded": { "ack_tick": p.ack_tick, "newest_seq": p.newest_seq, "inputs": p.inputs(), "views": views },
            },
            {
                "name": "no snapshot yet, no input",
                "hex": h(&none),
                "decoded": { "ack_tick": null, "newest_seq": 0, "inputs": [], "views": [] },
            },
        ],
    })
}

/// Inserts one entity into a snapshot being built.
type Put<'a> = dyn Fn(&mut SnapshotBuilder<'_>, u32) + 'a;

fn snapshot() -> Value {
    let schema = schema();
    let ball = |x: f32, spin: f32| Ball { position: Vec2::new(x, -3.5), spin, alive: true };
    let still = Crate { rotation: Quat::IDENTITY, velocity: Vec3::ZERO };
    let moving = Crate { rotation: Quat::from_rotation_z(0.5), velocity: Vec3::new(1.0, 0.0, -2.0) };
    let build = |tick: u32, parts: &[(u32, &Put<'_>)]| {
        let mut b = SnapshotBuilder::new(&schema, tick);
        for (id, put) in parts {
            put(&mut b, *id);
        }
        Arc::new(b.finish().unwrap())
    };
    let w10 = build(
        10,
        &[
            (1, &|b, id| b.insert(id, &ball(1.25, 0.5)).unwrap()),
            (2, &|b, id| b.insert(id, &ball(-20.0, 3.0)).unwrap()),
            (40, &|b, id| b.insert(id, &still).unwrap()),
        ],
    );
    let w11 = build(
        11,
        &[
            (1, &|b, id| b.insert(id, &ball(1.35, 0.5)).unwrap()),
            (40, &|b, id| b.insert(id, &moving).unwrap()),
            (41, &|b, id| b.insert(id, &still).unwrap()),
        ],
    );
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig::default());
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    let mut interest = Vec::new();
    let mut buf = [0u8; 1200];
    Interest::everything(&w10, &mut interest);
    let n = sender.encode(&w10, &interest, &mut buf).unwrap().bytes;
    let full = buf[..n].to_vec();
    receiver.decode(&full).unwrap();
    sender.ack(10);
    Interest::everything(&w11, &mut interest);
    let n = sender.encode(&w11, &interest, &mut buf).unwrap().bytes;
    let delta = buf[..n].to_vec();
    receiver.decode(&delta).unwrap();
    json!({
        "section": "Server → client: the snapshot",
        "schema": serde_json::from_str::<Value>(&schema.to_json()).unwrap(),
        "vectors": [
            {
                "name": "tick 10, whole: balls 1 and 2, crate 40 at rest",
                "hex": h(&full),
                "decoded": { "tick": 10, "baseline": null, "entities": entities(&schema, &w10) },
            },
            {
                "name": "tick 11 against 10: ball 1 moved, ball 2 destroyed, crate 40 turned and moving, crate 41 created",
                "hex": h(&delta),
                "decoded": { "tick": 11, "baseline": 10, "entities": entities(&schema, &w11) },
            },
        ],
    })
}

/// A predicting sender's packets (the range-coded form), ticks 10 to 14 of 39 balls and three
/// crates, each packet acknowledged before the next but 11's: balls still, moving steadily,
/// stopping, turning back, one jumping; crates turning, one turned at once past a different
/// dropped component; ball 7 destroyed and crate 41 created at tick 13. So every model and
/// context is used many times over (a decoder that adapts its probabilities or picks a
/// context even slightly differently goes wrong), ticks 11 and 12 have no second reference,
/// and tick 13, against 12 with 10 as its second reference, extrapolates one tick from two.
fn snapshot_predicted() -> Value {
    let schema = schema();
    let turning = |angle: f32| Crate { rotation: Quat::from_rotation_z(angle), velocity: Vec3::new(0.0, 0.0, 1.5) };
    let mut sender = SnapshotSender::new(schema.clone(), SenderConfig { predict: true, ..SenderConfig::default() });
    let mut interest = Vec::new();
    let mut buf = [0u8; 1200];
    let mut vectors = Vec::new();
    let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
    for (tick, baseline, reference, what) in [
        (10u32, None, None, "tick 10, whole"),
        (
            11,
            Some(10u32),
            None,
            "tick 11 against 10, no second reference yet: range-coded against the baseline (not acknowledged)",
        ),
        (12, Some(10), None, "tick 12 against 10: no second reference before 10"),
        (
            13,
            Some(12),
            Some(10u32),
            "tick 13 against 12, second reference 10 (extrapolated a tick from two): ball 7 destroyed, crate 41 created, crate 40's dropped component changes, crate 42 turned at once, ball 33 jumps",
        ),
        (14, Some(13), Some(12), "tick 14 against 13, second reference 12"),
    ] {
        let t = (tick - 10) as f32;
        let mut b = SnapshotBuilder::new(&schema, tick);
        for i in 1..=39u32 {
            if i == 7 && tick >= 13 {
                continue;
            }
            let f = i as f32;
            let (x0, y0) = (-30.0 + 1.5 * f, 10.0 - 0.5 * f);
            let (mut x, y) = if i % 5 == 0 {
                (x0, y0)
            } else if i % 4 == 0 {
                (x0 + 0.3 * t.min(1.0), y0)
            } else if i % 7 == 0 {
                (x0 + 0.4 * (1.0 - (t - 1.0).abs()), y0)
            } else {
                (x0 + (0.037 * (f % 7.0) - 0.1) * t, y0 + 0.013 * f * t)
            };
            if i == 33 && tick >= 13 {
                x += 20.0;
            }
            let spin = if i % 3 == 0 { 0.3 * t } else { f };
            b.insert(i, &Ball { position: Vec2::new(x, y), spin, alive: i % 11 != 0 }).unwrap();
        }
        b.insert(40, &turning(0.9 + 0.3 * t)).unwrap();
        if tick >= 13 {
            b.insert(41, &turning(0.0)).unwrap();
        }
        b.insert(42, &turning(if tick >= 13 { -2.0 } else { 0.2 })).unwrap();
        let world = Arc::new(b.finish().unwrap());
        Interest::everything(&world, &mut interest);
        let n = sender.encode(&world, &interest, &mut buf).unwrap().bytes;
        if tick != 11 {
            sender.ack(tick);
        }
        receiver.decode(&buf[..n]).unwrap();
        assert_eq!(receiver.latest().unwrap(), &*world, "{what}");
        // The header says what the name says, and that the packet is range-coded (not by a
        // game's predictor).
        let mut r = BitReader::new(&buf[..n]);
        assert_eq!(r.read(32).unwrap(), tick);
        assert_eq!(r.read_bool().unwrap(), baseline.is_some(), "{what}");
        if let Some(b) = baseline {
            assert_eq!(r.read_golomb(2).unwrap(), tick - b - 1, "{what}");
            assert_eq!(r.read_bool().unwrap(), reference.is_some(), "{what}");
            if let Some(rf) = reference {
                assert_eq!(r.read_golomb(2).unwrap(), b - rf - 1, "{what}");
            }
            assert!(r.read_bool().unwrap(), "range-coded: {what}");
            if reference.is_some() {
                assert!(!r.read_bool().unwrap(), "{what}");
            }
        }
        vectors.push(json!({
            "name": what,
            "hex": h(&buf[..n]),
            "decoded": { "tick": tick, "baseline": baseline, "entities": entities(&schema, &world) },
        }));
    }
    json!({
        "section": "The range-coded form",
        "schema": serde_json::from_str::<Value>(&schema.to_json()).unwrap(),
        "vectors": vectors,
    })
}

fn system() -> Value {
    let notice = WorldNotice { world: 3, kind: "match".into(), reason: EnterReason::Moved };
    let stopped = WorldNotice { world: 0, kind: "lobby".into(), reason: EnterReason::WorldStopped("over".into()) };
    let status = SpectatorStatus {
        since: 500,
        at_quarters: 1200,
        quarters: 4,
        first: 0,
        last: 900,
        following: Some(2),
        live: false,
    };
    let redirect = Redirect { token: (0..2048).map(|i| (i % 251) as u8).collect(), last_applied: Some(77) };
    let mut board = BoardSender::new(vec!["kills".into(), "deaths".into()]);
    let row = |player, name: &str, k, ping| ScoreRow { player, name: name.into(), fields: vec![k, 0], ping_ms: ping };
    let first = board.update([row(1, "ada", 2, 12), row(2, "bo", 0, 30)]);
    let second = board.update([row(1, "ada", 3, 12)]);
    let mut client_board = Scoreboard::default();
    client_board.apply(&first.full).unwrap();
    client_board.apply(second.delta.as_ref().unwrap()).unwrap();
    let rows: Vec<Value> = client_board
        .rows()
        .map(|r| json!({ "player": r.player, "name": r.name, "fields": r.fields, "ping_ms": r.ping_ms }))
        .collect();
    json!({
        "section": "The framework's channel",
        "vectors": [
            { "name": "world notice: moved to world 3, a match", "hex": h(&notice.encode()), "decoded": format!("{notice:?}") },
            { "name": "world notice: world 0, the lobby, after the world stopped", "hex": h(&stopped.encode()), "decoded": format!("{stopped:?}") },
            { "name": "spectator status", "hex": h(&status.encode()), "decoded": format!("{status:?}") },
            { "name": "redirect (the token's 2048 bytes count 0 to 250 over and over)", "hex": h(&redirect.encode()), "decoded": { "last_applied": 77 } },
            { "name": "scoreboard, whole", "hex": h(&first.full), "decoded": "columns kills, deaths; ada 2 0 (12 ms), bo 0 0 (30 ms)" },
            { "name": "scoreboard, then a delta: ada has 3 kills, bo left", "hex": h(second.delta.as_ref().unwrap()), "decoded": { "rows_after_both": rows } },
        ],
    })
}

fn quantizers() -> Value {
    fn one<T, Q: volley::protocol::quant::Quantizer<T>>(name: &str, q: Q, v: T) -> Value {
        let spec = q.spec();
        let mut words = vec![0u32; usize::from(spec.components)];
        q.quantize(&v, &mut words);
        let mut numbers = vec![0.0; q.describe().values(words.len())];
        q.describe().decode(&words, None, 1.0, &mut numbers);
        json!({ "name": name, "quant": q.describe(), "widths": spec.widths(), "words": words, "numbers": numbers })
    }
    json!({
        "section": "Quantizers",
        "vectors": [
            one::<u32, _>("bits 12: 3000", Bits(12), 3000),
            one::<bool, _>("flag: true", Flag, true),
            one::<f32, _>("scalar 0..100 by 0.5: 42.3", Scalar::with_resolution(0.0, 100.0, 0.5), 42.3),
            one::<Vec2, _>("vec2 ±50 by 0.01: (1.25, -3.5)", Vec2Q::bounded(Vec2::splat(-50.0), Vec2::splat(50.0), 0.01), Vec2::new(1.25, -3.5)),
            one::<Vec3, _>("vec3: (10, -20, 5)", Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(256.0, 256.0, 32.0), 1.0 / 512.0), Vec3::new(10.0, -20.0, 5.0)),
            one::<Vec3, _>("velocity ±16 by 1/64: (1, 0, -2)", VelocityQ::new(16.0, 1.0 / 64.0), Vec3::new(1.0, 0.0, -2.0)),
            one::<Vec3, _>("velocity at rest", VelocityQ::new(16.0, 1.0 / 64.0), Vec3::ZERO),
            one::<Quat, _>("quat 9 bits: half a radian about z", QuatQ::new(9), Quat::from_rotation_z(0.5)),
            one::<f32, _>("angle 10 bits: -2.0", AngleQ(10), -2.0),
            one::<f32, _>("float (half): -1234.5", FloatQ::HALF, -1234.5),
        ],
    })
}

/// The decoders read each file's bytes back to what the file says.
fn decodes_as_written(file: &str, v: &Value) {
    let vectors = v["vectors"].as_array().unwrap();
    match file {
        "session" => {
            for x in vectors {
                assert_eq!(
                    format!("{:?}", Control::decode(&unhex(&x["hex"])).unwrap()),
                    x["decoded"].as_str().unwrap()
                );
            }
        }
        "input" => {
            for x in vectors {
                let bytes = unhex(&x["hex"]);
                let p = read_input_packet(&bytes).unwrap();
                assert_eq!(json!(p.ack_tick), x["decoded"]["ack_tick"]);
                assert_eq!(json!(p.inputs()), x["decoded"]["inputs"]);
            }
        }
        "snapshot" | "snapshot_predicted" => {
            let schema = Arc::new(Schema::from_json(&v["schema"].to_string()).unwrap());
            let mut receiver = SnapshotReceiver::new(schema.clone(), 64);
            for x in vectors {
                let tick = receiver.decode(&unhex(&x["hex"])).unwrap();
                assert_eq!(json!(tick), x["decoded"]["tick"]);
                assert_eq!(rt(&entities(&schema, receiver.latest().unwrap())), x["decoded"]["entities"]);
            }
            // The decoder written from docs/wire.md alone, in Python, reads the same.
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/vectors");
            let out = std::process::Command::new("python3")
                .arg(dir.join("decode.py"))
                .arg(dir.join(format!("{file}.json")))
                .output()
                .unwrap_or_else(|e| panic!("python3 (every machine has it): {e}"));
            assert!(out.status.success(), "decode.py on {file}.json: {}", String::from_utf8_lossy(&out.stderr));
            let python: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(python.as_array().unwrap().len(), vectors.len(), "decode.py on {file}.json");
            for (x, p) in vectors.iter().zip(python.as_array().unwrap()) {
                assert_eq!(p["tick"], x["decoded"]["tick"], "{}", x["name"]);
                let want: Vec<Value> = x["decoded"]["entities"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| json!({ "id": e["id"], "kind": e["kind"], "words": e["words"] }))
                    .collect();
                assert_eq!(p["entities"], Value::Array(want), "decode.py on {file}.json, {}", x["name"]);
            }
        }
        "system" => {
            assert_eq!(
                format!("{:?}", WorldNotice::decode(&unhex(&vectors[0]["hex"])).unwrap()),
                vectors[0]["decoded"]
            );
            assert_eq!(
                format!("{:?}", SpectatorStatus::decode(&unhex(&vectors[2]["hex"])).unwrap()),
                vectors[2]["decoded"]
            );
            assert_eq!(Redirect::decode(&unhex(&vectors[3]["hex"])).unwrap().last_applied, Some(77));
        }
        _ => {}
    }
}

#[test]
fn the_vectors_in_docs_are_what_the_code_writes_and_reads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/vectors");
    let wire = std::fs::read_to_string(dir.parent().unwrap().join("wire.md")).unwrap();
    let bless = std::env::var_os("VOLLEY_BLESS").is_some();
    let mut stale = Vec::new();
    for (file, made) in [
        ("session", session()),
        ("channel", channel()),
        ("input", input()),
        ("snapshot", snapshot()),
        ("snapshot_predicted", snapshot_predicted()),
        ("system", system()),
        ("quantizers", quantizers()),
    ] {
        let section = made["section"].as_str().unwrap();
        assert!(wire.contains(&format!("## {section}")), "docs/wire.md has no section \"{section}\" for {file}.json");
        let path = dir.join(format!("{file}.json"));
        let text = serde_json::to_string_pretty(&made).unwrap() + "\n";
        if bless {
            std::fs::write(&path, &text).unwrap();
        }
        let have: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default()).unwrap_or(Value::Null);
        if have != rt(&made) {
            stale.push(file);
        }
        decodes_as_written(file, &have);
    }
    assert!(
        stale.is_empty(),
        "docs/vectors/{stale:?}.json differ from what the code writes: run `VOLLEY_BLESS=1 cargo test --test it wire_vectors`, check the change, and commit it"
    );
}

/// The browser's client (web/client/volley.js) reads every vector as the Rust code does:
/// `node web/test/vectors.mjs` checks each file's decoded values, the schema's fingerprint,
/// and that its input writer writes the vector's bytes. Node is on every machine.
#[test]
fn the_javascript_client_reads_every_vector() {
    let out = node("vectors.mjs", &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "web/test/vectors.mjs: {}{said}", String::from_utf8_lossy(&out.stderr));
    let checks: u32 = said.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(checks >= 50, "only {checks} checks ran: {said}");
}

/// The browser's client against garbage: random bytes and vectors with bytes changed go
/// through each of its decoders (`node web/test/garbage.mjs`), which may throw only its
/// `BadPacket`; anything else would stop a page.
#[test]
fn the_javascript_client_turns_garbage_into_bad_packets_only() {
    let out = node("garbage.mjs", &["5000"]);
    assert!(
        out.status.success(),
        "web/test/garbage.mjs: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Runs `web/test/SCRIPT` under node with the vectors' folder and `args`.
fn node(script: &str, args: &[&str]) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::process::Command::new("node")
        .arg(root.join("web/test").join(script))
        .arg(root.join("docs/vectors"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("node (every machine has it): {e}"))
}
