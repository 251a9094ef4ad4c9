//! The real-process histories (postgres/tests/history.py) with the Rust worker
//! (examples/history_worker.rs): the zombie scenarios, the negative control, forged tokens and
//! the history under SIGSTOP, kill -9 and pg_terminate_backend. `LEASE_PG_HISTORY=deep` runs
//! the faults for a minute.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn histories_with_the_rust_worker() {
    let dsn = match std::env::var("LEASE_TEST_PG") {
        Ok(d) if !d.is_empty() => d,
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("LEASE_TEST_PG is not set (CI=true: the PostgreSQL tests must run)")
        }
        _ => {
            eprintln!("SKIPPED: LEASE_TEST_PG is not set (scripts/postgres.sh start)");
            return;
        }
    };
    // cargo test builds the examples beside the test binaries' deps/ directory.
    let exe = std::env::current_exe().unwrap();
    let worker: PathBuf = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/history_worker");
    assert!(
        worker.exists(),
        "no {} (cargo test builds it)",
        worker.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/history.py");
    let status = Command::new("python3")
        .arg(script)
        .arg("--dsn")
        .arg(dsn)
        .arg("--worker")
        .arg(&worker)
        .status()
        .expect("python3");
    assert!(status.success(), "history.py failed (its output above)");
}
