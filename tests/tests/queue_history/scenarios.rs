//! The scenarios, one lock each: who works on it (in which language, mode and scope) and
//! which faults the injector brings, when. They run side by side on one store; the checker
//! then reads each lock's history on its own (`main.rs`).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::{Lang, Run};

/// Timings every scenario shares.
pub struct Params {
    pub ttl_ms: u64,
    /// Iterations are multiplied by this (the deep run's 3).
    pub scale: u32,
    /// When every worker must be done.
    pub deadline: Instant,
}

impl Params {
    /// `ttl + grace + resolution + poll`: the longest a dead participant keeps others waiting.
    pub fn bound(&self, run: &Run) -> Duration {
        let grace = (self.ttl_ms / 10).max(1000);
        Duration::from_millis(self.ttl_ms + grace + run.store.resolution_ms + run.store.poll_ms)
    }

    /// A stop long enough that the others remove the stopped participant.
    pub fn pause(&self, run: &Run) -> Duration {
        self.bound(run) + Duration::from_millis(1000)
    }
}

/// What a scenario wanted to do but could not (a worker never got there): printed with the
/// report, since a fault not injected is coverage lost.
pub type Notes = Vec<String>;

/// A note that a fault the scenario exists for could not be injected (the record or session
/// to delete not found, say): it fails the round, since the checks then prove nothing of it.
pub const NOT_INJECTED: &str = "the scenario's fault could not be injected";

/// A worker's SPEC (tests/src/bin/queue-worker.rs): `name` is `LOCK/WHO`.
fn spec(lock: &str, who: &str, mode: &str, iterations: u32, p: &Params) -> Value {
    json!({
        "name": format!("{lock}/{who}"), "lock": lock, "mode": mode, "permits": null,
        "scope": "whole", "queue": true, "ttl_ms": p.ttl_ms, "iterations": iterations * p.scale,
        "hold_ms": 600, "acts": 3, "pause_ms": 150, "data": null, "role": "none",
    })
}

fn with(mut v: Value, fields: Value) -> Value {
    for (k, x) in fields.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

const WAIT: Duration = Duration::from_secs(60);

/// Wait for `name`'s `n`th grant; a note when it never came.
fn granted(run: &Run, name: &str, n: usize, notes: &mut Notes) -> bool {
    let ok = run.wait_for(name, "grant", n, WAIT);
    if !ok {
        notes.push(format!(
            "{name} never had {n} grant(s): the fault planned then was skipped"
        ));
    }
    ok
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Conserve (backups shared, GC exclusive) in four languages: a GC killed while it holds,
/// a Python backup stopped past its ttl, a `lease run` backup stopped with its watchdog and
/// command past its ttl, a Node GC's wall clock stepped back 5 minutes and forth again.
pub fn conserve(run: &Run, p: &Params) -> Notes {
    let lock = "conserve";
    let mut notes = vec![];
    let reader = json!({ "mode": "shared", "role": "reader", "data": "conserve-data" });
    let writer = json!({ "role": "writer", "data": "conserve-data", "hold_ms": 500 });
    let mut names = vec![
        run.spawn(
            Lang::Cli,
            with(spec(lock, "b-cli", "shared", 4, p), reader.clone()),
            false,
        ),
        run.spawn(
            Lang::Python,
            with(spec(lock, "b-py", "shared", 4, p), reader.clone()),
            false,
        ),
        run.spawn(
            Lang::Node,
            with(spec(lock, "b-node", "shared", 4, p), reader),
            false,
        ),
        run.spawn(
            Lang::Rust,
            with(spec(lock, "gc-rs", "exclusive", 3, p), writer.clone()),
            false,
        ),
        run.spawn(
            Lang::Node,
            with(spec(lock, "gc-node", "exclusive", 3, p), writer.clone()),
            true,
        ),
    ];
    if granted(run, "conserve/gc-rs", 1, &mut notes) {
        sleep_ms(200);
        run.kill("conserve/gc-rs");
        names.push(run.spawn(
            Lang::Rust,
            with(spec(lock, "gc-rs2", "exclusive", 2, p), writer),
            false,
        ));
    }
    if granted(run, "conserve/gc-node", 1, &mut notes) {
        run.clock_step("conserve/gc-node", -300_000);
    }
    for (who, what) in [("conserve/b-py", "process"), ("conserve/b-cli", "all")] {
        if granted(run, who, 2, &mut notes) {
            sleep_ms(100);
            run.stop(who, what);
            std::thread::sleep(p.pause(run));
            run.cont(who);
        }
    }
    if granted(run, "conserve/gc-node", 2, &mut notes) {
        run.clock_step("conserve/gc-node", 0);
    }
    run.finish(&names, p.deadline);
    notes
}

/// A semaphore of 2 permits, four languages: one holder killed, two wall clocks stepped 5
/// minutes ahead and back.
pub fn semaphore(run: &Run, p: &Params) -> Notes {
    let lock = "semaphore";
    let mut notes = vec![];
    let sem = json!({ "permits": 2, "hold_ms": 500, "acts": 2, "pause_ms": 100 });
    let s = |who: &str, n| with(spec(lock, who, "shared", n, p), sem.clone());
    let mut names = vec![
        run.spawn(Lang::Rust, s("s-rs", 3), false),
        run.spawn(Lang::Python, s("s-py", 3), false),
        run.spawn(Lang::Node, s("s-node", 3), true),
        run.spawn(Lang::Cli, s("s-cli", 3), true),
    ];
    if granted(run, "semaphore/s-node", 1, &mut notes) {
        run.clock_step("semaphore/s-node", 300_000);
    }
    if granted(run, "semaphore/s-cli", 1, &mut notes) {
        run.clock_step("semaphore/s-cli", -300_000);
    }
    if granted(run, "semaphore/s-py", 2, &mut notes) {
        sleep_ms(100);
        run.kill("semaphore/s-py");
        names.push(run.spawn(Lang::Python, s("s-py2", 1), false));
    }
    run.finish(&names, p.deadline);
    notes
}

/// Byte ranges of one object, overlapping and disjoint, each writer writing the one object
/// with fenced writes: a live holder is never fenced by a disjoint range's write (issue 22
/// item 4). A Node writer stopped past its ttl.
pub fn ranges(run: &Run, p: &Params) -> Notes {
    let lock = "ranges";
    let mut notes = vec![];
    let r = |who: &str, range: &str, role: &str| {
        with(
            spec(lock, who, "exclusive", 3, p),
            json!({ "scope": format!("range:{range}"), "role": role, "data": "ranges-data",
                    "hold_ms": 500, "pause_ms": 100 }),
        )
    };
    let names = vec![
        run.spawn(Lang::Rust, r("r0-rs", "0..100", "writer"), false),
        run.spawn(Lang::Python, r("r1-py", "50..150", "writer"), false),
        run.spawn(Lang::Node, r("r2-node", "100..200", "writer"), false),
        run.spawn(Lang::Cli, r("r3-cli", "200..300", "none"), false),
        run.spawn(Lang::Rust, r("r4-rs", "250..400", "writer"), false),
    ];
    if granted(run, "ranges/r2-node", 1, &mut notes) {
        sleep_ms(100);
        run.stop("ranges/r2-node", "process");
        std::thread::sleep(p.pause(run));
        run.cont("ranges/r2-node");
    }
    run.finish(&names, p.deadline);
    notes
}

/// A plain lease (Rust and Python racing for it) becomes a queued lock mid-run when a Node
/// reader and a `lease run --queue` arrive; the Rust lease holder is killed later.
pub fn convert(run: &Run, p: &Params) -> Notes {
    let lock = "convert";
    let mut notes = vec![];
    let plain = json!({ "queue": false, "hold_ms": 300, "acts": 2, "pause_ms": 150 });
    let mut names = vec![
        run.spawn(
            Lang::Rust,
            with(spec(lock, "l-rs", "exclusive", 5, p), plain.clone()),
            false,
        ),
        run.spawn(
            Lang::Python,
            with(spec(lock, "l-py", "exclusive", 5, p), plain.clone()),
            false,
        ),
    ];
    if granted(run, "convert/l-rs", 2, &mut notes) {
        names.push(run.spawn(Lang::Node, spec(lock, "q-node", "shared", 3, p), false));
        names.push(run.spawn(Lang::Cli, spec(lock, "q-cli", "exclusive", 3, p), false));
    }
    if granted(run, "convert/l-rs", 4, &mut notes) {
        sleep_ms(100);
        run.kill("convert/l-rs");
        names.push(run.spawn(
            Lang::Rust,
            with(spec(lock, "l-rs2", "exclusive", 2, p), plain),
            false,
        ));
    }
    run.finish(&names, p.deadline);
    notes
}

/// Two participants, the first holding long: `inject` is done once it holds and the other
/// has joined.
fn holder_and_waiters(
    run: &Run,
    p: &Params,
    lock: &str,
    holder: Lang,
    waiters: &[(Lang, &str)],
    waiter_spec: Value,
    inject: impl FnOnce(&Run) -> Result<(), String>,
) -> Notes {
    let mut notes = vec![];
    let long = json!({ "iterations": 1, "hold_ms": 8000, "acts": 16 });
    let mut names = vec![run.spawn(
        holder,
        with(spec(lock, "h", "exclusive", 1, p), long),
        false,
    )];
    if granted(run, &format!("{lock}/h"), 1, &mut notes) {
        for (lang, who) in waiters {
            let s = with(spec(lock, who, "exclusive", 1, p), waiter_spec.clone());
            names.push(run.spawn(*lang, s, false));
        }
        for n in &names[1..] {
            run.wait_for(n, "request", 1, WAIT);
        }
        sleep_ms(1000); // they have joined the queue
        if let Err(why) = inject(run) {
            notes.push(format!("{NOT_INJECTED}: {lock}: {why}"));
        }
    }
    run.finish(&names, p.deadline);
    notes
}

/// Issue 22 item 1: the lock's record deleted (by hand, or an age-based lifecycle rule) while
/// a Rust holder holds and a Python waiter waits.
pub fn deleted_record(run: &Run, p: &Params) -> Notes {
    let lock = "deleted-record";
    holder_and_waiters(
        run,
        p,
        lock,
        Lang::Rust,
        &[(Lang::Python, "w")],
        json!({ "hold_ms": 500 }),
        |run| run.delete_record(lock),
    )
}

/// Issue 22 item 1's bound: the record deleted while a Rust holder holds, just after one of
/// its renewals, then a newcomer (a Rust process that never saw the record) makes it again and
/// is granted at once. The holder must stop believing within `ttl/3 + ttl/6` of the deletion
/// (docs/protocol.md §10, "Whatever is deleted"); the checker holds it to that.
pub fn deleted_record_newcomer(run: &Run, p: &Params) -> Notes {
    newcomer(run, p, "deleted-record-new", json!({}))
}

/// The negative control of `deleted-record-new`: the same, with a holder that never confirms
/// the record after its grant (`Mutant::QueueHolderSkipsConfirmation`, the bug of issue 22 item
/// 1 brought back in its process): it believes on beside the newcomer, and the checker must
/// report the two conflicting grants (`main.rs` fails the run if it does not).
pub fn control_deleted_record(run: &Run, p: &Params) -> Notes {
    let mutant = json!({ "mutant": "QueueHolderSkipsConfirmation" });
    newcomer(run, p, "control-deleted-record", mutant)
}

fn newcomer(run: &Run, p: &Params, lock: &str, holder_extra: Value) -> Notes {
    let mut notes = vec![];
    let holder = format!("{lock}/h");
    let long = json!({ "iterations": 1, "hold_ms": 8000, "acts": 40 });
    let mut names = vec![run.spawn(
        Lang::Rust,
        with(with(spec(lock, "h", "exclusive", 1, p), long), holder_extra),
        false,
    )];
    if granted(run, &holder, 1, &mut notes) {
        // Right after a renewal (its confirmation of the record): the newcomer is granted
        // before the holder's next one, and the overlap is as long as the protocol allows.
        let renewals = run.count(&holder, "renewed");
        run.wait_for(&holder, "renewed", renewals + 1, WAIT);
        match run.delete_record(lock) {
            Ok(()) => names.push(run.spawn(
                Lang::Rust,
                with(
                    spec(lock, "n", "exclusive", 1, p),
                    json!({ "hold_ms": 2000, "acts": 8 }),
                ),
                false,
            )),
            Err(why) => notes.push(format!("{NOT_INJECTED}: {lock}: {why}")),
        }
    }
    run.finish(&names, p.deadline);
    notes
}

/// Sessions deleted by hand: the Node holder's, and a Python waiter's (which then gives up);
/// a Rust waiter is served once the holder is proven gone.
pub fn deleted_session(run: &Run, p: &Params) -> Notes {
    let lock = "deleted-session";
    holder_and_waiters(
        run,
        p,
        lock,
        Lang::Node,
        &[(Lang::Rust, "w"), (Lang::Python, "w2")],
        json!({ "hold_ms": 500 }),
        |run| run.delete_sessions(lock, &["deleted-session/h", "deleted-session/w2"]),
    )
}

/// Issue 22 item 3: the record rewritten as a newer version could write it (a waiter of a
/// mode this version does not know) while a Rust holder holds and a Node waiter waits.
pub fn newer_format(run: &Run, p: &Params) -> Notes {
    let lock = "newer-format";
    holder_and_waiters(
        run,
        p,
        lock,
        Lang::Rust,
        &[(Lang::Node, "w")],
        json!({ "hold_ms": 500, "wait_ms": 25_000 }),
        |run| run.newer_format(lock),
    )
}

/// Issue 22 item 5: an exclusive Rust writer reads the data and is stopped past its ttl
/// before its conditional fenced write; readers in Python, Node and Rust get shared grants
/// with higher tokens and read; the writer resumes and writes. Their data must not change
/// while they hold.
pub fn zombie(run: &Run, p: &Params) -> Notes {
    let lock = "zombie";
    let mut notes = vec![];
    let data = json!({ "data": "zombie-data" });
    let z = with(
        spec(lock, "writer", "exclusive", 1, p),
        with(data.clone(), json!({ "role": "writer", "gate": true })),
    );
    let zombie = run.spawn(Lang::Rust, z, false);
    let mut names = vec![zombie.clone()];
    if run.read_line(&zombie, WAIT).as_deref() != Some("gate") {
        notes.push("the writer never reached its gate".into());
        run.finish(&names, p.deadline);
        return notes;
    }
    let reader = with(
        data,
        json!({ "mode": "shared", "role": "reader", "iterations": 1, "hold_ms": 5000,
                "acts": 10 }),
    );
    for (lang, who) in [
        (Lang::Python, "r-py"),
        (Lang::Node, "r-node"),
        (Lang::Rust, "r-rs"),
    ] {
        names.push(run.spawn(
            lang,
            with(spec(lock, who, "shared", 1, p), reader.clone()),
            false,
        ));
    }
    for n in &names[1..] {
        run.wait_for(n, "request", 1, WAIT);
    }
    sleep_ms(800);
    run.stop(&zombie, "process");
    let limit = p.pause(run) + WAIT;
    let all = names[1..]
        .iter()
        .all(|n| run.wait_for(n, "grant", 1, limit));
    if !all {
        notes.push("the readers were not all granted while the writer was stopped".into());
    }
    sleep_ms(1200); // they read
    run.cont(&zombie);
    run.write_line(&zombie, "go");
    run.finish(&names, p.deadline);
    notes
}

/// The negative control, run beside the others: a Node worker holds the lock now and then
/// while a Rust worker acts as if it held it without acquiring anything. The checker must
/// report them (`main.rs` fails the run if it does not): the logs of two languages, their
/// clocks and the whole pipeline can show an overlap.
pub fn control(run: &Run, p: &Params) -> Notes {
    let lock = "control";
    let names = vec![
        run.spawn(Lang::Node, spec(lock, "honest", "exclusive", 3, p), false),
        run.spawn(
            Lang::Rust,
            with(
                spec(lock, "rogue", "exclusive", 1, p),
                json!({ "rogue": true, "hold_ms": 4000, "acts": 40 }),
            ),
            false,
        ),
    ];
    run.finish(&names, p.deadline);
    vec![]
}

/// The takeover bound (issue 22 item 6), in a quiet moment: a Rust shared holder killed -9
/// at a given phase of its renewals, a Rust exclusive waiter behind it (lock `lock`).
pub fn takeover(run: &Run, p: &Params, lock: &str, phase_ms: u64) -> Notes {
    let mut notes = vec![];
    let holder = with(
        spec(lock, "holder", "shared", 1, p),
        json!({ "hold_ms": 60_000, "acts": 120 }),
    );
    let mut names = vec![run.spawn(Lang::Rust, holder, false)];
    let (holder, waiter) = (format!("{lock}/holder"), format!("{lock}/waiter"));
    if granted(run, &holder, 1, &mut notes) {
        let w = with(
            spec(lock, "waiter", "exclusive", 1, p),
            json!({ "hold_ms": 300 }),
        );
        names.push(run.spawn(Lang::Rust, w, false));
        run.wait_for(&waiter, "request", 1, WAIT);
        sleep_ms(1000 + phase_ms);
        run.kill(&holder);
    }
    run.finish(&names, p.deadline);
    notes
}
