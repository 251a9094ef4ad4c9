//! An operator's break, for each record it may find.

use super::*;
use crate::protocol::testing::*;
use crate::protocol::view::unix_ms;
use crate::store::Get;

fn view_of(get: Get) -> View {
    let mut v = View::default();
    v.absorb(get, at(0.0));
    v
}

fn plan_over(view: &View, known: u64, mode: BreakMode) -> BreakPlan {
    plan(
        view,
        known,
        mode,
        holder("op"),
        &timing(),
        wall(1.0),
        &Counter::default(),
    )
}

fn written(p: BreakPlan) -> (Record, Cond) {
    match p {
        BreakPlan::Write { record, cond } => (record, cond),
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn nothing_to_break_where_the_lease_is_released_or_absent() {
    let released = view_of(found(&record("a", 7, RecordState::Released), 2));
    for mode in [BreakMode::WaitOutHolder, BreakMode::AllowTwoHolders] {
        assert_eq!(plan_over(&released, 0, mode), BreakPlan::Nothing);
        assert_eq!(
            plan_over(&view_of(not_found()), 0, mode),
            BreakPlan::Nothing
        );
        assert_eq!(plan_over(&View::default(), 0, mode), BreakPlan::Nothing);
    }
}

#[test]
fn a_break_holds_the_record_one_epoch_up_naming_the_holder_it_broke() {
    let held = Record {
        rev: 5,
        ttl_ms: 30_000,
        ..record("a", 7, RecordState::Held)
    };
    let view = view_of(found(&held, 2));
    let (r, cond) = written(plan_over(&view, 0, BreakMode::WaitOutHolder));
    assert_eq!(cond, Cond::Match(version(2)));
    assert_eq!((r.epoch, r.rev, r.ttl_ms), (8, 6, 30_000));
    assert_eq!(r.state, RecordState::Held);
    assert_eq!(r.holder, holder("op"));
    assert_eq!(
        r.broken,
        Some(Displaced {
            id: "a".into(),
            epoch: 7
        })
    );
    assert_eq!(r.prev, held.prev_for_successor());
    assert_eq!(r.write.as_deref(), Some("n1"));
    assert_eq!(r.acquired_at, Some(timestamp(wall(1.0))));
    assert_eq!(r.renewed_at, r.acquired_at);
    assert_eq!((r.format, r.data), (FORMAT, None));
    // Above every epoch the breaker knows of, too.
    let (r, _) = written(plan_over(&view, 20, BreakMode::WaitOutHolder));
    assert_eq!(r.epoch, 21);
    // The old way: released at once.
    let (r, _) = written(plan_over(&view, 0, BreakMode::AllowTwoHolders));
    assert_eq!((r.state, r.epoch), (RecordState::Released, 8));
}

#[test]
fn a_broken_record_is_left_to_wait_out_or_released_keeping_its_epoch() {
    let broken = Record {
        rev: 5,
        ..breaking("op", 8, "a", 7)
    };
    let view = view_of(found(&broken, 3));
    assert_eq!(
        plan_over(&view, 0, BreakMode::WaitOutHolder),
        BreakPlan::AlreadyBroken
    );
    let (r, cond) = written(plan_over(&view, 0, BreakMode::AllowTwoHolders));
    assert_eq!(cond, Cond::Match(version(3)));
    assert_eq!((r.epoch, r.rev, r.state), (8, 6, RecordState::Released));
    assert_eq!(r.broken, broken.broken);
}

#[test]
fn a_corrupt_record_is_broken_above_every_epoch_it_may_have_handed_out() {
    let corrupt_at = |epoch: Option<u64>| {
        let mut v = view_of(found_corrupt(4));
        v.seen = Some(Seen::Present {
            version: version(4),
            parsed: Parsed::Corrupt {
                reason: "test".into(),
                epoch,
            },
            last_modified: None,
            first_seen: at(0.0),
        });
        v
    };
    // A store clock near 1970 (the file store's boot clock): the epochs decide.
    let mut low = corrupt_at(Some(40));
    low.server_now = Some((SystemTime::UNIX_EPOCH, at(0.0)));
    let early = SystemTime::UNIX_EPOCH + secs(0.005);
    let planned = |v: &View, known| {
        written(plan(
            v,
            known,
            BreakMode::WaitOutHolder,
            holder("op"),
            &timing(),
            early,
            &Counter::default(),
        ))
    };
    let (r, cond) = planned(&low, 0);
    assert_eq!(cond, Cond::Match(version(4)));
    assert_eq!((r.epoch, r.rev, r.broken), (41, 1, None));
    assert_eq!(r.ttl_ms, 10_000, "the breaker's own ttl");
    assert_eq!(planned(&low, 50).0.epoch, 51);
    let mut unreadable = corrupt_at(None);
    unreadable.server_now = low.server_now;
    assert_eq!(planned(&unreadable, 0).0.epoch, 5, "the clock's 5 ms");
    assert_eq!(planned(&unreadable, 9).0.epoch, 10);
    // A wall clock in milliseconds is above them.
    let (r, _) = written(plan_over(
        &corrupt_at(Some(40)),
        0,
        BreakMode::WaitOutHolder,
    ));
    assert_eq!(r.epoch, unix_ms(wall(1.0)));
}
