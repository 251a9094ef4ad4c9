//! The acquisition machine, step by step: what it reads and writes, when it sleeps, when it
//! gives up, what it adopts and what it lets go.

use super::*;
use crate::protocol::testing::*;
use crate::protocol::view::unix_ms;

const URL: &str = "memory://t/job";

fn plan() -> Plan {
    Plan {
        url: URL.into(),
        holder: holder("me"),
        timing: timing(),
        data: None,
        try_once: false,
        wait_deadline: None,
        unavailable_timeout: None,
        history: false,
        probe_holders: false,
        epoch_is_token: true,
        preempt: Preempt::Never,
    }
}

/// An acquisition and its entropy (nonces `n1`, `n2`, …; no jitter), on the wall clock
/// `wall(t)` at each step.
struct Run {
    m: Acquirer,
    e: Counter,
}

impl Run {
    fn new(plan: Plan, t: f64) -> Run {
        Run {
            m: Acquirer::new(plan, 0, None, at(t)),
            e: Counter::default(),
        }
    }

    fn step(&mut self, event: Event, t: f64) -> Step {
        self.m.step(event, at(t), wall(t), &self.e)
    }

    fn read(&mut self, get: Get, t: f64) -> Step {
        self.step(Event::Read(Ok(get)), t)
    }

    fn read_err(&mut self, e: Error, t: f64) -> Step {
        self.step(Event::Read(Err(e)), t)
    }

    fn written(&mut self, g: u64, t: f64) -> Step {
        self.step(
            Event::Put(Ok(Put::Written {
                version: version(g),
                server_now: None,
            })),
            t,
        )
    }

    fn put_unanswered(&mut self, t: f64) -> Step {
        self.step(Event::Put(Err(unavailable())), t)
    }
}

fn unavailable() -> Error {
    Error::unavailable("no answer")
}

fn expect_read(s: Step) -> Option<Version> {
    match s {
        Step::Read { if_none_match } => if_none_match,
        other => panic!("expected a read, got {other:?}"),
    }
}

fn expect_put(s: Step) -> (Record, Cond) {
    match s {
        Step::Put { bytes, cond } => match Record::parse(Some(&bytes), bytes.len() as u64) {
            crate::record::Parsed::Valid(r) => (r, cond),
            other => panic!("wrote {other:?}"),
        },
        other => panic!("expected a write, got {other:?}"),
    }
}

fn expect_sleep(s: Step) -> (Instant, bool) {
    match s {
        Step::Sleep {
            until,
            wake_on_release,
        } => (until, wake_on_release),
        other => panic!("expected a sleep, got {other:?}"),
    }
}

fn expect_failed(s: Step) -> Error {
    match s {
        Step::Failed(e) => e,
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// Another holder's record at epoch 7 (10 s ttl, rev 2: written by a takeover, so taken over
/// at epoch 8 whatever the clock), as read at generation 1.
fn held_by_other() -> Get {
    let held = Record {
        rev: 2,
        ..record("other", 7, RecordState::Held)
    };
    found(&held, 1)
}

/// **(changed, issue 22)** Where nothing is, the record is made *released* (it grants nobody)
/// above every epoch known and the clock at its send, then taken by a write conditional on the
/// version the create's answer showed, above the clock read after that answer: a create may
/// land long after it was sent, after a record made meanwhile handed epochs out and was
/// deleted, and only a conditional write cannot land after its record's deletion.
#[test]
fn where_nothing_is_the_record_is_made_released_then_taken_above_the_clock_after_its_answer() {
    let mut p = plan();
    p.data = Some("payload".into());
    let mut r = Run::new(p, 0.0);
    assert_eq!(expect_read(r.step(Event::Start, 0.0)), None);
    let (made, cond) = expect_put(r.read(not_found(), 0.5));
    assert_eq!(cond, Cond::Create);
    let expected_made = Record {
        format: FORMAT,
        epoch: unix_ms(wall(0.5)),
        rev: 1,
        state: RecordState::Released,
        ttl_ms: 10_000,
        holder: holder("me"),
        acquired_at: None,
        renewed_at: Some(timestamp(wall(0.5))),
        data: None,
        prev: vec![],
        write: Some("n1".into()),
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: None,
    };
    assert_eq!(made, expected_made);
    // The create's answer comes 2 s after its send: the take goes above the clock read now.
    let (taken, cond) = expect_put(r.written(2, 2.5));
    assert_eq!(cond, Cond::Match(version(2)));
    let expected = Record {
        format: FORMAT,
        epoch: unix_ms(wall(2.5)),
        rev: 2,
        state: RecordState::Held,
        ttl_ms: 10_000,
        holder: holder("me"),
        acquired_at: Some(timestamp(wall(2.5))),
        renewed_at: Some(timestamp(wall(2.5))),
        data: Some("payload".into()),
        prev: made.prev_for_successor(),
        write: Some("n2".into()),
        broken: None,
        preempted: None,
        // The record the create made granted nobody: it is no tenure.
        history: Default::default(),
        attached: None,
    };
    assert_eq!(taken, expected);
    match r.written(3, 2.7) {
        Step::Acquired {
            record,
            version: v,
            t_send,
        } => {
            assert_eq!((record, v, t_send), (expected.clone(), version(3), at(2.5)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.m.known_epoch(), expected.epoch);
    // Answered in the millisecond it was sent: one above the record it made.
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.5);
    let (taken, _) = expect_put(r.written(2, 0.5));
    assert_eq!(taken.epoch, unix_ms(wall(0.5)) + 1);
}

/// A queued lock's session (a fresh key of its own, whose epoch is no token) holds the record
/// its create makes at once: one write.
#[test]
fn a_create_holds_at_once_where_the_epoch_is_no_token() {
    let mut p = plan();
    p.epoch_is_token = false;
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    let (made, cond) = expect_put(r.read(not_found(), 0.5));
    assert_eq!(
        (cond, made.state, made.epoch),
        (Cond::Create, RecordState::Held, unix_ms(wall(0.5)))
    );
    assert!(matches!(
        r.written(2, 0.7),
        Step::Acquired { record, t_send, .. } if record == made && t_send == at(0.5)
    ));
}

/// A create whose answer was lost, found later by a read, is no lease of ours: the record it
/// made is taken like any released record, above the clock of that read — not adopted, and
/// not let go.
#[test]
fn a_create_found_landed_by_a_later_read_is_taken_above_the_clock_of_that_read() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (made, _) = expect_put(r.read(not_found(), 0.0));
    r.put_unanswered(1.0);
    // The read-back (the write's own) shows it landed: take it from there.
    let (taken, cond) = expect_put(r.read(found(&made, 4), 3.0));
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!(
        (taken.state, taken.epoch, taken.rev),
        (RecordState::Held, unix_ms(wall(3.0)), 2)
    );
    // Found only after the write gave up (a read of the acquisition's own, at 10.05).
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (made, _) = expect_put(r.read(not_found(), 0.0));
    r.put_unanswered(1.0);
    assert!(matches!(r.read_err(unavailable(), 9.0), Step::Sleep { .. }));
    r.step(Event::Slept, 9.05);
    r.read_err(unavailable(), 10.0);
    assert_eq!(expect_read(r.step(Event::Slept, 10.05)), None);
    let (taken, cond) = expect_put(r.read(found(&made, 5), 10.05));
    assert_eq!(cond, Cond::Match(version(5)));
    assert_eq!(
        (taken.state, taken.epoch),
        (RecordState::Held, unix_ms(wall(10.05)))
    );
}

/// A released record left by an acquirer that stopped between its two writes (a crash, a
/// cancellation) is harmless: anyone takes it at once.
#[test]
fn a_record_made_and_never_taken_is_taken_at_once_by_anyone() {
    let mut left = record("gone", 1_000, RecordState::Released);
    left.acquired_at = None;
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (taken, cond) = expect_put(r.read(found(&left, 1), 0.0));
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!(
        (taken.state, taken.epoch, taken.holder),
        (RecordState::Held, unix_ms(wall(0.0)), holder("me"))
    );
}

#[test]
fn the_known_epoch_grows_with_every_record_seen() {
    let mut r = Run {
        m: Acquirer::new(plan(), 3, None, at(0.0)),
        e: Counter::default(),
    };
    assert_eq!(r.m.known_epoch(), 3);
    r.step(Event::Start, 0.0);
    r.read(held_by_other(), 0.0);
    assert_eq!(r.m.known_epoch(), 7);
}

#[test]
fn a_lease_this_client_released_is_taken_back_with_one_conditional_write() {
    let released = Record {
        rev: 4,
        ..record("me", 7, RecordState::Released)
    };
    let mut r = Run {
        m: Acquirer::new(plan(), 7, Some((version(3), released.clone())), at(0.0)),
        e: Counter::default(),
    };
    let (rec, cond) = expect_put(r.step(Event::Start, 0.0));
    assert_eq!(cond, Cond::Match(version(3)));
    assert_eq!((rec.epoch, rec.rev, rec.state), (8, 5, RecordState::Held));
    assert_eq!(rec.prev, released.prev_for_successor());
    assert_eq!(rec.prev[0].write.as_deref(), Some("w-me-7"));
}

#[test]
fn a_held_record_is_polled_and_taken_over_once_unchanged_for_ttl_plus_grace() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    // Polls every second (the poll interval), woken early by a release in this process.
    assert_eq!(expect_sleep(r.read(held_by_other(), 0.0)), (at(1.0), true));
    for t in 1..11 {
        let t = t as f64;
        assert_eq!(expect_read(r.step(Event::Slept, t)), Some(version(1)));
        let s = r.read(Get::NotModified { server_now: None }, t);
        assert_eq!(expect_sleep(s), (at(t + 1.0), true), "at {t}");
    }
    // The wait has run out: no read first (the conditional write itself checks).
    let (rec, cond) = expect_put(r.step(Event::Slept, 11.0));
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!((rec.epoch, rec.rev), (8, 3));
    let Get::Found(seen) = held_by_other() else {
        unreachable!()
    };
    let crate::record::Parsed::Valid(seen) = Record::parse(seen.bytes.as_deref(), seen.size) else {
        unreachable!()
    };
    assert_eq!(rec.prev, seen.prev_for_successor());
}

#[test]
fn the_next_poll_comes_no_later_than_a_rule_could_fire() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(held_by_other(), 0.0);
    r.step(Event::Slept, 10.5);
    // The observation rule fires at 11: no poll later than that.
    assert_eq!(
        expect_sleep(r.read(Get::NotModified { server_now: None }, 10.5)),
        (at(11.0), true)
    );
}

#[test]
fn try_once_fails_held_naming_the_holder_and_its_epoch() {
    let mut p = plan();
    p.try_once = true;
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    let e = expect_failed(r.read(held_by_other(), 0.0));
    assert_eq!(
        (e.kind(), e.epoch(), e.lease()),
        (ErrorKind::Held, Some(7), Some(URL))
    );
    assert_eq!(e.holder().map(|h| h.id.as_str()), Some("other"));
    // A corrupt record's holder is unknown.
    let mut p = plan();
    p.try_once = true;
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    let e = expect_failed(r.read(found_corrupt(1), 0.0));
    assert_eq!((e.kind(), e.holder()), (ErrorKind::Held, None));
    assert!(e.message().contains("unknown holder"), "{e}");
}

#[test]
fn a_wait_ends_at_exactly_its_deadline_with_a_timeout() {
    let mut p = plan();
    p.wait_deadline = Some(at(3.0));
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    r.read(held_by_other(), 0.0);
    r.step(Event::Slept, 2.5);
    // The last sleep ends at the deadline, not a poll later.
    assert_eq!(
        expect_sleep(r.read(Get::NotModified { server_now: None }, 2.5)),
        (at(3.0), true)
    );
    r.step(Event::Slept, 2.999);
    assert_eq!(
        expect_sleep(r.read(Get::NotModified { server_now: None }, 2.999)),
        (at(3.0), true)
    );
    r.step(Event::Slept, 3.0);
    let e = expect_failed(r.read(Get::NotModified { server_now: None }, 3.0));
    assert_eq!((e.kind(), e.epoch()), (ErrorKind::Timeout, Some(7)));
    assert!(
        e.message().starts_with("timed out after 3s waiting for"),
        "{e}"
    );
}

#[test]
fn an_unavailable_store_is_retried_with_backoff_until_the_unavailable_timeout() {
    let mut p = plan();
    p.unavailable_timeout = Some(secs(2.0));
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    // The lease's backoff: 50 ms, doubling; no early wake (nothing to wait for).
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 0.0)),
        (at(0.05), false)
    );
    assert_eq!(expect_read(r.step(Event::Slept, 0.05)), None);
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 1.0)),
        (at(1.1), false)
    );
    r.step(Event::Slept, 1.1);
    // The last pause ends when the timeout does.
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 1.9)),
        (at(2.0), false)
    );
    r.step(Event::Slept, 2.0);
    let e = expect_failed(r.read_err(unavailable(), 2.0));
    assert_eq!((e.kind(), e.lease()), (ErrorKind::Unavailable, Some(URL)));
    assert!(
        e.to_string().contains(
            "gave up acquiring memory://t/job after 2s: the store has been unavailable for 2s"
        ),
        "{e}"
    );
}

#[test]
fn the_unavailable_timeout_counts_from_the_last_answer_and_an_answer_resets_the_backoff() {
    let mut p = plan();
    p.unavailable_timeout = Some(secs(2.0));
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    r.read_err(unavailable(), 0.0);
    r.step(Event::Slept, 0.05);
    r.read_err(unavailable(), 0.05);
    r.step(Event::Slept, 1.0);
    r.read(held_by_other(), 1.0);
    r.step(Event::Slept, 2.0);
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 2.0)),
        (at(2.05), false)
    );
    r.step(Event::Slept, 2.999);
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 2.999)),
        (at(3.0), false)
    );
    r.step(Event::Slept, 3.0);
    let e = expect_failed(r.read_err(unavailable(), 3.0));
    assert!(
        e.to_string()
            .contains("after 3s: the store has been unavailable for 2s"),
        "{e}"
    );
}

#[test]
fn an_unavailable_store_is_given_up_on_at_the_wait_deadline_if_that_comes_first() {
    for (wait, timeout) in [(1.5, Some(2.0)), (1.5, None)] {
        let mut p = plan();
        p.wait_deadline = Some(at(wait));
        p.unavailable_timeout = timeout.map(secs);
        let mut r = Run::new(p, 0.0);
        r.step(Event::Start, 0.0);
        assert_eq!(
            expect_sleep(r.read_err(unavailable(), 1.48)),
            (at(1.5), false)
        );
        r.step(Event::Slept, 1.5);
        let e = expect_failed(r.read_err(unavailable(), 1.5));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
    }
    // The timeout first.
    let mut p = plan();
    p.wait_deadline = Some(at(5.0));
    p.unavailable_timeout = Some(secs(1.0));
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 0.98)),
        (at(1.0), false)
    );
}

#[test]
fn a_refused_first_read_tries_one_create_and_other_errors_fail_at_once() {
    // S3 answers 403 to a read of a missing key the caller may not list: a create is safe.
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (rec, cond) = expect_put(r.read_err(Error::store("403"), 0.0));
    assert_eq!((cond, rec.prev), (Cond::Create, vec![]));
    // Bad input, or a refusal once the record has been seen, is not retried.
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let e = expect_failed(r.read_err(Error::invalid("bad"), 0.0));
    assert_eq!((e.kind(), e.lease()), (ErrorKind::Invalid, Some(URL)));
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(held_by_other(), 0.0);
    r.step(Event::Slept, 1.0);
    assert_eq!(
        expect_failed(r.read_err(Error::store("403"), 1.0)).kind(),
        ErrorKind::Store
    );
}

#[test]
fn a_refused_read_after_the_one_blind_create_fails() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read_err(Error::store("403"), 0.0);
    // The create's outcome stays unknown until the write gives up (10 s, the ttl) ...
    r.put_unanswered(0.1);
    r.read_err(unavailable(), 10.0);
    // ... then the acquisition reads again (it knows nothing now), and is refused again.
    assert_eq!(expect_read(r.step(Event::Slept, 10.05)), None);
    assert_eq!(
        expect_failed(r.read_err(Error::store("403"), 10.05)).kind(),
        ErrorKind::Store
    );
}

#[test]
fn a_write_unanswered_when_the_wait_ends_is_left_to_expire() {
    let mut p = plan();
    p.wait_deadline = Some(at(5.0));
    let started = |p: &Plan| {
        let mut r = Run::new(p.clone(), 0.0);
        r.step(Event::Start, 0.0);
        r.read(not_found(), 4.0);
        r
    };
    let mut r = started(&p);
    let e = expect_failed(r.put_unanswered(5.0));
    assert_eq!((e.kind(), e.lease()), (ErrorKind::Unavailable, Some(URL)));
    assert!(
        e.message()
            .contains("did not answer a write before the wait ended"),
        "{e}"
    );
    // Before the deadline, or when the store did answer: read back to learn the outcome.
    let mut r = started(&p);
    assert_eq!(expect_read(r.put_unanswered(4.999)), None);
    let mut r = started(&p);
    assert_eq!(
        expect_read(r.step(Event::Put(Ok(Put::ConditionFailed)), 5.0)),
        None
    );
}

#[test]
fn a_write_keeps_resolving_its_outcome_for_a_ttl_whatever_the_unavailable_timeout() {
    let mut p = plan();
    p.unavailable_timeout = Some(secs(2.0));
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    r.put_unanswered(1.0);
    // The read-back fails past the unavailable timeout, within the write's ttl: try again.
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 2.5)),
        (at(2.55), false)
    );
    assert_eq!(expect_read(r.step(Event::Slept, 2.55)), None);
}

#[test]
fn a_write_refused_by_the_store_fails_the_acquisition() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    let e = expect_failed(r.step(Event::Put(Err(Error::store("denied"))), 0.1));
    assert_eq!((e.kind(), e.lease()), (ErrorKind::Store, Some(URL)));
}

#[test]
fn a_lost_race_goes_on_from_the_read_back_without_reading_again() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    assert_eq!(
        expect_read(r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1)),
        None
    );
    // Someone else created it: wait (the read-back is fresh), no second read.
    assert_eq!(expect_sleep(r.read(held_by_other(), 0.2)), (at(1.2), true));
    // A write that landed and was replaced before we learned of it: as if we lost the race.
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1);
    let replaced = Record {
        prev: vec![crate::record::Prev {
            id: "me".into(),
            rev: 1,
            write: Some("n1".into()),
        }],
        ..record("other", 8, RecordState::Held)
    };
    assert_eq!(
        expect_sleep(r.read(found(&replaced, 3), 0.2)),
        (at(1.2), true)
    );
}

#[test]
fn a_resent_write_sleeps_its_backoff_first() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    r.put_unanswered(1.0);
    // Still absent: the create has not landed; send it again after the backoff.
    assert_eq!(expect_sleep(r.read(not_found(), 1.5)), (at(1.55), false));
}

/// Another client's released record (rev 2: it held it), at generation 1: taking it is one
/// conditional write, at epoch 8.
fn released_by_other() -> Get {
    let released = Record {
        rev: 2,
        ..record("other", 7, RecordState::Released)
    };
    found(&released, 1)
}

/// The takeover of a released record is sent at 0 and its outcome stays unknown until the
/// write gives up at 10 (the ttl); a read at 10.05 shows it landed.
fn adopted_late(r: &mut Run) -> Step {
    r.step(Event::Start, 0.0);
    r.read(released_by_other(), 0.0);
    r.put_unanswered(1.0);
    assert!(matches!(r.read_err(unavailable(), 9.0), Step::Sleep { .. }));
    r.step(Event::Slept, 9.05);
    assert_eq!(
        expect_sleep(r.read_err(unavailable(), 10.0)),
        (at(10.05), false)
    );
    assert_eq!(expect_read(r.step(Event::Slept, 10.05)), None);
    let mut ours = record("me", 8, RecordState::Held);
    (ours.rev, ours.write) = (3, Some("n1".into()));
    r.read(found(&ours, 5), 10.05)
}

#[test]
fn a_write_that_landed_after_its_deadline_is_adopted_and_let_go() {
    let mut r = Run::new(plan(), 0.0);
    let (rec, cond) = expect_put(adopted_late(&mut r));
    assert_eq!(cond, Cond::Match(version(5)));
    assert_eq!((rec.state, rec.rev), (RecordState::Released, 4));
    assert_eq!(rec.write.as_deref(), Some("n2"));
    // The release lands: take the lease again at once, over our own released record.
    let (again, cond) = expect_put(r.written(6, 10.1));
    assert_eq!(cond, Cond::Match(version(6)));
    assert_eq!((again.epoch, again.state), (9, RecordState::Held));
}

#[test]
fn a_write_that_landed_is_held_until_its_deadline_and_let_go_from_then_on() {
    let landed_at = |t: f64| {
        let mut r = Run::new(plan(), 0.0);
        r.step(Event::Start, 0.0);
        r.read(released_by_other(), 0.0);
        let step = r.written(2, t);
        (r, step)
    };
    assert!(matches!(
        landed_at(9.999).1,
        Step::Acquired { t_send, .. } if t_send == at(0.0)
    ));
    let (_, step) = landed_at(10.0);
    let (rec, cond) = expect_put(step);
    assert_eq!(
        (rec.state, cond),
        (RecordState::Released, Cond::Match(version(2)))
    );
}

#[test]
fn letting_go_keeps_trying_for_two_request_timeouts() {
    let rt = timing().request_timeout.as_secs_f64();
    let letting_go = || {
        let mut r = Run::new(plan(), 0.0);
        r.step(Event::Start, 0.0);
        r.read(released_by_other(), 0.0);
        expect_put(r.written(2, 10.0));
        assert_eq!(expect_read(r.put_unanswered(10.1)), None);
        r
    };
    let mut r = letting_go();
    assert!(matches!(
        r.read_err(unavailable(), 10.0 + 1.5 * rt),
        Step::Sleep {
            wake_on_release: false,
            ..
        }
    ));
    // Given up: best effort (the record expires); read and go on.
    let mut r = letting_go();
    assert_eq!(
        expect_read(r.read_err(unavailable(), 10.0 + 2.0 * rt + 0.001)),
        None
    );
}

#[test]
fn a_cancelled_acquisition_fails_and_lets_go_of_a_write_that_lands() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(held_by_other(), 0.0);
    let e = expect_failed(r.step(Event::Cancelled, 0.5));
    assert_eq!((e.kind(), e.lease()), (ErrorKind::Cancelled, Some(URL)));

    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(released_by_other(), 0.0);
    r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1);
    // Cancelled while the write resolves its outcome: it goes on (the wake is a plain wake).
    assert!(matches!(
        r.read(released_by_other(), 0.2),
        Step::Sleep { .. }
    ));
    assert!(matches!(r.step(Event::Cancelled, 0.3), Step::Put { .. }));
    let (rec, _) = expect_put(r.written(2, 0.4));
    assert_eq!(
        rec.state,
        RecordState::Released,
        "the landed write is let go"
    );
    let e = expect_failed(r.written(3, 0.5));
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    // A create that lands after a cancellation made a released record: nothing to let go.
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    r.read(not_found(), 0.0);
    r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1);
    assert!(matches!(r.read(not_found(), 0.2), Step::Sleep { .. }));
    assert!(matches!(r.step(Event::Cancelled, 0.3), Step::Put { .. }));
    let e = expect_failed(r.written(2, 0.4));
    assert_eq!(e.kind(), ErrorKind::Cancelled);
}

#[test]
fn waited_is_the_time_since_the_start_and_never_negative() {
    assert_eq!(waited(at(1.0), at(3.5)), secs(2.5));
    assert_eq!(waited(at(3.0), at(1.0)), Duration::ZERO);
}

/// Another holder's record, last written at `wall(0)`, read at `t` through a gateway whose
/// `Date` says an hour later: by that `Date` it is long expired, so the machine asks for the
/// store's own stamp ([`Step::Stamp`]) before it believes it.
fn to_a_stamp(r: &mut Run, t: f64) {
    r.step(Event::Start, t);
    let mut object = object(&record("other", 7, RecordState::Held).to_bytes(), 1);
    object.last_modified = Some(wall(0.0));
    object.server_now = Some(wall(3600.0));
    let s = r.read(Get::Found(object), t);
    assert!(matches!(s, Step::Stamp), "expected a stamp, got {s:?}");
    assert!(!r.m.date_refused(), "nothing refused before the stamp");
}

#[test]
fn a_date_the_stamp_contradicts_is_refused_and_the_holder_waited_for() {
    let mut r = Run::new(plan(), 0.0);
    to_a_stamp(&mut r, 0.0);
    // The store stamps its probe half a second after the record: the Date ran an hour ahead.
    let s = r.step(Event::Stamped(Ok(Some(wall(0.5)))), 0.0);
    assert!(r.m.date_refused(), "the gateway's Date is refused");
    let (until, _) = expect_sleep(s);
    assert!(until > at(0.0), "the holder is waited for, not taken over");
}

#[test]
fn an_unanswered_stamp_is_retried_and_refuses_nothing() {
    let mut r = Run::new(plan(), 0.0);
    to_a_stamp(&mut r, 0.0);
    // No answer is not "no stamp to be had": the Date is not refused for it, the probe is
    // retried after a backoff.
    expect_sleep(r.step(Event::Stamped(Err(unavailable())), 0.0));
    assert!(!r.m.date_refused());
    // No stamp to be had at all (the store gives none): the Date is refused.
    let mut r = Run::new(plan(), 0.0);
    to_a_stamp(&mut r, 0.0);
    r.step(Event::Stamped(Ok(None)), 0.0);
    assert!(r.m.date_refused());
}

/// A held record whose holder names its processes on this machine (pids 100 and 101), at
/// epoch 7, as read at generation 1.
fn held_by_local_process(state: RecordState) -> (Record, Get) {
    let mut rec = record("other", 7, state);
    rec.rev = 2;
    rec.holder.pid = Some(100);
    rec.holder.process = Some(Box::new(crate::record::HolderProcess {
        boot: "boot".into(),
        pid_ns: "pid:[1]".into(),
        time_ns: "time:[1]".into(),
        start: 5,
        also: vec![(101, 6)],
    }));
    let get = found(&rec, 1);
    (rec, get)
}

/// What this machine says of pids 100 and 101, on the holder's boot and namespaces.
fn probed(procs: &[(u32, dead_holder::Proc)]) -> Event {
    Event::Probed(Probe {
        boot: Some("boot".into()),
        pid_ns: Some("pid:[1]".into()),
        time_ns: Some("time:[1]".into()),
        procs: procs.to_vec(),
    })
}

/// The dead-holder rule (issue 28): with it on, a held record naming processes is probed
/// before deciding; a probe proving every one gone takes the lease over at once (epoch + 1, on
/// the version read), one that does not leaves the usual wait, which names the holder.
#[test]
fn a_local_holder_is_probed_and_taken_over_at_once_only_when_proven_gone() {
    use dead_holder::Proc;
    let (rec, get) = held_by_local_process(RecordState::Held);
    let mut on = plan();
    on.probe_holders = true;

    // Gone: both pids absent, or reused by later processes.
    for procs in [
        [(100, Proc::Absent), (101, Proc::Absent)],
        [(100, Proc::Started(9)), (101, Proc::Absent)],
    ] {
        let mut r = Run::new(on.clone(), 0.0);
        expect_read(r.step(Event::Start, 0.0));
        match r.read(get.clone(), 0.5) {
            Step::Probe { pids } => assert_eq!(pids, [100, 101]),
            other => panic!("expected a probe, got {other:?}"),
        }
        assert_eq!(r.m.waiting_for(), None, "a probe is not a wait");
        let (taken, cond) = expect_put(r.step(probed(&procs), 0.6));
        assert_eq!((taken.epoch, &taken.holder.id), (8, &"me".to_string()));
        assert_eq!(cond, Cond::Match(version(1)));
        assert_eq!(r.m.waiting_for(), None);
    }

    // One still there (or unknown): the usual wait, once per answer of the store (not probed
    // again before deciding).
    for procs in [
        [(100, Proc::Started(5)), (101, Proc::Absent)],
        [(100, Proc::Absent), (101, Proc::Unknown)],
    ] {
        let mut r = Run::new(on.clone(), 0.0);
        expect_read(r.step(Event::Start, 0.0));
        assert!(matches!(r.read(get.clone(), 0.5), Step::Probe { .. }));
        expect_sleep(r.step(probed(&procs), 0.6));
        assert_eq!(
            r.m.waiting_for(),
            Some((Some(&rec.holder), Some(7))),
            "the wait names the holder and its epoch"
        );
    }
}

/// Without the rule, or for a record that names no processes, or one not held: no probe.
#[test]
fn no_probe_without_the_rule_or_a_local_holder_that_holds() {
    let (rec, get) = held_by_local_process(RecordState::Held);
    // The rule off: the usual wait, which names the holder.
    let mut r = Run::new(plan(), 0.0);
    expect_read(r.step(Event::Start, 0.0));
    expect_sleep(r.read(get, 0.5));
    assert_eq!(r.m.waiting_for(), Some((Some(&rec.holder), Some(7))));
    // Woken: no longer waiting for anyone until the next decision.
    expect_read(r.step(Event::Slept, 1.0));
    assert_eq!(r.m.waiting_for(), None);

    let mut on = plan();
    on.probe_holders = true;
    // A record naming no processes (another machine's, an older version's): the usual wait.
    let mut r = Run::new(on.clone(), 0.0);
    expect_read(r.step(Event::Start, 0.0));
    expect_sleep(r.read(held_by_other(), 0.5));
    // A released record naming processes: taken at once, without a probe.
    let (_, released) = held_by_local_process(RecordState::Released);
    let mut r = Run::new(on, 0.0);
    expect_read(r.step(Event::Start, 0.0));
    let (taken, _) = expect_put(r.read(released, 0.5));
    assert_eq!(taken.epoch, 8);
}

/// The store-clock rule's stamp (issue 29), as the acquirer handles its outcome: an answer
/// whose `Date` says the record is old enough asks for a stamp; a stamp that did not come
/// (`Unavailable`) is tried again later and refuses no `Date`; a stamp that cannot be had
/// (another error) refuses `Date` from then on (the driver warns once), and the observation
/// rule decides.
#[test]
fn a_stamp_that_did_not_come_is_retried_and_one_that_cannot_be_had_refuses_date() {
    let old_by_date = || {
        let mut o = object(&record("other", 7, RecordState::Held).to_bytes(), 1);
        o.last_modified = Some(wall(0.0));
        o.server_now = Some(wall(100.0));
        Get::Found(o)
    };
    let mut p = plan();
    p.timing.store_clock_rule = true;
    let asked = |p: &Plan| {
        let mut r = Run::new(p.clone(), 0.0);
        expect_read(r.step(Event::Start, 0.0));
        assert!(
            matches!(r.read(old_by_date(), 0.5), Step::Stamp),
            "a stamp is asked for"
        );
        assert!(!r.m.date_refused());
        r
    };
    let mut r = asked(&p);
    expect_sleep(r.step(Event::Stamped(Err(unavailable())), 0.6));
    assert!(!r.m.date_refused(), "no answer refuses nothing");
    let mut r = asked(&p);
    expect_sleep(r.step(
        Event::Stamped(Err(Error::invalid("cannot write the probe"))),
        0.6,
    ));
    assert!(r.m.date_refused(), "no stamp to be had: Date is refused");
}

// History (docs/protocol.md §3, "History"): the write that replaces a tenure appends it.

/// A plan that records history.
fn plan_with_history() -> Plan {
    Plan {
        history: true,
        ..plan()
    }
}

/// A past tenure, as an earlier write appended it.
fn past_tenure() -> crate::record::Tenure {
    crate::record::Tenure {
        epoch: 6,
        holder: holder("first"),
        acquired_at: Some("2025-12-01T00:00:00Z".into()),
        ended_at: Some("2025-12-01T01:00:00Z".into()),
        end: "released".into(),
        by: None,
    }
}

/// Poll a held record until it has been unchanged for ttl + grace and take it over at 11 s.
fn take_over(plan: Plan, held: &Record) -> Record {
    let mut r = Run::new(plan, 0.0);
    r.step(Event::Start, 0.0);
    expect_sleep(r.read(found(held, 1), 0.0));
    for t in 1..11 {
        let t = t as f64;
        r.step(Event::Slept, t);
        expect_sleep(r.read(Get::NotModified { server_now: None }, t));
    }
    let (rec, cond) = expect_put(r.step(Event::Slept, 11.0));
    assert_eq!(cond, Cond::Match(version(1)));
    rec
}

#[test]
fn a_takeover_appends_the_expired_tenure_before_the_earlier_ones() {
    let held = Record {
        acquired_at: Some("2025-12-31T23:59:55Z".into()),
        history: vec![past_tenure()].into(),
        ..record("other", 7, RecordState::Held)
    };
    let rec = take_over(plan_with_history(), &held);
    assert_eq!(rec.history.len(), 2);
    let ended = &rec.history[0];
    assert_eq!(
        (ended.epoch, ended.holder.id.as_str(), ended.end.as_str()),
        (7, "other", "expired")
    );
    assert_eq!(ended.acquired_at.as_deref(), Some("2025-12-31T23:59:55Z"));
    assert_eq!(ended.ended_at, Some(timestamp(wall(11.0))));
    assert_eq!(rec.history[1], past_tenure());
}

#[test]
fn with_history_off_a_takeover_keeps_the_records_history_as_it_is() {
    let held = Record {
        history: vec![past_tenure()].into(),
        ..record("other", 7, RecordState::Held)
    };
    let rec = take_over(plan(), &held);
    assert_eq!(rec.history, vec![past_tenure()]);
}

#[test]
fn a_lease_taken_back_after_its_release_ends_that_tenure_released_at_the_release() {
    let released = Record {
        rev: 4,
        acquired_at: Some("2025-12-31T23:00:00Z".into()),
        renewed_at: Some("2025-12-31T23:59:58Z".into()),
        ..record("me", 7, RecordState::Released)
    };
    let mut r = Run {
        m: Acquirer::new(
            plan_with_history(),
            7,
            Some((version(3), released)),
            at(0.0),
        ),
        e: Counter::default(),
    };
    let (rec, _) = expect_put(r.step(Event::Start, 0.0));
    assert_eq!(rec.history.len(), 1);
    assert_eq!(rec.history[0].end, "released");
    assert_eq!(
        rec.history[0].ended_at.as_deref(),
        Some("2025-12-31T23:59:58Z")
    );
}

#[test]
fn a_record_deleted_while_held_ends_the_last_tenure_seen_deleted_in_the_record_created_next() {
    let mut r = Run::new(plan_with_history(), 0.0);
    r.step(Event::Start, 0.0);
    expect_sleep(r.read(held_by_other(), 0.0));
    // Another record at the same rev (a new holder's create after a deletion): the last seen.
    r.step(Event::Slept, 1.0);
    let third = record("third", 7, RecordState::Held);
    expect_sleep(r.read(found(&third, 2), 1.0));
    r.step(Event::Slept, 2.0);
    let (rec, cond) = expect_put(r.read(not_found(), 2.0));
    assert_eq!(cond, Cond::Create);
    assert_eq!(rec.history.len(), 1);
    let ended = &rec.history[0];
    assert_eq!(
        (ended.holder.id.as_str(), ended.end.as_str()),
        ("third", "deleted")
    );
    assert_eq!(ended.ended_at, Some(timestamp(wall(2.0))));
    // The record the create made granted nobody: the take carries its history as it is, with
    // no tenure of ours for it.
    let (taken, cond) = expect_put(r.written(4, 2.5));
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!(taken.history, rec.history);
}

#[test]
fn a_key_never_seen_is_created_with_no_history() {
    let mut r = Run::new(plan_with_history(), 0.0);
    r.step(Event::Start, 0.0);
    let (rec, cond) = expect_put(r.read(not_found(), 0.0));
    assert_eq!((cond, rec.history.to_vec()), (Cond::Create, vec![]));
    // Nor is its take's: the released record the create made was nobody's tenure.
    let (taken, cond) = expect_put(r.written(2, 0.5));
    assert_eq!(
        (cond, taken.history.to_vec()),
        (Cond::Match(version(2)), vec![])
    );
}

/// A record another acquirer's create made (released, acquired by nobody: it died or gave up
/// before its take) is no tenure: taking it adds none, and it hands nothing over.
#[test]
fn the_take_of_a_record_made_by_anothers_create_adds_no_tenure_and_no_handover() {
    let made = Record {
        rev: 1,
        acquired_at: None,
        history: vec![past_tenure()].into(),
        ..record("other", 7, RecordState::Released)
    };
    let mut r = Run::new(plan_with_history(), 0.0);
    r.step(Event::Start, 0.0);
    let (rec, cond) = expect_put(r.read(found_at(&made, 1, 1.0, 3.0), 0.0));
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!(rec.history, vec![past_tenure()]);
    assert_eq!(r.m.handover(at(0.5)), None);
}

/// A read of `record` at generation `g` whose object the store last modified at `wall(modified)`,
/// answered at `wall(server_now)`.
fn found_at(record: &Record, g: u64, modified: f64, server_now: f64) -> Get {
    Get::Found(crate::store::Object {
        last_modified: Some(wall(modified)),
        server_now: Some(wall(server_now)),
        ..object(&record.to_bytes(), g)
    })
}

#[test]
fn the_handover_is_the_time_from_the_release_to_the_landed_write_by_the_stores_clock() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let released = Record {
        acquired_at: Some(timestamp(wall(0.0))),
        ..record("other", 7, RecordState::Released)
    };
    let (_, cond) = expect_put(r.read(found_at(&released, 1, 1.0, 3.0), 0.0));
    assert_eq!(cond, Cond::Match(version(1)));
    // Released at 1 s by the store's clock, which said 3 s at the read; landed 0.5 s later.
    assert_eq!(r.m.handover(at(0.5)), Some(secs(2.5)));
}

#[test]
fn the_handover_of_a_takeover_counts_from_the_holders_deadline_and_none_from_our_own() {
    let mut r = Run::new(plan(), 0.0);
    r.step(Event::Start, 0.0);
    let held = record("other", 7, RecordState::Held);
    expect_sleep(r.read(found_at(&held, 1, 0.0, 8.0), 0.0));
    // Last written at 0 s with a 10 s ttl: free since 10 s; the store said 8 s at the read,
    // so 12 s four seconds later.
    assert_eq!(r.m.handover(at(4.0)), Some(secs(2.0)));
    let mut own = Run::new(plan(), 0.0);
    own.step(Event::Start, 0.0);
    let mine = record("me", 7, RecordState::Released);
    own.read(found_at(&mine, 1, 1.0, 3.0), 0.0);
    assert_eq!(own.m.handover(at(0.5)), None);
}

// Preemption for fenced workloads (docs/protocol.md §5, issue 23).

fn preempting_plan() -> Plan {
    Plan {
        preempt: Preempt::EveryEffectFenced,
        history: true,
        holder: Holder {
            label: Some("new".into()),
            host: Some("h2".into()),
            ..holder("me")
        },
        ..plan()
    }
}

/// A live record of another holder is written over at once: conditional on the version read,
/// at the takeover's epoch (one above), naming the holder and epoch it replaces, and its
/// tenure ends `preempted` by us.
#[test]
fn a_live_record_is_preempted_at_once_with_the_next_epoch_naming_whom_it_replaces() {
    let mut r = Run::new(preempting_plan(), 0.0);
    assert_eq!(expect_read(r.step(Event::Start, 0.0)), None);
    let (rec, cond) = expect_put(r.read(held_by_other(), 0.0));
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!((rec.epoch, rec.rev, rec.state), (8, 3, RecordState::Held));
    assert_eq!(rec.holder.id, "me");
    assert_eq!(
        rec.preempted,
        Some(crate::record::Displaced {
            id: "other".into(),
            epoch: 7
        })
    );
    assert_eq!(rec.broken, None);
    let ended = &rec.history[0];
    assert_eq!(
        (ended.epoch, ended.holder.id.as_str(), ended.end.as_str()),
        (7, "other", "preempted")
    );
    assert_eq!(ended.by.as_deref(), Some("new@h2"));
    assert_eq!(ended.ended_at, Some(timestamp(wall(0.0))));
    // It lands: the lease is ours.
    assert!(matches!(r.written(2, 0.1), Step::Acquired { .. }));
}

/// A preemption of a record a create made (rev 1) goes above the clock read after the read, as
/// every take of such a record does.
#[test]
fn a_preemption_of_a_record_at_rev_1_goes_above_the_clock_of_the_read() {
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    let held = record("other", 7, RecordState::Held);
    let (rec, _) = expect_put(r.read(found(&held, 1), 5.0));
    assert_eq!(rec.epoch, unix_ms(wall(5.0)).max(8));
    assert!(rec.epoch > 7);
}

/// Without the mode, the same live record is waited for, as before.
#[test]
fn without_preempt_a_live_record_is_waited_for() {
    let p = Plan {
        preempt: Preempt::Never,
        ..preempting_plan()
    };
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    assert_eq!(expect_sleep(r.read(held_by_other(), 0.0)), (at(1.0), true));
    assert_eq!(r.m.waiting_for().map(|(_, e)| e), Some(Some(7)));
}

/// One tenure preempted per acquire call: when the condition failed because another acquirer
/// took the lease first, the acquirer goes by the usual rules (the read-back is fresh: it
/// waits without reading again), and that later live tenure is waited for, not preempted.
#[test]
fn a_preemption_that_lost_to_another_tenure_is_not_tried_again_in_the_same_call() {
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    expect_put(r.read(held_by_other(), 0.0));
    // Someone else wrote first: the write reads back.
    assert_eq!(
        expect_read(r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1)),
        None
    );
    let other = Record {
        rev: 4,
        ..preempting("third", 8, "other", 7)
    };
    assert_eq!(expect_sleep(r.read(found(&other, 2), 0.2)), (at(1.2), true));
    // Polled again, a new live record is still waited for.
    assert_eq!(expect_read(r.step(Event::Slept, 1.2)), Some(version(2)));
    let renewed = Record {
        rev: 5,
        ..other.clone()
    };
    assert_eq!(
        expect_sleep(r.read(found(&renewed, 3), 1.2)),
        (at(2.2), true)
    );
    // And taken over by the usual rules only, without `preempted`.
    for t in 3..13 {
        let t = t as f64 - 0.8;
        r.step(Event::Slept, t);
        expect_sleep(r.read(Get::NotModified { server_now: None }, t));
    }
    let (rec, cond) = expect_put(r.step(Event::Slept, 12.2));
    assert_eq!(cond, Cond::Match(version(3)));
    assert_eq!((rec.epoch, rec.preempted), (9, None));
    assert_eq!(rec.history[0].end, "expired");
}

/// A preemption that lost the race with its holder's renewal is sent again, over the renewed
/// version: the tenure it set out to displace is still live (a renewal comes every ttl/3, so
/// this is common under network delay), and waiting it out would wait for a live holder that
/// may never let go (the failure of CI's stop 38: a preempting worker waited 300 s).
#[test]
fn a_preemption_that_lost_to_the_holders_renewal_is_sent_again_over_the_renewed_version() {
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (first, _) = expect_put(r.read(held_by_other(), 0.0));
    assert_eq!(
        expect_read(r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1)),
        None
    );
    let renewed = Record {
        rev: 3,
        write: Some("w-other-renewed".into()),
        ..record("other", 7, RecordState::Held)
    };
    let (again, cond) = expect_put(r.read(found(&renewed, 2), 0.2));
    assert_eq!(cond, Cond::Match(version(2)));
    assert_eq!((again.epoch, again.rev), (8, 4));
    assert_eq!(again.preempted, first.preempted);
    assert!(matches!(r.written(3, 0.3), Step::Acquired { .. }));
}

/// A preemption whose outcome stays unknown counts as sent: when the read then shows the same
/// tenure renewed (the write did not land), it is sent again over the renewed version; when it
/// shows a later tenure (another acquirer's), that one is waited for, not preempted.
#[test]
fn a_preemption_whose_outcome_is_unknown_is_sent_again_only_at_the_same_tenure() {
    for later in [false, true] {
        let mut r = Run::new(preempting_plan(), 0.0);
        r.step(Event::Start, 0.0);
        let (sent, _) = expect_put(r.read(held_by_other(), 0.0));
        r.put_unanswered(1.0);
        // The write's read-backs fail until it gives up (the ttl); then the acquirer backs off.
        assert!(matches!(
            r.read_err(unavailable(), 10.0),
            Step::Sleep { .. }
        ));
        assert_eq!(expect_read(r.step(Event::Slept, 10.1)), None);
        let seen = if later {
            Record {
                rev: 4,
                ..preempting("third", 8, "other", 7)
            }
        } else {
            Record {
                rev: 3,
                write: Some("w-other-renewed".into()),
                ..record("other", 7, RecordState::Held)
            }
        };
        let s = r.read(found(&seen, 2), 10.2);
        if later {
            assert_eq!(expect_sleep(s), (at(11.2), true));
        } else {
            let (again, cond) = expect_put(s);
            assert_eq!(cond, Cond::Match(version(2)));
            assert_eq!(again.preempted, sent.preempted);
        }
        assert_eq!(sent.preempted.map(|p| p.id), Some("other".into()));
    }
}

/// A released record, or one whose holder's deadline has passed, is taken the ordinary way:
/// nobody is preempted.
#[test]
fn a_released_or_expired_record_is_taken_without_preempting_anyone() {
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    let (rec, cond) = expect_put(r.read(released_by_other(), 0.0));
    assert_eq!(cond, Cond::Match(version(1)));
    assert_eq!((rec.epoch, rec.preempted), (8, None));
    assert!(
        rec.history.is_empty(),
        "a record nobody acquired is no tenure"
    );
    // Expired by the store's clock (old enough, and the store's own stamp agrees).
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    let held = Record {
        rev: 2,
        ..record("other", 7, RecordState::Held)
    };
    let mut get = found(&held, 1);
    if let Get::Found(o) = &mut get {
        o.last_modified = Some(wall(0.0) - Duration::from_secs(60));
        o.server_now = Some(wall(0.0));
    }
    // A memory-like store whose answers carry its own stamp: decided at once.
    let s = r.read(get, 0.0);
    let s = match s {
        Step::Stamp => r.step(Event::Stamped(Ok(Some(wall(0.0)))), 0.0),
        s => s,
    };
    let (rec, _) = expect_put(s);
    assert_eq!((rec.epoch, rec.preempted), (8, None));
    assert_eq!(rec.history[0].end, "expired");
}

/// Our own holder's record (an earlier write of ours) and a corrupt record are never
/// preempted: nobody could be told.
#[test]
fn neither_our_own_record_nor_a_corrupt_one_is_preempted() {
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    let ours = Record {
        rev: 2,
        ..record("me", 7, RecordState::Held)
    };
    expect_sleep(r.read(found(&ours, 1), 0.0));
    let mut r = Run::new(preempting_plan(), 0.0);
    r.step(Event::Start, 0.0);
    expect_sleep(r.read(found_corrupt(1), 0.0));
}

/// `-n` with the mode preempts instead of failing `Held`.
#[test]
fn try_once_with_preempt_preempts_instead_of_failing_held() {
    let p = Plan {
        try_once: true,
        ..preempting_plan()
    };
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    let (rec, _) = expect_put(r.read(held_by_other(), 0.0));
    assert!(rec.preempted.is_some());
    // Its condition failed: then `Held`, as without the mode.
    r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1);
    let other = preempting("third", 8, "other", 7);
    let e = expect_failed(r.read(found(&other, 2), 0.2));
    assert_eq!(e.kind(), ErrorKind::Held);
}

/// `-n` with the mode, its preemption beaten by the holder's renewal: sent again over the
/// renewed version, not `Held` (the same tenure is still the one it set out to preempt).
#[test]
fn try_once_with_preempt_sends_a_preemption_beaten_by_a_renewal_again() {
    let p = Plan {
        try_once: true,
        ..preempting_plan()
    };
    let mut r = Run::new(p, 0.0);
    r.step(Event::Start, 0.0);
    expect_put(r.read(held_by_other(), 0.0));
    r.step(Event::Put(Ok(Put::ConditionFailed)), 0.1);
    let renewed = Record {
        rev: 3,
        write: Some("w-other-renewed".into()),
        ..record("other", 7, RecordState::Held)
    };
    let (again, cond) = expect_put(r.read(found(&renewed, 2), 0.2));
    assert_eq!(cond, Cond::Match(version(2)));
    assert!(again.preempted.is_some());
    assert!(matches!(r.written(3, 0.3), Step::Acquired { .. }));
}
