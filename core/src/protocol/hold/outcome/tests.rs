//! Every answer of [`after_write`] and [`begin_release`]: each outcome of each
//! write, the deadline at its boundary, and the phase each leaves.

use super::*;
use crate::error::ErrorKind;
use crate::protocol::testing::*;

use crate::protocol::hold::tests::held;

fn releasing() -> Hold {
    let mut h = held();
    h.start_release();
    h
}

fn lost() -> Hold {
    Hold {
        phase: Phase::Lost(LostReason::Expired),
        ..held()
    }
}

/// Our next write of `state`, as the driver sends it.
fn ours(h: &Hold, state: RecordState) -> Record {
    h.next_write(state, wall(1.0), &Counter::default())
        .unwrap()
        .0
}

fn landed(g: u64, t_send: f64) -> Result<Written, Error> {
    Ok(Written::Landed {
        version: version(g),
        t_send: at(t_send),
    })
}

fn unknown() -> Result<Written, Error> {
    Err(Error::unavailable("the store did not answer"))
}

fn taken() -> Get {
    found(&record("other", 8, RecordState::Held), 3)
}

fn taken_over() -> LostReason {
    LostReason::TakenOver {
        holder: holder("other"),
        epoch: 8,
    }
}

#[test]
fn a_landed_renewal_is_followed_even_when_its_answer_comes_at_the_deadline() {
    for now in [1.0, 10.0] {
        let mut h = held();
        let renewal = ours(&h, RecordState::Held);
        let next = after_write(
            &mut h,
            Wrote::Renewal,
            renewal.clone(),
            landed(2, 1.0),
            at(now),
        );
        assert!(matches!(next, Next::Renewed), "{next:?}");
        assert_eq!(h.phase, Phase::Held);
        assert_eq!((h.record.clone(), h.version.clone()), (renewal, version(2)));
        assert_eq!(
            h.deadline(),
            at(11.0),
            "the deadline follows the renewal's send"
        );
    }
}

#[test]
fn a_renewal_rejected_or_replaced_loses_the_lease_to_what_is_there_and_tidies_nothing_yet() {
    for outcome in [
        Written::Rejected { current: taken() },
        Written::Replaced { current: taken() },
    ] {
        let mut h = held();
        let renewal = ours(&h, RecordState::Held);
        match after_write(
            &mut h,
            Wrote::Renewal,
            renewal,
            Ok(outcome.clone()),
            at(1.0),
        ) {
            Next::Lost { reason, tidy: None } => assert_eq!(reason, taken_over(), "{outcome:?}"),
            other => panic!("{outcome:?}: {other:?}"),
        }
        assert_eq!(h.phase, Phase::Held, "the loss is the driver's to mark");
        assert_eq!(h.version, version(1), "nothing of it is followed");
    }
    // What is there names who broke us: a break.
    let mut h = held();
    let renewal = ours(&h, RecordState::Held);
    let current = found(&breaking("op", 8, "me", 7), 3);
    let next = after_write(
        &mut h,
        Wrote::Renewal,
        renewal,
        Ok(Written::Rejected { current }),
        at(1.0),
    );
    assert!(
        matches!(
            next,
            Next::Lost {
                reason: LostReason::Broken { epoch: 8, .. },
                tidy: None
            }
        ),
        "{next:?}"
    );
}

/// The renewal of a preempted holder fails its condition, and the record it reads back names
/// it as the holder preempted (issue 23).
#[test]
fn a_renewal_over_a_preemption_of_us_loses_the_lease_as_preempted() {
    let mut h = held();
    let renewal = ours(&h, RecordState::Held);
    let current = found(&preempting("new", 8, "me", 7), 3);
    let next = after_write(
        &mut h,
        Wrote::Renewal,
        renewal,
        Ok(Written::Rejected { current }),
        at(1.0),
    );
    match next {
        Next::Lost {
            reason: LostReason::Preempted { by, epoch: 8 },
            tidy: None,
        } => assert_eq!(by.id, "new"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Held, "the loss is the driver's to mark");
}

#[test]
fn a_renewal_whose_outcome_is_unknown_is_retried_until_the_deadline_then_the_lease_is_lost() {
    let mut h = held();
    let renewal = ours(&h, RecordState::Held);
    match after_write(
        &mut h,
        Wrote::Renewal,
        renewal.clone(),
        unknown(),
        at(9.999),
    ) {
        Next::RetryRenewal(e) => assert_eq!(e.kind(), ErrorKind::Unavailable),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Held);
    assert_eq!(h.version, version(1));
    for now in [10.0, 12.0] {
        let next = after_write(&mut h, Wrote::Renewal, renewal.clone(), unknown(), at(now));
        assert!(
            matches!(
                next,
                Next::Lost {
                    reason: LostReason::Expired,
                    tidy: None
                }
            ),
            "at {now}: {next:?}"
        );
    }
}

#[test]
fn a_renewal_retries_only_until_the_capped_deadline_of_a_shorter_ttl_in_flight() {
    let mut h = held();
    h.want_ttl(secs(4.0));
    let renewal = ours(&h, RecordState::Held);
    h.sending(&renewal, at(1.0));
    assert_eq!(h.deadline(), at(5.0));
    let next = after_write(
        &mut h,
        Wrote::Renewal,
        renewal.clone(),
        unknown(),
        at(4.999),
    );
    assert!(matches!(next, Next::RetryRenewal(_)), "{next:?}");
    let next = after_write(&mut h, Wrote::Renewal, renewal, unknown(), at(5.0));
    assert!(
        matches!(
            next,
            Next::Lost {
                reason: LostReason::Expired,
                ..
            }
        ),
        "{next:?}"
    );
}

#[test]
fn a_landed_release_is_released_and_remembered_for_the_one_write_reacquire() {
    let mut h = releasing();
    let release = ours(&h, RecordState::Released);
    match after_write(&mut h, Wrote::Release, release, landed(2, 1.0), at(1.0)) {
        Next::Released { remember } => assert_eq!(remember, Some(version(2))),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Released);
}

#[test]
fn a_release_replaced_already_or_found_landed_earlier_is_released_and_not_remembered() {
    let earlier = Record {
        rev: 2,
        ..record("me", 7, RecordState::Released)
    };
    for outcome in [
        Written::Replaced { current: taken() },
        Written::Rejected {
            current: found(&earlier, 2),
        },
    ] {
        let mut h = releasing();
        let release = ours(&h, RecordState::Released);
        match after_write(
            &mut h,
            Wrote::Release,
            release,
            Ok(outcome.clone()),
            at(1.0),
        ) {
            Next::Released { remember } => assert_eq!(remember, None, "{outcome:?}"),
            other => panic!("{outcome:?}: {other:?}"),
        }
        assert_eq!(h.phase, Phase::Released, "{outcome:?}");
    }
}

#[test]
fn a_release_rejected_by_another_record_loses_the_lease_and_tidies_over_what_is_there() {
    let mut h = releasing();
    let release = ours(&h, RecordState::Released);
    let outcome = Ok(Written::Rejected { current: taken() });
    match after_write(&mut h, Wrote::Release, release, outcome, at(1.0)) {
        Next::Lost {
            reason,
            tidy: Some(current),
        } => {
            assert_eq!(reason, taken_over());
            assert_eq!(current, taken());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.phase,
        Phase::Releasing,
        "the loss is the driver's to mark"
    );
}

#[test]
fn a_release_whose_outcome_is_unknown_stays_being_released() {
    let mut h = releasing();
    let release = ours(&h, RecordState::Released);
    match after_write(&mut h, Wrote::Release, release, unknown(), at(1.0)) {
        Next::ReleaseUnknown(e) => assert_eq!(e.kind(), ErrorKind::Unavailable),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Releasing);
    assert!(!h.believes(at(1.0)));
}

#[test]
fn a_tidy_write_is_remembered_only_when_it_landed_and_leaves_the_loss_as_it_is() {
    let mut h = lost();
    let current = found(&record("me", 7, RecordState::Held), 4);
    let (tidy, _) = h.tidy(&current, wall(2.0), &Counter::default()).unwrap();
    match after_write(&mut h, Wrote::Tidy, tidy.clone(), landed(5, 2.0), at(2.0)) {
        Next::Tidied { remember } => assert_eq!(remember, Some(version(5))),
        other => panic!("{other:?}"),
    }
    for outcome in [
        Ok(Written::Rejected { current: taken() }),
        Ok(Written::Replaced { current: taken() }),
        unknown(),
    ] {
        match after_write(&mut h, Wrote::Tidy, tidy.clone(), outcome, at(2.0)) {
            Next::Tidied { remember } => assert_eq!(remember, None),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(h.phase, Phase::Lost(LostReason::Expired));
}

#[test]
fn a_release_of_a_believed_lease_stops_belief_and_sends_our_released_record() {
    let mut h = held();
    let e = Counter::default();
    match begin_release(&mut h, at(9.999), wall(3.0), &e) {
        ReleaseStart::Send(record, cond) => {
            assert_eq!(cond, Cond::Match(version(1)));
            assert_eq!(record.state, RecordState::Released);
            assert_eq!((record.epoch, &record.holder.id[..]), (7, "me"));
            assert_eq!(record.write.as_deref(), Some("n1"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Releasing);
}

#[test]
fn a_release_past_the_deadline_of_a_held_lease_is_its_loss_by_expiry_and_sends_nothing() {
    for now in [10.0, 11.0] {
        let mut h = held();
        let start = begin_release(&mut h, at(now), wall(3.0), &Counter::default());
        assert!(
            matches!(start, ReleaseStart::Lost(LostReason::Expired)),
            "at {now}: {start:?}"
        );
        assert_eq!(h.phase, Phase::Held, "the loss is the driver's to mark");
    }
}

#[test]
fn a_release_whose_outcome_was_unknown_is_sent_again_with_a_fresh_nonce_even_past_the_deadline() {
    let mut h = releasing();
    let e = Counter::default();
    let first = ours(&h, RecordState::Released);
    match begin_release(&mut h, at(12.0), wall(3.0), &e) {
        ReleaseStart::Send(record, cond) => {
            assert_eq!(cond, Cond::Match(version(1)));
            assert_eq!(record.state, RecordState::Released);
            assert_eq!(record.write.as_deref(), Some("n1"));
            assert_eq!(record.prev, first.prev);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Releasing);
}

#[test]
fn a_release_of_a_released_or_lost_lease_sends_nothing() {
    let mut h = held();
    h.released();
    let start = begin_release(&mut h, at(1.0), wall(1.0), &Counter::default());
    assert!(matches!(start, ReleaseStart::Done), "{start:?}");
    let mut h = Hold {
        phase: Phase::Lost(taken_over()),
        ..held()
    };
    match begin_release(&mut h, at(1.0), wall(1.0), &Counter::default()) {
        ReleaseStart::Lost(reason) => assert_eq!(reason, taken_over()),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.phase, Phase::Lost(taken_over()));
}
