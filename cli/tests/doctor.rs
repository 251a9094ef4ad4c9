//! `lease doctor`: probes under the URL's own path, and `--json` prints a JSON result in every
//! case, a failure included. On the file store, and on moto (`LEASE_TEST_S3_MOTO`, from
//! `scripts/stores.sh`; skipped loudly without it outside CI).

use std::process::{Command, Output};

fn doctor(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("doctor")
        .args(args)
        .env("LEASE_HOME", home.path())
        .env_remove("LEASE_LOG")
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON value ({e}): {:?}; stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A failed doctor run with --json: a JSON result on stdout, the usual line on stderr and code.
fn check_failure(out: &Output, code: i32, kind: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(out);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["error"]["kind"], kind, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(!message.is_empty(), "{v}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(message),
        "stderr does not say what the JSON says"
    );
}

#[test]
fn json_on_failure_file_store() {
    // A path through a regular file cannot be a store directory (a missing directory would
    // be created: issue 16).
    check_failure(
        &doctor(&["file:///proc/version/locks", "--json"]),
        64,
        "invalid",
    );
    check_failure(&doctor(&["s3://B", "--json"]), 64, "invalid");
}

/// The moto URL with `path` inserted before its query.
fn moto_url(path: &str) -> Option<String> {
    let Some(url) = std::env::var("LEASE_TEST_S3_MOTO")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!in_ci, "CI=true but LEASE_TEST_S3_MOTO is not set");
        eprintln!("\n!!! SKIPPED: no moto (LEASE_TEST_S3_MOTO unset): scripts/stores.sh !!!\n");
        return None;
    };
    let (base, query) = url.split_once('?').unwrap();
    Some(format!("{}/{path}?{query}", base.trim_end_matches('/')))
}

#[test]
fn probes_go_under_the_urls_path_on_moto() {
    let Some(url) = moto_url("team-a/locks") else {
        return;
    };
    let out = doctor(&[&url, "--json"]);
    let v = json_of(&out);
    assert!(out.status.success(), "{v}");
    let key = v["probe_key"].as_str().unwrap();
    assert!(key.starts_with("team-a/locks/lease-doctor/"), "{key}");
    // --prefix '' puts them right under the path.
    let out = doctor(&[&url, "--prefix", "", "--json"]);
    let v = json_of(&out);
    assert!(out.status.success(), "{v}");
    let key = v["probe_key"].as_str().unwrap();
    assert!(key.starts_with("team-a/locks/lease-doctor-"), "{key}");
}

#[test]
fn json_on_failure_on_moto() {
    let Some(url) = moto_url("locks") else {
        return;
    };
    // s3://no-such-bucket-BUCKET/locks?…: the bucket changes, the rest stays.
    let missing = url.replacen("s3://", "s3://no-such-bucket-", 1);
    check_failure(&doctor(&[&missing, "--json"]), 69, "store");
}

/// `lease doctor` on a file store leaves nothing behind: it said "the probes were deleted" but
/// left a `.lease-doctor-*.lock` per probe and their folder (issue 28).
#[test]
fn doctor_leaves_no_litter_in_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&[&format!("file://{}", dir.path().display())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
