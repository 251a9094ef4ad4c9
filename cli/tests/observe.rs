//! Health, history and watch seen through the `lease` command (issue 25), with real processes:
//! each tenure's ending after a release, a kill -9 and takeover, a break and a deletion of the
//! record, on the file store, moto, fake-gcs-server and Azurite (`LEASE_TEST_S3_MOTO`,
//! `LEASE_TEST_GCS_FAKE`, `LEASE_TEST_AZURE_AZURITE`, from scripts/stores.sh); `lease run`'s
//! health file and stderr lines; `lease watch --json`'s reasons.

#![allow(clippy::disallowed_methods)] // real processes in real time

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn lease() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lease"));
    c.env_remove("LEASE_LOG");
    c
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

/// The lease URL of `test` on the file store and on each store server scripts/stores.sh runs.
fn stores(dir: &Path, test: &str) -> Vec<(&'static str, String)> {
    let unique = format!("{test}-{}-{}", std::process::id(), nanos());
    let mut out = vec![("file", format!("file://{}/locks/{test}", dir.display()))];
    for (name, var) in [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("fake-gcs-server", "LEASE_TEST_GCS_FAKE"),
        ("azurite", "LEASE_TEST_AZURE_AZURITE"),
    ] {
        match std::env::var(var) {
            Ok(store) => out.push((name, lease_url(&store, &format!("observe/{unique}")))),
            Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("CI=true but {var} is not set: run through scripts/test")
            }
            Err(_) => eprintln!("\n!!! SKIPPED {name}: {var} unset (scripts/stores.sh) !!!\n"),
        }
    }
    out
}

/// `lease run --ttl 3s --label LABEL [FLAGS] URL -- sh -c SCRIPT`, started.
fn run(url: &str, label: &str, flags: &[&str], script: &str) -> Child {
    lease()
        .args(["run", "--ttl", "3s", "--label", label])
        .args(flags)
        .args([url, "--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child, what: &str) -> Output {
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "{what}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status(url: &str) -> serde_json::Value {
    let out = lease().args(["status", url, "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Delete the record behind the library's back (by hand, or a lifecycle rule).
fn delete_record(url: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, key) = lease::Client::for_url(url).unwrap();
        let store = client.store();
        let lease::store::Get::Found(obj) = store
            .get(&key, lease::store::GetOptions::default())
            .await
            .unwrap()
        else {
            panic!("no record to delete at {url}")
        };
        let deleted = store.delete(&key, &obj.version).await.unwrap();
        assert!(matches!(deleted, lease::store::Delete::Deleted), "{url}");
    });
}

/// One tenure after another, each ending a different way; the record's history names them
/// all, most recent first.
fn history_sequence(store: &str, url: &str, dir: &Path) {
    let marker = |name: &str| dir.join(format!("{store}-{name}"));
    let started = |name: &str| format!("touch '{}'", marker(name).display());
    // 1. Released.
    let one = finish(run(url, "one", &[], "true"), "one");
    assert!(one.status.success());
    // 2. Killed with SIGKILL while holding: its record stays held until taken over.
    let mut two = run(
        url,
        "two",
        &[],
        &format!("{}; exec sleep 600", started("two")),
    );
    wait_for_file(&marker("two"));
    two.kill().unwrap();
    finish(two, "two (killed)");
    // 3. Takes over once two's ttl and grace have passed, then releases.
    let three = finish(run(url, "three", &["--wait", "60s"], "true"), "three");
    assert!(three.status.success());
    // 4. Broken by an operator; `lease run` then kills its command and acknowledges.
    let four = run(
        url,
        "four",
        &[],
        &format!("{}; exec sleep 600", started("four")),
    );
    wait_for_file(&marker("four"));
    let broke = lease().args(["break", url, "--yes"]).output().unwrap();
    assert!(
        broke.status.success(),
        "{}",
        String::from_utf8_lossy(&broke.stderr)
    );
    let four = finish(four, "four (broken)");
    assert_eq!(four.status.code(), Some(76));
    // 5. Holds while six waits; the record is deleted; six creates it again and knows how
    //    five's tenure ended, having seen it.
    let five = run(
        url,
        "five",
        &[],
        &format!("{}; exec sleep 600", started("five")),
    );
    wait_for_file(&marker("five"));
    let six = run(url, "six", &["--wait", "60s"], &started("six"));
    std::thread::sleep(Duration::from_millis(1500)); // six has read five's record
    delete_record(url);
    let six = finish(six, "six");
    assert!(six.status.success());
    let five = finish(five, "five (record deleted)");
    assert_eq!(five.status.code(), Some(76));

    let s = status(url);
    assert_eq!(s["state"], "released", "{store}: {s}");
    assert_eq!(s["holder"]["label"], "six", "{store}: {s}");
    let ends: Vec<(String, String)> = s["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["holder"]["label"].as_str().unwrap().to_string(),
                t["end"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("five", "deleted"),
        ("four", "broken"),
        ("three", "released"),
        ("two", "expired"),
        ("one", "released"),
    ]
    .map(|(l, e)| (l.to_string(), e.to_string()));
    assert_eq!(ends, want, "{store}: {s}");
    let epochs: Vec<u64> = s["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["epoch"].as_u64().unwrap())
        .collect();
    assert!(
        epochs.windows(2).all(|w| w[0] > w[1]),
        "{store}: {epochs:?}"
    );
    assert!(
        s["history"][1]["by"].is_string(),
        "{store}: the breaker is named"
    );
    // The text form lists them too.
    let text = lease().args(["status", url, "--history"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("history:    5 earlier tenures"), "{text}");
    assert!(
        text.contains("expired") && text.contains("deleted"),
        "{text}"
    );
}

#[test]
fn each_tenure_is_listed_with_how_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let threads: Vec<_> = stores(dir.path(), "history")
        .into_iter()
        .map(|(store, url)| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || history_sequence(store, &url, &dir))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The command reads its lease's health from `LEASE_HEALTH_FILE`; when renewals fail (the file
/// store's record lock held by another process), `lease run` says `late` and `unknown` on
/// stderr, and the command's SIGTERM comes as the file says `unknown`.
#[test]
fn the_command_sees_its_health_and_gets_sigterm_when_it_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/h", dir.path().display());
    let seen = dir.path().join("seen");
    let ready = dir.path().join("ready");
    let script = format!(
        "cat \"$LEASE_HEALTH_FILE\" > '{seen}.first'; \
         trap 'cat \"$LEASE_HEALTH_FILE\" > \"{seen}\"; exit 0' TERM; \
         touch '{ready}'; while :; do sleep 0.05; done",
        seen = seen.display(),
        ready = ready.display()
    );
    let child = run(&url, "health", &[], &script);
    wait_for_file(&ready);
    let first: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("seen.first")).unwrap()).unwrap();
    assert_eq!(first["health"], "healthy", "{first}");
    // Every renewal now fails: the record's sidecar lock is held elsewhere.
    let mut locker = Command::new("flock")
        .args(["-x"])
        .arg(dir.path().join(".h.lock"))
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    let out = finish(child, "health");
    let _ = locker.kill();
    let _ = locker.wait();
    assert_eq!(
        out.status.code(),
        Some(76),
        "killed when renewals were too late"
    );
    let at_term: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(at_term["health"], "unknown", "{at_term}");
    assert!(
        at_term["remaining_ms"].as_u64().unwrap() <= 1300,
        "{at_term}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let late = stderr.find(") is late").expect("a line for late");
    let unknown = stderr.find(") is unknown").expect("a line for unknown");
    assert!(late < unknown, "{stderr}");
}

/// `lease watch --json` prints one line per change with what happened, and never writes.
#[test]
fn watch_prints_each_transition_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/w", dir.path().display());
    let mut watch = lease()
        .args(["watch", &url, "--json", "--poll", "50ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut out = vec![];
        for line in std::io::BufReader::new(stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let done = v["reason"] == "released" && out.len() >= 2;
            out.push(v);
            if done {
                break;
            }
        }
        out
    });
    std::thread::sleep(Duration::from_millis(300));
    let out = finish(run(&url, "watched", &[], "sleep 0.5"), "watched");
    assert!(out.status.success());
    let lines = lines.join().unwrap();
    let _ = watch.kill();
    let _ = watch.wait();
    // The record the create makes (released, acquired by nobody) shows as `created` when a
    // poll falls between it and its take: the take is the acquisition either way.
    let lines: Vec<_> = lines
        .into_iter()
        .filter(|l| l["reason"] != "created")
        .collect();
    let reasons: Vec<&str> = lines
        .iter()
        .map(|l| l["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["initial", "acquired", "released"], "{lines:?}");
    assert_eq!(lines[1]["holder"]["label"], "watched");
    assert!(lines
        .iter()
        .all(|l| l["time"].is_string() && l.get("state").is_some()));
}
