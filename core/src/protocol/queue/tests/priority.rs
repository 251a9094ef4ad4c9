//! Priorities among waiters (docs/protocol.md §10, "Priorities"): higher first among competing
//! waiters, FIFO within a priority, never preempting a holder, each waiter passed over at most
//! `MAX_BYPASS` times, and the record requiring the feature while it is used.

use proptest::prelude::*;

use super::*;

fn with(id: &str, mode: Mode, priority: i32) -> Entry {
    Entry {
        priority,
        ..entry(id, mode, Scope::Whole)
    }
}

fn x(id: &str, priority: i32) -> Entry {
    with(id, Mode::Exclusive, priority)
}

fn ids<'a>(es: impl IntoIterator<Item = &'a Entry>) -> Vec<&'a str> {
    es.into_iter().map(Entry::id).collect()
}

#[test]
fn a_higher_priority_goes_first_fifo_within_a_priority_and_never_preempts() {
    let mut r = QueueRecord::new(0, None);
    r = join(&r, x("holder", 0));
    for (id, p) in [("b", 0), ("c", 5), ("d", 5), ("e", 0), ("f", -3)] {
        r = join(&r, x(id, p));
    }
    // A higher priority joins behind a holder: it waits (no preemption).
    assert_eq!(ids(&r.grants), vec!["holder"]);
    assert_eq!(r.order(), vec![1, 2, 0, 3, 4]); // c, d (5), b, e (0), f (-3)
    let mut granted = Vec::new();
    while let Some(g) = r.grants.first().map(|g| g.id.clone()) {
        r = leave(&r, &g);
        granted.extend(r.grants.iter().map(|g| g.id.clone()));
    }
    assert_eq!(granted, vec!["c", "d", "b", "e", "f"]);
}

#[test]
fn a_passed_over_waiter_counts_its_bypasses_and_the_record_requires_the_feature() {
    let mut r = join(&QueueRecord::new(0, None), x("holder", 0));
    r = join(&r, x("low", 0));
    assert!(r.requires.is_empty(), "no priority: nothing required");
    r = join(&r, x("high", 1));
    assert_eq!(r.requires, vec![PRIORITY_FEATURE.to_string()]);
    let bytes = String::from_utf8(r.to_bytes().to_vec()).unwrap();
    assert!(bytes.contains(r#""requires":["priority"]"#), "{bytes}");
    assert!(
        bytes.contains(r#"{"id":"high","ttl_ms":30000,"priority":1}"#),
        "{bytes}"
    );
    r = leave(&r, "holder");
    assert_eq!(ids(&r.grants), vec!["high"]);
    // Granted: its priority is dropped; the low one was passed over once.
    assert_eq!((r.grants[0].priority, r.grants[0].passed), (0, 0));
    assert_eq!(r.queue[0].passed, 1);
    let bytes = String::from_utf8(r.to_bytes().to_vec()).unwrap();
    assert!(
        bytes.contains(r#"{"id":"low","ttl_ms":30000,"passed":1}"#),
        "{bytes}"
    );
    assert_eq!(r.requires, vec![PRIORITY_FEATURE.to_string()]);
    // Still understood by this version (a known feature), and it round-trips.
    assert_eq!(classify(&r.to_bytes()), Classified::Queue(r.clone()));
    r = leave(&r, "high");
    // Granted: nothing uses the feature any more, so the record requires nothing.
    assert_eq!(ids(&r.grants), vec!["low"]);
    assert!(r.requires.is_empty());
    assert!(!String::from_utf8(r.to_bytes().to_vec())
        .unwrap()
        .contains("passed"));
}

#[test]
fn a_waiter_is_passed_over_at_most_max_bypass_times() {
    let mut r = join(&QueueRecord::new(0, None), x("h0", 9));
    r = join(&r, x("low", 0));
    let mut passes = 0;
    for n in 1..=MAX_BYPASS + 3 {
        // A stream: a high-priority waiter always waits when the holder leaves.
        r = join(&r, x(&format!("h{n}"), 9));
        let holder = r.grants[0].id.clone();
        r = leave(&r, &holder);
        if r.grants[0].id == "low" {
            break;
        }
        passes += 1;
        assert_eq!(r.find("low").unwrap().passed, passes);
    }
    assert_eq!(passes, MAX_BYPASS, "{r:?}");
    assert_eq!(ids(&r.grants), vec!["low"]);
    // The high one that waited when it went is next.
    assert_eq!(r.queue.len(), 1);
}

/// One write that grants several: the grant that makes a waiter due ends the settling pass,
/// and the next orders that waiter first, so the same write grants it before the other higher
/// priorities still waiting.
#[test]
fn a_waiter_made_due_within_one_write_goes_next_in_that_write() {
    let mut r = QueueRecord::new(0, Some(1));
    r = join(&r, with("holder", Mode::Shared, 0));
    r = join(&r, with("low", Mode::Shared, 0));
    for h in ["h1", "h2", "h3"] {
        r = join(&r, with(h, Mode::Shared, 1));
    }
    r.queue[0].passed = MAX_BYPASS - 1;
    // Two more permits: h1 goes and passes the low one to the bound; the low one is due, and
    // goes before h2.
    let r = r
        .apply(&Change::SetPermits(Some(3)), MAX, 0)
        .unwrap()
        .unwrap();
    assert_eq!(ids(&r.grants), vec!["holder", "h1", "low"]);
    assert_eq!(ids(&r.queue), vec!["h2", "h3"]);
}

#[test]
fn a_due_waiter_makes_earlier_competing_ones_of_its_priority_due_too() {
    // A (a reader) and B (a writer) have priority 0; B was passed over to the bound (by
    // readers that did not compete with A); C has priority 5.
    let mut r = QueueRecord::new(0, None);
    r.queue = vec![
        with("a", Mode::Shared, 0),
        Entry {
            passed: MAX_BYPASS,
            ..x("b", 0)
        },
        with("c", Mode::Shared, 5),
    ];
    // FIFO within priority 0 holds: A, then B, then C.
    assert_eq!(r.order(), vec![0, 1, 2]);
    // An earlier waiter of another priority is not made due: B, then C (5), then A (1).
    r.queue[0].priority = 1;
    assert_eq!(r.order(), vec![1, 2, 0]);
    // Neither does one that does not compete (two readers, no permits).
    r.queue[0].priority = 0;
    r.queue[1].mode = Mode::Shared;
    assert_eq!(r.order(), vec![1, 2, 0]);
}

#[test]
fn priorities_do_not_order_waiters_that_do_not_compete() {
    // Behind a writer of path a, readers of a with two priorities, and a writer of a disjoint
    // path.
    let a = || Scope::path("a").unwrap();
    let mut r = join(&QueueRecord::new(0, None), entry("w", Mode::Exclusive, a()));
    let reader = |id: &str, priority| Entry {
        priority,
        ..entry(id, Mode::Shared, a())
    };
    r = join(&r, reader("r1", 0));
    r = join(&r, reader("r2", 7));
    r = join(
        &r,
        Entry {
            priority: -5,
            ..entry("p", Mode::Exclusive, Scope::path("other").unwrap())
        },
    );
    assert_eq!(ids(&r.grants), vec!["w", "p"]);
    r = leave(&r, "w");
    assert_eq!(ids(&r.grants), vec!["p", "r2", "r1"]);
    // r2 was granted first but did not pass r1 over: both granted in the same write.
    assert!(r.queue.is_empty() && r.requires.is_empty());
    assert!(r.grants.iter().all(|g| g.passed == 0));
}

#[test]
fn a_semaphore_grants_by_priority_and_counts_a_pass_only_for_who_still_waits() {
    let mut r = QueueRecord::new(0, Some(2));
    for (id, p) in [("a", 0), ("b", 0), ("c", 0), ("d", 4), ("e", 4)] {
        r = join(&r, with(id, Mode::Shared, p));
    }
    assert_eq!(ids(&r.grants), vec!["a", "b"]);
    let set = |r: &QueueRecord, n| {
        r.apply(&Change::SetPermits(Some(n)), MAX, 0)
            .unwrap()
            .unwrap()
    };
    // Two more permits: d and e (priority 4) go, and c, still waiting, was passed over twice.
    let four = set(&r, 4);
    assert_eq!(ids(&four.grants), vec!["a", "b", "d", "e"]);
    assert_eq!((ids(&four.queue), four.queue[0].passed), (vec!["c"], 2));
    // Three more: all go in the one write, and nobody was passed over.
    let five = set(&r, 5);
    assert_eq!(ids(&five.grants), vec!["a", "b", "d", "e", "c"]);
    assert!(five.queue.is_empty() && five.requires.is_empty());
}

#[test]
fn the_reserve_counts_priorities_and_bypass_counts() {
    let plain = join(&QueueRecord::new(0, None), x("a", 0));
    let plain = join(&plain, x("b", 0));
    let prio = join(&QueueRecord::new(0, None), x("a", 0));
    let prio = join(&prio, x("b", 3));
    // Each entry may carry a bypass count, and the record its `requires`.
    let extra =
        r#","passed":8"#.len() * 2 + r#","requires":["priority"]"#.len() + ",\"priority\":3".len();
    assert_eq!(prio.reserved_len(), plain.reserved_len() + extra);
    // A join that leaves room only without the counts is refused.
    let max = plain.reserved_len();
    let one = join(&QueueRecord::new(0, None), x("a", 0));
    let err = one.apply(&Change::Join(x("b", 3)), max, 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QueueFull);
    assert!(one
        .apply(&Change::Join(x("b", 0)), max, 0)
        .unwrap()
        .is_some());
}

fn scope_of_n(n: u8) -> Scope {
    super::scope_of(n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever joins and leaves with whatever priorities: conflicting grants never coexist; a
    /// grant never passes a competing earlier waiter of its own priority; every waiter's
    /// `passed` is the number of later competing waiters granted while it waited, and never
    /// above the bound; nobody who may go by the settling order is left waiting; and no write
    /// that does not join makes the record larger than the reserve of the record it changed.
    #[test]
    fn priorities_keep_grants_safe_fifo_within_a_priority_and_bypasses_bounded(
        permits in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        ops in proptest::collection::vec(
            ((any::<bool>(), 0u8..9), -2i32..3, any::<bool>(), 0usize..8), 1..60),
    ) {
        let mut r = QueueRecord::new(1000, permits);
        let mut arrival = std::collections::HashMap::new();
        let mut ghost: std::collections::HashMap<String, u32> = Default::default();
        let mut priorities = std::collections::HashMap::new();
        for (n, ((exclusive, scope), priority, leaves, pick)) in ops.into_iter().enumerate() {
            let joins = !(leaves && !(r.grants.is_empty() && r.queue.is_empty()));
            let next = if !joins {
                let all: Vec<_> = r.grants.iter().chain(&r.queue).map(|e| e.id().to_string()).collect();
                leave(&r, &all[pick % all.len()])
            } else {
                let id = format!("p{n}");
                arrival.insert(id.clone(), n);
                priorities.insert(id.clone(), priority);
                let mode = if exclusive { Mode::Exclusive } else { Mode::Shared };
                join(&r, Entry { priority, ..entry(&id, mode, scope_of_n(scope)) })
            };
            if !joins {
                prop_assert!(next.to_bytes().len() <= r.reserved_len());
            }
            let new: Vec<&Entry> = next.newly_granted(Some(&r));
            for w in &next.queue {
                prop_assert_eq!(w.priority, priorities[w.id()]);
                for g in &new {
                    if arrival[g.id()] > arrival[w.id()] && next.competes(w, g) {
                        *ghost.entry(w.id().to_string()).or_default() += 1;
                        prop_assert!(priorities[g.id()] != w.priority,
                            "{:?} passed {:?} of its own priority", g, w);
                    }
                }
                let count = ghost.get(w.id()).copied().unwrap_or(0);
                prop_assert!(count <= MAX_BYPASS, "{:?} passed over {} times", w, count);
                prop_assert_eq!(w.passed, count);
            }
            r = next;
            no_conflicting_grants(&r)?;
            let order = r.order();
            for (k, &i) in order.iter().enumerate() {
                let w = &r.queue[i];
                let may_go = r.fits(w) && !order[..k].iter().any(|&e| r.competes(&r.queue[e], w));
                prop_assert!(!may_go, "{:?} could go but waits", w);
            }
            prop_assert_eq!(
                r.requires.is_empty(),
                !r.grants.iter().chain(&r.queue).any(|e| e.priority != 0 || e.passed != 0)
            );
        }
    }
}
