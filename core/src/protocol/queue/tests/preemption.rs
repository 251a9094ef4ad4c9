//! Preemption of a queued lock's grants (docs/protocol.md §10, "Preemption"): the grants in the
//! preemptor's way are removed and named in the record, it is granted ahead of the waiters
//! with the next token, and the names stay until a later preemption removes anyone.

use super::*;

fn x(id: &str) -> Entry {
    entry(id, Mode::Exclusive, Scope::Whole)
}

fn preempt(r: &QueueRecord, e: Entry, floor: u64) -> QueueRecord {
    r.apply(&Change::Preempt(e), MAX, floor).unwrap().unwrap()
}

#[test]
fn a_preemption_removes_the_grants_in_its_way_and_is_granted_before_the_waiters() {
    // `a` holds, `b` waits; `p` preempts.
    let r = join(&join(&QueueRecord::new(10, None), x("a")), x("b"));
    assert_eq!((granted(&r), waiting(&r)), (vec!["a"], vec!["b"]));
    let next = preempt(&r, x("p"), 0);
    assert_eq!(granted(&next), vec!["p"]);
    assert_eq!(
        waiting(&next),
        vec!["b"],
        "the waiter still waits, untouched"
    );
    assert_eq!(next.grants[0].token, Some(12), "the next token");
    assert_eq!(next.epoch, 12);
    assert_eq!(next.rev, r.rev + 1);
    assert_eq!(
        next.preempted,
        Some(Preemption {
            by: "p".into(),
            token: 12,
            removed: vec![PreemptedGrant {
                id: "a".into(),
                token: 11
            }],
        })
    );
    assert_eq!(next.preempted_by("a", 11), Some(("p", 12)));
    assert_eq!(next.preempted_by("a", 10), None, "another tenure of `a`");
    assert_eq!(next.preempted_by("b", 11), None);
    // In the record's bytes, and read back.
    let bytes = String::from_utf8(next.to_bytes().to_vec()).unwrap();
    assert!(
        bytes.contains(r#""preempted":{"by":"p","token":12,"removed":[{"id":"a","token":11}]}"#),
        "{bytes}"
    );
    assert_eq!(classify(&next.to_bytes()), Classified::Queue(next.clone()));
    // A record without a preemption carries no such field.
    assert!(!String::from_utf8(r.to_bytes().to_vec())
        .unwrap()
        .contains("preempted"));
}

#[test]
fn a_preemptions_token_is_above_the_floor_and_the_waiters_settle_after_it() {
    // `a` holds the whole lock; readers wait behind it.
    let mut r = join(&QueueRecord::new(10, None), x("a"));
    r = join(&r, entry("r", Mode::Shared, Scope::Whole));
    let next = preempt(&r, x("p"), 500);
    assert_eq!(next.grants[0].token, Some(501), "above the writer's clock");
    assert_eq!(
        waiting(&next),
        vec!["r"],
        "the reader waits for the preemptor"
    );
    // The preemptor's release grants the reader; the names stay (the removed holder may not
    // have confirmed yet), until a later preemption that removes anyone.
    let after = leave(&next, "p");
    assert_eq!(granted(&after), vec!["r"]);
    assert_eq!(after.preempted_by("a", 11), Some(("p", 501)));
    let again = preempt(&after, x("q"), 0);
    assert_eq!(again.preempted_by("a", 11), None);
    assert_eq!(again.preempted_by("r", 502), Some(("q", 503)));
    // One that removes nobody keeps the names.
    let range = |id: &str| entry(id, Mode::Exclusive, Scope::range(0, 1).unwrap());
    let quiet = preempt(&leave(&again, "q"), range("z"), 0);
    assert_eq!(quiet.preempted, leave(&again, "q").preempted);
}

#[test]
fn only_the_grants_in_the_way_are_removed() {
    let range = |id: &str, a, b| entry(id, Mode::Exclusive, Scope::range(a, b).unwrap());
    let mut r = QueueRecord::new(0, None);
    r = join(&r, range("a", 0, 5));
    r = join(&r, range("b", 20, 30));
    r = join(&r, entry("c", Mode::Shared, Scope::range(8, 12).unwrap()));
    assert_eq!(granted(&r), vec!["a", "b", "c"]);
    let next = preempt(&r, range("p", 0, 10), 0);
    assert_eq!(granted(&next), vec!["b", "p"], "`b` is not in the way");
    let removed: Vec<&str> = next
        .preempted
        .as_ref()
        .unwrap()
        .removed
        .iter()
        .map(|p| p.id.as_str())
        .collect();
    assert_eq!(
        removed,
        vec!["a", "c"],
        "an overlapping reader is in the way too"
    );
}

#[test]
fn preempting_where_nothing_is_in_the_way_goes_before_competing_waiters() {
    // `a` holds 0..5; `w` waits for 0..20; `p` wants 10..20 (only `w` competes with it).
    let range = |id: &str, a, b| entry(id, Mode::Exclusive, Scope::range(a, b).unwrap());
    let mut r = join(&QueueRecord::new(0, None), range("a", 0, 5));
    r = join(&r, range("w", 0, 20));
    let joined = join(&r, range("p", 10, 20));
    assert_eq!(waiting(&joined), vec!["w", "p"], "a join waits behind `w`");
    let next = preempt(&r, range("p", 10, 20), 0);
    assert_eq!(granted(&next), vec!["a", "p"]);
    assert_eq!(waiting(&next), vec!["w"]);
    assert_eq!(next.preempted, None, "nobody was removed");
}

#[test]
fn a_preemption_granted_already_changes_nothing_and_a_queued_one_is_moved() {
    let r = join(&QueueRecord::new(0, None), x("a"));
    let next = preempt(&r, x("p"), 0);
    assert_eq!(
        next.apply(&Change::Preempt(x("p")), MAX, 0).unwrap(),
        None,
        "granted already: idempotent"
    );
    // Its earlier join landed (it waits): the preemption takes it out of the queue.
    let queued = join(&r, x("p"));
    assert_eq!(waiting(&queued), vec!["p"]);
    let moved = preempt(&queued, x("p"), 0);
    assert_eq!(granted(&moved), vec!["p"]);
    assert!(moved.queue.is_empty());
}

#[test]
fn a_preemption_that_would_not_leave_room_is_refused() {
    let r = join(&QueueRecord::new(0, None), x("a"));
    let small = r.reserved_len() + 10;
    let e = r
        .apply(&Change::Preempt(x("p")), small, 0)
        .expect_err("no room");
    assert_eq!(e.kind(), ErrorKind::QueueFull);
    assert!(Change::Preempt(x("p")).grows());
}

#[test]
fn a_preemption_goes_before_a_higher_priority_waiter() {
    // Without its own grant step the preemptor, first in the queue, would be settled by the
    // waiters' order, which puts a higher priority first: that one would take the lock.
    let mut r = join(&QueueRecord::new(0, None), x("a"));
    r = join(
        &r,
        Entry {
            priority: 5,
            ..x("high")
        },
    );
    assert_eq!(waiting(&r), vec!["high"]);
    let next = preempt(&r, x("p"), 0);
    assert_eq!(granted(&next), vec!["p"]);
    assert_eq!(waiting(&next), vec!["high"]);
}

#[test]
fn a_preemption_that_fits_exactly_is_written() {
    let r = join(&QueueRecord::new(0, None), x("a"));
    let needed = r
        .changed(&Change::Preempt(x("p")), MAX)
        .unwrap()
        .unwrap()
        .reserved_len();
    assert!(r.apply(&Change::Preempt(x("p")), needed, 0).is_ok());
    let e = r
        .apply(&Change::Preempt(x("p")), needed - 1, 0)
        .expect_err("one byte short");
    assert_eq!(e.kind(), ErrorKind::QueueFull);
}
