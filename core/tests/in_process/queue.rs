//! Queued locks (docs/protocol.md §10) in simulated time, on the memory store: hand-over in
//! the releasing write, arrival order, shared and exclusive, permits, byte ranges, crashed
//! holders and waiters, lease records becoming queued locks, and what each operation costs.

#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::clock::Clock;
use lease::protocol::queue::QueueRecord;
use lease::protocol::view::unix_ms;
use lease::store::{Get, GetOptions, Store};
use lease::{ErrorKind, LostReason, Mode, Scope};

use crate::sim;
use sim::*;

/// The lock's record as stored.
async fn queue(w: &World, key: &str) -> QueueRecord {
    w.queue_record(key).await
}

#[tokio::test(start_paused = true)]
async fn a_release_hands_over_to_the_next_waiter_in_arrival_order_at_once() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &queued()).await.unwrap();
    let first = held.epoch();
    assert!(
        first > CLOCK_MS,
        "tokens start above the store's clock in ms"
    );
    let mut waiters = vec![];
    for (i, name) in ["b", "c", "d"].into_iter().enumerate() {
        let (c, _) = w.client(name, 10 + i as u64);
        waiters.push(spawn_acquire(&c, "job", queued().poll_interval(secs(30.0))));
        sleep(secs(0.5)).await;
    }
    let r = queue(&w, "job").await;
    assert_eq!(r.grants.len(), 1);
    assert_eq!(r.queue.len(), 3);
    let released_at = w.now();
    held.release().await.unwrap();
    let mut last = first;
    for (i, waiter) in waiters.into_iter().enumerate() {
        let lease = waiter.await.unwrap().unwrap();
        // Granted in the releasing write and woken in-process: no poll (30 s) in between.
        assert_eq!(w.now(), released_at, "waiter {i} waited for a poll");
        // (changed, issue 22) Above the last one and above the releaser's clock in ms: tokens
        // handed out by a conditional write start above the clock read after its read.
        assert!(lease.epoch() > last, "tokens grow with every grant");
        assert!(
            lease.epoch() > unix_ms(Clock::wall(&*w.clock)),
            "tokens start above the releaser's clock: {}",
            lease.epoch()
        );
        assert_eq!(lease.grant().unwrap().mode, Mode::Exclusive);
        last = lease.epoch();
        lease.release().await.unwrap();
    }
    let r = queue(&w, "job").await;
    assert!(r.grants.is_empty() && r.queue.is_empty(), "{r:?}");
    assert_eq!(
        w.keys_under("job.q/"),
        Vec::<String>::new(),
        "sessions left behind"
    );
}

/// Conserve: backups share the lock, garbage collection runs alone and is not starved by
/// backups that arrive after it.
#[tokio::test(start_paused = true)]
async fn readers_share_and_a_waiting_writer_stops_later_readers() {
    let w = World::new();
    let (c, _) = w.client("c", 1);
    let r1 = c.acquire("repo", &opts().shared()).await.unwrap();
    let r2 = c.acquire("repo", &opts().shared()).await.unwrap();
    assert_ne!(r1.epoch(), r2.epoch(), "every grant has its own token");
    let gc = spawn_acquire(&c, "repo", opts());
    sleep(secs(0.1)).await;
    let r3 = spawn_acquire(&c, "repo", opts().shared());
    sleep(secs(5.0)).await;
    assert!(!gc.is_finished() && !r3.is_finished());
    r1.release().await.unwrap();
    sleep(secs(1.0)).await;
    assert!(!gc.is_finished(), "the writer ran beside a reader");
    r2.release().await.unwrap();
    let gc = gc.await.unwrap().unwrap();
    assert!(gc.epoch() > r2.epoch());
    sleep(secs(5.0)).await;
    assert!(!r3.is_finished(), "a reader ran beside the writer");
    gc.release().await.unwrap();
    let r3 = r3.await.unwrap().unwrap();
    assert!(r3.epoch() > gc.epoch());
    // Fenced writes: a writer's token fences, a reader's is refused with a clear error.
    let e = r3.fenced_put("data", "x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("exclusive grant"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_never_grants_more_than_its_permits_and_serves_everyone() {
    let w = World::new();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(vec![]));
    let mut tasks = vec![];
    for i in 0..10u64 {
        let (c, _) = w.client(&format!("w{i}"), 100 + i);
        let (running, most, order) = (running.clone(), most.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            sleep(secs(0.01 * i as f64)).await;
            let lease = c.acquire("pool", &opts().permits(3)).await.unwrap();
            order.lock().unwrap().push(i);
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            lease.ensure_held(Duration::ZERO).unwrap();
            sleep(secs(1.0 + (i % 3) as f64)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            lease.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 3);
    assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
    let (c, _) = w.client("x", 9);
    let e = c.acquire("pool", &opts().permits(4)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("3 permits"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn disjoint_byte_ranges_go_together_and_overlapping_ones_wait() {
    let w = World::new();
    let (c, _) = w.client("c", 1);
    let range = |a, b| opts().scope(Scope::range(a, b).unwrap());
    let a = c.acquire("obj", &range(0, 100)).await.unwrap();
    let b = c.acquire("obj", &range(100, 200)).await.unwrap();
    let overlapping = spawn_acquire(&c, "obj", range(50, 150));
    sleep(secs(0.1)).await;
    let d = c
        .acquire("obj", &range(300, 400).wait(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        c.acquire("obj", &range(90, 110).wait(Duration::ZERO))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Held
    );
    a.release().await.unwrap();
    sleep(secs(3.0)).await;
    assert!(!overlapping.is_finished());
    b.release().await.unwrap();
    let c_lease = overlapping.await.unwrap().unwrap();
    assert_eq!(
        c_lease.grant().unwrap().scope,
        Scope::Range {
            start: 50,
            end: 150
        }
    );
    d.release().await.unwrap();
    c_lease.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holder_is_removed_within_the_bound_never_before_its_deadline() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &queued()).await.unwrap();
    sleep(secs(3.5)).await; // just after the session's first renewal
    a_conn.faults().set_unavailable(true);
    let deadline = w.now() + held.remaining();
    let last_write = deadline - TTL;
    let got = b.acquire("job", &queued().wait(secs(600.0))).await.unwrap();
    let took_over = w.now();
    assert!(
        took_over >= deadline,
        "granted before the holder's deadline"
    );
    let bound = TTL + GRACE + RESOLUTION + POLL;
    assert!(
        took_over - last_write <= bound + secs(0.5),
        "took {:?} after the last write, bound {bound:?}",
        took_over - last_write
    );
    assert_eq!(held.lost_reason(), Some(LostReason::Expired));
    assert!(got.epoch() > held.epoch());
    assert_eq!(
        held.release().await.unwrap_err().kind(),
        ErrorKind::Lost,
        "the crashed holder's work may have overlapped"
    );
    got.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_waiter_is_granted_in_turn_then_removed() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    let (c, _) = w.client("c", 3);
    let held = a.acquire("job", &queued()).await.unwrap();
    let dead = spawn_acquire(&b, "job", queued());
    sleep(secs(0.5)).await;
    let live = spawn_acquire(&c, "job", queued());
    sleep(secs(0.5)).await;
    // B "crashes": nothing it sends arrives any more.
    b_conn.faults().set_unavailable(true);
    dead.abort();
    let crashed_at = w.now();
    sleep(secs(1.0)).await;
    held.release().await.unwrap();
    let got = live.await.unwrap().unwrap();
    let waited = w.now() - crashed_at;
    assert!(
        waited <= TTL + GRACE + RESOLUTION + POLL + secs(1.0),
        "waited {waited:?} for a dead waiter"
    );
    let r = queue(&w, "job").await;
    assert_eq!(r.grants.len(), 1, "{r:?}");
    got.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn try_once_and_a_wait_that_ends_leave_no_trace() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    let held = a.acquire("job", &queued()).await.unwrap();
    let before = queue(&w, "job").await;
    b_conn.reset_stats();
    let e = b
        .acquire("job", &queued().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held, "{e}");
    assert!(e.to_string().contains("held by"), "{e}");
    assert_eq!(queue(&w, "job").await, before, "a try joined the queue");
    let s = b_conn.stats();
    assert_eq!(
        (s.gets, s.puts),
        (2, 0),
        "a try costs a read of the record, and one of the holder's session to name it: {s:?}"
    );
    let e = b
        .acquire("job", &queued().wait(secs(5.0)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let r = queue(&w, "job").await;
    assert_eq!(r.queue.len(), 0, "the timed-out waiter stayed in the queue");
    assert_eq!(w.keys_under("job.q/").len(), 1, "only the holder's session");
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_record_becomes_a_queued_lock_once_free_and_then_everyone_queues() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let lease = a.acquire("job", &opts()).await.unwrap();
    let reader = spawn_acquire(&b, "job", opts().shared());
    sleep(secs(3.0)).await;
    assert!(
        !reader.is_finished(),
        "a reader got in beside a lease holder"
    );
    lease.release().await.unwrap();
    let reader = reader.await.unwrap().unwrap();
    assert!(
        reader.epoch() > lease.epoch(),
        "tokens start above the lease's epoch"
    );
    // A plain exclusive request on a queued lock queues, and is granted in the hand-over.
    let writer = spawn_acquire(&a, "job", opts());
    sleep(secs(1.0)).await;
    assert_eq!(queue(&w, "job").await.queue.len(), 1);
    reader.release().await.unwrap();
    let writer = writer.await.unwrap().unwrap();
    assert!(writer.grant().is_some());
    assert!(writer.epoch() > reader.epoch());
    writer.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn request_costs() {
    // A key of its own: a release by another test of this process (on another memory store
    // with the same URL) would wake this test's waiter and add reads.
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    // Acquire a free lock: session GET + PUT, record GET + Create + the settling PUT (a
    // record made where none is grants nobody: issue 22, docs/protocol.md §10 "Tokens").
    let held = a.acquire("costs", &queued()).await.unwrap();
    let s = a_conn.stats();
    assert_eq!((s.gets, s.puts), (2, 3), "acquire: {s:?}");
    // A holder renews its session (1 PUT per renew interval) and confirms the lock's record
    // after each renewal (1 GET, a 304 while unchanged); it never writes the record.
    a_conn.reset_stats();
    let record_before = queue(&w, "costs").await;
    sleep(TTL + secs(0.1)).await;
    let s = a_conn.stats();
    assert_eq!(
        (s.gets, s.not_modified, s.puts),
        (3, 3, 3),
        "renewals over one ttl: {s:?}"
    );
    assert_eq!(
        queue(&w, "costs").await,
        record_before,
        "renewals wrote the record"
    );
    // A waiter: 1 GET of the record per poll (not modified), its own renewals, and at the head,
    // about one read of the holder's session per ttl.
    let waiter = spawn_acquire(&b, "costs", queued());
    sleep(secs(1.0)).await;
    b_conn.reset_stats();
    sleep(secs(30.0)).await;
    let s = b_conn.stats();
    assert_eq!(s.puts, 9, "waiter renewals over 30 s: {s:?}");
    // 30 polls (1 s ± 20%), and a check of the holder's session whenever a takeover rule could
    // next fire: the holder renews every 3.3 s, so each check finds a version at most 3.3 s old
    // and the next is due ttl + grace later, about 7.7 s: 4 or 5 in 30 s.
    assert!(
        (32..=38).contains(&s.gets),
        "waiter reads over 30 s (about 30 polls + 4 checks of the holder): {s:?}"
    );
    assert!(
        s.not_modified >= s.gets - 6,
        "polls of an unchanged record are 304s: {s:?}"
    );
    // Release: 1 GET + 1 PUT of the record, 1 PUT (released) + 1 DELETE of the session.
    a_conn.reset_stats();
    held.release().await.unwrap();
    let s = a_conn.stats();
    assert_eq!((s.gets, s.puts, s.deletes), (1, 2, 1), "release: {s:?}");
    waiter.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn path_scopes_conflict_only_along_one_branch() {
    let w = World::new();
    let (c, _) = w.client("c", 1);
    let path = |p| opts().scope(Scope::path(p).unwrap());
    let users = c.acquire("db", &path("tables/users")).await.unwrap();
    let logs = c
        .acquire("db", &path("logs").wait(Duration::ZERO))
        .await
        .unwrap();
    let usersx = c
        .acquire("db", &path("tables/usersx").wait(Duration::ZERO))
        .await
        .unwrap();
    for conflicting in ["tables", "tables/users/2026"] {
        let e = c
            .acquire("db", &path(conflicting).wait(Duration::ZERO))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Held, "{conflicting}: {e}");
    }
    let readers = c
        .acquire("db", &path("tables/users").shared().wait(Duration::ZERO))
        .await;
    assert_eq!(readers.unwrap_err().kind(), ErrorKind::Held);
    let all = spawn_acquire(&c, "db", path("tables"));
    sleep(secs(1.0)).await;
    users.release().await.unwrap();
    sleep(secs(1.0)).await;
    assert!(!all.is_finished(), "tables granted beside tables/usersx");
    usersx.release().await.unwrap();
    let all = all.await.unwrap().unwrap();
    logs.release().await.unwrap();
    all.release().await.unwrap();
}

/// The model checker's finding, through the driver: a backup holds and dies, GC waits behind it
/// and dies, a live backup waits behind GC. It checks GC (the nearest earlier waiter competing
/// with it), removes it once its session is gone, then checks the dead backup and removes it.
#[tokio::test(start_paused = true)]
async fn a_dead_waiter_behind_a_dead_holder_does_not_strand_the_line() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (g, g_conn) = w.client("g", 2);
    let (c, _) = w.client("c", 3);
    let backup = a.acquire("repo", &opts().shared()).await.unwrap();
    let gc = spawn_acquire(&g, "repo", opts().queue());
    sleep(secs(0.5)).await;
    let live = spawn_acquire(&c, "repo", opts().shared());
    sleep(secs(0.5)).await;
    assert_eq!(queue(&w, "repo").await.queue.len(), 2);
    // Both die: nothing they send arrives any more.
    a_conn.faults().set_unavailable(true);
    g_conn.faults().set_unavailable(true);
    gc.abort();
    let died = w.now();
    let got = live.await.unwrap().unwrap();
    let waited = w.now() - died;
    assert!(
        waited <= 2 * (TTL + GRACE + RESOLUTION + POLL) + secs(1.0),
        "waited {waited:?} for two dead participants"
    );
    assert!(got.epoch() > backup.epoch());
    // GC is gone; the dead backup blocks no other reader, so it stays listed until someone it
    // does block comes and checks it.
    let r = queue(&w, "repo").await;
    assert_eq!((r.grants.len(), r.queue.len()), (2, 0), "{r:?}");
    let (d, _) = w.client("d", 4);
    let writer = spawn_acquire(&d, "repo", opts());
    sleep(secs(1.0)).await;
    got.release().await.unwrap();
    let writer = writer.await.unwrap().unwrap();
    let r = queue(&w, "repo").await;
    assert_eq!(r.grants.len(), 1, "the dead backup was not removed: {r:?}");
    writer.release().await.unwrap();
}

/// Shared sessions (docs/protocol.md §10, issue 24): a grant
/// attached to a shared session is shown by `status` from that session (here a live lease at
/// `.lease-sessions/SID`), not from `KEY.q/ID`; and `break` refuses it, naming why, and writes
/// nothing — breaking its session would break every grant of its process on the store.
#[tokio::test(start_paused = true)]
async fn a_grant_on_a_shared_session_is_shown_by_that_session_and_not_broken_alone() {
    const SID: &str = "0123456789abcdef0123456789abcdef";
    let w = World::new();
    let (op, _) = w.client("op", 9);
    // The session, just renewed by its owner (whose holder id is the session's id).
    w.store.overwrite_raw(
        &format!(".lease-sessions/{SID}"),
        format!(
            r#"{{"format":1,"epoch":1,"rev":2,"state":"held","ttl_ms":10000,"holder":{{"id":"{SID}","label":"shard-owner"}}}}"#
        ),
    );
    let record = format!(
        r#"{{"format":2,"epoch":{e},"rev":1,"requires":["session"],"grants":[{{"id":"{SID}.1","ttl_ms":10000,"token":{e},"session":""}}],"queue":[]}}"#,
        e = CLOCK_MS + 1
    );
    w.store.overwrite_raw("shard", record.clone());
    let s = op.status("shard").await.unwrap().to_json();
    assert_eq!(s["state"], "held", "{s}");
    let holders = s["holders"].as_array().cloned().unwrap_or_default();
    assert!(
        holders
            .iter()
            .any(|h| h["holder"]["label"] == "shard-owner"),
        "the shared session's holder is not shown: {s}"
    );
    let e = op
        .break_lease("shard", None, lease::BreakMode::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("shared session"), "{e}");
    let now = w
        .store
        .connection()
        .get("shard", GetOptions::default())
        .await
        .unwrap();
    let Get::Found(o) = now else {
        panic!("{now:?}")
    };
    assert_eq!(o.bytes.as_deref(), Some(record.as_bytes()), "break wrote");
}

/// Issue 23, "Yield on request": an operator's request reaches the holder it names at its next
/// confirmation, as `yield_request()` (not a loss: it still holds); a reader that shares the
/// lock and was not named is told nothing; the holder's release grants the `to` waiter before
/// the one that came first, and the request is gone from the record with the tenure it named.
#[tokio::test(start_paused = true)]
async fn a_yield_request_reaches_the_named_holder_and_its_release_hands_over_to_the_to() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &queued()).await.unwrap();
    assert_eq!(held.yield_requested(), None);
    let (b, _) = w.client("b", 2);
    let first = spawn_acquire(&b, "job", queued());
    sleep(secs(0.5)).await;
    let (c, _) = w.client("c", 3);
    let second = spawn_acquire(&c, "job", queued());
    sleep(secs(0.5)).await;
    let to = queue(&w, "job").await.queue[1].id.clone();
    let (op, _) = w.client("op", 4);
    let ask = lease::YieldAsk {
        by: "ops".into(),
        to: Some(to[..8].to_string()),
        reason: Some("deploy".into()),
    };
    let asked = op.ask_yield("job", ask.clone()).await.unwrap().unwrap();
    assert_eq!(asked.tokens, vec![held.epoch()]);
    assert_eq!(asked.to.as_deref(), Some(to.as_str()), "the whole id");
    // Asking again changes nothing (the same request stands).
    assert_eq!(op.ask_yield("job", ask).await.unwrap().unwrap(), asked);
    // Learned at the holder's next confirmation (within ttl/3): not a loss.
    let told = tokio::time::timeout(secs(20.0), held.yield_request())
        .await
        .expect("the holder was told");
    assert_eq!(
        (told.by.as_str(), told.reason.as_deref()),
        ("ops", Some("deploy"))
    );
    assert_eq!(held.yield_requested(), Some(told));
    held.ensure_held(Duration::ZERO).unwrap();
    held.release().await.unwrap();
    let granted = second.await.unwrap().unwrap();
    assert!(granted.epoch() > held.epoch());
    assert!(queue(&w, "job").await.yield_request.is_none());
    // The next holder was named by no request: it is not told.
    sleep(secs(20.0)).await;
    assert_eq!(granted.yield_requested(), None);
    granted.release().await.unwrap();
    first.await.unwrap().unwrap().release().await.unwrap();
    // Nobody holds: nothing to ask.
    let nothing = lease::YieldAsk {
        by: "ops".into(),
        to: None,
        reason: None,
    };
    assert_eq!(op.ask_yield("job", nothing.clone()).await.unwrap(), None);
}

/// Issue 23, plain leases: a holder that listens is told a request for its epoch after its
/// next renewal (not a loss), once; one that does not listen reads nothing more than its
/// renewals; the next tenure is not told the request of the one before; a `to` is refused,
/// and a released or absent lease asks nobody (nothing written).
#[tokio::test(start_paused = true)]
async fn a_plain_leases_listening_holder_is_told_a_request_for_its_epoch_and_no_later_holder_is() {
    let w = World::new();
    let (a, conn_a) = w.client("a", 1);
    let (op, _) = w.client("op", 4);
    let ask = |reason: &str| lease::YieldAsk {
        by: "ops".into(),
        to: None,
        reason: Some(reason.into()),
    };
    assert_eq!(op.ask_yield("gc", ask("x")).await.unwrap(), None, "absent");

    // Not listening: its renewals read nothing (an asker's object is not even looked at).
    let quiet = a.acquire("quiet", &opts()).await.unwrap();
    op.ask_yield("quiet", ask("x")).await.unwrap().unwrap();
    conn_a.reset_stats();
    sleep(TTL).await;
    let st = conn_a.stats();
    assert_eq!((st.gets, st.not_modified), (0, 0), "{st:?}");
    quiet.release().await.unwrap();

    let held = a.acquire("gc", &opts()).await.unwrap();
    let told = {
        let held = held.clone();
        tokio::spawn(async move { held.yield_request().await })
    };
    sleep(secs(0.1)).await;
    let mut to = ask("deploy");
    to.to = Some("3f2a".into());
    let e = op.ask_yield("gc", to).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    let asked = op.ask_yield("gc", ask("deploy")).await.unwrap().unwrap();
    assert_eq!(asked.tokens, vec![held.epoch()]);
    assert_eq!(w.keys_under("gc"), vec!["gc", "gc.yield"]);
    let told = tokio::time::timeout(TTL, told)
        .await
        .expect("told")
        .unwrap();
    assert_eq!(
        (told.by.as_str(), told.to.as_deref(), told.reason.as_deref()),
        ("ops", None, Some("deploy"))
    );
    held.ensure_held(Duration::ZERO).unwrap();
    // Told once: later renewals read it again (304) and tell nothing new.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    held.on_yield(move |y| tx.send(y.clone()).unwrap());
    sleep(TTL).await;
    assert_eq!(rx.try_recv().unwrap().reason.as_deref(), Some("deploy"));
    assert!(rx.try_recv().is_err(), "once");
    held.release().await.unwrap();

    // The next tenure listens and is not told the request for the one before.
    let next = a.acquire("gc", &opts()).await.unwrap();
    let mut changes = next.yield_changes();
    sleep(TTL).await;
    assert!(changes.borrow_and_update().is_none());
    next.release().await.unwrap();
    assert_eq!(
        op.ask_yield("gc", ask("x")).await.unwrap(),
        None,
        "released"
    );
}

/// Issue 23: `Lease::on_yield` calls its callback once per request that names the grant, over
/// many confirmations (a request stands in the record until the tenure ends); a later request
/// that replaces it is a new call. A callback registered after a request was learned is called
/// for it at once; one that panics is logged and still called for the next request.
#[tokio::test(start_paused = true)]
async fn on_yield_is_called_once_per_request_that_names_the_grant() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &queued()).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let s = seen.clone();
    held.on_yield(move |y| s.lock().unwrap().push(y.reason.clone()));
    let panics = Arc::new(AtomicUsize::new(0));
    let p = panics.clone();
    held.on_yield(move |_| {
        p.fetch_add(1, Ordering::SeqCst);
        panic!("a user's callback panics");
    });
    let (op, _) = w.client("op", 2);
    let ask = |reason: &str| lease::YieldAsk {
        by: "ops".into(),
        to: None,
        reason: Some(reason.into()),
    };
    op.ask_yield("job", ask("one")).await.unwrap().unwrap();
    // Many renewals (ttl/3 each) confirm the same standing request: one call.
    sleep(secs(60.0)).await;
    assert_eq!(*seen.lock().unwrap(), vec![Some("one".to_string())]);
    let late = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let l = late.clone();
    held.on_yield(move |y| l.lock().unwrap().push(y.reason.clone()));
    sleep(secs(1.0)).await;
    assert_eq!(*late.lock().unwrap(), vec![Some("one".to_string())]);
    op.ask_yield("job", ask("two")).await.unwrap().unwrap();
    sleep(secs(60.0)).await;
    let both = vec![Some("one".to_string()), Some("two".to_string())];
    assert_eq!(*seen.lock().unwrap(), both);
    assert_eq!(*late.lock().unwrap(), both);
    assert_eq!(
        panics.load(Ordering::SeqCst),
        2,
        "a panic ends no deliveries"
    );
    held.ensure_held(Duration::ZERO).unwrap();
    held.release().await.unwrap();
}

/// Issue 23: a waiter with `ask_yield` asks the holder in its way once it waits, naming itself:
/// the holder is told (by the waiter's id, with its reason), steps aside by its release, and
/// that release grants the asker ahead of a waiter that came first. The request is written
/// once for the tenure, however many polls the waiter makes.
#[tokio::test(start_paused = true)]
async fn a_waiter_that_asks_to_yield_is_granted_by_the_holders_release_ahead_of_the_queue() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &queued()).await.unwrap();
    let (b, _) = w.client("b", 2);
    let first = spawn_acquire(&b, "job", queued());
    sleep(secs(0.5)).await;
    let (c, _) = w.client("c", 3);
    let asker = spawn_acquire(&c, "job", queued().ask_yield(Some("deploy")));
    let told = tokio::time::timeout(secs(20.0), held.yield_request())
        .await
        .expect("the holder was told");
    let r = queue(&w, "job").await;
    let c_id = r.queue[1].id.clone();
    assert_eq!(told.by, c_id);
    assert_eq!(told.to.as_deref(), Some(c_id.as_str()));
    assert_eq!(told.reason.as_deref(), Some("deploy"));
    let rev = r.rev;
    // Many polls later, nothing more was written.
    sleep(secs(30.0)).await;
    assert_eq!(queue(&w, "job").await.rev, rev);
    held.release().await.unwrap();
    let granted = asker.await.unwrap().unwrap();
    assert!(granted.epoch() > held.epoch());
    granted.release().await.unwrap();
    first.await.unwrap().unwrap().release().await.unwrap();
}

/// `ask_yield` implies a queued request; a reason without it, or too long, is refused.
#[tokio::test(start_paused = true)]
async fn a_yield_reason_without_ask_yield_or_too_long_is_refused_and_nothing_is_written() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let mut o = queued();
    o.yield_reason = Some("why".into());
    let e = a.acquire("job", &o).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("set ask_yield"), "{e}");
    // A plain lease's too (it asks nobody): refused, not ignored.
    let mut plain = opts();
    plain.yield_reason = Some("why".into());
    let e = a.acquire("job", &plain).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("set ask_yield"), "{e}");
    let long = "x".repeat(300);
    let e = a
        .acquire("job", &opts().ask_yield(Some(&long)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("at most 256 bytes"), "{e}");
    // A try never waits in the record, so it would ask nobody: refused, not ignored.
    let e = a
        .try_acquire("job", &opts().ask_yield(None))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("asks nobody"), "{e}");
    let e = a
        .acquire("job", &opts().ask_yield(None).wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("asks nobody"), "{e}");
    assert!(w.keys_under("job").is_empty(), "{:?}", w.keys_under("job"));
    // Alone, it is granted at once as a queued lock's grant (nothing to ask).
    let held = a.acquire("job", &opts().ask_yield(None)).await.unwrap();
    assert!(held.grant().is_some());
    held.release().await.unwrap();
}
