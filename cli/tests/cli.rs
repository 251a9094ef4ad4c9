//! The `lease` command, run as a real process on the file store.

#![allow(clippy::disallowed_methods)] // these tests wait on real processes in real time

use std::time::Duration;

mod common;

use common::{stderr, wait_for, Env};

#[test]
fn two_no_wait_runs_exactly_one_runs_its_child() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!("touch {}; sleep 3", started.display());
    let mut first = env.spawn(&["run", "-n", "job", "--", "sh", "-c", &script]);
    wait_for(&started);
    let second_ran = env.path("second-ran");
    let out = env.run(&[
        "run",
        "-n",
        "job",
        "--",
        "touch",
        second_ran.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("is held by"), "{}", stderr(&out));
    assert!(
        !second_ran.exists(),
        "the second child ran while the first held the lease"
    );
    // -E changes the code, like flock.
    let out = env.run(&["run", "-n", "-E", "3", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(first.wait().unwrap().success());
    assert_eq!(env.status_json("job")["state"], "released");
}

/// What a shell job under a queued lock's shared or scoped grant hands on: `LEASE_TOKEN` says
/// the grant's mode and scope, which decide what it fences (docs/protocol.md §7), and a gate
/// admits such tokens by the same rules as fenced objects (issue 22).
#[test]
fn a_shared_or_scoped_grant_exports_its_mode_and_scope_in_the_token() {
    use lease::{FencingGate, FencingToken, Mode, Scope};
    let env = Env::new();
    let token_of = |flags: &[&str]| -> FencingToken {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend(["blob", "--", "sh", "-c", "printf %s \"$LEASE_TOKEN\""]);
        let out = env.run(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8(out.stdout).unwrap().parse().unwrap()
    };
    let a = token_of(&["--range", "0..100"]);
    let b = token_of(&["--range", "100..200"]);
    let r = token_of(&["--shared", "--range", "0..50"]);
    assert!(a.to_string().ends_with(";range=0..100"), "{a}");
    assert_eq!(
        (r.mode(), r.scope()),
        (Mode::Shared, &Scope::Range { start: 0, end: 50 })
    );
    assert!(r.to_string().ends_with(";shared;range=0..50"), "{r}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let gate = FencingGate::in_memory();
        gate.admit("blob", &b).await.unwrap();
        gate.admit("blob", &a)
            .await
            .expect("disjoint ranges do not fence each other");
        gate.admit("blob", &r).await.unwrap();
        let e = gate.admit("blob", &a).await.unwrap_err();
        assert_eq!(
            e.kind(),
            lease::ErrorKind::Fenced,
            "a reader's later token refuses it"
        );
        gate.admit("blob", &b)
            .await
            .expect("but not the writer of other bytes");
    });
}

#[test]
fn exports_the_lease_and_passes_the_exit_status_through() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo $LEASE_EPOCH $LEASE_URL $LEASE_TOKEN $LEASE_HOLDER_ID; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = stdout.split_whitespace().collect();
    let url = format!("file://{}/job", env.home.path().display());
    // A new lease starts at the store's clock in milliseconds (above any epoch handed out
    // before, should its record have been deleted).
    let epoch: u64 = words[0].parse().unwrap();
    assert!(epoch > 1_700_000_000_000, "{epoch}");
    let holder = words[3];
    assert_eq!(holder.len(), 32);
    assert_eq!(
        words[1..3],
        [url.as_str(), &format!("{url}#{epoch}@{holder}")]
    );
    let s = env.status_json("job");
    assert_eq!(
        (s["state"].as_str(), s["epoch"].as_u64()),
        (Some("released"), Some(epoch))
    );
    // The next run gets the next epoch.
    let out = env.run(&["run", "job", "--", "sh", "-c", "echo $LEASE_EPOCH"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        (epoch + 1).to_string()
    );
    // A child killed by a signal: 128 + N, as a shell reports it.
    let out = env.run(&["run", "job", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
}

#[test]
fn break_kills_the_child_at_once_and_exits_with_the_lost_code() {
    let env = Env::new();
    let started = env.path("started");
    let got_term = env.path("got-term");
    let script = format!(
        "trap 'touch {}; exit 0' TERM; touch {}; while true; do sleep 0.1; done",
        got_term.display(),
        started.display()
    );
    let run = env.spawn(&["run", "--ttl", "1s", "job", "--", "sh", "-c", &script]);
    wait_for(&started);
    let out = env.run(&["break", "job"]);
    assert_eq!(out.status.code(), Some(64), "break needs --yes");
    let epoch = env.status_json("job")["epoch"].as_u64().unwrap();
    let out = env.run(&["break", "job", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("at epoch {epoch}")));
    // Until the holder lets go, the lease is broken, not free.
    assert_eq!(env.status_json("job")["state"], "broken");
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    // After a loss another holder may start at once (a takeover; or this break, as soon as
    // lease run acknowledges it): the command gets SIGKILL, no time for a SIGTERM handler.
    assert!(!got_term.exists(), "the child got SIGTERM, not SIGKILL");
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    assert!(stderr(&out).contains("SIGKILL"), "{}", stderr(&out));
    // Once its command stopped, `lease run` acknowledged the break: released, epoch + 1.
    let s = env.status_json("job");
    assert_eq!(
        (s["state"].as_str(), s["epoch"].as_u64()),
        (Some("released"), Some(epoch + 1))
    );
    // Breaking a released lease changes nothing.
    let out = env.run(&["break", "job", "--yes"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to break"));
    assert_eq!(env.status_json("job")["epoch"], epoch + 1);
}

#[test]
fn the_lost_exit_code_can_be_changed() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!(
        "trap '' TERM; touch {}; while true; do sleep 0.1; done",
        started.display()
    );
    let run = env.spawn(&[
        "run",
        "--ttl",
        "1s",
        "--lost-exit-code",
        "99",
        "job",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for(&started);
    assert!(env.run(&["break", "job", "--yes"]).status.success());
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(99), "{}", stderr(&out));
}

#[test]
fn signals_to_lease_run_reach_the_child_and_the_lease_is_released() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!(
        "trap 'exit 5' TERM; touch {}; while true; do sleep 0.1; done",
        started.display()
    );
    let run = env.spawn(&["run", "job", "--", "sh", "-c", &script]);
    wait_for(&started);
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(env.status_json("job")["state"], "released");
}

#[test]
fn waiting_runs_start_when_the_lease_is_released_and_time_out() {
    let env = Env::new();
    let started = env.path("started");
    let script = format!("touch {}; sleep 1", started.display());
    let mut first = env.spawn(&["run", "job", "--", "sh", "-c", &script]);
    wait_for(&started);
    let out = env.run(&["run", "--wait", "300ms", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    let out = env.run(&[
        "run",
        "--wait",
        "30s",
        "job",
        "--",
        "sh",
        "-c",
        "echo $LEASE_EPOCH",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first_epoch = env.status_json("job")["epoch"].as_u64().unwrap() - 1;
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        (first_epoch + 1).to_string()
    );
    assert!(first.wait().unwrap().success());
}

#[test]
fn interrupting_a_waiting_run_exits_130_without_running_the_child() {
    let env = Env::new();
    let started = env.path("started");
    let mut holder = env.spawn(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 5", started.display()),
    ]);
    wait_for(&started);
    let ran = env.path("ran");
    let waiter = env.spawn(&["run", "job", "--", "touch", ran.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(waiter.id() as i32, libc::SIGINT) };
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(!ran.exists());
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    holder.wait().unwrap();
}

#[test]
fn status_json_has_the_documented_keys() {
    let env = Env::new();
    let s = env.status_json("never-used");
    assert_eq!(s["state"], "free");
    let started = env.path("started");
    let mut run = env.spawn(&[
        "run",
        "--label",
        "gc-1",
        "--ttl",
        "20s",
        "job",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 2", started.display()),
    ]);
    wait_for(&started);
    let s = env.status_json("job");
    for key in ["state", "epoch", "holder", "ttl_ms", "expires_in_ms"] {
        assert!(s.get(key).is_some(), "{key} missing in {s}");
    }
    for key in ["id", "label", "host", "pid"] {
        assert!(
            s["holder"].get(key).is_some(),
            "holder.{key} missing in {s}"
        );
    }
    assert_eq!(s["state"], "held");
    assert_eq!(s["holder"]["label"], "gc-1");
    assert_eq!(s["ttl_ms"], 20_000);
    // Until a waiter may take over: ttl + grace (2 s) + the file store's resolution (10 ms).
    let left = s["expires_in_ms"].as_u64().unwrap();
    assert!(left <= 22_010 && left > 10_000, "{left}");
    let human = String::from_utf8(env.run(&["status", "job"]).stdout).unwrap();
    assert!(
        human.contains("state:      held") && human.contains("\"gc-1\""),
        "{human}"
    );
    run.wait().unwrap();
    // Released: the last holder, with a space after the colon (it printed `last holder:"gc-1"`).
    let human = String::from_utf8(env.run(&["status", "job"]).stdout).unwrap();
    assert!(human.contains("last holder: \"gc-1\""), "{human}");
    // The holder record names the user even where $USER and $LOGNAME are unset (cron).
    let started = env.path("started-cron");
    let mut run = env
        .cmd(&[
            "run",
            "--ttl",
            "20s",
            "cron-job",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 2", started.display()),
        ])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .spawn()
        .unwrap();
    wait_for(&started);
    let s = env.status_json("cron-job");
    assert!(
        s["holder"]["user"].as_str().is_some_and(|u| !u.is_empty()),
        "{s}"
    );
    run.wait().unwrap();
}

#[test]
fn watch_prints_one_line_per_change() {
    let env = Env::new();
    let mut watch = env.spawn(&["watch", "job", "--json", "--poll", "50ms"]);
    std::thread::sleep(Duration::from_millis(300));
    // Watching is polling: a state that lasts less than the poll interval can be missed, so
    // each state here lasts several polls.
    for _ in 0..2 {
        assert!(env
            .run(&["run", "job", "--", "sleep", "0.3"])
            .status
            .success());
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(watch.id() as i32, libc::SIGINT) };
    let status = watch.wait().unwrap();
    let mut out = String::new();
    use std::io::Read;
    watch
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{out}");
    // A lease's first take creates its record released and then takes it (docs/protocol.md
    // §5); a poll that falls between the two prints that record as `created`. It is a real
    // state, but not one this test makes last several polls, so it may or may not be seen.
    let states: Vec<(String, Option<u64>)> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["reason"] != "created")
        .map(|v| {
            (
                v["state"].as_str().unwrap().to_string(),
                v["epoch"].as_u64(),
            )
        })
        .collect();
    let first = states.get(1).and_then(|s| s.1).unwrap_or(0);
    let expected = [
        ("free", None),
        ("held", Some(first)),
        ("released", Some(first)),
        ("held", Some(first + 1)),
        ("released", Some(first + 1)),
    ];
    let expected: Vec<(String, Option<u64>)> =
        expected.iter().map(|(s, e)| (s.to_string(), *e)).collect();
    assert_eq!(states, expected, "{out}");
}

#[test]
fn bad_input_is_one_clear_line_and_a_usage_code() {
    let env = Env::new();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["run", "s3://B/x", "--", "true"],
            64,
            "not a valid bucket name",
        ),
        (
            &["run", "ftp://bucket/x", "--", "true"],
            64,
            "unsupported scheme",
        ),
        (
            &["run", "gs://B/x", "--", "true"],
            64,
            "not a valid GCS bucket name",
        ),
        (
            &["run", "az://UPPER/c/x", "--", "true"],
            64,
            "not a valid Azure storage account name",
        ),
        (
            &["run", "file://relative/x", "--", "true"],
            64,
            "three slashes",
        ),
        (&["run", "a//b", "--", "true"], 64, "empty path segment"),
        (&["run", "", "--", "true"], 64, "empty"),
        (
            &["run", "--ttl", "0s", "job", "--", "true"],
            64,
            "ttl 0ms is out of range",
        ),
        (
            &["run", "--ttl", "1000d", "job", "--", "true"],
            64,
            "out of range",
        ),
        (
            &["run", "--ttl", "soon", "job", "--", "true"],
            64,
            "invalid duration",
        ),
        // A number alone is refused: 30000 meant ms to some, seconds to others.
        (
            &["run", "--ttl", "30000", "job", "--", "true"],
            64,
            "a number needs a unit: write 30000ms or 30000s",
        ),
        (
            &["run", "--wait", "5", "job", "--", "true"],
            64,
            "a number needs a unit: write 5ms, 5s",
        ),
        (
            &["watch", "--poll", "1", "job"],
            64,
            "a number needs a unit",
        ),
        (&["run", "job"], 64, "required"),
        (
            &[
                "run",
                "--ttl",
                "3s",
                "--kill-after",
                "10s",
                "job",
                "--",
                "true",
            ],
            64,
            "--kill-after 10s is too long for --ttl 3s: use at most 1.2s",
        ),
        (
            &["run", "job", "--", "/nonexistent/command"],
            127,
            "/nonexistent/command",
        ),
        (&["status", "memory://"], 64, "memory://NAMESPACE/NAME"),
    ];
    for (args, code, needle) in cases {
        let out = env.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // An unreadable place: a directory path that runs through a regular file.
    std::fs::write(env.path("plainfile"), "x").unwrap();
    let url = format!("file://{}/plainfile/sub/x", env.home.path().display());
    let out = env.run(&["run", &url, "--", "true"]);
    assert!(
        matches!(out.status.code(), Some(64) | Some(69)),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("plainfile"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    // A directory that does not exist yet is created, as for bare names (issue 16).
    let url = format!("file://{}/not/yet/x", env.home.path().display());
    let out = env.run(&["run", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(env.path("not/yet/x").is_file());
}

/// What a new user types from habit (flock(1), a URL typed too fast) gets the fix in the message
/// (issue 28): a mistyped URL is refused instead of becoming a local lock, a command without
/// `--` and a shell line passed as one word are pointed to `--` and `sh -c`, and a ttl
/// without a unit is offered only the units that make a valid ttl.
#[test]
fn habits_and_typos_get_the_fix_in_one_line() {
    let env = Env::new();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["run", "s3:/bucket/x", "--", "true"],
            64,
            "did you mean \"s3://bucket/x\"",
        ),
        (
            &["run", "gs:/bucket/x", "--", "true"],
            64,
            "did you mean \"gs://bucket/x\"",
        ),
        (
            &["run", "file:/tmp/x", "--", "true"],
            64,
            "did you mean \"file:///tmp/x\"",
        ),
        (
            &["status", "s3//bucket/x"],
            64,
            "did you mean \"s3://bucket/x\"",
        ),
        (
            &["run", "job", "echo", "hi"],
            64,
            "put '--' before the command: lease run job -- echo hi",
        ),
        (
            &["run", "--wait", "5s", "job", "ls", "-l"],
            64,
            "lease run --wait 5s job -- ls -l",
        ),
        (
            &["run", "job", "--", "echo hi && echo there"],
            127,
            "sh -c 'echo hi && echo there'",
        ),
        (
            &["run", "--ttl", "30000", "job", "--", "true"],
            64,
            "write 30000ms or 30000s",
        ),
    ];
    for (args, code, needle) in cases {
        let out = env.run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            !err.contains("30000m ") && !err.contains("30000h"),
            "{args:?}: {err}"
        );
    }
    // Nothing was made on this machine for the mistyped URLs.
    assert!(!env.path("s3:").exists() && !env.path("gs:").exists() && !env.path("file:").exists());
    // A directory given as the lease: one line, not a timestamped WARN and the same error again.
    std::fs::create_dir(env.path("dir")).unwrap();
    let url = format!("file://{}/", env.path("dir").display());
    let out = env.run(&["run", &url, "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
}

/// Status names each holder of a shared lock with its own token (it printed one `holder:` line
/// beside the other holder's token), says that a plain lease records no waiters, and a break
/// is signed with the user even where `$USER` is unset (it said "broken by unknown").
#[test]
fn status_and_break_say_what_is_known() {
    let env = Env::new();
    let mut shared = vec![];
    for name in ["a", "b"] {
        let started = env.path(&format!("started-{name}"));
        shared.push(env.spawn(&[
            "run",
            "--shared",
            "--label",
            &format!("reader-{name}"),
            "repo",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", started.display()),
        ]));
        wait_for(&started);
    }
    let human = String::from_utf8(env.run(&["status", "repo"]).stdout).unwrap();
    assert!(!human.contains("\nholder:"), "{human}");
    let tokens: Vec<&str> = human
        .lines()
        .filter(|l| l.trim_start().starts_with("token "))
        .collect();
    assert_eq!(tokens.len(), 2, "{human}");
    assert!(
        tokens[0].contains("reader-a") && tokens[1].contains("reader-b"),
        "{human}"
    );
    assert_ne!(
        tokens[0].split_whitespace().nth(1),
        tokens[1].split_whitespace().nth(1),
        "{human}"
    );
    for mut child in shared {
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait().unwrap();
    }

    let started = env.path("started");
    let run = env.spawn(&[
        "run",
        "--ttl",
        "2s",
        "job",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 30", started.display()),
    ]);
    wait_for(&started);
    let human = String::from_utf8(env.run(&["status", "job"]).stdout).unwrap();
    assert!(
        human.contains("waiters:    not recorded for a plain lease") && human.contains("--queue"),
        "{human}"
    );
    let out = env
        .cmd(&["break", "job", "--yes"])
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(err.contains("broken by \"lease break by "), "{err}");
    assert!(!err.contains("unknown"), "{err}");
}

#[test]
fn doctor_checks_a_store_and_cleans_up() {
    let env = Env::new();
    let url = format!("file://{}", env.home.path().display());
    let out = env.run(&["doctor", &url, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["cleaned_up"], true);
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for check in ["duplicate_create", "stale_update", "stale_delete"] {
        assert!(names.contains(&check), "{check} missing: {names:?}");
    }
    // Nothing is left behind, not even the probes' lock files (issue 28): the folder itself
    // goes once empty.
    let left: Vec<_> = std::fs::read_dir(env.home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A path through a regular file cannot be a store.
    std::fs::write(env.path("plainfile"), "x").unwrap();
    let url = format!("file://{}/plainfile/locks", env.home.path().display());
    let out = env.run(&["doctor", &url]);
    assert!(
        matches!(out.status.code(), Some(64) | Some(69)),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("plainfile"), "{}", stderr(&out));
}

/// `lease run --preempt=every-effect-fenced` takes a live holder's lease at once (issue 23):
/// the holder loses it at its next renewal (its command killed, the lost exit code), and
/// `lease status` shows whom the record preempted, in its history too.
#[test]
fn preempt_takes_a_live_lease_at_once_and_the_holder_loses_it() {
    let env = Env::new();
    let started = env.path("started");
    let holder = env.spawn(&[
        "run",
        "--ttl",
        "3s",
        "--label",
        "old",
        "job",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 60", started.display()),
    ]);
    wait_for(&started);
    let epoch = env.status_json("job")["epoch"].as_u64().unwrap();
    // Without the mode: held.
    let out = env.run(&["run", "-n", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // With it: at once, even with -n.
    let out = env.run(&[
        "run",
        "-n",
        "--ttl",
        "3s",
        "--label",
        "new",
        "--preempt=every-effect-fenced",
        "job",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let s = env.status_json("job");
    assert_eq!(s["preempted"]["epoch"].as_u64(), Some(epoch), "{s}");
    assert_eq!(s["history"][0]["end"], "preempted", "{s}");
    assert_eq!(s["history"][0]["epoch"].as_u64(), Some(epoch), "{s}");
    assert!(s["epoch"].as_u64().unwrap() > epoch, "{s}");
    // The old holder learns it at its next renewal (within ttl/3 + a request timeout).
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("preempted"), "{}", stderr(&out));
}

/// Issue 23, queued locks: `--queue --preempt=every-effect-fenced` removes the queued holder's
/// grant and is granted at once (with -n too), ahead of nobody here; the old holder exits 76
/// naming the preemption at its next confirmation.
#[test]
fn preempt_takes_a_queued_lock_at_once_and_the_holder_loses_it() {
    let env = Env::new();
    let started = env.path("started");
    let holder = env.spawn(&[
        "run",
        "--queue",
        "--ttl",
        "3s",
        "--label",
        "old",
        "job",
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 60", started.display()),
    ]);
    wait_for(&started);
    let out = env.run(&["run", "-n", "--queue", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let out = env.run(&[
        "run",
        "-n",
        "--queue",
        "--ttl",
        "3s",
        "--label",
        "new",
        "--preempt=every-effect-fenced",
        "job",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(stderr(&out).contains("preempted"), "{}", stderr(&out));
}

/// Any other value is a usage error that says what the mode risks.
#[test]
fn preempt_takes_only_its_asserting_value() {
    let env = Env::new();
    for value in ["true", "yes", "never", "every-effect"] {
        let out = env.run(&["run", &format!("--preempt={value}"), "job", "--", "true"]);
        assert_eq!(out.status.code(), Some(64), "{value}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("every-effect-fenced"), "{value}: {err}");
    }
    let out = env.run(&["run", "--preempt=maybe", "job", "--", "true"]);
    assert!(stderr(&out).contains("fenced"), "{}", stderr(&out));
    assert!(stderr(&out).contains("believing"), "{}", stderr(&out));
    // A shared request refuses it (only an exclusive one may preempt).
    let out = env.run(&[
        "run",
        "--shared",
        "--preempt=every-effect-fenced",
        "job",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only an exclusive request"),
        "{}",
        stderr(&out)
    );
}
