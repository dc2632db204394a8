//! Generates the Agones SDK's gRPC *server* side from the protos the `agones` crate ships
//! (that crate builds only the client), so the protos are the very ones the client was built
//! from.

use std::path::PathBuf;
use std::process::Command;

/// The agones crate's version, from the workspace's Cargo.lock.
fn locked_version() -> Option<String> {
    let mut dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").ok()?);
    loop {
        if let Ok(lock) = std::fs::read_to_string(dir.join("Cargo.lock")) {
            let mut lines = lock.lines();
            while let Some(l) = lines.next() {
                if l == "name = \"agones\"" {
                    return lines.next()?.strip_prefix("version = \"")?.strip_suffix('"').map(String::from);
                }
            }
            return None;
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// Where cargo unpacked the agones crate: `AGONES_CRATE_DIR` if set, else the registry's
/// source folder for the locked version, else what `cargo metadata` says.
fn agones_dir() -> PathBuf {
    println!("cargo:rerun-if-env-changed=AGONES_CRATE_DIR");
    if let Ok(d) = std::env::var("AGONES_CRATE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(version) = locked_version() {
        let home = std::env::var("CARGO_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));
        if let Ok(registries) = std::fs::read_dir(home.join("registry/src")) {
            for r in registries.flatten() {
                let d = r.path().join(format!("agones-{version}"));
                if d.join("proto/sdk/sdk.proto").is_file() {
                    return d;
                }
            }
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()))
        .output()
        .unwrap_or_else(|e| panic!("cargo metadata: {e}"));
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("cargo metadata: {e}"));
    let manifest = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "agones"))
        .and_then(|p| p["manifest_path"].as_str())
        .unwrap_or_else(|| panic!("the agones crate is not in the workspace's dependencies"));
    PathBuf::from(manifest).parent().map(PathBuf::from).unwrap_or_default()
}

fn main() {
    let dir = agones_dir();
    let p = |s: &str| dir.join(s);
    println!("cargo:rerun-if-changed=build.rs");
    tonic_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(
            &[p("proto/sdk/sdk.proto"), p("proto/sdk/beta/beta.proto")],
            &[p("proto/googleapis"), p("proto/grpc-gateway"), p("proto/sdk/beta"), p("proto/sdk")],
        )
        .unwrap_or_else(|e| panic!("compiling the Agones protos (protoc is Debian's protobuf-compiler): {e}"));
}
