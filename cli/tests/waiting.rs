//! A `lease run` that waits for a holder, with real processes on the file store: what it says
//! on a terminal (and not elsewhere), and that a holder on this machine that is provably gone
//! is not waited out, while a live one, or one in another pid namespace, is (issue 28).

#![allow(clippy::disallowed_methods)] // these tests wait on real processes in real time

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{lease_bin, stderr, wait_for, Env};

/// A `lease run` of `args` holding `name` until killed, once its command runs (it writes
/// its pid to `started-NAME`).
fn holder(env: &Env, args: &[&str], name: &str) -> (Child, i32) {
    let started = env.path(&format!("started-{name}"));
    let script = format!(
        "echo $$ > {}.tmp; mv {0}.tmp {0}; exec sleep 3600",
        started.display()
    );
    let mut all: Vec<&str> = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let child = env.spawn(&all);
    wait_for(&started);
    let pid = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (child, pid)
}

/// Wait (bounded) until `path` contains `needle`; its contents.
fn wait_for_text(path: &Path, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{needle:?} never appeared in {}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn kill(child: &mut Child, signal: i32) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// Skip with a clear message, except under CI=true where a skip would hide a regression.
fn skip_or_fail(test: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run here (CI=true forbids skipping): {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// On a terminal, a waiting `lease run` says who holds the lease, once, then again when the
/// holder changes (here: an operator's break); without a terminal it says nothing, unless
/// `-v`. `script` gives it a pseudo-terminal, as a user's shell would.
#[test]
fn a_waiting_run_says_who_holds_the_lease_on_a_terminal() {
    let env = Env::new();
    let (mut first, _) = holder(&env, &["--ttl", "2s", "--label", "first"], "job");
    // Not a terminal: nothing, even while it waits through many polls.
    let out = env
        .cmd(&[
            "run", "--wait", "500ms", "--poll", "50ms", "job", "--", "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("lease: waiting for"),
        "{}",
        stderr(&out)
    );
    // With -v, it says so.
    let out = env
        .cmd(&["-v", "run", "--wait", "500ms", "job", "--", "true"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("lease: waiting for file://"), "{err}");
    assert!(err.contains("held by \"first\""), "{err}");

    // On a terminal.
    let typescript = env.path("typescript");
    let line = format!("{} run --poll 50ms job -- true", lease_bin());
    let mut waiter = Command::new("script")
        .args(["-qfec", &line])
        .arg(&typescript)
        .env("LEASE_HOME", env.home.path())
        .env_remove("LEASE_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_text(&typescript, "lease: waiting for");
    // The holder changes: stopped (so that it cannot acknowledge), then broken. The waiter
    // sees the break's record, then takes it over once the broken holder's ttl and grace
    // have passed.
    kill(&mut first, libc::SIGSTOP);
    let out = env.cmd(&["break", "job", "--yes"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let status = waiter.wait().unwrap();
    let text = std::fs::read_to_string(&typescript).unwrap();
    assert!(status.success(), "{status}: {text}");
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("lease: waiting for"))
        .collect();
    assert_eq!(said.len(), 2, "once per holder, not per poll: {text}");
    assert!(said[0].starts_with("lease: waiting for file://"), "{text}");
    assert!(said[0].contains("held by \"first\""), "{text}");
    assert!(said[1].contains("held by \"lease break by "), "{text}");
    kill(&mut first, libc::SIGCONT);
    first.wait().unwrap();
}

/// `kill -9` of a `lease run`: the next one takes the lease at once (its holder and the
/// holder's watchdog are gone, on this machine), as flock(1) would, instead of after the
/// holder's hour-long ttl; and by then the killed holder's command is dead.
#[test]
fn a_killed_holder_on_this_machine_is_not_waited_out() {
    let env = Env::new();
    let (mut first, command) = holder(&env, &["--ttl", "1h"], "job");
    let epoch = status_epoch(&env, "job");
    kill(&mut first, libc::SIGKILL);
    first.wait().unwrap();
    // Its command must be dead whenever the next one's runs.
    let check = format!("kill -0 {command} 2>/dev/null && exit 9; echo $LEASE_EPOCH");
    let out = env
        .cmd(&["run", "--wait", "60s", "job", "--", "sh", "-c", &check])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!alive(command));
    let next: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(next, epoch + 1);
}

/// A live holder is never taken over early, also while stopped (SIGSTOP): its processes are
/// there.
#[test]
fn a_live_or_stopped_holder_is_waited_for() {
    let env = Env::new();
    let (mut first, _) = holder(&env, &["--ttl", "1h"], "job");
    let try_once = || {
        env.cmd(&["run", "-n", "job", "--", "true"])
            .output()
            .unwrap()
    };
    assert_eq!(try_once().status.code(), Some(75));
    kill(&mut first, libc::SIGSTOP);
    assert_eq!(try_once().status.code(), Some(75));
    kill(&mut first, libc::SIGCONT);
    kill(&mut first, libc::SIGTERM);
    first.wait().unwrap();
    assert_eq!(try_once().status.code(), Some(0));
}

/// A holder in another pid namespace (`unshare --pid --fork --mount-proc`, as a container
/// sharing the directory): its pids mean nothing here (its pid 1 is our init), so it is waited
/// out like a remote holder, never taken over early.
#[test]
fn a_holder_in_another_pid_namespace_is_not_taken_over_early() {
    const TEST: &str = "a_holder_in_another_pid_namespace_is_not_taken_over_early";
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => return skip_or_fail(TEST, &format!("unshare --pid: {}", stderr(&o).trim())),
        Err(e) => return skip_or_fail(TEST, &format!("cannot run unshare: {e}")),
    }
    let env = Env::new();
    let started = env.path("started-job");
    let script = format!("touch {}; exec sleep 3600", started.display());
    let mut contained = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(lease_bin())
        .args(["run", "--ttl", "1h", "job", "--", "sh", "-c", &script])
        .env("LEASE_HOME", env.home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&started);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("job")).unwrap()).unwrap();
    // The holder names itself as pid 1 of its namespace, which is not ours.
    assert_eq!(record["holder"]["pid"], 1, "{record}");
    let ours = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        record["holder"]["process"]["pid_ns"].as_str(),
        Some(ours.to_str().unwrap()),
        "{record}"
    );
    let out = env
        .cmd(&["run", "-n", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    kill(&mut contained, libc::SIGKILL);
    contained.wait().unwrap();
}

fn status_epoch(env: &Env, name: &str) -> u64 {
    let out = env.cmd(&["status", name, "--json"]).output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    s["epoch"].as_u64().unwrap()
}
