//! Every decision of a holder's confirmation of the lock's record.

use std::time::Duration;

use super::*;
use crate::error::Error;
use crate::protocol::queue::tests::{entry, found, join, secs, t0, version};
use crate::protocol::queue::{Change, Mode, Scope, MAX_QUEUE_RECORD_LEN};

const TTL: Duration = Duration::from_secs(10);

fn wall() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_000)
}

/// `a` holds, `b` waits.
fn lock() -> QueueRecord {
    let r = join(
        &QueueRecord::new(10, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    );
    join(&r, entry("b", Mode::Exclusive, Scope::Whole))
}

/// `a`'s grant, confirmed at t0 by version 4.
fn held() -> GrantHold {
    GrantHold::new(
        "locks/job",
        "a",
        TTL,
        Confirmation {
            record: lock(),
            version: version(4),
            sent: t0(),
        },
    )
}

fn lost_reason(step: ConfirmStep) -> String {
    match step {
        ConfirmStep::Lost(r) => r.to_string(),
        other => panic!("not lost: {other:?}"),
    }
}

#[test]
fn an_unchanged_record_confirms_until_the_read_was_sent_plus_the_ttl() {
    let mut h = held();
    assert_eq!(h.deadline(), t0() + TTL);
    assert_eq!(h.session_key(), "locks/job.q/a");
    assert_eq!(h.key(), "locks/job");
    let sent = t0() + secs(3.0);
    assert_eq!(
        h.step(ConfirmEvent::Start, sent, wall()),
        ConfirmStep::Read {
            if_none_match: Some(version(4))
        }
    );
    let answered = sent + secs(0.5);
    assert_eq!(
        h.step(
            ConfirmEvent::Read(Ok(Get::NotModified { server_now: None })),
            answered,
            wall()
        ),
        ConfirmStep::Confirmed
    );
    assert_eq!(
        h.deadline(),
        sent + TTL,
        "counted from the send, not the answer"
    );
}

#[test]
fn a_changed_record_that_still_lists_the_grant_confirms_it() {
    let mut h = held();
    let sent = t0() + secs(3.0);
    h.step(ConfirmEvent::Start, sent, wall());
    let r = join(&lock(), entry("c", Mode::Shared, Scope::Whole));
    assert_eq!(
        h.step(
            ConfirmEvent::Read(Ok(found(&r.to_bytes(), 7))),
            sent,
            wall()
        ),
        ConfirmStep::Confirmed
    );
    assert_eq!(h.record(), &r);
    assert_eq!(
        h.step(ConfirmEvent::Start, sent, wall()),
        ConfirmStep::Read {
            if_none_match: Some(version(7))
        }
    );
}

#[test]
fn a_record_without_the_grant_or_of_another_kind_loses_it_saying_which() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            lock()
                .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
                .unwrap()
                .unwrap()
                .to_bytes()
                .to_vec(),
            "made again without this grant",
        ),
        (
            {
                // Made again with `a` waiting behind another.
                let r = join(
                    &QueueRecord::new(50, None),
                    entry("z", Mode::Exclusive, Scope::Whole),
                );
                join(&r, entry("a", Mode::Exclusive, Scope::Whole))
                    .to_bytes()
                    .to_vec()
            },
            "waiting, not granted",
        ),
        (
            br#"{"format":3}"#.to_vec(),
            "newer version of lease (format 3)",
        ),
        (
            crate::record::Record {
                format: 1,
                epoch: 9,
                ttl_ms: 1000,
                write: None,
                ..crate::protocol::testing::record("x", 9, crate::record::RecordState::Held)
            }
            .to_bytes()
            .to_vec(),
            "replaced by a lease record",
        ),
        (b"garbage".to_vec(), "overwritten with something unreadable"),
    ];
    for (bytes, what) in cases {
        let mut h = held();
        h.step(ConfirmEvent::Start, t0(), wall());
        let reason = lost_reason(h.step(ConfirmEvent::Read(Ok(found(&bytes, 9))), t0(), wall()));
        assert!(reason.contains(what), "{reason} (expected {what})");
        assert!(reason.starts_with("the lock's record was"), "{reason}");
    }
}

#[test]
fn a_deleted_record_is_made_again_as_last_seen_above_every_token_handed_out() {
    let mut h = held();
    let sent = t0() + secs(3.0);
    h.step(ConfirmEvent::Start, sent, wall());
    let store_now = wall() + secs(5.0);
    let ConfirmStep::Write { bytes, cond } = h.step(
        ConfirmEvent::Read(Ok(Get::NotFound {
            server_now: Some(store_now),
        })),
        sent,
        wall(),
    ) else {
        panic!("not made again")
    };
    assert_eq!(cond, Cond::Create);
    let again = match super::super::classify(&bytes) {
        Classified::Queue(r) => r,
        other => panic!("{other:?}"),
    };
    // The store's clock (the later of the two) is the floor; grants and waiters kept.
    assert_eq!(again.epoch, 1_767_225_605_000);
    assert_eq!(again.grants, lock().grants);
    assert_eq!(again.queue, lock().queue);
    let wrote_at = sent + secs(0.2);
    assert_eq!(
        h.step(
            ConfirmEvent::Wrote(Ok(Put::Written {
                version: version(11),
                server_now: None
            })),
            wrote_at,
            wall()
        ),
        ConfirmStep::Confirmed
    );
    assert_eq!(h.deadline(), sent + TTL);
    assert_eq!(h.record(), &again);
    // A record with a higher epoch than the clock keeps its own, plus one.
    let mut h = held();
    h.step(ConfirmEvent::Start, sent, SystemTime::UNIX_EPOCH);
    let ConfirmStep::Write { bytes, .. } = h.step(
        ConfirmEvent::Read(Ok(Get::NotFound { server_now: None })),
        sent,
        SystemTime::UNIX_EPOCH,
    ) else {
        panic!("not made again")
    };
    match super::super::classify(&bytes) {
        Classified::Queue(r) => assert_eq!(r.epoch, lock().epoch + 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn made_again_by_someone_else_first_reads_theirs() {
    let mut h = held();
    h.step(ConfirmEvent::Start, t0(), wall());
    h.step(
        ConfirmEvent::Read(Ok(Get::NotFound { server_now: None })),
        t0(),
        wall(),
    );
    assert_eq!(
        h.step(ConfirmEvent::Wrote(Ok(Put::ConditionFailed)), t0(), wall()),
        ConfirmStep::Read {
            if_none_match: None
        }
    );
    // Theirs carried us forward (a waiter that saw us): confirmed.
    let theirs = lock().restored(1_767_225_609_000);
    assert_eq!(
        h.step(
            ConfirmEvent::Read(Ok(found(&theirs.to_bytes(), 12))),
            t0(),
            wall()
        ),
        ConfirmStep::Confirmed
    );
}

#[test]
fn a_store_that_does_not_answer_is_tried_again_without_confirming() {
    let mut h = held();
    let sent = t0() + secs(3.0);
    h.step(ConfirmEvent::Start, sent, wall());
    assert_eq!(
        h.step(
            ConfirmEvent::Read(Err(Error::unavailable("timed out"))),
            sent,
            wall()
        ),
        ConfirmStep::Retry
    );
    assert_eq!(h.deadline(), t0() + TTL, "not confirmed");
    h.step(ConfirmEvent::Start, sent, wall());
    h.step(
        ConfirmEvent::Read(Ok(Get::NotFound { server_now: None })),
        sent,
        wall(),
    );
    assert_eq!(
        h.step(
            ConfirmEvent::Wrote(Err(Error::unavailable("timed out"))),
            sent,
            wall()
        ),
        ConfirmStep::Retry
    );
}

fn yield_ask(by: &str, reason: &str) -> Change {
    Change::Yield(crate::protocol::queue::YieldAsk {
        by: by.into(),
        to: None,
        reason: Some(reason.into()),
    })
}

fn confirm_with(h: &mut GrantHold, r: &QueueRecord, n: u64) -> ConfirmStep {
    let sent = t0() + secs(3.0);
    h.step(ConfirmEvent::Start, sent, wall());
    h.step(
        ConfirmEvent::Read(Ok(found(&r.to_bytes(), n))),
        sent,
        wall(),
    )
}

/// Issue 23, "Yield on request": a request naming the grant is reported once, and is no loss.
#[test]
fn a_yield_request_naming_the_grant_is_reported_once_and_the_grant_stays_confirmed() {
    let mut h = held();
    assert_eq!(h.take_yield(), None);
    let asked = lock()
        .apply(&yield_ask("b", "deploy"), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert_eq!(confirm_with(&mut h, &asked, 5), ConfirmStep::Confirmed);
    let told = h.take_yield().expect("told");
    assert_eq!(
        (told.by.as_str(), told.reason.as_deref(), told.to),
        ("b", Some("deploy"), None)
    );
    assert_eq!(h.take_yield(), None, "taken once");
    // The same request seen again (the record changed for another reason): not again.
    let later = join(&asked, entry("c", Mode::Shared, Scope::Whole));
    assert_eq!(confirm_with(&mut h, &later, 6), ConfirmStep::Confirmed);
    assert_eq!(h.take_yield(), None);
    // Another request (another reason) is a new one: reported.
    let again = later
        .apply(&yield_ask("ops", "drain"), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert_eq!(confirm_with(&mut h, &again, 7), ConfirmStep::Confirmed);
    assert_eq!(h.take_yield().unwrap().by, "ops");
}

/// A request that names another tenure (a token not this grant's) is never reported to it.
#[test]
fn a_yield_request_naming_another_tenure_is_not_reported() {
    let mut h = held();
    let mut r = lock()
        .apply(&yield_ask("b", "deploy"), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    // The request names a token that is not `a`'s (an earlier tenure of the lock).
    r.yield_request.as_mut().unwrap().tokens = vec![r.grants[0].token.unwrap() - 1];
    assert_eq!(confirm_with(&mut h, &r, 5), ConfirmStep::Confirmed);
    assert_eq!(h.take_yield(), None);
}

/// A grant whose granting record already names it (a record made again with a standing
/// request) reports it from the start.
#[test]
fn a_grant_confirmed_by_a_record_naming_it_is_told_at_once() {
    let asked = lock()
        .apply(&yield_ask("b", "now"), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    let mut h = GrantHold::new(
        "locks/job",
        "a",
        TTL,
        Confirmation {
            record: asked,
            version: version(4),
            sent: t0(),
        },
    );
    assert_eq!(h.take_yield().unwrap().reason.as_deref(), Some("now"));
    // A participant that waits is told nothing (no grant).
    let mut w = GrantHold::new(
        "locks/job",
        "b",
        TTL,
        Confirmation {
            record: h.record().clone(),
            version: version(4),
            sent: t0(),
        },
    );
    assert_eq!(w.take_yield(), None);
}

/// Issue 23, "Preemption": a grant removed by a preemption learns at its next confirmation who
/// took it and at which token, even when the preemptor has released since.
#[test]
fn a_grant_removed_by_a_preemption_is_lost_as_preempted_naming_the_preemptor() {
    let p = entry("p", Mode::Exclusive, Scope::Whole);
    let preempted = lock()
        .apply(&Change::Preempt(p), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    let mut h = held();
    match confirm_with(&mut h, &preempted, 5) {
        ConfirmStep::Lost(LostReason::Preempted { by, epoch }) => {
            assert_eq!((by.id.as_str(), epoch), ("p", 12));
        }
        other => panic!("not preempted: {other:?}"),
    }
    // The preemptor released at once (`lease run -n`): the record still says who removed `a`.
    let left = preempted
        .apply(&Change::Leave("p".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    let reason = lost_reason(confirm_with(&mut held(), &left, 6));
    assert!(reason.starts_with("preempted by"), "{reason}");
    // A record naming another tenure of `a` as preempted does not say `a`'s grant was.
    let mut other = preempted.clone();
    other.preempted.as_mut().unwrap().removed[0].token = 3;
    let reason = lost_reason(confirm_with(&mut held(), &other, 7));
    assert!(reason.contains("this grant was removed"), "{reason}");
}
