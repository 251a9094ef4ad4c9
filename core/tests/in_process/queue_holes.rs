//! The holes of queued locks found from outside (issue 22), one test per scenario, in simulated
//! time on the memory store. Each was written from the scenario and seen failing before its fix;
//! docs/protocol.md §10 says what the code does instead, with its bounds.

#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use lease::store::{Get, GetOptions, Store};
use lease::{ErrorKind, Lease, LeaseOptions, Scope};

use crate::sim;
use sim::*;

async fn raw(w: &World, key: &str) -> Option<bytes::Bytes> {
    match w.store.connection().get(key, GetOptions::default()).await {
        Ok(Get::Found(o)) => o.bytes,
        _ => None,
    }
}

/// The renew interval of the sessions (ttl/3) and their request timeout (half of it): how long
/// a holder may take to notice a change of the lock's record (docs/protocol.md §10, "Belief").
const RENEW: Duration = Duration::from_millis(3334);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1667);

/// Item 1: the lock's record is deleted while H holds and W waits. W saw the record; it must
/// not be granted while H still believes, and every token stays unique.
#[tokio::test(start_paused = true)]
async fn a_deleted_record_never_lets_a_waiter_in_beside_its_holder() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a
        .acquire("a_deleted_record_never_lets_a_waiter_in_", &queued())
        .await
        .unwrap();
    let waiter = spawn_acquire(&b, "a_deleted_record_never_lets_a_waiter_in_", queued());
    sleep(secs(1.0)).await;
    w.store
        .remove_raw("a_deleted_record_never_lets_a_waiter_in_");
    // H works on for 30 s, checking its lease every 50 ms: W never holds at the same time.
    for step in 0..600 {
        sleep(secs(0.05)).await;
        if waiter.is_finished() {
            assert!(
                !held.is_held(),
                "W was granted while H still believes it holds ({step} steps after the deletion)"
            );
            break;
        }
    }
    assert!(
        held.is_held(),
        "H lost its grant to a deletion nobody meant"
    );
    held.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert!(
        got.epoch() > held.epoch(),
        "token {} after {}",
        got.epoch(),
        held.epoch()
    );
    got.release().await.unwrap();
}

/// Item 1, a newcomer that never saw the record (a fresh process, a lifecycle rule that deleted
/// it): its grant is above every token handed out, the old holder notices within one renew
/// interval and a request timeout, and fenced writes refuse the old holder.
#[tokio::test(start_paused = true)]
async fn a_deleted_record_taken_by_a_newcomer_stops_the_old_holder_at_its_next_renewal() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (c, _) = w.client("c", 3);
    let old = a
        .acquire("a_deleted_record_taken_by_a_newcomer_sto", &queued())
        .await
        .unwrap();
    sleep(secs(1.0)).await;
    w.store
        .remove_raw("a_deleted_record_taken_by_a_newcomer_sto");
    let new = c
        .acquire(
            "a_deleted_record_taken_by_a_newcomer_sto",
            &queued().wait(Duration::ZERO),
        )
        .await
        .unwrap();
    let granted_at = w.now();
    assert!(new.epoch() > old.epoch(), "a token handed out again");
    new.fenced_put("data", "new holder").await.unwrap();
    let noticed = tokio::time::timeout(RENEW + REQUEST_TIMEOUT, old.lost()).await;
    let reason = noticed.unwrap_or_else(|_| {
        panic!(
            "the old holder still believes {:?} after the newcomer's grant",
            w.now() - granted_at
        )
    });
    assert!(
        reason.to_string().contains("record"),
        "the reason says what happened: {reason}"
    );
    let e = old.fenced_put("data", "zombie").await.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Fenced | ErrorKind::Lost),
        "{e}"
    );
    assert_eq!(
        &c.fenced_get("data").await.unwrap().unwrap().bytes[..],
        b"new holder"
    );
    new.release().await.unwrap();
}

/// Item 1: the record and every session deleted at once (a lifecycle rule on the prefix). A
/// newcomer that never saw the record may make it again and be granted at once; the old holder
/// stops at its next renewal: two holders believe at once for at most one renew interval plus
/// one request timeout after the deletion (the stated bound, docs/protocol.md §10), and no token
/// is handed out twice.
#[tokio::test(start_paused = true)]
async fn deleting_the_record_and_the_sessions_gives_two_holders_at_most_until_the_next_renewal() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let (c, _) = w.client("c", 3);
    let held = a
        .acquire("deleting_the_record_and_the_sessions_giv", &queued())
        .await
        .unwrap();
    let waiter = spawn_acquire(&b, "deleting_the_record_and_the_sessions_giv", queued());
    sleep(secs(1.0)).await;
    w.store
        .remove_raw("deleting_the_record_and_the_sessions_giv");
    for k in w.keys_under("deleting_the_record_and_the_sessions_giv.q/") {
        w.store.remove_raw(&k);
    }
    let deleted_at = w.now();
    let newcomer = spawn_acquire(
        &c,
        "deleting_the_record_and_the_sessions_giv",
        queued().wait(secs(60.0)),
    );
    let mut tokens = vec![held.epoch()];
    let (mut waiter, mut newcomer) = (Some(waiter), Some(newcomer));
    let mut leases: Vec<Lease> = vec![held];
    for _ in 0..1200 {
        sleep(secs(0.05)).await;
        for slot in [&mut waiter, &mut newcomer] {
            if slot.as_ref().is_some_and(|t| t.is_finished()) {
                if let Ok(l) = slot.take().unwrap().await.unwrap() {
                    assert!(
                        tokens.iter().all(|&t| l.epoch() > t),
                        "token {} after {tokens:?}",
                        l.epoch()
                    );
                    tokens.push(l.epoch());
                    leases.push(l);
                }
            }
        }
        let believers = leases.iter().filter(|l| l.is_held()).count();
        let since = w.now() - deleted_at;
        assert!(
            believers <= 1 || since <= RENEW + REQUEST_TIMEOUT,
            "{believers} exclusive holders believe at once {since:?} after the deletion"
        );
    }
    for l in leases {
        let _ = l.release().await;
    }
}

/// Item 2: H holds exclusively; shared waiters queue behind it until the queue is full. The
/// join that would not fit is refused up front with a typed error that states the limit, and
/// H's release, which grants every waiter, always fits.
#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_joins_up_front_and_a_release_always_fits() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("big", &queued()).await.unwrap();
    let long = "x".repeat(900);
    let mut waiters = vec![];
    let mut refused = None;
    for i in 0..1000 {
        let (c, _) = w.client(&format!("w{i}"), 100 + i as u64);
        let scope = Scope::path(&format!("{long}/{i}")).unwrap();
        let t = spawn_acquire(&c, "big", opts().shared().scope(scope));
        sleep(secs(0.05)).await;
        if t.is_finished() {
            refused = Some(t.await.unwrap().unwrap_err());
            break;
        }
        waiters.push(t);
    }
    let refused = refused.expect("the queue never filled up");
    // The holder's release grants every waiter in one write: it must fit.
    held.release().await.unwrap();
    for t in waiters.drain(..) {
        t.await.unwrap().unwrap().release().await.unwrap();
    }
    assert_eq!(refused.kind().as_str(), "queue_full", "{refused}");
    assert!(
        refused.to_string().contains("bytes"),
        "the error states the limit: {refused}"
    );
}

/// Item 3: a record written by a newer version (a mode this version does not know, or a newer
/// format) is never taken over as corrupt: a waiter fails with a typed error naming it, however
/// long it waits, and `break` refuses to write over it.
#[tokio::test(start_paused = true)]
async fn a_record_of_a_newer_format_or_mode_is_never_taken_over() {
    let w = World::new();
    let (b, _) = w.client("b", 2);
    let newer_mode = r#"{"format":2,"epoch":1767225600005,"rev":3,"grants":[{"id":"0123456789abcdef0123456789abcdef","mode":"intent","ttl_ms":10000,"token":1767225600005}],"queue":[]}"#;
    let newer_format = r#"{"format":3,"epoch":1767225600005,"rev":3,"locks":[]}"#;
    for (what, bytes) in [("mode", newer_mode), ("format", newer_format)] {
        w.store.overwrite_raw(
            "a_record_of_a_newer_format_or_mode_is_ne",
            bytes.to_string(),
        );
        let e = b
            .acquire(
                "a_record_of_a_newer_format_or_mode_is_ne",
                &queued().wait(secs(60.0)),
            )
            .await
            .map(|l| l.epoch())
            .unwrap_err();
        assert_eq!(e.kind().as_str(), "unsupported", "{what}: {e}");
        assert!(
            e.to_string().contains("newer"),
            "{what}: the error names it: {e}"
        );
        let e = b
            .acquire(
                "a_record_of_a_newer_format_or_mode_is_ne",
                &opts().wait(secs(60.0)),
            )
            .await
            .map(|l| l.epoch())
            .unwrap_err();
        assert_eq!(
            e.kind().as_str(),
            "unsupported",
            "{what}, a plain lease: {e}"
        );
        assert!(
            b.break_lease(
                "a_record_of_a_newer_format_or_mode_is_ne",
                None,
                lease::BreakMode::default()
            )
            .await
            .is_err(),
            "{what}: break wrote over it"
        );
        assert_eq!(
            raw(&w, "a_record_of_a_newer_format_or_mode_is_ne")
                .await
                .as_deref(),
            Some(bytes.as_bytes()),
            "{what}: the record was written over"
        );
    }
}

/// Item 6: the takeover bound on a store whose clock has whole seconds (S3's `Date` and
/// `Last-Modified`), at every phase of the holder's last renewal within its second: a crashed
/// shared holder is replaced at most ttl + grace + resolution + poll after its last renewal,
/// and never before its deadline.
#[tokio::test(start_paused = true)]
async fn the_takeover_bound_holds_with_a_whole_second_store_clock_at_every_phase() {
    let ttl = secs(2.0);
    let (grace, resolution, poll) = (secs(1.0), secs(1.0), secs(0.2));
    let bound = ttl + grace + resolution + poll;
    let o = LeaseOptions::new(ttl).poll_interval(poll);
    let mut worst = Duration::ZERO;
    // Every combination of: where the store's second falls, when the waiter joins, and when
    // the holder dies within its renew interval.
    for phase in 0..125 {
        let (second, join, death) = (phase % 5, (phase / 5) % 5, phase / 25);
        let w = World::new();
        w.store.set_clock_resolution(resolution);
        let (a, a_conn) = w.client("a", 1);
        let (b, b_conn) = w.client("b", 2);
        // Requests take a few milliseconds, as on a server on this machine.
        a_conn.faults().set_latency(secs(0.004));
        b_conn.faults().set_latency(secs(0.004));
        sleep(secs(0.2 * second as f64)).await;
        let held = a
            .acquire(
                "the_takeover_bound_holds_with_a_whole_se",
                &o.clone().shared(),
            )
            .await
            .unwrap();
        sleep(secs(0.13 * join as f64)).await;
        let waiter = spawn_acquire(&b, "the_takeover_bound_holds_with_a_whole_se", o.clone());
        sleep(secs(2.0 + 0.13 * death as f64)).await;
        a_conn.faults().set_unavailable(true);
        let deadline = w.now() + held.remaining();
        let last_write = deadline - ttl;
        let got = waiter.await.unwrap().unwrap();
        let at = w.now();
        assert!(at >= deadline, "phase {phase}: granted before the deadline");
        if at - last_write > worst {
            eprintln!(
                "phase {phase}: replaced {:?} after the last renewal",
                at - last_write
            );
        }
        worst = worst.max(at - last_write);
        got.release().await.unwrap();
    }
    assert!(
        worst <= bound,
        "replaced {worst:?} after the last renewal, bound {bound:?}"
    );
}

/// Item 7: a waiter whose session lapsed (its process paused, or the store unreachable past its
/// ttl) is told so, not that the store may be overloaded.
#[tokio::test(start_paused = true)]
async fn a_waiter_whose_session_lapsed_is_told_so() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    let held = a.acquire("lapse", &queued()).await.unwrap();
    // It keeps trying the store longer than its session lasts (as a paused process would).
    let waiter = spawn_acquire(&b, "lapse", queued().unavailable_timeout(secs(60.0)));
    sleep(secs(1.0)).await;
    b_conn.faults().set_unavailable(true);
    sleep(TTL + secs(1.0)).await;
    b_conn.faults().set_unavailable(false);
    let e = waiter.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(
        e.to_string().contains("session") && e.to_string().contains("lapsed"),
        "{e}"
    );
    held.release().await.unwrap();
}

/// Item 7: a holder whose session object was deleted is told that, not that the lock's record
/// was deleted.
#[tokio::test(start_paused = true)]
async fn a_holder_whose_session_was_deleted_is_told_so() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a
        .acquire("a_holder_whose_session_was_deleted_is_to", &queued())
        .await
        .unwrap();
    for k in w.keys_under("a_holder_whose_session_was_deleted_is_to.q/") {
        w.store.remove_raw(&k);
    }
    let reason = held.lost().await.to_string();
    assert!(
        reason.contains("session") && reason.contains("deleted"),
        "{reason}"
    );
}

/// Item 7: the "held" message shows the holder's scope, so a path or range conflict is clear.
#[tokio::test(start_paused = true)]
async fn the_held_message_names_the_scope_in_the_way() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let range = |x, y| opts().scope(Scope::range(x, y).unwrap());
    let held = a.acquire("obj", &range(0, 100)).await.unwrap();
    let e = b
        .acquire("obj", &range(50, 150).wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held);
    assert!(e.to_string().contains("bytes 0..100"), "{e}");
    held.release().await.unwrap();
}

/// Item 2 and issue 28 item 5: `break` on a queued lock, and `status` after it: the broken
/// holder is no longer shown as holding.
#[tokio::test(start_paused = true)]
async fn after_a_break_status_does_not_show_the_broken_holder_as_holding() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (op, _) = w.client("op", 9);
    let held = a
        .acquire("after_a_break_status_does_not_show_the_b", &queued())
        .await
        .unwrap();
    let before = op
        .break_lease(
            "after_a_break_status_does_not_show_the_b",
            None,
            lease::BreakMode::default(),
        )
        .await
        .unwrap();
    assert!(before.is_some(), "nothing was broken");
    let s = op
        .status("after_a_break_status_does_not_show_the_b")
        .await
        .unwrap()
        .to_json();
    assert_ne!(s["state"], "held", "{s}");
    let id = &held.holder().id;
    let holders = s["holders"].as_array().cloned().unwrap_or_default();
    assert!(
        holders.iter().all(|h| h["holder"]["id"] != id.as_str()),
        "the broken holder is listed as holding: {s}"
    );
    let _ = held.release().await;
}

/// Capacity (issue 22): a semaphore of 10 with 1,000 workers waiting, each with the largest
/// label and data: every join fits (who they are lives in their sessions), every join and leave
/// is one bounded write, and a release hands over in order.
#[tokio::test(start_paused = true)]
async fn a_semaphore_of_ten_takes_a_thousand_waiters_whatever_their_data() {
    let w = World::new();
    let label = "l".repeat(lease::record::MAX_LABEL_LEN);
    let data = "d".repeat(lease::record::MAX_DATA_LEN);
    let o = opts()
        .permits(10)
        .label(label)
        .data(data)
        .poll_interval(secs(30.0));
    let mut tasks = vec![];
    for i in 0..1010u64 {
        let (c, _) = w.client(&format!("w{i}"), 1000 + i);
        tasks.push(spawn_acquire(&c, "thousand", o.clone()));
        sleep(secs(0.001)).await;
    }
    sleep(secs(0.5)).await;
    let record = raw(&w, "thousand").await.unwrap();
    let r = match lease::protocol::queue::classify(&record) {
        lease::protocol::queue::Classified::Queue(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!((r.grants.len(), r.queue.len()), (10, 1000));
    assert!(
        record.len() < 100_000,
        "{} bytes for 1,010 participants",
        record.len()
    );
    let mut held = vec![];
    for t in tasks.drain(..10) {
        held.push(t.await.unwrap().unwrap());
    }
    // The first holder leaves: the 11th arrival is granted in the same write.
    held.remove(0).release().await.unwrap();
    let next = tasks.remove(0).await.unwrap().unwrap();
    assert!(next.epoch() > held.iter().map(Lease::epoch).max().unwrap());
    for t in tasks {
        t.abort();
    }
}
