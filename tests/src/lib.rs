//! Helpers shared by the system tests and their binaries: the fault-injection proxy and the
//! stores' per-object limits it can play (`write_limit`), the
//! stand-ins for the clouds' token endpoints (`cloud_identity`), the history checker of the
//! multi-process tests (`history`), the clock the histories share and the lookup of the store
//! test servers (`server`).

pub mod cloud_identity;
pub mod history;
pub mod proxy;
pub mod write_limit;

/// CLOCK_MONOTONIC in nanoseconds: the clock every process of this machine shares, which a
/// step of the wall clock does not move (the histories' timestamps).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The URL of a store test server from `var` (set by scripts/stores.sh), or `None` with a loud
/// skip message (its `…_SKIPPED` reason when stores.sh gave one); under `CI=true` a missing
/// server is a failure, never a skip.
pub fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let why = std::env::var(format!("{var}_SKIPPED"))
                .unwrap_or_else(|_| format!("{var} is unset (scripts/stores.sh sets it)"));
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "CI=true but {var} is not set: {why}; run through scripts/test"
            );
            eprintln!("\n!!! SKIPPED {var}: {why} !!!\n");
            None
        }
    }
}

/// `%XX` escapes decoded (form bodies in `cloud_identity`, a GCS object path in `write_limit`):
/// at the root so that neither proxy module depends on the other.
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| u8::from_str_radix(&s[i + 1..i + 3], 16).ok())
            .flatten();
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The S3 test servers that scripts/stores.sh started, by name (moto, MinIO); each missing one
/// is skipped loudly, as [`server`] does.
pub fn s3_servers() -> Vec<(&'static str, String)> {
    [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("minio", "LEASE_TEST_S3_MINIO"),
    ]
    .into_iter()
    .filter_map(|(name, var)| server(var).map(|url| (name, url)))
    .collect()
}
