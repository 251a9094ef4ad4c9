//! One conditional write until its outcome is known: each answer, each read-back, each limit.

use super::*;
use crate::protocol::testing::*;
use crate::record::RecordState;

const URL: &str = "memory://t/job";

/// Our write: `me` at epoch 7 with nonce `w-me-7`, giving up at `at(10)`.
fn ours() -> Record {
    record("me", 7, RecordState::Held)
}

fn op(cond: Cond) -> WriteOp {
    WriteOp::new(URL, &ours(), cond, at(10.0), &timing())
}

/// An operation whose write was sent at `at(0)`.
fn sent(cond: Cond) -> WriteOp {
    let mut w = op(cond);
    let step = w.step(WriteEvent::Start, at(0.0), &Counter::default());
    assert!(matches!(step, WriteStep::Put { .. }), "{step:?}");
    w
}

fn step(w: &mut WriteOp, event: WriteEvent, t: f64) -> WriteStep {
    w.step(event, at(t), &Counter::default())
}

fn read(get: Get) -> WriteEvent {
    WriteEvent::Read(Ok(get))
}

fn outcome(s: WriteStep) -> Result<Written> {
    match s {
        WriteStep::Done(r) => r,
        other => panic!("expected an outcome, got {other:?}"),
    }
}

/// The step sends our record again, with the same condition.
fn assert_resent(s: WriteStep, cond: &Cond) {
    match s {
        WriteStep::Put { bytes, cond: again } => {
            assert_eq!((bytes, &again), (ours().to_bytes(), cond));
        }
        other => panic!("expected the write sent again, got {other:?}"),
    }
}

fn unavailable() -> Error {
    Error::unavailable("no answer")
}

/// Someone else's record, replacing what we wrote over.
fn theirs() -> Record {
    record("other", 8, RecordState::Held)
}

/// A record that replaced ours (it names our nonce in `prev`).
fn replacing_ours() -> Record {
    Record {
        prev: ours().prev_for_successor(),
        ..theirs()
    }
}

#[test]
fn the_write_is_sent_with_its_bytes_and_condition_and_t_send_is_read_first() {
    let mut w = op(Cond::Match(version(1)));
    assert_eq!(w.t_send(), None);
    assert_eq!(w.nonce(), "w-me-7");
    match step(&mut w, WriteEvent::Start, 2.0) {
        WriteStep::Put { bytes, cond } => {
            assert_eq!(bytes, ours().to_bytes());
            assert_eq!(cond, Cond::Match(version(1)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.t_send(), Some(at(2.0)));
    let landed = step(
        &mut w,
        WriteEvent::Put(Ok(Put::Written {
            version: version(2),
            server_now: None,
        })),
        3.0,
    );
    assert_eq!(
        outcome(landed).unwrap(),
        Written::Landed {
            version: version(2),
            t_send: at(2.0)
        }
    );
}

#[test]
fn a_failed_condition_or_an_unknown_outcome_is_read_back_other_errors_end_the_write() {
    let mut w = sent(Cond::Create);
    assert!(matches!(
        step(&mut w, WriteEvent::Put(Ok(Put::ConditionFailed)), 1.0),
        WriteStep::Read
    ));
    let mut w = sent(Cond::Create);
    assert!(matches!(
        step(&mut w, WriteEvent::Put(Err(unavailable())), 1.0),
        WriteStep::Read
    ));
    let mut w = sent(Cond::Create);
    let e = outcome(step(
        &mut w,
        WriteEvent::Put(Err(Error::store("denied"))),
        1.0,
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store);
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Ok(Put::ConditionFailed)), 1.0);
    let e = outcome(step(
        &mut w,
        WriteEvent::Read(Err(Error::store("denied"))),
        1.0,
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Store);
}

#[test]
fn a_read_back_that_shows_our_nonce_means_landed_since_the_first_send() {
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Err(unavailable())), 4.0);
    let landed = step(&mut w, read(found(&ours(), 5)), 6.0);
    assert_eq!(
        outcome(landed).unwrap(),
        Written::Landed {
            version: version(5),
            t_send: at(0.0)
        }
    );
}

#[test]
fn a_read_back_that_names_our_nonce_as_replaced_means_landed_and_replaced() {
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Ok(Put::ConditionFailed)), 1.0);
    let current = found(&replacing_ours(), 6);
    assert_eq!(
        outcome(step(&mut w, read(current.clone()), 1.0)).unwrap(),
        Written::Replaced { current }
    );
}

#[test]
fn anything_else_where_the_condition_fails_means_rejected() {
    let rejected = [
        // Another version than the one we wrote over.
        (Cond::Match(version(1)), found(&theirs(), 2)),
        (Cond::Match(version(1)), found_corrupt(2)),
        // Gone, where we wrote over a version.
        (Cond::Match(version(1)), not_found()),
        // Present, where we created.
        (Cond::Create, found(&theirs(), 1)),
    ];
    for (cond, current) in rejected {
        let mut w = sent(cond);
        step(&mut w, WriteEvent::Put(Ok(Put::ConditionFailed)), 1.0);
        assert_eq!(
            outcome(step(&mut w, read(current.clone()), 1.0)).unwrap(),
            Written::Rejected {
                current: current.clone()
            },
            "{current:?}"
        );
    }
}

#[test]
fn where_the_condition_still_holds_the_same_bytes_are_sent_again_after_a_backoff() {
    for (cond, current) in [
        (Cond::Match(version(1)), found(&theirs(), 1)),
        (Cond::Create, not_found()),
    ] {
        let mut w = sent(cond.clone());
        step(&mut w, WriteEvent::Put(Err(unavailable())), 1.0);
        // The first pause of the lease's backoff (10 s ttl: 50 ms), doubling after.
        assert!(matches!(
            step(&mut w, read(current.clone()), 2.0),
            WriteStep::Sleep(d) if d == secs(0.05)
        ));
        assert_resent(step(&mut w, WriteEvent::Slept, 2.05), &cond);
        assert_eq!(w.t_send(), Some(at(0.0)), "t_send stays the first send's");
        step(&mut w, WriteEvent::Put(Err(unavailable())), 3.0);
        assert!(matches!(
            step(&mut w, read(current), 4.0),
            WriteStep::Sleep(d) if d == secs(0.1)
        ));
        // The resend lands: landed since the first send.
        step(&mut w, WriteEvent::Slept, 4.1);
        let landed = step(
            &mut w,
            WriteEvent::Put(Ok(Put::Written {
                version: version(9),
                server_now: None,
            })),
            4.2,
        );
        assert_eq!(
            outcome(landed).unwrap(),
            Written::Landed {
                version: version(9),
                t_send: at(0.0)
            }
        );
    }
}

#[test]
fn a_write_not_landed_is_not_resent_once_it_gives_up() {
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Err(unavailable())), 9.0);
    assert!(matches!(
        step(&mut w, read(not_found()), 9.999),
        WriteStep::Sleep(_)
    ));
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Err(unavailable())), 9.0);
    let e = outcome(step(&mut w, read(not_found()), 10.0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.message().contains("could not write memory://t/job"),
        "{e}"
    );
}

#[test]
fn a_read_back_that_fails_is_tried_again_until_the_write_gives_up() {
    let mut w = sent(Cond::Create);
    step(&mut w, WriteEvent::Put(Err(unavailable())), 1.0);
    assert!(matches!(
        step(&mut w, WriteEvent::Read(Err(unavailable())), 9.999),
        WriteStep::Sleep(d) if d == secs(0.05)
    ));
    assert!(matches!(
        step(&mut w, WriteEvent::Slept, 9.999),
        WriteStep::Read
    ));
    let e = outcome(step(&mut w, WriteEvent::Read(Err(unavailable())), 10.0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.to_string()
            .contains("the outcome of a write to memory://t/job is unknown"),
        "{e}"
    );
}

/// A store that came back (a partition healed): the read-backs that failed already paused, so
/// the first one that answers "not landed" sends again at once. Waiting one more backoff there
/// (up to renew/2) was the time a renewal lacked to land before the deadline (core/tests/
/// health.rs, `a_partition_that_heals_before_the_deadline_ends_healthy`).
#[test]
fn after_failed_read_backs_a_write_not_landed_is_sent_again_at_once() {
    for (cond, current) in [
        (Cond::Match(version(1)), found(&theirs(), 1)),
        (Cond::Create, not_found()),
    ] {
        let mut w = sent(cond.clone());
        step(&mut w, WriteEvent::Put(Err(unavailable())), 1.0);
        assert!(matches!(
            step(&mut w, WriteEvent::Read(Err(unavailable())), 1.0),
            WriteStep::Sleep(_)
        ));
        assert!(matches!(
            step(&mut w, WriteEvent::Slept, 1.05),
            WriteStep::Read
        ));
        // Sent again at once.
        assert_resent(step(&mut w, read(current.clone()), 1.1), &cond);
        assert_eq!(w.t_send(), Some(at(0.0)), "t_send stays the first send's");
        // The resend fails too, and the store answers at once: now it pauses again, so two
        // sends are never back to back.
        step(&mut w, WriteEvent::Put(Err(unavailable())), 1.2);
        assert!(matches!(
            step(&mut w, read(current), 1.3),
            WriteStep::Sleep(_)
        ));
    }
}
