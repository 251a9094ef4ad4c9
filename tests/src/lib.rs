//! Helpers shared by the system tests and their binaries: the fault-injection proxy, and the
//! stand-ins for the clouds' token endpoints (`cloud_identity`), and the lookup of the store
//! test servers (`server`).

pub mod cloud_identity;
pub mod proxy;

/// The URL of a store test server from `var` (set by scripts/stores.sh), or `None` with a loud
/// skip message; under `CI=true` a missing server is a failure, never a skip.
pub fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but {var} is not set: run through scripts/test")
        }
        _ => {
            eprintln!("\n!!! SKIPPED: {var} unset (scripts/stores.sh) !!!\n");
            None
        }
    }
}
