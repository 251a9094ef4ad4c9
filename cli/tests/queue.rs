//! Queued locks with real `lease run` processes (docs/protocol.md §10), on the file store and
//! on moto and MinIO (`LEASE_TEST_S3_MOTO`, `LEASE_TEST_S3_MINIO`, from scripts/stores.sh):
//! Conserve's backups and garbage collection, a semaphore, byte ranges of one object. Each
//! worker's command appends `start` and `end` lines to a history file; the checks read only
//! that history.

#![allow(clippy::disallowed_methods)] // real processes in real time

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One worker's run, from the history: when its command started and ended (ns, this machine's
/// clock, which every worker shares), with the token it was given.
#[derive(Debug, Clone)]
struct Run {
    name: String,
    token: u64,
    start: u128,
    end: u128,
}

impl Run {
    fn overlaps(&self, other: &Run) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// The stores: a fresh directory, and moto and MinIO when scripts/stores.sh started them.
fn stores(dir: &Path, test: &str) -> Vec<(&'static str, String)> {
    let unique = format!("{test}-{}-{}", std::process::id(), nanos());
    let mut out = vec![("file", format!("file://{}/locks/{test}", dir.display()))];
    for (name, var) in [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("minio", "LEASE_TEST_S3_MINIO"),
    ] {
        match std::env::var(var) {
            Ok(store) => out.push((name, lease_url(&store, &format!("queue/{unique}")))),
            Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("CI=true but {var} is not set: run through scripts/test")
            }
            Err(_) => eprintln!("\n!!! SKIPPED {name}: {var} unset (scripts/stores.sh) !!!\n"),
        }
    }
    out
}

fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Start a worker: `lease run FLAGS URL -- sh -c` appending to `history` while it holds.
fn worker(url: &str, flags: &[&str], name: &str, hold_ms: u64, history: &Path) -> Child {
    let script = format!(
        "echo \"start {name} $LEASE_EPOCH $(date +%s%N)\" >> '{h}'; sleep {s}; \
         echo \"end {name} $LEASE_EPOCH $(date +%s%N)\" >> '{h}'",
        h = history.display(),
        s = hold_ms as f64 / 1000.0
    );
    let mut args = vec!["--ttl", "5s", "--wait", "120s"];
    args.extend(flags);
    args.extend([url, "--", "sh", "-c", &script]);
    lease_run(&args)
}

/// `lease run ARGS` in the background: its output discarded, its stderr kept for the failure
/// message.
fn lease_run(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("run")
        .args(args)
        .env_remove("LEASE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for every worker (bounded) and parse the history.
fn finish(workers: Vec<Child>, history: &Path) -> Vec<Run> {
    let deadline = Instant::now() + Duration::from_secs(120);
    for mut w in workers {
        loop {
            if let Some(status) = w.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                w.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(status.success(), "a worker failed: {status}: {err}");
                break;
            }
            assert!(Instant::now() < deadline, "a worker did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let text = std::fs::read_to_string(history).unwrap();
    let mut runs: Vec<Run> = vec![];
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (token, t) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        match f[0] {
            "start" => runs.push(Run {
                name: f[1].to_string(),
                token,
                start: t,
                end: u128::MAX,
            }),
            _ => runs.iter_mut().find(|r| r.name == f[1]).unwrap().end = t,
        }
    }
    runs
}

fn by_name<'a>(runs: &'a [Run], name: &str) -> &'a Run {
    runs.iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{name} never ran: {runs:?}"))
}

/// Arrival gaps: long enough that each worker has joined before the next starts (a `lease
/// run` process starts, begins its session and joins in well under this on every store here).
const GAP: Duration = Duration::from_millis(400);

#[test]
fn conserve_backups_share_and_gc_runs_alone_without_starving() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "conserve") {
        let history = dir.path().join(format!("{store}.history"));
        // Interleaved: two backups, GC, two more backups.
        let plan = [
            ("b1", true, 2500),
            ("b2", true, 2500),
            ("gc", false, 1000),
            ("b3", true, 1000),
            ("b4", true, 1000),
        ];
        let mut workers = vec![];
        for (name, shared, hold) in plan {
            let flags: &[&str] = if shared { &["--shared"] } else { &["--queue"] };
            workers.push(worker(&url, flags, name, hold, &history));
            std::thread::sleep(GAP);
        }
        let runs = finish(workers, &history);
        assert_eq!(runs.len(), 5, "{store}: everyone served: {runs:?}");
        let gc = by_name(&runs, "gc");
        for b in runs.iter().filter(|r| r.name != "gc") {
            assert!(
                !b.overlaps(gc),
                "{store}: backup {} ran during GC: {runs:?}",
                b.name
            );
        }
        assert!(
            by_name(&runs, "b1").overlaps(by_name(&runs, "b2")),
            "{store}: backups did not share: {runs:?}"
        );
        for later in ["b3", "b4"] {
            assert!(
                gc.end <= by_name(&runs, later).start,
                "{store}: {later}, arriving after GC, went first: GC starved: {runs:?}"
            );
        }
        let mut tokens: Vec<u64> = plan.iter().map(|(n, ..)| by_name(&runs, n).token).collect();
        let arrival = tokens.clone();
        tokens.sort();
        assert_eq!(
            arrival, tokens,
            "{store}: tokens not in arrival order: {runs:?}"
        );
    }
}

#[test]
fn a_semaphore_of_three_serves_ten_workers_never_more_than_three_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "semaphore") {
        let history = dir.path().join(format!("{store}.history"));
        let mut workers = vec![];
        for i in 0..10 {
            let name = format!("w{i}");
            workers.push(worker(&url, &["--permits", "3"], &name, 700, &history));
            std::thread::sleep(GAP / 4);
        }
        let runs = finish(workers, &history);
        assert_eq!(runs.len(), 10, "{store}: everyone served: {runs:?}");
        let most = runs
            .iter()
            .map(|r| {
                runs.iter()
                    .filter(|o| o.start <= r.start && r.start < o.end)
                    .count()
            })
            .max()
            .unwrap();
        assert!(most <= 3, "{store}: {most} at once: {runs:?}");
        assert_eq!(
            most, 3,
            "{store}: the permits were never all used: {runs:?}"
        );
    }
}

#[test]
fn byte_ranges_of_one_object_overlapping_never_together_disjoint_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "ranges") {
        let history = dir.path().join(format!("{store}.history"));
        let plan = [
            ("r0-100", "0..100"),
            ("r100-200", "100..200"),
            ("r50-150", "50..150"),
            ("r200-300", "200..300"),
            ("r0-300", "0..300"),
            ("r300-400", "300..400"),
        ];
        let mut workers = vec![];
        for (name, range) in plan {
            workers.push(worker(&url, &["--range", range], name, 1500, &history));
            std::thread::sleep(GAP / 2);
        }
        let runs = finish(workers, &history);
        assert_eq!(runs.len(), 6, "{store}: everyone served: {runs:?}");
        let range_of = |name: &str| {
            let (_, r) = plan.iter().find(|(n, _)| *n == name).unwrap();
            let (a, b) = r.split_once("..").unwrap();
            (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap())
        };
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let ((s1, e1), (s2, e2)) = (range_of(&a.name), range_of(&b.name));
                if s1 < e2 && s2 < e1 {
                    assert!(
                        !a.overlaps(b),
                        "{store}: {} and {} ran together",
                        a.name,
                        b.name
                    );
                }
            }
        }
        // The disjoint ranges that arrived first ran in parallel.
        let parallel = ["r0-100", "r100-200", "r200-300", "r300-400"];
        for (i, a) in parallel.iter().enumerate() {
            for b in &parallel[i + 1..] {
                assert!(
                    by_name(&runs, a).overlaps(by_name(&runs, b)),
                    "{store}: disjoint {a} and {b} did not run in parallel: {runs:?}"
                );
            }
        }
    }
}

/// Run `lease ARGS`, bounded, returning (exit code, stdout, stderr).
fn lease(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(args)
        .env_remove("LEASE_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status_json(url: &str) -> serde_json::Value {
    let (code, out, err) = lease(&["status", "--json", url]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Poll `check` (bounded) until it holds.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait (bounded) for a child, returning its exit code and stderr.
fn exit_of(mut child: Child) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        assert!(Instant::now() < deadline, "a child did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The labels of a queued lock's waiters, as `lease status` lists them (in the order they will be
/// granted).
fn waiting_labels(url: &str) -> Vec<String> {
    status_json(url)["waiting"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .map(|w| w["holder"]["label"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 23, priorities: a holder, then a low-priority and a high-priority waiter in other
/// processes (the low one joined first); the holder is not preempted, and its release grants
/// the high one first — checked from the tokens and start lines the workers' commands wrote.
#[test]
fn a_higher_priority_waiter_goes_first_and_the_holder_is_not_preempted() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "priority") {
        let history = dir.path().join(format!("{store}.history"));
        let marker = dir.path().join(format!("{store}.release"));
        // The holder runs until the test says (a bounded loop: at most 60 s).
        let script = format!(
            "echo \"start holder $LEASE_EPOCH $(date +%s%N)\" >> '{h}'; \
             for i in $(seq 1 1200); do [ -e '{m}' ] && break; sleep 0.05; done; \
             echo \"end holder $LEASE_EPOCH $(date +%s%N)\" >> '{h}'",
            h = history.display(),
            m = marker.display()
        );
        let holder = lease_run(&[
            "--queue", "--ttl", "5s", "--label", "holder", &url, "--", "sh", "-c", &script,
        ]);
        wait_until("the holder to hold", || {
            status_json(&url)["state"] == "held"
        });
        let low = worker(&url, &["--queue", "--label", "low"], "low", 100, &history);
        wait_until("low to wait", || waiting_labels(&url) == ["low"]);
        let high = worker(
            &url,
            &["--priority", "5", "--label", "high"],
            "high",
            100,
            &history,
        );
        wait_until("high to wait, listed first", || {
            waiting_labels(&url) == ["high", "low"]
        });
        // Each waiter's priority, as `lease status` shows it (JSON and text).
        let waiting = status_json(&url)["waiting"].clone();
        assert_eq!(
            (
                waiting[0]["priority"].as_i64(),
                waiting[1]["priority"].as_i64()
            ),
            (Some(5), Some(0)),
            "{store}: {waiting}"
        );
        let (_, text, _) = lease(&["status", &url]);
        assert!(
            text.contains("(exclusive), priority 5\n") && text.contains("\"low\""),
            "{store}: {text}"
        );
        std::fs::write(&marker, b"").unwrap();
        let runs = finish(vec![holder, low, high], &history);
        one_after_another(
            &runs,
            &["holder", "high", "low"],
            &format!("{store}: the high one was not granted first"),
        );
    }
}

/// The workers `names` ran one after another in that order: tokens increasing, each starting
/// only after the one before ended.
fn one_after_another(runs: &[Run], names: &[&str], what: &str) {
    for pair in names.windows(2) {
        let (a, b) = (by_name(runs, pair[0]), by_name(runs, pair[1]));
        assert!(a.token < b.token, "{what}: {runs:?}");
        assert!(a.end <= b.start, "{what}: grants overlapped: {runs:?}");
    }
}

/// Issue 22 item 2 and issue 28 item 5: `lease break` on a queued lock stops its holder at its
/// next renewal, says which grants it broke and the lock's tokens, and `lease status` no longer
/// shows the broken holder as holding; the next waiter gets in once that holder let go.
#[test]
fn break_stops_a_queued_holder_and_status_no_longer_shows_it_holding() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "break") {
        let holder = lease_run(&[
            "--queue", "--ttl", "3s", "--label", "victim", &url, "--", "sleep", "60",
        ]);
        wait_until("the holder to hold", || {
            status_json(&url)["state"] == "held"
        });
        let (code, out, err) = lease(&["break", "--yes", &url]);
        assert_eq!(code, 0, "{store}: {err}");
        assert!(
            out.contains("broke the grants") && out.contains("\"victim\""),
            "{store}: {out}"
        );
        assert!(out.contains("tokens are at"), "{store}: {out}");
        let s = status_json(&url);
        assert_ne!(s["state"], "held", "{store}: {s}");
        assert_eq!(s["holders"].as_array().unwrap().len(), 0, "{store}: {s}");
        assert_eq!(s["departing"][0]["session"], "broken", "{store}: {s}");
        let (text_code, text, _) = lease(&["status", &url]);
        assert_eq!(text_code, 0);
        assert!(
            text.contains("departing:") && !text.contains("state:      held"),
            "{text}"
        );
        let (code, err) = exit_of(holder);
        assert_eq!(
            code, 76,
            "{store}: the broken holder exits with the lost code: {err}"
        );
        assert!(err.contains("broken by"), "{store}: {err}");
        // It acknowledged the break by releasing: the next one gets in at once.
        let (code, _, err) = lease(&["run", "--queue", "-n", "--ttl", "3s", &url, "--", "true"]);
        assert_eq!(code, 0, "{store}: {err}");
    }
}

/// Issue 22 item 7 / issue 28 item 5: permits, once set, are changed with `lease permits`,
/// which the refusal names; it is safe while participants hold.
#[test]
fn permits_are_changed_with_lease_permits_while_the_lock_is_held() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "permits") {
        let holder = lease_run(&["--permits", "1", "--ttl", "5s", &url, "--", "sleep", "3"]);
        wait_until("the holder to hold", || {
            status_json(&url)["state"] == "held"
        });
        let (code, _, err) = lease(&["run", "--permits", "2", "-n", &url, "--", "true"]);
        assert_eq!(code, 64, "{store}: {err}");
        assert!(
            err.contains("lease permits"),
            "{store}: the refusal names the way: {err}"
        );
        let (code, out, err) = lease(&["permits", &url, "2"]);
        assert_eq!(code, 0, "{store}: {err}");
        assert!(out.contains("permits 2 (were 1)"), "{store}: {out}");
        // The second permit is free at once, beside the holder.
        let (code, _, err) = lease(&["run", "--permits", "2", "-n", &url, "--", "true"]);
        assert_eq!(code, 0, "{store}: {err}");
        assert_eq!(status_json(&url)["permits"], 2);
        let (code, _) = exit_of(holder);
        assert_eq!(code, 0, "{store}");
        let (code, _, err) = lease(&["permits", &url, "zero"]);
        assert_eq!(code, 64, "{err}");
    }
}

/// Issue 22 item 2: `lease run` does not exit as if all were well when its release could not
/// be written (here the command leaves a record of a newer version in the lock's place).
#[test]
fn a_release_that_cannot_be_written_is_not_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/locks/unreleased", dir.path().display());
    let record = dir.path().join("locks/unreleased");
    let script = format!("printf '{{\"format\":3}}' > '{}'", record.display());
    let (code, _, err) = lease(&["run", "--queue", &url, "--", "sh", "-c", &script]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("exited with status 0, but"), "{err}");
    assert!(err.contains("newer version"), "{err}");
}

/// Issue 23, "Yield on request": a holder `lease run --on-yield TERM` whose command traps the
/// signal; two waiters in other processes; `lease yield --to SECOND` from another process. The
/// command gets the signal and finishes (its trap writes its end), the lock is released when it
/// exits, and the release grants the second waiter before the first — checked from the tokens
/// and lines the commands wrote.
#[test]
fn a_yield_request_signals_the_holders_command_and_hands_over_to_its_to() {
    let dir = tempfile::tempdir().unwrap();
    // A signal the command could not handle is refused up front (usage, 64).
    let nowhere = format!("file://{}/unused", dir.path().display());
    let (code, _, err) = lease(&["run", "--on-yield", "KILL", &nowhere, "--", "true"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("not KILL or STOP"), "{err}");
    for (store, url) in stores(dir.path(), "yield") {
        let history = dir.path().join(format!("{store}.history"));
        let (holder, first) = yielding_holder_and_a_waiter(&url, &history);
        let second = worker(
            &url,
            &["--queue", "--label", "second"],
            "second",
            100,
            &history,
        );
        wait_until("both to wait", || {
            waiting_labels(&url) == ["first", "second"]
        });
        let id = status_json(&url)["waiting"][1]["holder"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (code, out, err) = lease(&["yield", &url, "--to", &id[..8], "--reason", "deploy"]);
        assert_eq!(code, 0, "{store}: {err}");
        assert!(out.contains("handing over to"), "{store}: {out}");
        stepped_aside(
            store,
            holder,
            vec![first, second],
            &history,
            &["holder", "second", "first"],
            "--to first",
        );
        // Nobody holds: nothing to ask, said so.
        let (code, _, err) = lease(&["yield", &url]);
        assert_eq!(code, 64, "{store}: {err}");
        assert!(err.contains("nothing to ask"), "{store}: {err}");
    }
}

/// Issue 23, a waiter's own yield request: a holder `lease run --on-yield TERM` whose command
/// would run for 60 s unless signalled; a waiter `lease run --queue`, then a waiter `lease run
/// --ask-yield --yield-reason deploy` in other processes. The asker's request reaches the holder
/// (its command gets the signal, its log names the reason), the holder's release grants the asker
/// before the waiter that came first, and all end long before the holder's command would have
/// (`exit_of` gives up after 60 s).
#[test]
fn a_waiter_that_asks_to_yield_is_handed_the_lock_when_the_holder_steps_aside() {
    let dir = tempfile::tempdir().unwrap();
    // A reason without --ask-yield is a usage error.
    let nowhere = format!("file://{}/unused", dir.path().display());
    let (code, _, err) = lease(&["run", "--yield-reason", "x", &nowhere, "--", "true"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--ask-yield"), "{err}");
    for (store, url) in stores(dir.path(), "askyield") {
        let history = dir.path().join(format!("{store}.history"));
        let (holder, first) = yielding_holder_and_a_waiter(&url, &history);
        let asker = worker(
            &url,
            &[
                "--ask-yield",
                "--yield-reason",
                "deploy",
                "--label",
                "asker",
            ],
            "asker",
            100,
            &history,
        );
        stepped_aside(
            store,
            holder,
            vec![first, asker],
            &history,
            &["holder", "asker", "first"],
            "the asker first",
        );
    }
}

/// Issue 23, plain leases: `lease yield` on a plain lease held by `lease run --on-yield TERM`
/// (no `--queue`) writes its request object; the holder reads it after a renewal, signals its
/// command, and releases when the command exits, long before its 60 s. A `--to` is refused (a
/// plain lease has no waiters); nobody holds afterwards, so nothing is asked.
#[test]
fn a_plain_leases_holder_asked_to_yield_signals_its_command_and_releases() {
    let dir = tempfile::tempdir().unwrap();
    for (store, url) in stores(dir.path(), "plainyield") {
        let history = dir.path().join(format!("{store}.history"));
        let script = format!(
            "trap 'echo \"end holder\" >> {h}; exit 0' TERM; \
             for i in $(seq 1 1200); do sleep 0.05; done",
            h = history.display(),
        );
        let holder = lease_run(&[
            "--ttl",
            "3s",
            "--on-yield",
            "TERM",
            "--label",
            "holder",
            &url,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        wait_until("the holder to hold", || {
            status_json(&url)["state"] == "held"
        });
        let (code, _, err) = lease(&["yield", &url, "--to", "3f2a"]);
        assert_ne!(code, 0, "{store}: a --to on a plain lease");
        assert!(err.contains("no waiters"), "{store}: {err}");
        let (code, _, err) = lease(&["yield", &url, "--reason", "deploy"]);
        assert_eq!(code, 0, "{store}: {err}");
        let (code, said) = exit_of(holder);
        assert_eq!(code, 0, "{store}: the command finished by its trap: {said}");
        assert!(
            said.contains("asked to yield by") && said.contains("deploy"),
            "{store}: {said}"
        );
        assert_eq!(
            std::fs::read_to_string(&history).unwrap(),
            "end holder\n",
            "{store}"
        );
        assert_eq!(status_json(&url)["state"], "released", "{store}");
        let (code, _, err) = lease(&["yield", &url]);
        assert_eq!(code, 64, "{store}: {err}");
        assert!(err.contains("nothing to ask"), "{store}: {err}");
    }
}

/// A holder `lease run --queue --ttl 3s --on-yield TERM` whose command would run for 60 s
/// unless signalled (its trap writes its end to `history`), and a waiter `first` queued
/// behind it: the start of the yield tests.
fn yielding_holder_and_a_waiter(url: &str, history: &Path) -> (Child, Child) {
    let end = format!(
        "echo \"end holder $LEASE_EPOCH $(date +%s%N)\" >> '{h}'",
        h = history.display()
    );
    let script = format!(
        "echo \"start holder $LEASE_EPOCH $(date +%s%N)\" >> '{h}'; \
         trap '{end}; exit 0' TERM; \
         for i in $(seq 1 1200); do sleep 0.05; done",
        h = history.display(),
        end = end.replace('\'', "'\\''"),
    );
    let holder = lease_run(&[
        "--queue",
        "--ttl",
        "3s",
        "--on-yield",
        "TERM",
        "--label",
        "holder",
        url,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_until("the holder to hold", || status_json(url)["state"] == "held");
    let first = worker(url, &["--queue", "--label", "first"], "first", 100, history);
    wait_until("first to wait", || waiting_labels(url) == ["first"]);
    (holder, first)
}

/// The end of the yield tests: the holder's command ended by its trap, told the reason
/// (`deploy`), and the lock went in `order` (`to` says to whom the release should have
/// handed over).
fn stepped_aside(
    store: &str,
    holder: Child,
    waiters: Vec<Child>,
    history: &Path,
    order: &[&str],
    to: &str,
) {
    let (code, said) = exit_of(holder);
    assert_eq!(
        code, 0,
        "{store}: the holder's command finished by its trap: {said}"
    );
    assert!(
        said.contains("asked to yield by") && said.contains("deploy"),
        "{store}: {said}"
    );
    let runs = finish(waiters, history);
    assert!(
        by_name(&runs, "holder").end < u128::MAX,
        "{store}: the trap did not run: {runs:?}"
    );
    one_after_another(
        &runs,
        order,
        &format!("{store}: the release did not hand over to {to}"),
    );
}
