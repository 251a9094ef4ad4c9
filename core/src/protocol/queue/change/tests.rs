//! Every decision of a change of a queued lock's record (a leave, a removal, permits).

use std::time::{Duration, SystemTime};

use super::*;
use crate::protocol::queue::tests::{entry, found, join, t0, timing, version, NoJitter};
use crate::protocol::queue::{Mode, Scope, MAX_QUEUE_RECORD_LEN};

/// A holder `a` and a waiter `b`.
fn lock() -> QueueRecord {
    let r = join(
        &QueueRecord::new(10, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    );
    join(&r, entry("b", Mode::Exclusive, Scope::Whole))
}

fn op(change: Change) -> ChangeOp {
    ChangeOp::new(
        "file:///l",
        change,
        MAX_QUEUE_RECORD_LEN,
        t0() + Duration::from_secs(30),
        &timing(),
    )
}

fn step(o: &mut ChangeOp, e: ChangeEvent) -> ChangeStep {
    o.step(e, t0(), SystemTime::UNIX_EPOCH, &NoJitter)
}

#[test]
fn a_leave_reads_writes_on_the_version_read_and_grants_the_next() {
    let mut o = op(Change::Leave("a".into()));
    assert!(matches!(step(&mut o, ChangeEvent::Start), ChangeStep::Read));
    let r = lock();
    let ChangeStep::Write { bytes, cond } =
        step(&mut o, ChangeEvent::Read(Ok(found(&r.to_bytes(), 4))))
    else {
        panic!("no write")
    };
    assert_eq!(cond, Cond::Match(version(4)));
    let next = match crate::protocol::queue::classify(&bytes) {
        Classified::Queue(n) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        next.position("b"),
        crate::protocol::queue::Position::Granted { token: 12 }
    );
    let done = step(
        &mut o,
        ChangeEvent::Wrote(Ok(Put::Written {
            version: version(5),
            server_now: None,
        })),
    );
    match done {
        ChangeStep::Done(Ok(Changed::Applied {
            record,
            version: v,
            before,
            wrote,
        })) => {
            assert_eq!(
                (record, v, before, wrote),
                (next, version(5), Some(r), true)
            );
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 22 item 1: the tokens a leave hands out start above the wall clock read when it
/// writes (after its read), or above the record's epoch, whichever is higher.
#[test]
fn a_leave_grants_above_its_clock_and_above_the_record() {
    let r = lock();
    let clock = SystemTime::UNIX_EPOCH + Duration::from_millis(5_000);
    for (wall, token) in [(clock, 5_001), (SystemTime::UNIX_EPOCH, 12)] {
        let mut o = op(Change::Leave("a".into()));
        o.step(ChangeEvent::Start, t0(), wall, &NoJitter);
        let ChangeStep::Write { bytes, .. } = o.step(
            ChangeEvent::Read(Ok(found(&r.to_bytes(), 4))),
            t0(),
            wall,
            &NoJitter,
        ) else {
            panic!("no write")
        };
        let Classified::Queue(next) = crate::protocol::queue::classify(&bytes) else {
            panic!("not a queue")
        };
        assert_eq!(
            next.position("b"),
            crate::protocol::queue::Position::Granted { token }
        );
    }
}

#[test]
fn a_known_record_is_written_first_and_a_failed_condition_reads_again() {
    let r = lock();
    let mut o = op(Change::Leave("a".into())).knowing(r.clone(), version(4));
    assert!(matches!(
        step(&mut o, ChangeEvent::Start),
        ChangeStep::Write { cond: Cond::Match(v), .. } if v == version(4)
    ));
    assert!(matches!(
        step(&mut o, ChangeEvent::Wrote(Ok(Put::ConditionFailed))),
        ChangeStep::Read
    ));
    // Someone else's write removed `a` already: nothing to write.
    let gone = r
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    match step(&mut o, ChangeEvent::Read(Ok(found(&gone.to_bytes(), 6)))) {
        ChangeStep::Done(Ok(Changed::Applied { wrote, before, .. })) => {
            assert!(!wrote && before.is_none())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_record_that_keeps_changing_ends_the_change_after_max_rounds() {
    let r = lock();
    let mut o = op(Change::Leave("a".into()));
    step(&mut o, ChangeEvent::Start);
    for round in 1..=MAX_ROUNDS {
        assert!(matches!(
            step(&mut o, ChangeEvent::Read(Ok(found(&r.to_bytes(), 4)))),
            ChangeStep::Write { .. }
        ));
        match step(&mut o, ChangeEvent::Wrote(Ok(Put::ConditionFailed))) {
            ChangeStep::Read => assert!(round < MAX_ROUNDS),
            ChangeStep::Done(Err(e)) => {
                assert_eq!(round, MAX_ROUNDS);
                assert_eq!(e.kind(), ErrorKind::Unavailable);
                assert!(e.to_string().contains("kept changing"), "{e}");
                return;
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("never gave up");
}

#[test]
fn no_lock_is_nothing_to_change_and_a_newer_record_is_refused() {
    for get in [
        Get::NotFound { server_now: None },
        found(br#"{"format":1,"epoch":3}"#, 2),
        found(b"garbage", 2),
        found(br#"{"format":2,"epoch":"x"}"#, 2),
    ] {
        let mut o = op(Change::Leave("a".into()));
        step(&mut o, ChangeEvent::Start);
        assert!(matches!(
            step(&mut o, ChangeEvent::Read(Ok(get))),
            ChangeStep::Done(Ok(Changed::NoLock))
        ));
    }
    let mut o = op(Change::Leave("a".into()));
    step(&mut o, ChangeEvent::Start);
    match step(&mut o, ChangeEvent::Read(Ok(found(br#"{"format":3}"#, 2)))) {
        ChangeStep::Done(Err(e)) => {
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert_eq!(e.lease(), Some("file:///l"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_outcome_is_read_back_after_a_pause_until_giving_up() {
    let mut o = op(Change::Leave("a".into()));
    step(&mut o, ChangeEvent::Start);
    let unavailable = || Err(Error::unavailable("timed out"));
    assert!(matches!(
        step(&mut o, ChangeEvent::Read(unavailable())),
        ChangeStep::Sleep(_)
    ));
    assert!(matches!(step(&mut o, ChangeEvent::Slept), ChangeStep::Read));
    step(&mut o, ChangeEvent::Read(Ok(found(&lock().to_bytes(), 4))));
    assert!(matches!(
        step(
            &mut o,
            ChangeEvent::Wrote(Err(Error::unavailable("timed out")))
        ),
        ChangeStep::Sleep(_)
    ));
    assert!(matches!(step(&mut o, ChangeEvent::Slept), ChangeStep::Read));
    // Past the give-up instant: the error, with the lock's URL.
    let late = t0() + Duration::from_secs(31);
    match o.step(
        ChangeEvent::Read(unavailable()),
        late,
        SystemTime::UNIX_EPOCH,
        &NoJitter,
    ) {
        ChangeStep::Done(Err(e)) => {
            assert_eq!(e.kind(), ErrorKind::Unavailable);
            assert_eq!(e.lease(), Some("file:///l"));
        }
        other => panic!("{other:?}"),
    }
    // Any other error ends it at once.
    let mut o = op(Change::Leave("a".into()));
    step(&mut o, ChangeEvent::Start);
    assert!(matches!(
        step(&mut o, ChangeEvent::Read(Err(Error::store("denied")))),
        ChangeStep::Done(Err(e)) if e.kind() == ErrorKind::Store
    ));
}

#[test]
fn a_join_that_does_not_fit_is_refused_and_permits_change_in_one_write() {
    let r = lock();
    let mut o = ChangeOp::new(
        "file:///l",
        Change::Join(entry("c", Mode::Exclusive, Scope::Whole)),
        r.to_bytes().len(),
        t0(),
        &timing(),
    );
    step(&mut o, ChangeEvent::Start);
    match step(&mut o, ChangeEvent::Read(Ok(found(&r.to_bytes(), 4)))) {
        ChangeStep::Done(Err(e)) => assert_eq!(e.kind(), ErrorKind::QueueFull),
        other => panic!("{other:?}"),
    }
    let mut o = op(Change::SetPermits(Some(3)));
    assert_eq!(o.change(), &Change::SetPermits(Some(3)));
    step(&mut o, ChangeEvent::Start);
    assert!(matches!(
        step(&mut o, ChangeEvent::Read(Ok(found(&r.to_bytes(), 4)))),
        ChangeStep::Write { .. }
    ));
}
