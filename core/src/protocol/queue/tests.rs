use proptest::prelude::*;

use super::*;

fn entry(id: &str, mode: Mode, scope: Scope) -> Entry {
    Entry {
        holder: Holder {
            id: id.into(),
            ..Holder::default()
        },
        mode,
        scope,
        ttl_ms: 30_000,
        token: None,
        since: None,
        data: None,
    }
}

fn join(r: &QueueRecord, e: Entry) -> QueueRecord {
    r.apply(&Change::Join(e)).unwrap().unwrap()
}

fn leave(r: &QueueRecord, id: &str) -> QueueRecord {
    r.apply(&Change::Leave(id.into())).unwrap().unwrap()
}

fn granted(r: &QueueRecord) -> Vec<&str> {
    r.grants.iter().map(Entry::id).collect()
}

fn waiting(r: &QueueRecord) -> Vec<&str> {
    r.queue.iter().map(Entry::id).collect()
}

#[test]
fn scopes_overlap_by_path_prefix_and_by_shared_bytes() {
    let p = |s| Scope::path(s).unwrap();
    assert!(p("a/b").overlaps(&p("a")));
    assert!(p("a").overlaps(&p("a/b/c")));
    assert!(p("a/b").overlaps(&p("a/b")));
    assert!(!p("a/b").overlaps(&p("a/bc")));
    assert!(!p("a").overlaps(&p("b")));
    assert!(Scope::Whole.overlaps(&p("x")));
    let r = |a, b| Scope::range(a, b).unwrap();
    assert!(r(0, 10).overlaps(&r(9, 20)));
    assert!(!r(0, 10).overlaps(&r(10, 20)), "the end is excluded");
    assert!(
        p("a").overlaps(&r(0, 1)),
        "mixed kinds are taken to overlap"
    );
    assert_eq!(p("/a/b/").to_string(), "path a/b");
    for bad in ["", "/", "a//b", "a/./b", "../a"] {
        assert!(Scope::path(bad).is_err(), "{bad:?} accepted");
    }
    assert!(Scope::range(5, 5).is_err());
    assert_eq!(Scope::parse_range("0..4096").unwrap(), r(0, 4096));
    assert!(Scope::parse_range("4096").is_err());
    assert!(Scope::parse_range("9..1").is_err());
}

#[test]
fn a_release_grants_the_next_waiter_in_the_same_write() {
    let r = QueueRecord::new(100, None);
    let r = join(&r, entry("a", Mode::Exclusive, Scope::Whole));
    assert_eq!(r.position("a"), Position::Granted { token: 101 });
    let r = join(&r, entry("b", Mode::Exclusive, Scope::Whole));
    let r = join(&r, entry("c", Mode::Exclusive, Scope::Whole));
    assert_eq!(waiting(&r), ["b", "c"]);
    let r = leave(&r, "a");
    assert_eq!(granted(&r), ["b"]);
    assert_eq!(r.position("b"), Position::Granted { token: 102 });
    assert_eq!(waiting(&r), ["c"]);
}

#[test]
fn readers_share_and_a_waiting_writer_stops_later_readers() {
    let r = QueueRecord::new(0, None);
    let r = join(&r, entry("r1", Mode::Shared, Scope::Whole));
    let r = join(&r, entry("r2", Mode::Shared, Scope::Whole));
    assert_eq!(granted(&r), ["r1", "r2"]);
    let r = join(&r, entry("w", Mode::Exclusive, Scope::Whole));
    let r = join(&r, entry("r3", Mode::Shared, Scope::Whole));
    // r3 would fit beside r1 and r2, but going ahead of w would starve it.
    assert_eq!(waiting(&r), ["w", "r3"]);
    let r = leave(&r, "r1");
    assert_eq!(waiting(&r), ["w", "r3"]);
    let r = leave(&r, "r2");
    assert_eq!(granted(&r), ["w"]);
    let r = leave(&r, "w");
    assert_eq!(granted(&r), ["r3"]);
}

#[test]
fn a_semaphore_grants_at_most_its_permits_in_arrival_order() {
    let mut r = QueueRecord::new(0, Some(3));
    for i in 0..5 {
        r = join(&r, entry(&format!("w{i}"), Mode::Shared, Scope::Whole));
    }
    assert_eq!(granted(&r), ["w0", "w1", "w2"]);
    assert_eq!(waiting(&r), ["w3", "w4"]);
    let r = leave(&r, "w1");
    assert_eq!(granted(&r), ["w0", "w2", "w3"]);
    assert!(r.check_permits("u", Some(3)).is_ok());
    assert!(r.check_permits("u", None).is_ok());
    assert!(r.check_permits("u", Some(4)).is_err());
    assert!(QueueRecord::new(0, None)
        .check_permits("u", Some(2))
        .is_err());
}

#[test]
fn disjoint_ranges_go_together_and_overlapping_ones_wait_in_order() {
    let r = QueueRecord::new(0, None);
    let range = |a, b| Scope::range(a, b).unwrap();
    let r = join(&r, entry("a", Mode::Exclusive, range(0, 100)));
    let r = join(&r, entry("b", Mode::Exclusive, range(100, 200)));
    let r = join(&r, entry("c", Mode::Exclusive, range(50, 150)));
    let r = join(&r, entry("d", Mode::Exclusive, range(300, 400)));
    // c overlaps both a and b; d overlaps nothing and goes ahead of c, which it cannot delay.
    assert_eq!(granted(&r), ["a", "b", "d"]);
    assert_eq!(waiting(&r), ["c"]);
    match r.position("c") {
        Position::Waiting { ahead, blockers } => {
            assert_eq!(ahead, 0);
            let ids: Vec<_> = blockers.iter().map(Entry::id).collect();
            assert_eq!(ids, ["a", "b"]);
        }
        p => panic!("{p:?}"),
    }
    let r = join(&r, entry("e", Mode::Exclusive, range(120, 130)));
    // e overlaps c, which is waiting, and b: behind c, it checks c (and c checks a and b).
    match r.position("e") {
        Position::Waiting { ahead, blockers } => {
            assert_eq!(ahead, 1);
            let ids: Vec<_> = blockers.iter().map(Entry::id).collect();
            assert_eq!(ids, ["c"]);
        }
        p => panic!("{p:?}"),
    }
    let r = leave(&r, "a");
    assert_eq!(waiting(&r), ["c", "e"]);
    let r = leave(&r, "b");
    assert_eq!(granted(&r), ["d", "c"]);
}

#[test]
fn joining_and_leaving_twice_change_nothing() {
    let r = QueueRecord::new(0, None);
    let r = join(&r, entry("a", Mode::Exclusive, Scope::Whole));
    assert_eq!(
        r.apply(&Change::Join(entry("a", Mode::Shared, Scope::Whole)))
            .unwrap(),
        None
    );
    let r = leave(&r, "a");
    assert_eq!(r.apply(&Change::Leave("a".into())).unwrap(), None);
}

#[test]
fn records_round_trip_and_other_formats_are_not_queue_records() {
    let r = QueueRecord::new(7, Some(2));
    let r = join(&r, entry("a", Mode::Shared, Scope::path("x/y").unwrap()));
    let r = join(&r, entry("b", Mode::Exclusive, Scope::range(0, 9).unwrap()));
    let bytes = r.to_bytes().unwrap();
    assert_eq!(QueueRecord::parse(&bytes), Some(Ok(r)));
    assert_eq!(QueueRecord::parse(br#"{"format":1,"epoch":3}"#), None);
    assert_eq!(QueueRecord::parse(b"garbage"), None);
    assert!(matches!(
        QueueRecord::parse(br#"{"format":2,"epoch":"x"}"#),
        Some(Err(_))
    ));
    let no_token = br#"{"format":2,"epoch":3,"rev":1,"grants":[{"holder":{"id":"a"},"mode":"shared","ttl_ms":5}]}"#;
    assert!(matches!(QueueRecord::parse(no_token), Some(Err(_))));
}

#[test]
fn a_full_queue_is_refused_with_a_clear_error() {
    let mut r = QueueRecord::new(0, None);
    for i in 0..MAX_PARTICIPANTS {
        r = join(
            &r,
            entry(&format!("{i:032}"), Mode::Exclusive, Scope::Whole),
        );
    }
    let e = r
        .apply(&Change::Join(entry("late", Mode::Exclusive, Scope::Whole)))
        .unwrap_err();
    assert!(e.to_string().contains("queue is full"), "{e}");
    assert!(r.to_bytes().is_ok(), "a full queue still fits in a record");
}

/// A request as the property tests draw it.
fn arb_request() -> impl Strategy<Value = (bool, u8)> {
    // (exclusive?, scope: 0 = whole, 1..=4 = paths a, a/b, a/c, b, 5..=8 = ranges)
    (any::<bool>(), 0u8..9)
}

fn scope_of(n: u8) -> Scope {
    match n {
        0 => Scope::Whole,
        1 => Scope::path("a").unwrap(),
        2 => Scope::path("a/b").unwrap(),
        3 => Scope::path("a/c").unwrap(),
        4 => Scope::path("b").unwrap(),
        5 => Scope::range(0, 10).unwrap(),
        6 => Scope::range(5, 15).unwrap(),
        7 => Scope::range(10, 20).unwrap(),
        _ => Scope::range(30, 40).unwrap(),
    }
}

/// Single points of the scopes [`scope_of`] draws: a leaf path in each path scope and one
/// byte at a time, so that "at most `permits` grants cover any point" can be counted.
fn probe_points() -> Vec<Scope> {
    let paths = ["a/b", "a/c", "a/z", "b"].map(|p| Scope::path(p).unwrap());
    let bytes = (0..40).map(|b| Scope::range(b, b + 1).unwrap());
    paths.into_iter().chain(bytes).collect()
}

/// Whether `scope` covers `point` (a path point is not in a byte range, nor the reverse).
fn covers(scope: &Scope, point: &Scope) -> bool {
    match (scope, point) {
        (Scope::Path(_), Scope::Range { .. }) | (Scope::Range { .. }, Scope::Path(_)) => false,
        _ => scope.overlaps(point),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever joins and leaves, in any order: conflicting grants never coexist, at most
    /// `permits` grants overlap one another's scope, tokens are unique and grow in grant order,
    /// no waiter was overtaken by a competing later arrival, and nobody who could go is left
    /// waiting (a settled record is what every write leaves behind).
    #[test]
    fn grants_are_safe_fifo_and_settled(
        permits in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        ops in proptest::collection::vec((arb_request(), any::<bool>(), 0usize..8), 1..40),
    ) {
        let mut r = QueueRecord::new(1000, permits);
        let mut arrival = std::collections::HashMap::new();
        let mut last_token = 1000;
        for (n, ((exclusive, scope), leaves, pick)) in ops.into_iter().enumerate() {
            let next = if leaves && !(r.grants.is_empty() && r.queue.is_empty()) {
                let all: Vec<_> = r.grants.iter().chain(&r.queue).map(|e| e.id().to_string()).collect();
                leave(&r, &all[pick % all.len()])
            } else {
                let id = format!("p{n}");
                arrival.insert(id.clone(), n);
                let mode = if exclusive { Mode::Exclusive } else { Mode::Shared };
                join(&r, entry(&id, mode, scope_of(scope)))
            };
            // Tokens: new grants get fresh, growing tokens; old grants keep theirs.
            for g in &next.grants {
                let t = g.token.unwrap();
                match r.grants.iter().find(|o| o.id() == g.id()) {
                    Some(old) => prop_assert_eq!(old.token, Some(t)),
                    None => { prop_assert!(t > last_token); last_token = t; }
                }
            }
            prop_assert_eq!(next.epoch, last_token);
            r = next;
            for (i, a) in r.grants.iter().enumerate() {
                for b in &r.grants[i + 1..] {
                    let conflict = a.scope.overlaps(&b.scope)
                        && (a.mode == Mode::Exclusive || b.mode == Mode::Exclusive);
                    prop_assert!(!conflict, "{:?} and {:?} granted together", a, b);
                }
            }
            if let Some(n) = r.permits {
                for point in probe_points() {
                    let covering = r.grants.iter().filter(|g| covers(&g.scope, &point)).count();
                    prop_assert!(covering <= n as usize, "{} grants cover {:?}", covering, point);
                }
            }
            for (i, w) in r.queue.iter().enumerate() {
                for g in &r.grants {
                    let overtook = arrival[g.id()] > arrival[w.id()] && r.competes(w, g);
                    prop_assert!(!overtook, "{:?} overtook waiting {:?}", g, w);
                }
                let may_go = r.fits(w) && !r.queue[..i].iter().any(|e| r.competes(e, w));
                prop_assert!(!may_go, "{:?} could go but waits", w);
            }
        }
    }
}
