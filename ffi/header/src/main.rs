//! `cargo run -p lease-ffi-header -- --check | --write`: generate the C header of liblease from
//! `ffi/src/lib.rs` with the pinned cbindgen and compare it with the committed
//! `include/liblease.h` (exit 1 when it drifted), or rewrite that file. Parsing the source file
//! directly (no `cargo metadata`) keeps this fast and independent of the workspace.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode != "--check" && mode != "--write" {
        eprintln!("usage: lease-ffi-header --check | --write");
        return ExitCode::from(2);
    }
    let ffi = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let committed_path = ffi.join("../include/liblease.h");
    let config = match cbindgen::Config::from_file(ffi.join("cbindgen.toml")) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("ffi/cbindgen.toml: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bindings = match cbindgen::Builder::new()
        .with_config(config)
        .with_src(ffi.join("src/lib.rs"))
        .generate()
    {
        Ok(bindings) => bindings,
        Err(e) => {
            eprintln!("cbindgen could not generate the header: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let committed = std::fs::read(&committed_path).unwrap_or_default();
    if fresh == committed {
        println!("include/liblease.h is current");
        return ExitCode::SUCCESS;
    }
    if mode == "--write" {
        if let Err(e) = std::fs::write(&committed_path, &fresh) {
            eprintln!("write {}: {e}", committed_path.display());
            return ExitCode::FAILURE;
        }
        println!("include/liblease.h rewritten");
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "include/liblease.h is out of date with ffi/src/lib.rs: run \
         `scripts/test-ffi.sh --update-header` and commit it"
    );
    ExitCode::FAILURE
}
