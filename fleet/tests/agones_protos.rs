//! The Agones SDK's gRPC code, generated from the protos in `fleet/proto/` (those the `agones`
//! crate 1.61.0 ships), is kept in the repository: building volley then needs no `protoc`
//! (a fresh machine has none). This test generates it again with protox, a protobuf compiler
//! written in Rust, and fails when a kept file differs from what the protos give; run it with
//! `VOLLEY_BLESS=1` to write the files anew after changing the protos.
//!
//! Two sets: the client (`fleet/src/agones/generated/`, what the server's lifecycle calls)
//! and the server side (`fleet/standin/src/generated/`, the stand-in SDK server the tests run).

use std::path::{Path, PathBuf};

/// The protos compiled, their imports resolved under `fleet/proto/` (the well-known types
/// come with protox).
fn descriptors(root: &Path) -> prost_types::FileDescriptorSet {
    let includes = [root.join("googleapis"), root.join("grpc-gateway"), root.join("sdk"), root.join("sdk/beta")];
    protox::compile([root.join("sdk/sdk.proto"), root.join("sdk/beta/beta.proto")], includes)
        .unwrap_or_else(|e| panic!("compiling the protos in {}: {e:?}", root.display()))
}

/// Generates one set into a fresh folder and returns its files (name, text), the SDK's
/// packages only (the imports' own packages are options the generated code does not use).
fn generate(client: bool, server: bool, scratch: &Path) -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("proto");
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).expect("a scratch folder");
    tonic_build::configure()
        .build_client(client)
        .build_server(server)
        .build_transport(true)
        .out_dir(scratch)
        .compile_fds(descriptors(&root))
        .expect("generating the gRPC code");
    ["agones.dev.sdk.rs", "agones.dev.sdk.beta.rs"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(scratch.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            ((*name).to_string(), text)
        })
        .collect()
}

fn check(kept: &Path, files: &[(String, String)]) {
    let bless = std::env::var_os("VOLLEY_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, text) in files {
        let path = kept.join(name);
        if bless {
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated code differs from what fleet/proto/ gives: {stale:?}; run `VOLLEY_BLESS=1 cargo test -p volley-fleet --test it agones_protos` and commit the result"
    );
}

#[test]
fn the_kept_client_code_is_what_the_protos_generate() {
    let scratch = std::env::temp_dir().join(format!("volley-agones-client-{}", std::process::id()));
    let files = generate(true, false, &scratch);
    check(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/agones/generated"), &files);
    let _ = std::fs::remove_dir_all(scratch);
}

#[test]
fn the_kept_standin_server_code_is_what_the_protos_generate() {
    let scratch = std::env::temp_dir().join(format!("volley-agones-server-{}", std::process::id()));
    let files = generate(false, true, &scratch);
    check(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("standin/src/generated"), &files);
    let _ = std::fs::remove_dir_all(scratch);
}
