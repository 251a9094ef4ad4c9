//! Health states (docs/protocol.md §4, "Health"): the pure function at each boundary, and the
//! transitions a holder is told of under a slow store, a failing store and a partition, in
//! simulated time; with the metrics those runs count.

#![allow(clippy::disallowed_methods)] // simulated time: tokio's paused clock

use crate::sim;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease::clock::Instant;
use lease::metrics;
use lease::options::Timing;
use lease::protocol::hold::{Health, HealthEvent, Hold, LostReason};
use lease::record::{Holder, Record, RecordState, FORMAT};
use lease::store::{Capabilities, Version};
use lease::LeaseOptions;
use sim::{secs, sleep, World};

fn caps() -> Capabilities {
    Capabilities {
        conditional_delete: true,
        clock_resolution: Duration::from_millis(1),
        store_clock_rule: true,
        wall_clock: true,
        versions_are_unique: true,
    }
}

fn hold(timing: Timing, start: Instant) -> Hold {
    let record = Record {
        format: FORMAT,
        epoch: 1,
        rev: 1,
        state: RecordState::Held,
        ttl_ms: timing.ttl.as_millis() as u64,
        holder: Holder {
            id: "me".into(),
            ..Holder::default()
        },
        acquired_at: None,
        renewed_at: None,
        data: None,
        prev: vec![],
        write: Some("w".into()),
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: None,
    };
    Hold::new("memory://t/k", record, Version::etag("v1"), start, timing)
}

const MS: Duration = Duration::from_millis(1);

/// Each boundary, from both sides, for a 30 s ttl (the defaults: renew 10 s, request timeout
/// 5 s, `lease run`'s kill-after 10 s and margin 1 s) and a 10 s ttl.
#[test]
fn health_changes_at_each_threshold() {
    for (ttl, late_at, unknown_at) in [
        // late: renew + request timeout; unknown: when kill-after + margin is left.
        (30.0, 15.0, 30.0 - 11.0),
        // kill-after ttl/3 = 3.33 s (within the longest, 10 - 5 - 1 = 4 s), margin 1 s.
        (10.0, 5.0, 10.0 - (10.0 / 3.0 + 1.0)),
    ] {
        let timing = LeaseOptions::new(secs(ttl)).timing(&caps()).unwrap();
        // ttl/3 and ttl/6 are rounded to the nanosecond: within a microsecond of the figures.
        let close = |d: Duration, s: f64| (d.as_secs_f64() - s).abs() < 1e-6;
        assert!(close(timing.late_after(), late_at), "ttl {ttl}");
        assert!(close(timing.unknown_within, ttl - unknown_at), "ttl {ttl}");
        let t0 = Instant::now();
        let h = hold(timing, t0);
        let at = |s: f64| t0 + secs(s);
        // The boundaries themselves, as computed.
        let late = t0 + timing.late_after();
        let unknown = at(ttl) - timing.unknown_within;
        assert_eq!(h.health(t0), Health::Healthy);
        assert_eq!(h.health(late - MS), Health::Healthy, "ttl {ttl}");
        assert_eq!(h.health(late), Health::Late, "ttl {ttl}");
        assert_eq!(h.health(unknown - MS), Health::Late, "ttl {ttl}");
        assert_eq!(h.health(unknown), Health::Unknown, "ttl {ttl}");
        assert_eq!(h.health(at(ttl) - MS), Health::Unknown, "ttl {ttl}");
        assert_eq!(h.health(at(ttl)), Health::Lost, "ttl {ttl}");
        // Still held while late or unknown: ensure_held keeps its meaning.
        assert!(h.ensure_held(unknown, Duration::ZERO).is_ok());
        // The next change, from each state.
        assert_eq!(h.next_health_change(t0), Some(late));
        assert_eq!(h.next_health_change(late), Some(unknown));
        assert_eq!(h.next_health_change(unknown), Some(at(ttl)));
        assert_eq!(h.next_health_change(at(ttl)), None);
        assert_eq!(h.health_event(at(ttl)).reason, Some(LostReason::Expired));
    }
}

#[test]
fn a_failed_attempt_is_late_at_once_and_a_landed_renewal_is_healthy_again() {
    let timing = LeaseOptions::new(secs(30.0)).timing(&caps()).unwrap();
    let t0 = Instant::now();
    let mut h = hold(timing, t0);
    h.renewal_failed();
    assert_eq!(h.health(t0 + secs(10.0)), Health::Late);
    let record = h.record.clone();
    h.renewed(record, Version::etag("v2"), t0 + secs(12.0));
    assert_eq!(h.health(t0 + secs(12.0)), Health::Healthy);
    // A failure does not make a near deadline any less near.
    h.renewal_failed();
    assert_eq!(h.health(t0 + secs(12.0 + 19.0)), Health::Unknown);
    // Lost and released leases are not held.
    h.lose(LostReason::Vanished);
    assert_eq!(h.health(t0 + secs(13.0)), Health::Lost);
    let e = h.health_event(t0 + secs(13.0));
    assert_eq!(
        (e.remaining, e.reason),
        (Duration::ZERO, Some(LostReason::Vanished))
    );
}

/// `lease run --kill-after` moves `unknown` with it: its SIGTERM and `unknown` coincide.
#[test]
fn kill_after_sets_when_health_is_unknown() {
    let timing = LeaseOptions::new(secs(30.0))
        .kill_after(secs(4.0))
        .timing(&caps())
        .unwrap();
    assert_eq!(timing.unknown_within, secs(5.0));
    // Never before `late`: at most the longest kill-after (30 - 15 - 1 = 14 s) counts.
    let timing = LeaseOptions::new(secs(30.0))
        .kill_after(secs(25.0))
        .timing(&caps())
        .unwrap();
    assert_eq!(timing.unknown_within, secs(15.0));
    let t0 = Instant::now();
    let h = hold(timing, t0);
    assert_eq!(h.health(t0 + secs(15.0)), Health::Unknown);
}

type Seen = Arc<Mutex<Vec<(Health, Duration, f64, Option<LostReason>)>>>;

/// A holder on its own connection, its health events recorded with the simulated time.
async fn holder(
    world: &World,
    key: &str,
) -> (lease::Lease, lease::store::memory::MemoryStore, Seen) {
    let (client, conn) = world.client("holder", 1);
    let l = client
        .acquire(key, &LeaseOptions::new(secs(10.0)))
        .await
        .unwrap();
    let seen: Seen = Arc::default();
    let start = world.now();
    let (s, clock) = (seen.clone(), world.clock.clone());
    l.on_health(move |e: &HealthEvent| {
        use lease::clock::Clock;
        let t = clock.now().duration_since(start).as_secs_f64();
        s.lock()
            .unwrap()
            .push((e.health, e.remaining, t, e.reason.clone()));
    });
    (l, conn, seen)
}

fn states(seen: &Seen) -> Vec<Health> {
    seen.lock().unwrap().iter().map(|e| e.0).collect()
}

fn time_of(seen: &Seen, h: Health) -> f64 {
    seen.lock().unwrap().iter().find(|e| e.0 == h).unwrap().2
}

/// Renew every 3.33 s, request timeout 1.67 s; unknown with 4.33 s left (5.67 s after the
/// last renewal's send), lost at 10 s.
const UNKNOWN_AT: f64 = 10.0 - (10.0 / 3.0 + 1.0);

#[tokio::test(start_paused = true)]
async fn a_failing_store_is_late_then_unknown_then_lost() {
    let world = World::new();
    let (l, conn, seen) = holder(&world, "health/failing").await;
    let before = metrics::snapshot();
    conn.faults().set_unavailable(true);
    sleep(secs(12.0)).await;
    use Health::*;
    assert_eq!(states(&seen), [Healthy, Late, Unknown, Lost]);
    // Late when the renewal sent at 3.33 s has had its request timeout (5 s in): its put
    // failed, but a write whose outcome is unknown reads back until it knows or the deadline
    // passes, so the renewal is slow rather than failed. Unknown and lost at their thresholds.
    assert!((time_of(&seen, Late) - 5.0).abs() < 0.01, "{:?}", seen);
    assert!(
        (time_of(&seen, Unknown) - UNKNOWN_AT).abs() < 0.01,
        "{:?}",
        seen
    );
    assert!((time_of(&seen, Lost) - 10.0).abs() < 0.01, "{:?}", seen);
    let events = seen.lock().unwrap().clone();
    let unknown = events.iter().find(|e| e.0 == Unknown).unwrap();
    assert!((unknown.1.as_secs_f64() - (10.0 - UNKNOWN_AT)).abs() < 0.01);
    assert_eq!(events.last().unwrap().3, Some(LostReason::Expired));
    assert_eq!(l.health(), Lost);
    // What the metrics counted.
    let after = metrics::snapshot();
    let delta = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let lease = ("lease", "health/failing");
    // One renewal, still resolving its write when the deadline came: one failure.
    assert_eq!(
        delta("lease_renewals_total", &[lease, ("outcome", "failed")]),
        1.0
    );
    assert_eq!(
        delta("lease_losses_total", &[lease, ("reason", "expired")]),
        1.0
    );
    assert_eq!(
        after.value(
            "lease_acquisitions_total",
            &[lease, ("outcome", "acquired")]
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_is_late_then_healthy_when_a_renewal_lands() {
    let world = World::new();
    let (l, conn, seen) = holder(&world, "health/slow").await;
    // Slower than the request timeout: every attempt times out.
    conn.faults().set_latency(secs(2.0));
    sleep(secs(5.3)).await;
    assert_eq!(states(&seen), [Health::Healthy, Health::Late]);
    // Late when the first attempt timed out (3.33 + 1.67 s), not before.
    assert!(
        (time_of(&seen, Health::Late) - 5.0).abs() < 0.01,
        "{:?}",
        seen
    );
    conn.faults().set_latency(secs(0.5));
    sleep(secs(3.0)).await;
    assert_eq!(
        states(&seen),
        [
            Health::Healthy,
            Health::Late,
            Health::Unknown,
            Health::Healthy
        ]
    );
    assert!(l.ensure_held(secs(5.0)).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_partition_that_heals_before_the_deadline_ends_healthy() {
    let world = World::new();
    let (l, conn, seen) = holder(&world, "health/partition").await;
    conn.faults().set_unavailable(true);
    sleep(secs(7.0)).await;
    conn.faults().set_unavailable(false);
    sleep(secs(3.0)).await;
    use Health::*;
    assert_eq!(states(&seen), [Healthy, Late, Unknown, Healthy]);
    assert_eq!(l.health(), Healthy);
    // A release ends the deliveries without a "lost".
    l.release().await.unwrap();
    sleep(secs(20.0)).await;
    assert_eq!(states(&seen), [Healthy, Late, Unknown, Healthy]);
}

#[tokio::test(start_paused = true)]
async fn a_break_is_a_loss_from_healthy_with_its_reason() {
    let world = World::new();
    let (_l, _conn, seen) = holder(&world, "health/broken").await;
    let (operator, _) = world.client("operator", 2);
    operator
        .break_lease("health/broken", None, lease::BreakMode::WaitOutHolder)
        .await
        .unwrap();
    sleep(secs(4.0)).await;
    let events = seen.lock().unwrap().clone();
    assert_eq!(
        events.iter().map(|e| e.0).collect::<Vec<_>>(),
        [Health::Healthy, Health::Lost]
    );
    assert!(
        matches!(events[1].3, Some(LostReason::Broken { .. })),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_learns_the_current_state_first() {
    let world = World::new();
    let (client, conn) = world.client("late-subscriber", 3);
    let l = client
        .acquire("health/current", &LeaseOptions::new(secs(10.0)))
        .await
        .unwrap();
    conn.faults().set_unavailable(true);
    // Past `late` (the renewal sent at 3.33 s has had its request timeout at 5 s), before
    // `unknown` (5.67 s).
    sleep(secs(5.3)).await;
    let mut rx = l.health_changes();
    // The monitor starts with the subscription; its first look is the current state.
    rx.changed().await.unwrap();
    assert_eq!(rx.borrow().health, Health::Late);
    rx.changed().await.unwrap();
    assert_eq!(rx.borrow().health, Health::Unknown);
}
