//! Every decision of a shared session's owner: numbers, attach before join (with group
//! commit), belief, release and its pending leave, loss to every grant, lapse, idle release and
//! close — each at its boundary.

use super::*;
use crate::error::ErrorKind;
use crate::protocol::hold::{begin_release, ReleaseStart};
use crate::protocol::testing::*;

const SID: &str = "0123456789abcdef0123456789abcdef";
const LOCK: &str = "jobs/a";

/// A session opened at `at(0)`: 10 s ttl (deadline `at(10)`), renewals due at `at(10/3)`.
fn open(idle: Option<Duration>) -> Owner {
    let hold = Hold::new(
        "memory://t/.lease-sessions/s",
        record(SID, 1, RecordState::Held),
        version(1),
        at(0.0),
        timing(),
    );
    Owner::new(SID, hold, idle, at(0.0))
}

fn landed(g: u64, t_send: f64) -> Result<Written, Error> {
    Ok(Written::Landed {
        version: version(g),
        t_send: at(t_send),
    })
}

fn unknown() -> Result<Written, Error> {
    Err(Error::new(ErrorKind::Unavailable, "no answer"))
}

/// Write the session at `t` and let it land (generation `g`): the numbers it attached.
fn write_lands(o: &mut Owner, g: u64, t: f64) -> (Record, Vec<u64>, Vec<Leave>) {
    let (record, cond) = o.next_write(at(t), wall(t), &Counter::default()).unwrap();
    assert_eq!(cond, Cond::Match(o.hold().version.clone()));
    match o.wrote(record.clone(), landed(g, t), at(t)) {
        Outcome::Renewed { attached, leaves } => (record, attached, leaves),
        other => panic!("{other:?}"),
    }
}

/// Number `n` attached (and landed) to the lock `LOCK`.
fn attached(o: &mut Owner, t: f64) -> u64 {
    let n = o.attach(LOCK, at(t)).unwrap();
    let (_, now_attached, _) = write_lands(o, 10 + n, t);
    assert!(now_attached.contains(&n));
    n
}

#[test]
fn numbers_start_at_one_and_are_never_reused() {
    let mut o = open(None);
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(1));
    assert_eq!(o.attach("jobs/b", at(0.0)), Ok(2));
    o.release(1, false, at(0.0));
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(3));
    assert_eq!(o.id(3), format!("{SID}.3"));
    assert_eq!(o.sid(), SID);
    assert_eq!((o.len(), o.is_empty()), (2, false));
}

#[test]
fn a_join_waits_for_a_landed_write_whose_set_holds_its_number() {
    let mut o = open(None);
    let n = o.attach(LOCK, at(1.0)).unwrap();
    assert_eq!(o.state(n), Some(Attach::Pending));
    assert!(!o.may_join(n, at(1.0)));
    assert!(!o.believes(n, at(1.0)));
    // Attaching hastens the write: it is due at once, long before the renewal.
    assert_eq!(o.due(at(1.0)), Due::Write);
    let (record, cond) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    assert_eq!(record.attached.as_deref(), Some("1"));
    assert_eq!(record.state, RecordState::Held);
    assert_eq!(cond, Cond::Match(version(1)));
    // In flight: still no join, and no second write.
    assert_eq!(o.due(at(1.5)), Due::Wait);
    assert!(o
        .next_write(at(1.5), wall(1.5), &Counter::default())
        .is_none());
    assert!(!o.may_join(n, at(1.5)));
    match o.wrote(record, landed(2, 1.0), at(2.0)) {
        Outcome::Renewed { attached, leaves } => {
            assert_eq!(attached, vec![n]);
            assert!(leaves.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(o.state(n), Some(Attach::Landed));
    assert!(o.may_join(n, at(2.0)));
    assert!(o.believes(n, at(2.0)));
    // The write renewed the session: its deadline follows the write's send.
    assert_eq!(o.hold().deadline(), at(11.0));
    assert_eq!(o.hold().record.attached.as_deref(), Some("1"));
}

#[test]
fn attachments_waiting_together_go_into_one_write() {
    let mut o = open(None);
    for _ in 0..3 {
        o.attach(LOCK, at(1.0)).unwrap();
    }
    let (record, now_attached, _) = write_lands(&mut o, 2, 1.0);
    assert_eq!(record.attached.as_deref(), Some("1-3"));
    assert_eq!(now_attached, vec![1, 2, 3]);
    // Nothing more is due until the renewal.
    assert_eq!(
        o.due(at(1.0)),
        Due::Sleep {
            until: at(1.0) + timing().renew
        }
    );
}

#[test]
fn an_attachment_made_while_a_write_is_in_flight_waits_for_the_next_write() {
    let mut o = open(None);
    o.attach(LOCK, at(1.0)).unwrap();
    let (record, _) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    let late = o.attach(LOCK, at(1.2)).unwrap();
    match o.wrote(record, landed(2, 1.0), at(1.5)) {
        Outcome::Renewed { attached, .. } => assert_eq!(attached, vec![1]),
        other => panic!("{other:?}"),
    }
    assert_eq!(o.state(late), Some(Attach::Pending));
    assert!(!o.may_join(late, at(1.5)));
    assert_eq!(o.due(at(1.5)), Due::Write);
    let (record, now_attached, _) = write_lands(&mut o, 3, 1.5);
    assert_eq!(record.attached.as_deref(), Some("1-2"));
    assert_eq!(now_attached, vec![late]);
}

#[test]
fn a_write_whose_outcome_is_unknown_attaches_nothing_and_the_next_one_carries_it_again() {
    let mut o = open(None);
    let n = o.attach(LOCK, at(1.0)).unwrap();
    let (record, _) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    match o.wrote(record, unknown(), at(2.0)) {
        Outcome::Retry(e) => assert_eq!(e.kind(), ErrorKind::Unavailable),
        other => panic!("{other:?}"),
    }
    assert_eq!(o.hold().failed_renewals, 1);
    assert!(!o.may_join(n, at(2.0)));
    assert_eq!(o.due(at(2.0)), Due::Write);
    let (record, now_attached, _) = write_lands(&mut o, 2, 2.5);
    assert_eq!(record.attached.as_deref(), Some("1"));
    assert_eq!(now_attached, vec![n]);
    assert_eq!(o.hold().failed_renewals, 0);
}

#[test]
fn a_write_with_no_write_in_flight_attaches_nothing() {
    let mut o = open(None);
    let n = o.attach(LOCK, at(1.0)).unwrap();
    let mut record = o.hold().record.successor();
    record.attached = Some("1".into());
    match o.wrote(record, landed(2, 1.0), at(1.0)) {
        Outcome::Renewed { attached, .. } => assert!(attached.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(o.state(n), Some(Attach::Pending));
}

#[test]
fn renewals_are_due_every_renew_interval_and_carry_the_set() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    let renew_at = at(0.0) + timing().renew;
    assert_eq!(o.due(at(1.0)), Due::Sleep { until: renew_at });
    assert_eq!(o.due(renew_at), Due::Write);
    let (record, now_attached, _) = write_lands(&mut o, 20, 3.4);
    assert_eq!(record.attached.as_deref(), Some("1"));
    assert!(now_attached.is_empty(), "already attached");
    assert!(o.believes(n, at(13.0)));
    assert!(!o.believes(n, at(13.4)));
}

#[test]
fn a_grant_is_believed_only_while_its_session_is() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    assert!(o.alive(at(9.999)));
    assert!(o.believes(n, at(9.999)));
    assert!(!o.alive(at(10.0)));
    assert!(
        !o.believes(n, at(10.0)),
        "the deadline itself is past belief"
    );
    assert!(!o.may_join(n, at(10.0)));
    assert!(!o.believes(n + 1, at(1.0)), "never handed out");
}

#[test]
fn a_released_grant_stops_being_believed_at_once_and_leaves_with_the_next_renewal() {
    let mut o = open(None);
    let a = attached(&mut o, 0.0);
    let b = attached(&mut o, 0.0);
    let leave = o.release(a, true, at(1.0)).unwrap();
    assert_eq!(
        leave,
        Leave {
            n: a,
            lock: LOCK.into(),
            id: format!("{SID}.{a}"),
        }
    );
    assert!(!o.believes(a, at(1.0)));
    assert_eq!(o.state(a), None);
    assert!(o.believes(b, at(1.0)), "the other grant is untouched");
    // The detach hastens no write: it goes with the renewal.
    assert_eq!(
        o.due(at(1.0)),
        Due::Sleep {
            until: at(0.0) + timing().renew
        }
    );
    let (record, _, leaves) = write_lands(&mut o, 30, 3.4);
    assert_eq!(record.attached.as_deref(), Some("2"));
    assert_eq!(leaves, vec![leave], "pending until known done");
    assert_eq!(o.release(a, true, at(3.5)), None, "released already");
}

#[test]
fn a_release_without_a_join_sends_no_leave() {
    let mut o = open(None);
    let n = o.attach(LOCK, at(0.0)).unwrap();
    assert_eq!(o.release(n, false, at(0.0)), None);
    let (record, attached, leaves) = write_lands(&mut o, 2, 0.0);
    assert_eq!(record.attached.as_deref(), Some(""));
    assert!(attached.is_empty() && leaves.is_empty());
}

#[test]
fn a_number_released_while_a_write_that_holds_it_is_in_flight_is_not_attached_by_it() {
    let mut o = open(None);
    let n = o.attach(LOCK, at(0.0)).unwrap();
    let (record, _) = o
        .next_write(at(0.0), wall(0.0), &Counter::default())
        .unwrap();
    assert_eq!(record.attached.as_deref(), Some("1"));
    o.release(n, false, at(0.5));
    match o.wrote(record, landed(2, 0.0), at(1.0)) {
        Outcome::Renewed { attached, .. } => assert!(attached.is_empty()),
        other => panic!("{other:?}"),
    }
    assert!(!o.believes(n, at(1.0)));
    let (record, _, _) = write_lands(&mut o, 3, 3.4);
    assert_eq!(record.attached.as_deref(), Some(""));
}

#[test]
fn a_pending_leave_is_retried_after_each_landed_renewal_until_it_is_done() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    let leave = o.release(n, true, at(1.0)).unwrap();
    o.left(n, false, at(1.5));
    let (_, _, leaves) = write_lands(&mut o, 30, 3.4);
    assert_eq!(leaves, vec![leave.clone()]);
    o.left(n, false, at(3.5));
    let (_, _, leaves) = write_lands(&mut o, 31, 6.7);
    assert_eq!(leaves, vec![leave]);
    o.left(n, true, at(7.0));
    let (_, _, leaves) = write_lands(&mut o, 32, 10.0);
    assert!(leaves.is_empty());
}

#[test]
fn a_renewal_refused_loses_every_grant_attached_or_attaching() {
    let mut o = open(None);
    let a = attached(&mut o, 0.0);
    let b = attached(&mut o, 0.0);
    o.release(a, true, at(0.5));
    let c = o.attach(LOCK, at(1.0)).unwrap();
    let (record, _) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    let theirs = record_at("them", 9);
    let outcome = o.wrote(
        record,
        Ok(Written::Rejected {
            current: found(&theirs, 40),
        }),
        at(1.5),
    );
    let Outcome::Lost(lost) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(lost.grants, vec![b, c], "every grant not released");
    assert!(matches!(
        lost.reason,
        LostReason::TakenOver { ref holder, epoch: 9 } if holder.id == "them"
    ));
    for n in [a, b, c] {
        assert!(!o.believes(n, at(1.5)));
        assert_eq!(o.state(n), None);
    }
    assert!(!o.alive(at(1.5)));
    assert!(matches!(o.hold().phase, Phase::Lost(_)));
    assert_eq!(o.due(at(1.5)), Due::Done);
    assert!(o
        .next_write(at(1.5), wall(1.5), &Counter::default())
        .is_none());
    assert_eq!(o.attach(LOCK, at(1.5)), Err(Refused::NotHeld));
    assert_eq!(o.expire(at(20.0)), None, "lost once");
}

fn record_at(id: &str, epoch: u64) -> Record {
    record(id, epoch, RecordState::Held)
}

#[test]
fn a_renewal_replaced_or_a_deleted_session_loses_every_grant() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    let (record, _) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    let outcome = o.wrote(
        record,
        Ok(Written::Replaced {
            current: not_found(),
        }),
        at(1.5),
    );
    let Outcome::Lost(lost) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        lost,
        Lost {
            reason: LostReason::Vanished,
            grants: vec![n]
        }
    );
}

#[test]
fn a_renewal_unknown_past_the_deadline_is_a_lapse() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    let (record, _) = o
        .next_write(at(9.0), wall(9.0), &Counter::default())
        .unwrap();
    let outcome = o.wrote(record, unknown(), at(10.0));
    let Outcome::Lost(lost) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(lost.reason, LostReason::Expired);
    assert_eq!(lost.grants, vec![n]);
}

#[test]
fn a_session_past_its_deadline_lapses_with_every_grant_and_is_never_renewed() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    let pending = o.attach(LOCK, at(1.0)).unwrap();
    let leave = o.release(n, true, at(1.0));
    assert!(leave.is_some());
    let m = o.attach(LOCK, at(1.0)).unwrap();
    assert_eq!(o.expire(at(9.999)), None);
    assert_eq!(o.due(at(9.999)), Due::Write);
    assert_eq!(o.due(at(10.0)), Due::Lapsed);
    assert!(o
        .next_write(at(10.0), wall(10.0), &Counter::default())
        .is_none());
    assert_eq!(o.attach(LOCK, at(10.0)), Err(Refused::NotHeld));
    assert_eq!(
        o.expire(at(10.0)),
        Some(Lost {
            reason: LostReason::Expired,
            grants: vec![pending, m]
        })
    );
    assert_eq!(o.hold().phase, Phase::Lost(LostReason::Expired));
    assert_eq!(o.due(at(10.0)), Due::Done);
    assert_eq!(o.expire(at(11.0)), None);
}

#[test]
fn a_lapse_while_a_write_is_in_flight_is_still_a_lapse() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    o.next_write(at(9.0), wall(9.0), &Counter::default())
        .unwrap();
    assert_eq!(o.due(at(9.5)), Due::Wait);
    assert_eq!(o.due(at(10.0)), Due::Lapsed);
    assert_eq!(o.expire(at(10.0)).unwrap().grants, vec![n]);
}

#[test]
fn a_shorter_ttl_in_flight_caps_the_belief_from_its_send() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    o.hold_mut().want_ttl(secs(5.0));
    let (record, _) = o
        .next_write(at(1.0), wall(1.0), &Counter::default())
        .unwrap();
    assert_eq!(record.ttl_ms, 5_000);
    assert!(o.believes(n, at(5.999)));
    assert!(
        !o.believes(n, at(6.0)),
        "the shorter write may land: believe by it"
    );
}

#[test]
fn an_idle_session_is_released_after_its_idle_time_and_not_before() {
    let mut o = open(Some(secs(2.0)));
    assert_eq!(o.due(at(1.0)), Due::Sleep { until: at(2.0) });
    assert_eq!(o.due(at(2.0)), Due::Release);
    // Something attached: no release.
    let n = attached(&mut o, 1.0);
    assert_eq!(
        o.due(at(3.0)),
        Due::Sleep {
            until: at(1.0) + timing().renew
        }
    );
    // Its leave pending: no release either.
    o.release(n, true, at(3.0));
    assert_eq!(
        o.due(at(4.0)),
        Due::Sleep {
            until: at(1.0) + timing().renew
        }
    );
    o.left(n, true, at(4.0));
    assert_eq!(o.due(at(5.0)), Due::Write, "the renewal, due at 4.33");
    write_lands(&mut o, 30, 5.0);
    assert_eq!(o.due(at(5.5)), Due::Sleep { until: at(6.0) });
    assert_eq!(o.due(at(6.0)), Due::Release);
}

#[test]
fn an_idle_session_sleeps_until_the_renewal_when_it_comes_first() {
    let o = open(Some(secs(8.0)));
    assert_eq!(
        o.due(at(1.0)),
        Due::Sleep {
            until: at(0.0) + timing().renew
        }
    );
}

#[test]
fn without_an_idle_time_a_session_is_never_released_by_itself() {
    let o = open(None);
    assert_eq!(
        o.due(at(3.0)),
        Due::Sleep {
            until: at(0.0) + timing().renew
        }
    );
}

#[test]
fn closing_releases_every_grant_then_the_session_once_no_leave_is_pending() {
    let mut o = open(None);
    let a = attached(&mut o, 0.0);
    let b = o.attach(LOCK, at(0.5)).unwrap();
    let leaves = o.close(at(1.0), |n| n == a);
    assert_eq!(leaves.iter().map(|l| l.n).collect::<Vec<_>>(), vec![a]);
    assert!(!o.believes(a, at(1.0)) && o.state(b).is_none());
    assert_eq!(o.attach(LOCK, at(1.0)), Err(Refused::NotHeld));
    assert_ne!(o.due(at(1.0)), Due::Release, "a leave is pending");
    // A leave that failed while closing is dropped: the session's release proves it (rule 2).
    o.left(a, false, at(1.5));
    assert_eq!(o.due(at(1.5)), Due::Release);
}

#[test]
fn closing_an_empty_session_releases_it_at_once() {
    let mut o = open(None);
    assert!(o.close(at(1.0), |_| true).is_empty());
    assert_eq!(o.due(at(1.0)), Due::Release);
}

#[test]
fn an_attachment_that_would_make_the_set_too_long_is_refused_and_changes_nothing() {
    // "1,3" is 3 bytes; "1,3,5" would be 5.
    let mut o = open(None).with_max_attached(4);
    for _ in 0..3 {
        o.attach(LOCK, at(0.0)).unwrap();
    }
    o.release(2, false, at(0.0));
    o.release(3, false, at(0.0));
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(4), "\"1,4\"");
    o.release(4, false, at(0.0));
    o.attach(LOCK, at(0.0)).unwrap(); // 5: "1,5"
    o.release(5, false, at(0.0));
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(6), "\"1,6\": 3 bytes");
    assert_eq!(
        o.attach(LOCK, at(0.0)),
        Err(Refused::Full),
        "\"1,6-7\": 5 bytes"
    );
    assert_eq!(o.len(), 2, "nothing attached by the refusal");
    let (record, _, _) = write_lands(&mut o, 2, 0.0);
    assert_eq!(record.attached.as_deref(), Some("1,6"));
}

#[test]
fn the_set_may_be_exactly_as_long_as_its_bound() {
    let mut o = open(None).with_max_attached(3);
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(1)); // "1"
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(2)); // "1-2": 3 bytes, at the bound
    o.release(1, false, at(0.0)); // "2"
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(3)); // "2-3"
    o.release(2, false, at(0.0)); // "3"
    o.release(3, false, at(0.0)); // ""
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(4)); // "4"
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(5)); // "4-5"
    o.release(4, false, at(0.0)); // "5"
                                  // "5-6" fits; with 5 released and 6 kept, 7 would make "6-7".
    assert_eq!(o.attach(LOCK, at(0.0)), Ok(6));
    assert_eq!(o.len(), 2);
    let mut tight = open(None).with_max_attached(2);
    assert_eq!(tight.attach(LOCK, at(0.0)), Ok(1));
    assert_eq!(tight.attach(LOCK, at(0.0)), Err(Refused::Full), "\"1-2\"");
    assert_eq!(tight.len(), 1);
    // The refused number was not taken: the next one is still 2.
    tight.release(1, false, at(0.0));
    assert_eq!(tight.attach(LOCK, at(0.0)), Ok(2));
    let (record, _, _) = write_lands(&mut tight, 2, 0.0);
    assert_eq!(record.attached.as_deref(), Some("2"));
}

#[test]
fn the_versions_follow_the_landed_writes() {
    let mut o = open(None);
    attached(&mut o, 0.0);
    assert_eq!(o.hold().version, version(11));
}

#[test]
fn a_leave_of_nothing_pending_does_not_restart_the_idle_time() {
    let mut o = open(Some(secs(2.0)));
    o.left(99, true, at(1.5));
    assert_eq!(o.due(at(2.0)), Due::Release);
}

#[test]
fn a_late_answer_after_a_lapse_attaches_nothing_and_retries_no_leave() {
    let mut o = open(None);
    let n = attached(&mut o, 0.0);
    o.release(n, true, at(1.0)).unwrap();
    let pending = o.attach(LOCK, at(1.0)).unwrap();
    let (record, _) = o
        .next_write(at(9.0), wall(9.0), &Counter::default())
        .unwrap();
    assert_eq!(o.expire(at(10.0)).unwrap().grants, vec![pending]);
    match o.wrote(record, landed(40, 9.0), at(10.5)) {
        Outcome::Renewed { attached, leaves } => {
            assert!(attached.is_empty() && leaves.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !o.believes(pending, at(10.5)),
        "a lapsed session is never believed again"
    );
    assert_eq!(o.due(at(10.5)), Due::Done);
}

// The idle release racing an attach (the per-process default session): the release is decided
// in one step, and it and an attach exclude each other.

#[test]
fn an_idle_release_decided_refuses_every_later_attach() {
    let mut o = open(Some(secs(2.0)));
    assert!(!o.decide_release(at(1.9)), "not idle for its idle time yet");
    assert!(!o.is_releasing());
    assert!(o.decide_release(at(2.0)));
    assert!(o.is_releasing());
    // Between the decision and the release write: refused, nothing handed out.
    assert_eq!(o.attach(LOCK, at(2.1)), Err(Refused::Released));
    assert!(o.is_empty());
    assert_eq!(o.due(at(2.1)), Due::Release, "the release stays due");
}

#[test]
fn an_attach_that_comes_first_cancels_the_idle_release() {
    let mut o = open(Some(secs(2.0)));
    assert_eq!(o.due(at(2.0)), Due::Release);
    // The driver read `due`; an attach lands before it decides.
    let n = o.attach(LOCK, at(2.0)).unwrap();
    assert!(
        !o.decide_release(at(2.0)),
        "something is attached: no release"
    );
    assert!(!o.is_releasing());
    assert_eq!(o.due(at(2.0)), Due::Write, "the attachment's write instead");
    write_lands(&mut o, 20, 2.0);
    assert!(o.may_join(n, at(2.0)));
    // Released again: the idle time starts over from the release.
    o.release(n, false, at(3.0));
    assert!(!o.decide_release(at(4.9)));
    assert!(o.decide_release(at(5.0)));
}

#[test]
fn a_pending_leave_cancels_the_idle_release_too() {
    let mut o = open(Some(secs(2.0)));
    let n = attached(&mut o, 0.0);
    o.release(n, true, at(0.5)).unwrap();
    assert!(!o.decide_release(at(9.0)), "its leave is pending");
    o.left(n, true, at(3.0));
    assert!(!o.decide_release(at(4.9)));
    assert!(o.decide_release(at(5.0)));
}

#[test]
fn a_release_is_decided_once() {
    let mut o = open(Some(secs(2.0)));
    assert!(o.decide_release(at(2.0)));
    assert!(!o.decide_release(at(2.0)), "decided already");
}

#[test]
fn after_the_release_is_begun_or_landed_an_attach_is_still_refused() {
    let mut o = open(Some(secs(2.0)));
    assert!(o.decide_release(at(2.0)));
    let ReleaseStart::Send(record, _) =
        begin_release(o.hold_mut(), at(2.0), wall(2.0), &Counter::default())
    else {
        panic!("a held session is released by a write");
    };
    assert_eq!(record.state, RecordState::Released);
    assert_eq!(o.attach(LOCK, at(2.1)), Err(Refused::Released));
    assert_eq!(o.due(at(2.1)), Due::Done);
    after_write(
        o.hold_mut(),
        Wrote::Release,
        record,
        landed(2, 2.0),
        at(2.2),
    );
    assert_eq!(o.attach(LOCK, at(2.3)), Err(Refused::Released));
    assert!(o.is_empty());
}

#[test]
fn a_session_lapsed_before_its_decided_release_is_lapsed_not_released() {
    let mut o = open(Some(secs(2.0)));
    assert!(o.decide_release(at(2.0)));
    // The driver stalled past the deadline between the decision and the write.
    assert_eq!(o.due(at(10.0)), Due::Lapsed);
    assert!(o.expire(at(10.0)).unwrap().grants.is_empty());
    assert_eq!(o.attach(LOCK, at(10.0)), Err(Refused::Released));
}

#[test]
fn closing_decides_the_release_the_same_way() {
    let mut o = open(None);
    assert!(!o.decide_release(at(3.0)), "no idle time: never by itself");
    o.close(at(1.0), |_| true);
    assert!(o.decide_release(at(1.0)));
    assert_eq!(o.attach(LOCK, at(1.0)), Err(Refused::Released));
}
