//! The schema as data (`Schema::to_json`, `Schema::from_json`): what a client in another
//! language decodes snapshots with. A kind read from its description decodes every built-in
//! quantizer's words to the numbers the Rust types give, and blends them alike; a
//! description that does not hold is refused with a reason, never half read.
#![allow(clippy::unwrap_used, missing_docs)]

use glam::{Quat, Vec2, Vec3};
use proptest::prelude::*;
use volley::protocol::quant::{AngleQ, Bits, Flag, FloatQ, QuatQ, Scalar, Vec2Q, Vec3Q, VelocityQ};
use volley::protocol::snapshot::{Replicate, Schema, SchemaError};

volley::replicated! {
    /// One field of every built-in quantizer.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Everything {
        pub count: u32 = Bits(12),
        pub small: u8 = Bits(5),
        pub on: bool = Flag,
        pub health: f32 = Scalar::with_resolution(0.0, 100.0, 0.5),
        pub flat: Vec2 = Vec2Q::bounded(Vec2::splat(-50.0), Vec2::splat(50.0), 0.01),
        pub position: Vec3 = Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(256.0, 256.0, 32.0), 1.0 / 512.0),
        pub velocity: Vec3 = VelocityQ::new(16.0, 1.0 / 64.0),
        pub rotation: Quat = QuatQ::new(9),
        pub heading: f32 = AngleQ(14),
        pub speed: f32 = FloatQ::HALF,
    }
}

fn schema() -> Schema {
    let mut s = Schema::new();
    s.register::<Everything>().unwrap();
    s
}

/// The numbers the Rust type gives, in the order a description lists them.
fn numbers(e: &Everything) -> Vec<f64> {
    let q = e.rotation;
    [
        e.count as f32,
        f32::from(e.small),
        f32::from(u8::from(e.on)),
        e.health,
        e.flat.x,
        e.flat.y,
        e.position.x,
        e.position.y,
        e.position.z,
        e.velocity.x,
        e.velocity.y,
        e.velocity.z,
        q.x,
        q.y,
        q.z,
        q.w,
        e.heading,
        e.speed,
    ]
    .iter()
    .map(|v| f64::from(*v))
    .collect()
}

fn everything() -> impl Strategy<Value = Everything> {
    (
        (0u32..5000, 0u8..40, any::<bool>(), -10.0f32..120.0),
        (-60.0f32..60.0, -60.0f32..60.0, -300.0f32..300.0, -300.0f32..300.0, -5.0f32..40.0),
        (-20.0f32..20.0, -20.0f32..20.0, -20.0f32..20.0),
        (-1.0f32..1.0, -1.0f32..1.0, -1.0f32..1.0, 0.1f32..1.0),
        (-10.0f32..10.0, -1000.0f32..1000.0),
    )
        .prop_map(
            |((count, small, on, health), (fx, fy, px, py, pz), (vx, vy, vz), (a, b, c, d), (heading, speed))| {
                Everything {
                    count,
                    small,
                    on,
                    health,
                    flat: Vec2::new(fx, fy),
                    position: Vec3::new(px, py, pz),
                    velocity: Vec3::new(vx, vy, vz),
                    rotation: Quat::from_xyzw(a, b, c, d).normalize(),
                    heading,
                    speed,
                }
            },
        )
}

fn words(e: &Everything) -> Vec<u32> {
    let kind = schema();
    let mut w = vec![0u32; kind.kind(0).unwrap().words()];
    e.quantize(&mut w);
    w
}

proptest! {
    #[test]
    fn a_kind_read_from_its_description_decodes_and_blends_as_the_rust_type(
        a in everything(),
        b in everything(),
        t in -0.5f32..2.0,
    ) {
        let read = Schema::from_json(&schema().to_json()).unwrap();
        let kind = read.kind(read.kind_named("Everything").unwrap()).unwrap();
        let (wa, wb) = (words(&a), words(&b));
        let mut out = Vec::new();
        kind.decode(&wb, None, 1.0, &mut out);
        prop_assert_eq!(&out, &numbers(&Everything::dequantize(&wb)));
        kind.decode(&wb, Some(&wa), t, &mut out);
        let want = Everything::blend(&Everything::dequantize(&wa), &Everything::dequantize(&wb), t);
        prop_assert_eq!(&out, &numbers(&want));
        prop_assert_eq!(kind.values(), out.len());
    }
}

#[test]
fn the_description_round_trips_with_its_fingerprint_names_and_quantizers() {
    let s = schema();
    let json = s.to_json();
    let read = Schema::from_json(&json).unwrap();
    assert_eq!(read.fingerprint(), s.fingerprint());
    assert_eq!(read.describe(), s.describe());
    assert_eq!(read.to_json(), json);
    let names: Vec<String> = read.kind(0).unwrap().described_fields().map(|(n, _)| n.to_owned()).collect();
    assert_eq!(names[0], "count");
    assert_eq!(names[9], "speed");
    assert!(json.contains("\"type\": \"velocity\""), "{json}");
    // A kind read from a description has no Rust type: it is found by name.
    assert_eq!(read.kind_of::<Everything>(), None);
    assert_eq!(read.kind_named("Everything"), Some(0));
    assert_eq!(read.kind_named("Nothing"), None);
}

#[test]
fn descriptions_that_do_not_hold_are_refused_with_a_reason() {
    let json = schema().to_json();
    let refused = |text: &str, why: &str| match Schema::from_json(text) {
        Err(SchemaError::Description(m)) => assert!(m.contains(why), "{m:?} should say {why:?}"),
        other => panic!("{why}: {other:?}"),
    };
    refused("not json", "expected");
    refused(&json.replacen("\"format\": 1", "\"format\": 2", 1), "format 2");
    let fp = format!("{:016x}", schema().fingerprint());
    refused(&json.replacen(&fp, "0000000000000000", 1), "fingerprint");
    // A quantizer whose layout is not the one stated: 12 bits said, 13 stated.
    refused(&json.replacen("\"bits\": 12", "\"bits\": 13", 1), "does not give the layout");
    // A width the codec cannot hold.
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut wide = v.clone();
    wide["kinds"][0]["fields"][0]["widths"] = serde_json::json!([33]);
    wide["kinds"][0]["fields"][0]["quant"] = serde_json::json!({"type": "raw"});
    refused(&wide.to_string(), "1 to 32 bits");
    let mut empty = v.clone();
    empty["kinds"][0]["fields"] = serde_json::json!([]);
    refused(&empty.to_string(), "1 to 64 words");
    let mut extra = v;
    extra["kinds"][0]["colour"] = serde_json::json!("red");
    refused(&extra.to_string(), "unknown field");
    refused(&" ".repeat(5 << 20), "at most");
}
