//! Every decision of a waiter, from the first read to the grant.

use std::time::{Duration, SystemTime};

use super::*;
use crate::protocol::queue::tests::{entry, found, join, secs, t0, timing, version, NoJitter};
use crate::protocol::queue::{classify, Mode, Scope, MAX_QUEUE_RECORD_LEN};
use crate::store::Object;

const WALL_MS: u64 = 1_767_225_600_000;

fn wall() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(WALL_MS)
}

fn plan(mode: Mode) -> WaitPlan {
    WaitPlan {
        key: "locks/job".into(),
        url: "file:///locks/job".into(),
        me: Holder {
            id: "me".into(),
            ..Holder::default()
        },
        entry: Entry {
            id: "me".into(),
            mode,
            scope: Scope::Whole,
            ttl_ms: 10_000,
            token: None,
            session: None,
            wake: None,
            priority: 0,
            passed: 0,
        },
        permits: None,
        timing: timing(),
        try_once: false,
        wait_deadline: None,
        unavailable_timeout: Some(secs(10.0)),
        max_len: MAX_QUEUE_RECORD_LEN,
        preempt: false,
    }
}

/// A waiter and its clock.
struct Rig {
    w: Waiter,
    now: Instant,
    /// Our wall clock, ms after [`WALL_MS`].
    wall_ms: u64,
    alive: bool,
    /// The driver's memory: hints have been seen to arrive for this lock.
    hints_seen: bool,
}

impl Rig {
    fn new(plan: WaitPlan) -> Rig {
        Rig {
            w: Waiter::new(plan, 0, t0()),
            now: t0(),
            wall_ms: 0,
            alive: true,
            hints_seen: false,
        }
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            now: self.now,
            wall: wall() + Duration::from_millis(self.wall_ms),
            session_alive: self.alive,
            hints_seen: self.hints_seen,
        }
    }

    fn step(&mut self, e: Event) -> Step {
        let ctx = self.ctx();
        self.w.step(e, ctx, &NoJitter)
    }

    /// Answer a stamp of the lock's own record with `r` (the steps that ask for it skipped).
    fn lock_stamped(&mut self, r: Result<Option<SystemTime>>) -> Step {
        let ctx = self.ctx();
        self.w.after_stamp(None, r, ctx, &NoJitter)
    }

    fn at(&mut self, s: f64) {
        self.now = t0() + secs(s);
    }

    fn at_ms(&mut self, n: u64) {
        self.now = t0() + Duration::from_millis(n);
    }

    /// Start, and answer the first read with `get`.
    fn start_on(&mut self, get: Get) -> Step {
        assert!(matches!(
            self.step(Event::Start),
            Step::ReadRecord {
                if_none_match: None
            }
        ));
        self.step(Event::Record(Ok(get)))
    }

    /// Start on a lock `a` holds, join behind it (version 4 to 5): what most waiting begins with.
    fn joined_behind_a(&mut self) -> QueueRecord {
        let step = self.start_on(found(&held_by_a().to_bytes(), 4));
        let (joined, _) = self.join_write(step);
        self.written(5);
        joined
    }

    /// Answer a join: begin the session, then the write.
    fn join_write(&mut self, step: Step) -> (QueueRecord, Cond) {
        let step = match step {
            Step::BeginSession => self.step(Event::SessionBegun(Ok(()))),
            other => other,
        };
        match step {
            Step::WriteRecord {
                bytes, cond, why, ..
            } => {
                assert_eq!(why, Why::Join);
                (record(&bytes), cond)
            }
            other => panic!("not a join: {other:?}"),
        }
    }

    /// Answer a session read that the answer's `Date` shows old enough to take over: the waiter
    /// asks for the store's own stamp (issue 29) and gets one that agrees with `Date`.
    fn stale(&mut self, get: Get) -> Step {
        match self.step(Event::Session(Ok(get))) {
            Step::Stamp { session } => {
                assert_eq!(session.as_deref(), Some("locks/job.q/a"));
                self.step(Event::Stamped(Ok(Some(store_now()))))
            }
            other => panic!("no stamp asked for: {other:?}"),
        }
    }

    fn written(&mut self, n: u64) -> Step {
        self.step(Event::Wrote(Ok(Put::Written {
            version: version(n),
            server_now: None,
        })))
    }
}

fn record(bytes: &[u8]) -> QueueRecord {
    match classify(bytes) {
        Classified::Queue(r) => r,
        other => panic!("{other:?}"),
    }
}

/// `a` holds exclusively.
fn held_by_a() -> QueueRecord {
    join(
        &QueueRecord::new(WALL_MS, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    )
}

/// The store's clock in the answers of [`session`].
fn store_now() -> SystemTime {
    SystemTime::UNIX_EPOCH + secs(2_000_000_000.0)
}

/// A session record at `version` (`v`), held (or released), modified `age` seconds before the
/// store's `now`.
fn session(v: &str, state: RecordState, age: u64) -> Get {
    let r = Record {
        rev: 2,
        write: Some("w".into()),
        ..crate::protocol::testing::record("a", 3, state)
    };
    let store_now = store_now();
    let bytes = r.to_bytes();
    Get::Found(Object {
        size: bytes.len() as u64,
        bytes: Some(bytes),
        version: Version::etag(v),
        last_modified: Some(store_now - secs(age as f64)),
        server_now: Some(store_now),
        meta: Default::default(),
    })
}

/// Issue 22 item 1 **(changed)**: a record made where none is (`Create`) grants nobody — it may
/// land after a record made meanwhile by someone else handed out tokens above the clock it was
/// sent with, and was deleted. The grant comes from the next write, conditional on the version
/// the `Create` made, with tokens above the clock read after its answer.
#[test]
fn a_free_key_is_made_a_queued_lock_that_grants_nobody_then_settled_above_the_clock() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(Get::NotFound { server_now: None });
    assert!(
        matches!(step, Step::BeginSession),
        "the session comes first"
    );
    assert!(!r.w.maybe_listed());
    let (made, cond) = r.join_write(step);
    assert!(r.w.maybe_listed());
    assert_eq!(cond, Cond::Create);
    assert_eq!(made.epoch, WALL_MS, "the floor, no token handed out");
    assert!(made.grants.is_empty(), "a Create grants nobody: {made:?}");
    assert!(matches!(made.position("me"), Position::Waiting { .. }));
    // Its answer comes back 5 s later by our wall clock: the settle's tokens start above that.
    r.at(0.3);
    r.wall_ms = 5_000;
    let settled = match r.written(1) {
        Step::WriteRecord {
            bytes,
            cond,
            why,
            grants,
        } => {
            assert_eq!(
                cond,
                Cond::Match(version(1)),
                "on the version the Create made"
            );
            assert_eq!(why, Why::Settle);
            assert_eq!(ids(&grants), ["me"]);
            record(&bytes)
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(settled.rev, made.rev + 1);
    assert_eq!(
        settled.position("me"),
        Position::Granted {
            token: WALL_MS + 5_001
        }
    );
    r.at(0.5);
    match r.written(2) {
        Step::Granted {
            token,
            permits,
            confirmation,
        } => {
            assert_eq!((token, permits), (WALL_MS + 5_001, None));
            assert_eq!(confirmation.version, version(2));
            assert_eq!(
                confirmation.sent,
                t0() + secs(0.3),
                "the settle's send time"
            );
            assert_eq!(confirmation.record, settled);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.w.known_epoch(), WALL_MS + 5_001);
}

/// Whoever reads a record that grants nobody though it could (its maker stopped after the
/// `Create`) settles it, on the version read; one that grants what it can is left alone.
#[test]
fn a_record_left_unsettled_is_settled_by_its_next_reader() {
    let made = QueueRecord::new(WALL_MS, None)
        .changed(
            &Change::Join(entry("a", Mode::Exclusive, Scope::Whole)),
            MAX_QUEUE_RECORD_LEN,
        )
        .unwrap()
        .unwrap();
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.wall_ms = 2_000;
    let step = r.start_on(found(&made.to_bytes(), 7));
    // Absent from it: our join settles it too (`a` first, in arrival order).
    let (next, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(7)));
    assert_eq!(
        next.position("a"),
        Position::Granted {
            token: WALL_MS + 2_001
        }
    );
    assert!(matches!(next.position("me"), Position::Waiting { .. }));
    // Listed and waiting in an unsettled record: settle it before anything else.
    let mut both = made.clone();
    both.queue.push(entry("me", Mode::Exclusive, Scope::Whole));
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&both.to_bytes(), 8));
    match step {
        Step::WriteRecord {
            bytes, cond, why, ..
        } => {
            assert_eq!((cond, why), (Cond::Match(version(8)), Why::Settle));
            let settled = record(&bytes);
            assert_eq!(settled.grants.len(), 1);
            assert_eq!(settled.grants[0].id(), "a");
        }
        other => panic!("{other:?}"),
    }
    // Settled already: nothing to settle, it checks the holder's session.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let settled = both.settled(WALL_MS).unwrap();
    assert!(settled.settled(WALL_MS).is_none());
    assert!(matches!(
        r.start_on(found(&settled.to_bytes(), 9)),
        Step::ReadSession { .. }
    ));
}

#[test]
fn a_held_lock_is_joined_on_the_version_read_and_waited_for() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    let (next, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!(next.queue.len(), 1);
    // Listed and waiting at the head: it checks the holder's session at once.
    match r.written(5) {
        Step::ReadSession { key, if_none_match } => {
            assert_eq!(key, "locks/job.q/a");
            assert_eq!(if_none_match, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.w.watched(), ["a"]);
    // Renewed just now: wait, and sleep until a poll.
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    // The poll re-reads with the version known: a 304 changes nothing.
    r.at(1.0);
    assert!(matches!(
        r.step(Event::Slept),
        Step::ReadRecord { if_none_match: Some(v) } if v == version(5)
    ));
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::Sleep { .. }
    ));
    // The holder left: granted, confirmed by that read.
    let left = next
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    r.at(2.0);
    r.step(Event::Slept);
    match r.step(Event::Record(Ok(found(&left.to_bytes(), 6)))) {
        Step::Granted { confirmation, .. } => {
            assert_eq!(confirmation.sent, t0() + secs(2.0));
            assert_eq!(confirmation.version, version(6));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sessions_check_is_paced_by_the_takeover_rule_never_a_whole_interval_late() {
    let t = timing();
    // The store clock's estimate adds a resolution: look one resolution before it, then every
    // poll, never after it.
    let now = t0();
    assert_eq!(pace(now + secs(9.0), now, &t), now + secs(8.0));
    assert_eq!(pace(now + secs(1.5), now, &t), now + secs(1.0));
    assert_eq!(pace(now + secs(0.5), now, &t), now + secs(0.5));
    // Never now or before, even when the rule fires now: a check due at once would loop.
    assert_eq!(pace(now, now, &t), now + Duration::from_millis(1));
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    // Six seconds old by the store's clock: the rule fires at 10 + 1 + 1 = 12, the estimate
    // says in 6 + 1 s; the check is due a second before.
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 6)))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    r.at(1.0);
    r.step(Event::Slept);
    r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
    r.at(6.0);
    r.step(Event::Slept);
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::ReadSession { .. }
    ));
}

#[test]
fn a_session_taken_over_by_the_rules_is_ended_then_its_participant_removed() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    // Not renewed for 20 s: its deadline has surely passed.
    let Step::EndSession {
        key,
        record: ended,
        cond,
    } = r.stale(session("s1", RecordState::Held, 20))
    else {
        panic!("not ended")
    };
    assert_eq!(key, "locks/job.q/a");
    assert_eq!(cond, Cond::Match(Version::etag("s1")));
    assert_eq!(ended.state, RecordState::Released);
    assert_eq!(ended.holder.id, "me");
    assert_eq!(ended.write.as_deref(), Some("n"));
    let step = r.step(Event::Ended(Ok(Written::Landed {
        version: Version::etag("s2"),
        t_send: t0(),
    })));
    let Step::WriteRecord {
        bytes,
        cond,
        why,
        grants,
    } = step
    else {
        panic!("not removed: {step:?}")
    };
    assert_eq!(why, Why::Remove { id: "a".into() });
    assert_eq!(cond, Cond::Match(version(5)));
    assert_eq!(ids(&grants), ["me"], "the removal grants us");
    let removed = record(&bytes);
    assert_eq!(removed.find("a"), None);
    assert_eq!(removed.grants.len(), 1);
    let _ = joined;
    // Then its released session is deleted, then we hold.
    match r.written(6) {
        Step::DeleteSession { key, version: v } => {
            assert_eq!((key.as_str(), v), ("locks/job.q/a", Version::etag("s2")))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(r.step(Event::Deleted), Step::Granted { .. }));
}

/// Issue 29 for queued locks: a session that the answer's `Date` shows long dead is taken over
/// only once the store's own stamp agrees; a `Date` running ahead of it (a gateway's) is refused
/// and the waiter waits; a stamp that cannot be had for now is asked again at the next check.
#[test]
fn a_sessions_date_running_ahead_is_confirmed_by_the_stores_stamp_never_trusted() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    // `Date` says 20 s since its last renewal (the session's ttl is 10 s): ask for a stamp.
    assert!(matches!(
        r.step(Event::Session(Ok(session("s1", RecordState::Held, 20)))),
        Step::Stamp { session: Some(_) }
    ));
    // The store did not answer: no takeover; looked at again after a poll.
    match r.step(Event::Stamped(Err(Error::unavailable("timed out")))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    assert!(!r.w.date_refused());
    r.at(1.0);
    r.step(Event::Slept);
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::ReadSession { .. }
    ));
    assert!(matches!(
        r.step(Event::Session(Ok(session("s1", RecordState::Held, 20)))),
        Step::Stamp { .. }
    ));
    // The store's own clock says it was renewed 1 s ago: `Date` is 19 s ahead, refused; wait.
    let renewed = store_now() - secs(20.0);
    match r.step(Event::Stamped(Ok(Some(renewed + secs(1.0))))) {
        Step::Sleep { .. } => {}
        other => panic!("taken over on a gateway's Date: {other:?}"),
    }
    assert!(r.w.date_refused(), "the driver warns once");
}

/// A stamp that cannot be had for a reason other than an unreachable store (the probe's write
/// refused) is judged at once with `Date` refused — never taken for a store that did not answer,
/// which would only look again after a poll (the `Unavailable` guard of `after_stamp`).
#[test]
fn a_stamp_that_cannot_be_had_refuses_date_at_once_an_unreachable_store_looks_again_later() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    assert!(matches!(
        r.step(Event::Session(Ok(session("s1", RecordState::Held, 20)))),
        Step::Stamp { session: Some(_) }
    ));
    r.step(Event::Stamped(Err(Error::invalid(
        "the probe's write was refused",
    ))));
    assert!(
        r.w.date_refused(),
        "no stamp: Date is refused, not waited for"
    );

    // The lock's own view: a store that does not answer is looked at again one poll later.
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.at(2.0);
    match r.lock_stamped(Err(Error::unavailable("timed out"))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(3.0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_released_session_is_gone_at_once_and_a_rejected_end_is_judged_again() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    assert!(matches!(
        r.stale(session("s1", RecordState::Held, 20)),
        Step::EndSession { .. }
    ));
    // Someone renewed it meanwhile: it lives; check again later.
    assert!(matches!(
        r.step(Event::Ended(Ok(Written::Rejected {
            current: session("s9", RecordState::Held, 0)
        }))),
        Step::Sleep { .. }
    ));
    // Released by its owner: gone, removed without ending it, nothing to delete but that.
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    assert!(matches!(
        r.step(Event::Session(Ok(session("s3", RecordState::Released, 0)))),
        Step::WriteRecord {
            why: Why::Remove { .. },
            ..
        }
    ));
    assert!(matches!(
        r.written(6),
        Step::DeleteSession { version, .. } if version == Version::etag("s3")
    ));
    // A landed end replaced at once: gone, nothing of ours to delete.
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    r.stale(session("s1", RecordState::Held, 20));
    assert!(matches!(
        r.step(Event::Ended(Ok(Written::Replaced {
            current: session("s5", RecordState::Released, 0)
        }))),
        Step::WriteRecord { .. }
    ));
    assert!(matches!(r.written(6), Step::Granted { .. }));
}

/// Shared sessions (docs/protocol.md §10, issue 24): the holder in the way is attached to a
/// shared session, so its liveness is read from `PREFIX.lease-sessions/SID`, not from
/// `KEY.q/ID` (which does not exist: judging by it would remove a live grant after ttl +
/// grace). Taken over by the rules, it is ended there and the grant removed; the session is
/// not deleted (its other grants' checkers still learn from its `released` record).
#[test]
fn a_grant_on_a_shared_session_is_judged_by_that_session_which_is_never_deleted() {
    let shared_key = format!("team/.lease-sessions/{SID}");
    let holder = Entry {
        session: Some("team/".into()),
        ..entry(&format!("{SID}.7"), Mode::Exclusive, Scope::Whole)
    };
    let held = join(&QueueRecord::new(WALL_MS, None), holder);
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held.to_bytes(), 4));
    r.join_write(step);
    match r.written(5) {
        Step::ReadSession { key, .. } => assert_eq!(key, shared_key),
        other => panic!("{other:?}"),
    }
    // Not renewed for 20 s: its store stamp is asked for at the shared key, then it is ended
    // there.
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 20)))) {
        Step::Stamp { session } => assert_eq!(session.as_deref(), Some(shared_key.as_str())),
        other => panic!("{other:?}"),
    }
    match r.step(Event::Stamped(Ok(Some(store_now())))) {
        Step::EndSession { key, .. } => assert_eq!(key, shared_key),
        other => panic!("{other:?}"),
    }
    let step = r.step(Event::Ended(Ok(Written::Landed {
        version: Version::etag("s2"),
        t_send: t0(),
    })));
    assert!(
        matches!(&step, Step::WriteRecord { why: Why::Remove { id }, .. } if *id == format!("{SID}.7")),
        "{step:?}"
    );
    // Removed: granted at once, the shared session left to its owner.
    assert!(matches!(r.written(6), Step::Granted { .. }));

    // Released by its owner: removed at once, and not deleted either.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held.to_bytes(), 4));
    r.join_write(step);
    r.written(5);
    assert!(matches!(
        r.step(Event::Session(Ok(session("s3", RecordState::Released, 0)))),
        Step::WriteRecord {
            why: Why::Remove { .. },
            ..
        }
    ));
    assert!(matches!(r.written(6), Step::Granted { .. }));
}

const SID: &str = "0123456789abcdef0123456789abcdef";

/// Grant `n` of the shared session `SID` (prefix `""`).
fn shared(n: u64) -> Entry {
    Entry {
        session: Some(String::new()),
        ..entry(&format!("{SID}.{n}"), Mode::Exclusive, Scope::Whole)
    }
}

/// The shared session `SID` at version `v`, held by its owner and just renewed, with the
/// attached set `attached`.
fn shared_session(v: &str, attached: Option<&str>) -> Get {
    let r = Record {
        rev: 2,
        write: Some("w".into()),
        attached: attached.map(str::to_string),
        ..crate::protocol::testing::record(SID, 3, RecordState::Held)
    };
    let bytes = r.to_bytes();
    Get::Found(Object {
        size: bytes.len() as u64,
        bytes: Some(bytes),
        version: Version::etag(v),
        last_modified: Some(store_now()),
        server_now: Some(store_now()),
        meta: Default::default(),
    })
}

/// Rule 4 (docs/protocol.md §10, "Shared sessions"): a grant whose number is not in its live
/// session's attached set is removed at once — its owner stopped believing it (a release whose
/// leave did not land). Attached, or with no attached set to judge by, it is waited for.
#[test]
fn a_grant_detached_from_its_live_shared_session_is_removed_at_once() {
    let held = join(&QueueRecord::new(WALL_MS, None), shared(7));
    for (attached, removed) in [
        (Some("1-6,8"), true),
        (Some(""), true),
        (Some("7"), false),
        (Some("1-9"), false),
        (None, false),
        (Some("7-7"), false),
    ] {
        let mut r = Rig::new(plan(Mode::Exclusive));
        let step = r.start_on(found(&held.to_bytes(), 4));
        r.join_write(step);
        assert!(matches!(r.written(5), Step::ReadSession { .. }));
        match r.step(Event::Session(Ok(shared_session("s1", attached)))) {
            Step::WriteRecord {
                why: Why::Remove { id },
                ..
            } if removed => assert_eq!(id, format!("{SID}.7")),
            Step::Sleep { .. } if !removed => {}
            other => panic!("attached {attached:?}: {other:?}"),
        }
        if removed {
            // Nothing to delete: the session is its owner's.
            assert!(matches!(r.written(6), Step::Granted { .. }));
        }
    }
}

/// Rule 4's order of reads: a grant newly attached to a session we already watch (for another
/// grant) is judged only on a read of that session made after the record read that listed it:
/// the view read before may predate its attachment.
#[test]
fn a_newly_attached_grant_is_judged_on_a_fresh_read_of_its_session_never_an_older_one() {
    let held = join(&QueueRecord::new(WALL_MS, None), shared(6));
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held.to_bytes(), 4));
    let (joined, _) = r.join_write(step);
    assert!(matches!(r.written(5), Step::ReadSession { .. }));
    // 6 is attached: wait.
    assert!(matches!(
        r.step(Event::Session(Ok(shared_session("s1", Some("6"))))),
        Step::Sleep { .. }
    ));
    // 6 left and 7 (of the same session, attached since) was granted before us.
    let me = joined.find("me").unwrap().clone();
    let next = join(&join(&QueueRecord::new(WALL_MS, None), shared(7)), me);
    assert_eq!(
        next.grants.iter().map(Entry::id).collect::<Vec<_>>(),
        [format!("{SID}.7")]
    );
    r.at(1.0);
    r.step(Event::Slept);
    match r.step(Event::Record(Ok(found(&next.to_bytes(), 6)))) {
        Step::ReadSession { key, if_none_match } => {
            assert_eq!(key, format!(".lease-sessions/{SID}"));
            assert_eq!(if_none_match, None, "a fresh view for the new grant");
        }
        other => panic!("judged on the old read of its session: {other:?}"),
    }
    assert!(matches!(
        r.step(Event::Session(Ok(shared_session("s2", Some("7"))))),
        Step::Sleep { .. }
    ));
}

#[test]
fn an_absent_session_is_gone_only_after_its_ttl_and_grace_on_our_clock() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    let absent = || Event::Session(Ok(Get::NotFound { server_now: None }));
    match r.step(absent()) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    // Before its ttl (30 s, the entry's) + grace (3 s) its session is not even read again: the
    // check is due at 33 s.
    r.at(32.9);
    r.step(Event::Slept);
    match r.step(Event::Record(Ok(Get::NotModified { server_now: None }))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(33.0)),
        other => panic!("before ttl + grace: {other:?}"),
    }
    r.at(33.0);
    r.step(Event::Slept);
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::ReadSession { .. }
    ));
    assert!(matches!(
        r.step(absent()),
        Step::WriteRecord {
            why: Why::Remove { .. },
            ..
        }
    ));
    // No version to delete: straight to the grant.
    assert!(matches!(r.written(6), Step::Granted { .. }));
}

#[test]
fn a_session_read_that_fails_is_tried_again_after_a_poll() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    match r.step(Event::Session(Err(Error::unavailable("timed out")))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    r.at(1.0);
    r.step(Event::Slept);
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::ReadSession { .. }
    ));
    // An end whose outcome stayed unknown: checked again after a poll.
    assert!(matches!(
        r.stale(session("s1", RecordState::Held, 20)),
        Step::EndSession { .. }
    ));
    match r.step(Event::Ended(Err(Error::unavailable("x")))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(2.0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_waiter_behind_another_checks_only_that_one_and_polls_less_the_further_back() {
    let mut p = plan(Mode::Shared);
    p.permits = Some(1);
    let mut l = QueueRecord::new(WALL_MS, Some(1));
    for id in ["a", "b", "c", "d"] {
        l = join(&l, entry(id, Mode::Shared, Scope::Whole));
    }
    let mut r = Rig::new(p);
    let step = r.start_on(found(&l.to_bytes(), 4));
    r.join_write(step);
    // Three ahead compete with us: checks `d` only.
    match r.written(5) {
        Step::ReadSession { key, .. } => assert_eq!(key, "locks/job.q/d"),
        other => panic!("{other:?}"),
    }
    // Four competing ahead (a holds; b, c, d wait), one permit: polls every 1 s × (1 + 3),
    // capped at the renew interval.
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))) {
        Step::Sleep { until } => assert_eq!(until, t0() + timing().renew.min(secs(4.0))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn our_lapsed_session_ends_the_wait_and_removal_is_told_as_such() {
    // Removed while our session had lapsed: the others took us for gone.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.alive = false;
    r.step(Event::Slept);
    let without_us = joined
        .apply(&Change::Leave("me".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    match r.step(Event::Record(Ok(found(&without_us.to_bytes(), 6)))) {
        Step::Failed { error, listed } => {
            assert_eq!(error.kind(), ErrorKind::Lost);
            assert!(
                error.to_string().contains("removed from the queue"),
                "{error}"
            );
            assert!(error.to_string().contains("lapsed"), "{error}");
            assert!(listed);
        }
        other => panic!("{other:?}"),
    }
    // Its session lost while it sleeps: it says so.
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    for (reason, says) in [
        (LostReason::Expired, "lapsed"),
        (LostReason::Vanished, "was deleted"),
        (
            LostReason::TakenOver {
                holder: Holder::default(),
                epoch: 4,
            },
            "took it for gone",
        ),
        (LostReason::Overwritten, "was lost"),
    ] {
        let mut w = r.w.clone();
        let ctx = Ctx {
            now: r.now,
            wall: wall(),
            session_alive: false,
            hints_seen: false,
        };
        match w.step(Event::SessionLost(reason), ctx, &NoJitter) {
            Step::Failed { error, listed } => {
                assert_eq!(error.kind(), ErrorKind::Lost);
                assert!(error.to_string().contains(says), "{error}");
                assert!(error.to_string().contains("session"), "{error}");
                assert!(listed);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_lapsed_participant_never_writes_its_join_again() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    r.join_write(step);
    // The join's outcome is unknown; meanwhile our session lapsed.
    assert!(matches!(
        r.step(Event::Wrote(Err(Error::unavailable("timed out")))),
        Step::Sleep { .. }
    ));
    r.alive = false;
    r.step(Event::Slept);
    match r.step(Event::Record(Ok(found(&held_by_a().to_bytes(), 4)))) {
        Step::Failed { error, listed } => {
            assert_eq!(error.kind(), ErrorKind::Lost);
            assert!(listed, "the join may have landed");
        }
        other => panic!("{other:?}"),
    }
    // Granted, but the session lapsed meanwhile: not a grant it may believe in.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(Get::NotFound { server_now: None });
    r.join_write(step);
    r.alive = false;
    assert!(matches!(
        r.written(1),
        Step::WriteRecord {
            why: Why::Settle,
            ..
        }
    ));
    assert!(matches!(
        r.written(2),
        Step::Failed { error, .. } if error.kind() == ErrorKind::Lost
    ));
}

#[test]
fn trying_once_writes_nothing_and_names_who_is_in_the_way() {
    let mut p = plan(Mode::Shared);
    p.try_once = true;
    p.wait_deadline = Some(t0());
    p.entry.scope = Scope::range(50, 150).unwrap();
    p.entry.mode = Mode::Exclusive;
    let l = join(
        &QueueRecord::new(WALL_MS, None),
        entry("a", Mode::Exclusive, Scope::range(0, 100).unwrap()),
    );
    let mut r = Rig::new(p);
    match r.start_on(found(&l.to_bytes(), 4)) {
        Step::Held {
            kind,
            in_the_way,
            ahead,
            epoch,
            listed,
            ..
        } => {
            assert_eq!(kind, ErrorKind::Held);
            assert_eq!(in_the_way.len(), 1);
            assert_eq!((ahead, epoch, listed), (0, WALL_MS + 1, false));
            let holders = vec![(
                "a".to_string(),
                Holder {
                    id: "a".into(),
                    label: Some("backup".into()),
                    ..Holder::default()
                },
            )];
            let e = held_error(
                "u",
                kind,
                &in_the_way,
                &holders,
                ahead,
                epoch,
                Duration::ZERO,
            );
            assert_eq!(e.kind(), ErrorKind::Held);
            assert!(e.to_string().contains("\"backup\""), "{e}");
            assert!(e.to_string().contains("(exclusive, bytes 0..100)"), "{e}");
            assert_eq!(e.holder().map(|h| h.id.as_str()), Some("a"));
            let e = held_error("u", ErrorKind::Timeout, &in_the_way, &[], 2, 9, secs(5.0));
            assert!(e.to_string().starts_with("timed out after 5s"), "{e}");
            assert!(e.to_string().contains("participant a (exclusive"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A free scope is taken at once, even trying once.
    let mut p = plan(Mode::Exclusive);
    p.try_once = true;
    p.entry.scope = Scope::range(200, 300).unwrap();
    let mut r = Rig::new(p);
    let step = r.start_on(found(&l.to_bytes(), 4));
    let (next, _) = r.join_write(step);
    assert!(matches!(next.position("me"), Position::Granted { .. }));
}

#[test]
fn a_wait_that_runs_out_is_a_timeout() {
    let mut p = plan(Mode::Exclusive);
    p.wait_deadline = Some(t0() + secs(5.0));
    let mut r = Rig::new(p);
    r.joined_behind_a();
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))) {
        Step::Sleep { until } => assert!(until <= t0() + secs(5.0)),
        other => panic!("{other:?}"),
    }
    r.at(5.0);
    r.step(Event::Slept);
    match r.step(Event::Record(Ok(Get::NotModified { server_now: None }))) {
        Step::Held {
            kind,
            waited,
            listed,
            ..
        } => {
            assert_eq!(kind, ErrorKind::Timeout);
            assert_eq!(waited, secs(5.0));
            assert!(listed, "it joined: it leaves");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_record_of_a_newer_version_is_refused_never_taken_over() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    match r.start_on(found(br#"{"format":3}"#, 4)) {
        Step::Failed { error, listed } => {
            assert_eq!(error.kind(), ErrorKind::Unsupported);
            assert!(error.to_string().contains("format 3"), "{error}");
            assert_eq!(error.lease(), Some("file:///locks/job"));
            assert!(!listed);
        }
        other => panic!("{other:?}"),
    }
}

/// A lease record at `epoch` held by `old` ("cron").
fn lease_at(epoch: u64, state: RecordState) -> bytes::Bytes {
    let mut r = crate::protocol::testing::record("old", epoch, state);
    r.rev = 3;
    r.holder.label = Some("cron".into());
    r.write = None;
    r.to_bytes()
}

#[test]
fn a_lease_record_is_waited_out_then_replaced_above_its_epoch() {
    let lease = |state| lease_at(77, state);
    let mut r = Rig::new(plan(Mode::Shared));
    match r.start_on(found(&lease(RecordState::Held), 4)) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
    let mut p = plan(Mode::Shared);
    p.try_once = true;
    let mut t = Rig::new(p);
    match t.start_on(found(&lease(RecordState::Held), 4)) {
        Step::Failed { error, .. } => {
            assert_eq!(error.kind(), ErrorKind::Held);
            assert!(error.to_string().contains("\"cron\""), "{error}");
            assert_eq!(error.epoch(), Some(77));
        }
        other => panic!("{other:?}"),
    }
    let mut r = Rig::new(plan(Mode::Shared));
    let step = r.start_on(found(&lease(RecordState::Released), 4));
    let (next, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(4)));
    // Above its epoch, and above our clock (a conditional write: docs/protocol.md §10).
    assert_eq!(next.epoch, WALL_MS + 1);
    assert_eq!(
        next.position("me"),
        Position::Granted { token: WALL_MS + 1 }
    );
}

#[test]
fn a_deleted_record_is_made_again_carrying_forward_what_we_saw() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.at(1.0);
    r.step(Event::Slept);
    // Deleted: made again as we last saw it (`a` holds, we wait), above the store's clock.
    let store_now = wall() + secs(3.0);
    let Step::WriteRecord {
        bytes, cond, why, ..
    } = r.step(Event::Record(Ok(Get::NotFound {
        server_now: Some(store_now),
    })))
    else {
        panic!("not made again")
    };
    assert_eq!((cond, why), (Cond::Create, Why::Join));
    let again = record(&bytes);
    assert_eq!(again.grants, joined.grants);
    assert_eq!(again.queue, joined.queue);
    assert_eq!(again.epoch, WALL_MS + 3000);
    // Someone made it first, without us (a newcomer): our session lives, so we join again.
    r.step(Event::Wrote(Ok(Put::ConditionFailed)));
    let theirs = join(
        &QueueRecord::new(WALL_MS + 4000, None),
        entry("z", Mode::Exclusive, Scope::Whole),
    );
    let step = r_step(&mut r, found(&theirs.to_bytes(), 9));
    let (rejoined, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(9)));
    assert_eq!(rejoined.queue.len(), 1);
}

fn r_step(r: &mut Rig, get: Get) -> Step {
    r.step(Event::Record(Ok(get)))
}

#[test]
fn wrong_permits_a_full_queue_and_store_errors_end_the_wait() {
    let mut p = plan(Mode::Shared);
    p.permits = Some(3);
    let l = join(
        &QueueRecord::new(WALL_MS, Some(2)),
        entry("a", Mode::Shared, Scope::Whole),
    );
    let mut r = Rig::new(p);
    match r.start_on(found(&l.to_bytes(), 4)) {
        Step::Failed { error, .. } => {
            assert_eq!(error.kind(), ErrorKind::Invalid);
            assert!(error.to_string().contains("lease permits"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    let mut p = plan(Mode::Exclusive);
    p.max_len = held_by_a().to_bytes().len();
    let mut r = Rig::new(p);
    match r.start_on(found(&held_by_a().to_bytes(), 4)) {
        Step::Failed { error, listed } => {
            assert_eq!(error.kind(), ErrorKind::QueueFull);
            assert!(!listed);
        }
        other => panic!("{other:?}"),
    }
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.step(Event::Start);
    assert!(matches!(
        r.step(Event::Record(Err(Error::store("denied")))),
        Step::Failed { error, .. } if error.kind() == ErrorKind::Store
    ));
    let mut r = Rig::new(plan(Mode::Exclusive));
    assert!(matches!(
        r.start_on(Get::NotFound { server_now: None }),
        Step::BeginSession
    ));
    assert!(matches!(
        r.step(Event::SessionBegun(Err(Error::store("denied")))),
        Step::Failed { error, listed: false } if error.kind() == ErrorKind::Store
    ));
}

#[test]
fn a_store_that_does_not_answer_is_retried_until_the_unavailable_timeout() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.step(Event::Start);
    let down = || Event::Record(Err(Error::unavailable("refused")));
    match r.step(down()) {
        Step::Sleep { until } => assert!(until > t0() && until <= t0() + secs(10.0)),
        other => panic!("{other:?}"),
    }
    r.at(9.0);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    assert!(matches!(r.step(down()), Step::Sleep { .. }));
    r.at(10.0);
    r.step(Event::Slept);
    match r.step(down()) {
        Step::Failed { error, .. } => {
            assert_eq!(error.kind(), ErrorKind::Unavailable);
            assert!(error.to_string().contains("unavailable for 10s"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    // A write whose outcome is unknown is read back; a failed condition too.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    r.join_write(step);
    assert!(matches!(
        r.step(Event::Wrote(Ok(Put::ConditionFailed))),
        Step::ReadRecord { .. }
    ));
}

#[test]
fn a_cancelled_wait_gives_up() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    match r.step(Event::Cancelled) {
        Step::Failed { error, listed } => {
            assert_eq!(error.kind(), ErrorKind::Cancelled);
            assert!(listed);
        }
        other => panic!("{other:?}"),
    }
}

/// A lease record whose epoch is above our clock (its holder's clock ran ahead): the queued lock
/// that replaces it hands out the takeover's epoch, one above the record's, as its first token —
/// not one more, not the clock (`QueueRecord::new(epoch - 1)` in `on_lease`).
#[test]
fn a_lease_record_above_the_clock_is_replaced_with_the_next_token_exactly() {
    let epoch = WALL_MS + 60_000;
    let mut r = Rig::new(plan(Mode::Shared));
    let step = r.start_on(found(&lease_at(epoch, RecordState::Released), 4));
    let (next, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!(next.epoch, epoch + 1);
    assert_eq!(next.position("me"), Position::Granted { token: epoch + 1 });
}

/// A record deleted while we waited is made again one above the highest token we saw, when that
/// token is above our clock and the store's (a clock that ran ahead handed it out): never at it.
#[test]
fn a_record_made_again_goes_above_a_known_token_that_is_ahead_of_the_clock() {
    let ahead = join(
        &QueueRecord::new(WALL_MS + 60_000, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    );
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&ahead.to_bytes(), 4));
    r.join_write(step);
    r.written(5);
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.at(1.0);
    r.step(Event::Slept);
    let Step::WriteRecord { bytes, cond, .. } = r_step(&mut r, Get::NotFound { server_now: None })
    else {
        panic!("not made again")
    };
    assert_eq!(cond, Cond::Create);
    assert!(
        ahead.epoch > WALL_MS + 1_000,
        "the known token is ahead of the clock"
    );
    assert_eq!(record(&bytes).epoch, ahead.epoch + 1);
}

/// A wait's deadline cuts every sleep short, so the timeout is told on time; trying once has no
/// wait to cut (its deadline is now), and a stamp the store did not answer is still asked again
/// one poll later, not at once in a loop (the `!try_once` guard of `Waiter::sleep`).
#[test]
fn a_wait_deadline_cuts_a_sleep_short_except_when_trying_once() {
    let mut p = plan(Mode::Exclusive);
    p.wait_deadline = Some(t0() + secs(0.5));
    let mut r = Rig::new(p);
    r.joined_behind_a();
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(0.5)),
        other => panic!("{other:?}"),
    }

    let mut p = plan(Mode::Exclusive);
    p.try_once = true;
    p.wait_deadline = Some(t0());
    let mut r = Rig::new(p);
    match r.lock_stamped(Err(Error::unavailable("timed out"))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
}

/// A store that answers a session's first read (no version to match) with a 304 shows nothing
/// of it: the session is read again one poll later, not at once in a loop.
#[test]
fn a_session_that_shows_nothing_is_read_again_one_poll_later() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    match r.step(Event::Session(Ok(Get::NotModified { server_now: None }))) {
        Step::Sleep { until } => assert_eq!(until, t0() + secs(1.0)),
        other => panic!("{other:?}"),
    }
}

/// A store that refuses writes to one hot object (S3 503 `SlowDown`, GCS 429) but answers
/// reads: a join refused again and again must back off further each time (issue 24). A read
/// answered in between says the store is up, not that the object takes writes again, so it
/// must not start the backoff over (before this, every pause was the first one, 50 ms, so a
/// throttled waiter wrote 20 times a second into a record its store was refusing).
#[test]
fn a_write_refused_again_and_again_backs_off_further_though_reads_are_answered() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    r.join_write(step);
    let mut pauses = vec![];
    let mut t = 0.0;
    for _ in 0..5 {
        let until = match r.step(Event::Wrote(Err(Error::unavailable("503 SlowDown")))) {
            Step::Sleep { until } => until,
            other => panic!("not a pause after a refused write: {other:?}"),
        };
        pauses.push(until - r.now);
        t += (until - r.now).as_secs_f64();
        r.at(t);
        let answer = match r.step(Event::Slept) {
            Step::ReadRecord {
                if_none_match: Some(_),
            } => Get::NotModified { server_now: None },
            Step::ReadRecord {
                if_none_match: None,
            } => found(&held_by_a().to_bytes(), 4),
            other => panic!("not a read after the pause: {other:?}"),
        };
        match r.step(Event::Record(Ok(answer))) {
            Step::WriteRecord { why, .. } => assert_eq!(why, Why::Join),
            other => panic!("the join is not sent again: {other:?}"),
        }
    }
    let ms: Vec<u128> = pauses.iter().map(|d| d.as_millis()).collect();
    assert_eq!(
        ms,
        [50, 100, 200, 400, 800],
        "pauses after each refused join"
    );
    // An answered write (here a failed condition: someone else's write won) starts the
    // backoff over: the store takes writes again.
    assert!(matches!(
        r.step(Event::Wrote(Ok(Put::ConditionFailed))),
        Step::ReadRecord { .. }
    ));
    match r.step(Event::Record(Ok(found(&held_by_a().to_bytes(), 4)))) {
        Step::WriteRecord { why, .. } => assert_eq!(why, Why::Join),
        other => panic!("the join is not sent again: {other:?}"),
    }
    match r.step(Event::Wrote(Err(Error::unavailable("503 SlowDown")))) {
        Step::Sleep { until } => assert_eq!(until - r.now, Duration::from_millis(50)),
        other => panic!("{other:?}"),
    }
}

/// Wake hints (issue 23, docs/protocol.md §10 "Wake hints"): a hint makes a sleeping waiter read
/// now, and however many come, they cause at most one read a `hint_interval` (the poll, at most
/// 50 ms): a hint inside the interval moves the read to the interval's end, never drops it.
#[test]
fn a_hint_reads_at_once_then_at_most_once_an_interval() {
    assert_eq!(hint_interval(&timing()), Duration::from_millis(50));
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    assert!(matches!(
        r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))),
        Step::Sleep { until } if until == t0() + secs(1.0)
    ));
    // The first hint: read now, on the version known (a 304 while unchanged).
    r.at_ms(200);
    assert!(matches!(
        r.step(Event::Hinted),
        Step::ReadRecord { if_none_match: Some(v) } if v == version(5)
    ));
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::Sleep { until } if until == t0() + ms(1200)
    ));
    // Hints within 50 ms of it: one read, at the interval's end.
    r.at_ms(210);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(250)));
    r.at_ms(220);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(250)));
    r.at_ms(250);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
    // That read counts as one a hint caused: the next hint waits for 0.30.
    r.at_ms(260);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(300)));
    r.at_ms(300);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
    // Past the interval: at once again.
    r.at_ms(400);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
    r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
    // A hint exactly at the interval's end is past it: a read at once, not a sleep until now.
    r.at_ms(450);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
}

/// A hint that the record shows was real: granted by the read it caused.
#[test]
fn a_hint_after_the_release_finds_the_grant_at_once() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    let left = joined
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    r.at_ms(200);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
    match r.step(Event::Record(Ok(found(&left.to_bytes(), 6)))) {
        Step::Granted { confirmation, .. } => {
            assert_eq!(confirmation.sent, t0() + ms(200));
        }
        other => panic!("{other:?}"),
    }
}

/// A poll due before the hint interval ends is not put off, and does not count as a read a hint
/// caused: a hint just after it reads at once.
#[test]
fn a_hint_never_puts_off_a_sooner_poll() {
    let mut p = plan(Mode::Exclusive);
    p.timing.poll = Duration::from_millis(40);
    assert_eq!(hint_interval(&p.timing), Duration::from_millis(40));
    let mut r = Rig::new(p);
    r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.at_ms(200);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
    // Answered at 0.21: the poll is due at 0.25, the hint interval ends at 0.24.
    r.at_ms(210);
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::Sleep { until } if until == t0() + ms(250)
    ));
    r.at_ms(220);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(240)));
    // Answered at once: the poll (0.28) comes after the interval's end (0.24 + 0.04).
    r.at_ms(240);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::Sleep { until } if until == t0() + ms(280)
    ));
    // Here the poll (0.28) is sooner than the interval's end (0.24 + 0.04 = 0.28, not sooner):
    // the sleep stays, and the hint's read is the poll's.
    r.at_ms(250);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(280)));
    r.at_ms(280);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    assert!(matches!(
        r.step(Event::Record(Ok(Get::NotModified { server_now: None }))),
        Step::Sleep { until } if until == t0() + ms(320)
    ));
    // That poll was no hint's read (the last was at 0.24): a hint at 0.29 reads at once.
    r.at_ms(290);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
}

/// A hint while the store refuses us does not cut the backoff short.
#[test]
fn a_hint_does_not_cut_a_backoff_short() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.step(Event::Start);
    let until = match r.step(Event::Record(Err(Error::unavailable("refused")))) {
        Step::Sleep { until } => until,
        other => panic!("{other:?}"),
    };
    r.at_ms(1);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until: u } if u == until));
    r.at_ms(2);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until: u } if u == until));
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ids(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(Entry::id).collect()
}

fn preempting() -> WaitPlan {
    WaitPlan {
        preempt: true,
        ..plan(Mode::Exclusive)
    }
}

/// Issue 23, "Preemption": a preempting waiter takes a held lock in its first write, removing
/// the grant in its way; a write beaten by another change (here a join) is sent again while
/// only the grants it set out to preempt are in its way; a grant made since (a later tenure)
/// is waited for by the usual rules.
#[test]
fn a_preempting_waiter_takes_the_lock_at_once_and_waits_for_a_later_tenure() {
    let mut r = Rig::new(preempting());
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    let (next, cond) = r.join_write(step);
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!(ids(&next.grants), vec!["me"]);
    assert_eq!(
        next.preempted_by("a", WALL_MS + 1),
        Some(("me", WALL_MS + 2))
    );
    // Someone else's join landed first: `a` still holds, so preempt again over it.
    assert!(matches!(
        r.step(Event::Wrote(Ok(Put::ConditionFailed))),
        Step::ReadRecord { .. }
    ));
    let b_joined = join(&held_by_a(), entry("b", Mode::Exclusive, Scope::Whole));
    let step = r.step(Event::Record(Ok(found(&b_joined.to_bytes(), 5))));
    let (next, _) = r.join_write(step);
    assert_eq!(ids(&next.grants), vec!["me"]);
    assert_eq!(ids(&next.queue), vec!["b"]);
    // Beaten again, by `a`'s release that granted `b`: a later tenure, so join behind it.
    assert!(matches!(
        r.step(Event::Wrote(Ok(Put::ConditionFailed))),
        Step::ReadRecord { .. }
    ));
    let b_holds = b_joined
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert_eq!(ids(&b_holds.grants), vec!["b"]);
    let step = r.step(Event::Record(Ok(found(&b_holds.to_bytes(), 6))));
    let (next, _) = r.join_write(step);
    assert_eq!(ids(&next.grants), vec!["b"], "not preempted");
    assert_eq!(ids(&next.queue), vec!["me"]);
    assert_eq!(next.preempted, None);
}

/// The preemption's write landed: the waiter is granted, with its token.
#[test]
fn a_preemption_that_landed_is_a_grant() {
    let mut r = Rig::new(preempting());
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    r.join_write(step);
    match r.written(5) {
        Step::Granted { token, .. } => assert_eq!(token, WALL_MS + 2),
        other => panic!("not granted: {other:?}"),
    }
}

/// Try once (`-n`): a preemption is sent (it would be granted), not refused as `Held`.
#[test]
fn trying_once_a_preempting_waiter_still_preempts() {
    let mut r = Rig::new(WaitPlan {
        try_once: true,
        ..preempting()
    });
    let step = r.start_on(found(&held_by_a().to_bytes(), 4));
    let (next, _) = r.join_write(step);
    assert_eq!(ids(&next.grants), vec!["me"]);
    // Without preemption the same request is `Held`.
    let mut plain = Rig::new(WaitPlan {
        try_once: true,
        ..plan(Mode::Exclusive)
    });
    let step = plain.start_on(found(&held_by_a().to_bytes(), 4));
    assert!(matches!(step, Step::Held { .. }), "{step:?}");
}

// --- Fewer GETs per waiter (issue 23, docs/protocol.md §10 "Wake hints", "The poll with hints
// seen"): the record's poll lengthens to the renew interval only where hints are trusted, and
// the driver's memory of hints goes by how each grant was learned.

/// The renew interval of [`timing`] (ttl 10 s / 3), the long poll.
fn renew() -> Duration {
    timing().renew
}

fn listening(mut p: WaitPlan) -> WaitPlan {
    p.entry.wake = Some("udp:127.0.0.1:9".into());
    p
}

/// The sleep after the first check of `a`'s (live) session, for a waiter joined behind `a`.
fn first_sleep(p: WaitPlan, hints_seen: bool) -> Instant {
    let mut r = Rig::new(p);
    r.hints_seen = hints_seen;
    r.joined_behind_a();
    match r.step(Event::Session(Ok(session("s1", RecordState::Held, 0)))) {
        Step::Sleep { until } => until,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_record_is_polled_at_the_renew_interval_only_with_hints_seen_and_a_wake_address() {
    assert!(renew() > secs(1.0), "{:?}", renew());
    // Trusted: a wake address in our entry, and hints seen to arrive for this lock.
    assert_eq!(
        first_sleep(listening(plan(Mode::Exclusive)), true),
        t0() + renew()
    );
    // Hints never seen here (or forgotten): today's poll, whatever the entry says.
    assert_eq!(
        first_sleep(listening(plan(Mode::Exclusive)), false),
        t0() + secs(1.0)
    );
    // No wake address (hints off, or no socket): nobody can hint us, whatever the process saw.
    assert_eq!(first_sleep(plan(Mode::Exclusive), true), t0() + secs(1.0));
}

#[test]
fn record_poll_scales_with_the_place_untrusted_and_is_the_renew_interval_trusted() {
    let t = timing();
    let poll = secs(1.0);
    // Untrusted: poll × (1 + competing / permits), at most the renew interval.
    assert_eq!(record_poll(&t, poll, 0, 1, false), poll);
    assert_eq!(record_poll(&t, poll, 1, 1, false), secs(2.0));
    assert_eq!(record_poll(&t, poll, 3, 2, false), secs(2.0));
    assert_eq!(
        record_poll(&t, poll, 2, 0, false),
        secs(3.0),
        "permits 0 as 1"
    );
    assert_eq!(record_poll(&t, poll, 5, 1, false), t.renew);
    assert_eq!(record_poll(&t, poll, usize::MAX, 1, false), t.renew);
    // Trusted: the renew interval wherever we stand.
    assert_eq!(record_poll(&t, poll, 0, 1, true), t.renew);
    assert_eq!(record_poll(&t, poll, 7, 3, true), t.renew);
    // Never shorter than the default poll (a poll set longer than the renew interval).
    let long = secs(5.0);
    assert!(long > t.renew);
    assert_eq!(record_poll(&t, long, 0, 1, true), long);
    assert_eq!(record_poll(&t, long, 0, 1, false), long);
    assert_eq!(record_poll(&t, long, 4, 1, false), long);
}

#[test]
fn the_memory_of_hints_is_set_by_a_grant_a_hint_brought_and_cleared_by_one_a_poll_found() {
    use Learned::*;
    for before in [false, true] {
        assert!(hints_seen_after(before, Hint, true));
        assert!(!hints_seen_after(before, Poll, true));
        assert_eq!(hints_seen_after(before, Locally, true), before);
        // A waiter that listens for no hints tells nothing of them.
        for learned in [Hint, Poll, Locally] {
            assert_eq!(hints_seen_after(before, learned, false), before);
        }
    }
}

/// A waiter joined behind `a`, `a`'s session checked once; then the record read is answered
/// with `a` gone (granting us) after `event` at 1.5 s.
fn granted_after(event: Event) -> Option<Learned> {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    assert_eq!(r.w.learned(), None);
    r.at(1.5);
    assert!(matches!(r.step(event), Step::ReadRecord { .. }));
    let left = joined
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert!(matches!(
        r.step(Event::Record(Ok(found(&left.to_bytes(), 6)))),
        Step::Granted { .. }
    ));
    r.w.learned()
}

#[test]
fn a_grant_is_learned_by_the_hint_the_poll_or_locally_as_its_read_was_caused() {
    assert_eq!(granted_after(Event::Hinted), Some(Learned::Hint));
    assert_eq!(granted_after(Event::Slept), Some(Learned::Poll));
    assert_eq!(granted_after(Event::Woken), Some(Learned::Locally));
}

#[test]
fn a_hint_put_off_to_the_end_of_its_interval_still_brings_the_grant() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.at_ms(200);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
    r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
    r.at_ms(210);
    assert!(matches!(r.step(Event::Hinted), Step::Sleep { until } if until == t0() + ms(250)));
    r.at_ms(250);
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    let left = joined
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert!(matches!(
        r.step(Event::Record(Ok(found(&left.to_bytes(), 6)))),
        Step::Granted { .. }
    ));
    assert_eq!(r.w.learned(), Some(Learned::Hint));
}

#[test]
fn a_read_a_hint_caused_that_failed_is_retried_as_the_hints() {
    let mut r = Rig::new(plan(Mode::Exclusive));
    let joined = r.joined_behind_a();
    r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    r.at_ms(200);
    assert!(matches!(r.step(Event::Hinted), Step::ReadRecord { .. }));
    let until = match r.step(Event::Record(Err(Error::unavailable("refused")))) {
        Step::Sleep { until } => until,
        other => panic!("{other:?}"),
    };
    r.now = until;
    assert!(matches!(r.step(Event::Slept), Step::ReadRecord { .. }));
    let left = joined
        .apply(&Change::Leave("a".into()), MAX_QUEUE_RECORD_LEN, 0)
        .unwrap()
        .unwrap();
    assert!(matches!(
        r.step(Event::Record(Ok(found(&left.to_bytes(), 6)))),
        Step::Granted { .. }
    ));
    assert_eq!(r.w.learned(), Some(Learned::Hint));
}

#[test]
fn a_grant_by_our_own_write_is_learned_locally_even_after_a_poll_or_a_hint() {
    // A free lock: our join grants us.
    let mut r = Rig::new(plan(Mode::Exclusive));
    let step = r.start_on(found(&QueueRecord::new(WALL_MS, None).to_bytes(), 4));
    r.join_write(step);
    assert!(matches!(r.written(5), Step::Granted { .. }));
    assert_eq!(r.w.learned(), Some(Learned::Locally));
    // After polls, a check of `a`'s session finds it released: our removal of it grants us.
    let mut r = Rig::new(plan(Mode::Exclusive));
    r.joined_behind_a();
    let mut step = r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    let mut polls = 0;
    loop {
        step = match step {
            Step::Sleep { until } => {
                r.now = until;
                r.step(Event::Slept)
            }
            Step::ReadRecord { .. } => {
                polls += 1;
                r.step(Event::Record(Ok(Get::NotModified { server_now: None })))
            }
            Step::ReadSession { .. } => break,
            other => panic!("{other:?}"),
        };
    }
    assert!(polls > 1, "{polls}");
    assert!(matches!(
        r.step(Event::Session(Ok(session("s2", RecordState::Released, 0)))),
        Step::WriteRecord {
            why: Why::Remove { .. },
            ..
        }
    ));
    let mut step = r.written(6);
    if let Step::DeleteSession { .. } = step {
        step = r.step(Event::Deleted);
    }
    assert!(matches!(step, Step::Granted { .. }), "{step:?}");
    assert_eq!(r.w.learned(), Some(Learned::Locally));
}

/// Drive a waiter joined behind `a` whose session never changes (`a` died), answering every
/// read as unchanged, until it takes `a`'s session over: the times of its reads of the record
/// and of `a`'s session, and when it took over.
fn wait_out_a_dead_holder(p: WaitPlan, hints_seen: bool) -> (Vec<f64>, Vec<f64>, f64) {
    let mut r = Rig::new(p);
    r.hints_seen = hints_seen;
    r.joined_behind_a();
    let since = |r: &Rig| (r.now - t0()).as_secs_f64();
    let (mut polls, mut checks) = (vec![], vec![]);
    let mut step = r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
    loop {
        step = match step {
            Step::Sleep { until } => {
                r.now = until;
                r.step(Event::Slept)
            }
            Step::ReadRecord { .. } => {
                polls.push(since(&r));
                r.step(Event::Record(Ok(Get::NotModified { server_now: None })))
            }
            Step::ReadSession { .. } => {
                checks.push(since(&r));
                r.step(Event::Session(Ok(Get::NotModified { server_now: None })))
            }
            Step::EndSession { .. } | Step::Stamp { .. } => return (polls, checks, since(&r)),
            other => panic!("{other:?}"),
        };
        assert!(since(&r) < 120.0, "never took over: {polls:?} {checks:?}");
    }
}

#[test]
fn the_long_poll_reads_the_record_less_and_takes_a_dead_holder_over_no_later() {
    let (polls, checks, took) = wait_out_a_dead_holder(listening(plan(Mode::Exclusive)), false);
    let (long_polls, long_checks, long_took) =
        wait_out_a_dead_holder(listening(plan(Mode::Exclusive)), true);
    // The same checks of the session, at the same moments, and the takeover at the same one.
    assert_eq!(long_checks, checks);
    assert_eq!(long_took, took);
    assert!(took > 10.0, "ttl + grace: {took}");
    // The record: every second against every renew interval (except where a check of the
    // session is due sooner: a poll follows each check).
    assert!(
        long_polls.len() * 2 < polls.len(),
        "{} polls against {}: {long_polls:?}",
        long_polls.len(),
        polls.len()
    );
    for pair in long_polls.windows(2) {
        assert!(
            pair[1] - pair[0] <= renew().as_secs_f64() + 1e-9,
            "{long_polls:?}"
        );
    }
}

/// The causes of reads never decide a step: the model checker's states do not tell waiters apart
/// by them (else each state would come once per cause of its last read).
#[test]
fn waiters_that_differ_only_in_the_causes_of_their_reads_are_one_state() {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let after = |event: Event| {
        let mut r = Rig::new(plan(Mode::Exclusive));
        r.joined_behind_a();
        r.step(Event::Session(Ok(session("s1", RecordState::Held, 0))));
        r.at(1.0);
        assert!(matches!(r.step(event), Step::ReadRecord { .. }));
        r.step(Event::Record(Ok(Get::NotModified { server_now: None })));
        r.w
    };
    let (polled, woken, hinted) = (
        after(Event::Slept),
        after(Event::Woken),
        after(Event::Hinted),
    );
    let hash = |w: &Waiter| {
        let mut h = DefaultHasher::new();
        w.hash(&mut h);
        h.finish()
    };
    assert_eq!(polled, woken);
    assert_eq!(hash(&polled), hash(&woken));
    assert_eq!(polled.causes.cause, Learned::Poll);
    assert_eq!(woken.causes.cause, Learned::Locally);
    // (A hint also sets when the last hint's read was: that is a decision, and it differs.)
    assert_ne!(polled, hinted);
}
