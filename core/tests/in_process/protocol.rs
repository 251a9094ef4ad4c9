//! The protocol in simulated time: the memory store with injected faults, every client on an
//! injected clock, tokio's paused time driving it all. Hours of leases run in milliseconds,
//! deterministically.

#![allow(clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::clock::{Clock, Rng, SimClock};
use lease::record::RecordState;
use lease::store::memory::{Fault, MemoryStore, Op};
use lease::{BreakMode, Client, Election, ErrorKind, LeaseOptions, LeaseState, LostReason};

use crate::sim;
use sim::*;

#[tokio::test(start_paused = true)]
async fn renew_and_release_keep_the_epoch() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let lease = a
        .acquire("job", &opts().label("worker-a").data("10.0.0.1:80"))
        .await
        .unwrap();
    assert_eq!(lease.epoch(), FIRST);
    let first = w.valid("job").await;
    // Rev 2: the create made the record, released, at rev 1; the take wrote this one.
    assert_eq!(
        (first.epoch, first.rev, first.state),
        (FIRST, 2, RecordState::Held)
    );
    assert_eq!(first.holder.label.as_deref(), Some("worker-a"));
    assert_eq!(first.data.as_deref(), Some("10.0.0.1:80"));

    sleep(secs(60.0)).await;
    let later = w.valid("job").await;
    assert_eq!(later.epoch, FIRST, "renewal changed the epoch");
    assert!(
        later.rev >= 18,
        "expected a renewal every ttl/3, rev is {}",
        later.rev
    );
    assert!(
        lease.remaining() > TTL / 2,
        "remaining {:?}",
        lease.remaining()
    );
    assert_eq!(
        lease.ensure_held(Duration::from_secs(5)).unwrap(),
        lease.remaining()
    );

    lease.release().await.unwrap();
    let released = w.valid("job").await;
    assert_eq!(
        (released.epoch, released.state),
        (FIRST, RecordState::Released)
    );
    assert_eq!(released.rev, later.rev + 1);
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert_eq!(
        lease.ensure_held(Duration::ZERO).unwrap_err().kind(),
        ErrorKind::Lost
    );
    lease.release().await.unwrap(); // idempotent
    assert_eq!(
        w.valid("job").await.rev,
        released.rev,
        "a second release wrote again"
    );
}

#[tokio::test(start_paused = true)]
async fn release_lets_a_waiter_in_at_once_with_the_next_epoch() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    // A long poll: without the in-process wake-up, B would need up to a minute to notice.
    let waiter =
        tokio::spawn(async move { b.acquire("job", &opts().poll_interval(secs(60.0))).await });
    sleep(secs(5.0)).await;
    let released_at = w.now();
    held.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(w.now() - released_at, Duration::ZERO);
    assert_eq!(got.epoch(), FIRST + 1);
}

/// Which takeover rules a waiter uses.
#[derive(Debug, Clone, Copy)]
struct Rules {
    observation: bool,
    store_clock: bool,
}

const BOTH: Rules = Rules {
    observation: true,
    store_clock: true,
};
const OBSERVATION: Rules = Rules {
    observation: true,
    store_clock: false,
};
const STORE_CLOCK: Rules = Rules {
    observation: false,
    store_clock: true,
};
const NEITHER: Rules = Rules {
    observation: false,
    store_clock: false,
};

impl Rules {
    fn apply(self, o: LeaseOptions) -> LeaseOptions {
        o.observation_rule(self.observation)
            .store_clock_rule(self.store_clock)
    }
}

/// A holder "crashes" (its connection goes dead) right after a renewal; a waiter that starts
/// `arrive_after` later takes over. Returns (waiter's takeover time - holder's deadline,
/// takeover time - holder's last write, waiter's own wait).
async fn crash_and_take_over(
    rules: Rules,
    arrive_after: Duration,
) -> (Duration, Duration, Duration, u64) {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    sleep(secs(3.5)).await; // just after the first renewal (at ttl/3)
    a_conn.faults().set_unavailable(true);
    let deadline = w.now() + held.remaining();
    let last_write = deadline - TTL;
    let lost_at = Arc::new(Mutex::new(None));
    {
        let lost_at = lost_at.clone();
        let clock = w.clock.clone();
        held.on_lost(move |r| {
            assert_eq!(*r, LostReason::Expired);
            *lost_at.lock().unwrap() = Some(clock.now());
        });
    }
    sleep(arrive_after).await;
    let arrived = w.now();
    let got = b
        .acquire("job", &rules.apply(opts()).wait(secs(600.0)))
        .await
        .unwrap();
    let took_over = w.now();
    let lost_at = lost_at
        .lock()
        .unwrap()
        .expect("the crashed holder was told at its deadline");
    assert_eq!(
        lost_at, deadline,
        "the holder must stop believing exactly at its deadline"
    );
    assert!(
        took_over >= deadline,
        "{rules:?}: takeover {:?} before the holder's deadline",
        deadline - took_over
    );
    (
        took_over - deadline,
        took_over - last_write,
        took_over - arrived,
        got.epoch(),
    )
}

#[tokio::test(start_paused = true)]
async fn crashed_holder_is_replaced_within_the_bound_never_before_its_deadline() {
    let bound = TTL + GRACE + RESOLUTION + POLL;
    for rules in [BOTH, OBSERVATION, STORE_CLOCK] {
        let (after_deadline, after_last_write, _, epoch) =
            crash_and_take_over(rules, Duration::ZERO).await;
        assert!(
            after_last_write <= bound.mul_f64(1.2),
            "{rules:?}: takeover {after_last_write:?} after the last write, bound {bound:?}"
        );
        assert!(after_deadline > Duration::ZERO);
        assert_eq!(epoch, FIRST + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn takeover_rules_each_on_and_off() {
    // A waiter arriving long after the crash: the store-clock rule sees the record is old and
    // takes over at once; the observation rule alone must watch it for ttl + grace first.
    let late = secs(100.0);
    let (_, _, waited, _) = crash_and_take_over(STORE_CLOCK, late).await;
    assert!(waited < POLL, "store-clock rule waited {waited:?}");
    let (_, _, waited, _) = crash_and_take_over(BOTH, late).await;
    assert!(waited < POLL, "both rules waited {waited:?}");
    let (_, _, waited, _) = crash_and_take_over(OBSERVATION, late).await;
    assert!(
        waited >= TTL + GRACE && waited <= TTL + GRACE + POLL.mul_f64(1.2),
        "observation rule waited {waited:?}"
    );

    // Neither rule: a held record is never taken over, only a released one.
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    a_conn.faults().set_unavailable(true);
    let e = b
        .acquire("job", &NEITHER.apply(opts()).wait(secs(120.0)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert_eq!(b.status("job").await.unwrap().state, LeaseState::Expired);
    drop(held);
    let (c, _) = w.client("c", 3);
    let h = c.acquire("free", &opts()).await.unwrap();
    h.release().await.unwrap();
    assert_eq!(
        b.acquire("free", &NEITHER.apply(opts()).wait(Duration::ZERO))
            .await
            .unwrap()
            .epoch(),
        h.epoch() + 1
    );
}

#[tokio::test(start_paused = true)]
async fn store_clock_rule_survives_a_skewed_store_node() {
    // The rule compares two readings of the *store's* clock, so a store clock hours off from
    // the clients' clocks changes nothing.
    let w = World::new();
    let skewed = Arc::new(SimClock::at_2026());
    skewed.step_wall(-3 * 3600 * 1000);
    let store = w.store.connection_on_clock(skewed);
    let client = |seed: u64, conn: MemoryStore| {
        Client::builder(Arc::new(conn))
            .clock(w.clock.clone())
            .rng(Rng::seeded(seed))
            .build()
    };
    let a_conn = store.connection();
    let a = client(1, a_conn.clone());
    let b = client(2, store.connection());
    let held = a.acquire("job", &opts()).await.unwrap();
    a_conn.faults().set_unavailable(true);
    let deadline = w.now() + held.remaining();
    sleep(secs(50.0)).await;
    let arrived = w.now();
    let got = b.acquire("job", &STORE_CLOCK.apply(opts())).await.unwrap();
    assert!(w.now() >= deadline);
    assert!(w.now() - arrived < POLL, "waited {:?}", w.now() - arrived);
    assert_eq!(got.epoch(), FIRST + 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_reply_is_adopted_by_reading_back_not_reported_lost() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    // Acquire: the create landed, its reply was lost.
    a_conn.faults().lose_next_replies(1);
    let held = a.acquire("job", &opts()).await.unwrap();
    assert_eq!(held.epoch(), FIRST);
    // Renew: the write landed, the reply was lost.
    a_conn.faults().lose_next_replies(1);
    sleep(secs(4.0)).await;
    assert!(held.lost_reason().is_none());
    // Renew: an SDK retried a write that had landed and reports 412 (dynamolock#280).
    a_conn
        .faults()
        .push(Op::Put, Fault::LandThenConditionFailed);
    sleep(secs(4.0)).await;
    assert!(held.lost_reason().is_none(), "{:?}", held.lost_reason());
    assert!(held.remaining() > secs(8.0));
    let rev_before = w.valid("job").await.rev;
    // Release through a lost reply too.
    a_conn
        .faults()
        .push(Op::Put, Fault::LandThenConditionFailed);
    held.release().await.unwrap();
    let r = w.valid("job").await;
    assert_eq!((r.state, r.rev), (RecordState::Released, rev_before + 1));
    // Acquire through an SDK-retry 412 on the create of a new key.
    a_conn
        .faults()
        .push(Op::Put, Fault::LandThenConditionFailed);
    let new = a.acquire("new", &opts()).await.unwrap();
    assert_eq!(w.valid("new").await.epoch, new.epoch());
}

#[tokio::test(start_paused = true)]
async fn failed_writes_are_retried_and_the_deadline_still_holds() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    // A few failures and slow replies: renewals retry and the lease stays.
    a_conn.faults().fail_next(Op::Any, 3);
    a_conn.faults().push(Op::Put, Fault::DelayBefore(secs(2.0)));
    sleep(secs(30.0)).await;
    assert!(held.lost_reason().is_none());
    // A request that hangs past the deadline: the holder stops believing at the deadline.
    a_conn.faults().set_latency(secs(3600.0));
    let deadline = w.now() + held.remaining();
    let reason = held.lost().await;
    assert_eq!(reason, LostReason::Expired);
    assert_eq!(w.now(), deadline);
}

#[tokio::test(start_paused = true)]
async fn corrupt_records_are_taken_over_safely_above_every_epoch() {
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        (
            "truncated",
            br#"{"format":1,"epoch":5,"rev":3,"state":"he"#.to_vec(),
        ),
        (
            "wrong types",
            br#"{"format":1,"epoch":"five","rev":[],"state":7,"ttl_ms":"x","holder":null}"#
                .to_vec(),
        ),
        ("10 MiB", vec![b'x'; 10 << 20]),
        (
            "binary",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
                .collect(),
        ),
    ];
    for (name, bytes) in garbage {
        let w = World::new();
        let (a, _) = w.client("a", 1);
        // Epochs 1..=5 handed out before the record was destroyed.
        for _ in 0..5 {
            a.acquire("job", &opts())
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }
        w.store.overwrite_raw("job", bytes);
        let corrupted_at = w.now();
        let (b, _) = w.client("b", 2); // knows nothing of the earlier epochs
        assert_eq!(
            b.status("job").await.unwrap().state,
            LeaseState::Corrupt,
            "{name}"
        );
        assert!(
            b.try_acquire("job", &opts()).await.unwrap().is_none(),
            "{name}: taken over at once"
        );
        let got = b.acquire("job", &opts()).await.unwrap();
        let waited = w.now() - corrupted_at;
        assert!(waited >= TTL + GRACE, "{name}: taken over after {waited:?}");
        let server_ms = w
            .clock
            .wall()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(got.epoch() > 5, "{name}: epoch {}", got.epoch());
        assert!(
            got.epoch() >= server_ms - 60_000,
            "{name}: epoch {} is not above any earlier token",
            got.epoch()
        );
        assert_eq!(w.valid("job").await.epoch, got.epoch());
    }
}

#[tokio::test(start_paused = true)]
async fn a_record_overwritten_or_deleted_under_the_holder_means_lost() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("gone", &opts()).await.unwrap();
    w.store.remove_raw("gone");
    assert_eq!(held.lost().await, LostReason::Vanished);
    // The recreated record goes above the epoch handed out.
    assert!(a.acquire("gone", &opts()).await.unwrap().epoch() > held.epoch());

    let held = a.acquire("scribbled", &opts()).await.unwrap();
    w.store.overwrite_raw("scribbled", "not json");
    assert_eq!(held.lost().await, LostReason::Overwritten);
}

#[tokio::test(start_paused = true)]
async fn break_makes_the_holder_lose_at_its_next_renewal() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (op, _) = w.client("operator", 9);
    let held = a.acquire("job", &opts().label("victim")).await.unwrap();
    let calls = Arc::new(Mutex::new(vec![]));
    {
        let calls = calls.clone();
        held.on_lost(move |r| calls.lock().unwrap().push(r.clone()));
    }
    let token = held.lost_token();
    let before = op
        .break_lease("job", None, BreakMode::default())
        .await
        .unwrap()
        .expect("a held lease was broken");
    assert_eq!(before.holder.unwrap().label.as_deref(), Some("victim"));
    // The break is a record held by the operator that names the holder it broke.
    let r = w.valid("job").await;
    assert_eq!((r.state, r.epoch), (RecordState::Held, FIRST + 1));
    assert_eq!(
        r.broken.map(|b| (b.id, b.epoch)),
        Some((held.holder().id.clone(), FIRST))
    );
    let broken_at = w.now();
    let reason = held.lost().await;
    assert!(
        matches!(reason, LostReason::Broken { epoch: e, .. } if e == FIRST + 1),
        "{reason:?}"
    );
    // tokio's timer rounds sleeps up to whole milliseconds.
    assert!(
        w.now() - broken_at <= TTL / 3 + Duration::from_millis(2),
        "noticed after {:?}",
        w.now() - broken_at
    );
    assert!(token.is_cancelled());
    assert_eq!(calls.lock().unwrap().len(), 1);
    // A callback registered after the loss runs at once.
    let late = Arc::new(Mutex::new(0));
    {
        let late = late.clone();
        held.on_lost(move |_| *late.lock().unwrap() += 1);
    }
    assert_eq!(*late.lock().unwrap(), 1);
    let e = held.ensure_held(Duration::ZERO).unwrap_err();
    assert_eq!((e.kind(), e.epoch()), (ErrorKind::Lost, Some(FIRST)));
    assert_eq!(held.release().await.unwrap_err().kind(), ErrorKind::Lost);
    // The holder's release acknowledged the break: the record is released, breaking it again
    // does nothing, and the next holder gets the epoch above the break's.
    assert!(op
        .break_lease("job", None, BreakMode::default())
        .await
        .unwrap()
        .is_none());
    let (b, _) = w.client("b", 2);
    assert_eq!(
        b.acquire("job", &opts().wait(Duration::ZERO))
            .await
            .unwrap()
            .epoch(),
        FIRST + 2
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_acquire_can_be_cancelled() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    let _held = a.acquire("job", &opts()).await.unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let waiter = {
        let cancel = cancel.clone();
        tokio::spawn(async move { b.acquire_with_cancel("job", &opts(), &cancel).await })
    };
    sleep(secs(3.0)).await;
    let cancelled_at = w.now();
    cancel.cancel();
    let e = waiter.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    assert_eq!(w.now(), cancelled_at);
    assert_eq!(b_conn.stats().puts, 0, "a waiter must not write");
}

#[tokio::test(start_paused = true)]
async fn held_and_timeout_errors_name_the_holder() {
    let w = World::new();
    let (a, _) = w.client("host-a", 1);
    let (b, _) = w.client("b", 2);
    let _held = a.acquire("job", &opts().label("gc-1")).await.unwrap();
    assert!(b.try_acquire("job", &opts()).await.unwrap().is_none());
    let e = b
        .acquire("job", &opts().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held);
    assert_eq!(e.holder().unwrap().label.as_deref(), Some("gc-1"));
    assert_eq!(e.epoch(), Some(FIRST));
    assert!(
        e.to_string().contains("\"gc-1\"") && e.to_string().contains("memory://"),
        "{e}"
    );
    let start = w.now();
    let e = b.acquire("job", &opts().wait(secs(5.0))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    let waited = w.now() - start;
    assert!(
        waited >= secs(5.0) && waited < secs(5.0) + POLL,
        "{waited:?}"
    );
    assert!(e.to_string().contains("timed out after 5s"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn ensure_held_checks_the_minimum_remaining() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    assert!(held.ensure_held(secs(9.0)).is_ok());
    let e = held.ensure_held(secs(11.0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost);
    assert!(
        held.is_held(),
        "asking for more than the ttl does not lose the lease"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_a_lease_releases_it() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let held = a.acquire("job", &opts()).await.unwrap();
    let clone = held.clone();
    drop(held);
    sleep(secs(1.0)).await;
    assert_eq!(
        w.valid("job").await.state,
        RecordState::Held,
        "a clone still holds it"
    );
    drop(clone);
    sleep(secs(1.0)).await;
    assert_eq!(w.valid("job").await.state, RecordState::Released);
}

#[tokio::test(start_paused = true)]
async fn request_counts_hold_to_the_floor() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, b_conn) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    let s = a_conn.stats();
    assert_eq!(
        (s.gets, s.puts),
        (1, 2),
        "a fresh client's acquire of a new key: GET (404) + PUT (the create, of a released \
         record: it grants nobody) + PUT (the take, conditional on it: issue 22)"
    );
    a_conn.reset_stats();
    sleep(TTL / 3 + secs(0.1)).await;
    assert_eq!(
        (a_conn.stats().gets, a_conn.stats().puts),
        (0, 1),
        "renew = 1 PUT"
    );
    a_conn.reset_stats();
    held.release().await.unwrap();
    assert_eq!(
        (a_conn.stats().gets, a_conn.stats().puts),
        (0, 1),
        "release = 1 PUT"
    );
    a_conn.reset_stats();
    let held = a.acquire("job", &opts()).await.unwrap();
    assert_eq!(
        (a_conn.stats().gets, a_conn.stats().puts),
        (0, 1),
        "re-acquire after our own release = 1 PUT"
    );
    // A waiter polling an unchanged record gets 304s (renewals change it every ttl/3).
    let waiter = tokio::spawn(async move { b.acquire("job", &opts().wait(secs(3.0))).await });
    assert_eq!(
        waiter.await.unwrap().unwrap_err().kind(),
        ErrorKind::Timeout
    );
    let s = b_conn.stats();
    assert!(
        s.gets >= 3 && s.not_modified >= s.gets - 2 && s.puts == 0,
        "{s:?}"
    );
    b_conn.reset_stats();
    held.release().await.unwrap();
    // Takeover of a released lease by another client = 1 GET + 1 PUT.
    let (c, c_conn) = w.client("c", 3);
    c.acquire("job", &opts()).await.unwrap();
    assert_eq!((c_conn.stats().gets, c_conn.stats().puts), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn status_and_watch() {
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (obs, _) = w.client("observer", 2);
    assert_eq!(obs.status("job").await.unwrap().state, LeaseState::Free);
    let mut watch = obs.watch("job", secs(0.5)).unwrap();
    assert_eq!(watch.next().await.unwrap().state, LeaseState::Free);

    let held = a.acquire("job", &opts().label("l")).await.unwrap();
    let acquired = w.now();
    let s = watch.next().await.unwrap();
    assert_eq!((s.state, s.epoch), (LeaseState::Held, Some(FIRST)));
    sleep(secs(2.0)).await;
    let st = obs.status("job").await.unwrap();
    assert_eq!(st.ttl, Some(TTL));
    // Time left until a waiter may take over: ttl + grace + resolution after the last write.
    assert_eq!(
        st.expires_in,
        Some(TTL + GRACE + RESOLUTION - (w.now() - acquired))
    );
    let json = st.to_json();
    for k in ["state", "epoch", "holder", "ttl_ms", "expires_in_ms"] {
        assert!(json.get(k).is_some(), "{k} missing from {json}");
    }
    assert_eq!(json["holder"]["label"], "l");

    // Renewals are not changes; a release is.
    let released = tokio::spawn(async move {
        sleep(secs(20.0)).await;
        held.release().await.unwrap();
    });
    let s = watch.next().await.unwrap();
    assert_eq!((s.state, s.epoch), (LeaseState::Released, Some(FIRST)));
    released.await.unwrap();

    let held = a.acquire("job", &opts()).await.unwrap();
    assert_eq!(watch.next().await.unwrap().epoch, Some(FIRST + 1));
    a_conn.faults().set_unavailable(true);
    held.lost().await;
    let s = watch.next().await.unwrap();
    assert_eq!((s.state, s.epoch), (LeaseState::Expired, Some(FIRST + 1)));
    assert_eq!(s.expires_in, Some(Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn election_campaign_resign_observe() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let ea = Election::new(a, "leader", opts().label("node-a").data("http://a:8080"));
    let eb = Arc::new(Election::new(b, "leader", opts().label("node-b")));
    let mut observe = eb.observe(secs(0.5)).unwrap();
    assert_eq!(observe.next().await.unwrap(), None);

    let lead = ea.campaign().await.unwrap();
    assert_eq!(lead.epoch(), FIRST);
    assert_eq!(
        ea.campaign().await.unwrap().epoch(),
        FIRST,
        "campaigning while leading returns the same lease"
    );
    let leader = observe.next().await.unwrap().unwrap();
    assert_eq!(
        (
            leader.holder.label.as_deref(),
            leader.epoch,
            leader.data.as_deref()
        ),
        (Some("node-a"), FIRST, Some("http://a:8080"))
    );
    assert_eq!(eb.leader().await.unwrap().unwrap().epoch, FIRST);

    let campaign_b = {
        let eb = eb.clone();
        tokio::spawn(async move { eb.campaign().await.map(|l| l.epoch()) })
    };
    sleep(secs(30.0)).await;
    assert!(!campaign_b.is_finished(), "b must not lead while a does");
    ea.resign().await.unwrap();
    assert_eq!(campaign_b.await.unwrap().unwrap(), FIRST + 1);
    let leader = observe.next().await.unwrap().unwrap();
    assert_eq!(
        (leader.holder.label.as_deref(), leader.epoch),
        (Some("node-b"), FIRST + 1)
    );
    ea.resign().await.unwrap(); // not leading: nothing to do
    eb.resign().await.unwrap();
    assert_eq!(observe.next().await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_release_that_landed_is_not_reported_lost_when_a_waiter_takes_over_first() {
    // The release lands but its reply is lost, and the read-back is slow: before it returns, a
    // waiter has taken the lease. The read-back sees the new holder's record, which names ours
    // as the record it replaced, so the release is known to have landed.
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = a.acquire("job", &opts()).await.unwrap();
    let waiter = tokio::spawn(async move { b.acquire("job", &opts()).await });
    sleep(secs(2.0)).await;
    a_conn.faults().push(Op::Put, Fault::LoseReply);
    a_conn.faults().push(Op::Get, Fault::DelayBefore(secs(5.0)));
    held.release()
        .await
        .expect("the release landed; it must not be reported lost");
    assert!(held.lost_reason().is_none());
    let b_lease = waiter.await.unwrap().unwrap();
    assert_eq!(b_lease.epoch(), FIRST + 1);
    let r = w.valid("job").await;
    assert_eq!(
        r.prev.first().map(|p| p.id.as_str()),
        Some(held.holder().id.as_str())
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_read_of_a_new_key_still_lets_the_record_be_created() {
    // S3 without s3:ListBucket answers 403 to a read of a missing key: a worker with only
    // GetObject and PutObject must still be able to create its lease.
    let w = World::new();
    let (a, a_conn) = w.client("a", 1);
    a_conn.faults().push(Op::Get, Fault::Deny);
    let held = a.acquire("new", &opts()).await.unwrap();
    assert_eq!(held.epoch(), FIRST);
    // The blind create makes the record released; the take is conditional on its answer's
    // version (issue 22), so no read is needed: 2 PUTs.
    assert_eq!(
        (a_conn.stats().puts, w.valid("new").await.epoch),
        (2, FIRST)
    );
    // When the key exists and reads are refused, the create fails and the denial is reported.
    let (b, b_conn) = w.client("b", 2);
    b_conn.faults().push(Op::Get, Fault::Deny);
    b_conn.faults().push(Op::Get, Fault::Deny);
    let e = b
        .acquire("new", &opts().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.to_string().contains("access denied"), "{e}");
}
