//! Kleppmann's zombie scenario with real processes, SIGSTOP and SIGCONT: on the file store and
//! on every configured S3 test server. Every zombie write must be rejected and the newer
//! holder's data must stay.

use std::process::Command;

fn run_scenario(url: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../run.sh");
    let out = Command::new(script)
        .arg(url)
        .arg("rust")
        .env("LEASE_ZOMBIE_BIN", env!("CARGO_BIN_EXE_lease-zombie"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scenario failed on {url}:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("the store rejected the write"), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.contains("written by the newer holder") && !last.contains("ZOMBIE"),
        "{stdout}"
    );
}

fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

#[test]
fn zombie_writes_are_rejected_on_the_file_store() {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        run_scenario(&format!("file://{}/lease", dir.path().display()));
    }
}

#[test]
fn zombie_writes_are_rejected_on_s3() {
    let servers: Vec<(&str, String)> = ["MOTO", "MINIO"]
        .into_iter()
        .filter_map(|n| Some((n, std::env::var(format!("LEASE_TEST_S3_{n}")).ok()?)))
        .collect();
    if servers.is_empty() {
        assert!(
            std::env::var("CI").is_err(),
            "CI=true but LEASE_TEST_S3_MOTO is not set: run through scripts/test"
        );
        eprintln!(
            "SKIPPED: no S3 test server (LEASE_TEST_S3_MOTO unset); run scripts/test to include S3"
        );
    }
    for (name, store) in servers {
        for i in 0..2 {
            eprintln!("zombie scenario on {name}, run {i}");
            run_scenario(&lease_url(
                &store,
                &format!("zombie-{}-{i}/lease", std::process::id()),
            ));
        }
    }
}
