//! Real processes contending for one lease: on the file store, and on S3, GCS and Azure when a
//! test server is configured (`LEASE_TEST_S3_MOTO`, `LEASE_TEST_S3_MINIO`,
//! `LEASE_TEST_GCS_FAKE`, `LEASE_TEST_AZURE_AZURITE`: store URLs written by scripts/stores.sh).
//!
//! Invariants checked from the recorded history: no two hold intervals overlap, epochs strictly
//! increase, a shared counter incremented without atomicity equals the number of holds. Then a
//! holder is killed with SIGKILL and another takes over within ttl + grace + resolution + poll,
//! and never before the dead holder's deadline.

#![allow(clippy::disallowed_methods)] // real processes in real time

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn contender() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lease-contender"))
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A lease URL for `key` in the store at `store_url` (which may carry `?options`).
fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

/// Wait for a child, killing it if it takes longer than `limit`.
fn wait_bounded(mut child: Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "a contender ran longer than {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    epoch: u64,
    start: u64,
    end: u64,
    pid: u32,
}

fn read_history(path: &Path) -> Vec<Hold> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            Hold {
                epoch: f[0],
                start: f[1],
                end: f[2],
                pid: f[3] as u32,
            }
        })
        .collect()
}

/// Run `processes` contenders, `each` acquisitions apiece, process `i` on `urls[i % len]`,
/// all sharing one history and one counter; return them.
fn contend(
    urls: &[String],
    processes: usize,
    each: usize,
    ttl_ms: u64,
) -> (tempfile::TempDir, Vec<Hold>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let counter = dir.path().join("counter");
    let children: Vec<Child> = (0..processes)
        .map(|i| {
            let url = &urls[i % urls.len()];
            contender()
                .args([
                    "loop",
                    url,
                    &each.to_string(),
                    history.to_str().unwrap(),
                    counter.to_str().unwrap(),
                    &ttl_ms.to_string(),
                ])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = wait_bounded(child, Duration::from_secs(600));
        assert!(
            out.status.success(),
            "contender failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let holds = read_history(&history);
    let counter: usize = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (dir, holds, counter)
}

/// The invariants: every hold counted once, no overlaps, epochs increasing.
fn check(mut holds: Vec<Hold>, counter: usize) -> Result<(), String> {
    if counter != holds.len() {
        return Err(format!(
            "counter {counter} != {} holds: an increment was lost to two holders at once",
            holds.len()
        ));
    }
    holds.sort_by_key(|h| h.start);
    for pair in holds.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.start < a.end {
            return Err(format!("overlapping holds: {a:?} and {b:?}"));
        }
        if b.epoch <= a.epoch {
            return Err(format!("epochs did not increase: {a:?} then {b:?}"));
        }
    }
    Ok(())
}

fn safety(url: &str, processes: usize, each: usize, ttl_ms: u64) {
    let (_dir, holds, counter) = contend(&[url.to_string()], processes, each, ttl_ms);
    assert_eq!(
        holds.len(),
        processes * each,
        "every acquisition did its work"
    );
    let pids: std::collections::HashSet<u32> = holds.iter().map(|h| h.pid).collect();
    assert_eq!(pids.len(), processes, "every process held the lease");
    check(holds, counter).unwrap();
}

#[test]
fn the_history_check_catches_two_holders() {
    // Negative control: processes on two different leases share one counter. The check must
    // report it, or the safety tests prove nothing.
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        format!("file://{}/a", dir.path().display()),
        format!("file://{}/b", dir.path().display()),
    ];
    let (_d, holds, counter) = contend(&urls, 4, 40, 5_000);
    let verdict = check(holds, counter);
    assert!(verdict.is_err(), "two independent leases went unnoticed");
    eprintln!("negative control caught: {}", verdict.unwrap_err());
}

/// Which clock a store stamps writes with, as this test and the contender read it.
#[derive(Debug, Clone, Copy)]
enum StoreClock {
    /// The file store: CLOCK_BOOTTIME (its boot stamps).
    Boot,
    /// An S3 server on this machine: the wall clock.
    Wall,
}

/// When (on the store's clock) the record at `url` was last written.
fn last_write(url: &str) -> Duration {
    let lease = lease::LeaseUrl::parse(url).unwrap();
    let store = lease.store.open().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt
        .block_on(store.get(&lease.key, lease::store::GetOptions::default()))
        .unwrap()
    {
        lease::store::Get::Found(o) => o
            .last_modified
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap(),
        other => panic!("no record at {url}: {other:?}"),
    }
}

/// Kill -9 a holder; a waiter takes over within ttl + grace + resolution + poll of the dead
/// holder's last write, and never before that holder's deadline.
fn takeover_after_kill(url: &str, ttl: Duration, resolution: Duration, clock: StoreClock) {
    let grace = (ttl / 10).max(Duration::from_secs(1));
    let poll = (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(2));
    let ttl_ms = ttl.as_millis().to_string();
    let mut holder = contender()
        .args(["hold", url, &ttl_ms])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let held_epoch: u64 = line
        .trim()
        .strip_prefix("held ")
        .unwrap_or_else(|| panic!("holder said {line:?}"))
        .parse()
        .unwrap();
    // The time rules are what this test measures: a killed holder on this machine is
    // otherwise taken over at once on the file store (the dead-holder rule, tested with real
    // processes in cli/tests/waiting.rs).
    let taker = contender()
        .args(["take", url, &ttl_ms])
        .env("LEASE_CONTENDER_DEAD_HOLDER_RULE", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the taker start waiting, and the holder renew a few times.
    std::thread::sleep(ttl + Duration::from_millis(100));
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The dead holder's last write: its t_send came before the store stamped it, so its
    // deadline (t_send + ttl) is at most stamp + resolution + ttl.
    let written = last_write(url);
    let out = wait_bounded(taker, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8(out.stdout).unwrap();
    let f: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(f[0], "took", "{said}");
    let epoch: u64 = f[1].parse().unwrap();
    assert!(epoch > held_epoch);
    let field = match clock {
        StoreClock::Boot => f[2],
        StoreClock::Wall => f[3],
    };
    let took = Duration::from_nanos(field.parse().unwrap());
    let after = took
        .checked_sub(written)
        .unwrap_or_else(|| panic!("took over before the last write"));
    assert!(
        after >= ttl + resolution,
        "took over {after:?} after the dead holder's last write: before its deadline"
    );
    let bound = ttl + grace + resolution + poll;
    // Slack for starting and scheduling processes on a loaded two-core machine.
    let slack = Duration::from_millis(1500);
    assert!(
        after <= bound + slack,
        "took over {after:?} after the last write: bound {bound:?}"
    );
}

#[test]
fn file_store_eight_processes_never_overlap() {
    let dir = tempfile::tempdir().unwrap();
    safety(
        &format!("file://{}/job", dir.path().display()),
        8,
        40,
        5_000,
    );
}

#[test]
fn file_store_takeover_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    takeover_after_kill(
        &format!("file://{}/job", dir.path().display()),
        Duration::from_secs(2),
        Duration::from_millis(10),
        StoreClock::Boot,
    );
}

#[test]
fn file_store_kill_9_mid_write_never_leaves_a_torn_record() {
    // A holder renewing every ~33 ms is killed at random moments; whatever is on disk must be
    // a whole record, the old one or the new one.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/job", dir.path().display());
    let path = dir.path().join("job");
    for i in 0..20u64 {
        let mut holder = contender()
            .args(["hold", &url, "100"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(holder.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + (i * 37) % 90));
        holder.kill().unwrap();
        holder.wait().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        match lease::record::Record::parse(Some(&bytes), bytes.len() as u64) {
            lease::record::Parsed::Valid(_) => {}
            other => panic!("after kill {i}: {other:?}"),
        }
        // Nothing but the record and its lock file is left behind (temp files are removed
        // before the next write can start; a kill between link and unlink may leave one).
        let leftovers: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "job" && n != ".job.lock" && !n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        // Let the record expire before the next round.
        std::thread::sleep(Duration::from_millis(1200));
    }
}

/// S3 servers configured by scripts/s3-servers.sh. Under CI, moto is mandatory.
fn s3_servers() -> Vec<(String, String)> {
    let mut servers = vec![];
    for name in ["MOTO", "MINIO"] {
        if let Ok(url) = std::env::var(format!("LEASE_TEST_S3_{name}")) {
            servers.push((name.to_lowercase(), url));
        }
    }
    if servers.is_empty() {
        assert!(
            std::env::var("CI").is_err(),
            "CI=true but LEASE_TEST_S3_MOTO is not set: run through scripts/test"
        );
        eprintln!(
            "SKIPPED: no S3 test server (LEASE_TEST_S3_MOTO unset); run scripts/test to include S3"
        );
    }
    servers
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), monotonic_ns())
}

#[test]
fn s3_eight_processes_never_overlap() {
    for (name, store) in s3_servers() {
        eprintln!("S3 safety on {name}");
        safety(
            &lease_url(&store, &unique("multiprocess/job")),
            8,
            12,
            5_000,
        );
    }
}

#[test]
fn s3_takeover_after_kill_9() {
    for (name, store) in s3_servers() {
        eprintln!("S3 takeover on {name}");
        takeover_after_kill(
            &lease_url(&store, &unique("multiprocess/kill")),
            Duration::from_secs(3),
            Duration::from_secs(1),
            StoreClock::Wall,
        );
    }
}

/// GCS and Azure servers configured by scripts/stores.sh. Under CI, both are mandatory.
fn gcs_and_azure_servers() -> Vec<(String, String)> {
    let mut servers = vec![];
    for (name, var) in [
        ("fake-gcs-server", "LEASE_TEST_GCS_FAKE"),
        ("azurite", "LEASE_TEST_AZURE_AZURITE"),
    ] {
        match std::env::var(var) {
            Ok(url) => servers.push((name.to_string(), url)),
            Err(_) => {
                assert!(
                    std::env::var("CI").is_err(),
                    "CI=true but {var} is not set: run through scripts/test"
                );
                eprintln!("SKIPPED {name}: {var} unset; run scripts/test to include it");
            }
        }
    }
    servers
}

#[test]
fn gcs_and_azure_eight_processes_never_overlap() {
    // ttl 5 s: a holder renews every 1.7 s, within GCS's one write per second per object.
    for (name, store) in gcs_and_azure_servers() {
        eprintln!("safety on {name}");
        safety(&lease_url(&store, &unique("multiprocess/job")), 8, 8, 5_000);
    }
}

#[test]
fn gcs_and_azure_takeover_after_kill_9() {
    for (name, store) in gcs_and_azure_servers() {
        eprintln!("takeover on {name}");
        takeover_after_kill(
            &lease_url(&store, &unique("multiprocess/kill")),
            Duration::from_secs(3),
            Duration::from_secs(1),
            StoreClock::Wall,
        );
    }
}
