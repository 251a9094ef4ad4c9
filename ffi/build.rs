//! Generates the C header from `src/lib.rs` with the pinned cbindgen, into OUT_DIR. The
//! committed `include/liblease.h` is checked against it by the unit test
//! `committed_header_is_current` (run by scripts/test-ffi.sh), which also rewrites it when
//! LEASE_UPDATE_HEADER=1. Parsing the source files directly (no `cargo metadata`) keeps this
//! fast and independent of the workspace.

use std::env;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("liblease.h");
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate the header")
        .write_to_file(out);
}
