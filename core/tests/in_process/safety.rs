//! Regression tests for the safety holes found from outside (issue 11), in simulated time.
//! Each test plays the scenario that was reproduced; the item number is in its comment.

#![allow(clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::record::{Record, RecordState};
use lease::store::memory::{Fault, Op};
use lease::{BreakMode, ErrorKind, FencingGate, LeaseOptions, LeaseState, LostReason};

use crate::sim;
use sim::*;

/// Item 1. The first create of an acquisition is stuck in the network past the ttl; the write
/// gives up, the loop reads again (slowly: the read is answered late) and sends another create,
/// which fails because the first one has landed meanwhile. The read-back must not take the
/// first write for the second one, with the second one's (later) send time: the holder's
/// deadline would then run past the moment a waiter may take over by the store's clock.
#[tokio::test(start_paused = true)]
async fn a_write_that_lands_late_is_not_taken_for_a_later_attempt() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    // The first create lands 15 s after it is sent. Requests time out after 5 s. The store
    // answers nothing for 16 s: the acquirer must keep trying past the default 10 s.
    let o = opts()
        .request_timeout(secs(5.0))
        .unavailable_timeout(secs(60.0));
    a_conn
        .faults()
        .push(Op::Put, Fault::DelayBefore(secs(15.0)));
    let t0 = w.now();
    let a_task = {
        let clock = w.clock.clone();
        tokio::spawn(async move {
            let l = a.acquire("job", &o).await.unwrap();
            let deadline = lease::clock::Clock::now(&*clock) + l.remaining();
            (l, deadline)
        })
    };
    // Every later call fails until the write has given up (its ttl of trying) ...
    sleep(secs(0.5)).await;
    a_conn.faults().set_unavailable(true);
    sleep(secs(11.5)).await;
    // ... then the next read (within a backoff, so before t0 + 15) takes effect at once but is
    // answered 4.5 s later, after the first create has landed.
    a_conn.faults().set_unavailable(false);
    a_conn.faults().push(Op::Get, Fault::DelayAfter(secs(4.5)));
    let (a_lease, a_deadline) = a_task.await.unwrap();
    assert!(
        w.now() - t0 > secs(15.0),
        "the scenario: a learned only after the late landing"
    );
    // From now on `a` cannot reach the store (so it cannot renew); a fresh waiter with only the
    // store-clock rule takes over when the store's clock says the record is old enough.
    a_conn.faults().set_unavailable(true);
    let b_lease = b
        .acquire("job", &opts().observation_rule(false).wait(secs(120.0)))
        .await
        .unwrap();
    let b_at = w.now();
    // Whatever `a` got, it must not believe it holds the lease once `b` does.
    assert!(
        a_deadline <= b_at,
        "a believes until t0+{:?}, b took over at t0+{:?}",
        a_deadline - t0,
        b_at - t0
    );
    assert!(a_lease.ensure_held(Duration::ZERO).is_err());
    assert!(b_lease.epoch() > a_lease.epoch());
}

/// Item 2. A record deleted by hand (or by a lifecycle rule) while held: a fresh client
/// recreates it. It must not re-issue the epoch the old holder still has, and fenced writes
/// must refuse the old holder afterwards.
#[tokio::test(start_paused = true)]
async fn a_deleted_record_is_recreated_above_every_epoch_handed_out() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (c, _) = w.client("c", 3);
    let old = a.acquire("job", &opts()).await.unwrap();
    sleep(secs(1.0)).await; // the deletion comes a moment later
    w.store.remove_raw("job");
    let new = c
        .acquire("job", &opts().wait(Duration::ZERO))
        .await
        .unwrap();
    assert!(
        new.epoch() > old.epoch(),
        "re-issued epoch {} (old holder has {})",
        new.epoch(),
        old.epoch()
    );
    new.fenced_put("data", "new holder").await.unwrap();
    assert!(
        old.ensure_held(Duration::ZERO).is_ok(),
        "a has not noticed yet"
    );
    let e = old.fenced_put("data", "zombie").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    assert_eq!(
        &c.fenced_get("data").await.unwrap().unwrap().bytes[..],
        b"new holder"
    );
}

/// Item 2. Should two holders ever have equal epochs (a record restored from a backup, say),
/// fenced writes and gates must not admit both.
#[tokio::test(start_paused = true)]
async fn two_holders_with_equal_epochs_are_never_both_admitted() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (c, _) = w.client("c", 3);
    let old = a.acquire("job", &opts()).await.unwrap();
    // Restore an older record: released, one epoch below `a`'s.
    let mut restored: Record = w.valid("job").await;
    restored.epoch = old.epoch() - 1;
    restored.state = RecordState::Released;
    restored.holder.id = "restored".into();
    w.store.overwrite_raw("job", restored.to_bytes());
    let new = c
        .acquire("job", &opts().wait(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(new.epoch(), old.epoch(), "the scenario needs equal epochs");

    new.fenced_put("data", "new holder").await.unwrap();
    let e = old.fenced_put("data", "zombie").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");

    for gate in [
        FencingGate::in_memory(),
        FencingGate::in_store_of(w.client("gate", 4).0, "gates").unwrap(),
    ] {
        gate.admit("db", &new.token()).await.unwrap();
        gate.admit("db", &new.token()).await.unwrap(); // the same holder again: fine
        let e = gate.admit("db", &old.token()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    }
}

/// Item 3. `break` of a holder cut off from the store: the next holder must not get the lease
/// before the broken holder's deadline has passed.
#[tokio::test(start_paused = true)]
async fn break_waits_out_a_partitioned_holder() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let (op, _) = w.client("operator", 9);
    let held = a.acquire("job", &opts()).await.unwrap();
    sleep(secs(3.5)).await; // just after a renewal
    a_conn.faults().set_unavailable(true);
    let a_deadline = w.now() + held.remaining();
    op.break_lease("job", None, BreakMode::default())
        .await
        .unwrap();
    let taken = b.acquire("job", &opts().wait(secs(120.0))).await.unwrap();
    assert!(
        w.now() >= a_deadline,
        "b acquired {:?} before the broken holder's deadline",
        a_deadline - w.now()
    );
    assert!(held.ensure_held(Duration::ZERO).is_err());
    assert!(taken.epoch() > held.epoch());
}

/// Item 3. A healthy holder learns of the break at its next renewal and stops believing; when
/// it releases (acknowledging the loss) the next holder may start at once.
#[tokio::test(start_paused = true)]
async fn break_of_a_healthy_holder_admits_the_next_once_the_holder_lets_go() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let (op, _) = w.client("operator", 9);
    let held = a.acquire("job", &opts()).await.unwrap();
    let lost_at = Arc::new(Mutex::new(None));
    {
        let (lost_at, clock) = (lost_at.clone(), w.clock.clone());
        held.on_lost(move |r| {
            assert!(matches!(r, LostReason::Broken { .. }), "{r:?}");
            *lost_at.lock().unwrap() = Some(lease::clock::Clock::now(&*clock));
        });
    }
    sleep(secs(1.0)).await;
    op.break_lease("job", None, BreakMode::default())
        .await
        .unwrap();
    let waiter = tokio::spawn(async move { b.acquire("job", &opts()).await.unwrap() });
    sleep(secs(4.0)).await; // past a's next renewal (ttl/3 after its last write)
    let lost_at = lost_at.lock().unwrap().expect("a learned of the break");
    assert!(!waiter.is_finished(), "b got the lease before a let go");
    let released_at = w.now();
    assert_eq!(held.release().await.unwrap_err().kind(), ErrorKind::Lost);
    let taken = waiter.await.unwrap();
    assert!(w.now() >= released_at && lost_at <= released_at);
    assert!(
        w.now() - released_at <= POLL * 2,
        "b waited {:?} after the acknowledgement",
        w.now() - released_at
    );
    assert!(taken.epoch() > held.epoch());
}

/// Item 7. A fenced write whose reply was lost (it landed), whose holder was then paused while a
/// newer holder read that write and wrote over it: on resuming, the write must not be reported
/// `Fenced` (it happened).
#[tokio::test(start_paused = true)]
async fn a_fenced_write_that_landed_is_never_reported_fenced() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let (op, _) = w.client("operator", 9);
    let old = a.acquire("job", &opts()).await.unwrap();
    // The write lands, its reply is lost, and the read-back takes effect 5 s later (a pause).
    a_conn
        .faults()
        .push(Op::Get, Fault::DelayBefore(Duration::ZERO)); // its first read
    a_conn.faults().push(Op::Put, Fault::LoseReply);
    a_conn.faults().push(Op::Get, Fault::DelayBefore(secs(5.0)));
    let write = {
        let old = old.clone();
        tokio::spawn(async move { old.fenced_put("data", "from a").await })
    };
    sleep(secs(1.0)).await;
    // Meanwhile a newer holder (let in at once by the break) reads a's write and replaces it.
    op.break_lease("job", None, BreakMode::AllowTwoHolders)
        .await
        .unwrap();
    let newer = b.acquire("job", &opts()).await.unwrap();
    let seen = b.fenced_get("data").await.unwrap().unwrap();
    assert_eq!(&seen.bytes[..], b"from a", "a's write landed");
    newer.fenced_put("data", "from b").await.unwrap();
    match write.await.unwrap() {
        Ok(_) => {}
        Err(e) => panic!("a landed write was reported as failed: {e}"),
    }
}

/// Item 10. `status` on a store whose clock has whole seconds (S3's HTTP dates) must not call a
/// lease `expired` (nor `Election::leader` say there is none) while its holder renews it.
#[tokio::test(start_paused = true)]
async fn status_does_not_call_a_renewed_lease_expired_on_a_coarse_clock() {
    let w = World::new();
    w.store.set_clock_resolution(Duration::from_secs(1));
    let (a, _) = w.client("a", 1);
    let (watcher, _) = w.client("watcher", 2);
    let ttl = secs(0.9);
    let _held = a
        .acquire("job", &LeaseOptions::new(ttl).poll_interval(secs(0.1)))
        .await
        .unwrap();
    let mut expired = 0;
    for _ in 0..400 {
        sleep(secs(0.05)).await;
        if watcher.status("job").await.unwrap().state != LeaseState::Held {
            expired += 1;
        }
    }
    assert_eq!(
        expired, 0,
        "{expired} of 400 samples said the held lease was not held"
    );
}

/// Item 12. Fenced operations and gates retrying reads of an unavailable store must back off
/// (not send 32 requests at once) and say that the store was unavailable.
#[tokio::test(start_paused = true)]
async fn fenced_operations_back_off_while_the_store_is_unavailable() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    held.fenced_put("data", "x").await.unwrap();
    let gate = FencingGate::in_store_of(a.clone(), "gates").unwrap();
    a_conn.faults().set_unavailable(true);
    a_conn.reset_stats();
    let started = w.now();
    let e = held.fenced_delete("data").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.to_string().contains("unavailable"), "{e}");
    let e = gate.admit("db", &held.token()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.to_string().contains("unavailable"), "{e}");
    assert!(
        w.now() - started >= secs(1.0),
        "gave up after {:?} without backing off",
        w.now() - started
    );
}

/// Item 13. A record released normally by a later holder (who took over after our loss) is not
/// a `break`: the loss must say it was taken over.
#[tokio::test(start_paused = true)]
async fn a_release_by_a_later_holder_is_not_reported_as_a_break() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    // Another holder took over and released normally (as after a pause of ours past the ttl).
    let mut later: Record = w.valid("job").await;
    later.epoch += 1;
    later.rev += 1;
    later.state = RecordState::Released;
    later.holder.id = "later-holder".into();
    w.store.overwrite_raw("job", later.to_bytes());
    sleep(secs(4.0)).await; // a's next renewal finds it
    match held.lost_reason() {
        Some(LostReason::TakenOver { epoch, .. }) => assert_eq!(epoch, later.epoch),
        other => panic!("expected TakenOver, got {other:?}"),
    }
}

/// Item 14. On a store whose clock has whole seconds, a waiter arriving after a holder died
/// (the store-clock rule alone, as a fresh `lease run -n` from cron has) takes over within the
/// bound docs/protocol.md states, whatever the phase of the last write within its second.
#[tokio::test(start_paused = true)]
async fn store_clock_takeover_is_within_the_stated_bound_on_a_coarse_clock() {
    let ttl = Duration::from_secs(5);
    let grace = Duration::from_secs(1);
    let resolution = Duration::from_secs(1);
    let poll = Duration::from_millis(500);
    let mut worst = Duration::ZERO;
    for phase in 0..10 {
        let w = World::new();
        w.store.set_clock_resolution(resolution);
        let (a, a_conn) = w.client("a", 1);
        let (b, _) = w.client("b", 2);
        let o = LeaseOptions::new(ttl).poll_interval(poll);
        sleep(secs(phase as f64 / 10.0)).await;
        let held = a.acquire("job", &o).await.unwrap();
        let last_write = w.now();
        a_conn.faults().set_unavailable(true);
        drop(held);
        // A fresh waiter with only the store-clock rule, polling until it gets the lease.
        let got = b
            .acquire("job", &o.clone().observation_rule(false).wait(secs(60.0)))
            .await
            .unwrap();
        worst = worst.max(w.now() - last_write);
        assert!(w.now() - last_write > ttl + grace, "taken over too early");
        drop(got);
    }
    // The bound: ttl + grace + resolution + one poll (with its 20% jitter).
    let bound = ttl + grace + resolution + poll.mul_f64(1.2);
    assert!(
        worst <= bound,
        "takeover {worst:?} after the last write, bound {bound:?}"
    );
}

/// Found by the model checker: a release whose answer is held up may land at once, and a
/// waiter take the lease, while other tasks of the holder still passed `ensure_held`. The
/// holder stops believing the moment its release is sent.
#[tokio::test(start_paused = true)]
async fn a_holder_stops_believing_when_its_release_is_sent() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    // The release lands at once; its answer comes 5 s later.
    a_conn.faults().push(Op::Put, Fault::DelayAfter(secs(5.0)));
    let releasing = {
        let held = held.clone();
        tokio::spawn(async move { held.release().await })
    };
    sleep(secs(0.1)).await;
    // In flight: every way of asking says the lease is not held (Lease::is_held and
    // remaining go by Hold::believes, the decision the model checks).
    assert!(!held.is_held(), "is_held while the release is in flight");
    assert_eq!(held.remaining(), Duration::ZERO);
    assert!(held.ensure_held(Duration::ZERO).is_err());
    let taken = b
        .acquire("job", &opts().wait(Duration::ZERO))
        .await
        .unwrap();
    assert!(
        held.ensure_held(Duration::ZERO).is_err(),
        "the holder still believes while {} holds epoch {}",
        taken.holder().id,
        taken.epoch()
    );
    assert!(!held.is_held());
    assert_eq!(held.remaining(), Duration::ZERO);
    releasing.await.unwrap().unwrap();
}

/// A holder cut off from the store past its deadline has lost the lease; when it can reach
/// the store again, releasing writes its own record released (`Hold::tidy`), so the next
/// holder need not wait out `ttl + grace`.
#[tokio::test(start_paused = true)]
async fn a_holder_that_lost_by_expiry_releases_its_record_so_nobody_waits_it_out() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    a_conn.faults().set_unavailable(true);
    sleep(secs(10.5)).await;
    assert_eq!(held.lost_reason(), Some(LostReason::Expired));
    a_conn.faults().set_unavailable(false);
    assert_eq!(held.release().await.unwrap_err().kind(), ErrorKind::Lost);
    let r = w.valid("job").await;
    assert_eq!((r.state, r.epoch), (RecordState::Released, held.epoch()));
    // Within ttl + grace of a's last write: only the release lets b in now.
    let taken = b
        .acquire("job", &opts().wait(Duration::ZERO))
        .await
        .unwrap();
    assert!(taken.epoch() > held.epoch());
}

/// A release that finds another holder's record instead of ours reports the loss: whatever
/// was done under the lease may have overlapped with that holder.
#[tokio::test(start_paused = true)]
async fn a_release_over_a_later_holders_record_is_reported_lost() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    let mut later: Record = w.valid("job").await;
    later.epoch += 1;
    later.rev += 1;
    later.state = RecordState::Released;
    later.holder.id = "later-holder".into();
    later.write = Some("later".into());
    w.store.overwrite_raw("job", later.to_bytes());
    let e = held.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(
        matches!(held.lost_reason(), Some(LostReason::TakenOver { epoch, .. }) if epoch == later.epoch),
        "{:?}",
        held.lost_reason()
    );
}

/// A release that landed while its answer and every read-back were lost ends unknown; sent
/// again, it finds its own released record (`Hold::is_our_release`): released, not lost.
#[tokio::test(start_paused = true)]
async fn a_release_that_landed_unseen_is_recognised_when_sent_again() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    sleep(secs(1.0)).await;
    a_conn.faults().push(Op::Put, Fault::LoseReply);
    for _ in 0..100 {
        a_conn.faults().push(Op::Get, Fault::Fail);
    }
    let e = held.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(w.valid("job").await.state, RecordState::Released);
    a_conn.faults().clear();
    held.release()
        .await
        .expect("our own release is there: released");
    assert_eq!(held.lost_reason(), None);
}
