//! `cargo run -p lease-ffi-header -- --check | --write`: generate the C header of liblease from
//! the modules of `ffi/src` with the pinned cbindgen and compare it with the committed
//! `include/liblease.h` (exit 1 when it drifted), or rewrite that file. Parsing the source files
//! directly (no `cargo metadata`) keeps this fast and independent of the workspace.

use std::path::Path;

use std::process::ExitCode;

/// The modules of ffi/src in the order the header presents them: codes and errors first, then
/// each object family as a C user meets it. Every module lib.rs declares must be listed.
const HEADER_ORDER: [&str; 9] = [
    "error", "runtime", "store", "cancel", "held", "session", "observe", "fence", "boundary",
];

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
    // Every module lib.rs declares (`mod NAME;`), in its order: the header's order. Test-only
    // modules (`#[cfg(test)]` on the line before) export nothing.
    let lib = match std::fs::read_to_string(ffi.join("src/lib.rs")) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("ffi/src/lib.rs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let lines: Vec<&str> = lib.lines().collect();
    let declared: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || lines[i - 1].trim() != "#[cfg(test)]")
        .filter_map(|(_, l)| l.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')))
        .collect();
    let mut missing = declared
        .iter()
        .filter(|m| !HEADER_ORDER.contains(m))
        .peekable();
    if missing.peek().is_some() {
        eprintln!(
            "ffi/header: modules missing from HEADER_ORDER (its functions would be left out of \
             the header): {}",
            missing.copied().collect::<Vec<_>>().join(", ")
        );
        return ExitCode::FAILURE;
    }
    let mut builder = cbindgen::Builder::new().with_config(config);
    for module in HEADER_ORDER.iter().filter(|m| declared.contains(m)) {
        builder = builder.with_src(ffi.join("src").join(format!("{module}.rs")));
    }
    let bindings = match builder.generate() {
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
