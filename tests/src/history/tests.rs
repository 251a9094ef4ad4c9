//! The checker against made-up histories: each check passes a good history and fails a bad
//! one (the negative controls: a checker that cannot fail proves nothing).

use serde_json::{json, Value};

use super::{check, parse_logs, Config, Report};

/// A history written line by line: times in ms.
#[derive(Default)]
struct Log(Vec<String>);

impl Log {
    fn ev(&mut self, t_ms: f64, w: &str, ev: &str, extra: Value) -> &mut Log {
        let mut v = json!({ "t": (t_ms * 1e6) as u64, "w": w, "ev": ev });
        if let Value::Object(m) = extra {
            v.as_object_mut().unwrap().extend(m);
        }
        self.0.push(v.to_string());
        self
    }

    fn start(&mut self, t: f64, w: &str) -> &mut Log {
        self.ev(
            t,
            w,
            "start",
            json!({ "pid": 1, "lang": "rust", "gated": true }),
        )
    }

    fn request(&mut self, t: f64, w: &str, lock: &str, mode: &str, scope: &str) -> &mut Log {
        self.ev(
            t,
            w,
            "request",
            json!({ "lock": lock, "mode": mode, "scope": scope, "ttl_ms": 3000, "poll_ms": 100 }),
        )
    }

    /// A whole grant: request at `r`, granted at `b` with `token`, believed until `e`, released
    /// just after.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        w: &str,
        lock: &str,
        mode: &str,
        scope: &str,
        token: u64,
        r: f64,
        b: f64,
        e: f64,
    ) -> &mut Log {
        self.start(r - 1.0, w)
            .request(r, w, lock, mode, scope)
            .ev(b, w, "grant", json!({ "token": token }))
            .ev((b + e) / 2.0, w, "act", json!({}))
            .ev(e, w, "end", json!({}))
            .ev(e + 1.0, w, "released", json!({ "outcome": "ok" }))
    }

    fn check(&self, cfg: &Config) -> Report {
        let text = self.0.join("\n");
        let r = check(parse_logs([text.as_str()]).unwrap(), cfg);
        eprintln!("{r}");
        r
    }

    fn checks(&self) -> Report {
        self.check(&Config {
            resolution_ms: 10,
            slack_ms: 500,
            origin_ns: 0,
            allowed_errors: vec![],
        })
    }
}

fn failed(r: &Report, check: &str, needle: &str) -> bool {
    r.violations
        .iter()
        .any(|v| v.check == check && v.message.contains(needle))
}

#[test]
fn conserve_backups_together_and_gc_alone_pass() {
    let mut l = Log::default();
    l.hold("b1", "repo", "shared", "whole", 10, 0.0, 5.0, 100.0)
        .hold("b2", "repo", "shared", "whole", 11, 1.0, 6.0, 90.0)
        .hold("gc", "repo", "exclusive", "whole", 12, 2.0, 105.0, 200.0)
        .hold("b3", "repo", "shared", "whole", 13, 3.0, 205.0, 300.0);
    let r = l.checks();
    assert!(r.ok());
    assert_eq!((r.grants, r.bounded_waits), (4, 4));
}

#[test]
fn two_exclusive_grants_at_once_fail() {
    // Negative control: what a deleted record gave (issue 22 item 1).
    let mut l = Log::default();
    l.hold("h", "job", "exclusive", "whole", 10, 0.0, 5.0, 5000.0)
        .hold("w", "job", "exclusive", "whole", 11, 1.0, 100.0, 200.0);
    assert!(failed(
        &l.checks(),
        "exclusion",
        "two conflicting grants at once"
    ));
}

#[test]
fn a_reader_beside_a_writer_fails_and_other_locks_do_not_count() {
    let mut l = Log::default();
    l.hold("gc", "repo", "exclusive", "whole", 10, 0.0, 5.0, 100.0)
        .hold("b1", "repo", "shared", "whole", 11, 1.0, 50.0, 150.0)
        .hold(
            "other",
            "elsewhere",
            "exclusive",
            "whole",
            12,
            1.0,
            50.0,
            150.0,
        );
    let r = l.checks();
    assert!(failed(&r, "exclusion", "b1 (token 11, shared whole)"));
    assert_eq!(r.violations.len(), 1, "{r}");
}

/// Two ranges of `blob` and two paths of `tree`, all held at once.
fn scopes(a: &str, b: &str, p: &str, q: &str) -> Log {
    let mut l = Log::default();
    for (w, lock, scope, token) in [
        ("a", "blob", a, 10),
        ("b", "blob", b, 11),
        ("p", "tree", p, 12),
        ("q", "tree", q, 13),
    ] {
        l.hold(w, lock, "exclusive", scope, token, 1.0, 5.0, 100.0);
    }
    l
}

#[test]
fn ranges_conflict_only_where_they_share_a_byte() {
    let ok = scopes("range:0..100", "range:100..200", "path:a/bc", "path:a/b");
    assert!(ok.checks().ok());
    let r = scopes("range:0..100", "range:99..200", "path:a", "path:a/b").checks();
    assert!(failed(&r, "exclusion", "range:99..200"));
    assert!(failed(&r, "exclusion", "path:a/b"));
}

#[test]
fn a_semaphore_counts_its_holders() {
    let sem = |l: &mut Log, w: &str, token: u64, b: f64, e: f64| {
        l.start(0.0, w)
            .ev(
                1.0,
                w,
                "request",
                json!({ "lock": "pool", "mode": "shared", "scope": "whole", "permits": 2,
                        "ttl_ms": 3000, "poll_ms": 100 }),
            )
            .ev(b, w, "grant", json!({ "token": token }))
            .ev(e, w, "end", json!({}))
            .ev(e + 1.0, w, "released", json!({ "outcome": "ok" }));
    };
    let mut ok = Log::default();
    sem(&mut ok, "a", 1, 5.0, 100.0);
    sem(&mut ok, "b", 2, 6.0, 100.0);
    sem(&mut ok, "c", 3, 102.0, 200.0);
    assert!(ok.checks().ok());
    let mut bad = Log::default();
    sem(&mut bad, "a", 1, 5.0, 100.0);
    sem(&mut bad, "b", 2, 6.0, 100.0);
    sem(&mut bad, "c", 3, 50.0, 200.0);
    assert!(failed(
        &bad.checks(),
        "exclusion",
        "3 grants of a semaphore of 2"
    ));
}

#[test]
fn a_token_twice_or_out_of_order_fails() {
    let mut twice = Log::default();
    twice
        .hold("a", "job", "exclusive", "whole", 10, 0.0, 5.0, 100.0)
        .hold("b", "job", "exclusive", "whole", 10, 1.0, 105.0, 200.0);
    assert!(failed(&twice.checks(), "tokens", "handed out twice"));
    let mut order = Log::default();
    order
        .hold("a", "job", "exclusive", "whole", 11, 0.0, 5.0, 100.0)
        .hold("b", "job", "exclusive", "whole", 10, 1.0, 105.0, 200.0);
    assert!(failed(&order.checks(), "tokens", "not in grant order"));
    // Shared grants noticed out of token order are fine: they do not conflict.
    let mut shared = Log::default();
    shared
        .hold("a", "job", "shared", "whole", 11, 0.0, 5.0, 100.0)
        .hold("b", "job", "shared", "whole", 10, 1.0, 6.0, 200.0);
    assert!(shared.checks().ok());
}

/// An older holder `old` (gated or not) is frozen by `how` at 1000 ms; `new` is granted at
/// 5500 ms (within the bound of 3 + 1 + 0.01 + 0.1 s); `old` acts once more at 7000 ms.
fn zombie_history(gated: bool, how: &str) -> Log {
    let mut l = Log::default();
    l.ev(
        0.0,
        "old",
        "start",
        json!({ "pid": 1, "lang": "cli", "gated": gated }),
    )
    .request(1.0, "old", "job", "exclusive", "whole")
    .ev(2.0, "old", "grant", json!({ "token": 10 }))
    .ev(500.0, "old", "act", json!({}));
    match how {
        "kill" => l.ev(1000.0, "injector", "kill", json!({ "target": "old" })),
        what => l
            .ev(
                1000.0,
                "injector",
                "stop",
                json!({ "target": "old", "what": what }),
            )
            .ev(6900.0, "injector", "cont", json!({ "target": "old" })),
    };
    l.ev(7000.0, "old", "act", json!({}))
        .start(0.0, "new")
        .request(3.0, "new", "job", "exclusive", "whole")
        .ev(5500.0, "new", "grant", json!({ "token": 11 }))
        .ev(8000.0, "new", "end", json!({}))
        .ev(8001.0, "new", "released", json!({ "outcome": "ok" }));
    l
}

#[test]
fn a_stopped_command_that_acts_on_after_a_takeover_is_excused_and_measured() {
    // `lease run` stopped with its watchdog: what the README says may happen.
    let r = zombie_history(false, "all").checks();
    assert!(r.ok(), "{r}");
    assert!(r.excused[0].contains("1500 ms together"), "{r}");
    // The supervisor alone was stopped: its watchdog must have killed the command.
    assert!(failed(
        &zombie_history(false, "supervisor").checks(),
        "exclusion",
        ""
    ));
    // A holder whose acts are checked against its belief never acts after such a pause.
    assert!(failed(
        &zombie_history(true, "process").checks(),
        "exclusion",
        ""
    ));
}

/// H holds a queued lock from 5 ms, its record is deleted at 1000 ms, a newcomer is granted at
/// 1100 ms (ttl 3 s): H believes until `h_until`.
fn deleted_record(h_until: f64) -> Log {
    let mut l = Log::default();
    l.hold("h", "job", "exclusive", "whole", 10, 0.0, 5.0, h_until)
        .ev(
            1000.0,
            "injector",
            "delete-record",
            json!({ "lock": "job" }),
        )
        .hold("n", "job", "exclusive", "whole", 11, 1050.0, 1100.0, 1600.0);
    l
}

#[test]
fn a_deleted_record_excuses_an_overlap_within_half_the_ttl_and_no_more() {
    // Stopped by its confirmation 1.2 s after the deletion (bound 1.5 s): reported, excused.
    let r = deleted_record(2200.0).checks();
    assert!(r.ok(), "{r}");
    assert!(r.excused[0].contains("1200 ms past it"), "{r}");
    // Believing on 4 s after it (what a holder that never confirms does): a violation.
    assert!(failed(
        &deleted_record(5000.0).checks(),
        "exclusion",
        "two conflicting grants at once"
    ));
}

/// A holder killed at 1000 ms (its last renewal logged at `renewal`), a waiter granted at
/// `granted`; ttl 3 s, poll 100 ms, resolution 10 ms: the bound is 3 + 1 + 0.01 + 0.1 s.
fn takeover(renewal: f64, granted: f64) -> Log {
    let mut l = Log::default();
    l.start(0.0, "h")
        .request(1.0, "h", "job", "exclusive", "whole")
        .ev(2.0, "h", "grant", json!({ "token": 10 }))
        .ev(2.0, "h", "renewed", json!({ "t_send": 1_500_000u64 }))
        .ev(
            renewal + 5.0,
            "h",
            "renewed",
            json!({ "t_send": (renewal * 1e6) as u64 }),
        )
        .ev(990.0, "h", "act", json!({}))
        .ev(1000.0, "injector", "kill", json!({ "target": "h" }))
        .start(0.0, "w")
        .request(3.0, "w", "job", "exclusive", "whole")
        .ev(granted, "w", "grant", json!({ "token": 11 }))
        .ev(granted + 10.0, "w", "end", json!({}))
        .ev(granted + 11.0, "w", "released", json!({ "outcome": "ok" }));
    l
}

#[test]
fn a_waiter_behind_a_dead_holder_is_served_within_the_bound_from_its_last_renewal() {
    // Bound from the last renewal (900 ms): 900 + 4110 + slack 500 = 5510 ms.
    assert!(takeover(900.0, 5400.0).checks().ok());
    let r = takeover(900.0, 5700.0).checks();
    assert!(failed(&r, "liveness", "allowed 500 ms"), "{r}");
    // A renewal may have been sent unseen (the kill came more than ttl/3 after the last
    // one logged): the bound counts from the kill.
    assert!(takeover(10.0, 5600.0).checks().ok());
}

/// A holder whose process died of itself after its act at 990 ms (the harness saw it exit
/// with `status`, no fault injected), and a waiter granted at `granted`.
fn died(status: Option<&str>, granted: f64) -> Log {
    let mut l = Log::default();
    l.start(0.0, "h")
        .request(1.0, "h", "job", "exclusive", "whole")
        .ev(2.0, "h", "grant", json!({ "token": 10 }))
        .ev(2.0, "h", "renewed", json!({ "t_send": 1_500_000u64 }))
        .ev(990.0, "h", "act", json!({}))
        .start(0.0, "w")
        .request(3.0, "w", "job", "exclusive", "whole")
        .ev(granted, "w", "grant", json!({ "token": 11 }))
        .ev(granted + 10.0, "w", "end", json!({}))
        .ev(granted + 11.0, "w", "released", json!({ "outcome": "ok" }));
    if let Some(status) = status {
        l.ev(
            9000.0,
            "injector",
            "died",
            json!({ "target": "h", "status": status }),
        );
    }
    l
}

#[test]
fn a_worker_that_dies_of_itself_is_a_crash_and_the_waiters_behind_it_are_judged_from_its_end() {
    let r = died(Some("signal: 7 (SIGBUS)"), 5400.0).checks();
    assert!(
        failed(
            &r,
            "crash",
            "h died (signal: 7 (SIGBUS)) with no fault injected"
        ),
        "{r}"
    );
    // Its death counts from its last event (990 ms): 990 + 4110 + 500 ms, like a kill.
    assert!(!r.violations.iter().any(|v| v.check == "liveness"), "{r}");
    let r = died(Some("signal: 7 (SIGBUS)"), 5700.0).checks();
    assert!(
        failed(
            &r,
            "liveness",
            "h (token 10, exclusive whole) (died at 990 ms"
        ),
        "{r}"
    );
    // Without the harness's word (before it told deaths) the grant simply stops in the log,
    // and the waiter is reported late behind nobody: what the CI round of c9cd964 showed.
    let r = died(None, 5400.0).checks();
    assert!(failed(&r, "liveness", "dead ahead: none"), "{r}");
    assert!(!r.violations.iter().any(|v| v.check == "crash"), "{r}");
}

#[test]
fn a_waiter_left_waiting_or_failing_fails_unless_expected_and_a_dead_one_does_not() {
    let mut l = Log::default();
    l.hold("h", "job", "exclusive", "whole", 10, 0.0, 5.0, 100.0)
        .start(0.0, "w")
        .request(50.0, "w", "job", "exclusive", "whole")
        .ev(9000.0, "injector", "timeout", json!({ "target": "w" }));
    assert!(failed(
        &l.checks(),
        "liveness",
        "still waiting when the run ended"
    ));

    let mut e = Log::default();
    e.start(0.0, "w")
        .request(50.0, "w", "job", "exclusive", "whole")
        .ev(
            60.0,
            "w",
            "error",
            json!({ "kind": "corrupt", "message": "format 3" }),
        );
    assert!(failed(&e.checks(), "liveness", "failed: corrupt: format 3"));
    let cfg = Config {
        allowed_errors: vec!["format 3".into()],
        ..Config::default()
    };
    assert!(e.check(&cfg).ok());

    let mut dead = Log::default();
    dead.start(0.0, "w")
        .request(50.0, "w", "job", "exclusive", "whole")
        .ev(60.0, "injector", "kill", json!({ "target": "w" }));
    assert!(dead.checks().ok());
}

#[test]
fn lost_replies_excuse_a_slow_grant_from_the_bound_but_not_from_being_served() {
    let mut l = takeover(900.0, 9000.0);
    l.ev(
        3000.0,
        "injector",
        "net",
        json!({ "fault": "drop-reply", "method": "PUT", "key": "job" }),
    );
    let r = l.checks();
    assert!(r.ok(), "{r}");
    assert_eq!(r.bounded_waits, 1, "only the killed holder's own wait");
}

/// A reader holding 5..100 ms reads at 10 and 90 ms; a writer's write (`value`) was sent at
/// 50 ms.
fn reader(second_read: &str) -> Log {
    let mut l = Log::default();
    l.hold("zombie", "repo", "exclusive", "whole", 9, 0.0, 1.0, 2.0)
        .ev(
            50.0,
            "zombie",
            "write",
            json!({ "key": "data", "value": "v1", "outcome": "ok", "sent": 50_000_000u64,
                    "checked": false }),
        )
        .hold("r", "repo", "shared", "whole", 10, 3.0, 5.0, 100.0)
        .ev(10.0, "r", "read", json!({ "key": "data", "value": "v0" }))
        .ev(
            90.0,
            "r",
            "read",
            json!({ "key": "data", "value": second_read }),
        );
    l
}

#[test]
fn a_reader_that_sees_its_data_change_under_it_fails() {
    assert!(reader("v0").checks().ok());
    let r = reader("v1").checks();
    assert!(
        failed(&r, "readers", "written to data by zombie (token 9"),
        "issue 22 item 5: {r}"
    );
}

fn fenced_write(a_scope: &str, b_scope: &str) -> Log {
    let mut l = Log::default();
    l.hold("a", "blob", "exclusive", a_scope, 10, 0.0, 5.0, 100.0)
        .hold("b", "blob", "exclusive", b_scope, 11, 1.0, 6.0, 100.0)
        .ev(
            50.0,
            "a",
            "write",
            json!({ "key": "data", "value": "a", "outcome": "fenced", "sent": 40_000_000u64 }),
        );
    l
}

#[test]
fn a_live_holder_fenced_by_a_disjoint_scope_fails_and_a_stale_one_does_not() {
    let r = fenced_write("range:0..100", "range:100..200").checks();
    assert!(
        failed(&r, "fencing", "no grant over an overlapping scope"),
        "item 4: {r}"
    );
    // A holder fenced by a newer holder of its own scope (here a sequential one) is stale.
    let mut stale = Log::default();
    stale
        .hold("a", "blob", "exclusive", "range:0..100", 10, 0.0, 5.0, 30.0)
        .hold(
            "b",
            "blob",
            "exclusive",
            "range:50..150",
            11,
            1.0,
            35.0,
            100.0,
        )
        .ev(
            50.0,
            "a",
            "write",
            json!({ "key": "data", "value": "a", "outcome": "fenced", "sent": 40_000_000u64,
                    "checked": false }),
        );
    assert!(stale.checks().ok());
}

#[test]
fn plain_lease_histories_are_checked_too() {
    // The lease is a queued lock's special case: one exclusive whole grant at a time, won by
    // racing (no bound on the wait).
    let mut ok = Log::default();
    ok.hold("a", "gc", "exclusive", "whole", 100, 0.0, 5.0, 50.0)
        .hold("b", "gc", "exclusive", "whole", 101, 1.0, 60.0, 70.0);
    assert!(ok.checks().ok());
    let mut bad = Log::default();
    bad.hold("a", "gc", "exclusive", "whole", 100, 0.0, 5.0, 50.0)
        .hold("b", "gc", "exclusive", "whole", 101, 1.0, 40.0, 70.0);
    let r = bad.checks();
    assert!(failed(&r, "exclusion", "10 ms together"), "{r}");
}

#[test]
fn a_torn_last_line_is_ignored_and_a_torn_middle_line_is_an_error() {
    let good = json!({ "t": 1, "w": "a", "ev": "done" }).to_string();
    assert_eq!(
        parse_logs([format!("{good}\n{{\"t\": 2, \"w").as_str()])
            .unwrap()
            .len(),
        1
    );
    assert!(parse_logs([format!("{{\"t\"\n{good}").as_str()]).is_err());
}

#[test]
fn a_failed_read_saw_nothing() {
    let mut l = reader("v0");
    l.ev(
        50.0,
        "r",
        "read",
        json!({ "key": "data", "error": "the store did not answer" }),
    );
    assert!(l.checks().ok());
}
