//! `lease run` on a store that does not answer: real endpoints on 127.0.0.1 (a closed port,
//! and a listener that accepts connections and never answers), an S3 URL with dummy
//! credentials (no request leaves the machine: the instance metadata service is disabled).
//!
//! Waiting means "whatever is in the way": `--wait D` and `-n` return within D plus one request
//! timeout, exit 69 when the store was what kept them; with no `--wait`, a store that does not
//! answer for `--unavailable-timeout` (default: the ttl, at least 10 s) ends it, exit 69.

#![allow(clippy::disallowed_methods)] // these tests time real processes in real time

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Ports that never serve a request: one closed (refused at once), one silent. The listener
/// must be kept alive while the silent port is used.
fn unreachable_ports() -> (Vec<(&'static str, u16)>, TcpListener) {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    (
        vec![("refused", closed_port), ("silent", silent_port)],
        silent,
    )
}

fn lease_run(port: u16, args: &[&str]) -> (Output, Duration) {
    let home = tempfile::tempdir().unwrap();
    let url = format!(
        "s3://bucket/job?endpoint=http://127.0.0.1:{port}&region=us-east-1&path_style=true"
    );
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("run")
        .args(args)
        .args([url.as_str(), "--", "true"])
        .env("LEASE_HOME", home.path())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("LEASE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a run that would retry for ever is killed after a minute (and fails the test).
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    (out, start.elapsed())
}

fn check_unavailable(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{what}: {err}");
    assert!(err.contains("unavailable"), "{what}: {err}");
    assert!(
        !err.contains("outcome of"),
        "{what}: a read talks of a write: {err}"
    );
}

#[test]
fn a_wait_returns_69_soon_after_it_ends() {
    let (ports, _keep) = unreachable_ports();
    for (what, port) in ports {
        // The default ttl, 30 s: one request times out after 5 s.
        let (out, took) = lease_run(port, &["--wait", "2s"]);
        check_unavailable(what, &out);
        assert!(
            took >= Duration::from_millis(1900),
            "{what}: gave up early: {took:?}"
        );
        assert!(
            took < Duration::from_secs(9),
            "{what}: --wait 2s took {took:?}"
        );
    }
}

#[test]
fn no_wait_returns_69_at_once() {
    let (ports, _keep) = unreachable_ports();
    for (what, port) in ports {
        let (out, took) = lease_run(port, &["-n"]);
        check_unavailable(what, &out);
        // At most one request timeout (5 s for the default ttl).
        assert!(took < Duration::from_secs(7), "{what}: -n took {took:?}");
    }
}

#[test]
fn waiting_for_ever_ends_after_the_unavailable_timeout() {
    let (ports, _keep) = unreachable_ports();
    for (what, port) in ports {
        let (out, took) = lease_run(port, &["--ttl", "3s", "--unavailable-timeout", "2s"]);
        check_unavailable(what, &out);
        assert!(
            took >= Duration::from_millis(1900),
            "{what}: gave up early: {took:?}"
        );
        assert!(took < Duration::from_secs(6), "{what}: took {took:?}");
    }
}

#[test]
fn waiting_for_ever_ends_after_the_default_unavailable_timeout() {
    let (ports, _keep) = unreachable_ports();
    let (what, port) = ports[0];
    // The default for a 3 s ttl: 10 s.
    let (out, took) = lease_run(port, &["--ttl", "3s"]);
    check_unavailable(what, &out);
    assert!(
        took >= Duration::from_millis(9900),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}
