//! The checked-in header, `include/volley.h`, is what cbindgen makes of `src/lib.rs` with
//! `cbindgen.toml`: a stale header fails here. `VOLLEY_BLESS=1 cargo test -p volley-ffi
//! --test it header` writes it again.
#![allow(clippy::unwrap_used, missing_docs)]

#[test]
fn the_checked_in_header_is_what_cbindgen_makes_of_the_library() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/lib.rs"))
        .generate()
        .expect("cbindgen reads src/lib.rs")
        .write(&mut made);
    let path = format!("{dir}/include/volley.h");
    if std::env::var_os("VOLLEY_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == made,
        "include/volley.h is not what cbindgen makes of src/lib.rs: run `VOLLEY_BLESS=1 cargo test -p volley-ffi --test it header` and commit it"
    );
}
