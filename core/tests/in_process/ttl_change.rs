//! A holder changes its ttl or its data while it holds (issue 28: redis-py's `extend`, etcd's
//! `Proclaim`): the decisions of `protocol/hold.rs` pinned one by one, then the driver in
//! simulated time. The model checks the same change under every fault
//! (`verify/tests/lease_model.rs`, `mutual_exclusion_when_a_holder_changes_its_ttl`).

#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use lease::clock::{Instant, Rng};
use lease::options::{LeaseOptions, Timing};
use lease::protocol::hold::Hold;
use lease::record::{Holder, Record, RecordState};
use lease::store::{Capabilities, Cond, Version};
use lease::{ErrorKind, LeaseState};

use crate::sim;
use sim::*;

fn timing(ttl: Duration) -> Timing {
    let caps = Capabilities {
        conditional_delete: true,
        clock_resolution: Duration::from_millis(1),
        store_clock_rule: true,
        wall_clock: true,
        versions_are_unique: true,
    };
    LeaseOptions::new(ttl).timing(&caps).unwrap()
}

fn held(ttl: Duration, t0: Instant) -> Hold {
    let record = Record {
        format: lease::record::FORMAT,
        epoch: 7,
        rev: 1,
        state: RecordState::Held,
        ttl_ms: ttl.as_millis() as u64,
        holder: Holder {
            id: "h".into(),
            ..Holder::default()
        },
        acquired_at: None,
        renewed_at: None,
        data: Some("old".into()),
        prev: vec![],
        write: None,
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: None,
    };
    Hold::new("memory://t/k", record, Version::etag("v1"), t0, timing(ttl))
}

fn write(h: &Hold) -> (Record, Cond) {
    h.next_write(
        RecordState::Held,
        std::time::SystemTime::UNIX_EPOCH,
        &Rng::seeded(1),
    )
    .unwrap()
}

#[test]
fn a_renewal_carries_the_wanted_ttl_and_data_and_a_release_does_not() {
    let t0 = Instant::now();
    let mut h = held(secs(30.0), t0);
    h.want_ttl(secs(60.0));
    h.want_data(Some("new".into()));
    let (record, _) = write(&h);
    assert_eq!(
        (record.ttl(), record.data.as_deref()),
        (secs(60.0), Some("new"))
    );
    let (release, _) = h
        .next_write(
            RecordState::Released,
            std::time::SystemTime::UNIX_EPOCH,
            &Rng::seeded(2),
        )
        .unwrap();
    assert_eq!(
        (release.ttl(), release.data.as_deref()),
        (secs(30.0), Some("old"))
    );
    h.want_data(None);
    assert_eq!(write(&h).0.data, None, "None clears the data");
}

#[test]
fn a_longer_ttl_counts_once_its_write_landed() {
    let t0 = Instant::now();
    let mut h = held(secs(30.0), t0);
    h.want_ttl(secs(60.0));
    let (record, _) = write(&h);
    let t1 = t0 + secs(5.0);
    h.sending(&record, t1);
    assert_eq!(h.deadline(), t0 + secs(30.0), "not before it landed");
    h.renewed(record, Version::etag("v2"), t1);
    assert_eq!(h.deadline(), t1 + secs(60.0));
    assert_eq!(
        h.renew_at(),
        t1 + secs(20.0),
        "renewals at ttl/3 of the new ttl"
    );
    assert_eq!(h.timing.request_timeout, secs(10.0));
    assert_eq!(h.wanted, Default::default(), "nothing wanted once written");
}

#[test]
fn a_shorter_ttl_caps_the_belief_from_its_send() {
    let t0 = Instant::now();
    let mut h = held(secs(30.0), t0);
    h.want_ttl(secs(3.0));
    let (record, _) = write(&h);
    let t1 = t0 + secs(5.0);
    h.sending(&record, t1);
    // It may land at once: waiters then go by 3 s from its landing, after t1.
    assert_eq!(h.deadline(), t1 + secs(3.0));
    assert_eq!(h.remaining(t1 + secs(2.0)), secs(1.0));
    assert!(!h.believes(t1 + secs(3.0)));
    // Sent again later (a retry): the earliest send still bounds the belief.
    h.sending(&record, t1 + secs(1.0));
    assert_eq!(h.deadline(), t1 + secs(3.0));
    // Landed, sent at t1 + 1 s: the deadline follows that send.
    h.renewed(record, Version::etag("v2"), t1 + secs(1.0));
    assert_eq!(h.deadline(), t1 + secs(4.0));
    assert_eq!(h.renew_at(), t1 + secs(2.0));
    assert_eq!(h.cap, None);
}

#[test]
fn a_write_of_the_same_ttl_caps_nothing() {
    let t0 = Instant::now();
    let mut h = held(secs(30.0), t0);
    let (record, _) = write(&h);
    h.sending(&record, t0 + secs(10.0));
    assert_eq!((h.deadline(), h.cap), (t0 + secs(30.0), None));
}

#[test]
fn new_timings_keep_their_fractions_of_the_ttl() {
    let t = timing(secs(30.0));
    let short = t.with_ttl(secs(3.0)).unwrap();
    assert_eq!(
        (short.ttl, short.renew, short.request_timeout, short.poll),
        (secs(3.0), secs(1.0), secs(0.5), t.poll)
    );
    for bad in [Duration::from_millis(50), secs(25.0 * 3600.0)] {
        let e = t.with_ttl(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{bad:?}");
        assert!(e.message().contains("out of range"), "{e}");
    }
}

// The driver, in simulated time.

#[tokio::test(start_paused = true)]
async fn set_ttl_writes_at_once_and_waiters_go_by_it() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let lease = a.acquire("job", &opts()).await.unwrap();
    let left = lease.set_ttl(secs(60.0)).await.unwrap();
    assert!(left > secs(59.0), "{left:?}");
    assert_eq!(lease.ttl(), secs(60.0));
    assert_eq!(w.valid("job").await.ttl(), secs(60.0));
    assert_eq!(b.status("job").await.unwrap().ttl, Some(secs(60.0)));
    // Renewals go on at the new ttl's third, and keep writing it.
    let rev = w.valid("job").await.rev;
    sleep(secs(61.0)).await;
    let later = w.valid("job").await;
    assert_eq!((later.ttl(), later.rev), (secs(60.0), rev + 3));
    assert!(lease.is_held());
}

#[tokio::test(start_paused = true)]
async fn a_shorter_ttl_renews_at_its_own_pace_at_once() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let lease = a.acquire("job", &opts()).await.unwrap();
    sleep(secs(1.0)).await;
    // 10 s -> 0.6 s: the renewal task must not sleep on to the old 3.3 s schedule.
    lease.set_ttl(Duration::from_millis(600)).await.unwrap();
    let rev = w.valid("job").await.rev;
    sleep(secs(10.0)).await;
    assert!(lease.is_held(), "lost: {:?}", lease.lost_reason());
    let later = w.valid("job").await;
    assert!(later.rev >= rev + 40, "renewed {} times", later.rev - rev);
    assert!(lease.remaining() <= Duration::from_millis(600));
    lease.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn set_data_writes_at_once_and_none_clears_it() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let lease = a.acquire("job", &opts().data("10.0.0.1:80")).await.unwrap();
    lease.set_data(Some("10.0.0.2:80")).await.unwrap();
    let s = a.status("job").await.unwrap();
    assert_eq!(
        (s.state, s.data.as_deref()),
        (LeaseState::Held, Some("10.0.0.2:80"))
    );
    sleep(secs(20.0)).await;
    assert_eq!(w.valid("job").await.data.as_deref(), Some("10.0.0.2:80"));
    lease.set_data(None).await.unwrap();
    assert_eq!(w.valid("job").await.data, None);
    let e = lease.set_data(Some(&"x".repeat(20_000))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}

#[tokio::test(start_paused = true)]
async fn changes_are_refused_out_of_range_on_grants_and_after_release() {
    let w = World::new();
    let (a, _) = w.client("a", 1);
    let lease = a.acquire("job", &opts()).await.unwrap();
    for bad in [Duration::from_millis(10), secs(48.0 * 3600.0)] {
        let e = lease.set_ttl(bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{bad:?}");
    }
    assert_eq!(lease.ttl(), TTL, "nothing changed");
    lease.release().await.unwrap();
    assert_eq!(
        lease.set_ttl(secs(20.0)).await.unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(
        lease.set_data(Some("x")).await.unwrap_err().kind(),
        ErrorKind::Lost
    );

    let grant = a.acquire("lock", &opts().queue()).await.unwrap();
    let e = grant.set_ttl(secs(20.0)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.message().contains("queued lock"), "{e}");
    grant.release().await.unwrap();
}
